/* SPDX-License-Identifier: MIT */
/* The file tools of `sbx mcp` over the daemon's files.* methods: read_file (numbered lines,
 * read piece by piece), write_file and edit_file (which keep a file's permissions), each in
 * steps of its own, and the answer of list_directory (a request of the table in tools.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/text.h"
#include "mcp/tool.h"

/* A file's bytes from a files.read answer (base64), malloc'd with a NUL after them. */
static uint8_t *read_data(json_t *res, size_t *ret_len) {
        json_t *d = json_object_get(res, "data");
        size_t n = 0;
        uint8_t *b = b64_decode(json_string_value(d) ?: "", json_string_length(d), &n);
        uint8_t *out = b ? realloc(b, n + 1) : NULL;
        if (!out) {
                free(b);
                return NULL;
        }
        out[n] = 0;
        *ret_len = n;
        return out;
}

static json_t *path_params(McpCall *c, const char *path) {
        json_t *p = mcp_params(c);
        if (p && json_object_set_new(p, "path", json_string(path)) < 0) {
                json_decref(p);
                return NULL;
        }
        return p;
}

/* ---- read_file */

/* Where the reading of a file is: lines are numbered from 1 and shown from `first` to `last`
 * as "%6u\t" and their text, each cut at SBX_MCP_READ_LINE_BYTES, the whole answer stopping
 * after the line that takes it past SBX_MCP_READ_SHOWN_BYTES. */
typedef struct ReadState {
        uint64_t first, last;
        uint64_t line;  /* the line the next byte belongs to */
        uint64_t pos;   /* the next byte of the file to read */
        size_t col;     /* bytes of the current line shown */
        uint64_t cut;   /* bytes of the current line not shown */
        bool numbered;  /* the current line's number is written */
        bool partial;   /* the current line has bytes (a last line may have no newline) */
        bool full;      /* the answer is as long as it may be */
        bool more;      /* the file goes on past what is shown */
        FILE *f;
        char *text;
        size_t len;
} ReadState;

static void read_state_free(void *p) {
        ReadState *s = p;
        if (s->f)
                fclose(s->f);
        free(s->text);
        free(s);
}

/* Writes bytes of a line; a NUL in a text file is shown as '?'. */
static void put_line_bytes(FILE *f, const uint8_t *d, size_t n) {
        for (const uint8_t *z; n && (z = memchr(d, 0, n)); n -= (size_t)(z - d) + 1, d = z + 1) {
                fwrite(d, 1, (size_t)(z - d), f);
                fputc('?', f);
        }
        fwrite(d, 1, n, f);
}

static void end_line(ReadState *s) {
        if (s->cut)
                fprintf(s->f, " [... %llu more bytes in this line]", (unsigned long long)s->cut);
        fputc('\n', s->f);
        if (ftell(s->f) >= (long)SBX_MCP_READ_SHOWN_BYTES)
                s->full = true;
}

/* Takes one piece of the file; returns true once nothing more is wanted. */
static bool read_piece(ReadState *s, const uint8_t *d, size_t n) {
        size_t i = 0;
        while (i < n) {
                const uint8_t *nl = memchr(d + i, '\n', n - i);
                size_t seg = nl ? (size_t)(nl - (d + i)) : n - i;
                if (s->line >= s->first && s->line <= s->last) {
                        if (!s->numbered) {
                                fprintf(s->f, "%6llu\t", (unsigned long long)s->line);
                                s->numbered = true;
                        }
                        size_t k = MIN(seg, SBX_MCP_READ_LINE_BYTES - s->col);
                        /* Never half a UTF-8 sequence at the cut. */
                        if (k < seg)
                                while (k > 0 && (d[i + k] & 0xC0) == 0x80)
                                        k--;
                        put_line_bytes(s->f, d + i, k);
                        s->col += k;
                        if (k < seg) {
                                s->cut += seg - k;
                                s->col = SBX_MCP_READ_LINE_BYTES;
                        }
                }
                if (seg)
                        s->partial = true;
                i += seg;
                if (!nl)
                        break;
                i++;
                if (s->numbered)
                        end_line(s);
                s->line++;
                s->col = 0;
                s->cut = 0;
                s->numbered = s->partial = false;
                if (s->line > s->last || s->full) {
                        s->more = i < n;
                        return true;
                }
        }
        return false;
}

