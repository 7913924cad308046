/* SPDX-License-Identifier: MIT */
/* The cluster's E2B gateway (gateway.h): the control plane made of Pods, envd forwarded to the
 * pod's node. What it knows of pods and nodes comes from two list-and-watch loops (informers),
 * rebuilt whole on every relist. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/list.h"
#include "base/log.h"
#include "base/util.h"
#include "e2b/e2b.h"
#include "http/fetch.h"
#include "http/forward.h"
#include "http/http.h"
#include "kube/api.h"
#include "kube/gateway.h"

#define DEFAULT_TEMPLATE "base"
#define CODE_TEMPLATE "code-interpreter-v1"
#define HOST_IMAGE "sbx.dev/host"
/* How long a create waits for its pod to run. */
#define CREATE_WAIT_MS 60000u

typedef struct GPod {
        struct GPod *next, *prev;
        char name[64], uid[64], node[254], sbx[64], token[E2B_TOKEN_HEX + 1], tpl[64];
        char phase[16], reason[64], message[300];
        bool running, deleting;
        uint64_t created_ms, end_ms;
        json_t *metadata;
} GPod;

typedef struct GNode {
        struct GNode *next, *prev;
        char name[254], url[128];
        bool lost;
} GNode;

typedef struct GReq {
        struct GReq *next, *prev; /* waiting creates */
        struct KubeGateway *g;
        HttpReq *r;
        HttpForward fwd;
        bool waiting;
        json_t *in;
        char id[64];
        uint64_t wait_until;
} GReq;

typedef struct Informer {
        struct KubeGateway *g;
        const char *what;
        char path[400];
        char rv[64];
        KubeWatch *w;
        bool listing;
        int timer;
        Watch tw;
        void (*clear)(struct KubeGateway *g);
        void (*upsert)(struct KubeGateway *g, json_t *o);
        void (*remove)(struct KubeGateway *g, json_t *o);
} Informer;

struct KubeGateway {
        Loop *loop;
        KubeApi *api;
        HttpServer *http;
        HttpClient *fetch;
        char ns[64];
        char **keys;
        size_t n_keys;
        GPod *pods;
        GNode *nodes;
        GReq *waiting;
        Informer pods_inf, nodes_inf;
        int tick; /* expiries and create waits, once a second */
        Watch tickw;
};

/* ---------------------------------------------------------------- small things */

static uint64_t parse_time_ms(const char *s) {
        struct tm tm = { 0 };
        if (!s || !strptime(s, "%Y-%m-%dT%H:%M:%S", &tm))
                return 0;
        return (uint64_t)timegm(&tm) * 1000;
}

static json_t *rfc3339(uint64_t ms) {
        char t[40];
        kube_time(ms, false, t);
        return json_string(t);
}

static void reply_json(HttpReq *r, unsigned status, json_t *body) {
        char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
        json_decref(body);
        (void)http_reply(r, status, s ? "application/json" : NULL, s, s ? strlen(s) : 0, NULL);
}

static void reply_error(HttpReq *r, unsigned status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void reply_error(HttpReq *r, unsigned status, const char *fmt, ...) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        reply_json(r, status, json_pack("{s:i, s:s}", "code", (int)status, "message", msg));
}

static GPod *pod_find(KubeGateway *g, const char *name) {
        for (GPod *p = g->pods; p && name; p = p->next)
                if (strcmp(p->name, name) == 0)
                        return p;
        return NULL;
}

static GNode *node_find(KubeGateway *g, const char *name) {
        for (GNode *n = g->nodes; n && name; n = n->next)
                if (strcmp(n->name, name) == 0)
                        return n;
        return NULL;
}

static const char *ann(json_t *o, const char *key) {
        return json_string_value(json_object_get(json_object_get(json_object_get(o, "metadata"), "annotations"), key));
}

static const char *meta_str(json_t *o, const char *key) {
        return json_string_value(json_object_get(json_object_get(o, "metadata"), key));
}

/* ---------------------------------------------------------------- informers */

static void inf_list(Informer *f);

static void inf_retry(Informer *f) { (void)timerfd_arm_ms(f->timer, SBX_KUBE_RETRY_MS); }

static void inf_event(void *ud, const char *type, json_t *o) {
        Informer *f = ud;
        const char *rv = meta_str(o, "resourceVersion");
        if (!strcmp(type, "ERROR")) {
                f->rv[0] = 0;
                return;
        }
        if (rv)
                snprintf(f->rv, sizeof f->rv, "%s", rv);
        if (!strcmp(type, "ADDED") || !strcmp(type, "MODIFIED"))
                f->upsert(f->g, o);
        else if (!strcmp(type, "DELETED"))
                f->remove(f->g, o);
}

