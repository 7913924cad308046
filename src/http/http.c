/* SPDX-License-Identifier: MIT */
/* The HTTP listener (http.h): libmicrohttpd driven by the daemon's loop. MHD parses and frames
 * (chunked bodies in and out, keep-alive, pipelining, limits on heads); this file only moves
 * requests to the owner and answers back, suspending a connection while its answer is not
 * ready and resuming it when it is. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/queue.h"
#include "base/util.h"
#include "http/http.h"

typedef enum { HR_HEAD, HR_WAIT, HR_QUEUED } ReqState;

struct HttpReq {
        HttpServer *h;
        HttpReq *next, *prev;
        struct MHD_Connection *c;
        ReqState state;
        bool seen;          /* ops->head or ops->request was called: ops->finished will be */
        bool suspended;
        bool streamed_body; /* ops->head asked for the body piece by piece */
        bool streaming, ended, above_high, drain_due;
        bool body_paused;   /* the owner asked to take no more body for now */
        struct MHD_PostProcessor *form;
        HttpFormFn form_fn;
        void *form_ud;
        unsigned form_status; /* what form_fn stopped with */
        unsigned early;     /* a status to answer with, the handler never called */
        char *method, *path, *uri; /* uri: as the request line has it, query included */
        bool started;       /* the access handler has seen it */
        ByteQueue body, out;
        struct MHD_Response *resp; /* made, not yet queued */
        unsigned status;
        void *user;
        /* A stream's connection, watched for the client's hang-up (a dup of MHD's fd, -1 for
         * none): while a stream has nothing to send, MHD looks at its socket no more, and a
         * client that went away would hold what feeds the stream (a command, a cell) until
         * the next byte. */
        int peer_fd;
        Watch peer_w;
};

struct HttpServer {
        Loop *loop;
        struct MHD_Daemon *d;
        const HttpOps *ops;
        void *data;
        size_t max_body;
        int listen_fd, timer_fd;
        Watch ew, tw;
        uint16_t port;
        bool loopback, run_due, yield_due, stopping, tls;
        HttpReq *reqs;
        char *cert, *key, *trust; /* http_new_tls's copies, which MHD reads for as long as it runs */
};

static void schedule_run(HttpServer *h);

/* ---------------------------------------------------------------- the loop's side */

static void run(HttpServer *h);

static void run_yielded(void *data) {
        HttpServer *h = data;
        h->yield_due = false;
        run(h);
}

/* MHD's next timeout on the timerfd; a timeout of 0 (work it can do now: a resumed connection,
 * an answer made ready) is a run on the loop's next turn, not a timer's millisecond. */
static void arm_timer(HttpServer *h) {
        MHD_UNSIGNED_LONG_LONG ms;
        if (MHD_get_timeout(h->d, &ms) != MHD_YES) {
                (void)timerfd_arm_ms(h->timer_fd, 0);
        } else if (ms > 0) {
                (void)timerfd_arm_ms(h->timer_fd, ms);
        } else if (!h->yield_due && !h->stopping && loop_yield(h->loop, run_yielded, h) == 0) {
                h->yield_due = true;
                (void)timerfd_arm_ms(h->timer_fd, 0);
        }
}

static void run(HttpServer *h) {
        if (!h->d)
                return;
        (void)MHD_run(h->d);
        arm_timer(h);
}

static void run_deferred(void *data) {
        HttpServer *h = data;
        h->run_due = false;
        /* Drained notices first: the owner may queue more for the run to send. */
        for (HttpReq *r = h->reqs, *next; r; r = next) {
                next = r->next;
                if (r->drain_due) {
                        r->drain_due = false;
                        if (h->ops->drained)
                                h->ops->drained(h->data, r);
                }
        }
        run(h);
}

static void schedule_run(HttpServer *h) {
        if (!h->run_due && !h->stopping && loop_defer(h->loop, run_deferred, h) == 0)
                h->run_due = true;
}

