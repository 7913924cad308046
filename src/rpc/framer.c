/* SPDX-License-Identifier: MIT */
/* Bounded newline framing. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "base/limits.h"
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

long framer_feed(Framer *f, const uint8_t *data, size_t len, FrameFn fn, void *ud) {
        size_t used = 0;
        while (used < len) {
                const uint8_t *p = data + used;
                size_t left = len - used;
                const uint8_t *nl = memchr(p, '\n', left);
                size_t seg = nl ? (size_t)(nl - p) : left;
                bool go = true;
                if (f->skipping) {
                        /* discard */
                } else if (f->len + seg > f->max) {
                        f->skipping = true;
                        f->len = 0;
                        release_if_big(f);
                        go = fn(ud, NULL, 0, true);
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
                if (nl)
                        f->skipping = false;
                used += seg + (nl ? 1 : 0);
                if (!go)
                        break;
        }
        return (long)used;
}
