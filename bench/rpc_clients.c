/* SPDX-License-Identifier: MIT */
/* sbx-bench-rpc c: N clients at once (one poll loop, one socket each): `create`, then M
 * `echo $i` runs each, every output checked; `ping` on a connection of its own meanwhile. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/macro.h"
#include "rpc_benches.h"
#include "rpc_common.h"

/* Results kept for the report. */
static struct {
        bool have;
        unsigned clients, cmds, created, completed, errors;
        double create_wall_ms, cmd_wall_s, cmds_per_s, destroy_ms;
        Summary create_lat, lat_all, lat_steady, lat_first;
        double srv_cpu_s, cpu_busy, srv_run_s, srv_wait_s;
        char first_error[300];
} conc;

typedef struct Agent {
        Client c;
        unsigned k;      /* client number */
        unsigned j;      /* commands answered */
        long want_id;
        uint64_t t_sent;
        bool active, failed;
} Agent;

/* The agent stops; the first failure of all is kept with what it was (detail). */
static void agent_fail_with(Agent *a, const char *what, const char *detail) {
        a->failed = true;
        a->active = false;
        conc.errors++;
        if (!conc.first_error[0])
                snprintf(conc.first_error, sizeof conc.first_error, "client %u %s: %s", a->k, what, detail);
}

/* The same with the message that failed it (NULL: none came). */
static void agent_fail(Agent *a, const char *what, const json_t *msg) {
        char d[260];
        answer_describe(d, sizeof d, msg);
        agent_fail_with(a, what, d);
}

static void agent_send_cmd(Agent *a) {
        char params[128];
        snprintf(params, sizeof params, "{\"command\":\"echo %u\"}", a->k * cfg.cmds + a->j);
        a->t_sent = bench_now_ns();
        a->want_id = client_send(&a->c, "run", params);
        if (a->want_id < 0)
                agent_fail(a, "could not send its command", NULL);
}

/* What an agent does with a message (NULL: a line that is not JSON) read at time t. */
typedef void (*MessageFn)(Agent *a, const json_t *msg, uint64_t t);

/* Reads what one agent's socket holds: false when the connection is lost. */
static bool agent_read(Agent *a, MessageFn fn) {
        ssize_t k = client_fill(&a->c);
        uint64_t t = bench_now_ns();
        if (k == 0 || (k < 0 && k != -EAGAIN))
                return false;
        char *l;
        size_t len;
        while (a->active && (l = client_take_line(&a->c, &len))) {
                _cleanup_(json_decrefp) json_t *msg = client_parse(l, len);
                fn(a, msg, t);
        }
        return true;
}

/* One poll loop over the active agents until none is active (or the deadline passes). */
static void agents_loop(Agent *ag, unsigned n, MessageFn fn, unsigned timeout_s) {
        _cleanup_free_ struct pollfd *pf = calloc(n, sizeof *pf);
        _cleanup_free_ unsigned *map = calloc(n, sizeof *map);
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
                                agent_fail_with(&ag[map[i]], "timed out", "(no answer in time)");
                        break;
                }
                int r = poll(pf, m, 1000);
                if (r < 0 && errno != EINTR)
                        bench_die("poll: %s", strerror(errno));
                for (unsigned i = 0; r > 0 && i < m; i++)
                        if (pf[i].revents && !agent_read(&ag[map[i]], fn))
                                agent_fail(&ag[map[i]], "lost its connection", NULL);
        }
}

static Samples create_lat, lat_all, lat_steady, lat_first;
static uint64_t create_t0;
static unsigned n_created, n_completed;

static void on_create(Agent *a, const json_t *msg, uint64_t t) {
        if (answer_id(msg) != a->want_id)
                return;
        a->active = false;
        if (answer_is_error(msg) || !answer_str(msg, "sandboxId")) {
                agent_fail(a, "create", msg);
                return;
        }
        n_created++;
        samples_add(&create_lat, bench_ms_between(create_t0, t));
}

