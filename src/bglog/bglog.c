/* SPDX-License-Identifier: MIT */
/* The background log and the retired command cgroups of one sandbox (see bglog.h). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/list.h"
#include "base/redact.h"
#include "base/util.h"
#include "bglog/bglog.h"

/* How often emptied cgroups are looked for while any is left. */
#define BG_SWEEP_MS 1000
/* How soon after a kill the sweep looks again, and how long a doomed cgroup waits for the
 * session's next worker to leave it (it is killed anyway then: a worker still in it dies,
 * and its holder forks another). */
#define BG_KILL_SWEEP_MS 50

struct BgPipe {
        BgPipe *next, *prev;
        BgLog *bg;
        int fd;
        Watch w;
        RedactStream rs; /* the pipe's own: a secret split across two reads is still caught */
};

/* Kept by name only: their number is bounded by the pids limit, not by the daemon's fds. */
struct BgCgroup {
        BgCgroup *next, *prev;
        char name[24];
        bool doomed; /* to be killed (leftovers: kill) */
        const void *owner;
};

/* Into the ring, redacted when the sandbox redacts; flush: the pipe ends. */
static void pipe_take(BgPipe *p, const uint8_t *d, size_t n, bool flush) {
        static Buf red = { .limit = SIZE_MAX }; /* one thread: one scratch buffer, kept */
        if (p->bg->redact) {
                red.len = 0;
                (void)(flush ? redact_flush(&p->rs, false, &red) : redact_feed(&p->rs, d, n, &red));
                d = red.data;
                n = red.len;
        }
        if (n)
                ring_append(&p->bg->ring, d, n);
}

static void pipe_free(BgPipe *p) {
        BgLog *bg = p->bg;
        pipe_take(p, NULL, 0, true);
        redact_stream_done(&p->rs);
        loop_del(bg->loop, &p->w);
        safe_close(p->fd);
        if (bg->pipes_tail == p)
                bg->pipes_tail = p->prev;
        LIST_UNLINK(bg->pipes, p);
        bg->n_pipes--;
        free(p);
}

static void pipe_event(Watch *w, uint32_t events) {
        BgPipe *p = w->data;
        uint8_t buf[65536];
        /* A bounded amount per wakeup: one chatty background process must not starve the loop. */
        for (int i = 0; i < 16; i++) {
                ssize_t n = read(p->fd, buf, sizeof buf);
                if (n > 0) {
                        pipe_take(p, buf, (size_t)n, false);
                        continue;
                }
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        return;
                pipe_free(p);
                return;
        }
}

void bglog_adopt_pipe(BgLog *bg, int fd) {
        if (bg->n_pipes >= SBX_MAX_BACKGROUND_PIPES && bg->pipes_tail)
                pipe_free(bg->pipes_tail);
        BgPipe *p = calloc(1, sizeof *p);
        if (!p || loop_add(bg->loop, &p->w, fd, EPOLLIN, pipe_event, p) < 0) {
                /* Out of memory: closing is the only option left; a writer may see EPIPE. */
                free(p);
                close(fd);
                return;
        }
        p->bg = bg;
        p->fd = fd;
        redact_stream_init(&p->rs, bg->redact);
        LIST_LINK(bg->pipes, p);
        if (!bg->pipes_tail)
                bg->pipes_tail = p;
        bg->n_pipes++;
}

static void cgroup_free(BgLog *bg, BgCgroup *c) {
        LIST_UNLINK(bg->cgroups, c);
        free(c);
}

static void sweep_event(Watch *w, uint32_t events);

/* The sweep's timer exists only while retired cgroups wait for it: an idle sandbox holds no
 * fd for it. False when it cannot be made. */
static bool timer_open(BgLog *bg) {
        if (bg->timer >= 0)
                return true;
        int fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (fd < 0)
                return false;
        if (loop_add(bg->loop, &bg->timer_w, fd, EPOLLIN, sweep_event, bg) < 0) {
                close(fd);
                return false;
        }
        bg->timer = fd;
        bg->sweep_due = 0;
        return true;
}

static void timer_close(BgLog *bg) {
        loop_del(bg->loop, &bg->timer_w);
        bg->timer = safe_close(bg->timer);
        bg->sweep_due = 0;
}

/* Sweeps within ms, or sooner if already due sooner: a later retire never postpones a sweep
 * (commands ending less than a sweep apart would otherwise keep every cgroup forever). */
