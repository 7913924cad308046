/* SPDX-License-Identifier: MIT */
/* Handlers for the files API (files.*): paths as the sandbox sees them, data as base64, or
 * on the Unix socket in a memfd sent with the request. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/text.h"
#include "base/util.h"
#include "server/conn.h"
#include "server/handler.h"
#include "methods/methods.h"

/* A path param: a string without NUL bytes. */
static int param_path(Req *r, const char *key, const char **ret, RpcError *e) {
        size_t len;
        if (param_string(r->params, key, true, ret, &len, e) < 0)
                return -1;
        if (strlen(*ret) != len || len == 0)
                return rpc_fail(e, RPC_INVALID_PARAMS, "%s must be a non-empty path without NUL bytes", key);
        return 0;
}

/* File names are bytes; JSON strings are UTF-8. Names that are not get '?' for each bad byte
 * and "lossy": true (the bytes themselves are reachable through a command). */
static json_t *info_json(SbxFileInfo *i) {
        static const char *const types[] = { "file", "dir", "symlink", "other" };
        /* Every one is sanitised: no short-circuit. */
        bool lossy = utf8_sanitize(i->name);
        lossy = utf8_sanitize(i->path) || lossy;
        lossy = (i->target && utf8_sanitize(i->target)) || lossy;
        json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:i, s:o}", "name", i->name, "path", i->path, "type",
                              types[i->type <= SBX_FILE_OTHER ? i->type : SBX_FILE_OTHER], "size",
                              (json_int_t)i->size, "mode", (int)i->mode, "mtime", handler_time_json((uint64_t)i->mtime_ms));
        if (o && i->target)
                json_object_set_new(o, "target", json_string(i->target));
        if (o && lossy)
                json_object_set_new(o, "lossy", json_true());
        return o;
}

/* A failed call: the library's words when it has them (they name the path as the client
 * gave it, and the real cause), else the errno's and path. */
static int files_fail(RpcError *e, int rr, const char *path) {
        const char *why = sbx_file_error();
        if (!*why)
                return rpc_fail_errno(e, rr, path);
        const char *name = strerrorname_np(rr < 0 ? -rr : EIO);
        return rpc_fail(e, RPC_SANDBOX_ERROR, "%s: %s", name ? name : "EIO", why);
}

/* The answer of a method that only succeeds or fails on path. */
static int ok_or_fail(int rr, const char *path, json_t **ret, RpcError *e) {
        if (rr < 0)
                return files_fail(e, rr, path);
        *ret = handler_ok_json();
        return 0;
}

/* The memfd a request sent for its bytes (`dataFd`, `toFd`): the connection keeps only files of
 * shmem (a memfd, or a tmpfs file), the only ones F_GET_SEALS answers, sure never to make the
 * loop wait where a FUSE file or a pipe could. Returns the fd or -1 with e set. */
static int request_memfd(Req *r, const char *key, RpcError *e) {
        int fd = conn_take_fd(r->conn);
        if (fd == -EINVAL)
                return rpc_fail(e, RPC_INVALID_PARAMS, "%s: the fd sent is not a memfd (memfd_create)", key);
        if (fd < 0)
                return rpc_fail(e, RPC_INVALID_PARAMS, "%s: no fd came with this request (send a memfd with the "
                                "request's line, SCM_RIGHTS on the Unix socket)", key);
        return fd;
}

/* files.read's answer into a memfd: its bytes from offset 0, its size theirs. */
static int put_in_memfd(Req *r, const uint8_t *data, size_t n, RpcError *e) {
        _cleanup_close_ int fd = request_memfd(r, "toFd", e);
        if (fd < 0)
                return -1;
        for (size_t done = 0; done < n;) {
                ssize_t k = pwrite(fd, data + done, n - done, (off_t)done);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "toFd: cannot write the memfd: %s",
                                        k < 0 ? strerror(errno) : "no room");
                done += (size_t)k;
        }
        if (ftruncate(fd, (off_t)n) < 0)
                return rpc_fail(e, RPC_INVALID_PARAMS, "toFd: cannot size the memfd: %s", strerror(errno));
        return 0;
}

