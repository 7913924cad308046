/* SPDX-License-Identifier: MIT */
/* Lanes: how many requests that set a worker going (runs, process starts, forks, snapshots,
 * exports, imports) the server holds at once, and in which order the others wait.
 *
 * Two lanes, each with its own number of slots and its own bounded queue: `interactive` (the
 * default) and `system`, whose slots interactive work can never take, so an operator's health
 * check or clean-up gets through a server busy with agents. A request that finds its lane's
 * slots taken waits in the lane's queue; past the queue's bound it is refused at once with
 * WORKER_UNAVAILABLE and a retryAfterMs. Waiting requests are served round-robin across
 * connections: each connection has its own FIFO in the lane, and a freed slot goes to the
 * connection after the one served last, so one client's hundred queued runs delay another
 * client's one run by at most one slot.
 *
 * A slot is held from the moment the request's handler starts until the request is answered:
 * the dispatcher lends it to the handler (Lanes.lent); the first Pending the handler registers
 * takes it over and gives it back when freed; a handler that answers at once gives it back
 * when it returns. A run queued behind others of its session gives it back at once and takes
 * over the slot of the run ahead of it (pending.h), so one client's runs queued in one
 * session hold one slot, not one each.
 *
 * Ownership: the Lanes live in the Core; a LaneWait owns the references to its request's id
 * and params; the connection a wait names outlives it (lanes_drop_conn at close). */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include "base/loop.h"
#include "rpc/jsonrpc.h"
#include "server/conn.h"

typedef enum LaneId { LANE_INTERACTIVE, LANE_SYSTEM, LANE_COUNT } LaneId;

/* Durations are counted in buckets of powers of two of milliseconds (bucket i: below 2^i ms),
 * enough for p99 within a factor of two without keeping every sample. */
#define LANE_HIST_BUCKETS 24

typedef struct LaneWait {
        struct LaneWait *next; /* in its client's FIFO */
        Conn *conn;
        json_t *id;     /* NULL for a notification */
        json_t *params; /* the lane param already taken out */
        const void *method; /* the method table row (dispatch.c's) */
        uint64_t since_ms;
} LaneWait;

typedef struct LaneClient {
        struct LaneClient *next, *prev; /* the lane's ring of clients with waiting requests */
        Conn *conn;
        LaneWait *head, *tail;
} LaneClient;

typedef struct Lane {
        unsigned slots, queue_max; /* configured */
        unsigned active, queued;
        LaneClient *ring;          /* the client served next; NULL when none waits */
        /* Of the runs answered in this lane: */
        uint64_t completed, failed, timed_out, cancelled, exec_ms_sum;
        uint64_t hist[LANE_HIST_BUCKETS];
        uint64_t hold_ms_avg;      /* a slot's moving-average hold time, for retryAfterMs */
        uint64_t refused;          /* requests refused with the queue full */
} Lane;

typedef struct Lanes {
        Lane lane[LANE_COUNT];
        Loop *loop;
        /* Starts an admitted wait: the dispatcher's, which lends the slot and answers. Owns w. */
        void (*start)(void *data, LaneId lane, LaneWait *w);
        void *data;
        int lent;     /* 0, or 1 + the lane whose slot a handler running now holds */
        bool pumping; /* a start of waiting requests is deferred already */
} Lanes;

void lanes_init(Lanes *l, Loop *loop, void (*start)(void *, LaneId, LaneWait *), void *data);
/* The defaults derived from the machine: interactive slots from the CPUs, one system slot. */
void lanes_defaults(unsigned *ret_interactive, unsigned *ret_system, unsigned *ret_queue);
void lanes_configure(Lanes *l, LaneId id, unsigned slots, unsigned queue_max);
const char *lane_name(LaneId id);
/* "interactive" / "system" → 0 or -EINVAL. */
int lane_parse(const char *s, LaneId *ret);

/* Takes a slot of lane id for a request about to be handled: 0 and l->lent set, or -EBUSY
 * when every slot is taken or others wait already (they go first). */
int lanes_try_take(Lanes *l, LaneId id);
/* Queues a request (takes references to id and params): 0, or -1 with e set to
 * WORKER_UNAVAILABLE and retryAfterMs when the lane's queue is full. */
int lanes_enqueue(Lanes *l, LaneId id, Conn *c, json_t *req_id, json_t *params, const void *method, RpcError *e);
/* The slot lent to the handler running now, taken over by the caller: 0 if none, else 1 +
 * the lane. */
int lanes_take_lent(Lanes *l);
/* Gives back a slot lent and not taken over (the handler answered at once). */
void lanes_return_lent(Lanes *l);
/* Gives back a slot of lane (1 + the lane, as lanes_take_lent gave it) held for held_ms. */
void lanes_release(Lanes *l, int lane, uint64_t held_ms);
/* Counts a run's end in its lane (1 + the lane; 0: none). */
void lanes_count(Lanes *l, int lane, uint64_t exec_ms, bool failed, bool timed_out, bool cancelled);
/* The p99 of the runs counted, in ms (the upper edge of its bucket); 0 with none. */
uint64_t lane_p99_ms(const Lane *ln);
/* The waiting request of c with that id, taken out of its lane (a cancel), or NULL. The
 * caller answers it and frees it with lanes_wait_free(). */
LaneWait *lanes_take(Lanes *l, const Conn *c, json_t *req_id);
void lanes_wait_free(LaneWait *w);
/* c is closing: its waiting requests are dropped unanswered. */
void lanes_drop_conn(Lanes *l, const Conn *c);
/* Answers every waiting request with e and drops it (shutdown). */
void lanes_fail_all(Lanes *l, const RpcError *e);
