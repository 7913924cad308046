/* SPDX-License-Identifier: MIT */
/* JSON-RPC helpers on jansson. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/limits.h"
#include "base/text.h"
#include "rpc/jsonrpc.h"

int rpc_fail(RpcError *e, int code, const char *fmt, ...) {
        va_list ap;
        e->code = code;
        e->retry_after_ms = 0;
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

/* The line for msg (msg stays the caller's). */
static char *dump_keep(json_t *msg, size_t *ret_len) {
        if (!msg)
                return NULL;
        size_t need = json_dumpb(msg, NULL, 0, JSON_COMPACT);
        char *s = need ? malloc(need + 1) : NULL;
        if (s) {
                json_dumpb(msg, s, need, JSON_COMPACT);
                s[need] = '\n';
                *ret_len = need + 1;
        }
        return s;
}

/* The line for msg, which it releases. */
static char *dump_line(json_t *msg, size_t *ret_len) {
        char *s = dump_keep(msg, ret_len);
        json_decref(msg);
        return s;
}

/* Strings at least this long that need no escaping (base64: file data, archives) are copied
 * into the line as they are instead of going through jansson's encoder, which looks at every
 * character: a 1 MiB files.read answer costs a memcpy, not milliseconds. */
#define SPLICE_MIN 4096
#define SPLICE_PLACEHOLDER "\\u0001sbx-splice\\u0001"

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
/* Whether a word has a zero byte (the classic bit trick: exact, no false positive). */
static inline uint64_t has_zero(uint64_t v) { return (v - ONES) & ~v & HIGHS; }
/* Whether a word has a byte below b (b at most 0x80; exact for bytes below 0x80). */
static inline uint64_t has_less(uint64_t v, uint64_t b) { return (v - b * ONES) & ~v & HIGHS; }

/* Whether n bytes are printable ASCII with no '"' or '\\': what JSON takes as they are. Eight
 * bytes at a time: process output runs through here at hundreds of MB/s. */
static bool plain_ascii(const char *s, size_t n) {
        size_t i = 0;
        for (; i + 8 <= n; i += 8) {
                uint64_t w;
                memcpy(&w, s + i, 8);
                if ((w & HIGHS) || has_less(w, 0x20) || has_zero(w ^ ('"' * ONES)) || has_zero(w ^ ('\\' * ONES)) ||
                    has_zero(w ^ (0x7f * ONES)))
                        return false;
        }
        for (; i < n; i++) {
                unsigned char c = (unsigned char)s[i];
                if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\')
                        return false;
        }
        return true;
}

/* The line for msg whose `result` has the string `big` (taken out of it, owned by the
 * caller) put back in place of the placeholder; NULL if the placeholder is not found once. */
static char *splice_line(json_t *msg, json_t *big, size_t *ret_len) {
        size_t len;
        char *small = dump_keep(msg, &len);
        if (!small)
                return NULL;
        static const char ph[] = "\"" SPLICE_PLACEHOLDER "\"";
        char *at = memmem(small, len, ph, sizeof ph - 1);
        if (!at || memmem(at + 1, len - (size_t)(at + 1 - small), ph, sizeof ph - 1)) {
                free(small);
                return NULL;
        }
        size_t blen = json_string_length(big), head = (size_t)(at - small), tail = len - head - (sizeof ph - 1);
        char *out = malloc(head + blen + 2 + tail);
        if (out) {
                memcpy(out, small, head);
                out[head] = '"';
                memcpy(out + head + 1, json_string_value(big), blen);
                out[head + 1 + blen] = '"';
                memcpy(out + head + 2 + blen, at + sizeof ph - 1, tail);
                *ret_len = head + blen + 2 + tail;
        }
        free(small);
        return out;
}

/* Dumps m (stolen), whose member object `obj` may hold a long string that needs no escaping:
 * the longest such is spliced into the line as it is. */