static void inf_watch(Informer *f);

static void inf_end(void *ud, unsigned status, const char *err) {
        Informer *f = ud;
        f->w = NULL;
        if (status != 200) {
                log_warn("kube gateway: the %s watch ended (%u): %s", f->what, status, err);
                f->rv[0] = 0;
        }
        if (f->rv[0] && status == 200)
                inf_watch(f);
        else
                inf_retry(f);
}

static void inf_watch(Informer *f) {
        char path[600];
        snprintf(path, sizeof path, "%s%swatch=1&allowWatchBookmarks=true&timeoutSeconds=%u&resourceVersion=%s", f->path,
                 strchr(f->path, '?') ? "&" : "?", SBX_KUBE_WATCH_S, f->rv);
        if (kube_api_watch(f->g->api, path, inf_event, inf_end, f, &f->w) < 0)
                inf_retry(f);
}

static void inf_listed(void *ud, unsigned status, json_t *body, const char *err) {
        Informer *f = ud;
        f->listing = false;
        if (status != 200 || !json_is_array(json_object_get(body, "items"))) {
                /* A 200 whose body is not a list (cut, or a proxy's page) clears nothing. */
                log_warn("kube gateway: %s not listed (%u): %s", f->what, status,
                         status == 200 ? "the answer is not a list"
                         : status ? json_string_value(json_object_get(body, "message")) ?: "(no message)" : err);
                inf_retry(f);
                return;
        }
        f->clear(f->g);
        size_t i;
        json_t *o;
        json_array_foreach(json_object_get(body, "items"), i, o)
                f->upsert(f->g, o);
        const char *rv = meta_str(body, "resourceVersion");
        snprintf(f->rv, sizeof f->rv, "%s", rv ? rv : "");
        inf_watch(f);
}

static void inf_list(Informer *f) {
        if (f->listing || f->w)
                return;
        if (kube_api_call(f->g->api, "GET", f->path, NULL, NULL, inf_listed, f) == 0)
                f->listing = true;
        else
                inf_retry(f);
}

static void inf_timer(Watch *w, uint32_t events) {
        Informer *f = w->data;
        uint64_t x;
        (void)!read(f->timer, &x, sizeof x);
        if (f->rv[0] && !f->w && !f->listing)
                inf_watch(f);
        else
                inf_list(f);
}

static int inf_init(KubeGateway *g, Informer *f, const char *what, const char *path) {
        f->g = g;
        f->what = what;
        snprintf(f->path, sizeof f->path, "%s", path);
        f->timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (f->timer < 0)
                return negerrno();
        return loop_add(g->loop, &f->tw, f->timer, EPOLLIN, inf_timer, f);
}

static void inf_done(KubeGateway *g, Informer *f) {
        if (f->w)
                kube_watch_cancel(f->w);
        if (f->tw.active)
                loop_del(g->loop, &f->tw);
        safe_close(f->timer);
}

/* ---------------------------------------------------------------- pods and nodes */

static void answer_waiting(KubeGateway *g, GPod *p);

static void pod_drop(KubeGateway *g, GPod *p) {
        LIST_UNLINK(g->pods, p);
        json_decref(p->metadata);
        free(p);
}

static void pods_clear(KubeGateway *g) {
        while (g->pods)
                pod_drop(g, g->pods);
}

