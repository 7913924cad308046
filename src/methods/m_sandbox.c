/* SPDX-License-Identifier: MIT */
/* Handlers for sandboxes (create, sandbox.create, .list, .destroy) and sessions (session.*). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/util.h"
#include "server/handler.h"
#include "server/server.h"
#include "session/internal.h"
#include "methods/methods.h"

/* A limit the client gave (present, not null) must keep its rule: an explicit 0 is refused
 * where it makes no sense, not taken as the default. */
static int check_given(json_t *obj, const char *key, const char *name, SbxLimitId id, uint64_t v, RpcError *e) {
        char msg[256];
        json_t *j = obj ? json_object_get(obj, key) : NULL;
        if (!j || json_is_null(j) || sbx_limit_check(id, v, name, msg, sizeof msg) == 0)
                return 0;
        return rpc_fail(e, RPC_INVALID_PARAMS, "%s", msg);
}

/* limits.cpus: a number of CPUs, fractions allowed, into thousandths (rounded, so 0.0004 is
 * refused rather than taken as 0, the default); the range is SBX_LIMIT_CPU's. */
static int parse_cpus(json_t *limits, uint32_t *ret_millis, RpcError *e) {
        json_t *v = json_object_get(limits, "cpus");
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 1e9)
                return rpc_fail(e, RPC_INVALID_PARAMS, "limits.cpus must be a number of CPUs (fractions allowed)");
        uint64_t millis = (uint64_t)(json_number_value(v) * 1000 + 0.5);
        if (check_given(limits, "cpus", "limits.cpus", SBX_LIMIT_CPU, millis, e) < 0)
                return -1;
        *ret_millis = (uint32_t)millis;
        return 1;
}

/* Every limit given against its rule, under the name the client used. */
static int check_limits(json_t *p, json_t *limits, const SbxSandboxOptions *o, RpcError *e) {
        const SbxLimits *l = &o->limits;
        if (check_given(p, "timeoutMs", "timeoutMs", SBX_LIMIT_TIMEOUT, o->timeout_ms, e) < 0 ||
            check_given(p, "fsLimitBytes", "fsLimitBytes", SBX_LIMIT_FS, l->fs_bytes, e) < 0 ||
            check_given(limits, "fsBytes", "limits.fsBytes", SBX_LIMIT_FS, l->fs_bytes, e) < 0 ||
            check_given(limits, "stdoutBytes", "limits.stdoutBytes", SBX_LIMIT_STDOUT, l->stdout_bytes, e) < 0 ||
            check_given(limits, "stderrBytes", "limits.stderrBytes", SBX_LIMIT_STDERR, l->stderr_bytes, e) < 0 ||
            check_given(limits, "commandBytes", "limits.commandBytes", SBX_LIMIT_COMMAND, l->command_bytes, e) < 0 ||
            check_given(limits, "fileCount", "limits.fileCount", SBX_LIMIT_FILES, l->file_count, e) < 0 ||
            check_given(limits, "memoryBytes", "limits.memoryBytes", SBX_LIMIT_MEMORY, l->memory_bytes, e) < 0 ||
            check_given(limits, "pids", "limits.pids", SBX_LIMIT_PIDS, l->pids, e) < 0)
                return -1;
        return 0;
}

/* Reads the sandbox options shared by create and sandbox.create. *ret_env gets the list
 * o->env points to (the caller frees it); *ret_rpc_bytes gets limits.rpcBytes (0 if absent),
 * which the caller applies to the connection only once the sandbox exists. */
static int parse_sandbox_options(json_t *p, SbxSandboxOptions *o, const char ***ret_env, size_t *ret_rpc_bytes,
                                 RpcError *e) {
        json_t *limits = NULL, *env = NULL;
        uint64_t v = 0; /* stays 0 (the default) when limits has no pids */
        sbx_sandbox_options_init(o);
        *ret_env = NULL;
        *ret_rpc_bytes = 0;
        if (param_u64(p, "timeoutMs", false, UINT64_MAX, &o->timeout_ms, e) < 0 ||
            param_u64(p, "fsLimitBytes", false, UINT64_MAX, &o->limits.fs_bytes, e) < 0 ||
            param_object(p, "limits", &limits, e) < 0 ||
            param_object(p, "env", &env, e) < 0 || param_string(p, "image", false, &o->image, NULL, e) < 0)
                return -1;
        if (limits) {
                /* A misspelt limit would be ignored without a word, and an operator's enforced
                 * one be no limit at all. */
                static const char *const known[] = { "stdoutBytes", "stderrBytes", "commandBytes", "fileCount",
                                                     "memoryBytes", "fsBytes", "pids", "cpus", "rpcBytes" };
                const char *key;
                json_t *lv;
                json_object_foreach(limits, key, lv) {
                        size_t i = 0;
                        while (i < ELEMENTSOF(known) && strcmp(known[i], key) != 0)
                                i++;
                        if (i == ELEMENTSOF(known))
                                return rpc_fail(e, RPC_INVALID_PARAMS,
                                                "limits has no key \"%.64s\" (it has stdoutBytes, stderrBytes, commandBytes, "
                                                "fileCount, memoryBytes, fsBytes, pids, cpus, rpcBytes)", key);
                }
                if (json_object_get(limits, "fsBytes") && json_object_get(p, "fsLimitBytes"))
                        return rpc_fail(e, RPC_INVALID_PARAMS, "give fsLimitBytes or limits.fsBytes, not both");
                if (param_u64(limits, "stdoutBytes", false, UINT64_MAX, &o->limits.stdout_bytes, e) < 0 ||
                    param_u64(limits, "stderrBytes", false, UINT64_MAX, &o->limits.stderr_bytes, e) < 0 ||
                    param_u64(limits, "commandBytes", false, UINT64_MAX, &o->limits.command_bytes, e) < 0 ||
                    param_u64(limits, "fileCount", false, UINT64_MAX, &o->limits.file_count, e) < 0 ||
                    param_u64(limits, "memoryBytes", false, UINT64_MAX, &o->limits.memory_bytes, e) < 0 ||
                    param_u64(limits, "fsBytes", false, UINT64_MAX, &o->limits.fs_bytes, e) < 0)
                        return -1;
                if (param_u64(limits, "pids", false, UINT32_MAX, &v, e) < 0)
                        return -1;
                o->limits.pids = (uint32_t)v;
                if (parse_cpus(limits, &o->limits.cpu_millis, e) < 0)
                        return -1;
                v = 0;
                if (param_u64(limits, "rpcBytes", false, 1ULL << 30, &v, e) < 0)
                        return -1;
                if (json_object_get(limits, "rpcBytes") && v < 1024)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "limits.rpcBytes must be at least 1024");
                *ret_rpc_bytes = (size_t)v;
        }
        if (check_limits(p, limits, o, e) < 0)
                return -1;
        SbxLeftovers leftovers = SBX_LEFTOVERS_DEFAULT;
        if (handler_leftovers(p, &leftovers, e) < 0)
                return -1;
        o->kill_leftovers = leftovers == SBX_LEFTOVERS_KILL;
        if (handler_env_list(env, ret_env, e) < 0)
                return -1;
        if (*ret_env)
                o->env = *ret_env;
        return 0;
}

