/* SPDX-License-Identifier: MIT */
/* The E2B door: its listener's ops, the routes, the keys, and the control plane (E2B's REST
 * API: sandboxes made, listed, described, timed, paused, resumed, forked and killed), each
 * call done with sbx's own methods on the door's connection. envd.c serves the rest. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "base/limits.h"
#include "base/log.h"
#include "base/util.h"
#include "e2b/e2b_private.h"

static json_t *rfc3339(uint64_t ms) {
        char buf[64];
        time_t t = (time_t)(ms / 1000);
        struct tm tm;
        gmtime_r(&t, &tm);
        snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                 tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
        return json_string(buf);
}

/* E2B's Sandbox: what create, connect and fork answer. */
static json_t *sandbox_json(const E2bBox *b) {
        return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "sandboxID", b->id, "templateID", b->template_id, "alias",
                         b->template_id, "clientID", "sbx", "envdVersion", E2B_ENVD_VERSION, "envdAccessToken",
                         b->token);
}

/* E2B's ListedSandbox / SandboxDetail, from the door's record and sbx.list's entry. */
static json_t *detail_json(const E2bBox *b, json_t *entry) {
        json_t *md = json_object_get(entry, "metadata");
        json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:s, s:i, s:i, s:i, s:O, s:s}", "sandboxID", b->id,
                              "templateID", b->template_id, "alias", b->template_id, "clientID", "sbx", "startedAt",
                              rfc3339(b->started_ms), "endAt", rfc3339(b->end_ms ? b->end_ms : b->started_ms + 31ULL * 86400000),
                              "state", json_is_true(json_object_get(entry, "paused")) ? "paused" : "running", "cpuCount",
                              1, "memoryMB", 512, "diskSizeMB", 256, "metadata", md ? md : json_object(),
                              "envdVersion", E2B_ENVD_VERSION);
        if (o)
                json_object_set_new(o, "envdAccessToken", json_string(b->token));
        return o;
}

static int new_box(E2b *g, const char *id, const char *template_id, uint64_t timeout_ms, E2bBox **ret) {
        E2bBox *b = calloc(1, sizeof *b);
        if (!b)
                return -ENOMEM;
        snprintf(b->id, sizeof b->id, "%s", id);
        snprintf(b->template_id, sizeof b->template_id, "%s", template_id);
        if (random_hex(b->token, E2B_TOKEN_HEX / 2) < 0) {
                free(b);
                return -EIO;
        }
        b->started_ms = wall_ms();
        b->end_ms = timeout_ms ? b->started_ms + timeout_ms : 0;
        b->next = g->boxes;
        g->boxes = b;
        *ret = b;
        return 0;
}

int e2b_adopt(E2b *g, const char *sandbox_id, const char *token, const char *template_id) {
        E2bBox *b;
        if (!token || strlen(token) != E2B_TOKEN_HEX || strlen(sandbox_id) >= sizeof b->id)
                return -EINVAL;
        int r = new_box(g, sandbox_id, template_id ? template_id : E2B_TEMPLATE, 0, &b);
        if (r == 0)
                snprintf(b->token, sizeof b->token, "%s", token);
        return r;
}

void e2b_release(E2b *g, const char *sandbox_id) {
        envd_watchers_drop(g, sandbox_id);
        e2b_box_drop(g, sandbox_id);
}

/* An sbx error as E2B's REST error: the SDK reads code 404 from the body. */
static void reply_sbx_error(E2bReq *q, json_t *error) {
        const char *code = e2b_connect_code(error);
        const char *m = json_string_value(json_object_get(error, "message"));
        unsigned status = strcmp(code, "not_found") == 0 ? 404 : strcmp(code, "resource_exhausted") == 0 ? 429
                          : strcmp(code, "unavailable") == 0 ? 503 : strcmp(code, "invalid_argument") == 0 ? 400 : 500;
        e2b_reply_rest_error(q, status, "%s", m ? m : "sbx error");
}

