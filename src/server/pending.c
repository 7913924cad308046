/* SPDX-License-Identifier: MIT */
/* The set of requests answered later, and what happens to them when their client goes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "base/list.h"
#include "base/util.h"
#include "server/core.h"
#include "server/pending.h"

static void pending_link(Pending **head, Pending *p) {
        p->head = head;
        p->prev = NULL;
        p->next = *head;
        if (p->next)
                p->next->prev = p;
        *head = p;
}

/* The connection's own list: what its close, pause and cancel walk, not every request. */
static void conn_link(Conn *c, Pending *p) {
        Pending **head = (Pending **)conn_pendings(c);
        p->chead = head;
        p->cprev = NULL;
        p->cnext = *head;
        if (p->cnext)
                p->cnext->cprev = p;
        *head = p;
}

static void conn_unlink(Pending *p) {
        if (!p->chead)
                return;
        if (p->cprev)
                p->cprev->cnext = p->cnext;
        else
                *p->chead = p->cnext;
        if (p->cnext)
                p->cnext->cprev = p->cprev;
        p->cnext = p->cprev = NULL;
        p->chead = NULL;
}

static void pending_unlink(Pending *p) {
        conn_unlink(p);
        if (!p->head)
                return;
        if (p->prev)
                p->prev->next = p->next;
        else
                *p->head = p->next;
        if (p->next)
                p->next->prev = p->prev;
        p->next = p->prev = NULL;
        p->head = NULL;
}

static char *id_key(json_t *id) {
        return json_dumps(id ? id : json_null(), JSON_COMPACT | JSON_ENCODE_ANY);
}

int pending_new(PendingSet *set, Core *core, Conn *c, json_t *id, PendingKind kind, Pending **ret) {
        Pending *p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        p->core = core;
        p->conn = c;
        p->id = json_incref(id);
        p->key = id_key(id);
        p->kind = kind;
        p->lane = lanes_take_lent(&core->lanes);
        if (p->lane)
                p->lane_ms = now_ms();
        pending_link(&set->head, p);
        if (c)
                conn_link(c, p);
        *ret = p;
        return 0;
}

static void behind_unlink(PendingSet *set, Pending *p) {
        if (!p->behind_lane)
                return;
        TLIST_UNLINK(set->behind, set->behind_tail, p, bnext, bprev);
        p->behind_lane = 0;
}

void pending_run_session(PendingSet *set, Pending *p, SbxSession *s) {
        pending_run_behind(set, p, s, sbx_session_runs(s));
}

void pending_run_behind(PendingSet *set, Pending *p, SbxSession *s, unsigned runs) {
        /* Only a run of this lane holding a slot, or waiting for one, hands one on when it is
         * answered. The newest pending of the session is the run right ahead (pendings are
         * linked newest first); anything else ahead (an env.set, which holds no slot, a run
         * of the other lane, a run of the session's own with no pending) hands nothing on,
         * and the run keeps its slot while it waits, as every run did. */
        p->session = s;
        if (!p->lane || runs == 0)
                return; /* the common case: nothing ahead, nothing to look for */
        Pending *ahead = NULL;
        for (Pending *q = set->head; q && !ahead; q = q->next)
                if (q != p && q->session == s)
                        ahead = q;
        if (!ahead || (ahead->lane != p->lane && ahead->behind_lane != p->lane))
                return;
        lanes_release(&p->core->lanes, p->lane, now_ms() - p->lane_ms);
        p->behind_lane = p->lane;
        p->lane = 0;
        TLIST_PUSH_BACK(set->behind, set->behind_tail, p, bnext, bprev);
}

Pending *pending_free(Pending *p) {
        PendingSet *set = &p->core->pending;
        pending_unlink(p);
        behind_unlink(set, p);
        /* The session's next run is the oldest of its runs waiting behind: it takes the slot
         * over if it waits for one of this lane (one of the other lane runs without: still
         * one run at a time, its session's). */
        Pending *next = NULL;
        for (Pending *q = p->lane && p->session ? set->behind : NULL; q && !next; q = q->bnext)
                if (q->session == p->session)
                        next = q;
        if (next && next->behind_lane != p->lane)
                next = NULL;
        if (next) {
                behind_unlink(set, next);
                next->lane = p->lane;
                next->lane_ms = now_ms();
        } else if (p->lane) {
                lanes_release(&p->core->lanes, p->lane, now_ms() - p->lane_ms);
        }
        json_decref(p->id);
        json_decref(p->answer);
        json_decref(p->audit);
        free(p->key);
        free(p);
        return NULL;
}

Pending *pending_find_run(PendingSet *set, Conn *c, json_t *request_id) {
        char *key = id_key(request_id);
        Pending *p = *(Pending **)conn_pendings(c);
        while (p && !(p->kind == PENDING_RUN && key && p->key && strcmp(p->key, key) == 0))
                p = p->cnext;
        free(key);
        return p;
}

void pending_detach(PendingSet *set, Conn *c) {
        Pending *work = NULL;
        for (Pending *p = *(Pending **)conn_pendings(c), *next; p; p = next) {
                next = p->cnext;
                pending_unlink(p);
                p->conn = NULL;
                pending_link(&work, p);
        }
        /* Cancelling a queued run calls its done callback at once, which frees that pending
         * and may finish others: take them one at a time from a list they unlink from. */
        while (work) {
                Pending *p = work;
                pending_unlink(p);
                if (p->run)
                        (void)sbx_run_cancel(p->run);
                else if (p->detached)
                        p->detached(p);
        }
}

void pending_pause(PendingSet *set, Conn *c, bool paused) {
        for (Pending *p = *(Pending **)conn_pendings(c), *next; p; p = next) {
                next = p->cnext;
                if (p->run && p->stream)
                        sbx_run_pause_output(p->run, paused);
                else if (p->paused)
                        p->paused(p, paused);
        }
}

void pending_count(const PendingSet *set, unsigned *ret_running, unsigned *ret_queued) {
        unsigned running = 0, queued = 0;
        for (const Pending *p = set->head; p; p = p->next)
                if (p->run && sbx_run_started(p->run))
                        running++;
                else if (p->run)
                        queued++;
        *ret_running = running;
        *ret_queued = queued;
}

void pending_fail_queued(PendingSet *set, const RpcError *e) {
        for (Pending *p = set->head; p; p = p->next)
                if (p->run && !sbx_run_started(p->run)) {
                        conn_reply_error(p->conn, p->id, e);
                        p->replied = true;
                }
}

void pending_cancel_running(PendingSet *set) {
        /* A cancel may answer and free at once (and with it others): restart from the head
         * after each, skipping what was cancelled already. */
        for (Pending *p = set->head; p; p = p->next)
                if (p->run && sbx_run_started(p->run) && !p->cancelled) {
                        p->cancelled = true;
                        (void)sbx_run_cancel(p->run);
                        p = set->head;
                        if (!p)
                                break;
                }
}

unsigned pending_busy(const PendingSet *set) {
        unsigned n = 0;
        for (const Pending *p = set->head; p; p = p->next)
                n += p->kind == PENDING_RUN || p->kind == PENDING_ENV_SET || p->kind == PENDING_ENV_GET ||
                     p->kind == PENDING_OP;
        return n;
}

void pending_fail_all(PendingSet *set, const RpcError *e) {
        for (Pending *p = set->head; p; p = p->next)
                if (p->conn) {
                        if (!p->replied)
                                conn_reply_error(p->conn, p->id, e);
                        p->replied = true;
                        /* Its done callback, if one ever comes, answers nobody. */
                        conn_unlink(p);
                        p->conn = NULL;
                }
}
