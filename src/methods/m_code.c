/* SPDX-License-Identifier: MIT */
/* Handlers for code contexts and cells (context.*, code.run): a Python context is a session
 * whose shell is the Python kernel (sbx.h, SbxShell), a bash context a bash session, and a
 * cell is a run on it. What a Python cell's kernel sends (its events) is text from inside the
 * sandbox: each line is parsed and checked here, and only what is well-formed is passed on. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include "base/limits.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/text.h"
#include "base/util.h"
#include "server/handler.h"
#include "methods/methods.h"

typedef enum Lang { LANG_PYTHON, LANG_BASH, LANG_JAVASCRIPT, LANG_INVALID } Lang;

static const char *const lang_names[] = { "python", "bash", "javascript" };

static Lang lang_parse(const char *s) {
        if (s && (strcmp(s, "js") == 0 || strcmp(s, "node") == 0))
                return LANG_JAVASCRIPT;
        for (size_t i = 0; s && i < ELEMENTSOF(lang_names); i++)
                if (strcmp(s, lang_names[i]) == 0)
                        return (Lang)i;
        return LANG_INVALID;
}

static SbxShell lang_shell(Lang l) { return l == LANG_JAVASCRIPT ? SBX_SHELL_JAVASCRIPT : SBX_SHELL_PYTHON; }

/* A cell on its way: what its answer will hold. */
typedef struct Cell {
        Pending *p;
        Lang lang;
        char id[SBX_MAX_SESSION_NAME_BYTES + 1]; /* its context */
        SbxSandbox *sb;     /* outlives its runs */
        SrvSandbox *ssb;    /* so does the server's record of it (sbx_sandbox_free answers them first) */
        SbxSession *s;
        uint64_t losses;    /* the session's losses its context had seen when the cell was queued */
        bool setup;         /* context.create/restart: the context's first run, answered as such */
        json_t *results, *out, *err, *warnings, *error, *count;
        bool ended;         /* the kernel's `end` came: the cell ran to its end */
        uint64_t dropped;   /* bytes of events or output left out */
        size_t kept;        /* bytes of output and events the answer holds */
        uint8_t carry[2][4]; /* a UTF-8 sequence cut at the end of a piece of fd output */
        size_t carry_len[2];
} Cell;

static void cell_free(Cell *c) {
        if (!c)
                return;
        json_decref(c->results);
        json_decref(c->out);
        json_decref(c->err);
        json_decref(c->warnings);
        json_decref(c->error);
        json_decref(c->count);
        free(c);
}

static void cell_notify(Cell *c, json_t *event) {
        Pending *p = c->p;
        if (!p->conn || !p->stream) {
                json_decref(event);
                return;
        }
        json_object_set_new(event, "requestId", json_incref(p->id));
        json_object_set_new(event, "seq", json_integer((json_int_t)p->seq++));
        conn_notify(p->conn, "code.output", event);
}

/* Keeps a piece of text of the answer's logs, within SBX_CODE_EVENTS_BYTES. */
static void cell_log(Cell *c, bool is_out, const char *text, size_t len) {
        if (c->kept + len > SBX_CODE_EVENTS_BYTES) {
                c->dropped += len;
                return;
        }
        json_t *s = json_stringn(text, len);
        if (!s)
                return;
        c->kept += len;
        json_array_append(is_out ? c->out : c->err, s);
        cell_notify(c, json_pack("{s:s, s:o}", "type", is_out ? "stdout" : "stderr", "text", s));
}

/* Where a piece of fd output may be cut without splitting a UTF-8 sequence: the length of
 * an incomplete sequence at its end (0 to 3). */
static size_t utf8_tail(const uint8_t *d, size_t n) {
        for (size_t back = 1; back <= 3 && back <= n; back++) {
                uint8_t b = d[n - back];
                if ((b & 0xC0) == 0x80)
                        continue;
                size_t need = b >= 0xF8 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
                return need > back ? back : 0;
        }
        return 0;
}

/* What the cell's processes wrote to fds 1 and 2, as text (bytes that are not UTF-8 become
 * '?'), in the logs after what its Python code printed before. */
static void cell_fd_output(Cell *c, int k, const uint8_t *d, size_t n) {
        size_t cl = c->carry_len[k], tail = utf8_tail(d, n);
        _cleanup_free_ char *text = malloc(cl + n + 1);
        if (!text)
                return;
        memcpy(text, c->carry[k], cl);
        memcpy(text + cl, d, n - tail);
        size_t len = cl + n - tail;
        memcpy(c->carry[k], d + n - tail, tail);
        c->carry_len[k] = tail;
        text[len] = 0;
        /* NULs end the text for jansson: they become '?' as any byte that is not UTF-8. */
        for (size_t i = 0; i < len; i++)
                if (!text[i])
                        text[i] = '?';
        (void)utf8_sanitize(text);
        if (len)
                cell_log(c, k == 0, text, len);
}