/* E2B's timeout is in seconds; absent, E2B's default of 300 s. */
static uint64_t timeout_ms_of(json_t *body) {
        json_t *t = json_object_get(body, "timeout");
        if (json_is_integer(t) && json_integer_value(t) >= 0)
                return (uint64_t)MIN(json_integer_value(t), (json_int_t)SBX_E2B_MAX_TIMEOUT_S) * 1000;
        return (uint64_t)SBX_E2B_DEFAULT_TIMEOUT_S * 1000;
}

static void created(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        const char *m = json_string_value(json_object_get(error, "message"));
        if (!result && m && strstr(m, "no image '"))
                return e2b_reply_rest_error(q, 404, "template '%s' not found: this sbx serves '%s' (the host's system, "
                                            "read-only, with /home/user and /tmp of its own), '%s' (the same, for "
                                            "@e2b/code-interpreter) and the images of its store (sbx image ls)",
                                            json_string_value(json_object_get(q->in, "templateID")), E2B_TEMPLATE,
                                            E2B_TEMPLATE_CODE);
        if (!result)
                return reply_sbx_error(q, error);
        const char *id = json_string_value(json_object_get(result, "sandboxId"));
        const char *tpl = json_string_value(json_object_get(q->in, "templateID"));
        E2bBox *b;
        if (!id || new_box(q->g, id, tpl ? tpl : E2B_TEMPLATE, timeout_ms_of(q->in), &b) < 0)
                return e2b_reply_rest_error(q, 500, "out of memory");
        e2b_reply_json(q, 201, sandbox_json(b));
}

static void create(E2bReq *q) {
        const char *tpl = json_string_value(json_object_get(q->in, "templateID"));
        json_t *p = json_pack("{s:b, s:s, s:I}", "persist", 1, "label", "e2b", "lifetimeMs",
                              (json_int_t)timeout_ms_of(q->in));
        /* The code interpreter's template is the same sandbox (its contexts are sbx's); any
         * other is an image of the daemon's store by that name. */
        if (tpl && strcmp(tpl, E2B_TEMPLATE) != 0 && strcmp(tpl, E2B_TEMPLATE_CODE) != 0)
                json_object_set_new(p, "image", json_string(tpl));
        json_t *md = json_object_get(q->in, "metadata"), *env = json_object_get(q->in, "envVars");
        if (json_is_object(md) && json_object_size(md))
                json_object_set(p, "metadata", md);
        if (json_is_object(env) && json_object_size(env))
                json_object_set(p, "env", env);
        if (json_is_true(json_object_get(q->in, "allow_internet_access")))
                json_object_set_new(p, "network", json_true());
        (void)rpc_client_call(q->g->rpc, "sandbox.create", p, created, q);
}

/* GET /v2/sandboxes: metadata ("k=v&k2=v2", URL-encoded once more), state, limit, nextToken. */
static int parse_metadata_query(const char *s, json_t *out) {
        _cleanup_free_ char *copy = strdup(s);
        char *save = NULL;
        if (!copy)
                return -ENOMEM;
        for (char *kv = strtok_r(copy, "&", &save); kv; kv = strtok_r(NULL, "&", &save)) {
                char *eq = strchr(kv, '=');
                if (!eq)
                        return -EINVAL;
                *eq = 0;
                json_object_set_new(out, kv, json_string(eq + 1));
        }
        return 0;
}

static void listed(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return reply_sbx_error(q, error);
        const char *state = http_query(q->r, "state");
        const char *next = http_query(q->r, "nextToken");
        const char *limit_s = http_query(q->r, "limit");
        uint64_t limit = 0;
        if (limit_s && parse_u64(limit_s, 10000, &limit) < 0)
                return e2b_reply_rest_error(q, 400, "limit must be a number from 0 to 10000");
        json_t *out = json_array(), *e;
        size_t i;
        bool past_token = !next, more = false;
        const char *last = NULL;
        json_array_foreach(json_object_get(result, "sandboxes"), i, e) {
                const char *id = json_string_value(json_object_get(e, "sandboxId"));
                E2bBox *b = e2b_box_find(q->g, id);
                if (!b)
                        continue; /* not made through this door */
                if (!past_token) {
                        past_token = strcmp(id, next) == 0;
                        continue;
                }
                const char *st = json_is_true(json_object_get(e, "paused")) ? "paused" : "running";
                if (state && !strstr(state, st))
                        continue;
                if (limit && json_array_size(out) == limit) {
                        more = true;
                        break;
                }
                json_array_append_new(out, detail_json(b, e));
                last = b->id;
        }
        char *s = json_dumps(out, JSON_COMPACT);
        json_decref(out);
        const char *hdr[] = { "X-Next-Token", last, NULL };
        (void)http_reply(q->r, 200, "application/json", s, s ? strlen(s) : 0, more && last ? hdr : NULL);
}

