/* SPDX-License-Identifier: MIT */
/* sbx-bench-rpc s and k: a process's life over the socket.
 *   s  `process.start` of `echo hi`, then `process.stream` of it from cursor 0: start request
 *      written -> first `process.output` with data read (its data, the exit and the final cursor
 *      checked); interleaved with `run` of `echo hi` in the same session
 *   k  `process.kill` (graceMs 0) of a tree of 200 TERM-ignoring `sleep 1000`s in a sandbox with
 *      limits {pids: 1024}, once `ready` was logged and pgrep in the sandbox counts all 200;
 *      then the same for one sleep */
#include <stdio.h>
#include <string.h>
#include "base/macro.h"
#include "rpc_benches.h"
#include "rpc_common.h"

/* ---------------------------------------------------------------- s */

/* Reads the stream of process.stream qid up to its answer (returned): *t_first when the first
 * process.output with data came, its data in data, *exit_seen whether process.exit came. */
static json_t *read_stream(Client *c, long qid, uint64_t *t_first, char *data, size_t size, bool *exit_seen) {
        for (;;) {
                json_t *m = client_read(c);
                if (!m || answer_id(m) == qid)
                        return m;
                if (notification_is(m, "process.output")) {
                        const char *d = json_string_value(notification_get(m, "data"));
                        if (d && d[0] && !*t_first) {
                                *t_first = c->t_line;
                                snprintf(data, size, "%s", d);
                        }
                } else if (notification_is(m, "process.exit")) {
                        *exit_seen = true;
                }
                json_decref(m);
        }
}

/* One `echo hi` process: process.start written -> its answer (*start_ms), then process.stream
 * from cursor 0 -> the first process.output with data; the rest of the stream is read and
 * checked (data "hi\n", process.exit, answer exited 0 at cursor 3). Returns start written ->
 * first output read, in ms, or -1 (err says why). */
static double proc_first_output(Client *c, double *start_ms, char *err, size_t errsz) {
        char id[40], params[128];
        uint64_t t0 = bench_now_ns();
        long sid = client_send_or_die(c, "process.start", "{\"command\":\"echo hi\"}");
        _cleanup_(json_decrefp) json_t *s = client_wait(c, sid);
        uint64_t t1 = c->t_line;
        const char *pid = answer_str(s, "processId");
        if (answer_is_error(s) || !pid) {
                answer_describe(err, errsz, s);
                return -1;
        }
        snprintf(id, sizeof id, "%s", pid);
        *start_ms = bench_ms_between(t0, t1);
        snprintf(params, sizeof params, "{\"processId\":\"%s\",\"cursor\":0}", id);
        long qid = client_send_or_die(c, "process.stream", params);
        uint64_t t2 = 0;
        bool exit_seen = false;
        char data[64] = "";
        _cleanup_(json_decrefp) json_t *a = read_stream(c, qid, &t2, data, sizeof data, &exit_seen);
        if (!a) {
                answer_describe(err, errsz, NULL);
                return -1;
        }
        long long ec = -1, cur = -1;
        const char *status = answer_str(a, "status");
        if (!t2 || strcmp(data, "hi\n") != 0 || !exit_seen || answer_is_error(a) || !status ||
            strcmp(status, "exited") != 0 || !answer_int(a, "exitCode", &ec) || ec != 0 ||
            !answer_int(a, "cursor", &cur) || cur != 3) {
                char d[260];
                answer_describe(d, sizeof d, a);
                snprintf(err, errsz, "first data \"%s\", process.exit %s, answer %.200s", data,
                         exit_seen ? "seen" : "missing", d);
                return -1;
        }
        return bench_ms_between(t0, t2);
}

