/* SPDX-License-Identifier: MIT */
/* Handlers about the server itself: health, ping, kill. */
#include "base/limits.h"
#include "base/util.h"
#include "server/handler.h"

static int m_health(Req *r, json_t **ret, RpcError *e) {
        Core *core = r->core;
        unsigned sessions = 0, running, queued;
        for (SrvSandbox *sb = registry_next(&core->registry, NULL); sb; sb = registry_next(&core->registry, sb))
                for (SbxSession *ss = sbx_session_next(sb->sb, NULL); ss; ss = sbx_session_next(sb->sb, ss))
                        sessions++;
        pending_count(&core->pending, &running, &queued);
        const Totals *t = &core->totals;
        *ret = json_pack("{s:I, s:i, s:i, s:i, s:i, s:{s:I, s:I, s:I, s:I, s:f}}", "uptimeMs",
                         (json_int_t)(now_ms() - core->start_ms), "sandboxes", (int)registry_count(&core->registry),
                         "sessions", (int)sessions, "running", (int)running, "queued", (int)queued, "totals", "completed",
                         (json_int_t)t->completed, "failed", (json_int_t)t->failed, "timedOut",
                         (json_int_t)t->timed_out, "cancelled", (json_int_t)t->cancelled, "avgExecMs",
                         t->completed ? (double)t->exec_ms_sum / (double)t->completed : 0.0);
        const Registry *reg = &core->registry;
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
          "{uptimeMs, sandboxes, sessions, running, queued, totals: {completed, failed, timedOut, cancelled, avgExecMs}, "
          "limits: {maxSandboxes, maxSandboxesFrom, maxSessions, maxQueuedRuns, maxForks}}",
          "Server statistics, and the caps in force: `maxSandboxes` is `sbx serve --max-sandboxes` or, without it, derived "
          "from the machine at start, `maxSandboxesFrom` saying which (`--max-sandboxes`, or the resource that bounds it: "
          "`memory`, `pids`, `fds`, `host ids`). Counting sessions visits every sandbox: an answer about all of them." },
        { "ping", m_ping, 0, handler_params_none, "{pong: true}", "Liveness." },
        { "kill", m_kill, 0, handler_params_none, "{ok: true}",
          "Answers, then shuts the server down: queued runs get an error, running ones 125, every sandbox is destroyed." },
        { 0 } };
