/* SPDX-License-Identifier: MIT */
/* Lanes: slots, bounded queues and round-robin between connections (lane.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/util.h"
#include "server/lane.h"

static const char *const names[LANE_COUNT] = { "interactive", "system" };

const char *lane_name(LaneId id) { return id < LANE_COUNT ? names[id] : "?"; }

int lane_parse(const char *s, LaneId *ret) {
        for (unsigned i = 0; i < LANE_COUNT; i++)
                if (strcmp(s, names[i]) == 0) {
                        *ret = (LaneId)i;
                        return 0;
                }
        return -EINVAL;
}

void lanes_defaults(unsigned *ret_interactive, unsigned *ret_system, unsigned *ret_queue) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (cpus < 1)
                cpus = 1;
        /* What a slot sets going costs memory and processes more than CPU (the kernel shares
         * the CPU between sandboxes, and the loop never waits for one): as many slots as the
         * memory holds commands of a modest size, and never fewer than a few per CPU. */
        uint64_t by_cpu = (uint64_t)cpus * SBX_LANE_SLOTS_PER_CPU;
        uint64_t by_mem = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / SBX_LANE_SLOT_MEMORY : 0;
        uint64_t n = by_mem > by_cpu ? by_mem : by_cpu;
        *ret_interactive = n > SBX_MAX_LANE_SLOTS ? SBX_MAX_LANE_SLOTS : (unsigned)n;
        *ret_system = SBX_DEFAULT_SYSTEM_SLOTS;
        *ret_queue = SBX_DEFAULT_LANE_QUEUE;
}

void lanes_init(Lanes *l, Loop *loop, void (*start)(void *, LaneId, LaneWait *), void *data) {
        memset(l, 0, sizeof *l);
        l->loop = loop;
        l->start = start;
        l->data = data;
        unsigned in, sys, q;
        lanes_defaults(&in, &sys, &q);
        lanes_configure(l, LANE_INTERACTIVE, in, q);
        lanes_configure(l, LANE_SYSTEM, sys, q);
}

void lanes_configure(Lanes *l, LaneId id, unsigned slots, unsigned queue_max) {
        l->lane[id].slots = slots;
        l->lane[id].queue_max = queue_max;
}

int lanes_try_take(Lanes *l, LaneId id) {
        Lane *ln = &l->lane[id];
        if (ln->active >= ln->slots || ln->queued > 0)
                return -EBUSY;
        ln->active++;
        l->lent = 1 + (int)id;
        return 0;
}

static LaneClient *client_of(Lane *ln, const Conn *c) {
        LaneClient *k = ln->ring;
        if (!k)
                return NULL;
        /* The ring holds only clients with waiting requests: at most queue_max of them. */
        do {
                if (k->conn == c)
                        return k;
                k = k->next;
        } while (k != ln->ring);
        return NULL;
}

/* Puts a client that starts waiting first in the rotation: those already in it were served
 * a slot or queued behind one, it has had nothing yet. */
static void ring_add(Lane *ln, LaneClient *k) {
        if (!ln->ring) {
                k->next = k->prev = k;
                ln->ring = k;
                return;
        }
        k->next = ln->ring;
        k->prev = ln->ring->prev;
        k->prev->next = k;
        ln->ring->prev = k;
        ln->ring = k;
}

static void ring_del(Lane *ln, LaneClient *k) {
        if (k->next == k)
                ln->ring = NULL;
        else {
                k->prev->next = k->next;
                k->next->prev = k->prev;
                if (ln->ring == k)
                        ln->ring = k->next;
        }
        free(k);
}

static void wait_free(LaneWait *w) {
        json_decref(w->id);
        json_decref(w->params);
        free(w);
}

/* What a refused client should wait before trying again: the time the requests ahead of it
 * would hold the lane's slots, by the recent average hold, within bounds a client's backoff
 * can use. */
static uint64_t retry_after_ms(const Lane *ln) {
        uint64_t hold = ln->hold_ms_avg ? ln->hold_ms_avg : SBX_LANE_RETRY_MIN_MS;
        uint64_t ms = hold * (ln->queued + 1) / (ln->slots ? ln->slots : 1);
        return ms < SBX_LANE_RETRY_MIN_MS ? SBX_LANE_RETRY_MIN_MS : ms > SBX_LANE_RETRY_MAX_MS ? SBX_LANE_RETRY_MAX_MS : ms;
}

static void pump(void *data);

static void schedule(Lanes *l) {
        if (l->pumping)
                return;
        /* Deferred: a slot is often given back from inside a run's done callback, where
         * starting the next request (maybe on the same session) must not happen. */
        if (loop_defer(l->loop, pump, l) == 0)
                l->pumping = true;
}

