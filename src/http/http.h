/* SPDX-License-Identifier: MIT */
/* An HTTP/1.1 listener in the daemon's loop: libmicrohttpd in external epoll mode, its epoll
 * fd one watch of the loop, its timeouts a timerfd. It knows nothing of what a request means:
 * its owner hands it HttpOps and answers each request, at once or later, whole or as a stream.
 *
 * Ownership: an HttpReq belongs to the listener. The owner sees it from ops->request until
 * ops->finished, which is called exactly once for every request ops->request saw (answered,
 * streamed to its end, or the client gone); after it r must not be touched. Bodies are held
 * whole, up to the listener's body limit (past it the request is answered 413 and the owner
 * never sees it), unless ops->head asked for them piece by piece. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/loop.h"

typedef struct HttpServer HttpServer;
typedef struct HttpReq HttpReq;

typedef struct HttpOps {
        /* The head is in (method, path, headers, query), the body not yet. Return 0 to have the
         * body held whole, 1 to get it through ops->body as it comes (the request is then
         * answered by ops->request once the body ended, as the others), or an HTTP status (400
         * to 599) to answer it at once with an empty body. NULL: every body held. */
        int (*head)(void *data, HttpReq *r);
        /* A piece of the body of a request whose head returned 1. Return 0, or an HTTP status
         * to stop reading it: the request is then answered with that status (an empty body)
         * and ops->request is not called. */
        int (*body)(void *data, HttpReq *r, const uint8_t *chunk, size_t len);
        /* The request is whole: answer it now or later (http_reply, or http_stream_*). */
        void (*request)(void *data, HttpReq *r);
        /* A stream's queue fell below the low mark (HTTP_STREAM_LOW): more may be written. */
        void (*drained)(void *data, HttpReq *r);
        /* The request is over: answered and sent, or its client gone (ok false). */
        void (*finished)(void *data, HttpReq *r, bool ok);
} HttpOps;

/* Bytes a stream may hold for a slow client before http_stream_queued says to stop, and where
 * ops->drained is called again. */
#define HTTP_STREAM_HIGH (1U * 1024 * 1024)
#define HTTP_STREAM_LOW (256U * 1024)

/* Listens on addr ("PORT", "HOST:PORT", "[V6]:PORT"; port 0 picks one) and serves requests
 * through ops. Returns 0, or -errno with err saying why. */
int http_new(Loop *loop, const char *addr, size_t max_body, const HttpOps *ops, void *data, HttpServer **ret,
             char *err, size_t errlen);
/* TLS for a listener (PEM, copied): its certificate and key, and the CA its clients'
 * certificates must be signed by (NULL: none asked for). */
typedef struct HttpServerTls {
        const char *cert_pem, *key_pem, *client_ca_pem;
} HttpServerTls;
/* http_new over HTTPS. */
int http_new_tls(Loop *loop, const char *addr, size_t max_body, const HttpServerTls *tls, const HttpOps *ops,
                 void *data, HttpServer **ret, char *err, size_t errlen);
/* Whether r's client showed a certificate that the listener's client CA signed and that is in
 * its validity period. False on a plain listener. */
bool http_client_verified(HttpReq *r);

/* Ends every request (ops->finished with ok false) and closes the listener. */
HttpServer *http_free(HttpServer *h);
/* 0 when addr is an address http_new() can listen on the form of (PORT, HOST:PORT or
 * [IPV6]:PORT, numeric), -EINVAL when not; whether it is free is known only by binding it. */
int http_addr_check(const char *addr);
/* The port it listens on, and whether its address is a loopback one. */
uint16_t http_port(const HttpServer *h);
bool http_loopback(const HttpServer *h);

const char *http_method(const HttpReq *r);
/* The path, without the query ("/v2/sandboxes"). */
const char *http_path(const HttpReq *r);
/* A header's value (name in any case) or a query argument's; NULL when absent. */
const char *http_header(HttpReq *r, const char *name);
const char *http_query(HttpReq *r, const char *key);
/* The request's URI as its request line says it, the query included ("/a?b=1"). */
const char *http_uri(const HttpReq *r);
/* Calls fn for each header of the request, in order. */
typedef void (*HttpHeaderFn)(void *ud, const char *name, const char *value);
void http_headers(HttpReq *r, HttpHeaderFn fn, void *ud);
/* A form part's piece: name and filename of its part (filename NULL for a plain field), the
 * piece at offset off of that part. Return 0, or an HTTP status to stop (as ops->body). */
typedef int (*HttpFormFn)(void *ud, const char *name, const char *filename, const uint8_t *data, size_t len,
                          uint64_t off);
/* From ops->head: the body is a form (multipart/form-data or urlencoded, as its Content-Type
 * says) whose parts go to fn as they come, instead of ops->body. Returns 0, or -EINVAL when
 * the Content-Type is not a form MHD can parse. */
int http_form(HttpReq *r, HttpFormFn fn, void *ud);
/* From ops->body or a form's fn: take no more of the body until http_resume_body (the owner
 * is writing what it got somewhere slower). */
void http_pause_body(HttpReq *r);
void http_resume_body(HttpReq *r);

/* The whole body (when held whole); *ret_len its length. Never NULL. */
const uint8_t *http_body(const HttpReq *r, size_t *ret_len);
/* Whether the client's address is a loopback one. */
bool http_from_loopback(const HttpReq *r);
/* The owner's pointer for r. */
void http_set_user(HttpReq *r, void *user);
void *http_user(const HttpReq *r);

/* Answers r with status and body (taken: malloc'd or NULL) of content type ctype (NULL: none)
 * and extra headers (NULL-terminated name, value pairs, copied; may be NULL). Returns 0, or
 * -errno (r is still unanswered: the owner may try again with less). */
int http_reply(HttpReq *r, unsigned status, const char *ctype, char *body, size_t len, const char *const *headers);
/* Starts a streamed answer (chunked): status and headers now, then the bytes written. */
int http_stream_start(HttpReq *r, unsigned status, const char *ctype, const char *const *headers);
/* Queues bytes of a started stream. Returns 0 or -ENOMEM. */
int http_stream_write(HttpReq *r, const void *data, size_t len);
/* Bytes queued and not yet sent: past HTTP_STREAM_HIGH the owner should stop producing until
 * ops->drained. */
size_t http_stream_queued(const HttpReq *r);
/* Ends a stream once what is queued is sent. */
void http_stream_end(HttpReq *r);