static void pod_upsert(KubeGateway *g, json_t *o) {
        const char *name = meta_str(o, "name");
        if (!name || strlen(name) >= sizeof ((GPod *)0)->name)
                return;
        GPod *p = pod_find(g, name);
        if (!p) {
                if (!(p = calloc(1, sizeof *p)))
                        return;
                snprintf(p->name, sizeof p->name, "%s", name);
                LIST_LINK(g->pods, p);
        }
        json_t *spec = json_object_get(o, "spec"), *st = json_object_get(o, "status");
        const char *uid = meta_str(o, "uid");
        snprintf(p->uid, sizeof p->uid, "%s", uid ? uid : "");
        const char *node = json_string_value(json_object_get(spec, "nodeName"));
        snprintf(p->node, sizeof p->node, "%s", node ? node : "");
        const char *phase = json_string_value(json_object_get(st, "phase"));
        snprintf(p->phase, sizeof p->phase, "%s", phase ? phase : "Pending");
        const char *reason = json_string_value(json_object_get(st, "reason"));
        const char *message = json_string_value(json_object_get(st, "message"));
        snprintf(p->reason, sizeof p->reason, "%s", reason ? reason : "");
        snprintf(p->message, sizeof p->message, "%s", message ? message : "");
        const char *tok = ann(o, "sbx.dev/e2b-token"), *tpl = ann(o, "sbx.dev/e2b-template");
        snprintf(p->token, sizeof p->token, "%s", tok ? tok : "");
        snprintf(p->tpl, sizeof p->tpl, "%s", tpl ? tpl : DEFAULT_TEMPLATE);
        const char *end = ann(o, "sbx.dev/e2b-end");
        p->end_ms = end ? strtoull(end, NULL, 10) : 0;
        const char *md = ann(o, "sbx.dev/e2b-metadata");
        json_decref(p->metadata);
        p->metadata = md ? json_loads(md, 0, NULL) : NULL;
        p->created_ms = parse_time_ms(meta_str(o, "creationTimestamp"));
        p->deleting = json_object_get(json_object_get(o, "metadata"), "deletionTimestamp") &&
                      !json_is_null(json_object_get(json_object_get(o, "metadata"), "deletionTimestamp"));
        /* The node names the sandbox in its container's ID: sbx://SANDBOX/sandbox. */
        p->sbx[0] = 0;
        p->running = false;
        size_t i;
        json_t *cs;
        json_array_foreach(json_object_get(st, "containerStatuses"), i, cs) {
                const char *cid = json_string_value(json_object_get(cs, "containerID"));
                if (cid && !strncmp(cid, "sbx://", 6)) {
                        size_t n = strcspn(cid + 6, "/");
                        if (n < sizeof p->sbx)
                                snprintf(p->sbx, sizeof p->sbx, "%.*s", (int)n, cid + 6);
                }
                p->running = json_object_get(json_object_get(cs, "state"), "running") != NULL;
        }
        p->running = p->running && p->sbx[0] && !strcmp(p->phase, "Running") && !p->deleting;
        answer_waiting(g, p);
}

static void pod_remove(KubeGateway *g, json_t *o) {
        GPod *p = pod_find(g, meta_str(o, "name"));
        if (p) {
                snprintf(p->phase, sizeof p->phase, "Deleted");
                p->running = false;
                answer_waiting(g, p);
                pod_drop(g, p);
        }
}

static void nodes_clear(KubeGateway *g) {
        while (g->nodes) {
                GNode *n = g->nodes;
                LIST_UNLINK(g->nodes, n);
                free(n);
        }
}

/* A node's pods whose sandboxes died with it, Failed with the reason (the nodes themselves may
 * not write another node's pods). */
static void lost_patched(void *ud, unsigned status, json_t *body, const char *err) {
        if (status != 200 && status != 404)
                log_warn("kube gateway: a lost node's pod not marked (%u): %s", status,
                         status ? json_string_value(json_object_get(body, "message")) ?: "(no message)" : err);
}

static void lost_listed(void *ud, unsigned status, json_t *body, const char *err) {
        KubeGateway *g = ud;
        size_t i;
        json_t *pod;
        json_array_foreach(status == 200 ? json_object_get(body, "items") : NULL, i, pod) {
                const char *phase = json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
                const char *node = json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName"));
                if (phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed")))
                        continue;
                char path[512], msg[400], t[40];
                snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s/status", meta_str(pod, "namespace"),
                         meta_str(pod, "name"));
                snprintf(msg, sizeof msg, "sbx node %s stopped renewing its lease: its daemon is gone, and its "
                         "sandboxes with it", node ? node : "?");
                kube_time(wall_ms(), false, t);
                json_t *patch = json_pack("{s:{s:s, s:s, s:s, s:[{s:s, s:s, s:s, s:s}]}}", "status", "phase", "Failed",
                                          "reason", "NodeLost", "message", msg, "conditions", "type", "Ready", "status",
                                          "False", "reason", "NodeLost", "lastTransitionTime", t);
                const char *uid = meta_str(pod, "uid");
                if (patch && uid)
                        json_object_set_new(patch, "metadata", json_pack("{s:s}", "uid", uid));
                (void)kube_api_call(g->api, "PATCH", path, "application/merge-patch+json", patch, lost_patched, g);
        }
}