static void epoll_event(Watch *w, uint32_t events) { run(w->data); }

static void timer_event(Watch *w, uint32_t events) {
        HttpServer *h = w->data;
        uint64_t n;
        (void)!read(h->timer_fd, &n, sizeof n);
        run(h);
}

/* ---------------------------------------------------------------- requests */

static void req_free(HttpReq *r) {
        HttpServer *h = r->h;
        loop_del(h->loop, &r->peer_w);
        safe_close(r->peer_fd);
        if (r->prev)
                r->prev->next = r->next;
        else
                h->reqs = r->next;
        if (r->next)
                r->next->prev = r->prev;
        if (r->resp)
                MHD_destroy_response(r->resp);
        if (r->form)
                (void)MHD_destroy_post_processor(r->form);
        bq_done(&r->body);
        bq_done(&r->out);
        free(r->method);
        free(r->path);
        free(r->uri);
        free(r);
}

static void resume(HttpReq *r) {
        if (r->suspended) {
                r->suspended = false;
                MHD_resume_connection(r->c);
                schedule_run(r->h);
        }
}

static enum MHD_Result queue_empty(struct MHD_Connection *c, unsigned status) {
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (!resp)
                return MHD_NO;
        enum MHD_Result ok = MHD_queue_response(c, status, resp);
        MHD_destroy_response(resp);
        return ok;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *upload, size_t *upload_size, void **con_cls) {
        HttpServer *h = cls;
        HttpReq *r = *con_cls;
        if (!r)
                return MHD_NO; /* on_uri made it; only out of memory leaves none */
        if (!r->started) {
                r->started = true;
                r->c = c;
                r->method = strdup(method);
                r->path = strdup(url);
                if (!r->method || !r->path)
                        return MHD_NO; /* the completed callback frees it */
                /* Only origin-form targets ("/path"): MHD takes "@host/x" too, which an owner that
                 * forwards (a URL of its base and the target) would send to that host. */
                if (r->path[0] != '/' || (r->uri && r->uri[0] != '/')) {
                        r->early = 400;
                        return MHD_YES;
                }
                if (h->ops->head) {
                        r->seen = true; /* the owner may hold state for it from here */
                        int m = h->ops->head(h->data, r);
                        if (m >= 400 && m <= 599)
                                r->early = (unsigned)m;
                        else
                                r->streamed_body = m == 1;
                }
                return MHD_YES;
        }
        if (*upload_size) {
                size_t n = *upload_size;
                *upload_size = 0;
                if (r->early)
                        return MHD_YES; /* read and dropped, so the answer can go out */
                if (r->form) {
                        if (MHD_post_process(r->form, upload, n) != MHD_YES)
                                r->early = r->form_status ? r->form_status : 400;
                } else if (r->streamed_body) {
                        int s = h->ops->body(h->data, r, (const uint8_t *)upload, n);
                        if (s >= 400 && s <= 599)
                                r->early = (unsigned)s;
                } else if (bq_pending(&r->body) + n > h->max_body) {
                        r->early = 413;
                } else if (bq_push(&r->body, upload, n) < 0) {
                        r->early = 503;
                }
                if (r->body_paused && !r->early && !r->suspended) {
                        MHD_suspend_connection(c);
                        r->suspended = true;
                }
                return MHD_YES;
        }
        if (r->body_paused && !r->early && r->state == HR_HEAD) {
                /* The last piece is still being written: the request is whole once it is. */
                if (!r->suspended) {
                        MHD_suspend_connection(c);
                        r->suspended = true;
                }
                return MHD_YES;
        }
        if (r->form && r->state == HR_HEAD) {
                (void)MHD_destroy_post_processor(r->form);
                r->form = NULL;
        }
        if (r->state == HR_HEAD) {
                if (r->early)
                        return queue_empty(c, r->early);
                r->state = HR_WAIT;
                r->seen = true;
                h->ops->request(h->data, r);
        }
        if (r->resp) {
                enum MHD_Result ok = MHD_queue_response(c, r->status, r->resp);
                MHD_destroy_response(r->resp);
                r->resp = NULL;
                r->state = HR_QUEUED;
                return ok;
        }
        if (r->state == HR_WAIT && !r->suspended) {
                MHD_suspend_connection(c);
                r->suspended = true;
        }
        return MHD_YES;
}

