/* SPDX-License-Identifier: MIT */
/* A FIFO of bytes waiting for a slow writer (a client socket, our stdout): pushed at the
 * tail, consumed from the head, compacted before it grows. The owner bounds it (by pausing
 * its producers); the queue itself only grows on demand. */
#pragma once
#include <stddef.h>
#include <stdint.h>

/* Invariant: off <= len <= cap; the pending bytes are data[off, len). */
typedef struct ByteQueue {
        uint8_t *data;
        size_t off, len, cap;
} ByteQueue;

/* Appends n bytes. Returns 0 or -ENOMEM (then nothing was added). */
int bq_push(ByteQueue *q, const void *d, size_t n);
static inline size_t bq_pending(const ByteQueue *q) { return q->len - q->off; }
static inline const uint8_t *bq_head(const ByteQueue *q) { return q->data + q->off; }
/* Drops n bytes from the head (n <= bq_pending). */
void bq_consume(ByteQueue *q, size_t n);
/* Drops everything pending. */
void bq_clear(ByteQueue *q);
void bq_done(ByteQueue *q);
