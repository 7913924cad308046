/* SPDX-License-Identifier: MIT */
/* The dispatcher: finds a request's row in the method tables (methods/, handed over by the
 * program that serves them), checks its params against the
 * row, routes it to a sandbox and calls the handler; and prints the table as
 * docs/PROTOCOL.md (a test keeps the file in sync). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <string.h>
#include "base/limits.h"
#include "base/macro.h"
#include "server/dispatch.h"
#include "server/handler.h"
#include "server/server.h"

/* The method tables (dispatch_set_methods()), in the order of docs/PROTOCOL.md. */
static const Method *const *tables;

void dispatch_set_methods(const Method *const *t) { tables = t; }

static const Method *find_method(const char *name) {
        for (const Method *const *t = tables; t && *t; t++)
                for (const Method *m = *t; m->name; m++)
                        if (strcmp(m->name, name) == 0)
                                return m;
        return NULL;
}

static const char *type_name(ParamType t) {
        switch (t) {
        case P_STRING: return "string";
        case P_INT: return "integer";
        case P_BOOL: return "boolean";
        case P_OBJECT: return "object";
        case P_ANY:
        default: return "any";
        }
}

static bool type_ok(ParamType t, json_t *v) {
        switch (t) {
        case P_STRING: return json_is_string(v);
        case P_INT: return json_is_integer(v) && json_integer_value(v) >= 0;
        case P_BOOL: return json_is_boolean(v);
        case P_OBJECT: return json_is_object(v);
        case P_ANY:
        default: return true;
        }
}

/* Edit distance between a and b, ignoring case; stops counting at 3 (only 0..2 matter). */
static unsigned distance(const char *a, const char *b) {
        size_t la = strlen(a), lb = strlen(b);
        unsigned row[65];
        if (la > 64 || lb > 64)
                return 3;
        for (size_t j = 0; j <= lb; j++)
                row[j] = (unsigned)j;
        for (size_t i = 1; i <= la; i++) {
                unsigned diag = row[0];
                row[0] = (unsigned)i;
                for (size_t j = 1; j <= lb; j++) {
                        unsigned up = row[j];
                        unsigned sub = diag + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
                        row[j] = MIN(sub, MIN(up, row[j - 1]) + 1);
                        diag = up;
                }
        }
        return MIN(row[lb], 3U);
}

/* The param of m whose name is closest to key (a typo, another case, a missing unit), or NULL. */
static const char *closest_param(const Method *m, const char *key) {
        size_t n = strlen(key);
        const char *best = NULL;
        /* Two edits in a short name leave little of it. */
        unsigned best_d = n >= 5 ? 3 : 2;
        for (const Param *p = m->params; p->name; p++) {
                unsigned d = distance(key, p->name);
                /* "timeout" for "timeoutMs": a prefix of 4 or more letters counts as close. */
                if (d > 1 && n >= 4 && strncasecmp(p->name, key, n) == 0)
                        d = 1;
                if (d < best_d) {
                        best = p->name;
                        best_d = d;
                }
        }
        return best;
}

/* Fails for a param the row does not list: a misspelt optional param would otherwise be
 * ignored without a word, and the request run with the default. */
static int check_known(const Method *m, json_t *params, RpcError *e) {
        const char *key;
        json_t *v;
        json_object_foreach(params, key, v) {
                if ((m->flags & M_LANE) && strcmp(key, "lane") == 0)
                        continue;
                const Param *p = m->params;
                while (p->name && strcmp(p->name, key) != 0)
                        p++;
                if (p->name)
                        continue;
                const char *hint = closest_param(m, key);
                if (hint)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "unknown parameter \"%.64s\" (did you mean \"%s\"?)", key,
                                        hint);
                return rpc_fail(e, RPC_INVALID_PARAMS, "unknown parameter \"%.64s\"", key);
        }
        return 0;
}

