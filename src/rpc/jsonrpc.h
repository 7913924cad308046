/* SPDX-License-Identifier: MIT */
/* JSON-RPC 2.0 vocabulary: error codes, message builders, typed parameter access. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
        RPC_PARSE_ERROR = -32700,
        RPC_INVALID_REQUEST = -32600,
        RPC_METHOD_NOT_FOUND = -32601,
        RPC_INVALID_PARAMS = -32602,
        RPC_INTERNAL_ERROR = -32603,
        /* A cap of the server was reached (sandboxes per server, runs queued per session);
         * retry later. The predecessor's WORKER_UNAVAILABLE. */
        RPC_WORKER_UNAVAILABLE = -32001,
        /* The server runs with --mode disabled: nothing is executed; ping and health answer. */
        RPC_SANDBOX_DISABLED = -32002,
        /* The server is shutting down: no new work; queued requests are answered with it. */
        RPC_SHUTTING_DOWN = -32003,
        /* process.wait: the process ended before the condition held. */
        RPC_PROCESS_ENDED = -32010,
        /* process.wait: timeoutMs passed first. */
        RPC_WAIT_TIMEOUT = -32011,
        /* A sandbox or file operation failed; the message starts with the errno name. */
        RPC_SANDBOX_ERROR = 1,
};

typedef struct RpcError {
        int code;
        char message[512];
        /* WORKER_UNAVAILABLE: when to try again, sent as error.data.retryAfterMs; 0: not sent. */
        uint64_t retry_after_ms;
} RpcError;

/* Sets e and returns -1, for `return rpc_fail(e, ...)`. */
int rpc_fail(RpcError *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "ENOENT: No such file or directory" style error from a -errno. */
int rpc_fail_errno(RpcError *e, int neg_errno, const char *what);

/* Serialises {"jsonrpc":"2.0","id":id,"result":result} (steals result) to a compact line
 * with a trailing newline; NULL on allocation failure. */
char *rpc_result_line(json_t *id, json_t *result, size_t *ret_len);
char *rpc_error_line(json_t *id, const RpcError *e, size_t *ret_len);
/* A notification {"jsonrpc":"2.0","method":m,"params":params} (steals params). */
char *rpc_notification_line(const char *method, json_t *params, size_t *ret_len);
/* A request line, for a client (params stolen; a long plain string in it spliced, not escaped
 * character by character). */
char *rpc_request_line(uint64_t id, const char *method, json_t *params, size_t *ret_len);

/* One request line, parsed and checked for JSON-RPC 2.0 shape. */
typedef struct RpcRequest {
        json_t *msg;        /* the whole message (owned), NULL if unparseable */
        json_t *id;         /* borrowed from msg; NULL for notifications or broken ids */
        bool has_id;        /* the message carries an "id" member */
        const char *method; /* borrowed from msg */
        json_t *params;     /* owned: the params object, or a new empty one */
} RpcRequest;

/* Parses a line. Returns 0, or -1 with e set (-32700 parse error, -32600 invalid request,
 * -32602 params not an object); req is filled as far as possible either way and must be
 * released with rpc_request_done(). */
int rpc_parse_request(const char *line, size_t len, RpcRequest *req, RpcError *e);
/* json_loadb of a JSON object line (duplicates rejected), but a long plain string at
 * outer.data (params.data of a request, result.data of an answer: megabytes of base64) is
 * taken without jansson's character-by-character parse and copies. */
json_t *rpc_load_big(const char *line, size_t len, const char *outer, json_error_t *jerr);
/* The id of a request line too long to keep, from what the framer kept of it (its head, a
 * NUL, its tail): the id member among the object's first ones, or the one that ends it
 * (clients put it first or last). NULL when neither says (the answer then has id null). */
json_t *rpc_cut_line_id(const char *peek, size_t len);
void rpc_request_done(RpcRequest *req);
/* True when an error about this request must be answered (it has an id, or it was too broken
 * to tell: JSON-RPC answers those with id null). */
bool rpc_request_wants_error(const RpcRequest *req, const RpcError *e);

/* Typed parameter access. Each returns 1 if present, 0 if absent (and not required), or -1
 * with e set (-32602 naming the param) if of the wrong type or required and missing. */
int param_string(json_t *params, const char *key, bool required, const char **ret, size_t *ret_len, RpcError *e);
int param_u64(json_t *params, const char *key, bool required, uint64_t max, uint64_t *ret, RpcError *e);
int param_bool(json_t *params, const char *key, bool *ret, RpcError *e);
int param_object(json_t *params, const char *key, json_t **ret, RpcError *e);

/* Bytes as a JSON string if valid UTF-8, else base64 with "<key>Encoding": "base64" set on
 * obj. Returns 0 or -ENOMEM. */
int json_set_bytes(json_t *obj, const char *key, const uint8_t *data, size_t len);
