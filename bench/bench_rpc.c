/* SPDX-License-Identifier: MIT */
/* sbx-bench-rpc: what the daemon (`sbx serve --socket`, newline-delimited JSON-RPC 2.0 over a
 * Unix socket) adds on top of the library, and how it holds up under load.
 *
 * Benchmarks (select with --only, letters as in docs/BENCHMARKS.md):
 *   r  `run` of `echo hi` over the socket, request written -> response line read, idle session,
 *      interleaved with the same run through the C API (bench.c's "a") and with `ping`
 *   p  `ping` round trips while N sandboxes each run a CPU-bound loop, against an idle server
 *   c  N clients at once (one poll loop, one socket each): `create`, then M `echo $i` runs each,
 *      every output checked
 *   l  `ping` on a connection of its own while another sends 20 `sandbox.create` at once and forks
 *      16 of them as their answers come (the loop never waits for a sandbox or a copy job:
 *      what a ping can still meet is one clone of the daemon per create or fork), in rounds
 *   f  `files.write` of 1 MiB of random bytes (base64) to /home/user/bench.bin, then `files.read`
 *      of it: request written -> response line read, each; the bytes read back are decoded (a
 *      base64 decoder of this file's own, not the server's) and compared with those written.
 *      Also the same through the C API (sbx_file_write + sbx_file_read), for comparison
 *   s  `process.start` of `echo hi`, then `process.stream` of it from cursor 0: start request
 *      written -> first `process.output` with data read (its data, the exit and the final cursor
 *      checked); interleaved with `run` of `echo hi` in the same session
 *   o  a process writing 1 GiB of 'x' (`head -c N /dev/zero | tr '\0' x`, so JSON strings), then
 *      256 MiB of 0xFF bytes (base64), through `process.stream`: MB/s of payload received, every
 *      piece checked (cursors contiguous, content, total exact, what the log dropped), and the
 *      server's VmRSS before, during, after (and VmHWM, reset first). The process waits for a
 *      line on its stdin, so the stream is in place before its first byte; the generator alone
 *      (into /dev/null, in the same sandbox) is timed too
 *   k  `process.kill` (graceMs 0) of a tree of 200 TERM-ignoring `sleep 1000`s in a sandbox with
 *      limits {pids: 1024}, once `ready` was logged and pgrep in the sandbox counts all 200;
 *      then the same for one sleep
 *   z  `sandbox.pause` then `sandbox.resume` of a sandbox running `yes > /dev/null` (process.start):
 *      request written -> answer read, each (a pause is answered once cgroup.events says frozen)
 *
 * The benchmark starts its own server (`sbx serve --socket` in a fresh directory under /tmp)
 * and shuts it down with `kill` at the end. Responses are parsed minimally with strstr: the
 * server writes compact JSON (jansson, JSON_COMPACT), and a quote inside a string is always
 * escaped, so a raw `"key":` can only be a key. Progress goes to stderr, the Markdown report to
 * stdout. Times are CLOCK_MONOTONIC; percentiles interpolate linearly between ranks. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "common.h"
#include "sbx/sbx.h"

const char bench_prog[] = "sbx-bench-rpc";

/* ------------------------------------------------------------------ configuration */

typedef struct Config {
        const char *sbx;      /* the sbx binary */
        const char *only;
        unsigned warm_n;      /* r: interleaved iterations */
        unsigned warmup;      /* r: warm-up iterations */
        unsigned quiet_ms;    /* r: pause after each run so the session's next worker is ready */
        unsigned pings;       /* p: pings under load (and as many idle) */
        unsigned ping_gap_us; /* p: pause between pings */
        unsigned busy;        /* p: sandboxes running a CPU-bound loop */
        unsigned settle_ms;   /* p: wait after the loops have started */
        const char *busy_cmd; /* p */
        unsigned clients;     /* c */
        unsigned cmds;        /* c: commands per client */
        bool host_busy;       /* p: also the same loops as host processes, for comparison */
        unsigned load_reps;   /* p: series under load, each with fresh sandboxes */
        int pool;             /* the server's --pool (-1: its default) */
        const char *audit;    /* the server's --audit PATH (NULL: none), for r with the audit log on */
        int srv_nice;         /* the server's own autogroup at this nice value (setsid first) */
        bool srv_nice_set;
        unsigned loop_rounds; /* l: rounds of 20 creates and 16 forks */
        unsigned files_n;     /* f: write + read round trips */
        unsigned files_warmup; /* f */
        size_t file_bytes;    /* f: bytes per file */
        unsigned proc_n;      /* s: interleaved iterations */
        unsigned proc_warmup; /* s */
        uint64_t stream_bytes; /* o: bytes the ASCII process writes (0: skip) */
        uint64_t stream_bin_bytes; /* o: bytes the binary process writes (0: skip) */
        const char *stream_cmd; /* o: writes stream_bytes of 'x' instead of head | tr */
        unsigned kill_n;      /* k: kills of the tree */
        unsigned kill_tree;   /* k: sleeps in the tree */
        unsigned pause_n;     /* z: pause + resume cycles */
} Config;

static Config cfg = {
        .sbx = NULL, .only = "rfpclsokz", .warm_n = 400, .warmup = 20, .quiet_ms = 10, .pings = 1000,
        .ping_gap_us = 1000, .busy = 8, .settle_ms = 1000, .busy_cmd = "while :; do :; done",
        .clients = 64, .cmds = 100, .host_busy = true, .load_reps = 5,
        .pool = -1, .loop_rounds = 10, .files_n = 50, .files_warmup = 3, .file_bytes = 1024 * 1024,
        .proc_n = 300, .proc_warmup = 20, .stream_bytes = 1ULL << 30, .stream_bin_bytes = 256ULL << 20,
        .kill_n = 30, .kill_tree = 200, .pause_n = 200,
};

static bool want(char letter) { return strchr(cfg.only, letter) != NULL; }

static void sleep_us(unsigned us) {
        struct timespec ts = { .tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000 };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

/* ------------------------------------------------------------------ report data */

/* Results of c, kept for the report. */
static struct {
        bool have;
        unsigned clients, cmds, created, completed, errors;
        double create_wall_ms, cmd_wall_s, cmds_per_s, destroy_ms;
        Summary create_lat, lat_all, lat_steady, lat_first;
        double srv_cpu_s, cpu_busy, srv_run_s, srv_wait_s;
        char first_error[300];
} conc;

/* Results of p, kept for the report. */
static struct {
        double cpu_busy; /* fraction of all CPUs busy during the pings under load */
        char reps[200];  /* p99 of each series */
} load;

/* ------------------------------------------------------------------ /proc */

/* Busy and total jiffies of the whole machine (busy = all but idle and iowait). */
static void cpu_jiffies(uint64_t *busy, uint64_t *total) {
        unsigned long long v[10] = { 0 };
        FILE *f = fopen("/proc/stat", "re");
        *busy = *total = 0;
        if (!f)
                return;
        if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                   &v[5], &v[6], &v[7], &v[8], &v[9]) >= 8) {
                for (int i = 0; i < 8; i++)
                        *total += v[i];
                *busy = *total - v[3] - v[4];
        }
        fclose(f);
}

/* utime + stime of a process, in seconds. */
static double proc_cpu_s(pid_t pid) {
        char path[64], buf[1024];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        FILE *f = fopen(path, "re");
        if (!f)
                return 0;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        const char *p = strrchr(buf, ')');
        unsigned long long ut = 0, st = 0;
        /* After the comm: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
        if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
                return 0;
        return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* /proc/PID/schedstat: time on a CPU and time waiting on a run queue, in seconds. */
static void proc_schedstat(pid_t pid, double *run_s, double *wait_s) {
        char path[64];
        unsigned long long run = 0, wait = 0;
        snprintf(path, sizeof path, "/proc/%d/schedstat", (int)pid);
        FILE *f = fopen(path, "re");
        if (f) {
                if (fscanf(f, "%llu %llu", &run, &wait) != 2)
                        run = wait = 0;
                fclose(f);
        }
        *run_s = (double)run / 1e9;
        *wait_s = (double)wait / 1e9;
}

/* ------------------------------------------------------------------ the server */

/* bench_die's hook: the server's log, then the server and its directory go. */
static void on_die(void) {
        if (bench_srv.pid > 0)
                bench_server_log_dump();
        bench_server_stop();
}

static int sock_connect(bool nonblock) { return bench_server_connect(nonblock, 120); }

/* The directory of this executable + rel, when that file exists. */
static char *next_to_self(const char *rel) {
        static char buf[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
        if (n <= 0)
                return NULL;
        buf[n] = 0;
        char *slash = strrchr(buf, '/');
        if (!slash || (size_t)(slash - buf) + 1 + strlen(rel) + 1 > sizeof buf)
                return NULL;
        strcpy(slash + 1, rel);
        return access(buf, X_OK) == 0 ? buf : NULL;
}

/* In the server's child before exec: a session of its own is an autogroup of its own
 * (sched(7)); its nice value weighs the server against the sandboxes, which are each their
 * own autogroup (sbx-init calls setsid) and start at nice 0. */
static void server_nice(void) {
        if (!cfg.srv_nice_set)
                return;
        char v[16];
        int fd;
        setsid();
        snprintf(v, sizeof v, "%d", cfg.srv_nice);
        if ((fd = open("/proc/self/autogroup", O_WRONLY | O_CLOEXEC)) < 0 || write(fd, v, strlen(v)) < 0)
                fprintf(stderr, "sbx-bench-rpc: /proc/self/autogroup: %s\n", strerror(errno));
        if (fd >= 0)
                close(fd);
}

static void server_start(void) {
        char pool[16];
        const char *args[8];
        int n = 0;
        snprintf(pool, sizeof pool, "%d", cfg.pool);
        if (cfg.pool >= 0) {
                args[n++] = "--pool";
                args[n++] = pool;
        }
        if (cfg.audit) {
                args[n++] = "--audit";
                args[n++] = cfg.audit;
        }
        args[n] = NULL;
        bench_server_start(cfg.sbx, "sbx-bench-rpc", args, true, server_nice);
        bench_progress("server %s (pid %d) listening on %s", cfg.sbx, (int)bench_srv.pid, bench_srv.sock);
}

/* ------------------------------------------------------------------ a client connection */

typedef struct Conn {
        int fd;
        char *buf;
        size_t start, len, cap; /* unread data is buf[start, len) */
        long next_id;
} Conn;

static void conn_open(Conn *c, bool nonblock) {
        *c = (Conn){ .next_id = 1 };
        c->fd = sock_connect(nonblock);
        if (c->fd < 0)
                bench_die("connect %s: %s", bench_srv.sock, strerror(-c->fd));
}

static void conn_close(Conn *c) {
        if (c->fd >= 0)
                close(c->fd);
        free(c->buf);
        *c = (Conn){ .fd = -1 };
}

/* Writes all of it; on a non-blocking socket, waits for room with poll. */
static int conn_write(Conn *c, const char *d, size_t n) {
        while (n > 0) {
                ssize_t k = write(c->fd, d, n);
                if (k > 0) {
                        d += k;
                        n -= (size_t)k;
                        continue;
                }
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0 && errno == EAGAIN) {
                        struct pollfd p = { .fd = c->fd, .events = POLLOUT };
                        (void)poll(&p, 1, 1000);
                        continue;
                }
                return k < 0 ? -errno : -EPIPE;
        }
        return 0;
}

/* One read(): >0 bytes read, 0 at EOF, -errno (-EAGAIN on an empty non-blocking socket). */
static ssize_t conn_fill(Conn *c) {
        if (c->start > 0) {
                memmove(c->buf, c->buf + c->start, c->len - c->start);
                c->len -= c->start;
                c->start = 0;
        }
        if (c->cap - c->len < 4096) {
                size_t ncap = c->cap ? c->cap * 2 : 65536;
                char *nb = realloc(c->buf, ncap);
                if (!nb)
                        bench_die("out of memory");
                c->buf = nb;
                c->cap = ncap;
        }
        for (;;) {
                ssize_t k = read(c->fd, c->buf + c->len, c->cap - c->len - 1);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return -errno;
                c->len += (size_t)k;
                return k;
        }
}

/* The next complete line (NUL-terminated, without '\n'), or NULL. Valid until the next fill. */
static char *conn_take_line(Conn *c) {
        if (c->start >= c->len)
                return NULL;
        char *s = c->buf + c->start;
        char *nl = memchr(s, '\n', c->len - c->start);
        if (!nl)
                return NULL;
        *nl = 0;
        c->start = (size_t)(nl - c->buf) + 1;
        return s;
}

/* Blocking: the next line, or NULL at EOF or error. */
static char *conn_read_line(Conn *c) {
        for (;;) {
                char *l = conn_take_line(c);
                if (l)
                        return l;
                if (conn_fill(c) <= 0)
                        return NULL;
        }
}

/* Sends {"jsonrpc":"2.0","id":N,"method":M,"params":P}; params_json may be NULL. Returns N,
 * or -errno when the write fails. */
static long rpc_send_try(Conn *c, const char *method, const char *params_json) {
        char line[1024];
        long id = c->next_id++;
        int n = snprintf(line, sizeof line, "{\"jsonrpc\":\"2.0\",\"id\":%ld,\"method\":\"%s\"%s%s}\n", id, method,
                         params_json ? ",\"params\":" : "", params_json ? params_json : "");
        if (n < 0 || (size_t)n >= sizeof line)
                bench_die("request too long");
        int r = conn_write(c, line, (size_t)n);
        return r < 0 ? r : id;
}

static long rpc_send(Conn *c, const char *method, const char *params_json) {
        long id = rpc_send_try(c, method, params_json);
        if (id < 0)
                bench_die("write to the server: %s", strerror((int)-id));
        return id;
}

/* The id of a response line, or -1 (a notification, or an id we did not send). */
static long resp_id(const char *line) {
        const char *p = strstr(line, "\"id\":");
        if (!p)
                return -1;
        char *end;
        long v = strtol(p + 5, &end, 10);
        return end == p + 5 ? -1 : v;
}

/* Blocking: reads lines until the response to id (other lines are skipped). */
static char *rpc_wait(Conn *c, long id) {
        for (;;) {
                char *l = conn_read_line(c);
                if (!l || resp_id(l) == id)
                        return l;
        }
}

static char *rpc_call(Conn *c, const char *method, const char *params_json) {
        long id = rpc_send(c, method, params_json);
        char *l = rpc_wait(c, id);
        if (!l)
                bench_die("no answer to %s: the connection closed", method);
        return l;
}

static bool resp_is_error(const char *line) { return strstr(line, "\"error\":{") != NULL; }

static bool json_int(const char *line, const char *key, long *ret) {
        char pat[64];
        snprintf(pat, sizeof pat, "\"%s\":", key);
        const char *p = strstr(line, pat);
        if (!p)
                return false;
        p += strlen(pat);
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p)
                return false;
        *ret = v;
        return true;
}

