/* SPDX-License-Identifier: MIT */
/* sbx-bench: what a command costs through libsbx, next to what it costs without it.
 *
 * Benchmarks (select with --only, letters as in docs/BENCHMARKS.md):
 *   a  warm `echo hi` in an existing session, request to result (C API), interleaved with b/c
 *   b  `bash -c 'echo hi'` spawned directly: posix_spawn + pipe read + waitpid
 *   c  the same inside bwrap --unshare-all (skipped with a note if bwrap fails)
 *   d  just-bash (npm) exec('echo hi'), timed in-process by a node script (--justbash CMD)
 *   e  sandbox create + first result of `echo hi` + destroy
 *   f  kill latency: deadline -> done callback (fires only once the command's cgroup is empty)
 *   g  stdout throughput, 1 GiB, hashed in the output callback and checked byte-exact
 *   h  memory of this process while `yes` floods a run with the default 1 MiB cap
 *
 * Only the public API (sbx/sbx.h) is used. Progress goes to stderr, the Markdown report to
 * stdout. Times are CLOCK_MONOTONIC; percentiles interpolate linearly between ranks. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "common.h"
#include "sbx/sbx.h"

extern char **environ;

const char bench_prog[] = "sbx-bench";

#define MIB (1024ULL * 1024)
#define GIB (1024ULL * 1024 * 1024)

/* ------------------------------------------------------------------ configuration */

typedef struct Config {
        unsigned warm_n;      /* a, b */
        unsigned warmup;      /* warm-up runs before a, b, c */
        unsigned bwrap_n;     /* c (interleaved with the first bwrap_n iterations of a/b) */
        unsigned create_n;    /* e */
        unsigned kill_n;      /* f, each variant */
        unsigned bomb_free_n; /* f, literal fork bomb then sandbox_free */
        unsigned kill_t_ms;   /* f: the deadline T */
        unsigned tp_reps;     /* g: runs per generator with the hashing callback */
        bool tp_count;        /* g: one more run with a callback that only counts */
        uint64_t tp_bytes;    /* g */
        unsigned yes_ms;      /* h */
        unsigned quiet_ms;    /* loop quiet time that means "the session is idle again" */
        const char *justbash; /* d: command printing one JSON object */
        const char *only;
} Config;

static Config cfg = {
        .warm_n = 400, .warmup = 20, .bwrap_n = 200, .create_n = 100, .kill_n = 30,
        .bomb_free_n = 20, .kill_t_ms = 200, .tp_reps = 2, .tp_bytes = GIB, .yes_ms = 5000,
        .quiet_ms = 10, .justbash = NULL, .only = "abcdefgh",
};

static bool want(char letter) { return strchr(cfg.only, letter) != NULL; }

/* ------------------------------------------------------------------ report data */

typedef struct TpRow {
        char gen[48];
        char path[120];
        double gbps;
        uint64_t bytes;
        uint64_t whash;
        char check[320];
} TpRow;

static TpRow tp_rows[24];
static size_t n_tp;

static char mem_lines[16][240];
/* h: VmHWM after the flood minus VmRSS before it; "flat" means under 8 MiB. */
static long mem_growth_kb;
static size_t n_mem;

static void mem_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void mem_line(const char *fmt, ...) {
        if (n_mem >= sizeof mem_lines / sizeof mem_lines[0])
                return;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(mem_lines[n_mem++], sizeof mem_lines[0], fmt, ap);
        va_end(ap);
}

/* ------------------------------------------------------------------ hashing */

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

/* Standard FNV-1a 64, a byte at a time (about 1 GB/s: too slow to sit in the stream). */
static uint64_t fnv1a64(uint64_t h, const uint8_t *d, size_t n) {
        for (size_t i = 0; i < n; i++) {
                h ^= d[i];
                h *= FNV_PRIME;
        }
        return h;
}

/* The streaming check: FNV-1a's step on 64-bit little-endian words in four independent
 * lanes, each step followed by a rotation so high bits reach low ones. Every step is a
 * bijection of the lane, so any one changed word changes the result; lanes, tail and length
 * are folded together at the end. Not the standard FNV-1a: it runs at memory speed. */
typedef struct WHash {
        uint64_t lane[4];
        uint8_t tail[32];
        size_t tail_len;
        uint64_t total;
} WHash;

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static void wh_init(WHash *h) {
        *h = (WHash){ 0 };
        for (int i = 0; i < 4; i++)
                h->lane[i] = FNV_OFFSET ^ ((uint64_t)(i + 1) * 0x9e3779b97f4a7c15ULL);
}

static inline void wh_block(WHash *h, const uint8_t *p) {
        for (int i = 0; i < 4; i++) {
                uint64_t w;
                memcpy(&w, p + 8 * i, 8);
                h->lane[i] = rotl64((h->lane[i] ^ w) * FNV_PRIME, 29);
        }
}

static void wh_update(WHash *h, const uint8_t *d, size_t n) {
        h->total += n;
        if (h->tail_len) {
                size_t take = 32 - h->tail_len < n ? 32 - h->tail_len : n;
                memcpy(h->tail + h->tail_len, d, take);
                h->tail_len += take;
                d += take;
                n -= take;
                if (h->tail_len < 32)
                        return;
                wh_block(h, h->tail);
                h->tail_len = 0;
        }
        while (n >= 32) {
                wh_block(h, d);
                d += 32;
                n -= 32;
        }
        memcpy(h->tail, d, n);
        h->tail_len = n;
}

static uint64_t wh_final(const WHash *h) {
        uint64_t r = fnv1a64(FNV_OFFSET, h->tail, h->tail_len);
        for (int i = 0; i < 4; i++)
                r = rotl64((r ^ h->lane[i]) * FNV_PRIME, 29);
        r ^= h->total;
        /* splitmix64's finaliser */
        r = (r ^ (r >> 30)) * 0xbf58476d1ce4e5b9ULL;
        r = (r ^ (r >> 27)) * 0x94d049bb133111ebULL;
        return r ^ (r >> 31);
}

/* ------------------------------------------------------------------ /proc/self/status */

typedef struct Mem {
        long rss_kb, hwm_kb;
} Mem;

static Mem mem_now(void) {
        Mem m = { -1, -1 };
        FILE *f = fopen("/proc/self/status", "re");
        if (!f)
                return m;
        char line[256];
        while (fgets(line, sizeof line, f)) {
                if (strncmp(line, "VmRSS:", 6) == 0)
                        m.rss_kb = strtol(line + 6, NULL, 10);
                else if (strncmp(line, "VmHWM:", 6) == 0)
                        m.hwm_kb = strtol(line + 6, NULL, 10);
        }
        fclose(f);
        return m;
}

/* Resets VmHWM to the current RSS (proc(5): clear_refs, value 5). */
static bool hwm_reset(void) {
        int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        bool ok = write(fd, "5", 1) == 1;
        close(fd);
        return ok;
}

