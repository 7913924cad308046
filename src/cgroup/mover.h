/* SPDX-License-Identifier: MIT */
/* The mover: a process of the daemon that writes pids into cgroup.procs files, so that the
 * daemon's loop never does.
 *
 * Why: moving a process between cgroups takes the write side of the kernel's
 * cgroup_threadgroup_rwsem, a per-CPU rwsem whose writer waits for an RCU grace period
 * unless another writer passed within the last one. Back to back that is 20 µs; for the
 * first move after a quiet spell it is 4-16 ms on the machines measured (docs/BENCHMARKS.md).
 * Every command moves its worker in and out of its cgroup, so an agent that runs a command
 * now and then would wait that long for each result, and every other client of the daemon
 * with it. The mover takes the wait instead; the caller hears of the result from the loop.
 * (With favordynmods on, cgroup_favor_dynmods(), no move waits; the mover stays for hosts
 * where it cannot be turned on.)
 *
 * A move that waits for its grace period holds the kernel's cgroup mutex meanwhile, so any
 * other write to cgroupfs (mkdir, rmdir, cgroup.kill) waits with it: the sandbox's kill on
 * destroy goes through the mover too (mover_kill()); a command cgroup's mkdir and the
 * retired ones' rmdir stay in the loop (brief, and rarely at the same moment).
 *
 * Ownership: a request keeps duplicates of the dir fds it was given (the caller may close
 * its own at once). Callbacks run from the loop, never from mover_move() itself. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "base/loop.h"

/* Most cgroups one request moves a pid into (the v2 one and a v1 pids one, or the three v1
 * hierarchies of a sandbox). */
#define MOVER_MAX_DIRS 4

typedef struct Mover Mover;
/* r: 0 when the pid was written into every cgroup, else the first -errno. */
typedef void (*MoveDoneFn)(void *ud, int r);

/* Starts the mover process (unless !process: a short-lived caller that would only pay for
 * its fork). Without it, when it cannot start, or once it died, moves are done in the daemon
 * itself (as blocking writes), answered from the loop all the same. Returns 0 or -errno (out
 * of memory only). */
int mover_new(Loop *l, bool process, Mover **ret);
/* Kills the process; pending requests are dropped without a callback. NULL is fine. */
void mover_free(Mover *m);
/* Moves pid (as the daemon sees it) into each cgroup of dirs[] in order (cgroup dir fds),
 * stopping at the first failure; done(ud, r) follows from the loop. Returns a request id
 * (> 0) for mover_cancel(), or -errno (then done is never called). */
int64_t mover_move(Mover *m, pid_t pid, const int *dirs, size_t n, MoveDoneFn done, void *ud);
/* Writes cgroup.kill of the cgroup dir (a fd), in the same order as the moves: the kernel
 * takes the cgroup mutex for it, which a move waiting for its grace period holds, so the loop
 * must not write it itself while the mover may be waiting. done may be NULL. Returns a
 * request id or -errno. */
int64_t mover_kill(Mover *m, int dir, MoveDoneFn done, void *ud);
/* done of request id will not be called (the move itself may still happen). 0 is ignored. */
void mover_cancel(Mover *m, int64_t id);
/* Requests sent and not answered yet, for tests and health. */
unsigned mover_pending(const Mover *m);
/* Whether the mover process runs (else moves are done in the daemon). */
bool mover_running(const Mover *m);
/* Its pid, or -1 when it does not run. */
pid_t mover_pid(const Mover *m);
