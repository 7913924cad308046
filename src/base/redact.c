/* SPDX-License-Identifier: MIT */
/* Redaction of secrets and key shapes in output streams (see redact.h). */
#include <errno.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/redact.h"
#include "base/util.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

typedef enum TrigKind { T_SECRET, T_SHAPE, T_PEM, T_REGEX } TrigKind;

/* One literal the prefilter looks for, and what follows it for a match. */
typedef struct Trigger {
        TrigKind kind;
        uint8_t *lit;          /* owned */
        size_t lit_len;        /* >= 3 */
        char *marker;          /* owned: the replacement */
        size_t marker_len;
        const uint8_t *cls;    /* shape: the token's characters (a 256-entry table) */
        size_t min;            /* shape: characters of cls needed after the literal */
        size_t keep;           /* shape: bytes of the literal left in place */
        regex_t re;            /* regex: "^(pattern)" */
        bool re_ok;
        uint16_t next;         /* the next trigger with the same first byte, +1; 0 ends */
} Trigger;

/* Invariant: every trigger's first two bytes are set in `pairs`, and it is on the chain of
 * `first[lit[0]]`; hold_max is at least the bytes any trigger needs from its start to decide. */
struct Redactor {
        unsigned refs;
        Trigger *t;
        size_t n;
        uint64_t pairs[1024]; /* bit (b0 | b1 << 8): some literal starts with b0 b1 */
        /* The bytes that begin ([0]) and end ([1]) a pair of `pairs`, as nibble tables: byte b
         * is in set k when lo[k][b & 15] has bit (b >> 4) & 7. Bytes 0x80 apart share a bit, so
         * the sets hold a few more bytes than the pairs': they only rule blocks out. */
        uint8_t lo[2][16];
        uint16_t first[256];  /* chain head per first byte, +1 */
        size_t hold_max;
        bool dash_pem; /* only PEM triggers start with '-' */
};

enum { MODE_NORMAL, MODE_SWALLOW, MODE_PEM };
enum { END_MORE, END_FINAL, END_CUT };

static const char MARK[] = "[REDACTED]";
static const char PEM_END[] = "-----END ";
/* The END line's closing dashes are looked for this far after PEM_END. */
#define PEM_END_LINE 64

static uint8_t cls_aws[256], cls_gh[256], cls_ghpat[256], cls_sk[256], cls_bearer[256], cls_pem[256], cls_word[256];

static void cls_fill(uint8_t *c, const char *extra, bool upper, bool lower, bool digit) {
        for (int b = 0; b < 256; b++)
                c[b] = (upper && b >= 'A' && b <= 'Z') || (lower && b >= 'a' && b <= 'z') || (digit && b >= '0' && b <= '9') ||
                       (b && extra && strchr(extra, b));
}

static void classes_init(void) {
        static bool done;
        if (done)
                return;
        cls_fill(cls_aws, NULL, true, false, true);
        cls_fill(cls_gh, NULL, true, true, true);
        cls_fill(cls_ghpat, "_", true, true, true);
        cls_fill(cls_sk, "_-", true, true, true);
        cls_fill(cls_bearer, "._~+/=-", true, true, true);
        cls_fill(cls_pem, " ", true, false, true);
        cls_fill(cls_word, "_", true, true, true);
        done = true;
}

static void trigger_clear(Trigger *t) {
        free(t->lit);
        free(t->marker);
        if (t->re_ok)
                regfree(&t->re);
}

static Trigger *trigger_add(Redactor *r, TrigKind kind, const void *lit, size_t lit_len, const char *marker,
                            size_t marker_len) {
        Trigger *v = realloc(r->t, (r->n + 1) * sizeof *v);
        if (!v)
                return NULL;
        r->t = v;
        Trigger *t = &v[r->n];
        *t = (Trigger){ .kind = kind, .lit_len = lit_len, .marker_len = marker_len };
        t->lit = malloc(lit_len);
        t->marker = malloc(marker_len + 1);
        if (!t->lit || !t->marker) {
                trigger_clear(t);
                return NULL;
        }
        memcpy(t->lit, lit, lit_len);
        memcpy(t->marker, marker, marker_len);
        t->marker[marker_len] = 0;
        r->n++;
        return t;
}