static char *dump_spliced(json_t *m, json_t *obj, size_t *ret_len) {
        const char *key, *big_key = NULL;
        json_t *v, *big = NULL;
        json_object_foreach(obj, key, v) {
                if (json_is_string(v) && json_string_length(v) >= SPLICE_MIN &&
                    (!big || json_string_length(v) > json_string_length(big)) &&
                    plain_ascii(json_string_value(v), json_string_length(v))) {
                        big = v;
                        big_key = key;
                }
        }
        if (m && big) {
                json_incref(big);
                /* The placeholder is the string "\x01sbx-splice\x01", which jansson escapes. */
                if (json_object_set_new(obj, big_key, json_string("\001sbx-splice\001")) == 0) {
                        char *line = splice_line(m, big, ret_len);
                        if (line) {
                                json_decref(big);
                                json_decref(m);
                                return line;
                        }
                        (void)json_object_set(obj, big_key, big);
                }
                json_decref(big);
        }
        return dump_line(m, ret_len);
}

char *rpc_result_line(json_t *id, json_t *result, size_t *ret_len) {
        if (!result) {
                /* Building the result failed (memory, or text jansson refused): still answer. */
                RpcError e;
                rpc_fail(&e, RPC_INTERNAL_ERROR, "could not encode the result");
                return rpc_error_line(id, &e, ret_len);
        }
        json_t *m = json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id ? id : json_null(), "result", result);
        return dump_spliced(m, result, ret_len);
}

char *rpc_error_line(json_t *id, const RpcError *e, size_t *ret_len) {
        json_t *m = json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(),
                              "error", "code", e->code, "message", e->message);
        if (m && e->retry_after_ms)
                json_object_set_new(json_object_get(m, "error"), "data",
                                    json_pack("{s:I}", "retryAfterMs", (json_int_t)e->retry_after_ms));
        return dump_line(m, ret_len);
}

char *rpc_request_line(uint64_t id, const char *method, json_t *params, size_t *ret_len) {
        json_t *m = json_pack("{s:s, s:I, s:s, s:O}", "jsonrpc", "2.0", "id", (json_int_t)id, "method", method,
                              "params", params);
        char *line = dump_spliced(m, params, ret_len);
        json_decref(params);
        return line;
}