/* A mime bundle from the kernel: an object of strings, application/json (and any
 * "+json" type) any JSON value. NULL when it is not one. */
static json_t *bundle_check(json_t *data) {
        if (!json_is_object(data) || json_object_size(data) == 0)
                return NULL;
        const char *k;
        json_t *v;
        json_object_foreach(data, k, v) {
                size_t kl = strlen(k);
                bool json_type = strcmp(k, "application/json") == 0 || (kl > 5 && strcmp(k + kl - 5, "+json") == 0);
                if (!strchr(k, '/') || kl > 255 || (!json_is_string(v) && !json_type))
                        return NULL;
        }
        return data;
}

/* One line of the kernel's events. */
static void cell_event(Cell *c, const uint8_t *line, size_t len) {
        json_error_t jerr;
        if (json_marks((const char *)line, len, "{[,:") > SBX_CODE_EVENT_VALUES) {
                c->dropped += len;
                return;
        }
        json_t *ev = json_loadb((const char *)line, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!json_is_object(ev)) {
                json_decref(ev);
                c->dropped += len;
                return;
        }
        const char *type = json_string_value(json_object_get(ev, "type"));
        if (!type) {
                c->dropped += len;
        } else if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) {
                json_t *t = json_object_get(ev, "text");
                if (json_is_string(t))
                        cell_log(c, type[3] == 'o', json_string_value(t), json_string_length(t));
        } else if (strcmp(type, "result") == 0 || strcmp(type, "display") == 0) {
                json_t *data = bundle_check(json_object_get(ev, "data"));
                json_t *md = json_object_get(ev, "metadata");
                if (!data || c->kept + len > SBX_CODE_EVENTS_BYTES) {
                        c->dropped += len;
                } else {
                        c->kept += len;
                        json_t *res = json_pack("{s:O, s:b}", "data", data, "isMainResult", type[0] == 'r');
                        if (json_is_object(md) && json_object_size(md) > 0)
                                json_object_set(res, "metadata", md);
                        json_array_append(c->results, res);
                        if (c->p->stream) {
                                json_t *n = json_copy(res);
                                json_object_set_new(n, "type", json_string("result"));
                                cell_notify(c, n);
                        }
                        json_decref(res);
                }
        } else if (strcmp(type, "error") == 0) {
                json_t *name = json_object_get(ev, "name"), *value = json_object_get(ev, "value"),
                       *tb = json_object_get(ev, "traceback");
                if (!c->error && json_is_string(name) && json_is_string(value) && json_is_string(tb)) {
                        c->error = json_pack("{s:O, s:O, s:O}", "name", name, "value", value, "traceback", tb);
                        if (c->p->stream) {
                                json_t *n = json_copy(c->error);
                                json_object_set_new(n, "type", json_string("error"));
                                cell_notify(c, n);
                        }
                }
        } else if (strcmp(type, "warning") == 0) {
                json_t *t = json_object_get(ev, "text");
                if (json_is_string(t) && json_array_size(c->warnings) < 16)
                        json_array_append(c->warnings, t);
        } else if (strcmp(type, "end") == 0) {
                json_t *n = json_object_get(ev, "executionCount");
                if (json_is_integer(n) || json_is_null(n)) {
                        json_decref(c->count);
                        c->count = json_incref(n);
                        c->ended = true;
                }
        }
        json_decref(ev);
}

static void cell_output(void *ud, SbxStream st, const uint8_t *d, size_t n) {
        Cell *c = ud;
        if (st == SBX_EVENTS) {
                if (!d) {
                        c->dropped += n;
                        return;
                }
                /* Redacted as the sandbox's output is: secrets never leave through events either. */
                size_t rl;
                _cleanup_free_ char *red = sbx_sandbox_redact(c->sb, d, n, &rl);
                if (red)
                        cell_event(c, (const uint8_t *)red, rl);
                else
                        c->dropped += n;
        } else {
                cell_fd_output(c, st == SBX_STDOUT ? 0 : 1, d, n);
        }
}

static json_t *error_json(const char *name, const char *value) {
        return json_pack("{s:s, s:s, s:s}", "name", name, "value", value, "traceback", "");
}

