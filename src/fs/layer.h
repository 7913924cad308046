/* SPDX-License-Identifier: MIT */
/* Forks in layers: read-only layers that hold a sandbox's writable trees as they were at a
 * fork, each built from the one before with only what changed, and the overlay that gives a
 * fork those layers under an upper tmpfs of its own (see docs/ARCHITECTURE.md, "Forks in
 * layers").
 *
 * A layer is a tmpfs of its own, never attached anywhere: an fd of an anonymous mount
 * (fsmount()), owned by whoever holds it; the kernel frees it once the last fd and the last
 * overlay that uses it are gone. Its top holds tmp/, home/ and shm/ (the sandbox's /tmp,
 * /home/user and /dev/shm), with owners as the sandbox sees them (uid 1000, not a host id):
 * each fork sees it through an idmapped mount of its own user namespace.
 *
 * An index describes the trees at the last layer: one entry per path (relative to the
 * layer's top, "home/a/b") with what stat() said of it. A later diff walks the trees again
 * and copies only entries whose signature differs, and turns entries gone into whiteouts.
 * An index read in threshold mode (a fork's own index, whose trees are the overlay) takes an
 * entry as unchanged when its type is the same and its ctime is older than the threshold:
 * the ctime of a file made in the fork's upper tmpfs just before its overlay was mounted,
 * older than any change made through it.
 *
 * Everything here blocks or changes mounts: it runs in job processes (base/job.h) as root,
 * never in the daemon's loop, except layer_tmpfs_new(), which does no I/O. Needs a root
 * daemon: an overlay mounted in a user namespace has neither redirect_dir (a rename of an
 * inherited directory fails with EXDEV) nor index (a hard link splits on copy-up). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "fs/tree.h"

/* A fresh tmpfs as an anonymous mount; *ret_fd gets its fd (O_CLOEXEC). Returns 0 or -errno. */
int layer_tmpfs_new(uint64_t bytes, uint64_t inodes, int *ret_fd);

typedef struct LayerDiff {
        int root;            /* O_PATH fd of the sandbox's / */
        int layer;           /* the new layer's top (layer_tmpfs_new()), empty */
        int old_index;       /* memfd of the index at the last layer, -1 if none */
        int64_t threshold;   /* old_index in threshold mode (ns), 0 for exact signatures */
        int new_index;       /* empty memfd: the index of the trees now */
        const TreeIds *ids;  /* host ids to ids inside (owners in the layer) */
        /* Regular files whose bytes may have changed with no trace in their stat (a write
         * through a shared mapping: fs/changes.h), copied whatever the index says:
         * writers: some file is open for writing now (changes_fs_writers()); those are asked
         * one by one when probe_leases (tmpfs), else every one is copied unless
         * touched_since covers them; closed (sorted) / closed_all: the files closed after
         * writing since the index was taken (all: not known which); touched_since (ns, 0
         * none): every file whose ctime is not older (a fork's overlay: whatever it wrote
         * itself since its birth is in its upper with a newer ctime). */
        bool writers, probe_leases;
        const ino_t *closed;
        size_t n_closed;
        bool closed_all;
        int64_t touched_since;
} LayerDiff;

typedef struct LayerDiffStats {
        uint64_t entries; /* in the trees now */
        uint64_t copied;  /* entries copied into the layer (directories on the way included) */
        uint64_t whiteouts;
        uint64_t bytes;   /* of regular files copied */
} LayerDiffStats;

/* Walks the sandbox's three writable trees, copies into d->layer what differs from
 * d->old_index (everything when there is none), with a whiteout for each entry gone, and
 * writes the trees' index to d->new_index. Sockets and device nodes are left out, as a copy
 * does. Returns 0 or -errno (-ELOOP past SBX_LAYER_MAX_DEPTH levels) with err saying what. */
int layer_diff(const LayerDiff *d, LayerDiffStats *st, char *err, size_t errlen);

typedef struct LayerMount {
        pid_t init_pid;      /* the fork's pid 1: its mount and user namespaces */
        int root;            /* O_PATH fd of the fork's / */
        const int *layers;   /* layer tops, the most recent first */
        size_t n_layers;
        int upper;           /* the fork's upper tmpfs (layer_tmpfs_new()), empty */
} LayerMount;

/* Mounts over the fork's /tmp, /home/user and /dev/shm the overlay of the layers under its
 * upper (redirect_dir, index and xino on), each layer idmapped with the fork's user
 * namespace, with the flags its /tmp had (nosuid, nodev, noexec). What the fork had there is
 * emptied first. *ret_threshold gets the ctime (ns) for the fork's index in threshold mode.
 * Returns 0 or -errno with err saying what. */
int layer_mount(const LayerMount *m, int64_t *ret_threshold, char *err, size_t errlen);

/* Takes the overlays off the sandbox's three directories (pid 1 init_pid), uncovering its
 * own tmpfs. Returns 0 or -errno. */
int layer_unmount(pid_t init_pid, char *err, size_t errlen);
