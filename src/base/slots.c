/* SPDX-License-Identifier: MIT */
/* Open-addressing hash index (see slots.h). */
#include <errno.h>
#include <stdlib.h>
#include "base/slots.h"

size_t slots_probe(const Slots *s, uint64_t hash, SlotsIsFn is, const void *ud) {
        size_t mask = s->n - 1, i = (size_t)(hash ^ (hash >> 32)) & mask;
        while (s->v[i] && !is(ud, s->v[i] - 1))
                i = (i + 1) & mask;
        return i;
}

int64_t slots_find(const Slots *s, uint64_t hash, SlotsIsFn is, const void *ud) {
        if (!s->n)
                return -1;
        uint32_t k = s->v[slots_probe(s, hash, is, ud)];
        return k ? (int64_t)k - 1 : -1;
}

static bool never(const void *ud, uint32_t i) {
        (void)ud;
        (void)i;
        return false;
}

int slots_reserve(Slots *s, size_t items, uint32_t from, SlotsHashFn hash_of, const void *ud) {
        if (2 * (items + 1) <= s->n)
                return 0;
        if (items >= UINT32_MAX / 4)
                return -ENOMEM;
        Slots bigger = { .n = s->n ? 2 * s->n : 64 };
        while (2 * (items + 1) > bigger.n)
                bigger.n *= 2;
        if (!(bigger.v = calloc(bigger.n, sizeof *bigger.v)))
                return -ENOMEM;
        for (uint32_t i = from; i < items; i++)
                bigger.v[slots_probe(&bigger, hash_of(ud, i), never, NULL)] = i + 1;
        free(s->v);
        *s = bigger;
        return 0;
}

void slots_free(Slots *s) {
        free(s->v);
        *s = (Slots){ 0 };
}
