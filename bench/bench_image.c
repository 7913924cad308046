/* SPDX-License-Identifier: MIT */
/* sbx-bench-image: what fork, snapshot and restore of a sandbox cost, against the targets of
 * the issue (fork of 100 MB in 1,000 files ≤ 100 ms, of 10,000 small files ≤ 150 ms; snapshot
 * and restore of 100 MB ≤ 150 ms each).
 *
 * Benchmarks (select with --only):
 *   f  fork of a sandbox holding 100 MB in 1,000 files (100,000 random bytes each)
 *   m  fork of a sandbox holding about 10,000 files of 100 bytes (as many as its inode limit
 *      leaves room for, at most 9,990, in 10 directories)
 *   s  snapshot create, and restore (each restore after a file was deleted and another
 *      changed), of the 100 MB sandbox
 *   l  forks in layers (a root daemon's forks; docs/ARCHITECTURE.md, "Forks in layers"): the
 *      first fork of a 1 GB sandbox (its whole tree goes into a layer) and the forks after it
 *      (unchanged), forks of the small-files sandbox after N of its files changed (N = 10,
 *      100, 1,000, changed by an untimed command before each fork), and the kernel's own cost
 *      of one overlay mount (fsopen, the layers, fsmount) over two tmpfs layers
 * m and f fork the same parent again and again: in layers, the warm-up fork builds the first
 * layer and the timed ones find the tree unchanged (set SBX_FORK_LAYERS=0 for the copy).
 * f and m are each measured twice: cold (sbx_context_set_pool(ctx, 0): the fork's sandbox is
 * created on the spot) and with a pool of 2 prepared sandboxes (sbx_context_set_pool(ctx, 2),
 * filled before the first fork and between forks). For each fork two times are taken, both
 * from the sbx_sandbox_fork() call: until its done callback, and until the result of a first
 * command (`cat FILE | wc -c`) in the fork's default session. Every fork is checked (that
 * output); the first one of each row also by the sha256 of one file, against the parent's,
 * and by its count of files.
 *
 * Only the public API (sbx/sbx.h) is used. Progress goes to stderr, the Markdown report to
 * stdout. Times are CLOCK_MONOTONIC; percentiles interpolate linearly between ranks. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include "common.h"
#include "sbx/sbx.h"

const char bench_prog[] = "sbx-bench-image";

/* ------------------------------------------------------------------ configuration */

typedef struct Config {
        unsigned n;        /* samples per row */
        unsigned warmup;   /* untimed forks (or snapshots) before each row */
        unsigned quiet_ms; /* loop quiet time that means "settled" */
        unsigned gap_ms;   /* loop turns between two forks (the pool refills meanwhile) */
        unsigned pool;     /* the pool's size in the pool rows */
        bool verbose;      /* every sample on stderr */
        const char *only;
} Config;

static Config cfg = { .n = 10, .warmup = 1, .quiet_ms = 10, .gap_ms = 300, .pool = 2, .only = "fmsl" };

static bool want(char letter) { return strchr(cfg.only, letter) != NULL; }

#define BIG_FILES 1000U
#define BIG_FILE_BYTES 100000U
#define SMALL_MAX 9990U
#define SMALL_DIRS 10U
#define SMALL_FILE_BYTES 100U
/* Inodes left free in the small-files sandbox: whatever the sessions write later (a state
 * restored in the fork, a here-document) must still fit. */
#define SMALL_SPARE_INODES 8U

static SbxContext *g_ctx;

static void on_die(void) {
        if (g_ctx)
                g_ctx = sbx_context_free(g_ctx);
}

/* ------------------------------------------------------------------ runs */

typedef struct Run {
        bool done;
        uint64_t t_done;
        int exit_code;
        SbxErrorClass ec;
        char out[512]; /* the head of stdout, NUL-terminated */
        size_t out_len;
        char err[200]; /* the head of stderr, newlines as spaces */
} Run;

static void run_done(void *ud, const SbxResult *res) {
        Run *r = ud;
        r->t_done = bench_now_ns();
        r->done = true;
        r->exit_code = res->exit_code;
        r->ec = res->error_class;
        r->out_len = res->stdout_len;
        size_t k = res->stdout_len < sizeof r->out - 1 ? res->stdout_len : sizeof r->out - 1;
        memcpy(r->out, res->stdout_data, k);
        r->out[k] = 0;
        k = res->stderr_len < sizeof r->err - 1 ? res->stderr_len : sizeof r->err - 1;
        memcpy(r->err, res->stderr_data, k);
        r->err[k] = 0;
        for (size_t i = 0; i < k; i++)
                if (r->err[i] == '\n')
                        r->err[i] = ' ';
}

/* Submits, turns the loop until done; 0 or -errno (r has the result). */
static int run_cmd(SbxContext *ctx, SbxSession *s, const char *cmd, uint64_t timeout_ms, Run *r) {
        *r = (Run){ 0 };
        SbxRunOptions o = { .command = cmd, .command_len = strlen(cmd), .timeout_ms = timeout_ms };
        int k = sbx_session_run(s, &o, NULL, run_done, r, NULL);
        while (k >= 0 && !r->done)
                if ((k = sbx_context_run_once(ctx, -1)) > 0)
                        k = 0;
        return k;
}

