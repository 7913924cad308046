/* SPDX-License-Identifier: MIT */
/* The method table and its handlers. The table is the single source for dispatch, parameter
 * validation and docs/PROTOCOL.md (print_protocol; a test keeps the file in sync). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "base/limits.h"
#include "base/log.h"
#include "base/text.h"
#include "base/util.h"
#include "fs/files.h"
#include "server/server.h"

typedef struct Req {
        Conn *conn;
        json_t *id;
        json_t *params;
        SrvSandbox *sb; /* resolved for methods that take sandboxId */
} Req;

/* Returns 0 with *ret set (sync reply), 1 when the handler answers later, -1 with e set. */
typedef int (*Handler)(Req *r, json_t **ret, RpcError *e);

typedef enum ParamType { P_STRING, P_INT, P_BOOL, P_OBJECT, P_ANY } ParamType;

typedef struct Param {
        const char *name;
        ParamType type;
        bool required;
        const char *doc;
} Param;

enum { M_SANDBOX = 1 }; /* takes sandboxId and needs a sandbox */

typedef struct Method {
        const char *name;
        Handler fn;
        unsigned flags;
        const Param *params;
        const char *result;
        const char *doc;
} Method;

static json_t *iso_time(uint64_t ms) {
        time_t t = (time_t)(ms / 1000);
        struct tm tm;
        char buf[64];
        gmtime_r(&t, &tm);
        snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
        return json_string(buf);
}

static json_t *ok(void) { return json_pack("{s:b}", "ok", 1); }

/* ---------------------------------------------------------------- sandboxes */

static History *history_for(SrvSandbox *sb, const char *session, bool create) {
        for (History *h = sb->history; h; h = h->next)
                if (strcmp(h->session, session) == 0)
                        return h;
        if (!create)
                return NULL;
        History *h = calloc(1, sizeof *h);
        if (!h || !(h->session = strdup(session)) ||
            !(h->entries = calloc(SERVER_HISTORY_MAX, sizeof *h->entries))) {
                if (h)
                        free(h->session);
                free(h);
                return NULL;
        }
        h->next = sb->history;
        sb->history = h;
        return h;
}

static void history_clear(History *h) {
        for (size_t i = 0; i < h->n; i++)
                free(h->entries[(h->start + i) % SERVER_HISTORY_MAX].command);
        h->n = h->start = 0;
        h->total = 0;
}

static void history_add(SrvSandbox *sb, const char *session, const char *cmd, size_t len) {
        History *h = history_for(sb, session, true);
        char *copy = h ? strndup(cmd, len) : NULL;
        if (!copy)
                return;
        if (h->n == SERVER_HISTORY_MAX) {
                free(h->entries[h->start].command);
                h->start = (h->start + 1) % SERVER_HISTORY_MAX;
                h->n--;
        }
        h->entries[(h->start + h->n) % SERVER_HISTORY_MAX] = (HistoryEntry){ copy, wall_ms() };
        h->n++;
        h->total++;
}

void srv_sandbox_destroy(SrvSandbox *sb) {
        Server *s = sb->srv;
        if (sb->owner && sb->owner->root == sb)
                sb->owner->root = NULL;
        sbx_sandbox_free(sb->sb);
        while (sb->history) {
                History *h = sb->history;
                sb->history = h->next;
                history_clear(h);
                free(h->entries);
                free(h->session);
                free(h);
        }
        if (sb->is_fork)
                s->n_forks--;
        if (sb->prev)
                sb->prev->next = sb->next;
        else
                s->sandboxes = sb->next;
        if (sb->next)
                sb->next->prev = sb->prev;
        s->n_sandboxes--;
        free(sb->label);
        free(sb);
}

static SrvSandbox *find_sandbox(Conn *c, const char *id) {
        for (SrvSandbox *sb = c->srv->sandboxes; sb; sb = sb->next)
                if (strcmp(sbx_sandbox_id(sb->sb), id) == 0 &&
                    (sb->owner == c || (sb->persist && (sb->uid == c->uid || c->uid == 0))))
                        return sb;
        return NULL;
}

/* Reads the sandbox options shared by create and sandbox.create. */
/* Reads the options; *ret_rpc_bytes gets limits.rpcBytes (0 if absent), which the caller
 * applies to the connection only once the sandbox exists. */
static int parse_sandbox_options(json_t *p, SbxSandboxOptions *o, const char ***ret_env, size_t *ret_rpc_bytes,
                                 RpcError *e) {
        json_t *limits = NULL, *env = NULL;
        uint64_t v;
        sbx_sandbox_options_init(o);
        *ret_env = NULL;
        *ret_rpc_bytes = 0;
        if (param_u64(p, "timeoutMs", false, SBX_MAX_TIMEOUT_MS, &o->timeout_ms, e) < 0 ||
            param_u64(p, "fsLimitBytes", false, 1ULL << 40, &o->limits.fs_bytes, e) < 0 ||
            param_bool(p, "network", &o->network, e) < 0 || param_object(p, "limits", &limits, e) < 0 ||
            param_object(p, "env", &env, e) < 0)
                return -1;
        if (limits) {
                if (param_u64(limits, "stdoutBytes", false, SBX_MAX_OUTPUT_BYTES, &o->limits.stdout_bytes, e) < 0 ||
                    param_u64(limits, "stderrBytes", false, SBX_MAX_OUTPUT_BYTES, &o->limits.stderr_bytes, e) < 0 ||
                    param_u64(limits, "commandBytes", false, SBX_MAX_COMMAND_BYTES, &o->limits.command_bytes, e) < 0 ||
                    param_u64(limits, "fileCount", false, 1ULL << 32, &o->limits.file_count, e) < 0 ||
                    param_u64(limits, "memoryBytes", false, 1ULL << 44, &o->limits.memory_bytes, e) < 0 ||
                    param_u64(limits, "fsBytes", false, 1ULL << 40, &o->limits.fs_bytes, e) < 0)
                        return -1;
                if (param_u64(limits, "pids", false, 1 << 22, &v, e) < 0)
                        return -1;
                o->limits.pids = (uint32_t)v;
                v = 0;
                if (param_u64(limits, "rpcBytes", false, 1ULL << 30, &v, e) < 0)
                        return -1;
                if (json_object_get(limits, "rpcBytes") && v < 1024)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "limits.rpcBytes must be at least 1024");
                *ret_rpc_bytes = (size_t)v;
        }
        if (env) {
                size_t n = json_object_size(env), k = 0;
                const char **list = calloc(n + 1, sizeof *list);
                const char *key;
                json_t *val;
                if (!list)
                        return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
                json_object_foreach(env, key, val) {
                        if (!env_name_valid(key, strlen(key)) || !json_is_string(val)) {
                                for (size_t i = 0; i < k; i++)
                                        free((void *)list[i]);
                                free(list);
                                return rpc_fail(e, RPC_INVALID_PARAMS,
                                                "env: names must match ^[A-Za-z_][A-Za-z0-9_]*$ and values be strings (%s)", key);
                        }
                        size_t len = strlen(key) + json_string_length(val) + 2;
                        char *kv = malloc(len);
                        if (kv)
                                snprintf(kv, len, "%s=%s", key, json_string_value(val));
                        list[k++] = kv;
                }
                o->env = list;
                *ret_env = list;
        }
        return 0;
}

