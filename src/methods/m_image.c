/* SPDX-License-Identifier: MIT */
/* Handlers for a sandbox's image: sandbox.fork, snapshot.*, persistence.export and .import.
 * Each is a library operation that answers later, through its done callback. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/text.h"
#include "server/handler.h"
#include "methods/methods.h"

/* Registers an operation as pending on the connection (answered by its done callback). */
static Pending *op_pending(Req *r, RpcError *e) {
        Pending *p;
        /* Its state dump or barrier needs the sessions' shells, which a pause holds frozen:
         * the operation would wait for a resume it cannot ask for. */
        if (sbx_sandbox_paused(r->sb->sb)) {
                rpc_fail(e, RPC_INVALID_PARAMS, "the sandbox is paused: resume it first");
                return NULL;
        }
        if (pending_new(&r->core->pending, r->core, r->conn, r->id, PENDING_OP, &p) < 0) {
                rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
                return NULL;
        }
        p->persist = r->sb->persist;
        p->uid = r->sb->uid;
        return p;
}

static void op_reply_error(Pending *p, const SbxOpResult *res) {
        RpcError e;
        const char *name = strerrorname_np(-res->error);
        if (res->error == -EINVAL)
                rpc_fail(&e, RPC_INVALID_PARAMS, "%s", res->message ? res->message : "invalid input");
        else
                rpc_fail(&e, RPC_SANDBOX_ERROR, "%s: %s", name ? name : "EIO", res->message ? res->message : "");
        conn_reply_error(p->conn, p->id, &e);
}

static void op_reply_fail(Pending *p, int code, const char *message) {
        RpcError e;
        rpc_fail(&e, code, "%s", message);
        conn_reply_error(p->conn, p->id, &e);
}

static void fork_done(void *ud, const SbxOpResult *res) {
        Pending *p = ud;
        Core *core = p->core;
        SrvSandbox *sb;
        if (res->error || !p->conn || core->shutting_down) {
                registry_fork_abort(&core->registry);
                if (res->sandbox)
                        sbx_sandbox_free(res->sandbox);
                audit_finish(core->audit, TAKE_PTR(p->audit),
                             res->error ? audit_op_fields(res) : audit_outcome(-ESHUTDOWN, json_object()));
                if (p->conn && res->error)
                        op_reply_error(p, res);
                else if (p->conn)
                        op_reply_fail(p, RPC_SANDBOX_ERROR, "ESHUTDOWN: the server is shutting down");
        } else if (registry_add(&core->registry, res->sandbox, p->conn, p->uid,
                                REGISTRY_FORK | (p->persist ? REGISTRY_PERSIST : 0), NULL, &sb) < 0) {
                registry_fork_abort(&core->registry);
                sbx_sandbox_free(res->sandbox);
                op_reply_fail(p, RPC_INTERNAL_ERROR, "out of memory");
        } else {
                snprintf(sb->fork_of, sizeof sb->fork_of, "%s", json_string_value(p->answer) ?: "");
                audit_finish(core->audit, TAKE_PTR(p->audit), json_pack("{s:s}", "forkId", sbx_sandbox_id(sb->sb)));
                conn_reply(p->conn, p->id, json_pack("{s:s}", "sandboxId", sbx_sandbox_id(sb->sb)));
        }
        pending_free(p);
}

static int m_sandbox_fork(Req *r, json_t **ret, RpcError *e) {
        Registry *reg = &r->core->registry;
        if (registry_fork_begin(reg, e) < 0)
                return -1;
        Pending *p = op_pending(r, e);
        if (!p) {
                registry_fork_abort(reg);
                return -1;
        }
        p->audit = audit_begin(r->core->audit, "sandbox.fork", r->sb, r->conn);
        p->answer = json_string(r->sb->id); /* the fork's parent, for sandbox.list's forkOf */
        int rr = sbx_sandbox_fork(r->sb->sb, fork_done, p);
        if (rr < 0) {
                registry_fork_abort(reg);
                pending_free(p);
                return rpc_fail_errno(e, rr, "fork");
        }
        return 1;
}

