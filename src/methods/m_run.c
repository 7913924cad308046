/* SPDX-License-Identifier: MIT */
/* Handlers for runs (run, cancel), session variables (env.set, env.get, both runs underneath)
 * and the command history (shell.history.*): they queue runs and answer when they end. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/text.h"
#include "base/util.h"
#include "server/handler.h"
#include "methods/methods.h"

static void run_output(void *ud, SbxStream st, const uint8_t *d, size_t n) {
        Pending *p = ud;
        if (!p->conn || !p->stream)
                return;
        json_t *params = json_pack("{s:O, s:s, s:I}", "requestId", p->id, "stream",
                                   st == SBX_STDOUT ? "stdout" : "stderr", "seq", (json_int_t)p->seq++);
        if (!params || json_set_bytes(params, "data", d, n) < 0) {
                json_decref(params);
                return;
        }
        json_t *enc = json_object_get(params, "dataEncoding");
        if (enc) {
                json_object_set(params, "encoding", enc);
                json_object_del(params, "dataEncoding");
        }
        conn_notify(p->conn, "output", params);
}

static void count_result(Totals *t, const SbxResult *res) {
        t->completed++;
        t->exec_ms_sum += res->exec_time_us / 1000;
        if (res->error_class == SBX_ERROR_TIMEOUT)
                t->timed_out++;
        else if (res->error_class == SBX_ERROR_CANCELLED)
                t->cancelled++;
        else if (res->exit_code != 0)
                t->failed++;
}

/* The answer to a `run`; NULL when out of memory. */
static json_t *run_result_json(const SbxResult *res) {
        json_t *out = json_pack("{s:i, s:I}", "exitCode", res->exit_code, "executionTimeMs",
                                (json_int_t)(res->exec_time_us / 1000));
        if (!out || json_set_bytes(out, "stdout", res->stdout_data, res->stdout_len) < 0 ||
            json_set_bytes(out, "stderr", res->stderr_data, res->stderr_len) < 0) {
                json_decref(out);
                return NULL;
        }
        if (res->stdout_truncated || res->stderr_truncated) {
                json_object_set_new(out, "truncated", json_pack("{s:b, s:b}", "stdout", res->stdout_truncated, "stderr",
                                                                res->stderr_truncated));
                json_object_set_new(out, "droppedBytes", json_pack("{s:I, s:I}", "stdout", (json_int_t)res->stdout_dropped,
                                                                   "stderr", (json_int_t)res->stderr_dropped));
        }
        if (res->error_class != SBX_ERROR_NONE)
                json_object_set_new(out, "errorClass", json_string(sbx_error_class_name(res->error_class)));
        if (res->killed)
                json_object_set_new(out, "killedProcesses", json_integer(res->killed));
        if (res->state_discarded)
                json_object_set_new(out, "stateDiscarded", json_true());
        if (res->session_reset)
                json_object_set_new(out, "sessionReset", json_true());
        return out;
}

static void run_done(void *ud, const SbxResult *res) {
        Pending *p = ud;
        p->run = NULL;
        if (p->kind == PENDING_RUN) {
                count_result(&p->core->totals, res);
                lanes_count(&p->core->lanes, p->lane ? p->lane : p->behind_lane, res->exec_time_us / 1000,
                            res->error_class != SBX_ERROR_TIMEOUT && res->error_class != SBX_ERROR_CANCELLED &&
                                    res->exit_code != 0,
                            res->error_class == SBX_ERROR_TIMEOUT, res->error_class == SBX_ERROR_CANCELLED);
        }
        audit_run_end(p->core->audit, TAKE_PTR(p->audit), res);
        if (p->conn && !p->replied) {
                json_t *out;
                if (p->kind == PENDING_ENV_SET)
                        out = handler_ok_json();
                else if (p->kind == PENDING_ENV_GET)
                        out = json_pack("{s:o}", "value", res->exit_code == 0 ? json_stringn((const char *)res->stdout_data,
                                                                                             res->stdout_len)
                                                                              : json_null());
                else
                        out = run_result_json(res);
                if (out) {
                        conn_reply(p->conn, p->id, out);
                } else {
                        RpcError e;
                        rpc_fail(&e, RPC_INTERNAL_ERROR, "out of memory building the result");
                        conn_reply_error(p->conn, p->id, &e);
                }
        }
        pending_free(p);
}

