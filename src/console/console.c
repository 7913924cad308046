/* SPDX-License-Identifier: MIT */
/* The operator console's routes: the token, the page's files, /metrics, one protocol call at
 * a time, and streams as server-sent events. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/log.h"
#include "base/util.h"
#include "console/console.h"
#include "rpc/client.h"

/* One file of the page, read at start. */
typedef struct ConsoleFile {
        const char *path;  /* what the browser asks for */
        const char *ctype;
        const char *const *from; /* where it is under the console's directory, first found */
        uint8_t *data;
        size_t len;
        bool required;
} ConsoleFile;

static const char *const from_index[] = { "index.html", NULL };
static const char *const from_js[] = { "console.js", NULL };
static const char *const from_css[] = { "console.css", NULL };
/* Installed: vendor/; in the source tree: where `npm ci` (build.sh) put the package. */
static const char *const from_xterm_js[] = { "vendor/xterm.js", "node_modules/@xterm/xterm/lib/xterm.js", NULL };
static const char *const from_xterm_css[] = { "vendor/xterm.css", "node_modules/@xterm/xterm/css/xterm.css", NULL };

#define N_FILES 5

struct Console {
        Loop *loop;
        char *token;
        uint16_t port;  /* the listener's (console_set_listener) */
        bool loopback;  /* ... and whether it listens on loopback only */
        unsigned streams; /* streams open now, at most SBX_CONSOLE_MAX_STREAMS */
        bool metrics_no_sandboxes;
        ConsoleConnectFn connect;
        void *connect_data;
        RpcClient *rpc; /* calls, /metrics: one operator connection */
        ConsoleFile files[N_FILES];
};

/* One request while the console works on it (http_user of its HttpReq). */
typedef struct CReq {
        Console *c;
        HttpReq *r;
        RpcClient *own; /* a stream's connection of its own: closing it ends the stream */
        bool streaming, ended;
        bool counted;   /* counts in Console.streams */
} CReq;

/* What the page may call: reading the daemon's state, and the actions an operator takes on a
 * sandbox (no create, no files.write, no run: the console is not another client API). */
static const char *const allowed[] = {
        "health", "sandbox.list", "sandbox.metrics", "sandbox.destroy", "sandbox.pause", "sandbox.resume",
        "sandbox.fork", "session.list", "process.list", "process.logs", "process.start", "process.write",
        "process.resize", "process.kill", "files.list", "files.read", "files.stat", "port.list", "audit.recent",
        "audit.verify", NULL,
};

/* Every answer of the console's: nothing of it framed, sniffed, cached or sent on as a
 * referrer; its pages run only their own scripts. */
#define SECURITY_HEADERS                                                                                       \
        "Content-Security-Policy",                                                                             \
                "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src "  \
                "'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",      \
                "X-Content-Type-Options", "nosniff", "X-Frame-Options", "DENY", "Referrer-Policy", "no-referrer", \
                "Cache-Control", "no-store"

static const char *const plain_headers[] = { SECURITY_HEADERS, NULL };

static bool is_allowed(const char *method) {
        for (size_t i = 0; allowed[i]; i++)
                if (!strcmp(allowed[i], method))
                        return true;
        return false;
}

/* ---------------------------------------------------------------- answers */

static void reply(HttpReq *r, unsigned status, const char *ctype, const char *text) {
        char *s = strdup(text);
        (void)http_reply(r, status, ctype, s, s ? strlen(s) : 0, plain_headers);
}

static void reply_json(HttpReq *r, unsigned status, json_t *body) {
        char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
        json_decref(body);
        if (!s)
                return reply(r, 500, "text/plain; charset=utf-8", "out of memory\n");
        (void)http_reply(r, status, "application/json", s, strlen(s), plain_headers);
}

static void reply_api_error(HttpReq *r, unsigned status, const char *message) {
        reply_json(r, status, json_pack("{s:{s:i, s:s}}", "error", "code", (int)status, "message", message));
}

/* ---------------------------------------------------------------- the token */

static bool same_secret(const char *a, const char *b) {
        size_t la = strlen(a), lb = strlen(b);
        unsigned char d = la != lb;
        for (size_t i = 0; i < la && i < lb; i++)
                d |= (unsigned char)(a[i] ^ b[i]);
        return d == 0;
}

/* The token comes as a bearer only. Never as a cookie: a browser sends a host's cookies to
 * every port of it, a sandbox's exposed ports among them. */
static bool authorized(Console *c, HttpReq *r) {
        const char *auth = http_header(r, "Authorization");
        return auth && !strncasecmp(auth, "Bearer ", 7) && same_secret(auth + 7, c->token);
}

/* On a loopback listener, only loopback's names for it: a page of another name that resolves
 * here (DNS rebinding) is not the console's. A listener beyond loopback is reached by names
 * the daemon cannot know; the token alone guards it. */
