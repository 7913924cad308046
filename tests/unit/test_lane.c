/* SPDX-License-Identifier: MIT */
/* The lanes (src/server/lane.c) with no sandbox and no dispatcher: slots, the bounded queue
 * and its refusal with retryAfterMs, the room past the bound for a connection with nothing
 * waiting, round-robin across connections, a cancel, a connection's close, the counts. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "base/limits.h"
#include "server/lane.h"
#include "server_peer.h"
#include "tap.h"

/* Connections only named by the lanes (compared, never dereferenced) but in lanes_fail_all. */
static int conn_names[4];
#define A ((Conn *)&conn_names[0])
#define B ((Conn *)&conn_names[1])
#define C ((Conn *)&conn_names[2])

/* What the start callback saw: each request as "<lane>:<id>", in order. While `hold` is set
 * it takes the slot lent to it over (as a Pending would), so that each start holds a slot. */
typedef struct Starts {
        Lanes *lanes;
        bool hold;
        char seen[512];
        unsigned n;
} Starts;

static void on_start(void *data, LaneId lane, LaneWait *w) {
        Starts *s = data;
        char one[32];
        snprintf(one, sizeof one, "%s%s:%lld", s->n ? " " : "", lane == LANE_SYSTEM ? "s" : "i",
                 (long long)json_integer_value(w->id));
        strncat(s->seen, one, sizeof s->seen - strlen(s->seen) - 1);
        s->n++;
        if (s->hold)
                (void)lanes_take_lent(s->lanes);
        lanes_wait_free(w);
}

static int enqueue(Lanes *l, LaneId lane, Conn *c, long long id, RpcError *e) {
        json_t *jid = json_integer(id), *params = json_object();
        int r = lanes_enqueue(l, lane, c, jid, params, NULL, e);
        json_decref(jid);
        json_decref(params);
        return r;
}

/* Queues n interactive requests of c, ids first, first + 1... */
static void enqueue_n(Lanes *l, Conn *c, long long first, int n) {
        RpcError e = { 0 };
        for (int i = 0; i < n; i++)
                (void)enqueue(l, LANE_INTERACTIVE, c, first + i, &e);
}

/* Takes a slot of lane as a handler that registered a Pending would: held until released. */
static int hold_slot(Lanes *l, LaneId lane) {
        if (lanes_try_take(l, lane) < 0)
                return -1;
        return lanes_take_lent(l);
}

static void setup(Lanes *l, Loop *loop, Starts *s, unsigned slots, unsigned queue) {
        *s = (Starts){ .lanes = l, .hold = true };
        lanes_init(l, loop, on_start, s);
        lanes_configure(l, LANE_INTERACTIVE, slots, queue);
        lanes_configure(l, LANE_SYSTEM, 1, queue);
}

static void test_names(void) {
        LaneId id = LANE_COUNT;
        CHECK(lane_parse("system", &id) == 0 && id == LANE_SYSTEM && lane_parse("interactive", &id) == 0 &&
                      id == LANE_INTERACTIVE && lane_parse("batch", &id) == -EINVAL &&
                      strcmp(lane_name(LANE_SYSTEM), "system") == 0,
              "lane names parse both ways; another name is refused");
        unsigned in, sys, q;
        lanes_defaults(&in, &sys, &q);
        CHECK(in >= 1 && sys == SBX_DEFAULT_SYSTEM_SLOTS && q == SBX_DEFAULT_LANE_QUEUE,
              "defaults: %u interactive slots, %u system, queue %u", in, sys, q);
}

