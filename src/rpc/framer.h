/* SPDX-License-Identifier: MIT */
/* Newline-delimited framing with a hard line limit. A line longer than the limit is never
 * buffered whole: the framer reports it once and discards bytes until its newline, so a
 * client cannot make the daemon hold more than `max` bytes of one connection's input. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct Framer {
        uint8_t *buf;
        size_t len, cap, max;
        bool skipping; /* inside a line already reported too large */
} Framer;

/* line is not NUL-terminated; too_large lines come with line == NULL, len 0. Returns false
 * to stop after this line (the consumer is busy). */
typedef bool (*FrameFn)(void *ud, const char *line, size_t len, bool too_large);

void framer_init(Framer *f, size_t max);
void framer_done(Framer *f);
/* Feeds bytes; calls fn for each complete line until fn says stop. Returns how many bytes
 * were consumed (the rest must be fed again later), or -ENOMEM. */
long framer_feed(Framer *f, const uint8_t *data, size_t len, FrameFn fn, void *ud);
