/* SPDX-License-Identifier: MIT */
/* Whether a sandbox's writable trees changed since a moment, without walking them.
 *
 * A fanotify group holds a filesystem mark on each tree's filesystem for every change the
 * kernel reports (writes, truncates, attributes, links, creates, deletes, renames, the close
 * of a file open for writing). The first event is all that matters: the owner watches the
 * fd once, and at that event takes the marks off (changes_unmark()) and empties the queue, so
 * a sandbox that writes all the time costs one wakeup per moment and a queue of a few events,
 * not one per write; at the next moment (the sandbox frozen) it marks again.
 *
 * What fanotify does not report is a write through a shared writable mapping, and such a
 * write changes a file's times only at the first write fault of a mapping (tmpfs pages stay
 * dirty and writable after), so a file mapped at the last moment may have changed with no
 * trace in its stat either. Any such write needs a file open for writing at some point after
 * the moment (a mapping holds its file open). So a tree is unchanged only when no event came
 * and no file of it was open for writing at the last moment nor is at this one
 * (changes_fs_writers(): one opened and closed in between is reported by its close), and a
 * walk copies the files that were open for writing at the last moment whatever their stat
 * says (changes_file_writers() names them at that walk; fs/layer.c).
 *
 * Ownership: the fd from changes_watch() is the caller's. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* A group with nothing marked yet. Returns 0 with *ret_fd, or -errno (no fanotify, out of
 * groups: the caller then walks). */
int changes_new(int *ret_fd);
/* Marks the filesystems of dirs (paths below root_fd): 0, or -errno (a filesystem that
 * cannot report file ids). */
int changes_mark(int fd, int root_fd, const char *const *dirs, size_t n);
/* Removes every mark: nothing more is queued. 0 or -errno. */
int changes_unmark(int fd);
/* Empties the queue: 1 if anything happened since the last call (or the queue overflowed),
 * 0 if nothing, -errno. */
int changes_drain(int fd);
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
