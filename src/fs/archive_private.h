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
#include "base/slots.h"

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

/* Checks that an entry path names something inside the writable directories: relative, no
 * "." or ".." components, none longer than NAME_MAX, shorter than SBX_MAX_ARCHIVE_PATH_BYTES
 * and at most SBX_MAX_TREE_DEPTH directories below its top directory. *ret gets it without
 * its trailing slashes (malloc'd). `what` names it in messages. Returns 0, -EINVAL (err says
 * why) or -ENOMEM. */
int archive_canonical_path(const char *raw, const char *what, char **ret, char *err, size_t errlen);

/* The paths of an archive as a tree of their components, so that a path costs memory once per
 * component however long it is, and is found in time linear in its length. Node 0 is the
 * root (""); every other node is one component below its parent and was added after it, so
 * that in decreasing order of index every node comes before its parent. The children of a
 * node are found through one hash table of (parent, name), open addressing, at most half
 * full. */
typedef struct ArchiveNode {
        char *name;      /* owned */
        uint32_t parent; /* index; the root is its own */
        uint32_t depth;  /* components from the root */
        uint8_t kind;    /* the user's */
} ArchiveNode;

typedef struct ArchiveTree {
        ArchiveNode *nodes;
        size_t n, cap;
        Slots slots;     /* of nodes, by (parent, name); the root is in none */
} ArchiveTree;

/* An empty tree (the root only). Returns 0 or -ENOMEM. */
int archive_tree_init(ArchiveTree *t);
void archive_tree_free(ArchiveTree *t);

/* The child of node `parent` named by the len bytes at name: its index, or -1. */
int64_t archive_tree_child(const ArchiveTree *t, uint32_t parent, const char *name, size_t len);

/* Adds it (the caller knows it is absent). Returns its index, -ENOMEM or -E2BIG. */
int64_t archive_tree_add(ArchiveTree *t, uint32_t parent, const char *name, size_t len, uint8_t kind);

/* The node of a canonical path ("" is the root), or -1. */
int64_t archive_tree_find(const ArchiveTree *t, const char *path);

/* The path of a node, malloc'd ("" for the root), or NULL. */
char *archive_tree_path(const ArchiveTree *t, uint32_t node);

/* Steps up and down from node a to node b. */
uint64_t archive_tree_distance(const ArchiveTree *t, uint32_t a, uint32_t b);

/* Adds the three top directories and their parents to a new tree, in archive_tops order: the
 * check and the extraction build the same tree from the same archive, node for node. */
int archive_tree_add_tops(ArchiveTree *t, uint8_t kind);

/* Finds or adds (with `kind`) each component of `rest` (canonical) below node `from`, the way
 * both the check and the extraction do. Returns the node of the last, or -errno. */
int64_t archive_tree_place(ArchiveTree *t, uint32_t from, const char *rest, uint8_t kind);

/* The previous path placed in a tree and its node. An archive lists a directory's entries
 * together and each directory just before its entries, so a path is placed from the deepest
 * node it shares with the previous one: what placing costs follows the archive's bytes and
 * the distance between consecutive entries, not the depth of each entry. */
typedef struct ArchiveCursor {
        char *path; /* owned */
        size_t len, cap;
        uint32_t node;
} ArchiveCursor;

/* Where to place the canonical `path` from: the deepest node that is a directory above both
 * the cursor's node and path's (so a proper ancestor of each: never the previous entry itself,
 * which may be a file, nor path's own node). *ret_rest points to path's components below it. */
uint32_t archive_cursor_start(const ArchiveTree *t, const ArchiveCursor *c, const char *path, const char **ret_rest);

/* Records path and its node as the previous one. Returns 0 or -ENOMEM. */
int archive_cursor_set(ArchiveCursor *c, const char *path, uint32_t node);
void archive_cursor_free(ArchiveCursor *c);
