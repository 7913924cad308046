/* SPDX-License-Identifier: MIT */
/* sbx-bench-density: how many sandboxes one daemon holds and what each costs, and how the
 * daemon answers while many are made at once.
 *
 * Benchmarks (select with --only):
 *   m  memory: a fresh `sbx serve --socket` (pool 0, its derived cap); sandboxes made in batches
 *      of 50 (sandbox.create pipelined on one connection), each then running `true` so it holds
 *      a warm default session (a started bash and its waiting worker), up to each of --sizes
 *      (100, 500, 1000). At each size, after the loop has been quiet for a while: MemAvailable
 *      against the baseline taken before the first sandbox (what they cost the machine, kernel
 *      included: page tables, slab, kernel stacks, tmpfs), the memory charged to the sandboxes'
 *      cgroups (the daemon's sbx-<pid> cgroup: the same cost, but blind to other processes of
 *      the host), the kernel's part of the change (Slab, PageTables, KernelStack) and the
 *      daemon's own RSS and PSS (smaps_rollup) and fds. Each divided by the count. Then all
 *      are destroyed by closing the connection: the time until `health` says none are left
 *      and their cgroups are gone
 *   b  burst: a fresh server; --clients connections (50) each send --burst/--clients
 *      sandbox.create at once (500 in all), while a connection of its own sends `ping` every
 *      --ping-us (2 ms) and times each answer. Reported: the pings sent during the burst
 *      (p50, p99, max) against those before it, the burst's wall time, and the answers by kind
 *      (made, WORKER_UNAVAILABLE, any other error by its message). Run twice: with the derived
 *      cap, where nothing may fail, and with --max-sandboxes at 4/5 of the burst, where exactly
 *      the rest must be refused with WORKER_UNAVAILABLE
 *
 * MemAvailable is the whole machine's: other work on the host moves it, so the cgroup charge
 * is given beside it and the baseline is read again after teardown (the drift says how much
 * to trust the difference). The client is client.c's. Progress goes to stderr, the Markdown
 * report to stdout. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "base/macro.h"
#include "client.h"
#include "common.h"

const char bench_prog[] = "sbx-bench-density";

#define MAX_SIZES 8
#define BATCH 50
#define MAX_KINDS 8

static struct {
        const char *sbx;
        const char *only;
        unsigned sizes[MAX_SIZES], n_sizes;
        unsigned burst, clients, ping_us, settle_ms;
        unsigned max_sandboxes; /* the memory part's --max-sandboxes, 0: derived */
} cfg = { .only = "mb", .sizes = { 100, 500, 1000 }, .n_sizes = 3, .burst = 500, .clients = 50, .ping_us = 2000,
          .settle_ms = 3000 };

