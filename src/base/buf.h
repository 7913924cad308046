/* SPDX-License-Identifier: MIT */
/* Byte buffers with a hard cap (command output) and a ring that keeps the newest bytes
 * (background log). Neither ever grows past its cap. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Invariant: len <= cap <= limit; bytes offered past limit are counted in `dropped` and set
 * `truncated`, never stored. */
typedef struct Buf {
        uint8_t *data;
        size_t len, cap, limit;
        uint64_t dropped;
        bool truncated;
} Buf;

void buf_init(Buf *b, size_t limit);
/* Appends what fits under the limit. Returns 0 or -ENOMEM (then nothing was stored). */
int buf_append(Buf *b, const void *data, size_t len);
/* Makes room for up to `want` more bytes (never past the limit) and returns how many can be
 * written at b->data + b->len: 0 at the cap, -ENOMEM if it cannot grow. */
long buf_reserve(Buf *b, size_t want);
/* Counts n bytes written into the reserved room. */
void buf_commit(Buf *b, size_t n);
/* Counts n bytes that were offered past the cap and thrown away. */
void buf_drop(Buf *b, size_t n);
/* Gives the bytes to the caller (malloc'd, may be NULL when empty); the buffer is reset. */
uint8_t *buf_steal(Buf *b, size_t *ret_len);
void buf_done(Buf *b);

/* Invariant: len <= cap; start indexes the oldest byte. */
typedef struct Ring {
        uint8_t *data;
        size_t cap, start, len;
        uint64_t total;
} Ring;

int ring_init(Ring *r, size_t cap);
void ring_append(Ring *r, const void *data, size_t len);
/* Copies the ring's contents, oldest first, into out (at least r->len bytes). */
size_t ring_copy(const Ring *r, uint8_t *out);
void ring_done(Ring *r);