static void read_answered(McpCall *c, json_t *res, const char *error);

static void read_next(McpCall *c) {
        ReadState *s = c->state;
        json_t *p = path_params(c, arg_str(c, "path"));
        if (p && (json_object_set_new(p, "offset", json_integer((json_int_t)s->pos)) < 0 ||
                  json_object_set_new(p, "length", json_integer(SBX_MCP_READ_CHUNK_BYTES)) < 0)) {
                json_decref(p);
                p = NULL;
        }
        (void)mcp_send(c, "files.read", p, read_answered);
}

static void read_done(McpCall *c, uint64_t size) {
        ReadState *s = c->state;
        const char *path = arg_str(c, "path");
        if (s->numbered)
                end_line(s); /* a last line without a newline */
        uint64_t lines = s->line - 1 + (s->partial ? 1 : 0);
        if (size == 0)
                fprintf(s->f, "(%s is empty)\n", path);
        else if (!s->more && s->first > lines)
                fprintf(s->f, "(%s has %llu lines: offset %llu is past its end)\n", path, (unsigned long long)lines,
                        (unsigned long long)s->first);
        else if (s->more)
                fprintf(s->f, "(lines %llu-%llu shown; the file goes on: read_file with offset=%llu for more)\n",
                        (unsigned long long)s->first, (unsigned long long)(s->line - 1), (unsigned long long)s->line);
        int r = fclose(s->f);
        s->f = NULL;
        if (r != 0) {
                mcp_answer(c, "out of memory", 13, true);
                return;
        }
        mcp_answer_text(c, TAKE_PTR(s->text), false);
}

static void read_answered(McpCall *c, json_t *res, const char *error) {
        ReadState *s = c->state;
        if (mcp_refused(c, res, error))
                return;
        size_t n;
        _cleanup_free_ uint8_t *d = read_data(res, &n);
        if (!d) {
                mcp_answer(c, "out of memory", 13, true);
                return;
        }
        uint64_t size = (uint64_t)json_integer_value(json_object_get(res, "size"));
        if (s->pos == 0 && memchr(d, 0, MIN(n, 8192u))) {
                mcp_answer_fmt(c, true,
                               "%s is not a text file (it holds NUL bytes; %llu bytes): read_file shows text. Look "
                               "into it with run, e.g. `xxd %s | head`.",
                               arg_str(c, "path"), (unsigned long long)size, arg_str(c, "path"));
                return;
        }
        bool stop = read_piece(s, d, n);
        s->pos += n;
        if (stop) {
                s->more = s->more || s->pos < size;
                read_done(c, size);
        } else if (n == 0 || s->pos >= size)
                read_done(c, size);
        else
                read_next(c);
}

void tool_read_file(McpCall *c) {
        ReadState *s = calloc(1, sizeof *s);
        if (!s || !(s->f = open_memstream(&s->text, &s->len))) {
                free(s);
                mcp_answer(c, "out of memory", 13, true);
                return;
        }
        s->first = (uint64_t)arg_num(c, "offset", 1);
        s->last = s->first + (uint64_t)arg_num(c, "limit", SBX_MCP_READ_LINES) - 1;
        s->line = 1;
        c->state = s;
        c->state_free = read_state_free;
        read_next(c);
}

/* ---- write_file and edit_file */

/* What a write or an edit learnt of the file before changing it. */
typedef struct WriteState {
        bool existed;
        int mode; /* its permission bits, kept by the new file; -1: the daemon's default */
        uint64_t size;
        char *answer; /* an edit's answer, made before its write and sent once that succeeds */
} WriteState;

