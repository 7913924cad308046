/* SPDX-License-Identifier: MIT */
/* sbx-bench-soak: whether a long-lived libsbx process leaks, over many runs and many sandboxes.
 *
 * Phases:
 *   1  --runs N (default 100,000) commands in one sandbox's default session, one at a time.
 *      Most are `echo hi`; every 10th (i % 10 == 1) reads stdin (`cat`, "hi\n" on stdin),
 *      every 10th (i % 10 == 2) gets a per-run env (`echo $SOAK_I`), every 100th
 *      (i % 100 == 3) leaves a background `sleep 0.05` behind, every 100th (i % 100 == 53)
 *      leaves a `sleep 10` that leftovers=KILL ends with the command, and every 500th
 *      (i % 500 == 4) is a `sleep 5` with a 50 ms timeout.
 *   2  --cycles N (default 10,000) cycles of sbx_sandbox_new, first `echo hi` in the default
 *      session, sbx_sandbox_free.
 * Every checkpoint (1,000 iterations; N/10 when N is under 10,000) the loop is settled first
 * (turned until quiet, then until the processes and cgroup directories are back at the
 * phase's baseline or have not changed for 500 ms, at most 5 s: destroy is asynchronous and
 * only the loop reaps), then this process's open fds, VmRSS, host mounts, cgroup directories
 * below its sbx-<pid> bases and host processes of its own (descendants, or in its cgroups)
 * are counted. Each series is "flat" when its last value is within a small tolerance of its
 * value at the first checkpoint. Between checkpoints the cgroup directories are also counted
 * every 100 iterations without turning the loop longer than the runs do (the window's peak),
 * and phase 1 ends with 3 s of an idle loop and one more count, sandbox still there.
 *
 * Only the public API (sbx/sbx.h) is used. Progress goes to stderr, the Markdown report to
 * stdout. Times are CLOCK_MONOTONIC. Run as root. Not part of the test suite. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common.h"
#include "cgroup/cgroup.h"
#include "sbx/sbx.h"

const char bench_prog[] = "sbx-bench-soak";

/* ------------------------------------------------------------------ configuration */

typedef struct Config {
        unsigned runs;     /* phase 1 */
        unsigned cycles;   /* phase 2 */
        unsigned quiet_ms; /* loop quiet time before a checkpoint */
} Config;

static Config cfg = { .runs = 100000, .cycles = 10000, .quiet_ms = 20 };

/* Tolerances of the verdict: last checkpoint minus the first one. */
#define TOL_FDS 2
#define TOL_RSS_KB 2048
#define TOL_MOUNTS 0
#define TOL_CGROUPS 2
#define TOL_PROCS 2
/* The settle before a checkpoint: at most this long, stable for this long. */
#define SETTLE_MAX_MS 5000
#define SETTLE_STABLE_MS 500
/* The idle spell at the end of phase 1 (the library sweeps emptied command cgroups after 1 s
 * without a new one). */
#define IDLE_END_MS 3000

/* ------------------------------------------------------------------ host state */

typedef struct Probe {
        long fds, rss_kb, mounts, cgroups, procs;
} Probe;

/* The directories below which sbx makes this process's cgroups: <cgroup2>/sbx-<pid> (or below
 * $SBX_CGROUP_PARENT), and for v1 memory, pids and cpu <mount><own path>/sbx-<pid>; found as
 * src/cgroup/cgroup.c (whose mount lookups this uses) finds them. */
static char bases[4][2048];
static size_t n_bases;
/* Our v2 base as /proc/PID/cgroup spells it ("/sbx-<pid>"), "" if unknown. */
static char v2_rel[1024];

static void add_base(const char *mnt, const char *own) {
        if (n_bases < sizeof bases / sizeof bases[0])
                snprintf(bases[n_bases++], sizeof bases[0], "%s%s/sbx-%d", mnt,
                         strcmp(own, "/") == 0 ? "" : own, (int)getpid());
}

