/* SPDX-License-Identifier: MIT */
/* Handlers for file change events: files.watch and files.unwatch, and the files.event
 * notifications between them.
 *
 * A watch is answered at once ({watchId}) and lives on as a PENDING_WATCH pending of its
 * connection, so it hears what a long request hears: the connection's pauses (its answers
 * pile up: the watch drops events, and says so with one overflow once they drain) and its
 * close (the watch ends). Its sandbox going ends it too (the library's `freeing`). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/limits.h"
#include "base/text.h"
#include "server/handler.h"
#include "methods/methods.h"

typedef struct WatchReq {
        Pending *pending;
        SbxFileWatch *w;
        SbxSandbox *sb;
        char id[24];
} WatchReq;

static void req_free(WatchReq *q) {
        sbx_file_watch_free(q->w);
        pending_free(q->pending);
        free(q);
}

static void watch_detached(Pending *pd) { req_free(pd->proc); }

static void watch_paused(Pending *pd, bool paused) {
        WatchReq *q = pd->proc;
        sbx_file_watch_pause(q->w, paused);
}

static void watch_event(void *userdata, SbxFileEventType type, const char *path, bool is_dir) {
        static const char *const names[] = { "create", "write", "remove", "rename", "chmod", "overflow" };
        WatchReq *q = userdata;
        if (!q->pending->conn)
                return;
        json_t *p = json_pack("{s:s, s:s, s:n, s:b}", "watchId", q->id, "type",
                              names[type <= SBX_FILE_EVENT_OVERFLOW ? type : SBX_FILE_EVENT_OVERFLOW], "path", "isDir",
                              is_dir);
        if (!p)
                return;
        if (path) {
                /* File names are bytes; a name that is not UTF-8 gets '?' for each bad byte. */
                char *s = strdup(path);
                if (!s) {
                        json_decref(p);
                        return;
                }
                if (utf8_sanitize(s))
                        json_object_set_new(p, "lossy", json_true());
                json_object_set_new(p, "path", json_string(s));
                free(s);
        }
        conn_notify(q->pending->conn, "files.event", p);
}

/* The sandbox is being freed; the library frees the watch. */
static void watch_freeing(void *userdata) {
        WatchReq *q = userdata;
        q->w = NULL;
        req_free(q);
}

static const SbxFileWatchOps watch_ops = { .event = watch_event, .freeing = watch_freeing };

static int m_files_watch(Req *r, json_t **ret, RpcError *e) {
        const char *path;
        size_t len;
        bool recursive = false;
        if (param_string(r->params, "path", true, &path, &len, e) < 0 ||
            param_bool(r->params, "recursive", &recursive, e) < 0)
                return -1;
        if (strlen(path) != len || len == 0)
                return rpc_fail(e, RPC_INVALID_PARAMS, "path must be a non-empty path without NUL bytes");
        WatchReq *q = calloc(1, sizeof *q);
        if (!q || pending_new(&r->core->pending, r->core, r->conn, r->id, PENDING_WATCH, &q->pending) < 0) {
                free(q);
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        }
        q->sb = r->sb->sb;
        int rr = sbx_file_watch(q->sb, path, recursive, &watch_ops, q, &q->w);
        if (rr < 0) {
                const char *why = sbx_file_error();
                req_free(q);
                if (rr == -ENOTDIR)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "%s", *why ? why : "path is not a directory");
                if (rr == -EUSERS || rr == -E2BIG)
                        return rpc_fail(e, RPC_WORKER_UNAVAILABLE, "LIMIT_EXCEEDED: %s", why);
                if (!*why)
                        return rpc_fail_errno(e, rr, path);
                const char *name = strerrorname_np(-rr);
                return rpc_fail(e, RPC_SANDBOX_ERROR, "%s: %s", name ? name : "EIO", why);
        }
        /* No event comes before this returns: the id is given only to a watch that started. */
        snprintf(q->id, sizeof q->id, "w%llu", (unsigned long long)++r->core->watches);
        q->pending->proc = q;
        q->pending->detached = watch_detached;
        q->pending->paused = watch_paused;
        sbx_file_watch_pause(q->w, conn_paused(r->conn));
        *ret = json_pack("{s:s}", "watchId", q->id);
        return 0;
}

static int m_files_unwatch(Req *r, json_t **ret, RpcError *e) {
        const char *id, *sbid = NULL;
        if (param_string(r->params, "watchId", true, &id, NULL, e) < 0 ||
            param_string(r->params, "sandboxId", false, &sbid, NULL, e) < 0)
                return -1;
        for (Pending *p = r->core->pending.head; p; p = p->next) {
                WatchReq *q = p->proc;
                if (p->kind != PENDING_WATCH || p->conn != r->conn || strcmp(q->id, id) != 0 ||
                    (sbid && strcmp(sbid, sbx_sandbox_id(q->sb)) != 0))
                        continue;
                req_free(q);
                *ret = handler_ok_json();
                return 0;
        }
        return rpc_fail(e, RPC_INVALID_PARAMS, "Unknown watchId: %.64s (a watch is its connection's, and ends with "
                        "files.unwatch, its connection or its sandbox)", id);
}

static const Param p_watch[] = {
        PARAM_SANDBOX_ID,
        { "path", P_STRING, true, "a directory of the writable tree (/tmp, /home/user, /dev/shm), as the sandbox sees it; relative: from /home/user" },
        { "recursive", P_BOOL, false, "also what is below it, directories made later included (default false)" },
        { 0 } };
static const Param p_unwatch[] = {
        { "watchId", P_STRING, true, "what files.watch answered" },
        { "sandboxId", P_STRING, false, "the watch's sandbox (optional)" },
        { 0 } };
/* files.watch's doc gives the numbers. */
_Static_assert(SBX_MAX_WATCHES == 16 && SBX_MAX_WATCH_DIRS == 4096, "update files.watch's doc");

const Method server_methods_watch[] = {
        { "files.watch", m_files_watch, M_SANDBOX, p_watch, "{watchId}",
          "Sends `files.event` {watchId, type, path, isDir} for each change in a directory (and below it, with "
          "recursive), until files.unwatch, the connection closes or the sandbox goes. type: create (made, or moved "
          "in), write, remove, rename (moved away: the old path), chmod, or overflow (events were lost: path null; "
          "one for each gap, e.g. while the client did not read its answers, or past the bounds); path: absolute, "
          "as the sandbox sees it (a name that is not UTF-8 gets '?' for each bad byte, and lossy: true). What a "
          "directory made or moved in later already holds is told as created (a file with content: and written). "
          "A write through files.write is a create and a write of its target. Symlinks "
          "below the directory are never followed. Not a directory: -32602; missing or outside the writable tree "
          "(EROFS): error 1. -32001 LIMIT_EXCEEDED past 16 watches per sandbox, or for a recursive watch over more "
          "than 4096 directories (all of a sandbox's watches together)." },
        { "files.unwatch", m_files_unwatch, 0, p_unwatch, "{ok: true}",
          "Ends a watch of this connection; an unknown watchId: -32602." },
        { 0 } };