/* The error of a cell that did not run to its end, said in words. */
static json_t *cell_failure(Cell *c, const SbxResult *res, bool reset) {
        char msg[512];
        if (c->lang == LANG_JAVASCRIPT && res->error_class != SBX_ERROR_LIMIT_EXCEEDED &&
            res->error_class != SBX_ERROR_UNAVAILABLE && res->exit_code != 127) {
                /* Node cannot fork: the process that held the context ran the cell. */
                snprintf(msg, sizeof msg,
                         "the cell %s; Node cannot keep a context across a cell that does not end, so the "
                         "JavaScript context was reset: a fresh node took over and every variable is gone",
                         res->error_class == SBX_ERROR_TIMEOUT     ? "ran past its timeout and was killed"
                         : res->error_class == SBX_ERROR_CANCELLED ? "was cancelled"
                         : res->error_class == SBX_ERROR_PIDS_LIMIT ? "made processes past the sandbox's limit"
                                                                     : "did not end (its process died)");
                return error_json("ContextReset", msg);
        }
        /* Not the cell's end: nothing more runs in that sandbox, and "as it was" would mislead. */
        if (!c->ended && sbx_sandbox_gone(c->sb))
                return error_json("SandboxGone", "the sandbox is gone (its pid 1 exited): the context went with it, "
                                                 "and nothing more runs there");
        if (reset) {
                snprintf(msg, sizeof msg,
                         "the context's interpreter died during the cell%s; a fresh one took over: every variable "
                         "of the context is gone",
                         res->error_class == SBX_ERROR_OOM ? " (the sandbox ran out of memory)" : "");
                return error_json("ContextReset", msg);
        }
        if (res->error_class == SBX_ERROR_TIMEOUT) {
                snprintf(msg, sizeof msg,
                         "the cell ran past its timeout and was killed after %llu ms; the context is as it was before "
                         "the cell",
                         (unsigned long long)(res->exec_time_us / 1000));
                return error_json("TimeoutError", msg);
        }
        if (res->error_class == SBX_ERROR_CANCELLED)
                return error_json("CancelledError", "the cell was cancelled; the context is as it was before the cell");
        if (res->error_class == SBX_ERROR_PIDS_LIMIT) {
                snprintf(msg, sizeof msg, "the cell made processes past the sandbox's limit and was stopped; the context is as it was before the cell");
                return error_json("PidsLimit", msg);
        }
        if (res->error_class == SBX_ERROR_LIMIT_EXCEEDED || res->error_class == SBX_ERROR_UNAVAILABLE) {
                snprintf(msg, sizeof msg, "%.*s", (int)MIN(res->stderr_len, 400u), (const char *)res->stderr_data);
                utf8_sanitize(msg);
                return error_json(res->error_class == SBX_ERROR_LIMIT_EXCEEDED ? "LimitExceeded" : "Unavailable", msg);
        }
        if (res->stderr_len && !c->ended && res->exit_code == 127) {
                snprintf(msg, sizeof msg, "%.*s", (int)MIN(res->stderr_len, 400u), (const char *)res->stderr_data);
                utf8_sanitize(msg);
                return error_json("ContextUnavailable", msg);
        }
        int code = res->exit_code;
        snprintf(msg, sizeof msg,
                 "the cell's process ended before the cell did (%s %d%s); the context is as it was before the cell",
                 code > 128 ? "signal" : "exit status", code > 128 ? code - 128 : code,
                 res->error_class == SBX_ERROR_OOM ? ": the sandbox ran out of memory" : "");
        return error_json("CellDied", msg);
}

static json_t *cell_answer(Cell *c, const SbxResult *res) {
        /* A sequence cut short at the very end is not UTF-8: its bytes show as '?'. */
        for (int k = 0; k < 2; k++)
                if (c->carry_len[k]) {
                        char q[4] = "???";
                        cell_log(c, k == 0, q, c->carry_len[k]);
                        c->carry_len[k] = 0;
                }
        bool reset = sbx_session_losses(c->s) != c->losses;
        json_t *err = c->error ? json_incref(c->error) : NULL;
        /* A kill is the daemon's word, whatever the kernel wrote before it (an `end` included:
         * its lines come from inside the sandbox). */
        bool killed = res->error_class == SBX_ERROR_TIMEOUT || res->error_class == SBX_ERROR_CANCELLED ||
                      res->error_class == SBX_ERROR_PIDS_LIMIT;
        if (c->lang != LANG_BASH && (killed || (!c->ended && !err))) {
                json_decref(err);
                err = cell_failure(c, res, reset);
        }
        if (c->lang == LANG_JAVASCRIPT && err && !strcmp(json_string_value(json_object_get(err, "name")) ?: "", "ContextReset"))
                reset = true;
        if (c->lang == LANG_BASH && !err && res->error_class != SBX_ERROR_NONE)
                err = cell_failure(c, res, false);
        if (c->lang == LANG_BASH && !err && res->exit_code != 0) {
                char msg[64];
                snprintf(msg, sizeof msg, "exit status %d", res->exit_code);
                err = error_json("ExitError", msg);
        }
        json_t *out = json_pack("{s:s, s:s, s:O, s:O, s:{s:O, s:O}, s:o, s:i, s:I}", "contextId", c->id, "language",
                                lang_names[c->lang], "executionCount", c->count, "results", c->results, "logs", "stdout",
                                c->out, "stderr", c->err, "error", err ? err : json_null(), "exitCode", res->exit_code,
                                "executionTimeMs", (json_int_t)(res->exec_time_us / 1000));
        if (!out)
                return NULL;
        if (res->error_class != SBX_ERROR_NONE)
                json_object_set_new(out, "errorClass", json_string(sbx_error_class_name(res->error_class)));
        if (json_array_size(c->warnings))
                json_object_set(out, "warnings", c->warnings);
        if (reset)
                json_object_set_new(out, "contextReset", json_true());
        if (c->dropped)
                json_object_set_new(out, "droppedBytes", json_integer((json_int_t)c->dropped));
        if (res->killed)
                json_object_set_new(out, "killedProcesses", json_integer(res->killed));
        return out;
}

