/* SPDX-License-Identifier: MIT */
/* Freezing a sandbox's processes (cgroup v2 freezer) for a copy of its tree, from the loop:
 * the write to cgroup.freeze is asynchronous, cgroup.events says when every process has
 * stopped, and a timer gives up waiting (a process stuck in the kernel never stops). */
#pragma once
#include <stdbool.h>
#include "base/loop.h"

typedef struct Freeze Freeze;
typedef void (*FreezeFn)(Freeze *f);

struct Freeze {
        Loop *loop;
        int cg;          /* the sandbox's cgroup dir, not owned */
        const char *who; /* for the log */
        bool asked;      /* cgroup.freeze was written: freeze_thaw() undoes it */
        bool still;      /* confirmed frozen: nothing of the sandbox can change the tree */
        int ev, timer;
        Watch ev_w, timer_w;
        FreezeFn done;
        /* The cgroup's freezes in force (a pause, an operation's copy), shared by every Freeze
         * of it: the last one thawed thaws it, so a copy never thaws a paused sandbox. */
        unsigned *holds;
};

void freeze_init(Freeze *f);
/* Freezes cg. Returns 1 when settled at once (f->still says whether it is frozen; without a
 * v2 freezer it never is), 0 when done(f) follows from the loop, frozen or given up. */
int freeze_start(Freeze *f, Loop *loop, int cg, unsigned *holds, const char *who, FreezeFn done);
/* Stops waiting and lets go of its hold; thaws the cgroup if that was the last. */
void freeze_thaw(Freeze *f);
