/* SPDX-License-Identifier: MIT */
/* Client connections: bounded input framing, a bounded output queue with backpressure. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include "base/limits.h"
#include "base/log.h"
#include "base/queue.h"
#include "base/util.h"
#include "rpc/framer.h"
#include "server/conn.h"


struct Conn {
        Conn *next, *prev;
        ConnList *list;
        int rfd, wfd;
        Watch rw, ww;
        bool is_stdio, closing, paused;
        bool operator; /* conn_set_operator(): may use every sandbox */
        bool turn_pending; /* resume_input() is yielded to */
        unsigned holds;    /* conn_hold_input() without its release: no request is handled */
        uid_t uid;
        int lane; /* fixed by the operator, or -1 */
        void *pendings;
        pid_t pid; /* -1 unknown */
        Framer framer;
        ByteQueue out;
        ByteQueue in; /* read but not yet framed: held while the client is paused, or until
                         its next turn (one request per turn of the loop) */
        /* fds the client sent, oldest first, each with the stream offset of the last byte read
         * with it: the kernel hands a sender's fds over with the first bytes of what it sent
         * with them and ends that read there, so they belong to the line holding that byte. */
        struct {
                uint64_t pos;
                int fd;
        } fds[SBX_CONN_FDS];
        unsigned n_fds;
        uint64_t rx;       /* bytes read from the client */
        uint64_t framed;   /* bytes the framer took */
        uint64_t line_end; /* offset of the newline of the line being framed */
        bool in_line;      /* ops->line runs: conn_take_fd() may answer */
        bool not_socket;   /* rfd is a pipe: no fds come with its bytes */
};

static size_t out_pending(const Conn *c) { return bq_pending(&c->out); }

static void resume_input(void *data);
static void take_turn(Conn *c);

/* The socket is read while the client is not paused and holds no requests read before. */
static void update_read(Conn *c) {
        uint32_t want = !c->paused && c->holds == 0 && bq_pending(&c->in) == 0 ? EPOLLIN : 0;
        if (c->rw.active && c->rw.events != want)
                (void)loop_mod(c->list->loop, &c->rw, want);
}

static void set_paused(Conn *c, bool paused) {
        if (c->paused == paused)
                return;
        c->paused = paused;
        c->list->ops->paused(c->list->data, c, paused);
        /* A client that does not read its answers gets no more requests read, nor handled. */
        update_read(c);
        take_turn(c);
}

static void flush(Conn *c) {
        while (out_pending(c) > 0) {
                ssize_t n = write(c->wfd, bq_head(&c->out), out_pending(c));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        break;
                if (n <= 0) {
                        /* The client is gone; drop what it will never read. */
                        bq_clear(&c->out);
                        c->closing = true;
                        break;
                }
                bq_consume(&c->out, (size_t)n);
        }
        bool want_out = out_pending(c) > 0;
        if (want_out && !c->ww.active && loop_add(c->list->loop, &c->ww, c->wfd, EPOLLOUT, c->ww.fn, c) < 0) {
                log_warn("connection: cannot wait for the client to read: %s", strerror(errno));
                c->closing = true;
        }
        else if (!want_out && c->ww.active)
                loop_del(c->list->loop, &c->ww);
        if (c->paused && out_pending(c) < SBX_OUTPUT_QUEUE_LOW_BYTES)
                set_paused(c, false);
        else if (!c->paused && out_pending(c) > SBX_OUTPUT_QUEUE_HIGH_BYTES)
                set_paused(c, true);
}

static void close_deferred(void *data) { conn_close(data); }

bool conn_paused(const Conn *c) { return c->paused; }

void conn_send(Conn *c, char *line, size_t len) {
        if (!line)
                return;
        if (c->closing) {
                free(line);
                return;
        }
        if (bq_push(&c->out, line, len) < 0) {
                free(line);
                c->closing = true;
                (void)loop_defer(c->list->loop, close_deferred, c);
                return;
        }
        free(line);
        flush(c);
        if (c->closing)
                (void)loop_defer(c->list->loop, close_deferred, c);
}

void conn_reply(Conn *c, json_t *id, json_t *result) {
        size_t n;
        char *line = rpc_result_line(id, result, &n);
        if (c)
                conn_send(c, line, n);
        else
                free(line);
}

void conn_reply_error(Conn *c, json_t *id, const RpcError *e) {
        size_t n;
        char *line = rpc_error_line(id, e, &n);
        conn_send(c, line, n);
}

void conn_notify(Conn *c, const char *method, json_t *params) {
        size_t n;
        char *line = rpc_notification_line(method, params, &n);
        conn_send(c, line, n);
}