/* ------------------------------------------------------------------ direct spawns */

typedef void (*ChunkFn)(void *ud, const uint8_t *d, size_t n);

typedef struct SpawnOut {
        uint8_t head[64]; /* the first bytes of stdout */
        size_t head_len;
        uint64_t total;
        int status; /* waitpid status, or -1 */
} SpawnOut;

/* Spawns argv (absolute path) with stdin on /dev/null and stdout on a pipe, reads the pipe to
 * EOF (every chunk to fn when given), reaps the child. pipe_size 0 keeps the default. */
static int spawn_read(char *const argv[], int pipe_size, ChunkFn fn, void *ud, SpawnOut *out) {
        static uint8_t buf[256 * 1024];
        int p[2];
        posix_spawn_file_actions_t fa;
        pid_t pid;

        *out = (SpawnOut){ .status = -1 };
        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        if (pipe_size > 0)
                (void)fcntl(p[0], F_SETPIPE_SZ, pipe_size);
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_adddup2(&fa, p[1], 1);
        int r = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        close(p[1]);
        if (r != 0) {
                close(p[0]);
                return -r;
        }
        for (;;) {
                ssize_t n = read(p[0], buf, sizeof buf);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                if (out->head_len < sizeof out->head) {
                        size_t take = sizeof out->head - out->head_len;
                        if (take > (size_t)n)
                                take = (size_t)n;
                        memcpy(out->head + out->head_len, buf, take);
                        out->head_len += take;
                }
                out->total += (uint64_t)n;
                if (fn)
                        fn(ud, buf, (size_t)n);
        }
        close(p[0]);
        int ws;
        while (waitpid(pid, &ws, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        out->status = ws;
        return 0;
}

static bool spawn_said_hi(const SpawnOut *o) {
        return o->status == 0 && o->total == 3 && memcmp(o->head, "hi\n", 3) == 0;
}

/* ------------------------------------------------------------------ sbx runs */

typedef struct Run {
        bool done;
        uint64_t t_submit, t_done;
        int exit_code;
        SbxErrorClass ec;
        size_t out_len, err_len;
        bool out_trunc;
        uint64_t exec_us;
        bool said_hi;
        /* streaming */
        bool stream_hash;
        WHash wh;
        uint64_t streamed;
        /* a standard FNV-1a 64 of the whole result buffer, computed after t_done */
        bool fnv_result;
        uint64_t fnv;
        uint64_t result_whash;
        char err_head[160];
} Run;

static void run_output(void *ud, SbxStream st, const uint8_t *d, size_t n) {
        Run *r = ud;
        if (st != SBX_STDOUT)
                return;
        r->streamed += n;
        if (r->stream_hash)
                wh_update(&r->wh, d, n);
}

static void run_done(void *ud, const SbxResult *res) {
        Run *r = ud;
        r->t_done = bench_now_ns();
        r->done = true;
        r->exit_code = res->exit_code;
        r->ec = res->error_class;
        r->out_len = res->stdout_len;
        r->err_len = res->stderr_len;
        r->out_trunc = res->stdout_truncated;
        r->exec_us = res->exec_time_us;
        r->said_hi = res->stdout_len == 3 && memcmp(res->stdout_data, "hi\n", 3) == 0;
        size_t k = res->stderr_len < sizeof r->err_head - 1 ? res->stderr_len : sizeof r->err_head - 1;
        memcpy(r->err_head, res->stderr_data, k);
        r->err_head[k] = 0;
        for (size_t i = 0; i < k; i++)
                if (r->err_head[i] == '\n')
                        r->err_head[i] = ' ';
        if (r->fnv_result) {
                r->fnv = fnv1a64(FNV_OFFSET, res->stdout_data, res->stdout_len);
                WHash h;
                wh_init(&h);
                wh_update(&h, res->stdout_data, res->stdout_len);
                r->result_whash = wh_final(&h);
        }
}

static int run_submit(SbxSession *s, const char *cmd, uint64_t timeout_ms, bool stream, Run *r) {
        SbxRunOptions o = { .command = cmd, .command_len = strlen(cmd), .timeout_ms = timeout_ms };
        if (r->stream_hash)
                wh_init(&r->wh);
        r->t_submit = bench_now_ns();
        return sbx_session_run(s, &o, stream ? run_output : NULL, run_done, r, NULL);
}

static int run_wait(SbxContext *ctx, Run *r) {
        while (!r->done) {
                int k = sbx_context_run_once(ctx, -1);
                if (k < 0)
                        return k;
        }
        return 0;
}

/* Submits, waits, returns 0 or -errno; r has the result. */
static int run_cmd(SbxContext *ctx, SbxSession *s, const char *cmd, uint64_t timeout_ms, Run *r) {
        int k = run_submit(s, cmd, timeout_ms, false, r);
        return k < 0 ? k : run_wait(ctx, r);
}

static double run_ms(const Run *r) { return (double)(r->t_done - r->t_submit) / 1e6; }

static SbxSandbox *sandbox_new_or_die(SbxContext *ctx, const SbxSandboxOptions *o) {
        SbxSandbox *sb = NULL;
        int r = sbx_sandbox_new(ctx, o, &sb);
        if (r < 0)
                bench_die("cannot create a sandbox: %s", sbx_context_last_error(ctx));
        return sb;
}

static SbxSession *session_or_die(SbxSandbox *sb) {
        SbxSession *s = NULL;
        int r = sbx_session_get(sb, NULL, &s);
        if (r < 0)
                bench_die("cannot start a session: %s", strerror(-r));
        return s;
}

/* ------------------------------------------------------------------ a, b, c */

static char *bash_argv[] = { "/bin/bash", "-c", "echo hi", NULL };
static char *bwrap_argv[] = {
        "/usr/bin/bwrap", "--unshare-all", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
        "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc",
        "--dev", "/dev", "bash", "-c", "echo hi", NULL,
};

static void bench_warm(SbxContext *ctx) {
        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so);
        SbxSandbox *sb = sandbox_new_or_die(ctx, &so);
        SbxSession *s = session_or_die(sb);
        Samples sa = { 0 }, sa_exec = { 0 }, sb2b = { 0 }, sbash = { 0 }, sbw = { 0 };
        unsigned bad_sbx = 0, bad_bash = 0, bad_bwrap = 0;
        bool do_bash = want('b'), do_bwrap = want('c') && cfg.bwrap_n > 0;
        SpawnOut so_out;

        if (do_bwrap) {
                int r = access(bwrap_argv[0], X_OK) == 0 ? spawn_read(bwrap_argv, 0, NULL, NULL, &so_out) : -ENOENT;
                if (r < 0 || !spawn_said_hi(&so_out)) {
                        bench_note("bwrap skipped: %s", r < 0 ? strerror(-r) : "it did not print 'hi' with exit 0 (see stderr above)");
                        row_add("c", "`bwrap --unshare-all ... bash -c 'echo hi'`", NULL, "skipped: bwrap failed");
                        do_bwrap = false;
                }
        }

        bench_progress("a/b/c: %u warm-up runs", cfg.warmup);
        for (unsigned i = 0; i < cfg.warmup; i++) {
                Run r = { 0 };
                (void)run_cmd(ctx, s, "echo hi", 0, &r);
                loop_quiet(ctx, (int)cfg.quiet_ms);
                if (do_bash)
                        (void)spawn_read(bash_argv, 0, NULL, NULL, &so_out);
                if (do_bwrap && i < 3)
                        (void)spawn_read(bwrap_argv, 0, NULL, NULL, &so_out);
        }

        bench_progress("a/b/c: %u interleaved iterations (bwrap in the first %u)", cfg.warm_n,
                 do_bwrap ? cfg.bwrap_n : 0);
        for (unsigned i = 0; i < cfg.warm_n; i++) {
                /* Rotate the order so that neither side always follows the other. */
                for (unsigned k = 0; k < 3; k++) {
                        unsigned which = (i + k) % 3;
                        if (which == 0) {
                                Run r = { 0 };
                                if (run_cmd(ctx, s, "echo hi", 0, &r) < 0 || !r.said_hi || r.exit_code != 0)
                                        bad_sbx++;
                                else {
                                        samples_add(&sa, run_ms(&r));
                                        samples_add(&sa_exec, (double)r.exec_us / 1e3);
                                }
                                loop_quiet(ctx, (int)cfg.quiet_ms);
                        } else if (which == 1 && do_bash) {
                                uint64_t t0 = bench_now_ns();
                                int rr = spawn_read(bash_argv, 0, NULL, NULL, &so_out);
                                double ms = bench_ms_since(t0);
                                if (rr < 0 || !spawn_said_hi(&so_out))
                                        bad_bash++;
                                else
                                        samples_add(&sbash, ms);
                        } else if (which == 2 && do_bwrap && i < cfg.bwrap_n) {
                                uint64_t t0 = bench_now_ns();
                                int rr = spawn_read(bwrap_argv, 0, NULL, NULL, &so_out);
                                double ms = bench_ms_since(t0);
                                if (rr < 0 || !spawn_said_hi(&so_out))
                                        bad_bwrap++;
                                else
                                        samples_add(&sbw, ms);
                        }
                }
        }

        /* Back-to-back: the next command is submitted the moment the previous result is in,
         * so it also waits for the session's next worker (fork + READY + cgroup move). */
        bench_progress("a: %u back-to-back runs", cfg.warm_n);
        unsigned bad_b2b = 0;
        for (unsigned i = 0; i < cfg.warm_n; i++) {
                Run r = { 0 };
                if (run_cmd(ctx, s, "echo hi", 0, &r) < 0 || !r.said_hi)
                        bad_b2b++;
                else
                        samples_add(&sb2b, run_ms(&r));
        }
        loop_quiet(ctx, (int)cfg.quiet_ms);

        Summary xa = summarize(&sa), xe = summarize(&sa_exec), xb = summarize(&sbash);
        row_add("a", "sbx warm `echo hi`, idle session (C API, submit → done callback)", &xa,
                "interleaved with b/c; %u failed", bad_sbx);
        row_add("a_exec", "  same runs, SbxResult.exec_time_us", &xe, "library's own clock (from dequeue)");
        if (do_bash)
                row_add("b", "`bash -c 'echo hi'` (posix_spawn + pipe read + waitpid)", &xb,
                        "interleaved with a/c; %u failed", bad_bash);
        if (do_bwrap) {
                Summary xw = summarize(&sbw);
                row_add("c", "`bwrap --unshare-all --ro-bind /usr /usr ... bash -c 'echo hi'`", &xw,
                        "interleaved with a/b; %u failed", bad_bwrap);
        }
        Summary x2 = summarize(&sb2b);
        row_add("a_b2b", "sbx warm `echo hi`, back-to-back (next submitted as soon as the previous result is in)", &x2,
                "includes waiting for the next worker; %u failed", bad_b2b);
        samples_free(&sa);
        samples_free(&sa_exec);
        samples_free(&sb2b);
        samples_free(&sbash);
        samples_free(&sbw);
        sbx_sandbox_free(sb);
}

/* ------------------------------------------------------------------ d: just-bash */

static bool json_num(const char *js, const char *key, double *ret) {
        char pat[64];
        snprintf(pat, sizeof pat, "\"%s\":", key);
        const char *p = strstr(js, pat);
        if (!p)
                return false;
        char *end;
        double v = strtod(p + strlen(pat), &end);
        if (end == p + strlen(pat))
                return false;
        *ret = v;
        return true;
}

static void bench_justbash(void) {
        if (!cfg.justbash) {
                bench_note("just-bash skipped: no --justbash command given (bench/run.sh passes one)");
                row_add("d", "just-bash `exec('echo hi')`", NULL, "skipped: not run");
                return;
        }
        bench_progress("d: %s", cfg.justbash);
        FILE *f = popen(cfg.justbash, "re");
        char js[4096] = "";
        size_t n = f ? fread(js, 1, sizeof js - 1, f) : 0;
        js[n] = 0;
        int st = f ? pclose(f) : -1;
        Summary s = { 0 };
        double v;
        if (st != 0 || !json_num(js, "n", &v)) {
                bench_note("just-bash skipped: `%s` failed (status %d): %.200s", cfg.justbash, st, js);
                row_add("d", "just-bash `exec('echo hi')`", NULL, "skipped: the node script failed");
                return;
        }
        s.n = (size_t)v;
        (void)json_num(js, "p50", &s.p50);
        (void)json_num(js, "p90", &s.p90);
        (void)json_num(js, "p99", &s.p99);
        (void)json_num(js, "mean", &s.mean);
        (void)json_num(js, "min", &s.min);
        (void)json_num(js, "max", &s.max);
        char ver[32] = "?";
        const char *p = strstr(js, "\"version\":\"");
        if (p)
                sscanf(p + 11, "%31[^\"]", ver);
        row_add("d", "just-bash `exec('echo hi')` (in-process, node)", &s,
                "just-bash %s, one Bash instance, timed inside node (not interleaved)", ver);
}

/* ------------------------------------------------------------------ e */

/* Turns the loop for ms milliseconds, whatever happens. */
static void spin(SbxContext *ctx, int ms) {
        uint64_t end = bench_now_ns() + (uint64_t)ms * 1000000ULL;
        while (bench_now_ns() < end)
                (void)sbx_context_run_once(ctx, 5);
}

static void bench_create(SbxContext *ctx) {
        Samples tot = { 0 }, cr = { 0 }, first = { 0 }, de = { 0 };
        unsigned bad = 0;
        bench_progress("e: create + first result + destroy, %u times (+3 warm-up)", cfg.create_n);
        for (unsigned i = 0; i < cfg.create_n + 3; i++) {
                SbxSandboxOptions so;
                sbx_sandbox_options_init(&so);
                SbxSandbox *sb = NULL;
                SbxSession *s = NULL;
                uint64_t t0 = bench_now_ns();
                int r = sbx_sandbox_new(ctx, &so, &sb);
                uint64_t t1 = bench_now_ns();
                if (r < 0) {
                        bad++;
                        continue;
                }
                r = sbx_session_get(sb, NULL, &s);
                Run run = { 0 };
                if (r >= 0)
                        r = run_cmd(ctx, s, "echo hi", 0, &run);
                uint64_t t2 = bench_now_ns();
                sbx_sandbox_free(sb);
                uint64_t t3 = bench_now_ns();
                if (r < 0 || !run.said_hi) {
                        bad++;
                        continue;
                }
                if (i < 3)
                        continue;
                samples_add(&tot, (double)(t3 - t0) / 1e6);
                samples_add(&cr, (double)(t1 - t0) / 1e6);
                samples_add(&first, (double)(t2 - t1) / 1e6);
                samples_add(&de, (double)(t3 - t2) / 1e6);
        }
        /* The session's share alone: a new named session in a sandbox that already exists. */
        Samples sess = { 0 };
        {
                SbxSandboxOptions so;
                sbx_sandbox_options_init(&so);
                SbxSandbox *sb = sandbox_new_or_die(ctx, &so);
                for (unsigned i = 0; i < cfg.create_n + 3; i++) {
                        char name[32];
                        snprintf(name, sizeof name, "s%u", i);
                        SbxSession *s = NULL;
                        Run run = { 0 };
                        uint64_t t0 = bench_now_ns();
                        int r = sbx_session_get(sb, name, &s);
                        if (r >= 0)
                                r = run_cmd(ctx, s, "echo hi", 0, &run);
                        double ms = bench_ms_since(t0);
                        if (s)
                                sbx_session_free(s);
                        if (r < 0 || !run.said_hi)
                                bad++;
                        else if (i >= 3)
                                samples_add(&sess, ms);
                }
                sbx_sandbox_free(sb);
        }
        /* With a pool of prepared sandboxes (what `sbx serve --socket` runs with): creates
         * are spaced by 60 ms of untimed loop turns, the pace of an agent, not a stress test,
         * so the loop has refilled the pool before the next one. */
        Samples pool = { 0 };
        sbx_context_set_pool(ctx, 2);
        spin(ctx, 500);
        for (unsigned i = 0; i < cfg.create_n + 3; i++) {
                SbxSandboxOptions so;
                sbx_sandbox_options_init(&so);
                SbxSandbox *sb = NULL;
                SbxSession *s = NULL;
                Run run = { 0 };
                uint64_t t0 = bench_now_ns();
                int r = sbx_sandbox_new(ctx, &so, &sb);
                if (r >= 0)
                        r = sbx_session_get(sb, NULL, &s);
                if (r >= 0)
                        r = run_cmd(ctx, s, "echo hi", 0, &run);
                if (sb)
                        sbx_sandbox_free(sb);
                double ms = bench_ms_since(t0);
                if (r < 0 || !run.said_hi)
                        bad++;
                else if (i >= 3)
                        samples_add(&pool, ms);
                spin(ctx, 60);
        }
        sbx_context_set_pool(ctx, 0);
        spin(ctx, 200);
        Summary a = summarize(&tot), b = summarize(&cr), c = summarize(&first), d = summarize(&de);
        Summary x2 = summarize(&sess), xp = summarize(&pool);
        row_add("e", "sbx create + first `echo hi` result + destroy", &a, "%u failed", bad);
        row_add("e_new", "  sbx_sandbox_new", &b, "%s", "");
        row_add("e_first", "  sbx_session_get + first run → result", &c, "%s", "");
        row_add("e_free", "  sbx_sandbox_free", &d, "%s", "");
        row_add("e_sess", "  for comparison: new session in an existing sandbox + first result", &x2,
                "sbx_session_get(name) → done; the session's share of e_first");
        row_add("e_pool", "sbx create + first result + destroy, pool of 2 (sbx_context_set_pool)", &xp,
                "creates 60 ms apart; the loop refills the pool in between");
        samples_free(&pool);
        samples_free(&tot);
        samples_free(&cr);
        samples_free(&first);
        samples_free(&de);
        samples_free(&sess);
}

/* ------------------------------------------------------------------ f */

static void bench_kill_one(SbxContext *ctx, const char *key, const char *name, const char *cmd) {
        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so);
        so.limits.pids = 256;
        SbxSandbox *sb = sandbox_new_or_die(ctx, &so);
        SbxSession *s = session_or_die(sb);
        Samples lat = { 0 }, lat_exec = { 0 };
        unsigned bad = 0;
        Run w = { 0 };
        (void)run_cmd(ctx, s, "echo hi", 0, &w);
        loop_quiet(ctx, (int)cfg.quiet_ms);
        bench_progress("f: %s, %u runs with T = %u ms", name, cfg.kill_n, cfg.kill_t_ms);
        for (unsigned i = 0; i < cfg.kill_n; i++) {
                Run r = { 0 };
                if (run_cmd(ctx, s, cmd, cfg.kill_t_ms, &r) < 0 || r.ec != SBX_ERROR_TIMEOUT) {
                        if (bad++ == 0)
                                bench_note("%s: run %u ended with exit %d class %s, not TIMEOUT", name, i,
                                     r.exit_code, sbx_error_class_name(r.ec) ? sbx_error_class_name(r.ec) : "NONE");
                } else {
                        samples_add(&lat, run_ms(&r) - (double)cfg.kill_t_ms);
                        samples_add(&lat_exec, (double)r.exec_us / 1e3 - (double)cfg.kill_t_ms);
                }
                /* The holder forks a fresh worker; wait until it is ready. */
                loop_quiet(ctx, (int)cfg.quiet_ms);
        }
        /* The session must still work afterwards. */
        Run after = { 0 };
        (void)run_cmd(ctx, s, "echo hi", 0, &after);
        Summary x = summarize(&lat);
        row_add(key, name, &x, "(submit→done) − T, T = %u ms; %u not TIMEOUT; session afterwards: %s", cfg.kill_t_ms,
                bad, after.said_hi ? "ok" : "BROKEN");
        samples_free(&lat);
        samples_free(&lat_exec);
        sbx_sandbox_free(sb);
}

