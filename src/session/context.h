/* SPDX-License-Identifier: MIT */
/* The context's room (context.c): sandboxes made fresh or taken from the pool, and what every
 * sandbox of a context shares (SandboxHost), rooms included. */
#pragma once
#include <stddef.h>
#include "sbx/sbx.h"
#include "session/room.h"

struct SandboxHost;

/* A context with no room yet: the library's constructor (sbx_context_new(), lib/) adds them
 * before it is handed out. Returns 0 or -errno. */
int context_new(SbxContext **ret);
/* Adds a room (kept, not copied: a static table) to be told of every sandbox made after.
 * Returns 0, or -ENOSPC past SBX_MAX_ROOMS. */
int context_add_room(SbxContext *ctx, const Room *room);
/* context_new() with rooms (a static table, in the order they are told), as the library's
 * constructors hand it out. Returns 0 or -errno. */
int context_new_with_rooms(const Room *const *rooms, size_t n, SbxContext **ret);
/* What ctx's sandboxes share, where rooms keep their context-wide part. */
struct SandboxHost *context_host(SbxContext *ctx);

/* A new sandbox with the same options as sb (limits, timeout, environment, network, root):
 * from the pool when they are the defaults. err says what failed. Returns 0 or -errno. */
int sandbox_new_like(SbxSandbox *sb, SbxSandbox **ret, char *err, size_t errlen);
