/* SPDX-License-Identifier: MIT */
/* Redaction: known secret values and key shapes replaced in a stream of output, chunk by
 * chunk, with a bounded hold-back so that one split across two reads is still caught.
 *
 * A Redactor is the compiled rule set, immutable once made and shared by reference count: a
 * context's (key shapes and extra patterns) or a sandbox's (the same plus its secrets). A
 * RedactStream is one stream's position in it (a pipe, a process's stdout): the bytes it holds
 * back (at most redactor_hold_max()), and whether it is inside a token or a PEM block it is
 * swallowing. Streams borrow their Redactor, which must outlive them.
 *
 * What is replaced, leftmost first:
 * - a secret's value (at least SBX_REDACT_MIN_SECRET_BYTES) by `[REDACTED:NAME]`, anywhere;
 * - the default key shapes (unless turned off), by `[REDACTED]`, each only where the byte
 *   before it is not a letter, digit or `_`: `AKIA`/`ASIA` + 16 or more of [A-Z0-9];
 *   `ghp_` `gho_` `ghu_` `ghs_` `ghr_` + 20 or more of [A-Za-z0-9]; `github_pat_` + 20 or more
 *   of [A-Za-z0-9_]; `sk-` + 20 or more of [A-Za-z0-9_-]; `Bearer ` or `bearer ` + 8 or more of
 *   [A-Za-z0-9._~+/=-] (the word `Bearer ` stays); a PEM private key block, from
 *   `-----BEGIN ... PRIVATE KEY-----` to the end of its `-----END ...-----` line (at most
 *   SBX_REDACT_PEM_MAX_BYTES are swallowed when no END comes). A token goes on for as long as
 *   its characters do: all of it is replaced, however long;
 * - extra patterns (POSIX extended regular expressions), by `[REDACTED]`: each must start with
 *   a literal of at least 3 characters, which is what the prefilter looks for; at each place
 *   where it occurs the expression is tried, anchored there, on at most
 *   SBX_REDACT_REGEX_WINDOW bytes.
 *
 * Speed: the stream is scanned for the first two bytes of every literal (a secret's value, a
 * shape's or pattern's prefix) with a 64 Kibit table of byte pairs; only a pair in the table
 * is looked at further. Where the CPU has AVX2, blocks of 32 places are first ruled out at
 * once by whether their bytes can begin and end such a pair at all. No regular expression
 * ever runs over ordinary output. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/buf.h"

typedef struct Redactor Redactor;

typedef struct RedactConfig {
        const char *const *secrets;  /* NAME=VALUE, NULL-terminated; may be NULL */
        const char *const *patterns; /* extra POSIX EREs, NULL-terminated; may be NULL */
        bool no_defaults;            /* leave the default key shapes out */
} RedactConfig;

/* Compiles a rule set. Secrets must be NAME=VALUE with NAME a valid environment name of at
 * most SBX_MAX_SECRET_NAME_BYTES; values shorter than SBX_REDACT_MIN_SECRET_BYTES are not
 * looked for (too short to tell from ordinary output). *ret is NULL when there is nothing to
 * look for. Returns 0, -EINVAL with err saying which pattern and why (never a secret's
 * value), or -ENOMEM. */
int redactor_new(const RedactConfig *c, Redactor **ret, char *err, size_t errlen);
Redactor *redactor_ref(Redactor *r);
/* Drops a reference; frees on the last. Accepts NULL; returns NULL. */
Redactor *redactor_unref(Redactor *r);
/* The most bytes a stream of it ever holds back. */
size_t redactor_hold_max(const Redactor *r);

/* Whether the prefilter may use the CPU's vector instructions (on by default where the CPU
 * has AVX2; the result is the same either way). For tests and benchmarks. */
void redact_simd(bool on);

/* Checks one extra pattern as redactor_new() would. Returns 0 or -EINVAL with err. */
int redact_pattern_check(const char *pattern, char *err, size_t errlen);

typedef struct RedactStream {
        const Redactor *r; /* NULL: redaction off, feed copies */
        uint8_t *hold;
        size_t hold_len, hold_cap;
        uint8_t prev;      /* the last byte consumed, for the shapes' word boundary */
        uint8_t mode;      /* inside nothing, a token, a PEM block */
        const uint8_t *swallow_cls;
        uint64_t pem_bytes;
        bool ended;        /* flushed: what comes after is dropped */
} RedactStream;

/* r may be NULL (then the stream copies). */
void redact_stream_init(RedactStream *s, const Redactor *r);
void redact_stream_done(RedactStream *s);
/* dst becomes an independent copy of src, what it holds back included (to end one copy at a
 * cap while the other goes on). Returns 0 or -ENOMEM. */
int redact_stream_clone(RedactStream *dst, const RedactStream *src);
/* Appends the redaction of data to out, holding back what may be the start of a match that
 * later bytes decide. Returns 0 or -ENOMEM. */
int redact_feed(RedactStream *s, const void *data, size_t len, Buf *out);
/* The stream's end: what is held back is decided and appended to out. cut: the stream was
 * cut short (a cap), so what it holds back that may be the start of a match (two bytes or
 * more) is replaced by `[REDACTED]` rather than shown. After this, feeds append nothing.
 * Returns 0 or -ENOMEM. */
int redact_flush(RedactStream *s, bool cut, Buf *out);

/* Redacts a whole text at once (an audit line, a history entry). *ret is malloc'd and
 * NUL-terminated; r may be NULL (a copy). Returns 0 or -ENOMEM. */
int redact_text(const Redactor *r, const void *data, size_t len, char **ret, size_t *ret_len);
