/* SPDX-License-Identifier: MIT */
/* The files API: reading and changing a sandbox's filesystem from outside, jailed.
 *
 * The jail is the kernel's: every path is resolved with openat2(RESOLVE_IN_ROOT |
 * RESOLVE_NO_MAGICLINKS) against a directory fd of the sandbox's root (sent by its pid 1), so
 * no "..", absolute or relative symlink, or /proc magic link can leave it; the last component
 * of anything that is changed is handled relative to an fd of its parent (never re-resolved),
 * so a symlink swapped in meanwhile changes nothing. Every operation runs with the file-system
 * identity of the sandbox's user (setfsuid/setfsgid): permissions, read-only mounts and the
 * tmpfs size and inode limits apply exactly as to a command, and what is created belongs to
 * the user. setfsuid() leaves the daemon's effective uid and capabilities in place, and some
 * kernel files (procfs, sysctls) check those, so on top: nothing outside the sandbox's
 * writable tmpfs is ever changed (checked on the parent directory's fd, and the last
 * component is never followed when writing), and procfs and devpts are never read.
 * Relative paths are relative to /home/user. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "base/limits.h"
#include "sbx/sbx.h"

typedef struct FsCtx {
        int root;        /* O_PATH fd of the sandbox's / */
        uid_t uid;       /* the sandbox user as the host sees it */
        gid_t gid;
        dev_t writable;  /* st_dev of the sandbox's writable tmpfs: the only place changed */
} FsCtx;

/* The public SbxFileInfo, so the API hands results over without copying. */
typedef SbxFileInfo FsInfo;
typedef SbxFileType FsType;
#define FS_FILE SBX_FILE_REGULAR
#define FS_DIR SBX_FILE_DIR
#define FS_SYMLINK SBX_FILE_SYMLINK
#define FS_OTHER SBX_FILE_OTHER


const char *fs_type_name(FsType t);
void fs_info_clear(FsInfo *i);

/* Reads up to `length` bytes (0: the rest of the file, which must then fit in SBX_MAX_FILE_READ_BYTES)
 * from `offset`. Returns 0 or -errno (-EFBIG: too large for one call, -EINVAL: not a
 * regular file). */
int fs_read(const FsCtx *c, const char *path, uint64_t offset, uint64_t length, uint8_t **ret,
            size_t *ret_len, uint64_t *ret_size);
/* Writes a file atomically (temp file + rename), or appends. Missing parents are created.
 * mode < 0: 0644. Returns 0 or -errno. */
int fs_write(const FsCtx *c, const char *path, const void *data, size_t len, int mode, bool append);
int fs_stat(const FsCtx *c, const char *path, FsInfo *ret);
/* Entries below path, depth levels deep (1: the directory's own entries; at most
 * SBX_MAX_LIST_DEPTH), SBX_MAX_LIST_ENTRIES of them at most (-E2BIG past that). */
int fs_list(const FsCtx *c, const char *path, unsigned depth, FsInfo **ret, size_t *ret_n);
int fs_mkdir(const FsCtx *c, const char *path, bool parents);
int fs_remove(const FsCtx *c, const char *path, bool recursive);
int fs_rename(const FsCtx *c, const char *from, const char *to);
