/* SPDX-License-Identifier: MIT */
/* base64 and UTF-8 validation. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "base/text.h"

static const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *b64_encode(const uint8_t *d, size_t len, size_t *ret_len) {
        size_t out_len = 4 * ((len + 2) / 3);
        char *out = malloc(out_len + 1), *p = out;
        if (!out)
                return NULL;
        size_t i = 0;
        for (; i + 2 < len; i += 3) {
                uint32_t v = (uint32_t)d[i] << 16 | (uint32_t)d[i + 1] << 8 | d[i + 2];
                *p++ = b64chars[v >> 18];
                *p++ = b64chars[(v >> 12) & 63];
                *p++ = b64chars[(v >> 6) & 63];
                *p++ = b64chars[v & 63];
        }
        if (i < len) {
                uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < len ? (uint32_t)d[i + 1] << 8 : 0);
                *p++ = b64chars[v >> 18];
                *p++ = b64chars[(v >> 12) & 63];
                *p++ = i + 1 < len ? b64chars[(v >> 6) & 63] : '=';
                *p++ = '=';
        }
        *p = 0;
        if (ret_len)
                *ret_len = out_len;
        return out;
}

/* Value of each base64 digit, 0xff for every other byte; filled on first use (one thread). */
static uint8_t b64_table[256];
static bool b64_table_ready;

static void b64_table_init(void) {
        static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        if (b64_table_ready)
                return;
        memset(b64_table, 0xff, sizeof b64_table);
        for (int i = 0; i < 64; i++)
                b64_table[(unsigned char)digits[i]] = (uint8_t)i;
        b64_table_ready = true;
}

uint8_t *b64_decode(const char *s, size_t len, size_t *ret_len) {
        while (len > 0 && s[len - 1] == '=')
                len--;
        if (len % 4 == 1) {
                errno = EINVAL;
                return NULL;
        }
        uint8_t *out = malloc(len / 4 * 3 + 3 + 1), *p = out;
        if (!out) {
                errno = ENOMEM;
                return NULL;
        }
        b64_table_init();
        const unsigned char *u = (const unsigned char *)s;
        size_t i = 0;
        /* Four digits at a time; a bad digit sets the high bit of the OR of their values. */
        for (; i + 4 <= len; i += 4) {
                uint32_t a = b64_table[u[i]], b = b64_table[u[i + 1]], c = b64_table[u[i + 2]], d = b64_table[u[i + 3]];
                if ((a | b | c | d) & 0x80) {
                        free(out);
                        errno = EINVAL;
                        return NULL;
                }
                uint32_t v = a << 18 | b << 12 | c << 6 | d;
                p[0] = (uint8_t)(v >> 16);
                p[1] = (uint8_t)(v >> 8);
                p[2] = (uint8_t)v;
                p += 3;
        }
        uint32_t acc = 0;
        int bits = 0;
        for (; i < len; i++) {
                uint8_t v = b64_table[u[i]];
                if (v & 0x80) {
                        free(out);
                        errno = EINVAL;
                        return NULL;
                }
                acc = acc << 6 | v;
                bits += 6;
                if (bits >= 8) {
                        bits -= 8;
                        *p++ = (uint8_t)(acc >> bits);
                }
        }
        *ret_len = (size_t)(p - out);
        return out;
}

/* Length of the well-formed UTF-8 sequence at s (0 if none). */
static size_t utf8_seq(const uint8_t *s, size_t len) {
        if (len == 0 || s[0] == 0)
                return 0;
        if (s[0] < 0x80)
                return 1;
        size_t n;
        uint32_t cp;
        if ((s[0] & 0xe0) == 0xc0) { n = 1; cp = s[0] & 0x1f; }
        else if ((s[0] & 0xf0) == 0xe0) { n = 2; cp = s[0] & 0x0f; }
        else if ((s[0] & 0xf8) == 0xf0) { n = 3; cp = s[0] & 0x07; }
        else return 0;
        if (n >= len)
                return 0;
        for (size_t k = 1; k <= n; k++) {
                if ((s[k] & 0xc0) != 0x80)
                        return 0;
                cp = cp << 6 | (s[k] & 0x3f);
        }
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
                return 0;
        return n + 1;
}

bool utf8_sanitize(char *str) {
        uint8_t *s = (uint8_t *)str;
        size_t len = strlen(str);
        bool changed = false;
        for (size_t i = 0; i < len;) {
                size_t n = utf8_seq(s + i, len - i);
                if (n == 0) {
                        s[i++] = '?';
                        changed = true;
                } else {
                        i += n;
                }
        }
        return changed;
}

bool utf8_valid(const uint8_t *s, size_t len) {
        for (size_t i = 0; i < len;) {
                size_t n = utf8_seq(s + i, len - i);
                if (n == 0)
                        return false;
                i += n;
        }
        return true;
}
