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
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "base/limits.h"
#include "sbx/sbx.h"

/* A normalized path: a client's, with "/home/user/" in front at most. */
#define FS_ABS_BYTES (SBX_MAX_FILES_PATH_BYTES + 16)

typedef struct FsCtx {
        int root;        /* O_PATH fd of the sandbox's / */
        uid_t uid;       /* the sandbox user as the host sees it */
        gid_t gid;
        dev_t writable;  /* st_dev of the sandbox's writable tmpfs: the only place changed */
        uint64_t fs_bytes, file_count; /* that tmpfs's limits, for the words of ENOSPC */
        /* Gets why a call failed, in words that name the path as the caller gave it, where
         * the errno alone would mislead or say too little (left as it is otherwise). */
        char *err;
        size_t errlen;
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
/* Writes a file atomically (an upload of one part), or appends. Missing parents are
 * created. mode < 0: 0644. A failed append cuts the file back to its old size. Returns 0 or
 * -errno. */
int fs_write(const FsCtx *c, const char *path, const void *data, size_t len, int mode, bool append);

/* A file written in parts, all or nothing: the parts go to a temp file without a name
 * (O_TMPFILE) in the target's directory's filesystem, so no command, fork, snapshot or export
 * sees it half written; the commit links it under a random dot name (".sbx-<random>.tmp") and
 * renames that over the target at once. Failing or aborting closes it, which gives its space
 * back. The fds keep the directory and the file themselves: what a command renames or swaps
 * in meanwhile is never written through. */
typedef struct FsUpload {
        int dir;                 /* O_PATH fd of the target's directory */
        int fd;                  /* the temp file, nameless (O_TMPFILE); -1 once the upload is over */
        mode_t mode;             /* given to the file at commit */
        char tmp[32];            /* the name it has for the instant of the commit's link + rename */
        char base[NAME_MAX + 1]; /* the target's name in dir */
} FsUpload;
#define FS_UPLOAD_NONE ((FsUpload){ .dir = -1, .fd = -1 })

/* Creates the temp file for path (and path's missing parents). Refuses at once what commit
 * would (a directory or mount point at path, a read-only place). Returns 0 or -errno. */
int fs_upload_begin(const FsCtx *c, const char *path, int mode, FsUpload *ret);
/* Appends a part; path is the target as the caller gave it, for messages. On failure the
 * upload is still open: the caller aborts it. Returns 0 or -errno. */
int fs_upload_write(const FsCtx *c, FsUpload *u, const void *data, size_t len, const char *path);
/* Puts the temp file in place of the target (whatever it is, a symlink included: never
 * followed). On failure nothing of it is left. Either way the upload is over. */
int fs_upload_commit(const FsCtx *c, FsUpload *u, const char *path);
/* Drops the temp file and closes the upload; nothing for one that is over. */
void fs_upload_abort(FsUpload *u);
int fs_stat(const FsCtx *c, const char *path, FsInfo *ret);
/* Entries below path, depth levels deep (1: the directory's own entries; at most
 * SBX_MAX_LIST_DEPTH), SBX_MAX_LIST_ENTRIES of them at most (-E2BIG past that). */
int fs_list(const FsCtx *c, const char *path, unsigned depth, FsInfo **ret, size_t *ret_n);
int fs_mkdir(const FsCtx *c, const char *path, bool parents);
int fs_remove(const FsCtx *c, const char *path, bool recursive);
int fs_rename(const FsCtx *c, const char *from, const char *to);

/* The absolute form of a client's path (relative ones start at /home/user, trailing slashes
 * and "/." go). Returns 0, -EINVAL (empty) or -ENAMETOOLONG. */
int fs_abs_path(const char *path, char out[FS_ABS_BYTES]);
/* For a watch: opens directory path for reading, as the sandbox's user, and adds it to the
 * inotify instance ifd with mask (inotify wants read permission: the user's counts). Only a
 * directory of the writable tmpfs is taken (-ENOTDIR, -EROFS, in words, for the rest); follow
 * says whether path's last component may be a symlink (a client's path; never a directory a
 * walk found). Returns the directory's fd, with its watch descriptor in *ret_wd, or -errno.
 * ifd < 0: only opens it (a walk reading it). */
int fs_watch_dir(const FsCtx *c, const char *path, bool follow, int ifd, uint32_t mask, int *ret_wd);