static bool run_ok(const Run *r) { return r->done && r->exit_code == 0 && r->ec == SBX_ERROR_NONE; }

/* Runs cmd and dies unless it exits 0. */
static void run_or_die(SbxContext *ctx, SbxSession *s, const char *cmd, uint64_t timeout_ms, Run *r) {
        int k = run_cmd(ctx, s, cmd, timeout_ms, r);
        if (k < 0)
                bench_die("cannot run `%.80s`: %s", cmd, strerror(-k));
        if (!run_ok(r))
                bench_die("`%.80s` failed: exit %d (%s): %s", cmd, r->exit_code,
                          sbx_error_class_name(r->ec) ? sbx_error_class_name(r->ec) : "NONE", r->err);
}

/* stdout as one unsigned number (what `wc -c` prints), or -1. */
static long long out_number(const Run *r) {
        char *end;
        errno = 0;
        long long v = strtoll(r->out, &end, 10);
        while (*end == ' ' || *end == '\n')
                end++;
        return errno || end == r->out || *end ? -1 : v;
}

/* ------------------------------------------------------------------ operations */

typedef struct OpWait {
        bool done;
        uint64_t t_done;
        int error;
        char msg[300];
        SbxSandbox *sandbox;
        char snap_id[64];
} OpWait;

static void op_done(void *ud, const SbxOpResult *res) {
        OpWait *w = ud;
        w->t_done = bench_now_ns();
        w->done = true;
        w->error = res->error;
        snprintf(w->msg, sizeof w->msg, "%s", res->message ? res->message : "");
        w->sandbox = res->sandbox;
        snprintf(w->snap_id, sizeof w->snap_id, "%s", res->snapshot_id ? res->snapshot_id : "");
}

/* Turns the loop until the operation's done callback has fired; returns its error. */
static int op_wait(SbxContext *ctx, OpWait *w) {
        while (!w->done) {
                int k = sbx_context_run_once(ctx, -1);
                if (k < 0)
                        return k;
        }
        return w->error;
}

/* Turns the loop for ms milliseconds, whatever happens (the pool refills on a timer). */
static void spin(SbxContext *ctx, unsigned ms) {
        uint64_t end = bench_now_ns() + (uint64_t)ms * 1000000ULL;
        while (bench_now_ns() < end)
                (void)sbx_context_run_once(ctx, 5);
}

static void settle(SbxContext *ctx) {
        spin(ctx, cfg.gap_ms);
        loop_quiet(ctx, (int)cfg.quiet_ms);
}

/* ------------------------------------------------------------------ the parents */

typedef struct Parent {
        const char *what;     /* for messages */
        SbxSandbox *sb;
        SbxSession *s;
        char probe[128];      /* the file the first command in a fork reads */
        long long probe_size;
        char hash_file[128];  /* the file whose sha256 is compared */
        char sha[80];         /* its sha256 in the parent */
        char count_cmd[160];  /* prints the number of files */
        long long files;
        double fill_s;
        char df[200];         /* `df` of /home/user after the fill */
} Parent;

static void parent_new(SbxContext *ctx, Parent *p, const char *what) {
        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so); /* default: 256 MiB, 10,000 inodes: forks may use the pool */
        *p = (Parent){ .what = what };
        if (sbx_sandbox_new(ctx, &so, &p->sb) < 0)
                bench_die("cannot create a sandbox: %s", sbx_context_last_error(ctx));
        int k = sbx_session_get(p->sb, NULL, &p->s);
        if (k < 0)
                bench_die("cannot start a session: %s", strerror(-k));
}

/* After the fill: the hash, the file count and df, all from inside the sandbox. */
static void parent_describe(SbxContext *ctx, Parent *p) {
        Run r;
        char cmd[300];
        snprintf(cmd, sizeof cmd, "sha256sum %s | cut -d' ' -f1", p->hash_file);
        run_or_die(ctx, p->s, cmd, 0, &r);
        snprintf(p->sha, sizeof p->sha, "%.64s", r.out);
        run_or_die(ctx, p->s, p->count_cmd, 0, &r);
        p->files = out_number(&r);
        run_or_die(ctx, p->s, "df -B1 --output=used,iused,iavail /home/user | tail -n 1", 0, &r);
        unsigned long long used = 0, iused = 0, iavail = 0;
        if (sscanf(r.out, "%llu %llu %llu", &used, &iused, &iavail) == 3)
                snprintf(p->df, sizeof p->df, "%.1f MB used, %llu inodes used, %llu free", (double)used / 1e6, iused,
                         iavail);
        else
                snprintf(p->df, sizeof p->df, "df: %.100s", r.out);
        bench_progress("%s: filled in %.1f s: %lld files; %s", p->what, p->fill_s, p->files, p->df);
}

/* 1,000 files of 100,000 random bytes: one python3 when there is one (a second or two),
 * else a loop of `head -c` (a process per file). */