/* Queues a run and registers it as pending on the connection. Returns 1 or -1 with e set. */
static int start_run(Req *r, SbxSession *s, const SbxRunOptions *o, PendingKind kind, bool stream, RpcError *e) {
        Pending *p;
        if (pending_new(&r->core->pending, r->core, r->conn, r->id, kind, &p) < 0)
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        p->stream = stream;
        if (kind == PENDING_RUN)
                p->audit = audit_run_begin(r->core->audit, r->sb, r->conn, sbx_session_name(s), o->command,
                                           o->command_len);
        pending_run_session(&r->core->pending, p, s);
        int rr = sbx_session_run(s, o, run_output, run_done, p, &p->run);
        if (rr < 0) {
                pending_free(p);
                if (rr == -EBUSY)
                        return rpc_fail(e, RPC_WORKER_UNAVAILABLE,
                                        "WORKER_UNAVAILABLE: session %s already holds %u runs", sbx_session_name(s),
                                        SBX_MAX_QUEUED_RUNS);
                if (rr == -EINVAL || rr == -E2BIG)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "invalid run options (cwd, env or timeoutMs)");
                return rpc_fail_errno(e, rr, "run");
        }
        /* A refused run (LIMIT_EXCEEDED) has already been answered and freed. */
        return 1;
}

static int m_run(Req *r, json_t **ret, RpcError *e) {
        const char *cmd, *cwd = NULL, *stdin_b64 = NULL, *sname = handler_session_name(r);
        size_t cmd_len, stdin_len = 0;
        json_t *env = NULL;
        bool stream = false;
        SbxSession *s;
        SbxRunOptions o = { 0 };
        if (param_string(r->params, "command", true, &cmd, &cmd_len, e) < 0 ||
            param_string(r->params, "cwd", false, &cwd, NULL, e) < 0 ||
            param_string(r->params, "stdin", false, &stdin_b64, &stdin_len, e) < 0 ||
            param_u64(r->params, "timeoutMs", false, UINT64_MAX, &o.timeout_ms, e) < 0 ||
            param_bool(r->params, "stream", &stream, e) < 0 || param_object(r->params, "env", &env, e) < 0 ||
            handler_leftovers(r->params, &o.leftovers, e) < 0 || handler_while_paused(r, e) < 0 ||
            audit_check_run(r->core->audit, e) < 0)
                return -1;
        char msg[256];
        if (json_object_get(r->params, "timeoutMs") && !json_is_null(json_object_get(r->params, "timeoutMs")) &&
            sbx_limit_check(SBX_LIMIT_TIMEOUT, o.timeout_ms, "timeoutMs", msg, sizeof msg) < 0)
                return rpc_fail(e, RPC_INVALID_PARAMS, "%s", msg);
        if (cwd && (!*cwd || strlen(cwd) >= SBX_MAX_PATH_BYTES))
                return rpc_fail(e, RPC_INVALID_PARAMS, "cwd must be a non-empty path");
        if (env && json_object_size(env) > SBX_MAX_RUN_ENV)
                return rpc_fail(e, RPC_INVALID_PARAMS, "env: at most %d entries", SBX_MAX_RUN_ENV);
        if (handler_open_session(r, sname, &s, e) < 0)
                return -1;
        _cleanup_free_ uint8_t *in = NULL;
        if (stdin_b64 && !(in = b64_decode(stdin_b64, stdin_len, &o.stdin_len)))
                return rpc_fail(e, RPC_INVALID_PARAMS, "stdin must be base64");
        const char **envl;
        if (handler_env_list(env, &envl, e) < 0)
                return -1;
        o.command = cmd;
        o.command_len = cmd_len;
        o.cwd = cwd;
        o.env = envl;
        o.stdin_data = in;
        /* A command refused for its size never ran: not history. */
        if (cmd_len <= sbx_sandbox_limits(r->sb->sb)->command_bytes) {
                /* History is shown back (shell.history.list): redacted like output. */
                size_t hl;
                char *hist = sbx_sandbox_redact(r->sb->sb, cmd, cmd_len, &hl);
                if (hist)
                        (void)history_add(&r->sb->history, sname, hist, hl);
                free(hist);
        }
        int rr = start_run(r, s, &o, PENDING_RUN, stream, e);
        handler_env_free(envl);
        return rr;
}

