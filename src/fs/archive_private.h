/* SPDX-License-Identifier: MIT */
/* What archive_export.c, archive_check.c and archive_extract.c share (archive.c): the three
 * writable top directories, the digest's record of an entry, the reader and the checks of an
 * entry's path. Private to src/fs: none of it is part of archive.h. */
#pragma once
#include <archive.h>
#include <archive_entry.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/macro.h"
#include "base/sha256.h"

/* The writable directories an archive holds, as the sandbox sees them, in archive order. */
#define ARCHIVE_N_TOPS 3
extern const char *const archive_tops[ARCHIVE_N_TOPS];

/* Writes the message into err unless one is already there, so that the first (innermost)
 * reason is the one reported. Returns -EINVAL, for `return archive_err(...)` on a refusal. */
_printf_(3, 4) int archive_err(char *err, size_t errlen, const char *fmt, ...);

/* Index into archive_tops of the writable directory holding the canonical path p, or -1. */
int archive_top_of(const char *p);

/* Whether p is one of archive_tops itself. */
bool archive_is_top(const char *p);

/* Which entries a hard link may join: those of the same group (see archive.c). */
int archive_link_group(int top);

/* Feeds the digest's record of one entry's header (see archive.h); target is the symlink text
 * or the hard link's earlier path, NULL otherwise. */
void archive_digest_header(struct sha256_ctx *s, const char *path, char type, unsigned mode, uint64_t size,
                           const char *target);

/* A libarchive reader of data (zstd tar only), or NULL. Free it with archive_read_free(). */
struct archive *archive_reader_open(const uint8_t *data, size_t len);

/* An entry's path, symlink text and hard link target, whichever encoding libarchive has;
 * NULL if absent. Borrowed from the entry. */
const char *archive_name_of(struct archive_entry *e);
const char *archive_symlink_of(struct archive_entry *e);
const char *archive_hardlink_of(struct archive_entry *e);

/* Copies an entry path into out (SBX_MAX_PATH_BYTES) without its trailing slashes and checks
 * it names something inside the writable directories. `what` names it in messages. Returns 0
 * or -EINVAL (err says why). */
int archive_canonical_path(const char *raw, const char *what, char *out, char *err, size_t errlen);
