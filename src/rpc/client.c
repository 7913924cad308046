/* SPDX-License-Identifier: MIT */
/* The daemon's JSON-RPC client in its own loop (client.h), for the doors: E2B's, the Kubernetes node's. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/log.h"
#include "base/queue.h"
#include "base/util.h"
#include "rpc/client.h"
#include "rpc/framer.h"
#include "rpc/jsonrpc.h"

typedef struct Call {
        struct Call *next;
        uint64_t id;
        RpcAnswerFn fn;
        void *ud;
} Call;

/* An fd to go with a request line: sent with the line's first byte, in a write that ends with
 * the line (the server gives fds to the line holding the last byte read with them). */
typedef struct OutFd {
        struct OutFd *next;
        uint64_t start, end; /* the line's offsets in what this client writes */
        int fd;
} OutFd;

struct RpcClient {
        Loop *loop;
        int fd;
        Watch w;
        Framer fr;
        ByteQueue in, out; /* in: read, not yet framed (a pause stops the framing) */
        OutFd *fds, **fds_tail;
        uint64_t pushed, written; /* bytes queued in out, and written, since the start */
        RpcNotifyFn notify;
        void *ud;
        uint64_t next_id;
        Call *calls, **tail;
        bool gone, paused, failing_due;
};

static void update_events(RpcClient *c) {
        if (c->gone)
                return;
        uint32_t ev = (c->paused ? 0 : EPOLLIN) | (bq_pending(&c->out) ? EPOLLOUT : 0);
        if (ev != c->w.events)
                (void)loop_mod(c->loop, &c->w, ev);
}

static Call *take_call(RpcClient *c, uint64_t id) {
        for (Call **p = &c->calls; *p; p = &(*p)->next)
                if ((*p)->id == id) {
                        Call *k = *p;
                        *p = k->next;
                        if (!*p)
                                c->tail = p;
                        return k;
                }
        return NULL;
}

static void answer(Call *k, json_t *result, json_t *error) {
        if (k->fn)
                k->fn(k->ud, result, error);
        free(k);
}

/* Every waiting call gets an error: the server is gone. Deferred, so no call is answered
 * from inside rpc_client_call. */
static void fail_all(void *data) {
        RpcClient *c = data;
        c->failing_due = false;
        json_t *err = json_pack("{s:i, s:s}", "code", -32003, "message", "the sbx server is shutting down");
        while (c->calls) {
                Call *k = c->calls;
                c->calls = k->next;
                if (!c->calls)
                        c->tail = &c->calls;
                answer(k, NULL, err);
        }
        json_decref(err);
}

static void set_gone(RpcClient *c) {
        if (c->gone)
                return;
        c->gone = true;
        if (c->w.active)
                loop_del(c->loop, &c->w);
        if (!c->failing_due && loop_defer(c->loop, fail_all, c) == 0)
                c->failing_due = true;
}

static bool on_line(void *ud, const char *line, size_t len, bool too_large) {
        RpcClient *c = ud;
        if (too_large) {
                log_warn("e2b: an answer of the server past %u bytes was dropped", SBX_E2B_RPC_LINE_BYTES);
                return true;
        }
        json_error_t je;
        json_t *m = rpc_load_big(line, len, "result", &je); /* files.read's answers: megabytes */
        json_t *id = json_object_get(m, "id");
        const char *method = json_string_value(json_object_get(m, "method"));
        if (json_is_integer(id)) {
                Call *k = take_call(c, (uint64_t)json_integer_value(id));
                if (k)
                        answer(k, json_object_get(m, "result"), json_object_get(m, "error"));
        } else if (method && c->notify) {
                c->notify(c->ud, method, json_object_get(m, "params"));
        }
        json_decref(m);
        return !c->paused && !c->gone;
}

/* Frames what was read, until it is all framed or a pause stops it. */
static void frame(RpcClient *c) {
        while (bq_pending(&c->in) && !c->paused && !c->gone) {
                long used = framer_feed(&c->fr, bq_head(&c->in), bq_pending(&c->in), on_line, c);
                if (used < 0) {
                        set_gone(c);
                        return;
                }
                bq_consume(&c->in, (size_t)used);
                if (used == 0)
                        break;
        }
}

/* Writes what is queued up to the next line that carries an fd, or that line with its fd. */
static ssize_t write_some(RpcClient *c) {
        size_t len = bq_pending(&c->out);
        OutFd *f = c->fds;
        if (!f || f->start > c->written)
                return write(c->fd, bq_head(&c->out), f ? MIN(len, f->start - c->written) : len);
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int))];
        } cm;
        struct iovec iov = { (void *)bq_head(&c->out), MIN(len, f->end - c->written) };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        msg_attach_fds(&mh, cm.buf, &f->fd, 1);
        ssize_t n = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
        bool refused = n < 0 && errno != EAGAIN && errno != EINTR;
        if (n > 0 || refused) {
                /* Gone with the line's first bytes; or one the kernel would not pass on
                 * (ETOOMANYREFS: the uid's fds in flight) goes no further, and its line goes
                 * without it: the server answers that call that no fd came, the connection
                 * stays. */
                c->fds = f->next;
                if (!c->fds)
                        c->fds_tail = &c->fds;
                close(f->fd);
                free(f);
        }
        return refused ? write(c->fd, iov.iov_base, iov.iov_len) : n;
}