static void list(E2bReq *q) {
        json_t *p = json_object();
        const char *md = http_query(q->r, "metadata");
        if (md) {
                json_t *m = json_object();
                if (parse_metadata_query(md, m) < 0) {
                        json_decref(m);
                        json_decref(p);
                        return e2b_reply_rest_error(q, 400, "metadata must be key=value pairs joined by &");
                }
                json_object_set_new(p, "metadata", m);
        }
        (void)rpc_client_call(q->g->rpc, "sandbox.list", p, listed, q);
}

/* sandbox.list's entry of sandbox id; NULL when it is not there (borrowed from result). */
static json_t *listed_entry(json_t *result, const char *id) {
        json_t *e;
        size_t i;
        json_array_foreach(json_object_get(result, "sandboxes"), i, e)
                if (strcmp(json_string_value(json_object_get(e, "sandboxId")) ?: "", id) == 0)
                        return e;
        return NULL;
}

static void described(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return reply_sbx_error(q, error);
        json_t *e = listed_entry(result, q->box->id);
        if (e)
                return e2b_reply_json(q, 200, detail_json(q->box, e));
        envd_watchers_drop(q->g, q->box->id);
        e2b_box_drop(q->g, q->box->id);
        q->box = NULL;
        e2b_reply_rest_error(q, 404, "sandbox not found");
}

static void killed(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return reply_sbx_error(q, error);
        envd_watchers_drop(q->g, q->box->id);
        e2b_box_drop(q->g, q->box->id);
        q->box = NULL;
        e2b_reply_empty(q, 204);
}

/* The sandbox's end as the request's timeout sets it, from now. */
static void set_end(E2bReq *q) {
        uint64_t ms = timeout_ms_of(q->in);
        q->box->end_ms = ms ? wall_ms() + ms : 0;
}

static void timed(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return reply_sbx_error(q, error);
        set_end(q);
        e2b_reply_empty(q, 204);
}

static void paused(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return reply_sbx_error(q, error);
        e2b_reply_empty(q, 204);
}

/* connect / resume: resumed if paused (201), then the timeout set from now (200 if it ran). */
static void connect_timed(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return reply_sbx_error(q, error);
        set_end(q);
        e2b_reply_json(q, json_is_true(q->scratch) ? 201 : 200, sandbox_json(q->box));
}

static void connect_resumed(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return reply_sbx_error(q, error);
        (void)rpc_client_call(q->g->rpc, "sandbox.setTimeout",
                              json_pack("{s:s, s:I}", "sandboxId", q->box->id, "lifetimeMs",
                                        (json_int_t)timeout_ms_of(q->in)),
                              connect_timed, q);
}

static void connect_listed(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return reply_sbx_error(q, error);
        json_t *e = listed_entry(result, q->box->id);
        if (!e)
                return e2b_reply_rest_error(q, 404, "sandbox not found");
        bool was_paused = json_is_true(json_object_get(e, "paused"));
        q->scratch = json_boolean(was_paused);
        if (was_paused)
                (void)rpc_client_call(q->g->rpc, "sandbox.resume", json_pack("{s:s}", "sandboxId", q->box->id),
                                      connect_resumed, q);
        else
                connect_resumed(q, result, NULL);
}

