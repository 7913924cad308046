/* SPDX-License-Identifier: MIT */
/* Capped buffers and rings. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "base/macro.h"
#include "base/buf.h"

void buf_init(Buf *b, size_t limit) {
        *b = (Buf){ .limit = limit };
}

static int grow(Buf *b, size_t need) {
        size_t ncap = b->cap ? b->cap : 4096;
        while (ncap < need)
                ncap *= 2;
        if (ncap > b->limit)
                ncap = b->limit;
        uint8_t *n = realloc(b->data, ncap);
        if (!n)
                return -ENOMEM;
        b->data = n;
        b->cap = ncap;
        return 0;
}

long buf_reserve(Buf *b, size_t want) {
        size_t room = b->limit - b->len;
        if (want > room)
                want = room;
        if (want == 0)
                return 0;
        if (b->len + want > b->cap && grow(b, b->len + want) < 0)
                return -ENOMEM;
        return (long)MIN(want, b->cap - b->len);
}

void buf_commit(Buf *b, size_t n) {
        b->len += n;
}

void buf_drop(Buf *b, size_t n) {
        b->truncated = true;
        b->dropped += n;
}

int buf_append(Buf *b, const void *data, size_t len) {
        size_t room = b->limit - b->len;
        size_t take = len < room ? len : room;
        if (take < len) {
                b->truncated = true;
                b->dropped += len - take;
        }
        if (take == 0)
                return 0;
        if (b->len + take > b->cap && grow(b, b->len + take) < 0)
                return -ENOMEM;
        memcpy(b->data + b->len, data, take);
        b->len += take;
        return 0;
}

uint8_t *buf_steal(Buf *b, size_t *ret_len) {
        uint8_t *d = b->data;
        *ret_len = b->len;
        b->data = NULL;
        b->len = b->cap = 0;
        return d;
}

void buf_done(Buf *b) {
        free(b->data);
        b->data = NULL;
        b->len = b->cap = 0;
}

int ring_init(Ring *r, size_t cap) {
        *r = (Ring){ .cap = cap };
        r->data = malloc(cap);
        return r->data ? 0 : -ENOMEM;
}

void ring_append(Ring *r, const void *data, size_t len) {
        const uint8_t *p = data;
        r->total += len;
        if (len >= r->cap) {
                memcpy(r->data, p + len - r->cap, r->cap);
                r->start = 0;
                r->len = r->cap;
                return;
        }
        for (size_t i = 0; i < len;) {
                size_t end = (r->start + r->len) % r->cap;
                size_t chunk = r->cap - end;
                if (chunk > len - i)
                        chunk = len - i;
                memcpy(r->data + end, p + i, chunk);
                i += chunk;
                r->len += chunk;
                if (r->len > r->cap) {
                        r->start = (r->start + (r->len - r->cap)) % r->cap;
                        r->len = r->cap;
                }
        }
}

size_t ring_copy(const Ring *r, uint8_t *out) {
        size_t first = r->cap - r->start;
        if (first > r->len)
                first = r->len;
        memcpy(out, r->data + r->start, first);
        memcpy(out + first, r->data, r->len - first);
        return r->len;
}

void ring_done(Ring *r) {
        free(r->data);
        r->data = NULL;
}
