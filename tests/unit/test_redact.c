/* SPDX-License-Identifier: MIT */
/* Unit tests of the stream redactor (base/redact.c): secrets, each default key shape, PEM
 * blocks, near misses, extra patterns, matches split across feeds at every point, and a cut. */
#include <errno.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/redact.h"
#include "tap.h"

/* Redacts `in` fed in pieces of `step` bytes (0: at once); returns a malloc'd string. */
static char *run_steps(const Redactor *r, const char *in, size_t len, size_t step) {
        Buf b;
        RedactStream s;
        buf_init(&b, SIZE_MAX);
        redact_stream_init(&s, r);
        if (!step)
                step = len ? len : 1;
        for (size_t off = 0; off < len; off += step)
                (void)redact_feed(&s, in + off, len - off < step ? len - off : step, &b);
        (void)redact_flush(&s, false, &b);
        (void)buf_append(&b, "", 1);
        redact_stream_done(&s);
        size_t n;
        return (char *)buf_steal(&b, &n);
}

/* Redacts in with a split at every position (two feeds), and byte by byte; true when every
 * way gives `want`. */
static bool same_every_split(const Redactor *r, const char *in, const char *want) {
        size_t len = strlen(in);
        for (size_t cut = 0; cut <= len; cut++) {
                Buf b;
                RedactStream s;
                buf_init(&b, SIZE_MAX);
                redact_stream_init(&s, r);
                (void)redact_feed(&s, in, cut, &b);
                (void)redact_feed(&s, in + cut, len - cut, &b);
                (void)redact_flush(&s, false, &b);
                (void)buf_append(&b, "", 1);
                bool ok = strcmp((char *)b.data, want) == 0;
                if (!ok)
                        printf("# split at %zu: got '%s' want '%s'\n", cut, (char *)b.data, want);
                redact_stream_done(&s);
                buf_done(&b);
                if (!ok)
                        return false;
        }
        char *one = run_steps(r, in, len, 1);
        bool ok = strcmp(one, want) == 0;
        if (!ok)
                printf("# byte by byte: got '%s' want '%s'\n", one, want);
        free(one);
        return ok;
}

static Redactor *make(const char *const *secrets, const char *const *patterns, bool no_defaults) {
        Redactor *r = NULL;
        char err[256];
        RedactConfig c = { .secrets = secrets, .patterns = patterns, .no_defaults = no_defaults };
        int e = redactor_new(&c, &r, err, sizeof err);
        if (e < 0)
                printf("# redactor_new: %s\n", err);
        return r;
}

static void test_secrets(void) {
        const char *const secrets[] = { "API_KEY=abcdefgh12345", "OTHER=zz\"q$uote'x", "SHORT=abc1234", NULL };
        Redactor *r = make(secrets, NULL, true);
        CHECK(r != NULL, "a redactor with secrets only");
        CHECK(same_every_split(r, "key: abcdefgh12345!", "key: [REDACTED:API_KEY]!"),
              "a secret's value is replaced by its name, split anywhere");
        CHECK(same_every_split(r, "abcdefgh12345abcdefgh12345", "[REDACTED:API_KEY][REDACTED:API_KEY]"),
              "a secret twice in a row");
        CHECK(same_every_split(r, "abcdefgh1234 abcdefgh", "abcdefgh1234 abcdefgh"),
              "prefixes of a secret are left alone (stream end decides)");
        CHECK(same_every_split(r, "x=\"zz\\\"q\\$uote'x\"", "x=\"[REDACTED:OTHER]\""),
              "a secret in double quotes, as declare -p shows it, is replaced");
        CHECK(same_every_split(r, "x='zz\"q$uote'\\''x'", "x='[REDACTED:OTHER]'"),
              "a secret in single quotes, as set shows it, is replaced");
        CHECK(same_every_split(r, "abc1234", "abc1234"), "a secret under 8 bytes is not looked for");
        redactor_unref(r);

        const char *const nl[] = { "PEMISH=line1\nline2\x01", NULL };
        r = make(nl, NULL, true);
        CHECK(r && same_every_split(r, "declare -x PEMISH=$'line1\\nline2\\001'", "declare -x PEMISH=$'[REDACTED:PEMISH]'"),
              "a secret with control characters, as declare -p writes it ($'...'), is replaced");
        redactor_unref(r);

        char err[256];
        Redactor *bad = NULL;
        const char *const bad_name[] = { "1X=abcdefghij", NULL };
        RedactConfig c = { .secrets = bad_name };
        CHECK(redactor_new(&c, &bad, err, sizeof err) == -EINVAL && !bad && strstr(err, "name") &&
                      !strstr(err, "abcdefghij"),
              "a bad secret name is refused without showing the value (%s)", err);
        static char big[SBX_MAX_SECRET_BYTES + 16];
        memcpy(big, "BIG=", 4);
        memset(big + 4, 'x', SBX_MAX_SECRET_BYTES + 1);
        const char *const too_long[] = { big, NULL };
        c.secrets = too_long;
        CHECK(redactor_new(&c, &bad, err, sizeof err) == -EINVAL && strstr(err, "BIG") && strstr(err, "longer"),
              "a secret over the limit is refused (%s)", err);
        RedactConfig none = { .no_defaults = true };
        CHECK(redactor_new(&none, &bad, err, sizeof err) == 0 && bad == NULL, "nothing to look for: no redactor");
}

