/* SPDX-License-Identifier: MIT */
/* What the two benchmark programs share; see common.h. */
#include "common.h"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ time */

uint64_t bench_now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

double bench_ms_between(uint64_t t0, uint64_t t1) { return (double)(t1 - t0) / 1e6; }

double bench_ms_since(uint64_t t0) { return bench_ms_between(t0, bench_now_ns()); }

/* ------------------------------------------------------------------ messages */

static void vmessage(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
static void vmessage(const char *fmt, va_list ap) {
        fprintf(stderr, "%s: ", bench_prog);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
}

void bench_progress(const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vmessage(fmt, ap);
        va_end(ap);
}

void (*bench_die_hook)(void);

void bench_die(const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vmessage(fmt, ap);
        va_end(ap);
        if (bench_die_hook)
                bench_die_hook();
        exit(1);
}

static char notes[24][400];
static size_t n_notes;

void bench_note(const char *fmt, ...) {
        if (n_notes >= sizeof notes / sizeof notes[0])
                return;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(notes[n_notes++], sizeof notes[0], fmt, ap);
        va_end(ap);
        fprintf(stderr, "%s: note: %s\n", bench_prog, notes[n_notes - 1]);
}

void bench_notes_print(void) {
        if (n_notes) {
                printf("\n## Notes\n\n");
                for (size_t i = 0; i < n_notes; i++)
                        printf("- %s\n", notes[i]);
        }
}

unsigned bench_parse_uint(const char *s, const char *what) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(s, &end, 10);
        if (errno || end == s || *end || v > 100000000UL) {
                fprintf(stderr, "%s: bad %s: %s\n", bench_prog, what, s);
                exit(2);
        }
        return (unsigned)v;
}

const char *bench_verdict(bool have, bool ok) { return !have ? "not measured" : ok ? "**met**" : "**missed**"; }

/* ------------------------------------------------------------------ statistics */

void samples_add(Samples *s, double x) {
        if (s->n == s->cap) {
                size_t ncap = s->cap ? s->cap * 2 : 64;
                double *nv = realloc(s->v, ncap * sizeof *nv);
                if (!nv)
                        bench_die("out of memory");
                s->v = nv;
                s->cap = ncap;
        }
        s->v[s->n++] = x;
}

void samples_free(Samples *s) {
        free(s->v);
        *s = (Samples){ 0 };
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y ? 1 : 0;
}

static double pct(const double *sorted, size_t n, double p) {
        if (n == 0)
                return 0;
        double pos = p * (double)(n - 1);
        size_t lo = (size_t)pos;
        if (lo + 1 >= n)
                return sorted[n - 1];
        double f = pos - (double)lo;
        return sorted[lo] + (sorted[lo + 1] - sorted[lo]) * f;
}

Summary summarize(const Samples *s) {
        Summary r = { .n = s->n };
        if (s->n == 0)
                return r;
        double *c = malloc(s->n * sizeof *c);
        if (!c)
                bench_die("out of memory");
        memcpy(c, s->v, s->n * sizeof *c);
        qsort(c, s->n, sizeof *c, cmp_double);
        double sum = 0;
        for (size_t i = 0; i < s->n; i++)
                sum += c[i];
        r.p50 = pct(c, s->n, 0.50);
        r.p90 = pct(c, s->n, 0.90);
        r.p99 = pct(c, s->n, 0.99);
        r.mean = sum / (double)s->n;
        r.min = c[0];
        r.max = c[s->n - 1];
        free(c);
        return r;
}

/* ------------------------------------------------------------------ latency rows */

static Row rows[40];
static size_t n_rows;

/* Copies src into a Markdown table cell: '|' becomes "\\|" (code spans included). */
static void md_cell(char *dst, size_t size, const char *src) {
        size_t o = 0;
        for (; *src && o + 3 < size; src++) {
                if (*src == '|')
                        dst[o++] = '\\';
                dst[o++] = *src;
        }
        dst[o] = 0;
}

void row_add(const char *key, const char *name, const Summary *s, const char *fmt, ...) {
        if (n_rows >= sizeof rows / sizeof rows[0])
                return;
        Row *r = &rows[n_rows++];
        snprintf(r->key, sizeof r->key, "%s", key);
        md_cell(r->name, sizeof r->name, name);
        if (s && s->n) {
                r->s = *s;
                r->have = true;
        }
        char buf[sizeof r->note];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        md_cell(r->note, sizeof r->note, buf);
}

const Row *row_find(const char *key) {
        for (size_t i = 0; i < n_rows; i++)
                if (strcmp(rows[i].key, key) == 0 && rows[i].have)
                        return &rows[i];
        return NULL;
}

size_t row_count(void) { return n_rows; }

const Row *row_at(size_t i) { return i < n_rows ? &rows[i] : NULL; }

/* ------------------------------------------------------------------ the library's loop */

void loop_quiet(SbxContext *ctx, int quiet_ms) {
        for (int i = 0; i < 100000; i++)
                if (sbx_context_run_once(ctx, quiet_ms) <= 0)
                        return;
}

