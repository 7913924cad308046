/* SPDX-License-Identifier: MIT */
/* An open-addressing hash index over items the caller keeps in an array of its own: each slot
 * holds 1 + an item's index, 0 when free. The caller says what an item's hash is and whether an
 * item is the one looked for; the index never looks at the items itself. It is kept at most
 * half full, so probes stay short. Owns its slot array only. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct Slots {
        uint32_t *v;
        size_t n; /* a power of two; 0 until the first slots_reserve() */
} Slots;

/* Whether item i is the one looked for (ud: the caller's key). */
typedef bool (*SlotsIsFn)(const void *ud, uint32_t i);
/* Item i's hash (ud: the caller's array). */
typedef uint64_t (*SlotsHashFn)(const void *ud, uint32_t i);

/* The slot of the item for which is() says yes, probing from hash, or else the free slot where
 * it would go. s->n must not be 0. */
size_t slots_probe(const Slots *s, uint64_t hash, SlotsIsFn is, const void *ud);
/* The index of the item found from hash, or -1 (also before the first reserve). */
int64_t slots_find(const Slots *s, uint64_t hash, SlotsIsFn is, const void *ud);
/* Room for one more item past `items`: when that would make the index more than half full it
 * doubles (from 64 slots) and indexes items from..items-1 again by hash_of. Returns 0 or
 * -ENOMEM (the index as it was). */
int slots_reserve(Slots *s, size_t items, uint32_t from, SlotsHashFn hash_of, const void *ud);
void slots_free(Slots *s);