static void node_upsert(KubeGateway *g, json_t *o) {
        const char *name = meta_str(o, "name");
        if (!name || strlen(name) >= sizeof ((GNode *)0)->name)
                return;
        GNode *n = node_find(g, name);
        if (!n) {
                if (!(n = calloc(1, sizeof *n)))
                        return;
                snprintf(n->name, sizeof n->name, "%s", name);
                LIST_LINK(g->nodes, n);
        }
        const char *url = ann(o, "sbx.dev/e2b-url");
        snprintf(n->url, sizeof n->url, "%s", url && !strncmp(url, "http://", 7) ? url : "");
        bool lost = false;
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(json_object_get(o, "status"), "conditions"), i, c) {
                const char *ct = json_string_value(json_object_get(c, "type"));
                const char *cs = json_string_value(json_object_get(c, "status"));
                if (ct && cs && !strcmp(ct, "Ready"))
                        lost = strcmp(cs, "Unknown") == 0;
        }
        if (lost && !n->lost) {
                char path[600];
                log_info("kube gateway: node %s is lost: its pods are marked failed", name);
                snprintf(path, sizeof path, "/api/v1/pods?fieldSelector=spec.nodeName%%3D%s", name);
                (void)kube_api_call(g->api, "GET", path, NULL, NULL, lost_listed, g);
        }
        n->lost = lost;
}

static void node_remove(KubeGateway *g, json_t *o) {
        GNode *n = node_find(g, meta_str(o, "name"));
        if (n) {
                LIST_UNLINK(g->nodes, n);
                free(n);
        }
}

/* ---------------------------------------------------------------- the control plane */

static json_t *sandbox_json(const GPod *p) {
        return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "sandboxID", p->name, "templateID", p->tpl, "alias", p->tpl,
                         "clientID", "sbx", "envdVersion", E2B_ENVD_VERSION, "envdAccessToken", p->token);
}

static json_t *detail_json(const GPod *p) {
        json_t *o = sandbox_json(p);
        json_object_update_new(o, json_pack("{s:o, s:o, s:s, s:i, s:i, s:i, s:o}", "startedAt", rfc3339(p->created_ms),
                                            "endAt", rfc3339(p->end_ms ? p->end_ms : p->created_ms + 31ULL * 86400000),
                                            "state", "running", "cpuCount", 1, "memoryMB", 512, "diskSizeMB", 256,
                                            "metadata", p->metadata ? json_incref(p->metadata) : json_object()));
        return o;
}

static void req_unwait(GReq *q) {
        if (q->waiting) {
                LIST_UNLINK(q->g->waiting, q);
                q->waiting = false;
        }
}

static void answer_waiting(KubeGateway *g, GPod *p) {
        GReq *next;
        for (GReq *q = g->waiting; q; q = next) {
                next = q->next;
                if (strcmp(q->id, p->name) != 0)
                        continue;
                if (p->running) {
                        req_unwait(q);
                        reply_json(q->r, 201, sandbox_json(p));
                } else if (!strcmp(p->phase, "Failed") || !strcmp(p->phase, "Succeeded") ||
                           !strcmp(p->phase, "Deleted")) {
                        req_unwait(q);
                        reply_error(q->r, 500, "the sandbox's pod %s: %s%s%s", p->name, p->phase,
                                    p->reason[0] ? ": " : "", p->message[0] ? p->message : p->reason);
                }
        }
}

static void created(void *ud, unsigned status, json_t *body, const char *err) {
        GReq *q = ud;
        if (status == 201 || status == 200) {
                GPod *p = pod_find(q->g, q->id);
                if (p && p->running) { /* the watch was quicker than this answer */
                        reply_json(q->r, 201, sandbox_json(p));
                        return;
                }
                q->waiting = true;
                q->wait_until = now_ms() + CREATE_WAIT_MS;
                LIST_LINK(q->g->waiting, q);
                return;
        }
        reply_error(q->r, status == 403 ? 403 : 503, "the sandbox's pod was not made (%u): %s", status,
                    status ? json_string_value(json_object_get(body, "message")) ?: "(no message)" : err);
}

static const char *template_image(const char *tpl) {
        return !tpl || !strcmp(tpl, DEFAULT_TEMPLATE) || !strcmp(tpl, CODE_TEMPLATE) ? HOST_IMAGE : tpl;
}

static uint64_t timeout_ms_of(json_t *body) {
        json_t *t = json_object_get(body, "timeout");
        if (json_is_integer(t) && json_integer_value(t) >= 0)
                return (uint64_t)MIN(json_integer_value(t), (json_int_t)SBX_E2B_MAX_TIMEOUT_S) * 1000;
        return (uint64_t)SBX_E2B_DEFAULT_TIMEOUT_S * 1000;
}

