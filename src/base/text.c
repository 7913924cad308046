/* SPDX-License-Identifier: MIT */
/* base64 (nettle's, with sbx's rules on padding) and UTF-8 validation. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <nettle/base64.h>
#include "base/text.h"

char *b64_encode(const uint8_t *d, size_t len, size_t *ret_len) {
        size_t out_len = BASE64_ENCODE_RAW_LENGTH(len);
        char *out = malloc(out_len + 1);
        if (!out)
                return NULL;
        base64_encode_raw(out, len, d);
        out[out_len] = 0;
        if (ret_len)
                *ret_len = out_len;
        return out;
}

/* nettle's decoder passes over white space and wants the padding in its final step, while
 * text.h promises padding optional, no white space, and the unused bits of a last partial
 * group ignored. So the padding is cut off here and never reaches nettle, a last group of
 * one digit is refused here, and whatever nettle passed over (white space, an '=' inside)
 * shows in the length of what came out, each such byte taking 6 bits off it. */
uint8_t *b64_decode(const char *s, size_t len, size_t *ret_len) {
        while (len > 0 && s[len - 1] == '=')
                len--;
        if (len % 4 == 1) {
                errno = EINVAL;
                return NULL;
        }
        size_t want = len / 4 * 3 + (len % 4 ? len % 4 - 1 : 0), n = 0;
        uint8_t *out = malloc(BASE64_DECODE_LENGTH(len) + 1);
        if (!out) {
                errno = ENOMEM;
                return NULL;
        }
        struct base64_decode_ctx ctx;
        base64_decode_init(&ctx);
        if (!base64_decode_update(&ctx, &n, out, len, s) || n != want) {
                free(out);
                errno = EINVAL;
                return NULL;
        }
        *ret_len = n;
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

size_t json_marks(const char *s, size_t n, const char *marks) {
        size_t count = 0;
        bool in_string = false;
        for (size_t i = 0; i < n; i++) {
                char ch = s[i];
                if (in_string) {
                        if (ch == '\\')
                                i++;
                        else if (ch == '"')
                                in_string = false;
                } else if (ch == '"') {
                        in_string = true;
                } else if (ch && strchr(marks, ch)) {
                        count++;
                }
        }
        return count;
}

size_t text_show_controls(const uint8_t *d, size_t len, bool *carry, char *out) {
        static const char hex[] = "0123456789abcdef";
        size_t n = 0;
        for (size_t i = 0; i < len; i++) {
                uint8_t ch = d[i];
                if (*carry) {
                        *carry = false;
                        if (ch >= 0x80 && ch <= 0x9f) {
                                memcpy(out + n, "\\u00", 4);
                                out[n + 4] = hex[ch >> 4];
                                out[n + 5] = hex[ch & 15];
                                n += 6;
                                continue;
                        }
                        out[n++] = (char)0xc2;
                }
                if (ch == 0xc2 && i + 1 == len) {
                        *carry = true;
                } else if (ch == 0xc2 && d[i + 1] >= 0x80 && d[i + 1] <= 0x9f) {
                        ch = d[++i];
                        memcpy(out + n, "\\u00", 4);
                        out[n + 4] = hex[ch >> 4];
                        out[n + 5] = hex[ch & 15];
                        n += 6;
                } else if ((ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r' && ch != '\b') || ch == 0x7f) {
                        out[n++] = '\\';
                        out[n++] = 'x';
                        out[n++] = hex[ch >> 4];
                        out[n++] = hex[ch & 15];
                } else {
                        out[n++] = (char)ch;
                }
        }
        return n;
}