static void write_state_free(void *p) {
        WriteState *s = p;
        free(s->answer);
        free(s);
}

static WriteState *write_state(McpCall *c) {
        WriteState *s = calloc(1, sizeof *s);
        if (!s)
                return NULL;
        s->mode = -1;
        c->state = s;
        c->state_free = write_state_free;
        return s;
}

/* Learns from a files.stat answer whether the path is a file to write over; answers the call
 * (and returns false) when it is something else. */
static bool stat_taken(McpCall *c, json_t *res) {
        WriteState *s = c->state;
        if (!res)
                return true; /* nothing there: it is made, or the write says what is wrong */
        const char *type = json_string_value(json_object_get(res, "type")) ?: "";
        const char *path = arg_str(c, "path");
        if (strcmp(type, "dir") == 0) {
                mcp_answer_fmt(c, true, "%s is a directory", path);
                return false;
        }
        if (strcmp(type, "symlink") == 0) {
                const char *target = json_string_value(json_object_get(res, "target"));
                mcp_answer_fmt(c, true, "%s is a symlink (to %s): give the path of the file itself", path,
                               target ? target : "?");
                return false;
        }
        if (strcmp(type, "file") != 0) {
                mcp_answer_fmt(c, true, "%s is not a regular file", path);
                return false;
        }
        s->existed = true;
        s->mode = (int)(json_integer_value(json_object_get(res, "mode")) & 07777);
        s->size = (uint64_t)json_integer_value(json_object_get(res, "size"));
        return true;
}

/* Sends files.write of data (len bytes) with the file's old permissions. */
static void send_write(McpCall *c, const void *data, size_t len, McpAnswerFn fn) {
        WriteState *s = c->state;
        size_t blen;
        char *b = b64_encode(data, len, &blen);
        json_t *p = b ? path_params(c, arg_str(c, "path")) : NULL;
        if (p && (json_object_set_new(p, "data", json_stringn_nocheck(b, blen)) < 0 ||
                  (s->mode >= 0 && json_object_set_new(p, "mode", json_integer(s->mode)) < 0))) {
                json_decref(p);
                p = NULL;
        }
        free(b);
        (void)mcp_send(c, "files.write", p, fn);
}

static size_t count_lines(const char *s, size_t n) {
        size_t lines = 0;
        for (const char *e = s + n; s < e && (s = memchr(s, '\n', (size_t)(e - s))); s++)
                lines++;
        return lines;
}

static void written(McpCall *c, json_t *res, const char *error) {
        WriteState *s = c->state;
        if (mcp_refused(c, res, error))
                return;
        json_t *content = json_object_get(c->args, "content");
        size_t n = json_string_length(content);
        size_t lines = count_lines(json_string_value(content), n);
        if (n && json_string_value(content)[n - 1] != '\n')
                lines++;
        mcp_answer_fmt(c, false, "%s %s: %zu bytes, %zu lines", s->existed ? "replaced" : "created",
                       arg_str(c, "path"), n, lines);
}

static void write_stat_answered(McpCall *c, json_t *res, const char *error) {
        if (!stat_taken(c, res))
                return;
        json_t *content = json_object_get(c->args, "content");
        send_write(c, json_string_value(content), json_string_length(content), written);
}

void tool_write_file(McpCall *c) {
        size_t n = json_string_length(json_object_get(c->args, "content"));
        if (n > SBX_MCP_FILE_BYTES) {
                /* Parts through write_file, joined by one short command: run's command itself is
                 * capped (64 KiB), so the file cannot go through run's text. */
                mcp_answer_fmt(c, true, "content is %zu bytes: write_file writes at most %u at a time; write a large "
                               "file as parts (write_file FILE.part1, FILE.part2, ... each at most that), then join "
                               "them with run: `cat FILE.part1 FILE.part2 > FILE && rm FILE.part*`", n,
                               SBX_MCP_FILE_BYTES);
                return;
        }
        if (!write_state(c)) {
                mcp_answer(c, "out of memory", 13, true);
                return;
        }
        (void)mcp_send(c, "files.stat", path_params(c, arg_str(c, "path")), write_stat_answered);
}

