/* SPDX-License-Identifier: MIT */
/* Handlers for exposed ports (port.*): a sandbox's TCP port reachable on the host's 127.0.0.1. */
#include <errno.h>
#include <stdbool.h>
#include "base/limits.h"
#include "base/macro.h"
#include "server/conn.h"
#include "server/handler.h"
#include "methods/methods.h"

/* The `port` param: 1 to 65535 (the dispatcher has checked it is a non-negative integer). */
static int param_port(Req *r, uint16_t *ret, RpcError *e) {
        json_int_t v = json_integer_value(json_object_get(r->params, "port"));
        if (v < 1 || v > 65535)
                return rpc_fail(e, RPC_INVALID_PARAMS, "port must be from 1 to 65535; got %" JSON_INTEGER_FORMAT, v);
        *ret = (uint16_t)v;
        return 0;
}

/* The host port of an exposed port, 0 when it is not exposed. */
static uint16_t host_port_of(SbxSandbox *sb, uint16_t port) {
        SbxPort v[SBX_MAX_PORTS];
        size_t n = MIN(sbx_port_list(sb, v, SBX_MAX_PORTS), (size_t)SBX_MAX_PORTS);
        for (size_t i = 0; i < n; i++)
                if (v[i].port == port)
                        return v[i].host_port;
        return 0;
}

static int m_port_expose(Req *r, json_t **ret, RpcError *e) {
        uint16_t port = 0, host_port = 0;
        bool public = false;
        if (param_port(r, &port, e) < 0 || param_bool(r->params, "public", &public, e) < 0)
                return -1;
        int rr = sbx_port_expose(r->sb->sb, port, &host_port);
        if (rr == -EEXIST)
                return rpc_fail(e, RPC_INVALID_PARAMS, "port %u is already exposed, on 127.0.0.1:%u", port,
                                host_port_of(r->sb->sb, port));
        if (rr == -EMFILE)
                return rpc_fail(e, RPC_WORKER_UNAVAILABLE, "LIMIT_EXCEEDED: this sandbox already exposes %u ports, the "
                                "most it may (unexpose one first)", SBX_MAX_PORTS);
        if (rr == -ESRCH)
                return rpc_fail(e, RPC_SANDBOX_ERROR, "ESRCH: the sandbox is gone: its ports cannot be exposed");
        if (rr < 0)
                return rpc_fail_errno(e, rr, "cannot expose the port");
        /* Only the client's own user (and root) may connect, unless it says anyone may. */
        if (!public)
                (void)sbx_port_set_owner(r->sb->sb, port, conn_uid(r->conn));
        *ret = json_pack("{s:s, s:i, s:b}", "host", "127.0.0.1", "port", (int)host_port, "public", public);
        return 0;
}

static int m_port_list(Req *r, json_t **ret, RpcError *e) {
        SbxPort v[SBX_MAX_PORTS];
        size_t n = MIN(sbx_port_list(r->sb->sb, v, SBX_MAX_PORTS), (size_t)SBX_MAX_PORTS);
        json_t *a = json_array();
        for (size_t i = 0; a && i < n; i++)
                json_array_append_new(a, json_pack("{s:i, s:s, s:i, s:o, s:i}", "port", (int)v[i].port, "host",
                                                   "127.0.0.1", "hostPort", (int)v[i].host_port, "ownerUid",
                                                   v[i].owner == (uid_t)-1 ? json_null() : json_integer(v[i].owner),
                                                   "refused", (int)v[i].refused));
        *ret = json_pack("{s:o}", "ports", a);
        return 0;
}

static int m_port_unexpose(Req *r, json_t **ret, RpcError *e) {
        uint16_t port = 0;
        if (param_port(r, &port, e) < 0)
                return -1;
        if (sbx_port_unexpose(r->sb->sb, port) < 0)
                return rpc_fail(e, RPC_INVALID_PARAMS, "port %u is not exposed", port);
        *ret = json_object();
        return 0;
}

static const Param p_port[] = { PARAM_SANDBOX_ID, { "port", P_INT, true, "the TCP port inside the sandbox, 1 to 65535" },
        { 0 } };
static const Param p_port_expose[] = {
        PARAM_SANDBOX_ID,
        { "port", P_INT, true, "the TCP port inside the sandbox, 1 to 65535" },
        { "public", P_BOOL, false, "any process of the host may connect, other users' and network \"host\" "
                                   "sandboxes' included (default false: only this client's uid and root)" },
        { 0 } };
_Static_assert(SBX_MAX_PORTS == 32 && SBX_MAX_PORT_CONNECTIONS == 256, "update port.expose's doc");

const Method server_methods_port[] = {
        { "port.expose", m_port_expose, M_SANDBOX, p_port_expose, "{host: \"127.0.0.1\", port: hostPort, public}",
          "Forwards a free port of the host's 127.0.0.1 (never another address) to 127.0.0.1:port in the sandbox's "
          "network namespace: each connection accepted there is connected to the sandbox's port (reset when nothing "
          "listens on it) and carried both ways until both sides are done. Nothing needs to listen yet. At most 32 "
          "ports per sandbox (-32001 LIMIT_EXCEEDED past it) and 256 connections at once per port (more are reset). "
          "A port already exposed: -32602. Everything closes with the sandbox. Who may connect: by default only "
          "processes of the uid of the client that exposed it (and root), the kernel telling whose each "
          "connecting socket is; a connection of another user's, or of a network \"host\" sandbox's, is reset at "
          "accept and counted (port.list's refused). public: true lets any process of the host connect." },
        { "port.list", m_port_list, M_SANDBOX, handler_params_sandbox, "{ports: [{port, host, hostPort, ownerUid, refused}]}",
          "The sandbox's exposed ports, in order of port." },
        { "port.unexpose", m_port_unexpose, M_SANDBOX, p_port, "{}",
          "Stops forwarding a port: its listening socket closes and its connections are reset. A port not exposed: "
          "-32602." },
        { 0 } };