/* Closes the fds of lines already framed that their requests did not take. */
static void drop_fds_upto(Conn *c, uint64_t end) {
        unsigned k = 0;
        for (unsigned i = 0; i < c->n_fds; i++)
                if (c->fds[i].pos <= end)
                        safe_close(c->fds[i].fd);
                else
                        c->fds[k++] = c->fds[i];
        c->n_fds = k;
}

int conn_take_fd(Conn *c) {
        if (!c->in_line || c->n_fds == 0 || c->fds[0].pos > c->line_end)
                return -ENOENT;
        int fd = c->fds[0].fd;
        memmove(&c->fds[0], &c->fds[1], (c->n_fds - 1) * sizeof c->fds[0]);
        c->n_fds--;
        return fd;
}

static bool frame(void *ud, const char *line, size_t len, bool too_large) {
        Conn *c = ud;
        if (!c->closing) {
                c->in_line = true;
                c->list->ops->line(c->list->data, c, line, len, too_large);
                c->in_line = false;
        }
        drop_fds_upto(c, c->line_end);
        /* One request per turn: a client that sends many at once (20 creates in one write)
         * must not keep every other client waiting behind all of them. */
        return false;
}

/* Comes back for the held requests after the other ready fds have had their turn. */
static void take_turn(Conn *c) {
        if (!c->paused && !c->closing && c->holds == 0 && !c->turn_pending && bq_pending(&c->in) > 0 &&
            loop_yield(c->list->loop, resume_input, c) == 0)
                c->turn_pending = true;
        update_read(c);
}

/* The framer over data, which starts at stream offset c->framed: it frames one line at most
 * (frame() stops it), the one ending at data's first newline. */
static long feed_framer(Conn *c, const uint8_t *data, size_t len) {
        /* Only a connection holding fds needs to know where the line ends (a scan more). */
        const uint8_t *nl = c->n_fds ? memchr(data, '\n', len) : NULL;
        c->line_end = nl ? c->framed + (uint64_t)(nl - data) : UINT64_MAX;
        long used = framer_feed(&c->framer, data, len, frame, c);
        if (used > 0)
                c->framed += (uint64_t)used;
        return used;
}

/* Frames bytes; what the paused client's requests did not get to stays in c->in.
 * Returns false if the connection must close. */
static bool feed(Conn *c, const uint8_t *data, size_t len) {
        long used = feed_framer(c, data, len);
        if (used < 0)
                return false;
        if ((size_t)used < len && !c->closing && bq_push(&c->in, data + used, len - (size_t)used) < 0)
                return false;
        return true;
}

static void resume_input(void *data) {
        Conn *c = data;
        c->turn_pending = false;
        size_t n = bq_pending(&c->in);
        if (!c->paused && !c->closing && c->holds == 0 && n > 0) {
                long used = feed_framer(c, bq_head(&c->in), n);
                if (used < 0) {
                        conn_close(c);
                        return;
                }
                bq_consume(&c->in, (size_t)used);
        }
        take_turn(c);
}

/* Reads from the client, and from a socket the fds sent along (kept, up to SBX_CONN_FDS). */
static ssize_t receive(Conn *c, uint8_t *buf, size_t size) {
        if (c->not_socket)
                return read(c->rfd, buf, size);
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int) * SBX_CONN_FDS)];
        } cm;
        struct iovec iov = { buf, size };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf };
        ssize_t n = recvmsg(c->rfd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == ENOTSOCK) {
                c->not_socket = true; /* stdio's pipes: plain reads from now on */
                return read(c->rfd, buf, size);
        }
        for (struct cmsghdr *h = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; h; h = CMSG_NXTHDR(&mh, h)) {
                if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
                        continue;
                size_t k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < k; i++) {
                        int fd;
                        memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof fd);
                        /* fds with no byte to go with are nobody's. Only shmem files (memfds:
                         * what F_GET_SEALS answers for) are kept, and the place of anything else
                         * (-EINVAL), so a request can say what came: a socket kept here could be
                         * the client's own end, and its connection would never see an end. */
                        bool memfd = fcntl(fd, F_GET_SEALS) >= 0, keep = c->n_fds < SBX_CONN_FDS && n > 0;
                        if (keep)
                                c->fds[c->n_fds++] = (typeof(c->fds[0])){ .pos = c->rx + (uint64_t)n - 1,
                                                                          .fd = memfd ? fd : -EINVAL };
                        if (!keep || !memfd)
                                close(fd);
                }
        }
        return n;
}