/* The raw (still escaped) string value of key, copied into buf. */
static bool json_str(const char *line, const char *key, char *buf, size_t size) {
        char pat[64];
        snprintf(pat, sizeof pat, "\"%s\":\"", key);
        const char *p = strstr(line, pat);
        if (!p)
                return false;
        p += strlen(pat);
        size_t o = 0;
        for (; *p && *p != '"' && o + 2 < size; p++) {
                if (*p == '\\' && p[1])
                        buf[o++] = *p++;
                buf[o++] = *p;
        }
        buf[o] = 0;
        return true;
}

/* exitCode 0, stdout exactly `want` (raw JSON, e.g. "hi\\n"), stderr empty, no errorClass. */
static bool run_ok(const char *line, const char *want_raw) {
        long ec;
        char out[128];
        if (resp_is_error(line) || !json_int(line, "exitCode", &ec) || ec != 0 || strstr(line, "\"errorClass\":"))
                return false;
        if (!json_str(line, "stdout", out, sizeof out) || strcmp(out, want_raw) != 0)
                return false;
        return strstr(line, "\"stderr\":\"\"") != NULL;
}

static void describe(char *dst, size_t size, const char *line) {
        snprintf(dst, size, "%.240s", line ? line : "(connection closed)");
}

/* health's "sandboxes" or "running". */
static long health_field(Conn *c, const char *key) {
        char *l = rpc_call(c, "health", NULL);
        long v = -1;
        if (!json_int(l, key, &v))
                bench_die("health without %s: %.200s", key, l);
        return v;
}

/* Waits until the server has destroyed every sandbox of the connections closed before. */
static double wait_no_sandboxes(Conn *c, unsigned timeout_ms) {
        uint64_t t0 = bench_now_ns();
        while (health_field(c, "sandboxes") != 0) {
                if (bench_ms_between(t0, bench_now_ns()) > timeout_ms) {
                        bench_note("the server still had sandboxes %u ms after their connections closed", timeout_ms);
                        break;
                }
                sleep_us(1000);
        }
        return bench_ms_between(t0, bench_now_ns());
}

/* ------------------------------------------------------------------ the C API side (r) */

typedef struct Run {
        bool done, said_hi;
        int exit_code;
        uint64_t t_done;
} Run;

static void capi_done(void *ud, const SbxResult *res) {
        Run *r = ud;
        r->t_done = bench_now_ns();
        r->done = true;
        r->exit_code = res->exit_code;
        r->said_hi = res->exit_code == 0 && res->error_class == SBX_ERROR_NONE && res->stdout_len == 3 &&
                     memcmp(res->stdout_data, "hi\n", 3) == 0 && res->stderr_len == 0;
}

/* As bench.c: submit -> done callback, in ms; < 0 on failure. */
static double capi_run(SbxContext *ctx, SbxSession *s) {
        Run r = { 0 };
        SbxRunOptions o = { .command = "echo hi", .command_len = 7 };
        uint64_t t0 = bench_now_ns();
        if (sbx_session_run(s, &o, NULL, capi_done, &r, NULL) < 0)
                return -1;
        while (!r.done)
                if (sbx_context_run_once(ctx, -1) < 0)
                        return -1;
        return r.said_hi ? bench_ms_between(t0, r.t_done) : -1;
}

/* ------------------------------------------------------------------ r */

/* One `run` of `echo hi` over the socket: request written -> response line read, in ms. */
static double rpc_run_hi(Conn *c) {
        uint64_t t0 = bench_now_ns();
        long id = rpc_send(c, "run", "{\"command\":\"echo hi\"}");
        char *l = rpc_wait(c, id);
        uint64_t t1 = bench_now_ns();
        return l && run_ok(l, "hi\\n") ? bench_ms_between(t0, t1) : -1;
}

static double rpc_ping(Conn *c) {
        uint64_t t0 = bench_now_ns();
        long id = rpc_send(c, "ping", NULL);
        char *l = rpc_wait(c, id);
        uint64_t t1 = bench_now_ns();
        return l && strstr(l, "\"result\":{\"pong\":true}") ? bench_ms_between(t0, t1) : -1;
}

static void bench_roundtrip(Conn *ctl) {
        SbxContext *ctx = NULL;
        int k = sbx_context_new(&ctx);
        if (k < 0)
                bench_die("sbx_context_new: %s", strerror(-k));
        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so);
        SbxSandbox *sb = NULL;
        SbxSession *s = NULL;
        if (sbx_sandbox_new(ctx, &so, &sb) < 0)
                bench_die("sbx_sandbox_new: %s", sbx_context_last_error(ctx));
        if ((k = sbx_session_get(sb, NULL, &s)) < 0)
                bench_die("sbx_session_get: %s", strerror(-k));

        Conn c;
        conn_open(&c, false);
        char *l = rpc_call(&c, "create", NULL);
        if (resp_is_error(l) || !strstr(l, "\"sandboxId\":"))
                bench_die("create: %.200s", l);

        bench_progress("r: %u warm-up iterations", cfg.warmup);
        for (unsigned i = 0; i < cfg.warmup; i++) {
                (void)rpc_run_hi(&c);
                sleep_us(cfg.quiet_ms * 1000);
                (void)capi_run(ctx, s);
                loop_quiet(ctx, (int)cfg.quiet_ms);
                (void)rpc_ping(&c);
        }

        Samples srpc = { 0 }, scapi = { 0 }, sping = { 0 }, sb2b = { 0 };
        unsigned bad_rpc = 0, bad_capi = 0, bad_ping = 0, bad_b2b = 0;
        bench_progress("r: %u interleaved iterations (rpc run, C API run, rpc ping)", cfg.warm_n);
        double cpu_rpc = 0, cpu_capi = 0;
        for (unsigned i = 0; i < cfg.warm_n; i++) {
                for (unsigned j = 0; j < 3; j++) {
                        double ms;
                        double r0, w0, r1, w1;
                        switch ((i + j) % 3) {
                        case 0:
                                proc_schedstat(bench_srv.pid, &r0, &w0);
                                ms = rpc_run_hi(&c);
                                if (ms < 0)
                                        bad_rpc++;
                                else
                                        samples_add(&srpc, ms);
                                /* The server turns its own loop: the next worker gets ready while we sleep. */
                                sleep_us(cfg.quiet_ms * 1000);
                                proc_schedstat(bench_srv.pid, &r1, &w1);
                                cpu_rpc += r1 - r0;
                                break;
                        case 1:
                                proc_schedstat(getpid(), &r0, &w0);
                                ms = capi_run(ctx, s);
                                if (ms < 0)
                                        bad_capi++;
                                else
                                        samples_add(&scapi, ms);
                                loop_quiet(ctx, (int)cfg.quiet_ms);
                                proc_schedstat(getpid(), &r1, &w1);
                                cpu_capi += r1 - r0;
                                break;
                        default:
                                ms = rpc_ping(&c);
                                if (ms < 0)
                                        bad_ping++;
                                else
                                        samples_add(&sping, ms);
                                break;
                        }
                }
        }
        bench_progress("r: %u back-to-back rpc runs", cfg.warm_n);
        for (unsigned i = 0; i < cfg.warm_n; i++) {
                double ms = rpc_run_hi(&c);
                if (ms < 0)
                        bad_b2b++;
                else
                        samples_add(&sb2b, ms);
        }
        Summary xr = summarize(&srpc), xc = summarize(&scapi), xp = summarize(&sping), xb = summarize(&sb2b);
        row_add("r_rpc", "`run` `echo hi` over the socket, idle session (request written → response line read)", &xr,
                "interleaved with r_capi and r_ping; the server process on a CPU %.0f µs per run, next worker "
                "included (/proc/PID/schedstat); %u failed%s",
                cfg.warm_n ? 1e6 * cpu_rpc / cfg.warm_n : 0, bad_rpc, cfg.audit ? "; audit log on (--audit)" : "");
        row_add("r_capi", "the same through the C API (bench.c's a: submit → done callback)", &xc,
                "interleaved; this process on a CPU %.0f µs per run, next worker included; %u failed",
                cfg.warm_n ? 1e6 * cpu_capi / cfg.warm_n : 0, bad_capi);
        row_add("r_ping", "`ping` over the socket, idle server", &xp, "interleaved; %u failed", bad_ping);
        row_add("r_b2b", "`run` `echo hi` over the socket, back-to-back", &xb,
                "next request sent as soon as the answer is in (waits for the next worker); %u failed", bad_b2b);
        samples_free(&srpc);
        samples_free(&scapi);
        samples_free(&sping);
        samples_free(&sb2b);
        conn_close(&c);
        sbx_sandbox_free(sb);
        sbx_context_free(ctx);
        (void)wait_no_sandboxes(ctl, 10000);
}

/* ------------------------------------------------------------------ f */

/* Base64 (RFC 4648, with padding) of this program's own, so that the check does not trust
 * the server's codec. */
static const char b64_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Appends the encoding of d[0, n) at out (4 * ceil(n / 3) bytes, no NUL); returns its length. */
static size_t b64_put(char *out, const uint8_t *d, size_t n) {
        size_t o = 0, i = 0;
        for (; i + 3 <= n; i += 3) {
                uint32_t v = (uint32_t)d[i] << 16 | (uint32_t)d[i + 1] << 8 | d[i + 2];
                out[o++] = b64_chars[v >> 18];
                out[o++] = b64_chars[(v >> 12) & 63];
                out[o++] = b64_chars[(v >> 6) & 63];
                out[o++] = b64_chars[v & 63];
        }
        if (i < n) {
                uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0);
                out[o++] = b64_chars[v >> 18];
                out[o++] = b64_chars[(v >> 12) & 63];
                out[o++] = i + 1 < n ? b64_chars[(v >> 6) & 63] : '=';
                out[o++] = '=';
        }
        return o;
}

/* Decodes the JSON string value that starts at s (just after its opening quote) into out
 * (room for cap bytes), up to the closing quote. A backslash (a JSON-escaped '/') is skipped.
 * Returns the decoded length, or -1 on a character outside the alphabet or past cap. */
static long b64_get(const char *s, uint8_t *out, size_t cap) {
        static int8_t val[256];
        if (!val['B']) {
                memset(val, -1, sizeof val);
                for (int i = 0; i < 64; i++)
                        val[(unsigned char)b64_chars[i]] = (int8_t)i;
        }
        uint32_t acc = 0;
        unsigned bits = 0;
        size_t o = 0;
        for (; *s && *s != '"'; s++) {
                if (*s == '\\' || *s == '=')
                        continue;
                int v = val[(unsigned char)*s];
                if (v < 0)
                        return -1;
                acc = acc << 6 | (uint32_t)v;
                bits += 6;
                if (bits >= 8) {
                        bits -= 8;
                        if (o >= cap)
                                return -1;
                        out[o++] = (uint8_t)(acc >> bits);
                        acc &= (1u << bits) - 1;
                }
        }
        return *s == '"' ? (long)o : -1;
}

static void fill_random(uint8_t *d, size_t n) {
        while (n > 0) {
                ssize_t k = getrandom(d, n, 0);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        bench_die("getrandom: %s", strerror(errno));
                d += k;
                n -= (size_t)k;
        }
}

