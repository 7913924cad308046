/* SPDX-License-Identifier: MIT */
/* Destroyed sandboxes whose processes are still dying: kept until pid 1 is reaped and their
 * cgroups are removed, by the loop, so destroying a sandbox never waits. */
#pragma once
#include "base/loop.h"
#include "sandbox/box.h"

typedef struct Corpse Corpse;

typedef struct CorpseYard {
        Loop *loop;
        BoxShared *shared;
        struct Mover *mover; /* writes the cgroup.kill of each corpse (cgroup/mover.h) */
        Corpse *corpses;
        /* Parked boxes killed but not finished yet, holding no fd, oldest first: taken on
         * while fewer than SBX_CORPSES_ACTIVE corpses are. */
        Corpse *waiting, *waiting_tail;
        unsigned active;
        bool taking_on; /* corpse_free() is taking waiting ones on */
} CorpseYard;

/* Kills the box's processes and takes it over; the loop finishes the cleanup. */
void corpse_add(CorpseYard *y, const Box *b);
/* Finishes every corpse now, waiting (bounded) for each: for a context going away. */
void corpse_bury_all(CorpseYard *y);
