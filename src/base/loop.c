/* SPDX-License-Identifier: MIT */
/* epoll loop with one event per wakeup, a deferred-call queue and a yield queue. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <sys/timerfd.h>
#include "base/limits.h"
#include "base/loop.h"
#include "base/macro.h"

typedef struct Deferred {
        DeferFn fn;
        void *data;
} Deferred;

typedef struct Queue {
        Deferred *v;
        size_t n, cap;
} Queue;

struct Loop {
        int epfd;
        int wakefd; /* readable while deferred calls wait, so embedders see work to do */
        Watch wake;
        Queue deferred;
        /* Yielded calls wait for their turn as an fd of the epoll set: yieldfd is readable
         * while any wait, and a level-triggered fd that stays ready goes to the back of
         * epoll's ready list after each report, so every fd ready meanwhile comes first. */
        int yieldfd;
        Watch yield_w;
        Queue yielded;
        Queue *running; /* the yielded calls being run now, for loop_cancel_defer() */
        /* Inside loop_run_once(): what is deferred now runs before it returns, so wakefd
         * need not be made readable (three syscalls per deferral saved). */
        bool dispatching;
};

static void wake_event(Watch *w, uint32_t events) {
        uint64_t v;
        (void)!read(w->fd, &v, sizeof v);
}

static int queue_push(Queue *q, DeferFn fn, void *data) {
        if (q->n == q->cap) {
                size_t ncap = q->cap ? q->cap * 2 : 16;
                Deferred *n = realloc(q->v, ncap * sizeof *n);
                if (!n)
                        return -ENOMEM;
                q->v = n;
                q->cap = ncap;
        }
        q->v[q->n++] = (Deferred){ fn, data };
        return 0;
}