static void bench_files(Conn *ctl) {
        static const char path[] = "/home/user/bench.bin";
        size_t n = cfg.file_bytes;
        size_t b64_len = 4 * ((n + 2) / 3);
        uint8_t *data = malloc(n), *back = malloc(n + 16);
        char *req = malloc(b64_len + 256);
        if (!data || !back || !req)
                bench_die("out of memory");

        Conn c;
        conn_open(&c, false);
        char *l = rpc_call(&c, "create", NULL);
        if (resp_is_error(l) || !strstr(l, "\"sandboxId\":"))
                bench_die("create: %.200s", l);

        Samples both = { 0 }, sw = { 0 }, sr = { 0 };
        unsigned bad_write = 0, bad_read = 0, mismatch = 0;
        char first_bad[300] = "";
        bench_progress("f: %u × files.write + files.read of %zu bytes (+%u warm-up)", cfg.files_n, n, cfg.files_warmup);
        for (unsigned i = 0; i < cfg.files_warmup + cfg.files_n; i++) {
                /* Fresh bytes every time, encoded before the clock starts. */
                fill_random(data, n);
                long id = c.next_id++;
                int h = snprintf(req, 256, "{\"jsonrpc\":\"2.0\",\"id\":%ld,\"method\":\"files.write\",\"params\":"
                                 "{\"path\":\"%s\",\"data\":\"", id, path);
                size_t len = (size_t)h + b64_put(req + h, data, n);
                memcpy(req + len, "\"}}\n", 4);
                len += 4;

                uint64_t t0 = bench_now_ns();
                int wr = conn_write(&c, req, len);
                if (wr < 0)
                        bench_die("write to the server: %s", strerror(-wr));
                l = rpc_wait(&c, id);
                uint64_t t1 = bench_now_ns();
                if (!l)
                        bench_die("no answer to files.write: the connection closed");
                if (resp_is_error(l) || !strstr(l, "\"result\":{\"ok\":true}")) {
                        if (bad_write++ == 0)
                                describe(first_bad, sizeof first_bad, l);
                        continue;
                }
                char params[128];
                snprintf(params, sizeof params, "{\"path\":\"%s\"}", path);
                long rid = rpc_send(&c, "files.read", params);
                l = rpc_wait(&c, rid);
                uint64_t t2 = bench_now_ns();
                if (!l)
                        bench_die("no answer to files.read: the connection closed");
                long size = -1;
                const char *d = strstr(l, "\"data\":\"");
                if (resp_is_error(l) || !d || !json_int(l, "size", &size)) {
                        if (bad_read++ == 0)
                                describe(first_bad, sizeof first_bad, l);
                        continue;
                }
                long got = b64_get(d + 8, back, n + 16);
                if (size != (long)n || got != (long)n || memcmp(back, data, n) != 0) {
                        if (mismatch++ == 0)
                                snprintf(first_bad, sizeof first_bad, "read back %ld bytes (size %ld), %s", got, size,
                                         got == (long)n ? "contents differ" : "length differs");
                        continue;
                }
                if (i >= cfg.files_warmup) {
                        samples_add(&both, bench_ms_between(t0, t2));
                        samples_add(&sw, bench_ms_between(t0, t1));
                        samples_add(&sr, bench_ms_between(t1, t2));
                }
        }
        conn_close(&c);
        (void)wait_no_sandboxes(ctl, 10000);

        /* For comparison, the file operations alone: the C API in this process, no JSON, no
         * base64, no socket. */
        Samples capi = { 0 };
        unsigned bad_capi = 0;
        SbxContext *ctx = NULL;
        SbxSandbox *sb = NULL;
        int k = sbx_context_new(&ctx);
        if (k < 0)
                bench_die("sbx_context_new: %s", strerror(-k));
        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so);
        if (sbx_sandbox_new(ctx, &so, &sb) < 0)
                bench_die("sbx_sandbox_new: %s", sbx_context_last_error(ctx));
        /* The files API answers -EAGAIN until the root is built: turn the loop until then. */
        uint64_t deadline = bench_now_ns() + 10000000000ULL;
        while (!sbx_sandbox_ready(sb) && bench_now_ns() < deadline)
                (void)sbx_context_run_once(ctx, 10);
        for (unsigned i = 0; i < cfg.files_warmup + cfg.files_n; i++) {
                fill_random(data, n);
                uint8_t *rd = NULL;
                size_t rlen = 0;
                uint64_t rsize = 0;
                uint64_t t0 = bench_now_ns();
                k = sbx_file_write(sb, path, data, n, -1, false);
                if (k >= 0)
                        k = sbx_file_read(sb, path, 0, 0, &rd, &rlen, &rsize);
                uint64_t t1 = bench_now_ns();
                if (k < 0 || rlen != n || rsize != n || memcmp(rd, data, n) != 0)
                        bad_capi++;
                else if (i >= cfg.files_warmup)
                        samples_add(&capi, bench_ms_between(t0, t1));
                free(rd);
        }
        sbx_sandbox_free(sb);
        sbx_context_free(ctx);

        Summary xb = summarize(&both), xw = summarize(&sw), xr = summarize(&sr), xc = summarize(&capi);
        if (first_bad[0])
                bench_note("f: first failure: %s", first_bad);
        row_add("f_rw", "`files.write` + `files.read` of 1 MiB over the socket (write request written → read response read)",
                &xb, "random bytes, base64; read back decoded and compared: %u write errors, %u read errors, %u mismatches",
                bad_write, bad_read, mismatch);
        row_add("f_write", "  of which `files.write` (request written → response read)", &xw, "request line %zu bytes",
                b64_len + 100);
        row_add("f_read", "  of which `files.read` (request written → response line read)", &xr, "%s", "");
        row_add("f_capi", "the same through the C API: sbx_file_write + sbx_file_read (no JSON, base64, socket)", &xc,
                "compared each time; %u failed", bad_capi);
        samples_free(&both);
        samples_free(&sw);
        samples_free(&sr);
        samples_free(&capi);
        free(data);
        free(back);
        free(req);
}

/* ------------------------------------------------------------------ p */

/* The slowest pings of a series and where in it they came (the first pings after a pause
 * are the slow ones). */
typedef struct Slowest {
        double ms[3];
        unsigned idx[3];
} Slowest;

static void ping_series(Conn *c, unsigned n, Samples *out, unsigned *bad, Slowest *sl) {
        if (sl)
                *sl = (Slowest){ 0 };
        for (unsigned i = 0; i < n; i++) {
                double ms = rpc_ping(c);
                if (ms < 0)
                        (*bad)++;
                else
                        samples_add(out, ms);
                for (int k = 0; sl && k < 3; k++)
                        if (ms > sl->ms[k]) {
                                for (int j = 2; j > k; j--) {
                                        sl->ms[j] = sl->ms[j - 1];
                                        sl->idx[j] = sl->idx[j - 1];
                                }
                                sl->ms[k] = ms;
                                sl->idx[k] = i + 1;
                                break;
                        }
                if (cfg.ping_gap_us)
                        sleep_us(cfg.ping_gap_us);
        }
}

static void slowest_str(char *dst, size_t size, const Slowest *sl) {
        snprintf(dst, size, "slowest: #%u %.1f ms, #%u %.1f ms, #%u %.1f ms", sl->idx[0], sl->ms[0], sl->idx[1],
                 sl->ms[1], sl->idx[2], sl->ms[2]);
}

static void json_escape(char *dst, size_t size, const char *src) {
        size_t o = 0;
        for (; *src && o + 7 < size; src++) {
                unsigned char ch = (unsigned char)*src;
                if (ch == '"' || ch == '\\') {
                        dst[o++] = '\\';
                        dst[o++] = (char)ch;
                } else if (ch < 0x20) {
                        o += (size_t)snprintf(dst + o, size - o, "\\u%04x", ch);
                } else {
                        dst[o++] = (char)ch;
                }
        }
        dst[o] = 0;
}

/* One series under load: `busy` sandboxes (one connection: its root + sandbox.create), each
 * running the CPU-bound command with a long timeout; pings once all run and settle_ms passed;
 * then every run cancelled (exit 125 expected) and the sandboxes destroyed. */
static void load_series(Conn *ctl, Conn *pc, unsigned rep, Samples *out, unsigned *bad, Slowest *sl, double *cpu_busy) {
        bench_progress("p: series %u/%u: starting `%s` in %u sandboxes", rep + 1, cfg.load_reps, cfg.busy_cmd, cfg.busy);
        Conn lc;
        conn_open(&lc, false);
        char (*ids)[40] = calloc(cfg.busy ? cfg.busy : 1, sizeof *ids);
        long *run_ids = calloc(cfg.busy ? cfg.busy : 1, sizeof *run_ids);
        if (!ids || !run_ids)
                bench_die("out of memory");
        for (unsigned i = 0; i < cfg.busy; i++) {
                char *l = rpc_call(&lc, i == 0 ? "create" : "sandbox.create", NULL);
                if (resp_is_error(l) || !json_str(l, "sandboxId", ids[i], sizeof ids[i]))
                        bench_die("%s: %.200s", i == 0 ? "create" : "sandbox.create", l);
        }
        char esc[256], params[512];
        json_escape(esc, sizeof esc, cfg.busy_cmd);
        for (unsigned i = 0; i < cfg.busy; i++) {
                snprintf(params, sizeof params, "{\"sandboxId\":\"%s\",\"command\":\"%s\",\"timeoutMs\":600000}", ids[i], esc);
                run_ids[i] = rpc_send(&lc, "run", params);
        }
        uint64_t t0 = bench_now_ns();
        long running = 0;
        while ((running = health_field(pc, "running")) < (long)cfg.busy) {
                if (bench_ms_between(t0, bench_now_ns()) > 20000)
                        bench_die("only %ld of %u busy runs started within 20 s", running, cfg.busy);
                sleep_us(10000);
        }
        sleep_us(cfg.settle_ms * 1000);

        bench_progress("p: series %u/%u: %u pings with %u CPU-bound runs going", rep + 1, cfg.load_reps, cfg.pings, cfg.busy);
        uint64_t b0, tot0, b1, tot1;
        cpu_jiffies(&b0, &tot0);
        ping_series(pc, cfg.pings, out, bad, sl);
        cpu_jiffies(&b1, &tot1);
        *cpu_busy = tot1 > tot0 ? (double)(b1 - b0) / (double)(tot1 - tot0) : 0;
        unsigned still = (unsigned)health_field(pc, "running");
        if (still != cfg.busy)
                bench_note("p: series %u: only %u of %u busy runs were still running after the pings", rep + 1, still, cfg.busy);

        /* Stop the loops: cancel each run, expect exit 125. */
        unsigned cancelled = 0;
        for (unsigned i = 0; i < cfg.busy; i++) {
                snprintf(params, sizeof params, "{\"requestId\":%ld}", run_ids[i]);
                (void)rpc_send(&lc, "cancel", params);
        }
        for (unsigned answered = 0; answered < cfg.busy;) {
                char *l = conn_read_line(&lc);
                if (!l)
                        bench_die("the load connection closed before the busy runs answered");
                long id = resp_id(l), ec;
                for (unsigned i = 0; i < cfg.busy; i++)
                        if (id == run_ids[i]) {
                                answered++;
                                if (json_int(l, "exitCode", &ec) && ec == 125)
                                        cancelled++;
                        }
        }
        if (cancelled != cfg.busy)
                bench_note("p: series %u: %u of %u busy runs answered exit 125 after cancel", rep + 1, cancelled, cfg.busy);
        conn_close(&lc);
        (void)wait_no_sandboxes(ctl, 10000);
        free(ids);
        free(run_ids);
}