static void find_bases(void) {
        char v2[1024], v1[3][1024];
        static const char *const ctrl[3] = { "memory", "pids", "cpu" };
        cgroup_find_mounts(v2, v1[0], v1[1], v1[2], sizeof v2);
        if (v2[0]) {
                const char *parent = getenv("SBX_CGROUP_PARENT");
                add_base(parent && *parent ? parent : v2, "/");
                /* /proc/PID/cgroup shows paths relative to the cgroup2 mount. */
                const char *rel = bases[0] + strlen(v2);
                if (strncmp(bases[0], v2, strlen(v2)) == 0 && *rel == '/')
                        snprintf(v2_rel, sizeof v2_rel, "%s", rel);
        }
        for (int i = 0; i < 3; i++)
                if (v1[i][0]) {
                        char own[1024];
                        cgroup_own_v1_path(ctrl[i], own, sizeof own);
                        add_base(v1[i], own);
                }
}

/* Directories below dir (not dir itself), depth-first, at most 8 levels; at the top, not the
 * spawner's spares (the next sandbox's cgroups made ahead: the daemon's own, always there). */
static long count_dirs(const char *dir, int depth) {
        DIR *d = opendir(dir);
        if (!d)
                return 0;
        long n = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
                    (depth == 0 && strcmp(de->d_name, "spare") == 0))
                        continue;
                n++;
                if (depth < 8) {
                        char sub[4096];
                        snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name);
                        n += count_dirs(sub, depth + 1);
                }
        }
        closedir(d);
        return n;
}

static long count_cgroups(void) {
        long n = 0;
        for (size_t i = 0; i < n_bases; i++)
                n += count_dirs(bases[i], 0);
        return n;
}

static long count_fds(void) {
        DIR *d = opendir("/proc/self/fd");
        if (!d)
                return -1;
        long n = 0;
        struct dirent *de;
        while ((de = readdir(d)))
                if (de->d_name[0] != '.')
                        n++;
        closedir(d);
        return n - 1; /* the directory's own fd */
}

static long rss_kb(void) {
        FILE *f = fopen("/proc/self/status", "re");
        long v = -1;
        char line[256];
        while (f && fgets(line, sizeof line, f))
                if (strncmp(line, "VmRSS:", 6) == 0)
                        v = strtol(line + 6, NULL, 10);
        if (f)
                fclose(f);
        return v;
}

static long count_mounts(void) {
        FILE *f = fopen("/proc/self/mountinfo", "re");
        if (!f)
                return -1;
        long n = 0;
        int c;
        while ((c = getc(f)) != EOF)
                n += c == '\n';
        fclose(f);
        return n;
}

/* The parent pid in /proc/PID/stat (after the last ')', which ends the command's name). */
static int read_ppid(int pid) {
        char path[64], buf[1024];
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        FILE *f = fopen(path, "re");
        if (!f)
                return -1;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        char *p = strrchr(buf, ')');
        int ppid;
        return p && sscanf(p + 1, " %*c %d", &ppid) == 1 ? ppid : -1;
}

static bool in_our_cgroup(int pid) {
        char path[64], line[2048];
        if (!v2_rel[0])
                return false;
        snprintf(path, sizeof path, "/proc/%d/cgroup", pid);
        FILE *f = fopen(path, "re");
        bool yes = false;
        size_t k = strlen(v2_rel);
        while (f && fgets(line, sizeof line, f))
                if (strncmp(line, "0::", 3) == 0 && strncmp(line + 3, v2_rel, k) == 0 &&
                    (line[3 + k] == '/' || line[3 + k] == '\n' || line[3 + k] == 0))
                        yes = true;
        if (f)
                fclose(f);
        return yes;
}

typedef struct Proc {
        int pid, ppid;
} Proc;

static Proc *procs;
static size_t procs_cap;

static int ppid_of(const Proc *v, size_t n, int pid) {
        /* v is sorted by pid (readdir of /proc lists pids in order, but sorting is cheap). */
        size_t lo = 0, hi = n;
        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (v[mid].pid == pid)
                        return v[mid].ppid;
                if (v[mid].pid < pid)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return -1;
}

static int cmp_proc(const void *a, const void *b) {
        int x = ((const Proc *)a)->pid, y = ((const Proc *)b)->pid;
        return x < y ? -1 : x > y;
}

