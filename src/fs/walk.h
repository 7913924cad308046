/* SPDX-License-Identifier: MIT */
/* A position in a directory tree as the chain of directories from a top down to the current
 * one, for walks that go as deep as a tree goes (copy, export, extract) with a bounded number
 * of open fds and no recursion. Private to src/fs. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include "base/slots.h"

/* One entry of a directory's listing. */
typedef struct WalkEntry {
        char *name;
        unsigned char type; /* d_type: DT_DIR, DT_REG, ... (DT_UNKNOWN if the fs does not say) */
} WalkEntry;

/* One directory of the chain. Invariants: v[0] is the top, whose fd is the caller's and is
 * never closed; every other level was opened by name relative to the level above it with
 * O_NOFOLLOW (so never through a symlink); levels 1..open_levels keep their fd for as long as
 * they are on the chain, deeper ones only while they are the current directory. A closed
 * level is opened again through ".." of the level below it and kept only if it is the same
 * directory (st_dev and st_ino) as when it was entered: so a rename meanwhile can lead the
 * walk neither out of the tree nor to another of its directories (-ESTALE instead). */
typedef struct WalkLevel {
        int fd;              /* -1 while closed */
        struct stat st;      /* of the directory when it was entered */
        size_t path_len;     /* length of Walk.path at this level */
        WalkEntry *ents;     /* the listing (walk_list()), owned */
        size_t n_ents, next; /* entries and the next one walk_next() gives */
} WalkLevel;

typedef struct Walk {
        WalkLevel *v; /* v[0] the top ... v[n-1] the current directory */
        size_t n, cap;
        char *path; /* prefix/name/name...: the current directory, NUL at v[n-1].path_len */
        size_t path_cap;
        size_t max_depth;   /* levels below the top walk_push() allows (-ELOOP past it) */
        size_t open_levels; /* SBX_TREE_OPEN_LEVELS; a test may lower it */
} Walk;

/* Starts a walk at directory `top` (borrowed: the walk never closes it), whose path is
 * `prefix` ("" for none). Returns 0 or -errno. */
int walk_init(Walk *w, int top, const char *prefix, size_t max_depth);

/* Closes every fd the walk opened and frees what it holds; w can be initialized again. */
void walk_done(Walk *w);

/* Levels below the top (0 at the top). */
static inline size_t walk_depth(const Walk *w) { return w->n - 1; }

/* The current directory's fd (always open), borrowed. */
static inline int walk_fd(const Walk *w) { return w->v[w->n - 1].fd; }

/* The current directory's stat from when it was entered. */
static inline const struct stat *walk_stat(const Walk *w) { return &w->v[w->n - 1].st; }

/* The current directory's path (prefix and names joined by '/'), borrowed until the next call
 * on w. */
const char *walk_path(Walk *w);

/* The path of the entry `name` of the current directory, borrowed until the next call on w;
 * NULL if out of memory. */
const char *walk_child_path(Walk *w, const char *name);

/* Enters `fd` (taken over: closed on failure too), a directory the caller opened as `name`
 * relative to walk_fd() with O_DIRECTORY | O_NOFOLLOW: it becomes the current directory.
 * Returns 0, -ELOOP past max_depth, or -errno. */
int walk_push(Walk *w, int fd, const char *name);

/* Opens the directory `name` of the current directory (O_NOFOLLOW) and enters it. Returns 0,
 * -ENOENT/-ENOTDIR/-ELOOP if it is not (or no longer) a directory, or -errno. */
int walk_enter(Walk *w, const char *name);

/* Leaves the current directory for its parent (never the top's). Returns 0, -ESTALE if the
 * parent had to be opened again and is no longer the directory it was (the tree changed), or
 * -errno; on failure only walk_done() may follow. */
int walk_pop(Walk *w);

/* Goes up to `depth` levels below the top. Returns 0 or -errno as walk_pop(). */
int walk_pop_to(Walk *w, size_t depth);

/* Reads the current directory's entries ("." and ".." left out) into its level, sorted by
 * name if `sorted`. Returns 0 or -errno. */
int walk_list(Walk *w, bool sorted);

/* The next entry of the current directory's listing, or NULL once all were given. */
const WalkEntry *walk_next(Walk *w);

/* Opens the directory holding `path` (relative to `top`, no "." or ".." components) one
 * component at a time with O_NOFOLLOW, whatever its length; *ret_name points to path's last
 * component. Returns the fd (owned) or -errno. */
int walk_open_parent(int top, const char *path, const char **ret_name);
/* The same, making a missing directory on the way with mode mk (0: none). */
int walk_open_parent_mk(int top, const char *path, mode_t mk, const char **ret_name);

/* The hard links a copy has met: for each inode with more than one name, the path (relative to
 * the copy's top) of its first copy, so the next names become links to it. Found through a hash
 * of the inode: a tree may hold any number of links (they cost no inode), and a copy must not
 * slow down with their square. */
typedef struct WalkLinks {
        struct WalkLink {
                dev_t dev;
                ino_t ino;
                int group; /* the caller's: names of one group link only to each other */
                char *path; /* owned */
        } *v;
        size_t n, cap;
        Slots slots; /* of v, by (dev, ino, group) */
} WalkLinks;

/* The path of the first copy of inode (dev, ino) in group, or NULL when it has none yet. */
const char *walk_links_find(const WalkLinks *t, dev_t dev, ino_t ino, int group);
/* Records path (copied) as that first copy; one recorded already stays. Returns 0 or -ENOMEM. */
int walk_links_add(WalkLinks *t, dev_t dev, ino_t ino, int group, const char *path);
/* Frees what it holds; t can be used again. */
void walk_links_done(WalkLinks *t);