static void bench_ping_load(Conn *ctl) {
        Conn pc;
        conn_open(&pc, false);
        Samples idle = { 0 };
        unsigned bad_idle = 0;

        bench_progress("p: %u pings, idle server (gap %u µs)", cfg.pings, cfg.ping_gap_us);
        Slowest sl_idle, sl_host;
        ping_series(&pc, cfg.pings / 10, &idle, &bad_idle, NULL); /* warm-up */
        samples_free(&idle);
        bad_idle = 0;
        ping_series(&pc, cfg.pings, &idle, &bad_idle, &sl_idle);

        Samples pooled = { 0 };
        Slowest sl_busy = { 0 };
        char reps_txt[200] = "";
        size_t reps_len = 0;
        unsigned bad_busy = 0;
        double busy_sum = 0;
        for (unsigned rep = 0; rep < cfg.load_reps; rep++) {
                Samples one = { 0 };
                Slowest sl;
                double cpu_busy;
                load_series(ctl, &pc, rep, &one, &bad_busy, &sl, &cpu_busy);
                busy_sum += cpu_busy;
                Summary x = summarize(&one);
                reps_len += (size_t)snprintf(reps_txt + reps_len, sizeof reps_txt - reps_len, "%s%.2f",
                                             rep ? ", " : "", x.p99);
                if (reps_len >= sizeof reps_txt)
                        reps_len = sizeof reps_txt - 1;
                for (size_t i = 0; i < one.n; i++)
                        samples_add(&pooled, one.v[i]);
                if (sl.ms[0] > sl_busy.ms[0])
                        sl_busy = sl;
                samples_free(&one);
        }
        load.cpu_busy = cfg.load_reps ? busy_sum / cfg.load_reps : 0;

        /* For comparison: the same loops as plain processes outside any sandbox, in this
         * program's session, which is the server's autogroup unless --server-autogroup-nice. */
        Samples host = { 0 };
        unsigned bad_host = 0;
        double host_busy = 0;
        if (cfg.host_busy) {
                bench_progress("p: %u pings with %u CPU-bound host processes in the server's session", cfg.pings, cfg.busy);
                pid_t *kids = calloc(cfg.busy ? cfg.busy : 1, sizeof *kids);
                if (!kids)
                        bench_die("out of memory");
                for (unsigned i = 0; i < cfg.busy; i++) {
                        kids[i] = fork();
                        if (kids[i] == 0) {
                                (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
                                execl("/bin/sh", "sh", "-c", cfg.busy_cmd, (char *)NULL);
                                _exit(127);
                        }
                }
                sleep_us(cfg.settle_ms * 1000);
                uint64_t b0, tot0, b1, tot1;
                cpu_jiffies(&b0, &tot0);
                ping_series(&pc, cfg.pings, &host, &bad_host, &sl_host);
                cpu_jiffies(&b1, &tot1);
                host_busy = tot1 > tot0 ? (double)(b1 - b0) / (double)(tot1 - tot0) : 0;
                for (unsigned i = 0; i < cfg.busy; i++)
                        if (kids[i] > 0)
                                kill(kids[i], SIGKILL);
                for (unsigned i = 0; i < cfg.busy; i++)
                        if (kids[i] > 0)
                                (void)waitpid(kids[i], NULL, 0);
                free(kids);
        }

        Summary xi = summarize(&idle), xb = summarize(&pooled), xh = summarize(&host);
        char s1[96], s2[96], s3[96] = "";
        slowest_str(s1, sizeof s1, &sl_idle);
        slowest_str(s2, sizeof s2, &sl_busy);
        if (cfg.host_busy)
                slowest_str(s3, sizeof s3, &sl_host);
        row_add("p_idle", "`ping`, idle server", &xi, "gap %u µs between pings; %s; %u failed", cfg.ping_gap_us, s1,
                bad_idle);
        row_add("p_load", "`ping` while CPU-bound runs execute", &xb,
                "%u series of %u pings, each with %u fresh sandboxes running `%s`, pings from %u ms after all "
                "started; p99 per series: %s ms; CPUs %.0f %% busy; worst series' %s; %u failed",
                cfg.load_reps, cfg.pings, cfg.busy, cfg.busy_cmd, cfg.settle_ms, reps_txt, 100 * load.cpu_busy, s2,
                bad_busy);
        snprintf(load.reps, sizeof load.reps, "%s", reps_txt);
        if (cfg.host_busy)
                row_add("p_host", "  for comparison: the same loops outside any sandbox, in the server's autogroup", &xh,
                        "%u host processes `sh -c '%s'`%s; CPUs %.0f %% busy; %s; %u failed", cfg.busy, cfg.busy_cmd,
                        cfg.srv_nice_set ? " (the server has its own autogroup here)" : "", 100 * host_busy, s3, bad_host);
        samples_free(&host);
        samples_free(&idle);
        samples_free(&pooled);
        conn_close(&pc);
}

/* ------------------------------------------------------------------ c */

typedef struct Agent {
        Conn c;
        unsigned k;      /* client number */
        unsigned j;      /* commands answered */
        long want_id;
        uint64_t t_sent;
        bool active, failed;
} Agent;

static void agent_fail(Agent *a, const char *what, const char *line) {
        a->failed = true;
        a->active = false;
        conc.errors++;
        if (!conc.first_error[0]) {
                char d[260];
                describe(d, sizeof d, line);
                snprintf(conc.first_error, sizeof conc.first_error, "client %u %s: %s", a->k, what, d);
        }
}

static void agent_send_cmd(Agent *a) {
        char params[128];
        snprintf(params, sizeof params, "{\"command\":\"echo %u\"}", a->k * cfg.cmds + a->j);
        a->t_sent = bench_now_ns();
        a->want_id = rpc_send_try(&a->c, "run", params);
        if (a->want_id < 0)
                agent_fail(a, "could not send its command", NULL);
}

typedef void (*LineFn)(Agent *a, char *line, uint64_t t);

/* One poll loop over the active agents until none is active (or the deadline passes). */
static void agents_loop(Agent *ag, unsigned n, LineFn fn, unsigned timeout_s) {
        struct pollfd *pf = calloc(n, sizeof *pf);
        unsigned *map = calloc(n, sizeof *map);
        if (!pf || !map)
                bench_die("out of memory");
        uint64_t deadline = bench_now_ns() + (uint64_t)timeout_s * 1000000000ULL;
        for (;;) {
                unsigned m = 0;
                for (unsigned i = 0; i < n; i++)
                        if (ag[i].active) {
                                pf[m] = (struct pollfd){ .fd = ag[i].c.fd, .events = POLLIN };
                                map[m++] = i;
                        }
                if (m == 0)
                        break;
                if (bench_now_ns() > deadline) {
                        for (unsigned i = 0; i < m; i++)
                                agent_fail(&ag[map[i]], "timed out", "(no answer in time)");
                        break;
                }
                int r = poll(pf, m, 1000);
                if (r < 0 && errno != EINTR)
                        bench_die("poll: %s", strerror(errno));
                for (unsigned i = 0; r > 0 && i < m; i++) {
                        if (!pf[i].revents)
                                continue;
                        Agent *a = &ag[map[i]];
                        ssize_t k = conn_fill(&a->c);
                        uint64_t t = bench_now_ns();
                        if (k == 0 || (k < 0 && k != -EAGAIN)) {
                                agent_fail(a, "lost its connection", NULL);
                                continue;
                        }
                        char *l;
                        while (a->active && (l = conn_take_line(&a->c)))
                                fn(a, l, t);
                }
        }
        free(pf);
        free(map);
}

static Samples create_lat, lat_all, lat_steady, lat_first;
static uint64_t create_t0;
static unsigned n_created, n_completed;

static void on_create(Agent *a, char *l, uint64_t t) {
        if (resp_id(l) != a->want_id)
                return;
        a->active = false;
        if (resp_is_error(l) || !strstr(l, "\"sandboxId\":")) {
                agent_fail(a, "create", l);
                return;
        }
        n_created++;
        samples_add(&create_lat, bench_ms_between(create_t0, t));
}

static void on_run(Agent *a, char *l, uint64_t t) {
        if (resp_id(l) != a->want_id) {
                agent_fail(a, "got an unexpected line", l);
                return;
        }
        char want[32];
        snprintf(want, sizeof want, "%u\\n", a->k * cfg.cmds + a->j);
        if (!run_ok(l, want)) {
                agent_fail(a, "run", l);
                return;
        }
        double ms = bench_ms_between(a->t_sent, t);
        samples_add(&lat_all, ms);
        samples_add(a->j == 0 ? &lat_first : &lat_steady, ms);
        n_completed++;
        if (++a->j < cfg.cmds)
                agent_send_cmd(a);
        else
                a->active = false;
}

/* A pinger on its own connection and thread while the clients work: how long the server's
 * loop is unavailable to everyone else. Phases: 0 creates, 1 commands, 2 disconnects, 3 stop. */
static atomic_int ping_phase;
static Samples ping_lat[3];
static unsigned ping_bad;

static void *pinger(void *arg) {
        Conn *c = arg;
        for (;;) {
                int ph = atomic_load(&ping_phase);
                if (ph >= 3)
                        break;
                double ms = rpc_ping(c);
                /* Attributed to the phase it started in. */
                if (ms < 0)
                        ping_bad++;
                else
                        samples_add(&ping_lat[ph], ms);
                sleep_us(cfg.ping_gap_us);
        }
        return NULL;
}

static void bench_clients(Conn *ctl) {
        unsigned n = cfg.clients;
        Agent *ag = calloc(n, sizeof *ag);
        if (!ag)
                bench_die("out of memory");
        bench_progress("c: %u clients connect", n);
        for (unsigned i = 0; i < n; i++) {
                conn_open(&ag[i].c, true);
                ag[i].k = i;
        }
        Conn pc;
        pthread_t pt;
        conn_open(&pc, false);
        atomic_store(&ping_phase, 0);
        if (pthread_create(&pt, NULL, pinger, &pc) != 0)
                bench_die("pthread_create failed");
        sleep_us(20000);

        bench_progress("c: %u creates at once", n);
        create_t0 = bench_now_ns();
        for (unsigned i = 0; i < n; i++) {
                ag[i].active = true;
                ag[i].want_id = rpc_send_try(&ag[i].c, "create", NULL);
                if (ag[i].want_id < 0)
                        agent_fail(&ag[i], "could not send create", NULL);
        }
        agents_loop(ag, n, on_create, 120);
        conc.create_wall_ms = bench_ms_between(create_t0, bench_now_ns());
        conc.created = n_created;

        bench_progress("c: %u clients × %u commands", n, cfg.cmds);
        atomic_store(&ping_phase, 1);
        double run0, wait0, run1, wait1;
        uint64_t b0, tot0, b1, tot1;
        double srv0 = proc_cpu_s(bench_srv.pid);
        cpu_jiffies(&b0, &tot0);
        proc_schedstat(bench_srv.pid, &run0, &wait0);
        uint64_t t1 = bench_now_ns();
        for (unsigned i = 0; i < n; i++)
                if (!ag[i].failed) {
                        ag[i].active = true;
                        agent_send_cmd(&ag[i]);
                }
        agents_loop(ag, n, on_run, 600);
        uint64_t t2 = bench_now_ns();
        proc_schedstat(bench_srv.pid, &run1, &wait1);
        conc.srv_run_s = run1 - run0;
        conc.srv_wait_s = wait1 - wait0;
        cpu_jiffies(&b1, &tot1);
        double srv1 = proc_cpu_s(bench_srv.pid);

        conc.have = true;
        conc.clients = n;
        conc.cmds = cfg.cmds;
        conc.completed = n_completed;
        conc.cmd_wall_s = (double)(t2 - t1) / 1e9;
        conc.cmds_per_s = conc.cmd_wall_s > 0 ? n_completed / conc.cmd_wall_s : 0;
        conc.create_lat = summarize(&create_lat);
        conc.lat_all = summarize(&lat_all);
        conc.lat_steady = summarize(&lat_steady);
        conc.lat_first = summarize(&lat_first);
        conc.srv_cpu_s = srv1 - srv0;
        conc.cpu_busy = tot1 > tot0 ? (double)(b1 - b0) / (double)(tot1 - tot0) : 0;

        bench_progress("c: %u clients disconnect", n);
        atomic_store(&ping_phase, 2);
        uint64_t t3 = bench_now_ns();
        for (unsigned i = 0; i < n; i++)
                conn_close(&ag[i].c);
        (void)wait_no_sandboxes(ctl, 60000);
        conc.destroy_ms = bench_ms_between(t3, bench_now_ns());
        atomic_store(&ping_phase, 3);
        pthread_join(pt, NULL);
        conn_close(&pc);
        row_add("c_create", "`create`, all clients at once (from the moment all were sent)", &conc.create_lat,
                "%u of %u created; all done after %.1f ms", n_created, n, conc.create_wall_ms);
        row_add("c_run", "`run` `echo $i`, per command (request written → response read)", &conc.lat_all,
                "%u clients × %u commands, closed loop", n, cfg.cmds);
        row_add("c_run_first", "  the first command of each client (starts its session)", &conc.lat_first, "%s", "");
        row_add("c_run_rest", "  the other commands", &conc.lat_steady, "%s", "");
        static const char *const phase_name[3] = { "creates", "commands", "disconnects (sandboxes destroyed)" };
        static const char *const phase_key[3] = { "c_ping_cr", "c_ping_run", "c_ping_close" };
        for (int i = 0; i < 3; i++) {
                char name[160];
                Summary x = summarize(&ping_lat[i]);
                snprintf(name, sizeof name, "`ping` on another connection during the %s", phase_name[i]);
                row_add(phase_key[i], name, &x, "gap %u µs; %u failed in all phases", cfg.ping_gap_us, ping_bad);
                samples_free(&ping_lat[i]);
        }
        samples_free(&create_lat);
        samples_free(&lat_all);
        samples_free(&lat_steady);
        samples_free(&lat_first);
        free(ag);
}

/* ------------------------------------------------------------------ l: the loop never waits */

#define LOOP_CREATES 20
#define LOOP_FORKS 16 /* the server's cap on forks alive at once */
#define LOOP_PING_GAP_US 500

static atomic_bool loop_pinging, loop_burst; /* pings count only while a burst runs */
static Samples loop_lat;
static unsigned loop_ping_bad;

static void *loop_pinger(void *arg) {
        Conn *c = arg;
        while (atomic_load(&loop_pinging)) {
                bool burst = atomic_load(&loop_burst);
                double ms = rpc_ping(c);
                if (ms < 0)
                        loop_ping_bad++;
                else if (burst)
                        samples_add(&loop_lat, ms);
                sleep_us(LOOP_PING_GAP_US);
        }
        return NULL;
}

/* Reads answers until every id in want[0..n) has one (in any order: a create is answered
 * when its sandbox is ready); on_answer(i, line) for each. Returns how many were errors. */
static unsigned loop_collect(Conn *c, const long *want, unsigned n, void (*on_answer)(unsigned, const char *)) {
        unsigned got = 0, errors = 0;
        bool *seen = calloc(n, sizeof *seen);
        while (seen && got < n) {
                char *l = conn_read_line(c);
                if (!l)
                        bench_die("l: the connection closed");
                long id = resp_id(l);
                for (unsigned i = 0; i < n; i++)
                        if (want[i] == id && !seen[i]) {
                                seen[i] = true;
                                got++;
                                errors += resp_is_error(l);
                                if (on_answer)
                                        on_answer(i, l);
                        }
        }
        free(seen);
        return errors;
}

static Conn *loop_conn;
static char loop_ids[LOOP_CREATES + LOOP_FORKS][64];
static long loop_fork_ids[LOOP_FORKS];
static unsigned loop_n_forks;

static void loop_on_create(unsigned i, const char *l) {
        if (!json_str(l, "sandboxId", loop_ids[i], sizeof loop_ids[i]))
                return;
        if (loop_n_forks < LOOP_FORKS) {
                char p[128];
                snprintf(p, sizeof p, "{\"sandboxId\":\"%.63s\"}", loop_ids[i]);
                loop_fork_ids[loop_n_forks++] = rpc_send(loop_conn, "sandbox.fork", p);
        }
}

static void loop_on_fork(unsigned i, const char *l) {
        if (!json_str(l, "sandboxId", loop_ids[LOOP_CREATES + i], sizeof loop_ids[0]))
                loop_ids[LOOP_CREATES + i][0] = 0;
}

static void bench_loop(Conn *ctl) {
        Conn pc;
        pthread_t pt;
        unsigned errors = 0;
        conn_open(&pc, false);
        loop_conn = ctl;
        atomic_store(&loop_pinging, true);
        if (pthread_create(&pt, NULL, loop_pinger, &pc) != 0)
                bench_die("pthread_create failed");
        Samples round_ms = { 0 };
        for (unsigned r = 0; r < cfg.loop_rounds; r++) {
                bench_progress("l: round %u of %u: %u creates, %u forks", r + 1, cfg.loop_rounds, LOOP_CREATES, LOOP_FORKS);
                long creates[LOOP_CREATES];
                memset(loop_ids, 0, sizeof loop_ids);
                loop_n_forks = 0;
                uint64_t t0 = bench_now_ns();
                atomic_store(&loop_burst, true);
                for (unsigned i = 0; i < LOOP_CREATES; i++)
                        creates[i] = rpc_send(ctl, "sandbox.create", "{\"limits\":{\"pids\":64}}");
                errors += loop_collect(ctl, creates, LOOP_CREATES, loop_on_create);
                errors += loop_collect(ctl, loop_fork_ids, loop_n_forks, loop_on_fork);
                samples_add(&round_ms, bench_ms_between(t0, bench_now_ns()));
                atomic_store(&loop_burst, false);
                for (unsigned i = 0; i < LOOP_CREATES + LOOP_FORKS; i++) {
                        if (!loop_ids[i][0])
                                continue;
                        char p[128];
                        snprintf(p, sizeof p, "{\"sandboxId\":\"%.63s\"}", loop_ids[i]);
                        char *l = rpc_call(ctl, "sandbox.destroy", p);
                        errors += resp_is_error(l);
                }
                (void)wait_no_sandboxes(ctl, 30000);
        }
        atomic_store(&loop_pinging, false);
        pthread_join(pt, NULL);
        conn_close(&pc);
        Summary x = summarize(&loop_lat), y = summarize(&round_ms);
        row_add("l_ping", "`ping` on another connection while 20 `sandbox.create` at once and 16 forks run", &x,
                "%u rounds, gap %u µs; %u pings failed, %u requests failed", cfg.loop_rounds, LOOP_PING_GAP_US,
                loop_ping_bad, errors);
        row_add("l_round", "  20 creates and 16 forks, first request → last answer", &y, "%s", "");
        samples_free(&loop_lat);
        samples_free(&round_ms);
}

/* ------------------------------------------------------------------ processes (s, o, k) */

/* VmRSS and VmHWM of a process, in kB (0 when unreadable). */
static void proc_rss_kb(pid_t pid, long *rss, long *hwm) {
        char path[64], line[256];
        snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
        *rss = *hwm = 0;
        FILE *f = fopen(path, "re");
        if (!f)
                return;
        while (fgets(line, sizeof line, f)) {
                if (strncmp(line, "VmRSS:", 6) == 0)
                        *rss = strtol(line + 6, NULL, 10);
                else if (strncmp(line, "VmHWM:", 6) == 0)
                        *hwm = strtol(line + 6, NULL, 10);
        }
        fclose(f);
}

/* Sets VmHWM back to the current VmRSS (proc(5), clear_refs "5"), so that the peak read later
 * is the peak of what comes after. */
static bool proc_reset_hwm(pid_t pid) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/clear_refs", (int)pid);
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        bool ok = write(fd, "5", 1) == 1;
        close(fd);
        return ok;
}