static int shape_add(Redactor *r, const char *lit, const uint8_t *cls, size_t min, size_t keep) {
        Trigger *t = trigger_add(r, T_SHAPE, lit, strlen(lit), MARK, sizeof MARK - 1);
        if (!t)
                return -ENOMEM;
        t->cls = cls;
        t->min = min;
        t->keep = keep;
        return 0;
}

static int defaults_add(Redactor *r) {
        static const char *const gh[] = { "ghp_", "gho_", "ghu_", "ghs_", "ghr_" };
        int e = 0;
        e |= shape_add(r, "AKIA", cls_aws, 16, 0);
        e |= shape_add(r, "ASIA", cls_aws, 16, 0);
        for (size_t i = 0; i < ELEMENTSOF(gh); i++)
                e |= shape_add(r, gh[i], cls_gh, 20, 0);
        e |= shape_add(r, "github_pat_", cls_ghpat, 20, 0);
        e |= shape_add(r, "sk-", cls_sk, 20, 0);
        e |= shape_add(r, "Bearer ", cls_bearer, 8, 7);
        e |= shape_add(r, "bearer ", cls_bearer, 8, 7);
        if (e)
                return -ENOMEM;
        return trigger_add(r, T_PEM, "-----BEGIN ", 11, MARK, sizeof MARK - 1) ? 0 : -ENOMEM;
}

/* ---------------------------------------------------------------- secrets */

/* The forms in which a shell shows a value: as is, inside double quotes (declare -p), inside
 * single quotes (set, alias -p) and as $'...' (declare -p of a value with control characters,
 * as bash's ansic_quote writes it). `form` 0-3; returns the length written to out (at most
 * 4 * len bytes), 0 when that form is the value itself or does not apply. */
static size_t secret_form(const uint8_t *v, size_t len, int form, uint8_t *out) {
        size_t k = 0;
        bool differs = false, ctl = false;
        for (size_t i = 0; i < len; i++) {
                uint8_t c = v[i];
                if (form == 1 && (c == '\\' || c == '"' || c == '$' || c == '`')) {
                        out[k++] = '\\';
                        differs = true;
                } else if (form == 2 && c == '\'') {
                        memcpy(out + k, "'\\'", 3);
                        k += 3;
                        differs = true;
                } else if (form == 3) {
                        static const char esc[] = "\a\b\f\n\r\t\v\033";
                        static const char name[] = "abfnrtvE";
                        const char *p = c ? strchr(esc, c) : NULL;
                        if (p || c == '\\' || c == '\'') {
                                out[k++] = '\\';
                                out[k++] = p ? (uint8_t)name[p - esc] : c;
                                ctl |= p != NULL;
                                differs = true;
                                continue;
                        }
                        if (c < 0x20 || c == 0x7f) {
                                out[k++] = '\\';
                                out[k++] = (uint8_t)('0' + ((c >> 6) & 7));
                                out[k++] = (uint8_t)('0' + ((c >> 3) & 7));
                                out[k++] = (uint8_t)('0' + (c & 7));
                                ctl = differs = true;
                                continue;
                        }
                }
                out[k++] = c;
        }
        if (form == 0)
                return k;
        if (form == 3 && !ctl)
                return 0;
        return differs ? k : 0;
}

