/* SPDX-License-Identifier: MIT */
/* sbx-bench-rpc p: `ping` round trips while N sandboxes each run a CPU-bound loop, against an
 * idle server, and against the same loops as host processes in the server's autogroup. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "base/macro.h"
#include "rpc_benches.h"
#include "rpc_common.h"

/* Results kept for the targets. */
static struct {
        double cpu_busy; /* fraction of all CPUs busy during the pings under load */
        char reps[200];  /* p99 of each series */
} load;

/* The slowest pings of a series and where in it they came (the first pings after a pause
 * are the slow ones). */
typedef struct Slowest {
        double ms[3];
        unsigned idx[3];
} Slowest;

static void ping_series(Client *c, unsigned n, Samples *out, unsigned *bad, Slowest *sl) {
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

/* Stops the busy runs: cancels each, reads their answers, and says how many were exit 125. */
static unsigned cancel_runs(Client *lc, const long *run_ids) {
        char params[64];
        unsigned cancelled = 0;
        for (unsigned i = 0; i < cfg.busy; i++) {
                snprintf(params, sizeof params, "{\"requestId\":%ld}", run_ids[i]);
                (void)client_send_or_die(lc, "cancel", params);
        }
        for (unsigned answered = 0; answered < cfg.busy;) {
                _cleanup_(json_decrefp) json_t *a = client_read(lc);
                if (!a)
                        bench_die("the load connection closed before the busy runs answered");
                long id = answer_id(a);
                long long ec;
                for (unsigned i = 0; i < cfg.busy; i++)
                        if (id == run_ids[i]) {
                                answered++;
                                if (answer_int(a, "exitCode", &ec) && ec == 125)
                                        cancelled++;
                        }
        }
        return cancelled;
}

/* One series under load: `busy` sandboxes (one connection: its root + sandbox.create), each
 * running the CPU-bound command with a long timeout; pings once all run and settle_ms passed;
 * then every run cancelled (exit 125 expected) and the sandboxes destroyed. */
static void load_series(Client *ctl, Client *pc, unsigned rep, Samples *out, unsigned *bad, Slowest *sl,
                        double *cpu_busy) {
        bench_progress("p: series %u/%u: starting `%s` in %u sandboxes", rep + 1, cfg.load_reps, cfg.busy_cmd, cfg.busy);
        Client lc;
        rpc_open(&lc, false);
        _cleanup_free_ char(*ids)[40] = calloc(cfg.busy ? cfg.busy : 1, sizeof *ids);
        _cleanup_free_ long *run_ids = calloc(cfg.busy ? cfg.busy : 1, sizeof *run_ids);
        if (!ids || !run_ids)
                bench_die("out of memory");
        for (unsigned i = 0; i < cfg.busy; i++) {
                const char *method = i == 0 ? "create" : "sandbox.create";
                _cleanup_(json_decrefp) json_t *a = client_call(&lc, method, NULL);
                const char *id = answer_str(a, "sandboxId");
                if (answer_is_error(a) || !id) {
                        char d[260];
                        answer_describe(d, sizeof d, a);
                        bench_die("%s: %.200s", method, d);
                }
                snprintf(ids[i], sizeof ids[i], "%s", id);
        }
        for (unsigned i = 0; i < cfg.busy; i++) {
                run_ids[i] = client_send_json(&lc, "run", json_pack("{s:s, s:s, s:i}", "sandboxId", ids[i], "command",
                                                                    cfg.busy_cmd, "timeoutMs", 600000));
                if (run_ids[i] < 0)
                        bench_die("run `%s`: %s", cfg.busy_cmd, strerror((int)-run_ids[i]));
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

        unsigned cancelled = cancel_runs(&lc, run_ids);
        if (cancelled != cfg.busy)
                bench_note("p: series %u: %u of %u busy runs answered exit 125 after cancel", rep + 1, cancelled, cfg.busy);
        client_close(&lc);
        (void)wait_no_sandboxes(ctl, 10000);
}

/* For comparison: the same loops as plain processes outside any sandbox, in this program's
 * session, which is the server's autogroup unless --server-autogroup-nice. Returns the
 * fraction of the CPUs busy meanwhile. */
static double host_series(Client *pc, Samples *host, unsigned *bad_host, Slowest *sl_host) {
        bench_progress("p: %u pings with %u CPU-bound host processes in the server's session", cfg.pings, cfg.busy);
        _cleanup_free_ pid_t *kids = calloc(cfg.busy ? cfg.busy : 1, sizeof *kids);
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
        ping_series(pc, cfg.pings, host, bad_host, sl_host);
        cpu_jiffies(&b1, &tot1);
        for (unsigned i = 0; i < cfg.busy; i++)
                if (kids[i] > 0)
                        kill(kids[i], SIGKILL);
        for (unsigned i = 0; i < cfg.busy; i++)
                if (kids[i] > 0)
                        (void)waitpid(kids[i], NULL, 0);
        return tot1 > tot0 ? (double)(b1 - b0) / (double)(tot1 - tot0) : 0;
}

void bench_ping_load(Client *ctl) {
        Client pc;
        rpc_open(&pc, false);
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

        Samples host = { 0 };
        unsigned bad_host = 0;
        double host_busy = cfg.host_busy ? host_series(&pc, &host, &bad_host, &sl_host) : 0;

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
        client_close(&pc);
}

void ping_load_targets(void) {
        const Row *pl = row_find("p_load");
        if (pl)
                printf("| `ping` p99 ≤ 5 ms with %u CPU-bound runs | all %zu pings: p50 %.3f ms, p99 %.3f ms, max %.3f ms; "
                       "p99 of each series of %u: %s ms | %s |\n",
                       cfg.busy, pl->s.n, pl->s.p50, pl->s.p99, pl->s.max, cfg.pings, load.reps,
                       bench_verdict(true, pl->s.p99 <= 5));
        else
                printf("| `ping` p99 ≤ 5 ms with CPU-bound runs | – | not measured |\n");
}