/* The fork bomb exactly as written, `f(){ f|f & }; f`, puts everything in the background: the
 * command itself ends at once with exit 0 and the bomb goes on in the retired command cgroup,
 * out of reach of the deadline. What ends it is sbx_sandbox_free: timed here after T. */
static void bench_bomb_free(SbxContext *ctx) {
        Samples fr = { 0 };
        unsigned ended_fast = 0, later_fail = 0;
        double cmd_ms_max = 0;
        bench_progress("f: literal fork bomb, then sbx_sandbox_free, %u times", cfg.bomb_free_n);
        for (unsigned i = 0; i < cfg.bomb_free_n; i++) {
                SbxSandboxOptions so;
                sbx_sandbox_options_init(&so);
                so.limits.pids = 256;
                SbxSandbox *sb = sandbox_new_or_die(ctx, &so);
                SbxSession *s = session_or_die(sb);
                Run r = { 0 };
                (void)run_cmd(ctx, s, "f(){ f|f & }; f", cfg.kill_t_ms, &r);
                if (r.ec == SBX_ERROR_NONE && r.exit_code == 0)
                        ended_fast++;
                if (run_ms(&r) > cmd_ms_max)
                        cmd_ms_max = run_ms(&r);
                /* Let it run into the pids limit until the deadline T would have passed. */
                uint64_t until = r.t_submit + (uint64_t)cfg.kill_t_ms * 1000000ULL;
                while (bench_now_ns() < until)
                        (void)sbx_context_run_once(ctx, 5);
                if (i == 0) {
                        /* Does the session still run commands that need a process? */
                        Run t = { 0 };
                        (void)run_cmd(ctx, s, "/bin/true", 1000, &t);
                        if (t.ec != SBX_ERROR_NONE)
                                later_fail++;
                }
                uint64_t t0 = bench_now_ns();
                sbx_sandbox_free(sb);
                samples_add(&fr, bench_ms_since(t0));
        }
        Summary x = summarize(&fr);
        row_add("f_bomb_free", "literal `f(){ f|f & }; f`: sbx_sandbox_free with the bomb at the pids limit", &x,
                "the command itself ended with exit 0 in %u/%u runs (max %.1f ms): the bomb outlives it", ended_fast,
                cfg.bomb_free_n, cmd_ms_max);
        if (ended_fast)
                bench_note("the literal fork bomb `f(){ f|f & }; f` is not stopped at its deadline: the command returns at "
                     "once (exit 0) and the bomb keeps running in the background cgroup until the sandbox is freed%s",
                     later_fail ? "; a following `/bin/true` (1 s timeout) timed out because the pids limit is full" : "");
        samples_free(&fr);
}

