/* SPDX-License-Identifier: MIT */
/* Processes of a sandbox (see process.c): started on their own from a session's state
 * (sbx_process_start, through run.c's detached runs), or left running by a run (leftovers).
 * Each owns its command cgroup, its output pipes (or terminal) and a bounded log. The list
 * lives in SandboxCore. The room (session/room.h) is how the core reaches it: sandbox.c tells
 * it pid 1's reports of ended processes and the sandbox's end, run.c hands it what a run
 * leaves running. */
#pragma once
#include <stdint.h>
#include "sbx/sbx.h"
#include "session/room.h"

/* The process room: pid 1's exits (exited), its death (lost), the sandbox freed (freeing),
 * leftovers adopted, killed and counted, the context's index of processes freed. */
extern const Room process_room;

/* The started process with this id among every sandbox of ctx, or NULL, without visiting
 * every sandbox (process ids are unique in a context). For the server. */
SbxProcess *sbx_context_process(SbxContext *ctx, uint64_t id);
