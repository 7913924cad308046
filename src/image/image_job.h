/* SPDX-License-Identifier: MIT */
/* What image.c hands its jobs (image_job.c): the jobs run in forked processes on an ImageJob
 * filled in the loop, and know nothing of operations, sessions or the loop. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/loop.h"
#include "sandbox/box.h"
#include "sbx/sbx.h"

/* One session's state, as dumped by the bash builtin. */
typedef struct State {
        char *name;
        uint8_t *data;
        size_t len;
} State;

void states_free(State *v, size_t n);

typedef struct ImageJob {
        const Box *from;          /* the sandbox operated on */
        const Box *to;            /* fork: the new sandbox */
        bool still;               /* nothing can change the source: two copiers are safe */
        const char *snap_id;      /* snapshot: the id stored as, or restored from */
        const SbxLimits *limits;  /* export, import: the sandbox's */
        uint64_t timeout_ms;      /* export: the sandbox's default run timeout */
        const State *states;      /* export: the sessions */
        size_t n_states;
        const uint8_t *archive;   /* import: the input */
        size_t archive_len;
        int memfd;                /* export: the output; import check: the sessions found */
        /* Layered fork (image_job_fork_layered): the new layer and the fork's upper (empty
         * tmpfs), the layers so far (most recent first), the index at the last one (-1: none;
         * read in threshold mode when threshold is not 0) and an empty memfd for the new one. */
        int layer, upper;
        const int *layers;
        size_t n_layers;
        int old_index, new_index;
        int64_t threshold;
        bool unlayer;             /* restore, import: take the sandbox's overlays off first */
        /* Layered fork: no change was reported since the last one (fs/changes.h): unless a
         * file of the trees is open for writing now or was then, no diff, the old index is
         * the new one and no layer is added. */
        bool unchanged;
        /* Layered fork: what the diff copies whatever the index says (LayerDiff). */
        const ino_t *closed;
        size_t n_closed;
        bool closed_all;
        int64_t touched_since;
} ImageJob;

/* JobFns (base/job.h) over an ImageJob: each returns 0 or -errno with err saying why. */
int image_job_fork(void *arg, char *err, size_t errlen);
/* A fork in layers (fs/layer.h): the diff into the new layer, then the overlay in the fork.
 * On success err holds "USED THRESHOLD ENTRIES COPIED WHITEOUTS BYTES": USED is 1 when the
 * new layer went under the fork (something changed), 0 when it is not needed. */
int image_job_fork_layered(void *arg, char *err, size_t errlen);
/* On success err holds the bytes copied, in decimal. */
int image_job_snapshot(void *arg, char *err, size_t errlen);
int image_job_restore(void *arg, char *err, size_t errlen);
int image_job_export(void *arg, char *err, size_t errlen);
/* Checks the archive as nobody; writes its sessions to memfd (name NUL, u64 length, state). */
int image_job_import_check(void *arg, char *err, size_t errlen);
int image_job_import_extract(void *arg, char *err, size_t errlen);
/* Reads back what image_job_import_check() wrote, appending to *states. Returns 0 or -errno. */
int image_read_sessions(int memfd, State **states, size_t *n_states);
/* Empties and removes the store's snapshot `id` in a job nobody waits for. */
void image_sweep_start(Loop *loop, int store, const char *id);