/* Checks every param is known, every present one has its type, every required one is there. */
static int validate(const Method *m, json_t *params, RpcError *e) {
        if (check_known(m, params, e) < 0)
                return -1;
        for (const Param *p = m->params; p->name; p++) {
                json_t *v = json_object_get(params, p->name);
                if (!v || (json_is_null(v) && p->type != P_ANY)) {
                        if (p->required)
                                return rpc_fail(e, RPC_INVALID_PARAMS, "Missing required param: %s", p->name);
                        continue;
                }
                if (!type_ok(p->type, v))
                        return rpc_fail(e, RPC_INVALID_PARAMS, "%s must be %s %s", p->name,
                                        p->type == P_INT ? "a non-negative" : p->type == P_OBJECT ? "an" : "a",
                                        type_name(p->type));
        }
        return 0;
}

/* The row of method name, its params checked. Returns 0 or -1 with e set. */
static int lookup(const char *name, json_t *params, const Method **ret, RpcError *e) {
        *ret = find_method(name);
        if (!*ret)
                return rpc_fail(e, RPC_METHOD_NOT_FOUND, "Method not found: %.128s", name);
        return validate(*ret, params, e);
}

int method_check(const char *name, json_t *params, RpcError *e) {
        const Method *m;
        return lookup(name, params, &m, e);
}

/* A parked sandbox takes its fds again before its handler runs. */
static int wake(Req *r, RpcError *e) {
        int k = registry_wake(r->sb);
        if (k < 0)
                return rpc_fail(e, RPC_WORKER_UNAVAILABLE,
                                "WORKER_UNAVAILABLE: the server is out of fds to take up this idle sandbox again (%s); "
                                "retry when others are idle, or destroy some",
                                strerror(-k));
        return 0;
}

static int resolve_sandbox(Req *r, bool wake_it, RpcError *e) {
        json_t *v = json_object_get(r->params, "sandboxId");
        if (!v || json_is_null(v)) {
                r->sb = registry_root(&r->core->registry, r->conn);
                if (!r->sb)
                        return rpc_fail(e, RPC_INVALID_REQUEST, "Sandbox not created. Call \"create\" first.");
                registry_touch(r->sb);
                return wake_it ? wake(r, e) : 0;
        }
        if (!json_is_string(v))
                return rpc_fail(e, RPC_INVALID_PARAMS, "sandboxId must be a string");
        r->sb = registry_find(&r->core->registry, r->conn, conn_uid(r->conn), json_string_value(v));
        if (!r->sb)
                return rpc_fail(e, RPC_INVALID_PARAMS, "Unknown sandboxId: %.64s", json_string_value(v));
        registry_touch(r->sb);
        return wake_it ? wake(r, e) : 0;
}

/* The lane a request of a lane method belongs to: its `lane` param (taken out of params), or
 * the connection's when the operator fixed it. Returns 0 or -1 with e set. */
static int request_lane(Req *r, LaneId *ret, RpcError *e) {
        json_t *v = json_object_get(r->params, "lane");
        int forced = conn_lane(r->conn);
        *ret = forced >= 0 ? (LaneId)forced : LANE_INTERACTIVE;
        if (!v || json_is_null(v)) {
                json_object_del(r->params, "lane");
                return 0;
        }
        LaneId asked;
        if (!json_is_string(v) || lane_parse(json_string_value(v), &asked) < 0)
                return rpc_fail(e, RPC_INVALID_PARAMS, "lane must be \"interactive\" or \"system\"");
        if (forced >= 0 && (LaneId)forced != asked)
                return rpc_fail(e, RPC_INVALID_PARAMS, "lane: this connection's lane is fixed to %s by the server",
                                lane_name((LaneId)forced));
        *ret = asked;
        json_object_del(r->params, "lane");
        return 0;
}

/* An error about a sandbox may quote what the client gave (a path, a label) with a secret of
 * the sandbox in it: redacted as the sandbox's output is. */
static void redact_error(SbxSandbox *sb, RpcError *e) {
        size_t len;
        char *m = sbx_sandbox_redact(sb, e->message, strlen(e->message), &len);
        if (m)
                snprintf(e->message, sizeof e->message, "%s", m);
        free(m);
}

