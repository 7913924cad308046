/* SPDX-License-Identifier: MIT */
/* Requests answered later (src/server/pending.c) with no sandbox: the lane slot a pending
 * takes over and gives back, a run queued behind its session's handing the slot on, lookups
 * by request id, what is busy, and a connection's pause, close and the shutdown's answers. */
#include <stdio.h>
#include <string.h>
#include "server/core.h"
#include "server/pending.h"
#include "server_peer.h"
#include "tap.h"

static Core core;
static PendingSet *set = &core.pending;
static Lanes *lanes = &core.lanes;

/* Sessions are only compared by the pendings, never dereferenced. */
static int session_names[4];
#define S1 ((SbxSession *)&session_names[0])
#define S2 ((SbxSession *)&session_names[1])
#define S3 ((SbxSession *)&session_names[2])

static unsigned active(LaneId id) { return lanes->lane[id].active; }

/* What the lanes started: requests that waited, each holding its slot. */
static char started[256];
static void on_start(void *data, LaneId lane, LaneWait *w) {
        char one[32];
        snprintf(one, sizeof one, "%s%lld", *started ? " " : "", (long long)json_integer_value(w->id));
        strncat(started, one, sizeof started - strlen(started) - 1);
        (void)lanes_take_lent(lanes);
        lanes_wait_free(w);
}

/* A request of c holding a slot of lane (or none), registered as answered later. */
static Pending *admit(Conn *c, int id, PendingKind kind, LaneId lane, bool slot) {
        if (slot && lanes_try_take(lanes, lane) < 0)
                return NULL;
        json_t *jid = json_integer(id);
        Pending *p = NULL;
        int r = pending_new(set, &core, c, jid, kind, &p);
        json_decref(jid);
        return r < 0 ? NULL : p;
}