static void create(GReq *q) {
        KubeGateway *g = q->g;
        const char *tpl = json_string_value(json_object_get(q->in, "templateID"));
        tpl = tpl ? tpl : DEFAULT_TEMPLATE;
        char token[E2B_TOKEN_HEX + 1], end[24];
        if (random_hex(q->id, 16) < 0 || random_hex(token, E2B_TOKEN_HEX / 2) < 0)
                return reply_error(q->r, 500, "no randomness");
        snprintf(end, sizeof end, "%llu", (unsigned long long)(wall_ms() + timeout_ms_of(q->in)));
        json_t *env = json_array();
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(q->in, "envVars"), k, v)
                if (json_is_string(v))
                        json_array_append_new(env, json_pack("{s:s, s:O}", "name", k, "value", v));
        json_t *annotations = json_pack("{s:s, s:s, s:s}", "sbx.dev/e2b-token", token, "sbx.dev/e2b-template", tpl,
                                        "sbx.dev/e2b-end", end);
        json_t *md = json_object_get(q->in, "metadata");
        if (json_is_object(md) && json_object_size(md)) {
                char *s = json_dumps(md, JSON_COMPACT);
                if (s)
                        json_object_set_new(annotations, "sbx.dev/e2b-metadata", json_string(s));
                free(s);
        }
        json_t *pod = json_pack(
                "{s:s, s:s, s:{s:s, s:{s:s}, s:o}, s:{s:s, s:b, s:b, s:i, s:{s:s}, s:[{s:s, s:s, s:s}], "
                "s:[{s:s, s:s, s:o}]}}",
                "apiVersion", "v1", "kind", "Pod", "metadata", "name", q->id, "labels", "sbx.dev/e2b", "true",
                "annotations", annotations, "spec", "restartPolicy", "Never", "automountServiceAccountToken", 0,
                "enableServiceLinks", 0, "terminationGracePeriodSeconds", 0, "nodeSelector", "sbx.dev/node", "true",
                "tolerations", "key", "sbx.dev/sandbox", "operator", "Exists", "effect", "NoSchedule", "containers",
                "name", "sandbox", "image", template_image(tpl), "env", env);
        char path[200];
        snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods", g->ns);
        if (!pod || kube_api_call(g->api, "POST", path, NULL, pod, created, q) < 0)
                reply_error(q->r, 503, "the API server cannot be called");
}

static void deleted(void *ud, unsigned status, json_t *body, const char *err) {
        GReq *q = ud;
        if (status == 200 || status == 202)
                (void)http_reply(q->r, 204, NULL, NULL, 0, NULL);
        else if (status == 404)
                reply_error(q->r, 404, "sandbox %s not found", q->id);
        else
                reply_error(q->r, 502, "the sandbox's pod was not deleted (%u): %s", status,
                            status ? json_string_value(json_object_get(body, "message")) ?: "(no message)" : err);
}

/* Only a pod of the gateway's own (the informer's: labelled sbx.dev/e2b), and only that very
 * pod (its uid as the precondition): a name is not enough to delete by. */
static void delete_pod(KubeGateway *g, const GPod *p, KubeAnswerFn fn, void *ud) {
        char path[300];
        snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s", g->ns, p->name);
        (void)kube_api_call(g->api, "DELETE", path, NULL,
                            json_pack("{s:s, s:s, s:i, s:{s:s}}", "kind", "DeleteOptions", "apiVersion", "v1",
                                      "gracePeriodSeconds", 0, "preconditions", "uid", p->uid),
                            fn, ud);
}

static void patched(void *ud, unsigned status, json_t *body, const char *err) {
        GReq *q = ud;
        GPod *p = pod_find(q->g, q->id);
        if (status != 200)
                return reply_error(q->r, status == 404 ? 404 : 502, "sandbox %s: not changed (%u)", q->id, status);
        size_t n = strlen(http_path(q->r));
        if (n >= 8 && !strcmp(http_path(q->r) + n - 8, "/connect") && p)
                return reply_json(q->r, 200, sandbox_json(p));
        (void)http_reply(q->r, 204, NULL, NULL, 0, NULL);
}

static void set_timeout(GReq *q) {
        char path[300], end[24];
        snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s", q->g->ns, q->id);
        snprintf(end, sizeof end, "%llu", (unsigned long long)(wall_ms() + timeout_ms_of(q->in)));
        (void)kube_api_call(q->g->api, "PATCH", path, "application/merge-patch+json",
                            json_pack("{s:{s:{s:s}}}", "metadata", "annotations", "sbx.dev/e2b-end", end), patched, q);
}