/* policy: {allow: [pattern], deny: [pattern]}, its strings borrowed from the params into
 * NULL-terminated lists; libsbx checks the patterns themselves. */
typedef struct PolicyLists {
        const char *allow[SBX_MAX_POLICY_PATTERNS + 1], *deny[SBX_MAX_POLICY_PATTERNS + 1];
} PolicyLists;

static int parse_policy_list(json_t *policy, const char *key, const char **out, RpcError *e) {
        json_t *l = json_object_get(policy, key), *v;
        size_t i;
        if (!l || json_is_null(l))
                return 0;
        if (!json_is_array(l))
                return rpc_fail(e, RPC_INVALID_PARAMS, "policy.%s must be an array of paths or glob patterns", key);
        if (json_array_size(l) > SBX_MAX_POLICY_PATTERNS)
                return rpc_fail(e, RPC_INVALID_PARAMS, "policy.%s has more than %u patterns", key, SBX_MAX_POLICY_PATTERNS);
        json_array_foreach(l, i, v) {
                if (!json_is_string(v) || json_string_length(v) != strlen(json_string_value(v)))
                        return rpc_fail(e, RPC_INVALID_PARAMS, "policy.%s[%zu] must be a path or glob pattern (a string)",
                                        key, i);
                out[i] = json_string_value(v);
        }
        out[json_array_size(l)] = NULL;
        return 0;
}

static int parse_policy(json_t *p, SbxSandboxOptions *o, PolicyLists *pl, RpcError *e) {
        json_t *policy = NULL, *v;
        const char *key;
        if (param_object(p, "policy", &policy, e) < 0)
                return -1;
        if (!policy)
                return 0;
        json_object_foreach(policy, key, v)
                if (strcmp(key, "allow") != 0 && strcmp(key, "deny") != 0)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "policy has no key '%.64s' (allow, deny)", key);
        pl->allow[0] = pl->deny[0] = NULL;
        if (parse_policy_list(policy, "allow", pl->allow, e) < 0 || parse_policy_list(policy, "deny", pl->deny, e) < 0)
                return -1;
        o->policy_allow = pl->allow[0] ? pl->allow : NULL;
        o->policy_deny = pl->deny[0] ? pl->deny : NULL;
        return 0;
}

/* network: false or "none" (the default), true or "host", or "allowlist" with networkAllow:
 * [pattern], whose strings are borrowed from the params into a NULL-terminated list; libsbx
 * checks the patterns themselves. */
typedef struct NetworkAllow {
        const char *v[SBX_MAX_EGRESS_ALLOW + 1];
} NetworkAllow;

/* Whether a secret has hosts: the hosts of proxy secrets join the allowlist, so such a
 * sandbox needs no networkAllow of its own. */
static bool has_proxy_secret(json_t *p) {
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(p, "secrets"), k, v)
                if (json_is_object(v) && json_object_get(v, "hosts"))
                        return true;
        return false;
}

static int parse_network(json_t *p, SbxSandboxOptions *o, NetworkAllow *na, RpcError *e) {
        json_t *n = json_object_get(p, "network"), *allow = json_object_get(p, "networkAllow"), *v;
        size_t i;
        if (!n || json_is_null(n) || json_is_false(n) || (json_is_string(n) && strcmp(json_string_value(n), "none") == 0))
                o->network = SBX_NETWORK_NONE;
        else if (json_is_true(n) || (json_is_string(n) && strcmp(json_string_value(n), "host") == 0))
                o->network = SBX_NETWORK_HOST;
        else if (json_is_string(n) && strcmp(json_string_value(n), "allowlist") == 0)
                o->network = SBX_NETWORK_ALLOWLIST;
        else if (json_is_string(n) && strcmp(json_string_value(n), "pod") == 0)
                o->network = SBX_NETWORK_POD;
        else
                return rpc_fail(e, RPC_INVALID_PARAMS, "network must be false or \"none\", true or \"host\", "
                                                       "\"allowlist\" (with networkAllow) or \"pod\"");
        if (!allow || json_is_null(allow)) {
                if (o->network == SBX_NETWORK_ALLOWLIST && !has_proxy_secret(p))
                        return rpc_fail(e, RPC_INVALID_PARAMS, "network \"allowlist\" needs networkAllow: [host "
                                                               "patterns] (an empty list refuses every request)");
                if (o->network == SBX_NETWORK_ALLOWLIST)
                        o->network_allow = na->v; /* empty: only the secrets' hosts */
                return 0;
        }
        if (o->network != SBX_NETWORK_ALLOWLIST)
                return rpc_fail(e, RPC_INVALID_PARAMS, "networkAllow is only for network \"allowlist\"");
        if (!json_is_array(allow))
                return rpc_fail(e, RPC_INVALID_PARAMS, "networkAllow must be an array of host patterns");
        if (json_array_size(allow) > SBX_MAX_EGRESS_ALLOW)
                return rpc_fail(e, RPC_INVALID_PARAMS, "networkAllow has more than %u patterns", SBX_MAX_EGRESS_ALLOW);
        json_array_foreach(allow, i, v) {
                if (!json_is_string(v) || json_string_length(v) != strlen(json_string_value(v)))
                        return rpc_fail(e, RPC_INVALID_PARAMS, "networkAllow[%zu] must be a host pattern (a string)", i);
                na->v[i] = json_string_value(v);
        }
        na->v[json_array_size(allow)] = NULL;
        o->network_allow = na->v;
        return 0;
}

