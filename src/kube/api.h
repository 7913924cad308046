/* SPDX-License-Identifier: MIT */
/* A Kubernetes API server's client in the daemon's loop (http/fetch.h over HTTPS): calls whose
 * JSON answer comes back whole, and watches whose events come one per line. Its credentials
 * come from a kubeconfig file (JSON: `kubectl config view --raw -o json`) or, in a pod, from
 * the service account's files.
 *
 * Ownership: every callback is called once per call (or per event), never from inside the call
 * that started it; kube_api_forget() drops a caller's calls unanswered. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include "base/loop.h"

typedef struct KubeApi KubeApi;
typedef struct KubeWatch KubeWatch;

/* Where the API server is and who we are to it (strings malloc'd; kube_creds_done frees). */
typedef struct KubeCreds {
        char *server;          /* "https://10.0.0.1:6443" */
        char *ca_pem, *cert_pem, *key_pem;
        char *token;           /* a bearer token, or NULL */
        bool insecure;         /* the kubeconfig's insecure-skip-tls-verify: refused */
} KubeCreds;

/* path NULL: in-cluster (KUBERNETES_SERVICE_HOST and the service account's token and CA).
 * Returns 0 or -errno with err. */
int kube_creds_load(const char *path, KubeCreds *c, char *err, size_t errlen);
void kube_creds_done(KubeCreds *c);

int kube_api_new(Loop *loop, const KubeCreds *c, KubeApi **ret, char *err, size_t errlen);
KubeApi *kube_api_free(KubeApi *a);

/* status 0 when no answer came (err says why); body is the answer parsed (NULL when it is not
 * JSON), borrowed for the call. */
typedef void (*KubeAnswerFn)(void *ud, unsigned status, json_t *body, const char *err);
/* method path (with its query) and body (stolen, may be NULL), sent as content_type (NULL:
 * application/json). Returns 0 or -errno (fn is then never called). */
int kube_api_call(KubeApi *a, const char *method, const char *path, const char *content_type, json_t *body,
                  KubeAnswerFn fn, void *ud);
void kube_api_forget(KubeApi *a, void *ud);

/* A watch's event: type ADDED, MODIFIED, DELETED, BOOKMARK or ERROR, and its object
 * (borrowed). */
typedef void (*KubeEventFn)(void *ud, const char *type, json_t *object);
/* The watch ended (the server closed it, or it failed: status and err say how); the watch is
 * gone. */
typedef void (*KubeEndFn)(void *ud, unsigned status, const char *err);
/* GET path (a list with ?watch=1&resourceVersion=...) read line by line. */
int kube_api_watch(KubeApi *a, const char *path, KubeEventFn event, KubeEndFn end, void *ud, KubeWatch **ret);
/* Stops a watch; its end callback is not called. */
void kube_watch_cancel(KubeWatch *w);

/* An RFC 3339 time (UTC) of wall_ms; micro adds microseconds (a Lease's MicroTime). */
void kube_time(uint64_t wall_ms, bool micro, char out[40]);
