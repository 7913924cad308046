/* SPDX-License-Identifier: MIT */
/* `sbx mcp`'s lines out (to the client, to the daemon) and a tool call's life: its requests,
 * its answer, its arguments. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/list.h"
#include "base/text.h"
#include "mcp/call.h"
#include "rpc/jsonrpc.h"

/* ---- lines */

/* Queues a line (malloc'd, taken over) for fd, writing what it takes at once so that an
 * answer costs no extra turn of the loop. Returns false when fd is broken. */
static bool send_line(int fd, ByteQueue *q, char *line, size_t len) {
        bool ok = true;
        if (!line)
                return true;
        size_t done = 0;
        if (bq_pending(q) == 0) {
                while (done < len) {
                        ssize_t n = write(fd, line + done, len - done);
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n < 0) {
                                ok = errno == EAGAIN;
                                break;
                        }
                        done += (size_t)n;
                }
        }
        if (ok && done < len && bq_push(q, line + done, len - done) < 0)
                ok = false;
        free(line);
        return ok;
}

bool mcp_flush(int fd, ByteQueue *q) {
        while (bq_pending(q) > 0) {
                ssize_t n = write(fd, bq_head(q), bq_pending(q));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return errno == EAGAIN;
                bq_consume(q, (size_t)n);
        }
        return true;
}

void mcp_to_client(Mcp *m, char *line, size_t len) {
        if (m->out_broken) {
                free(line);
                return;
        }
        if (!send_line(m->out_fd, &m->out, line, len)) {
                /* The client stopped reading for good: nobody is left to answer. */
                m->out_broken = true;
                m->stop = true;
        }
}

void mcp_reply(Mcp *m, json_t *id, json_t *result) {
        size_t len;
        char *line = rpc_result_line(id, result, &len);
        mcp_to_client(m, line, len);
}

void mcp_reply_error(Mcp *m, json_t *id, int code, const char *fmt, ...) {
        RpcError e = { .code = code };
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e.message, sizeof e.message, fmt, ap);
        va_end(ap);
        size_t len;
        char *line = rpc_error_line(id, &e, &len);
        mcp_to_client(m, line, len);
}

uint64_t mcp_request(Mcp *m, const char *method, json_t *params) {
        if (m->d_gone) {
                json_decref(params);
                return 0;
        }
        uint64_t id = ++m->next_id;
        json_t *msg = json_pack("{s:s, s:I, s:s, s:o}", "jsonrpc", "2.0", "id", (json_int_t)id, "method", method,
                                "params", params ? params : json_object());
        char *line = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
        json_decref(msg);
        if (!line)
                return 0;
        size_t len = strlen(line);
        /* Room for the newline that ends the line. */
        char *nl = realloc(line, len + 2);
        if (!nl) {
                free(line);
                return 0;
        }
        nl[len] = '\n';
        nl[len + 1] = '\0';
        if (!send_line(m->d_fd, &m->dq, nl, len + 1)) {
                m->d_gone = true;
                return 0;
        }
        return id;
}

/* ---- calls */

void mcp_call_free(McpCall *c) {
        Mcp *m = c->mcp;
        LIST_UNLINK(m->calls, c);
        m->ncalls--;
        if (c->state_free)
                c->state_free(c->state);
        json_decref(c->id);
        json_decref(c->args);
        json_decref(c->progress_token);
        json_decref(c->structured);
        json_decref(c->extra_content);
        free(c);
}

void mcp_answer(McpCall *c, const char *text, size_t len, bool is_error) {
        json_t *res = json_pack("{s:[{s:s, s:s%}], s:b}", "content", "type", "text", "text", text, len, "isError",
                                is_error);
        /* structuredContent came with the 2025-06-18 revision. */
        if (res && c->structured && !is_error && c->mcp->version && strcmp(c->mcp->version, "2025-06-18") >= 0)
                json_object_set(res, "structuredContent", c->structured);
        if (res && c->extra_content)
                json_array_extend(json_object_get(res, "content"), c->extra_content);
        mcp_reply(c->mcp, c->id, res);
        mcp_call_free(c);
}