/* {size, data (base64)} of an export; NULL when out of memory. */
static json_t *export_json(const SbxOpResult *res) {
        size_t n;
        _cleanup_free_ char *b64 = b64_encode(res->data, res->len, &n);
        if (!b64)
                return NULL;
        /* base64 is ASCII: no need for jansson to check it character by character. */
        return json_pack("{s:I, s:o}", "size", (json_int_t)res->len, "data", json_stringn_nocheck(b64, n));
}

/* Snapshot create, restore, export, import: the answer is the id, the archive or ok. */
static void op_reply(Pending *p, const SbxOpResult *res) {
        json_t *out;
        if (res->error)
                op_reply_error(p, res);
        else if (res->snapshot_id)
                conn_reply(p->conn, p->id, json_pack("{s:s}", "id", res->snapshot_id));
        else if (!res->data)
                conn_reply(p->conn, p->id, handler_ok_json());
        else if ((out = export_json(res)))
                conn_reply(p->conn, p->id, out);
        else
                op_reply_fail(p, RPC_INTERNAL_ERROR, "out of memory");
}

static void op_done(void *ud, const SbxOpResult *res) {
        Pending *p = ud;
        if (p->audit)
                audit_finish(p->core->audit, TAKE_PTR(p->audit), audit_op_fields(res));
        if (p->conn)
                op_reply(p, res);
        pending_free(p);
}

static int m_snapshot_create(Req *r, json_t **ret, RpcError *e) {
        Pending *p = op_pending(r, e);
        if (!p)
                return -1;
        int rr = sbx_snapshot_create(r->sb->sb, op_done, p);
        if (rr < 0) {
                pending_free(p);
                if (rr == -ENOSPC)
                        return rpc_fail(e, RPC_SANDBOX_ERROR, "ENOSPC: the sandbox already has %u snapshots (the most it may keep)",
                                        SBX_MAX_SNAPSHOTS);
                return rpc_fail_errno(e, rr, "snapshot");
        }
        return 1;
}

static int m_snapshot_restore(Req *r, json_t **ret, RpcError *e) {
        const char *id;
        if (param_string(r->params, "id", true, &id, NULL, e) < 0)
                return -1;
        Pending *p = op_pending(r, e);
        if (!p)
                return -1;
        if ((p->audit = audit_begin(r->core->audit, "sandbox.restore", r->sb, r->conn)))
                json_object_set_new(p->audit, "snapshotId", json_string(id));
        int rr = sbx_snapshot_restore(r->sb->sb, id, op_done, p);
        if (rr < 0) {
                pending_free(p);
                if (rr == -ENOENT)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "Unknown snapshot id: %s", id);
                return rpc_fail_errno(e, rr, "restore");
        }
        return 1;
}

static int m_snapshot_list(Req *r, json_t **ret, RpcError *e) {
        SbxSnapshotInfo v[SBX_MAX_SNAPSHOTS];
        size_t n = sbx_snapshot_list(r->sb->sb, v, SBX_MAX_SNAPSHOTS);
        json_t *list = json_array();
        for (size_t i = 0; i < n && i < SBX_MAX_SNAPSHOTS; i++)
                json_array_append_new(list, json_pack("{s:s, s:o, s:I}", "id", v[i].id, "createdAt",
                                                      handler_time_json(v[i].created_ms), "bytes", (json_int_t)v[i].bytes));
        *ret = json_pack("{s:o}", "snapshots", list);
        return 0;
}

static int m_snapshot_delete(Req *r, json_t **ret, RpcError *e) {
        const char *id;
        if (param_string(r->params, "id", true, &id, NULL, e) < 0)
                return -1;
        int rr = sbx_snapshot_delete(r->sb->sb, id);
        if (rr == -ENOENT)
                return rpc_fail(e, RPC_INVALID_PARAMS, "Unknown snapshot id: %s", id);
        if (rr == -EBUSY)
                return rpc_fail(e, RPC_SANDBOX_ERROR, "EBUSY: snapshot %s is being restored", id);
        if (rr < 0)
                return rpc_fail_errno(e, rr, "snapshot");
        *ret = handler_ok_json();
        return 0;
}