static int secret_add(Redactor *r, const char *entry, char *err, size_t errlen) {
        const char *eq = strchr(entry, '=');
        size_t name_len = eq ? (size_t)(eq - entry) : 0;
        if (!eq || !env_name_valid(entry, name_len) || name_len > SBX_MAX_SECRET_NAME_BYTES) {
                snprintf(err, errlen, "a secret's name must be 1-%u letters, digits and _, not starting with a digit",
                         SBX_MAX_SECRET_NAME_BYTES);
                return -EINVAL;
        }
        const uint8_t *v = (const uint8_t *)eq + 1;
        size_t len = strlen(eq + 1);
        if (len > SBX_MAX_SECRET_BYTES) {
                snprintf(err, errlen, "secret %.*s is longer than %u bytes", (int)name_len, entry, SBX_MAX_SECRET_BYTES);
                return -EINVAL;
        }
        if (len < SBX_REDACT_MIN_SECRET_BYTES)
                return 0;
        char marker[SBX_MAX_SECRET_NAME_BYTES + 16];
        int ml = snprintf(marker, sizeof marker, "[REDACTED:%.*s]", (int)name_len, entry);
        _cleanup_free_ uint8_t *form = malloc(4 * len);
        if (!form)
                return -ENOMEM;
        for (int f = 0; f < 4; f++) {
                size_t k = secret_form(v, len, f, form);
                if (k && !trigger_add(r, T_SECRET, form, k, marker, (size_t)ml))
                        return -ENOMEM;
        }
        return 0;
}

/* ---------------------------------------------------------------- extra patterns */

/* The literal an ERE's every match starts with, unescaped into lit (at least as large as the
 * pattern); its length, or -EINVAL with err when there is none of 2 bytes or more. */
static long pattern_literal(const char *p, char *lit, char *err, size_t errlen) {
        static const char meta[] = ".[]()*+?{}|^$\\";
        size_t n = 0, i = 0;
        while (p[i]) {
                if (p[i] == '\\' && p[i + 1] && strchr(meta, p[i + 1])) {
                        lit[n++] = p[i + 1];
                        i += 2;
                        continue;
                }
                if (strchr(meta, p[i]))
                        break;
                lit[n++] = p[i++];
        }
        /* A quantifier that may drop the last literal character takes it out of the prefix. */
        if (n > 0 && (p[i] == '*' || p[i] == '?' || p[i] == '{'))
                n--;
        /* An alternation anywhere outside brackets would give matches another start. */
        bool in_br = false;
        for (size_t k = 0; p[k]; k++) {
                if (p[k] == '\\' && !in_br && p[k + 1]) {
                        k++;
                        continue;
                }
                if (p[k] == '[' && !in_br) {
                        in_br = true;
                        if (p[k + 1] == '^')
                                k++;
                        if (p[k + 1] == ']')
                                k++;
                } else if (p[k] == ']' && in_br) {
                        in_br = false;
                } else if (p[k] == '|' && !in_br) {
                        snprintf(err, errlen, "redaction pattern '%.100s' has an alternation (|): give each alternative "
                                              "as a pattern of its own", p);
                        return -EINVAL;
                }
        }
        if (n < 3) {
                snprintf(err, errlen, "redaction pattern '%.100s' must start with at least 3 literal characters "
                                      "(what the prefilter looks for)", p);
                return -EINVAL;
        }
        return (long)n;
}

static int pattern_add(Redactor *r, const char *p, char *err, size_t errlen) {
        size_t plen = strlen(p);
        if (plen == 0 || plen > SBX_MAX_REDACT_PATTERN_BYTES) {
                snprintf(err, errlen, "a redaction pattern must be 1-%u bytes", SBX_MAX_REDACT_PATTERN_BYTES);
                return -EINVAL;
        }
        char lit[SBX_MAX_REDACT_PATTERN_BYTES + 1], anchored[SBX_MAX_REDACT_PATTERN_BYTES + 8];
        long n = pattern_literal(p, lit, err, errlen);
        if (n < 0)
                return (int)n;
        snprintf(anchored, sizeof anchored, "^(%s)", p);
        regex_t re;
        int rc = regcomp(&re, anchored, REG_EXTENDED);
        if (rc != 0) {
                char why[128];
                regerror(rc, &re, why, sizeof why);
                snprintf(err, errlen, "redaction pattern '%.100s': %s", p, why);
                return -EINVAL;
        }
        Trigger *t = trigger_add(r, T_REGEX, lit, (size_t)n, MARK, sizeof MARK - 1);
        if (!t) {
                regfree(&re);
                return -ENOMEM;
        }
        t->re = re;
        t->re_ok = true;
        return 0;
}

