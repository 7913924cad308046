/* SPDX-License-Identifier: MIT */
/* What libsbx shares with the layers above it in this tree (the server), but not with the
 * world: the context's event loop, so the server's own fds join the same epoll set. */
#pragma once
#include "base/loop.h"
#include <stdint.h>
#include "sbx/sbx.h"

Loop *sbx_context_loop(SbxContext *ctx);
/* Why the sandbox's setup failed, in pid 1's words ("" if it did not, or said nothing). */
const char *sbx_sandbox_setup_error(const SbxSandbox *sb);
/* Frees every open upload of every sandbox of ctx that has this owner (a closing client's),
 * in as many steps as there are open uploads, not sandboxes. */
void sbx_context_upload_free_owned(SbxContext *ctx, const void *owner);
/* The started process with this id among every sandbox of ctx, or NULL, without visiting
 * every sandbox (process ids are unique in a context). */
SbxProcess *sbx_context_process(SbxContext *ctx, uint64_t id);