static bool md_matches(const GPod *p, const char *query) {
        if (!query || !*query)
                return true;
        char *copy = strdup(query), *save = NULL;
        bool ok = copy != NULL;
        for (char *kv = ok ? strtok_r(copy, "&", &save) : NULL; kv && ok; kv = strtok_r(NULL, "&", &save)) {
                char *eq = strchr(kv, '=');
                if (!eq)
                        continue;
                *eq = 0;
                ok = p->metadata && json_is_string(json_object_get(p->metadata, kv)) &&
                     !strcmp(json_string_value(json_object_get(p->metadata, kv)), eq + 1);
        }
        free(copy);
        return ok;
}

static void forward_metrics(GReq *q, GPod *p);

static void control_plane(GReq *q) {
        const char *m = http_method(q->r), *path = http_path(q->r);
        /* E2B's v2 routes are its v1 ones with a prefix (create, list, connect). */
        if (!strncmp(path, "/v2/", 4))
                path += 3;
        if (!strcmp(path, "/sandboxes")) {
                if (!strcmp(m, "POST"))
                        return create(q);
                json_t *list = json_array();
                for (GPod *p = q->g->pods; p; p = p->next)
                        if (p->running && md_matches(p, http_query(q->r, "metadata")))
                                json_array_append_new(list, detail_json(p));
                return reply_json(q->r, 200, list);
        }
        if (strncmp(path, "/sandboxes/", 11) != 0)
                return reply_error(q->r, 404, "no such route: %s %s", m, path);
        const char *rest = path + 11;
        size_t n = strcspn(rest, "/");
        if (n == 0 || n >= sizeof q->id)
                return reply_error(q->r, 404, "no such sandbox");
        snprintf(q->id, sizeof q->id, "%.*s", (int)n, rest);
        const char *sub = rest + n;
        GPod *p = pod_find(q->g, q->id);
        if (!*sub && !strcmp(m, "DELETE")) {
                if (!p)
                        return reply_error(q->r, 404, "sandbox %s not found", q->id);
                return delete_pod(q->g, p, deleted, q);
        }
        if (!p || !p->running)
                return reply_error(q->r, 404, "sandbox %s not found%s%s", q->id, p && p->reason[0] ? ": " : "",
                                   p && p->reason[0] ? p->message : "");
        if (!*sub && !strcmp(m, "GET"))
                return reply_json(q->r, 200, detail_json(p));
        if (!strcmp(m, "POST") && (!strcmp(sub, "/timeout") || !strcmp(sub, "/connect")))
                return set_timeout(q);
        if (!strcmp(m, "POST") && !strcmp(sub, "/refreshes"))
                return (void)http_reply(q->r, 204, NULL, NULL, 0, NULL);
        if (!strcmp(m, "GET") && !strcmp(sub, "/metrics"))
                return forward_metrics(q, p);
        reply_error(q->r, 501, "%s %s is not served by the cluster's gateway (pause and resume need a sandbox's "
                    "node: use a single daemon)", m, path);
}

/* ---------------------------------------------------------------- forwarding to the node */

static void forward_failed(void *ud, int error, const char *message) {
        GReq *q = ud;
        reply_error(q->r, 502, "sandbox %s: its node did not answer: %s", q->id, message);
}

/* "PORT-ID.domain": E2B's getHost(port). */
static bool host_target(const char *host, unsigned *port, char id[64]) {
        char *end;
        unsigned long p = host ? strtoul(host, &end, 10) : 0;
        if (!host || end == host || *end != '-' || p == 0 || p > 65535)
                return false;
        size_t n = strcspn(end + 1, ".:");
        if (n == 0 || n >= 64)
                return false;
        snprintf(id, 64, "%.*s", (int)n, end + 1);
        *port = (unsigned)p;
        return true;
}

/* The sandbox a request names: E2b-Sandbox-Id, else a Host of PORT-ID.domain. */
static bool target(GReq *q, unsigned *port) {
        const char *id = http_header(q->r, "E2b-Sandbox-Id");
        const char *hp = http_header(q->r, "E2b-Sandbox-Port");
        char hid[64];
        unsigned p = 0;
        if (host_target(http_header(q->r, "Host"), &p, hid) && (!id || !strcmp(id, hid)))
                id = hid;
        if (!id || strlen(id) >= sizeof q->id)
                return false;
        snprintf(q->id, sizeof q->id, "%s", id);
        *port = p ? p : hp ? (unsigned)strtoul(hp, NULL, 10) : E2B_ENVD_PORT;
        return true;
}