int lanes_enqueue(Lanes *l, LaneId id, Conn *c, json_t *req_id, json_t *params, const void *method, RpcError *e) {
        Lane *ln = &l->lane[id];
        LaneClient *k = client_of(ln, c);
        /* Past the bound a client with nothing waiting still gets in (up to twice the bound):
         * one client filling the queue must not shut the others out, only make them wait
         * their turn. */
        if (ln->queued >= ln->queue_max && (k || ln->queued >= 2 * (uint64_t)ln->queue_max || !ln->queue_max)) {
                ln->refused++;
                rpc_fail(e, RPC_WORKER_UNAVAILABLE,
                         "WORKER_UNAVAILABLE: the %s lane is full (%u running, %u waiting); retry after %llu ms",
                         names[id], ln->active, ln->queued, (unsigned long long)retry_after_ms(ln));
                e->retry_after_ms = retry_after_ms(ln);
                return -1;
        }
        LaneWait *w = calloc(1, sizeof *w);
        bool new_client = !k;
        if (new_client)
                k = calloc(1, sizeof *k);
        if (!w || !k) {
                free(w);
                if (new_client)
                        free(k);
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        }
        w->conn = c;
        w->id = json_incref(req_id);
        w->params = json_incref(params);
        w->method = method;
        w->since_ms = now_ms();
        if (new_client) {
                k->conn = c;
                ring_add(ln, k);
        }
        if (k->tail)
                k->tail->next = w;
        else
                k->head = w;
        k->tail = w;
        ln->queued++;
        /* A slot may be free with nobody admitted yet (a request that queued behind others). */
        if (ln->active < ln->slots)
                schedule(l);
        return 0;
}

/* The next waiting request of lane ln, round-robin across its clients. */
static LaneWait *pop(Lane *ln) {
        LaneClient *k = ln->ring;
        if (!k)
                return NULL;
        LaneWait *w = k->head;
        k->head = w->next;
        if (!k->head) {
                k->tail = NULL;
                ring_del(ln, k);
        } else {
                ln->ring = k->next;
        }
        w->next = NULL;
        ln->queued--;
        return w;
}

static void pump(void *data) {
        Lanes *l = data;
        l->pumping = false;
        for (unsigned i = 0; i < LANE_COUNT; i++) {
                Lane *ln = &l->lane[i];
                while (ln->active < ln->slots) {
                        LaneWait *w = pop(ln);
                        if (!w)
                                break;
                        ln->active++;
                        l->lent = 1 + (int)i;
                        l->start(l->data, (LaneId)i, w);
                        /* The start answered at once or handed the slot over; either way it
                         * is no longer lent. */
                        lanes_return_lent(l);
                }
        }
}

int lanes_take_lent(Lanes *l) {
        int lane = l->lent;
        l->lent = 0;
        return lane;
}

void lanes_return_lent(Lanes *l) {
        int lane = lanes_take_lent(l);
        if (lane)
                lanes_release(l, lane, 0);
}

void lanes_release(Lanes *l, int lane, uint64_t held_ms) {
        if (lane <= 0 || lane > LANE_COUNT)
                return;
        Lane *ln = &l->lane[lane - 1];
        if (ln->active > 0)
                ln->active--;
        if (held_ms)
                ln->hold_ms_avg = ln->hold_ms_avg ? (ln->hold_ms_avg * 7 + held_ms) / 8 : held_ms;
        if (ln->queued > 0)
                schedule(l);
}

void lanes_count(Lanes *l, int lane, uint64_t exec_ms, bool failed, bool timed_out, bool cancelled) {
        if (lane <= 0 || lane > LANE_COUNT)
                return;
        Lane *ln = &l->lane[lane - 1];
        ln->completed++;
        ln->exec_ms_sum += exec_ms;
        ln->failed += failed;
        ln->timed_out += timed_out;
        ln->cancelled += cancelled;
        unsigned b = 0;
        while (b + 1 < LANE_HIST_BUCKETS && exec_ms >= (1ULL << b))
                b++;
        ln->hist[b]++;
}

uint64_t lane_p99_ms(const Lane *ln) {
        uint64_t n = 0;
        for (unsigned b = 0; b < LANE_HIST_BUCKETS; b++)
                n += ln->hist[b];
        if (!n)
                return 0;
        uint64_t want = n - n / 100, seen = 0;
        for (unsigned b = 0; b < LANE_HIST_BUCKETS; b++) {
                seen += ln->hist[b];
                if (seen >= want)
                        return 1ULL << b;
        }
        return 1ULL << (LANE_HIST_BUCKETS - 1);
}

LaneWait *lanes_take(Lanes *l, const Conn *c, json_t *req_id) {
        for (unsigned i = 0; i < LANE_COUNT; i++) {
                Lane *ln = &l->lane[i];
                LaneClient *k = client_of(ln, c);
                if (!k)
                        continue;
                for (LaneWait **pp = &k->head, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next) {
                        LaneWait *w = *pp;
                        if (!w->id || !json_equal(w->id, req_id))
                                continue;
                        *pp = w->next;
                        if (k->tail == w)
                                k->tail = prev;
                        w->next = NULL;
                        ln->queued--;
                        if (!k->head)
                                ring_del(ln, k);
                        return w;
                }
        }
        return NULL;
}

void lanes_wait_free(LaneWait *w) { wait_free(w); }

void lanes_drop_conn(Lanes *l, const Conn *c) {
        for (unsigned i = 0; i < LANE_COUNT; i++) {
                Lane *ln = &l->lane[i];
                LaneClient *k = client_of(ln, c);
                if (!k)
                        continue;
                for (LaneWait *w = k->head, *next; w; w = next) {
                        next = w->next;
                        wait_free(w);
                        ln->queued--;
                }
                ring_del(ln, k);
        }
}

void lanes_fail_all(Lanes *l, const RpcError *e) {
        for (unsigned i = 0; i < LANE_COUNT; i++) {
                LaneWait *w;
                while ((w = pop(&l->lane[i]))) {
                        if (w->id)
                                conn_reply_error(w->conn, w->id, e);
                        wait_free(w);
                }
        }
}