/* MHD's first word of a request: its URI whole, before the query is taken apart. The request
 * starts here, so it always has its URI. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
        HttpServer *h = cls;
        HttpReq *r = calloc(1, sizeof *r);
        if (!r)
                return NULL;
        r->h = h;
        r->c = c;
        r->peer_fd = -1;
        r->uri = strdup(uri);
        r->next = h->reqs;
        if (h->reqs)
                h->reqs->prev = r;
        h->reqs = r;
        return r;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
        HttpServer *h = cls;
        HttpReq *r = *con_cls;
        if (!r)
                return;
        *con_cls = NULL;
        if (r->seen && h->ops->finished)
                h->ops->finished(h->data, r, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
        req_free(r);
}

/* Answers go out in small pieces (a stream's envelopes): Nagle's algorithm would hold each
 * one back until the client's (delayed) ack of the one before. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
        if (toe != MHD_CONNECTION_NOTIFY_STARTED)
                return;
        const union MHD_ConnectionInfo *i = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        int one = 1;
        if (i)
                (void)setsockopt(i->connect_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void on_log(void *cls, const char *fmt, va_list ap) {
        char buf[512];
        vsnprintf(buf, sizeof buf, fmt, ap);
        buf[strcspn(buf, "\n")] = 0;
        log_debug("http: %s", buf);
}

/* ---------------------------------------------------------------- answers */

static int add_headers(struct MHD_Response *resp, const char *ctype, const char *const *headers) {
        if (ctype && MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype) != MHD_YES)
                return -ENOMEM;
        for (size_t i = 0; headers && headers[i] && headers[i + 1]; i += 2)
                if (MHD_add_response_header(resp, headers[i], headers[i + 1]) != MHD_YES)
                        return -EINVAL;
        return 0;
}

/* resp (taken) becomes r's answer, queued once MHD calls back. */
static int set_answer(HttpReq *r, struct MHD_Response *resp, unsigned status, const char *ctype,
                      const char *const *headers) {
        int rr = add_headers(resp, ctype, headers);
        if (rr < 0) {
                MHD_destroy_response(resp);
                return rr;
        }
        r->resp = resp;
        r->status = status;
        resume(r);
        return 0;
}

int http_reply(HttpReq *r, unsigned status, const char *ctype, char *body, size_t len, const char *const *headers) {
        if (r->state != HR_WAIT || r->resp) {
                free(body);
                return -EALREADY;
        }
        struct MHD_Response *resp = body ? MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE)
                                         : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (!resp) {
                free(body);
                return -ENOMEM;
        }
        return set_answer(r, resp, status, ctype, headers);
}

/* MHD asks for the next bytes of a stream; none yet parks the connection until there are. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
        HttpReq *r = cls;
        size_t n = MIN(bq_pending(&r->out), max);
        if (n) {
                memcpy(buf, bq_head(&r->out), n);
                bq_consume(&r->out, n);
                if (r->above_high && bq_pending(&r->out) < HTTP_STREAM_LOW) {
                        r->above_high = false;
                        r->drain_due = true;
                        schedule_run(r->h);
                }
                return (ssize_t)n;
        }
        if (r->ended)
                return MHD_CONTENT_READER_END_OF_STREAM;
        MHD_suspend_connection(r->c);
        r->suspended = true;
        return 0;
}

/* The client hung up on a stream: it ends now, so that MHD, writing its end, finds the
 * connection gone and the owner hears of it (finished). */