int redact_pattern_check(const char *pattern, char *err, size_t errlen) {
        Redactor r = { 0 };
        int e = pattern_add(&r, pattern, err, errlen);
        for (size_t i = 0; i < r.n; i++)
                trigger_clear(&r.t[i]);
        free(r.t);
        return e;
}

/* ---------------------------------------------------------------- the rule set */

static size_t trigger_need(const Trigger *t) {
        switch (t->kind) {
        case T_SHAPE: return t->lit_len + t->min;
        case T_PEM: return t->lit_len + 56 + 5;
        case T_REGEX: return SBX_REDACT_REGEX_WINDOW;
        case T_SECRET:
        default: return t->lit_len;
        }
}

int redactor_new(const RedactConfig *c, Redactor **ret, char *err, size_t errlen) {
        classes_init();
        *ret = NULL;
        Redactor *r = calloc(1, sizeof *r);
        if (!r)
                return -ENOMEM;
        r->refs = 1;
        int e = 0;
        size_t n = 0;
        for (const char *const *s = c->secrets; s && *s && e == 0; s++)
                if (++n > SBX_MAX_SECRETS) {
                        snprintf(err, errlen, "more than %u secrets", SBX_MAX_SECRETS);
                        e = -EINVAL;
                } else {
                        e = secret_add(r, *s, err, errlen);
                }
        n = 0;
        for (const char *const *p = c->patterns; p && *p && e == 0; p++)
                if (++n > SBX_MAX_REDACT_PATTERNS) {
                        snprintf(err, errlen, "more than %u redaction patterns", SBX_MAX_REDACT_PATTERNS);
                        e = -EINVAL;
                } else {
                        e = pattern_add(r, *p, err, errlen);
                }
        if (e == 0 && !c->no_defaults)
                e = defaults_add(r);
        if (e == 0 && r->n > UINT16_MAX - 1)
                e = -E2BIG;
        if (e < 0 || r->n == 0) {
                redactor_unref(r);
                return e;
        }
        /* Chains keep the order of the triggers: secrets first, so a secret's named marker wins a
         * tie with a shape. Built backwards so each head is the lowest index. */
        r->hold_max = PEM_END_LINE + 5 + sizeof PEM_END;
        r->dash_pem = true;
        for (size_t i = 0; i < r->n; i++)
                if (r->t[i].lit[0] == '-' && r->t[i].kind != T_PEM)
                        r->dash_pem = false;
        for (size_t i = r->n; i-- > 0;) {
                Trigger *t = &r->t[i];
                for (int k = 0; k < 2; k++) {
                        unsigned v = t->lit[k] | (unsigned)t->lit[k + 1] << 8;
                        r->pairs[v >> 6] |= 1ULL << (v & 63);
                        r->lo[0][t->lit[k] & 15] |= (uint8_t)(1U << ((t->lit[k] >> 4) & 7));
                        r->lo[1][t->lit[k + 1] & 15] |= (uint8_t)(1U << ((t->lit[k + 1] >> 4) & 7));
                }
                t->next = r->first[t->lit[0]];
                r->first[t->lit[0]] = (uint16_t)(i + 1);
                r->hold_max = MAX(r->hold_max, trigger_need(t));
        }
        *ret = r;
        return 0;
}

Redactor *redactor_ref(Redactor *r) {
        if (r)
                r->refs++;
        return r;
}

Redactor *redactor_unref(Redactor *r) {
        if (!r || --r->refs > 0)
                return NULL;
        for (size_t i = 0; i < r->n; i++)
                trigger_clear(&r->t[i]);
        free(r->t);
        free(r);
        return NULL;
}

size_t redactor_hold_max(const Redactor *r) { return r ? r->hold_max : 0; }

/* ---------------------------------------------------------------- matching */

typedef enum { M_NONE, M_MORE, M_MATCH } MatchResult;

/* Whether p[0..avail) starts with lit: M_MATCH, M_MORE (a prefix of it, data ends), M_NONE. */
static MatchResult lit_at(const uint8_t *p, size_t avail, const uint8_t *lit, size_t lit_len) {
        size_t k = MIN(avail, lit_len);
        if (memcmp(p, lit, k) != 0)
                return M_NONE;
        return k == lit_len ? M_MATCH : M_MORE;
}