/* Calls the handler of a request admitted to run now (holding a lane slot if it needs one). */
static int handle(Req *r, const Method *m, json_t **ret, RpcError *e) {
        int rr = (m->flags & M_SANDBOX) && resolve_sandbox(r, !(m->flags & M_ASLEEP), e) < 0 ? -1 : m->fn(r, ret, e);
        if (rr < 0 && r->sb)
                redact_error(r->sb->sb, e);
        /* A slot not taken over by a Pending: the request is answered, the slot is free. */
        lanes_return_lent(&r->core->lanes);
        return rr;
}

/* Methods a server in --mode disabled still answers. */
static bool works_disabled(const Method *m) {
        return strcmp(m->name, "ping") == 0 || strcmp(m->name, "health") == 0 || strcmp(m->name, "kill") == 0 ||
               strcmp(m->name, "sandbox.list") == 0;
}

/* Runs a parsed request. Returns 0 with *ret set, 1 if answered later, -1 with e set. */
static int dispatch_request(Req *r, const char *name, json_t **ret, RpcError *e) {
        const Method *m;
        LaneId lane = LANE_INTERACTIVE;
        if (lookup(name, r->params, &m, e) < 0)
                return -1;
        if (r->core->shutting_down && strcmp(m->name, "ping") != 0 && strcmp(m->name, "health") != 0)
                return rpc_fail(e, RPC_SHUTTING_DOWN, "POOL_SHUTTING_DOWN: the server is shutting down");
        if (r->core->mode == MODE_DISABLED && !works_disabled(m))
                return rpc_fail(e, RPC_SANDBOX_DISABLED,
                                "SANDBOX_DISABLED: this server runs with --mode disabled: nothing is executed "
                                "(ping and health still answer)");
        if (m->flags & M_LANE) {
                if (request_lane(r, &lane, e) < 0)
                        return -1;
                if (lanes_try_take(&r->core->lanes, lane) < 0) {
                        if (lanes_enqueue(&r->core->lanes, lane, r->conn, r->id, r->params, m, e) < 0)
                                return -1;
                        return 1;
                }
        }
        return handle(r, m, ret, e);
}

/* Sends the answer of a request handled: rr as dispatch_request returns it. */
static void answer(Conn *c, json_t *id, bool has_id, int rr, json_t *result, const RpcError *e, bool broken) {
        if (rr == 0 && has_id)
                conn_reply(c, id, result);
        else
                json_decref(result);
        /* Requests without an id are notifications: no answer, unless the line was so broken
         * that we cannot tell (then id null, as JSON-RPC says). */
        if (rr < 0 && broken)
                conn_reply_error(c, id, e);
}

void dispatch_start_waiting(void *data, LaneId lane, LaneWait *w) {
        Core *core = data;
        RpcError e = { 0 };
        json_t *result = NULL;
        (void)lane;
        Req r = { .core = core, .conn = w->conn, .id = w->id, .params = w->params };
        int rr = core->shutting_down ? rpc_fail(&e, RPC_SHUTTING_DOWN, "POOL_SHUTTING_DOWN: the server is shutting down")
                                     : handle(&r, w->method, &result, &e);
        answer(w->conn, w->id, w->id != NULL, rr, result, &e, rr < 0 && w->id != NULL);
        json_decref(w->id);
        json_decref(w->params);
        free(w);
}

