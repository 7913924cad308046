/* SPDX-License-Identifier: MIT */
/* Byte/text conversions for the protocol: base64 and UTF-8 validation. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Encodes len bytes; returns a malloc'd NUL-terminated string (ret_len without the NUL), or
 * NULL on allocation failure. */
char *b64_encode(const uint8_t *data, size_t len, size_t *ret_len);
/* Decodes standard base64 (padding optional, no white space; the unused bits of a last
 * partial group are ignored). Returns a malloc'd buffer, or NULL with errno EINVAL (bad
 * input) or ENOMEM. */
uint8_t *b64_decode(const char *s, size_t len, size_t *ret_len);
/* True when the bytes are well-formed UTF-8 (no overlongs, surrogates or NUL bytes, which
 * JSON strings from jansson cannot carry reliably). */
bool utf8_valid(const uint8_t *s, size_t len);
/* Replaces every byte that is not part of well-formed UTF-8 (and NULs) with '?', in place:
 * for text that must become a JSON string whatever it contains. Returns true if it changed. */
bool utf8_sanitize(char *s);
/* How many bytes of `marks` a JSON text holds outside its strings: a bound, before parsing, on
 * what parsing it makes ("{[": its objects and arrays; "{[,:": about every value). */
size_t json_marks(const char *s, size_t n, const char *marks);
