/* SPDX-License-Identifier: MIT */
/* A connection (src/server/conn.c) over a socketpair, driven by the loop: one request line
 * per connection per turn of the loop, lines over the limit skipped and reported once, the
 * output queue pausing the client's requests past SBX_OUTPUT_QUEUE_HIGH_BYTES and resuming
 * below SBX_OUTPUT_QUEUE_LOW_BYTES, holds, end of input and a client gone. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/util.h"
#include "server_peer.h"
#include "tap.h"

#define MAX_SEEN 64

/* What the connections told their owner. */
static struct {
        Conn *conn[MAX_SEEN];
        char line[MAX_SEEN][64]; /* "<too large>" for one over the limit */
        unsigned n;
        char pauses[32]; /* "1" paused, "0" resumed, in order */
        unsigned eofs, closed;
} seen;

static void on_line(void *data, Conn *c, const char *line, size_t len, bool too_large) {
        if (seen.n == MAX_SEEN)
                return;
        seen.conn[seen.n] = c;
        if (too_large)
                snprintf(seen.line[seen.n], sizeof seen.line[0], "<too large>");
        else
                snprintf(seen.line[seen.n], sizeof seen.line[0], "%.*s", (int)len, line);
        seen.n++;
}

static void on_paused(void *data, Conn *c, bool paused) {
        size_t k = strlen(seen.pauses);
        if (k + 1 < sizeof seen.pauses)
                seen.pauses[k] = paused ? '1' : '0';
}

static void on_eof(void *data, Conn *c) {
        seen.eofs++;
        conn_close(c);
}

static void on_closed(void *data, Conn *c) { seen.closed++; }

static const ConnOps ops = { on_line, on_paused, on_eof, on_closed };

static void reset(void) { memset(&seen, 0, sizeof seen); }

/* Where line s is among those seen, or -1. */
static int seen_at(const char *s) {
        for (unsigned i = 0; i < seen.n; i++)
                if (strcmp(seen.line[i], s) == 0)
                        return (int)i;
        return -1;
}

/* Runs the loop until nothing more is ready, and says the most lines one connection got in a
 * single turn. */
static unsigned turns(Loop *loop, int max_turns) {
        unsigned most = 0;
        for (int t = 0; t < max_turns; t++) {
                unsigned before = seen.n;
                if (loop_run_once(loop, 0) <= 0)
                        break;
                for (unsigned i = before; i < seen.n; i++) {
                        unsigned same = 0;
                        for (unsigned j = before; j < seen.n; j++)
                                same += seen.conn[j] == seen.conn[i];
                        most = same > most ? same : most;
                }
        }
        return most;
}

