/* SPDX-License-Identifier: MIT */
/* An HTTP client in the daemon's loop: libcurl's multi interface, its sockets watches of the
 * loop and its timeout a timerfd. For the door's forwarding of a sandbox's port (a request to
 * PORT-ID.domain goes on to the port the sandbox exposes): plain HTTP, never a redirect; and,
 * once given its TLS settings (http_client_tls), for a Kubernetes API server over HTTPS.
 *
 * Ownership: an HttpFetch is the client's from http_fetch_start until its ops->done, which is
 * called exactly once (never from inside http_fetch_start) unless http_fetch_cancel came
 * first; after either the fetch must not be touched. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/loop.h"

typedef struct HttpClient HttpClient;
typedef struct HttpFetch HttpFetch;

typedef struct HttpFetchOps {
        /* The answer's status and headers (NULL-terminated name, value pairs, borrowed). */
        void (*head)(void *ud, unsigned status, const char *const *headers);
        /* A piece of its body. Return true to pause it until http_fetch_resume. */
        bool (*data)(void *ud, const uint8_t *d, size_t n);
        /* Over: error 0 when the whole answer came, else -errno and what failed. */
        void (*done)(void *ud, int error, const char *message);
} HttpFetchOps;

/* PEM files (their paths copied), each may be NULL: the CAs a server must be signed by (NULL:
 * the system's), a client certificate and its key. Paths, not bytes: curl's GnuTLS backend
 * reads no blob (a memfd's /proc/self/fd/N does for bytes held in memory). */
typedef struct HttpTls {
        const char *ca_file, *cert_file, *key_file;
} HttpTls;

int http_client_new(Loop *loop, HttpClient **ret);
/* The client speaks https too, with t for every later fetch. Returns 0 or -ENOMEM. */
int http_client_tls(HttpClient *c, const HttpTls *t);
/* Cancels every fetch (no done callback). */
HttpClient *http_client_free(HttpClient *c);

/* method url with headers (NULL-terminated pairs; Host among them is sent as given) and body
 * (copied). Returns 0 or -errno. */
int http_fetch_start(HttpClient *c, const char *method, const char *url, const char *const *headers,
                     const uint8_t *body, size_t len, const HttpFetchOps *ops, void *ud, HttpFetch **ret);
/* Right after http_fetch_start: give up after total_ms in all (0: never), and keep the
 * connection's TCP alive, so that a peer gone without a word is noticed. */
void http_fetch_limit(HttpFetch *f, uint64_t total_ms);
void http_fetch_resume(HttpFetch *f);
void http_fetch_cancel(HttpFetch *f);