static int m_files_read(Req *r, json_t **ret, RpcError *e) {
        const char *path;
        uint64_t off = 0, len = 0, size;
        uint8_t *data;
        size_t n;
        bool to_fd = false;
        if (param_path(r, "path", &path, e) < 0 || param_u64(r->params, "offset", false, UINT64_MAX >> 1, &off, e) < 0 ||
            param_u64(r->params, "length", false, UINT64_MAX >> 1, &len, e) < 0 ||
            param_bool(r->params, "toFd", &to_fd, e) < 0)
                return -1;
        int rr = sbx_file_read(r->sb->sb, path, off, len, &data, &n, &size);
        if (rr == -EFBIG)
                return rpc_fail(e, RPC_SANDBOX_ERROR, "EFBIG: %s is too large for one read: read it in chunks with "
                                "offset and length (at most %u bytes each)", path, SBX_MAX_FILE_READ_BYTES);
        if (rr < 0)
                return files_fail(e, rr, path);
        if (to_fd) {
                rr = put_in_memfd(r, data, n, e);
                free(data);
                if (rr < 0)
                        return -1;
                *ret = json_pack("{s:I, s:I, s:I}", "size", (json_int_t)size, "offset", (json_int_t)MIN(off, size),
                                 "length", (json_int_t)n);
                return 0;
        }
        size_t blen;
        char *b = b64_encode(data, n, &blen);
        free(data);
        if (!b)
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        /* base64 is ASCII: no need for jansson to check it character by character. */
        *ret = json_pack("{s:o, s:I, s:I, s:I}", "data", json_stringn_nocheck(b, blen), "size", (json_int_t)size,
                         "offset", (json_int_t)MIN(off, size), "length", (json_int_t)n);
        free(b);
        return 0;
}

/* Whether the request gives param key (null is not giving it, as for the dispatcher). */
static bool has_param(const Req *r, const char *key) {
        json_t *v = json_object_get(r->params, key);
        return v && !json_is_null(v);
}

/* The bytes of the memfd a request sent (`dataFd`), read whole into *ret (malloc'd). */
static int data_from_memfd(Req *r, uint8_t **ret, size_t *ret_len, RpcError *e) {
        _cleanup_close_ int fd = request_memfd(r, "dataFd", e);
        struct stat st;
        if (fd < 0)
                return -1;
        if (fstat(fd, &st) < 0)
                return rpc_fail(e, RPC_INVALID_PARAMS, "dataFd: %s", strerror(errno));
        if ((uint64_t)st.st_size > SBX_MAX_FILE_FD_BYTES)
                return rpc_fail(e, RPC_INVALID_PARAMS, "dataFd: the memfd holds %lld bytes, more than the %u one "
                                "request may carry (send an upload in parts)", (long long)st.st_size, SBX_MAX_FILE_FD_BYTES);
        size_t n = (size_t)st.st_size;
        _cleanup_free_ uint8_t *buf = malloc(n ? n : 1);
        if (!buf)
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        size_t done = 0;
        /* The sender may shrink it meanwhile: what it holds at the end of the reads is taken. */
        while (done < n) {
                ssize_t k = pread(fd, buf + done, n - done, (off_t)done);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "dataFd: cannot read the memfd: %s", strerror(errno));
                if (k == 0)
                        break;
                done += (size_t)k;
        }
        *ret = TAKE_PTR(buf);
        *ret_len = done;
        return 0;
}

/* The decoded `data` param into *ret (malloc'd; NULL when absent and not required), or the
 * bytes of the memfd sent with the request when `dataFd` is true. */