static json_t *context_json(const char *id, json_t *ctx) {
        return json_pack("{s:s, s:O, s:O}", "id", id, "language", json_object_get(ctx, "language"), "cwd",
                         json_object_get(ctx, "cwd"));
}

static int context_runs(Lang lang, json_t *ctx, SbxRunOptions *o, char **ret_cd, const char ***ret_env, RpcError *e);

static void reapplied(void *ud, const SbxResult *res) {
        if (res->exit_code != 0)
                log_warn("a code context lost its interpreter and could not get its cwd and env back (exit %d)",
                         res->exit_code);
}

static json_t *cell_context(const Cell *c) {
        return c->ssb && c->ssb->contexts ? json_object_get(c->ssb->contexts, c->id) : NULL;
}

/* A context whose interpreter died (the state was lost) gets its cwd and env again, as made,
 * before the cells queued after this one. */
static bool context_reapply(Cell *c) {
        json_t *ctx = cell_context(c);
        SbxRunOptions o = { 0 };
        char *cd = NULL;
        const char **envl = NULL;
        RpcError e;
        if (!ctx || context_runs(c->lang, ctx, &o, &cd, &envl, &e) < 0)
                return false;
        int r = c->lang != LANG_BASH ? sbx_session_run_code(c->s, &o, NULL, reapplied, NULL, NULL)
                                     : sbx_session_run(c->s, &o, NULL, reapplied, NULL, NULL);
        free(cd);
        handler_env_free(envl);
        return r >= 0;
}

/* What a context remembers of its session's losses (its holder died: the state is gone):
 * seenLosses, how many its cells have told (contextReset); appliedLosses, after how many its
 * cwd and env were set again. Both are the session's count when the context is (re)made. */
static uint64_t context_count(const Cell *c, const char *key) {
        json_t *v = json_object_get(cell_context(c), key);
        return json_is_integer(v) ? (uint64_t)json_integer_value(v) : sbx_session_losses(c->s);
}

static void context_set_count(const Cell *c, const char *key) {
        json_t *ctx = cell_context(c);
        if (ctx)
                (void)json_object_set_new(ctx, key, json_integer((json_int_t)sbx_session_losses(c->s)));
}

/* The context's cwd and env set again, once per loss, before the cells queued from now on. */
static void context_reapply_once(Cell *c) {
        if (context_count(c, "appliedLosses") == sbx_session_losses(c->s))
                return;
        if (context_reapply(c))
                context_set_count(c, "appliedLosses");
}

static void cell_done(void *ud, const SbxResult *res) {
        Cell *c = ud;
        Pending *p = c->p;
        p->run = NULL;
        audit_run_end(p->core->audit, TAKE_PTR(p->audit), res);
        if (p->conn && !p->replied) {
                if (c->setup) {
                        /* A context's first run: its interpreter started, with its cwd and env. */
                        SrvSandbox *ssb = p->proc;
                        json_t *ctx = ssb && ssb->contexts ? json_object_get(ssb->contexts, c->id) : NULL;
                        if (res->exit_code == 0 && ctx) {
                                conn_reply(p->conn, p->id, context_json(c->id, ctx));
                        } else {
                                /* Not made after all: it is not listed, nor counted. */
                                if (ssb && ssb->contexts)
                                        json_object_del(ssb->contexts, c->id);
                                RpcError e;
                                char msg[512];
                                snprintf(msg, sizeof msg, "%.*s", (int)MIN(res->stderr_len, 400u),
                                         (const char *)res->stderr_data);
                                utf8_sanitize(msg);
                                json_t *err = c->error ? json_object_get(c->error, "value") : NULL;
                                rpc_fail(&e, RPC_SANDBOX_ERROR, "the context could not start: %s",
                                         err ? json_string_value(err) : *msg ? msg : "its interpreter ended");
                                conn_reply_error(p->conn, p->id, &e);
                        }
                } else {
                        json_t *out = cell_answer(c, res);
                        if (out) {
                                conn_reply(p->conn, p->id, out);
                        } else {
                                RpcError e;
                                rpc_fail(&e, RPC_INTERNAL_ERROR, "out of memory building the result");
                                conn_reply_error(p->conn, p->id, &e);
                        }
                }
        }
        if (!c->setup)
                context_reapply_once(c);
        context_set_count(c, "seenLosses");
        p->proc = NULL;
        pending_free(p);
        cell_free(c);
}

