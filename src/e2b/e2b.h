/* SPDX-License-Identifier: MIT */
/* The E2B door (`sbx serve --http`): E2B's control plane (REST), its envd (the Connect
 * protocol's process and filesystem services, /files, /health) on one HTTP listener, so E2B's
 * own SDKs run against sbx unchanged. It is a client of the daemon's server like any other:
 * every E2B call becomes calls of sbx's protocol on connections the door opens (connect()). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/loop.h"
#include "http/http.h"

/* The version of envd this door speaks as: the SDK gates features on it, so it names only
 * what is served (closeStdin from 0.5.2, octet-stream uploads from 0.5.7; no file metadata,
 * 0.6.2; no watch includeEntry, 0.6.3). The cluster's gateway (kube/gateway.c) says the same
 * of the doors it forwards to. */
#define E2B_ENVD_VERSION "0.5.7"
#define E2B_ENVD_PORT 49983
#define E2B_TOKEN_HEX 32

typedef struct E2b E2b;

/* A new connection to the server: 0 and the door's end in *ret_fd, or -errno. */
typedef int (*E2bConnectFn)(void *data, int *ret_fd);

/* Another owner's routes on the door's listener (the operator console): a request that
 * route() claims (never one for a sandbox's port or envd by its Host) goes to ops, with data,
 * and never to E2B's routes. */
typedef struct E2bExtraRoutes {
        bool (*route)(void *data, HttpReq *r);
        const HttpOps *ops;
        void *data;
} E2bExtraRoutes;

typedef struct E2bOptions {
        const char *addr;             /* where to listen: "PORT", "HOST:PORT", "[V6]:PORT" */
        const char *const *api_keys;  /* NULL-terminated; none: any key, from loopback only */
        const E2bExtraRoutes *extra;  /* or NULL */
} E2bOptions;
/* The door's listener, for the extra routes' owner (its port, its address). */
HttpServer *e2b_http(const E2b *g);

/* Listens and serves. Returns 0, or -errno with err saying why. */
int e2b_new(Loop *loop, const E2bOptions *o, E2bConnectFn connect, void *connect_data, E2b **ret, char *err,
            size_t errlen);
E2b *e2b_free(E2b *g);
uint16_t e2b_port(const E2b *g);
/* A sandbox another door made (a Kubernetes pod's, kube/) served as if this one had: envd
 * calls for sandbox_id with token reach it. Returns 0 or -errno. */
int e2b_adopt(E2b *g, const char *sandbox_id, const char *token, const char *template_id);
void e2b_release(E2b *g, const char *sandbox_id);
/* Whether it listens on a loopback address only. */
bool e2b_loopback(const E2b *g);