static void sleep_ms(unsigned ms) {
        struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

/* ------------------------------------------------------------------ the server */

/* Starts `sbx serve --socket` with --pool 0 and, when cap is not 0, --max-sandboxes cap. */
static void server_start(unsigned cap) {
        char c[16];
        snprintf(c, sizeof c, "%u", cap);
        const char *const args[] = { "--pool", "0", cap ? "--max-sandboxes" : NULL, c, NULL };
        bench_server_start(cfg.sbx, "sbx-bench-density", args, true, NULL);
}

static void conn_open(Client *c) { client_open_or_die(c, false, 300); }

/* The answer's result.key as an integer, or -1. */
static long long result_int(const json_t *a, const char *key) {
        long long v;
        return answer_int(a, key, &v) ? v : -1;
}

/* `health`'s result.key, or -1. */
static long long health_int(Client *c, const char *key) {
        _cleanup_(json_decrefp) json_t *h = client_call(c, "health", NULL);
        return result_int(h, key);
}

/* The cap on sandboxes in `health` (result.limits.maxSandboxes), or -1; and what bounds it
 * (maxSandboxesFrom) into from when it is not NULL. */
static long long health_cap(Client *c, char *from, size_t size) {
        _cleanup_(json_decrefp) json_t *h = client_call(c, "health", NULL);
        json_t *limits = answer_get(h, "limits"), *cap = json_object_get(limits, "maxSandboxes");
        if (from) {
                const char *f = json_string_value(json_object_get(limits, "maxSandboxesFrom"));
                snprintf(from, size, "%s", f ? f : "");
        }
        return json_is_integer(cap) ? json_integer_value(cap) : -1;
}

/* The next answer of a pipelined batch; bench_die()s, naming what, when it is not one. */
static json_t *batch_answer(Client *c, const char *what, unsigned n) {
        json_t *a = client_read(c);
        if (!a)
                bench_die("%s %u: the connection closed", what, n);
        return a;
}

/* bench_die with an answer that is not what was asked. */
static void die_answer(const char *what, unsigned n, const json_t *a) {
        char d[260];
        answer_describe(d, sizeof d, a);
        bench_die("%s %u: %s", what, n, d);
}

/* ------------------------------------------------------------------ what things cost */

typedef struct Mem {
        long long avail, slab, pagetables, kstack, shmem; /* KiB, /proc/meminfo */
        long long cg, cg_kmem; /* KiB charged to the sandboxes' cgroups, and its kernel part; -1 unknown */
        long long rss, pss;                               /* KiB, the daemon's */
        long fds;                                         /* the daemon's */
} Mem;

static long long meminfo_kib(const char *key) {
        char line[256];
        size_t n = strlen(key);
        long long v = -1;
        FILE *f = fopen("/proc/meminfo", "re");
        while (f && fgets(line, sizeof line, f))
                if (strncmp(line, key, n) == 0 && line[n] == ':') {
                        v = strtoll(line + n + 1, NULL, 10);
                        break;
                }
        if (f)
                fclose(f);
        return v;
}

static long long smaps_kib(pid_t pid, const char *key) {
        char path[64], line[256];
        size_t n = strlen(key);
        long long v = -1;
        snprintf(path, sizeof path, "/proc/%d/smaps_rollup", (int)pid);
        FILE *f = fopen(path, "re");
        while (f && fgets(line, sizeof line, f))
                if (strncmp(line, key, n) == 0 && line[n] == ':') {
                        v = strtoll(line + n + 1, NULL, 10);
                        break;
                }
        if (f)
                fclose(f);
        return v;
}

static long count_fds(pid_t pid) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
        long n = 0;
        FILE *p;
        char cmd[128];
        snprintf(cmd, sizeof cmd, "ls -1 %s 2>/dev/null | wc -l", path);
        if ((p = popen(cmd, "r"))) {
                if (fscanf(p, "%ld", &n) != 1)
                        n = -1;
                pclose(p);
        }
        return n;
}

/* A number from a file (the first one, or the value after "key " when key is given), -1. */
static long long file_num(const char *path, const char *key) {
        char line[256];
        long long v = -1;
        FILE *f = fopen(path, "re");
        while (f && fgets(line, sizeof line, f)) {
                size_t n = key ? strlen(key) : 0;
                if (!key || (strncmp(line, key, n) == 0 && line[n] == ' ')) {
                        v = strtoll(line + n, NULL, 10);
                        break;
                }
        }
        if (f)
                fclose(f);
        return v;
}

/* Bytes charged to the daemon's sbx-<pid> memory cgroup (under which every sandbox's is), in
 * KiB, and (*kmem) its kernel part: v1 memory.usage_in_bytes and memory.kmem.usage_in_bytes,
 * or v2 memory.current and memory.stat's `kernel`. -1 when not found. */
static long long cgroup_kib(pid_t pid, long long *kmem) {
        char path[256], line[1024], file[1400];
        snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
        FILE *f = fopen(path, "re");
        long long v = -1;
        *kmem = -1;
        while (f && fgets(line, sizeof line, f)) {
                line[strcspn(line, "\n")] = 0;
                char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
                if (!c2)
                        continue;
                *c2 = 0;
                const char *own = strcmp(c2 + 1, "/") == 0 ? "" : c2 + 1;
                bool v1 = strcmp(c1 + 1, "memory") == 0;
                if (v1)
                        snprintf(file, sizeof file, "/sys/fs/cgroup/memory%s/sbx-%d", own, (int)pid);
                else if (!c1[1] && line[0] == '0')
                        snprintf(file, sizeof file, "/sys/fs/cgroup%s/sbx-%d",
                                 access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0 ? own : "/unified", (int)pid);
                else
                        continue;
                char p1[1500], p2[1500];
                snprintf(p1, sizeof p1, "%s/%s", file, v1 ? "memory.usage_in_bytes" : "memory.current");
                snprintf(p2, sizeof p2, "%s/%s", file, v1 ? "memory.kmem.usage_in_bytes" : "memory.stat");
                long long x = file_num(p1, NULL);
                if (x >= 0 && v < 0) {
                        v = x / 1024;
                        long long k = file_num(p2, v1 ? NULL : "kernel");
                        *kmem = k >= 0 ? k / 1024 : -1;
                }
        }
        if (f)
                fclose(f);
        return v;
}