static void test_shapes(void) {
        Redactor *r = make(NULL, NULL, false);
        struct {
                const char *in, *want, *what;
        } cases[] = {
                { "id AKIAIOSFODNN7EXAMPLE.", "id [REDACTED].", "AWS access key id" },
                { "ASIAIOSFODNN7EXAMPLE", "[REDACTED]", "AWS temporary key id" },
                { "t=ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789 ok", "t=[REDACTED] ok", "GitHub token (ghp_)" },
                { "gho_aBcDeFgHiJkLmNoPqRsTuVwX", "[REDACTED]", "GitHub token (gho_)" },
                { "ghs_aBcDeFgHiJkLmNoPqRsTuVwX\n", "[REDACTED]\n", "GitHub token (ghs_)" },
                { "github_pat_11ABCDEFG0123456789_abcdefXYZ", "[REDACTED]", "GitHub fine-grained token" },
                { "OPENAI=sk-proj-abcdefghijklmnopqrstuvwxyz012345", "OPENAI=[REDACTED]", "sk- key" },
                { "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc_-x\r\n",
                  "Authorization: Bearer [REDACTED]\r\n", "Bearer token (the word stays)" },
                { "a\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\nabc+/=\n-----END RSA PRIVATE KEY-----\nb",
                  "a\n[REDACTED]\nb", "PEM RSA private key block" },
                { "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----", "[REDACTED]", "PEM PKCS#8 block" },
                { "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----\n",
                  "[REDACTED]\n", "PEM OpenSSH block" },
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
                CHECK(r && same_every_split(r, cases[i].in, cases[i].want), "%s is redacted, split anywhere",
                      cases[i].what);
        const char *near[] = {
                "AKIA1234",                             /* too short */
                "XAKIAIOSFODNN7EXAMPLE",                /* inside a word */
                "akiaiosfodnn7example",                 /* lower case */
                "ghp_short",                            /* too short */
                "ghx_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345", /* not a GitHub prefix */
                "task-management-system-for-teams",     /* sk- inside a word */
                "sk-learn is a library",                /* too short */
                "Bearer abc",                           /* too short */
                "Bearer: token",                        /* not the header's form */
                "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----", /* not a private key */
                "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----",
                "plain text with s and g and A and B and -- dashes",
        };
        for (size_t i = 0; i < sizeof near / sizeof near[0]; i++)
                CHECK(r && same_every_split(r, near[i], near[i]), "near miss %zu left alone", i);
        redactor_unref(r);

        r = make(NULL, NULL, true);
        CHECK(r == NULL, "no defaults and nothing else: no redactor (output copied)");
}

static void test_patterns(void) {
        const char *const pats[] = { "xoxb-[0-9]+-[A-Za-z0-9]+", "tok_[a-f0-9]{8}", NULL };
        Redactor *r = make(NULL, pats, true);
        CHECK(r != NULL, "a redactor with extra patterns");
        CHECK(r && same_every_split(r, "slack xoxb-123-abcDEF done", "slack [REDACTED] done"),
              "an extra pattern is redacted, split anywhere");
        CHECK(r && same_every_split(r, "tok_deadbeef tok_xyz", "[REDACTED] tok_xyz"), "an extra pattern's near miss stays");
        redactor_unref(r);
        char err[256];
        CHECK(redact_pattern_check("[a-z]+secret", err, sizeof err) == -EINVAL && strstr(err, "literal"),
              "a pattern without a literal prefix is refused (%s)", err);
        CHECK(redact_pattern_check("ab|cd", err, sizeof err) == -EINVAL && strstr(err, "alternation"),
              "a pattern with an alternation is refused (%s)", err);
        CHECK(redact_pattern_check("abc(", err, sizeof err) == -EINVAL, "a pattern that does not compile is refused (%s)",
              err);
        CHECK(redact_pattern_check("ab?c", err, sizeof err) == -EINVAL, "a quantified second character is no prefix");
        CHECK(redact_pattern_check("a\\.b[0-9]", err, sizeof err) == 0, "an escaped metacharacter is part of the prefix");
}

static void test_cut(void) {
        const char *const secrets[] = { "K=SECRETVALUE123", NULL };
        Redactor *r = make(secrets, NULL, false);
        Buf b;
        RedactStream s;
        buf_init(&b, SIZE_MAX);
        redact_stream_init(&s, r);
        (void)redact_feed(&s, "out: SECRETV", 12, &b);
        (void)redact_flush(&s, true, &b);
        (void)redact_feed(&s, "ALUE123", 7, &b);
        CHECK(b.len == 15 && memcmp(b.data, "out: [REDACTED]", 15) == 0,
              "a secret cut short by a cap is replaced, and nothing follows the cut");
        redact_stream_done(&s);
        buf_done(&b);
        buf_init(&b, SIZE_MAX);
        redact_stream_init(&s, r);
        (void)redact_feed(&s, "ends with s", 11, &b);
        (void)redact_flush(&s, true, &b);
        CHECK(b.len == 11, "one byte at a cut is shown");
        redact_stream_done(&s);
        buf_done(&b);
        char *t = NULL;
        size_t n = 0;
        CHECK(redact_text(r, "a SECRETVALUE123 b", 18, &t, &n) == 0 && strcmp(t, "a [REDACTED:K] b") == 0 && n == 16,
              "redact_text on one line");
        free(t);
        redactor_unref(r);
}

/* Long ordinary text with secrets sprinkled in, fed in odd pieces: the same as at once. */
static void test_long(void) {
        const char *const secrets[] = { "A=alpha-secret-1", "B=bravo-secret-2", NULL };
        Redactor *r = make(secrets, NULL, false);
        size_t len = 1 << 20;
        char *in = malloc(len + 1);
        for (size_t i = 0; i < len; i++)
                in[i] = "the quick brown fox sk- AKIA gh -----\n"[i % 38];
        for (size_t at = 1000; at + 20 < len; at += 77777)
                memcpy(in + at, (at / 77777) % 2 ? "alpha-secret-1" : "bravo-secret-2", 14);
        in[len] = 0;
        char *whole = run_steps(r, in, len, 0);
        char *odd = run_steps(r, in, len, 4093);
        char *tiny = run_steps(r, in, len, 7);
        CHECK(strcmp(whole, odd) == 0 && strcmp(whole, tiny) == 0, "1 MiB fed whole, in 4093- and 7-byte pieces: the same");
        CHECK(!strstr(whole, "alpha-secret-1") && !strstr(whole, "bravo-secret-2") && strstr(whole, "[REDACTED:A]") &&
                      strstr(whole, "[REDACTED:B]"),
              "no secret left in 1 MiB, both markers there");
        free(whole);
        free(odd);
        free(tiny);
        free(in);
        redactor_unref(r);
}

/* Redacts in both ways, vector prefilter and not; true when both give the same bytes. */
static bool same_both_ways(const Redactor *r, const char *in, size_t len, size_t step) {
        redact_simd(false);
        char *plain = run_steps(r, in, len, step);
        redact_simd(true);
        char *vec = run_steps(r, in, len, step);
        bool ok = strcmp(plain, vec) == 0;
        free(plain);
        free(vec);
        return ok;
}

static uint64_t rng_state = 20261125;
static unsigned rnd(unsigned n) {
        rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
        return (unsigned)(rng_state >> 33) % n;
}

/* The vector prefilter rules out whole blocks of 32 places: a literal at any place of a
 * block, across blocks, at a buffer's last bytes, or among bytes that share its nibble
 * buckets (0x80 apart) is found as without it. */
static void test_vector(void) {
        const char *const secrets[] = { "K=zq-sekrit-77", "L=\xc1\xc1-high-bytes", NULL };
        Redactor *r = make(secrets, (const char *const[]){ "tok_[0-9]+", NULL }, false);
        static const char *const tokens[] = { "AKIAABCDEFGHIJKLMNOP", "ghp_abcdefghijklmnopqrstuv", "zq-sekrit-77",
                                              "-----BEGIN RSA PRIVATE KEY-----\nx\n-----END RSA PRIVATE KEY-----",
                                              "Bearer abcdefgh.ij", "tok_12345", "sk-abcdefghijklmnopqrstuvwx" };
        size_t len = 4096;
        char *in = malloc(len + 1);
        bool every_place = true, every_hidden = true;
        for (size_t t = 0; t < ELEMENTSOF(tokens); t++)
                for (size_t at = 0; at < 70; at++) {
                        /* Zeros around it: the blocks before and after are ruled out whole. */
                        memset(in, ' ', len);
                        size_t tl = strlen(tokens[t]);
                        memcpy(in + 32 * 50 + at, tokens[t], tl);
                        memcpy(in + len - tl, tokens[t], tl); /* and at the very end */
                        in[len] = 0;
                        every_place &= same_both_ways(r, in, len, 0) && same_both_ways(r, in, len, 33);
                        redact_simd(true);
                        char *out = run_steps(r, in, len, 0);
                        every_hidden &= strstr(out, tokens[t] + 4) == NULL;
                        free(out);
                }
        CHECK(every_place, "each literal at 70 places and at the end: the same with the vector prefilter as without");
        CHECK(every_hidden, "and hidden at every one of them");

        bool random_same = true;
        static const char alphabet[] = "AKSIghipoustr_kB eab-\xc1\x01\xcb\xe7zq7-";
        for (int round = 0; round < 200; round++) {
                unsigned mode = round % 3; /* bytes at random, from the literals' bytes, zeros */
                for (size_t i = 0; i < len; i++)
                        in[i] = mode == 0 ? (char)(1 + rnd(255)) : mode == 1 ? alphabet[rnd(sizeof alphabet - 1)] : 0;
                for (unsigned k = rnd(6); k > 0; k--) {
                        const char *tok = tokens[rnd(ELEMENTSOF(tokens))];
                        size_t tl = strlen(tok), at = rnd((unsigned)(len - tl));
                        memcpy(in + at, tok, tl);
                }
                in[len] = 0;
                /* Bytes set to 0 end the string: compare the prefix that is a string. */
                random_same &= same_both_ways(r, in, strlen(in), 0) && same_both_ways(r, in, strlen(in), 1 + rnd(100));
        }
        CHECK(random_same, "200 buffers of random, literal-heavy and zero bytes with tokens: the same both ways");
        free(in);
        redactor_unref(r);
}

int main(void) {
        test_secrets();
        test_shapes();
        test_patterns();
        test_cut();
        test_long();
        test_vector();
        return tap_done();
}
