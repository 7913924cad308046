/* SPDX-License-Identifier: MIT */
/* The public files API: each call jailed in the sandbox's root with the sandbox user's
 * identity (fs/files.c does the work). A call never waits: before the root is built it
 * fails with -EAGAIN (sbx_sandbox_on_ready() says when to try), and while an operation
 * copies or replaces the tree, changes fail with -EBUSY. */
#include <errno.h>
#include <stdlib.h>
#include "fs/files.h"
#include "session/sandbox.h"

/* The jail of sb, or -EAGAIN before its root is built, -ESRCH when it never will be. */
static int fs_ctx(SbxSandbox *sb, FsCtx *ret) {
        int state = sandbox_setup_state(sb);
        if (state == 0)
                return -EAGAIN;
        const Box *b = sandbox_box(sb);
        if (state < 0 || b->root_fd < 0)
                return -ESRCH;
        *ret = (FsCtx){ .root = b->root_fd, .uid = b->host_uid, .gid = b->host_gid, .writable = b->writable_dev };
        return 0;
}

/* The same for a call that changes the tree. */
static int fs_ctx_write(SbxSandbox *sb, FsCtx *ret) {
        return sandbox_tree_busy(sb) ? -EBUSY : fs_ctx(sb, ret);
}

int sbx_file_read(SbxSandbox *sb, const char *path, uint64_t offset, uint64_t length, uint8_t **ret_data,
                  size_t *ret_len, uint64_t *ret_size) {
        FsCtx c;
        int r = fs_ctx(sb, &c);
        return r < 0 ? r : fs_read(&c, path, offset, length, ret_data, ret_len, ret_size);
}

int sbx_file_write(SbxSandbox *sb, const char *path, const void *data, size_t len, int mode, bool append) {
        FsCtx c;
        int r = fs_ctx_write(sb, &c);
        return r < 0 ? r : fs_write(&c, path, data, len, mode, append);
}

int sbx_file_stat(SbxSandbox *sb, const char *path, SbxFileInfo *ret) {
        FsCtx c;
        int r = fs_ctx(sb, &c);
        return r < 0 ? r : fs_stat(&c, path, ret);
}

int sbx_file_list(SbxSandbox *sb, const char *path, unsigned depth, SbxFileInfo **ret, size_t *ret_n) {
        FsCtx c;
        int r = fs_ctx(sb, &c);
        return r < 0 ? r : fs_list(&c, path, depth, ret, ret_n);
}

int sbx_file_mkdir(SbxSandbox *sb, const char *path, bool parents) {
        FsCtx c;
        int r = fs_ctx_write(sb, &c);
        return r < 0 ? r : fs_mkdir(&c, path, parents);
}

int sbx_file_remove(SbxSandbox *sb, const char *path, bool recursive) {
        FsCtx c;
        int r = fs_ctx_write(sb, &c);
        return r < 0 ? r : fs_remove(&c, path, recursive);
}

int sbx_file_rename(SbxSandbox *sb, const char *from, const char *to) {
        FsCtx c;
        int r = fs_ctx_write(sb, &c);
        return r < 0 ? r : fs_rename(&c, from, to);
}

void sbx_file_info_clear(SbxFileInfo *i) { fs_info_clear(i); }

void sbx_file_list_free(SbxFileInfo *v, size_t n) {
        for (size_t i = 0; i < n; i++)
                fs_info_clear(&v[i]);
        free(v);
}
