/* SPDX-License-Identifier: MIT */
/* Bounded newline framing. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "base/limits.h"
#include "base/macro.h"
#include "rpc/framer.h"

void framer_init(Framer *f, size_t max) {
        *f = (Framer){ .max = max };
}

void framer_done(Framer *f) {
        free(f->buf);
        f->buf = NULL;
        f->len = f->cap = 0;
}

static int append(Framer *f, const uint8_t *d, size_t n) {
        if (f->len + n > f->cap) {
                size_t ncap = f->cap ? f->cap : 4096;
                while (ncap < f->len + n)
                        ncap *= 2;
                uint8_t *b = realloc(f->buf, ncap);
                if (!b)
                        return -ENOMEM;
                f->buf = b;
                f->cap = ncap;
        }
        memcpy(f->buf + f->len, d, n);
        f->len += n;
        return 0;
}

static void release_if_big(Framer *f) {
        /* One huge line must not pin its buffer for the connection's lifetime. */
        if (f->cap > SBX_FRAMER_KEEP_BYTES) {
                free(f->buf);
                f->buf = NULL;
                f->cap = 0;
        }
}

/* Keeps the last bytes of a skipped line. */
static void peek_tail(Framer *f, const uint8_t *p, size_t n) {
        if (n == 0)
                return; /* p may be NULL: a line held nothing yet */
        if (n >= SBX_FRAMER_PEEK_BYTES) {
                memcpy(f->tail, p + n - SBX_FRAMER_PEEK_BYTES, SBX_FRAMER_PEEK_BYTES);
                f->tail_len = SBX_FRAMER_PEEK_BYTES;
                return;
        }
        size_t keep = MIN(f->tail_len, SBX_FRAMER_PEEK_BYTES - n);
        memmove(f->tail, f->tail + f->tail_len - keep, keep);
        memcpy(f->tail + keep, p, n);
        f->tail_len = keep + n;
}

/* The line held so far (f->buf) and seg of p just went over the limit: its head is kept. */
static void peek_start(Framer *f, const uint8_t *p, size_t seg) {
        size_t from_buf = MIN(f->len, (size_t)SBX_FRAMER_PEEK_BYTES);
        if (from_buf)
                memcpy(f->head, f->buf, from_buf);
        size_t from_p = MIN(seg, SBX_FRAMER_PEEK_BYTES - from_buf);
        if (from_p)
                memcpy(f->head + from_buf, p, from_p);
        f->head_len = from_buf + from_p;
        f->tail_len = 0;
        peek_tail(f, f->buf, f->len);
        peek_tail(f, p, seg);
}

long framer_feed(Framer *f, const uint8_t *data, size_t len, FrameFn fn, void *ud) {
        size_t used = 0;
        while (used < len) {
                const uint8_t *p = data + used;
                size_t left = len - used;
                const uint8_t *nl = memchr(p, '\n', left);
                size_t seg = nl ? (size_t)(nl - p) : left;
                bool go = true;
                if (f->skipping) {
                        peek_tail(f, p, seg);
                } else if (f->len + seg > f->max) {
                        f->skipping = true;
                        peek_start(f, p, seg);
                        f->len = 0;
                        release_if_big(f);
                } else if (nl && f->len == 0) {
                        go = fn(ud, (const char *)p, seg, false);
                } else {
                        int r = append(f, p, seg);
                        if (r < 0)
                                return r;
                        if (nl) {
                                go = fn(ud, (const char *)f->buf, f->len, false);
                                f->len = 0;
                                release_if_big(f);
                        }
                }
                if (nl && f->skipping) {
                        f->skipping = false;
                        memcpy(f->peek, f->head, f->head_len);
                        f->peek[f->head_len] = 0;
                        if (f->tail_len)
                                memcpy(f->peek + f->head_len + 1, f->tail, f->tail_len);
                        go = fn(ud, (const char *)f->peek, f->head_len + 1 + f->tail_len, true);
                }
                used += seg + (nl ? 1 : 0);
                if (!go)
                        break;
        }
        return (long)used;
}
