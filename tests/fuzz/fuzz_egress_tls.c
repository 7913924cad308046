/* SPDX-License-Identifier: MIT */
/* Fuzz target: what proxy secrets do to bytes a sandbox's command and a server control.
 * egress_tls_rewrite_head() on a hostile head (the placeholders of two secrets made values, or
 * the head refused when it names another host),
 * and egress_tls_scrub() on a hostile answer fed in pieces whose sizes the input's first bytes
 * choose. The invariants: never a crash or an out-of-bounds access (ASan); the rewritten head
 * fits its buffer or is -ENOBUFS; masking keeps the length, leaves no value whole whatever the
 * pieces, and changes nothing but values (every byte it changed is a '*'). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "base/macro.h"
#include "net/egress_tls.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define VAL "value-0123456789"
#define VAL2 "vvvvvvvv"

static EgressSecret secrets[2];

static void setup(void) {
        static bool done;
        if (done)
                return;
        done = true;
        const char *h1[] = { "api.test:*", NULL }, *h2[] = { "*.api.test", NULL };
        char err[256];
        secrets[0] = (EgressSecret){ .name = "A", .value = VAL, .placeholder = "SBX_SECRET_A_00",
                                     .value_len = strlen(VAL), .placeholder_len = 15 };
        secrets[1] = (EgressSecret){ .name = "B", .value = VAL2, .placeholder = "SBX_SECRET_B_11",
                                     .value_len = strlen(VAL2), .placeholder_len = 15 };
        if (egress_rules_parse(h1, &secrets[0].hosts, err, sizeof err) < 0 ||
            egress_rules_parse(h2, &secrets[1].hosts, err, sizeof err) < 0)
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        setup();
        if (size < 2 || size > 65536)
                return 0;
        unsigned step = data[0] % 32 + 1, outcap = (unsigned)data[1] * 16;
        data += 2;
        size -= 2;

        char *out = malloc(outcap + 1);
        if (!out)
                return 0;
        ssize_t n = egress_tls_rewrite_head((const char *)data, size, secrets, 2, "api.test", 443, out, outcap);
        /* -EACCES: a placeholder in a head whose Host or target names another host. */
        if (n != -ENOBUFS && n != -EACCES && (n < 0 || (size_t)n > outcap))
                abort();
        free(out);

        /* The answer, in pieces of `step` bytes, as the proxy reads it. */
        char *buf = malloc(size + 1), *got = malloc(size + 1);
        if (!buf || !got) {
                free(buf);
                free(got);
                return 0;
        }
        size_t len = 0, glen = 0, at = 0;
        while (at < size || len) {
                size_t k = MIN((size_t)step, size - at);
                memcpy(buf + len, data + at, k);
                len += k;
                at += k;
                bool end = at == size;
                size_t ready = egress_tls_scrub(buf, len, secrets, 2, end);
                if (ready > len || (end && ready != len))
                        abort();
                memcpy(got + glen, buf, ready);
                glen += ready;
                memmove(buf, buf + ready, len - ready);
                len -= ready;
        }
        if (glen != size)
                abort();
        for (size_t i = 0; i < size; i++)
                if (got[i] != (char)data[i] && got[i] != '*')
                        abort();
        if (memmem(got, glen, VAL, strlen(VAL)) || memmem(got, glen, VAL2, strlen(VAL2)))
                abort();
        free(buf);
        free(got);
        return 0;
}