/* The line (from 1) of each of the first few occurrences, for the answer. */
static void put_lines_of(FILE *f, const char *d, size_t n, const char *old, size_t olen) {
        size_t line = 1, shown = 0, last = 0;
        const char *at = d;
        for (const char *m = d; (m = memmem(m, n - (size_t)(m - d), old, olen)); m += olen) {
                line += count_lines(at, (size_t)(m - at));
                at = m;
                if (line == last)
                        continue;
                last = line;
                if (shown < 10)
                        fprintf(f, "%s%zu", shown ? ", " : "", line);
                else if (shown == 10)
                        fputs(", ...", f);
                shown++;
        }
}

static size_t count_occurrences(const char *d, size_t n, const char *old, size_t olen) {
        size_t k = 0;
        for (const char *m = d; (m = memmem(m, n - (size_t)(m - d), old, olen)); m += olen)
                k++;
        return k;
}

static void edited(McpCall *c, json_t *res, const char *error) {
        if (mcp_refused(c, res, error))
                return;
        WriteState *s = c->state;
        mcp_answer_text(c, TAKE_PTR(s->answer), false);
}

static void edit_read_answered(McpCall *c, json_t *res, const char *error) {
        if (mcp_refused(c, res, error))
                return;
        const char *path = arg_str(c, "path");
        json_t *jold = json_object_get(c->args, "old_string"), *jnew = json_object_get(c->args, "new_string");
        const char *old = json_string_value(jold), *new = json_string_value(jnew);
        size_t olen = json_string_length(jold), nlen = json_string_length(jnew);
        size_t n;
        _cleanup_free_ char *d = (char *)read_data(res, &n);
        if (!d) {
                mcp_answer(c, "out of memory", 13, true);
                return;
        }
        size_t k = count_occurrences(d, n, old, olen);
        char *text = NULL;
        size_t tlen = 0;
        MEMSTREAM_OR_FAIL(c, f, text, tlen);
        if (k == 0 || (k > 1 && !arg_bool(c, "replace_all"))) {
                if (k == 0)
                        fprintf(f, "old_string was not found in %s; nothing changed. It must match the file "
                                "exactly, whitespace and indentation included (read_file shows the file; its line "
                                "numbers and tab are not part of it).", path);
                else {
                        fprintf(f, "old_string occurs %zu times in %s (on line ", k, path);
                        put_lines_of(f, d, n, old, olen);
                        fputs("); nothing changed. Include more of the surrounding text to make it unique, or set "
                              "replace_all to replace every occurrence.", f);
                }
                mcp_answer_memstream(c, f, &text, true);
                return;
        }
        size_t newlen = n - k * olen + k * nlen;
        if (newlen > SBX_MCP_FILE_BYTES) {
                fclose(f);
                free(text);
                mcp_answer_fmt(c, true, "the edit would make %s %zu bytes: edit_file writes at most %u", path, newlen,
                               SBX_MCP_FILE_BYTES);
                return;
        }
        _cleanup_free_ char *out = malloc(newlen + 1);
        if (!out) {
                fclose(f);
                free(text);
                mcp_answer(c, "out of memory", 13, true);
                return;
        }
        size_t o = 0;
        const char *from = d;
        for (const char *m = d; (m = memmem(m, n - (size_t)(m - d), old, olen)); m += olen, from = m) {
                memcpy(out + o, from, (size_t)(m - from));
                o += (size_t)(m - from);
                memcpy(out + o, new, nlen);
                o += nlen;
        }
        memcpy(out + o, from, n - (size_t)(from - d));
        fprintf(f, "edited %s: replaced %zu occurrence%s (found on line ", path, k, k == 1 ? "" : "s");
        put_lines_of(f, d, n, old, olen);
        fputs(" of the old text)", f);
        if (fclose(f) != 0 || !text) {
                free(text);
                mcp_answer(c, "out of memory", 13, true);
                return;
        }
        WriteState *s = c->state;
        s->answer = text;
        send_write(c, out, newlen, edited);
}

