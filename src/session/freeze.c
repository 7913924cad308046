/* SPDX-License-Identifier: MIT */
/* Freezing a sandbox for a copy, never waiting in the loop (see freeze.h). */
#include <sys/timerfd.h>
#include "base/limits.h"
#include "base/log.h"
#include "base/util.h"
#include "cgroup/cgroup.h"
#include "session/freeze.h"

void freeze_init(Freeze *f) { *f = (Freeze){ .cg = -1, .ev = -1, .timer = -1 }; }

static void unwatch(Freeze *f) {
        loop_del(f->loop, &f->ev_w);
        loop_del(f->loop, &f->timer_w);
        f->ev = safe_close(f->ev);
        f->timer = safe_close(f->timer);
}

static void freeze_event(Watch *w, uint32_t events) {
        Freeze *f = w->data;
        if (w == &f->timer_w)
                log_warn("sandbox %s: not frozen after %d ms; copying it live", f->who, SBX_FREEZE_WAIT_MS);
        else if (cgroup_events_frozen(f->ev) != 1)
                return;
        else
                f->still = true;
        unwatch(f);
        f->done(f);
}

int freeze_start(Freeze *f, Loop *loop, int cg, unsigned *holds, const char *who, FreezeFn done) {
        f->loop = loop;
        f->cg = cg;
        f->holds = holds;
        f->who = who;
        f->done = done;
        if (cg < 0 || cgroup_freeze(cg, true) < 0)
                return 1; /* no v2 freezer here: copied live (documented) */
        f->asked = true;
        (*f->holds)++;
        if (cgroup_frozen(cg) == 1) {
                f->still = true;
                return 1;
        }
        f->ev = cgroup_events_open(cg);
        f->timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (f->ev < 0 || f->timer < 0 || loop_add(loop, &f->ev_w, f->ev, EPOLLPRI, freeze_event, f) < 0 ||
            loop_add(loop, &f->timer_w, f->timer, EPOLLIN, freeze_event, f) < 0 ||
            timerfd_arm_ms(f->timer, SBX_FREEZE_WAIT_MS) < 0) {
                unwatch(f);
                return 1;
        }
        /* Frozen between the write and the watch: the event is gone, so look again. */
        if (cgroup_frozen(cg) == 1) {
                unwatch(f);
                f->still = true;
                return 1;
        }
        return 0;
}

void freeze_thaw(Freeze *f) {
        if (f->loop)
                unwatch(f);
        if (f->asked && --*f->holds == 0)
                (void)cgroup_freeze(f->cg, false);
        f->asked = false;
}