static void forward(GReq *q, unsigned port) {
        GPod *p = pod_find(q->g, q->id);
        GNode *n = p ? node_find(q->g, p->node) : NULL;
        /* E2B's SDK reads 502 as "the sandbox is gone". */
        if (!p)
                return reply_error(q->r, 502, "sandbox %s not found (killed, or it timed out)", q->id);
        if (n && n->lost)
                return reply_error(q->r, 502, "sandbox %s: its node %s is lost (its daemon stopped renewing its "
                                   "lease), and the sandbox with it", q->id, n->name);
        if (!p->running)
                return reply_error(q->r, 502, "sandbox %s is not running (%s%s%s)", q->id, p->phase,
                                   p->reason[0] ? ": " : "", p->reason);
        if (!n || !n->url[0])
                return reply_error(q->r, 502, "sandbox %s: its node %s serves no E2B door (sbx serve --http)", q->id,
                                   p->node);
        char url[SBX_HTTP_FETCH_HEADER_BYTES], host[128];
        if (snprintf(url, sizeof url, "%s%s", n->url, http_uri(q->r)) >= (int)sizeof url)
                return reply_error(q->r, 414, "the URI is too long to forward");
        /* The node's door knows the sandbox by its own id, in both places it looks. */
        snprintf(host, sizeof host, "%u-%s.sbx", port, p->sbx);
        static const char *const drop[] = { "Host", "E2b-Sandbox-Id", NULL };
        const char *set[] = { "Host", host, "E2b-Sandbox-Id", p->sbx, NULL };
        q->fwd.failed = forward_failed;
        q->fwd.ud = q;
        int r = http_forward_start(&q->fwd, q->g->fetch, q->r, url, drop, set);
        if (r < 0)
                reply_error(q->r, 502, "cannot forward to sandbox %s's node: %s", q->id, strerror(-r));
}

/* GET /sandboxes/{id}/metrics: its node's door answers for the sandbox by its own id (the
 * client's key and range go along). */
static void forward_metrics(GReq *q, GPod *p) {
        GNode *n = node_find(q->g, p->node);
        if (!n || n->lost || !n->url[0])
                return reply_error(q->r, 502, "sandbox %s: its node %s serves no E2B door", q->id, p->node);
        const char *uri = http_uri(q->r), *query = strchr(uri, '?');
        char url[SBX_HTTP_FETCH_HEADER_BYTES];
        if (snprintf(url, sizeof url, "%s/sandboxes/%s/metrics%s", n->url, p->sbx, query ? query : "") >= (int)sizeof url)
                return reply_error(q->r, 414, "the URI is too long to forward");
        static const char *const drop[] = { "Host", NULL };
        q->fwd.failed = forward_failed;
        q->fwd.ud = q;
        int r = http_forward_start(&q->fwd, q->g->fetch, q->r, url, drop, NULL);
        if (r < 0)
                reply_error(q->r, 502, "cannot forward to sandbox %s's node: %s", q->id, strerror(-r));
}

/* ---------------------------------------------------------------- the listener */

static bool key_ok(GReq *q) { return http_api_key_ok(q->r, q->g->keys, q->g->n_keys); }

static void on_request(void *data, HttpReq *r) {
        KubeGateway *g = data;
        GReq *q = calloc(1, sizeof *q);
        if (!q)
                return (void)http_reply(r, 503, NULL, NULL, 0, NULL);
        q->g = g;
        q->r = r;
        http_set_user(r, q);
        unsigned port;
        if (target(q, &port))
                return forward(q, port);
        if (!key_ok(q))
                return reply_error(r, 401, "Invalid API key (X-API-KEY)");
        size_t n;
        const uint8_t *body = http_body(r, &n);
        if (n) {
                json_error_t je;
                q->in = json_loadb((const char *)body, n, 0, &je);
                if (!json_is_object(q->in))
                        return reply_error(r, 400, "the body is not a JSON object: %s", je.text);
        }
        control_plane(q);
}

static void on_drained(void *data, HttpReq *r) {
        GReq *q = http_user(r);
        if (q)
                http_forward_drained(&q->fwd);
}

static void on_finished(void *data, HttpReq *r, bool ok) {
        KubeGateway *g = data;
        GReq *q = http_user(r);
        if (!q)
                return;
        req_unwait(q);
        http_forward_cancel(&q->fwd);
        kube_api_forget(g->api, q);
        json_decref(q->in);
        free(q);
}

static const HttpOps gateway_ops = { .request = on_request, .drained = on_drained, .finished = on_finished };

static void ignore_answer(void *ud, unsigned status, json_t *body, const char *err) {}

/* Once a second: creates that waited too long, and sandboxes past their timeout (deleted by
 * every replica that sees it: the same DELETE). */