/* Queues a cell (or a context's first run, setup) on s and answers r when it ends. Returns 1
 * or -1 with e set. */
static int start_cell(Req *r, Lang lang, const char *id, SbxSession *s, const SbxRunOptions *o, bool stream, bool setup,
                      RpcError *e) {
        Pending *p;
        Cell *c = calloc(1, sizeof *c);
        if (!c)
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        c->lang = lang;
        snprintf(c->id, sizeof c->id, "%s", id);
        c->sb = r->sb->sb;
        c->ssb = r->sb;
        c->s = s;
        c->setup = setup;
        /* Counted from what the context's cells told, not from now: a holder that died
         * between cells lost the state too, and the next cell says so (contextReset) after
         * the context's cwd and env are set again in the fresh interpreter. A context made
         * (or remade) now starts from the session's count. */
        if (setup) {
                context_set_count(c, "seenLosses");
                context_set_count(c, "appliedLosses");
        }
        c->losses = context_count(c, "seenLosses");
        c->results = json_array();
        c->out = json_array();
        c->err = json_array();
        c->warnings = json_array();
        c->count = json_null();
        if (!c->results || !c->out || !c->err || !c->warnings ||
            pending_new(&r->core->pending, r->core, r->conn, r->id, PENDING_RUN, &p) < 0) {
                cell_free(c);
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        }
        c->p = p;
        p->stream = stream;
        p->proc = setup ? r->sb : NULL;
        if (!setup)
                p->audit = audit_run_begin(r->core->audit, r->sb, r->conn, sbx_session_name(s), o->command, o->command_len);
        pending_run_session(&r->core->pending, p, s);
        if (!setup && c->losses != sbx_session_losses(s)) {
                json_t *w = json_string("the context's interpreter died after its last cell ended; this cell runs in a "
                                        "fresh one, with the context's cwd and env: every earlier variable is gone");
                if (w)
                        (void)json_array_append_new(c->warnings, w);
                context_reapply_once(c);
        }
        int rr = lang != LANG_BASH ? sbx_session_run_code(s, o, cell_output, cell_done, c, &p->run)
                                   : sbx_session_run(s, o, cell_output, cell_done, c, &p->run);
        /* Told by this cell: the cells queued after it run in the same fresh interpreter. */
        if (rr >= 0 && !setup && c->losses != sbx_session_losses(s))
                context_set_count(c, "seenLosses");
        if (rr < 0) {
                json_decref(p->audit);
                p->audit = NULL;
                p->proc = NULL;
                pending_free(p);
                cell_free(c);
                if (rr == -EBUSY)
                        return rpc_fail(e, RPC_WORKER_UNAVAILABLE, "WORKER_UNAVAILABLE: context %s already holds %u cells",
                                        id, SBX_MAX_QUEUED_RUNS);
                if (rr == -EINVAL || rr == -E2BIG)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "invalid cell options (cwd, env or timeoutMs)");
                return rpc_fail_errno(e, rr, "code.run");
        }
        return 1;
}

/* The session of a context, made when missing (a default context, or one a restart
 * replaced). */
static int context_session(Req *r, Lang lang, const char *id, SbxSession **ret, RpcError *e) {
        SbxSandbox *sb = r->sb->sb;
        if (lang == LANG_BASH) {
                int rr = sbx_session_get(sb, id, ret);
                return rr < 0 ? rpc_fail_errno(e, rr, "context") : 0;
        }
        SbxSession *s = sbx_session_find_shell(sb, id, lang_shell(lang));
        int rr = s ? 0 : sbx_session_new_shell(sb, id, lang_shell(lang), &s);
        if (rr == -EMFILE)
                return rpc_fail(e, RPC_WORKER_UNAVAILABLE, "the sandbox already holds %u sessions and contexts",
                                SBX_MAX_SESSIONS);
        if (rr < 0)
                return rpc_fail_errno(e, rr, "context");
        *ret = s;
        return 0;
}

/* Records a context ({language, cwd, env}) in the sandbox's list. */
static int context_add(Req *r, const char *id, Lang lang, const char *cwd, json_t *env, RpcError *e) {
        if (!r->sb->contexts && !(r->sb->contexts = json_object()))
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        if (json_object_size(r->sb->contexts) >= SBX_MAX_CODE_CONTEXTS)
                return rpc_fail(e, RPC_WORKER_UNAVAILABLE, "the sandbox already holds %u code contexts; destroy one first",
                                SBX_MAX_CODE_CONTEXTS);
        json_t *ctx = json_pack("{s:s, s:s, s:o}", "language", lang_names[lang], "cwd", cwd ? cwd : "/home/user", "env",
                                env ? json_incref(env) : json_object());
        if (!ctx || json_object_set_new(r->sb->contexts, id, ctx) < 0)
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        return 0;
}

