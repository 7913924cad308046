/* SPDX-License-Identifier: MIT */
/* Handlers about the server itself: health, its metrics, the audit trail, ping, kill. */
#include <stdio.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/util.h"
#include "server/conn.h"
#include "server/handler.h"
#include "methods/methods.h"
#include "session/internal.h"

static json_t *lane_json(const Lanes *l, LaneId id) {
        const Lane *ln = &l->lane[id];
        return json_pack("{s:i, s:i, s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:f, s:I}", "slots", (int)ln->slots, "active",
                         (int)ln->active, "idle", (int)(ln->slots > ln->active ? ln->slots - ln->active : 0), "queued",
                         (int)ln->queued, "queueMax", (int)ln->queue_max, "refused", (json_int_t)ln->refused,
                         "completed", (json_int_t)ln->completed, "failed", (json_int_t)ln->failed, "timedOut",
                         (json_int_t)ln->timed_out, "cancelled", (json_int_t)ln->cancelled, "avgExecMs",
                         ln->completed ? (double)ln->exec_ms_sum / (double)ln->completed : 0.0, "p99ExecMs",
                         (json_int_t)lane_p99_ms(ln));
}

/* The daemon's resident memory, from /proc (the kernel's memory for the sandboxes is in their
 * cgroups, not here). 0 when unreadable. */
static uint64_t daemon_rss_bytes(void) {
        FILE *f = fopen("/proc/self/statm", "re");
        unsigned long size = 0, rss = 0;
        if (f) {
                if (fscanf(f, "%lu %lu", &size, &rss) != 2)
                        rss = 0;
                fclose(f);
        }
        return (uint64_t)rss * (uint64_t)sysconf(_SC_PAGESIZE);
}

static json_t *health_json(Core *core);

static int m_health(Req *r, json_t **ret, RpcError *e) {
        *ret = health_json(r->core);
        return 0;
}

static json_t *health_json(Core *core) {
        json_t *ret_;
        json_t **ret = &ret_;
        unsigned sessions = 0, processes = 0, parked = 0, running, queued;
        /* Answering an explicit request: a walk over every sandbox is fine here. */
        for (SrvSandbox *sb = registry_next(&core->registry, NULL); sb; sb = registry_next(&core->registry, sb)) {
                parked += sbx_sandbox_parked(sb->sb);
                for (SbxSession *ss = sbx_session_next(sb->sb, NULL); ss; ss = sbx_session_next(sb->sb, ss))
                        sessions++;
                for (SbxProcess *p = sbx_sandbox_next_process(sb->sb, NULL); p; p = sbx_sandbox_next_process(sb->sb, p)) {
                        SbxProcessInfo pi;
                        sbx_process_info(p, &pi);
                        processes += pi.alive;
                }
        }
        pending_count(&core->pending, &running, &queued);
        const Totals *t = &core->totals;
        *ret = json_pack("{s:I, s:s, s:b, s:i, s:i, s:i, s:i, s:i, s:{s:I, s:I, s:I, s:I, s:f}, s:{s:o, s:o}, s:{s:I}}",
                         "uptimeMs", (json_int_t)(now_ms() - core->start_ms), "mode",
                         core->mode == MODE_DISABLED ? "disabled" : core->mode == MODE_PROCESS ? "process" : "namespaces",
                         "shuttingDown", core->shutting_down,
                         "sandboxes", (int)registry_count(&core->registry), "sessions", (int)sessions, "processes",
                         (int)processes, "running", (int)running, "queued", (int)queued, "totals", "completed",
                         (json_int_t)t->completed, "failed", (json_int_t)t->failed, "timedOut",
                         (json_int_t)t->timed_out, "cancelled", (json_int_t)t->cancelled, "avgExecMs",
                         t->completed ? (double)t->exec_ms_sum / (double)t->completed : 0.0, "lanes", "interactive",
                         lane_json(&core->lanes, LANE_INTERACTIVE), "system", lane_json(&core->lanes, LANE_SYSTEM),
                         "memory", "daemonRssBytes", (json_int_t)daemon_rss_bytes());
        if (*ret) {
                json_object_set_new(*ret, "audit", audit_health_json(core->audit));
                json_object_set_new(*ret, "parked", json_integer(parked));
        }
        const Registry *reg = &core->registry;
        if (*ret)
                json_object_set_new(*ret, "limits",
                            json_pack("{s:i, s:s, s:i, s:i, s:i}", "maxSandboxes",
                                      (int)(reg->max_sandboxes ? reg->max_sandboxes : SBX_MAX_SERVER_SANDBOXES),
                                      "maxSandboxesFrom", reg->max_from ? reg->max_from : "default", "maxSessions",
                                      (int)SBX_MAX_SESSIONS, "maxQueuedRuns", (int)SBX_MAX_QUEUED_RUNS, "maxForks",
                                      (int)SBX_MAX_FORKS));
        return *ret;
}