static void parent_fill_big(SbxContext *ctx, Parent *p) {
        static const char cmd[] =
                "mkdir -p /home/user/data && "
                "if command -v python3 >/dev/null 2>&1; then python3 -c '\n"
                "import os\n"
                "for i in range(1, 1001):\n"
                "    with open(\"/home/user/data/f%d\" % i, \"wb\") as f:\n"
                "        f.write(os.urandom(100000))\n"
                "'; else for i in $(seq 1000); do head -c 100000 /dev/urandom > /home/user/data/f$i || exit 1; done; fi";
        bench_progress("%s: filling: 1,000 files of 100,000 random bytes", p->what);
        uint64_t t0 = bench_now_ns();
        Run r;
        run_or_die(ctx, p->s, cmd, 300000, &r);
        p->fill_s = bench_ms_since(t0) / 1000;
        snprintf(p->probe, sizeof p->probe, "/home/user/data/f%u", BIG_FILES);
        p->probe_size = BIG_FILE_BYTES;
        snprintf(p->hash_file, sizeof p->hash_file, "/home/user/data/f%u", BIG_FILES / 2);
        snprintf(p->count_cmd, sizeof p->count_cmd, "find /home/user/data -type f | wc -l");
        parent_describe(ctx, p);
        if (p->files != BIG_FILES)
                bench_die("%s: %lld files after the fill, expected %u", p->what, p->files, BIG_FILES);
        run_or_die(ctx, p->s, "cat /home/user/data/* | wc -c", 0, &r);
        if (out_number(&r) != (long long)BIG_FILES * BIG_FILE_BYTES)
                bench_die("%s: the files hold %s bytes, expected %u", p->what, r.out, BIG_FILES * BIG_FILE_BYTES);
}

/* As many 100-byte files as the inode limit leaves room for (at most 9,990), in 10
 * directories, written by bash's builtin printf (no process per file). */
static void parent_fill_small(SbxContext *ctx, Parent *p, unsigned *n_files) {
        Run r;
        run_or_die(ctx, p->s, "df --output=iavail /home/user | tail -n 1", 0, &r);
        long long avail = out_number(&r);
        if (avail < 1000)
                bench_die("%s: only %lld inodes free in /home/user", p->what, avail);
        long long room = avail - 1 - SMALL_DIRS - SMALL_SPARE_INODES;
        unsigned n = room < SMALL_MAX ? (unsigned)room : SMALL_MAX;
        *n_files = n;
        char cmd[600];
        snprintf(cmd, sizeof cmd,
                 "mkdir -p /home/user/small && cd /home/user/small && mkdir -p d0 d1 d2 d3 d4 d5 d6 d7 d8 d9 && "
                 "for ((i = 0; i < %u; i++)); do printf '%%0%ud' \"$i\" > d$((i %% %u))/f$i || exit 1; done",
                 n, SMALL_FILE_BYTES, SMALL_DIRS);
        bench_progress("%s: filling: %u files of %u bytes in %u directories (%lld inodes were free)", p->what, n,
                       SMALL_FILE_BYTES, SMALL_DIRS, avail);
        uint64_t t0 = bench_now_ns();
        run_or_die(ctx, p->s, cmd, 300000, &r);
        p->fill_s = bench_ms_since(t0) / 1000;
        snprintf(p->probe, sizeof p->probe, "/home/user/small/d%u/f%u", (n - 1) % SMALL_DIRS, n - 1);
        p->probe_size = SMALL_FILE_BYTES;
        snprintf(p->hash_file, sizeof p->hash_file, "/home/user/small/d%u/f%u", (n / 2) % SMALL_DIRS, n / 2);
        snprintf(p->count_cmd, sizeof p->count_cmd, "find /home/user/small -type f | wc -l");
        parent_describe(ctx, p);
        if (p->files != n)
                bench_die("%s: %lld files after the fill, expected %u", p->what, p->files, n);
}

/* ------------------------------------------------------------------ forks */

/* One row pair (fork → done, fork → first result), N forks of p after cfg.warmup untimed ones. */
static void bench_forks_pre(SbxContext *ctx, Parent *p, const char *key, const char *name, bool pooled, const char *pre);

static void bench_forks(SbxContext *ctx, Parent *p, const char *key, const char *name, bool pooled) {
        bench_forks_pre(ctx, p, key, name, pooled, NULL);
}

/* The same, with `pre` run in the parent (untimed) before each fork, with $K the fork's
 * number, so each run writes other bytes. */