char *rpc_notification_line(const char *method, json_t *params, size_t *ret_len) {
        json_t *m = json_pack("{s:s, s:s, s:O}", "jsonrpc", "2.0", "method", method, "params", params);
        char *line = dump_spliced(m, params, ret_len);
        json_decref(params);
        return line;
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
        /* ASCII without NUL, the common case of output, is valid UTF-8: no second check. */
        size_t i = 0;
        for (uint64_t w; i + 8 <= len; i += 8) {
                memcpy(&w, data + i, 8);
                if ((w & HIGHS) || has_zero(w))
                        break;
        }
        while (i < len && data[i] > 0 && data[i] < 0x80)
                i++;
        if (i == len) {
                json_t *s = json_stringn_nocheck((const char *)data, len);
                return s && json_object_set_new(obj, key, s) == 0 ? 0 : -ENOMEM;
        }
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

/* ---- a large "data" string is kept out of jansson's parser
 *
 * files.write and persistence.import carry megabytes of base64 in params.data. jansson's
 * parser looks at each character of it and copies it twice; a scan that only skips over the
 * JSON structure finds that one string, and when it needs no unescaping it is cut out of the
 * text handed to jansson and put back as a string made without validation (it is plain
 * ASCII). Anything unusual (escapes, a syntax error) leaves the line to jansson alone. */
#ifndef BIG_STRING_MIN
#define BIG_STRING_MIN (64 * 1024) /* fuzz builds set it small, so that fuzzing reaches the scan */
#endif

typedef struct Scan {
        const char *p, *end;
} Scan;

static void scan_ws(Scan *s) {
        while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
                s->p++;
}

/* Skips a string; *plain says it has no escapes. Megabytes of base64 are skipped a memchr
 * at a time: only a quote can end the string, and a backslash before it decides. */
static bool scan_string(Scan *s, const char **start, size_t *len, bool *plain) {
        if (s->p >= s->end || *s->p != '"')
                return false;
        const char *b = ++s->p;
        bool esc = false;
        while (s->p < s->end) {
                const char *q = memchr(s->p, '"', (size_t)(s->end - s->p));
                const char *bs = memchr(s->p, '\\', (size_t)((q ? q : s->end) - s->p));
                if (!bs) {
                        s->p = q ? q : s->end;
                        break;
                }
                esc = true;
                s->p = bs + 2; /* the escaped character, a quote included, is skipped */
        }
        if (s->p > s->end)
                s->p = s->end;
        if (s->p >= s->end)
                return false;
        *start = b;
        *len = (size_t)(s->p - b);
        *plain = !esc;
        s->p++;
        return true;
}

static bool scan_value(Scan *s, unsigned depth) {
        const char *b;
        size_t n;
        bool plain;
        scan_ws(s);
        if (s->p >= s->end || depth > SBX_MAX_JSON_SCAN_DEPTH)
                return false;
        if (*s->p == '"')
                return scan_string(s, &b, &n, &plain);
        if (*s->p == '{' || *s->p == '[') {
                char close = *s->p == '{' ? '}' : ']';
                s->p++;
                scan_ws(s);
                if (s->p < s->end && *s->p == close) {
                        s->p++;
                        return true;
                }
                for (;;) {
                        if (close == '}') {
                                scan_ws(s);
                                if (!scan_string(s, &b, &n, &plain))
                                        return false;
                                scan_ws(s);
                                if (s->p >= s->end || *s->p++ != ':')
                                        return false;
                        }
                        if (!scan_value(s, depth + 1))
                                return false;
                        scan_ws(s);
                        if (s->p >= s->end)
                                return false;
                        if (*s->p == close) {
                                s->p++;
                                return true;
                        }
                        if (*s->p++ != ',')
                                return false;
                }
        }
        while (s->p < s->end && !strchr(",}] \t\r\n", *s->p))
                s->p++;
        return true;
}

/* Finds outer.data of a JSON object line: the span of its characters (quotes excluded). */
static bool find_big_data(const char *line, size_t len, const char *outer, const char **ret, size_t *ret_len) {
        Scan s = { line, line + len };
        const char *k, *v;
        size_t kn, vn, on = strlen(outer);
        bool plain;
        scan_ws(&s);
        if (s.p >= s.end || *s.p++ != '{')
                return false;
        for (;;) {
                scan_ws(&s);
                if (!scan_string(&s, &k, &kn, &plain))
                        return false;
                scan_ws(&s);
                if (s.p >= s.end || *s.p++ != ':')
                        return false;
                scan_ws(&s);
                if (kn == on && memcmp(k, outer, on) == 0 && s.p < s.end && *s.p == '{') {
                        s.p++;
                        for (;;) {
                                scan_ws(&s);
                                if (s.p < s.end && *s.p == '}')
                                        return false;
                                if (!scan_string(&s, &k, &kn, &plain))
                                        return false;
                                scan_ws(&s);
                                if (s.p >= s.end || *s.p++ != ':')
                                        return false;
                                scan_ws(&s);
                                if (kn == 4 && memcmp(k, "data", 4) == 0 && s.p < s.end && *s.p == '"') {
                                        if (!scan_string(&s, &v, &vn, &plain) || !plain || vn < BIG_STRING_MIN ||
                                            !plain_ascii(v, vn))
                                                return false;
                                        *ret = v;
                                        *ret_len = vn;
                                        return true;
                                }
                                if (!scan_value(&s, 1))
                                        return false;
                                scan_ws(&s);
                                if (s.p >= s.end || *s.p == '}' || *s.p++ != ',')
                                        return false;
                        }
                }
                if (!scan_value(&s, 1))
                        return false;
                scan_ws(&s);
                if (s.p >= s.end || *s.p++ != ',')
                        return false;
        }
}

/* A JSON scalar that can be an id (a string without escapes, a number, null) at s; NULL when
 * there is none whole before end. */
static json_t *id_token(Scan *s) {
        scan_ws(s);
        const char *b = s->p;
        if (s->p < s->end && *s->p == '"') {
                const char *q = memchr(s->p + 1, '"', (size_t)(s->end - s->p - 1));
                if (!q || memchr(s->p + 1, '\\', (size_t)(q - s->p - 1)))
                        return NULL;
                s->p = q + 1;
        } else {
                while (s->p < s->end && strchr("-+0123456789.eEnul", *s->p))
                        s->p++;
                if (s->p == s->end || s->p == b)
                        return NULL; /* a number cut by the end of what was kept may be longer */
        }
        json_t *v = json_loadb(b, (size_t)(s->p - b), JSON_DECODE_ANY, NULL);
        if (v && !json_is_string(v) && !json_is_integer(v) && !json_is_null(v)) {
                json_decref(v);
                v = NULL;
        }
        return v;
}

/* The id among the first members of the object that head starts. */
static json_t *id_in_head(const char *head, size_t n) {
        Scan s = { head, head + n };
        const char *k;
        size_t kn;
        bool plain;
        scan_ws(&s);
        if (s.p >= s.end || *s.p++ != '{')
                return NULL;
        for (;;) {
                scan_ws(&s);
                if (!scan_string(&s, &k, &kn, &plain))
                        return NULL;
                scan_ws(&s);
                if (s.p >= s.end || *s.p++ != ':')
                        return NULL;
                if (kn == 2 && memcmp(k, "id", 2) == 0)
                        return id_token(&s);
                /* Another member: skipped whole, or the head ends inside it. */
                if (!scan_value(&s, 1))
                        return NULL;
                scan_ws(&s);
                if (s.p >= s.end || *s.p++ != ',')
                        return NULL;
        }
}

/* The id that ends the object whose end tail is: `"id": 5}`, a member (after `,` or `{`). */
static json_t *id_at_end(const char *tail, size_t n) {
        const char *last = NULL;
        for (const char *p = tail; (p = memmem(p, (size_t)(tail + n - p), "\"id\"", 4)); p += 4)
                last = p;
        if (!last)
                return NULL;
        const char *before = last;
        while (before > tail && strchr(" \t\r", before[-1]))
                before--;
        if (before == tail || (before[-1] != ',' && before[-1] != '{'))
                return NULL;
        Scan s = { last + 4, tail + n };
        scan_ws(&s);
        if (s.p >= s.end || *s.p++ != ':')
                return NULL;
        json_t *v = id_token(&s);
        scan_ws(&s);
        if (v && s.p < s.end && *s.p == '}') {
                s.p++;
                scan_ws(&s);
                if (s.p == s.end)
                        return v;
        }
        json_decref(v);
        return NULL;
}

json_t *rpc_cut_line_id(const char *peek, size_t len) {
        const char *nul = memchr(peek, 0, len);
        if (!nul)
                return NULL;
        json_t *id = id_in_head(peek, (size_t)(nul - peek));
        if (!id)
                id = id_at_end(nul + 1, len - (size_t)(nul - peek) - 1);
        return id;
}

json_t *rpc_load_big(const char *line, size_t len, const char *outer, json_error_t *jerr) {
        const char *big = NULL;
        size_t big_len = 0;
        if (len >= BIG_STRING_MIN && find_big_data(line, len, outer, &big, &big_len)) {
                /* The same line with "data":"" in place of the big string. */
                size_t head = (size_t)(big - line), tail = len - head - big_len;
                char *cut = malloc(head + tail + 1);
                if (cut) {
                        memcpy(cut, line, head);
                        memcpy(cut + head, big + big_len, tail);
                        json_t *msg = json_loadb(cut, head + tail, JSON_REJECT_DUPLICATES, jerr);
                        free(cut);
                        json_t *o = msg ? json_object_get(msg, outer) : NULL;
                        json_t *data = o ? json_object_get(o, "data") : NULL;
                        if (data && json_is_string(data) && json_string_length(data) == 0 &&
                            json_object_set_new(o, "data", json_stringn_nocheck(big, big_len)) == 0)
                                return msg;
                        json_decref(msg);
                }
        }
        return json_loadb(line, len, JSON_REJECT_DUPLICATES, jerr);
}

int rpc_parse_request(const char *line, size_t len, RpcRequest *req, RpcError *e) {
        json_error_t jerr;
        *req = (RpcRequest){ 0 };
        req->msg = rpc_load_big(line, len, "params", &jerr);
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
