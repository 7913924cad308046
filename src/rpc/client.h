/* SPDX-License-Identifier: MIT */
/* A JSON-RPC client in the daemon's loop, on one end of a connection to the daemon's own
 * server (server_connect): a door (E2B's, the Kubernetes node) speaks sbx's protocol like any
 * other client, so every check, limit, lane and audit line applies to it as to them.
 *
 * Each call's answer reaches its callback once (the result or the error, borrowed for the
 * call); notifications go to the client's notify callback. A client whose server end closed
 * answers every waiting call with an error and every later one at once. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/loop.h"

typedef struct RpcClient RpcClient;

/* result is NULL on an error; error is then {code, message}. Both borrowed. */
typedef void (*RpcAnswerFn)(void *ud, json_t *result, json_t *error);
typedef void (*RpcNotifyFn)(void *ud, const char *method, json_t *params);

/* Takes fd (closed by rpc_client_free). notify may be NULL. Returns 0 or -errno. */
int rpc_client_new(Loop *loop, int fd, RpcNotifyFn notify, void *ud, RpcClient **ret);
RpcClient *rpc_client_free(RpcClient *c);
/* Sends method(params) (params stolen; NULL: {}). fn(ud, ...) is called once, never from
 * inside this call. Returns 0 or -ENOMEM. */
int rpc_client_call(RpcClient *c, const char *method, json_t *params, RpcAnswerFn fn, void *ud);
/* The same with fd (borrowed: a duplicate is held until sent) sent along with the request's
 * line (SCM_RIGHTS), as files.write's dataFd and files.read's toFd want. The fd's contents are
 * the server's to read or write until the call is answered. Returns 0, -ENOMEM or -EMFILE. */
int rpc_client_call_fd(RpcClient *c, const char *method, json_t *params, int fd, RpcAnswerFn fn, void *ud);
/* Calls whose ud is ud are answered to nobody (their requester went away). */
void rpc_client_forget(RpcClient *c, void *ud);
/* Stops reading the server's lines (and lets the server's own back-pressure hold what it
 * sends) until resumed: for a stream whose HTTP client reads slowly. */
void rpc_client_pause(RpcClient *c, bool paused);