static void on_run(Agent *a, const json_t *msg, uint64_t t) {
        if (!msg) {
                agent_fail_with(a, "got an unexpected line", "(not JSON)");
                return;
        }
        if (answer_id(msg) != a->want_id) {
                agent_fail(a, "got an unexpected line", msg);
                return;
        }
        char want[32];
        snprintf(want, sizeof want, "%u\n", a->k * cfg.cmds + a->j);
        if (!run_ok(msg, want)) {
                agent_fail(a, "run", msg);
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

/* The pinger's buckets: the phase a ping was sent in. */
enum { PHASE_CREATE, PHASE_RUN, PHASE_CLOSE };

/* Every command of every client, closed loop; the server's CPU meanwhile goes to conc. */
static void run_commands(Agent *ag, unsigned n) {
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
        conc.cmd_wall_s = (double)(t2 - t1) / 1e9;
        conc.srv_cpu_s = srv1 - srv0;
        conc.cpu_busy = tot1 > tot0 ? (double)(b1 - b0) / (double)(tot1 - tot0) : 0;
}

void bench_clients(Client *ctl) {
        unsigned n = cfg.clients;
        _cleanup_free_ Agent *ag = calloc(n, sizeof *ag);
        if (!ag)
                bench_die("out of memory");
        bench_progress("c: %u clients connect", n);
        for (unsigned i = 0; i < n; i++) {
                rpc_open(&ag[i].c, true);
                ag[i].k = i;
        }
        Pinger pg;
        pinger_start(&pg, PHASE_CREATE, cfg.ping_gap_us);
        sleep_us(20000);

        bench_progress("c: %u creates at once", n);
        create_t0 = bench_now_ns();
        for (unsigned i = 0; i < n; i++) {
                ag[i].active = true;
                ag[i].want_id = client_send(&ag[i].c, "create", NULL);
                if (ag[i].want_id < 0)
                        agent_fail(&ag[i], "could not send create", NULL);
        }
        agents_loop(ag, n, on_create, 120);
        conc.create_wall_ms = bench_ms_between(create_t0, bench_now_ns());
        conc.created = n_created;

        bench_progress("c: %u clients × %u commands", n, cfg.cmds);
        atomic_store(&pg.bucket, PHASE_RUN);
        run_commands(ag, n);
        conc.have = true;
        conc.clients = n;
        conc.cmds = cfg.cmds;
        conc.completed = n_completed;
        conc.cmds_per_s = conc.cmd_wall_s > 0 ? n_completed / conc.cmd_wall_s : 0;
        conc.create_lat = summarize(&create_lat);
        conc.lat_all = summarize(&lat_all);
        conc.lat_steady = summarize(&lat_steady);
        conc.lat_first = summarize(&lat_first);

        bench_progress("c: %u clients disconnect", n);
        atomic_store(&pg.bucket, PHASE_CLOSE);
        uint64_t t3 = bench_now_ns();
        for (unsigned i = 0; i < n; i++)
                client_close(&ag[i].c);
        (void)wait_no_sandboxes(ctl, 60000);
        conc.destroy_ms = bench_ms_between(t3, bench_now_ns());
        pinger_stop(&pg);
        row_add("c_create", "`create`, all clients at once (from the moment all were sent)", &conc.create_lat,
                "%u of %u created; all done after %.1f ms", n_created, n, conc.create_wall_ms);
        row_add("c_run", "`run` `echo $i`, per command (request written → response read)", &conc.lat_all,
                "%u clients × %u commands, closed loop", n, cfg.cmds);
        row_add("c_run_first", "  the first command of each client (starts its session)", &conc.lat_first, "%s", "");
        row_add("c_run_rest", "  the other commands", &conc.lat_steady, "%s", "");
        static const char *const phase_name[PINGER_BUCKETS] = { "creates", "commands", "disconnects (sandboxes destroyed)" };
        static const char *const phase_key[PINGER_BUCKETS] = { "c_ping_cr", "c_ping_run", "c_ping_close" };
        for (int i = 0; i < PINGER_BUCKETS; i++) {
                char name[160];
                Summary x = summarize(&pg.lat[i]);
                snprintf(name, sizeof name, "`ping` on another connection during the %s", phase_name[i]);
                row_add(phase_key[i], name, &x, "gap %u µs; %u failed in all phases", cfg.ping_gap_us, pg.bad);
                samples_free(&pg.lat[i]);
        }
        samples_free(&create_lat);
        samples_free(&lat_all);
        samples_free(&lat_steady);
        samples_free(&lat_first);
}

void clients_report(void) {
        if (!conc.have)
                return;
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

void clients_targets(void) {
        if (conc.have) {
                bool okc = conc.errors == 0 && conc.completed == conc.clients * conc.cmds;
                printf("| %u clients × %u commands, all complete, zero errors | %u/%u, %u errors; %.0f commands/s, p50 %.2f ms, p99 %.2f ms; %u creates %.0f ms | %s |\n",
                       conc.clients, conc.cmds, conc.completed, conc.clients * conc.cmds, conc.errors, conc.cmds_per_s,
                       conc.lat_all.p50, conc.lat_all.p99, conc.clients, conc.create_wall_ms, bench_verdict(true, okc));
        } else {
                printf("| N clients × M commands, zero errors | – | not measured |\n");
        }
}
