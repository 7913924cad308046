/* SPDX-License-Identifier: MIT */
/* E2B's code interpreter (its port 49999, which @e2b/code-interpreter reaches through the
 * sandbox URL with E2b-Sandbox-Port: 49999, or as 49999-ID.<domain>) over sbx's code contexts:
 * POST /execute is a code.run on a connection of its own, its code.output notifications
 * written as E2B's NDJSON lines as they come; /contexts are context.*. The server's
 * back-pressure holds a cell's output while the HTTP client reads slowly. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/util.h"
#include "e2b/e2b_private.h"

#define INTERP_PORT 49999
/* Bytes queued to a slow HTTP client before the cell's notifications are held. */
#define INTERP_QUEUED_BYTES (4u * 1024 * 1024)

bool interp_route(E2bReq *q) {
        const char *p = http_header(q->r, "E2b-Sandbox-Port");
        char id[64];
        unsigned port;
        if (p)
                return strcmp(p, "49999") == 0;
        return e2b_host_target(http_header(q->r, "Host"), &port, id) && port == INTERP_PORT;
}

/* The code interpreter's errors are plain text; E2B's SDK reads 404 as NotFoundError and 502
 * as "the sandbox is gone". */
static void reply_text(E2bReq *q, unsigned status, const char *msg) {
        char *s = strdup(msg);
        (void)http_reply(q->r, status, "text/plain; charset=utf-8", s, s ? strlen(s) : 0, NULL);
}

static unsigned status_of(json_t *error) {
        const char *m = json_string_value(json_object_get(error, "message")) ?: "";
        json_int_t code = json_integer_value(json_object_get(error, "code"));
        if (strstr(m, "no context") || strstr(m, "Unknown sandboxId"))
                return 404;
        return code == -32602 ? 400 : code == -32001 ? 429 : 500;
}

static void reply_sbx_error(E2bReq *q, json_t *error) {
        reply_text(q, status_of(error), json_string_value(json_object_get(error, "message")) ?: "sbx error");
}

/* ---------------------------------------------------------------- /execute */

static const struct {
        const char *mime, *key;
} formats[] = {
        { "text/plain", "text" },      { "text/html", "html" },          { "text/markdown", "markdown" },
        { "image/svg+xml", "svg" },    { "image/png", "png" },           { "image/jpeg", "jpeg" },
        { "application/pdf", "pdf" },  { "text/latex", "latex" },        { "application/json", "json" },
        { "application/javascript", "javascript" },
};

static void write_line(E2bReq *q, json_t *line) {
        char *s = json_dumps(line, JSON_COMPACT);
        json_decref(line);
        if (!s)
                return;
        size_t n = strlen(s);
        s[n] = '\n';
        (void)http_stream_write(q->r, s, n + 1);
        free(s);
        if (q->own && http_stream_queued(q->r) > INTERP_QUEUED_BYTES)
                rpc_client_pause(q->own, true);
}

/* A result as E2B's server gives it: each known mime type under its short name, the others
 * under their own (the SDK keeps those as `extra`). */
static json_t *result_line(json_t *params) {
        json_t *line = json_pack("{s:s, s:b}", "type", "result", "is_main_result",
                                 json_is_true(json_object_get(params, "isMainResult")));
        const char *mime;
        json_t *v;
        json_object_foreach(json_object_get(params, "data"), mime, v) {
                const char *key = mime;
                for (size_t i = 0; i < ELEMENTSOF(formats); i++)
                        if (!strcmp(formats[i].mime, mime))
                                key = formats[i].key;
                json_object_set(line, key, v);
        }
        return line;
}

