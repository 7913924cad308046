/* SPDX-License-Identifier: MIT */
/* Whether a sandbox's writable trees changed since a moment, without walking them.
 *
 * A fanotify group holds a filesystem mark on each tree's filesystem for every change the
 * kernel reports (writes, truncates, attributes, links, creates, deletes, renames, the close
 * of a file open for writing). Until the first event every change counts; after it only the
 * closes of files open for writing are still asked for (changes_mark(all = false)), whose
 * inodes the next walk copies whatever their stat says, so a sandbox that writes all the
 * time costs a wakeup per writable file closed, not one per write; at the next moment (the
 * sandbox frozen) every change is marked again.
 *
 * What fanotify does not report is a write through a shared writable mapping, and such a
 * write changes a file's times only at the first write fault of a mapping (tmpfs pages stay
 * dirty and writable after), so a file mapped at the last moment may have changed with no
 * trace in its stat either (a read fault maps a tmpfs page writable, so even a mapping made
 * after the moment may never fault on a write). Any such write needs a file open for writing
 * (a mapping holds its file open), which is either closed before the next moment (its close
 * is reported, with its inode) or still open then (changes_fs_writers() sees it, and
 * changes_file_writers() names it). So a tree is unchanged only when no event came and no
 * file of it is open for writing now, and a walk copies, whatever their stat says, the files
 * closed since the last moment and those open for writing now (fs/layer.c).
 *
 * Ownership: the fd from changes_watch() is the caller's. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include "base/limits.h"

/* A group with nothing marked yet. Returns 0 with *ret_fd, or -errno (no fanotify, out of
 * groups: the caller then walks). */
int changes_new(int *ret_fd);
/* Marks the filesystems of dirs (paths below root_fd) for every change (all) or only for
 * the close of a file open for writing: 0, or -errno (a filesystem that cannot report file
 * ids). Marks made before are replaced. */
int changes_mark(int fd, int root_fd, const char *const *dirs, size_t n, bool all);
/* What a queue held: any event at all, the inode numbers of the files whose writable open
 * ended (closed; deduplicated, owned by the struct), and whether some were lost (the queue
 * overflowed, more than SBX_FORK_CLOSED_MAX) or could not be told. changes_read()'s mount_fd
 * is a directory fd on the marked filesystem (not O_PATH: open_by_handle_at() refuses one). */
typedef struct ChangesSeen {
        bool any, closed_lost;
        ino_t *closed;
        size_t n_closed;
} ChangesSeen;
/* Adds what the queue holds to seen (0) or -errno. */
int changes_read(int fd, int mount_fd, ChangesSeen *seen);
/* Frees seen->closed; seen is empty after. */
void changes_seen_done(ChangesSeen *seen);
/* Sorts seen->closed for changes_closed_has(). */
void changes_seen_sort(ChangesSeen *seen);
/* Whether ino is among closed[] (sorted). */
bool changes_closed_has(const ino_t *closed, size_t n, ino_t ino);
/* Whether any file of the filesystem that holds dir (below root_fd) is open for writing,
 * wherever the open file is held (an fd, a mapping, an fd in flight over a socket, an
 * io_uring table): the kernel refuses to make a filesystem read-only while one is (EBUSY).
 * The probe asks exactly that and, when it was granted, makes it writable again at once:
 * the caller must have frozen every process that could write there. 1 if a file is open
 * for writing, 0 if none, -errno if it could not tell. */
int changes_fs_writers(int root_fd, const char *dir);
/* Whether the regular file name (below dir) is open for writing anywhere: a read lease is
 * refused while it is. 1, 0, or -errno (no leases on that filesystem: overlayfs grants one
 * while a mapping of it is writable, so only tmpfs is asked). */
int changes_file_writers(int dir, const char *name);