/* metadata (of sandbox.create, or a filter of sandbox.list): {key: string}, bounded, since
 * every sandbox.list answer carries it whole. *ret gets the object (borrowed) or NULL. */
static int parse_metadata(json_t *p, json_t **ret, RpcError *e) {
        const char *key;
        json_t *v;
        *ret = NULL;
        if (param_object(p, "metadata", ret, e) < 0)
                return -1;
        if (!*ret)
                return 0;
        if (json_object_size(*ret) > SBX_MAX_METADATA_KEYS)
                return rpc_fail(e, RPC_INVALID_PARAMS, "metadata has more than %u keys", SBX_MAX_METADATA_KEYS);
        json_object_foreach(*ret, key, v) {
                size_t n = strlen(key);
                if (n == 0 || n > SBX_MAX_METADATA_KEY_BYTES)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "metadata key must be 1-%u bytes",
                                        SBX_MAX_METADATA_KEY_BYTES);
                if (strspn(key, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") != n)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "metadata key must be of [A-Za-z0-9_.-]");
                if (!json_is_string(v))
                        return rpc_fail(e, RPC_INVALID_PARAMS, "metadata.%s must be a string", key);
                if (json_string_length(v) > SBX_MAX_METADATA_VALUE_BYTES)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "metadata.%s is longer than %u bytes", key,
                                        SBX_MAX_METADATA_VALUE_BYTES);
        }
        return 0;
}

/* ---- secrets (sandbox.create's `secrets`) */

static void secrets_free(const char **list) {
        for (const char **p = list; p && *p; p++) {
                explicit_bzero((void *)*p, strlen(*p));
                free((void *)*p);
        }
        free(list);
}

/* Proxy secrets as parsed: the strings point into the request's params; hosts are ours. */
typedef struct ProxySecrets {
        SbxProxySecret v[SBX_MAX_SECRETS];
        size_t n;
} ProxySecrets;

static void proxy_secrets_free(ProxySecrets *ps) {
        for (size_t i = 0; ps && i < ps->n; i++)
                free((void *)ps->v[i].hosts);
        free(ps);
}

/* A proxy secret's hosts: a non-empty array of strings (patterns, checked by libsbx). */
static int parse_secret_hosts(const char *name, json_t *hosts, SbxProxySecret *ret, RpcError *e) {
        size_t n = json_array_size(hosts);
        if (!json_is_array(hosts) || n == 0 || n > SBX_MAX_SECRET_HOSTS)
                return rpc_fail(e, RPC_INVALID_PARAMS, "secrets.%s.hosts must be an array of 1-%u host patterns "
                                "(networkAllow's form)", name, SBX_MAX_SECRET_HOSTS);
        const char **h = calloc(n + 1, sizeof *h);
        if (!h)
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        for (size_t i = 0; i < n; i++)
                if (!(h[i] = json_string_value(json_array_get(hosts, i)))) {
                        free(h);
                        return rpc_fail(e, RPC_INVALID_PARAMS, "secrets.%s.hosts[%zu] must be a string", name, i);
                }
        ret->hosts = h;
        return 0;
}

/* secrets: {NAME: "value"} or {NAME: {value, mode: "env"}} into NAME=VALUE entries (*ret,
 * freed with secrets_free); {NAME: {value, hosts: [...], mode: "proxy"}} (mode "proxy" is
 * the default when hosts are given) into *ret_proxy (freed with proxy_secrets_free). No
 * answer ever shows a value. */
static int parse_secrets(json_t *p, const char ***ret, ProxySecrets **ret_proxy, RpcError *e) {
        json_t *obj = NULL, *v;
        const char *name;
        *ret = NULL;
        *ret_proxy = NULL;
        if (param_object(p, "secrets", &obj, e) < 0)
                return -1;
        if (!obj)
                return 0;
        if (json_object_size(obj) > SBX_MAX_SECRETS)
                return rpc_fail(e, RPC_INVALID_PARAMS, "secrets: at most %u", SBX_MAX_SECRETS);
        const char **list = calloc(json_object_size(obj) + 1, sizeof *list);
        ProxySecrets *ps = calloc(1, sizeof *ps);
        size_t k = 0;
        if (!list || !ps) {
                free(list);
                free(ps);
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        }
#define FAIL(...)                                                   \
        do {                                                        \
                secrets_free(list);                                 \
                proxy_secrets_free(ps);                             \
                return rpc_fail(e, RPC_INVALID_PARAMS, __VA_ARGS__); \
        } while (0)
        json_object_foreach(obj, name, v) {
                json_t *val = v;
                size_t nl = strlen(name);
                bool proxy = false;
                if (!env_name_valid(name, nl) || nl > SBX_MAX_SECRET_NAME_BYTES)
                        FAIL("secrets: a name must match ^[A-Za-z_][A-Za-z0-9_]*$ and be at most %u bytes (%.64s)",
                             SBX_MAX_SECRET_NAME_BYTES, name);
                if (json_is_object(v)) {
                        json_t *mode = json_object_get(v, "mode"), *hosts = json_object_get(v, "hosts");
                        const char *key;
                        json_t *x;
                        json_object_foreach(v, key, x)
                                if (strcmp(key, "value") != 0 && strcmp(key, "mode") != 0 && strcmp(key, "hosts") != 0)
                                        FAIL("secrets.%s: unknown key '%.32s' (value, hosts, mode)", name, key);
                        const char *m = mode ? json_string_value(mode) : hosts ? "proxy" : "env";
                        if (!m || (strcmp(m, "env") != 0 && strcmp(m, "proxy") != 0))
                                FAIL("secrets.%s.mode must be \"env\" or \"proxy\"", name);
                        proxy = strcmp(m, "proxy") == 0;
                        if (proxy && !hosts)
                                FAIL("secrets.%s: mode \"proxy\" needs hosts, the servers the value may go to", name);
                        if (!proxy && hosts)
                                FAIL("secrets.%s: hosts are for mode \"proxy\" (an env secret goes to the commands "
                                     "themselves)", name);
                        val = json_object_get(v, "value");
                }
                if (!json_is_string(val))
                        FAIL("secrets.%s must be a string or {value: string, mode: \"env\"} or {value: string, hosts: "
                             "[patterns]}", name);
                size_t vl = json_string_length(val);
                if (vl > SBX_MAX_SECRET_BYTES || strlen(json_string_value(val)) != vl)
                        FAIL("secrets.%s: the value must be at most %u bytes, without NUL", name, SBX_MAX_SECRET_BYTES);
                if (proxy) {
                        SbxProxySecret *s = &ps->v[ps->n];
                        *s = (SbxProxySecret){ .name = name, .value = json_string_value(val) };
                        if (parse_secret_hosts(name, json_object_get(v, "hosts"), s, e) < 0) {
                                secrets_free(list);
                                proxy_secrets_free(ps);
                                return -1;
                        }
                        ps->n++;
                        continue;
                }
                char *kv = malloc(nl + vl + 2);
                if (!kv) {
                        secrets_free(list);
                        proxy_secrets_free(ps);
                        return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
                }
                memcpy(kv, name, nl);
                kv[nl] = '=';
                memcpy(kv + nl + 1, json_string_value(val), vl + 1);
                list[k++] = kv;
        }
#undef FAIL
        *ret = list;
        *ret_proxy = ps;
        return 0;
}