static json_t *sample_json(const SbxMetricsSample *s) {
        return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "timestamp", (json_int_t)s->time_ms, "cpuUsec",
                         (json_int_t)s->cpu_usec, "memoryBytes", (json_int_t)s->memory_bytes, "pids",
                         (json_int_t)s->pids, "fsBytes", (json_int_t)s->fs_bytes, "fsFiles", (json_int_t)s->fs_files,
                         "netBytes", (json_int_t)s->net_bytes, "runs", (json_int_t)s->runs);
}

/* Everything GET /metrics says, in one answer: no file is read for it (each sandbox's figures
 * are its last sample). */
static int m_server_metrics(Req *r, json_t **ret, RpcError *e) {
        bool per_sandbox = true;
        if (param_bool(r->params, "sandboxes", &per_sandbox, e) < 0)
                return -1;
        json_t *list = json_array();
        Registry *reg = &r->core->registry;
        for (SrvSandbox *sb = registry_next(reg, NULL); per_sandbox && sb; sb = registry_next(reg, sb)) {
                if (!registry_may_use(sb, r->conn, conn_uid(r->conn)))
                        continue;
                SbxMetricsSample s;
                const SbxLimits *l = sbx_sandbox_limits(sb->sb);
                json_t *o = json_pack("{s:s, s:b, s:I, s:I, s:I}", "sandboxId", sb->id, "paused",
                                      sbx_sandbox_paused(sb->sb), "memoryLimitBytes", (json_int_t)l->memory_bytes,
                                      "fsLimitBytes", (json_int_t)l->fs_bytes, "cpuMillis", (json_int_t)l->cpu_millis);
                json_object_set_new(o, "sample", sbx_sandbox_last_sample(sb->sb, &s) == 0 ? sample_json(&s) : json_null());
                json_array_append_new(list, o);
        }
        unsigned target, held, ready;
        sbx_context_pool_stats(r->core->ctx, &target, &held, &ready);
        *ret = json_pack("{s:o, s:o, s:i, s:{s:i, s:i, s:i}}", "health", health_json(r->core), "sandboxes", list,
                         "intervalMs", (int)SBX_METRICS_INTERVAL_MS, "pool", "target", (int)target, "held", (int)held,
                         "ready", (int)ready);
        return 0;
}

/* The trail names every client's sandboxes and commands: the operator's to read, not a
 * client's that may not see those sandboxes. */
static int operator_only(Req *r, const char *method, RpcError *e) {
        if (conn_operator(r->conn))
                return 0;
        return rpc_fail(e, RPC_METHOD_NOT_FOUND, "%s is the operator console's (sbx serve --http: /console/)", method);
}

static int m_audit_recent(Req *r, json_t **ret, RpcError *e) {
        uint64_t limit = 100;
        if (operator_only(r, "audit.recent", e) < 0)
                return -1;
        if (param_u64(r->params, "limit", false, SBX_AUDIT_RECENT_EVENTS, &limit, e) < 0)
                return -1;
        *ret = json_pack("{s:b, s:o, s:o}", "enabled", r->core->audit != NULL, "events",
                         audit_recent_json(r->core->audit, (size_t)limit), "health", audit_health_json(r->core->audit));
        return 0;
}

static void verified(void *ud, int result, const char *message, Audit *a) {
        Pending *p = ud;
        if (p->conn && result == -EBADMSG)
                conn_reply(p->conn, p->id, json_pack("{s:b, s:b, s:s}", "enabled", 1, "ok", 0, "message", message));
        else if (p->conn && result >= 0)
                conn_reply(p->conn, p->id,
                           json_pack("{s:b, s:b, s:i, s:s}", "enabled", 1, "ok", 1, "lines", result, "message", message));
        else if (p->conn) {
                RpcError e;
                rpc_fail_errno(&e, result, message);
                conn_reply_error(p->conn, p->id, &e);
        }
        pending_free(p);
}

static int m_audit_verify(Req *r, json_t **ret, RpcError *e) {
        if (operator_only(r, "audit.verify", e) < 0)
                return -1;
        if (!r->core->audit) {
                *ret = json_pack("{s:b}", "enabled", 0);
                return 0;
        }
        Pending *p;
        if (pending_new(&r->core->pending, r->core, r->conn, r->id, PENDING_OP, &p) < 0)
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        int rr = audit_verify_start(r->core->audit, verified, p);
        if (rr == 0)
                return 1;
        pending_free(p);
        if (rr == -EBUSY)
                return rpc_fail(e, RPC_INVALID_PARAMS, "a check of the log is running; ask again when it has ended");
        return rpc_fail_errno(e, rr, "audit.verify");
}

static int m_ping(Req *r, json_t **ret, RpcError *e) {
        *ret = json_pack("{s:b}", "pong", 1);
        return 0;
}

/* The line limit of this connection alone: a client that sends a large archive or file in one
 * request says so first (sbx import), whatever sandbox it addresses. */