static int m_export(Req *r, json_t **ret, RpcError *e) {
        Pending *p = op_pending(r, e);
        if (!p)
                return -1;
        p->audit = audit_begin(r->core->audit, "sandbox.export", r->sb, r->conn);
        int rr = sbx_sandbox_export(r->sb->sb, op_done, p);
        if (rr < 0) {
                pending_free(p);
                return rpc_fail_errno(e, rr, "export");
        }
        return 1;
}

static int m_import(Req *r, json_t **ret, RpcError *e) {
        const char *b64;
        size_t b64_len, n;
        if (param_string(r->params, "data", true, &b64, &b64_len, e) < 0)
                return -1;
        if (r->core->mode == MODE_PROCESS)
                return rpc_fail(e, RPC_INVALID_PARAMS, "persistence.import is not available with --mode process: an "
                                "archive's session states name the directories of the sandbox that exported it, which "
                                "commands see as they are on the host");
        _cleanup_free_ uint8_t *data = b64_decode(b64, b64_len, &n);
        if (!data)
                return rpc_fail(e, RPC_INVALID_PARAMS, "data must be base64");
        Pending *p = op_pending(r, e);
        if (!p)
                return -1;
        if ((p->audit = audit_begin(r->core->audit, "sandbox.import", r->sb, r->conn)))
                json_object_set_new(p->audit, "bytes", json_integer((json_int_t)n));
        int rr = n ? sbx_sandbox_import(r->sb->sb, data, n, op_done, p) : -EINVAL;
        if (rr < 0) {
                pending_free(p);
                if (rr == -EINVAL)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "not an sbx archive: empty");
                return rpc_fail_errno(e, rr, "import");
        }
        return 1;
}

static const Param p_snapshot_id[] = { PARAM_SANDBOX_ID, { "id", P_STRING, true, "a snapshot id from snapshot.create" },
        { 0 } };
static const Param p_import[] = { PARAM_SANDBOX_ID, { "data", P_STRING, true, "the archive, base64" }, { 0 } };

const Method server_methods_image[] = {
        { "sandbox.fork", m_sandbox_fork, M_SANDBOX | M_LANE, handler_params_sandbox, "{sandboxId}",
          "A new sandbox with a copy of this one's files, every session's state, its limits and options "
          "(taken at one point in time, after the runs queued before it; background processes are not "
          "copied). Owned like its source. At most 16 forks at once (-32602)." },
        { "snapshot.create", m_snapshot_create, M_SANDBOX | M_LANE, handler_params_sandbox, "{id}",
          "Saves the sandbox's files and session states in its snapshot store (budget: 4 times its "
          "filesystem limits, at most 32 snapshots; ENOSPC beyond)." },
        { "snapshot.restore", m_snapshot_restore, M_SANDBOX | M_LANE, p_snapshot_id, "{ok: true}",
          "Brings back a snapshot's files and session states; sessions made since start fresh, background "
          "processes are killed. Unknown id: -32602." },
        { "snapshot.list", m_snapshot_list, M_SANDBOX, handler_params_sandbox, "{snapshots: [{id, createdAt, bytes}]}",
          "The sandbox's snapshots, oldest first." },
        { "snapshot.delete", m_snapshot_delete, M_SANDBOX, p_snapshot_id, "{ok: true}", "Deletes a snapshot." },
        { "persistence.export", m_export, M_SANDBOX | M_LANE, handler_params_sandbox, "{data (base64), size}",
          "A zstd-compressed tar of /tmp, /home/user and /dev/shm plus sbx-manifest.json (format version, "
          "session states, limits, sha256 of the payload); plain `tar --zstd -xf` opens it." },
        { "persistence.import", m_import, M_SANDBOX | M_LANE, p_import, "{ok: true}",
          "Replaces the sandbox's files and session states with an exported archive's. A refused archive "
          "(-32602: bad magic, version or checksum, unsafe paths or links, device nodes, setuid bits, "
          "over the sandbox's limits) leaves the sandbox unchanged." },
        { 0 } };