static void peer_event(Watch *w, uint32_t events) {
        HttpReq *r = w->data;
        loop_del(r->h->loop, &r->peer_w);
        r->peer_fd = safe_close(r->peer_fd);
        bq_done(&r->out);
        r->ended = true;
        resume(r);
}

static void watch_peer(HttpReq *r) {
        const union MHD_ConnectionInfo *i = MHD_get_connection_info(r->c, MHD_CONNECTION_INFO_CONNECTION_FD);
        int fd = i ? fcntl(i->connect_fd, F_DUPFD_CLOEXEC, 3) : -1;
        if (fd >= 0 && loop_add(r->h->loop, &r->peer_w, fd, EPOLLRDHUP, peer_event, r) == 0)
                r->peer_fd = fd;
        else
                safe_close(fd);
}

int http_stream_start(HttpReq *r, unsigned status, const char *ctype, const char *const *headers) {
        if (r->state != HR_WAIT || r->resp)
                return -EALREADY;
        watch_peer(r);
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, SBX_HTTP_STREAM_BLOCK,
                                                                      stream_read, r, NULL);
        if (!resp)
                return -ENOMEM;
        int rr = set_answer(r, resp, status, ctype, headers);
        if (rr == 0)
                r->streaming = true;
        return rr;
}

int http_stream_write(HttpReq *r, const void *data, size_t len) {
        if (!r->streaming || r->ended)
                return -EPIPE;
        if (bq_push(&r->out, data, len) < 0)
                return -ENOMEM;
        if (bq_pending(&r->out) >= HTTP_STREAM_HIGH)
                r->above_high = true;
        resume(r);
        return 0;
}

size_t http_stream_queued(const HttpReq *r) { return bq_pending(&r->out); }

void http_stream_end(HttpReq *r) {
        if (!r->streaming || r->ended)
                return;
        r->ended = true;
        resume(r);
}

/* ---------------------------------------------------------------- forms */

static enum MHD_Result form_piece(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
                                  const char *content_type, const char *transfer_encoding, const char *data,
                                  uint64_t off, size_t size) {
        HttpReq *r = cls;
        int s = r->form_fn(r->form_ud, key ? key : "", filename, (const uint8_t *)data, size, off);
        if (s >= 400 && s <= 599) {
                r->form_status = (unsigned)s;
                return MHD_NO;
        }
        return MHD_YES;
}

int http_form(HttpReq *r, HttpFormFn fn, void *ud) {
        r->form_fn = fn;
        r->form_ud = ud;
        r->form = MHD_create_post_processor(r->c, SBX_HTTP_FORM_BUFFER, form_piece, r);
        return r->form ? 0 : -EINVAL;
}

void http_pause_body(HttpReq *r) {
        if (r->state == HR_HEAD)
                r->body_paused = true;
}

void http_resume_body(HttpReq *r) {
        if (!r->body_paused)
                return;
        r->body_paused = false;
        resume(r);
}

/* ---------------------------------------------------------------- what a request says */

const char *http_method(const HttpReq *r) { return r->method; }
const char *http_path(const HttpReq *r) { return r->path; }
const char *http_header(HttpReq *r, const char *name) {
        return MHD_lookup_connection_value(r->c, MHD_HEADER_KIND, name);
}
const char *http_uri(const HttpReq *r) { return r->uri ? r->uri : r->path; }

struct HeaderWalk {
        HttpHeaderFn fn;
        void *ud;
};

static enum MHD_Result header_one(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
        struct HeaderWalk *w = cls;
        w->fn(w->ud, key, value ? value : "");
        return MHD_YES;
}

void http_headers(HttpReq *r, HttpHeaderFn fn, void *ud) {
        struct HeaderWalk w = { fn, ud };
        (void)MHD_get_connection_values(r->c, MHD_HEADER_KIND, header_one, &w);
}

