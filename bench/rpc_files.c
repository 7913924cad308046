/* SPDX-License-Identifier: MIT */
/* sbx-bench-rpc f: `files.write` of 1 MiB of random bytes (base64) to /home/user/bench.bin,
 * then `files.read` of it: request written -> answer line read, each; the bytes read back are
 * decoded (by a base64 decoder of this file's own, not the server's) and compared with those
 * written. Also the same through the C API (sbx_file_write + sbx_file_read), for comparison. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include "base/macro.h"
#include "rpc_benches.h"
#include "rpc_common.h"
#include "sbx/sbx.h"

/* Base64 (RFC 4648, with padding) of this program's own, so that the check does not trust
 * the server's codec. */
static const char b64_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Appends the encoding of d[0, n) at out (4 * ceil(n / 3) bytes, no NUL); returns its length. */
static size_t b64_put(char *out, const uint8_t *d, size_t n) {
        size_t o = 0, i = 0;
        for (; i + 3 <= n; i += 3) {
                uint32_t v = (uint32_t)d[i] << 16 | (uint32_t)d[i + 1] << 8 | d[i + 2];
                out[o++] = b64_chars[v >> 18];
                out[o++] = b64_chars[(v >> 12) & 63];
                out[o++] = b64_chars[(v >> 6) & 63];
                out[o++] = b64_chars[v & 63];
        }
        if (i < n) {
                uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0);
                out[o++] = b64_chars[v >> 18];
                out[o++] = b64_chars[(v >> 12) & 63];
                out[o++] = i + 1 < n ? b64_chars[(v >> 6) & 63] : '=';
                out[o++] = '=';
        }
        return o;
}

/* Decodes the string s into out (room for cap bytes). Returns the decoded length, or -1 on a
 * character outside the alphabet or past cap. */
static long b64_get(const char *s, uint8_t *out, size_t cap) {
        static int8_t val[256];
        if (!val['B']) {
                memset(val, -1, sizeof val);
                for (int i = 0; i < 64; i++)
                        val[(unsigned char)b64_chars[i]] = (int8_t)i;
        }
        uint32_t acc = 0;
        unsigned bits = 0;
        size_t o = 0;
        for (; *s; s++) {
                if (*s == '=')
                        continue;
                int v = val[(unsigned char)*s];
                if (v < 0)
                        return -1;
                acc = acc << 6 | (uint32_t)v;
                bits += 6;
                if (bits >= 8) {
                        bits -= 8;
                        if (o >= cap)
                                return -1;
                        out[o++] = (uint8_t)(acc >> bits);
                        acc &= (1u << bits) - 1;
                }
        }
        return (long)o;
}

static void fill_random(uint8_t *d, size_t n) {
        while (n > 0) {
                ssize_t k = getrandom(d, n, 0);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        bench_die("getrandom: %s", strerror(errno));
                d += k;
                n -= (size_t)k;
        }
}

static const char path[] = "/home/user/bench.bin";

typedef struct SocketTimes {
        Samples both, write, read;
        unsigned bad_write, bad_read, mismatch;
        char first_bad[300];
} SocketTimes;

/* One files.write of data (fresh random bytes, encoded before the clock starts) and a
 * files.read of it, checked; the times go to t when i is past the warm-up. */
static void socket_round(Client *c, unsigned i, uint8_t *data, uint8_t *back, char *params, char *req,
                         size_t req_size, SocketTimes *t) {
        size_t n = cfg.file_bytes;
        fill_random(data, n);
        int h = snprintf(params, 64, "{\"path\":\"%s\",\"data\":\"", path);
        memcpy(params + (size_t)h + b64_put(params + h, data, n), "\"}", 3);
        size_t len = 0;
        long id = client_format(c, req, req_size, &len, "files.write", params);
        if (id < 0)
                bench_die("files.write: the request does not fit its buffer");

        uint64_t t0 = bench_now_ns();
        client_write_or_die(c, req, len);
        _cleanup_(json_decrefp) json_t *w = client_wait(c, id);
        uint64_t t1 = c->t_line;
        if (!w)
                bench_die("no answer to files.write: the connection closed");
        if (answer_is_error(w) || !json_is_true(answer_get(w, "ok"))) {
                if (t->bad_write++ == 0)
                        answer_describe(t->first_bad, sizeof t->first_bad, w);
                return;
        }
        char rp[128];
        snprintf(rp, sizeof rp, "{\"path\":\"%s\"}", path);
        long rid = client_send_or_die(c, "files.read", rp);
        _cleanup_(json_decrefp) json_t *r = client_wait(c, rid);
        uint64_t t2 = c->t_line;
        if (!r)
                bench_die("no answer to files.read: the connection closed");
        long long size = -1;
        const char *d = answer_str(r, "data");
        if (answer_is_error(r) || !d || !answer_int(r, "size", &size)) {
                if (t->bad_read++ == 0)
                        answer_describe(t->first_bad, sizeof t->first_bad, r);
                return;
        }
        long got = b64_get(d, back, n + 16);
        if (size != (long long)n || got != (long)n || memcmp(back, data, n) != 0) {
                if (t->mismatch++ == 0)
                        snprintf(t->first_bad, sizeof t->first_bad, "read back %ld bytes (size %lld), %s", got, size,
                                 got == (long)n ? "contents differ" : "length differs");
                return;
        }
        if (i >= cfg.files_warmup) {
                samples_add(&t->both, bench_ms_between(t0, t2));
                samples_add(&t->write, bench_ms_between(t0, t1));
                samples_add(&t->read, bench_ms_between(t1, t2));
        }
}

