/* SPDX-License-Identifier: MIT */
/* The loop's HTTP client (fetch.h): libcurl's multi interface driven by socket events. curl
 * says which sockets to watch for what (sock_cb) and when to call it back (timer_cb); the loop
 * tells curl when either happens (curl_multi_socket_action), and finished transfers are read
 * off curl_multi_info_read. */
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/util.h"
#include "http/fetch.h"

struct HttpClient {
        Loop *loop;
        CURLM *multi;
        int timer_fd;
        Watch tw;
        bool kick_due;
        HttpFetch *fetches;
        bool tls;
        char *ca, *cert, *key; /* http_client_tls's paths (NULL: none) */
};

struct HttpFetch {
        HttpClient *c;
        HttpFetch *next, *prev;
        CURL *easy;
        struct curl_slist *headers;
        const HttpFetchOps *ops;
        void *ud;
        bool head_told, paused, cancelled, added;
};

typedef struct SockWatch {
        Watch w;
        HttpClient *c;
} SockWatch;

static void check_done(HttpClient *c);

static void fetch_free(HttpFetch *f) {
        HttpClient *c = f->c;
        if (f->prev)
                f->prev->next = f->next;
        else
                c->fetches = f->next;
        if (f->next)
                f->next->prev = f->prev;
        if (f->added)
                curl_multi_remove_handle(c->multi, f->easy);
        curl_easy_cleanup(f->easy);
        curl_slist_free_all(f->headers);
        loop_cancel_defer(c->loop, f);
        free(f);
}

static void action(HttpClient *c, curl_socket_t s, int ev) {
        int running;
        (void)curl_multi_socket_action(c->multi, s, ev, &running);
        check_done(c);
}

static void sock_event(Watch *w, uint32_t events) {
        SockWatch *sw = (SockWatch *)w;
        int ev = (events & EPOLLIN ? CURL_CSELECT_IN : 0) | (events & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
                 (events & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
        action(sw->c, w->fd, ev);
}

static int sock_cb(CURL *e, curl_socket_t s, int what, void *userp, void *socketp) {
        HttpClient *c = userp;
        SockWatch *sw = socketp;
        if (what == CURL_POLL_REMOVE) {
                if (sw) {
                        loop_del(c->loop, &sw->w);
                        free(sw);
                        curl_multi_assign(c->multi, s, NULL);
                }
                return 0;
        }
        uint32_t ev = (what & CURL_POLL_IN ? EPOLLIN : 0) | (what & CURL_POLL_OUT ? EPOLLOUT : 0);
        if (!sw) {
                sw = calloc(1, sizeof *sw);
                if (!sw)
                        return -1;
                sw->c = c;
                if (loop_add(c->loop, &sw->w, s, ev, sock_event, sw) < 0) {
                        free(sw);
                        return -1;
                }
                curl_multi_assign(c->multi, s, sw);
        } else {
                (void)loop_mod(c->loop, &sw->w, ev);
        }
        return 0;
}

static void kick(void *data) {
        HttpClient *c = data;
        c->kick_due = false;
        action(c, CURL_SOCKET_TIMEOUT, 0);
}

/* curl wants to be called after timeout_ms (-1: never; 0: at once, but not from here). */
static int timer_cb(CURLM *m, long timeout_ms, void *userp) {
        HttpClient *c = userp;
        if (timeout_ms < 0)
                (void)timerfd_arm_ms(c->timer_fd, 0);
        else if (timeout_ms == 0) {
                if (!c->kick_due && loop_defer(c->loop, kick, c) == 0)
                        c->kick_due = true;
        } else
                (void)timerfd_arm_ms(c->timer_fd, (uint64_t)timeout_ms);
        return 0;
}

static void timer_event(Watch *w, uint32_t events) {
        HttpClient *c = w->data;
        uint64_t n;
        (void)!read(c->timer_fd, &n, sizeof n);
        action(c, CURL_SOCKET_TIMEOUT, 0);
}

/* The final answer's head is in (a blank line ends it; 1xx heads are not the answer). */
static void tell_head(HttpFetch *f) {
        long status = 0;
        (void)curl_easy_getinfo(f->easy, CURLINFO_RESPONSE_CODE, &status);
        if (status < 200)
                return;
        const char *pairs[2 * SBX_HTTP_FETCH_MAX_HEADERS + 1];
        size_t n = 0;
        struct curl_header *h = NULL;
        while (n + 2 < ELEMENTSOF(pairs) && (h = curl_easy_nextheader(f->easy, CURLH_HEADER, -1, h))) {
                pairs[n++] = h->name;
                pairs[n++] = h->value;
        }
        pairs[n] = NULL;
        f->head_told = true;
        f->ops->head(f->ud, (unsigned)status, pairs);
}

static size_t header_cb(char *buf, size_t size, size_t n, void *ud) {
        HttpFetch *f = ud;
        if (f->cancelled)
                return 0;
        if (n == 2 && buf[0] == '\r' && buf[1] == '\n' && !f->head_told)
                tell_head(f);
        return n;
}

static size_t write_cb(char *buf, size_t size, size_t n, void *ud) {
        HttpFetch *f = ud;
        if (f->cancelled)
                return 0;
        if (!f->head_told)
                tell_head(f);
        if (f->ops->data(f->ud, (const uint8_t *)buf, n)) {
                f->paused = true;
                (void)curl_easy_pause(f->easy, CURLPAUSE_RECV);
        }
        return n;
}

static void check_done(HttpClient *c) {
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(c->multi, &left))) {
                if (m->msg != CURLMSG_DONE)
                        continue;
                HttpFetch *f = NULL;
                (void)curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&f);
                if (!f)
                        continue;
                CURLcode rc = m->data.result;
                bool cancelled = f->cancelled;
                const HttpFetchOps *ops = f->ops;
                void *ud = f->ud;
                if (rc == CURLE_OK && !f->head_told && !cancelled)
                        tell_head(f);
                fetch_free(f);
                if (!cancelled)
                        ops->done(ud, rc == CURLE_OK ? 0 : rc == CURLE_COULDNT_CONNECT ? -ECONNREFUSED
                                          : rc == CURLE_RECV_ERROR || rc == CURLE_GOT_NOTHING ? -ECONNRESET : -EIO,
                                  curl_easy_strerror(rc));
        }
}