static int param_data(Req *r, bool required, uint8_t **ret, size_t *ret_len, RpcError *e) {
        const char *b64 = NULL;
        size_t b64_len = 0;
        bool from_fd = false;
        *ret = NULL;
        *ret_len = 0;
        if (param_bool(r->params, "dataFd", &from_fd, e) < 0)
                return -1;
        if (from_fd) {
                if (has_param(r, "data"))
                        return rpc_fail(e, RPC_INVALID_PARAMS, "data and dataFd do not go together: the bytes are in "
                                        "one or the other");
                return data_from_memfd(r, ret, ret_len, e);
        }
        if (param_string(r->params, "data", required, &b64, &b64_len, e) < 0)
                return -1;
        if (b64 && !(*ret = b64_decode(b64, b64_len, ret_len)))
                return errno == ENOMEM ? rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory")
                                       : rpc_fail(e, RPC_INVALID_PARAMS, "data must be base64");
        return 0;
}

/* files.write's `upload` param. */
typedef enum UploadStep { UP_NONE, UP_BEGIN, UP_APPEND, UP_COMMIT, UP_ABORT, _UP_MAX } UploadStep;

static int param_upload(Req *r, UploadStep *ret, RpcError *e) {
        static const char *const names[_UP_MAX] = { NULL, "begin", "append", "commit", "abort" };
        const char *v = NULL;
        *ret = UP_NONE;
        if (param_string(r->params, "upload", false, &v, NULL, e) < 0)
                return -1;
        for (UploadStep i = UP_BEGIN; v && i < _UP_MAX; i++)
                if (strcmp(v, names[i]) == 0) {
                        *ret = i;
                        return 0;
                }
        if (v)
                return rpc_fail(e, RPC_INVALID_PARAMS, "upload must be \"begin\", \"append\", \"commit\" or \"abort\"");
        return 0;
}

/* Says, after e's message, that the upload failed whole. */
static int upload_ended(RpcError *e) {
        size_t n = strlen(e->message);
        snprintf(e->message + n, sizeof e->message - n, " (the upload is aborted: nothing of it was written)");
        return -1;
}

static int upload_begin(Req *r, const char *path, int mode, json_t **ret, RpcError *e) {
        uint8_t *data;
        size_t n;
        SbxUpload *u;
        if (has_param(r, "uploadId"))
                return rpc_fail(e, RPC_INVALID_PARAMS, "upload \"begin\" takes no uploadId: its answer gives one");
        if (param_data(r, true, &data, &n, e) < 0)
                return -1;
        int rr = sbx_upload_begin(r->sb->sb, path, mode, r->conn, &u);
        if (rr == 0 && (rr = sbx_upload_write(u, data, n)) < 0 && (rr == -EBUSY || rr == -EAGAIN))
                sbx_upload_free(u); /* no uploadId was given: it cannot be sent again */
        free(data);
        if (rr < 0)
                return files_fail(e, rr, path);
        *ret = json_pack("{s:b, s:s}", "ok", 1, "uploadId", sbx_upload_id(u));
        return 0;
}

/* A later step of an upload this connection began. A part refused because the sandbox's files
 * are being copied or replaced (EBUSY) changed nothing and may be sent again; any other failure
 * ends the upload (its temp file removed): a client cannot go on from a part it does not know
 * was written. */