/* Host processes (zombies included) that descend from this one, or sit in our v2 cgroups. */
static long count_procs(void) {
        DIR *d = opendir("/proc");
        if (!d)
                return -1;
        size_t n = 0;
        int me = (int)getpid();
        struct dirent *de;
        while ((de = readdir(d))) {
                if (!isdigit((unsigned char)de->d_name[0]))
                        continue;
                int pid = atoi(de->d_name), ppid = read_ppid(pid);
                if (ppid < 0)
                        continue;
                if (n == procs_cap) {
                        /* Grows once to the host's process count and stays (RSS is measured). */
                        size_t nc = procs_cap ? procs_cap * 2 : 4096;
                        Proc *np = realloc(procs, nc * sizeof *np);
                        if (!np)
                                bench_die("out of memory");
                        procs = np;
                        procs_cap = nc;
                }
                procs[n++] = (Proc){ pid, ppid };
        }
        closedir(d);
        qsort(procs, n, sizeof *procs, cmp_proc);
        long count = 0;
        for (size_t i = 0; i < n; i++) {
                if (procs[i].pid == me)
                        continue;
                bool mine = false;
                int p = procs[i].ppid;
                for (int hops = 0; p > 1 && hops < 64; hops++) {
                        if (p == me) {
                                mine = true;
                                break;
                        }
                        p = ppid_of(procs, n, p);
                }
                if (mine || in_our_cgroup(procs[i].pid))
                        count++;
        }
        return count;
}

static Probe probe(void) {
        return (Probe){ .fds = count_fds(), .rss_kb = rss_kb(), .mounts = count_mounts(),
                        .cgroups = count_cgroups(), .procs = count_procs() };
}

/* ------------------------------------------------------------------ checkpoints */

typedef struct Point {
        unsigned iter;
        Probe p;
        double elapsed_s;
        double p50_ms, p99_ms; /* of the window's iterations (0 for the baseline) */
        double settle_ms;
        long peak_cgroups; /* most cgroup directories seen in the window, sampled every 100 */
} Point;

typedef struct Series {
        const char *title;
        const char *what; /* "run", "cycle" */
        Point *pts;
        size_t n, cap;
        unsigned settle_timeouts;
        Probe idle_end; /* phase 1: after IDLE_END_MS of an idle loop, sandbox still there */
        bool have_idle_end;
} Series;

static void series_add(Series *s, const Point *p) {
        if (s->n == s->cap)
                bench_die("more checkpoints than expected");
        s->pts[s->n++] = *p;
}

/* Turns the loop until quiet, then until processes and cgroups are back at `want` (NULL:
 * only until they are stable) or have not changed for SETTLE_STABLE_MS, at most
 * SETTLE_MAX_MS. Returns the probe taken after it and the time spent in *ret_ms. */
static Probe settle(SbxContext *ctx, const Probe *want, double *ret_ms, bool *ret_timeout) {
        uint64_t t0 = bench_now_ns();
        loop_quiet(ctx, (int)cfg.quiet_ms);
        long cg = count_cgroups(), pr = count_procs();
        uint64_t stable_since = bench_now_ns();
        *ret_timeout = false;
        for (;;) {
                if (want && cg <= want->cgroups && pr <= want->procs)
                        break;
                if (bench_ms_since(stable_since) >= SETTLE_STABLE_MS)
                        break;
                if (bench_ms_since(t0) >= SETTLE_MAX_MS) {
                        *ret_timeout = true;
                        break;
                }
                uint64_t t1 = bench_now_ns();
                while (bench_ms_since(t1) < 50)
                        (void)sbx_context_run_once(ctx, 10);
                long cg2 = count_cgroups(), pr2 = count_procs();
                if (cg2 != cg || pr2 != pr) {
                        cg = cg2;
                        pr = pr2;
                        stable_since = bench_now_ns();
                }
        }
        *ret_ms = bench_ms_since(t0);
        return probe();
}

/* Reserves and touches room for n samples, so that growing them later moves no RSS. */
static void samples_reserve(Samples *s, size_t n) {
        s->v = calloc(n ? n : 1, sizeof *s->v);
        if (!s->v)
                bench_die("out of memory");
        memset(s->v, 0, (n ? n : 1) * sizeof *s->v);
        s->cap = n ? n : 1;
        s->n = 0;
}

/* The most cgroup directories seen since the last checkpoint, sampled every 100 iterations
 * without turning the loop (what piles up while commands keep coming). */
static long window_peak;

static void sample_peak(unsigned i) {
        if (i % 100 == 0) {
                long c = count_cgroups();
                if (c > window_peak)
                        window_peak = c;
        }
}

