/* SPDX-License-Identifier: MIT */
/* A sandbox's ports through the door, as E2B's getHost(port) names them: a request whose Host
 * is PORT-ID.<domain> goes on to port PORT inside sandbox ID. The port is exposed once
 * (port.expose, on the door's connection, so only the daemon's uid and root may use the host
 * end) and the request is sent there with the loop's HTTP client; the answer streams back as
 * it comes, held back while the client reads slowly. Plain HTTP only: an Upgrade (WebSocket)
 * is refused. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/limits.h"
#include "base/util.h"
#include "e2b/e2b_private.h"
#include "http/forward.h"

/* envd's own port (49983) is envd, served by path. */
bool ports_route(E2bReq *q) {
        char id[64];
        unsigned port;
        return e2b_host_target(http_header(q->r, "Host"), &port, id) && port != E2B_ENVD_PORT;
}

static void forward_failed(void *ud, int error, const char *message) {
        E2bReq *q = ud;
        /* The exposed port accepts for the sandbox and resets when nothing listens inside. */
        bool nobody = error == -ECONNREFUSED || error == -ECONNRESET;
        e2b_reply_rest_error(q, 502, "port %u of sandbox %s: %s", q->port, q->box->id,
                             nobody ? "nothing listens on it (a server in the sandbox must listen on 0.0.0.0 or "
                                      "127.0.0.1)"
                                    : message);
}

static void forward(E2bReq *q, unsigned host_port) {
        char url[SBX_HTTP_FETCH_HEADER_BYTES];
        if (snprintf(url, sizeof url, "http://127.0.0.1:%u%s", host_port, http_uri(q->r)) >= (int)sizeof url)
                return e2b_reply_rest_error(q, 414, "the URI is too long to forward");
        q->fwd.failed = forward_failed;
        q->fwd.ud = q;
        int r = http_forward_start(&q->fwd, q->g->fetch, q->r, url, NULL, NULL);
        if (r < 0)
                e2b_reply_rest_error(q, 502, "cannot forward to port %u: %s", q->port, strerror(-r));
}

static unsigned cached(const E2bBox *b, unsigned port) {
        for (unsigned i = 0; i < b->n_ports; i++)
                if (b->port_in[i] == port)
                        return b->port_host[i];
        return 0;
}

static void exposed(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result) {
                const char *m = json_string_value(json_object_get(error, "message")) ?: "sbx error";
                return e2b_reply_rest_error(q, 502, "port %u of sandbox %s: %s", q->port, q->box->id, m);
        }
        json_int_t hp = json_integer_value(json_object_get(result, "port"));
        if (hp <= 0 || hp > 65535)
                return e2b_reply_rest_error(q, 502, "port.expose gave no port");
        /* Another request may have exposed it meanwhile: one entry per port. */
        if (!cached(q->box, q->port) && q->box->n_ports < SBX_E2B_MAX_PORTS) {
                q->box->port_in[q->box->n_ports] = (uint16_t)q->port;
                q->box->port_host[q->box->n_ports++] = (uint16_t)hp;
        }
        forward(q, (unsigned)hp);
}

static void listed(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        json_t *e;
        size_t i;
        json_array_foreach(json_object_get(result, "ports"), i, e)
                if (json_integer_value(json_object_get(e, "port")) == (json_int_t)q->port)
                        return exposed(q, json_pack("{s:O}", "port", json_object_get(e, "hostPort")), NULL);
        (void)rpc_client_call(q->g->rpc, "port.expose",
                              json_pack("{s:s, s:i}", "sandboxId", q->box->id, "port", (int)q->port), exposed, q);
}

void ports_request(E2bReq *q) {
        char id[64];
        (void)e2b_host_target(http_header(q->r, "Host"), &q->port, id);
        q->box = e2b_box_find(q->g, id);
        if (!q->box)
                return e2b_reply_rest_error(q, 502, "sandbox %s not found (killed, or it timed out)", id);
        if (http_header(q->r, "Upgrade"))
                return e2b_reply_rest_error(q, 501, "Upgrade (WebSocket) is not forwarded; plain HTTP is");
        unsigned hp = cached(q->box, q->port);
        if (hp)
                return forward(q, hp);
        (void)rpc_client_call(q->g->rpc, "port.list", json_pack("{s:s}", "sandboxId", q->box->id), listed, q);
}

void ports_drained(E2bReq *q) { http_forward_drained(&q->fwd); }

void ports_finished(E2bReq *q) { http_forward_cancel(&q->fwd); }