static int upload_next(Req *r, const char *path, UploadStep step, json_t **ret, RpcError *e) {
        const char *id = NULL;
        uint8_t *data = NULL;
        size_t n = 0;
        if (param_string(r->params, "uploadId", false, &id, NULL, e) < 0)
                return -1;
        if (!id)
                return rpc_fail(e, RPC_INVALID_PARAMS, "upload \"%s\" needs the uploadId that \"begin\" answered",
                                json_string_value(json_object_get(r->params, "upload")));
        SbxUpload *u = sbx_upload_find(r->sb->sb, id);
        if (!u || sbx_upload_owner(u) != r->conn)
                return rpc_fail(e, RPC_INVALID_PARAMS, "Unknown uploadId: %.64s (an upload ends with its commit, its "
                                "abort, its first failed request or its connection)", id);
        if (step == UP_ABORT) {
                sbx_upload_free(u);
                *ret = handler_ok_json();
                return 0;
        }
        if (strcmp(sbx_upload_path(u), path) != 0)
                rpc_fail(e, RPC_INVALID_PARAMS, "uploadId %.64s is the upload of %.200s, not of %.200s", id,
                         sbx_upload_path(u), path);
        else if (has_param(r, "mode"))
                rpc_fail(e, RPC_INVALID_PARAMS, "mode goes with upload \"begin\" only");
        else if (param_data(r, true, &data, &n, e) == 0) {
                int rr = sbx_upload_write(u, data, n); /* frees u when it fails but for EBUSY */
                free(data);
                if (rr == -EBUSY || rr == -EAGAIN) {
                        files_fail(e, rr, path);
                        size_t len = strlen(e->message);
                        snprintf(e->message + len, sizeof e->message - len,
                                 " (the upload goes on: nothing of this part was written, send it again)");
                        return -1;
                }
                if (rr == 0 && step == UP_COMMIT) {
                        rr = sbx_upload_commit(u);
                        AUDIT(r->core->audit, "files.write", r->sb, r->conn,
                              audit_outcome(rr, json_pack("{s:s, s:s}", "path", path, "upload", "commit")));
                }
                if (rr < 0) {
                        files_fail(e, rr, path);
                        return upload_ended(e);
                }
                *ret = handler_ok_json();
                return 0;
        }
        sbx_upload_free(u);
        return upload_ended(e);
}

static int m_files_write(Req *r, json_t **ret, RpcError *e) {
        const char *path;
        uint64_t mode = 0;
        bool append = false;
        UploadStep step;
        uint8_t *data;
        size_t n;
        if (param_path(r, "path", &path, e) < 0 || param_u64(r->params, "mode", false, 07777, &mode, e) < 0 ||
            param_bool(r->params, "append", &append, e) < 0 || param_upload(r, &step, e) < 0)
                return -1;
        int m = has_param(r, "mode") ? (int)mode : -1;
        if (step != UP_NONE && append)
                return rpc_fail(e, RPC_INVALID_PARAMS, "append and upload do not go together (an upload's parts "
                                "are appended in order)");
        if (step == UP_BEGIN)
                return upload_begin(r, path, m, ret, e);
        if (step != UP_NONE)
                return upload_next(r, path, step, ret, e);
        if (has_param(r, "uploadId"))
                return rpc_fail(e, RPC_INVALID_PARAMS, "uploadId goes with upload \"append\", \"commit\" or \"abort\"");
        if (param_data(r, true, &data, &n, e) < 0)
                return -1;
        int rr = sbx_file_write(r->sb->sb, path, data, n, m, append);
        free(data);
        AUDIT(r->core->audit, "files.write", r->sb, r->conn,
              audit_outcome(rr, json_pack("{s:s, s:I, s:b}", "path", path, "bytes", (json_int_t)n, "append", append)));
        return ok_or_fail(rr, path, ret, e);
}

static int m_files_list(Req *r, json_t **ret, RpcError *e) {
        const char *path;
        bool recursive = false;
        uint64_t depth = 0;
        SbxFileInfo *v;
        size_t n;
        if (param_path(r, "path", &path, e) < 0 || param_bool(r->params, "recursive", &recursive, e) < 0 ||
            param_u64(r->params, "depth", false, SBX_MAX_LIST_DEPTH, &depth, e) < 0)
                return -1;
        if (!depth)
                depth = recursive ? SBX_MAX_LIST_DEPTH : 1;
        int rr = sbx_file_list(r->sb->sb, path, (unsigned)depth, &v, &n);
        if (rr < 0)
                return files_fail(e, rr, path);
        json_t *list = json_array();
        for (size_t i = 0; i < n; i++) {
                json_t *e1 = info_json(&v[i]);
                if (e1)
                        json_array_append_new(list, e1);
        }
        sbx_file_list_free(v, n);
        *ret = json_pack("{s:o}", "entries", list);
        return 0;
}

