/* SPDX-License-Identifier: MIT */
/* What the rooms below a sandbox (the session protocol, runs, the background log) share of
 * it. Embedded in SbxSandbox (sandbox.h), which owns it; those rooms see nothing else of
 * their sandbox. image.c steers runs through two fields of it (hold_after, tree_busy) and
 * touches nothing else. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "base/loop.h"
#include "sandbox/box.h"
#include "sbx/sbx.h"
#include "bglog/bglog.h"
#include "session/metrics.h"
#include "session/room.h"

typedef struct SandboxCore {
        Loop *loop;
        Box box;
        BgLog bg;
        SbxLimits limits;
        uint64_t timeout_ms;   /* default per-run timeout */
        int devnull;           /* the context's, stdin of runs without input */
        BoxShared *shared;     /* the context's, for the Python kernel's memfd (box_pykernel_fd()) */
        uint64_t next_cmd;     /* names command cgroups c1, c2, ... */
        uint64_t run_order;    /* the last caller run's place in the sandbox-wide order */
        /* Caller runs whose order is above this wait: an operation (fork, snapshot...)
         * requested before them has not let them go yet. UINT64_MAX: nothing is held. */
        uint64_t hold_after;
        /* The tree is being copied or replaced: the files API refuses changes (-EBUSY),
         * which would land half in, half out. */
        bool tree_busy;
        /* Paused (sbx_sandbox_pause): caller runs wait, even those an operation let go. */
        bool paused;
        unsigned freeze_holds; /* Freeze.holds of the sandbox's cgroup */
        uint64_t oom_kills;    /* the sandbox's count of OOM kills at the last failed run */
        bool dying;            /* being freed, or its pid 1 is gone: no new shells */
        char setup_error[512]; /* why pid 1's setup failed, as it said ("" if it did not) */
        const char *image;     /* the image it was made from, as the caller named it, or NULL */
        bool kill_leftovers;   /* runs kill what they leave running unless told otherwise */
        SbxSandbox *self;      /* the sandbox this is the core of, as the public API names it */
        /* What its output is redacted with (a reference of the sandbox's own; NULL: nothing
         * to redact). Runs, processes and the background log each keep streams on it. */
        struct Redactor *redact;
        /* The context's cgroup mover (cgroup/mover.h): every move of a worker in or out of
         * its command's cgroup goes through it, never a blocking write in the loop. */
        struct Mover *mover;
        uint64_t held_fds; /* fds held for it beyond its idle cost (sandbox_fds_take) */
        /* Parked (sbx_sandbox_park()): its box's and idle sessions' fds given back. What hears
         * an event of a parked sandbox calls unpark(core) first (sandbox.c's: the box, pid 1's
         * watch, every session). pins: the rooms' long-lived users of its fds (a file watch,
         * a process, exposed ports) that keep it from being parked. park_fs_*: its tmpfs's use
         * when parked, for the metrics (nothing writes there while it is parked). */
        bool parked;
        void (*unpark)(struct SandboxCore *core);
        /* A session's worker retired (session_retire()): sandbox.c's parks it when it was
         * waiting for that. */
        void (*retired)(struct SandboxCore *core);
        unsigned pins;
        uint64_t park_fs_bytes, park_fs_files;
        /* The context's rooms (room.h), told of what happens to the sandbox. */
        const RoomTable *rooms;
        /* process.c: the sandbox's processes, newest first, at most SBX_MAX_PROCESSES */
        SbxProcess *procs, *procs_tail;
        unsigned n_procs;
        /* What its metrics count (metrics.h): caller runs and processes begun, bytes the net
         * rooms relayed for it (its egress proxy, its exposed ports), and the samples. */
        uint64_t runs_started;
        uint64_t net_bytes;
        Metrics metrics;
} SandboxCore;

/* The core of a sandbox (defined in sandbox.c). */
SandboxCore *sandbox_core(SbxSandbox *sb);
