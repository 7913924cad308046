/* SPDX-License-Identifier: MIT */
/* A request of the listener (http.h) sent on to another HTTP server with the loop's client
 * (fetch.h), its answer streamed back as it comes and held back while the client reads slowly:
 * for the E2B door's forwarded ports and the cluster gateway's forwarded envd calls.
 *
 * Ownership: an HttpForward is embedded in its owner's per-request record. From
 * http_forward_start until `failed` is called or the answer's stream ended, the owner calls
 * http_forward_drained from its ops->drained, and http_forward_cancel from its ops->finished. */
#pragma once
#include <stdbool.h>
#include "http/fetch.h"
#include "http/http.h"

typedef struct HttpForward {
        HttpReq *r;
        HttpFetch *fetch; /* on its way; NULL before and after */
        bool streaming;   /* the answer's head went out */
        /* No answer came (nothing was sent to the client yet): the owner answers r. */
        void (*failed)(void *ud, int error, const char *message);
        void *ud;
} HttpForward;

/* Sends r's method, body and headers to url (the hop-by-hop ones left out, and those named in
 * drop, NULL-terminated, may be NULL), with the NULL-terminated name, value pairs of set added
 * (may be NULL). Returns 0 or -errno (nothing started: the owner answers). */
int http_forward_start(HttpForward *fw, HttpClient *c, HttpReq *r, const char *url, const char *const *drop,
                       const char *const *set);
void http_forward_drained(HttpForward *fw);
void http_forward_cancel(HttpForward *fw);
/* X-API-KEY is one of keys (n of them); with none, any key, or none, from loopback only. */
bool http_api_key_ok(HttpReq *r, char *const *keys, size_t n);