/* An integer `"key":N` within [from, to): the parts of a line around a big data string, so
 * that the string itself is not scanned again. */
static bool json_int_in(const char *from, const char *to, const char *key, long long *ret) {
        char pat[64];
        int n = snprintf(pat, sizeof pat, "\"%s\":", key);
        const char *p = to > from ? memmem(from, (size_t)(to - from), pat, (size_t)n) : NULL;
        if (!p)
                return false;
        char *end;
        long long v = strtoll(p + n, &end, 10);
        if (end == p + n)
                return false;
        *ret = v;
        return true;
}

/* Whether a line is the notification `method`: the server writes "jsonrpc", then "method",
 * so it is in the first bytes; a full search only if not (another key order). */
static bool is_notification(const char *line, size_t len, const char *method) {
        char pat[64];
        int n = snprintf(pat, sizeof pat, "\"method\":\"%s\"", method);
        if (memmem(line, (len < 80 ? len : 80), pat, (size_t)n))
                return true;
        return len > 80 && strncmp(line, "{\"jsonrpc\":\"2.0\",\"method\":", 26) != 0 && strstr(line, pat) != NULL;
}

/* Starts a process; its processId into id. Returns the answer line, or NULL (then err says
 * why). */
static char *proc_start(Conn *c, const char *params, char *id, size_t idsz, char *err, size_t errsz) {
        char *l = rpc_call(c, "process.start", params);
        if (resp_is_error(l) || !json_str(l, "processId", id, idsz)) {
                describe(err, errsz, l);
                return NULL;
        }
        return l;
}

/* ---------------------------------------------------------------- s */

/* One `echo hi` process: process.start written -> its answer (*start_ms), then process.stream
 * from cursor 0 -> the first process.output with data; the rest of the stream is read and
 * checked (data "hi\n", process.exit, answer exited 0 at cursor 3). Returns start written ->
 * first output read, in ms, or -1 (err says why). */
static double proc_first_output(Conn *c, double *start_ms, char *err, size_t errsz) {
        char id[40], params[128];
        uint64_t t0 = bench_now_ns();
        long sid = rpc_send(c, "process.start", "{\"command\":\"echo hi\"}");
        char *l = rpc_wait(c, sid);
        uint64_t t1 = bench_now_ns();
        if (!l || resp_is_error(l) || !json_str(l, "processId", id, sizeof id)) {
                describe(err, errsz, l);
                return -1;
        }
        *start_ms = bench_ms_between(t0, t1);
        snprintf(params, sizeof params, "{\"processId\":\"%s\",\"cursor\":0}", id);
        long qid = rpc_send(c, "process.stream", params);
        uint64_t t2 = 0;
        bool exit_seen = false;
        char data[64] = "";
        for (;;) {
                l = conn_read_line(c);
                if (!l) {
                        describe(err, errsz, NULL);
                        return -1;
                }
                if (strstr(l, "\"method\":\"process.output\"")) {
                        char d[64] = "";
                        if (json_str(l, "data", d, sizeof d) && d[0] && !t2) {
                                t2 = bench_now_ns();
                                snprintf(data, sizeof data, "%s", d);
                        }
                        continue;
                }
                if (strstr(l, "\"method\":\"process.exit\"")) {
                        exit_seen = true;
                        continue;
                }
                if (resp_id(l) == qid)
                        break;
        }
        long ec = -1, cur = -1;
        if (!t2 || strcmp(data, "hi\\n") != 0 || !exit_seen || resp_is_error(l) || !strstr(l, "\"status\":\"exited\"") ||
            !json_int(l, "exitCode", &ec) || ec != 0 || !json_int(l, "cursor", &cur) || cur != 3) {
                snprintf(err, errsz, "first data \"%s\", process.exit %s, answer %.200s", data,
                         exit_seen ? "seen" : "missing", l);
                return -1;
        }
        return bench_ms_between(t0, t2);
}

static void bench_proc_start(Conn *ctl) {
        Conn c;
        conn_open(&c, false);
        char *l = rpc_call(&c, "create", NULL);
        if (resp_is_error(l) || !strstr(l, "\"sandboxId\":"))
                bench_die("create: %.200s", l);
        char err[300], first_bad[300] = "";
        double start_ms;
        bench_progress("s: %u warm-up iterations", cfg.proc_warmup);
        for (unsigned i = 0; i < cfg.proc_warmup; i++) {
                (void)proc_first_output(&c, &start_ms, err, sizeof err);
                sleep_us(cfg.quiet_ms * 1000);
                (void)rpc_run_hi(&c);
                sleep_us(cfg.quiet_ms * 1000);
        }
        Samples sfirst = { 0 }, sstart = { 0 }, srun = { 0 };
        unsigned bad_proc = 0, bad_run = 0;
        bench_progress("s: %u interleaved iterations (process.start + stream of `echo hi`, `run` of it)", cfg.proc_n);
        for (unsigned i = 0; i < cfg.proc_n; i++) {
                for (unsigned j = 0; j < 2; j++) {
                        if ((i + j) % 2 == 0) {
                                double ms = proc_first_output(&c, &start_ms, err, sizeof err);
                                if (ms < 0) {
                                        if (bad_proc++ == 0)
                                                snprintf(first_bad, sizeof first_bad, "%s", err);
                                } else {
                                        samples_add(&sfirst, ms);
                                        samples_add(&sstart, start_ms);
                                }
                        } else {
                                double ms = rpc_run_hi(&c);
                                if (ms < 0)
                                        bad_run++;
                                else
                                        samples_add(&srun, ms);
                        }
                        /* Each start, like each run, uses up the session's worker: the next
                         * one is made ready while we sleep. */
                        sleep_us(cfg.quiet_ms * 1000);
                }
        }
        l = rpc_call(&c, "process.list", NULL);
        long listed = 0;
        for (const char *p = l; (p = strstr(p, "\"processId\":")); p++)
                listed++;
        conn_close(&c);
        (void)wait_no_sandboxes(ctl, 10000);
        if (first_bad[0])
                bench_note("s: first failure: %s", first_bad);
        Summary xf = summarize(&sfirst), xs = summarize(&sstart), xr = summarize(&srun);
        row_add("s_first", "`process.start` `echo hi` → first `process.output` (start written → start answered → "
                "`process.stream` from 0 → first output read)", &xf,
                "interleaved with s_run, %u ms pause after each; data, exit and cursor checked; %u failed; the "
                "sandbox listed %ld processes at the end (at most 64 kept, ended ones forgotten oldest first)",
                cfg.quiet_ms, bad_proc, listed);
        row_add("s_start", "  of which `process.start` (request written → answer read)", &xs, "%s", "");
        row_add("s_run", "for comparison: `run` `echo hi` (request written → response read)", &xr,
                "same session, interleaved; %u failed", bad_run);
        samples_free(&sfirst);
        samples_free(&sstart);
        samples_free(&srun);
}

/* ---------------------------------------------------------------- o */

/* Results of o, kept for the report. */
typedef struct StreamResult {
        bool have, ok;
        const char *what;        /* "ASCII" or "binary" */
        char command[300];
        uint64_t want, bytes, dropped, pieces, wire;
        unsigned gaps, dups, bad_content, bad_lines;
        double first_ms, total_ms, mb_s, wire_mb_s, producer_mb_s;
        long rss0, rss_peak, hwm, rss1;    /* the server's, kB */
        long long log_end;      /* process.list's logEnd after the answer: what the log got */
        double srv_cpu_s, cli_cpu_s, srv_run_s, srv_wait_s;
        char status[160];
        char first_bad[300];
} StreamResult;

static StreamResult streams[2];

/* The decoded length of a JSON string's raw text (n bytes, no quotes): escapes count as
 * the bytes they stand for (\uXXXX as its UTF-8 length, a surrogate pair as 4). */
static uint64_t json_unescaped_len(const char *s, size_t n) {
        uint64_t len = 0;
        for (size_t i = 0; i < n; i++) {
                if (s[i] != '\\' || i + 1 >= n) {
                        len++;
                        continue;
                }
                i++;
                if (s[i] != 'u') {
                        len++;
                        continue;
                }
                unsigned v = i + 4 < n ? (unsigned)strtoul((char[5]){ s[i + 1], s[i + 2], s[i + 3], s[i + 4], 0 }, NULL, 16)
                                       : 0;
                len += v < 0x80 ? 1 : v < 0x800 ? 2 : v >= 0xD800 && v < 0xDC00 ? 4 : v >= 0xDC00 && v < 0xE000 ? 0 : 3;
                i += 4;
        }
        return len;
}

/* The expected content: every byte 'x' (ASCII), or every byte 0xFF, whose base64 is "////"
 * with "/w==" or "//8=" for a last 1 or 2 bytes. */
static char pat_x[65536], pat_slash[65536];

static bool all_same(const char *s, size_t n, const char *pat) {
        for (size_t o = 0; o < n; o += sizeof pat_x)
                if (memcmp(s + o, pat, (n - o < sizeof pat_x ? n - o : sizeof pat_x)) != 0)
                        return false;
        return true;
}

/* Checks one process.output line (len bytes) against r: the cursor follows on from the
 * last one (no gap, no byte twice), the data is what the generator writes. */
static void stream_piece(StreamResult *r, uint64_t *next, const char *l, size_t len) {
        const char *end = l + len;
        const char *d = strstr(l, "\"data\":\"");
        long long cursor = -1, dropped = 0;
        if (!d) {
                if (r->bad_lines++ == 0)
                        describe(r->first_bad, sizeof r->first_bad, l);
                return;
        }
        d += 8;
        const char *e = d;
        for (;;) {
                e = memchr(e, '"', (size_t)(end - e));
                if (!e)
                        break;
                const char *b = e;
                while (b > d && b[-1] == '\\')
                        b--;
                if ((e - b) % 2 == 0)
                        break;
                e++;
        }
        if (!e || (!json_int_in(l, d, "cursor", &cursor) && !json_int_in(e, end, "cursor", &cursor))) {
                if (r->bad_lines++ == 0)
                        describe(r->first_bad, sizeof r->first_bad, l);
                return;
        }
        (void)json_int_in(e, end, "dropped", &dropped);
        size_t raw = (size_t)(e - d);
        bool b64 = memmem(e, (size_t)(end - e), "\"dataEncoding\":\"base64\"", 23) != NULL;
        uint64_t n;
        bool content_ok;
        if (b64) {
                size_t pad = raw >= 1 && d[raw - 1] == '=' ? raw >= 2 && d[raw - 2] == '=' ? 2 : 1 : 0;
                n = raw % 4 == 0 ? raw / 4 * 3 - pad : 0;
                content_ok = raw % 4 == 0 && raw >= 4 && all_same(d, raw - 4, pat_slash) &&
                             (memcmp(d + raw - 4, "////", 4) == 0 || memcmp(d + raw - 4, "/w==", 4) == 0 ||
                              memcmp(d + raw - 4, "//8=", 4) == 0);
        } else {
                n = memchr(d, '\\', raw) ? json_unescaped_len(d, raw) : raw;
                content_ok = all_same(d, raw, pat_x);
        }
        r->wire += len + 1;
        if (dropped > 0) {
                /* The log lost bytes before the cursor asked for: one notification, empty data,
                 * its cursor where the bytes kept begin. */
                r->dropped += (uint64_t)dropped;
                if ((uint64_t)cursor - (uint64_t)dropped != *next)
                        r->gaps++;
                *next = (uint64_t)cursor;
                return;
        }
        r->pieces++;
        r->bytes += n;
        if (!content_ok || b64 != (r->what[0] == 'b')) {
                if (r->bad_content++ == 0)
                        snprintf(r->first_bad, sizeof r->first_bad, "piece at cursor %lld: %.80s", cursor, d);
        }
        if ((uint64_t)cursor - n > *next)
                r->gaps++;
        else if ((uint64_t)cursor - n < *next)
                r->dups++;
        *next = (uint64_t)cursor;
}

/* Streams one process that writes r->want bytes once it reads a line on its stdin (so that
 * the stream is in place before the first byte): the line written -> the answer to the
 * stream, every piece checked, the server's RSS sampled. */
