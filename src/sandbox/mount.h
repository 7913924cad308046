/* SPDX-License-Identifier: MIT */
/* Building a sandbox's private root. Runs in the sandbox's pid 1, inside its fresh mount
 * namespace, before any command exists. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct MountConfig {
        const char *staging;  /* an existing host directory to build the root on */
        const char *rootfs;   /* NULL: the host's system directories; else this tree */
        const char *const *layers; /* not NULL: an image's layers, top first (see mount_build_root()) */
        bool network;         /* share the host's resolv.conf */
        uint64_t fs_bytes;    /* writable tmpfs: bytes */
        uint64_t file_count;  /* writable tmpfs: inodes */
        unsigned uid, gid;    /* owner of /home/user */
        uint64_t snap_bytes, snap_inodes; /* the snapshot store's budget */
        bool snap_lazy;       /* no store here: the daemon makes it when first used (box_snap_store()) */
        bool noexec_writable; /* nothing on the writable tmpfs may run (an exec policy's allow list) */
        const char *trust_pem; /* a CA certificate (PEM) the sandbox trusts besides the host's, or NULL */
        /* A shared skeleton (mount_skeleton_make(), made for skeleton_uid/gid) the root is
         * built on when it fits (mount_skeleton_fits()), or -1. Not owned. */
        int skeleton_fd;
        unsigned skeleton_uid, skeleton_gid;
} MountConfig;

/* With trust_pem: SBX_TRUST_BUNDLE holds the host's (or rootfs's) bundle and that CA, and is
 * bound over /etc/ssl/certs/ca-certificates.crt where there is one; SBX_TRUST_CA the CA alone. */
#define SBX_TRUST_BUNDLE "/etc/sbx/ca-certificates.crt"
#define SBX_TRUST_CA "/etc/sbx/sandbox-ca.crt"

/* Builds the root and pivots into it; on failure writes what failed into err. *snap_fd gets
 * an fd of the sandbox's snapshot store: a tmpfs of its own, mounted nowhere (no
 * process of the sandbox can reach it), whose size and inode limits are the snapshot budget;
 * -1 with snap_lazy.
 * Returns 0 or -errno. */
int mount_build_root(const MountConfig *c, int *snap_fd, char *err, size_t errlen);

/* A snapshot store of that budget: its fd (O_CLOEXEC, the caller's) or -errno. */
int mount_snap_store(uint64_t bytes, uint64_t inodes);

/* The skeleton of a root on the host's system directories, made once and shared by the
 * sandboxes it fits instead of a tmpfs of each one's own: a tmpfs mounted nowhere, read-only
 * (its superblock, so every mount of it), holding the directories, files and links the root's
 * mounts go on and the generated /etc (passwd and group for c's uid and gid). Each sandbox's
 * pid 1 mounts a clone of it and only mounts on it. It saves each sandbox a superblock (a
 * per-memory-cgroup shrinker map entry on every cgroup of the host) and its inodes and
 * dentries. Its files belong to the host's root, which no sandbox maps: they show as nobody's,
 * as the host's system directories do. Returns its fd (O_CLOEXEC, the caller's) or -errno
 * with err written. */
int mount_skeleton_make(const MountConfig *c, char *err, size_t errlen);

/* 0 when the skeleton skel still matches the host's system directories and /etc for c,
 * -ESTALE when one of them changed kind (appeared, went, became a symlink or another one),
 * or -errno. */
int mount_skeleton_check(const MountConfig *c, int skel);

/* Whether c's root can be built on c->skeleton_fd: a root on the host's own directories,
 * without a trust store, for the skeleton's ids. */
bool mount_skeleton_fits(const MountConfig *c);
