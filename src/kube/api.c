/* SPDX-License-Identifier: MIT */
/* The API server's client (api.h): credentials, calls, watches. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include "base/buf.h"
#include "base/limits.h"
#include "base/list.h"
#include "base/log.h"
#include "base/text.h"
#include "base/util.h"
#include "http/fetch.h"
#include "kube/api.h"

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

struct KubeApi {
        Loop *loop;
        HttpClient *http;
        char *server;
        char *auth; /* "Bearer TOKEN", or NULL */
        int pem_fds[3]; /* memfds of the CA, certificate and key, read by curl by path */
        struct KubeCall *calls;
};

typedef struct KubeCall {
        struct KubeCall *next, *prev;
        KubeApi *a;
        HttpFetch *f;
        unsigned status;
        Buf body;
        /* A call: fn. A watch: event and end, the body split into lines as it comes. */
        KubeAnswerFn fn;
        KubeEventFn event;
        KubeEndFn end;
        void *ud;
        bool watch;
} KubeCall;

/* ---------------------------------------------------------------- credentials */

void kube_creds_done(KubeCreds *c) {
        free(c->server);
        free(c->ca_pem);
        free(c->cert_pem);
        if (c->key_pem)
                explicit_bzero(c->key_pem, strlen(c->key_pem));
        free(c->key_pem);
        if (c->token)
                explicit_bzero(c->token, strlen(c->token));
        free(c->token);
        *c = (KubeCreds){ 0 };
}

static int read_text(const char *dir, const char *path, char **ret, char *err, size_t errlen) {
        char full[4096];
        if (path[0] != '/' && dir)
                snprintf(full, sizeof full, "%s/%s", dir, path);
        else
                snprintf(full, sizeof full, "%s", path);
        uint8_t *data;
        size_t len;
        int r = read_file_whole(full, 1024 * 1024, &data, &len);
        if (r < 0) {
                snprintf(err, errlen, "%s: %s", full, strerror(-r));
                return r;
        }
        char *s = realloc(data, len + 1);
        if (!s) {
                free(data);
                return -ENOMEM;
        }
        s[len] = 0;
        *ret = s;
        return 0;
}

/* A kubeconfig's "X-data" (base64) or "X" (a file, relative to the kubeconfig's folder). */
static int pem_of(json_t *o, const char *key, const char *dir, char **ret, char *err, size_t errlen) {
        char dkey[64];
        snprintf(dkey, sizeof dkey, "%s-data", key);
        const char *data = json_string_value(json_object_get(o, dkey)), *file = json_string_value(json_object_get(o, key));
        if (data) {
                size_t n;
                uint8_t *d = b64_decode(data, strlen(data), &n);
                char *s = d ? realloc(d, n + 1) : NULL;
                if (!s) {
                        free(d);
                        snprintf(err, errlen, "%s is not base64", dkey);
                        return -EINVAL;
                }
                s[n] = 0;
                *ret = s;
                return 0;
        }
        return file ? read_text(dir, file, ret, err, errlen) : 0;
}

static json_t *named(json_t *list, const char *name, const char *inner) {
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v) {
                const char *n = json_string_value(json_object_get(v, "name"));
                if (n && name && strcmp(n, name) == 0)
                        return json_object_get(v, inner);
        }
        return NULL;
}