static int m_files_stat(Req *r, json_t **ret, RpcError *e) {
        const char *path;
        SbxFileInfo i;
        if (param_path(r, "path", &path, e) < 0)
                return -1;
        int rr = sbx_file_stat(r->sb->sb, path, &i);
        if (rr < 0)
                return files_fail(e, rr, path);
        *ret = info_json(&i);
        sbx_file_info_clear(&i);
        return 0;
}

static int m_files_exists(Req *r, json_t **ret, RpcError *e) {
        const char *path;
        SbxFileInfo i;
        if (param_path(r, "path", &path, e) < 0)
                return -1;
        int rr = sbx_file_stat(r->sb->sb, path, &i);
        if (rr < 0 && rr != -ENOENT && rr != -ENOTDIR)
                return rpc_fail_errno(e, rr, path);
        if (rr == 0)
                sbx_file_info_clear(&i);
        *ret = json_pack("{s:b}", "exists", rr == 0);
        return 0;
}

static int m_files_mkdir(Req *r, json_t **ret, RpcError *e) {
        const char *path;
        bool parents = false;
        if (param_path(r, "path", &path, e) < 0 || param_bool(r->params, "parents", &parents, e) < 0)
                return -1;
        int rr = sbx_file_mkdir(r->sb->sb, path, parents);
        AUDIT(r->core->audit, "files.mkdir", r->sb, r->conn,
              audit_outcome(rr, json_pack("{s:s, s:b}", "path", path, "parents", parents)));
        return ok_or_fail(rr, path, ret, e);
}

static int m_files_rm(Req *r, json_t **ret, RpcError *e) {
        const char *path;
        bool recursive = false;
        if (param_path(r, "path", &path, e) < 0 || param_bool(r->params, "recursive", &recursive, e) < 0)
                return -1;
        int rr = sbx_file_remove(r->sb->sb, path, recursive);
        AUDIT(r->core->audit, "files.rm", r->sb, r->conn,
              audit_outcome(rr, json_pack("{s:s, s:b}", "path", path, "recursive", recursive)));
        return ok_or_fail(rr, path, ret, e);
}

static int m_files_rename(Req *r, json_t **ret, RpcError *e) {
        const char *from, *to;
        if (param_path(r, "from", &from, e) < 0 || param_path(r, "to", &to, e) < 0)
                return -1;
        int rr = sbx_file_rename(r->sb->sb, from, to);
        AUDIT(r->core->audit, "files.rename", r->sb, r->conn,
              audit_outcome(rr, json_pack("{s:s, s:s}", "from", from, "to", to)));
        return ok_or_fail(rr, from, ret, e);
}

#define PARAM_PATH { "path", P_STRING, true, "as the sandbox sees it; relative: from /home/user" }
static const Param p_files_read[] = { PARAM_SANDBOX_ID, PARAM_PATH,
        { "offset", P_INT, false, "first byte (default 0)" },
        { "length", P_INT, false, "bytes at most (default: the rest, which must be at most 4 MiB)" },
        { "toFd", P_BOOL, false, "on the Unix socket: the bytes go into the memfd sent with this request "
          "(SCM_RIGHTS with the request's line), from its offset 0, its size set to theirs; the answer has no data" },
        { 0 } };