int sandbox_params_check(json_t *params, RpcError *e) {
        SbxSandboxOptions o;
        const char **env = NULL, **secrets = NULL;
        json_t *metadata = NULL;
        size_t rpc_bytes;
        _cleanup_free_ PolicyLists *pl = calloc(1, sizeof *pl);
        _cleanup_free_ NetworkAllow *na = calloc(1, sizeof *na);
        if (!pl || !na)
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        int r = parse_sandbox_options(params, &o, &env, &rpc_bytes, e);
        handler_env_free(env);
        if (r >= 0)
                r = parse_policy(params, &o, pl, e);
        if (r >= 0)
                r = parse_network(params, &o, na, e);
        if (r >= 0)
                r = parse_metadata(params, &metadata, e);
        ProxySecrets *psec = NULL;
        if (r >= 0 && (r = parse_secrets(params, &secrets, &psec, e)) >= 0) {
                secrets_free(secrets);
                proxy_secrets_free(psec);
        }
        return r < 0 ? -1 : 0;
}

static int new_sandbox(Req *r, bool root, SrvSandbox **ret, RpcError *e) {
        Core *core = r->core;
        SbxSandboxOptions o;
        const char **env = NULL;
        const char *label = NULL;
        json_t *metadata;
        uint64_t lifetime = 0, idle = 0;
        bool persist = false;
        size_t rpc_bytes;
        SbxSandbox *box;
        const char *on_expiry = NULL;
        _cleanup_free_ PolicyLists *pl = calloc(1, sizeof *pl);
        _cleanup_free_ NetworkAllow *na = calloc(1, sizeof *na);
        if (!pl || !na)
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        if (handler_create_config(r, e) < 0)
                return -1;
        if (registry_check_room(&core->registry, e) < 0)
                return -1;
        if (core->mode == MODE_PROCESS && json_is_false(json_object_get(r->params, "network")))
                return rpc_fail(e, RPC_INVALID_PARAMS, "invalid sandbox options: network: false cannot be honoured with "
                                "--mode process, where commands use the host's network (leave network out)");
        if (parse_sandbox_options(r->params, &o, &env, &rpc_bytes, e) < 0 || parse_policy(r->params, &o, pl, e) < 0 ||
            parse_network(r->params, &o, na, e) < 0 ||
            param_string(r->params, "label", false, &label, NULL, e) < 0 ||
            param_bool(r->params, "persist", &persist, e) < 0 || parse_metadata(r->params, &metadata, e) < 0 ||
            param_u64(r->params, "lifetimeMs", false, SBX_MAX_SANDBOX_LIFETIME_MS, &lifetime, e) < 0 ||
            param_u64(r->params, "idleTimeoutMs", false, SBX_MAX_SANDBOX_LIFETIME_MS, &idle, e) < 0 ||
            param_string(r->params, "onExpiry", false, &on_expiry, NULL, e) < 0) {
                handler_env_free(env);
                return -1;
        }
        if (label && strlen(label) > SBX_SANDBOX_LABEL_BYTES) {
                handler_env_free(env);
                return rpc_fail(e, RPC_INVALID_PARAMS, "label must be at most %u bytes; got %zu", SBX_SANDBOX_LABEL_BYTES,
                                strlen(label));
        }
        bool export_on_expiry = on_expiry && strcmp(on_expiry, "export") == 0;
        if (on_expiry && !export_on_expiry && strcmp(on_expiry, "destroy") != 0) {
                handler_env_free(env);
                return rpc_fail(e, RPC_INVALID_PARAMS, "onExpiry must be \"destroy\" or \"export\"");
        }
        if (export_on_expiry && !core->expiry_dir) {
                handler_env_free(env);
                return rpc_fail(e, RPC_INVALID_PARAMS, "onExpiry \"export\" needs the server's --expiry-export-dir "
                                "(where the archives go)");
        }
        if (persist && (conn_is_stdio(r->conn) || root)) {
                handler_env_free(env);
                return rpc_fail(e, RPC_INVALID_PARAMS, "persist is only for sandbox.create on a socket server");
        }
        const char **secrets = NULL;
        ProxySecrets *psec = NULL;
        if (parse_secrets(r->params, &secrets, &psec, e) < 0) {
                handler_env_free(env);
                return -1;
        }
        o.secrets = secrets;
        o.proxy_secrets = psec && psec->n ? psec->v : NULL;
        o.n_proxy_secrets = psec ? psec->n : 0;
        int rr = sbx_sandbox_new(core->ctx, &o, &box);
        secrets_free(secrets);
        proxy_secrets_free(psec);
        handler_env_free(env);
        /* -EOPNOTSUPP: a policy this kernel cannot enforce, refused like a bad one. */
        if (rr == -EINVAL || rr == -EOPNOTSUPP)
                return rpc_fail(e, RPC_INVALID_PARAMS, "invalid sandbox options: %s", sbx_context_last_error(core->ctx));
        /* -EAGAIN: the spawner has as many creates waiting as it takes; they go at its pace. */
        if (rr == -EAGAIN) {
                rpc_fail(e, RPC_WORKER_UNAVAILABLE, "WORKER_UNAVAILABLE: %s", sbx_context_last_error(core->ctx));
                e->retry_after_ms = SBX_SPAWN_RETRY_MS;
                return -1;
        }
        if (rr < 0)
                return rpc_fail(e, RPC_INTERNAL_ERROR, "cannot create sandbox: %s", sbx_context_last_error(core->ctx));
        unsigned flags = (persist ? REGISTRY_PERSIST : 0) | (root ? REGISTRY_ROOT : 0);
        if (registry_add(&core->registry, box, r->conn, conn_uid(r->conn), flags, label, ret) < 0) {
                sbx_sandbox_free(box);
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        }
        if (metadata && !((*ret)->metadata = json_deep_copy(metadata))) {
                registry_destroy(*ret);
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        }
        (*ret)->export_on_expiry = export_on_expiry;
        int er = registry_set_expiry(*ret, sbx_context_loop(core->ctx), lifetime, idle);
        if (er < 0) {
                registry_destroy(*ret);
                return rpc_fail(e, RPC_INTERNAL_ERROR, "cannot arm the sandbox's timer: %s", strerror(-er));
        }
        if (rpc_bytes)
                conn_set_line_max(r->conn, rpc_bytes);
        return 0;
}