static void free_env_list(const char **list) {
        for (const char **p = list; p && *p; p++)
                free((void *)*p);
        free(list);
}

static int new_sandbox(Req *r, bool root, SrvSandbox **ret, RpcError *e) {
        Conn *c = r->conn;
        Server *s = c->srv;
        SbxSandboxOptions o;
        const char **env = NULL;
        const char *label = NULL;
        bool persist = false;
        if (s->n_sandboxes >= SERVER_MAX_SANDBOXES)
                return rpc_fail(e, RPC_WORKER_UNAVAILABLE, "WORKER_UNAVAILABLE: Maximum of %u concurrent sandboxes reached",
                                SERVER_MAX_SANDBOXES);
        size_t rpc_bytes;
        if (parse_sandbox_options(r->params, &o, &env, &rpc_bytes, e) < 0 ||
            param_string(r->params, "label", false, &label, NULL, e) < 0 ||
            param_bool(r->params, "persist", &persist, e) < 0) {
                free_env_list(env);
                return -1;
        }
        if (persist && (c->is_stdio || root)) {
                free_env_list(env);
                return rpc_fail(e, RPC_INVALID_PARAMS, "persist is only for sandbox.create on a socket server");
        }
        SrvSandbox *sb = calloc(1, sizeof *sb);
        if (!sb) {
                free_env_list(env);
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        }
        int rr = sbx_sandbox_new(s->ctx, &o, &sb->sb);
        free_env_list(env);
        if (rr < 0) {
                free(sb);
                if (rr == -EINVAL)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "invalid sandbox options: %s", sbx_context_last_error(s->ctx));
                return rpc_fail(e, RPC_INTERNAL_ERROR, "cannot create sandbox: %s", sbx_context_last_error(s->ctx));
        }
        if (rpc_bytes)
                c->framer.max = rpc_bytes;
        sb->srv = s;
        sb->owner = persist ? NULL : c;
        sb->persist = persist;
        sb->uid = c->uid;
        sb->label = label ? strdup(label) : NULL;
        sb->created_ms = wall_ms();
        sb->next = s->sandboxes;
        if (s->sandboxes)
                s->sandboxes->prev = sb;
        s->sandboxes = sb;
        s->n_sandboxes++;
        *ret = sb;
        return 0;
}

static void pending_free(Pending *p);

/* A new sandbox is answered once its root is built, so that every method works on it. */
static void created_ready(void *ud, SbxSandbox *ssb, int error) {
        Pending *p = ud;
        if (p->conn && error == 0) {
                conn_reply(p->conn, p->id, TAKE_PTR(p->answer));
        } else if (p->conn) {
                RpcError e;
                rpc_fail(&e, RPC_SANDBOX_ERROR, "the sandbox could not start: %s", strerror(-error));
                conn_reply_error(p->conn, p->id, &e);
        }
        json_decref(p->answer);
        pending_free(p);
}

/* Returns 1 (answered later) or -1 with e set. */
static int answer_when_ready(Req *r, SrvSandbox *sb, json_t *answer, RpcError *e) {
        Pending *p = calloc(1, sizeof *p);
        if (!p || !answer) {
                free(p);
                json_decref(answer);
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        }
        p->conn = r->conn;
        p->srv = r->conn->srv;
        p->id = json_incref(r->id);
        p->kind = PENDING_OP;
        p->answer = answer;
        p->next = r->conn->pending;
        if (p->next)
                p->next->prev = p;
        r->conn->pending = p;
        int rr = sbx_sandbox_on_ready(sb->sb, created_ready, p);
        if (rr < 0) {
                json_decref(p->answer);
                pending_free(p);
                return rpc_fail_errno(e, rr, "create");
        }
        return 1;
}

static int m_create(Req *r, json_t **ret, RpcError *e) {
        SrvSandbox *sb;
        if (r->conn->root)
                return rpc_fail(e, RPC_INVALID_REQUEST, "Sandbox already created");
        if (new_sandbox(r, true, &sb, e) < 0)
                return -1;
        r->conn->root = sb;
        return answer_when_ready(r, sb, json_pack("{s:b, s:s}", "ok", 1, "sandboxId", sbx_sandbox_id(sb->sb)), e);
}

static int m_sandbox_create(Req *r, json_t **ret, RpcError *e) {
        SrvSandbox *sb;
        if (new_sandbox(r, false, &sb, e) < 0)
                return -1;
        return answer_when_ready(r, sb, json_pack("{s:s}", "sandboxId", sbx_sandbox_id(sb->sb)), e);
}

static int m_sandbox_list(Req *r, json_t **ret, RpcError *e) {
        json_t *list = json_array();
        for (SrvSandbox *sb = r->conn->srv->sandboxes; sb; sb = sb->next) {
                if (find_sandbox(r->conn, sbx_sandbox_id(sb->sb)) != sb)
                        continue;
                json_t *o = json_pack("{s:s, s:o, s:b, s:b}", "sandboxId", sbx_sandbox_id(sb->sb), "createdAt",
                                      iso_time(sb->created_ms), "persist", sb->persist, "root",
                                      sb == r->conn->root);
                if (sb->label)
                        json_object_set_new(o, "label", json_string(sb->label));
                json_array_append_new(list, o);
        }
        *ret = json_pack("{s:o}", "sandboxes", list);
        return 0;
}

static int m_sandbox_destroy(Req *r, json_t **ret, RpcError *e) {
        srv_sandbox_destroy(r->sb);
        *ret = ok();
        return 0;
}

/* ---------------------------------------------------------------- sessions */

static int get_session(Req *r, bool create, SbxSession **ret, const char **ret_name, RpcError *e) {
        const char *name = "default";
        if (param_string(r->params, "session", false, &name, NULL, e) < 0)
                return -1;
        *ret_name = name;
        SbxSession *s = sbx_session_find(r->sb->sb, name);
        if (s) {
                *ret = s;
                return 0;
        }
        if (!create && strcmp(name, "default") != 0)
                return rpc_fail(e, RPC_INVALID_PARAMS, "Unknown session: %s", name);
        int rr = sbx_session_get(r->sb->sb, name, ret);
        if (rr == -EINVAL)
                return rpc_fail(e, RPC_INVALID_PARAMS, "Invalid session name: %s (1-64 of [A-Za-z0-9_.-])", name);
        if (rr == -EMFILE)
                return rpc_fail(e, RPC_WORKER_UNAVAILABLE, "WORKER_UNAVAILABLE: Maximum of %u sessions reached", SBX_MAX_SESSIONS);
        if (rr < 0)
                return rpc_fail_errno(e, rr, "session");
        return 0;
}