/* Tries trigger t at p (avail bytes from there; prev the byte before, 0 at a stream's start;
 * final: no more bytes will come). On M_MATCH *ret_end is the match's length. */
static MatchResult trigger_at(const Trigger *t, const uint8_t *p, size_t avail, uint8_t prev, bool final,
                              size_t *ret_end) {
        if (t->kind == T_SHAPE && cls_word[prev])
                return M_NONE;
        MatchResult m = lit_at(p, avail, t->lit, t->lit_len);
        if (m != M_MATCH)
                return m;
        size_t i = t->lit_len;
        switch (t->kind) {
        case T_SECRET:
                *ret_end = i;
                return M_MATCH;
        case T_SHAPE: {
                size_t need = i + t->min;
                while (i < avail && i < need && t->cls[p[i]])
                        i++;
                if (i == need) {
                        *ret_end = i;
                        return M_MATCH;
                }
                return i == avail ? M_MORE : M_NONE;
        }
        case T_PEM: {
                /* -----BEGIN [A-Z0-9 ]* PRIVATE KEY----- with at most 56 characters in between. */
                static const char tail[] = "PRIVATE KEY";
                size_t start = i;
                while (i < avail && i - start <= 56 && cls_pem[p[i]])
                        i++;
                if (i - start > 56)
                        return M_NONE;
                if (i == avail)
                        return M_MORE;
                size_t run = i - start;
                if (run < sizeof tail - 1 || memcmp(p + i - (sizeof tail - 1), tail, sizeof tail - 1) != 0)
                        return M_NONE;
                m = lit_at(p + i, avail - i, (const uint8_t *)"-----", 5);
                if (m == M_MATCH)
                        *ret_end = i + 5;
                return m;
        }
        case T_REGEX: {
                char win[SBX_REDACT_REGEX_WINDOW + 1];
                size_t w = MIN(avail, (size_t)SBX_REDACT_REGEX_WINDOW);
                memcpy(win, p, w);
                win[w] = 0;
                regmatch_t pm[1];
                bool hit = regexec(&t->re, win, 1, pm, 0) == 0 && pm[0].rm_eo > 0;
                if (w < SBX_REDACT_REGEX_WINDOW && !final && (!hit || (size_t)pm[0].rm_eo == w))
                        return M_MORE; /* more bytes could make it match, or match longer */
                if (!hit)
                        return final && w < SBX_REDACT_REGEX_WINDOW ? M_MORE : M_NONE;
                *ret_end = (size_t)pm[0].rm_eo;
                return M_MATCH;
        }
        default:
                return M_NONE;
        }
}

/* Everything that can be said at p: the best match of any trigger, or M_MORE when some
 * trigger needs more bytes to decide (then nothing is decided here). Secrets come first in
 * the chain and win ties; otherwise the longest match wins. */
static MatchResult match_at(const Redactor *r, const uint8_t *p, size_t avail, uint8_t prev, bool final,
                            const Trigger **ret_t, size_t *ret_end) {
        const Trigger *best = NULL;
        size_t best_end = 0;
        bool more = false;
        for (unsigned k = r->first[p[0]]; k; k = r->t[k - 1].next) {
                const Trigger *t = &r->t[k - 1];
                if (avail > 1 && t->lit[1] != p[1])
                        continue;
                size_t end = 0;
                MatchResult m = trigger_at(t, p, avail, prev, final, &end);
                if (m == M_MORE)
                        more = true;
                else if (m == M_MATCH && (!best || (end > best_end && !(best->kind == T_SECRET && t->kind != T_SECRET)))) {
                        best = t;
                        best_end = end;
                }
        }
        /* At the end no byte will come to make a longer match: a whole match found stands
         * (a secret that ends a stream, and that another rule could have read on past). */
        if (more && !(final && best))
                return M_MORE;
        if (!best)
                return M_NONE;
        *ret_t = best;
        *ret_end = best_end;
        return M_MATCH;
}