void dispatch_line(Core *core, Conn *c, const char *line, size_t len, bool too_large) {
        RpcError e = { 0 };
        RpcRequest q = { 0 };
        json_t *result = NULL;
        int rr = -1;

        if (too_large) {
                rpc_fail(&e, RPC_PARSE_ERROR, "Request too large (limit %zu bytes)", conn_line_max(c));
                /* Answered to its id when its ends say it, so the client's call hears back. */
                q.msg = q.id = line ? rpc_cut_line_id(line, len) : NULL; /* msg owns it */
                q.has_id = q.id != NULL;
        } else {
                while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
                        len--;
                if (len == 0)
                        return; /* blank lines are keep-alives */
                if (rpc_parse_request(line, len, &q, &e) == 0) {
                        Req r = { .core = core, .conn = c, .id = q.id, .params = q.params };
                        rr = dispatch_request(&r, q.method, &result, &e);
                }
        }
        answer(c, q.id, q.has_id, rr, result, &e, rr < 0 && (too_large || rpc_request_wants_error(&q, &e)));
        rpc_request_done(&q);
}

static void print_params(FILE *f, const Method *m) {
        const Param *p = m->params;
        if (!p->name && !(m->flags & M_LANE)) {
                fprintf(f, "Params: none.\n\n");
                return;
        }
        fprintf(f, "| param | type | required | meaning |\n|---|---|---|---|\n");
        for (; p->name; p++)
                fprintf(f, "| `%s` | %s | %s | %s |\n", p->name, type_name(p->type), p->required ? "yes" : "no", p->doc);
        if (m->flags & M_LANE)
                fprintf(f, "| `lane` | string | no | \"interactive\" (default) or \"system\" (see Lanes) |\n");
        fprintf(f, "\n");
}