/* Writes what is queued until the socket is full. Returns false once the server is gone. */
static bool flush_out(RpcClient *c) {
        while (bq_pending(&c->out)) {
                ssize_t n = write_some(c);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        break;
                if (n <= 0) {
                        set_gone(c);
                        return false;
                }
                bq_consume(&c->out, (size_t)n);
                c->written += (uint64_t)n;
        }
        return true;
}

static void on_event(Watch *w, uint32_t events) {
        RpcClient *c = w->data;
        if ((events & EPOLLOUT) && !flush_out(c))
                return;
        if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !c->paused) {
                uint8_t buf[65536];
                ssize_t n = read(c->fd, buf, sizeof buf);
                if (n < 0 && (errno == EINTR || errno == EAGAIN))
                        return update_events(c);
                if (n <= 0 || bq_push(&c->in, buf, (size_t)n) < 0) {
                        set_gone(c);
                        return;
                }
                frame(c);
        }
        update_events(c);
}

int rpc_client_new(Loop *loop, int fd, RpcNotifyFn notify, void *ud, RpcClient **ret) {
        RpcClient *c = calloc(1, sizeof *c);
        if (!c) {
                close(fd);
                return -ENOMEM;
        }
        c->loop = loop;
        c->fd = fd;
        c->notify = notify;
        c->ud = ud;
        c->tail = &c->calls;
        c->fds_tail = &c->fds;
        framer_init(&c->fr, SBX_E2B_RPC_LINE_BYTES);
        int r = fd_set_nonblock(fd, true);
        if (r < 0 || (r = loop_add(loop, &c->w, fd, EPOLLIN, on_event, c)) < 0) {
                rpc_client_free(c);
                return r;
        }
        *ret = c;
        return 0;
}

RpcClient *rpc_client_free(RpcClient *c) {
        if (!c)
                return NULL;
        if (c->w.active)
                loop_del(c->loop, &c->w);
        loop_cancel_defer(c->loop, c);
        while (c->calls) {
                Call *k = c->calls;
                c->calls = k->next;
                free(k);
        }
        while (c->fds) {
                OutFd *f = c->fds;
                c->fds = f->next;
                close(f->fd);
                free(f);
        }
        framer_done(&c->fr);
        bq_done(&c->in);
        bq_done(&c->out);
        safe_close(c->fd);
        free(c);
        return NULL;
}

int rpc_client_call(RpcClient *c, const char *method, json_t *params, RpcAnswerFn fn, void *ud) {
        return rpc_client_call_fd(c, method, params, -1, fn, ud);
}

int rpc_client_call_fd(RpcClient *c, const char *method, json_t *params, int fd, RpcAnswerFn fn, void *ud) {
        Call *k = calloc(1, sizeof *k);
        _cleanup_free_ OutFd *f = NULL;
        if (k && fd >= 0 && (f = calloc(1, sizeof *f)) && (f->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3)) < 0) {
                free(k);
                json_decref(params);
                return negerrno();
        }
        if (!k || (fd >= 0 && !f)) {
                free(k);
                json_decref(params);
                return -ENOMEM;
        }
        k->id = ++c->next_id;
        k->fn = fn;
        k->ud = ud;
        *c->tail = k;
        c->tail = &k->next;
        if (c->gone) {
                json_decref(params);
                if (f)
                        close(f->fd);
                if (!c->failing_due && loop_defer(c->loop, fail_all, c) == 0)
                        c->failing_due = true;
                return 0;
        }
        size_t len;
        char *line = rpc_request_line(k->id, method, params ? params : json_object(), &len);
        int r = line ? bq_push(&c->out, line, len) : -ENOMEM;
        free(line);
        if (r < 0) {
                free(take_call(c, k->id));
                if (f)
                        close(f->fd);
                return -ENOMEM;
        }
        if (f) {
                f->start = c->pushed;
                f->end = c->pushed + len;
                *c->fds_tail = f;
                c->fds_tail = &TAKE_PTR(f)->next;
        }
        c->pushed += len;
        /* Written at once when nothing waits before it (the server's socket has room almost
         * always): a turn of the loop less between an answer and the call it leads to. */
        if (bq_pending(&c->out) == len)
                (void)flush_out(c);
        update_events(c);
        return 0;
}

void rpc_client_forget(RpcClient *c, void *ud) {
        for (Call *k = c->calls; k; k = k->next)
                if (k->ud == ud)
                        k->fn = NULL;
}

static void resume_reading(void *data) {
        RpcClient *c = data;
        /* What was read before the pause comes first. */
        frame(c);
        update_events(c);
}

void rpc_client_pause(RpcClient *c, bool paused) {
        if (c->paused == paused)
                return;
        c->paused = paused;
        if (!paused)
                (void)loop_defer(c->loop, resume_reading, c);
        else
                update_events(c);
}
