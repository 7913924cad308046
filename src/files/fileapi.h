/* SPDX-License-Identifier: MIT */
/* What fileapi.c shares with the other rooms that reach a sandbox's files (watch.c), and with
 * the server. */
#pragma once
#include "fs/files.h"
#include "sbx/sbx.h"

/* The jail of sb, its words going to sbx_file_error()'s buffer (emptied first), or -EAGAIN
 * before its root is built, -ESRCH when it never will be. */
int fileapi_ctx(SbxSandbox *sb, FsCtx *ret);
/* Puts why a call failed into sbx_file_error()'s buffer and returns r. */
int fileapi_fail(int r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Frees every open upload of every sandbox of ctx that has this owner (a closing client's), in
 * as many steps as there are open uploads, not sandboxes. For the server. */
void sbx_context_upload_free_owned(SbxContext *ctx, const void *owner);