static Mem mem_now(void) {
        Mem m = { .avail = meminfo_kib("MemAvailable"), .slab = meminfo_kib("Slab"),
                  .pagetables = meminfo_kib("PageTables"), .kstack = meminfo_kib("KernelStack"),
                  .shmem = meminfo_kib("Shmem"), .rss = smaps_kib(bench_srv.pid, "Rss"), .pss = smaps_kib(bench_srv.pid, "Pss"),
                  .fds = count_fds(bench_srv.pid) };
        m.cg = cgroup_kib(bench_srv.pid, &m.cg_kmem);
        return m;
}

/* Sandbox cgroup directories left under the daemon's sbx-<pid> (any hierarchy); the spawner's
 * spares (the next sandbox's, made ahead) are the daemon's own. */
static long cgroups_left(void) {
        char cmd[320];
        long n = -1;
        snprintf(cmd, sizeof cmd,
                 "find /sys/fs/cgroup -mindepth 2 -maxdepth 6 -type d -path '*/sbx-%d/*' ! -name spare -prune "
                 "2>/dev/null | wc -l",
                 (int)bench_srv.pid);
        FILE *p = popen(cmd, "r");
        if (p) {
                if (fscanf(p, "%ld", &n) != 1)
                        n = -1;
                pclose(p);
        }
        return n;
}

/* ------------------------------------------------------------------ m: memory per sandbox */

typedef struct SizeRow {
        unsigned n;
        Mem m;
        double make_s;
        long long parked; /* health's count when read, -1 unknown */
} SizeRow;

static char (*ids)[33];
static unsigned n_ids;

/* Makes sandboxes on c until there are `to`, each running `true` once. */
static void grow_to(Client *c, unsigned to) {
        static char out[BATCH * 1100];
        while (n_ids < to) {
                unsigned k = to - n_ids < BATCH ? to - n_ids : BATCH;
                size_t len = 0;
                for (unsigned i = 0; i < k; i++)
                        (void)client_format(c, out, sizeof out, &len, "sandbox.create", NULL);
                client_write_or_die(c, out, len);
                for (unsigned i = 0; i < k; i++) {
                        _cleanup_(json_decrefp) json_t *a = batch_answer(c, "sandbox", n_ids + 1);
                        const char *id = answer_str(a, "sandboxId");
                        if (!id)
                                die_answer("sandbox", n_ids + 1, a);
                        snprintf(ids[n_ids + i], sizeof ids[0], "%s", id);
                }
                len = 0;
                for (unsigned i = 0; i < k; i++) {
                        char p[128];
                        snprintf(p, sizeof p, "{\"sandboxId\":\"%s\",\"command\":\"true\"}", ids[n_ids + i]);
                        (void)client_format(c, out, sizeof out, &len, "run", p);
                }
                client_write_or_die(c, out, len);
                for (unsigned i = 0; i < k; i++) {
                        _cleanup_(json_decrefp) json_t *a = batch_answer(c, "run in sandbox", n_ids + i + 1);
                        if (result_int(a, "exitCode") != 0)
                                die_answer("run in sandbox", n_ids + i + 1, a);
                }
                n_ids += k;
        }
}