static uint64_t mono_us(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* Runs the calls yielded before this turn, those they yield waiting for the next one; and
 * stops after SBX_LOOP_YIELD_SLICE_US: fifty clients each with a sandbox.create waiting would
 * otherwise be fifty creates in one turn, and every other fd (a ping) would wait for all of
 * them. What is left keeps its place, ahead of what was yielded meanwhile, and comes back
 * after the fds ready now. */
static void yield_event(Watch *w, uint32_t events) {
        Loop *l = w->data;
        uint64_t v;
        (void)!read(l->yieldfd, &v, sizeof v);
        Queue q = l->yielded;
        l->yielded = (Queue){ 0 };
        l->running = &q;
        uint64_t until = mono_us() + SBX_LOOP_YIELD_SLICE_US;
        size_t i = 0;
        while (i < q.n) {
                Deferred d = q.v[i++];
                if (d.fn) {
                        d.fn(d.data);
                        if (i < q.n && mono_us() >= until)
                                break;
                }
        }
        if (i < q.n) {
                size_t left = q.n - i, n = left + l->yielded.n;
                Deferred *nv = n > q.cap ? realloc(q.v, n * sizeof *nv) : q.v;
                if (!nv) {
                        /* Out of memory: the rest runs now, as if there were no slice. */
                        while (i < q.n) {
                                Deferred d = q.v[i++];
                                if (d.fn)
                                        d.fn(d.data);
                        }
                        l->running = NULL;
                        free(q.v);
                        return;
                }
                memmove(nv, nv + i, left * sizeof *nv);
                if (l->yielded.n)
                        memcpy(nv + left, l->yielded.v, l->yielded.n * sizeof *nv);
                free(l->yielded.v);
                l->yielded = (Queue){ .v = nv, .n = n, .cap = MAX(n, q.cap) };
                l->running = NULL;
                uint64_t one = 1;
                (void)!write(l->yieldfd, &one, sizeof one);
                return;
        }
        l->running = NULL;
        free(q.v);
}

int loop_yield(Loop *l, DeferFn fn, void *data) {
        int r = queue_push(&l->yielded, fn, data);
        if (r == 0 && l->yielded.n == 1) {
                uint64_t one = 1;
                (void)!write(l->yieldfd, &one, sizeof one);
        }
        return r;
}

int loop_new(Loop **ret) {
        Loop *l = calloc(1, sizeof *l);
        if (!l)
                return -ENOMEM;
        l->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (l->epfd < 0) {
                int r = negerrno();
                free(l);
                return r;
        }
        l->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        l->yieldfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (l->wakefd < 0 || l->yieldfd < 0 || loop_add(l, &l->wake, l->wakefd, EPOLLIN, wake_event, l) < 0 ||
            loop_add(l, &l->yield_w, l->yieldfd, EPOLLIN, yield_event, l) < 0) {
                int r = negerrno();
                safe_close(l->yieldfd);
                safe_close(l->wakefd);
                safe_close(l->epfd);
                free(l);
                return r;
        }
        *ret = l;
        return 0;
}

Loop *loop_free(Loop *l) {
        if (!l)
                return NULL;
        safe_close(l->yieldfd);
        safe_close(l->wakefd);
        safe_close(l->epfd);
        free(l->deferred.v);
        free(l->yielded.v);
        free(l);
        return NULL;
}

int loop_fd(Loop *l) { return l->epfd; }

int loop_add(Loop *l, Watch *w, int fd, uint32_t events, WatchFn fn, void *data) {
        w->fd = fd;
        w->events = events;
        w->fn = fn;
        w->data = data;
        struct epoll_event ev = { .events = events, .data.ptr = w };
        if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
                return negerrno();
        w->active = true;
        return 0;
}

int loop_mod(Loop *l, Watch *w, uint32_t events) {
        if (!w->active)
                return -EINVAL;
        struct epoll_event ev = { .events = events, .data.ptr = w };
        if (epoll_ctl(l->epfd, EPOLL_CTL_MOD, w->fd, &ev) < 0)
                return negerrno();
        w->events = events;
        return 0;
}

void loop_del(Loop *l, Watch *w) {
        if (!w->active)
                return;
        (void)epoll_ctl(l->epfd, EPOLL_CTL_DEL, w->fd, NULL);
        w->active = false;
}

int loop_defer(Loop *l, DeferFn fn, void *data) {
        int r = queue_push(&l->deferred, fn, data);
        if (r == 0 && l->deferred.n == 1 && !l->dispatching) {
                uint64_t one = 1;
                (void)!write(l->wakefd, &one, sizeof one);
        }
        return r;
}

void loop_cancel_defer(Loop *l, void *data) {
        for (size_t i = 0; i < l->deferred.n; i++)
                if (l->deferred.v[i].data == data)
                        l->deferred.v[i].fn = NULL;
        for (size_t i = 0; i < l->yielded.n; i++)
                if (l->yielded.v[i].data == data)
                        l->yielded.v[i].fn = NULL;
        for (size_t i = 0; l->running && i < l->running->n; i++)
                if (l->running->v[i].data == data)
                        l->running->v[i].fn = NULL;
}

static void run_deferred(Loop *l) {
        /* A deferred call may defer more; index, never cache a pointer into the array. */
        for (size_t i = 0; i < l->deferred.n; i++) {
                Deferred d = l->deferred.v[i];
                if (d.fn)
                        d.fn(d.data);
        }
        l->deferred.n = 0;
}

int loop_run_once(Loop *l, int timeout_ms) {
        bool was = l->dispatching; /* loop_run_once() may be called from a handler */
        if (l->deferred.n > 0) {
                l->dispatching = true;
                run_deferred(l);
                l->dispatching = was;
                timeout_ms = 0;
        }
        struct epoll_event ev;
        int n = epoll_wait(l->epfd, &ev, 1, timeout_ms);
        if (n < 0)
                return errno == EINTR ? 1 : negerrno();
        if (n == 0)
                return 0;
        Watch *w = ev.data.ptr;
        l->dispatching = true;
        w->fn(w, ev.events);
        run_deferred(l);
        l->dispatching = was;
        return 1;
}

int timerfd_every_ms(int fd, uint64_t ms) {
        struct itimerspec its = { 0 };
        its.it_value.tv_sec = its.it_interval.tv_sec = (time_t)(ms / 1000);
        its.it_value.tv_nsec = its.it_interval.tv_nsec = (long)(ms % 1000) * 1000000L;
        return timerfd_settime(fd, 0, &its, NULL) < 0 ? negerrno() : 0;
}

int timerfd_arm_ms(int fd, uint64_t ms) {
        struct itimerspec its = { 0 };
        its.it_value.tv_sec = (time_t)(ms / 1000);
        its.it_value.tv_nsec = (long)(ms % 1000) * 1000000L;
        if (timerfd_settime(fd, 0, &its, NULL) < 0)
                return negerrno();
        return 0;
}