/* 1 or 0 as an unsigned, so that four of them are or'ed without a branch each. */
static inline unsigned pair_hit(const Redactor *r, const uint8_t *p) {
        unsigned v = p[0] | (unsigned)p[1] << 8;
        return (unsigned)((r->pairs[v >> 6] >> (v & 63)) & 1);
}

static int use_avx2 = -1; /* -1: not asked yet */

void redact_simd(bool on) {
#if defined(__x86_64__)
        use_avx2 = on && __builtin_cpu_supports("avx2");
#else
        (void)on;
#endif
}

#if defined(__x86_64__)
/* skip2() 32 pairs at a time: the pairs at j, j+2, ... are first ruled out by whole blocks,
 * with both bytes' set memberships taken for 32 places at once (two nibble lookups each); only
 * the places left are looked up in `pairs`. Returns what skip2() would, or the first j of its
 * parity from which fewer than 33 bytes are left (for skip2() to finish). */
__attribute__((target("avx2"))) static size_t skip2_avx2(const Redactor *r, const uint8_t *p, size_t j, size_t len) {
        const __m256i nib = _mm256_set1_epi8(0x0f), zero = _mm256_setzero_si256();
        const __m256i hi = _mm256_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16,
                                            32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
        const __m256i lo0 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)r->lo[0]));
        const __m256i lo1 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)r->lo[1]));
        while (j + 33 <= len) {
                __m256i a = _mm256_loadu_si256((const __m256i *)(p + j));
                __m256i b = _mm256_loadu_si256((const __m256i *)(p + j + 1));
                __m256i in_a = _mm256_and_si256(_mm256_shuffle_epi8(lo0, _mm256_and_si256(a, nib)),
                                                _mm256_shuffle_epi8(hi, _mm256_and_si256(_mm256_srli_epi16(a, 4), nib)));
                __m256i in_b = _mm256_and_si256(_mm256_shuffle_epi8(lo1, _mm256_and_si256(b, nib)),
                                                _mm256_shuffle_epi8(hi, _mm256_and_si256(_mm256_srli_epi16(b, 4), nib)));
                __m256i out = _mm256_or_si256(_mm256_cmpeq_epi8(in_a, zero), _mm256_cmpeq_epi8(in_b, zero));
                uint32_t m = ~(uint32_t)_mm256_movemask_epi8(out) & 0x55555555U;
                for (; m; m &= m - 1) {
                        size_t k = j + (size_t)__builtin_ctz(m);
                        if (pair_hit(r, p + k))
                                return k;
                }
                j += 32;
        }
        return j;
}
#endif

/* The first j >= i, stepping by 2, where the pair at j is one a literal has among its first
 * three bytes; len when none is. Four pairs per round: the common case is a miss. */
static size_t skip2(const Redactor *r, const uint8_t *p, size_t j, size_t len) {
#if defined(__x86_64__)
        if (use_avx2 < 0)
                redact_simd(true);
        if (use_avx2 > 0 && j + 33 <= len) {
                j = skip2_avx2(r, p, j, len);
                if (j + 33 <= len)
                        return j;
        }
#endif
        while (j + 8 < len) {
                if (pair_hit(r, p + j) | pair_hit(r, p + j + 2) | pair_hit(r, p + j + 4) | pair_hit(r, p + j + 6))
                        break;
                j += 8;
        }
        while (j + 1 < len && !pair_hit(r, p + j))
                j += 2;
        return j + 1 < len ? j : len;
}

static int emit(Buf *out, const void *d, size_t n) { return n ? buf_append(out, d, n) : 0; }

/* Inside a PEM block at p[*i]: swallows up to the end of its END line. Returns true when the
 * scan goes on in normal mode at *i, false when it must stop: *i is then where the bytes
 * still undecided start (all of them swallowed when the stream ends). */