static void bench_forks_pre(SbxContext *ctx, Parent *p, const char *key, const char *name, bool pooled, const char *pre) {
        Samples done = { 0 }, first = { 0 }, gap = { 0 };
        unsigned bad = 0, checked = 0, check_bad = 0;
        char probe_cmd[200];
        snprintf(probe_cmd, sizeof probe_cmd, "cat %s | wc -c", p->probe);
        bench_progress("%s: %s, %u forks (+%u warm-up), %s", key, p->what, cfg.n, cfg.warmup,
                       pooled ? "pool" : "cold");
        for (unsigned i = 0; i < cfg.n + cfg.warmup; i++) {
                OpWait w = { 0 };
                Run r = { 0 };
                SbxSession *s = NULL;
                if (pre) {
                        char cmd[400];
                        Run pr;
                        snprintf(cmd, sizeof cmd, "K=%u; %s", i, pre);
                        run_or_die(ctx, p->s, cmd, 60000, &pr);
                        loop_quiet(ctx, (int)cfg.quiet_ms);
                }
                uint64_t t0 = bench_now_ns();
                int k = sbx_sandbox_fork(p->sb, op_done, &w);
                if (k >= 0)
                        k = op_wait(ctx, &w);
                if (k < 0 || !w.sandbox) {
                        if (bad++ == 0)
                                bench_note("%s: fork %u failed: %s (%s)", key, i, k < 0 ? strerror(-k) : "no sandbox",
                                           w.msg);
                        if (w.sandbox)
                                sbx_sandbox_free(w.sandbox);
                        settle(ctx);
                        continue;
                }
                k = sbx_session_get(w.sandbox, NULL, &s);
                if (k >= 0)
                        k = run_cmd(ctx, s, probe_cmd, 0, &r);
                if (k < 0 || !run_ok(&r) || out_number(&r) != p->probe_size) {
                        if (bad++ == 0)
                                bench_note("%s: fork %u: `%s` gave exit %d, stdout \"%.40s\", stderr \"%.100s\" (%s)", key,
                                           i, probe_cmd, r.exit_code, r.out, r.err, k < 0 ? strerror(-k) : "ran");
                } else if (i >= cfg.warmup) {
                        if (cfg.verbose)
                                bench_progress("%s #%u: done %.1f ms, first result %.1f ms (started at %.6f s, "
                                               "CLOCK_MONOTONIC)", key, i - cfg.warmup, bench_ms_between(t0, w.t_done),
                                               bench_ms_between(t0, r.t_done), (double)t0 / 1e9);
                        samples_add(&done, bench_ms_between(t0, w.t_done));
                        samples_add(&first, bench_ms_between(t0, r.t_done));
                        samples_add(&gap, bench_ms_between(w.t_done, r.t_done));
                }
                if (i == cfg.warmup && k >= 0) {
                        /* Once per row: the fork holds the same bytes and as many files. */
                        char cmd[300];
                        Run h;
                        snprintf(cmd, sizeof cmd, "sha256sum %s | cut -d' ' -f1", p->hash_file);
                        (void)run_cmd(ctx, s, cmd, 0, &h);
                        bool ok = run_ok(&h) && strncmp(h.out, p->sha, 64) == 0;
                        (void)run_cmd(ctx, s, p->count_cmd, 0, &h);
                        ok = ok && run_ok(&h) && out_number(&h) == p->files;
                        checked++;
                        if (!ok) {
                                check_bad++;
                                bench_note("%s: the fork does not match its parent: sha256 of %s or the file count "
                                           "(%lld expected) differ", key, p->hash_file, p->files);
                        }
                }
                sbx_sandbox_free(w.sandbox);
                settle(ctx);
        }
        Summary xd = summarize(&done), xf = summarize(&first), xg = summarize(&gap);
        char k2[16];
        char mode[32];
        snprintf(mode, sizeof mode, pooled ? "pool of %u" : "cold (no pool)", cfg.pool);
        row_add(key, name, &xd, "sbx_sandbox_fork() → done callback; %s; %u failed; sha256 + file count %s", mode, bad,
                checked == 0 ? "not checked" : check_bad ? "DIFFER" : "match");
        snprintf(k2, sizeof k2, "%s_first", key);
        row_add(k2, "  same forks: sbx_sandbox_fork() → result of `cat FILE | wc -c` in the fork", &xf,
                "output checked every time (%lld)", p->probe_size);
        snprintf(k2, sizeof k2, "%s_cmd", key);
        row_add(k2, "  of which: done callback → that result", &xg, "%s", "");
        samples_free(&done);
        samples_free(&first);
        samples_free(&gap);
}

/* ------------------------------------------------------------------ forks in layers */

/* 1 GB in 100 files of 10 MiB (one of random bytes, copied), in a sandbox with room for it. */
static void parent_new_gb(SbxContext *ctx, Parent *p) {
        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so);
        so.limits.fs_bytes = 1200ULL * 1024 * 1024;
        so.limits.memory_bytes = 2048ULL * 1024 * 1024;
        *p = (Parent){ .what = "1 GB sandbox" };
        if (sbx_sandbox_new(ctx, &so, &p->sb) < 0)
                bench_die("cannot create a sandbox: %s", sbx_context_last_error(ctx));
        int k = sbx_session_get(p->sb, NULL, &p->s);
        if (k < 0)
                bench_die("cannot start a session: %s", strerror(-k));
        bench_progress("%s: filling: 100 files of 10 MiB", p->what);
        uint64_t t0 = bench_now_ns();
        Run r;
        run_or_die(ctx, p->s, "mkdir -p /home/user/gb && cd /home/user/gb && head -c 10485760 /dev/urandom > f0 && "
                              "for i in $(seq 99); do cp f0 f$i; done", 300000, &r);
        p->fill_s = bench_ms_since(t0) / 1000;
        snprintf(p->probe, sizeof p->probe, "/home/user/gb/f99");
        p->probe_size = 10485760;
        snprintf(p->hash_file, sizeof p->hash_file, "/home/user/gb/f50");
        snprintf(p->count_cmd, sizeof p->count_cmd, "find /home/user/gb -type f | wc -l");
        parent_describe(ctx, p);
        if (p->files != 100)
                bench_die("%s: %lld files after the fill, expected 100", p->what, p->files);
}