static void bench_kill(SbxContext *ctx) {
        bench_kill_one(ctx, "f_busy", "kill: `sleep 100 & setsid sleep 100 & while :; do :; done`",
                       "sleep 100 & setsid sleep 100 & while :; do :; done");
        bench_kill_one(ctx, "f_bomb", "kill: fork bomb held in the foreground `f(){ f|f & }; f; while :; do :; done` (pids 256)",
                       "f(){ f|f & }; f; while :; do :; done");
        bench_bomb_free(ctx);
}

/* ------------------------------------------------------------------ g */

typedef struct Gen {
        const char *name;
        char cmd[512];
} Gen;

static void whash_chunk(void *ud, const uint8_t *d, size_t n) { wh_update(ud, d, n); }

typedef struct FnvState {
        uint64_t h;
} FnvState;

static void fnv_chunk(void *ud, const uint8_t *d, size_t n) {
        FnvState *f = ud;
        f->h = fnv1a64(f->h, d, n);
}

static double gbps(uint64_t bytes, double ms) { return ms > 0 ? (double)bytes / (ms * 1e6) : 0; }

static void bench_throughput(SbxContext *ctx) {
        uint64_t n = cfg.tp_bytes;
        Gen gens[3] = {
                { .name = "zeros, `head -c`" },
                { .name = "zeros, `dd bs=1M`" },
                { .name = "PRNG 64 KiB block, `python3`" },
        };
        snprintf(gens[0].cmd, sizeof gens[0].cmd, "head -c %" PRIu64 " /dev/zero", n);
        snprintf(gens[1].cmd, sizeof gens[1].cmd, "dd if=/dev/zero bs=1048576 count=%" PRIu64 " status=none",
                 (uint64_t)(n / MIB));
        snprintf(gens[2].cmd, sizeof gens[2].cmd,
                 "/usr/bin/python3 -c 'import random,sys; b=random.Random(20261122).randbytes(65536); "
                 "n=%" PRIu64 "; w=sys.stdout.buffer.write; [w(b) for _ in range(n//65536)]; w(b[:n%%65536])'",
                 n);
        if (n % MIB)
                bench_note("throughput size %" PRIu64 " is not a multiple of 1 MiB: the dd generator writes less", n);

        /* How fast the streaming hash is on its own, over memory. */
        {
                size_t bl = 64 * MIB;
                uint8_t *m = malloc(bl);
                if (m) {
                        for (size_t i = 0; i < bl; i++)
                                m[i] = (uint8_t)(i * 131 + (i >> 9));
                        WHash h;
                        wh_init(&h);
                        uint64_t t0 = bench_now_ns();
                        for (int k = 0; k < 8; k++)
                                wh_update(&h, m, bl);
                        double ms = bench_ms_since(t0);
                        volatile uint64_t sink = wh_final(&h);
                        (void)sink;
                        TpRow *t = &tp_rows[n_tp++];
                        snprintf(t->gen, sizeof t->gen, "(memory)");
                        snprintf(t->path, sizeof t->path, "streaming hash alone, 512 MiB from RAM");
                        t->gbps = gbps(8 * bl, ms);
                        t->bytes = 8 * bl;
                        snprintf(t->check, sizeof t->check, "the check's own ceiling");
                        free(m);
                }
        }

        /* What the machine charges for memory touched for the first time: the result buffer of
         * a run whose cap is above 1 GiB grows into fresh pages. */
        {
                size_t bl = 256 * MIB;
                uint64_t t0 = bench_now_ns();
                uint8_t *m = mmap(NULL, bl, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (m != MAP_FAILED) {
                        memset(m, 1, bl);
                        double ms = bench_ms_since(t0);
                        uint64_t t1 = bench_now_ns();
                        memset(m, 2, bl);
                        double ms2 = bench_ms_since(t1);
                        munmap(m, bl);
                        TpRow *t = &tp_rows[n_tp++];
                        snprintf(t->gen, sizeof t->gen, "(memory)");
                        snprintf(t->path, sizeof t->path, "first touch of fresh anonymous memory (mmap + memset), 256 MiB");
                        t->gbps = gbps(bl, ms);
                        t->bytes = bl;
                        snprintf(t->check, sizeof t->check, "second pass over the same pages: %.2f GB/s", gbps(bl, ms2));
                }
        }

        /* With the default 1 MiB cap: the result keeps 1 MiB, on_output still gets every byte
         * (the cap bounds only the result), hashed and checked against the reference below. */
        SbxSandboxOptions dso;
        sbx_sandbox_options_init(&dso);
        SbxSandbox *dsb = sandbox_new_or_die(ctx, &dso);
        SbxSession *ds = session_or_die(dsb);
        {
                Run w = { 0 };
                (void)run_cmd(ctx, ds, "echo hi", 0, &w);
                loop_quiet(ctx, (int)cfg.quiet_ms);
        }

        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so);
        so.limits.stdout_bytes = 2 * GIB; /* above 1 GiB: every byte is kept and streamed */
        SbxSandbox *sb = sandbox_new_or_die(ctx, &so);
        SbxSession *s = session_or_die(sb);
        Run w = { 0 };
        (void)run_cmd(ctx, s, "echo hi", 0, &w);
        loop_quiet(ctx, (int)cfg.quiet_ms);

        for (size_t g = 0; g < sizeof gens / sizeof gens[0]; g++) {
                Gen *gen = &gens[g];
                char *argv[] = { "/bin/bash", "-c", gen->cmd, NULL };
                SpawnOut out;
                /* Reference outside the sandbox: the same command into a pipe of sbx's size. */
                bench_progress("g: %s: reference outside the sandbox", gen->name);
                WHash ref;
                wh_init(&ref);
                uint64_t t0 = bench_now_ns();
                int rr = spawn_read(argv, (int)MIB, whash_chunk, &ref, &out);
                double ref_ms = bench_ms_since(t0);
                uint64_t ref_wh = wh_final(&ref), ref_bytes = out.total;
                FnvState fs = { FNV_OFFSET };
                SpawnOut out2;
                if (rr == 0)
                        rr = spawn_read(argv, (int)MIB, fnv_chunk, &fs, &out2);
                if (rr < 0 || out.status != 0) {
                        bench_note("throughput generator '%s' failed outside the sandbox: skipped", gen->name);
                        continue;
                }
                TpRow *t = &tp_rows[n_tp++];
                snprintf(t->gen, sizeof t->gen, "%s", gen->name);
                snprintf(t->path, sizeof t->path, "outside the sandbox: bash -c → 1 MiB pipe → this process (hashing)");
                t->gbps = gbps(ref_bytes, ref_ms);
                t->bytes = ref_bytes;
                t->whash = ref_wh;
                snprintf(t->check, sizeof t->check, "reference; FNV-1a-64 %016" PRIx64, fs.h);

                {
                        Samples sd = { 0 };
                        unsigned ok = 0, done = 0;
                        for (unsigned rep = 0; rep < cfg.tp_reps; rep++) {
                                bench_progress("g: %s: sbx run with the default 1 MiB cap, %u/%u (hashing on_output)",
                                               gen->name, rep + 1, cfg.tp_reps);
                                Run r = { .stream_hash = true };
                                int k = run_submit(ds, gen->cmd, 120000, true, &r);
                                if (k >= 0)
                                        k = run_wait(ctx, &r);
                                loop_quiet(ctx, (int)cfg.quiet_ms);
                                if (k < 0 || r.exit_code != 0)
                                        continue;
                                done++;
                                ok += r.streamed == ref_bytes && wh_final(&r.wh) == ref_wh && r.out_len == MIB &&
                                      r.out_trunc;
                                samples_add(&sd, gbps(r.streamed, run_ms(&r)));
                        }
                        if (sd.n) {
                                Summary x = summarize(&sd);
                                TpRow *d = &tp_rows[n_tp++];
                                snprintf(d->gen, sizeof d->gen, "%s", gen->name);
                                snprintf(d->path, sizeof d->path,
                                         "sbx, default 1 MiB cap, hashing on_output (every byte streamed), median of %zu",
                                         sd.n);
                                d->gbps = x.p50;
                                d->bytes = ref_bytes;
                                snprintf(d->check, sizeof d->check,
                                         "%s: stream length and hash = reference, result 1 MiB and truncated: %u/%u",
                                         ok == done && done == cfg.tp_reps ? "byte-exact" : "NOT byte-exact", ok, cfg.tp_reps);
                        }
                        samples_free(&sd);
                }

                Samples sp = { 0 };
                unsigned runs = cfg.tp_reps + (cfg.tp_count ? 1 : 0), failed = 0, hashed = 0, hash_ok = 0;
                unsigned len_ok = 0, fnv_done = 0, fnv_ok = 0;
                for (unsigned rep = 0; rep < runs; rep++) {
                        bool hashing = rep < cfg.tp_reps;
                        bench_progress("g: %s: sbx run %u/%u (%s callback)", gen->name, rep + 1, runs,
                                 hashing ? "hashing" : "counting");
                        Run r = { .stream_hash = hashing, .fnv_result = rep == 0 };
                        int k = run_submit(s, gen->cmd, 120000, true, &r);
                        if (k >= 0)
                                k = run_wait(ctx, &r);
                        loop_quiet(ctx, (int)cfg.quiet_ms);
                        if (k < 0 || r.exit_code != 0) {
                                bench_note("throughput '%s' in sbx: exit %d class %s: %s", gen->name, r.exit_code,
                                     sbx_error_class_name(r.ec) ? sbx_error_class_name(r.ec) : "NONE", r.err_head);
                                failed++;
                                continue;
                        }
                        double ms = run_ms(&r);
                        /* Every byte streamed and kept, none dropped. */
                        bool lok = r.streamed == ref_bytes && r.out_len == ref_bytes && !r.out_trunc;
                        len_ok += lok;
                        if (hashing) {
                                hashed++;
                                hash_ok += wh_final(&r.wh) == ref_wh;
                                samples_add(&sp, gbps(r.streamed, ms));
                        } else {
                                TpRow *c = &tp_rows[n_tp++];
                                snprintf(c->gen, sizeof c->gen, "%s", gen->name);
                                snprintf(c->path, sizeof c->path, "sbx, counting callback (no hash), 1 run");
                                c->gbps = gbps(r.streamed, ms);
                                c->bytes = r.streamed;
                                snprintf(c->check, sizeof c->check, "length %s", lok ? "ok" : "WRONG");
                        }
                        if (r.fnv_result) {
                                fnv_done++;
                                fnv_ok += r.fnv == fs.h && r.result_whash == ref_wh;
                        }
                }
                if (sp.n) {
                        Summary x = summarize(&sp);
                        TpRow *c = &tp_rows[n_tp++];
                        bool exact = !failed && len_ok == runs && hash_ok == hashed && fnv_ok == fnv_done;
                        snprintf(c->gen, sizeof c->gen, "%s", gen->name);
                        snprintf(c->path, sizeof c->path, "sbx, hashing on_output callback, cap 2 GiB, median of %zu", sp.n);
                        c->gbps = x.p50;
                        c->bytes = ref_bytes;
                        snprintf(c->check, sizeof c->check,
                                 "%s: length ok %u/%u, stream hash = reference %u/%u, result buffer FNV-1a-64 = reference %u/%u%s",
                                 exact ? "byte-exact" : "NOT byte-exact", len_ok, runs, hash_ok, hashed, fnv_ok, fnv_done,
                                 failed ? " (some runs failed)" : "");
                }
                samples_free(&sp);
        }
        sbx_sandbox_free(sb);
        sbx_sandbox_free(dsb);
}