static void bench_memory(void) {
        unsigned max = 0;
        for (unsigned i = 0; i < cfg.n_sizes; i++)
                max = cfg.sizes[i] > max ? cfg.sizes[i] : max;
        server_start(cfg.max_sandboxes);
        Client c, w;
        conn_open(&c);
        conn_open(&w);
        char from[32];
        long long cap = health_cap(&w, from, sizeof from);
        if (cap < (long long)max)
                bench_note("memory: the derived cap is %lld sandboxes (bound by %s), below the largest size %u: sizes "
                           "past it are skipped",
                           cap, from, max);
        ids = calloc(max, sizeof *ids);
        if (!ids)
                bench_die("out of memory");
        sleep_ms(cfg.settle_ms / 2);
        Mem base = mem_now();
        /* The daemon makes its sbx-<pid> cgroups with its first sandbox: nothing is charged yet. */
        if (base.cg < 0)
                base.cg = base.cg_kmem = 0;
        SizeRow rows[MAX_SIZES];
        unsigned n_rows = 0;
        for (unsigned i = 0; i < cfg.n_sizes; i++) {
                if ((long long)cfg.sizes[i] > cap)
                        continue;
                uint64_t t0 = bench_now_ns();
                grow_to(&c, cfg.sizes[i]);
                double s = bench_ms_since(t0) / 1000;
                /* After a run the session forks its next worker: let every one settle, and the
                 * idle ones be parked (sbx serve --park-after, 5 s by default). */
                sleep_ms(cfg.settle_ms);
                long long parked = health_int(&w, "parked");
                for (int k = 0; k < 150 && parked >= 0 && parked < (long long)cfg.sizes[i]; k++) {
                        sleep_ms(100);
                        parked = health_int(&w, "parked");
                }
                rows[n_rows] = (SizeRow){ .n = cfg.sizes[i], .m = mem_now(), .make_s = s, .parked = parked };
                bench_progress("memory: %u sandboxes, MemAvailable %+lld KiB", cfg.sizes[i],
                               rows[n_rows].m.avail - base.avail);
                n_rows++;
        }
        uint64_t t0 = bench_now_ns();
        client_close(&c);
        double gone_ms = -1, cg_ms = -1;
        for (int i = 0; i < 60000; i++) {
                if (health_int(&w, "sandboxes") == 0) {
                        gone_ms = bench_ms_since(t0);
                        break;
                }
                sleep_ms(1);
        }
        for (int i = 0; i < 6000; i++) {
                if (cgroups_left() == 0) {
                        cg_ms = bench_ms_since(t0);
                        break;
                }
                sleep_ms(10);
        }
        sleep_ms(cfg.settle_ms);
        Mem after = mem_now();
        client_close(&w);
        bench_server_stop();

        printf("## Memory per idle sandbox with a warm default session\n\n");
        printf("Derived cap of this server: %lld sandboxes (bound by %s). Baseline before the first sandbox: "
               "MemAvailable %lld MiB, daemon RSS %lld KiB, PSS %lld KiB, %ld fds.\n\n",
               cap, from, base.avail / 1024, base.rss, base.pss, base.fds);
        printf("Per sandbox, in KiB. *Charged*: what the kernel charges to the sandboxes' memory cgroups (their processes' "
               "pages, tmpfs, and the kernel objects it accounts). *Kernel, host-wide*: the growth of Slab + PageTables + "
               "KernelStack in /proc/meminfo, which also holds what is not charged to any sandbox (their cgroups' and "
               "namespaces' own structures). *Estimate*: the charge less its kernel part, plus that growth: the sandbox's "
               "cost to the machine, kernel included, without the noise of MemAvailable. *MemAvailable*: its drop, "
               "which is the whole machine's and moves with other work on it.\n\n");
        printf("| sandboxes | made in (s) | charged | of which kernel | kernel, host-wide | **estimate** | MemAvailable "
               "drop | daemon RSS | daemon PSS | daemon fds | parked | target <= 1 MiB (estimate) |\n");
        printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for (unsigned i = 0; i < n_rows; i++) {
                const SizeRow *r = &rows[i];
                double n = r->n;
                double kern = (double)(r->m.slab - base.slab + r->m.pagetables - base.pagetables + r->m.kstack - base.kstack) / n;
                double cg = r->m.cg >= 0 ? (double)(r->m.cg - base.cg) / n : -1;
                double kmem = r->m.cg_kmem >= 0 ? (double)(r->m.cg_kmem - base.cg_kmem) / n : -1;
                double est = cg >= 0 && kmem >= 0 ? cg - kmem + kern : -1;
                printf("| %u | %.1f | %.0f | %.0f | %.0f | **%.0f** | %.0f | %.1f | %.1f | %.2f | %lld | %s |\n", r->n,
                       r->make_s, cg, kmem, kern, est, (double)(base.avail - r->m.avail) / n,
                       (double)(r->m.rss - base.rss) / n, (double)(r->m.pss - base.pss) / n,
                       (double)(r->m.fds - base.fds) / n, r->parked, bench_verdict(est >= 0, est <= 1024));
        }
        printf("\n");
        printf("- teardown of %u sandboxes by closing their connection: `health` said 0 after %.0f ms, their cgroups "
               "were gone after %.0f ms\n",
               n_ids, gone_ms, cg_ms);
        if (n_rows > 0) {
                const SizeRow *last = &rows[n_rows - 1];
                printf("- MemAvailable given back by the teardown: %.0f KiB per sandbox (the same cost measured the "
                       "other way; the two differ by what the rest of the host did meanwhile)\n",
                       (double)(after.avail - last->m.avail) / last->n);
        }
        printf("- MemAvailable after teardown against the baseline: %+lld KiB in all (other work on the host and the "
               "kernel's caches move it: the noise of the MemAvailable column)\n\n",
               after.avail - base.avail);
        free(ids);
        ids = NULL;
        n_ids = 0;
}

