/* SPDX-License-Identifier: MIT */
/* Dying sandboxes, finished from the loop (see corpse.h). */
#include <stdlib.h>
#include "base/limits.h"
#include "base/list.h"
#include "base/util.h"
#include "cgroup/cgroup.h"
#include "cgroup/mover.h"
#include "session/corpse.h"

struct Corpse {
        Corpse *next, *prev; /* the yard's corpses, or next alone in its waiting queue */
        CorpseYard *yard;
        Box box;
        int events;
        Watch init_w, cg_w;
};

static void corpse_event(Watch *w, uint32_t events);
static void activate(CorpseYard *y, Corpse *c);

static void corpse_free(Corpse *c) {
        CorpseYard *y = c->yard;
        loop_del(y->loop, &c->init_w);
        loop_del(y->loop, &c->cg_w);
        safe_close(c->events);
        LIST_UNLINK(y->corpses, c);
        free(c);
        y->active--;
        /* Those that finish at once free themselves here again: the outermost call takes the
         * next ones on, with no recursion per corpse. */
        if (y->taking_on)
                return;
        y->taking_on = true;
        while (y->waiting && y->active < SBX_CORPSES_ACTIVE) {
                Corpse *next = y->waiting;
                y->waiting = next->next;
                if (!y->waiting)
                        y->waiting_tail = NULL;
                next->next = NULL;
                activate(y, next);
        }
        y->taking_on = false;
}

/* box_try_finish() reaps pid 1 and closes its pidfd: it may be called only once the pidfd is
 * out of epoll. An fd closed while still registered stays registered as long as another copy
 * of it lives (a fork of the daemon holds copies of every fd for a moment, a job for longer),
 * and its events would then come for a freed watch. So while pid 1 lives, its pidfd's event
 * brings us back here; a check and the reap must not straddle its death. */
static void corpse_try(Corpse *c) {
        if (c->init_w.active) {
                if (!pidfd_is_dead(c->box.init_pidfd))
                        return;
                loop_del(c->yard->loop, &c->init_w);
        }
        if (box_try_finish(c->yard->shared, &c->box))
                corpse_free(c);
        /* A process-mode box goes on with a remover of its directory: its pidfd, watched the
         * same way (if it cannot be, the removal is done here, as when burying). */
        else if (!c->init_w.active && c->box.init_pidfd >= 0 &&
                 loop_add(c->yard->loop, &c->init_w, c->box.init_pidfd, EPOLLIN, corpse_event, c) < 0) {
                box_destroy(c->yard->shared, &c->box);
                corpse_free(c);
        }
}

static void corpse_event(Watch *w, uint32_t events) {
        Corpse *c = w->data;
        /* Reading the watched cgroup.events is what stops it from waking the loop again. */
        if (w == &c->cg_w)
                (void)cgroup_events_populated(c->events);
        corpse_try(c);
}

void corpse_add(CorpseYard *y, const Box *b) {
        Corpse *c = calloc(1, sizeof *c);
        if (!c) {
                Box copy = *b;
                box_destroy(y->shared, &copy); /* out of memory: a bounded wait beats a leak */
                return;
        }
        c->yard = y;
        c->box = *b;
        c->events = -1;
        /* Past the corpses finished at once, one that can be parked is (its fds given back
         * now: a thousand destroys by request, each woken first, would hold them all). */
        if (y->active >= SBX_CORPSES_ACTIVE && !c->box.parked && c->box.ready && !c->box.process) {
                /* A snapshot store the daemon made lives only in its fd, which would keep
                 * the box from parking: it goes with the sandbox anyway. */
                if (c->box.snap_lazy)
                        c->box.snap_fd = safe_close(c->box.snap_fd);
                (void)box_park(y->shared, &c->box);
        }
        if (c->box.parked && y->active >= SBX_CORPSES_ACTIVE) {
                /* Dead now, finished later: everything of a parked box (never a process
                 * mode's) is in its pid namespace, and dies with pid 1. Its cgroup's kill comes
                 * when it is taken on: a thousand kills queued for the mover would hold a
                 * thousand fds, and written here they would wait for the cgroup lock. */
                box_kill_parked(&c->box);
                if (y->waiting_tail)
                        y->waiting_tail->next = c;
                else
                        y->waiting = c;
                y->waiting_tail = c;
                return;
        }
        activate(y, c);
}

static void activate(CorpseYard *y, Corpse *c) {
        y->active++;
        /* Its fds first: the cgroup's kill below goes through the mover with them. */
        (void)box_unpark(&c->box);
        /* The cgroup's kill through the mover: a move waiting for its grace period holds
         * the cgroup mutex that writing cgroup.kill needs, and the loop must not wait. */
        box_kill(&c->box, !y->mover || c->box.cg.dir < 0 || mover_kill(y->mover, c->box.cg.dir, NULL, NULL) < 0);
        c->events = c->box.cg.dir >= 0 ? cgroup_events_open(c->box.cg.dir) : -1;
        LIST_LINK(y->corpses, c);
        if ((c->box.init_pidfd >= 0 &&
             loop_add(y->loop, &c->init_w, c->box.init_pidfd, EPOLLIN, corpse_event, c) < 0) ||
            (c->events >= 0 && loop_add(y->loop, &c->cg_w, c->events, EPOLLPRI, corpse_event, c) < 0)) {
                box_destroy(y->shared, &c->box);
                corpse_free(c);
                return;
        }
        corpse_try(c);
}

void corpse_bury_all(CorpseYard *y) {
        while (y->waiting) {
                Corpse *c = y->waiting;
                y->waiting = c->next;
                box_destroy(y->shared, &c->box);
                free(c);
        }
        y->waiting_tail = NULL;
        while (y->corpses) {
                box_destroy(y->shared, &y->corpses->box);
                corpse_free(y->corpses);
        }
}
