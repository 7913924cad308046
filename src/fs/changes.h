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
 * trace in its stat either: the diff copies those (LayerDiff.volatile_files). A write needs a
 * file open for writing or mapped shared and writable at some point after the moment:
 * changes_writers() finds processes that hold either now, and the caller treats a tree as
 * changed when they held one at the last moment or hold one at this one (a mapping made and
 * dropped between the two needs a writable open whose close is reported, or one that was
 * already held at the last moment).
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
/* A file as /proc/PID/maps names it. */
typedef struct ChangesFile {
        dev_t dev;
        ino_t ino;
} ChangesFile;

/* Whether a process of pids holds a regular file open for writing (a memfd sealed against
 * writes excepted), or maps one shared and writable (any filesystem: the tree's, a memfd's,
 * all are counted). 1, 0, or -errno. The files mapped shared and writable are listed in
 * *ret_mapped (malloc'd, the caller's; NULL when none). */
int changes_writers(const pid_t *pids, size_t n, ChangesFile **ret_mapped, size_t *ret_n_mapped);