static void checkpoint(SbxContext *ctx, Series *s, unsigned iter, uint64_t t0, Samples *window) {
        Point pt = { .iter = iter, .peak_cgroups = window_peak };
        window_peak = 0;
        bool to = false;
        const Probe *want = s->n ? &s->pts[0].p : NULL;
        pt.p = settle(ctx, want, &pt.settle_ms, &to);
        s->settle_timeouts += to;
        pt.elapsed_s = bench_ms_since(t0) / 1000;
        if (window && window->n) {
                Summary x = summarize(window);
                pt.p50_ms = x.p50;
                pt.p99_ms = x.p99;
                window->n = 0;
        }
        series_add(s, &pt);
        bench_progress("%s %u: fds %ld, RSS %ld kB, mounts %ld, cgroups %ld, processes %ld, %.1f s%s", s->what, iter,
                       pt.p.fds, pt.p.rss_kb, pt.p.mounts, pt.p.cgroups, pt.p.procs, pt.elapsed_s,
                       to ? " (settle timed out)" : "");
}

static unsigned interval_for(unsigned n) {
        unsigned k = n / 10;
        return k >= 1000 ? 1000 : k ? k : 1;
}

/* ------------------------------------------------------------------ runs */

typedef enum Kind { K_ECHO, K_STDIN, K_ENV, K_BG, K_KILL, K_TIMEOUT, K__N } Kind;

static const char *const kind_name[K__N] = {
        [K_ECHO] = "`echo hi`",
        [K_STDIN] = "`cat` with \"hi\\n\" on stdin",
        [K_ENV] = "`echo $SOAK_I` with a per-run env",
        [K_BG] = "`sleep 0.05 & echo hi` (left running)",
        [K_KILL] = "`sleep 10 & echo hi`, leftovers=KILL",
        [K_TIMEOUT] = "`sleep 5` with a 50 ms timeout",
};

static Kind kind_of(unsigned i) {
        if (i % 500 == 4)
                return K_TIMEOUT;
        if (i % 100 == 3)
                return K_BG;
        if (i % 100 == 53)
                return K_KILL;
        if (i % 10 == 1)
                return K_STDIN;
        if (i % 10 == 2)
                return K_ENV;
        return K_ECHO;
}

typedef struct Run {
        bool done;
        bool ok;
        char expect[32];
        bool expect_timeout;
        char got[96];
} Run;

static void run_done(void *ud, const SbxResult *res) {
        Run *r = ud;
        r->done = true;
        size_t k = strlen(r->expect);
        if (r->expect_timeout)
                r->ok = res->error_class == SBX_ERROR_TIMEOUT && res->exit_code == 124;
        else
                r->ok = res->error_class == SBX_ERROR_NONE && res->exit_code == 0 && res->stdout_len == k &&
                        memcmp(res->stdout_data, r->expect, k) == 0;
        if (!r->ok) {
                size_t m = res->stderr_len < 60 ? res->stderr_len : 60;
                snprintf(r->got, sizeof r->got, "exit %d (%s), stdout %zu bytes, stderr '%.*s'", res->exit_code,
                         sbx_error_class_name(res->error_class) ? sbx_error_class_name(res->error_class) : "NONE",
                         res->stdout_len, (int)m, (const char *)res->stderr_data);
                for (char *p = r->got; *p; p++)
                        if (*p == '\n' || *p == '|')
                                *p = ' ';
        }
}

/* Queues run i of kind k on s and turns the loop until it is done. Returns 0 or -errno. */
static int run_one(SbxContext *ctx, SbxSession *s, unsigned i, Kind k, Run *r) {
        char envbuf[48];
        const char *env[2] = { envbuf, NULL };
        SbxRunOptions o = { 0 };
        *r = (Run){ 0 };
        snprintf(r->expect, sizeof r->expect, "hi\n");
        switch (k) {
        case K_ECHO: o.command = "echo hi"; break;
        case K_STDIN:
                o.command = "cat";
                o.stdin_data = "hi\n";
                o.stdin_len = 3;
                break;
        case K_ENV:
                o.command = "echo $SOAK_I";
                snprintf(envbuf, sizeof envbuf, "SOAK_I=%u", i);
                snprintf(r->expect, sizeof r->expect, "%u\n", i);
                o.env = env;
                break;
        case K_BG: o.command = "sleep 0.05 & echo hi"; break;
        case K_KILL:
                o.command = "sleep 10 & echo hi";
                o.leftovers = SBX_LEFTOVERS_KILL;
                break;
        case K_TIMEOUT:
                o.command = "sleep 5";
                o.timeout_ms = 50;
                r->expect_timeout = true;
                break;
        case K__N:
        default: return -EINVAL;
        }
        o.command_len = strlen(o.command);
        int e = sbx_session_run(s, &o, NULL, run_done, r, NULL);
        while (e >= 0 && !r->done)
                e = sbx_context_run_once(ctx, -1);
        return e < 0 ? e : 0;
}