static void stream_one(Conn *c, StreamResult *r, const char *gen) {
        char esc[512], params[1024], id[40], err[300];
        snprintf(r->command, sizeof r->command, "%s", gen);

        /* How fast the generator alone goes in this sandbox: into /dev/null, no pipe to us. */
        char cmd[600];
        snprintf(cmd, sizeof cmd, "%s >/dev/null", gen);
        json_escape(esc, sizeof esc, cmd);
        snprintf(params, sizeof params, "{\"command\":\"%s\",\"timeoutMs\":600000}", esc);
        uint64_t t0 = bench_now_ns();
        char *l = rpc_call(c, "run", params);
        double gen_ms = bench_ms_since(t0);
        long ec = -1;
        if (resp_is_error(l) || !json_int(l, "exitCode", &ec) || ec != 0)
                bench_note("o: the generator alone (`%s`) failed: %.200s", cmd, l);
        else
                r->producer_mb_s = (double)r->want / 1e6 / (gen_ms / 1e3);
        sleep_us(cfg.quiet_ms * 1000);

        snprintf(cmd, sizeof cmd, "read -r go && %s", gen);
        json_escape(esc, sizeof esc, cmd);
        snprintf(params, sizeof params, "{\"command\":\"%s\",\"stdin\":true}", esc);
        if (!proc_start(c, params, id, sizeof id, err, sizeof err)) {
                snprintf(r->first_bad, sizeof r->first_bad, "process.start: %.250s", err);
                r->have = true;
                return;
        }
        /* The server's peak from here on, not from the benchmarks before. */
        if (!proc_reset_hwm(bench_srv.pid))
                bench_note("o: cannot reset the server's VmHWM (/proc/%d/clear_refs): %s", (int)bench_srv.pid, strerror(errno));
        long hwm;
        proc_rss_kb(bench_srv.pid, &r->rss0, &hwm);
        r->rss_peak = r->rss0;
        double srv0 = proc_cpu_s(bench_srv.pid), cli0 = proc_cpu_s(getpid()), run0, wait0;
        proc_schedstat(bench_srv.pid, &run0, &wait0);

        snprintf(params, sizeof params, "{\"processId\":\"%s\",\"cursor\":0}", id);
        t0 = bench_now_ns();
        long qid = rpc_send(c, "process.stream", params);
        snprintf(params, sizeof params, "{\"processId\":\"%s\",\"data\":\"Z28K\"}", id); /* "go\n" */
        long wid = rpc_send(c, "process.write", params);
        uint64_t next = 0, t_first = 0, t_last = 0, next_sample = 16u << 20;
        bool exit_seen = false;
        for (;;) {
                l = conn_take_line(c);
                if (!l) {
                        ssize_t k = conn_fill(c);
                        if (k <= 0) {
                                snprintf(r->first_bad, sizeof r->first_bad, "the connection %s after %" PRIu64 " bytes",
                                         k == 0 ? "closed" : "failed", r->bytes);
                                r->have = true;
                                return;
                        }
                        continue;
                }
                size_t len = (size_t)(c->buf + c->start - 1 - l);
                if (is_notification(l, len, "process.output")) {
                        uint64_t before = r->bytes;
                        stream_piece(r, &next, l, len);
                        if (r->bytes > before) {
                                t_last = bench_now_ns();
                                if (!t_first)
                                        t_first = t_last;
                        }
                        if (r->bytes >= next_sample) {
                                long rss;
                                proc_rss_kb(bench_srv.pid, &rss, &hwm);
                                if (rss > r->rss_peak)
                                        r->rss_peak = rss;
                                next_sample += 16u << 20;
                        }
                        continue;
                }
                if (is_notification(l, len, "process.exit")) {
                        exit_seen = true;
                        continue;
                }
                long rid = resp_id(l);
                if (rid == wid && resp_is_error(l))
                        snprintf(r->first_bad, sizeof r->first_bad, "process.write: %.200s", l);
                if (rid == qid)
                        break;
        }
        uint64_t t_end = bench_now_ns();
        r->srv_cpu_s = proc_cpu_s(bench_srv.pid) - srv0;
        r->cli_cpu_s = proc_cpu_s(getpid()) - cli0;
        proc_schedstat(bench_srv.pid, &r->srv_run_s, &r->srv_wait_s);
        r->srv_run_s -= run0;
        r->srv_wait_s -= wait0;
        proc_rss_kb(bench_srv.pid, &r->rss1, &r->hwm);
        if (r->rss1 > r->rss_peak)
                r->rss_peak = r->rss1;
        long long cur = -1;
        char st[32] = "?";
        (void)json_int_in(l, l + strlen(l), "cursor", &cur);
        (void)json_str(l, "status", st, sizeof st);
        long ecode = -1;
        (void)json_int(l, "exitCode", &ecode);
        snprintf(r->status, sizeof r->status, "%s, exit code %ld, final cursor %lld, process.exit %s", st, ecode, cur,
                 exit_seen ? "sent" : "missing");
        bool answer_ok = !resp_is_error(l);
        /* What the log holds in all, a moment later: bytes the stream did not send, if more. */
        sleep_us(100000);
        char *ll = rpc_call(c, "process.list", NULL);
        char pat[64];
        snprintf(pat, sizeof pat, "\"processId\":\"%s\"", id);
        const char *me = strstr(ll, pat);
        r->log_end = -1;
        if (me)
                (void)json_int_in(me, me + strlen(me), "logEnd", &r->log_end);
        r->first_ms = t_first ? bench_ms_between(t0, t_first) : 0;
        r->total_ms = bench_ms_between(t0, t_end);
        double span_s = t_last > t0 ? bench_ms_between(t0, t_last) / 1e3 : 0;
        r->mb_s = span_s > 0 ? (double)r->bytes / 1e6 / span_s : 0;
        r->wire_mb_s = span_s > 0 ? (double)r->wire / 1e6 / span_s : 0;
        r->ok = answer_ok && strcmp(st, "exited") == 0 && ecode == 0 && exit_seen && cur == (long long)r->want &&
                r->bytes + r->dropped == r->want && next == r->want && !r->gaps && !r->dups && !r->bad_content &&
                !r->bad_lines;
        r->have = true;
}

static void bench_stream(Conn *ctl) {
        memset(pat_x, 'x', sizeof pat_x);
        memset(pat_slash, '/', sizeof pat_slash);
        Conn c;
        conn_open(&c, false);
        /* Lines of about 64 KiB come one after the other: read them in big gulps. */
        c.cap = 8u << 20;
        if (!(c.buf = malloc(c.cap)))
                bench_die("out of memory");
        char *l = rpc_call(&c, "create", NULL);
        if (resp_is_error(l) || !strstr(l, "\"sandboxId\":"))
                bench_die("create: %.200s", l);
        char gen[300];
        for (int k = 0; k < 2; k++) {
                StreamResult *r = &streams[k];
                uint64_t n = k == 0 ? cfg.stream_bytes : cfg.stream_bin_bytes;
                if (!n)
                        continue;
                r->what = k == 0 ? "ASCII" : "binary";
                r->want = n;
                if (k == 0 && cfg.stream_cmd)
                        snprintf(gen, sizeof gen, "%s", cfg.stream_cmd);
                else
                        snprintf(gen, sizeof gen, "head -c %" PRIu64 " /dev/zero | tr '\\0' %s", n, k == 0 ? "x" : "'\\377'");
                bench_progress("o: process.stream of `%s` (%" PRIu64 " bytes, %s)", gen, n, k == 0 ? "JSON strings" : "base64");
                stream_one(&c, r, gen);
                if (!r->ok)
                        bench_note("o (%s): not as expected: %" PRIu64 " bytes received, %" PRIu64 " dropped, %u gaps, "
                                   "%u duplicates, %u pieces with other content, %u unreadable lines; %s; %s",
                                   r->what, r->bytes, r->dropped, r->gaps, r->dups, r->bad_content, r->bad_lines,
                                   r->status, r->first_bad);
                bench_progress("o: %.0f MB/s of payload in %.2f s (the generator alone %.0f MB/s), %" PRIu64 " dropped; "
                               "server RSS %ld -> peak %ld (VmHWM %ld) -> %ld kB; CPU-s: server %.2f, client %.2f",
                               r->mb_s, r->total_ms / 1e3, r->producer_mb_s, r->dropped, r->rss0, r->rss_peak, r->hwm,
                               r->rss1, r->srv_cpu_s, r->cli_cpu_s);
        }
        conn_close(&c);
        (void)wait_no_sandboxes(ctl, 10000);
}

/* ---------------------------------------------------------------- k */

/* Results of k, kept for the report. */
static struct {
        bool have;
        unsigned bad;
} killr;

/* How many `sleep` processes live in the sandbox (pgrep there, in its pid namespace), or -1;
 * *zombies: how many more have died but wait for the sandbox's pid 1 to reap them (they have
 * left their cgroup already). */
static long count_sleeps(Conn *c, const char *sbid, long *zombies) {
        char params[256];
        snprintf(params, sizeof params,
                 "{\"sandboxId\":\"%s\",\"command\":\"echo $(pgrep -cx sleep) $(pgrep -cx -r Z sleep)\"}", sbid);
        char *l = rpc_call(c, "run", params), out[64];
        long all = -1, z = -1;
        if (resp_is_error(l) || !json_str(l, "stdout", out, sizeof out) || sscanf(out, "%ld %ld", &all, &z) != 2)
                return -1;
        *zombies = z;
        return all - z;
}

/* Starts a process in sbid and waits until a line of it matches `^ready$`. */
static bool start_ready(Conn *c, const char *sbid, const char *cmd, char *id, size_t idsz, char *err, size_t errsz) {
        char esc[512], params[1024];
        json_escape(esc, sizeof esc, cmd);
        snprintf(params, sizeof params, "{\"sandboxId\":\"%s\",\"command\":\"%s\"}", sbid, esc);
        if (!proc_start(c, params, id, idsz, err, errsz))
                return false;
        snprintf(params, sizeof params,
                 "{\"sandboxId\":\"%s\",\"processId\":\"%s\",\"until\":\"log\",\"pattern\":\"^ready$\",\"timeoutMs\":60000}",
                 sbid, id);
        char *l = rpc_call(c, "process.wait", params);
        if (resp_is_error(l)) {
                describe(err, errsz, l);
                return false;
        }
        return true;
}

/* process.kill with graceMs 0: request written -> answer read, in ms; -1 unless the answer
 * is a killed process with exit code 137 (SIGKILL). */
static double kill_now(Conn *c, const char *sbid, const char *id, char *err, size_t errsz) {
        char params[256];
        snprintf(params, sizeof params, "{\"sandboxId\":\"%s\",\"processId\":\"%s\",\"signal\":\"TERM\",\"graceMs\":0}",
                 sbid, id);
        uint64_t t0 = bench_now_ns();
        char *l = rpc_call(c, "process.kill", params);
        double ms = bench_ms_since(t0);
        long ec = -1;
        if (resp_is_error(l) || !strstr(l, "\"status\":\"killed\"") || !json_int(l, "exitCode", &ec) || ec != 137) {
                describe(err, errsz, l);
                return -1;
        }
        return ms;
}

static void bench_kill(Conn *ctl) {
        Conn c;
        conn_open(&c, false);
        char sbid[64], id[40], err[300], first_bad[300] = "", tree[300];
        char *l = rpc_call(&c, "sandbox.create", "{\"limits\":{\"pids\":1024}}");
        if (resp_is_error(l) || !json_str(l, "sandboxId", sbid, sizeof sbid))
                bench_die("sandbox.create: %.200s", l);
        snprintf(tree, sizeof tree,
                 "trap '' TERM; for i in $(seq %u); do (trap '' TERM; exec sleep 1000) & done; echo ready; wait",
                 cfg.kill_tree);
        Samples skill = { 0 }, sone = { 0 }, sready = { 0 };
        unsigned bad = 0, bad_one = 0, left = 0, with_zombies = 0;
        long zombies = 0, zombies_max = 0;
        bench_progress("k: %u × process.kill (graceMs 0) of a tree of %u TERM-ignoring sleeps (+1 warm-up), "
                       "and of one `sleep 1000`", cfg.kill_n, cfg.kill_tree);
        for (unsigned i = 0; i < cfg.kill_n + 1; i++) {
                /* The tree: `ready` once every subshell is forked, then every sleep exec'd. */
                uint64_t t0 = bench_now_ns();
                if (!start_ready(&c, sbid, tree, id, sizeof id, err, sizeof err)) {
                        if (bad++ == 0)
                                snprintf(first_bad, sizeof first_bad, "tree: %.250s", err);
                        continue;
                }
                long n = 0;
                while ((n = count_sleeps(&c, sbid, &zombies)) < (long)cfg.kill_tree) {
                        if (bench_ms_since(t0) > 60000)
                                bench_die("k: only %ld of %u sleeps running after 60 s", n, cfg.kill_tree);
                        sleep_us(5000);
                }
                if (n != (long)cfg.kill_tree)
                        bench_note("k: %ld sleeps running, not %u", n, cfg.kill_tree);
                double ready = bench_ms_since(t0);
                sleep_us(cfg.quiet_ms * 1000);
                double ms = kill_now(&c, sbid, id, err, sizeof err);
                if (ms < 0) {
                        if (bad++ == 0)
                                snprintf(first_bad, sizeof first_bad, "tree kill: %.250s", err);
                } else if (i > 0) {
                        samples_add(&skill, ms);
                        samples_add(&sready, ready);
                }
                if ((n = count_sleeps(&c, sbid, &zombies)) != 0) {
                        left++;
                        bench_note("k: %ld sleeps still alive after the kill was answered", n);
                }
                if (zombies > 0 && i > 0) {
                        with_zombies++;
                        if (zombies > zombies_max)
                                zombies_max = zombies;
                }
                /* For comparison, the same kill of a single process. */
                if (!start_ready(&c, sbid, "trap '' TERM; echo ready; exec sleep 1000", id, sizeof id, err, sizeof err)) {
                        if (bad_one++ == 0)
                                snprintf(first_bad, sizeof first_bad, "one: %.250s", err);
                        continue;
                }
                sleep_us(cfg.quiet_ms * 1000);
                ms = kill_now(&c, sbid, id, err, sizeof err);
                if (ms < 0) {
                        if (bad_one++ == 0)
                                snprintf(first_bad, sizeof first_bad, "one kill: %.250s", err);
                } else if (i > 0) {
                        samples_add(&sone, ms);
                }
        }
        conn_close(&c);
        (void)wait_no_sandboxes(ctl, 10000);
        if (first_bad[0])
                bench_note("k: first failure: %s", first_bad);
        Summary xk = summarize(&skill), xo = summarize(&sone), xr = summarize(&sready);
        row_add("k_tree", "`process.kill` of a tree of TERM-ignoring sleeps, graceMs 0 (request written → answer read)",
                &xk, "%u sleeps running first; answer killed/137, no sleep alive after it: %u failed, %u left some "
                "alive; %u answers came before pid 1 had reaped every dead sleep (at most %ld zombies)",
                cfg.kill_tree, bad, left, with_zombies, zombies_max);
        bench_note("k: the tree: `%s`, in a sandbox with limits {pids: 1024}; sleeps counted with pgrep in the "
                   "sandbox (zombies apart: they have left their cgroup already)", tree);
        row_add("k_one", "  for comparison: the same kill of one `sleep 1000`", &xo, "%u failed", bad_one);
        row_add("k_setup", "  the tree's start → `ready` and every sleep running (not a target)", &xr, "%s", "");
        killr.have = xk.n > 0;
        killr.bad = bad + left;
        samples_free(&skill);
        samples_free(&sone);
        samples_free(&sready);
}

