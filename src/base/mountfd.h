/* SPDX-License-Identifier: MIT */
/* The new mount API (fsopen, fsconfig, fsmount, open_tree, move_mount, mount_setattr) as
 * plain calls, and a tmpfs mounted nowhere: the pieces pid 1's root (sandbox/mount.c) and the
 * fork layers (fs/layer.c) are built from. A mount made this way belongs to whoever holds its
 * fd; the kernel frees it once the last fd and the last mount using it are gone. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <linux/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

static inline int sys_fsopen(const char *fs, unsigned flags) { return (int)syscall(SYS_fsopen, fs, flags); }
static inline int sys_fsconfig(int fd, unsigned cmd, const char *key, const void *value, int aux) {
        return (int)syscall(SYS_fsconfig, fd, cmd, key, value, aux);
}
static inline int sys_fspick(int dfd, const char *path, unsigned flags) {
        return (int)syscall(SYS_fspick, dfd, path, flags);
}
static inline int sys_fsmount(int fd, unsigned flags, unsigned attrs) {
        return (int)syscall(SYS_fsmount, fd, flags, attrs);
}
static inline int sys_open_tree(int dfd, const char *path, unsigned flags) {
        return (int)syscall(SYS_open_tree, dfd, path, flags);
}
static inline int sys_move_mount(int from, const char *fp, int to, const char *tp, unsigned flags) {
        return (int)syscall(SYS_move_mount, from, fp, to, tp, flags);
}
static inline int sys_mount_setattr(int dfd, const char *path, unsigned flags, struct mount_attr *a) {
        return (int)syscall(SYS_mount_setattr, dfd, path, flags, a, sizeof *a);
}

/* A tmpfs named source (what df shows), of bytes and inodes, root mode (octal text), mounted
 * nowhere with attrs (MOUNT_ATTR_*); inode32: 32-bit inode numbers (an overlay's xino needs
 * free high bits). Returns the fd of its root (O_CLOEXEC) or -errno. */
int tmpfs_detached(const char *source, const char *mode, uint64_t bytes, uint64_t inodes, bool inode32,
                   unsigned attrs);
