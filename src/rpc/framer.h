/* SPDX-License-Identifier: MIT */
/* Newline-delimited framing with a hard line limit. A line longer than the limit is never
 * buffered whole: the framer discards its bytes until its newline, keeping only its two ends,
 * and reports it once there, so a client cannot make the daemon hold more than `max` bytes of
 * one connection's input, and its request can still be answered with its id. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/limits.h"

typedef struct Framer {
        uint8_t *buf;
        size_t len, cap, max;
        bool skipping; /* inside a line already over the limit */
        /* Of a line over the limit: its first and its last SBX_FRAMER_PEEK_BYTES, enough to find
         * a request's id at either end (clients put it first or last), given at its newline. */
        uint8_t head[SBX_FRAMER_PEEK_BYTES], tail[SBX_FRAMER_PEEK_BYTES];
        size_t head_len, tail_len;
        uint8_t peek[2 * SBX_FRAMER_PEEK_BYTES + 1];
} Framer;

/* line is not NUL-terminated. A line over the limit comes once, at its newline, with
 * too_large set and line its head, a NUL, then its tail (rpc_cut_line_id finds an id in it).
 * Returns false to stop after this line (the consumer is busy). */
typedef bool (*FrameFn)(void *ud, const char *line, size_t len, bool too_large);

void framer_init(Framer *f, size_t max);
void framer_done(Framer *f);
/* Feeds bytes; calls fn for each complete line until fn says stop. Returns how many bytes
 * were consumed (the rest must be fed again later), or -ENOMEM. */
long framer_feed(Framer *f, const uint8_t *data, size_t len, FrameFn fn, void *ud);