static int m_session_create(Req *r, json_t **ret, RpcError *e) {
        const char *name;
        SbxSession *s;
        if (param_string(r->params, "name", true, &name, NULL, e) < 0)
                return -1;
        if (sbx_session_find(r->sb->sb, name))
                return rpc_fail(e, RPC_INVALID_PARAMS, "Session already exists: %s", name);
        json_object_set(r->params, "session", json_object_get(r->params, "name"));
        if (get_session(r, true, &s, &name, e) < 0)
                return -1;
        *ret = json_pack("{s:b, s:s}", "ok", 1, "name", name);
        return 0;
}

static int m_session_list(Req *r, json_t **ret, RpcError *e) {
        json_t *list = json_array();
        for (SbxSession *s = sbx_session_next(r->sb->sb, NULL); s; s = sbx_session_next(r->sb->sb, s))
                json_array_append_new(list, json_pack("{s:s}", "name", sbx_session_name(s)));
        *ret = json_pack("{s:o}", "sessions", list);
        return 0;
}

static int m_session_delete(Req *r, json_t **ret, RpcError *e) {
        const char *name;
        if (param_string(r->params, "name", true, &name, NULL, e) < 0)
                return -1;
        SbxSession *s = sbx_session_find(r->sb->sb, name);
        if (!s)
                return rpc_fail(e, RPC_INVALID_PARAMS, "Unknown session: %s", name);
        sbx_session_free(s);
        *ret = ok();
        return 0;
}

/* ---------------------------------------------------------------- runs */

static void pending_unlink(Pending *p) {
        Conn *c = p->conn;
        if (!c)
                return;
        if (p->prev)
                p->prev->next = p->next;
        else
                c->pending = p->next;
        if (p->next)
                p->next->prev = p->prev;
        p->next = p->prev = NULL;
        p->conn = NULL;
}

static void pending_free(Pending *p) {
        pending_unlink(p);
        json_decref(p->id);
        free(p->key);
        free(p);
}

void pending_detach_all(Conn *c) {
        while (c->pending) {
                Pending *p = c->pending;
                pending_unlink(p);
                /* The run's done callback frees p; cancel makes it come soon. */
                if (p->run)
                        (void)sbx_run_cancel(p->run);
        }
}

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

static void count_result(Server *s, const SbxResult *res) {
        s->totals.completed++;
        s->totals.exec_ms_sum += res->exec_time_us / 1000;
        if (res->error_class == SBX_ERROR_TIMEOUT)
                s->totals.timed_out++;
        else if (res->error_class == SBX_ERROR_CANCELLED)
                s->totals.cancelled++;
        else if (res->exit_code != 0)
                s->totals.failed++;
}

