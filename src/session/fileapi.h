/* SPDX-License-Identifier: MIT */
/* What fileapi.c shares with the other rooms that reach a sandbox's files (watch.c). */
#pragma once
#include "fs/files.h"
#include "sbx/sbx.h"

/* The jail of sb, its words going to sbx_file_error()'s buffer (emptied first), or -EAGAIN
 * before its root is built, -ESRCH when it never will be. */
int fileapi_ctx(SbxSandbox *sb, FsCtx *ret);
/* Puts why a call failed into sbx_file_error()'s buffer and returns r. */
int fileapi_fail(int r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

struct SandboxHost;
/* Frees every open upload, of any sandbox of host, that has this owner: as many steps as
 * uploads are open, however many sandboxes there are. */
void upload_free_owned_all(struct SandboxHost *host, const void *owner);