/* A new sandbox is answered once its root is built, so that every method works on it; the
 * client's later requests wait until then (a pipelined files.write must find the root). */
static void created_ready(void *ud, SbxSandbox *box, int error) {
        Pending *p = ud;
        if (p->conn)
                conn_hold_input(p->conn, false);
        if (p->conn && error == 0) {
                conn_reply(p->conn, p->id, TAKE_PTR(p->answer));
        } else if (p->conn) {
                RpcError e;
                const char *why = error != -ECANCELED ? sbx_sandbox_setup_error(box) : "";
                rpc_fail(&e, RPC_SANDBOX_ERROR, "the sandbox could not start: %s", why[0] ? why : strerror(-error));
                conn_reply_error(p->conn, p->id, &e);
        }
        /* A sandbox that never started is no sandbox: it must not count, nor stay the
         * connection's root (-ECANCELED: it is being destroyed already). */
        SrvSandbox *sb = error < 0 && error != -ECANCELED ? registry_by_box(&p->core->registry, box) : NULL;
        if (sb) {
                AUDIT(p->core->audit, "sandbox.destroy", sb, p->conn,
                      audit_outcome(error, json_pack("{s:s}", "reason", "start failed")));
                registry_destroy(sb);
        }
        pending_free(p);
}

/* Returns 1 (answered later) or -1 with e set. */
static int answer_when_ready(Req *r, SrvSandbox *sb, json_t *answer, RpcError *e) {
        Pending *p;
        if (!answer || pending_new(&r->core->pending, r->core, r->conn, r->id, PENDING_OP, &p) < 0) {
                json_decref(answer);
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        }
        p->answer = answer;
        int rr = sbx_sandbox_on_ready(sb->sb, created_ready, p);
        if (rr == 0)
                conn_hold_input(r->conn, true);
        if (rr < 0) {
                pending_free(p);
                return rpc_fail(e, RPC_INTERNAL_ERROR, "cannot watch the new sandbox: %s", strerror(-rr));
        }
        return 1;
}

/* A pod network sandbox's answers and listings say its address. */
static json_t *with_address(const SrvSandbox *sb, json_t *o) {
        const char *ip = sbx_sandbox_address(sb->sb);
        if (o && ip)
                json_object_set_new(o, "ip", json_string(ip));
        return o;
}

static int m_create(Req *r, json_t **ret, RpcError *e) {
        SrvSandbox *sb;
        if (registry_root(&r->core->registry, r->conn))
                return rpc_fail(e, RPC_INVALID_REQUEST, "Sandbox already created");
        if (new_sandbox(r, true, &sb, e) < 0)
                return -1;
        AUDIT(r->core->audit, "sandbox.create", sb, r->conn, json_pack("{s:b, s:b, s:b}", "root", 1, "persist",
              sb->persist, "network", json_is_true(json_object_get(r->params, "network"))));
        return answer_when_ready(r, sb, with_address(sb, json_pack("{s:b, s:s}", "ok", 1, "sandboxId", sbx_sandbox_id(sb->sb))), e);
}

static int m_sandbox_create(Req *r, json_t **ret, RpcError *e) {
        SrvSandbox *sb;
        if (new_sandbox(r, false, &sb, e) < 0)
                return -1;
        AUDIT(r->core->audit, "sandbox.create", sb, r->conn, json_pack("{s:b, s:b, s:b}", "root", 0, "persist",
              sb->persist, "network", json_is_true(json_object_get(r->params, "network"))));
        return answer_when_ready(r, sb, with_address(sb, json_pack("{s:s}", "sandboxId", sbx_sandbox_id(sb->sb))), e);
}

/* Whether every key of filter has the same value in sb's metadata. */
static bool metadata_matches(const SrvSandbox *sb, json_t *filter) {
        const char *key;
        json_t *v;
        json_object_foreach(filter, key, v) {
                json_t *have = sb->metadata ? json_object_get(sb->metadata, key) : NULL;
                if (!have || !json_equal(have, v))
                        return false;
        }
        return true;
}

static int m_sandbox_list(Req *r, json_t **ret, RpcError *e) {
        Registry *reg = &r->core->registry;
        json_t *filter;
        if (parse_metadata(r->params, &filter, e) < 0)
                return -1;
        json_t *list = json_array();
        for (SrvSandbox *sb = registry_next(reg, NULL); sb; sb = registry_next(reg, sb)) {
                if (!registry_may_use(sb, r->conn, conn_uid(r->conn)) || (filter && !metadata_matches(sb, filter)))
                        continue;
                json_t *o = json_pack("{s:s, s:o, s:b, s:b}", "sandboxId", sbx_sandbox_id(sb->sb), "createdAt",
                                      handler_time_json(sb->created_ms), "persist", sb->persist, "root", sb->root);
                if (sb->label)
                        json_object_set_new(o, "label", json_string(sb->label));
                json_object_set_new(o, "paused", json_boolean(sbx_sandbox_paused(sb->sb)));
                json_object_set_new(o, "forkOf", sb->fork_of[0] ? json_string(sb->fork_of) : json_null());
                with_address(sb, o);
                json_object_set_new(o, "metadata", sb->metadata ? json_deep_copy(sb->metadata) : json_object());
                json_array_append_new(list, o);
        }
        *ret = json_pack("{s:o}", "sandboxes", list);
        return 0;
}

