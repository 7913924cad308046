/* SPDX-License-Identifier: MIT */
/* What libsbx shares with the layers above it in this tree (the server), but not with the
 * world: the context's event loop, so the server's own fds join the same epoll set. The rooms above
 * the core say theirs in their own headers (files/fileapi.h, process/process.h). */
#pragma once
#include "base/loop.h"
#include <stdint.h>
#include "sbx/sbx.h"

Loop *sbx_context_loop(SbxContext *ctx);
/* Why the sandbox's setup failed, in pid 1's words ("" if it did not, or said nothing). */
const char *sbx_sandbox_setup_error(const SbxSandbox *sb);
/* Parking: an idle sandbox gives back the fds it can have again when used (its root's, its
 * store's, its network namespace's, its pid 1's pidfd, its cgroups', its idle workers'),
 * keeping 1 + its sessions' 2 each (pid 1's control socket; each session's socket and
 * holder's pidfd), so that one daemon holds thousands under RLIMIT_NOFILE. Only as root (the
 * daemon takes pid 1's fds again with pidfd_getfd(2)), never in process mode. park: 0 when
 * parked, -EBUSY while anything of it is in use (a run, a process, a watch, exposed ports,
 * an operation, a pause, leftovers), -EPERM where it cannot be parked. unpark: a no-op
 * unless parked; whatever is heard of a parked sandbox unparks it first. */
int sbx_sandbox_park(SbxSandbox *sb);
/* 0, or -errno when its fds cannot be had again (out of fds: it stays parked). */
int sbx_sandbox_unpark(SbxSandbox *sb);
bool sbx_sandbox_parked(const SbxSandbox *sb);
/* fds the daemon's limit has left beyond what its sandboxes hold by their idle costs (parked
 * or not) and its reserve (INT64_MAX when unknown), and how many sandboxes are parked, of
 * sb's context. */
int64_t sbx_sandbox_fds_spare(const SbxSandbox *sb);
unsigned sbx_sandbox_parked_count(const SbxSandbox *sb);
/* A client used it: last in parking's order (only sandboxes touched once are ever parked: a
 * pool's are not). */
void sbx_sandbox_touch(SbxSandbox *sb);
/* sandbox_park_idle() and sandbox_park_for() of the context (session/sandbox.h). */
unsigned sbx_context_park_idle(SbxContext *ctx, uint64_t idle_ms);
int64_t sbx_context_fds_spare(SbxContext *ctx);
void sbx_context_park_for(SbxContext *ctx, const SbxSandbox *keep, int64_t want);
