/* SPDX-License-Identifier: MIT */
/* Whole-tree operations on a sandbox's writable filesystem: copy (fork, snapshots) and clear
 * (restore, import). They walk without recursion, whatever the depth, and never follow a
 * symlink (each component is opened O_NOFOLLOW relative to its parent); below
 * SBX_TREE_OPEN_LEVELS they go back up through "..", and only to the very directory they came
 * down from. So a tree that changes under them cannot lead them outside it (-ESTALE when a
 * directory was moved meanwhile). They block: run them in a job process (base/job.h), never
 * in the daemon's loop. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Owner mapping: entries owned by src_uid/src_gid (the sandbox user) get dst_uid/dst_gid;
 * where count > 0, any other id of [src_base, src_base + count) keeps its offset from
 * dst_base (a root daemon's sandbox is a block of host ids: uids and gids alike); others
 * keep theirs. */
typedef struct TreeIds {
        uid_t src_uid, dst_uid;
        gid_t src_gid, dst_gid;
        uint32_t src_base, dst_base, count;
} TreeIds;

static inline uint32_t tree_map_id(const TreeIds *ids, uint32_t id, uint32_t src_user, uint32_t dst_user) {
        if (id == src_user)
                return dst_user;
        if (ids->count && id - ids->src_base < ids->count)
                return ids->dst_base + (id - ids->src_base);
        return id;
}
static inline uid_t tree_map_uid(const TreeIds *ids, uid_t u) { return tree_map_id(ids, u, ids->src_uid, ids->dst_uid); }
static inline gid_t tree_map_gid(const TreeIds *ids, gid_t g) { return tree_map_id(ids, g, ids->src_gid, ids->dst_gid); }

typedef struct TreeStats {
        uint64_t files, dirs, bytes;
} TreeStats;

/* Copies everything inside directory `src` into directory `dst` (expected empty), then gives
 * dst src's mode, owner and times. Regular files (holes kept), directories, symlinks, fifos
 * and hard links are copied; sockets and device nodes are skipped. Only entries on src's
 * filesystem are copied. On failure err says which path and why. Returns 0 or -errno (-ELOOP
 * past SBX_MAX_TREE_DEPTH levels, -ESTALE if a directory was moved during the copy). */
int tree_copy(int src, int dst, const TreeIds *ids, TreeStats *stats, char *err, size_t errlen);

/* The same with two processes where there are two CPUs or more, each taking every other entry
 * of the top directory and of its directories. For a tree that does not change meanwhile
 * (frozen): both must list the same entries. Hard links between the two halves become
 * separate copies. */
int tree_copy_parallel(int src, int dst, const TreeIds *ids, TreeStats *stats, char *err, size_t errlen);

/* Removes everything inside directory `dir`, keeping dir itself. Returns 0 or -errno. */
int tree_clear(int dir, char *err, size_t errlen);

/* Prepares the calling process (a job) to act on trees as the owner `uid`/`gid`: as root, its
 * fs ids become those and it keeps the right to read and change any file; otherwise nothing
 * changes. Returns 0 or -errno. */
int tree_become(uid_t uid, gid_t gid);
