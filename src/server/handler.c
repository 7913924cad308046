/* SPDX-License-Identifier: MIT */
/* Helpers shared by the handler files: common result shapes, sessions, environment lists. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "base/limits.h"
#include "base/util.h"
#include "server/handler.h"

const Param handler_params_none[] = { { 0 } };
const Param handler_params_sandbox[] = { PARAM_SANDBOX_ID, { 0 } };

json_t *handler_ok_json(void) { return json_pack("{s:b}", "ok", 1); }

const char *handler_process_id(uint64_t id, char buf[static HANDLER_PROCESS_ID_MAX]) {
        snprintf(buf, HANDLER_PROCESS_ID_MAX, "p%llu", (unsigned long long)id);
        return buf;
}

json_t *handler_time_json(uint64_t ms) {
        time_t t = (time_t)(ms / 1000);
        struct tm tm;
        char buf[64];
        gmtime_r(&t, &tm);
        snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
        return json_string(buf);
}

const char *handler_session_name(const Req *r) {
        /* The dispatcher has checked the type: a string, null or nothing. */
        json_t *v = json_object_get(r->params, "session");
        return json_is_string(v) ? json_string_value(v) : "default";
}

int handler_open_session(Req *r, const char *name, SbxSession **ret, RpcError *e) {
        SbxSession *s = sbx_session_find(r->sb->sb, name);
        if (s) {
                *ret = s;
                return 0;
        }
        int rr = sbx_session_get(r->sb->sb, name, ret);
        if (rr == -EINVAL)
                return rpc_fail(e, RPC_INVALID_PARAMS, "Invalid session name: %.64s%s (1-64 of [A-Za-z0-9_.-])", name,
                                strlen(name) > 64 ? "... (cut)" : "");
        if (rr == -EMFILE)
                return rpc_fail(e, RPC_WORKER_UNAVAILABLE, "WORKER_UNAVAILABLE: Maximum of %u sessions reached", SBX_MAX_SESSIONS);
        if (rr < 0)
                return rpc_fail_errno(e, rr, "session");
        return 0;
}

void handler_env_free(const char **list) {
        for (const char **p = list; p && *p; p++)
                free((void *)*p);
        free(list);
}

int handler_env_list(json_t *env, const char ***ret, RpcError *e) {
        *ret = NULL;
        if (!env)
                return 0;
        const char **list = calloc(json_object_size(env) + 1, sizeof *list);
        const char *key;
        json_t *val;
        size_t k = 0;
        if (!list)
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        json_object_foreach(env, key, val) {
                if (!env_name_valid(key, strlen(key)) || !json_is_string(val)) {
                        handler_env_free(list);
                        return rpc_fail(e, RPC_INVALID_PARAMS,
                                        "env: names must match ^[A-Za-z_][A-Za-z0-9_]*$ and values be strings (%s)", key);
                }
                size_t len = strlen(key) + json_string_length(val) + 2;
                char *kv = malloc(len);
                if (!kv) {
                        handler_env_free(list);
                        return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
                }
                snprintf(kv, len, "%s=%s", key, json_string_value(val));
                list[k++] = kv;
        }
        *ret = list;
        return 0;
}

int handler_while_paused(Req *r, RpcError *e) {
        const char *v = NULL;
        if (param_string(r->params, "whilePaused", false, &v, NULL, e) < 0)
                return -1;
        if (v && strcmp(v, "wait") != 0 && strcmp(v, "refuse") != 0)
                return rpc_fail(e, RPC_INVALID_PARAMS, "whilePaused must be \"wait\" or \"refuse\", not \"%.40s\"", v);
        if (v && strcmp(v, "refuse") == 0 && sbx_sandbox_paused(r->sb->sb))
                return rpc_fail(e, RPC_SANDBOX_ERROR, "the sandbox is paused (whilePaused: \"refuse\")");
        return 0;
}

int handler_leftovers(json_t *params, SbxLeftovers *ret, RpcError *e) {
        const char *v = NULL;
        if (param_string(params, "leftovers", false, &v, NULL, e) < 0)
                return -1;
        if (!v)
                return 0;
        if (strcmp(v, "keep") == 0)
                *ret = SBX_LEFTOVERS_KEEP;
        else if (strcmp(v, "kill") == 0)
                *ret = SBX_LEFTOVERS_KILL;
        else
                return rpc_fail(e, RPC_INVALID_PARAMS, "leftovers must be \"keep\" or \"kill\", not \"%.40s\"", v);
        return 0;
}