/* ------------------------------------------------------------------ b: a burst of creates */

typedef struct Pinger {
        Client c;
        unsigned gap_us;
        atomic_bool stop;
        Samples rtt;     /* ms */
        double *sent_at; /* ms since the pinger started, per sample */
        size_t sent_cap;
        uint64_t t0;
} Pinger;

static void *pinger_main(void *arg) {
        Pinger *p = arg;
        while (!atomic_load(&p->stop)) {
                uint64_t t = bench_now_ns();
                _cleanup_(json_decrefp) json_t *a = client_call(&p->c, "ping", NULL);
                double ms = bench_ms_between(t, p->c.t_line);
                if (!json_is_true(answer_get(a, "pong")))
                        die_answer("ping", (unsigned)p->rtt.n + 1, a);
                if (p->rtt.n == p->sent_cap) {
                        p->sent_cap = p->sent_cap ? p->sent_cap * 2 : 4096;
                        if (!(p->sent_at = realloc(p->sent_at, p->sent_cap * sizeof *p->sent_at)))
                                bench_die("out of memory");
                }
                p->sent_at[p->rtt.n] = bench_ms_between(p->t0, t);
                samples_add(&p->rtt, ms);
                struct timespec ts = { 0, (long)p->gap_us * 1000 };
                nanosleep(&ts, NULL);
        }
        return NULL;
}

typedef struct Kind {
        char what[160];
        unsigned n;
} Kind;

typedef struct BurstResult {
        unsigned cap, made, refused_cap;
        Kind kinds[MAX_KINDS];
        unsigned n_kinds, other;
        double wall_ms, teardown_ms;
        Summary idle, during, create;
        size_t pings_during;
} BurstResult;

static void count_error(BurstResult *r, const json_t *a) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s", answer_error_message(a));
        if (strncmp(msg, "WORKER_UNAVAILABLE", 18) == 0) {
                r->refused_cap++;
                return;
        }
        for (unsigned i = 0; i < r->n_kinds; i++)
                if (strcmp(r->kinds[i].what, msg) == 0) {
                        r->kinds[i].n++;
                        return;
                }
        if (r->n_kinds < MAX_KINDS) {
                snprintf(r->kinds[r->n_kinds].what, sizeof r->kinds[0].what, "%s", msg);
                r->kinds[r->n_kinds++].n = 1;
        } else {
                r->other++;
        }
}