static void test_slots(Loop *loop) {
        lanes_configure(lanes, LANE_INTERACTIVE, 3, 10);
        Pending *p = admit(NULL, 1, PENDING_OP, LANE_INTERACTIVE, true);
        CHECK(p && p->lane == 1 + LANE_INTERACTIVE && lanes->lent == 0 && active(LANE_INTERACTIVE) == 1,
              "a pending takes over the slot lent to the handler that made it");
        Pending *q = admit(NULL, 2, PENDING_ENV_SET, LANE_INTERACTIVE, false);
        CHECK(q && q->lane == 0 && active(LANE_INTERACTIVE) == 1, "one made with no slot lent holds none");
        pending_free(q);
        CHECK(active(LANE_INTERACTIVE) == 1, "and gives none back when freed");
        pending_free(p);
        CHECK(active(LANE_INTERACTIVE) == 0 && set->head == NULL, "freeing the first gives its slot back");

        /* Three runs of one session and one of another. */
        Pending *a = admit(NULL, 10, PENDING_RUN, LANE_INTERACTIVE, true);
        pending_run_behind(set, a, S1, 0);
        CHECK(a->lane && !a->behind_lane && active(LANE_INTERACTIVE) == 1, "a run with nothing ahead keeps its slot");
        Pending *b = admit(NULL, 11, PENDING_RUN, LANE_INTERACTIVE, true);
        pending_run_behind(set, b, S1, 1);
        CHECK(!b->lane && b->behind_lane == 1 + LANE_INTERACTIVE && active(LANE_INTERACTIVE) == 1,
              "a run queued behind its session's gives its slot back and waits for that one's");
        Pending *c = admit(NULL, 12, PENDING_RUN, LANE_INTERACTIVE, true);
        pending_run_behind(set, c, S1, 2);
        CHECK(!c->lane && c->behind_lane && active(LANE_INTERACTIVE) == 1,
              "so does the next, behind one itself waiting: the session holds one slot");
        Pending *d = admit(NULL, 13, PENDING_RUN, LANE_INTERACTIVE, true);
        pending_run_behind(set, d, S2, 0);
        CHECK(d->lane && active(LANE_INTERACTIVE) == 2, "another session's run gets a slot of its own");
        pending_free(a);
        CHECK(b->lane == 1 + LANE_INTERACTIVE && !b->behind_lane && c->behind_lane && active(LANE_INTERACTIVE) == 2,
              "the run answered hands its slot to the oldest run behind it in its session");
        pending_free(b);
        CHECK(c->lane && !c->behind_lane && active(LANE_INTERACTIVE) == 2 && set->behind == NULL,
              "and that one to the next");
        pending_free(c);
        CHECK(active(LANE_INTERACTIVE) == 1, "the last gives it back to the lane");
        pending_free(d);
        CHECK(active(LANE_INTERACTIVE) == 0, "every slot is back");

        /* Behind a run of the other lane, or runs without a pending: the slot is kept. */
        Pending *s = admit(NULL, 20, PENDING_RUN, LANE_SYSTEM, true);
        pending_run_behind(set, s, S3, 0);
        Pending *i = admit(NULL, 21, PENDING_RUN, LANE_INTERACTIVE, true);
        pending_run_behind(set, i, S3, 1);
        CHECK(i->lane && !i->behind_lane && active(LANE_INTERACTIVE) == 1,
              "a run behind one of the other lane keeps its slot (none would be handed on)");
        pending_free(s);
        CHECK(active(LANE_SYSTEM) == 0 && i->lane && active(LANE_INTERACTIVE) == 1,
              "the other lane's slot goes back to its own lane");
        pending_free(i);
        Pending *o = admit(NULL, 22, PENDING_RUN, LANE_INTERACTIVE, true);
        pending_run_behind(set, o, S3, 3);
        CHECK(o->lane && !o->behind_lane, "runs ahead that no pending holds (internal ones) hand nothing on: kept");
        pending_free(o);
        Pending *e = admit(NULL, 23, PENDING_ENV_SET, LANE_INTERACTIVE, false);
        pending_run_behind(set, e, S3, 0);
        Pending *f = admit(NULL, 24, PENDING_RUN, LANE_INTERACTIVE, true);
        pending_run_behind(set, f, S3, 1);
        CHECK(f->lane && !f->behind_lane, "nor does an env.set ahead, which holds no slot");
        pending_free(e);
        pending_free(f);
        CHECK(active(LANE_INTERACTIVE) == 0 && active(LANE_SYSTEM) == 0 && set->head == NULL && set->behind == NULL,
              "nothing held, nothing left");

        /* The slot a run behind gives back goes to another client waiting in the lane. */
        lanes_configure(lanes, LANE_INTERACTIVE, 2, 10);
        a = admit(NULL, 30, PENDING_RUN, LANE_INTERACTIVE, true);
        pending_run_behind(set, a, S1, 0);
        b = admit(NULL, 31, PENDING_RUN, LANE_INTERACTIVE, true);
        RpcError err = { 0 };
        json_t *wid = json_integer(99), *params = json_object();
        static int other_client;
        CHECK(lanes_enqueue(lanes, LANE_INTERACTIVE, (Conn *)&other_client, wid, params, NULL, &err) == 0 &&
                      !*started,
              "with both slots held, another client's request waits");
        json_decref(wid);
        json_decref(params);
        pending_run_behind(set, b, S1, 1);
        loop_drain(loop, 20);
        CHECK(strcmp(started, "99") == 0 && active(LANE_INTERACTIVE) == 2,
              "a run that queues behind its session's frees its slot for the waiting request at once");
        pending_free(a);
        CHECK(b->lane && active(LANE_INTERACTIVE) == 2, "the session's run takes over the slot of the one ahead");
        pending_free(b);
        lanes_release(lanes, 1 + LANE_INTERACTIVE, 0);
        loop_drain(loop, 20);
        CHECK(active(LANE_INTERACTIVE) == 0, "all given back");
}

/* ---------------------------------------------------------------- per connection */

static unsigned detached_calls, paused_calls;
static bool paused_last;

/* A stream or a wait: freed when its connection goes. */
static void free_on_detach(Pending *p) {
        detached_calls++;
        pending_free(p);
}

/* A start or a kill: left for its done callback. */
static void keep_on_detach(Pending *p) { detached_calls++; }

static void on_paused(Pending *p, bool paused) {
        paused_calls++;
        paused_last = paused;
}

static void on_closed(void *data, Conn *c) { pending_detach(set, c); }
static const ConnOps ops = { peer_line_ignored, peer_paused_ignored, peer_eof_ignored, on_closed };