static int load_kubeconfig(const char *path, KubeCreds *c, char *err, size_t errlen) {
        char *text = NULL;
        int r = read_text(NULL, path, &text, err, errlen);
        if (r < 0)
                return r;
        json_error_t je;
        json_t *root = json_loads(text, 0, &je);
        bool yaml = !root && text[strspn(text, " \t\r\n")] != '{';
        free(text);
        if (!root) {
                if (yaml)
                        snprintf(err, errlen, "%s: a YAML kubeconfig; give it as JSON (kubectl config view --raw "
                                              "--flatten -o json > FILE)", path);
                else
                        snprintf(err, errlen, "%s: line %d: %s", path, je.line, je.text);
                return -EINVAL;
        }
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash)
                *slash = 0;
        else
                snprintf(dir, sizeof dir, ".");
        const char *cur = json_string_value(json_object_get(root, "current-context"));
        json_t *ctx = named(json_object_get(root, "contexts"), cur, "context");
        json_t *cluster = named(json_object_get(root, "clusters"), json_string_value(json_object_get(ctx, "cluster")),
                                "cluster");
        json_t *user = named(json_object_get(root, "users"), json_string_value(json_object_get(ctx, "user")), "user");
        const char *server = json_string_value(json_object_get(cluster, "server"));
        r = 0;
        if (!ctx || !cluster || !server) {
                snprintf(err, errlen, "%s: no current-context with a cluster and its server", path);
                r = -EINVAL;
        }
        if (r == 0 && json_is_true(json_object_get(cluster, "insecure-skip-tls-verify"))) {
                snprintf(err, errlen, "%s: insecure-skip-tls-verify: sbx checks the API server's certificate "
                                      "(give certificate-authority)", path);
                r = -EINVAL;
        }
        if (r == 0 && !(c->server = strdup(server)))
                r = -ENOMEM;
        if (r == 0)
                r = pem_of(cluster, "certificate-authority", dir, &c->ca_pem, err, errlen);
        if (r == 0)
                r = pem_of(user, "client-certificate", dir, &c->cert_pem, err, errlen);
        if (r == 0)
                r = pem_of(user, "client-key", dir, &c->key_pem, err, errlen);
        const char *token = json_string_value(json_object_get(user, "token"));
        const char *token_file = json_string_value(json_object_get(user, "tokenFile"));
        if (r == 0 && token && !(c->token = strdup(token)))
                r = -ENOMEM;
        else if (r == 0 && !token && token_file)
                r = read_text(dir, token_file, &c->token, err, errlen);
        if (r == 0 && !!c->cert_pem != !!c->key_pem) {
                snprintf(err, errlen, "%s: a client certificate needs its key, and a key its certificate", path);
                r = -EINVAL;
        }
        json_decref(root);
        return r;
}

