/* SPDX-License-Identifier: MIT */
/* SHA-256 (FIPS 180-4), incremental: for archive digests, where data arrives in pieces. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define SHA256_DIGEST_SIZE 32
#define SHA256_HEX_SIZE (2 * SHA256_DIGEST_SIZE + 1)

/* State of one digest in progress. `block` holds the `fill` bytes (< 64) not yet compressed;
 * `total` counts every byte given so far (the message length goes into the padding). */
typedef struct Sha256 {
        uint32_t h[8];
        uint64_t total;
        uint8_t block[64];
        size_t fill;
} Sha256;

void sha256_init(Sha256 *s);
void sha256_update(Sha256 *s, const void *data, size_t len);
/* Writes the digest; s must be initialised again before any further use. */
void sha256_final(Sha256 *s, uint8_t out[SHA256_DIGEST_SIZE]);
/* Lower-case hex of a digest, NUL-terminated. */
void sha256_hex(const uint8_t digest[SHA256_DIGEST_SIZE], char out[SHA256_HEX_SIZE]);
