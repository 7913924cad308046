/* SPDX-License-Identifier: MIT */
/* For the unit tests of src/server: a connection (conn.c) over a socketpair, whose other end
 * plays the client, and the loop turns that drive it. */
#pragma once
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "base/loop.h"
#include "server/conn.h"

typedef struct Peer {
        Conn *conn;
        int fd; /* the client's end, non-blocking */
        char buf[1 << 16]; /* what the client read of a line not yet whole */
        size_t len;
} Peer;

/* Opens a connection of l on one end of a socketpair (read and write on two fd numbers, as
 * server.c does: two epoll registrations need two). Returns 0 or -errno. */
static inline int peer_open(ConnList *l, Peer *p) {
        int sv[2];
        p->conn = NULL;
        p->fd = -1;
        p->len = 0;
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0)
                return -errno;
        int wfd = fcntl(sv[0], F_DUPFD_CLOEXEC, 3);
        if (wfd < 0) {
                int r = -errno;
                close(sv[0]);
                close(sv[1]);
                return r;
        }
        int r = conn_new(l, sv[0], wfd, false, getuid(), &p->conn);
        if (r < 0) {
                close(sv[0]);
                close(wfd);
                close(sv[1]);
                return r;
        }
        p->fd = sv[1];
        return 0;
}

static inline bool peer_write(Peer *p, const char *s) {
        size_t n = strlen(s);
        return write(p->fd, s, n) == (ssize_t)n;
}

/* Every line the client has been sent so far, each parsed (a string where it is not JSON),
 * in a new array. */
static inline json_t *peer_read(Peer *p) {
        json_t *out = json_array();
        for (;;) {
                ssize_t n = read(p->fd, p->buf + p->len, sizeof p->buf - p->len);
                if (n <= 0)
                        break;
                p->len += (size_t)n;
                char *nl;
                while ((nl = memchr(p->buf, '\n', p->len))) {
                        size_t k = (size_t)(nl - p->buf);
                        json_t *v = json_loadb(p->buf, k, 0, NULL);
                        json_array_append_new(out, v ? v : json_stringn(p->buf, k));
                        memmove(p->buf, nl + 1, p->len - k - 1);
                        p->len -= k + 1;
                }
                if (p->len == sizeof p->buf)
                        p->len = 0; /* a line too long for a test: dropped */
        }
        return out;
}

static inline void peer_line_ignored(void *data, Conn *c, const char *line, size_t len, bool too_large) {}
static inline void peer_paused_ignored(void *data, Conn *c, bool paused) {}
static inline void peer_eof_ignored(void *data, Conn *c) {}
static inline void peer_closed_ignored(void *data, Conn *c) {}

/* An owner that hears nothing its connections say (the test calls what it tests itself). */
static inline const ConnOps *peer_ops_ignored(void) {
        static const ConnOps ops = { peer_line_ignored, peer_paused_ignored, peer_eof_ignored, peer_closed_ignored };
        return &ops;
}

/* Runs the loop until nothing is left to do now (at most n turns). */
static inline void loop_drain(Loop *l, int n) {
        while (n-- > 0 && loop_run_once(l, 0) > 0)
                ;
}