void dispatch_print_protocol(FILE *f) {
        fprintf(f,
                "# sbx protocol\n\n"
                "<!-- Generated by `sbx serve --protocol` from the method table (the m_*.c files of\n"
                "     src/server); tests/unit fails when this file and the table disagree. -->\n\n"
                "Newline-delimited JSON-RPC 2.0 over stdio (`sbx serve --stdio`) or a Unix socket\n"
                "(`sbx serve --socket PATH`, mode 0600, peers checked with SO_PEERCRED: same uid or root).\n"
                "Each request is one line `{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"run\",\"params\":{...}}`; each\n"
                "answer one line with the same id. Requests are handled concurrently: answers may come\n"
                "out of order. Runs in one session execute one at a time, in order.\n\n"
                "On the Unix socket a request may carry a file descriptor (SCM_RIGHTS): a memfd whose bytes\n"
                "are a file's, for `files.write` (`dataFd`) and `files.read` (`toFd`), instead of base64 in\n"
                "the line. Send it with the request's line alone (one sendmsg from the line's first byte):\n"
                "the server gives an fd to the line it arrived within. fds a request does not take are\n"
                "closed once it is handled; a connection holds at most %u not yet taken.\n\n"
                "## Routing\n\n"
                "Every per-sandbox method takes an optional `sandboxId`. Missing or null: the connection's\n"
                "root sandbox (made by `create`). A non-string: -32602 `sandboxId must be a string`. An id\n"
                "this connection may not use, or that does not exist: -32602 `Unknown sandboxId: X`. Ids are\n"
                "32 random hex digits. A sandbox is destroyed when the connection that made it closes,\n"
                "unless made with `persist: true` on a socket server.\n\n"
                "## Notifications\n\n"
                "With `stream: true`, `run` sends `{\"jsonrpc\":\"2.0\",\"method\":\"output\",\"params\":{requestId,\n"
                "stream: \"stdout\"|\"stderr\", seq, data, encoding?}}` in order as output arrives (`encoding:\n"
                "\"base64\"` when a chunk is not valid UTF-8). They go on past the output caps (`limits.stdoutBytes`,\n"
                "`stderrBytes`): a streaming client sees every byte, the result keeps the capped part.\n"
                "A client that stops reading gets its streaming runs paused (their pipes are no longer\n"
                "read) once %u MiB wait for it, and resumed below %u MiB.\n\n"
                "## Lanes\n\n"
                "Requests that set a worker going (the methods whose params list `lane`: `run`,\n"
                "`process.start`, `sandbox.fork`, `snapshot.create`, `snapshot.restore`,\n"
                "`persistence.export`, `persistence.import`) hold a slot of their lane from the moment\n"
                "they start until they are answered, except a `run` queued behind other runs of its\n"
                "session: it needs no worker yet, gives its slot back and takes over the one of the run of\n"
                "its session ahead of it when that one is answered. Two lanes: `interactive` (the default; `sbx serve\n"
                "--slots`, default one per 128 MiB of memory, at least 8 per CPU) and `system` (`--system-slots`, default 2), whose slots\n"
                "interactive work never takes. A request that finds its lane's slots taken waits in the\n"
                "lane's queue (`--queue`, default 10 waiting) and starts, in order, when a slot frees;\n"
                "waiting requests are served round-robin across connections. Past the queue: -32001\n"
                "`WORKER_UNAVAILABLE` with `error.data.retryAfterMs` (a connection with nothing waiting is\n"
                "still let in, up to twice the bound). `cancel` also reaches a run still waiting: it never\n"
                "starts and is answered 125 `CANCELLED`. `sbx serve --lane` fixes the lane\n"
                "of the clients of `--socket` (or stdio) and `--system-socket PATH` listens for clients in\n"
                "the system lane (the clients of `--socket` are then fixed to `interactive` unless `--lane`\n"
                "says otherwise); a request asking for another lane than its connection's fixed one gets\n"
                "-32602. `health` shows each lane.\n\n"
                "## Shutdown\n\n"
                "SIGTERM, SIGINT, SIGHUP or the `kill` method: the socket closes, waiting requests and\n"
                "runs queued in sessions are answered -32003 `POOL_SHUTTING_DOWN`, running runs are\n"
                "cancelled (answered 125); new requests other than `ping` and `health` get -32003. Once\n"
                "nothing is under way, or at the deadline (`--shutdown-deadline-ms`, default 10 s), every\n"
                "sandbox is destroyed and the server exits 0. A second signal does not wait.\n\n"
                "## Errors\n\n"
                "| code | when |\n|---|---|\n"
                "| -32700 | parse error; `Request too large` for a line over `limits.rpcBytes` (default 8 MiB), which is skipped without being buffered and answered to its id when the line's first members or its end name it (else id null) |\n"
                "| -32600 | invalid request; `Sandbox already created`; `Sandbox not created. Call \"create\" first.` |\n"
                "| -32601 | `Method not found: X` |\n"
                "| -32602 | invalid params, naming the param (`unknown parameter \"X\"` for a param the method does not list, `Missing required param: X`, `X must be a string`, `Unknown sandboxId: X`) |\n"
                "| -32603 | internal error (sandbox creation failed) |\n"
                "| -32001 | `WORKER_UNAVAILABLE: ...`: a server cap was reached (sandboxes: `sbx serve --max-sandboxes`, by default derived from the machine's free memory, pids and fds at start, `health` says it under `limits`; %u running or queued runs per session; %u sessions per sandbox; a lane's queue; creates waiting for the sandbox spawner, past its 16 MiB of requests); retry later: `error.data.retryAfterMs` when the server can tell when |\n"
                "| -32002 | `SANDBOX_DISABLED: ...`: the server runs with `--mode disabled`; only `ping`, `health`, `sandbox.list` and `kill` answer |\n"
                "| -32003 | `POOL_SHUTTING_DOWN: ...`: the server is shutting down |\n"
                "| 1 | sandbox or file error: `ERRNO: message` |\n\n"
                "## Methods\n\n",
                SBX_CONN_FDS, SBX_OUTPUT_QUEUE_HIGH_BYTES >> 20, SBX_OUTPUT_QUEUE_LOW_BYTES >> 20, SBX_MAX_QUEUED_RUNS,
                SBX_MAX_SESSIONS);
        for (const Method *const *t = tables; t && *t; t++)
                for (const Method *m = *t; m->name; m++) {
                        fprintf(f, "### `%s`\n\n%s\n\n", m->name, m->doc);
                        print_params(f, m);
                        fprintf(f, "Result: `%s`\n\n", m->result);
                }
}