static int m_cancel(Req *r, json_t **ret, RpcError *e) {
        json_t *rid = json_object_get(r->params, "requestId");
        if (!rid)
                return rpc_fail(e, RPC_INVALID_PARAMS, "Missing required param: requestId");
        Pending *p = pending_find_run(&r->core->pending, r->conn, rid);
        if (!p || !p->run) {
                /* Still waiting in its lane: it never starts; a run is answered as cancelled. */
                LaneWait *w = lanes_take(&r->core->lanes, r->conn, rid);
                if (!w)
                        return rpc_fail(e, RPC_INVALID_PARAMS,
                                        "No running request with that requestId (unknown or already finished)");
                const Method *m = w->method;
                if (strcmp(m->name, "run") == 0) {
                        /* The answer of a run cancelled before it started, as libsbx gives it. */
                        SbxResult res = { .exit_code = SBX_EXIT_CANCELLED, .error_class = SBX_ERROR_CANCELLED };
                        conn_reply(r->conn, w->id, run_result_json(&res));
                } else {
                        RpcError ce;
                        rpc_fail(&ce, RPC_SANDBOX_ERROR, "ECANCELED: cancelled before it started");
                        conn_reply_error(r->conn, w->id, &ce);
                }
                lanes_wait_free(w);
                *ret = handler_ok_json();
                return 0;
        }
        (void)sbx_run_cancel(p->run);
        *ret = handler_ok_json();
        return 0;
}

static int m_env_set(Req *r, json_t **ret, RpcError *e) {
        const char *name, *value;
        SbxSession *s;
        if (param_string(r->params, "name", true, &name, NULL, e) < 0 ||
            param_string(r->params, "value", true, &value, NULL, e) < 0)
                return -1;
        if (!env_name_valid(name, strlen(name)))
                return rpc_fail(e, RPC_INVALID_PARAMS, "name must match ^[A-Za-z_][A-Za-z0-9_]*$");
        if (handler_open_session(r, handler_session_name(r), &s, e) < 0)
                return -1;
        size_t len = strlen(name) + strlen(value) + 2;
        _cleanup_free_ char *kv = malloc(len);
        if (!kv)
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        snprintf(kv, len, "%s=%s", name, value);
        const char *env[] = { kv, NULL };
        SbxRunOptions o = { .command = "", .command_len = 0, .env = env, .persist_env = true };
        return start_run(r, s, &o, PENDING_ENV_SET, false, e);
}

static int m_env_get(Req *r, json_t **ret, RpcError *e) {
        const char *name;
        SbxSession *s;
        char cmd[512];
        if (param_string(r->params, "name", true, &name, NULL, e) < 0)
                return -1;
        if (!env_name_valid(name, strlen(name)) || strlen(name) > 256)
                return rpc_fail(e, RPC_INVALID_PARAMS, "name must match ^[A-Za-z_][A-Za-z0-9_]*$");
        if (handler_open_session(r, handler_session_name(r), &s, e) < 0)
                return -1;
        /* Read by the session's builtin itself: no shell code runs, so nothing defined in the
         * session (bash even allows a function named /usr/bin/printenv) can answer instead. */
        snprintf(cmd, sizeof cmd, "%s", name);
        SbxRunOptions o = { .command = cmd, .command_len = strlen(cmd), .get_env = true };
        return start_run(r, s, &o, PENDING_ENV_GET, false, e);
}

static int m_history_list(Req *r, json_t **ret, RpcError *e) {
        const History *h = history_find(r->sb->history, handler_session_name(r));
        json_t *list = json_array();
        for (size_t i = 0; i < history_size(h); i++) {
                uint64_t index;
                const HistoryEntry *he = history_get(h, i, &index);
                json_array_append_new(list, json_pack("{s:I, s:s, s:o}", "index", (json_int_t)index, "command",
                                                      he->command, "timestamp", handler_time_json(he->timestamp_ms)));
        }
        *ret = json_pack("{s:o}", "entries", list);
        return 0;
}