/* One level of an object-valued param: every key of `fixed` must be absent from `mine` or
 * equal; the result holds both. Returns the merged object (new) or NULL with e set. */
static json_t *merge_fixed(const char *param, json_t *mine, json_t *fixed, RpcError *e) {
        json_t *out = json_copy(mine);
        const char *k;
        json_t *v;
        if (!out) {
                rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
                return NULL;
        }
        json_object_foreach(fixed, k, v) {
                json_t *m = json_object_get(mine, k);
                if (m && !json_is_null(m) && !json_equal(m, v)) {
                        json_decref(out);
                        rpc_fail(e, RPC_INVALID_PARAMS, "%s.%s is set by the server's configuration and may not be changed",
                                 param, k);
                        return NULL;
                }
                json_object_set(out, k, v);
        }
        return out;
}

int handler_create_config(Req *r, RpcError *e) {
        Core *core = r->core;
        const char *key;
        json_t *v;
        /* fsLimitBytes and limits.fsBytes are one limit: the operator's, under either name,
         * binds both. */
        json_t *ef = json_object_get(core->create_enforced, "fsLimitBytes");
        json_t *el = json_object_get(json_object_get(core->create_enforced, "limits"), "fsBytes");
        json_t *rl = json_object_get(r->params, "limits");
        if (ef && json_is_object(rl) && json_object_get(rl, "fsBytes") &&
            !json_equal(json_object_get(rl, "fsBytes"), ef))
                return rpc_fail(e, RPC_INVALID_PARAMS,
                                "limits.fsBytes is set by the server's configuration (fsLimitBytes) and may not be changed");
        if (el && json_object_get(r->params, "fsLimitBytes") && !json_equal(json_object_get(r->params, "fsLimitBytes"), el))
                return rpc_fail(e, RPC_INVALID_PARAMS,
                                "fsLimitBytes is set by the server's configuration (limits.fsBytes) and may not be changed");
        if (ef && json_is_object(rl) && json_object_get(rl, "fsBytes"))
                json_object_del(rl, "fsBytes");
        if (el && json_object_get(r->params, "fsLimitBytes"))
                json_object_del(r->params, "fsLimitBytes");
        json_object_foreach(core->create_enforced, key, v) {
                json_t *mine = json_object_get(r->params, key);
                if (mine && !json_is_null(mine) && json_is_object(mine) && json_is_object(v)) {
                        json_t *m = merge_fixed(key, mine, v, e);
                        if (!m)
                                return -1;
                        json_object_set_new(r->params, key, m);
                } else if (mine && !json_is_null(mine) && !json_equal(mine, v)) {
                        return rpc_fail(e, RPC_INVALID_PARAMS,
                                        "%s is set by the server's configuration and may not be changed", key);
                } else {
                        json_object_set(r->params, key, v);
                }
        }
        json_object_foreach(core->create_defaults, key, v) {
                json_t *mine = json_object_get(r->params, key);
                if (!mine || json_is_null(mine)) {
                        json_object_set(r->params, key, v);
                } else if (json_is_object(mine) && json_is_object(v)) {
                        /* A default object (limits) fills in what the request's leaves out. */
                        const char *k;
                        json_t *d;
                        json_object_foreach(v, k, d)
                                if (!json_object_get(mine, k))
                                        json_object_set(mine, k, d);
                }
        }
        if (json_object_size(core->create_secrets)) {
                json_t *mine = json_object_get(r->params, "secrets");
                if (mine && !json_is_null(mine) && !json_is_object(mine))
                        return rpc_fail(e, RPC_INVALID_PARAMS, "secrets must be an object");
                json_t *all = mine && json_is_object(mine) ? json_copy(mine) : json_object();
                if (!all)
                        return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
                json_object_foreach(core->create_secrets, key, v) {
                        if (json_object_get(all, key)) {
                                json_decref(all);
                                return rpc_fail(e, RPC_INVALID_PARAMS,
                                                "secret %s is set by the server's configuration", key);
                        }
                        json_object_set(all, key, v);
                }
                json_object_set_new(r->params, "secrets", all);
        }
        return 0;
}