/* ------------------------------------------------------------------ report */

static char pool_txt[16];

/* A row of the stream table: one cell per variant measured. */
static void stream_row(const char *name, void (*cell)(const StreamResult *r, char *buf, size_t size)) {
        printf("| %s |", name);
        for (int k = 0; k < 2; k++) {
                char buf[400] = "–";
                if (streams[k].have)
                        cell(&streams[k], buf, sizeof buf);
                printf(" %s |", buf);
        }
        printf("\n");
}

static void c_cmd(const StreamResult *r, char *b, size_t n) { snprintf(b, n, "`read -r go && %s`", r->command); }
static void c_bytes(const StreamResult *r, char *b, size_t n) {
        snprintf(b, n, "%" PRIu64 " of %" PRIu64 " (%s); %" PRIu64 " dropped by the log", r->bytes, r->want,
                 r->bytes + r->dropped == r->want ? "all accounted for" : "**some missing**", r->dropped);
}
static void c_pieces(const StreamResult *r, char *b, size_t n) {
        snprintf(b, n, "%" PRIu64 " `process.output`; cursors: %u gaps, %u duplicates; %u with other content, "
                 "%u unreadable", r->pieces, r->gaps, r->dups, r->bad_content, r->bad_lines);
}
static void c_end(const StreamResult *r, char *b, size_t n) {
        snprintf(b, n, "%s; logEnd %lld a moment later", r->status, r->log_end);
}
static void c_first(const StreamResult *r, char *b, size_t n) { snprintf(b, n, "%.2f ms", r->first_ms); }
static void c_rate(const StreamResult *r, char *b, size_t n) {
        snprintf(b, n, "**%.0f MB/s** (%.2f s to the last piece)", r->mb_s, r->mb_s > 0 ? (double)r->bytes / 1e6 / r->mb_s : 0);
}
static void c_wire(const StreamResult *r, char *b, size_t n) {
        snprintf(b, n, "%.0f MB/s (%" PRIu64 " bytes of lines)", r->wire_mb_s, r->wire);
}
static void c_gen(const StreamResult *r, char *b, size_t n) {
        snprintf(b, n, r->producer_mb_s > 0 ? "%.0f MB/s" : "failed", r->producer_mb_s);
}
static void c_rss(const StreamResult *r, char *b, size_t n) {
        snprintf(b, n, "%ld → %ld → %ld kB (VmHWM %ld kB)", r->rss0, r->rss_peak, r->rss1, r->hwm);
}
static void c_srv(const StreamResult *r, char *b, size_t n) {
        snprintf(b, n, "%.2f CPU-s (on a CPU %.2f s, waiting for one %.2f s, of %.2f s)", r->srv_cpu_s, r->srv_run_s,
                 r->srv_wait_s, r->total_ms / 1e3);
}
static void c_cli(const StreamResult *r, char *b, size_t n) { snprintf(b, n, "%.2f CPU-s", r->cli_cpu_s); }

static void stream_report(void) {
        printf("\n## The daemon: a process's output through `process.stream` (1 MB = 10⁶ bytes)\n\n");
        printf("| | ASCII: JSON strings | binary: base64 |\n|---|---|---|\n");
        stream_row("command (`process.start`, stdin: true; \"go\" written once the stream is in place)", c_cmd);
        stream_row("payload bytes received", c_bytes);
        stream_row("pieces", c_pieces);
        stream_row("the stream's end", c_end);
        stream_row("stream request written → first payload byte", c_first);
        stream_row("payload rate, stream request written → last piece read", c_rate);
        stream_row("on the wire", c_wire);
        stream_row("the generator alone in the same sandbox, into /dev/null (a `run`)", c_gen);
        stream_row("server VmRSS before → peak (read every 16 MiB) → after", c_rss);
        stream_row("server CPU during the stream (/proc/PID/stat, schedstat)", c_srv);
        stream_row("this client's CPU", c_cli);
}

/* Growth of the server's RSS over a stream that stays within the bounds it keeps: the log
 * (1 MiB), the output queue (pauses at 4 MiB) and a piece in flight, with room for malloc. */
#define STREAM_RSS_SLACK_KB (16L * 1024)

static void proc_targets(void) {
        const Row *sf = row_find("s_first"), *sr = row_find("s_run"), *kt = row_find("k_tree");
        if (sf)
                printf("| `process.start` `echo hi` → first `process.output` at the client, p50 ≤ 2 ms | p50 %.3f ms, "
                       "p90 %.3f, p99 %.3f (N %zu); `run` of it in the same run p50 %.3f ms | %s |\n",
                       sf->s.p50, sf->s.p90, sf->s.p99, sf->s.n, sr ? sr->s.p50 : 0, bench_verdict(true, sf->s.p50 <= 2));
        else
                printf("| `process.start` → first output p50 ≤ 2 ms | – | not measured |\n");
        const StreamResult *a = &streams[0];
        if (a->have) {
                bool whole = a->ok && a->bytes + a->dropped == a->want;
                printf("| `process.stream` of a process writing %" PRIu64 " MiB (ASCII) ≥ 300 MB/s, every byte accounted "
                       "for | %.0f MB/s; %" PRIu64 " bytes received, %" PRIu64 " dropped; %s | %s%s |\n",
                       a->want >> 20, a->mb_s, a->bytes, a->dropped, a->status, bench_verdict(true, a->mb_s >= 300 && whole),
                       whole ? "" : " (bytes missing at the end of the stream)");
                long grow = a->rss_peak - a->rss0;
                for (int k = 1; k < 2; k++)
                        if (streams[k].have && streams[k].rss_peak - streams[k].rss0 > grow)
                                grow = streams[k].rss_peak - streams[k].rss0;
                printf("| the server's RSS stays flat while it streams (peak ≤ before + %ld MiB) | ASCII %ld → %ld → %ld kB",
                       STREAM_RSS_SLACK_KB / 1024, a->rss0, a->rss_peak, a->rss1);
                if (streams[1].have)
                        printf("; binary %ld → %ld → %ld kB", streams[1].rss0, streams[1].rss_peak, streams[1].rss1);
                printf(" | %s |\n", bench_verdict(true, grow <= STREAM_RSS_SLACK_KB));
        } else {
                printf("| `process.stream` of 1 GiB ≥ 300 MB/s | – | not measured |\n");
        }
        if (kt)
                printf("| `process.kill` (graceMs 0) of %u TERM-ignoring processes, p99 ≤ 20 ms | p50 %.2f ms, p99 %.2f ms, "
                       "max %.2f (N %zu)%s | %s |\n",
                       cfg.kill_tree, kt->s.p50, kt->s.p99, kt->s.max, kt->s.n, killr.bad ? "; some kills failed" : "",
                       bench_verdict(true, kt->s.p99 <= 20 && !killr.bad));
        else
                printf("| `process.kill` of a 200-process tree p99 ≤ 20 ms | – | not measured |\n");
}

static void report(void) {
        printf("Server: `%s serve --socket PATH%s%s%s%s`%s.\n\n", cfg.sbx, cfg.pool >= 0 ? " --pool " : "",
               cfg.pool >= 0 ? pool_txt : "", cfg.audit ? " --audit " : "", cfg.audit ? cfg.audit : "",
               cfg.srv_nice_set ? ", in a session of its own (autogroup nice set)" : "");
        printf("## The daemon: latency (ms)\n\n");
        rows_print(3);
        if (conc.have) {
                printf("\n## The daemon: %u concurrent clients\n\n| | |\n|---|---|\n", conc.clients);
                printf("| sandboxes created | %u of %u, all answered after %.1f ms (p50 %.1f ms, p99 %.1f ms) |\n",
                       conc.created, conc.clients, conc.create_wall_ms, conc.create_lat.p50, conc.create_lat.p99);
                printf("| commands completed and checked | %u of %u, %u errors |\n", conc.completed,
                       conc.clients * conc.cmds, conc.errors);
                printf("| throughput | **%.0f commands/s** (%u in %.2f s) |\n", conc.cmds_per_s, conc.completed,
                       conc.cmd_wall_s);
                printf("| per-command latency | p50 %.2f ms, p99 %.2f ms, max %.2f ms |\n", conc.lat_all.p50,
                       conc.lat_all.p99, conc.lat_all.max);
                printf("| CPU during the commands | %.0f %% of all CPUs busy; the server process itself %.2f CPU-s (%.0f µs per command) |\n",
                       100 * conc.cpu_busy, conc.srv_cpu_s,
                       conc.completed ? 1e6 * conc.srv_cpu_s / conc.completed : 0);
                printf("| the server process during the commands (/proc/PID/schedstat) | on a CPU %.2f s, waiting for a CPU %.2f s, blocked or idle %.2f s, of %.2f s |\n",
                       conc.srv_run_s, conc.srv_wait_s, conc.cmd_wall_s - conc.srv_run_s - conc.srv_wait_s, conc.cmd_wall_s);
                printf("| all connections closed → server has no sandbox | %.1f ms |\n", conc.destroy_ms);
                if (conc.first_error[0])
                        printf("| first error | %s |\n", conc.first_error);
        }

        if (streams[0].have || streams[1].have)
                stream_report();

        printf("\n## The daemon: targets\n\n| Target | Measured | Verdict |\n|---|---|---|\n");
        const Row *rr = row_find("r_rpc"), *rc = row_find("r_capi");
        if (rr && rc)
                printf("| `run` `echo hi` over the socket p50 ≤ 1.2× the C API | %.3f ms / %.3f ms = %.2f× | %s |\n",
                       rr->s.p50, rc->s.p50, rr->s.p50 / rc->s.p50, bench_verdict(true, rr->s.p50 <= 1.2 * rc->s.p50));
        else
                printf("| `run` `echo hi` over the socket p50 ≤ 1.2× the C API | – | not measured |\n");
        const Row *fr = row_find("f_rw");
        if (fr)
                printf("| `files.write` then `files.read` of 1 MiB over the socket ≤ 10 ms (p50) | p50 %.2f ms, p90 %.2f ms, "
                       "p99 %.2f ms, max %.2f ms (N %zu) | %s%s |\n",
                       fr->s.p50, fr->s.p90, fr->s.p99, fr->s.max, fr->s.n, bench_verdict(true, fr->s.p50 <= 10),
                       fr->s.p50 <= 10 && fr->s.p99 > 10 ? " at p50, not at p99" : "");
        else
                printf("| `files.write` then `files.read` of 1 MiB over the socket ≤ 10 ms | – | not measured |\n");
        const Row *pl = row_find("p_load");
        if (pl)
                printf("| `ping` p99 ≤ 5 ms with %u CPU-bound runs | all %zu pings: p50 %.3f ms, p99 %.3f ms, max %.3f ms; "
                       "p99 of each series of %u: %s ms | %s |\n",
                       cfg.busy, pl->s.n, pl->s.p50, pl->s.p99, pl->s.max, cfg.pings, load.reps,
                       bench_verdict(true, pl->s.p99 <= 5));
        else
                printf("| `ping` p99 ≤ 5 ms with CPU-bound runs | – | not measured |\n");
        if (conc.have) {
                bool okc = conc.errors == 0 && conc.completed == conc.clients * conc.cmds;
                printf("| %u clients × %u commands, all complete, zero errors | %u/%u, %u errors; %.0f commands/s, p50 %.2f ms, p99 %.2f ms; %u creates %.0f ms | %s |\n",
                       conc.clients, conc.cmds, conc.completed, conc.clients * conc.cmds, conc.errors, conc.cmds_per_s,
                       conc.lat_all.p50, conc.lat_all.p99, conc.clients, conc.create_wall_ms, bench_verdict(true, okc));
        } else {
                printf("| N clients × M commands, zero errors | – | not measured |\n");
        }
        proc_targets();
        bench_notes_print();
}

/* ------------------------------------------------------------------ main */