static void test_conns(Loop *loop) {
        ConnList list;
        conn_list_init(&list, loop, &ops, NULL);
        Peer x, y;
        if (peer_open(&list, &x) < 0 || peer_open(&list, &y) < 0) {
                CHECK(false, "two connections");
                return;
        }
        Pending *xrun = admit(x.conn, 5, PENDING_RUN, LANE_INTERACTIVE, false);
        Pending *xop = admit(x.conn, 6, PENDING_OP, LANE_INTERACTIVE, false);
        Pending *xstream = admit(x.conn, 7, PENDING_PROC, LANE_INTERACTIVE, false);
        Pending *xstart = admit(x.conn, 8, PENDING_PROC, LANE_INTERACTIVE, false);
        Pending *yrun = admit(y.conn, 5, PENDING_RUN, LANE_INTERACTIVE, false);
        Pending *yenv = admit(y.conn, 9, PENDING_ENV_GET, LANE_INTERACTIVE, false);
        Pending *ywatch = admit(y.conn, 10, PENDING_WATCH, LANE_INTERACTIVE, false);
        xstream->detached = free_on_detach;
        xstream->paused = on_paused;
        xstart->detached = keep_on_detach;
        ywatch->paused = on_paused;

        json_t *five = json_integer(5), *six = json_integer(6), *five_s = json_string("5");
        CHECK(pending_find_run(set, x.conn, five) == xrun && pending_find_run(set, y.conn, five) == yrun,
              "a run is found by its connection and request id");
        CHECK(pending_find_run(set, x.conn, six) == NULL, "a request of another kind is no run to find");
        CHECK(pending_find_run(set, x.conn, five_s) == NULL, "nor is the id \"5\" the id 5");
        json_decref(five);
        json_decref(six);
        json_decref(five_s);
        CHECK(pending_busy(set) == 4, "busy: the runs, the operation and the env, not streams and watches (%u)",
              pending_busy(set));
        unsigned running = 9, queued_runs = 9;
        pending_count(set, &running, &queued_runs);
        CHECK(running == 0 && queued_runs == 0, "no run started or queued in a session here");

        pending_pause(set, x.conn, true);
        CHECK(paused_calls == 1 && paused_last, "a connection's pause is told to its own streams only");
        pending_pause(set, x.conn, false);
        CHECK(paused_calls == 2 && !paused_last, "and so is its resume");

        /* x closes: its pendings are detached, the others stay. */
        conn_close(x.conn);
        close(x.fd);
        CHECK(detached_calls == 2 && xrun->conn == NULL && xop->conn == NULL && xstart->conn == NULL,
              "a closing connection's pendings are told (%u) and forget it", detached_calls);
        CHECK(pending_busy(set) == 2 && yrun->conn == y.conn,
              "they leave the set; the other connection's stay (busy %u)", pending_busy(set));
        /* Their done callbacks come later and free them. */
        pending_free(xrun);
        pending_free(xop);
        pending_free(xstart);
        pending_pause(set, y.conn, true);
        CHECK(paused_calls == 3, "the other connection's watch is still told of its pause");

        /* The shutdown's end: everything unanswered is answered once. */
        yenv->replied = true;
        RpcError down = { 0 };
        rpc_fail(&down, RPC_SHUTTING_DOWN, "POOL_SHUTTING_DOWN: test");
        pending_fail_all(set, &down);
        json_t *got = peer_read(&y);
        size_t i;
        json_t *v;
        unsigned ok = 0;
        json_array_foreach(got, i, v) {
                json_int_t id = json_integer_value(json_object_get(v, "id"));
                ok += (id == 5 || id == 10) &&
                      json_integer_value(json_object_get(json_object_get(v, "error"), "code")) == RPC_SHUTTING_DOWN;
        }
        CHECK(json_array_size(got) == 2 && ok == 2,
              "what was not answered yet is answered -32003, what was is not answered twice (%zu lines)",
              json_array_size(got));
        json_decref(got);
        CHECK(yrun->conn == NULL && yenv->conn == NULL && ywatch->conn == NULL && yrun->replied,
              "and forgets its connection, so a done callback answers nobody");
        pending_fail_all(set, &down);
        got = peer_read(&y);
        CHECK(json_array_size(got) == 0, "a second time answers nothing");
        json_decref(got);
        pending_free(yrun);
        pending_free(yenv);
        pending_free(ywatch);
        CHECK(set->head == NULL, "every pending freed");
        conn_close_all(&list);
        close(y.fd);
}

int main(void) {
        Loop *loop;
        if (loop_new(&loop) < 0) {
                CHECK(false, "loop");
                return tap_done();
        }
        lanes_init(lanes, loop, on_start, NULL);
        test_slots(loop);
        test_conns(loop);
        loop_drain(loop, 10);
        loop_free(loop);
        return tap_done();
}
