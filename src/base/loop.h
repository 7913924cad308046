/* SPDX-License-Identifier: MIT */
/* The event loop: one epoll set, watches owned by their callers, deferred calls.
 *
 * A Watch is embedded in the object that owns the fd; the loop never frees or closes it.
 * Exactly one event is dispatched per epoll_wait, so a callback may delete or free any
 * other watch without a stale event reaching it. Deferred calls run after the current
 * callback returns, for work that must not re-enter the caller (finishing a run from inside
 * its own output handler, starting the next queued run). */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>

typedef struct Loop Loop;
typedef struct Watch Watch;
typedef void (*WatchFn)(Watch *w, uint32_t events);
typedef void (*DeferFn)(void *data);

struct Watch {
        int fd;
        uint32_t events;
        bool active;
        WatchFn fn;
        void *data;
};

int loop_new(Loop **ret);
Loop *loop_free(Loop *l);
int loop_fd(Loop *l);
/* Registers fd. Returns 0 or -errno. */
int loop_add(Loop *l, Watch *w, int fd, uint32_t events, WatchFn fn, void *data);
int loop_mod(Loop *l, Watch *w, uint32_t events);
/* Unregisters (safe on an inactive watch); does not close the fd. */
void loop_del(Loop *l, Watch *w);
/* Runs fn(data) after the current callback. Returns 0 or -ENOMEM. */
int loop_defer(Loop *l, DeferFn fn, void *data);
/* Runs fn(data) on a later turn of the loop, after every fd that is ready now has had its
 * turn: for work done in slices that must not starve other clients. Returns 0 or -ENOMEM. */
int loop_yield(Loop *l, DeferFn fn, void *data);
/* Drops deferred and yielded calls whose data is `data` (the object is going away). */
void loop_cancel_defer(Loop *l, void *data);
/* Waits up to timeout_ms (-1: forever) and dispatches one event plus deferred calls.
 * Returns 1 if something ran, 0 on timeout, -errno on failure. */
int loop_run_once(Loop *l, int timeout_ms);
/* Arms a timerfd to fire once after ms (0 disarms). Returns 0 or -errno. */
int timerfd_arm_ms(int fd, uint64_t ms);
/* Arms a timerfd to fire every ms, the first time ms from now. Returns 0 or -errno. */
int timerfd_every_ms(int fd, uint64_t ms);