static void sweep_within(BgLog *bg, uint64_t ms) {
        uint64_t due = now_ns() + ms * 1000000ULL;
        if (bg->timer < 0 || (bg->sweep_due && bg->sweep_due <= due))
                return;
        if (timerfd_arm_ms(bg->timer, ms) == 0)
                bg->sweep_due = due;
}

static void kill_named(BgLog *bg, const char *name) {
        _cleanup_close_ int dir = cgroup_child_open(bg->cg, name);
        if (dir >= 0)
                (void)cgroup_kill(dir);
}

void bglog_kill_doomed(BgLog *bg, const void *owner) {
        for (BgCgroup *c = bg->cgroups; c; c = c->next)
                if (c->doomed && (!owner || c->owner == owner)) {
                        c->doomed = false;
                        kill_named(bg, c->name);
                }
}

/* Removes the retired cgroups that have emptied; comes back while any is left. */
static void sweep_event(Watch *w, uint32_t events) {
        BgLog *bg = w->data;
        uint64_t x;
        (void)!read(bg->timer, &x, sizeof x);
        bg->sweep_due = 0;
        bglog_kill_doomed(bg, NULL);
        for (BgCgroup *c = bg->cgroups, *next; c; c = next) {
                next = c->next;
                if (cgroup_child_remove(bg->cg, c->name) == 0)
                        cgroup_free(bg, c);
        }
        if (bg->cgroups)
                sweep_within(bg, BG_SWEEP_MS);
        else
                timer_close(bg);
}

static void retire(BgLog *bg, int dir, const char *name, bool doomed, const void *owner) {
        if (cgroup_child_remove(bg->cg, name) == 0) {
                safe_close(dir);
                return;
        }
        BgCgroup *c = calloc(1, sizeof *c);
        if (!c || !timer_open(bg)) {
                /* Without a place in the list (out of memory) or a timer, a doomed cgroup dies
                 * now, next worker or not; the rest is removed with the sandbox. */
                if (doomed)
                        (void)cgroup_kill(dir);
                safe_close(dir);
                free(c);
                return;
        }
        safe_close(dir);
        snprintf(c->name, sizeof c->name, "%s", name);
        c->doomed = doomed;
        c->owner = owner;
        LIST_LINK(bg->cgroups, c);
        sweep_within(bg, doomed ? BG_KILL_SWEEP_MS : BG_SWEEP_MS);
}

void bglog_retire_cgroup(BgLog *bg, int dir, const char *name) { retire(bg, dir, name, false, NULL); }

void bglog_doom_cgroup(BgLog *bg, int dir, const char *name, const void *owner) {
        retire(bg, dir, name, true, owner);
}

unsigned bglog_count_processes(const BgLog *bg) {
        unsigned n = 0;
        for (const BgCgroup *c = bg->cgroups; c; c = c->next) {
                _cleanup_close_ int dir = cgroup_child_open(bg->cg, c->name);
                int k = dir >= 0 ? cgroup_count_procs(dir) : -1;
                n += k > 0 ? (unsigned)k : 0;
        }
        return n;
}

unsigned bglog_kill(BgLog *bg) {
        unsigned n = 0;
        for (BgCgroup *c = bg->cgroups; c; c = c->next) {
                c->doomed = false;
                _cleanup_close_ int dir = cgroup_child_open(bg->cg, c->name);
                /* Only those with processes count: one killed before waits for the sweep. */
                if (dir >= 0 && cgroup_populated(dir) == 1 && cgroup_kill(dir) == 0)
                        n++;
        }
        if (n > 0 && bg->timer >= 0)
                sweep_within(bg, BG_KILL_SWEEP_MS);
        return n;
}

size_t bglog_copy(const BgLog *bg, uint8_t *buf, size_t size) {
        if (size >= bg->ring.len)
                return ring_copy(&bg->ring, buf);
        uint8_t *all = malloc(bg->ring.len);
        if (!all)
                return 0;
        size_t n = ring_copy(&bg->ring, all);
        memcpy(buf, all + (n - size), size);
        free(all);
        return size;
}

int bglog_init(BgLog *bg, Loop *loop, CgroupSandbox *cg) {
        *bg = (BgLog){ .loop = loop, .cg = cg, .timer = -1 };
        int r = ring_init(&bg->ring, SBX_BACKGROUND_LOG_BYTES);
        if (r < 0)
                return r;
        return 0;
}

void bglog_done(BgLog *bg) {
        while (bg->pipes)
                pipe_free(bg->pipes);
        while (bg->cgroups)
                cgroup_free(bg, bg->cgroups);
        timer_close(bg);
        ring_done(&bg->ring);
}