static void test_turns(Loop *loop) {
        ConnList list;
        conn_list_init(&list, loop, &ops, NULL);
        Peer a, b;
        reset();
        if (peer_open(&list, &a) < 0 || peer_open(&list, &b) < 0) {
                CHECK(false, "two connections");
                return;
        }
        CHECK(peer_write(&a, "a1\na2\na3\n") && peer_write(&b, "b1\n"), "A pipelines three requests, B sends one");
        unsigned most = turns(loop, 100);
        CHECK(seen.n == 4 && seen_at("a1") >= 0 && seen_at("a2") >= 0 && seen_at("a3") >= 0 && seen_at("b1") >= 0,
              "every line reaches the owner, without its newline (%u lines)", seen.n);
        CHECK(most == 1, "no connection gets more than one request handled in a turn of the loop (most: %u)", most);
        CHECK(seen_at("b1") < seen_at("a2") && seen_at("a1") < seen_at("a2") && seen_at("a2") < seen_at("a3"),
              "B's request is not held behind A's pipeline, and A's keep their order: %s %s %s %s", seen.line[0],
              seen.line[1], seen.line[2], seen.line[3]);

        /* A request split across writes is one line. */
        reset();
        peer_write(&a, "spl");
        turns(loop, 20);
        CHECK(seen.n == 0, "half a line is no request");
        peer_write(&a, "it\n");
        turns(loop, 20);
        CHECK(seen.n == 1 && strcmp(seen.line[0], "split") == 0, "its end makes it one: %s", seen.line[0]);

        /* Holds: none of the client's requests is handled until as many releases. */
        reset();
        conn_hold_input(a.conn, true);
        conn_hold_input(a.conn, true);
        peer_write(&a, "h1\nh2\n");
        turns(loop, 20);
        CHECK(seen.n == 0, "a held connection has nothing handled");
        conn_hold_input(a.conn, false);
        turns(loop, 20);
        CHECK(seen.n == 0, "nor after one release of two holds");
        conn_hold_input(a.conn, false);
        turns(loop, 20);
        CHECK(seen.n == 2 && strcmp(seen.line[0], "h1") == 0 && strcmp(seen.line[1], "h2") == 0,
              "the last release lets its requests through, in order");

        CHECK(conn_lane(a.conn) == -1 && conn_pid(a.conn) == -1 && conn_uid(a.conn) == getuid() &&
                      !conn_is_stdio(a.conn),
              "a new connection: no fixed lane, no known pid, the peer's uid");
        conn_set_lane(a.conn, 1);
        conn_set_pid(a.conn, 42);
        CHECK(conn_lane(a.conn) == 1 && conn_pid(a.conn) == 42, "the listener stamps a lane and a pid");

        /* The end of the client's input is told once; the owner closes. */
        reset();
        shutdown(b.fd, SHUT_WR);
        turns(loop, 20);
        CHECK(seen.eofs == 1 && seen.closed == 1, "end of input: eof told once (%u), then closed (%u)", seen.eofs,
              seen.closed);
        /* A client gone: the answer cannot be written, the connection closes itself, before
         * the end of its input is even read. */
        reset();
        close(a.fd);
        char *msg = strdup("{\"late\":1}\n");
        conn_send(a.conn, msg, strlen(msg));
        CHECK(seen.closed == 0, "not from inside conn_send");
        turns(loop, 20);
        CHECK(seen.closed == 1 && seen.eofs == 0 && list.head == NULL,
              "an answer to a client gone closes its connection on the next turn (closed %u, eof %u)", seen.closed,
              seen.eofs);
        close(b.fd);
        conn_close_all(&list);
}

static void test_too_large(Loop *loop) {
        ConnList list;
        conn_list_init(&list, loop, &ops, NULL);
        Peer a;
        reset();
        if (peer_open(&list, &a) < 0) {
                CHECK(false, "a connection");
                return;
        }
        CHECK(conn_line_max(a.conn) == SBX_DEFAULT_RPC_BYTES, "the default line limit is %u bytes",
              SBX_DEFAULT_RPC_BYTES);
        conn_set_line_max(a.conn, 16);
        CHECK(conn_line_max(a.conn) == 16, "the limit is set");
        char big[80];
        memset(big, 'x', 40);
        snprintf(big + 40, sizeof big - 40, "\n");
        peer_write(&a, "short\n");
        peer_write(&a, big);
        peer_write(&a, "0123456789abcdef\nafter\n");
        turns(loop, 50);
        CHECK(seen.n == 4 && strcmp(seen.line[0], "short") == 0 && strcmp(seen.line[1], "<too large>") == 0 &&
                      strcmp(seen.line[2], "0123456789abcdef") == 0 && strcmp(seen.line[3], "after") == 0,
              "a line over the limit is reported as too large, one at the limit passes, the next is whole: "
              "%s | %s | %s | %s",
              seen.line[0], seen.line[1], seen.line[2], seen.line[3]);
        /* Over the limit across writes: reported once, its bytes never make a line. */
        reset();
        peer_write(&a, "yyyyyyyyyy");
        turns(loop, 20);
        peer_write(&a, "yyyyyyyyyyyyyyyyyyyy");
        turns(loop, 20);
        peer_write(&a, "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy");
        turns(loop, 20);
        peer_write(&a, "yy\nok\n");
        turns(loop, 20);
        CHECK(seen.n == 2 && strcmp(seen.line[0], "<too large>") == 0 && strcmp(seen.line[1], "ok") == 0,
              "a long line coming in pieces is reported once and skipped to its newline (%u lines: %s, %s)", seen.n,
              seen.line[0], seen.line[1]);
        CHECK(seen.closed == 0, "the connection stays open");
        conn_close_all(&list);
        close(a.fd);
}