/* ------------------------------------------------------------------ h */

static void bench_memory(SbxContext *ctx) {
        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so); /* default caps: 1 MiB stdout and stderr */
        SbxSandbox *sb = sandbox_new_or_die(ctx, &so);
        SbxSession *s = session_or_die(sb);
        Run w = { 0 };
        (void)run_cmd(ctx, s, "echo hi", 0, &w);
        loop_quiet(ctx, (int)cfg.quiet_ms);

        bool reset = hwm_reset();
        Mem before = mem_now();
        bench_progress("h: `yes` for %u ms with the default cap (RSS %ld kB)", cfg.yes_ms, before.rss_kb);
        Run r = { 0 };
        long rss_max = before.rss_kb;
        int k = run_submit(s, "yes", cfg.yes_ms, true, &r);
        uint64_t next = bench_now_ns();
        while (k >= 0 && !r.done) {
                k = sbx_context_run_once(ctx, 50);
                if (bench_now_ns() >= next) {
                        Mem m = mem_now();
                        if (m.rss_kb > rss_max)
                                rss_max = m.rss_kb;
                        next = bench_now_ns() + 100 * 1000000ULL;
                }
        }
        Mem after_run = mem_now();
        loop_quiet(ctx, (int)cfg.quiet_ms);
        mem_line("| before | %ld | %ld |%s", before.rss_kb, before.hwm_kb,
                 reset ? " VmHWM reset via /proc/self/clear_refs first |" : " (VmHWM could not be reset) |");
        mem_line("| max sampled every 100 ms during the run | %ld | |", rss_max);
        mem_line("| after the result | %ld | %ld | exit %d (%s), stdout kept %zu bytes, truncated=%s, streamed %" PRIu64
                 " bytes |",
                 after_run.rss_kb, after_run.hwm_kb, r.exit_code,
                 sbx_error_class_name(r.ec) ? sbx_error_class_name(r.ec) : "NONE", r.out_len,
                 r.out_trunc ? "yes" : "no", r.streamed);
        row_add("h", "memory flatness", NULL, "RSS %ld → %ld kB, VmHWM %ld → %ld kB", before.rss_kb, after_run.rss_kb,
                before.hwm_kb, after_run.hwm_kb);
        mem_growth_kb = after_run.hwm_kb - before.rss_kb;
        sbx_sandbox_free(sb);
}