static void run_done(void *ud, const SbxResult *res) {
        Pending *p = ud;
        p->run = NULL;
        if (p->kind == PENDING_RUN)
                count_result(p->srv, res);
        if (p->conn && !p->replied) {
                json_t *out = NULL;
                if (p->kind == PENDING_ENV_SET) {
                        out = ok();
                } else if (p->kind == PENDING_ENV_GET) {
                        size_t n = res->stdout_len;
                        out = json_pack("{s:o}", "value", res->exit_code == 0 ? json_stringn((const char *)res->stdout_data, n)
                                                                            : json_null());
                } else {
                        out = json_pack("{s:i, s:I}", "exitCode", res->exit_code, "executionTimeMs",
                                        (json_int_t)(res->exec_time_us / 1000));
                        if (json_set_bytes(out, "stdout", res->stdout_data, res->stdout_len) < 0 ||
                            json_set_bytes(out, "stderr", res->stderr_data, res->stderr_len) < 0) {
                                json_decref(out);
                                out = NULL;
                        }
                        if (out && (res->stdout_truncated || res->stderr_truncated))
                                json_object_set_new(out, "truncated", json_pack("{s:b, s:b}", "stdout", res->stdout_truncated,
                                                                                "stderr", res->stderr_truncated));
                        if (out && res->error_class != SBX_ERROR_NONE)
                                json_object_set_new(out, "errorClass", json_string(sbx_error_class_name(res->error_class)));
                }
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

static char *id_key(json_t *id) {
        return json_dumps(id ? id : json_null(), JSON_COMPACT | JSON_ENCODE_ANY);
}

/* Queues a run and registers it as pending on the connection. */
static int start_run(Req *r, SbxSession *s, const SbxRunOptions *o, int kind, bool stream, RpcError *e) {
        Pending *p = calloc(1, sizeof *p);
        if (!p)
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        p->srv = r->conn->srv;
        p->id = json_incref(r->id);
        p->key = id_key(r->id);
        p->kind = kind;
        p->stream = stream;
        p->conn = r->conn;
        p->next = r->conn->pending;
        if (p->next)
                p->next->prev = p;
        r->conn->pending = p;
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
        const char *cmd, *cwd = NULL, *stdin_b64 = NULL, *sname;
        size_t cmd_len, stdin_len = 0;
        json_t *env = NULL;
        bool stream = false;
        SbxSession *s;
        SbxRunOptions o = { 0 };
        if (param_string(r->params, "command", true, &cmd, &cmd_len, e) < 0 ||
            param_string(r->params, "cwd", false, &cwd, NULL, e) < 0 ||
            param_string(r->params, "stdin", false, &stdin_b64, &stdin_len, e) < 0 ||
            param_u64(r->params, "timeoutMs", false, SBX_MAX_TIMEOUT_MS, &o.timeout_ms, e) < 0 ||
            param_bool(r->params, "stream", &stream, e) < 0 || param_object(r->params, "env", &env, e) < 0)
                return -1;
        if (cwd && (!*cwd || strlen(cwd) >= SBX_MAX_PATH_BYTES))
                return rpc_fail(e, RPC_INVALID_PARAMS, "cwd must be a non-empty path");
        size_t n_env = env ? json_object_size(env) : 0;
        if (n_env > SBX_MAX_RUN_ENV)
                return rpc_fail(e, RPC_INVALID_PARAMS, "env: at most %d entries", SBX_MAX_RUN_ENV);
        if (get_session(r, true, &s, &sname, e) < 0)
                return -1;
        uint8_t *in = NULL;
        if (stdin_b64) {
                in = b64_decode(stdin_b64, stdin_len, &o.stdin_len);
                if (!in)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "stdin must be base64");
        }
        const char **envl = calloc(n_env + 1, sizeof *envl);
        const char *key;
        json_t *val;
        size_t k = 0;
        int rr = 0;
        json_object_foreach(env, key, val) {
                if (!json_is_string(val) || !env_name_valid(key, strlen(key))) {
                        rr = rpc_fail(e, RPC_INVALID_PARAMS, "env: names must match ^[A-Za-z_][A-Za-z0-9_]*$ and values be strings (%s)", key);
                        break;
                }
                size_t len = strlen(key) + json_string_length(val) + 2;
                char *kv = malloc(len);
                if (kv)
                        snprintf(kv, len, "%s=%s", key, json_string_value(val));
                envl[k++] = kv;
        }
        if (rr == 0) {
                o.command = cmd;
                o.command_len = cmd_len;
                o.cwd = cwd;
                o.env = envl;
                o.stdin_data = in;
                /* A command refused for its size never ran: not history. */
                if (cmd_len <= sbx_sandbox_limits(r->sb->sb)->command_bytes)
                        history_add(r->sb, sname, cmd, cmd_len);
                rr = start_run(r, s, &o, PENDING_RUN, stream, e);
        }
        free(in);
        free_env_list(envl);
        return rr;
}

static int m_cancel(Req *r, json_t **ret, RpcError *e) {
        json_t *rid = json_object_get(r->params, "requestId");
        if (!rid)
                return rpc_fail(e, RPC_INVALID_PARAMS, "Missing required param: requestId");
        char *key = id_key(rid);
        Pending *p = r->conn->pending;
        while (p && !(p->kind == PENDING_RUN && key && strcmp(p->key, key) == 0))
                p = p->next;
        free(key);
        if (!p || !p->run)
                return rpc_fail(e, RPC_INVALID_PARAMS, "No running request with that requestId (unknown or already finished)");
        (void)sbx_run_cancel(p->run);
        *ret = ok();
        return 0;
}

static int m_env_set(Req *r, json_t **ret, RpcError *e) {
        const char *name, *value, *sname;
        SbxSession *s;
        if (param_string(r->params, "name", true, &name, NULL, e) < 0 ||
            param_string(r->params, "value", true, &value, NULL, e) < 0)
                return -1;
        if (!env_name_valid(name, strlen(name)))
                return rpc_fail(e, RPC_INVALID_PARAMS, "name must match ^[A-Za-z_][A-Za-z0-9_]*$");
        if (get_session(r, true, &s, &sname, e) < 0)
                return -1;
        size_t len = strlen(name) + strlen(value) + 2;
        char *kv = malloc(len);
        if (!kv)
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        snprintf(kv, len, "%s=%s", name, value);
        const char *env[] = { kv, NULL };
        SbxRunOptions o = { .command = "", .command_len = 0, .env = env, .persist_env = true };
        int rr = start_run(r, s, &o, PENDING_ENV_SET, false, e);
        free(kv);
        return rr;
}

static int m_env_get(Req *r, json_t **ret, RpcError *e) {
        const char *name, *sname;
        SbxSession *s;
        char cmd[512];
        if (param_string(r->params, "name", true, &name, NULL, e) < 0)
                return -1;
        if (!env_name_valid(name, strlen(name)) || strlen(name) > 256)
                return rpc_fail(e, RPC_INVALID_PARAMS, "name must match ^[A-Za-z_][A-Za-z0-9_]*$");
        if (get_session(r, true, &s, &sname, e) < 0)
                return -1;
        /* Read by the session's builtin itself: no shell code runs, so nothing defined in the
         * session (bash even allows a function named /usr/bin/printenv) can answer instead. */
        snprintf(cmd, sizeof cmd, "%s", name);
        SbxRunOptions o = { .command = cmd, .command_len = strlen(cmd), .get_env = true };
        return start_run(r, s, &o, PENDING_ENV_GET, false, e);
}

static int m_history_list(Req *r, json_t **ret, RpcError *e) {
        const char *name = "default";
        if (param_string(r->params, "session", false, &name, NULL, e) < 0)
                return -1;
        History *h = history_for(r->sb, name, false);
        json_t *list = json_array();
        for (size_t i = 0; h && i < h->n; i++) {
                HistoryEntry *he = &h->entries[(h->start + i) % SERVER_HISTORY_MAX];
                json_array_append_new(list, json_pack("{s:I, s:s, s:o}", "index", (json_int_t)(h->total - h->n + i + 1),
                                                      "command", he->command, "timestamp", iso_time(he->timestamp_ms)));
        }
        *ret = json_pack("{s:o}", "entries", list);
        return 0;
}

static int m_history_clear(Req *r, json_t **ret, RpcError *e) {
        const char *name = "default";
        if (param_string(r->params, "session", false, &name, NULL, e) < 0)
                return -1;
        History *h = history_for(r->sb, name, false);
        if (h)
                history_clear(h);
        *ret = ok();
        return 0;
}

static int m_health(Req *r, json_t **ret, RpcError *e) {
        Server *s = r->conn->srv;
        unsigned sessions = 0, running = 0, queued = 0;
        for (SrvSandbox *sb = s->sandboxes; sb; sb = sb->next)
                for (SbxSession *ss = sbx_session_next(sb->sb, NULL); ss; ss = sbx_session_next(sb->sb, ss))
                        sessions++;
        for (Conn *c = s->conns; c; c = c->next)
                for (Pending *p = c->pending; p; p = p->next)
                        if (p->run && sbx_run_started(p->run))
                                running++;
                        else if (p->run)
                                queued++;
        const Totals *t = &s->totals;
        *ret = json_pack("{s:I, s:i, s:i, s:i, s:i, s:{s:I, s:I, s:I, s:I, s:f}}", "uptimeMs",
                         (json_int_t)(now_ms() - s->start_ms), "sandboxes", (int)s->n_sandboxes, "sessions",
                         (int)sessions, "running", (int)running, "queued", (int)queued, "totals", "completed",
                         (json_int_t)t->completed, "failed", (json_int_t)t->failed, "timedOut",
                         (json_int_t)t->timed_out, "cancelled", (json_int_t)t->cancelled, "avgExecMs",
                         t->completed ? (double)t->exec_ms_sum / (double)t->completed : 0.0);
        return 0;
}

static int m_ping(Req *r, json_t **ret, RpcError *e) {
        *ret = json_pack("{s:b}", "pong", 1);
        return 0;
}

static int m_kill(Req *r, json_t **ret, RpcError *e) {
        *ret = ok();
        server_shutdown(r->conn->srv);
        return 0;
}

/* ---------------------------------------------------------------- files */

/* A path param: a string without NUL bytes. */
static int param_path(Req *r, const char *key, const char **ret, RpcError *e) {
        size_t len;
        if (param_string(r->params, key, true, ret, &len, e) < 0)
                return -1;
        if (strlen(*ret) != len || len == 0)
                return rpc_fail(e, RPC_INVALID_PARAMS, "%s must be a non-empty path without NUL bytes", key);
        return 0;
}

/* File names are bytes; JSON strings are UTF-8. Names that are not get '?' for each bad byte
 * and "lossy": true (the bytes themselves are reachable through a command). */
static json_t *info_json(SbxFileInfo *i) {
        static const char *const types[] = { "file", "dir", "symlink", "other" };
        /* Every one is sanitised: no short-circuit. */
        bool lossy = utf8_sanitize(i->name);
        lossy = utf8_sanitize(i->path) || lossy;
        lossy = (i->target && utf8_sanitize(i->target)) || lossy;
        json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:i, s:o}", "name", i->name, "path", i->path, "type",
                              types[i->type <= SBX_FILE_OTHER ? i->type : SBX_FILE_OTHER], "size",
                              (json_int_t)i->size, "mode", (int)i->mode, "mtime", iso_time((uint64_t)i->mtime_ms));
        if (o && i->target)
                json_object_set_new(o, "target", json_string(i->target));
        if (o && lossy)
                json_object_set_new(o, "lossy", json_true());
        return o;
}