static bool pem_step(RedactStream *s, const uint8_t *p, size_t len, size_t *i, int end) {
        size_t at = *i;
        const uint8_t *e = memmem(p + at, len - at, PEM_END, sizeof PEM_END - 1);
        if (!e) {
                size_t keep = end == END_MORE ? MIN(len - at, sizeof PEM_END - 2) : 0;
                s->pem_bytes += len - at - keep;
                *i = len - keep;
                if (s->pem_bytes > SBX_REDACT_PEM_MAX_BYTES) {
                        s->mode = MODE_NORMAL; /* no END in sight: output goes on being shown */
                        return true;
                }
                return false;
        }
        size_t j = (size_t)(e - p) + sizeof PEM_END - 1;
        size_t win = MIN(len - j, (size_t)PEM_END_LINE + 5);
        const uint8_t *d = memmem(p + j, win, "-----", 5);
        if (!d && end == END_MORE && len - j < (size_t)PEM_END_LINE + 5) {
                s->pem_bytes += (size_t)(e - p) - at;
                *i = (size_t)(e - p);
                return false;
        }
        *i = d ? (size_t)(d - p) + 5 : j;
        s->mode = MODE_NORMAL;
        return true;
}

/* Scans p[0..len): appends the redaction of what it decides to out and returns how many
 * bytes it consumed (END_MORE may leave a tail undecided; the others consume all). */
static size_t scan(RedactStream *s, const uint8_t *p, size_t len, int end, Buf *out, int *err) {
        const Redactor *r = s->r;
        size_t i = 0, e = 0;
        for (;;) {
                if (s->mode == MODE_SWALLOW) {
                        while (i < len && s->swallow_cls[p[i]])
                                i++;
                        e = i;
                        if (i == len)
                                break;
                        s->mode = MODE_NORMAL;
                }
                if (s->mode == MODE_PEM) {
                        bool go_on = pem_step(s, p, len, &i, end);
                        e = i;
                        if (go_on)
                                continue;
                        if (end != END_MORE) {
                                i = e = len;
                                break;
                        }
                        if (i > 0)
                                s->prev = p[i - 1];
                        return i;
                }
                /* Normal mode: candidates are the starts the prefilter points at. */
                size_t cand[2], nc = 0, next_i;
                size_t j = i < len ? skip2(r, p, i, len) : len;
                if (j >= len) {
                        /* The last two starts may have no pair inside the buffer. */
                        for (size_t k = MAX(e, len >= 2 ? len - 2 : 0); k < len; k++)
                                cand[nc++] = k;
                        next_i = SIZE_MAX;
                } else if (r->dash_pem && p[j] == '-' && p[j + 1] == '-') {
                        /* A run of dashes (a ruler) holds one place a PEM header can start: 5
                         * before its end. Only PEM starts with '-', so that is the one looked at. */
                        if (j > e)
                                cand[nc++] = j - 1;
                        size_t q = j + 2;
                        while (q < len && p[q] == '-')
                                q++;
                        size_t k = q == len ? MAX(j, len >= 5 ? len - 5 : 0) : q >= 5 ? q - 5 : 0;
                        if (k >= j && k >= e)
                                cand[nc++] = k;
                        next_i = q;
                } else {
                        if (j > e)
                                cand[nc++] = j - 1;
                        cand[nc++] = j;
                        next_i = j + 2;
                }
                bool matched = false;
                for (size_t c = 0; c < nc && !matched; c++) {
                        size_t k = cand[c];
                        const Trigger *t = NULL;
                        size_t mlen = 0;
                        uint8_t prev = k > 0 ? p[k - 1] : s->prev;
                        MatchResult m = match_at(r, p + k, len - k, prev, end != END_MORE, &t, &mlen);
                        /* At a cut, one byte is too little to hide. */
                        if (m == M_NONE || (m == M_MORE && (end == END_FINAL || (end == END_CUT && len - k < 2))))
                                continue;
                        *err |= emit(out, p + e, k - e);
                        if (m == M_MORE) {
                                if (end == END_CUT) {
                                        *err |= emit(out, MARK, sizeof MARK - 1);
                                        if (len > 0)
                                                s->prev = p[len - 1];
                                        return len;
                                }
                                if (k > 0)
                                        s->prev = p[k - 1];
                                return k;
                        }
                        *err |= emit(out, p + k, t->keep);
                        *err |= emit(out, t->marker, t->marker_len);
                        i = e = k + mlen;
                        matched = true;
                        if (t->kind == T_SHAPE) {
                                s->mode = MODE_SWALLOW;
                                s->swallow_cls = t->cls;
                        } else if (t->kind == T_PEM) {
                                s->mode = MODE_PEM;
                                s->pem_bytes = 0;
                        }
                }
                if (matched)
                        continue;
                if (next_i == SIZE_MAX) {
                        i = len;
                        break;
                }
                i = next_i;
        }
        *err |= emit(out, p + e, i - e);
        if (i > 0)
                s->prev = p[i - 1];
        return len;
}

