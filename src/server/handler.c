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
                return rpc_fail(e, RPC_INVALID_PARAMS, "Invalid session name: %s (1-64 of [A-Za-z0-9_.-])", name);
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