/* ------------------------------------------------------------------ phase 1 */

static Samples kind_lat[K__N];
static unsigned kind_bad[K__N];

static void phase_runs(SbxContext *ctx, Series *ser) {
        unsigned every = interval_for(cfg.runs);
        Samples window = { 0 };
        for (int k = 0; k < K__N; k++)
                samples_reserve(&kind_lat[k], cfg.runs);
        samples_reserve(&window, every);

        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so);
        SbxSandbox *sb = NULL;
        SbxSession *s = NULL;
        int e = sbx_sandbox_new(ctx, &so, &sb);
        if (e < 0)
                bench_die("cannot create a sandbox: %s", sbx_context_last_error(ctx));
        e = sbx_session_get(sb, NULL, &s);
        if (e < 0)
                bench_die("cannot start a session: %s", strerror(-e));
        Run r;
        if (run_one(ctx, s, 0, K_ECHO, &r) < 0 || !r.ok)
                bench_die("the first run failed: %s", r.got);

        bench_progress("phase 1: %u runs in one sandbox, a checkpoint every %u", cfg.runs, every);
        uint64_t t0 = bench_now_ns();
        checkpoint(ctx, ser, 0, t0, NULL);
        for (unsigned i = 1; i <= cfg.runs; i++) {
                Kind k = kind_of(i);
                uint64_t t = bench_now_ns();
                e = run_one(ctx, s, i, k, &r);
                double ms = bench_ms_since(t);
                if (e < 0)
                        bench_die("run %u: %s", i, strerror(-e));
                samples_add(&kind_lat[k], ms);
                if (k == K_ECHO)
                        samples_add(&window, ms);
                if (!r.ok && kind_bad[k]++ < 3)
                        bench_note("run %u (%s): unexpected result: %s", i, kind_name[k], r.got);
                sample_peak(i);
                if (i % every == 0 || i == cfg.runs)
                        checkpoint(ctx, ser, i, t0, &window);
        }
        /* Retired command cgroups are swept once the loop has been quiet a while: is
         * everything gone after an idle spell? */
        uint64_t t1 = bench_now_ns();
        while (bench_ms_since(t1) < IDLE_END_MS)
                (void)sbx_context_run_once(ctx, 50);
        ser->idle_end = probe();
        ser->have_idle_end = true;
        sbx_sandbox_free(sb);
        samples_free(&window);
}

/* ------------------------------------------------------------------ phase 2 */

static Samples cycle_lat;
static unsigned cycle_bad;

static void phase_cycles(SbxContext *ctx, Series *ser) {
        unsigned every = interval_for(cfg.cycles);
        Samples window = { 0 };
        samples_reserve(&cycle_lat, cfg.cycles);
        samples_reserve(&window, every);
        bench_progress("phase 2: %u create / first run / destroy cycles, a checkpoint every %u", cfg.cycles, every);
        uint64_t t0 = bench_now_ns();
        checkpoint(ctx, ser, 0, t0, NULL);
        for (unsigned i = 1; i <= cfg.cycles; i++) {
                SbxSandboxOptions so;
                sbx_sandbox_options_init(&so);
                SbxSandbox *sb = NULL;
                SbxSession *s = NULL;
                Run r = { 0 };
                uint64_t t = bench_now_ns();
                int e = sbx_sandbox_new(ctx, &so, &sb);
                if (e < 0)
                        bench_die("cycle %u: cannot create a sandbox: %s", i, sbx_context_last_error(ctx));
                e = sbx_session_get(sb, NULL, &s);
                if (e >= 0)
                        e = run_one(ctx, s, i, K_ECHO, &r);
                sbx_sandbox_free(sb);
                double ms = bench_ms_since(t);
                if (e < 0)
                        bench_die("cycle %u: %s", i, strerror(-e));
                samples_add(&cycle_lat, ms);
                samples_add(&window, ms);
                if (!r.ok && cycle_bad++ < 3)
                        bench_note("cycle %u: unexpected result: %s", i, r.got);
                sample_peak(i);
                if (i % every == 0 || i == cfg.cycles)
                        checkpoint(ctx, ser, i, t0, &window);
        }
        samples_free(&window);
}