/* ------------------------------------------------------------------ report */

static void print_summary_row(const Row *r) {
        if (!r->have) {
                printf("| %s | %s | – | – | – | – | – | %s |\n", r->key, r->name, r->note);
                return;
        }
        printf("| %s | %s | %zu | %.3f | %.3f | %.3f | %.3f | %s |\n", r->key, r->name, r->s.n, r->s.p50, r->s.p90,
               r->s.p99, r->s.mean, r->note);
}

static void report(void) {
        printf("## Latency (ms)\n\n");
        printf("| | Benchmark | N | p50 | p90 | p99 | mean | Notes |\n|---|---|---|---|---|---|---|---|\n");
        for (size_t i = 0; i < row_count(); i++)
                if (strcmp(row_at(i)->key, "h") != 0)
                        print_summary_row(row_at(i));

        const Row *a = row_find("a"), *b = row_find("b"), *c = row_find("c"), *d = row_find("d");
        if (a) {
                printf("\nsbx warm `echo hi` p50 relative to the others (p50 / p50):");
                if (b)
                        printf(" vs `bash -c` %.2f×;", a->s.p50 / b->s.p50);
                if (c)
                        printf(" vs bwrap %.2f×;", a->s.p50 / c->s.p50);
                if (d)
                        printf(" vs just-bash %.2f×;", a->s.p50 / d->s.p50);
                printf("\n");
        }

        if (n_tp) {
                printf("\n## Throughput through stdout (GB/s, 1 GB = 10^9 bytes)\n\n");
                printf("| Generator | Path | GB/s | Bytes | Check |\n|---|---|---|---|---|\n");
                for (size_t i = 0; i < n_tp; i++)
                        printf("| %s | %s | %.2f | %" PRIu64 " | %s |\n", tp_rows[i].gen, tp_rows[i].path,
                               tp_rows[i].gbps, tp_rows[i].bytes, tp_rows[i].check);
        }
        if (n_mem) {
                printf("\n## Memory of the harness while `yes` floods a run (default 1 MiB cap)\n\n");
                printf("| When | VmRSS kB | VmHWM kB | Notes |\n|---|---|---|---|\n");
                for (size_t i = 0; i < n_mem; i++)
                        printf("%s\n", mem_lines[i]);
        }

        printf("\n## Targets\n\n| Target | Measured | Verdict |\n|---|---|---|\n");
        if (a && b)
                printf("| warm `echo hi` p50 ≤ 0.5× `bash -c` p50 | %.3f ms vs %.3f ms = %.2f× | %s |\n", a->s.p50,
                       b->s.p50, a->s.p50 / b->s.p50, bench_verdict(true, a->s.p50 <= 0.5 * b->s.p50));
        else
                printf("| warm `echo hi` p50 ≤ 0.5× `bash -c` p50 | – | not measured |\n");
        const Row *e = row_find("e");
        printf("| create + first result + destroy p50 ≤ 10 ms | %s%.3f ms | %s |\n", e ? "" : "–", e ? e->s.p50 : 0,
               bench_verdict(e != NULL, e && e->s.p50 <= 10));
        const Row *fb = row_find("f_busy"), *fk = row_find("f_bomb"), *ff = row_find("f_bomb_free");
        double worst = 0;
        if (fb && fb->s.p99 > worst)
                worst = fb->s.p99;
        if (fk && fk->s.p99 > worst)
                worst = fk->s.p99;
        bool escaped = ff && strstr(ff->note, "exit 0 in 0/") == NULL;
        printf("| deadline → all dead p99 ≤ 100 ms (fork bomb included) | busy loop + background sleeps %.1f ms, "
               "fork bomb held in the foreground %.1f ms%s | %s%s |\n",
               fb ? fb->s.p99 : -1, fk ? fk->s.p99 : -1,
               escaped ? "; the literal `f(){ f\\|f & }; f` ends at once and is not killed at its deadline "
                         "(only sbx_sandbox_free ends it)" : "",
               bench_verdict(fb && fk, worst <= 100), escaped && worst <= 100 ? " for a command still running at its deadline" : "");
        double best_sbx = 0;
        bool all_exact = n_tp > 0;
        for (size_t i = 0; i < n_tp; i++) {
                if (strstr(tp_rows[i].path, "hashing on_output") && tp_rows[i].gbps > best_sbx)
                        best_sbx = tp_rows[i].gbps;
                if (strstr(tp_rows[i].check, "NOT") || strstr(tp_rows[i].check, "WRONG") ||
                    strstr(tp_rows[i].check, "MISMATCH"))
                        all_exact = false;
        }
        printf("| ≥ 1 GB/s byte-exact through stdout | best generator %.2f GB/s, %s | %s |\n", best_sbx,
               all_exact ? "all byte-exact" : "NOT all byte-exact", bench_verdict(n_tp > 0, best_sbx >= 1 && all_exact));
        const Row *h = NULL;
        for (size_t i = 0; i < row_count(); i++)
                if (strcmp(row_at(i)->key, "h") == 0)
                        h = row_at(i);
        printf("| RSS flat with the default cap | %s | %s |\n", h ? h->note : "–",
               bench_verdict(h != NULL, h && mem_growth_kb < 8 * 1024));
        bench_notes_print();
}

