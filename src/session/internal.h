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