static void edit_stat_answered(McpCall *c, json_t *res, const char *error) {
        WriteState *s = c->state;
        if (mcp_refused(c, res, error))
                return;
        if (!stat_taken(c, res))
                return;
        if (s->size > SBX_MCP_FILE_BYTES) {
                mcp_answer_fmt(c, true, "%s is %llu bytes: edit_file edits files of at most %u; use run (sed, patch)",
                               arg_str(c, "path"), (unsigned long long)s->size, SBX_MCP_FILE_BYTES);
                return;
        }
        (void)mcp_send(c, "files.read", path_params(c, arg_str(c, "path")), edit_read_answered);
}

void tool_edit_file(McpCall *c) {
        json_t *jold = json_object_get(c->args, "old_string"), *jnew = json_object_get(c->args, "new_string");
        if (json_string_length(jold) == 0) {
                mcp_answer(c, "old_string is empty: give the text to replace (to make a new file, use write_file)", 82,
                           true);
                return;
        }
        if (json_equal(jold, jnew)) {
                mcp_answer(c, "old_string and new_string are the same: there is nothing to change", 67, true);
                return;
        }
        if (!write_state(c)) {
                mcp_answer(c, "out of memory", 13, true);
                return;
        }
        (void)mcp_send(c, "files.stat", path_params(c, arg_str(c, "path")), edit_stat_answered);
}

/* ---- list_directory */

static int by_path(const void *a, const void *b) {
        const char *pa = json_string_value(json_object_get(*(json_t *const *)a, "path")) ?: "";
        const char *pb = json_string_value(json_object_get(*(json_t *const *)b, "path")) ?: "";
        return strcmp(pa, pb);
}

int put_directory(McpCall *c, json_t *res, FILE *f) {
        json_t *entries = json_object_get(res, "entries");
        size_t n = json_array_size(entries);
        _cleanup_free_ json_t **v = calloc(n ? n : 1, sizeof *v);
        if (!v)
                return -ENOMEM;
        /* Entries are shown from the listed directory: it is the parent of the shallowest. */
        size_t root = 0, slashes = SIZE_MAX;
        for (size_t i = 0; i < n; i++) {
                v[i] = json_array_get(entries, i);
                const char *p = json_string_value(json_object_get(v[i], "path")) ?: "";
                size_t k = 0;
                for (const char *q = p; (q = strchr(q, '/')); q++)
                        k++;
                if (k < slashes) {
                        slashes = k;
                        const char *last = strrchr(p, '/');
                        root = last ? (size_t)(last - p) + 1 : 0;
                }
        }
        qsort(v, n, sizeof *v, by_path);
        const char *dir = arg_str(c, "path") ?: "/home/user";
        if (n == 0)
                fprintf(f, "%s is empty\n", dir);
        for (size_t i = 0; i < n && i < SBX_MCP_LIST_SHOWN; i++) {
                const char *p = json_string_value(json_object_get(v[i], "path")) ?: "";
                const char *type = json_string_value(json_object_get(v[i], "type")) ?: "";
                const char *rel = strlen(p) >= root ? p + root : p;
                if (strcmp(type, "dir") == 0)
                        fprintf(f, "%s/\n", rel);
                else if (strcmp(type, "file") == 0)
                        fprintf(f, "%s  (%lld bytes)\n", rel, (long long)json_integer_value(json_object_get(v[i], "size")));
                else if (strcmp(type, "symlink") == 0)
                        fprintf(f, "%s -> %s\n", rel, json_string_value(json_object_get(v[i], "target")) ?: "?");
                else
                        fprintf(f, "%s  (%s)\n", rel, type);
        }
        if (n > SBX_MCP_LIST_SHOWN)
                fprintf(f, "... and %zu more entries\n", n - SBX_MCP_LIST_SHOWN);
        return 0;
}