/* The first fork of a parent that has none yet: its whole tree goes into the first layer. */
static void bench_first_fork(SbxContext *ctx, Parent *p, const char *key, const char *name) {
        OpWait w = { 0 };
        uint64_t t0 = bench_now_ns();
        int k = sbx_sandbox_fork(p->sb, op_done, &w);
        if (k >= 0)
                k = op_wait(ctx, &w);
        if (k < 0 || !w.sandbox)
                bench_die("%s: the first fork failed: %s (%s)", key, k < 0 ? strerror(-k) : "no sandbox", w.msg);
        Samples x = { 0 };
        samples_add(&x, bench_ms_between(t0, w.t_done));
        Summary sx = summarize(&x);
        row_add(key, name, &sx, "%s", "one fork: the whole tree into the first layer (N 1)");
        samples_free(&x);
        sbx_sandbox_free(w.sandbox);
        settle(ctx);
}

static int sys_fsconfig(int fd, unsigned cmd, const char *key, const void *value, int aux) {
        return (int)syscall(SYS_fsconfig, fd, cmd, key, value, aux);
}

static int tmpfs_mount(void) {
        int fs = (int)syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
        if (fs < 0 || sys_fsconfig(fs, FSCONFIG_SET_FLAG, "inode32", NULL, 0) < 0 ||
            sys_fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) {
                if (fs >= 0)
                        close(fs);
                return -1;
        }
        int m = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, 0);
        close(fs);
        return m;
}

/* The kernel's own cost of what a fork in layers mounts: one overlay (two lower tmpfs, an
 * upper and work directory on a third, redirect_dir, index, xino), to its fsmount(). */
static void bench_overlay_mount(void) {
        Samples x = { 0 };
        unsigned failed = 0;
        for (unsigned i = 0; i < cfg.n * 10; i++) {
                int l1 = tmpfs_mount(), l2 = tmpfs_mount(), up = tmpfs_mount();
                char v[64];
                if (l1 < 0 || l2 < 0 || up < 0 || mkdirat(up, "u", 0755) < 0 || mkdirat(up, "w", 0700) < 0) {
                        failed++;
                        goto next;
                }
                uint64_t t0 = bench_now_ns();
                int fs = (int)syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC);
                int ok = fs >= 0;
                snprintf(v, sizeof v, "/proc/self/fd/%d", l1);
                ok = ok && sys_fsconfig(fs, FSCONFIG_SET_STRING, "lowerdir+", v, 0) == 0;
                snprintf(v, sizeof v, "/proc/self/fd/%d", l2);
                ok = ok && sys_fsconfig(fs, FSCONFIG_SET_STRING, "lowerdir+", v, 0) == 0;
                snprintf(v, sizeof v, "/proc/self/fd/%d/u", up);
                ok = ok && sys_fsconfig(fs, FSCONFIG_SET_STRING, "upperdir", v, 0) == 0;
                snprintf(v, sizeof v, "/proc/self/fd/%d/w", up);
                ok = ok && sys_fsconfig(fs, FSCONFIG_SET_STRING, "workdir", v, 0) == 0 &&
                     sys_fsconfig(fs, FSCONFIG_SET_STRING, "redirect_dir", "on", 0) == 0 &&
                     sys_fsconfig(fs, FSCONFIG_SET_STRING, "index", "on", 0) == 0 &&
                     sys_fsconfig(fs, FSCONFIG_SET_STRING, "xino", "on", 0) == 0 &&
                     sys_fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0;
                int m = ok ? (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, 0) : -1;
                if (m >= 0)
                        samples_add(&x, bench_ms_since(t0));
                else
                        failed++;
                if (m >= 0)
                        close(m);
                if (fs >= 0)
                        close(fs);
        next:
                if (l1 >= 0)
                        close(l1);
                if (l2 >= 0)
                        close(l2);
                if (up >= 0)
                        close(up);
        }
        Summary sx = summarize(&x);
        row_add("l_kernel_overlay", "kernel: one overlay mount (2 tmpfs layers, fsopen → fsmount)", &sx,
                "%u failed (root needed)", failed);
        samples_free(&x);
}

static void bench_layers(SbxContext *ctx, Parent *small) {
        Parent gb = { 0 };
        parent_new_gb(ctx, &gb);
        loop_quiet(ctx, (int)cfg.quiet_ms);
        bench_first_fork(ctx, &gb, "l_gb_first", "fork, 1 GB in 100 files, first (cold)");
        bench_forks(ctx, &gb, "l_gb", "fork, 1 GB in 100 files, unchanged since the last fork, cold", false);
        gb.sb = sbx_sandbox_free(gb.sb);
        settle(ctx);
        static const unsigned ns[] = { 10, 100, 1000 };
        for (size_t i = 0; small->sb && i < sizeof ns / sizeof ns[0]; i++) {
                char key[32], name[160], pre[300];
                snprintf(key, sizeof key, "l_chg%u", ns[i]);
                snprintf(name, sizeof name, "fork, small-files sandbox after %u of its files changed, cold", ns[i]);
                /* Files of d1 (f1, f11, ...), rewritten with the fork's number: same size; the file whose
                 * sha256 is checked is in d0. */
                snprintf(pre, sizeof pre,
                         "cd /home/user/small/d1 && for ((j = 0; j < %u && j * 10 + 1 < %lld; j++)); do "
                         "printf '%%0%ud' \"$K\" > f$((j * 10 + 1)); done",
                         ns[i], small->files, SMALL_FILE_BYTES);
                bench_forks_pre(ctx, small, key, name, false, pre);
        }
        bench_overlay_mount();
}

