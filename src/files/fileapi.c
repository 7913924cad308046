/* SPDX-License-Identifier: MIT */
/* The public files API: each call jailed in the sandbox's root with the sandbox user's
 * identity (fs/files.c does the work). A call never waits: before the root is built it
 * fails with -EAGAIN (sbx_sandbox_on_ready() says when to try), and while an operation
 * copies or replaces the tree, changes fail with -EBUSY.
 *
 * Uploads (files written in parts) belong to their sandbox: an observer of it keeps them, so
 * that freeing the sandbox removes their temp files and closes their fds. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/limits.h"
#include "base/list.h"
#include "base/macro.h"
#include "base/util.h"
#include "fs/files.h"
#include "files/fileapi.h"
#include "session/context.h"
#include "session/sandbox.h"

/* Per thread, as errno is: the library may drive contexts in several threads. */
static _Thread_local char file_error[SBX_FILE_ERROR_BYTES];

const char *sbx_file_error(void) { return file_error; }

int fileapi_fail(int r, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(file_error, sizeof file_error, fmt, ap);
        va_end(ap);
        return r;
}

int fileapi_ctx(SbxSandbox *sb, FsCtx *ret) {
        file_error[0] = 0;
        int state = sandbox_setup_state(sb);
        if (state == 0)
                return -EAGAIN;
        const Box *b = sandbox_box(sb);
        if (state < 0 || b->root_fd < 0)
                return -ESRCH;
        const SbxLimits *l = sbx_sandbox_limits(sb);
        *ret = (FsCtx){ .root = b->root_fd, .uid = b->host_uid, .gid = b->host_gid, .writable = b->writable_dev,
                        .fs_bytes = l->fs_bytes, .file_count = l->file_count,
                        .err = file_error, .errlen = sizeof file_error };
        return 0;
}

/* The same for a call that changes path. */
static int fs_ctx_write(SbxSandbox *sb, const char *path, FsCtx *ret) {
        if (sandbox_tree_busy(sb))
                return fileapi_fail(-EBUSY, "cannot change %s now: the sandbox's files are being copied or replaced (a fork, "
                            "snapshot, restore or import): try again when it is done", path);
        return fileapi_ctx(sb, ret);
}

int sbx_file_read(SbxSandbox *sb, const char *path, uint64_t offset, uint64_t length, uint8_t **ret_data,
                  size_t *ret_len, uint64_t *ret_size) {
        FsCtx c;
        int r = fileapi_ctx(sb, &c);
        return r < 0 ? r : fs_read(&c, path, offset, length, ret_data, ret_len, ret_size);
}

int sbx_file_write(SbxSandbox *sb, const char *path, const void *data, size_t len, int mode, bool append) {
        FsCtx c;
        int r = fs_ctx_write(sb, path, &c);
        return r < 0 ? r : fs_write(&c, path, data, len, mode, append);
}

int sbx_file_stat(SbxSandbox *sb, const char *path, SbxFileInfo *ret) {
        FsCtx c;
        int r = fileapi_ctx(sb, &c);
        return r < 0 ? r : fs_stat(&c, path, ret);
}

int sbx_file_list(SbxSandbox *sb, const char *path, unsigned depth, SbxFileInfo **ret, size_t *ret_n) {
        FsCtx c;
        int r = fileapi_ctx(sb, &c);
        return r < 0 ? r : fs_list(&c, path, depth, ret, ret_n);
}

int sbx_file_mkdir(SbxSandbox *sb, const char *path, bool parents) {
        FsCtx c;
        int r = fs_ctx_write(sb, path, &c);
        return r < 0 ? r : fs_mkdir(&c, path, parents);
}

int sbx_file_remove(SbxSandbox *sb, const char *path, bool recursive) {
        FsCtx c;
        int r = fs_ctx_write(sb, path, &c);
        return r < 0 ? r : fs_remove(&c, path, recursive);
}

int sbx_file_rename(SbxSandbox *sb, const char *from, const char *to) {
        FsCtx c;
        int r = fs_ctx_write(sb, from, &c);
        return r < 0 ? r : fs_rename(&c, from, to);
}

void sbx_file_info_clear(SbxFileInfo *i) { fs_info_clear(i); }

void sbx_file_list_free(SbxFileInfo *v, size_t n) {
        for (size_t i = 0; i < n; i++)
                fs_info_clear(&v[i]);
        free(v);
}

/* ---------------------------------------------------------------- uploads */

typedef struct UploadSet UploadSet;

struct SbxUpload {
        SbxUpload *next, *prev;
        SbxUpload *all_next, *all_prev; /* SandboxHost.uploads */
        SandboxHost *host;
        UploadSet *set;
        const void *owner;
        char id[33];
        char *path; /* as the caller gave it: messages name it */
        FsUpload fs;
};

/* A sandbox's open uploads, at most SBX_MAX_UPLOADS. */
struct UploadSet {
        SandboxObserver o;
        SbxSandbox *sb;
        SbxUpload *head;
        unsigned n;
};

