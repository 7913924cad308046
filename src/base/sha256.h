/* SPDX-License-Identifier: MIT */
/* SHA-256 digests in the form sbx writes them (archive manifests): nettle's sha2 for the
 * digest, lower-case hex for the text. A digest starts with nettle's sha256_init(). */
#pragma once
#include <stddef.h>
#include <nettle/sha2.h>

#define SHA256_HEX_SIZE (2 * SHA256_DIGEST_SIZE + 1)

/* nettle's sha256_update() with the (data, length) order of the rest of sbx and any bytes. */
static inline void sha256_feed(struct sha256_ctx *ctx, const void *data, size_t len) {
        sha256_update(ctx, len, data);
}

/* Writes the digest of everything fed to ctx as lower-case hex with a NUL; ctx is then ready
 * for a new digest (nettle resets it). */
void sha256_digest_hex(struct sha256_ctx *ctx, char out[SHA256_HEX_SIZE]);