const char *http_query(HttpReq *r, const char *key) {
        return MHD_lookup_connection_value(r->c, MHD_GET_ARGUMENT_KIND, key);
}
const uint8_t *http_body(const HttpReq *r, size_t *ret_len) {
        *ret_len = bq_pending(&r->body);
        return *ret_len ? bq_head(&r->body) : (const uint8_t *)"";
}
void http_set_user(HttpReq *r, void *user) { r->user = user; }
void *http_user(const HttpReq *r) { return r->user; }

static bool is_loopback(const struct sockaddr *sa) {
        if (sa->sa_family == AF_INET)
                return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
        if (sa->sa_family == AF_INET6) {
                const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
                return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
        }
        return false;
}

bool http_from_loopback(const HttpReq *r) {
        const union MHD_ConnectionInfo *i = MHD_get_connection_info(r->c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        return i && i->client_addr && is_loopback(i->client_addr);
}

/* ---------------------------------------------------------------- the listener */

/* "PORT", "HOST:PORT" or "[V6]:PORT" into a socket address. */
static int parse_addr(const char *addr, struct sockaddr_storage *ss, socklen_t *len) {
        char host[INET6_ADDRSTRLEN + 2] = "127.0.0.1";
        const char *port = addr, *colon = strrchr(addr, ':');
        if (colon) {
                const char *h = addr;
                size_t hl = (size_t)(colon - addr);
                if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
                        h++;
                        hl -= 2;
                }
                if (hl == 0 || hl >= sizeof host)
                        return -EINVAL;
                memcpy(host, h, hl);
                host[hl] = 0;
                port = colon + 1;
        }
        uint64_t p;
        if (parse_u64(port, 65535, &p) < 0)
                return -EINVAL;
        memset(ss, 0, sizeof *ss);
        struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
        if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
                s4->sin_family = AF_INET;
                s4->sin_port = htons((uint16_t)p);
                *len = sizeof *s4;
        } else if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
                s6->sin6_family = AF_INET6;
                s6->sin6_port = htons((uint16_t)p);
                *len = sizeof *s6;
        } else {
                return -EINVAL;
        }
        return 0;
}

int http_addr_check(const char *addr) {
        struct sockaddr_storage ss;
        socklen_t len;
        return parse_addr(addr, &ss, &len);
}

static int listen_on(HttpServer *h, const char *addr, char *err, size_t errlen) {
        struct sockaddr_storage ss;
        socklen_t len;
        if (parse_addr(addr, &ss, &len) < 0) {
                snprintf(err, errlen, "%s: not PORT, HOST:PORT or [IPV6]:PORT with a numeric host", addr);
                return -EINVAL;
        }
        int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                goto fail;
        int one = 1;
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, SBX_HTTP_BACKLOG) < 0)
                goto fail;
        if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
                goto fail;
        h->port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                                : ((struct sockaddr_in6 *)&ss)->sin6_port);
        h->loopback = is_loopback((struct sockaddr *)&ss);
        h->listen_fd = fd;
        return 0;
fail:;
        int r = negerrno();
        snprintf(err, errlen, "%s: %s", addr, strerror(-r));
        safe_close(fd);
        return r;
}

int http_new(Loop *loop, const char *addr, size_t max_body, const HttpOps *ops, void *data, HttpServer **ret,
             char *err, size_t errlen) {
        return http_new_tls(loop, addr, max_body, NULL, ops, data, ret, err, errlen);
}

bool http_client_verified(HttpReq *r) {
        if (!r->h->tls || !r->h->trust)
                return false;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->c, MHD_CONNECTION_INFO_GNUTLS_SESSION);
        gnutls_session_t session = ci ? (gnutls_session_t)ci->tls_session : NULL;
        unsigned status = 0, n = 0;
        if (!session || !gnutls_certificate_get_peers(session, &n) || n == 0)
                return false;
        return gnutls_certificate_verify_peers2(session, &status) == GNUTLS_E_SUCCESS && status == 0;
}