static bool host_ok(Console *c, HttpReq *r) {
        const char *host = http_header(r, "Host");
        if (!c->loopback)
                return true;
        if (!host)
                return false;
        char want[64];
        static const char *const names[] = { "127.0.0.1", "localhost", "[::1]" };
        for (size_t i = 0; i < 3; i++) {
                snprintf(want, sizeof want, "%s:%u", names[i], (unsigned)c->port);
                if (!strcasecmp(host, want))
                        return true;
        }
        return false;
}

/* A call that acts must come from the console's own page: a custom header (which another
 * site's page cannot send without a CORS preflight this listener never answers) and, when
 * the browser says where the page was, this origin. */
static bool same_origin(HttpReq *r) {
        const char *mark = http_header(r, "X-Sbx-Console"), *origin = http_header(r, "Origin");
        const char *host = http_header(r, "Host"), *site = http_header(r, "Sec-Fetch-Site");
        if (!mark || strcmp(mark, "1") != 0)
                return false;
        if (site && strcmp(site, "same-origin") != 0)
                return false;
        if (!origin)
                return true;
        char want[320];
        snprintf(want, sizeof want, "http://%s", host ? host : "");
        return host && !strcmp(origin, want);
}

/* ---------------------------------------------------------------- calls */

static void called(void *ud, json_t *result, json_t *error) {
        CReq *q = ud;
        reply_json(q->r, 200, result ? json_pack("{s:O}", "result", result) : json_pack("{s:O}", "error", error));
}

static void api_call(CReq *q) {
        HttpReq *r = q->r;
        if (strcmp(http_method(r), "POST") != 0)
                return reply_api_error(r, 405, "POST a call: {\"method\", \"params\"}");
        if (!same_origin(r))
                return reply_api_error(r, 403, "calls come from the console's own page (X-Sbx-Console: 1, its origin)");
        const char *ct = http_header(r, "Content-Type");
        if (!ct || strncmp(ct, "application/json", 16) != 0)
                return reply_api_error(r, 415, "the body is JSON (Content-Type: application/json)");
        size_t n;
        const uint8_t *body = http_body(r, &n);
        json_error_t je;
        json_t *in = json_loadb((const char *)body, n, 0, &je);
        const char *method = json_string_value(json_object_get(in, "method"));
        json_t *params = json_object_get(in, "params");
        if (!method || (params && !json_is_object(params))) {
                json_decref(in);
                return reply_api_error(r, 400, "the body is {\"method\": string, \"params\": object}");
        }
        if (!is_allowed(method)) {
                reply_json(r, 200, json_pack("{s:{s:i, s:s}}", "error", "code", -32601, "message",
                                             "that method is not the console's to call"));
                json_decref(in);
                return;
        }
        json_t *p = params ? json_incref(params) : json_object();
        if (rpc_client_call(q->c->rpc, method, p, called, q) < 0)
                reply_api_error(r, 503, "out of memory");
        json_decref(in);
}

/* ---------------------------------------------------------------- streams */

static void sse(CReq *q, const char *event, json_t *data) {
        char *s = json_dumps(data, JSON_COMPACT);
        if (!s)
                return;
        /* Compact JSON has no newline, so the event is one data line. */
        char head[96];
        int hl = snprintf(head, sizeof head, "event: %s\ndata: ", event);
        if (http_stream_write(q->r, head, (size_t)hl) < 0 || http_stream_write(q->r, s, strlen(s)) < 0 ||
            http_stream_write(q->r, "\n\n", 2) < 0)
                log_debug("console: a stream's event was lost (out of memory)");
        free(s);
        /* Early, so that what a slow reader holds in the daemon stays small: the server keeps
         * the rest in the process's log, whence the stream resumes. */
        if (q->own && http_stream_queued(q->r) > HTTP_STREAM_LOW)
                rpc_client_pause(q->own, true);
}

static void stream_notify(void *ud, const char *method, json_t *params) {
        CReq *q = ud;
        if (!q->ended)
                sse(q, method, params);
}

static void stream_answered(void *ud, json_t *result, json_t *error) {
        CReq *q = ud;
        if (q->ended)
                return;
        q->ended = true;
        sse(q, result ? "result" : "error", result ? result : error);
        http_stream_end(q->r);
}