static void read_event(Watch *w, uint32_t events) {
        Conn *c = w->data;
        uint8_t buf[65536];
        /* Nothing more is read while requests already read wait for their turn. */
        for (int i = 0; i < 16 && !c->closing && !c->paused && c->holds == 0 && bq_pending(&c->in) == 0; i++) {
                ssize_t n = receive(c, buf, sizeof buf);
                if (n > 0)
                        c->rx += (uint64_t)n;
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n <= 0) {
                        loop_del(c->list->loop, &c->rw);
                        c->list->ops->eof(c->list->data, c);
                        return;
                }
                if (!feed(c, buf, (size_t)n)) {
                        conn_close(c);
                        return;
                }
        }
        take_turn(c);
}

static void write_event(Watch *w, uint32_t events) {
        Conn *c = w->data;
        flush(c);
        if (c->closing)
                conn_close(c);
}

void conn_hold_input(Conn *c, bool hold) {
        if (hold) {
                c->holds++;
        } else if (c->holds > 0 && --c->holds == 0) {
                take_turn(c);
                return;
        }
        update_read(c);
}

void conn_list_init(ConnList *l, Loop *loop, const ConnOps *ops, void *data) {
        *l = (ConnList){ .loop = loop, .ops = ops, .data = data };
}

int conn_new(ConnList *l, int rfd, int wfd, bool is_stdio, uid_t uid, Conn **ret) {
        Conn *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->list = l;
        c->rfd = rfd;
        c->wfd = wfd;
        c->is_stdio = is_stdio;
        c->uid = uid;
        c->lane = -1;
        c->pid = -1;
        framer_init(&c->framer, SBX_DEFAULT_RPC_BYTES);
        (void)fd_set_nonblock(rfd, true);
        (void)fd_set_nonblock(wfd, true);
        c->ww.fn = write_event;
        int r = loop_add(l->loop, &c->rw, rfd, EPOLLIN, read_event, c);
        if (r < 0) {
                free(c);
                return r;
        }
        c->next = l->head;
        if (l->head)
                l->head->prev = c;
        l->head = c;
        *ret = c;
        return 0;
}

void conn_close(Conn *c) {
        ConnList *l = c->list;
        loop_cancel_defer(l->loop, c);
        l->ops->closed(l->data, c);
        loop_del(l->loop, &c->rw);
        loop_del(l->loop, &c->ww);
        if (c->is_stdio) {
                (void)fd_set_nonblock(c->wfd, false);
        } else {
                /* A Unix socket closed with unread bytes resets its peer, which then loses the
                 * answers it has not read yet: discard what the client sent that will never be
                 * handled (the receive buffer bounds it), so it reads them, then end-of-file. */
                char sink[4096];
                while (read(c->rfd, sink, sizeof sink) > 0)
                        ;
                close(c->rfd);
                close(c->wfd);
        }
        drop_fds_upto(c, UINT64_MAX);
        framer_done(&c->framer);
        bq_done(&c->out);
        bq_done(&c->in);
        if (c->prev)
                c->prev->next = c->next;
        else
                l->head = c->next;
        if (c->next)
                c->next->prev = c->prev;
        free(c);
}

void conn_close_all(ConnList *l) {
        while (l->head)
                conn_close(l->head);
}

static void flush_until(Conn *c, uint64_t deadline_ms) {
        (void)fd_set_nonblock(c->wfd, true);
        while (bq_pending(&c->out) > 0 && now_ms() < deadline_ms) {
                ssize_t n = write(c->wfd, bq_head(&c->out), bq_pending(&c->out));
                if (n > 0) {
                        bq_consume(&c->out, (size_t)n);
                        continue;
                }
                uint64_t now = now_ms();
                if (n < 0 && errno == EAGAIN && now < deadline_ms) {
                        struct pollfd p = { .fd = c->wfd, .events = POLLOUT };
                        (void)poll(&p, 1, (int)(deadline_ms - now));
                        continue;
                }
                break;
        }
}

void conn_flush_all(ConnList *l, uint64_t deadline_ms) {
        for (Conn *c = l->head; c; c = c->next)
                flush_until(c, deadline_ms);
}

int conn_lane(const Conn *c) { return c->lane; }
void **conn_pendings(Conn *c) { return &c->pendings; }
void conn_set_lane(Conn *c, int lane) { c->lane = lane; }

uid_t conn_uid(const Conn *c) { return c->uid; }
bool conn_operator(const Conn *c) { return c->operator; }
void conn_set_operator(Conn *c) { c->operator = true; }
pid_t conn_pid(const Conn *c) { return c->pid; }
void conn_set_pid(Conn *c, pid_t pid) { c->pid = pid; }

bool conn_is_stdio(const Conn *c) { return c->is_stdio; }

size_t conn_line_max(const Conn *c) { return c->framer.max; }

void conn_set_line_max(Conn *c, size_t max) { c->framer.max = max; }