static void forked(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return reply_sbx_error(q, error);
        const char *id = json_string_value(json_object_get(result, "sandboxId"));
        E2bBox *b;
        if (!id || new_box(q->g, id, q->box->template_id, timeout_ms_of(q->in), &b) < 0)
                return e2b_reply_rest_error(q, 500, "out of memory");
        (void)rpc_client_call(q->g->rpc, "sandbox.setTimeout",
                              json_pack("{s:s, s:I}", "sandboxId", id, "lifetimeMs", (json_int_t)timeout_ms_of(q->in)),
                              NULL, NULL);
        e2b_reply_json(q, 201, json_pack("[{s:o}]", "sandbox", sandbox_json(b)));
}

/* E2B's SandboxMetric from sbx's samples: memory and disk in bytes, CPU as a share. */
static void metrics_got(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return reply_sbx_error(q, error);
        json_t *out = json_array(), *v;
        size_t i;
        double cpus = json_number_value(json_object_get(result, "cpuCount"));
        json_int_t mem_total = json_integer_value(json_object_get(result, "memoryLimitBytes"));
        json_int_t disk_total = json_integer_value(json_object_get(result, "fsLimitBytes"));
        json_array_foreach(json_object_get(result, "samples"), i, v) {
                json_int_t ms = json_integer_value(json_object_get(v, "timestamp"));
                char when[96];
                time_t t = (time_t)(ms / 1000);
                struct tm tm;
                gmtime_r(&t, &tm);
                snprintf(when, sizeof when, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                         tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
                json_array_append_new(
                        out, json_pack("{s:s, s:I, s:i, s:f, s:I, s:I, s:I, s:I, s:I}", "timestamp", when, "timestampUnix",
                                       (json_int_t)(ms / 1000), "cpuCount", cpus < 1 ? 1 : (int)(cpus + 0.999),
                                       "cpuUsedPct", json_number_value(json_object_get(v, "cpuUsedPct")), "memUsed",
                                       json_integer_value(json_object_get(v, "memoryBytes")), "memTotal", mem_total,
                                       "memCache", (json_int_t)0, "diskUsed",
                                       json_integer_value(json_object_get(v, "fsBytes")), "diskTotal", disk_total));
        }
        e2b_reply_json(q, 200, out);
}

/* ?start=&end= in unix seconds, as E2B's SDKs send them; absent: the whole hour kept. */
static void metrics_params(E2bReq *q, json_t *sid) {
        const char *keys[] = { "start", "end" };
        for (size_t i = 0; i < 2; i++) {
                const char *v = http_query(q->r, keys[i]);
                char *end;
                if (!v || !*v)
                        continue;
                errno = 0;
                unsigned long long sec = strtoull(v, &end, 10);
                if (*end || errno || sec > UINT32_MAX * 4ULL) {
                        json_decref(sid);
                        return e2b_reply_rest_error(q, 400, "%s: unix seconds expected, not \"%s\"", keys[i], v);
                }
                json_object_set_new(sid, keys[i], json_integer((json_int_t)(sec * 1000 + (i ? 999 : 0))));
        }
        (void)rpc_client_call(q->g->rpc, "sandbox.metrics", sid, metrics_got, q);
}

/* /sandboxes/{id}[/action] and /v2/sandboxes/{id}/connect. */
static void one_sandbox(E2bReq *q, const char *method, const char *rest) {
        char id[64];
        size_t n = strcspn(rest, "/");
        const char *action = rest[n] ? rest + n + 1 : "";
        if (n == 0 || n >= sizeof id)
                return e2b_reply_rest_error(q, 404, "no such route");
        memcpy(id, rest, n);
        id[n] = 0;
        q->box = e2b_box_find(q->g, id);
        if (!q->box)
                return e2b_reply_rest_error(q, 404, "sandbox %s not found", id);
        json_t *sid = json_pack("{s:s}", "sandboxId", id);
        RpcClient *c = q->g->rpc;
        if (!strcmp(method, "GET") && !*action)
                (void)rpc_client_call(c, "sandbox.list", NULL, described, q), json_decref(sid);
        else if (!strcmp(method, "DELETE") && !*action)
                (void)rpc_client_call(c, "sandbox.destroy", sid, killed, q);
        else if (!strcmp(method, "POST") && !strcmp(action, "timeout")) {
                json_object_set_new(sid, "lifetimeMs", json_integer((json_int_t)timeout_ms_of(q->in)));
                (void)rpc_client_call(c, "sandbox.setTimeout", sid, timed, q);
        } else if (!strcmp(method, "POST") && !strcmp(action, "pause"))
                (void)rpc_client_call(c, "sandbox.pause", sid, paused, q);
        else if (!strcmp(method, "POST") && (!strcmp(action, "connect") || !strcmp(action, "resume")))
                (void)rpc_client_call(c, "sandbox.list", NULL, connect_listed, q), json_decref(sid);
        else if (!strcmp(method, "POST") && !strcmp(action, "fork"))
                (void)rpc_client_call(c, "sandbox.fork", sid, forked, q);
        else if (!strcmp(method, "GET") && !strcmp(action, "metrics"))
                metrics_params(q, sid);
        else
                e2b_reply_rest_error(q, 404, "no such route: %s /sandboxes/%s", method, rest), json_decref(sid);
}

static void control_plane(E2bReq *q) {
        const char *m = http_method(q->r), *path = http_path(q->r);
        if (!strcmp(path, "/sandboxes") || !strcmp(path, "/v2/sandboxes")) {
                if (!strcmp(m, "POST"))
                        return create(q);
                if (!strcmp(m, "GET"))
                        return list(q);
                return e2b_reply_rest_error(q, 405, "%s %s is not served", m, path);
        }
        if (!strncmp(path, "/sandboxes/", 11))
                return one_sandbox(q, m, path + 11);
        if (!strncmp(path, "/v2/sandboxes/", 14))
                return one_sandbox(q, m, path + 14);
        e2b_reply_rest_error(q, 404, "no such route: %s %s (sbx serves E2B's sandboxes API and envd)", m, path);
}

/* ---------------------------------------------------------------- the listener's ops */

/* X-API-KEY: one of --api-key's; with none configured, any (or none) from loopback only. */
static bool key_ok(E2bReq *q) { return http_api_key_ok(q->r, q->g->keys, q->g->n_keys); }

static E2bReq *req_of(E2b *g, HttpReq *r) {
        E2bReq *q = http_user(r);
        if (!q && (q = calloc(1, sizeof *q))) {
                q->g = g;
                q->r = r;
                q->keepalive_fd = -1;
                q->data_fd = -1;
                http_set_user(r, q);
        }
        return q;
}

/* Whether r is the extra routes' (decided from its head alone, so every op agrees). */
static bool is_extra(const E2b *g, HttpReq *r) {
        unsigned port;
        char id[64];
        return g->extra.route && !http_header(r, "E2b-Sandbox-Port") &&
               !e2b_host_target(http_header(r, "Host"), &port, id) && g->extra.route(g->extra.data, r);
}

static int on_head(void *data, HttpReq *r) {
        E2b *g = data;
        if (is_extra(g, r))
                return g->extra.ops->head ? g->extra.ops->head(g->extra.data, r) : 0;
        E2bReq *q = req_of(data, r);
        if (!q)
                return 503;
        return !interp_route(q) && !ports_route(q) && envd_route(q) ? envd_head(q) : 0;
}

static int on_body(void *data, HttpReq *r, const uint8_t *chunk, size_t len) {
        E2b *g = data;
        if (is_extra(g, r))
                return g->extra.ops->body(g->extra.data, r, chunk, len);
        return envd_body(http_user(r), chunk, len);
}

static void on_request(void *data, HttpReq *r) {
        E2b *g = data;
        if (is_extra(g, r))
                return g->extra.ops->request(g->extra.data, r);
        E2bReq *q = req_of(data, r);
        if (!q) {
                (void)http_reply(r, 503, NULL, NULL, 0, NULL);
                return;
        }
        if (interp_route(q))
                return interp_request(q);
        if (ports_route(q))
                return ports_request(q);
        if (envd_route(q))
                return envd_request(q);
        if (!key_ok(q))
                return e2b_reply_rest_error(q, 401, "Invalid API key (X-API-KEY): give one of sbx serve --api-key's%s",
                                            q->g->n_keys ? "" : ", or call from loopback");
        size_t n;
        const uint8_t *body = http_body(r, &n);
        if (n) {
                json_error_t je;
                q->in = json_loadb((const char *)body, n, 0, &je);
                if (!json_is_object(q->in))
                        return e2b_reply_rest_error(q, 400, "the body is not a JSON object: %s", je.text);
        }
        control_plane(q);
}

static void on_drained(void *data, HttpReq *r) {
        E2b *g = data;
        if (is_extra(g, r)) {
                if (g->extra.ops->drained)
                        g->extra.ops->drained(g->extra.data, r);
                return;
        }
        E2bReq *q = http_user(r);
        if (q->fwd.fetch)
                ports_drained(q);
        else
                envd_drained(q);
}

static void on_finished(void *data, HttpReq *r, bool ok) {
        E2b *g = data;
        if (is_extra(g, r)) {
                if (g->extra.ops->finished)
                        g->extra.ops->finished(g->extra.data, r, ok);
                return;
        }
        E2bReq *q = http_user(r);
        if (!q)
                return;
        rpc_client_forget(g->rpc, q);
        ports_finished(q);
        envd_finished(q);
        json_decref(q->in);
        json_decref(q->scratch);
        free(q);
}

static const HttpOps ops = {
        .head = on_head, .body = on_body, .request = on_request, .drained = on_drained, .finished = on_finished,
};

/* The door's connection hears of sandboxes that expired. */
static void on_notify(void *ud, const char *method, json_t *params) {
        E2b *g = ud;
        const char *sid = json_string_value(json_object_get(params, "sandboxId")) ?: "";
        if (!strcmp(method, "files.event")) {
                envd_watcher_event(g, params);
        } else if (!strcmp(method, "sandbox.expired")) {
                envd_watchers_drop(g, sid);
                e2b_box_drop(g, sid);
        }
}

int e2b_new(Loop *loop, const E2bOptions *o, E2bConnectFn connect, void *connect_data, E2b **ret, char *err,
            size_t errlen) {
        E2b *g = calloc(1, sizeof *g);
        if (!g)
                return -ENOMEM;
        g->loop = loop;
        g->connect = connect;
        g->connect_data = connect_data;
        if (o->extra)
                g->extra = *o->extra;
        int r = 0;
        for (size_t i = 0; o->api_keys && o->api_keys[i] && r == 0; i++) {
                char **k = reallocarray(g->keys, g->n_keys + 1, sizeof *k);
                if (!k || !(k[g->n_keys] = strdup(o->api_keys[i])))
                        r = -ENOMEM;
                if (k)
                        g->keys = k;
                if (r == 0)
                        g->n_keys++;
        }
        int fd;
        if (r == 0 && (r = connect(connect_data, &fd)) == 0)
                r = rpc_client_new(loop, fd, on_notify, g, &g->rpc);
        if (r < 0)
                snprintf(err, errlen, "cannot connect to the server: %s", strerror(-r));
        else if ((r = http_client_new(loop, &g->fetch)) < 0)
                snprintf(err, errlen, "cannot start the HTTP client: %s", strerror(-r));
        else
                r = http_new(loop, o->addr, SBX_HTTP_BODY_BYTES, &ops, g, &g->http, err, errlen);
        if (r < 0) {
                e2b_free(g);
                return r;
        }
        *ret = g;
        return 0;
}

E2b *e2b_free(E2b *g) {
        if (!g)
                return NULL;
        g->http = http_free(g->http); /* every request finished first: they use the connection */
        g->fetch = http_client_free(g->fetch);
        g->rpc = rpc_client_free(g->rpc);
        envd_watchers_drop(g, NULL);
        while (g->boxes)
                e2b_box_drop(g, g->boxes->id);
        for (size_t i = 0; i < g->n_keys; i++)
                free(g->keys[i]);
        free(g->keys);
        free(g);
        return NULL;
}

uint16_t e2b_port(const E2b *g) { return http_port(g->http); }
HttpServer *e2b_http(const E2b *g) { return g->http; }
bool e2b_loopback(const E2b *g) { return http_loopback(g->http); }