static void test_slots(Loop *loop) {
        Lanes l;
        Starts s;
        setup(&l, loop, &s, 2, 4);
        CHECK(lanes_try_take(&l, LANE_INTERACTIVE) == 0 && l.lent == 1 + LANE_INTERACTIVE,
              "a free slot is taken and lent to the handler about to run");
        CHECK(lanes_take_lent(&l) == 1 + LANE_INTERACTIVE && l.lent == 0 && l.lane[LANE_INTERACTIVE].active == 1,
              "the lent slot is taken over once, and stays held");
        CHECK(lanes_try_take(&l, LANE_INTERACTIVE) == 0, "the second slot");
        lanes_return_lent(&l);
        CHECK(l.lane[LANE_INTERACTIVE].active == 1 && l.lent == 0,
              "a slot lent and not taken over goes back when the handler answered at once");
        CHECK(hold_slot(&l, LANE_INTERACTIVE) > 0 && lanes_try_take(&l, LANE_INTERACTIVE) == -EBUSY,
              "with every slot held the lane refuses another: -EBUSY");
        CHECK(lanes_try_take(&l, LANE_SYSTEM) == 0 && l.lent == 1 + LANE_SYSTEM,
              "the system lane's slot is free while the interactive lane is full");
        lanes_return_lent(&l);

        RpcError e = { 0 };
        lanes_release(&l, 1 + LANE_INTERACTIVE, 0);
        CHECK(enqueue(&l, LANE_INTERACTIVE, A, 1, &e) == 0 && lanes_try_take(&l, LANE_INTERACTIVE) == -EBUSY,
              "a free slot is not taken past a request already waiting for it");
        CHECK(s.n == 0, "nothing starts from inside lanes_enqueue or lanes_release");
        loop_drain(loop, 10);
        CHECK(s.n == 1 && strcmp(s.seen, "i:1") == 0 && l.lane[LANE_INTERACTIVE].active == 2 &&
                      l.lane[LANE_INTERACTIVE].queued == 0,
              "the waiting request starts on the next turn of the loop, in the free slot: %s", s.seen);
        lanes_release(&l, 1 + LANE_INTERACTIVE, 0);
        lanes_release(&l, 1 + LANE_INTERACTIVE, 0);
        lanes_release(&l, 1 + LANE_INTERACTIVE, 0);
        CHECK(l.lane[LANE_INTERACTIVE].active == 0, "releases never count below zero");
        loop_drain(loop, 10);
}

static void test_queue_bound(Loop *loop) {
        Lanes l;
        Starts s;
        setup(&l, loop, &s, 2, 3);
        RpcError e = { 0 };
        /* A slot held 1000 ms: the moving average starts there. */
        int slot = hold_slot(&l, LANE_INTERACTIVE);
        lanes_release(&l, slot, 1000);
        CHECK(l.lane[LANE_INTERACTIVE].hold_ms_avg == 1000, "the first hold sets the average hold time");
        hold_slot(&l, LANE_INTERACTIVE);
        hold_slot(&l, LANE_INTERACTIVE);
        bool all = true;
        for (int i = 1; i <= 3; i++)
                all &= enqueue(&l, LANE_INTERACTIVE, A, i, &e) == 0;
        CHECK(all && l.lane[LANE_INTERACTIVE].queued == 3, "the queue takes its bound of 3");
        e = (RpcError){ 0 };
        CHECK(enqueue(&l, LANE_INTERACTIVE, A, 4, &e) == -1 && e.code == RPC_WORKER_UNAVAILABLE &&
                      strstr(e.message, "WORKER_UNAVAILABLE") && l.lane[LANE_INTERACTIVE].refused == 1,
              "past the bound a connection already waiting is refused with WORKER_UNAVAILABLE: %s", e.message);
        CHECK(e.retry_after_ms == 2000,
              "retryAfterMs is the average hold x the requests ahead / the slots: 1000 x 4 / 2 = 2000 (got %llu)",
              (unsigned long long)e.retry_after_ms);
        /* A connection with nothing waiting is let in past the bound, up to twice it. */
        CHECK(enqueue(&l, LANE_INTERACTIVE, B, 10, &e) == 0 && enqueue(&l, LANE_INTERACTIVE, C, 20, &e) == 0,
              "past the bound, connections with nothing waiting are still let in");
        e = (RpcError){ 0 };
        CHECK(enqueue(&l, LANE_INTERACTIVE, B, 11, &e) == -1 && e.code == RPC_WORKER_UNAVAILABLE,
              "but not for a second request of theirs");
        static int more[4];
        CHECK(enqueue(&l, LANE_INTERACTIVE, (Conn *)&more[0], 30, &e) == 0 &&
                      l.lane[LANE_INTERACTIVE].queued == 6,
              "up to twice the bound (6 waiting)");
        e = (RpcError){ 0 };
        CHECK(enqueue(&l, LANE_INTERACTIVE, (Conn *)&more[1], 40, &e) == -1 && e.code == RPC_WORKER_UNAVAILABLE &&
                      l.lane[LANE_INTERACTIVE].refused == 3,
              "at twice the bound a connection with nothing waiting is refused too");
        CHECK(e.retry_after_ms == 1000 * 7 / 2, "retryAfterMs grows with the queue: 1000 x 7 / 2 (got %llu)",
              (unsigned long long)e.retry_after_ms);
        lanes_drop_conn(&l, A);
        lanes_drop_conn(&l, B);
        lanes_drop_conn(&l, C);
        lanes_drop_conn(&l, (Conn *)&more[0]);
        CHECK(l.lane[LANE_INTERACTIVE].queued == 0 && l.lane[LANE_INTERACTIVE].ring == NULL,
              "dropping every connection empties the queue and its ring");

        /* The bounds of retryAfterMs, and a queue of 0. */
        Lanes z;
        Starts zs;
        setup(&z, loop, &zs, 1, 0);
        hold_slot(&z, LANE_INTERACTIVE);
        e = (RpcError){ 0 };
        CHECK(enqueue(&z, LANE_INTERACTIVE, A, 1, &e) == -1 && e.retry_after_ms == SBX_LANE_RETRY_MIN_MS,
              "a queue of 0 refuses even a connection with nothing waiting; no hold measured yet: retry after "
              "the least, %u ms (got %llu)",
              SBX_LANE_RETRY_MIN_MS, (unsigned long long)e.retry_after_ms);
        lanes_release(&z, 1 + LANE_INTERACTIVE, 3600 * 1000);
        hold_slot(&z, LANE_INTERACTIVE);
        CHECK(enqueue(&z, LANE_INTERACTIVE, A, 1, &e) == -1 && e.retry_after_ms == SBX_LANE_RETRY_MAX_MS,
              "an hour's hold asks for no more than %u ms (got %llu)", SBX_LANE_RETRY_MAX_MS,
              (unsigned long long)e.retry_after_ms);
        loop_drain(loop, 10);
}

