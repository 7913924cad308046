/* SPDX-License-Identifier: MIT */
/* The operator console and the Prometheus endpoint on the daemon's HTTP listener (`sbx serve
 * --http`): GET /metrics (the server's figures and each sandbox's last sample, as Prometheus'
 * text format), and /console/: a page (its files read once at start from the console's
 * directory, xterm.js among them) that speaks the daemon's own protocol through two routes,
 * one call at a time (/console/api/rpc, a table of the methods it may call) and a stream of
 * notifications as server-sent events (/console/api/stream). It is a client of the server
 * like the E2B door, on connections of the operator's (server_connect_operator): it sees
 * every sandbox.
 *
 * The page's files are public (they hold nothing of the daemon's); its API and /metrics ask
 * for the console's token as `Authorization: Bearer`, which the page keeps in the tab's
 * sessionStorage (given once as #token= in the address), never in a cookie. Calls also need
 * the header X-Sbx-Console and no foreign Origin; on a loopback listener every route answers
 * only to loopback's names (no DNS rebinding). */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/loop.h"
#include "http/http.h"

typedef struct Console Console;

/* A new operator connection to the server: 0 and the console's end in *ret_fd, or -errno. */
typedef int (*ConsoleConnectFn)(void *data, int *ret_fd);

typedef struct ConsoleOptions {
        const char *token; /* what every request must show (copied) */
        const char *dir;   /* the page's files: index.html, console.js, console.css, xterm's */
        bool metrics_no_sandboxes; /* /metrics without per-sandbox series */
} ConsoleOptions;

/* Reads the page's files and connects. Returns 0, or -errno with err saying why. */
int console_new(Loop *loop, const ConsoleOptions *o, ConsoleConnectFn connect, void *connect_data, Console **ret,
                char *err, size_t errlen);
Console *console_free(Console *c);
/* The listener it is served on (its port; whether it listens on loopback only, where only
 * loopback's names for it are answered). */
void console_set_listener(Console *c, uint16_t port, bool loopback);
/* For the listener's owner: whether a request is the console's (by its path), and the ops
 * that serve it, with c as their data. */
bool console_route(void *c, HttpReq *r);
extern const HttpOps console_http_ops;

/* /metrics' text from server.metrics' answer (a Prometheus text exposition, format 0.0.4);
 * malloc'd, NULL when out of memory. Exposed for the unit test. */
char *console_metrics_text(json_t *snapshot, bool per_sandbox, size_t *ret_len);