static void burst(unsigned cap, BurstResult *res) {
        *res = (BurstResult){ .cap = cap };
        server_start(cap);
        unsigned nc = cfg.clients, per = cfg.burst / cfg.clients;
        Client *cs = calloc(nc, sizeof *cs);
        struct pollfd *pfd = calloc(nc, sizeof *pfd);
        unsigned *left = calloc(nc, sizeof *left);
        if (!cs || !pfd || !left)
                bench_die("out of memory");
        for (unsigned i = 0; i < nc; i++)
                conn_open(&cs[i]);
        Pinger pg = { .gap_us = cfg.ping_us };
        conn_open(&pg.c);
        if (!cap)
                res->cap = (unsigned)health_cap(&pg.c, NULL, 0);
        pthread_t th;
        pg.t0 = bench_now_ns();
        if (pthread_create(&th, NULL, pinger_main, &pg) != 0)
                bench_die("pthread_create");
        sleep_ms(500); /* pings of an idle server first */
        static char out[1100 * 64];
        Samples create = { 0 };
        uint64_t t0 = bench_now_ns();
        double burst_from = bench_ms_between(pg.t0, t0);
        for (unsigned i = 0; i < nc; i++) {
                size_t len = 0;
                for (unsigned k = 0; k < per && k < 64; k++)
                        (void)client_format(&cs[i], out, sizeof out, &len, "sandbox.create", NULL);
                client_write_or_die(&cs[i], out, len);
                left[i] = per < 64 ? per : 64;
        }
        unsigned pending = 0;
        for (unsigned i = 0; i < nc; i++)
                pending += left[i];
        while (pending > 0) {
                for (unsigned i = 0; i < nc; i++)
                        pfd[i] = (struct pollfd){ .fd = left[i] ? cs[i].fd : -1, .events = POLLIN };
                if (poll(pfd, nc, 300000) <= 0)
                        bench_die("burst: no answer within 5 minutes (%u left)", pending);
                for (unsigned i = 0; i < nc; i++) {
                        if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
                                continue;
                        if (client_fill(&cs[i]) <= 0)
                                bench_die("burst: client %u's connection closed", i);
                        size_t len;
                        for (char *l; left[i] && (l = client_take_line(&cs[i], &len));) {
                                left[i]--;
                                pending--;
                                samples_add(&create, bench_ms_since(t0));
                                _cleanup_(json_decrefp) json_t *a = client_parse(l, len);
                                if (answer_str(a, "sandboxId"))
                                        res->made++;
                                else
                                        count_error(res, a);
                        }
                }
        }
        res->wall_ms = bench_ms_since(t0);
        double burst_to = bench_ms_between(pg.t0, bench_now_ns());
        atomic_store(&pg.stop, true);
        pthread_join(th, NULL);
        Samples idle = { 0 }, during = { 0 };
        for (size_t i = 0; i < pg.rtt.n; i++) {
                if (pg.sent_at[i] < burst_from)
                        samples_add(&idle, pg.rtt.v[i]);
                else if (pg.sent_at[i] <= burst_to)
                        samples_add(&during, pg.rtt.v[i]);
        }
        res->idle = summarize(&idle);
        res->during = summarize(&during);
        res->create = summarize(&create);
        res->pings_during = during.n;
        uint64_t t1 = bench_now_ns();
        for (unsigned i = 0; i < nc; i++)
                client_close(&cs[i]);
        for (int i = 0; i < 60000; i++) {
                if (health_int(&pg.c, "sandboxes") == 0)
                        break;
                sleep_ms(1);
        }
        res->teardown_ms = bench_ms_since(t1);
        client_close(&pg.c);
        samples_free(&idle);
        samples_free(&during);
        samples_free(&create);
        samples_free(&pg.rtt);
        free(pg.sent_at);
        free(cs);
        free(pfd);
        free(left);
        bench_server_stop();
}

static void burst_print(const BurstResult *r, bool configured) {
        unsigned n = cfg.burst / cfg.clients * cfg.clients;
        unsigned failed = n - r->made - r->refused_cap;
        unsigned want_refused = n > r->cap ? n - r->cap : 0;
        printf("### %u sandbox.create from %u clients at once, cap %u (%s)\n\n", n, cfg.clients, r->cap,
               configured ? "--max-sandboxes" : "derived");
        printf("- made %u, refused with WORKER_UNAVAILABLE %u (expected %u), other failures %u\n", r->made,
               r->refused_cap, want_refused, failed);
        for (unsigned i = 0; i < r->n_kinds; i++)
                printf("  - %u x `%s`\n", r->kinds[i].n, r->kinds[i].what);
        if (r->other)
                printf("  - %u of other kinds\n", r->other);
        printf("- the burst took %.0f ms (last answer); answers came after p50 %.0f ms, p99 %.0f ms\n", r->wall_ms,
               r->create.p50, r->create.p99);
        printf("- teardown (all %u clients closed): `health` said 0 sandboxes after %.0f ms\n\n", cfg.clients,
               r->teardown_ms);
        printf("| ping every %u us | n | p50 (ms) | p99 (ms) | max (ms) | target p99 <= 5 ms |\n", cfg.ping_us);
        printf("|---|---|---|---|---|---|\n");
        printf("| idle server, before | %zu | %.2f | %.2f | %.2f | |\n", r->idle.n, r->idle.p50, r->idle.p99,
               r->idle.max);
        printf("| during the burst | %zu | %.2f | %.2f | %.2f | %s |\n\n", r->during.n, r->during.p50, r->during.p99,
               r->during.max, bench_verdict(r->during.n > 0, r->during.p99 <= 5.0));
        if (failed)
                bench_note("burst (cap %u): %u creates failed other than with WORKER_UNAVAILABLE", r->cap, failed);
        if (r->refused_cap != want_refused)
                bench_note("burst (cap %u): %u refused with WORKER_UNAVAILABLE, %u expected", r->cap, r->refused_cap,
                           want_refused);
}