/* Single-quoted for bash. */
static char *shell_quote(const char *s) {
        size_t n = 3;
        for (const char *p = s; *p; p++)
                n += *p == '\'' ? 4 : 1;
        char *q = malloc(n), *o = q;
        if (!q)
                return NULL;
        *o++ = '\'';
        for (const char *p = s; *p; p++) {
                if (*p == '\'') {
                        memcpy(o, "'\\''", 4);
                        o += 4;
                } else {
                        *o++ = *p;
                }
        }
        *o++ = '\'';
        *o = 0;
        return q;
}

/* The run that sets a context's cwd and env for good (its first, and again after its
 * interpreter died): *ret_cd and *ret_env are the caller's to free. Returns 0 or -1 with e set. */
static int context_runs(Lang lang, json_t *ctx, SbxRunOptions *o, char **ret_cd, const char ***ret_env, RpcError *e) {
        const char *cwd = json_string_value(json_object_get(ctx, "cwd"));
        *ret_cd = NULL;
        if (handler_env_list(json_object_get(ctx, "env"), ret_env, e) < 0)
                return -1;
        *o = (SbxRunOptions){ .env = *ret_env, .persist_env = true, .command = "", .command_len = 0 };
        if (lang != LANG_BASH) {
                o->cwd = cwd;
                return 0;
        }
        _cleanup_free_ char *q = shell_quote(cwd);
        if (!q || asprintf(ret_cd, "cd -- %s", q) < 0) {
                *ret_cd = NULL;
                handler_env_free(*ret_env);
                *ret_env = NULL;
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        }
        o->command = *ret_cd;
        o->command_len = strlen(*ret_cd);
        return 0;
}

/* A context's first run: its interpreter starts with the context's cwd and env set for good;
 * answered with the context once it has. */
static int context_setup(Req *r, const char *id, Lang lang, SbxSession *s, json_t *ctx, RpcError *e) {
        SbxRunOptions o;
        char *cd;
        const char **envl;
        if (context_runs(lang, ctx, &o, &cd, &envl, e) < 0)
                return -1;
        int rr = start_cell(r, lang, id, s, &o, false, true, e);
        free(cd);
        handler_env_free(envl);
        return rr;
}

static int new_context_id(char buf[32]) {
        uint8_t b[6];
        if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b)
                return -EIO;
        snprintf(buf, 32, "ctx-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3], b[4], b[5]);
        return 0;
}

static int param_lang(Req *r, Lang *ret, RpcError *e) {
        const char *l = "python";
        if (param_string(r->params, "language", false, &l, NULL, e) < 0)
                return -1;
        if (!l)
                l = "python";
        *ret = lang_parse(l);
        if (*ret == LANG_INVALID)
                return rpc_fail(e, RPC_INVALID_PARAMS,
                                "language must be \"python\", \"javascript\" (or \"js\") or \"bash\" (got \"%.64s\")", l);
        return 0;
}

static int param_cwd_env(Req *r, const char **cwd, json_t **env, RpcError *e) {
        *cwd = NULL;
        *env = NULL;
        if (param_string(r->params, "cwd", false, cwd, NULL, e) < 0 || param_object(r->params, "env", env, e) < 0)
                return -1;
        if (*cwd && (**cwd != '/' || strlen(*cwd) >= SBX_MAX_PATH_BYTES))
                return rpc_fail(e, RPC_INVALID_PARAMS, "cwd must be an absolute path");
        if (*env && json_object_size(*env) > SBX_MAX_RUN_ENV)
                return rpc_fail(e, RPC_INVALID_PARAMS, "env: at most %d entries", SBX_MAX_RUN_ENV);
        const char **check;
        if (handler_env_list(*env, &check, e) < 0)
                return -1;
        handler_env_free(check);
        return 0;
}

static int m_context_create(Req *r, json_t **ret, RpcError *e) {
        Lang lang;
        const char *cwd;
        json_t *env;
        char id[32];
        SbxSession *s;
        if (param_lang(r, &lang, e) < 0 || param_cwd_env(r, &cwd, &env, e) < 0 || handler_while_paused(r, e) < 0)
                return -1;
        if (cwd) {
                /* Said now, rather than by an interpreter that started for nothing. */
                SbxFileInfo fi;
                int fr = sbx_file_stat(r->sb->sb, cwd, &fi);
                bool dir = fr == 0 && (fi.type == SBX_FILE_DIR || fi.type == SBX_FILE_SYMLINK);
                if (fr == 0)
                        sbx_file_info_clear(&fi);
                if (fr == -ENOENT || fr == -ENOTDIR || (fr == 0 && !dir))
                        return rpc_fail(e, RPC_INVALID_PARAMS, "cwd %.200s is not a directory in the sandbox", cwd);
        }
        if (new_context_id(id) < 0)
                return rpc_fail(e, RPC_INTERNAL_ERROR, "no random bytes for an id");
        if (context_add(r, id, lang, cwd, env, e) < 0)
                return -1;
        if (context_session(r, lang, id, &s, e) < 0) {
                json_object_del(r->sb->contexts, id);
                return -1;
        }
        int rr = context_setup(r, id, lang, s, json_object_get(r->sb->contexts, id), e);
        if (rr < 0) {
                if (lang != LANG_BASH)
                        sbx_session_free(s);
                json_object_del(r->sb->contexts, id);
        }
        return rr;
}

