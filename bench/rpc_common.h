/* SPDX-License-Identifier: MIT */
/* What the benchmarks of sbx-bench-rpc (bench_rpc.c, one rpc_<family>.c each) share: the
 * configuration, the server they all talk to, /proc readings, the requests several of them
 * make or time (warm `run`, `ping`, `health`, `process.start`), the C API's sandbox they
 * compare with, and a pinger thread. */
#pragma once
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "client.h"
#include "common.h"
#include "sbx/sbx.h"

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

/* The defaults, changed by the command line before any benchmark runs. */
extern Config cfg;

void sleep_us(unsigned us);

/* ------------------------------------------------------------------ /proc */

/* Busy and total jiffies of the whole machine (busy = all but idle and iowait). */
void cpu_jiffies(uint64_t *busy, uint64_t *total);
/* utime + stime of a process, in seconds. */
double proc_cpu_s(pid_t pid);
/* /proc/PID/schedstat: time on a CPU and time waiting on a run queue, in seconds. */
void proc_schedstat(pid_t pid, double *run_s, double *wait_s);

/* ------------------------------------------------------------------ the server */

/* Starts `cfg.sbx serve --socket` with cfg's --pool, --audit and autogroup; bench_die then
 * dumps its log and stops it. */
void rpc_server_start(void);
/* Shuts it down the way a client would (`kill` on ctl, which is closed), then makes sure it
 * is gone. */
void rpc_server_shutdown(Client *ctl);

/* ------------------------------------------------------------------ requests */

/* A connection to the server (bench_die()s when it fails); blocking ones time out after 120 s. */
void rpc_open(Client *c, bool nonblock);
/* A blocking connection whose root sandbox is made (`create` answered). */
void rpc_open_with_sandbox(Client *c);
/* health's "sandboxes" or "running". */
long health_field(Client *c, const char *key);
/* Waits until the server has destroyed every sandbox of the connections closed before;
 * returns how long that took, in ms. */
double wait_no_sandboxes(Client *c, unsigned timeout_ms);
/* exitCode 0, stdout exactly `want`, stderr empty, no errorClass. */
bool run_ok(const json_t *msg, const char *want);
/* One `run` of `echo hi`: request written -> answer line read, in ms; -1 unless it said hi. */
double rpc_run_hi(Client *c);
/* One `ping`: request written -> answer line read, in ms; -1 unless it said pong. */
double rpc_ping(Client *c);
/* `process.start` with params (its reference taken): true and its processId in id, or false
 * and err saying why. */
bool proc_start(Client *c, json_t *params, char *id, size_t idsz, char *err, size_t errsz);

/* ------------------------------------------------------------------ the C API */

/* A context of this process's own and a sandbox with the default options in it, made through
 * the C API for comparison with the socket; bench_die()s when either fails. */
void capi_sandbox_new(SbxContext **ctx, SbxSandbox **sb);

/* ------------------------------------------------------------------ a pinger */

/* `ping` in a thread of its own, on a connection of its own, every gap_us while the benchmark
 * works on others: how long the server's loop is unavailable to everyone else. A ping's time
 * goes to lat[bucket] of the bucket set when it was sent (nowhere under PINGER_IDLE); a
 * failed one is counted in bad. */
enum { PINGER_IDLE = -1, PINGER_BUCKETS = 3, PINGER_STOP = PINGER_BUCKETS };

typedef struct Pinger {
        Client c;
        unsigned gap_us;
        atomic_int bucket;
        Samples lat[PINGER_BUCKETS];
        unsigned bad;
        pthread_t thread;
} Pinger;

void pinger_start(Pinger *p, int bucket, unsigned gap_us);
/* Ends the thread and closes its connection; lat and bad stay for the caller. */
void pinger_stop(Pinger *p);
