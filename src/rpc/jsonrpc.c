/* SPDX-License-Identifier: MIT */
/* JSON-RPC helpers on jansson. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/text.h"
#include "rpc/jsonrpc.h"

int rpc_fail(RpcError *e, int code, const char *fmt, ...) {
        va_list ap;
        e->code = code;
        va_start(ap, fmt);
        vsnprintf(e->message, sizeof e->message, fmt, ap);
        va_end(ap);
        /* Messages quote client and sandbox text, cut at a byte limit: keep them valid
         * UTF-8, or the answer could not be encoded at all. */
        utf8_sanitize(e->message);
        return -1;
}

int rpc_fail_errno(RpcError *e, int neg_errno, const char *what) {
        int err = neg_errno < 0 ? -neg_errno : EIO;
        const char *name = strerrorname_np(err);
        if (what && *what)
                return rpc_fail(e, RPC_SANDBOX_ERROR, "%s: %s: %s", name ? name : "EIO", strerror(err), what);
        return rpc_fail(e, RPC_SANDBOX_ERROR, "%s: %s", name ? name : "EIO", strerror(err));
}

static char *dump_line(json_t *msg, size_t *ret_len) {
        if (!msg)
                return NULL;
        size_t need = json_dumpb(msg, NULL, 0, JSON_COMPACT);
        char *s = need ? malloc(need + 1) : NULL;
        if (s) {
                json_dumpb(msg, s, need, JSON_COMPACT);
                s[need] = '\n';
                *ret_len = need + 1;
        }
        json_decref(msg);
        return s;
}

char *rpc_result_line(json_t *id, json_t *result, size_t *ret_len) {
        if (!result) {
                /* Building the result failed (memory, or text jansson refused): still answer. */
                RpcError e;
                rpc_fail(&e, RPC_INTERNAL_ERROR, "could not encode the result");
                return rpc_error_line(id, &e, ret_len);
        }
        json_t *m = json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id ? id : json_null(), "result", result);
        return dump_line(m, ret_len);
}

char *rpc_error_line(json_t *id, const RpcError *e, size_t *ret_len) {
        json_t *m = json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(),
                              "error", "code", e->code, "message", e->message);
        return dump_line(m, ret_len);
}

char *rpc_notification_line(const char *method, json_t *params, size_t *ret_len) {
        json_t *m = json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method", method, "params", params);
        return dump_line(m, ret_len);
}

int param_string(json_t *params, const char *key, bool required, const char **ret, size_t *ret_len, RpcError *e) {
        json_t *v = params ? json_object_get(params, key) : NULL;
        if (!v || json_is_null(v)) {
                if (required)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "Missing required param: %s", key);
                return 0;
        }
        if (!json_is_string(v))
                return rpc_fail(e, RPC_INVALID_PARAMS, "%s must be a string", key);
        *ret = json_string_value(v);
        if (ret_len)
                *ret_len = json_string_length(v);
        return 1;
}

int param_u64(json_t *params, const char *key, bool required, uint64_t max, uint64_t *ret, RpcError *e) {
        json_t *v = params ? json_object_get(params, key) : NULL;
        if (!v || json_is_null(v)) {
                if (required)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "Missing required param: %s", key);
                return 0;
        }
        if (!json_is_integer(v) || json_integer_value(v) < 0)
                return rpc_fail(e, RPC_INVALID_PARAMS, "%s must be a non-negative integer", key);
        if ((uint64_t)json_integer_value(v) > max)
                return rpc_fail(e, RPC_INVALID_PARAMS, "%s must be at most %llu", key, (unsigned long long)max);
        *ret = (uint64_t)json_integer_value(v);
        return 1;
}

int param_bool(json_t *params, const char *key, bool *ret, RpcError *e) {
        json_t *v = params ? json_object_get(params, key) : NULL;
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_boolean(v))
                return rpc_fail(e, RPC_INVALID_PARAMS, "%s must be a boolean", key);
        *ret = json_is_true(v);
        return 1;
}

int param_object(json_t *params, const char *key, json_t **ret, RpcError *e) {
        json_t *v = params ? json_object_get(params, key) : NULL;
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_object(v))
                return rpc_fail(e, RPC_INVALID_PARAMS, "%s must be an object", key);
        *ret = v;
        return 1;
}

int json_set_bytes(json_t *obj, const char *key, const uint8_t *data, size_t len) {
        if (!data || len == 0)
                return json_object_set_new(obj, key, json_string("")) == 0 ? 0 : -ENOMEM;
        if (utf8_valid(data, len)) {
                json_t *s = json_stringn((const char *)data, len);
                return s && json_object_set_new(obj, key, s) == 0 ? 0 : -ENOMEM;
        }
        size_t n;
        char *b = b64_encode(data, len, &n);
        if (!b)
                return -ENOMEM;
        char enc[128];
        snprintf(enc, sizeof enc, "%sEncoding", key);
        json_t *s = json_stringn(b, n);
        free(b);
        if (!s || json_object_set_new(obj, key, s) < 0 || json_object_set_new(obj, enc, json_string("base64")) < 0)
                return -ENOMEM;
        return 0;
}

int rpc_parse_request(const char *line, size_t len, RpcRequest *req, RpcError *e) {
        json_error_t jerr;
        *req = (RpcRequest){ 0 };
        req->msg = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!req->msg)
                return rpc_fail(e, RPC_PARSE_ERROR, "Parse error: %s", jerr.text);
        if (!json_is_object(req->msg))
                return rpc_fail(e, RPC_INVALID_REQUEST, "Invalid Request: not an object");
        json_t *id = json_object_get(req->msg, "id");
        req->has_id = id != NULL;
        if (id && (json_is_string(id) || json_is_integer(id) || json_is_null(id)))
                req->id = id;
        json_t *ver = json_object_get(req->msg, "jsonrpc");
        req->method = json_string_value(json_object_get(req->msg, "method"));
        if (!json_is_string(ver) || strcmp(json_string_value(ver), "2.0") != 0 || !req->method ||
            (id && !req->id))
                return rpc_fail(e, RPC_INVALID_REQUEST,
                                "Invalid Request: need {\"jsonrpc\": \"2.0\", \"method\": string, \"id\": string|integer}");
        json_t *params = json_object_get(req->msg, "params");
        if (params && !json_is_object(params) && !json_is_null(params))
                return rpc_fail(e, RPC_INVALID_PARAMS, "params must be an object");
        req->params = params && json_is_object(params) ? json_incref(params) : json_object();
        return req->params ? 0 : rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
}

void rpc_request_done(RpcRequest *req) {
        json_decref(req->params);
        json_decref(req->msg);
        *req = (RpcRequest){ 0 };
}

bool rpc_request_wants_error(const RpcRequest *req, const RpcError *e) {
        return !req->msg || !json_is_object(req->msg) || req->has_id || e->code == RPC_INVALID_REQUEST;
}