/* For comparison, the file operations alone: the C API in this process, no JSON, no base64,
 * no socket. */
static void capi_rounds(uint8_t *data, Samples *capi, unsigned *bad_capi) {
        size_t n = cfg.file_bytes;
        SbxContext *ctx = NULL;
        SbxSandbox *sb = NULL;
        capi_sandbox_new(&ctx, &sb);
        /* The files API answers -EAGAIN until the root is built: turn the loop until then. */
        uint64_t deadline = bench_now_ns() + 10000000000ULL;
        while (!sbx_sandbox_ready(sb) && bench_now_ns() < deadline)
                (void)sbx_context_run_once(ctx, 10);
        for (unsigned i = 0; i < cfg.files_warmup + cfg.files_n; i++) {
                fill_random(data, n);
                _cleanup_free_ uint8_t *rd = NULL;
                size_t rlen = 0;
                uint64_t rsize = 0;
                uint64_t t0 = bench_now_ns();
                int k = sbx_file_write(sb, path, data, n, -1, false);
                if (k >= 0)
                        k = sbx_file_read(sb, path, 0, 0, &rd, &rlen, &rsize);
                uint64_t t1 = bench_now_ns();
                if (k < 0 || rlen != n || rsize != n || memcmp(rd, data, n) != 0)
                        (*bad_capi)++;
                else if (i >= cfg.files_warmup)
                        samples_add(capi, bench_ms_between(t0, t1));
        }
        sbx_sandbox_free(sb);
        sbx_context_free(ctx);
}

void bench_files(Client *ctl) {
        size_t n = cfg.file_bytes;
        size_t b64_len = 4 * ((n + 2) / 3);
        size_t req_size = b64_len + 256;
        _cleanup_free_ uint8_t *data = malloc(n);
        _cleanup_free_ uint8_t *back = malloc(n + 16);
        _cleanup_free_ char *params = malloc(req_size);
        _cleanup_free_ char *req = malloc(req_size);
        if (!data || !back || !params || !req)
                bench_die("out of memory");

        Client c;
        rpc_open_with_sandbox(&c);
        SocketTimes t = { 0 };
        bench_progress("f: %u × files.write + files.read of %zu bytes (+%u warm-up)", cfg.files_n, n, cfg.files_warmup);
        for (unsigned i = 0; i < cfg.files_warmup + cfg.files_n; i++)
                socket_round(&c, i, data, back, params, req, req_size, &t);
        client_close(&c);
        (void)wait_no_sandboxes(ctl, 10000);

        Samples capi = { 0 };
        unsigned bad_capi = 0;
        capi_rounds(data, &capi, &bad_capi);

        Summary xb = summarize(&t.both), xw = summarize(&t.write), xr = summarize(&t.read), xc = summarize(&capi);
        if (t.first_bad[0])
                bench_note("f: first failure: %s", t.first_bad);
        row_add("f_rw", "`files.write` + `files.read` of 1 MiB over the socket (write request written → read response read)",
                &xb, "random bytes, base64; read back decoded and compared: %u write errors, %u read errors, %u mismatches",
                t.bad_write, t.bad_read, t.mismatch);
        row_add("f_write", "  of which `files.write` (request written → response read)", &xw, "request line %zu bytes",
                b64_len + 100);
        row_add("f_read", "  of which `files.read` (request written → response line read)", &xr, "%s", "");
        row_add("f_capi", "the same through the C API: sbx_file_write + sbx_file_read (no JSON, base64, socket)", &xc,
                "compared each time; %u failed", bad_capi);
        samples_free(&t.both);
        samples_free(&t.write);
        samples_free(&t.read);
        samples_free(&capi);
}

void files_targets(void) {
        const Row *fr = row_find("f_rw");
        if (fr)
                printf("| `files.write` then `files.read` of 1 MiB over the socket ≤ 10 ms (p50) | p50 %.2f ms, p90 %.2f ms, "
                       "p99 %.2f ms, max %.2f ms (N %zu) | %s%s |\n",
                       fr->s.p50, fr->s.p90, fr->s.p99, fr->s.max, fr->s.n, bench_verdict(true, fr->s.p50 <= 10),
                       fr->s.p50 <= 10 && fr->s.p99 > 10 ? " at p50, not at p99" : "");
        else
                printf("| `files.write` then `files.read` of 1 MiB over the socket ≤ 10 ms | – | not measured |\n");
}
