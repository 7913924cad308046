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

/* Terminal-safe form of bytes a sandbox wrote, for a terminal: ESC, the other C0 controls but
 * tab, newline, carriage return and backspace, DEL and the C1 controls (U+0080 to U+009F, two
 * bytes in UTF-8; a terminal takes U+009B for CSI) become \xNN or \uNNNN text, so no
 * sequence of a command's sets the clipboard (OSC 52), answers a query on the user's behalf
 * (CSI 6n) or retitles the window. Writes the form of d[0..len) to out, which holds at least
 * TEXT_SHOWN_MAX(len) bytes, and returns its length; *carry keeps a 0xc2 that ended one piece
 * for the next (false at the start of a stream). */
#define TEXT_SHOWN_MAX(len) (4 * (len) + 2)
size_t text_show_controls(const uint8_t *d, size_t len, bool *carry, char *out);
