/* SPDX-License-Identifier: MIT */
/* Handlers about the server itself: health, ping, kill. */
#include <stdio.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/util.h"
#include "server/handler.h"
#include "methods/methods.h"

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

static int m_health(Req *r, json_t **ret, RpcError *e) {
        Core *core = r->core;
        unsigned sessions = 0, processes = 0, running, queued;
        /* Answering an explicit request: a walk over every sandbox is fine here. */
        for (SrvSandbox *sb = registry_next(&core->registry, NULL); sb; sb = registry_next(&core->registry, sb)) {
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
        if (*ret)
                json_object_set_new(*ret, "audit", audit_health_json(core->audit));
        const Registry *reg = &core->registry;
        if (*ret)
                json_object_set_new(*ret, "limits",
                            json_pack("{s:i, s:s, s:i, s:i, s:i}", "maxSandboxes",
                                      (int)(reg->max_sandboxes ? reg->max_sandboxes : SBX_MAX_SERVER_SANDBOXES),
                                      "maxSandboxesFrom", reg->max_from ? reg->max_from : "default", "maxSessions",
                                      (int)SBX_MAX_SESSIONS, "maxQueuedRuns", (int)SBX_MAX_QUEUED_RUNS, "maxForks",
                                      (int)SBX_MAX_FORKS));
        return 0;
}

static int m_ping(Req *r, json_t **ret, RpcError *e) {
        *ret = json_pack("{s:b}", "pong", 1);
        return 0;
}

static int m_kill(Req *r, json_t **ret, RpcError *e) {
        *ret = handler_ok_json();
        r->core->shutdown(r->core->shutdown_data);
        return 0;
}

const Method server_methods_server[] = {
        { "health", m_health, 0, handler_params_none,
          "{uptimeMs, mode, shuttingDown, sandboxes, sessions, processes (alive), running, queued (in sessions), totals: "
          "{completed, failed, timedOut, cancelled, avgExecMs}, lanes: {interactive, system: {slots, active, idle, queued, "
          "queueMax, refused, completed, failed, timedOut, cancelled, avgExecMs, p99ExecMs}}, memory: {daemonRssBytes}, "
          "audit: {enabled, path?, failClosed?, refusing?, writerAlive?, writerPid?, events?, written?, dropped?, failed?, "
          "queuedBytes?, failing?, error?}, limits: {maxSandboxes, maxSandboxesFrom, maxSessions, maxQueuedRuns, maxForks}}",
          "Server statistics, and the caps in force. Lane counts are of requests holding or waiting for a slot; "
          "p99ExecMs is the upper edge of a power-of-two bucket. audit (sbx serve --audit): events made, lines written, "
          "events dropped (queue full or writer gone) and failed (not written: a full disk); refusing: runs are refused "
          "(--audit-fail-closed). `maxSandboxes` is `sbx serve --max-sandboxes` or, without it, derived from the "
          "machine at start, `maxSandboxesFrom` saying which (`--max-sandboxes`, or the resource that bounds it: "
          "`memory`, `pids`, `fds`, `host ids`). Counting sessions and processes visits every sandbox: an answer about "
          "all of them." },
        { "ping", m_ping, 0, handler_params_none, "{pong: true}", "Liveness." },
        { "kill", m_kill, 0, handler_params_none, "{ok: true}",
          "Answers, then shuts the server down as SIGTERM does: waiting requests get -32003 POOL_SHUTTING_DOWN, running "
          "runs are cancelled (125); once they are answered, or at the shutdown deadline, every sandbox is destroyed." },
        { 0 } };