/* ------------------------------------------------------------------ snapshots */

static void bench_snapshots(SbxContext *ctx, Parent *p) {
        Samples cr = { 0 }, rs = { 0 }, rs_first = { 0 };
        unsigned bad_cr = 0, bad_rs = 0, back = 0, tried = 0;
        Run r;
        bench_progress("s: snapshot create, %u times (+%u warm-up; each deleted after)", cfg.n, cfg.warmup);
        /* The snapshot the restores go back to; not timed. */
        OpWait base = { 0 };
        int k = sbx_snapshot_create(p->sb, op_done, &base);
        if (k < 0 || (k = op_wait(ctx, &base)) < 0)
                bench_die("snapshot create: %s (%s)", strerror(-k), base.msg);
        settle(ctx);
        for (unsigned i = 0; i < cfg.n + cfg.warmup; i++) {
                OpWait w = { 0 };
                uint64_t t0 = bench_now_ns();
                k = sbx_snapshot_create(p->sb, op_done, &w);
                if (k >= 0)
                        k = op_wait(ctx, &w);
                if (k < 0) {
                        if (bad_cr++ == 0)
                                bench_note("s: snapshot create %u failed: %s (%s)", i, strerror(-k), w.msg);
                } else {
                        if (cfg.verbose)
                                bench_progress("s_create #%u%s: %.1f ms", i, i < cfg.warmup ? " (warm-up)" : "",
                                               bench_ms_between(t0, w.t_done));
                        if (i >= cfg.warmup)
                                samples_add(&cr, bench_ms_between(t0, w.t_done));
                        int d = sbx_snapshot_delete(p->sb, w.snap_id);
                        if (d < 0)
                                bench_note("s: snapshot delete %s: %s", w.snap_id, strerror(-d));
                }
                settle(ctx);
        }

        /* Restores: each after deleting one file and changing another, so there is something
         * to bring back; the first command afterwards reads the deleted file. */
        static const char modify[] = "rm -f /home/user/data/f7 && echo changed > /home/user/data/f8 && "
                                     "! test -e /home/user/data/f7";
        char sha8[80];
        run_or_die(ctx, p->s, "sha256sum /home/user/data/f8 | cut -d' ' -f1", 0, &r);
        snprintf(sha8, sizeof sha8, "%.64s", r.out);
        bench_progress("s: snapshot restore, %u times (+%u warm-up), each after a file was deleted and one changed",
                       cfg.n, cfg.warmup);
        for (unsigned i = 0; i < cfg.n + cfg.warmup; i++) {
                run_or_die(ctx, p->s, modify, 0, &r);
                loop_quiet(ctx, (int)cfg.quiet_ms);
                OpWait w = { 0 };
                Run f = { 0 };
                uint64_t t0 = bench_now_ns();
                k = sbx_snapshot_restore(p->sb, base.snap_id, op_done, &w);
                if (k >= 0)
                        k = op_wait(ctx, &w);
                if (k < 0) {
                        if (bad_rs++ == 0)
                                bench_note("s: restore %u failed: %s (%s)", i, strerror(-k), w.msg);
                        settle(ctx);
                        continue;
                }
                k = run_cmd(ctx, p->s, "cat /home/user/data/f7 | wc -c", 0, &f);
                tried++;
                bool ok = k >= 0 && run_ok(&f) && out_number(&f) == BIG_FILE_BYTES;
                Run h;
                (void)run_cmd(ctx, p->s, "sha256sum /home/user/data/f8 | cut -d' ' -f1", 0, &h);
                ok = ok && run_ok(&h) && strncmp(h.out, sha8, 64) == 0;
                if (cfg.verbose)
                        bench_progress("s_restore #%u%s: %.1f ms, first result %.1f ms", i,
                                       i < cfg.warmup ? " (warm-up)" : "", bench_ms_between(t0, w.t_done),
                                       bench_ms_between(t0, f.t_done));
                if (ok) {
                        back++;
                        if (i >= cfg.warmup) {
                                samples_add(&rs, bench_ms_between(t0, w.t_done));
                                samples_add(&rs_first, bench_ms_between(t0, f.t_done));
                        }
                } else if (bad_rs++ == 0) {
                        bench_note("s: after restore %u the deleted file is not back as it was (`wc -c`: \"%.40s\" "
                                   "%.100s) or the changed one differs", i, f.out, f.err);
                }
                settle(ctx);
        }
        (void)sbx_snapshot_delete(p->sb, base.snap_id);
        settle(ctx);
        Summary xc = summarize(&cr), xr = summarize(&rs), xf = summarize(&rs_first);
        row_add("s_create", "snapshot create of the 100 MB sandbox (sbx_snapshot_create() → done)", &xc,
                "each deleted after (sbx_snapshot_delete) so the store stays within its budget; %u failed", bad_cr);
        row_add("s_restore", "snapshot restore of the 100 MB sandbox (sbx_snapshot_restore() → done)", &xr,
                "each after `rm f7; echo changed > f8`; f7 back and f8 as before in %u/%u; %u failed", back, tried,
                bad_rs);
        row_add("s_restore_first", "  same restores: → result of `cat f7 | wc -c`", &xf, "%s", "");
        samples_free(&cr);
        samples_free(&rs);
        samples_free(&rs_first);
}