static int load_in_cluster(KubeCreds *c, char *err, size_t errlen) {
        const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
        if (!host || !port) {
                snprintf(err, errlen, "no --kubeconfig and not in a pod (KUBERNETES_SERVICE_HOST is not set)");
                return -EINVAL;
        }
        char url[300];
        snprintf(url, sizeof url, strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s", host, port);
        if (!(c->server = strdup(url)))
                return -ENOMEM;
        int r = read_text(NULL, SA_DIR "/ca.crt", &c->ca_pem, err, errlen);
        return r < 0 ? r : read_text(NULL, SA_DIR "/token", &c->token, err, errlen);
}

int kube_creds_load(const char *path, KubeCreds *c, char *err, size_t errlen) {
        *c = (KubeCreds){ 0 };
        int r = path ? load_kubeconfig(path, c, err, errlen) : load_in_cluster(c, err, errlen);
        if (r == 0 && c->token)
                c->token[strcspn(c->token, "\r\n")] = 0;
        if (r == 0 && strncmp(c->server, "https://", 8) != 0) {
                snprintf(err, errlen, "the API server %s is not https://", c->server);
                r = -EINVAL;
        }
        if (r < 0)
                kube_creds_done(c);
        return r;
}

/* ---------------------------------------------------------------- the client */

/* PEM bytes as a file curl can open (/proc/self/fd/N of a sealed memfd): no copy of a key on
 * any disk. */
static int pem_file(const char *pem, int *fd, char path[32]) {
        *fd = memfd_create("sbx-kube-pem", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (*fd < 0)
                return negerrno();
        int r = write_all(*fd, pem, strlen(pem));
        if (r < 0)
                return r;
        (void)fcntl(*fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
        snprintf(path, 32, "/proc/self/fd/%d", *fd);
        return 0;
}

int kube_api_new(Loop *loop, const KubeCreds *c, KubeApi **ret, char *err, size_t errlen) {
        KubeApi *a = calloc(1, sizeof *a);
        if (!a)
                return -ENOMEM;
        a->loop = loop;
        a->pem_fds[0] = a->pem_fds[1] = a->pem_fds[2] = -1;
        int r = http_client_new(loop, &a->http);
        char paths[3][32];
        const char *pems[3] = { c->ca_pem, c->cert_pem, c->key_pem };
        for (int i = 0; r == 0 && i < 3; i++)
                if (pems[i])
                        r = pem_file(pems[i], &a->pem_fds[i], paths[i]);
        HttpTls t = { .ca_file = c->ca_pem ? paths[0] : NULL, .cert_file = c->cert_pem ? paths[1] : NULL,
                      .key_file = c->key_pem ? paths[2] : NULL };
        if (r == 0)
                r = http_client_tls(a->http, &t);
        if (r == 0 && !(a->server = strdup(c->server)))
                r = -ENOMEM;
        if (r == 0 && c->token && asprintf(&a->auth, "Bearer %s", c->token) < 0) {
                a->auth = NULL;
                r = -ENOMEM;
        }
        if (r < 0) {
                snprintf(err, errlen, "the API server's client: %s", strerror(-r));
                kube_api_free(a);
                return r;
        }
        *ret = a;
        return 0;
}

static void call_free(KubeCall *k) {
        LIST_UNLINK(k->a->calls, k);
        buf_done(&k->body);
        loop_cancel_defer(k->a->loop, k);
        free(k);
}

KubeApi *kube_api_free(KubeApi *a) {
        if (!a)
                return NULL;
        while (a->calls) {
                if (a->calls->f)
                        http_fetch_cancel(a->calls->f);
                call_free(a->calls);
        }
        http_client_free(a->http);
        for (int i = 0; i < 3; i++)
                safe_close(a->pem_fds[i]);
        free(a->server);
        if (a->auth)
                explicit_bzero(a->auth, strlen(a->auth));
        free(a->auth);
        free(a);
        return NULL;
}

static void on_head(void *ud, unsigned status, const char *const *headers) {
        KubeCall *k = ud;
        (void)headers;
        k->status = status;
}

/* A watch's whole lines, each an event {type, object}. */
static void watch_lines(KubeCall *k) {
        size_t start = 0;
        for (size_t i = 0; i < k->body.len; i++) {
                if (k->body.data[i] != '\n')
                        continue;
                json_error_t je;
                json_t *ev = json_loadb((const char *)k->body.data + start, i - start, 0, &je);
                start = i + 1;
                const char *type = json_string_value(json_object_get(ev, "type"));
                json_t *obj = json_object_get(ev, "object");
                if (type && obj)
                        k->event(k->ud, type, obj);
                else if (i > start)
                        log_warn("kube: a watch line that is not an event: %s", je.text);
                json_decref(ev);
        }
        if (start) {
                memmove(k->body.data, k->body.data + start, k->body.len - start);
                k->body.len -= start;
        }
}

static bool on_data(void *ud, const uint8_t *d, size_t n) {
        KubeCall *k = ud;
        (void)buf_append(&k->body, d, n);
        if (k->watch && k->status == 200)
                watch_lines(k);
        return false;
}

static void on_done(void *ud, int error, const char *message) {
        KubeCall *k = ud;
        k->f = NULL;
        if (k->watch) {
                KubeEndFn end = k->end;
                void *eud = k->ud;
                char msg[300];
                snprintf(msg, sizeof msg, "%s", error ? message : k->status == 200 ? "closed by the server" : "refused");
                if (k->status != 200 && k->body.len) {
                        size_t n = k->body.len < 200 ? k->body.len : 200;
                        snprintf(msg, sizeof msg, "%.*s", (int)n, (const char *)k->body.data);
                }
                unsigned status = k->status;
                call_free(k);
                end(eud, status, msg);
                return;
        }
        json_t *body = NULL;
        if (!error && k->body.len && !k->body.truncated)
                body = json_loadb((const char *)k->body.data, k->body.len, 0, NULL);
        KubeAnswerFn fn = k->fn;
        void *fud = k->ud;
        unsigned status = error ? 0 : k->status;
        char msg[300];
        snprintf(msg, sizeof msg, "%s", error ? message : k->body.truncated ? "the answer is too long" : "");
        call_free(k);
        fn(fud, status, body, msg);
        json_decref(body);
}

static const HttpFetchOps call_ops = { .head = on_head, .data = on_data, .done = on_done };

static int start(KubeApi *a, KubeCall *k, const char *method, const char *path, const char *ctype, json_t *body) {
        char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
        json_decref(body);
        if (body && !text) {
                free(k);
                return -ENOMEM;
        }
        size_t url_len = strlen(a->server) + strlen(path) + 1;
        char *url = malloc(url_len);
        if (!url) {
                free(text);
                free(k);
                return -ENOMEM;
        }
        snprintf(url, url_len, "%s%s", a->server, path);
        const char *headers[8];
        size_t n = 0;
        headers[n++] = "Accept";
        headers[n++] = "application/json";
        if (text) {
                headers[n++] = "Content-Type";
                headers[n++] = ctype ? ctype : "application/json";
        }
        if (a->auth) {
                headers[n++] = "Authorization";
                headers[n++] = a->auth;
        }
        headers[n] = NULL;
        k->a = a;
        buf_init(&k->body, k->watch ? SBX_KUBE_WATCH_LINE_BYTES : SBX_KUBE_BODY_BYTES);
        LIST_LINK(a->calls, k);
        int r = http_fetch_start(a->http, method, url, headers, (const uint8_t *)text, text ? strlen(text) : 0,
                                 &call_ops, k, &k->f);
        free(url);
        free(text);
        if (r < 0) {
                call_free(k);
                return r;
        }
        /* A call answers in seconds; a watch is closed by the server after SBX_KUBE_WATCH_S. Past
         * either, the connection is taken for dead (a NAT or a balancer dropped it unsaid). */
        http_fetch_limit(k->f, k->watch ? (SBX_KUBE_WATCH_S + 60) * 1000ull : SBX_KUBE_CALL_MS);
        return 0;
}

int kube_api_call(KubeApi *a, const char *method, const char *path, const char *content_type, json_t *body,
                  KubeAnswerFn fn, void *ud) {
        KubeCall *k = calloc(1, sizeof *k);
        if (!k) {
                json_decref(body);
                return -ENOMEM;
        }
        k->fn = fn;
        k->ud = ud;
        return start(a, k, method, path, content_type, body);
}

int kube_api_watch(KubeApi *a, const char *path, KubeEventFn event, KubeEndFn end, void *ud, KubeWatch **ret) {
        KubeCall *k = calloc(1, sizeof *k);
        if (!k)
                return -ENOMEM;
        k->watch = true;
        k->event = event;
        k->end = end;
        k->ud = ud;
        int r = start(a, k, "GET", path, NULL, NULL);
        if (r == 0)
                *ret = (KubeWatch *)k;
        return r;
}

void kube_watch_cancel(KubeWatch *w) {
        KubeCall *k = (KubeCall *)w;
        if (k->f)
                http_fetch_cancel(k->f);
        call_free(k);
}

void kube_api_forget(KubeApi *a, void *ud) {
        KubeCall *next;
        for (KubeCall *k = a->calls; k; k = next) {
                next = k->next;
                if (k->ud == ud && !k->watch) {
                        if (k->f)
                                http_fetch_cancel(k->f);
                        call_free(k);
                }
        }
}

void kube_time(uint64_t ms, bool micro, char out[40]) {
        time_t t = (time_t)(ms / 1000);
        struct tm tm;
        gmtime_r(&t, &tm);
        char base[32];
        strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
        if (micro)
                snprintf(out, 40, "%s.%06uZ", base, (unsigned)(ms % 1000) * 1000);
        else
                snprintf(out, 40, "%sZ", base);
}