static void api_stream(CReq *q) {
        HttpReq *r = q->r;
        const char *method = http_query(r, "method"), *ps = http_query(r, "params");
        if (strcmp(http_method(r), "GET") != 0)
                return reply_api_error(r, 405, "GET a stream");
        if (!method || strcmp(method, "process.stream") != 0)
                return reply_api_error(r, 400, "method=process.stream is the stream the console serves");
        json_error_t je;
        json_t *params = json_loads(ps ? ps : "{}", 0, &je);
        if (!json_is_object(params)) {
                json_decref(params);
                return reply_api_error(r, 400, "params is a JSON object");
        }
        if (q->c->streams >= SBX_CONSOLE_MAX_STREAMS) {
                json_decref(params);
                return reply_api_error(r, 503, "too many streams open: close one");
        }
        int fd, rr = q->c->connect(q->c->connect_data, &fd);
        if (rr < 0 || (rr = rpc_client_new(q->c->loop, fd, stream_notify, q, &q->own)) < 0) {
                json_decref(params);
                return reply_api_error(r, 503, "cannot connect to the server");
        }
        q->c->streams++;
        q->counted = true;
        static const char *const sse_headers[] = { SECURITY_HEADERS, "X-Accel-Buffering", "no", NULL };
        if (http_stream_start(r, 200, "text/event-stream", sse_headers) < 0) {
                json_decref(params);
                return reply_api_error(r, 503, "out of memory");
        }
        q->streaming = true;
        if (rpc_client_call(q->own, method, params, stream_answered, q) < 0)
                stream_answered(q, NULL, json_pack("{s:i, s:s}", "code", -32603, "message", "out of memory"));
}

/* ---------------------------------------------------------------- /metrics */

static void metrics_got(void *ud, json_t *result, json_t *error) {
        CReq *q = ud;
        if (!result)
                return reply(q->r, 503, "text/plain; charset=utf-8", "the server did not answer server.metrics\n");
        size_t len;
        char *text = console_metrics_text(result, !q->c->metrics_no_sandboxes, &len);
        if (!text)
                return reply(q->r, 500, "text/plain; charset=utf-8", "out of memory\n");
        (void)http_reply(q->r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len, plain_headers);
}

/* ---------------------------------------------------------------- the page */

static const ConsoleFile *file_of(const Console *c, const char *path) {
        for (size_t i = 0; i < N_FILES; i++)
                if (c->files[i].data && !strcmp(c->files[i].path, path))
                        return &c->files[i];
        return NULL;
}

static void serve_file(CReq *q, const ConsoleFile *f) {
        char *copy = malloc(f->len ? f->len : 1);
        if (!copy)
                return reply(q->r, 503, "text/plain; charset=utf-8", "out of memory\n");
        memcpy(copy, f->data, f->len);
        (void)http_reply(q->r, 200, f->ctype, copy, f->len, plain_headers);
}

bool console_route(void *data, HttpReq *r) {
        const char *p = http_path(r);
        return !strcmp(p, "/metrics") || !strcmp(p, "/console") || !strncmp(p, "/console/", 9);
}

/* Refusals decided from the head alone, before a body is read: a foreign Host, no token for
 * the API and /metrics, a call's body past SBX_CONSOLE_RPC_BYTES. 0: go on. */
static unsigned refusal(Console *c, HttpReq *r) {
        const char *path = http_path(r), *len = http_header(r, "Content-Length");
        if (!host_ok(c, r))
                return 421;
        bool api = !strncmp(path, "/console/api/", 13);
        if ((api || !strcmp(path, "/metrics")) && !authorized(c, r))
                return 401;
        if (api && len && strtoull(len, NULL, 10) > SBX_CONSOLE_RPC_BYTES)
                return 413;
        return 0;
}

static int on_head(void *data, HttpReq *r) {
        unsigned st = refusal(data, r);
        return st ? (int)st : 0;
}

static void on_request(void *data, HttpReq *r) {
        Console *c = data;
        CReq *q = calloc(1, sizeof *q);
        if (!q)
                return (void)http_reply(r, 503, NULL, NULL, 0, NULL);
        q->c = c;
        q->r = r;
        http_set_user(r, q);
        const char *path = http_path(r);
        bool api = !strncmp(path, "/console/api/", 13);
        size_t n;
        (void)http_body(r, &n);
        unsigned st = refusal(c, r);
        if (!st && api && n > SBX_CONSOLE_RPC_BYTES)
                st = 413;
        if (st == 421)
                return reply(r, 421, "text/plain; charset=utf-8",
                             "the console answers to the listener's own names (127.0.0.1, localhost)\n");
        if (st == 401 && !api)
                return reply(r, 401, "text/plain; charset=utf-8", "give the console's token: Authorization: Bearer TOKEN\n");
        if (st == 401)
                return reply_api_error(r, 401, "open the address sbx serve printed (/console/#token=...)");
        if (st)
                return reply_api_error(r, st, "a call is at most 1 MiB");
        if (!strcmp(path, "/console"))
                return (void)http_reply(r, 301, NULL, NULL, 0,
                                        (const char *const[]){ SECURITY_HEADERS, "Location", "/console/", NULL });
        if (!strcmp(path, "/metrics")) {
                if (rpc_client_call(c->rpc, "server.metrics",
                                    json_pack("{s:b}", "sandboxes", !c->metrics_no_sandboxes), metrics_got, q) < 0)
                        reply(r, 503, "text/plain; charset=utf-8", "out of memory\n");
                return;
        }
        if (!strcmp(path, "/console/api/rpc"))
                return api_call(q);
        if (!strcmp(path, "/console/api/stream"))
                return api_stream(q);
        if (api)
                return reply_api_error(r, 404, "no such route");
        if (strcmp(http_method(r), "GET") != 0 && strcmp(http_method(r), "HEAD") != 0)
                return reply(r, 405, "text/plain; charset=utf-8", "the console's pages are read with GET\n");
        const ConsoleFile *f = file_of(c, path);
        if (!f)
                return reply(r, 404, "text/plain; charset=utf-8", "no such page\n");
        serve_file(q, f);
}

