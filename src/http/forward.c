/* SPDX-License-Identifier: MIT */
/* Forwarding a request (forward.h). */
#include <errno.h>
#include <string.h>
#include <strings.h>
#include "base/limits.h"
#include "base/util.h"
#include "http/forward.h"

static bool named(const char *name, const char *const *list) {
        for (size_t i = 0; list && list[i]; i++)
                if (strcasecmp(name, list[i]) == 0)
                        return true;
        return false;
}

static const char *const hop_by_hop[] = { "Connection", "Keep-Alive", "Transfer-Encoding", "TE", "Trailer",
                                          "Upgrade", "Proxy-Connection", "Proxy-Authorization", "Content-Length",
                                          "Expect", NULL };

static void fwd_head(void *ud, unsigned status, const char *const *headers) {
        HttpForward *fw = ud;
        const char *out[2 * SBX_HTTP_FETCH_MAX_HEADERS + 1];
        size_t n = 0;
        for (size_t i = 0; headers[i] && headers[i + 1] && n + 2 < ELEMENTSOF(out); i += 2)
                if (!named(headers[i], hop_by_hop)) {
                        out[n++] = headers[i];
                        out[n++] = headers[i + 1];
                }
        out[n] = NULL;
        if (http_stream_start(fw->r, status, NULL, out) == 0)
                fw->streaming = true;
}

static bool fwd_data(void *ud, const uint8_t *d, size_t n) {
        HttpForward *fw = ud;
        if (!fw->streaming || http_stream_write(fw->r, d, n) < 0)
                return false;
        return http_stream_queued(fw->r) >= HTTP_STREAM_HIGH;
}

static void fwd_done(void *ud, int error, const char *message) {
        HttpForward *fw = ud;
        fw->fetch = NULL;
        if (fw->streaming) {
                /* A cut answer is told by ending the stream early: nothing else can be said. */
                http_stream_end(fw->r);
                fw->streaming = false;
                return;
        }
        fw->failed(fw->ud, error, message);
}

static const HttpFetchOps fwd_ops = { .head = fwd_head, .data = fwd_data, .done = fwd_done };

struct Headers {
        const char **v;
        size_t n, cap;
        const char *const *drop;
};

static void add_header(void *ud, const char *name, const char *value) {
        struct Headers *h = ud;
        if (named(name, hop_by_hop) || named(name, h->drop) || h->n + 3 > h->cap)
                return;
        h->v[h->n++] = name;
        h->v[h->n++] = value;
        h->v[h->n] = NULL;
}

int http_forward_start(HttpForward *fw, HttpClient *c, HttpReq *r, const char *url, const char *const *drop,
                       const char *const *set) {
        const char *v[2 * SBX_HTTP_FETCH_MAX_HEADERS + 1] = { NULL };
        size_t nset = 0;
        while (set && set[nset])
                nset++;
        struct Headers h = { v, 0, ELEMENTSOF(v) - nset, drop };
        http_headers(r, add_header, &h);
        for (size_t i = 0; i + 1 < nset; i += 2) {
                v[h.n++] = set[i];
                v[h.n++] = set[i + 1];
        }
        v[h.n] = NULL;
        size_t n;
        const uint8_t *body = http_body(r, &n);
        fw->r = r;
        fw->streaming = false;
        return http_fetch_start(c, http_method(r), url, v, body, n, &fwd_ops, fw, &fw->fetch);
}

void http_forward_drained(HttpForward *fw) {
        if (fw->fetch)
                http_fetch_resume(fw->fetch);
}

void http_forward_cancel(HttpForward *fw) {
        if (fw->fetch) {
                http_fetch_cancel(fw->fetch);
                fw->fetch = NULL;
        }
}

bool http_api_key_ok(HttpReq *r, char *const *keys, size_t n) {
        const char *k = http_header(r, "X-API-KEY");
        if (!n)
                return http_from_loopback(r);
        for (size_t i = 0; k && i < n; i++)
                if (strcmp(k, keys[i]) == 0)
                        return true;
        return false;
}
