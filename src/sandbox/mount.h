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
        bool noexec_writable; /* nothing on the writable tmpfs may run (an exec policy's allow list) */
        const char *trust_pem; /* a CA certificate (PEM) the sandbox trusts besides the host's, or NULL */
} MountConfig;

/* With trust_pem: SBX_TRUST_BUNDLE holds the host's (or rootfs's) bundle and that CA, and is
 * bound over /etc/ssl/certs/ca-certificates.crt where there is one; SBX_TRUST_CA the CA alone. */
#define SBX_TRUST_BUNDLE "/etc/sbx/ca-certificates.crt"
#define SBX_TRUST_CA "/etc/sbx/sandbox-ca.crt"

/* Builds the root and pivots into it; on failure writes what failed into err. *snap_fd gets
 * an fd of the sandbox's snapshot store: a tmpfs of its own, mounted nowhere (no
 * process of the sandbox can reach it), whose size and inode limits are the snapshot budget.
 * Returns 0 or -errno. */
int mount_build_root(const MountConfig *c, int *snap_fd, char *err, size_t errlen);