static void test_round_robin(Loop *loop) {
        Lanes l;
        Starts s;
        setup(&l, loop, &s, 1, 10);
        int held = hold_slot(&l, LANE_INTERACTIVE);
        /* A pipelines three, then B two, then C one. */
        enqueue_n(&l, A, 1, 3);
        enqueue_n(&l, B, 11, 2);
        enqueue_n(&l, C, 21, 1);
        loop_drain(loop, 10);
        CHECK(s.n == 0, "nothing starts while the only slot is held");
        /* Each start holds the slot; give it back one at a time. */
        for (int i = 0; i < 6; i++) {
                lanes_release(&l, held, 0);
                loop_drain(loop, 10);
        }
        /* C came last, so it had nothing yet: first; then B, A, and round again. */
        CHECK(strcmp(s.seen, "i:21 i:11 i:1 i:12 i:2 i:3") == 0,
              "one slot at a time goes round the connections, the newest waiter first: %s", s.seen);
        CHECK(s.n == 6 && l.lane[LANE_INTERACTIVE].queued == 0 && l.lane[LANE_INTERACTIVE].active == 1,
              "each started once, one at a time");
        lanes_release(&l, held, 0);

        /* Two slots freed at once start two. */
        Starts s2;
        Lanes m;
        setup(&m, loop, &s2, 2, 10);
        int h1 = hold_slot(&m, LANE_INTERACTIVE), h2 = hold_slot(&m, LANE_INTERACTIVE);
        enqueue_n(&m, A, 1, 3);
        lanes_release(&m, h1, 0);
        lanes_release(&m, h2, 0);
        loop_drain(loop, 10);
        CHECK(strcmp(s2.seen, "i:1 i:2") == 0 && m.lane[LANE_INTERACTIVE].queued == 1,
              "two slots freed start the next two in order: %s", s2.seen);
        /* A start that answers at once gives its slot back: the next one goes too. */
        s2.hold = false;
        lanes_release(&m, h1, 0);
        loop_drain(loop, 10);
        CHECK(strcmp(s2.seen, "i:1 i:2 i:3") == 0 && m.lane[LANE_INTERACTIVE].active == 1,
              "a start that answers at once gives back the slot lent to it: %s", s2.seen);
        lanes_release(&m, h1, 0);
        loop_drain(loop, 10);
}

static void test_take_and_drop(Loop *loop) {
        Lanes l;
        Starts s;
        setup(&l, loop, &s, 1, 10);
        int held = hold_slot(&l, LANE_INTERACTIVE);
        enqueue_n(&l, A, 1, 3);
        enqueue_n(&l, B, 11, 2);
        json_t *two = json_integer(2), *twelve = json_integer(12), *three = json_integer(3);
        LaneWait *w = lanes_take(&l, A, two);
        CHECK(w && json_equal(w->id, two) && w->conn == A && l.lane[LANE_INTERACTIVE].queued == 4,
              "a cancel takes a waiting request out by its connection and id");
        lanes_wait_free(w);
        CHECK(lanes_take(&l, B, two) == NULL && lanes_take(&l, A, twelve) == NULL,
              "another connection's request is not found by its id");
        w = lanes_take(&l, A, three);
        CHECK(w != NULL && l.lane[LANE_INTERACTIVE].queued == 3, "the last of a connection's FIFO is taken out too");
        lanes_wait_free(w);
        enqueue_n(&l, A, 4, 1);
        lanes_drop_conn(&l, B);
        CHECK(l.lane[LANE_INTERACTIVE].queued == 2, "a closing connection's waiting requests are dropped");
        for (int i = 0; i < 3; i++) {
                lanes_release(&l, held, 0);
                loop_drain(loop, 10);
        }
        CHECK(strcmp(s.seen, "i:1 i:4") == 0,
              "what was taken out or dropped never starts; the rest keeps its order: %s", s.seen);
        json_decref(two);
        json_decref(twelve);
        json_decref(three);
        lanes_release(&l, held, 0);
        loop_drain(loop, 10);
}