void mcp_answer_fmt(McpCall *c, bool is_error, const char *fmt, ...) {
        char *text = NULL;
        va_list ap;
        va_start(ap, fmt);
        int n = vasprintf(&text, fmt, ap);
        va_end(ap);
        if (n < 0) {
                mcp_answer(c, "out of memory", 13, true);
                return;
        }
        mcp_answer(c, text, (size_t)n, is_error);
        free(text);
}

void mcp_answer_text(McpCall *c, char *text, bool is_error) {
        if (!text) {
                mcp_answer(c, "out of memory", 13, true);
                return;
        }
        (void)utf8_sanitize(text);
        mcp_answer(c, text, strlen(text), is_error);
        free(text);
}

void mcp_answer_memstream(McpCall *c, FILE *f, char **text, bool is_error) {
        if (fclose(f) != 0) {
                free(*text);
                *text = NULL;
        }
        mcp_answer_text(c, TAKE_PTR(*text), is_error);
}

/* The daemon's words name its protocol (processId, process.list); the model knows the tools
 * and their arguments (process_id, process_list): the same words, in the tools' names. */
static char *in_tool_words(const char *error) {
        static const char *const words[][2] = {
                { "processId", "process_id" },    { "sandboxId", "sandbox" },     { "process.list", "process_list" },
                { "process.start", "process_start" }, { "process.logs", "process_logs" },
                { "process.kill", "process_kill" }, { "files.read", "read_file" }, { "files.write", "write_file" },
                { "files.list", "list_directory" },
        };
        size_t cap = 2 * strlen(error) + 1, n = 0;
        char *out = malloc(cap);
        if (!out)
                return NULL;
        for (const char *p = error; *p;) {
                size_t i = 0;
                while (i < ELEMENTSOF(words) && strncmp(p, words[i][0], strlen(words[i][0])) != 0)
                        i++;
                const char *from = i < ELEMENTSOF(words) ? words[i][1] : p;
                size_t len = i < ELEMENTSOF(words) ? strlen(words[i][1]) : 1;
                if (n + len + 1 > cap) {
                        char *o = realloc(out, cap = 2 * cap + len);
                        if (!o) {
                                free(out);
                                return NULL;
                        }
                        out = o;
                }
                memcpy(out + n, from, len);
                n += len;
                p += i < ELEMENTSOF(words) ? strlen(words[i][0]) : 1;
        }
        out[n] = 0;
        return out;
}

bool mcp_refused(McpCall *c, json_t *result, const char *error) {
        if (result)
                return false;
        mcp_answer_text(c, in_tool_words(error ? error : "the daemon failed"), true);
        return true;
}

json_t *mcp_params(McpCall *c) {
        json_t *p = json_object();
        const char *sb = arg_str(c, "sandbox");
        if (!sb)
                sb = c->mcp->sandbox;
        if (p && sb && json_object_set_new(p, "sandboxId", json_string(sb)) < 0) {
                json_decref(p);
                return NULL;
        }
        return p;
}

int mcp_send(McpCall *c, const char *method, json_t *params, McpAnswerFn fn) {
        if (!params) {
                mcp_answer(c, "out of memory", 13, true);
                return -ENOMEM;
        }
        uint64_t id = mcp_request(c->mcp, method, params);
        if (id == 0) {
                mcp_answer_fmt(c, true, "the sbx daemon is gone: %s could not be sent", method);
                return -EPIPE;
        }
        c->daemon_id = id;
        c->on_answer = fn;
        c->waits_run = strcmp(method, "run") == 0 || strcmp(method, "code.run") == 0;
        return 0;
}

/* ---- arguments */

static json_t *arg(McpCall *c, const char *name) {
        json_t *v = json_object_get(c->args, name);
        return json_is_null(v) ? NULL : v;
}

const char *arg_str(McpCall *c, const char *name) { return json_string_value(arg(c, name)); }

bool arg_bool(McpCall *c, const char *name) { return json_is_true(arg(c, name)); }

double arg_num(McpCall *c, const char *name, double def) {
        json_t *v = arg(c, name);
        return v ? json_number_value(v) : def;
}

double arg_timeout_s(McpCall *c) {
        return arg_num(c, "timeout",
                       (double)(c->progress_token ? SBX_MCP_PROGRESS_TIMEOUT_MS : SBX_MCP_DEFAULT_TIMEOUT_MS) / 1000);
}
