/* SPDX-License-Identifier: MIT */
/* The node's kubelet endpoints (kube.h, KubeNodeOptions.kubelet_*): what the API server asks a
 * node's kubelet for on port 10250 over HTTPS, so that `kubectl logs` reaches a pod's output.
 * Only a client whose certificate the configured CA signed (the API server's
 * --kubelet-client-certificate) is answered: a pod's output is not for anyone who reaches the
 * node's address. Served: /healthz and /containerLogs/NS/POD/CONTAINER (tailLines, limitBytes,
 * previous); follow is refused (400) for now. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/buf.h"
#include "base/log.h"
#include "base/text.h"
#include "base/util.h"
#include "http/http.h"
#include "kube/kube_private.h"

typedef struct LogReq {
        HttpReq *r;
        KubeNode *n;
        long tail;
        long limit;
        RpcClient *own; /* follow: the stream's own connection */
        bool paused;
} LogReq;

/* A piece of output as the protocol carries it: text, or base64 with "<key>Encoding". */
static uint8_t *bytes_of(json_t *o, const char *key, size_t *len) {
        json_t *v = json_object_get(o, key);
        char enc[64];
        snprintf(enc, sizeof enc, "%sEncoding", key);
        const char *e = json_string_value(json_object_get(o, enc));
        if (!json_is_string(v))
                return NULL;
        if (e && !strcmp(e, "base64"))
                return b64_decode(json_string_value(v), json_string_length(v), len);
        uint8_t *d = malloc(json_string_length(v) + 1);
        if (d)
                memcpy(d, json_string_value(v), (*len = json_string_length(v)));
        return d;
}

static void reply_text(HttpReq *r, unsigned status, const char *text) {
        char *s = strdup(text);
        (void)http_reply(r, status, "text/plain; charset=utf-8", s, s ? strlen(s) : 0, NULL);
}

/* The last `tail` lines of s (all with tail < 0). */
static const char *tail_lines(const char *s, size_t len, long tail) {
        if (tail < 0)
                return s;
        if (tail == 0)
                return s + len;
        const char *p = s + len;
        if (p > s && p[-1] == '\n')
                p--;
        for (long seen = 0; p > s; p--)
                if (p[-1] == '\n' && ++seen == tail)
                        break;
        return p;
}

static void logs_answer(void *ud, json_t *result, json_t *error) {
        LogReq *q = ud;
        HttpReq *r = q->r;
        http_set_user(r, NULL); /* answered here: on_finished has nothing to free */
        if (!result) {
                free(q);
                return reply_text(r, 404, json_string_value(json_object_get(error, "message")) ?: "no logs");
        }
        /* The process's two streams, stdout then stderr: sbx keeps them apart. */
        Buf b;
        buf_init(&b, SBX_KUBE_BODY_BYTES);
        const char *names[] = { "stdout", "stderr" };
        for (int i = 0; i < 2; i++) {
                size_t len = 0;
                uint8_t *d = bytes_of(result, names[i], &len);
                (void)buf_append(&b, d, d ? len : 0);
                free(d);
        }
        const char *all = (const char *)b.data ?: "";
        const char *from = tail_lines(all, b.len, q->tail);
        size_t n = b.len - (size_t)(from - all);
        if (q->limit >= 0 && (size_t)q->limit < n)
                n = (size_t)q->limit;
        char *out = malloc(n + 1);
        if (out) {
                memcpy(out, from, n);
                out[n] = 0;
        }
        buf_done(&b);
        free(q);
        (void)http_reply(r, 200, "text/plain; charset=utf-8", out, out ? n : 0, NULL);
}

/* ---------------------------------------------------------------- follow */

static void follow_notify(void *ud, const char *method, json_t *params) {
        LogReq *q = ud;
        if (strcmp(method, "process.output") != 0)
                return;
        size_t len = 0;
        uint8_t *d = bytes_of(params, "data", &len);
        if (d && len && http_stream_write(q->r, d, len) == 0 && http_stream_queued(q->r) >= HTTP_STREAM_HIGH) {
                q->paused = true;
                rpc_client_pause(q->own, true);
        }
        free(d);
}

static void follow_done(void *ud, json_t *result, json_t *error) {
        LogReq *q = ud;
        if (error) {
                const char *m = json_string_value(json_object_get(error, "message")) ?: "the stream failed";
                (void)http_stream_write(q->r, "\n[sbx: ", 7);
                (void)http_stream_write(q->r, m, strlen(m));
                (void)http_stream_write(q->r, "]\n", 2);
        }
        http_stream_end(q->r); /* the connection goes with the request (on_finished) */
}

static void follow(LogReq *q, const char *sandbox, const char *process) {
        int fd = -1, r = q->n->connect(q->n->connect_data, &fd);
        if (r == 0 && (r = rpc_client_new(q->n->loop, fd, follow_notify, q, &q->own)) < 0)
                safe_close(fd);
        if (r == 0)
                r = rpc_client_call(q->own, "process.stream", json_pack("{s:s, s:s}", "sandboxId", sandbox, "processId",
                                                                          process), follow_done, q);
        if (r == 0)
                r = http_stream_start(q->r, 200, "text/plain; charset=utf-8", NULL);
        if (r < 0)
                reply_text(q->r, 503, "cannot follow the container's output now");
}

