/* SPDX-License-Identifier: MIT */
/* Byte FIFO. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "base/queue.h"

int bq_push(ByteQueue *q, const void *d, size_t n) {
        if (q->off == q->len)
                q->off = q->len = 0;
        if (q->len + n > q->cap) {
                if (q->off > 0) {
                        memmove(q->data, q->data + q->off, q->len - q->off);
                        q->len -= q->off;
                        q->off = 0;
                }
                size_t ncap = q->cap ? q->cap : 65536;
                while (ncap < q->len + n)
                        ncap *= 2;
                uint8_t *nd = realloc(q->data, ncap);
                if (!nd)
                        return -ENOMEM;
                q->data = nd;
                q->cap = ncap;
        }
        memcpy(q->data + q->len, d, n);
        q->len += n;
        return 0;
}

void bq_consume(ByteQueue *q, size_t n) {
        q->off += n;
        if (q->off >= q->len)
                q->off = q->len = 0;
}

void bq_clear(ByteQueue *q) {
        q->off = q->len = 0;
}

void bq_done(ByteQueue *q) {
        free(q->data);
        *q = (ByteQueue){ 0 };
}