void redact_stream_init(RedactStream *s, const Redactor *r) { *s = (RedactStream){ .r = r }; }

void redact_stream_done(RedactStream *s) {
        free(s->hold);
        *s = (RedactStream){ .r = s->r, .ended = true };
}

int redact_stream_clone(RedactStream *dst, const RedactStream *src) {
        *dst = *src;
        dst->hold = NULL;
        dst->hold_cap = 0;
        if (src->hold_len) {
                if (!(dst->hold = malloc(src->hold_len)))
                        return -ENOMEM;
                memcpy(dst->hold, src->hold, src->hold_len);
                dst->hold_cap = src->hold_len;
        }
        return 0;
}

static int hold_reserve(RedactStream *s, size_t want) {
        if (want <= s->hold_cap)
                return 0;
        size_t cap = MAX(want, 2 * s->r->hold_max + 16);
        uint8_t *h = realloc(s->hold, cap);
        if (!h)
                return -ENOMEM;
        s->hold = h;
        s->hold_cap = cap;
        return 0;
}

int redact_feed(RedactStream *s, const void *data, size_t len, Buf *out) {
        const uint8_t *d = data;
        int err = 0;
        if (s->ended)
                return 0;
        if (!s->r)
                return emit(out, d, len);
        while (len > 0) {
                if (s->hold_len == 0) {
                        size_t c = scan(s, d, len, END_MORE, out, &err);
                        if (c < len) {
                                if (hold_reserve(s, len - c) < 0)
                                        return -ENOMEM;
                                memcpy(s->hold, d + c, len - c);
                                s->hold_len = len - c;
                        }
                        break;
                }
                /* What is held back is decided with at most hold_max more bytes after it. */
                size_t old = s->hold_len, take = MIN(len, s->r->hold_max);
                if (hold_reserve(s, old + take) < 0)
                        return -ENOMEM;
                memcpy(s->hold + old, d, take);
                d += take;
                len -= take;
                size_t total = old + take, c = scan(s, s->hold, total, END_MORE, out, &err);
                if (c >= old) {
                        /* The old bytes are decided: the rest goes back to the fast path. */
                        size_t back = total - c;
                        d -= back;
                        len += back;
                        s->hold_len = 0;
                } else {
                        memmove(s->hold, s->hold + c, total - c);
                        s->hold_len = total - c;
                }
        }
        return err ? -ENOMEM : 0;
}

int redact_flush(RedactStream *s, bool cut, Buf *out) {
        int err = 0;
        if (s->ended)
                return 0;
        if (s->r && s->hold_len)
                (void)scan(s, s->hold, s->hold_len, cut ? END_CUT : END_FINAL, out, &err);
        s->hold_len = 0;
        s->mode = MODE_NORMAL;
        s->ended = true;
        return err ? -ENOMEM : 0;
}

int redact_text(const Redactor *r, const void *data, size_t len, char **ret, size_t *ret_len) {
        Buf b;
        RedactStream s;
        buf_init(&b, SIZE_MAX);
        redact_stream_init(&s, r);
        int e = redact_feed(&s, data, len, &b);
        if (e == 0)
                e = redact_flush(&s, false, &b);
        if (e == 0)
                e = buf_append(&b, "", 1);
        redact_stream_done(&s);
        if (e < 0) {
                buf_done(&b);
                return e;
        }
        size_t n;
        *ret = (char *)buf_steal(&b, &n);
        if (ret_len)
                *ret_len = n - 1;
        return 0;
}
