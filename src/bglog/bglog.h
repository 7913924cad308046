/* SPDX-License-Identifier: MIT */
/* What commands leave running after they end: the pipes their background processes still
 * write to (read into one bounded log per sandbox, never closed early, so no writer gets
 * SIGPIPE) and the command cgroups still holding processes (removed by a sweep once empty).
 * Knows nothing of sessions or runs. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "base/buf.h"
#include "base/loop.h"
#include "cgroup/cgroup.h"

typedef struct BgPipe BgPipe;
typedef struct BgCgroup BgCgroup;

/* Invariant: n_pipes is the length of the pipes list (newest first, pipes_tail the oldest)
 * and never exceeds SBX_MAX_BACKGROUND_PIPES; every listed pipe is watched by the loop. */
typedef struct BgLog {
        Loop *loop;
        CgroupSandbox *cg; /* the sandbox's cgroups: retired children live below */
        Ring ring;
        BgPipe *pipes, *pipes_tail;
        unsigned n_pipes;
        BgCgroup *cgroups;
        int timer; /* sweeps `cgroups` while there are any */
        uint64_t sweep_due; /* when the timer fires (monotonic ns), 0 when it is not armed */
        Watch timer_w;
        const struct Redactor *redact; /* the sandbox's: each pipe's output is redacted (may be NULL) */
} BgLog;

/* Returns 0 or -errno. cg must outlive the log. */
int bglog_init(BgLog *bg, Loop *loop, CgroupSandbox *cg);
/* Closes the pipes (writers may then get EPIPE) and forgets the cgroups. */
void bglog_done(BgLog *bg);
/* Takes ownership of fd, the read end of an ended command's output pipe. Past
 * SBX_MAX_BACKGROUND_PIPES the oldest held pipe is closed. */
void bglog_adopt_pipe(BgLog *bg, int fd);
/* Takes ownership of dir, the fd of the ended command's cgroup `name`: removed now if empty,
 * else swept later. */
void bglog_retire_cgroup(BgLog *bg, int dir, const char *name);
/* The same for a command whose leftovers must die (leftovers: kill). The kill waits until the
 * session's next worker is out of the cgroup (the holder forks it while it may still be in
 * there): bglog_kill_doomed() when the worker is contained, else a short timer. */
void bglog_doom_cgroup(BgLog *bg, int dir, const char *name, const void *owner);
/* Kills the doomed cgroups of owner (a session); NULL: all of them. */
void bglog_kill_doomed(BgLog *bg, const void *owner);
/* Processes still in the retired cgroups: what earlier commands left running. */
unsigned bglog_count_processes(const BgLog *bg);
/* Kills every retired cgroup; returns how many were killed. */
unsigned bglog_kill(BgLog *bg);
/* Copies the newest up to size bytes of the log into buf; returns the length. */
size_t bglog_copy(const BgLog *bg, uint8_t *buf, size_t size);