static int m_files_read(Req *r, json_t **ret, RpcError *e) {
        const char *path;
        uint64_t off = 0, len = 0, size;
        uint8_t *data;
        size_t n;
        if (param_path(r, "path", &path, e) < 0 || param_u64(r->params, "offset", false, UINT64_MAX >> 1, &off, e) < 0 ||
            param_u64(r->params, "length", false, UINT64_MAX >> 1, &len, e) < 0)
                return -1;
        int rr = sbx_file_read(r->sb->sb, path, off, len, &data, &n, &size);
        if (rr == -EFBIG)
                return rpc_fail(e, RPC_SANDBOX_ERROR, "EFBIG: %s is too large for one read: read it in chunks with "
                                "offset and length (at most %u bytes each)", path, FS_MAX_READ);
        if (rr < 0)
                return rpc_fail_errno(e, rr, path);
        size_t blen;
        char *b = b64_encode(data, n, &blen);
        free(data);
        if (!b)
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        /* base64 is ASCII: no need for jansson to check it character by character. */
        *ret = json_pack("{s:o, s:I, s:I, s:I}", "data", json_stringn_nocheck(b, blen), "size", (json_int_t)size,
                         "offset", (json_int_t)MIN(off, size), "length", (json_int_t)n);
        free(b);
        return 0;
}

static int m_files_write(Req *r, json_t **ret, RpcError *e) {
        const char *path, *b64;
        size_t b64_len, n;
        uint64_t mode = 0;
        bool append = false;
        if (param_path(r, "path", &path, e) < 0 || param_string(r->params, "data", true, &b64, &b64_len, e) < 0 ||
            param_u64(r->params, "mode", false, 07777, &mode, e) < 0 || param_bool(r->params, "append", &append, e) < 0)
                return -1;
        uint8_t *data = b64_decode(b64, b64_len, &n);
        if (!data)
                return rpc_fail(e, RPC_INVALID_PARAMS, "data must be base64");
        int rr = sbx_file_write(r->sb->sb, path, data, n, json_object_get(r->params, "mode") ? (int)mode : -1, append);
        free(data);
        if (rr < 0)
                return rpc_fail_errno(e, rr, path);
        *ret = ok();
        return 0;
}

static int m_files_list(Req *r, json_t **ret, RpcError *e) {
        const char *path;
        bool recursive = false;
        uint64_t depth = 0;
        SbxFileInfo *v;
        size_t n;
        if (param_path(r, "path", &path, e) < 0 || param_bool(r->params, "recursive", &recursive, e) < 0 ||
            param_u64(r->params, "depth", false, 64, &depth, e) < 0)
                return -1;
        if (!depth)
                depth = recursive ? 64 : 1;
        int rr = sbx_file_list(r->sb->sb, path, (unsigned)depth, &v, &n);
        if (rr < 0)
                return rpc_fail_errno(e, rr, path);
        json_t *list = json_array();
        for (size_t i = 0; i < n; i++) {
                json_t *e1 = info_json(&v[i]);
                if (e1)
                        json_array_append_new(list, e1);
        }
        sbx_file_list_free(v, n);
        *ret = json_pack("{s:o}", "entries", list);
        return 0;
}

static int m_files_stat(Req *r, json_t **ret, RpcError *e) {
        const char *path;
        SbxFileInfo i;
        if (param_path(r, "path", &path, e) < 0)
                return -1;
        int rr = sbx_file_stat(r->sb->sb, path, &i);
        if (rr < 0)
                return rpc_fail_errno(e, rr, path);
        *ret = info_json(&i);
        sbx_file_info_clear(&i);
        return 0;
}

static int m_files_exists(Req *r, json_t **ret, RpcError *e) {
        const char *path;
        SbxFileInfo i;
        if (param_path(r, "path", &path, e) < 0)
                return -1;
        int rr = sbx_file_stat(r->sb->sb, path, &i);
        if (rr < 0 && rr != -ENOENT && rr != -ENOTDIR)
                return rpc_fail_errno(e, rr, path);
        if (rr == 0)
                sbx_file_info_clear(&i);
        *ret = json_pack("{s:b}", "exists", rr == 0);
        return 0;
}

static int m_files_mkdir(Req *r, json_t **ret, RpcError *e) {
        const char *path;
        bool parents = false;
        if (param_path(r, "path", &path, e) < 0 || param_bool(r->params, "parents", &parents, e) < 0)
                return -1;
        int rr = sbx_file_mkdir(r->sb->sb, path, parents);
        if (rr < 0)
                return rpc_fail_errno(e, rr, path);
        *ret = ok();
        return 0;
}

static int m_files_rm(Req *r, json_t **ret, RpcError *e) {
        const char *path;
        bool recursive = false;
        if (param_path(r, "path", &path, e) < 0 || param_bool(r->params, "recursive", &recursive, e) < 0)
                return -1;
        int rr = sbx_file_remove(r->sb->sb, path, recursive);
        if (rr < 0)
                return rpc_fail_errno(e, rr, path);
        *ret = ok();
        return 0;
}

static int m_files_rename(Req *r, json_t **ret, RpcError *e) {
        const char *from, *to;
        if (param_path(r, "from", &from, e) < 0 || param_path(r, "to", &to, e) < 0)
                return -1;
        int rr = sbx_file_rename(r->sb->sb, from, to);
        if (rr < 0)
                return rpc_fail_errno(e, rr, from);
        *ret = ok();
        return 0;
}

/* ---------------------------------------------------------------- the table */

#define SANDBOX_ID { "sandboxId", P_STRING, false, "target sandbox; missing or null: the connection's root sandbox" }
#define SESSION { "session", P_STRING, false, "session name (default \"default\"), created on first use" }
#define SANDBOX_OPTIONS \
        { "timeoutMs", P_INT, false, "default per-run timeout (30000)" }, \
        { "fsLimitBytes", P_INT, false, "size of /tmp + /home/user (256 MiB)" }, \
        { "limits", P_OBJECT, false, "{stdoutBytes, stderrBytes, commandBytes, fileCount, rpcBytes, memoryBytes, pids}" }, \
        { "env", P_OBJECT, false, "extra environment {NAME: value}" }, \
        { "network", P_BOOL, false, "share the host's network (default: loopback only)" }

/* ---------------------------------------------------------------- fork, snapshots, export */

/* Registers an operation as pending on the connection (answered by op_done). */
static Pending *op_pending(Req *r, RpcError *e) {
        Pending *p = calloc(1, sizeof *p);
        if (!p) {
                rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
                return NULL;
        }
        p->conn = r->conn;
        p->srv = r->conn->srv;
        p->id = json_incref(r->id);
        p->kind = PENDING_OP;
        p->persist = r->sb->persist;
        p->uid = r->sb->uid;
        p->next = r->conn->pending;
        if (p->next)
                p->next->prev = p;
        r->conn->pending = p;
        return p;
}