/* ------------------------------------------------------------------ report */

typedef struct Verdict {
        const char *name;
        long first, last, max, tol;
        bool flat;
} Verdict;

static long field(const Probe *p, int f) {
        switch (f) {
        case 0: return p->fds;
        case 1: return p->rss_kb;
        case 2: return p->mounts;
        case 3: return p->cgroups;
        case 4: return p->procs;
        default: return 0;
        }
}

/* Verdicts compare the last checkpoint with the first one after the baseline (iteration
 * 1,000 with the defaults); returns whether every series is flat. */
static bool series_print(const Series *s) {
        static const char *const names[5] = { "open fds", "RSS (kB)", "host mounts", "cgroup directories",
                                               "processes" };
        static const long tols[5] = { TOL_FDS, TOL_RSS_KB, TOL_MOUNTS, TOL_CGROUPS, TOL_PROCS };
        printf("\n## %s\n\n", s->title);
        printf("| %s | fds | RSS kB | mounts | cgroups | processes | elapsed s | p50 ms | p99 ms | settle ms | "
               "peak cgroups |\n",
               s->what);
        printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
        for (size_t i = 0; i < s->n; i++) {
                const Point *p = &s->pts[i];
                if (i == 0)
                        printf("| 0 (baseline) | %ld | %ld | %ld | %ld | %ld | %.1f | – | – | %.0f | – |\n", p->p.fds,
                               p->p.rss_kb, p->p.mounts, p->p.cgroups, p->p.procs, p->elapsed_s, p->settle_ms);
                else
                        printf("| %u | %ld | %ld | %ld | %ld | %ld | %.1f | %.3f | %.3f | %.0f | %ld |\n", p->iter,
                               p->p.fds, p->p.rss_kb, p->p.mounts, p->p.cgroups, p->p.procs, p->elapsed_s, p->p50_ms,
                               p->p99_ms, p->settle_ms, p->peak_cgroups);
        }
        if (s->n < 2) {
                printf("\nVerdict: no checkpoint after the baseline.\n");
                return false;
        }
        const Point *ref = &s->pts[1], *last = &s->pts[s->n - 1];
        bool all = true;
        printf("\nVerdict (iteration %u → %u; p50/p99 are of the window's `echo hi` %ss):\n\n", ref->iter, last->iter,
               s->what);
        for (int f = 0; f < 5; f++) {
                long a = field(&ref->p, f), b = field(&last->p, f), mx = a;
                for (size_t i = 1; i < s->n; i++)
                        if (field(&s->pts[i].p, f) > mx)
                                mx = field(&s->pts[i].p, f);
                bool flat = b - a <= tols[f];
                all &= flat;
                printf("- %s: %ld → %ld (%+ld, max %ld; tolerance +%ld): %s", names[f], a, b, b - a, mx, tols[f],
                       flat ? "**flat**" : "**grows**");
                if (f == 3) {
                        long peak = 0;
                        for (size_t i = 1; i < s->n; i++)
                                if (s->pts[i].peak_cgroups > peak)
                                        peak = s->pts[i].peak_cgroups;
                        printf("; peak between checkpoints %ld", peak);
                        if (s->have_idle_end)
                                printf("; %ld after the idle spell (baseline %ld)", s->idle_end.cgroups,
                                       s->pts[0].p.cgroups);
                }
                printf("\n");
        }
        if (s->settle_timeouts)
                printf("- %u checkpoint(s) hit the %d ms settle bound\n", s->settle_timeouts, SETTLE_MAX_MS);
        if (s->have_idle_end)
                printf("- after %d ms more of an idle loop (the sandbox still there): fds %ld, RSS %ld kB, mounts %ld, "
                       "cgroups %ld, processes %ld\n",
                       IDLE_END_MS, s->idle_end.fds, s->idle_end.rss_kb, s->idle_end.mounts, s->idle_end.cgroups,
                       s->idle_end.procs);
        return all;
}