int http_client_new(Loop *loop, HttpClient **ret) {
        static bool inited;
        if (!inited && curl_global_init(CURL_GLOBAL_NOTHING) != CURLE_OK)
                return -EIO;
        inited = true;
        HttpClient *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->loop = loop;
        c->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        c->multi = curl_multi_init();
        int r = c->timer_fd < 0 ? negerrno() : !c->multi ? -ENOMEM : 0;
        if (r == 0)
                r = loop_add(loop, &c->tw, c->timer_fd, EPOLLIN, timer_event, c);
        if (r < 0) {
                http_client_free(c);
                return r;
        }
        curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, sock_cb);
        curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
        curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
        curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
        *ret = c;
        return 0;
}

HttpClient *http_client_free(HttpClient *c) {
        if (!c)
                return NULL;
        while (c->fetches)
                fetch_free(c->fetches);
        if (c->tw.active)
                loop_del(c->loop, &c->tw);
        loop_cancel_defer(c->loop, c);
        if (c->multi)
                curl_multi_cleanup(c->multi); /* its sockets' watches went with their handles */
        safe_close(c->timer_fd);
        free(c->ca);
        free(c->cert);
        free(c->key);
        free(c);
        return NULL;
}

static int copy_path(const char *path, char **to) {
        return !path || (*to = strdup(path)) ? 0 : -ENOMEM;
}

int http_client_tls(HttpClient *c, const HttpTls *t) {
        if (c->tls)
                return -EALREADY;
        if (copy_path(t->ca_file, &c->ca) < 0 || copy_path(t->cert_file, &c->cert) < 0 ||
            copy_path(t->key_file, &c->key) < 0)
                return -ENOMEM;
        c->tls = true;
        return 0;
}

static bool path_opt(CURL *e, CURLoption opt, const char *path) {
        return !path || curl_easy_setopt(e, opt, path) == CURLE_OK;
}

/* From the loop, never from the caller's frame: a fetch started inside one of curl's callbacks
 * (a watch's data, answered by a new call) would be refused (CURLM_RECURSIVE_API_CALL). */
static void add_handle(void *data) {
        HttpFetch *f = data;
        if (f->cancelled)
                return;
        if (curl_multi_add_handle(f->c->multi, f->easy) != CURLM_OK) {
                const HttpFetchOps *ops = f->ops;
                void *ud = f->ud;
                fetch_free(f);
                ops->done(ud, -EIO, "the HTTP client refused the request");
                return;
        }
        f->added = true;
}