/* ------------------------------------------------------------------ reference: a plain copy */

/* `cp -a` of the 100 MB tree inside the sandbox (tmpfs to the same tmpfs), timed by the
 * command itself: what copying these bytes costs on this machine without sbx around it. */
static void bench_cp_reference(SbxContext *ctx, Parent *p) {
        Samples cp = { 0 };
        Run r;
        for (unsigned i = 0; i < 3; i++) {
                int k = run_cmd(ctx, p->s,
                                "rm -rf /tmp/cpref; t0=$(date +%s%N); cp -a /home/user/data /tmp/cpref; "
                                "t1=$(date +%s%N); rm -rf /tmp/cpref; echo $(( (t1 - t0) / 1000 ))",
                                60000, &r);
                long long us = k >= 0 && run_ok(&r) ? out_number(&r) : -1;
                if (us < 0) {
                        bench_note("reference `cp -a` failed: exit %d %.100s", r.exit_code, r.err);
                        break;
                }
                samples_add(&cp, (double)us / 1e3);
        }
        Summary x = summarize(&cp);
        row_add("ref_cp", "reference: `cp -a` of the 100 MB tree inside the sandbox (tmpfs → tmpfs)", &x,
                "timed inside the command (date +%%s%%N around cp); no sbx in the measured part");
        samples_free(&cp);
        loop_quiet(ctx, (int)cfg.quiet_ms);
}

/* The first command's own cost: the same `cat FILE | wc -c` in the parent's idle session. */
static void bench_cmd_reference(SbxContext *ctx, Parent *p, const char *key) {
        Samples x = { 0 };
        char cmd[200];
        unsigned bad = 0;
        snprintf(cmd, sizeof cmd, "cat %s | wc -c", p->probe);
        loop_quiet(ctx, (int)cfg.quiet_ms);
        for (unsigned i = 0; i < cfg.n; i++) {
                Run r;
                uint64_t t0 = bench_now_ns();
                int k = run_cmd(ctx, p->s, cmd, 0, &r);
                if (k < 0 || !run_ok(&r) || out_number(&r) != p->probe_size)
                        bad++;
                else
                        samples_add(&x, bench_ms_between(t0, r.t_done));
                loop_quiet(ctx, (int)cfg.quiet_ms);
        }
        Summary sx = summarize(&x);
        row_add(key, "reference: the same `cat FILE | wc -c` in the parent's idle session (submit → result)", &sx,
                "%s; %u failed", p->what, bad);
        samples_free(&x);
}

/* ------------------------------------------------------------------ report */

static void target_line(const char *target, const char *which, const char *key, double limit_ms) {
        const Row *r = row_find(key);
        if (!r) {
                printf("| %s | %s | – | not measured |\n", target, which);
                return;
        }
        bool ok = r->s.p50 <= limit_ms;
        printf("| %s | %s | p50 **%.1f ms**, p90 %.1f ms, max %.1f ms (N %zu) | %s%s |\n", target, which, r->s.p50,
               r->s.p90, r->s.max, r->s.n, bench_verdict(true, ok),
               ok && r->s.p90 > limit_ms ? " at p50, not at p90" : "");
}

static void report(const Parent *big, const Parent *small) {
        printf("## Fork, snapshots: latency (ms)\n\n");
        if (big->files)
                printf("- 100 MB sandbox: %lld files, %s; filled in %.1f s\n", big->files, big->df, big->fill_s);
        if (small->files)
                printf("- small-files sandbox: %lld files of %u bytes in %u directories, %s; filled in %.1f s\n",
                       small->files, SMALL_FILE_BYTES, SMALL_DIRS, small->df, small->fill_s);
        printf("- default sandbox options (256 MiB, 10,000 inodes); N = %u per row after %u warm-up; %u ms of loop "
               "turns between two operations\n\n",
               cfg.n, cfg.warmup, cfg.gap_ms);
        rows_print(1);
        printf("\n## Fork, snapshots: targets (verdict on p50)\n\n| Target | Measured | | Verdict |\n|---|---|---|---|\n");
        target_line("fork, 100 MB in 1,000 files ≤ 100 ms", "cold: fork → done", "f_cold", 100);
        target_line("", "cold: fork → first result", "f_cold_first", 100);
        target_line("", "pool: fork → done", "f_pool", 100);
        target_line("", "pool: fork → first result", "f_pool_first", 100);
        target_line("fork, ~10,000 small files ≤ 150 ms", "cold: fork → done", "m_cold", 150);
        target_line("", "cold: fork → first result", "m_cold_first", 150);
        target_line("", "pool: fork → done", "m_pool", 150);
        target_line("", "pool: fork → first result", "m_pool_first", 150);
        target_line("snapshot of 100 MB ≤ 150 ms", "create → done", "s_create", 150);
        target_line("restore of 100 MB ≤ 150 ms", "restore → done", "s_restore", 150);
        target_line("fork of a large tree unchanged since its last fork ≤ 15 ms", "~10,000 files, cold: fork → done",
                    "m_cold", 15);
        target_line("", "~10,000 files, pool: fork → done", "m_pool", 15);
        target_line("", "1 GB, cold: fork → done", "l_gb", 15);
        bench_notes_print();
}