/* ------------------------------------------------------------------ main */

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx-bench [OPTIONS]\n"
                "  --only LETTERS     benchmarks to run (default abcdefgh; see bench.c)\n"
                "  -n, --iterations N warm runs for a/b (default %u)\n"
                "  --warmup N         warm-up runs (default %u)\n"
                "  --bwrap-n N        bwrap runs, interleaved (default %u)\n"
                "  --create-n N       create/destroy cycles (default %u)\n"
                "  --kill-n N         timed-out runs per kill variant (default %u)\n"
                "  --bomb-free-n N    literal fork bomb + sandbox_free cycles (default %u)\n"
                "  --kill-timeout MS  the deadline T (default %u)\n"
                "  --tp-bytes N       bytes per throughput run (default %llu)\n"
                "  --tp-reps N        hashing runs per generator (default %u)\n"
                "  --tp-count         one more run per generator with a counting callback\n"
                "  --yes-ms MS        duration of the `yes` run (default %u)\n"
                "  --quiet-ms MS      idle time that means the session is ready (default %u)\n"
                "  --justbash CMD     shell command that prints the just-bash JSON\n"
                "  --quick            small N everywhere (a smoke test)\n",
                cfg.warm_n, cfg.warmup, cfg.bwrap_n, cfg.create_n, cfg.kill_n, cfg.bomb_free_n, cfg.kill_t_ms,
                (unsigned long long)cfg.tp_bytes, cfg.tp_reps, cfg.yes_ms, cfg.quiet_ms);
}