int http_new_tls(Loop *loop, const char *addr, size_t max_body, const HttpServerTls *tls, const HttpOps *ops,
                 void *data, HttpServer **ret, char *err, size_t errlen) {
        HttpServer *h = calloc(1, sizeof *h);
        if (!h)
                return -ENOMEM;
        *h = (HttpServer){ .loop = loop, .ops = ops, .data = data, .max_body = max_body, .listen_fd = -1,
                           .timer_fd = -1, .tls = tls != NULL };
        if (tls && (!tls->cert_pem || !tls->key_pem || !(h->cert = strdup(tls->cert_pem)) ||
                    !(h->key = strdup(tls->key_pem)) || (tls->client_ca_pem && !(h->trust = strdup(tls->client_ca_pem))))) {
                snprintf(err, errlen, "%s: TLS needs a certificate and its key", addr);
                http_free(h);
                return -EINVAL;
        }
        int r = listen_on(h, addr, err, errlen);
        if (r < 0) {
                http_free(h);
                return r;
        }
        h->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        /* The logger first, so that MHD's own words about the later options go to it. */
        struct MHD_OptionItem opts[] = {
                { MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)on_log, h },
                { MHD_OPTION_LISTEN_SOCKET, h->listen_fd, NULL },
                { MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, h },
                { MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)on_uri, h },
                { MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, h },
                { MHD_OPTION_CONNECTION_LIMIT, (intptr_t)SBX_HTTP_MAX_CONNECTIONS, NULL },
                { MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)SBX_HTTP_IDLE_S, NULL },
                { h->tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, h->cert },
                { MHD_OPTION_HTTPS_MEM_KEY, 0, h->key },
                { h->trust ? MHD_OPTION_HTTPS_MEM_TRUST : MHD_OPTION_END, 0, h->trust },
                { MHD_OPTION_END, 0, NULL },
        };
        if (h->timer_fd >= 0)
                h->d = MHD_start_daemon(MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
                                                (h->tls ? MHD_USE_TLS : 0),
                                        0, NULL, NULL, on_access, h, MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
        const union MHD_DaemonInfo *i = h->d ? MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_EPOLL_FD) : NULL;
        if (!i || (r = loop_add(loop, &h->ew, i->epoll_fd, EPOLLIN, epoll_event, h)) < 0 ||
            (r = loop_add(loop, &h->tw, h->timer_fd, EPOLLIN, timer_event, h)) < 0) {
                r = r < 0 ? r : -EIO;
                snprintf(err, errlen, "%s: cannot start the HTTP server", addr);
                http_free(h);
                return r;
        }
        arm_timer(h);
        *ret = h;
        return 0;
}

HttpServer *http_free(HttpServer *h) {
        if (!h)
                return NULL;
        h->stopping = true;
        if (h->ew.active)
                loop_del(h->loop, &h->ew);
        if (h->tw.active)
                loop_del(h->loop, &h->tw);
        loop_cancel_defer(h->loop, h);
        if (h->d) {
                /* MHD closes only connections it can see: the parked ones are let go first. */
                for (HttpReq *r = h->reqs; r; r = r->next)
                        if (r->suspended) {
                                r->suspended = false;
                                MHD_resume_connection(r->c);
                        }
                MHD_stop_daemon(h->d); /* each request's on_completed: finished(false) */
        } else {
                safe_close(h->listen_fd);
        }
        /* MHD closes the listening socket it was given. */
        safe_close(h->timer_fd);
        free(h->cert);
        if (h->key)
                explicit_bzero(h->key, strlen(h->key));
        free(h->key);
        free(h->trust);
        free(h);
        return NULL;
}

uint16_t http_port(const HttpServer *h) { return h->port; }
bool http_loopback(const HttpServer *h) { return h->loopback; }
