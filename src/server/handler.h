/* SPDX-License-Identifier: MIT */
/* The contract between the dispatcher and the handler files: the request a handler gets, the
 * rows of the method table, and helpers more than one handler file needs.
 *
 * The method table is the single source for dispatch, parameter validation and
 * docs/PROTOCOL.md. Each handler file (m_*.c) defines its own rows as one array ending with a
 * row whose name is NULL; dispatch.c lists those arrays. Before a handler runs, the dispatcher
 * has checked that every param is in the row's list, that every present one has its type and
 * every required one is there, and (M_SANDBOX) resolved r->sb. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include "rpc/jsonrpc.h"
#include "server/conn.h"
#include "server/core.h"

typedef struct Req {
        Core *core;
        Conn *conn;
        json_t *id;
        json_t *params; /* always an object */
        SrvSandbox *sb; /* resolved for M_SANDBOX methods */
} Req;

/* Returns 0 with *ret set (answered now), 1 when the handler answers later, -1 with e set. */
typedef int (*Handler)(Req *r, json_t **ret, RpcError *e);

typedef enum ParamType { P_STRING, P_INT, P_BOOL, P_OBJECT, P_ANY } ParamType;

typedef struct Param {
        const char *name;
        ParamType type;
        bool required;
        const char *doc;
} Param;

enum {
        M_SANDBOX = 1, /* takes sandboxId and needs a sandbox */
        M_LANE = 2,    /* sets a worker going: holds a lane slot until answered (lane.h) */
        M_ASLEEP = 4,  /* with M_SANDBOX: needs none of a parked sandbox's fds (no wake) */
};

typedef struct Method {
        const char *name;
        Handler fn;
        unsigned flags;
        const Param *params; /* ends with a row whose name is NULL */
        const char *result;
        const char *doc;
} Method;

#define PARAM_SANDBOX_ID { "sandboxId", P_STRING, false, "target sandbox; missing or null: the connection's root sandbox" }
#define PARAM_SESSION { "session", P_STRING, false, "session name (default \"default\"), created on first use" }

/* Param lists of several methods: none; only sandboxId. */
extern const Param handler_params_none[];
extern const Param handler_params_sandbox[];

/* {ok: true} */
json_t *handler_ok_json(void);
/* A process's name on the wire, "p<id>" (SbxProcessInfo.id), written into buf; returns buf. */
#define HANDLER_PROCESS_ID_MAX 24
const char *handler_process_id(uint64_t id, char buf[static HANDLER_PROCESS_ID_MAX]);
/* A wall-clock time in ms as an ISO 8601 UTC string. */
json_t *handler_time_json(uint64_t wall_ms);
/* The request's `session` param, "default" when absent. */
const char *handler_session_name(const Req *r);
/* The session name of r's sandbox, created if it does not exist. Returns 0 or -1 with e set
 * (-32602 for an invalid name, -32001 at SBX_MAX_SESSIONS). */
int handler_open_session(Req *r, const char *name, SbxSession **ret, RpcError *e);
/* An {NAME: value} object as a NULL-terminated "NAME=value" list (NULL for env NULL), freed
 * with handler_env_free. Returns 0 or -1 with e set (-32602 naming a bad entry). */
int handler_env_list(json_t *env, const char ***ret, RpcError *e);
void handler_env_free(const char **list);
/* The `leftovers` param ("keep" or "kill") into *ret; absent leaves it as it is.
 * Returns 0 or -1 with e set (-32602). */
int handler_leftovers(json_t *params, SbxLeftovers *ret, RpcError *e);
/* The `whilePaused` param: "wait" (the default: the request waits for sandbox.resume) or
 * "refuse" (a paused sandbox fails it at once). Returns 0, or -1 with e set: -32602 for a bad
 * value, RPC_SANDBOX_ERROR for a refusal. */
int handler_while_paused(Req *r, RpcError *e);
#define PARAM_WHILE_PAUSED { "whilePaused", P_STRING, false, "\"wait\" (default): on a paused sandbox, wait for sandbox.resume; \"refuse\": fail at once" }
#define PARAM_LEFTOVERS(what) { "leftovers", P_STRING, false, "\"keep\" or \"kill\": what " what " leaves running is killed when it ends (kill) or keeps running as a background process (keep)" }

/* create and sandbox.create: puts the server's configuration into r->params (`sbx serve
 * --config`): [sandbox.enforced] params (a request may leave them out or give the same; of an
 * object, each key), [sandbox] defaults (for what the request leaves out; of an object, each
 * key) and [secrets] (added; a request may not give one of the same name). Returns 0 or -1
 * with e set (-32602 naming the param). */
int handler_create_config(Req *r, RpcError *e);
