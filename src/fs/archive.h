/* SPDX-License-Identifier: MIT */
/* Export and import of a sandbox's writable tree as a zstd-compressed tar (libarchive) that
 * plain `tar` opens. Layout, in this order:
 *   tmp/..., home/user/..., dev/shm/...   the tree (paths as the sandbox sees them, no
 *                                         leading slash; the three top directories included)
 *   sbx-manifest.json                     last entry: {"format": "sbx-export", "version": 1,
 *       "createdAt": ms, "limits": {...}, "sessions": [{"name", "state" (base64)}],
 *       "payload": {"sha256": hex, "entries": N, "bytes": B}}
 * The payload digest covers every entry before the manifest, in archive order: for each,
 * pathname (no trailing slash), NUL, type letter (f d l p, or h for a hard link), NUL, mode in
 * octal (permission bits), NUL, size in decimal (0 but for f), NUL, link target (symlink
 * text, or for h the earlier entry's path; nothing otherwise), NUL, then the data bytes.
 * Export drops setuid/setgid bits (import refuses them) and keeps mtimes to the second.
 *
 * Import is two steps so that a refused archive changes nothing: archive_check() reads the
 * whole archive and refuses it (clear message) for: not a zstd tar, no manifest or a bad
 * format/version, a digest mismatch, an absolute path or a ".." component, a path outside the
 * three writable directories, a hard or symbolic link whose target resolves outside them,
 * device nodes, sockets, setuid/setgid bits, more bytes than limits->fs_bytes or more entries
 * than limits->file_count (counting hard links and implied parent directories, not the three
 * top directories), anything extraction would stumble on (a duplicate path, an entry below
 * a non-directory, a name longer than NAME_MAX), a path of SBX_MAX_ARCHIVE_PATH_BYTES or more
 * or more than SBX_MAX_TREE_DEPTH directories below its top, or entries in an order that
 * would make extraction walk up and down the tree past SBX_ARCHIVE_WALK_SLACK. Paths may be
 * longer than PATH_MAX (a deep tree): neither side ever hands one whole to a system call.
 * Only then does the caller clear the tree and call archive_extract(). Both block: run them
 * in a job process (base/job.h). */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "fs/tree.h"

#define ARCHIVE_FORMAT "sbx-export"
#define ARCHIVE_VERSION 1
#define ARCHIVE_MANIFEST "sbx-manifest.json"

typedef struct ArchiveSession {
        char *name;
        uint8_t *state; /* a session state as the bash builtin dumps it (opaque here) */
        size_t state_len;
} ArchiveSession;

typedef struct ArchiveLimits {
        uint64_t fs_bytes, file_count, memory_bytes, stdout_bytes, stderr_bytes, command_bytes;
        uint64_t timeout_ms;
        uint32_t pids;
} ArchiveLimits;

typedef struct ArchiveMeta {
        ArchiveLimits limits;
        ArchiveSession *sessions; /* owned */
        size_t n_sessions;
        uint64_t created_ms;
        uint64_t entries, bytes; /* of the payload */
} ArchiveMeta;

void archive_meta_clear(ArchiveMeta *m);

/* Writes the archive of root's writable directories (root: an fd of the sandbox's /, O_PATH
 * will do) to out_fd. Owners are written as the sandbox sees them (ids->src_* host ids become
 * ids->dst_*, i.e. 1000, name "user"). meta's entries/bytes are filled in, and created_ms if
 * it was 0. Returns 0 or -errno, err saying why. */
int archive_export(int root, const TreeIds *ids, ArchiveMeta *meta, int out_fd, char *err, size_t errlen);

/* Validates a whole archive (see above) against `limits` (fs_bytes, file_count); on success
 * fills meta (sessions, limits, counts). Returns 0, -EINVAL (refused: err says why) or
 * -errno. */
int archive_check(const uint8_t *data, size_t len, const ArchiveLimits *limits, ArchiveMeta *meta, char *err,
                  size_t errlen);

/* Extracts a checked archive under root (the three top directories must exist and be empty);
 * what it creates belongs to the calling process's fs ids (see tree_become()). Every
 * component is created relative to its parent's fd with O_NOFOLLOW. Returns 0 or -errno. */
int archive_extract(const uint8_t *data, size_t len, int root, char *err, size_t errlen);

/* A session's state as the session builtin dumps it: "SBXSTATE 1\n", then records
 * "<A-Z>:<len>\n<len bytes>\n". Calls fn (may be NULL) for each record in order with its tag and
 * bytes; returns 0, -EINVAL when p is not in that form, or what fn returned (< 0 stops). */
typedef int (*ArchiveStateFn)(void *ud, char tag, const uint8_t *data, size_t len);
int archive_state_walk(const uint8_t *p, size_t len, ArchiveStateFn fn, void *ud);