static void op_reply_error(Pending *p, const SbxOpResult *res) {
        RpcError e;
        if (res->error == -EINVAL)
                rpc_fail(&e, RPC_INVALID_PARAMS, "%s", res->message ? res->message : "invalid input");
        else
                rpc_fail(&e, RPC_SANDBOX_ERROR, "%s: %s", (strerrorname_np(-res->error) ? strerrorname_np(-res->error) : "EIO"), res->message ? res->message : "");
        conn_reply_error(p->conn, p->id, &e);
}

static void fork_done(void *ud, const SbxOpResult *res) {
        Pending *p = ud;
        Server *s = p->srv;
        if (res->error || !p->conn || s->shutting_down) {
                s->n_forks--;
                if (res->sandbox)
                        sbx_sandbox_free(res->sandbox);
                if (p->conn && res->error)
                        op_reply_error(p, res);
                else if (p->conn) {
                        RpcError e;
                        rpc_fail(&e, RPC_SANDBOX_ERROR, "ESHUTDOWN: the server is shutting down");
                        conn_reply_error(p->conn, p->id, &e);
                }
                pending_free(p);
                return;
        }
        SrvSandbox *sb = calloc(1, sizeof *sb);
        if (!sb) {
                s->n_forks--;
                sbx_sandbox_free(res->sandbox);
                RpcError e;
                rpc_fail(&e, RPC_INTERNAL_ERROR, "out of memory");
                conn_reply_error(p->conn, p->id, &e);
                pending_free(p);
                return;
        }
        sb->sb = res->sandbox;
        sb->srv = s;
        sb->owner = p->persist ? NULL : p->conn;
        sb->persist = p->persist;
        sb->uid = p->uid;
        sb->is_fork = true;
        sb->created_ms = wall_ms();
        sb->next = s->sandboxes;
        if (s->sandboxes)
                s->sandboxes->prev = sb;
        s->sandboxes = sb;
        s->n_sandboxes++;
        conn_reply(p->conn, p->id, json_pack("{s:s}", "sandboxId", sbx_sandbox_id(sb->sb)));
        pending_free(p);
}

static int m_sandbox_fork(Req *r, json_t **ret, RpcError *e) {
        Server *s = r->conn->srv;
        if (s->n_forks >= SBX_MAX_FORKS)
                return rpc_fail(e, RPC_INVALID_PARAMS, "Maximum of %u concurrent forks reached", SBX_MAX_FORKS);
        if (s->n_sandboxes >= SERVER_MAX_SANDBOXES)
                return rpc_fail(e, RPC_WORKER_UNAVAILABLE, "WORKER_UNAVAILABLE: Maximum of %u concurrent sandboxes reached",
                                SERVER_MAX_SANDBOXES);
        Pending *p = op_pending(r, e);
        if (!p)
                return -1;
        int rr = sbx_sandbox_fork(r->sb->sb, fork_done, p);
        if (rr < 0) {
                pending_free(p);
                return rpc_fail_errno(e, rr, "fork");
        }
        s->n_forks++;
        return 1;
}

/* Snapshot create, restore, import: the answer is the id or ok. */
static void op_done(void *ud, const SbxOpResult *res) {
        Pending *p = ud;
        if (p->conn) {
                if (res->error)
                        op_reply_error(p, res);
                else if (res->snapshot_id)
                        conn_reply(p->conn, p->id, json_pack("{s:s}", "id", res->snapshot_id));
                else if (res->data) {
                        json_t *out = json_pack("{s:I}", "size", (json_int_t)res->len);
                        size_t n;
                        char *b64 = b64_encode(res->data, res->len, &n);
                        if (!out || !b64) {
                                RpcError e;
                                rpc_fail(&e, RPC_INTERNAL_ERROR, "out of memory");
                                conn_reply_error(p->conn, p->id, &e);
                                json_decref(out);
                        } else {
                                json_object_set_new(out, "data", json_stringn_nocheck(b64, n));
                                conn_reply(p->conn, p->id, out);
                        }
                        free(b64);
                } else
                        conn_reply(p->conn, p->id, ok());
        }
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
                                                      iso_time(v[i].created_ms), "bytes", (json_int_t)v[i].bytes));
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
        *ret = ok();
        return 0;
}

static int m_export(Req *r, json_t **ret, RpcError *e) {
        Pending *p = op_pending(r, e);
        if (!p)
                return -1;
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
        uint8_t *data = b64_decode(b64, b64_len, &n);
        if (!data)
                return rpc_fail(e, RPC_INVALID_PARAMS, "data must be base64");
        Pending *p = op_pending(r, e);
        if (!p) {
                free(data);
                return -1;
        }
        int rr = n ? sbx_sandbox_import(r->sb->sb, data, n, op_done, p) : -EINVAL;
        free(data);
        if (rr < 0) {
                pending_free(p);
                if (rr == -EINVAL)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "not an sbx archive: empty");
                return rpc_fail_errno(e, rr, "import");
        }
        return 1;
}

static const Param p_create[] = { SANDBOX_OPTIONS, { 0 } };
static const Param p_sandbox_create[] = {
        { "label", P_STRING, false, "free text shown by sandbox.list" },
        { "persist", P_BOOL, false, "socket server only: outlive this connection (listed to the same uid)" },
        SANDBOX_OPTIONS, { 0 } };
static const Param p_none[] = { { 0 } };
static const Param p_sandbox_only[] = { SANDBOX_ID, { 0 } };
static const Param p_sandbox_destroy[] = { { "sandboxId", P_STRING, true, "the sandbox to destroy" }, { 0 } };
static const Param p_run[] = {
        { "command", P_STRING, true, "bash source text (at most limits.commandBytes)" },
        SANDBOX_ID, SESSION,
        { "cwd", P_STRING, false, "working directory for this run only" },
        { "env", P_OBJECT, false, "{NAME: value} for this run only" },
        { "stdin", P_STRING, false, "base64 bytes on stdin (default: /dev/null)" },
        { "timeoutMs", P_INT, false, "this run's timeout (default: the sandbox's)" },
        { "stream", P_BOOL, false, "send `output` notifications as output arrives" },
        { 0 } };
static const Param p_cancel[] = { { "requestId", P_ANY, true, "the id of a pending `run` on this connection" }, { 0 } };
static const Param p_session_name[] = { SANDBOX_ID, { "name", P_STRING, true, "session name, 1-64 of [A-Za-z0-9_.-]" }, { 0 } };
static const Param p_env_set[] = { SANDBOX_ID, SESSION,
        { "name", P_STRING, true, "^[A-Za-z_][A-Za-z0-9_]*$" }, { "value", P_STRING, true, "the value" }, { 0 } };
static const Param p_env_get[] = { SANDBOX_ID, SESSION, { "name", P_STRING, true, "^[A-Za-z_][A-Za-z0-9_]*$" }, { 0 } };
static const Param p_history[] = { SANDBOX_ID, SESSION, { 0 } };
#define PATH_PARAM { "path", P_STRING, true, "as the sandbox sees it; relative: from /home/user" }
static const Param p_files_read[] = { SANDBOX_ID, PATH_PARAM,
        { "offset", P_INT, false, "first byte (default 0)" },
        { "length", P_INT, false, "bytes at most (default: the rest, which must be at most 4 MiB)" }, { 0 } };