static void bench_pause(Conn *ctl) {
        Conn c;
        conn_open(&c, false);
        char sbid[64], params[200], first_bad[300] = "";
        char *l = rpc_call(&c, "sandbox.create", NULL);
        if (resp_is_error(l) || !json_str(l, "sandboxId", sbid, sizeof sbid))
                bench_die("sandbox.create: %.200s", l);
        snprintf(params, sizeof params, "{\"sandboxId\":\"%s\",\"command\":\"yes > /dev/null\"}", sbid);
        l = rpc_call(&c, "process.start", params);
        if (resp_is_error(l))
                bench_die("process.start: %.200s", l);
        snprintf(params, sizeof params, "{\"sandboxId\":\"%s\"}", sbid);
        Samples sp = { 0 }, sr = { 0 };
        unsigned bad = 0;
        bench_progress("z: %u × sandbox.pause + sandbox.resume of a sandbox running `yes > /dev/null`", cfg.pause_n);
        for (unsigned i = 0; i < cfg.pause_n; i++) {
                /* Let it run between cycles, so every pause meets a busy process. */
                sleep_us(2000);
                uint64_t t0 = bench_now_ns();
                l = rpc_call(&c, "sandbox.pause", params);
                double pause_ms = bench_ms_since(t0);
                if (resp_is_error(l) && bad++ == 0)
                        snprintf(first_bad, sizeof first_bad, "pause: %.250s", l);
                t0 = bench_now_ns();
                l = rpc_call(&c, "sandbox.resume", params);
                double resume_ms = bench_ms_since(t0);
                if (resp_is_error(l)) {
                        if (bad++ == 0)
                                snprintf(first_bad, sizeof first_bad, "resume: %.250s", l);
                        continue;
                }
                samples_add(&sp, pause_ms);
                samples_add(&sr, resume_ms);
        }
        conn_close(&c);
        (void)wait_no_sandboxes(ctl, 10000);
        if (first_bad[0])
                bench_note("z: first failure: %s", first_bad);
        Summary xp = summarize(&sp), xr = summarize(&sr);
        row_add("z_pause", "`sandbox.pause` of a sandbox running `yes > /dev/null` (request written → answer read)", &xp,
                "answered once cgroup.events says frozen; %u failed", bad);
        row_add("z_resume", "  then `sandbox.resume` of it", &xr, "%s", "");
        samples_free(&sp);
        samples_free(&sr);
}

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx-bench-rpc [OPTIONS]\n"
                "  --sbx PATH         the sbx binary (default: ../src/cli/sbx next to this program)\n"
                "  --only LETTERS     r (run round trip vs C API), f (files.write + files.read of 1 MiB),\n"
                "                     p (ping under load), c (clients), l (ping during creates and forks),\n"
                "                     s (process.start -> first output), o (a process's output through\n"
                "                     process.stream), k (process.kill of a tree), z (sandbox.pause +\n"
                "                     sandbox.resume); default rfpclsokz\n"
                "  -n, --iterations N r: interleaved iterations (default %u)\n"
                "  --warmup N         r: warm-up iterations (default %u)\n"
                "  --quiet-ms MS      r: pause after each run so the next worker is ready (default %u)\n"
                "  --pings N          p: pings idle and under load (default %u)\n"
                "  --ping-gap-us US   p: pause between pings (default %u)\n"
                "  --busy N           p: sandboxes running the CPU-bound command (default %u)\n"
                "  --busy-cmd CMD     p: the command (default `%s`)\n"
                "  --settle-ms MS     p: wait after the busy runs have started (default %u)\n"
                "  --clients N        c: concurrent clients, one sandbox each (default %u)\n"
                "  --cmds N           c: commands per client (default %u)\n"
                "  --load-reps N      p: series under load, each with fresh sandboxes (default %u)\n"
                "  --no-host-busy     p: skip the comparison with busy loops outside any sandbox\n"
                "  --files-n N        f: write + read round trips (default %u)\n"
                "  --files-bytes N    f: bytes per file (default %zu; the server reads at most 4 MiB at once)\n"
                "  --proc-n N         s: interleaved iterations (default %u)\n"
                "  --proc-warmup N    s: warm-up iterations (default %u)\n"
                "  --stream-mib N     o: MiB the ASCII process writes (default %" PRIu64 "; 0 skips it)\n"
                "  --stream-bin-mib N o: MiB the binary (base64) process writes (default %" PRIu64 "; 0 skips it)\n"
                "  --stream-cmd CMD   o: writes the ASCII MiB, all 'x', instead of head -c N /dev/zero | tr '\\0' x\n"
                "  --kill-n N         k: timed kills of the tree (default %u, after 1 warm-up)\n"
                "  --kill-tree N      k: TERM-ignoring sleeps in the tree (default %u)\n"
                "  --pause-n N        z: pause + resume cycles (default %u)\n"
                "  --pool N           start the server with --pool N (default: the server's default)\n"
                "  --audit PATH       start the server with --audit PATH (its audit log on: compare r_rpc\n"
                "                     with a run without it)\n"
                "  --server-autogroup-nice N  start the server in a session (autogroup) of its own\n"
                "                     with this nice value (-20..19); default: the caller's session\n"
                "  --quick            small N everywhere (a smoke test)\n",
                cfg.warm_n, cfg.warmup, cfg.quiet_ms, cfg.pings, cfg.ping_gap_us, cfg.busy, cfg.busy_cmd,
                cfg.settle_ms, cfg.clients, cfg.cmds, cfg.load_reps, cfg.files_n, cfg.file_bytes, cfg.proc_n,
                cfg.proc_warmup, cfg.stream_bytes >> 20, cfg.stream_bin_bytes >> 20, cfg.kill_n, cfg.kill_tree, cfg.pause_n);
}

int main(int argc, char **argv) {
        bench_die_hook = on_die;
        enum { O_SBX = 256, O_ONLY, O_WARMUP, O_QUIET, O_PINGS, O_GAP, O_BUSY, O_BUSYCMD, O_SETTLE, O_CLIENTS, O_CMDS, O_QUICK, O_NICE, O_NOHOST, O_REPS, O_POOL, O_FILES_N, O_FILES_BYTES,
               O_PROC_N, O_PROC_WARMUP, O_STREAM_MIB, O_STREAM_BIN_MIB, O_STREAM_CMD, O_KILL_N, O_KILL_TREE, O_PAUSE_N, O_AUDIT };
        static const struct option opts[] = {
                { "sbx", required_argument, NULL, O_SBX },
                { "only", required_argument, NULL, O_ONLY },
                { "iterations", required_argument, NULL, 'n' },
                { "warmup", required_argument, NULL, O_WARMUP },
                { "quiet-ms", required_argument, NULL, O_QUIET },
                { "pings", required_argument, NULL, O_PINGS },
                { "ping-gap-us", required_argument, NULL, O_GAP },
                { "busy", required_argument, NULL, O_BUSY },
                { "busy-cmd", required_argument, NULL, O_BUSYCMD },
                { "settle-ms", required_argument, NULL, O_SETTLE },
                { "clients", required_argument, NULL, O_CLIENTS },
                { "cmds", required_argument, NULL, O_CMDS },
                { "quick", no_argument, NULL, O_QUICK },
                { "server-autogroup-nice", required_argument, NULL, O_NICE },
                { "no-host-busy", no_argument, NULL, O_NOHOST },
                { "load-reps", required_argument, NULL, O_REPS },
                { "pool", required_argument, NULL, O_POOL },
                { "audit", required_argument, NULL, O_AUDIT },
                { "files-n", required_argument, NULL, O_FILES_N },
                { "files-bytes", required_argument, NULL, O_FILES_BYTES },
                { "proc-n", required_argument, NULL, O_PROC_N },
                { "proc-warmup", required_argument, NULL, O_PROC_WARMUP },
                { "stream-mib", required_argument, NULL, O_STREAM_MIB },
                { "stream-bin-mib", required_argument, NULL, O_STREAM_BIN_MIB },
                { "stream-cmd", required_argument, NULL, O_STREAM_CMD },
                { "kill-n", required_argument, NULL, O_KILL_N },
                { "kill-tree", required_argument, NULL, O_KILL_TREE },
                { "pause-n", required_argument, NULL, O_PAUSE_N },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        int c;
        while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
                switch (c) {
                case O_SBX: cfg.sbx = optarg; break;
                case O_ONLY: cfg.only = optarg; break;
                case 'n': cfg.warm_n = bench_parse_uint(optarg, "iterations"); break;
                case O_WARMUP: cfg.warmup = bench_parse_uint(optarg, "warmup"); break;
                case O_QUIET: cfg.quiet_ms = bench_parse_uint(optarg, "quiet-ms"); break;
                case O_PINGS: cfg.pings = bench_parse_uint(optarg, "pings"); break;
                case O_GAP: cfg.ping_gap_us = bench_parse_uint(optarg, "ping-gap-us"); break;
                case O_BUSY: cfg.busy = bench_parse_uint(optarg, "busy"); break;
                case O_BUSYCMD: cfg.busy_cmd = optarg; break;
                case O_SETTLE: cfg.settle_ms = bench_parse_uint(optarg, "settle-ms"); break;
                case O_CLIENTS: cfg.clients = bench_parse_uint(optarg, "clients"); break;
                case O_CMDS: cfg.cmds = bench_parse_uint(optarg, "cmds"); break;
                case O_NOHOST: cfg.host_busy = false; break;
                case O_REPS: cfg.load_reps = bench_parse_uint(optarg, "load-reps"); break;
                case O_FILES_N: cfg.files_n = bench_parse_uint(optarg, "files-n"); break;
                case O_FILES_BYTES:
                        cfg.file_bytes = bench_parse_uint(optarg, "files-bytes");
                        if (cfg.file_bytes == 0 || cfg.file_bytes > 4 * 1024 * 1024) {
                                fprintf(stderr, "sbx-bench-rpc: bad files-bytes: %s (1 to 4194304)\n", optarg);
                                return 2;
                        }
                        break;
                case O_PROC_N: cfg.proc_n = bench_parse_uint(optarg, "proc-n"); break;
                case O_PROC_WARMUP: cfg.proc_warmup = bench_parse_uint(optarg, "proc-warmup"); break;
                case O_STREAM_MIB: cfg.stream_bytes = (uint64_t)bench_parse_uint(optarg, "stream-mib") << 20; break;
                case O_STREAM_BIN_MIB:
                        cfg.stream_bin_bytes = (uint64_t)bench_parse_uint(optarg, "stream-bin-mib") << 20;
                        break;
                case O_STREAM_CMD: cfg.stream_cmd = optarg; break;
                case O_KILL_N: cfg.kill_n = bench_parse_uint(optarg, "kill-n"); break;
                case O_PAUSE_N: cfg.pause_n = bench_parse_uint(optarg, "pause-n"); break;
                case O_KILL_TREE: cfg.kill_tree = bench_parse_uint(optarg, "kill-tree"); break;
                case O_AUDIT: cfg.audit = optarg; break;
                case O_POOL:
                        cfg.pool = (int)bench_parse_uint(optarg, "pool");
                        snprintf(pool_txt, sizeof pool_txt, "%d", cfg.pool);
                        break;
                case O_NICE: {
                        char *end;
                        long v = strtol(optarg, &end, 10);
                        if (*end || end == optarg || v < -20 || v > 19) {
                                fprintf(stderr, "sbx-bench-rpc: bad server-autogroup-nice: %s\n", optarg);
                                return 2;
                        }
                        cfg.srv_nice = (int)v;
                        cfg.srv_nice_set = true;
                        break;
                }
                case O_QUICK:
                        cfg.warm_n = 30;
                        cfg.warmup = 3;
                        cfg.pings = 200;
                        cfg.settle_ms = 300;
                        cfg.load_reps = 2;
                        cfg.cmds = 10;
                        cfg.files_n = 10;
                        cfg.proc_n = 30;
                        cfg.proc_warmup = 3;
                        cfg.stream_bytes = 128ULL << 20;
                        cfg.stream_bin_bytes = 32ULL << 20;
                        cfg.kill_n = 3;
                        cfg.pause_n = 20;
                        break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        if (optind < argc || cfg.clients == 0 || cfg.cmds == 0) {
                usage(stderr);
                return 2;
        }
        if (!cfg.sbx)
                cfg.sbx = next_to_self("../src/cli/sbx");
        if (!cfg.sbx)
                cfg.sbx = "build/src/cli/sbx";
        if (access(cfg.sbx, X_OK) < 0) {
                fprintf(stderr, "sbx-bench-rpc: %s: %s (give --sbx PATH)\n", cfg.sbx, strerror(errno));
                return 1;
        }
        static char sbx_real[PATH_MAX];
        if (realpath(cfg.sbx, sbx_real))
                cfg.sbx = sbx_real;
        signal(SIGPIPE, SIG_IGN);
        bench_server_signals();

        uint64_t t0 = bench_now_ns();
        server_start();
        Conn ctl;
        conn_open(&ctl, false);
        if (want('r'))
                bench_roundtrip(&ctl);
        if (want('f'))
                bench_files(&ctl);
        if (want('p'))
                bench_ping_load(&ctl);
        if (want('c'))
                bench_clients(&ctl);
        if (want('l'))
                bench_loop(&ctl);
        if (want('s'))
                bench_proc_start(&ctl);
        if (want('o'))
                bench_stream(&ctl);
        if (want('k'))
                bench_kill(&ctl);
        if (want('z'))
                bench_pause(&ctl);

        /* Shut the server down the way a client would, then make sure it is gone. */
        char *l = rpc_call(&ctl, "kill", NULL);
        if (resp_is_error(l))
                bench_note("kill: %.200s", l);
        conn_close(&ctl);
        int st = 0;
        pid_t w = 0;
        uint64_t tk = bench_now_ns();
        while ((w = waitpid(bench_srv.pid, &st, WNOHANG)) == 0 && bench_ms_between(tk, bench_now_ns()) < 10000)
                sleep_us(5000);
        if (w == bench_srv.pid) {
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                        bench_note("the server ended with status 0x%x", st);
                bench_srv.pid = -1;
        } else {
                bench_note("the server did not exit within 10 s of `kill`");
        }
        bench_server_stop();
        bench_progress("done in %.1f s", bench_ms_between(t0, bench_now_ns()) / 1000);
        report();
        return 0;
}
