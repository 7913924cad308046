/* SPDX-License-Identifier: MIT */
/* libFuzzer target: the line framer (fed in small chunks, checked against the same input fed
 * whole), the request parser, method and parameter validation, and base64 round trips. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "base/text.h"
#include "rpc/framer.h"
#include "rpc/jsonrpc.h"
#include "methods/methods.h"
#include "server/server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct Trace {
        uint64_t hash;
        size_t lines, too_large;
        bool stop; /* ask the framer to stop after each line */
} Trace;

static bool on_line(void *ud, const char *line, size_t len, bool too_large) {
        Trace *t = ud;
        if (too_large) {
                t->too_large++;
                t->hash = t->hash * 31 + 7;
                return !t->stop;
        }
        t->lines++;
        for (size_t i = 0; i < len; i++)
                t->hash = (t->hash ^ (uint8_t)line[i]) * 1099511628211ULL;
        t->hash = t->hash * 31 + 1;

        RpcRequest q;
        RpcError e;
        int pr = rpc_parse_request(line, len, &q, &e);
        /* The parser's shortcut for a big params.data must mean exactly what jansson reads. */
        json_t *ref = json_loadb(line, len, JSON_REJECT_DUPLICATES, NULL);
        if ((ref != NULL) != (q.msg != NULL) || (ref && !json_equal(ref, q.msg)))
                abort();
        json_decref(ref);
        if (pr == 0) {
                (void)method_check(q.method, q.params, &e);
                const char *s;
                uint64_t v;
                bool b;
                json_t *o;
                (void)param_string(q.params, "command", false, &s, NULL, &e);
                (void)param_u64(q.params, "timeoutMs", false, 1000, &v, &e);
                (void)param_bool(q.params, "stream", &b, &e);
                (void)param_object(q.params, "env", &o, &e);
        }
        (void)rpc_request_wants_error(&q, &e);
        rpc_request_done(&q);

        size_t enc_len, dec_len;
        char *enc = b64_encode((const uint8_t *)line, len, &enc_len);
        uint8_t *dec = enc ? b64_decode(enc, enc_len, &dec_len) : NULL;
        if (enc && (!dec || dec_len != len || memcmp(dec, line, len) != 0))
                abort(); /* base64 must round-trip every byte string */
        free(enc);
        free(dec);
        (void)utf8_valid((const uint8_t *)line, len);
        uint8_t *junk = b64_decode(line, len, &dec_len);
        free(junk);
        return !t->stop;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        dispatch_set_methods(server_method_tables);
        Framer whole, chunked;
        Trace a = { 0 }, b = { 0 };
        framer_init(&whole, 256);
        framer_init(&chunked, 256);
        (void)framer_feed(&whole, data, size, on_line, &a);
        size_t step = size ? (size_t)data[0] % 13 + 1 : 1;
        for (size_t off = 0; off < size; off += step)
                (void)framer_feed(&chunked, data + off, size - off < step ? size - off : step, on_line, &b);
        /* A consumer that stops after every line and feeds the rest again sees the same. */
        Framer stopping;
        Trace c = { .stop = true };
        framer_init(&stopping, 256);
        for (size_t off = 0; off < size;) {
                long used = framer_feed(&stopping, data + off, size - off, on_line, &c);
                if (used <= 0 && off < size)
                        abort(); /* no progress */
                off += (size_t)used;
        }
        framer_done(&stopping);
        /* Framing must not depend on how reads split the stream. */
        if (a.hash != b.hash || a.lines != b.lines || a.too_large != b.too_large ||
            c.hash != a.hash || c.lines != a.lines || c.too_large != a.too_large)
                abort();
        framer_done(&whole);
        framer_done(&chunked);
        return 0;
}