static int m_history_clear(Req *r, json_t **ret, RpcError *e) {
        history_clear(r->sb->history, handler_session_name(r));
        *ret = handler_ok_json();
        return 0;
}

static const Param p_run[] = {
        { "command", P_STRING, true, "bash source text (at most limits.commandBytes)" },
        PARAM_SANDBOX_ID, PARAM_SESSION,
        { "cwd", P_STRING, false, "working directory for this run only" },
        { "env", P_OBJECT, false, "{NAME: value} for this run only" },
        { "stdin", P_STRING, false, "base64 bytes on stdin (default: /dev/null)" },
        { "timeoutMs", P_INT, false, "this run's timeout (default: the sandbox's)" },
        { "stream", P_BOOL, false, "send `output` notifications as output arrives" },
        PARAM_LEFTOVERS("this command"), PARAM_WHILE_PAUSED,
        { 0 } };
static const Param p_cancel[] = { { "requestId", P_ANY, true, "the id of a pending `run` on this connection" }, { 0 } };
#define PARAM_ENV_NAME { "name", P_STRING, true, "^[A-Za-z_][A-Za-z0-9_]*$" }
static const Param p_env_set[] = { PARAM_SANDBOX_ID, PARAM_SESSION, PARAM_ENV_NAME,
        { "value", P_STRING, true, "the value" }, { 0 } };
static const Param p_env_get[] = { PARAM_SANDBOX_ID, PARAM_SESSION, PARAM_ENV_NAME, { 0 } };
static const Param p_history[] = { PARAM_SANDBOX_ID, PARAM_SESSION, { 0 } };

const Method server_methods_run[] = {
        { "run", m_run, M_SANDBOX | M_LANE, p_run,
          "{exitCode, stdout, stderr, executionTimeMs, truncated?: {stdout, stderr}, droppedBytes?: {stdout, stderr}, "
          "errorClass?, killedProcesses?, stateDiscarded?, sessionReset?, stdoutEncoding?, stderrEncoding?}",
          "Runs a command in a session. stdout/stderr are strings when valid UTF-8, else base64 with "
          "`stdoutEncoding`/`stderrEncoding: \"base64\"`. errorClass: TIMEOUT (exit 124), CANCELLED (125), "
          "LIMIT_EXCEEDED (1, nothing ran), PIDS_LIMIT (1: a fork was refused at the sandbox's process limit "
          "and the run was stopped at once; or its own exit code: it failed after a fork was refused; stderr "
          "says how many processes earlier commands left running), "
          "OOM (the command failed and the kernel killed a process of the sandbox at its memory limit), "
          "FS_FULL (the command failed and the sandbox's filesystem has no free bytes or inodes left), "
          "UNAVAILABLE (1, nothing ran: the daemon could not start it, out of file descriptors or memory; "
          "stderr says which; try again later). "
          "droppedBytes: output past the caps, read and thrown away. killedProcesses: how many processes "
          "of the command a timeout, cancel or process limit killed. stateDiscarded (true when so): the command "
          "did not end on its own (a timeout, a cancel, a stop at the process limit, or its shell killed by a "
          "signal: `kill -9 $$`, the OOM killer), so what it changed in the session (cwd, variables, "
          "functions, options) was not kept. sessionReset (true when so): the shell holding the session's "
          "state was killed during this command or since the last result: the session started over, with "
          "the cwd and variables of a new session." },
        { "cancel", m_cancel, 0, p_cancel, "{ok: true}",
          "Cancels a pending run of this connection; that run answers exit 125, errorClass CANCELLED." },
        { "env.set", m_env_set, M_SANDBOX, p_env_set, "{ok: true}", "Exports a variable in the session." },
        { "env.get", m_env_get, M_SANDBOX, p_env_get, "{value: string | null}",
          "An exported variable of the session, null when unset." },
        { "shell.history.list", m_history_list, M_SANDBOX, p_history, "{entries: [{index, command, timestamp}]}",
          "Commands run in the session (the newest 1000)." },
        { "shell.history.clear", m_history_clear, M_SANDBOX, p_history, "{ok: true}", "Forgets the session's history." },
        { 0 } };