static json_t *find_context(Req *r, const char *id, RpcError *e) {
        json_t *ctx = r->sb->contexts ? json_object_get(r->sb->contexts, id) : NULL;
        if (!ctx)
                rpc_fail(e, RPC_INVALID_PARAMS, "no context %.64s in this sandbox (context.list shows them)", id);
        return ctx;
}

/* The context's session, NULL when it has none now. */
static SbxSession *context_find_session(SrvSandbox *ssb, const char *id, Lang lang) {
        return lang != LANG_BASH ? sbx_session_find_shell(ssb->sb, id, lang_shell(lang)) : sbx_session_find(ssb->sb, id);
}

static int m_context_list(Req *r, json_t **ret, RpcError *e) {
        json_t *list = json_array();
        const char *id;
        json_t *ctx;
        if (r->sb->contexts)
                json_object_foreach(r->sb->contexts, id, ctx) json_array_append_new(list, context_json(id, ctx));
        *ret = json_pack("{s:o}", "contexts", list);
        return 0;
}

/* The context the request's contextId names, its id and language; NULL with e set. */
static json_t *param_context(Req *r, const char **ret_id, Lang *ret_lang, RpcError *e) {
        if (param_string(r->params, "contextId", true, ret_id, NULL, e) < 0)
                return NULL;
        json_t *ctx = find_context(r, *ret_id, e);
        if (ctx)
                *ret_lang = lang_parse(json_string_value(json_object_get(ctx, "language")));
        return ctx;
}

static int m_context_restart(Req *r, json_t **ret, RpcError *e) {
        const char *id;
        Lang lang;
        SbxSession *s;
        json_t *ctx = handler_while_paused(r, e) < 0 ? NULL : param_context(r, &id, &lang, e);
        if (!ctx)
                return -1;
        /* Its cells, running or queued, are answered as cancelled first. */
        sbx_session_free(context_find_session(r->sb, id, lang));
        if (context_session(r, lang, id, &s, e) < 0)
                return -1;
        return context_setup(r, id, lang, s, ctx, e);
}

static int m_context_destroy(Req *r, json_t **ret, RpcError *e) {
        const char *id;
        Lang lang;
        if (!param_context(r, &id, &lang, e))
                return -1;
        sbx_session_free(context_find_session(r->sb, id, lang));
        json_object_del(r->sb->contexts, id);
        *ret = handler_ok_json();
        return 0;
}

static int m_code_run(Req *r, json_t **ret, RpcError *e) {
        const char *code, *cid = NULL;
        size_t code_len;
        bool stream = false;
        json_t *env = NULL;
        SbxRunOptions o = { 0 };
        Lang lang;
        if (param_string(r->params, "code", true, &code, &code_len, e) < 0 ||
            param_string(r->params, "contextId", false, &cid, NULL, e) < 0 ||
            param_u64(r->params, "timeoutMs", false, UINT64_MAX, &o.timeout_ms, e) < 0 ||
            param_bool(r->params, "stream", &stream, e) < 0 || param_object(r->params, "env", &env, e) < 0 ||
            param_lang(r, &lang, e) < 0 || handler_while_paused(r, e) < 0 || audit_check_run(r->core->audit, e) < 0)
                return -1;
        char msg[256];
        if (json_object_get(r->params, "timeoutMs") && !json_is_null(json_object_get(r->params, "timeoutMs")) &&
            sbx_limit_check(SBX_LIMIT_TIMEOUT, o.timeout_ms, "timeoutMs", msg, sizeof msg) < 0)
                return rpc_fail(e, RPC_INVALID_PARAMS, "%s", msg);
        if (env && json_object_size(env) > SBX_MAX_RUN_ENV)
                return rpc_fail(e, RPC_INVALID_PARAMS, "env: at most %d entries", SBX_MAX_RUN_ENV);
        if (cid && json_object_get(r->params, "language") && !json_is_null(json_object_get(r->params, "language")))
                return rpc_fail(e, RPC_INVALID_PARAMS, "give contextId or language, not both");
        char defid[32];
        if (cid) {
                json_t *ctx = find_context(r, cid, e);
                if (!ctx)
                        return -1;
                lang = lang_parse(json_string_value(json_object_get(ctx, "language")));
        } else {
                /* The language's default context, made on first use. */
                snprintf(defid, sizeof defid, "default-%s", lang_names[lang]);
                cid = defid;
                if ((!r->sb->contexts || !json_object_get(r->sb->contexts, cid)) &&
                    context_add(r, cid, lang, NULL, NULL, e) < 0)
                        return -1;
        }
        SbxSession *s;
        if (context_session(r, lang, cid, &s, e) < 0)
                return -1;
        const char **envl;
        if (handler_env_list(env, &envl, e) < 0)
                return -1;
        o.command = code;
        o.command_len = code_len;
        o.env = envl;
        int rr = start_cell(r, lang, cid, s, &o, stream, false, e);
        handler_env_free(envl);
        return rr;
}

