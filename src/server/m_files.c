/* SPDX-License-Identifier: MIT */
/* Handlers for the files API (files.*): paths as the sandbox sees them, data as base64. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/text.h"
#include "server/handler.h"

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

/* The answer of a method that only succeeds or fails on path. */
static int ok_or_errno(int rr, const char *path, json_t **ret, RpcError *e) {
        if (rr < 0)
                return rpc_fail_errno(e, rr, path);
        *ret = handler_ok_json();
        return 0;
}

static int m_files_read(Req *r, json_t **ret, RpcError *e) {
        const char *path;
        uint64_t off = 0, len = 0, size;
        uint8_t *data;
        size_t n;
        if (param_path(r, "path", &path, e) < 0 || param_u64(r->params, "offset", false, UINT64_MAX >> 1, &off, e) < 0 ||
            param_u64(r->params, "length", false, UINT64_MAX >> 1, &len, e) < 0)
                return -1;
        int rr = sbx_file_read(r->sb->sb, path, off, len, &data, &n, &size);
        if (rr == -EFBIG)
                return rpc_fail(e, RPC_SANDBOX_ERROR, "EFBIG: %s is too large for one read: read it in chunks with "
                                "offset and length (at most %u bytes each)", path, SBX_MAX_FILE_READ_BYTES);
        if (rr < 0)
                return rpc_fail_errno(e, rr, path);
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

static int m_files_write(Req *r, json_t **ret, RpcError *e) {
        const char *path, *b64;
        size_t b64_len, n;
        uint64_t mode = 0;
        bool append = false;
        if (param_path(r, "path", &path, e) < 0 || param_string(r->params, "data", true, &b64, &b64_len, e) < 0 ||
            param_u64(r->params, "mode", false, 07777, &mode, e) < 0 || param_bool(r->params, "append", &append, e) < 0)
                return -1;
        uint8_t *data = b64_decode(b64, b64_len, &n);
        if (!data)
                return rpc_fail(e, RPC_INVALID_PARAMS, "data must be base64");
        int rr = sbx_file_write(r->sb->sb, path, data, n, json_object_get(r->params, "mode") ? (int)mode : -1, append);
        free(data);
        return ok_or_errno(rr, path, ret, e);
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
                return rpc_fail_errno(e, rr, path);
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
                return rpc_fail_errno(e, rr, path);
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
        return ok_or_errno(sbx_file_mkdir(r->sb->sb, path, parents), path, ret, e);
}

static int m_files_rm(Req *r, json_t **ret, RpcError *e) {
        const char *path;
        bool recursive = false;
        if (param_path(r, "path", &path, e) < 0 || param_bool(r->params, "recursive", &recursive, e) < 0)
                return -1;
        return ok_or_errno(sbx_file_remove(r->sb->sb, path, recursive), path, ret, e);
}

static int m_files_rename(Req *r, json_t **ret, RpcError *e) {
        const char *from, *to;
        if (param_path(r, "from", &from, e) < 0 || param_path(r, "to", &to, e) < 0)
                return -1;
        return ok_or_errno(sbx_file_rename(r->sb->sb, from, to), from, ret, e);
}

#define PARAM_PATH { "path", P_STRING, true, "as the sandbox sees it; relative: from /home/user" }
static const Param p_files_read[] = { PARAM_SANDBOX_ID, PARAM_PATH,
        { "offset", P_INT, false, "first byte (default 0)" },
        { "length", P_INT, false, "bytes at most (default: the rest, which must be at most 4 MiB)" }, { 0 } };
static const Param p_files_write[] = { PARAM_SANDBOX_ID, PARAM_PATH, { "data", P_STRING, true, "base64 bytes" },
        { "mode", P_INT, false, "permission bits (default 0644)" },
        { "append", P_BOOL, false, "append instead of replacing atomically" }, { 0 } };
static const Param p_files_list[] = { PARAM_SANDBOX_ID, PARAM_PATH, { "recursive", P_BOOL, false, "descend (depth 64)" },
        { "depth", P_INT, false, "levels to descend (1: the directory's entries)" }, { 0 } };
static const Param p_files_path[] = { PARAM_SANDBOX_ID, PARAM_PATH, { 0 } };
static const Param p_files_mkdir[] = { PARAM_SANDBOX_ID, PARAM_PATH, { "parents", P_BOOL, false, "create missing parents" },
        { 0 } };
static const Param p_files_rm[] = { PARAM_SANDBOX_ID, PARAM_PATH, { "recursive", P_BOOL, false, "remove a directory tree" },
        { 0 } };
static const Param p_files_rename[] = { PARAM_SANDBOX_ID, { "from", P_STRING, true, "existing path" },
        { "to", P_STRING, true, "new path (replaced if it exists)" }, { 0 } };
#define FILE_INFO "{name, path, type: file|dir|symlink|other, size, mode, mtime, target?}"

const Method server_methods_files[] = {
        { "files.read", m_files_read, M_SANDBOX, p_files_read, "{data (base64), size, offset, length}",
          "Reads a regular file (in chunks of at most 4 MiB for larger ones)." },
        { "files.write", m_files_write, M_SANDBOX, p_files_write, "{ok: true}",
          "Writes a file atomically (temp file + rename), creating missing parents; or appends." },
        { "files.list", m_files_list, M_SANDBOX, p_files_list, "{entries: [" FILE_INFO "]}", "Lists a directory." },
        { "files.stat", m_files_stat, M_SANDBOX, p_files_path, FILE_INFO, "Describes a path (symlinks not followed)." },
        { "files.exists", m_files_exists, M_SANDBOX, p_files_path, "{exists}", "Whether a path exists." },
        { "files.mkdir", m_files_mkdir, M_SANDBOX, p_files_mkdir, "{ok: true}", "Creates a directory." },
        { "files.rm", m_files_rm, M_SANDBOX, p_files_rm, "{ok: true}", "Removes a file, or a directory (tree)." },
        { "files.rename", m_files_rename, M_SANDBOX, p_files_rename, "{ok: true}", "Renames or moves a path." },
        { 0 } };