/* ------------------------------------------------------------------ main */

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx-bench-image [OPTIONS]\n"
                "  --only LETTERS     f (fork, 100 MB in 1,000 files), m (fork, ~10,000 small files),\n"
                "                     s (snapshot create and restore, 100 MB), l (forks in layers:\n"
                "                     1 GB, after N changes, the kernel's overlay mount); default fmsl\n"
                "  -n, --iterations N samples per row (default %u)\n"
                "  --warmup N         untimed operations before each row (default %u)\n"
                "  --gap-ms MS        loop turns between two operations, the pool refills (default %u)\n"
                "  --quiet-ms MS      idle time that means the loop has settled (default %u)\n"
                "  --pool N           pool size for the pool rows (default %u)\n"
                "  -v, --verbose      every sample on stderr\n"
                "  --quick            -n 3 (a smoke test)\n",
                cfg.n, cfg.warmup, cfg.gap_ms, cfg.quiet_ms, cfg.pool);
}

int main(int argc, char **argv) {
        enum { O_ONLY = 256, O_WARMUP, O_GAP, O_QUIET, O_POOL, O_QUICK };
        static const struct option opts[] = {
                { "only", required_argument, NULL, O_ONLY },
                { "iterations", required_argument, NULL, 'n' },
                { "warmup", required_argument, NULL, O_WARMUP },
                { "gap-ms", required_argument, NULL, O_GAP },
                { "quiet-ms", required_argument, NULL, O_QUIET },
                { "pool", required_argument, NULL, O_POOL },
                { "quick", no_argument, NULL, O_QUICK },
                { "verbose", no_argument, NULL, 'v' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        int c;
        while ((c = getopt_long(argc, argv, "n:hv", opts, NULL)) != -1) {
                switch (c) {
                case O_ONLY: cfg.only = optarg; break;
                case 'n': cfg.n = bench_parse_uint(optarg, "iterations"); break;
                case O_WARMUP: cfg.warmup = bench_parse_uint(optarg, "warmup"); break;
                case O_GAP: cfg.gap_ms = bench_parse_uint(optarg, "gap-ms"); break;
                case O_QUIET: cfg.quiet_ms = bench_parse_uint(optarg, "quiet-ms"); break;
                case O_POOL: cfg.pool = bench_parse_uint(optarg, "pool"); break;
                case O_QUICK: cfg.n = 3; break;
                case 'v': cfg.verbose = true; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        if (optind < argc || cfg.n == 0) {
                usage(stderr);
                return 2;
        }
        int r = sbx_context_new(&g_ctx);
        if (r < 0) {
                fprintf(stderr, "sbx-bench-image: sbx_context_new: %s\n", strerror(-r));
                return 1;
        }
        bench_die_hook = on_die;
        SbxContext *ctx = g_ctx;
        uint64_t t0 = bench_now_ns();
        Parent big = { 0 }, small = { 0 };
        unsigned n_small = 0;

        sbx_context_set_pool(ctx, 0);
        if (want('f') || want('s')) {
                parent_new(ctx, &big, "100 MB sandbox");
                parent_fill_big(ctx, &big);
        }
        if (want('m')) {
                parent_new(ctx, &small, "small-files sandbox");
                parent_fill_small(ctx, &small, &n_small);
        }
        loop_quiet(ctx, (int)cfg.quiet_ms);
        char name[200];

        /* Cold: every fork's sandbox is made on the spot. */
        if (want('f'))
                bench_forks(ctx, &big, "f_cold", "fork, 100 MB in 1,000 files, cold", false);
        if (want('m')) {
                snprintf(name, sizeof name, "fork, %u files of %u bytes, cold", n_small, SMALL_FILE_BYTES);
                bench_forks(ctx, &small, "m_cold", name, false);
        }
        /* With a pool: the fork's sandbox (default options) comes ready from the pool. */
        if (want('f') || want('m')) {
                sbx_context_set_pool(ctx, cfg.pool);
                spin(ctx, 1000 + 200 * cfg.pool);
                loop_quiet(ctx, (int)cfg.quiet_ms);
                if (want('f'))
                        bench_forks(ctx, &big, "f_pool", "fork, 100 MB in 1,000 files, pool", true);
                if (want('m')) {
                        snprintf(name, sizeof name, "fork, %u files of %u bytes, pool", n_small, SMALL_FILE_BYTES);
                        bench_forks(ctx, &small, "m_pool", name, true);
                }
                sbx_context_set_pool(ctx, 0);
                settle(ctx);
        }
        if (want('s'))
                bench_snapshots(ctx, &big);
        if (want('f'))
                bench_cmd_reference(ctx, &big, "ref_cmd_f");
        if (want('m'))
                bench_cmd_reference(ctx, &small, "ref_cmd_m");
        if (big.sb)
                bench_cp_reference(ctx, &big);
        if (want('l'))
                bench_layers(ctx, &small);

        if (big.sb)
                big.sb = sbx_sandbox_free(big.sb);
        if (small.sb)
                small.sb = sbx_sandbox_free(small.sb);
        g_ctx = sbx_context_free(g_ctx);
        bench_progress("done in %.1f s", bench_ms_since(t0) / 1000);
        report(&big, &small);
        return 0;
}