static void execute_notify(void *ud, const char *method, json_t *params) {
        E2bReq *q = ud;
        if (strcmp(method, "code.output") != 0)
                return;
        const char *type = json_string_value(json_object_get(params, "type")) ?: "";
        if (!strcmp(type, "stdout") || !strcmp(type, "stderr"))
                write_line(q, json_pack("{s:s, s:O, s:I}", "type", type, "text", json_object_get(params, "text"),
                                        "timestamp", (json_int_t)wall_ms() * 1000));
        else if (!strcmp(type, "result"))
                write_line(q, result_line(params));
        else if (!strcmp(type, "error") && (q->told_error = true))
                write_line(q, json_pack("{s:s, s:O, s:O, s:O}", "type", "error", "name", json_object_get(params, "name"),
                                        "value", json_object_get(params, "value"), "traceback",
                                        json_object_get(params, "traceback")));
}

static void executed(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result) {
                if (!q->streaming)
                        return reply_sbx_error(q, error);
                write_line(q, json_pack("{s:s, s:s, s:O, s:s}", "type", "error", "name", "SandboxError", "value",
                                        json_object_get(error, "message"), "traceback", ""));
        } else {
                /* Errors that were no exception of the cell (a timeout, a cancel, a dead
                 * process) came as no notification: they are told here. */
                json_t *err = json_object_get(result, "error");
                if (json_is_object(err) && !q->told_error)
                        write_line(q, json_pack("{s:s, s:O, s:O, s:O}", "type", "error", "name", json_object_get(err, "name"),
                                                "value", json_object_get(err, "value"), "traceback",
                                                json_object_get(err, "traceback")));
                json_t *count = json_object_get(result, "executionCount");
                if (json_is_integer(count))
                        write_line(q, json_pack("{s:s, s:O}", "type", "number_of_executions", "execution_count", count));
                write_line(q, json_pack("{s:s}", "type", "end_of_execution"));
        }
        http_stream_end(q->r);
}

/* The cell goes; the answer's head goes at once, so that the SDK's timeoutMs (which runs from
 * the head on) can end a cell that prints nothing: its request's end cancels the cell. */
static void execute_send(E2bReq *q) {
        json_t *ctx = json_object_get(q->in, "context_id"), *lang = json_object_get(q->in, "language"),
               *env = json_object_get(q->in, "env_vars");
        json_t *p = json_pack("{s:s, s:O, s:b, s:I}", "sandboxId", q->box->id, "code", json_object_get(q->in, "code"),
                              "stream", true, "timeoutMs", (json_int_t)SBX_E2B_CELL_TIMEOUT_MS);
        if (json_is_string(ctx))
                json_object_set(p, "contextId", ctx);
        else if (json_is_string(lang))
                json_object_set(p, "language", lang);
        if (json_is_object(env) && json_object_size(env))
                json_object_set(p, "env", env);
        int fd, r = q->g->connect(q->g->connect_data, &fd);
        if (r == 0)
                r = rpc_client_new(q->g->loop, fd, execute_notify, q, &q->own);
        if (r < 0) {
                json_decref(p);
                return reply_text(q, 503, "cannot reach the sbx server");
        }
        if (rpc_client_call(q->own, "code.run", p, executed, q) < 0)
                return reply_text(q, 500, "out of memory");
        q->streaming = true;
        (void)http_stream_start(q->r, 200, "application/x-ndjson", NULL);
}

/* A context named must exist: E2B's interpreter answers 404 before any line. */
static void execute_checked(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return reply_sbx_error(q, error);
        const char *want = json_string_value(json_object_get(q->in, "context_id"));
        json_t *c;
        size_t i;
        json_array_foreach(json_object_get(result, "contexts"), i, c) {
                if (!strcmp(json_string_value(json_object_get(c, "id")) ?: "", want))
                        return execute_send(q);
        }
        char msg[256];
        snprintf(msg, sizeof msg, "no context %.64s in this sandbox", want);
        reply_text(q, 404, msg);
}

static void execute(E2bReq *q) {
        json_t *code = json_object_get(q->in, "code"), *ctx = json_object_get(q->in, "context_id");
        if (!json_is_string(code))
                return reply_text(q, 400, "code is required (a string)");
        const char *tok = http_header(q->r, "X-Access-Token");
        if (!tok || strcmp(tok, q->box->token) != 0)
                return reply_text(q, 401, "X-Access-Token is not this sandbox's envdAccessToken");
        if (!json_is_string(ctx))
                return execute_send(q);
        (void)rpc_client_call(q->g->rpc, "context.list", json_pack("{s:s}", "sandboxId", q->box->id), execute_checked, q);
}