int main(int argc, char **argv) {
        enum { O_ONLY = 256, O_WARMUP, O_BWRAP, O_CREATE, O_KILL, O_BOMB, O_KT, O_TPB, O_TPR, O_YES, O_QUIET, O_JB, O_QUICK, O_TPC };
        static const struct option opts[] = {
                { "only", required_argument, NULL, O_ONLY },
                { "iterations", required_argument, NULL, 'n' },
                { "warmup", required_argument, NULL, O_WARMUP },
                { "bwrap-n", required_argument, NULL, O_BWRAP },
                { "create-n", required_argument, NULL, O_CREATE },
                { "kill-n", required_argument, NULL, O_KILL },
                { "bomb-free-n", required_argument, NULL, O_BOMB },
                { "kill-timeout", required_argument, NULL, O_KT },
                { "tp-bytes", required_argument, NULL, O_TPB },
                { "tp-reps", required_argument, NULL, O_TPR },
                { "yes-ms", required_argument, NULL, O_YES },
                { "quiet-ms", required_argument, NULL, O_QUIET },
                { "justbash", required_argument, NULL, O_JB },
                { "quick", no_argument, NULL, O_QUICK },
                { "tp-count", no_argument, NULL, O_TPC },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        int c;
        while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
                switch (c) {
                case O_ONLY: cfg.only = optarg; break;
                case 'n': cfg.warm_n = bench_parse_uint(optarg, "iterations"); break;
                case O_WARMUP: cfg.warmup = bench_parse_uint(optarg, "warmup"); break;
                case O_BWRAP: cfg.bwrap_n = bench_parse_uint(optarg, "bwrap-n"); break;
                case O_CREATE: cfg.create_n = bench_parse_uint(optarg, "create-n"); break;
                case O_KILL: cfg.kill_n = bench_parse_uint(optarg, "kill-n"); break;
                case O_BOMB: cfg.bomb_free_n = bench_parse_uint(optarg, "bomb-free-n"); break;
                case O_KT: cfg.kill_t_ms = bench_parse_uint(optarg, "kill-timeout"); break;
                case O_TPB: {
                        char *end;
                        cfg.tp_bytes = strtoull(optarg, &end, 10);
                        if (*end || cfg.tp_bytes == 0 || cfg.tp_bytes > 3 * GIB) {
                                fprintf(stderr, "sbx-bench: bad tp-bytes: %s\n", optarg);
                                return 2;
                        }
                        break;
                }
                case O_TPR: cfg.tp_reps = bench_parse_uint(optarg, "tp-reps"); break;
                case O_YES: cfg.yes_ms = bench_parse_uint(optarg, "yes-ms"); break;
                case O_QUIET: cfg.quiet_ms = bench_parse_uint(optarg, "quiet-ms"); break;
                case O_JB: cfg.justbash = optarg; break;
                case O_TPC: cfg.tp_count = true; break;
                case O_QUICK:
                        cfg.warm_n = 30;
                        cfg.warmup = 3;
                        cfg.bwrap_n = 10;
                        cfg.create_n = 10;
                        cfg.kill_n = 5;
                        cfg.bomb_free_n = 3;
                        cfg.tp_bytes = 64 * MIB;
                        cfg.tp_reps = 1;
                        cfg.yes_ms = 1000;
                        break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        if (optind < argc) {
                usage(stderr);
                return 2;
        }

        SbxContext *ctx = NULL;
        int r = sbx_context_new(&ctx);
        if (r < 0) {
                fprintf(stderr, "sbx-bench: sbx_context_new: %s\n", strerror(-r));
                return 1;
        }
        uint64_t t0 = bench_now_ns();
        if (want('a') || want('b') || want('c'))
                bench_warm(ctx);
        if (want('d'))
                bench_justbash();
        if (want('e'))
                bench_create(ctx);
        if (want('f'))
                bench_kill(ctx);
        /* h before g: g makes the result buffer hold 1 GiB. */
        if (want('h'))
                bench_memory(ctx);
        if (want('g'))
                bench_throughput(ctx);
        sbx_context_free(ctx);
        bench_progress("done in %.1f s", bench_ms_since(t0) / 1000);
        report();
        return 0;
}