static void report(Series *s1, Series *s2, const Probe *end, double total_s) {
        printf("# sbx soak\n\n");
        printf("%u runs in one sandbox, then %u create / first run / destroy cycles, in %.1f s. Checkpoints "
               "count this process's open fds (/proc/self/fd), VmRSS, lines of /proc/self/mountinfo, "
               "directories below its cgroup bases",
               cfg.runs, cfg.cycles, total_s);
        for (size_t i = 0; i < n_bases; i++)
                printf("%s`%s`", i ? ", " : " (", bases[i]);
        printf("%s and host processes descending from it or in its v2 cgroup.\n", n_bases ? ")" : "");
        bool f1 = s1->n ? series_print(s1) : true;
        bool f2 = s2->n ? series_print(s2) : true;
        printf("\n## Latency (ms), submit → done callback\n\n");
        rows_print(3);
        printf("\nAfter sbx_context_free: fds %ld, RSS %ld kB, mounts %ld, cgroup directories %ld (bases: ", end->fds,
               end->rss_kb, end->mounts, end->cgroups);
        size_t left = 0;
        for (size_t i = 0; i < n_bases; i++) {
                struct stat st;
                left += stat(bases[i], &st) == 0;
        }
        printf("%zu of %zu left), processes %ld.\n", left, n_bases, end->procs);
        printf("\n**Overall: %s.**\n", f1 && f2 ? "every series flat, no leak seen" : "a series grows (see above)");
        bench_notes_print();
}

/* ------------------------------------------------------------------ main */

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx-bench-soak [OPTIONS]   (as root)\n"
                "  --runs N       runs in one sandbox, phase 1 (default %u; 0 skips it)\n"
                "  --cycles N     create / first run / destroy cycles, phase 2 (default %u; 0 skips it)\n"
                "  --quiet-ms MS  loop quiet time before a checkpoint (default %u)\n"
                "  --quick        --runs 1000 --cycles 100\n"
                "A checkpoint every 1,000 iterations (N/10 when N < 10,000).\n",
                cfg.runs, cfg.cycles, cfg.quiet_ms);
}

static Series new_series(const char *title, const char *what, unsigned n) {
        unsigned every = interval_for(n);
        Series s = { .title = title, .what = what, .cap = n / every + 3 };
        s.pts = calloc(s.cap, sizeof *s.pts);
        if (!s.pts)
                bench_die("out of memory");
        return s;
}

int main(int argc, char **argv) {
        enum { O_RUNS = 256, O_CYCLES, O_QUIET, O_QUICK };
        static const struct option opts[] = {
                { "runs", required_argument, NULL, O_RUNS },
                { "cycles", required_argument, NULL, O_CYCLES },
                { "quiet-ms", required_argument, NULL, O_QUIET },
                { "quick", no_argument, NULL, O_QUICK },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        int c;
        while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                switch (c) {
                case O_RUNS: cfg.runs = bench_parse_uint(optarg, "runs"); break;
                case O_CYCLES: cfg.cycles = bench_parse_uint(optarg, "cycles"); break;
                case O_QUIET: cfg.quiet_ms = bench_parse_uint(optarg, "quiet-ms"); break;
                case O_QUICK:
                        cfg.runs = 1000;
                        cfg.cycles = 100;
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
                fprintf(stderr, "%s: sbx_context_new: %s\n", bench_prog, strerror(-r));
                return 1;
        }
        find_bases();
        Series s1 = new_series("Phase 1: runs in one sandbox", "run", cfg.runs);
        Series s2 = new_series("Phase 2: create / first run / destroy cycles", "cycle", cfg.cycles);
        (void)count_procs(); /* sizes the process table before the first measurement */
        uint64_t t0 = bench_now_ns();
        if (cfg.runs)
                phase_runs(ctx, &s1);
        if (cfg.cycles)
                phase_cycles(ctx, &s2);
        sbx_context_free(ctx);
        double total_s = bench_ms_since(t0) / 1000;
        Probe end = probe();

        for (int k = 0; k < K__N; k++) {
                if (!kind_lat[k].n)
                        continue;
                Summary x = summarize(&kind_lat[k]);
                char key[16];
                snprintf(key, sizeof key, "run%d", k);
                row_add(key, kind_name[k], &x, "%u unexpected", kind_bad[k]);
        }
        if (cycle_lat.n) {
                Summary x = summarize(&cycle_lat);
                row_add("cycle", "sbx_sandbox_new + first `echo hi` + sbx_sandbox_free", &x, "%u unexpected",
                        cycle_bad);
        }
        bench_progress("done in %.1f s", total_s);
        report(&s1, &s2, &end, total_s);
        return 0;
}