static void bench_burst(void) {
        BurstResult a, b;
        printf("## A burst of creates, and ping meanwhile\n\n");
        burst(0, &a);
        burst_print(&a, false);
        burst(cfg.burst * 4 / 5, &b);
        burst_print(&b, true);
}

/* ------------------------------------------------------------------ main */

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx-bench-density [--sbx PATH] [--only mb] [--sizes 100,500,1000] [--burst 500]\n"
                "                         [--clients 50] [--ping-us 2000] [--settle-ms 3000] [--quick]\n"
                "                         [--max-sandboxes N]\n"
                "Needs root. --quick: sizes 50,100, a burst of 100 from 10 clients. --max-sandboxes: the\n"
                "memory part's server cap (default: derived; on a host whose pid_max caps it below the\n"
                "largest size).\n");
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "sbx", required_argument, NULL, 'x' },     { "only", required_argument, NULL, 'o' },
                { "sizes", required_argument, NULL, 's' },   { "burst", required_argument, NULL, 'b' },
                { "clients", required_argument, NULL, 'c' }, { "ping-us", required_argument, NULL, 'p' },
                { "settle-ms", required_argument, NULL, 'S' }, { "quick", no_argument, NULL, 'q' },
                { "max-sandboxes", required_argument, NULL, 'm' }, { "help", no_argument, NULL, 'h' },
                {},
        };
        int o;
        while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                switch (o) {
                case 'x': cfg.sbx = optarg; break;
                case 'o': cfg.only = optarg; break;
                case 's': {
                        cfg.n_sizes = 0;
                        for (char *t = strtok(optarg, ","); t && cfg.n_sizes < MAX_SIZES; t = strtok(NULL, ","))
                                cfg.sizes[cfg.n_sizes++] = bench_parse_uint(t, "--sizes");
                        break;
                }
                case 'b': cfg.burst = bench_parse_uint(optarg, "--burst"); break;
                case 'c': cfg.clients = bench_parse_uint(optarg, "--clients"); break;
                case 'p': cfg.ping_us = bench_parse_uint(optarg, "--ping-us"); break;
                case 'S': cfg.settle_ms = bench_parse_uint(optarg, "--settle-ms"); break;
                case 'm': cfg.max_sandboxes = bench_parse_uint(optarg, "--max-sandboxes"); break;
                case 'q':
                        cfg.sizes[0] = 50, cfg.sizes[1] = 100, cfg.n_sizes = 2;
                        cfg.burst = 100, cfg.clients = 10, cfg.settle_ms = 1000;
                        break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        if (!cfg.clients || cfg.burst < cfg.clients || cfg.burst / cfg.clients > 64)
                bench_die("--burst must be 1 to 64 times --clients");
        static char self_sbx[PATH_MAX];
        if (!cfg.sbx) {
                ssize_t n = readlink("/proc/self/exe", self_sbx, sizeof self_sbx - 32);
                char *slash = n > 0 ? (self_sbx[n] = 0, strrchr(self_sbx, '/')) : NULL;
                if (slash)
                        strcpy(slash + 1, "../src/cli/sbx");
                cfg.sbx = slash && access(self_sbx, X_OK) == 0 ? self_sbx : "sbx";
        }
        if (geteuid() != 0)
                bench_die("needs root (sandboxes, cgroups)");
        bench_server_signals();
        bench_die_hook = bench_server_stop;
        printf("# Density (sbx-bench-density)\n\n");
        if (strchr(cfg.only, 'm'))
                bench_memory();
        if (strchr(cfg.only, 'b'))
                bench_burst();
        bench_notes_print();
        return 0;
}
