/* SPDX-License-Identifier: MIT */
/* SHA-256 digests as hex, over nettle. */
#include <nettle/base16.h>
#include "base/sha256.h"

void sha256_digest_hex(struct sha256_ctx *ctx, char out[SHA256_HEX_SIZE]) {
        uint8_t digest[SHA256_DIGEST_SIZE];
        sha256_digest(ctx, sizeof digest, digest);
        base16_encode_update(out, sizeof digest, digest);
        out[2 * SHA256_DIGEST_SIZE] = 0;
}