static int m_connection_configure(Req *r, json_t **ret, RpcError *e) {
        uint64_t v = 0;
        if (param_u64(r->params, "rpcBytes", true, 1ULL << 30, &v, e) < 0)
                return -1;
        if (v < 1024)
                return rpc_fail(e, RPC_INVALID_PARAMS, "rpcBytes must be at least 1024");
        conn_set_line_max(r->conn, (size_t)v);
        *ret = handler_ok_json();
        return 0;
}

static int m_kill(Req *r, json_t **ret, RpcError *e) {
        *ret = handler_ok_json();
        r->core->shutdown(r->core->shutdown_data);
        return 0;
}

static const Param p_server_metrics[] = {
        { "sandboxes", P_BOOL, false, "false: the server's figures only, no sandbox's (default true)" }, { 0 } };
static const Param p_connection_configure[] = {
        { "rpcBytes", P_INT, true, "the longest request line this connection may send, in bytes (1024 to 1 GiB; "
          "default 8 MiB, or the create's limits.rpcBytes)" }, { 0 } };
static const Param p_audit_recent[] = {
        { "limit", P_INT, false, "at most this many, the newest (default 100, at most 200)" }, { 0 } };

const Method server_methods_server[] = {
        { "health", m_health, 0, handler_params_none,
          "{uptimeMs, mode, shuttingDown, sandboxes, sessions, processes (alive), running, queued (in sessions), totals: "
          "{completed, failed, timedOut, cancelled, avgExecMs}, lanes: {interactive, system: {slots, active, idle, queued, "
          "queueMax, refused, completed, failed, timedOut, cancelled, avgExecMs, p99ExecMs}}, memory: {daemonRssBytes}, "
          "audit: {enabled, path?, failClosed?, refusing?, writerAlive?, writerPid?, events?, written?, dropped?, failed?, "
          "queuedBytes?, failing?, error?}, parked, limits: {maxSandboxes, maxSandboxesFrom, maxSessions, maxQueuedRuns, "
          "maxForks}}",
          "Server statistics, and the caps in force. parked: sandboxes idle past `sbx serve --park-after`, holding 3 of "
          "the daemon's fds and one shell a session each (their idle workers exit) until used again. Lane counts are "
          "of requests holding or waiting for a slot; p99ExecMs is the upper edge of a power-of-two bucket. audit (sbx serve --audit): events made, lines written, "
          "events dropped (queue full or writer gone) and failed (not written: a full disk); refusing: runs are refused "
          "(--audit-fail-closed). `maxSandboxes` is `sbx serve --max-sandboxes` or, without it, derived from the "
          "machine at start, `maxSandboxesFrom` saying which (`--max-sandboxes`, or the resource that bounds it: "
          "`memory`, `pids`, `fds`, `host ids`). Counting sessions and processes visits every sandbox: an answer about "
          "all of them." },
        { "server.metrics", m_server_metrics, 0, p_server_metrics,
          "{health (as health answers), intervalMs, pool: {target, held, ready}, sandboxes: [{sandboxId, paused, "
          "memoryLimitBytes, fsLimitBytes, cpuMillis, sample: {timestamp, cpuUsec, memoryBytes, pids, fsBytes, fsFiles, "
          "netBytes, runs} or null}]}",
          "What GET /metrics says, as JSON: the server's health, its pool of default sandboxes made ahead (how many "
          "it keeps, holds, and are ready), and each sandbox's last sample (as sandbox.metrics takes them, every "
          "intervalMs; null before the first). Only the sandboxes this connection may use (the "
          "operator console's: every one)." },
        { "audit.recent", m_audit_recent, 0, p_audit_recent, "{enabled, events: [event], health (as health's audit)}",
          "The last audit events the server made (at most 200 are kept), oldest first, as it handed them to the "
          "writer: before their seq and prev (sbx serve --audit). The operator console's only (-32601 to other "
          "connections): the trail names every client's sandboxes and commands." },
        { "audit.verify", m_audit_verify, 0, handler_params_none, "{enabled, ok?, lines?, message?}",
          "Checks the hash chain of the audit log's current file (as sbx audit verify does; its first line's link to "
          "rotated files is taken on trust), in a process of its own: ok and the lines checked, or ok false and the "
          "first line changed, removed or inserted. One check at a time. The operator console's only (-32601 to other "
          "connections)." },
        { "ping", m_ping, 0, handler_params_none, "{pong: true}", "Liveness." },
        { "connection.configure", m_connection_configure, 0, p_connection_configure, "{ok: true}",
          "Sets this connection's longest request line (as create's limits.rpcBytes does for the connection that "
          "makes its root sandbox), for a large persistence.import or files.write on a sandbox made elsewhere." },
        { "kill", m_kill, 0, handler_params_none, "{ok: true}",
          "Answers, then shuts the server down as SIGTERM does: waiting requests get -32003 POOL_SHUTTING_DOWN, running "
          "runs are cancelled (125); once they are answered, or at the shutdown deadline, every sandbox is destroyed." },
        { 0 } };