static const Param p_files_write[] = { PARAM_SANDBOX_ID, PARAM_PATH,
        { "data", P_STRING, false, "base64 bytes (required but with upload \"abort\" or dataFd); at most what fits the "
          "request line limit (the Python SDK sends 4 MiB parts)" },
        { "dataFd", P_BOOL, false, "on the Unix socket, instead of data: the bytes are those of the memfd sent with "
          "this request (SCM_RIGHTS with the request's line), from offset 0 to its size, at most 8 MiB" },
        { "mode", P_INT, false, "permission bits (default 0644); with an upload, on \"begin\"" },
        { "append", P_BOOL, false, "append instead of replacing atomically: a failed append leaves the file as it "
          "was, but a series of appends is not all or nothing (an upload is)" },
        { "upload", P_STRING, false, "a file in parts, all or nothing: \"begin\" (the first part, answered with an "
          "uploadId), \"append\" (more), \"commit\" (the last part; the file is renamed into place) or \"abort\"" },
        { "uploadId", P_STRING, false, "with upload \"append\", \"commit\" and \"abort\": what \"begin\" answered "
          "(and path as given to it)" },
        { 0 } };
static const Param p_files_list[] = { PARAM_SANDBOX_ID, PARAM_PATH, { "recursive", P_BOOL, false, "descend (depth 64)" },
        { "depth", P_INT, false, "levels to descend (1: the directory's entries)" }, { 0 } };
static const Param p_files_path[] = { PARAM_SANDBOX_ID, PARAM_PATH, { 0 } };
static const Param p_files_mkdir[] = { PARAM_SANDBOX_ID, PARAM_PATH, { "parents", P_BOOL, false, "create missing parents" },
        { 0 } };
static const Param p_files_rm[] = { PARAM_SANDBOX_ID, PARAM_PATH, { "recursive", P_BOOL, false, "remove a directory tree" },
        { 0 } };
static const Param p_files_rename[] = { PARAM_SANDBOX_ID, { "from", P_STRING, true, "existing path" },
        { "to", P_STRING, true, "new path (replaced if it exists)" }, { 0 } };
/* files.write's doc gives the number. */
_Static_assert(SBX_MAX_UPLOADS == 16, "update files.write's doc");
_Static_assert(SBX_MAX_FILE_FD_BYTES == 8U * 1024 * 1024, "update files.write's doc");
#define FILE_INFO "{name, path, type: file|dir|symlink|other, size, mode, mtime, target?}"

const Method server_methods_files[] = {
        { "files.read", m_files_read, M_SANDBOX, p_files_read, "{data (base64), size, offset, length}",
          "Reads a regular file (in chunks of at most 4 MiB for larger ones)." },
        { "files.write", m_files_write, M_SANDBOX, p_files_write, "{ok: true, uploadId? (upload \"begin\")}",
          "Writes a file atomically (temp file + rename), creating missing parents; or appends. A file too large "
          "for one request is an upload: its parts go to a temp file without a name on the target's filesystem "
          "(no command, fork, snapshot or export sees it) that \"commit\" puts in place at once. \"abort\", the "
          "upload's first failed request (the temp file is dropped at once, so the sandbox's space is as before), its connection closing and its sandbox going all end it; "
          "but a part refused with EBUSY (the sandbox's files are being copied or replaced: a fork, snapshot, restore "
          "or import) wrote nothing and may be sent again. An uploadId is for the connection that began it; at most 16 uploads are open per sandbox. A full filesystem is ENOSPC (or EDQUOT) with the path and the limit." },
        { "files.list", m_files_list, M_SANDBOX, p_files_list, "{entries: [" FILE_INFO "]}", "Lists a directory." },
        { "files.stat", m_files_stat, M_SANDBOX, p_files_path, FILE_INFO, "Describes a path (symlinks not followed)." },
        { "files.exists", m_files_exists, M_SANDBOX, p_files_path, "{exists}", "Whether a path exists." },
        { "files.mkdir", m_files_mkdir, M_SANDBOX, p_files_mkdir, "{ok: true}", "Creates a directory." },
        { "files.rm", m_files_rm, M_SANDBOX, p_files_rm, "{ok: true}", "Removes a file, or a directory (tree)." },
        { "files.rename", m_files_rename, M_SANDBOX, p_files_rename, "{ok: true}", "Renames or moves a path." },
        { 0 } };