static const Param p_context_create[] = {
        PARAM_SANDBOX_ID,
        { "language", P_STRING, false, "\"python\" (default), \"javascript\" or \"bash\"" },
        { "cwd", P_STRING, false, "its working directory (default /home/user)" },
        { "env", P_OBJECT, false, "{NAME: value} set in the context for good" },
        PARAM_WHILE_PAUSED,
        { 0 } };
#define PARAM_CONTEXT_ID { "contextId", P_STRING, true, "a context's id (context.create, context.list)" }
static const Param p_context_id[] = { PARAM_SANDBOX_ID, PARAM_CONTEXT_ID, { 0 } };
static const Param p_context_restart[] = { PARAM_SANDBOX_ID, PARAM_CONTEXT_ID, PARAM_WHILE_PAUSED, { 0 } };
static const Param p_code_run[] = {
        PARAM_SANDBOX_ID,
        { "code", P_STRING, true, "the cell's source (at most limits.commandBytes)" },
        { "contextId", P_STRING, false, "the context to run in; missing: the language's default context" },
        { "language", P_STRING, false, "without contextId: \"python\" (default), \"javascript\" or \"bash\"" },
        { "timeoutMs", P_INT, false, "this cell's timeout (default: the sandbox's)" },
        { "env", P_OBJECT, false, "{NAME: value} for this cell only" },
        { "stream", P_BOOL, false, "send `code.output` notifications as the cell prints and shows results" },
        PARAM_WHILE_PAUSED,
        { 0 } };

const Method server_methods_code[] = {
        { "context.create", m_context_create, M_SANDBOX | M_LANE, p_context_create, "{id, language, cwd}",
          "Makes a code context: a Python interpreter (IPython when the host has python3-ipython), a JavaScript one "
          "(the host's node: top-level await, `import` as dynamic imports, values as util.inspect shows them) or a "
          "bash session, whose state every cell run in it keeps. Answered once its interpreter has started. A "
          "Python or bash cell that is killed (timeout, cancel) or whose process dies leaves the context as it was "
          "before the cell; Node cannot fork, so such a JavaScript cell resets its context (ContextReset). Not "
          "carried by fork, snapshots or export." },
        { "context.list", m_context_list, M_SANDBOX, handler_params_sandbox, "{contexts: [{id, language, cwd}]}",
          "The sandbox's code contexts, the default ones (default-python, default-bash) once used." },
        { "context.restart", m_context_restart, M_SANDBOX | M_LANE, p_context_restart, "{id, language, cwd}",
          "Replaces a context's interpreter with a fresh one (its cwd and env as created): its cells running or "
          "queued are answered as cancelled, every variable is gone." },
        { "context.destroy", m_context_destroy, M_SANDBOX, p_context_id, "{ok: true}",
          "Ends a context: its cells are answered as cancelled, its interpreter killed." },
        { "code.run", m_code_run, M_SANDBOX | M_LANE, p_code_run,
          "{contextId, language, executionCount, results: [{data: {mime: value}, metadata?, isMainResult}], "
          "logs: {stdout: [text], stderr: [text]}, error: {name, value, traceback} | null, exitCode, executionTimeMs, "
          "errorClass?, warnings?, contextReset?, droppedBytes?, killedProcesses?}",
          "Runs a cell in a context. results: the cell's value (isMainResult) and what it displayed, each a mime "
          "bundle (text/plain, text/html, image/png as base64, image/svg+xml, application/json, text/markdown, "
          "text/latex, ...): a matplotlib figure comes as image/png, a pandas DataFrame as text/html. logs: what "
          "the cell printed and what its processes wrote, in pieces. error: the cell's exception (traceback as "
          "IPython formats it), or why it did not end: TimeoutError (errorClass TIMEOUT), CancelledError "
          "(CANCELLED), CellDied (its process ended, e.g. os._exit or the OOM killer): after each of those the "
          "context is as it was before the cell; ContextReset (contextReset: true): the interpreter itself died "
          "and a fresh one took over; SandboxGone: the sandbox's pid 1 exited, the context with it. warnings: what the context could not keep (threads of earlier cells). "
          "Notifications with stream: `code.output` {requestId, seq, type: stdout|stderr|result|error, ...}. "
          "Cancel with `cancel` {requestId}." },
        { 0 } };