static void on_drained(void *data, HttpReq *r) {
        LogReq *q = http_user(r);
        if (q && q->own && q->paused) {
                q->paused = false;
                rpc_client_pause(q->own, false);
        }
}

static long query_long(HttpReq *r, const char *key) {
        const char *v = http_query(r, key);
        if (!v || !*v)
                return -1;
        char *end;
        long x = strtol(v, &end, 10);
        return *end || x < 0 ? -2 : x;
}

static void on_request(void *data, HttpReq *r) {
        KubeNode *n = data;
        const char *path = http_path(r);
        if (!http_client_verified(r))
                return reply_text(r, 401, "a client certificate of the API server's is needed");
        if (!strcmp(path, "/healthz"))
                return reply_text(r, 200, "ok");
        char ns[64], pod[254], cont[64];
        if (strcmp(http_method(r), "GET") || sscanf(path, "/containerLogs/%63[^/]/%253[^/]/%63[^/]", ns, pod, cont) != 3)
                return reply_text(r, 404, "sbx nodes serve /healthz and /containerLogs/NAMESPACE/POD/CONTAINER");
        const char *fol = http_query(r, "follow");
        long tail = query_long(r, "tailLines"), limit = query_long(r, "limitBytes");
        if (tail == -2 || limit == -2)
                return reply_text(r, 400, "tailLines and limitBytes are whole numbers");
        const char *prev = http_query(r, "previous");
        char sandbox[64], process[32];
        int e = kpod_logs_target(n, ns, pod, cont, prev && !strcmp(prev, "true"), sandbox, process);
        if (e < 0)
                return reply_text(r, 404, e == -ESRCH    ? "no such pod on this node"
                                          : e == -ENOENT ? "no such container in the pod"
                                                         : "the container has no process (yet, or before this one)");
        LogReq *q = calloc(1, sizeof *q);
        if (!q)
                return reply_text(r, 503, "out of memory");
        *q = (LogReq){ .r = r, .n = n, .tail = tail, .limit = limit };
        http_set_user(r, q);
        if (fol && !strcmp(fol, "true"))
                return follow(q, sandbox, process);
        if (rpc_client_call(n->rpc, "process.logs", json_pack("{s:s, s:s}", "sandboxId", sandbox, "processId", process),
                            logs_answer, q) < 0) {
                http_set_user(r, NULL);
                free(q);
                reply_text(r, 503, "the daemon's connection failed");
        }
}

static void on_finished(void *data, HttpReq *r, bool ok) {
        KubeNode *n = data;
        LogReq *q = http_user(r);
        if (!q)
                return;
        if (q->own)
                rpc_client_free(q->own); /* a followed stream's connection, and its call */
        else
                rpc_client_forget(n->rpc, q); /* gone before its answer: the call answers nobody */
        free(q);
}

static const HttpOps kubelet_ops = { .request = on_request, .drained = on_drained, .finished = on_finished };

int kubelet_start(KubeNode *n, const KubeNodeOptions *o, char *err, size_t errlen) {
        if (!o->kubelet_cert && !o->kubelet_key && !o->kubelet_client_ca)
                return 0;
        if (!o->kubelet_cert || !o->kubelet_key || !o->kubelet_client_ca) {
                snprintf(err, errlen, "the kubelet's endpoints need a certificate, its key and the CA of the API "
                                      "server's client certificate (--kube-kubelet-cert, -key, -client-ca)");
                return -EINVAL;
        }
        const char *paths[3] = { o->kubelet_cert, o->kubelet_key, o->kubelet_client_ca };
        char *pem[3] = { NULL, NULL, NULL };
        int r = 0;
        for (int i = 0; r == 0 && i < 3; i++) {
                uint8_t *d;
                size_t len;
                if ((r = read_file_whole(paths[i], 1024 * 1024, &d, &len)) < 0) {
                        snprintf(err, errlen, "%s: %s", paths[i], strerror(-r));
                        break;
                }
                if (!(pem[i] = realloc(d, len + 1))) {
                        free(d);
                        r = -ENOMEM;
                        break;
                }
                pem[i][len] = 0;
        }
        char addr[80];
        snprintf(addr, sizeof addr, strchr(n->node_ip, ':') ? "[%s]:%u" : "%s:%u", n->node_ip, SBX_KUBELET_PORT);
        HttpServerTls tls = { .cert_pem = pem[0], .key_pem = pem[1], .client_ca_pem = pem[2] };
        if (r == 0)
                r = http_new_tls(n->loop, addr, 64 * 1024, &tls, &kubelet_ops, n, &n->kubelet, err, errlen);
        for (int i = 0; i < 3; i++) {
                if (pem[i])
                        explicit_bzero(pem[i], strlen(pem[i]));
                free(pem[i]);
        }
        return r;
}

void kubelet_stop(KubeNode *n) { n->kubelet = http_free(n->kubelet); }