static void uploads_freeing(SandboxObserver *o, SbxSandbox *sb) {
        UploadSet *set = container_of(o, UploadSet, o);
        while (set->head)
                sbx_upload_free(set->head);
        free(set);
}

static const SandboxObserverOps upload_ops = { .freeing = uploads_freeing };

static UploadSet *upload_set(SbxSandbox *sb, bool create) {
        SandboxObserver *o = sandbox_observer_state(sb, &upload_ops, sizeof(UploadSet), offsetof(UploadSet, o), create);
        UploadSet *set = o ? container_of(o, UploadSet, o) : NULL;
        if (set)
                set->sb = sb;
        return set;
}

int sbx_upload_begin(SbxSandbox *sb, const char *path, int mode, const void *owner, SbxUpload **ret) {
        FsCtx c;
        int r = fs_ctx_write(sb, path, &c);
        if (r < 0)
                return r;
        UploadSet *set = upload_set(sb, true);
        if (!set)
                return -ENOMEM;
        if (set->n >= SBX_MAX_UPLOADS)
                return fileapi_fail(-EMFILE, "cannot begin an upload of %s: this sandbox has %u uploads open, the most it may "
                            "(commit or abort one first)", path, SBX_MAX_UPLOADS);
        _cleanup_free_ SbxUpload *u = calloc(1, sizeof *u);
        if (!u || !(u->path = strdup(path)))
                return -ENOMEM;
        u->fs = FS_UPLOAD_NONE;
        if (sandbox_fds_take(sb, SBX_UPLOAD_FDS) < 0) {
                free(u->path);
                return fileapi_fail(-EMFILE, "cannot begin an upload of %s: the server holds as many files open for "
                                    "this sandbox as it may (commit or abort an upload, or close connections to its "
                                    "ports, first)", path);
        }
        if ((r = random_hex(u->id, 16)) < 0 || (r = fs_upload_begin(&c, path, mode, &u->fs)) < 0) {
                sandbox_fds_give(sb, SBX_UPLOAD_FDS);
                free(u->path);
                return r;
        }
        u->set = set;
        u->owner = owner;
        LIST_LINK(set->head, u);
        u->host = sandbox_host(sb);
        u->all_prev = NULL;
        u->all_next = u->host->uploads;
        if (u->all_next)
                u->all_next->all_prev = u;
        u->host->uploads = u;
        set->n++;
        *ret = TAKE_PTR(u);
        return 0;
}

SbxUpload *sbx_upload_find(SbxSandbox *sb, const char *id) {
        UploadSet *set = upload_set(sb, false);
        for (SbxUpload *u = set ? set->head : NULL; u; u = u->next)
                if (strcmp(u->id, id) == 0)
                        return u;
        return NULL;
}

const char *sbx_upload_id(const SbxUpload *u) { return u->id; }
const char *sbx_upload_path(const SbxUpload *u) { return u->path; }
const void *sbx_upload_owner(const SbxUpload *u) { return u->owner; }

/* A part refused because the tree is being copied or replaced (-EBUSY) or not built yet
 * (-EAGAIN) changed nothing: the upload stays, for the client to send it again. Any other
 * failure ends it. */
int sbx_upload_write(SbxUpload *u, const void *data, size_t len) {
        FsCtx c;
        int r = fs_ctx_write(u->set->sb, u->path, &c);
        if (r == -EBUSY || r == -EAGAIN)
                return r;
        if (r == 0)
                r = fs_upload_write(&c, &u->fs, data, len, u->path);
        if (r < 0)
                sbx_upload_free(u);
        return r;
}

int sbx_upload_commit(SbxUpload *u) {
        FsCtx c;
        int r = fs_ctx_write(u->set->sb, u->path, &c);
        if (r == -EBUSY || r == -EAGAIN)
                return r;
        if (r == 0)
                r = fs_upload_commit(&c, &u->fs, u->path);
        sbx_upload_free(u);
        return r;
}

SbxUpload *sbx_upload_free(SbxUpload *u) {
        if (!u)
                return NULL;
        LIST_UNLINK(u->set->head, u);
        u->set->n--;
        if (u->all_prev)
                u->all_prev->all_next = u->all_next;
        else
                u->host->uploads = u->all_next;
        if (u->all_next)
                u->all_next->all_prev = u->all_prev;
        fs_upload_abort(&u->fs);
        sandbox_fds_give(u->set->sb, SBX_UPLOAD_FDS);
        free(u->path);
        free(u);
        return NULL;
}

void sbx_upload_free_owned(SbxSandbox *sb, const void *owner) {
        UploadSet *set = upload_set(sb, false);
        for (SbxUpload *u = set ? set->head : NULL, *next; u; u = next) {
                next = u->next;
                if (u->owner == owner)
                        sbx_upload_free(u);
        }
}

static void upload_free_owned_all(SandboxHost *host, const void *owner) {
        for (SbxUpload *u = host->uploads, *next; u; u = next) {
                next = u->all_next;
                if (u->owner == owner)
                        sbx_upload_free(u);
        }
}

void sbx_context_upload_free_owned(SbxContext *ctx, const void *owner) { upload_free_owned_all(context_host(ctx), owner); }