static const Param p_files_write[] = { SANDBOX_ID, PATH_PARAM, { "data", P_STRING, true, "base64 bytes" },
        { "mode", P_INT, false, "permission bits (default 0644)" },
        { "append", P_BOOL, false, "append instead of replacing atomically" }, { 0 } };
static const Param p_files_list[] = { SANDBOX_ID, PATH_PARAM, { "recursive", P_BOOL, false, "descend (depth 64)" },
        { "depth", P_INT, false, "levels to descend (1: the directory's entries)" }, { 0 } };
static const Param p_files_path[] = { SANDBOX_ID, PATH_PARAM, { 0 } };
static const Param p_files_mkdir[] = { SANDBOX_ID, PATH_PARAM, { "parents", P_BOOL, false, "create missing parents" }, { 0 } };
static const Param p_files_rm[] = { SANDBOX_ID, PATH_PARAM, { "recursive", P_BOOL, false, "remove a directory tree" }, { 0 } };
static const Param p_files_rename[] = { SANDBOX_ID, { "from", P_STRING, true, "existing path" },
        { "to", P_STRING, true, "new path (replaced if it exists)" }, { 0 } };
static const Param p_snapshot_id[] = { SANDBOX_ID, { "id", P_STRING, true, "a snapshot id from snapshot.create" }, { 0 } };
static const Param p_import[] = { SANDBOX_ID, { "data", P_STRING, true, "the archive, base64" }, { 0 } };
#define FILE_INFO "{name, path, type: file|dir|symlink|other, size, mode, mtime, target?}"

static const Method methods[] = {
        { "create", m_create, 0, p_create, "{ok: true, sandboxId}",
          "Creates the connection's root sandbox (the one used when sandboxId is missing)." },
        { "sandbox.create", m_sandbox_create, 0, p_sandbox_create, "{sandboxId}",
          "Creates another sandbox owned by this connection (or persistent)." },
        { "sandbox.list", m_sandbox_list, 0, p_none, "{sandboxes: [{sandboxId, label?, createdAt, persist, root}]}",
          "Sandboxes this connection may use." },
        { "sandbox.destroy", m_sandbox_destroy, M_SANDBOX, p_sandbox_destroy, "{ok: true}",
          "Kills every process of the sandbox and removes it." },
        { "run", m_run, M_SANDBOX, p_run,
          "{exitCode, stdout, stderr, executionTimeMs, truncated?: {stdout, stderr}, errorClass?, stdoutEncoding?, stderrEncoding?}",
          "Runs a command in a session. stdout/stderr are strings when valid UTF-8, else base64 with "
          "`stdoutEncoding`/`stderrEncoding: \"base64\"`. errorClass: TIMEOUT (exit 124), CANCELLED (125), "
          "LIMIT_EXCEEDED (1, nothing ran)." },
        { "cancel", m_cancel, 0, p_cancel, "{ok: true}",
          "Cancels a pending run of this connection; that run answers exit 125, errorClass CANCELLED." },
        { "session.create", m_session_create, M_SANDBOX, p_session_name, "{ok: true, name}", "Creates a named session." },
        { "session.list", m_session_list, M_SANDBOX, p_sandbox_only, "{sessions: [{name}]}", "Sessions of the sandbox." },
        { "session.delete", m_session_delete, M_SANDBOX, p_session_name, "{ok: true}",
          "Ends a session; its running command is cancelled." },
        { "env.set", m_env_set, M_SANDBOX, p_env_set, "{ok: true}", "Exports a variable in the session." },
        { "env.get", m_env_get, M_SANDBOX, p_env_get, "{value: string | null}",
          "An exported variable of the session, null when unset." },
        { "shell.history.list", m_history_list, M_SANDBOX, p_history, "{entries: [{index, command, timestamp}]}",
          "Commands run in the session (the newest 1000)." },
        { "shell.history.clear", m_history_clear, M_SANDBOX, p_history, "{ok: true}", "Forgets the session's history." },
        { "files.read", m_files_read, M_SANDBOX, p_files_read, "{data (base64), size, offset, length}",
          "Reads a regular file (in chunks of at most 4 MiB for larger ones)." },
        { "files.write", m_files_write, M_SANDBOX, p_files_write, "{ok: true}",
          "Writes a file atomically (temp file + rename), creating missing parents; or appends." },
        { "files.list", m_files_list, M_SANDBOX, p_files_list, "{entries: [" FILE_INFO "]}", "Lists a directory." },
        { "files.stat", m_files_stat, M_SANDBOX, p_files_path, FILE_INFO, "Describes a path (symlinks not followed)." },
        { "files.exists", m_files_exists, M_SANDBOX, p_files_path, "{exists}", "Whether a path exists." },
        { "files.mkdir", m_files_mkdir, M_SANDBOX, p_files_mkdir, "{ok: true}", "Creates a directory." },
        { "files.rm", m_files_rm, M_SANDBOX, p_files_rm, "{ok: true}", "Removes a file, or a directory (tree)." },
        { "files.rename", m_files_rename, M_SANDBOX, p_files_rename, "{ok: true}", "Renames or moves a path." },
        { "sandbox.fork", m_sandbox_fork, M_SANDBOX, p_sandbox_only, "{sandboxId}",
          "A new sandbox with a copy of this one's files, every session's state, its limits and options "
          "(taken at one point in time, after the runs queued before it; background processes are not "
          "copied). Owned like its source. At most 16 forks at once (-32602)." },
        { "snapshot.create", m_snapshot_create, M_SANDBOX, p_sandbox_only, "{id}",
          "Saves the sandbox's files and session states in its snapshot store (budget: 4 times its "
          "filesystem limits, at most 32 snapshots; ENOSPC beyond)." },
        { "snapshot.restore", m_snapshot_restore, M_SANDBOX, p_snapshot_id, "{ok: true}",
          "Brings back a snapshot's files and session states; sessions made since start fresh, background "
          "processes are killed. Unknown id: -32602." },
        { "snapshot.list", m_snapshot_list, M_SANDBOX, p_sandbox_only, "{snapshots: [{id, createdAt, bytes}]}",
          "The sandbox's snapshots, oldest first." },
        { "snapshot.delete", m_snapshot_delete, M_SANDBOX, p_snapshot_id, "{ok: true}", "Deletes a snapshot." },
        { "persistence.export", m_export, M_SANDBOX, p_sandbox_only, "{data (base64), size}",
          "A zstd-compressed tar of /tmp, /home/user and /dev/shm plus sbx-manifest.json (format version, "
          "session states, limits, sha256 of the payload); plain `tar --zstd -xf` opens it." },
        { "persistence.import", m_import, M_SANDBOX, p_import, "{ok: true}",
          "Replaces the sandbox's files and session states with an exported archive's. A refused archive "
          "(-32602: bad magic, version or checksum, unsafe paths or links, device nodes, setuid bits, "
          "over the sandbox's limits) leaves the sandbox unchanged." },
        { "health", m_health, 0, p_none,
          "{uptimeMs, sandboxes, sessions, running, queued, totals: {completed, failed, timedOut, cancelled, avgExecMs}}",
          "Server statistics." },
        { "ping", m_ping, 0, p_none, "{pong: true}", "Liveness." },
        { "kill", m_kill, 0, p_none, "{ok: true}",
          "Answers, then shuts the server down: queued runs get an error, running ones 125, every sandbox is destroyed." },
};

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