void bench_proc_start(Client *ctl) {
        Client c;
        rpc_open_with_sandbox(&c);
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
        json_t *list = client_call(&c, "process.list", NULL);
        long listed = (long)json_array_size(answer_get(list, "processes"));
        json_decref(list);
        client_close(&c);
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

void proc_start_targets(void) {
        const Row *sf = row_find("s_first"), *sr = row_find("s_run");
        if (sf)
                printf("| `process.start` `echo hi` → first `process.output` at the client, p50 ≤ 2 ms | p50 %.3f ms, "
                       "p90 %.3f, p99 %.3f (N %zu); `run` of it in the same run p50 %.3f ms | %s |\n",
                       sf->s.p50, sf->s.p90, sf->s.p99, sf->s.n, sr ? sr->s.p50 : 0, bench_verdict(true, sf->s.p50 <= 2));
        else
                printf("| `process.start` → first output p50 ≤ 2 ms | – | not measured |\n");
}

/* ---------------------------------------------------------------- k */

/* Results kept for the targets. */
static struct {
        bool have;
        unsigned bad;
} killr;

/* How many `sleep` processes live in the sandbox (pgrep there, in its pid namespace), or -1;
 * *zombies: how many more have died but wait for the sandbox's pid 1 to reap them (they have
 * left their cgroup already). */
static long count_sleeps(Client *c, const char *sbid, long *zombies) {
        char params[256];
        snprintf(params, sizeof params,
                 "{\"sandboxId\":\"%s\",\"command\":\"echo $(pgrep -cx sleep) $(pgrep -cx -r Z sleep)\"}", sbid);
        _cleanup_(json_decrefp) json_t *a = client_call(c, "run", params);
        const char *out = answer_str(a, "stdout");
        long all = -1, z = -1;
        if (answer_is_error(a) || !out || sscanf(out, "%ld %ld", &all, &z) != 2)
                return -1;
        *zombies = z;
        return all - z;
}

/* Starts a process in sbid and waits until a line of it matches `^ready$`. */
static bool start_ready(Client *c, const char *sbid, const char *cmd, char *id, size_t idsz, char *err, size_t errsz) {
        char params[512];
        if (!proc_start(c, json_pack("{s:s, s:s}", "sandboxId", sbid, "command", cmd), id, idsz, err, errsz))
                return false;
        snprintf(params, sizeof params,
                 "{\"sandboxId\":\"%s\",\"processId\":\"%s\",\"until\":\"log\",\"pattern\":\"^ready$\",\"timeoutMs\":60000}",
                 sbid, id);
        _cleanup_(json_decrefp) json_t *a = client_call(c, "process.wait", params);
        if (answer_is_error(a)) {
                answer_describe(err, errsz, a);
                return false;
        }
        return true;
}

/* process.kill with graceMs 0: request written -> answer read, in ms; -1 unless the answer
 * is a killed process with exit code 137 (SIGKILL). */
static double kill_now(Client *c, const char *sbid, const char *id, char *err, size_t errsz) {
        char params[256];
        snprintf(params, sizeof params, "{\"sandboxId\":\"%s\",\"processId\":\"%s\",\"signal\":\"TERM\",\"graceMs\":0}",
                 sbid, id);
        uint64_t t0 = bench_now_ns();
        _cleanup_(json_decrefp) json_t *a = client_call(c, "process.kill", params);
        double ms = bench_ms_between(t0, c->t_line);
        long long ec = -1;
        const char *status = answer_str(a, "status");
        if (answer_is_error(a) || !status || strcmp(status, "killed") != 0 || !answer_int(a, "exitCode", &ec) ||
            ec != 137) {
                answer_describe(err, errsz, a);
                return -1;
        }
        return ms;
}

/* What bench_kill counts across its rounds. */
typedef struct KillTally {
        Samples tree, one, ready;
        unsigned bad, bad_one, left, with_zombies;
        long zombies_max;
        char first_bad[300];
} KillTally;

/* Round i (0: the warm-up, not timed): the tree started, killed once every sleep runs, and
 * counted after; then one sleep started and killed. */
static void kill_round(Client *c, const char *sbid, const char *tree, unsigned i, KillTally *t) {
        char id[40], err[300];
        long zombies = 0;
        /* The tree: `ready` once every subshell is forked, then every sleep exec'd. */
        uint64_t t0 = bench_now_ns();
        if (!start_ready(c, sbid, tree, id, sizeof id, err, sizeof err)) {
                if (t->bad++ == 0)
                        snprintf(t->first_bad, sizeof t->first_bad, "tree: %.250s", err);
                return;
        }
        long n = 0;
        while ((n = count_sleeps(c, sbid, &zombies)) < (long)cfg.kill_tree) {
                if (bench_ms_since(t0) > 60000)
                        bench_die("k: only %ld of %u sleeps running after 60 s", n, cfg.kill_tree);
                sleep_us(5000);
        }
        if (n != (long)cfg.kill_tree)
                bench_note("k: %ld sleeps running, not %u", n, cfg.kill_tree);
        double ready = bench_ms_since(t0);
        sleep_us(cfg.quiet_ms * 1000);
        double ms = kill_now(c, sbid, id, err, sizeof err);
        if (ms < 0) {
                if (t->bad++ == 0)
                        snprintf(t->first_bad, sizeof t->first_bad, "tree kill: %.250s", err);
        } else if (i > 0) {
                samples_add(&t->tree, ms);
                samples_add(&t->ready, ready);
        }
        if ((n = count_sleeps(c, sbid, &zombies)) != 0) {
                t->left++;
                bench_note("k: %ld sleeps still alive after the kill was answered", n);
        }
        if (zombies > 0 && i > 0) {
                t->with_zombies++;
                if (zombies > t->zombies_max)
                        t->zombies_max = zombies;
        }
        /* For comparison, the same kill of a single process. */
        if (!start_ready(c, sbid, "trap '' TERM; echo ready; exec sleep 1000", id, sizeof id, err, sizeof err)) {
                if (t->bad_one++ == 0)
                        snprintf(t->first_bad, sizeof t->first_bad, "one: %.250s", err);
                return;
        }
        sleep_us(cfg.quiet_ms * 1000);
        ms = kill_now(c, sbid, id, err, sizeof err);
        if (ms < 0) {
                if (t->bad_one++ == 0)
                        snprintf(t->first_bad, sizeof t->first_bad, "one kill: %.250s", err);
        } else if (i > 0) {
                samples_add(&t->one, ms);
        }
}

void bench_kill(Client *ctl) {
        Client c;
        rpc_open(&c, false);
        char sbid[64], tree[300];
        json_t *a = client_call(&c, "sandbox.create", "{\"limits\":{\"pids\":1024}}");
        const char *id = answer_str(a, "sandboxId");
        if (answer_is_error(a) || !id) {
                char d[260];
                answer_describe(d, sizeof d, a);
                bench_die("sandbox.create: %.200s", d);
        }
        snprintf(sbid, sizeof sbid, "%s", id);
        json_decref(a);
        snprintf(tree, sizeof tree,
                 "trap '' TERM; for i in $(seq %u); do (trap '' TERM; exec sleep 1000) & done; echo ready; wait",
                 cfg.kill_tree);
        KillTally t = { 0 };
        bench_progress("k: %u × process.kill (graceMs 0) of a tree of %u TERM-ignoring sleeps (+1 warm-up), "
                       "and of one `sleep 1000`", cfg.kill_n, cfg.kill_tree);
        for (unsigned i = 0; i < cfg.kill_n + 1; i++)
                kill_round(&c, sbid, tree, i, &t);
        client_close(&c);
        (void)wait_no_sandboxes(ctl, 10000);
        if (t.first_bad[0])
                bench_note("k: first failure: %s", t.first_bad);
        Summary xk = summarize(&t.tree), xo = summarize(&t.one), xr = summarize(&t.ready);
        row_add("k_tree", "`process.kill` of a tree of TERM-ignoring sleeps, graceMs 0 (request written → answer read)",
                &xk, "%u sleeps running first; answer killed/137, no sleep alive after it: %u failed, %u left some "
                "alive; %u answers came before pid 1 had reaped every dead sleep (at most %ld zombies)",
                cfg.kill_tree, t.bad, t.left, t.with_zombies, t.zombies_max);
        bench_note("k: the tree: `%s`, in a sandbox with limits {pids: 1024}; sleeps counted with pgrep in the "
                   "sandbox (zombies apart: they have left their cgroup already)", tree);
        row_add("k_one", "  for comparison: the same kill of one `sleep 1000`", &xo, "%u failed", t.bad_one);
        row_add("k_setup", "  the tree's start → `ready` and every sleep running (not a target)", &xr, "%s", "");
        killr.have = xk.n > 0;
        killr.bad = t.bad + t.left;
        samples_free(&t.tree);
        samples_free(&t.one);
        samples_free(&t.ready);
}

void kill_targets(void) {
        const Row *kt = row_find("k_tree");
        if (kt)
                printf("| `process.kill` (graceMs 0) of %u TERM-ignoring processes, p99 ≤ 20 ms | p50 %.2f ms, p99 %.2f ms, "
                       "max %.2f (N %zu)%s | %s |\n",
                       cfg.kill_tree, kt->s.p50, kt->s.p99, kt->s.max, kt->s.n, killr.bad ? "; some kills failed" : "",
                       bench_verdict(true, kt->s.p99 <= 20 && !killr.bad));
        else
                printf("| `process.kill` of a 200-process tree p99 ≤ 20 ms | – | not measured |\n");
}