/* ---------------------------------------------------------------- /contexts */

static void context_made(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return reply_sbx_error(q, error);
        e2b_reply_json(q, 200, json_incref(result));
}

static void contexts_listed(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return reply_sbx_error(q, error);
        e2b_reply_json(q, 200, json_incref(json_object_get(result, "contexts")));
}

static void context_done(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return reply_sbx_error(q, error);
        e2b_reply_empty(q, 204);
}

static void contexts(E2bReq *q, const char *method, const char *rest) {
        json_t *p = json_pack("{s:s}", "sandboxId", q->box->id);
        if (!*rest && !strcmp(method, "POST")) {
                json_t *lang = json_object_get(q->in, "language"), *cwd = json_object_get(q->in, "cwd");
                if (json_is_string(lang))
                        json_object_set(p, "language", lang);
                if (json_is_string(cwd))
                        json_object_set(p, "cwd", cwd);
                (void)rpc_client_call(q->g->rpc, "context.create", p, context_made, q);
                return;
        }
        if (!*rest && !strcmp(method, "GET")) {
                (void)rpc_client_call(q->g->rpc, "context.list", p, contexts_listed, q);
                return;
        }
        if (*rest == '/' && rest[1]) {
                char id[128];
                const char *slash = strchr(rest + 1, '/');
                size_t n = slash ? (size_t)(slash - rest - 1) : strlen(rest + 1);
                if (n < sizeof id) {
                        memcpy(id, rest + 1, n);
                        id[n] = 0;
                        json_object_set_new(p, "contextId", json_string(id));
                        if (!slash && !strcmp(method, "DELETE"))
                                return (void)rpc_client_call(q->g->rpc, "context.destroy", p, context_done, q);
                        if (slash && !strcmp(slash, "/restart") && !strcmp(method, "POST"))
                                return (void)rpc_client_call(q->g->rpc, "context.restart", p, context_done, q);
                }
        }
        json_decref(p);
        reply_text(q, 404, "no such route of the code interpreter");
}

void interp_request(E2bReq *q) {
        const char *path = http_path(q->r), *method = http_method(q->r);
        char buf[64];
        const char *id = http_header(q->r, "E2b-Sandbox-Id");
        unsigned port;
        if (!id && e2b_host_target(http_header(q->r, "Host"), &port, buf))
                id = buf;
        q->box = e2b_box_find(q->g, id);
        if (!q->box)
                return reply_text(q, 502, id ? "sandbox not found (killed, or it timed out)"
                                             : "the E2b-Sandbox-Id header is missing");
        size_t n;
        const uint8_t *body = http_body(q->r, &n);
        if (n) {
                json_error_t je;
                q->in = json_loadb((const char *)body, n, 0, &je);
                if (!json_is_object(q->in))
                        return reply_text(q, 400, "the body is not a JSON object");
        }
        if (!strcmp(path, "/health"))
                return reply_text(q, 200, "OK");
        if (!strcmp(path, "/execute") && !strcmp(method, "POST"))
                return execute(q);
        /* E2B's SDK sends no token with these (its sandbox's address is the secret there): a
         * client from elsewhere than loopback must show the sandbox's envdAccessToken, or
         * anyone who learnt an id could list, restart or destroy another's contexts. */
        const char *tok = http_header(q->r, "X-Access-Token");
        if (!http_from_loopback(q->r) && (!tok || strcmp(tok, q->box->token) != 0))
                return reply_text(q, 401, "X-Access-Token is not this sandbox's envdAccessToken (needed from beyond loopback)");
        if (!strncmp(path, "/contexts", 9))
                return contexts(q, method, path + 9);
        reply_text(q, 404, "no such route of the code interpreter (/execute, /contexts, /health)");
}