static int m_sandbox_destroy(Req *r, json_t **ret, RpcError *e) {
        AUDIT(r->core->audit, "sandbox.destroy", r->sb, r->conn, json_pack("{s:s}", "reason", "request"));
        registry_destroy(r->sb);
        *ret = handler_ok_json();
        return 0;
}

static uint64_t mono_us(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static json_t *paused_json(uint64_t since_us) {
        return json_pack("{s:b, s:I}", "ok", 1, "tookUs", (json_int_t)(mono_us() - since_us));
}

static void paused(void *ud, SbxSandbox *box, int error) {
        Pending *p = ud;
        if (p->conn && error == 0) {
                conn_reply(p->conn, p->id, paused_json(p->started_us));
        } else if (p->conn) {
                RpcError e;
                if (error == -ETIMEDOUT)
                        rpc_fail(&e, RPC_SANDBOX_ERROR, "the sandbox did not freeze within %d ms; it runs on",
                                 SBX_FREEZE_WAIT_MS);
                else
                        rpc_fail(&e, RPC_SANDBOX_ERROR, "pause: %s", strerror(-error));
                conn_reply_error(p->conn, p->id, &e);
        }
        pending_free(p);
}

static int m_sandbox_pause(Req *r, json_t **ret, RpcError *e) {
        Pending *p;
        uint64_t t0 = mono_us();
        if (pending_new(&r->core->pending, r->core, r->conn, r->id, PENDING_OP, &p) < 0)
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        p->started_us = t0;
        int rr = sbx_sandbox_pause(r->sb->sb, paused, p);
        if (rr == 0)
                return 1;
        pending_free(p);
        if (rr == 1) {
                *ret = paused_json(t0);
                return 0;
        }
        if (rr == -EALREADY)
                return rpc_fail(e, RPC_INVALID_PARAMS, "the sandbox is paused already");
        if (rr == -EAGAIN)
                return rpc_fail(e, RPC_INVALID_PARAMS, "the sandbox is not ready");
        if (rr == -ENOTSUP)
                return rpc_fail(e, RPC_SANDBOX_ERROR, "pause needs the cgroup v2 freezer, which this host lacks");
        return rpc_fail(e, RPC_SANDBOX_ERROR, "pause: %s", strerror(-rr));
}

static int m_sandbox_resume(Req *r, json_t **ret, RpcError *e) {
        uint64_t t0 = mono_us();
        int rr = sbx_sandbox_resume(r->sb->sb);
        if (rr == -EALREADY)
                return rpc_fail(e, RPC_INVALID_PARAMS, "the sandbox is not paused");
        if (rr == -EBUSY)
                return rpc_fail(e, RPC_INVALID_PARAMS, "the sandbox is still being paused");
        if (rr < 0)
                return rpc_fail(e, RPC_SANDBOX_ERROR, "resume: %s", strerror(-rr));
        *ret = paused_json(t0);
        return 0;
}

static int m_sandbox_set_timeout(Req *r, json_t **ret, RpcError *e) {
        uint64_t lifetime;
        if (param_u64(r->params, "lifetimeMs", true, SBX_MAX_SANDBOX_LIFETIME_MS, &lifetime, e) < 0)
                return -1;
        int er = registry_set_expiry(r->sb, sbx_context_loop(r->core->ctx), lifetime, r->sb->idle_ms);
        if (er < 0)
                return rpc_fail(e, RPC_INTERNAL_ERROR, "cannot arm the sandbox's timer: %s", strerror(-er));
        *ret = handler_ok_json();
        return 0;
}

/* One sample as the protocol says it; cpuUsedPct from the sample before it (NULL: none), as a
 * share of the sandbox's CPUs. */
static json_t *sample_json(const SbxMetricsSample *s, const SbxMetricsSample *prev, uint32_t cpu_millis) {
        double pct = 0;
        if (prev && s->time_ms > prev->time_ms && s->cpu_usec >= prev->cpu_usec && cpu_millis)
                /* µs of CPU per ms of wall time is thousandths of a CPU, as cpu_millis is. */
                pct = (double)(s->cpu_usec - prev->cpu_usec) / (double)(s->time_ms - prev->time_ms) * 100.0 /
                      (double)cpu_millis;
        return json_pack("{s:I, s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "timestamp", (json_int_t)s->time_ms,
                         "cpuUsedPct", pct > 100 ? 100.0 : pct, "cpuUsec", (json_int_t)s->cpu_usec, "memoryBytes",
                         (json_int_t)s->memory_bytes, "pids", (json_int_t)s->pids, "fsBytes", (json_int_t)s->fs_bytes,
                         "fsFiles", (json_int_t)s->fs_files, "netBytes", (json_int_t)s->net_bytes, "runs",
                         (json_int_t)s->runs);
}

static int m_sandbox_metrics(Req *r, json_t **ret, RpcError *e) {
        uint64_t start = 0, end = UINT64_MAX;
        if (param_u64(r->params, "start", false, UINT64_MAX >> 1, &start, e) < 0 ||
            param_u64(r->params, "end", false, UINT64_MAX >> 1, &end, e) < 0)
                return -1;
        if (!json_object_get(r->params, "end"))
                end = UINT64_MAX;
        if (start > end)
                return rpc_fail(e, RPC_INVALID_PARAMS, "start (%llu) is after end (%llu)", (unsigned long long)start,
                                (unsigned long long)end);
        SbxSandbox *box = r->sb->sb;
        const SbxLimits *l = sbx_sandbox_limits(box);
        /* The sample before the range too, for the first one's CPU share (two intervals back:
         * the timer's ticks are not exactly one interval apart). */
        uint64_t from = start >= 2 * SBX_METRICS_INTERVAL_MS ? start - 2 * SBX_METRICS_INTERVAL_MS : 0;
        _cleanup_free_ SbxMetricsSample *v = calloc(SBX_METRICS_SAMPLES + 1, sizeof *v);
        if (!v)
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        size_t n = MIN(sbx_sandbox_metrics(box, from, end, v, SBX_METRICS_SAMPLES + 1), (size_t)SBX_METRICS_SAMPLES + 1);
        json_t *samples = json_array();
        for (size_t i = 0; i < n; i++)
                if (v[i].time_ms >= start)
                        json_array_append_new(samples, sample_json(&v[i], i ? &v[i - 1] : NULL, l->cpu_millis));
        *ret = json_pack("{s:s, s:i, s:f, s:I, s:I, s:I, s:I, s:o}", "sandboxId", r->sb->id, "intervalMs",
                         (int)SBX_METRICS_INTERVAL_MS, "cpuCount", (double)l->cpu_millis / 1000.0, "memoryLimitBytes",
                         (json_int_t)l->memory_bytes, "fsLimitBytes", (json_int_t)l->fs_bytes, "fileLimit",
                         (json_int_t)l->file_count, "pidsLimit", (json_int_t)l->pids, "samples", samples);
        /* Now against the last sample taken, whatever the range. */
        SbxMetricsSample now, last;
        if (*ret && sbx_sandbox_sample(box, &now) == 0)
                json_object_set_new(*ret, "current", sample_json(&now, sbx_sandbox_last_sample(box, &last) == 0 ? &last : NULL,
                                                                 l->cpu_millis));
        return 0;
}

static int m_session_create(Req *r, json_t **ret, RpcError *e) {
        const char *name;
        SbxSession *s;
        if (param_string(r->params, "name", true, &name, NULL, e) < 0)
                return -1;
        if (sbx_session_find(r->sb->sb, name))
                return rpc_fail(e, RPC_INVALID_PARAMS, "Session already exists: %s", name);
        if (handler_open_session(r, name, &s, e) < 0)
                return -1;
        *ret = json_pack("{s:b, s:s}", "ok", 1, "name", name);
        return 0;
}

static int m_session_list(Req *r, json_t **ret, RpcError *e) {
        json_t *list = json_array();
        for (SbxSession *s = sbx_session_next(r->sb->sb, NULL); s; s = sbx_session_next(r->sb->sb, s)) {
                uint64_t ms = 0;
                const char *cmd = sbx_session_current(s, &ms);
                json_t *running = json_null();
                if (cmd) {
                        /* The text as the caller gave it, cut where a listing stops caring (on a
                         * character's boundary: never inside a UTF-8 sequence). */
                        size_t len = strnlen(cmd, SBX_SESSION_LIST_COMMAND_BYTES);
                        if (len == SBX_SESSION_LIST_COMMAND_BYTES)
                                while (len > 0 && ((unsigned char)cmd[len] & 0xC0) == 0x80)
                                        len--;
                        running = json_pack("{s:s%, s:I}", "command", cmd, len, "runningMs", (json_int_t)ms);
                        if (!running)
                                running = json_pack("{s:s, s:I}", "command", "(not UTF-8)", "runningMs", (json_int_t)ms);
                }
                json_array_append_new(list, json_pack("{s:s, s:o, s:i}", "name", sbx_session_name(s), "running",
                                                      running, "queued", (int)sbx_session_queued(s)));
        }
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
        *ret = handler_ok_json();
        return 0;
}

#define SANDBOX_OPTIONS \
        { "timeoutMs", P_INT, false, "default per-run timeout (30000)" }, \
        { "fsLimitBytes", P_INT, false, "size of /tmp + /home/user (256 MiB)" }, \
        { "image", P_STRING, false, "an image of the daemon's store (image.import) as the root: a name (\"x\" is \"x:latest\"), its id, or 12+ hex digits of it. Its tree is read-only, as the host's system directories are otherwise; /tmp, /home/user and /dev/shm are the sandbox's own as always; the environment starts from its Env; the user is uid 1000 whatever its User. It must have /bin/bash. Kept by sandbox.fork; the image cannot be removed while the sandbox lives" }, \
        { "limits", P_OBJECT, false, "{stdoutBytes, stderrBytes, commandBytes, fileCount, rpcBytes, memoryBytes, pids, cpus (CPUs, fractions allowed; default half the host's)}" }, \
        { "env", P_OBJECT, false, "extra environment {NAME: value}" }, \
        { "network", P_ANY, false, "false or \"none\" (default): its own network namespace, loopback only; true or \"host\": the host's network, shared; \"allowlist\": loopback only, plus an HTTP proxy on its 127.0.0.1:3128 (HTTP_PROXY, HTTPS_PROXY, http_proxy, https_proxy set, NO_PROXY=localhost,127.0.0.1,::1) through which only the names of networkAllow are reached: CONNECT tunnels (https) and plain http:// requests (one per connection, sent on with Connection: close). A name not listed, or one resolving only to loopback, private (RFC 1918), carrier-grade NAT, link-local, cloud metadata, unique-local, multicast or reserved addresses (unless the operator allows them: sbx serve --egress-allow-private), is answered 403 with one line saying why; one that does not resolve or connect, 502. Kept by sandbox.fork (with its own proxy); a pooled sandbox is never handed to a create with a network. \"pod\": loopback plus eth0 on the daemon's pod network (sbx serve --pod-cidr), with an address of its own that the answer and sandbox.list give as ip: what the sandbox listens on there is reached by the host and by the network's other sandboxes; it reaches them, and what the host routes to" }, \
        { "networkAllow", P_ANY, false, "with network \"allowlist\" (and only then; required, may be empty, unless secrets with hosts are given, whose hosts join it): at most 256 host patterns, each \"example.com\" (that name), \"*.example.com\" (names below it at any depth, not example.com itself) or an IPv4 address, then optionally \":port\" (that port only) or \":*\" (any port); without one, ports 80 and 443. Case and a final dot are ignored. A bad pattern is refused (-32602)" }, \
        { "policy", P_OBJECT, false, "exec policy, enforced by the kernel (Landlock) for every process of the sandbox: {allow: [path or glob], deny: [path or glob]}, absolute paths in the sandbox matched when it is created (a directory, or dir/**, covers all beneath it). allow: only those files (and /bin/bash) may be executed, nothing on /tmp, /home/user or /dev/shm may run, and memfds must be MFD_NOEXEC_SEAL; deny alone: everything but those. A denied file can be neither executed nor read (its exec fails with EACCES: exit 126, \"Permission denied\"). Refused (-32602) where the kernel has no Landlock; a pattern matching nothing fails the create. Kept by sandbox.fork; a pooled sandbox is never handed to a create with a policy" }, \
        PARAM_LEFTOVERS("a command"), \
        { "lifetimeMs", P_INT, false, "destroy the sandbox this long after its creation (0 or absent: never; at most 31 days); the owner gets sandbox.expired" }, \
        { "idleTimeoutMs", P_INT, false, "destroy the sandbox after this long without a request naming it (or, for the root sandbox, none naming another); a run in progress does not count" }, \
        { "onExpiry", P_STRING, false, "\"destroy\" (default) or \"export\": when it expires, first write its export archive (as persistence.export) to the server's --expiry-export-dir; sandbox.expired then names the file" }, \
        { "metadata", P_OBJECT, false, "{key: string}, shown and filtered by sandbox.list: at most 32 keys of 1-64 bytes of [A-Za-z0-9_.-], values at most 1024 bytes" }, \
        { "secrets", P_OBJECT, false, "{NAME: value} or {NAME: {value, mode: \"env\"}}: set in the commands' environment as NAME, never shown by any method; every value of 8 bytes or more is replaced by [REDACTED:NAME] in all output and history. {NAME: {value, hosts: [patterns]}} (mode \"proxy\", the default with hosts; network \"allowlist\" only, the hosts join networkAllow): the commands see only NAME=SBX_SECRET_<NAME>_<random>, and the proxy puts the value in place of that placeholder in the request heads (request line, headers) of HTTPS requests to those hosts, whose TLS it ends with a CA of the sandbox's own that the sandbox trusts (SSL_CERT_FILE and the like); responses have the value masked. At most 64 in all, values at most 16 KiB" }

static const Param p_create[] = { SANDBOX_OPTIONS, { 0 } };
static const Param p_sandbox_create[] = {
        { "label", P_STRING, false, "free text shown by sandbox.list (at most 256 bytes)" },
        { "persist", P_BOOL, false, "socket server only: outlive this connection (listed to the same uid)" },
        SANDBOX_OPTIONS, { 0 } };
static const Param p_sandbox_list[] = {
        { "metadata", P_OBJECT, false, "only sandboxes whose metadata has every one of these {key: string}" }, { 0 } };
static const Param p_set_timeout[] = { PARAM_SANDBOX_ID,
        { "lifetimeMs", P_INT, true, "the sandbox expires this long from now (0: never); its idleTimeoutMs stays" }, { 0 } };
static const Param p_sandbox_destroy[] = { { "sandboxId", P_STRING, true, "the sandbox to destroy" }, { 0 } };
static const Param p_metrics[] = { PARAM_SANDBOX_ID,
        { "start", P_INT, false, "only samples from then on (ms since the epoch; default: the oldest kept)" },
        { "end", P_INT, false, "only samples until then (ms since the epoch; default: now)" }, { 0 } };
static const Param p_session_name[] = { PARAM_SANDBOX_ID, { "name", P_STRING, true, "session name, 1-64 of [A-Za-z0-9_.-]" },
        { 0 } };

const Method server_methods_sandbox[] = {
        { "create", m_create, 0, p_create, "{ok: true, sandboxId}",
          "Creates the connection's root sandbox (the one used when sandboxId is missing)." },
        { "sandbox.create", m_sandbox_create, 0, p_sandbox_create, "{sandboxId}",
          "Creates another sandbox owned by this connection (or persistent)." },
        { "sandbox.list", m_sandbox_list, 0, p_sandbox_list, "{sandboxes: [{sandboxId, label?, metadata, paused, createdAt, persist, root, forkOf, ip?}]}",
          "Sandboxes this connection may use." },
        { "sandbox.destroy", m_sandbox_destroy, M_SANDBOX | M_ASLEEP, p_sandbox_destroy, "{ok: true}",
          "Kills every process of the sandbox and removes it." },
        { "sandbox.pause", m_sandbox_pause, M_SANDBOX, handler_params_sandbox, "{ok: true, tookUs}",
          "Freezes every process of the sandbox in place (cgroup v2 freezer), answered once frozen: memory kept, no CPU. Runs and process.start wait until sandbox.resume (or fail with whilePaused: \"refuse\"); a run already running is frozen with the rest, its timeout still counting. Fork, snapshots, export and import are refused; one already under way ends once resumed, or while paused if past its copy, and never thaws the sandbox." },
        { "sandbox.resume", m_sandbox_resume, M_SANDBOX, handler_params_sandbox, "{ok: true, tookUs}",
          "Lets a paused sandbox run on exactly where it was; waiting runs start." },
        { "sandbox.setTimeout", m_sandbox_set_timeout, M_SANDBOX, p_set_timeout, "{ok: true}",
          "Sets when the sandbox expires, counted from now. When it expires (lifetime or idle time) it is destroyed and its owner connection gets the notification sandbox.expired {sandboxId, reason: \"lifetime\" or \"idle\", export?: path of the archive written first (onExpiry \"export\"), exportError?: why it could not be}." },
        { "sandbox.metrics", m_sandbox_metrics, M_SANDBOX, p_metrics,
          "{sandboxId, intervalMs, cpuCount, memoryLimitBytes, fsLimitBytes, fileLimit, pidsLimit, samples: [{timestamp, "
          "cpuUsedPct, cpuUsec, memoryBytes, pids, fsBytes, fsFiles, netBytes, runs}], current?}",
          "What the sandbox used over time: a sample every intervalMs (5000) for the last hour, oldest first; current is "
          "read now. timestamp: ms since the epoch; cpuUsedPct: its share of the sandbox's CPUs (cpuCount) since the "
          "sample before; cpuUsec: CPU time used so far; memoryBytes: its memory cgroup (processes, page cache, the "
          "pages of its tmpfs); pids: its tasks, session shells included; fsBytes and fsFiles: used of its writable "
          "filesystem (/tmp, /home/user, /dev/shm); netBytes: bytes relayed for it so far by its egress proxy (TLS "
          "it ends excepted) and its exposed ports, both ways; runs: runs and processes started so far." },
        { "session.create", m_session_create, M_SANDBOX, p_session_name, "{ok: true, name}", "Creates a named session." },
        { "session.list", m_session_list, M_SANDBOX, handler_params_sandbox,
          "{sessions: [{name, running: {command, runningMs} or null, queued}]}",
          "Sessions of the sandbox: what each runs now of the callers' (its command, cut at 4 KiB) and how many runs "
          "wait behind it." },
        { "session.delete", m_session_delete, M_SANDBOX, p_session_name, "{ok: true}",
          "Ends a session; its running command is cancelled." },
        { 0 } };