static void test_counts(Loop *loop) {
        Lanes l;
        Starts s;
        setup(&l, loop, &s, 1, 1);
        CHECK(lane_p99_ms(&l.lane[LANE_INTERACTIVE]) == 0, "no run counted: p99 0");
        for (int i = 0; i < 99; i++)
                lanes_count(&l, 1 + LANE_INTERACTIVE, 3, false, false, false);
        lanes_count(&l, 1 + LANE_INTERACTIVE, 3000, true, true, false);
        lanes_count(&l, 0, 5, true, false, true);
        const Lane *ln = &l.lane[LANE_INTERACTIVE];
        CHECK(ln->completed == 100 && ln->failed == 1 && ln->timed_out == 1 && ln->cancelled == 0 &&
                      ln->exec_ms_sum == 99 * 3 + 3000 && l.lane[LANE_SYSTEM].completed == 0,
              "runs are counted in their lane, none for lane 0");
        CHECK(lane_p99_ms(ln) == 4, "p99 of 99 runs of 3 ms and one of 3 s is the edge of 3 ms's bucket: %llu",
              (unsigned long long)lane_p99_ms(ln));
        lanes_count(&l, 1 + LANE_INTERACTIVE, 3000, false, false, false);
        CHECK(lane_p99_ms(ln) == 4096, "two slow runs in 101 make p99 the slow bucket's edge: %llu",
              (unsigned long long)lane_p99_ms(ln));
}

static void test_fail_all(Loop *loop) {
        ConnList list;
        conn_list_init(&list, loop, peer_ops_ignored(), NULL);
        Peer p;
        if (peer_open(&list, &p) < 0) {
                CHECK(false, "socketpair connection");
                return;
        }
        Lanes l;
        Starts s;
        setup(&l, loop, &s, 1, 10);
        int held = hold_slot(&l, LANE_INTERACTIVE);
        int sys = hold_slot(&l, LANE_SYSTEM);
        RpcError e = { 0 };
        enqueue(&l, LANE_INTERACTIVE, p.conn, 7, &e);
        enqueue(&l, LANE_SYSTEM, p.conn, 8, &e);
        LaneWait *w;
        json_t *params = json_object();
        CHECK(lanes_enqueue(&l, LANE_INTERACTIVE, p.conn, NULL, params, NULL, &e) == 0, "a notification waits too");
        json_decref(params);
        RpcError down = { 0 };
        rpc_fail(&down, RPC_SHUTTING_DOWN, "POOL_SHUTTING_DOWN: test");
        lanes_fail_all(&l, &down);
        json_t *got = peer_read(&p);
        size_t i;
        json_t *v;
        int answered = 0;
        json_array_foreach(got, i, v) {
                json_t *id = json_object_get(v, "id");
                json_int_t code = json_integer_value(json_object_get(json_object_get(v, "error"), "code"));
                answered += code == RPC_SHUTTING_DOWN && (json_integer_value(id) == 7 || json_integer_value(id) == 8);
        }
        CHECK(answered == 2 && json_array_size(got) == 2,
              "shutdown answers each waiting request of both lanes -32003, and no notification (%zu lines)",
              json_array_size(got));
        CHECK(l.lane[LANE_INTERACTIVE].queued == 0 && l.lane[LANE_SYSTEM].queued == 0 &&
                      (w = lanes_take(&l, p.conn, NULL)) == NULL,
              "and nothing is left waiting");
        json_decref(got);
        lanes_release(&l, held, 0);
        lanes_release(&l, sys, 0);
        loop_drain(loop, 10);
        CHECK(s.n == 0, "nothing failed starts afterwards");
        conn_close_all(&list);
        close(p.fd);
}

int main(void) {
        Loop *loop;
        if (loop_new(&loop) < 0) {
                CHECK(false, "loop");
                return tap_done();
        }
        test_names();
        test_slots(loop);
        test_queue_bound(loop);
        test_round_robin(loop);
        test_take_and_drop(loop);
        test_counts(loop);
        test_fail_all(loop);
        loop_free(loop);
        return tap_done();
}