int http_fetch_start(HttpClient *c, const char *method, const char *url, const char *const *headers,
                     const uint8_t *body, size_t len, const HttpFetchOps *ops, void *ud, HttpFetch **ret) {
        HttpFetch *f = calloc(1, sizeof *f);
        if (!f)
                return -ENOMEM;
        f->c = c;
        f->ops = ops;
        f->ud = ud;
        f->easy = curl_easy_init();
        if (!f->easy) {
                free(f);
                return -ENOMEM;
        }
        f->next = c->fetches;
        if (c->fetches)
                c->fetches->prev = f;
        c->fetches = f;
        char line[SBX_HTTP_FETCH_HEADER_BYTES];
        bool ok = true;
        for (size_t i = 0; headers && headers[i] && headers[i + 1] && ok; i += 2) {
                snprintf(line, sizeof line, "%s: %s", headers[i], headers[i + 1]);
                struct curl_slist *l = curl_slist_append(f->headers, line);
                ok = l != NULL;
                f->headers = l ? l : f->headers;
        }
        /* What curl would add on its own and the caller did not send: no 100-continue wait. */
        struct curl_slist *l = ok ? curl_slist_append(f->headers, "Expect:") : NULL;
        if (l)
                f->headers = l;
        CURL *e = f->easy;
        ok = ok && l && curl_easy_setopt(e, CURLOPT_URL, url) == CURLE_OK &&
             curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, c->tls ? "http,https" : "http") == CURLE_OK &&
             curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
             curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L) == CURLE_OK &&
             curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)SBX_HTTP_FETCH_CONNECT_MS) == CURLE_OK &&
             curl_easy_setopt(e, CURLOPT_HTTPHEADER, f->headers) == CURLE_OK &&
             curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb) == CURLE_OK &&
             curl_easy_setopt(e, CURLOPT_HEADERDATA, f) == CURLE_OK &&
             curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb) == CURLE_OK &&
             curl_easy_setopt(e, CURLOPT_WRITEDATA, f) == CURLE_OK &&
             curl_easy_setopt(e, CURLOPT_PRIVATE, f) == CURLE_OK;
        if (ok && c->tls)
                ok = path_opt(e, CURLOPT_CAINFO, c->ca) && path_opt(e, CURLOPT_SSLCERT, c->cert) &&
                     path_opt(e, CURLOPT_SSLKEY, c->key);
        if (ok && strcmp(method, "HEAD") == 0)
                ok = curl_easy_setopt(e, CURLOPT_NOBODY, 1L) == CURLE_OK;
        else if (ok && strcmp(method, "GET") != 0)
                ok = curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method) == CURLE_OK;
        if (ok && (len || (strcmp(method, "GET") && strcmp(method, "HEAD"))))
                ok = curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len) == CURLE_OK &&
                     curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, len ? (const char *)body : "") == CURLE_OK;
        if (!ok || loop_defer(c->loop, add_handle, f) < 0) {
                fetch_free(f);
                return -EINVAL;
        }
        *ret = f;
        return 0;
}

void http_fetch_limit(HttpFetch *f, uint64_t total_ms) {
        /* Before the deferred add_handle: curl reads options as the transfer starts. */
        (void)curl_easy_setopt(f->easy, CURLOPT_TIMEOUT_MS, (long)total_ms);
        (void)curl_easy_setopt(f->easy, CURLOPT_TCP_KEEPALIVE, 1L);
        (void)curl_easy_setopt(f->easy, CURLOPT_TCP_KEEPIDLE, 30L);
        (void)curl_easy_setopt(f->easy, CURLOPT_TCP_KEEPINTVL, 10L);
}

void http_fetch_resume(HttpFetch *f) {
        if (!f->paused || f->cancelled)
                return;
        f->paused = false;
        (void)curl_easy_pause(f->easy, CURLPAUSE_CONT);
}

static void cancelled_free(void *data) { fetch_free(data); }

void http_fetch_cancel(HttpFetch *f) {
        if (f->cancelled)
                return;
        f->cancelled = true;
        /* Maybe inside one of curl's callbacks: the handle goes once curl has returned. */
        if (loop_defer(f->c->loop, cancelled_free, f) < 0)
                fetch_free(f);
}