static void tick_event(Watch *w, uint32_t events) {
        KubeGateway *g = w->data;
        uint64_t x;
        (void)!read(g->tick, &x, sizeof x);
        uint64_t mono = now_ms(), wall = wall_ms();
        GReq *next;
        for (GReq *q = g->waiting; q; q = next) {
                next = q->next;
                if (mono >= q->wait_until) {
                        req_unwait(q);
                        GPod *p = pod_find(g, q->id);
                        reply_error(q->r, 503, "the sandbox's pod %s did not run within %u s (%s%s%s)", q->id,
                                    CREATE_WAIT_MS / 1000, p && p->node[0] ? "bound to " : "not placed: no sbx node "
                                    "took it", p && p->node[0] ? p->node : "", p && p->reason[0] ? p->reason : "");
                        if (p)
                                delete_pod(g, p, ignore_answer, g);
                }
        }
        for (GPod *p = g->pods; p; p = p->next)
                if (p->end_ms && wall >= p->end_ms && !p->deleting) {
                        p->deleting = true;
                        delete_pod(g, p, ignore_answer, g);
                }
}

int kube_gateway_new(Loop *loop, const KubeGatewayOptions *o, KubeGateway **ret, char *err, size_t errlen) {
        err[0] = 0;
        KubeGateway *g = calloc(1, sizeof *g);
        if (!g)
                return -ENOMEM;
        g->loop = loop;
        g->tick = -1;
        g->pods_inf.timer = g->nodes_inf.timer = -1;
        snprintf(g->ns, sizeof g->ns, "%s", o->ns ? o->ns : "default");
        KubeCreds creds;
        int r = kube_creds_load(o->kubeconfig, &creds, err, errlen);
        if (r == 0) {
                r = kube_api_new(loop, &creds, &g->api, err, errlen);
                kube_creds_done(&creds);
        }
        size_t nk = 0;
        while (o->api_keys && o->api_keys[nk])
                nk++;
        if (r == 0 && nk && !(g->keys = calloc(nk, sizeof *g->keys)))
                r = -ENOMEM;
        for (size_t i = 0; r == 0 && i < nk; i++)
                if (!(g->keys[g->n_keys++] = strdup(o->api_keys[i])))
                        r = -ENOMEM;
        if (r == 0)
                r = http_client_new(loop, &g->fetch);
        if (r == 0)
                r = http_new(loop, o->addr, SBX_HTTP_BODY_BYTES, &gateway_ops, g, &g->http, err, errlen);
        char path[300];
        snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods?labelSelector=sbx.dev%%2Fe2b%%3Dtrue", g->ns);
        if (r == 0)
                r = inf_init(g, &g->pods_inf, "pods", path);
        if (r == 0)
                r = inf_init(g, &g->nodes_inf, "nodes", "/api/v1/nodes?labelSelector=sbx.dev%2Fnode%3Dtrue");
        g->pods_inf.clear = pods_clear;
        g->pods_inf.upsert = pod_upsert;
        g->pods_inf.remove = pod_remove;
        g->nodes_inf.clear = nodes_clear;
        g->nodes_inf.upsert = node_upsert;
        g->nodes_inf.remove = node_remove;
        if (r == 0) {
                g->tick = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
                struct itimerspec its = { .it_interval = { .tv_sec = 1 }, .it_value = { .tv_sec = 1 } };
                r = g->tick < 0 || timerfd_settime(g->tick, 0, &its, NULL) < 0 ? negerrno()
                    : loop_add(loop, &g->tickw, g->tick, EPOLLIN, tick_event, g);
        }
        if (r < 0) {
                if (!err[0])
                        snprintf(err, errlen, "%s", strerror(-r));
                kube_gateway_free(g);
                return r;
        }
        inf_list(&g->nodes_inf);
        inf_list(&g->pods_inf);
        *ret = g;
        return 0;
}

KubeGateway *kube_gateway_free(KubeGateway *g) {
        if (!g)
                return NULL;
        http_free(g->http); /* every request finished: their fetches and calls go */
        inf_done(g, &g->pods_inf);
        inf_done(g, &g->nodes_inf);
        pods_clear(g);
        nodes_clear(g);
        if (g->tickw.active)
                loop_del(g->loop, &g->tickw);
        safe_close(g->tick);
        http_client_free(g->fetch);
        kube_api_free(g->api);
        for (size_t i = 0; i < g->n_keys; i++)
                free(g->keys[i]);
        free(g->keys);
        free(g);
        return NULL;
}

uint16_t kube_gateway_port(const KubeGateway *g) { return http_port(g->http); }
