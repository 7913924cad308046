/* SPDX-License-Identifier: MIT */
/* Requests answered later: a run, an env.set or env.get (both runs underneath), or a fork,
 * snapshot, export or import. Each waits in the server's PendingSet for its operation's done
 * callback, which answers it and frees it. A file watch is one too, though answered at once:
 * it lives in the set until it ends, to hear of its connection's pauses and close.
 *
 * Invariant: a Pending whose conn is set is in the set. When its connection closes first it
 * leaves the set with conn NULL (pending_detach): the done callback then answers nobody and
 * only frees it. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include "rpc/jsonrpc.h"
#include "sbx/sbx.h"
#include "server/conn.h"

typedef struct Core Core;

typedef enum PendingKind { PENDING_RUN, PENDING_ENV_SET, PENDING_ENV_GET, PENDING_OP, PENDING_PROC, PENDING_WATCH } PendingKind;

typedef struct Pending {
        struct Pending *next, *prev;
        struct Pending **head; /* the list it is in, NULL once detached */
        struct Pending *cnext, *cprev, **chead; /* its connection's list (conn_pendings) */
        Conn *conn;            /* who gets the answer; NULL once detached */
        Core *core;
        json_t *id;
        char *key;             /* id serialised, for cancel */
        SbxRun *run;           /* runs: NULL once done */
        PendingKind kind;
        bool stream, replied;
        bool cancelled;        /* shutdown cancelled its run already */
        uint64_t seq;          /* next `output` notification's number */
        bool persist;          /* PENDING_OP of a fork: the new sandbox outlives its client */
        uid_t uid;             /* PENDING_OP of a fork: who may use the new sandbox */
        uint64_t started_us;   /* PENDING_OP of a pause: CLOCK_MONOTONIC when asked */
        json_t *answer;        /* PENDING_OP of a create: the result, sent once the sandbox is ready */
        int lane;              /* 1 + the lane whose slot it holds (lane.h), 0 for none */
        uint64_t lane_ms;      /* since when (monotonic ms) */
        /* A run queued behind others of its session holds no slot while it waits (it needs no
         * worker yet): it waits in PendingSet.behind for the slot of the run of its session
         * ahead of it, in its lane, handed over when that one is freed. */
        SbxSession *session;   /* runs: whose (compared, never dereferenced) */
        int behind_lane;       /* 1 + the lane it waits for a slot of, 0 when not waiting */
        struct Pending *bnext, *bprev;
        json_t *audit;         /* the audit event its end finishes (audit_begin), NULL when off */
        /* PENDING_PROC: m_process.c's request; PENDING_WATCH: m_watch.c's watch (answered at
         * once, it lives until unwatched). Either is told when its connection closes (then conn is
         * NULL; `detached` must free the pending or leave it to a callback still to come) and
         * when the connection's answers pile up or drain (`paused`). Either may be NULL. */
        void *proc;
        void (*detached)(struct Pending *p);
        void (*paused)(struct Pending *p, bool paused);
} Pending;

typedef struct PendingSet {
        Pending *head;
        Pending *behind, *behind_tail; /* runs waiting for their session's slot, oldest first */
} PendingSet;

/* Registers request id of c as answered later; it takes over the lane slot lent to the
 * handler running now, if any, and gives it back when freed. Returns 0 or -ENOMEM. */
int pending_new(PendingSet *set, Core *core, Conn *c, json_t *id, PendingKind kind, Pending **ret);
/* p is a run of session s (the Pending holds no reference: s outlives its runs). When s
 * already holds runs, p gives its lane slot back until the last of them, in the same lane,
 * hands it over (pending_free). Call before submitting the run. */
void pending_run_session(PendingSet *set, Pending *p, SbxSession *s);
/* pending_run_session, told how many runs s holds (sbx_session_runs): s is only compared, so
 * the unit tests need no session. */
void pending_run_behind(PendingSet *set, Pending *p, SbxSession *s, unsigned runs);
/* Takes p out of its list and frees it; its lane slot goes to the next run of its session
 * waiting for one, else back to the lane. Returns NULL. */
Pending *pending_free(Pending *p);
/* The pending `run` of c whose request id equals request_id, or NULL. */
Pending *pending_find_run(PendingSet *set, Conn *c, json_t *request_id);
/* c is closing: its pendings leave the set and their runs are cancelled. */
void pending_detach(PendingSet *set, Conn *c);
/* Stops (or resumes) reading the output of c's streaming runs. */
void pending_pause(PendingSet *set, Conn *c, bool paused);
/* Runs started and runs still queued, of every open connection. */
void pending_count(const PendingSet *set, unsigned *ret_running, unsigned *ret_queued);
/* Answers every queued (not yet started) run with e; their done callbacks answer no more. */
void pending_fail_queued(PendingSet *set, const RpcError *e);
/* Answers every request not answered yet with e and forgets its connection (shutdown's end),
 * so its done callback, if one comes, answers nobody and frees it. */
void pending_fail_all(PendingSet *set, const RpcError *e);
/* Cancels every started run (shutdown): each is answered 125 when its worker is gone. */
void pending_cancel_running(PendingSet *set);
/* Requests whose answer will come from work under way (runs, env, forks, snapshots,
 * exports, imports, creates), not counting waits and streams that last as long as asked. */
unsigned pending_busy(const PendingSet *set);