static void on_drained(void *data, HttpReq *r) {
        CReq *q = http_user(r);
        if (q && q->own)
                rpc_client_pause(q->own, false);
}

static void on_finished(void *data, HttpReq *r, bool ok) {
        Console *c = data;
        CReq *q = http_user(r);
        if (!q)
                return;
        rpc_client_forget(c->rpc, q);
        /* Closing a stream's connection ends the stream in the server; what that connection
         * still answers goes nowhere. */
        q->ended = true;
        q->own = rpc_client_free(q->own);
        if (q->counted)
                c->streams--;
        free(q);
}

const HttpOps console_http_ops = {
        .head = on_head, .request = on_request, .drained = on_drained, .finished = on_finished,
};

void console_set_listener(Console *c, uint16_t port, bool loopback) {
        c->port = port;
        c->loopback = loopback;
}

/* ---------------------------------------------------------------- life */

int console_new(Loop *loop, const ConsoleOptions *o, ConsoleConnectFn connect, void *connect_data, Console **ret,
                char *err, size_t errlen) {
        Console *c = calloc(1, sizeof *c);
        if (!c || !(c->token = strdup(o->token))) {
                free(c);
                return -ENOMEM;
        }
        c->loop = loop;
        c->connect = connect;
        c->connect_data = connect_data;
        c->metrics_no_sandboxes = o->metrics_no_sandboxes;
        const ConsoleFile files[N_FILES] = {
                { "/console/", "text/html; charset=utf-8", from_index, NULL, 0, true },
                { "/console/console.js", "text/javascript; charset=utf-8", from_js, NULL, 0, true },
                { "/console/console.css", "text/css; charset=utf-8", from_css, NULL, 0, true },
                { "/console/vendor/xterm.js", "text/javascript; charset=utf-8", from_xterm_js, NULL, 0, false },
                { "/console/vendor/xterm.css", "text/css; charset=utf-8", from_xterm_css, NULL, 0, false },
        };
        memcpy(c->files, files, sizeof files);
        int r = 0;
        for (size_t i = 0; i < N_FILES && r == 0; i++) {
                ConsoleFile *f = &c->files[i];
                for (const char *const *p = f->from; *p && !f->data; p++) {
                        char path[PATH_MAX];
                        snprintf(path, sizeof path, "%s/%s", o->dir, *p);
                        r = read_file_whole(path, SBX_CONSOLE_FILE_BYTES, &f->data, &f->len);
                        if (r == -ENOENT)
                                r = 0;
                        else if (r < 0)
                                snprintf(err, errlen, "console: cannot read %s: %s", path, strerror(-r));
                }
                if (r == 0 && !f->data && f->required) {
                        snprintf(err, errlen, "console: %s/%s is missing (--console-dir)", o->dir, f->from[0]);
                        r = -ENOENT;
                } else if (r == 0 && !f->data) {
                        log_warn("console: %s/%s is missing: the console has no terminal (build.sh installs xterm.js "
                                 "with npm)", o->dir, f->from[0]);
                }
        }
        int fd;
        if (r == 0 && (r = connect(connect_data, &fd)) == 0)
                r = rpc_client_new(loop, fd, NULL, NULL, &c->rpc);
        else if (r == 0)
                snprintf(err, errlen, "console: cannot connect to the server: %s", strerror(-r));
        if (r < 0) {
                console_free(c);
                return r;
        }
        *ret = c;
        return 0;
}

Console *console_free(Console *c) {
        if (!c)
                return NULL;
        c->rpc = rpc_client_free(c->rpc);
        for (size_t i = 0; i < N_FILES; i++)
                free(c->files[i].data);
        if (c->token)
                explicit_bzero(c->token, strlen(c->token));
        free(c->token);
        free(c);
        return NULL;
}