/* Bytes waiting in the connection's output queue: sent, less what the client read and what
 * the pipe holds. */
static size_t queued(size_t sent, size_t got, int rfd) {
        int inpipe = 0;
        (void)ioctl(rfd, FIONREAD, &inpipe);
        return sent - got - (size_t)inpipe;
}

static void send_bytes(Conn *c, size_t n) {
        char *b = malloc(n);
        memset(b, 'o', n);
        conn_send(c, b, n);
}

static void test_backpressure(Loop *loop) {
        ConnList list;
        conn_list_init(&list, loop, &ops, NULL);
        reset();
        /* Requests come in on a socketpair; answers go out on a pipe of one page, so that
         * what waits in the connection's queue is known to the byte. */
        int sv[2], out[2];
        Conn *c;
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0 || pipe2(out, O_CLOEXEC) < 0 ||
            conn_new(&list, sv[0], out[1], false, getuid(), &c) < 0) {
                CHECK(false, "a connection answering on a pipe");
                return;
        }
        (void)fcntl(out[0], F_SETPIPE_SZ, 4096);
        (void)fd_set_nonblock(out[0], true);
        int cap = fcntl(out[0], F_GETPIPE_SZ);
        size_t sent = 0, got = 0;
        const size_t high = SBX_OUTPUT_QUEUE_HIGH_BYTES, low = SBX_OUTPUT_QUEUE_LOW_BYTES;
        while (sent < high + (size_t)cap) {
                size_t n = MIN((size_t)65536, high + (size_t)cap - sent);
                send_bytes(c, n);
                sent += n;
        }
        CHECK(queued(sent, got, out[0]) == high && seen.pauses[0] == 0 && !conn_paused(c),
              "exactly %zu bytes waiting: not paused yet (waiting %zu, pipe of %d)", high, queued(sent, got, out[0]),
              cap);
        send_bytes(c, 1);
        sent++;
        CHECK(strcmp(seen.pauses, "1") == 0 && conn_paused(c), "one byte more: the owner is told the client paused");

        /* While paused, the client's requests are neither read nor handled. */
        CHECK(write(sv[1], "ping\n", 5) == 5, "the paused client sends a request");
        turns(loop, 20);
        CHECK(seen.n == 0, "which waits");

        /* The client reads; the queue drains into the pipe as it does. */
        bool early = false, late = false;
        char buf[65536];
        while (got < sent) {
                ssize_t n = read(out[0], buf, sizeof buf);
                if (n > 0)
                        got += (size_t)n;
                turns(loop, 5);
                size_t q = queued(sent, got, out[0]);
                if (conn_paused(c) != (q >= low)) {
                        if (conn_paused(c))
                                late = true;
                        else
                                early = true;
                        break;
                }
                if (!conn_paused(c))
                        break;
        }
        CHECK(!early, "not resumed while %zu bytes or more still wait", low);
        CHECK(!late && strcmp(seen.pauses, "10") == 0, "resumed once fewer than %zu wait (told: %s)", low, seen.pauses);
        turns(loop, 20);
        CHECK(seen.n == 1 && strcmp(seen.line[0], "ping") == 0, "and the request that waited is handled");
        for (int i = 0; i < 10000 && got < sent; i++) {
                ssize_t n = read(out[0], buf, sizeof buf);
                if (n > 0)
                        got += (size_t)n;
                turns(loop, 5);
        }
        CHECK(got == sent && strcmp(seen.pauses, "10") == 0,
              "every byte reaches the client in the end; draining the rest tells nothing more");
        conn_close_all(&list);
        close(sv[1]);
        close(out[0]);
}

int main(void) {
        signal(SIGPIPE, SIG_IGN);
        Loop *loop;
        if (loop_new(&loop) < 0) {
                CHECK(false, "loop");
                return tap_done();
        }
        test_turns(loop);
        test_too_large(loop);
        test_backpressure(loop);
        loop_free(loop);
        return tap_done();
}