void rows_print(int decimals) {
        printf("| | Benchmark | N | p50 | p90 | p99 | max | mean | Notes |\n|---|---|---|---|---|---|---|---|---|\n");
        for (size_t i = 0; i < row_count(); i++) {
                const Row *r = row_at(i);
                if (!r->have)
                        printf("| %s | %s | – | – | – | – | – | – | %s |\n", r->key, r->name, r->note);
                else
                        printf("| %s | %s | %zu | %.*f | %.*f | %.*f | %.*f | %.*f | %s |\n", r->key, r->name, r->s.n,
                               decimals, r->s.p50, decimals, r->s.p90, decimals, r->s.p99, decimals, r->s.max,
                               decimals, r->s.mean, r->note);
        }
}

/* ------------------------------------------------------------------ a server of its own */

BenchServer bench_srv = { .pid = -1 };

static void sleep_10ms(void) {
        struct timespec ts = { 0, 10000000 };
        nanosleep(&ts, NULL);
}

void bench_server_log_dump(void) {
        FILE *f = bench_srv.log[0] ? fopen(bench_srv.log, "re") : NULL;
        if (!f)
                return;
        char line[512];
        fprintf(stderr, "%s: server log (%s):\n", bench_prog, bench_srv.log);
        while (fgets(line, sizeof line, f))
                fprintf(stderr, "  %s", line);
        fclose(f);
}

void bench_server_stop(void) {
        if (bench_srv.pid > 0) {
                int st;
                kill(bench_srv.pid, SIGTERM);
                for (int i = 0; i < 3000 && waitpid(bench_srv.pid, &st, WNOHANG) == 0; i++)
                        sleep_10ms();
                if (waitpid(bench_srv.pid, &st, WNOHANG) == 0) {
                        kill(bench_srv.pid, SIGKILL);
                        (void)waitpid(bench_srv.pid, &st, 0);
                }
                bench_srv.pid = -1;
        }
        if (bench_srv.dir[0]) {
                (void)unlink(bench_srv.sock);
                if (bench_srv.log[0])
                        (void)unlink(bench_srv.log);
                (void)rmdir(bench_srv.dir);
        }
        bench_srv.dir[0] = bench_srv.sock[0] = bench_srv.log[0] = 0;
}

int bench_server_connect(bool nonblock, unsigned timeout_s) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", bench_srv.sock);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        /* Blocking even for a non-blocking connection: with the listener's backlog full (many
         * clients at once) it waits for a place instead of failing with EAGAIN. */
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
                int e = errno;
                close(fd);
                return -e;
        }
        if (nonblock) {
                (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        } else {
                struct timeval tv = { .tv_sec = timeout_s };
                (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        }
        return fd;
}

void bench_server_start(const char *sbx, const char *name, const char *const *args, bool with_log,
                        void (*setup)(void)) {
        snprintf(bench_srv.dir, sizeof bench_srv.dir, "/tmp/%s.XXXXXX", name);
        if (!mkdtemp(bench_srv.dir)) {
                bench_srv.dir[0] = 0;
                bench_die("mkdtemp: %s", strerror(errno));
        }
        snprintf(bench_srv.sock, sizeof bench_srv.sock, "%s/sock", bench_srv.dir);
        int logfd = -1;
        if (with_log) {
                snprintf(bench_srv.log, sizeof bench_srv.log, "%s/server.log", bench_srv.dir);
                if ((logfd = open(bench_srv.log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
                        bench_die("%s: %s", bench_srv.log, strerror(errno));
        }
        const char *argv[32] = { "sbx", "serve", "--socket", bench_srv.sock };
        size_t n = 4;
        for (size_t i = 0; args && args[i]; i++)
                if (n + 1 < sizeof argv / sizeof argv[0])
                        argv[n++] = args[i];
        argv[n] = NULL;
        fflush(NULL);
        bench_srv.pid = fork();
        if (bench_srv.pid < 0)
                bench_die("fork: %s", strerror(errno));
        if (bench_srv.pid == 0) {
                /* The server (and with it every sandbox) goes when the benchmark dies. */
                (void)prctl(PR_SET_PDEATHSIG, SIGTERM);
                if (setup)
                        setup();
                int nul = open("/dev/null", O_RDWR);
                dup2(nul, 0);
                dup2(nul, 1);
                if (logfd >= 0)
                        dup2(logfd, 2);
                execv(sbx, (char *const *)argv);
                fprintf(stderr, "exec %s: %s\n", sbx, strerror(errno));
                _exit(127);
        }
        if (logfd >= 0)
                close(logfd);
        for (int i = 0; i < 1000; i++) {
                int st;
                if (waitpid(bench_srv.pid, &st, WNOHANG) == bench_srv.pid) {
                        bench_srv.pid = -1;
                        bench_server_log_dump();
                        bench_die("the server exited at start (status 0x%x)", st);
                }
                int fd = bench_server_connect(false, 1);
                if (fd >= 0) {
                        close(fd);
                        return;
                }
                sleep_10ms();
        }
        bench_server_log_dump();
        bench_die("%s serve did not listen on %s within 10 s", sbx, bench_srv.sock);
}

static void on_signal(int sig) {
        if (bench_srv.pid > 0)
                kill(bench_srv.pid, SIGTERM);
        signal(sig, SIG_DFL);
        raise(sig);
}

void bench_server_signals(void) {
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        signal(SIGHUP, on_signal);
}
