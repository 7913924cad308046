/* SPDX-License-Identifier: MIT */
/* sbx-bench-rpc l: `ping` on a connection of its own while another sends 20 `sandbox.create`
 * at once and forks 16 of them as their answers come, in rounds. The loop never waits for a
 * sandbox or a copy job: what a ping can still meet is one clone of the daemon per create or
 * fork. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/macro.h"
#include "rpc_benches.h"
#include "rpc_common.h"

#define CREATES 20
#define FORKS 16 /* the server's cap on forks alive at once */
#define PING_GAP_US 500

/* The round's sandboxes: the creates' first, then the forks'; "" where none was made. */
static char ids[CREATES + FORKS][64];
static long fork_ids[FORKS];
static unsigned n_forks;

/* Reads answers until every id in want[0..n) has one (in any order: a create is answered
 * when its sandbox is ready); on_answer(c, i, answer) for each. Returns how many were errors. */
static unsigned collect(Client *c, const long *want, unsigned n, void (*on_answer)(Client *, unsigned, const json_t *)) {
        unsigned got = 0, errors = 0;
        _cleanup_free_ bool *seen = calloc(n ? n : 1, sizeof *seen);
        if (!seen)
                bench_die("out of memory");
        while (got < n) {
                _cleanup_(json_decrefp) json_t *a = client_read(c);
                if (!a)
                        bench_die("l: the connection closed");
                long id = answer_id(a);
                for (unsigned i = 0; i < n; i++)
                        if (want[i] == id && !seen[i]) {
                                seen[i] = true;
                                got++;
                                errors += answer_is_error(a);
                                on_answer(c, i, a);
                        }
        }
        return errors;
}

/* A create answered: its sandbox is forked at once, while there are forks left. */
static void on_create(Client *c, unsigned i, const json_t *a) {
        const char *id = answer_str(a, "sandboxId");
        if (!id)
                return;
        snprintf(ids[i], sizeof ids[i], "%s", id);
        if (n_forks < FORKS) {
                char p[128];
                snprintf(p, sizeof p, "{\"sandboxId\":\"%.63s\"}", ids[i]);
                fork_ids[n_forks++] = client_send_or_die(c, "sandbox.fork", p);
        }
}

static void on_fork(Client *c, unsigned i, const json_t *a) {
        (void)c;
        const char *id = answer_str(a, "sandboxId");
        snprintf(ids[CREATES + i], sizeof ids[0], "%s", id ? id : "");
}

/* One round on ctl: the creates at once, each forked as it is answered; the time from the
 * first request to the last answer goes to round_ms. Every sandbox is destroyed after. */
static unsigned round_once(Client *ctl, Pinger *pg, Samples *round_ms) {
        unsigned errors = 0;
        long creates[CREATES];
        memset(ids, 0, sizeof ids);
        n_forks = 0;
        uint64_t t0 = bench_now_ns();
        atomic_store(&pg->bucket, 0);
        for (unsigned i = 0; i < CREATES; i++)
                creates[i] = client_send_or_die(ctl, "sandbox.create", "{\"limits\":{\"pids\":64}}");
        errors += collect(ctl, creates, CREATES, on_create);
        errors += collect(ctl, fork_ids, n_forks, on_fork);
        samples_add(round_ms, bench_ms_between(t0, bench_now_ns()));
        atomic_store(&pg->bucket, PINGER_IDLE);
        for (unsigned i = 0; i < CREATES + FORKS; i++) {
                if (!ids[i][0])
                        continue;
                char p[128];
                snprintf(p, sizeof p, "{\"sandboxId\":\"%.63s\"}", ids[i]);
                _cleanup_(json_decrefp) json_t *a = client_call(ctl, "sandbox.destroy", p);
                errors += answer_is_error(a);
        }
        (void)wait_no_sandboxes(ctl, 30000);
        return errors;
}

void bench_create_fork(Client *ctl) {
        unsigned errors = 0;
        /* Pings count only while a round's creates and forks are under way. */
        Pinger pg;
        pinger_start(&pg, PINGER_IDLE, PING_GAP_US);
        Samples round_ms = { 0 };
        for (unsigned r = 0; r < cfg.loop_rounds; r++) {
                bench_progress("l: round %u of %u: %u creates, %u forks", r + 1, cfg.loop_rounds, CREATES, FORKS);
                errors += round_once(ctl, &pg, &round_ms);
        }
        pinger_stop(&pg);
        Summary x = summarize(&pg.lat[0]), y = summarize(&round_ms);
        row_add("l_ping", "`ping` on another connection while 20 `sandbox.create` at once and 16 forks run", &x,
                "%u rounds, gap %u µs; %u pings failed, %u requests failed", cfg.loop_rounds, PING_GAP_US, pg.bad,
                errors);
        row_add("l_round", "  20 creates and 16 forks, first request → last answer", &y, "%s", "");
        samples_free(&pg.lat[0]);
        samples_free(&round_ms);
}