/* Checks every declared parameter's presence and type; unknown ones are ignored. */
static int validate(const Method *m, json_t *params, RpcError *e) {
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

static int resolve_sandbox(Req *r, RpcError *e) {
        json_t *v = json_object_get(r->params, "sandboxId");
        if (!v || json_is_null(v)) {
                if (!r->conn->root)
                        return rpc_fail(e, RPC_INVALID_REQUEST, "Sandbox not created. Call \"create\" first.");
                r->sb = r->conn->root;
                return 0;
        }
        if (!json_is_string(v))
                return rpc_fail(e, RPC_INVALID_PARAMS, "sandboxId must be a string");
        r->sb = find_sandbox(r->conn, json_string_value(v));
        if (!r->sb)
                return rpc_fail(e, RPC_INVALID_PARAMS, "Unknown sandboxId: %.64s", json_string_value(v));
        return 0;
}

static const Method *find_method(const char *name) {
        for (size_t i = 0; i < ELEMENTSOF(methods); i++)
                if (strcmp(methods[i].name, name) == 0)
                        return &methods[i];
        return NULL;
}

int method_check(const char *name, json_t *params, RpcError *e) {
        const Method *m = find_method(name);
        if (!m)
                return rpc_fail(e, RPC_METHOD_NOT_FOUND, "Method not found: %.128s", name);
        return validate(m, params, e);
}

void dispatch_line(Conn *c, const char *line, size_t len, bool too_large) {
        RpcError e = { 0 };
        RpcRequest q = { 0 };
        json_t *result = NULL;
        const Method *m;
        Req r = { .conn = c };

        if (too_large) {
                rpc_fail(&e, RPC_PARSE_ERROR, "Request too large (limit %zu bytes)", c->framer.max);
                goto error;
        }
        while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
                len--;
        if (len == 0)
                return; /* blank lines are keep-alives */
        if (rpc_parse_request(line, len, &q, &e) < 0)
                goto error;
        r.id = q.id;
        r.params = q.params;
        if (method_check(q.method, q.params, &e) < 0)
                goto error;
        m = find_method(q.method);
        if (c->srv->shutting_down && strcmp(m->name, "ping") != 0 && strcmp(m->name, "health") != 0) {
                rpc_fail(&e, RPC_INTERNAL_ERROR, "Server shutting down");
                goto error;
        }
        if ((m->flags & M_SANDBOX) && resolve_sandbox(&r, &e) < 0)
                goto error;
        int rr = m->fn(&r, &result, &e);
        if (rr < 0)
                goto error;
        if (rr == 0 && q.has_id)
                conn_reply(c, r.id, result);
        else
                json_decref(result);
        rpc_request_done(&q);
        return;
error:
        /* Requests without an id are notifications: no answer, unless the line was so broken
         * that we cannot tell (then id null, as JSON-RPC says). */
        if (too_large || rpc_request_wants_error(&q, &e))
                conn_reply_error(c, q.id, &e);
        rpc_request_done(&q);
}

static void print_params(FILE *f, const Param *p) {
        if (!p->name) {
                fprintf(f, "Params: none.\n\n");
                return;
        }
        fprintf(f, "| param | type | required | meaning |\n|---|---|---|---|\n");
        for (; p->name; p++)
                fprintf(f, "| `%s` | %s | %s | %s |\n", p->name, type_name(p->type), p->required ? "yes" : "no", p->doc);
        fprintf(f, "\n");
}

void print_protocol(FILE *f) {
        fprintf(f,
                "# sbx protocol\n\n"
                "<!-- Generated by `sbx serve --protocol` from the method table in src/server/methods.c;\n"
                "     tests/unit fails when this file and the table disagree. -->\n\n"
                "Newline-delimited JSON-RPC 2.0 over stdio (`sbx serve --stdio`) or a Unix socket\n"
                "(`sbx serve --socket PATH`, mode 0600, peers checked with SO_PEERCRED: same uid or root).\n"
                "Each request is one line `{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"run\",\"params\":{...}}`; each\n"
                "answer one line with the same id. Requests are handled concurrently: answers may come\n"
                "out of order. Runs in one session execute one at a time, in order.\n\n"
                "## Routing\n\n"
                "Every per-sandbox method takes an optional `sandboxId`. Missing or null: the connection's\n"
                "root sandbox (made by `create`). A non-string: -32602 `sandboxId must be a string`. An id\n"
                "this connection may not use, or that does not exist: -32602 `Unknown sandboxId: X`. Ids are\n"
                "32 random hex digits. A sandbox is destroyed when the connection that made it closes,\n"
                "unless made with `persist: true` on a socket server.\n\n"
                "## Notifications\n\n"
                "With `stream: true`, `run` sends `{\"jsonrpc\":\"2.0\",\"method\":\"output\",\"params\":{requestId,\n"
                "stream: \"stdout\"|\"stderr\", seq, data, encoding?}}` in order as output arrives (`encoding:\n"
                "\"base64\"` when a chunk is not valid UTF-8); the result still carries the whole capped output.\n"
                "A client that stops reading gets its streaming runs paused (their pipes are no longer\n"
                "read) once %u MiB wait for it, and resumed below %u MiB.\n\n"
                "## Errors\n\n"
                "| code | when |\n|---|---|\n"
                "| -32700 | parse error; `Request too large` for a line over `limits.rpcBytes` (default 8 MiB), which is skipped without being buffered |\n"
                "| -32600 | invalid request; `Sandbox already created`; `Sandbox not created. Call \"create\" first.` |\n"
                "| -32601 | `Method not found: X` |\n"
                "| -32602 | invalid params, naming the param (`Missing required param: X`, `X must be a string`, `Unknown sandboxId: X`) |\n"
                "| -32603 | internal error (sandbox creation failed, server shutting down) |\n"
                "| -32001 | `WORKER_UNAVAILABLE: ...`: a server cap was reached (%u sandboxes, %u running or queued runs per session, %u sessions per sandbox); retry later |\n"
                "| 1 | sandbox or file error: `ERRNO: message` |\n\n"
                "## Methods\n\n",
                SERVER_OUT_HIGH >> 20, SERVER_OUT_LOW >> 20, SERVER_MAX_SANDBOXES, SBX_MAX_QUEUED_RUNS, SBX_MAX_SESSIONS);
        for (size_t i = 0; i < ELEMENTSOF(methods); i++) {
                const Method *m = &methods[i];
                fprintf(f, "### `%s`\n\n%s\n\n", m->name, m->doc);
                print_params(f, m->params);
                fprintf(f, "Result: `%s`\n\n", m->result);
        }
}
