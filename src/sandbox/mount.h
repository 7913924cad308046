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
        bool network;         /* share the host's resolv.conf */
        uint64_t fs_bytes;    /* writable tmpfs: bytes */
        uint64_t file_count;  /* writable tmpfs: inodes */
        unsigned uid, gid;    /* owner of /home/user */
} MountConfig;

/* Builds the root and pivots into it; on failure writes what failed into err.
 * Returns 0 or -errno. */
int mount_build_root(const MountConfig *c, char *err, size_t errlen);
