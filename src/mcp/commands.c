/* SPDX-License-Identifier: MIT */
/* The answers of `sbx mcp`'s command, process and sandbox tools: each turns a daemon result
 * into the text an agent reads (output cut to its start and end, statuses in words). Their
 * requests are rows of the table in tools.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/text.h"
#include "base/util.h"
#include "mcp/tool.h"

/* ---- text */

/* A bytes field of a daemon answer ("stdout", with "stdoutEncoding": "base64" when it is not
 * UTF-8) as text: malloc'd, NUL-terminated, valid UTF-8 (other bytes and NULs become '?').
 * *ret_raw tells whether it had to change anything. NULL when out of memory. */
static char *answer_text(json_t *obj, const char *key, size_t *ret_len, bool *ret_raw) {
        json_t *v = json_object_get(obj, key);
        const char *s = json_string_value(v);
        size_t n = s ? json_string_length(v) : 0;
        char ekey[64];
        snprintf(ekey, sizeof ekey, "%sEncoding", key);
        bool b64 = json_object_get(obj, ekey) != NULL;
        char *out;
        if (b64) {
                size_t dn;
                uint8_t *d = b64_decode(s, n, &dn);
                out = d ? realloc(d, dn + 1) : NULL;
                if (!out) {
                        free(d);
                        return NULL;
                }
                n = dn;
        } else {
                out = malloc(n + 1);
                if (!out)
                        return NULL;
                memcpy(out, s ? s : "", n);
        }
        out[n] = '\0';
        bool raw = b64;
        for (size_t i = 0; i < n; i++)
                if (out[i] == '\0') {
                        out[i] = '?';
                        raw = true;
                }
        if (b64)
                (void)utf8_sanitize(out);
        *ret_len = n;
        *ret_raw = raw;
        return out;
}

/* Writes len bytes of text to f, or its first and last halves of max with a line saying how
 * many bytes lie between; returns the bytes left out. */
static size_t put_cut(FILE *f, const char *s, size_t len, size_t max) {
        if (len <= max) {
                fwrite(s, 1, len, f);
                return 0;
        }
        /* The start and the end, each cut at a line's end when one is near, never inside a
         * UTF-8 sequence. */
        size_t head = max / 2, tail = len - (max - max / 2);
        for (size_t i = head; i > max / 2 * 3 / 4; i--)
                if (s[i - 1] == '\n') {
                        head = i;
                        break;
                }
        while (head > 0 && ((unsigned char)s[head] & 0xC0) == 0x80)
                head--;
        for (size_t i = tail; i < len && i < tail + max / 8; i++)
                if (s[i] == '\n') {
                        tail = i + 1;
                        break;
                }
        while (tail < len && ((unsigned char)s[tail] & 0xC0) == 0x80)
                tail++;
        fwrite(s, 1, head, f);
        if (head > 0 && s[head - 1] != '\n')
                fputc('\n', f);
        fprintf(f, "[... %zu bytes not shown ...]\n", tail - head);
        fwrite(s + tail, 1, len - tail, f);
        return tail - head;
}

/* Writes stdout, then stderr under a header, each cut to SBX_MCP_SHOWN_BYTES; says when
 * there was neither. Returns -ENOMEM or 0. */
static int put_streams(FILE *f, json_t *res) {
        size_t olen, elen;
        bool oraw, eraw;
        _cleanup_free_ char *out = answer_text(res, "stdout", &olen, &oraw);
        _cleanup_free_ char *err = answer_text(res, "stderr", &elen, &eraw);
        if (!out || !err)
                return -ENOMEM;
        put_cut(f, out, olen, SBX_MCP_SHOWN_BYTES);
        if (olen && out[olen - 1] != '\n')
                fputc('\n', f);
        if (elen) {
                fputs("--- stderr ---\n", f);
                put_cut(f, err, elen, SBX_MCP_SHOWN_BYTES);
                if (err[elen - 1] != '\n')
                        fputc('\n', f);
        }
        if (!olen && !elen)
                fputs("(no output)\n", f);
        if (oraw || eraw)
                fprintf(f, "(%s%s%s not valid UTF-8 text: other bytes are shown as ?)\n", oraw ? "stdout" : "",
                        oraw && eraw ? " and " : "", eraw ? "stderr" : "");
        return 0;
}


/* ---- run */

static const char *error_class_note(const char *cls) {
        if (!cls)
                return NULL;
        if (strcmp(cls, "OOM") == 0)
                return "the sandbox's memory limit was reached: the kernel killed a process";
        if (strcmp(cls, "FS_FULL") == 0)
                return "the sandbox's filesystem is full (no free bytes or inodes left)";
        if (strcmp(cls, "PIDS_LIMIT") == 0)
                return "the sandbox's process limit was reached: a fork was refused and the command was stopped";
        if (strcmp(cls, "LIMIT_EXCEEDED") == 0)
                return "a limit was exceeded and nothing ran (see stderr)";
        if (strcmp(cls, "UNAVAILABLE") == 0)
                return "the server could not start the command (out of file descriptors or memory) and nothing ran: "
                       "try again later";
        return NULL;
}

int put_run(McpCall *c, json_t *res, FILE *f) {
        int code = (int)json_integer_value(json_object_get(res, "exitCode"));
        const char *cls = json_string_value(json_object_get(res, "errorClass"));
        json_int_t killed = json_integer_value(json_object_get(res, "killedProcesses"));
        if (put_streams(f, res) < 0)
                return -ENOMEM;
        json_t *dropped = json_object_get(res, "droppedBytes");
        json_int_t dout = json_integer_value(json_object_get(dropped, "stdout"));
        json_int_t derr = json_integer_value(json_object_get(dropped, "stderr"));
        if (dout || derr)
                fprintf(f, "(output past the 1 MiB kept per stream was dropped: %lld bytes of stdout, %lld of stderr)\n",
                        (long long)dout, (long long)derr);
        fprintf(f, "exit code: %d", code);
        bool timeout = cls && strcmp(cls, "TIMEOUT") == 0, cancelled = cls && strcmp(cls, "CANCELLED") == 0;
        if (timeout)
                fprintf(f, " (timed out after %g s", arg_timeout_s(c));
        else if (cancelled)
                fputs(" (cancelled", f);
        else if (error_class_note(cls))
                fprintf(f, " (%s", error_class_note(cls));
        if (timeout || cancelled)
                fputs(": the command and everything it started were killed", f);
        if (killed && (timeout || cancelled || error_class_note(cls)))
                fprintf(f, ", %lld process%s", (long long)killed, killed == 1 ? "" : "es");
        if (timeout || cancelled || error_class_note(cls))
                fputc(')', f);
        fputc('\n', f);
        if (json_is_true(json_object_get(res, "sessionReset")))
                fputs("The session's shell was killed from inside the sandbox: the session started over, with a new "
                      "session's cwd, variables and functions.\n",
                      f);
        else if (json_is_true(json_object_get(res, "stateDiscarded")))
                fputs("What the command changed in the session (cwd, variables, functions) was not kept: the session "
                      "is as it was before it.\n",
                      f);
        return code != 0;
}

/* ---- code cells */

/* A cell's text: what it printed, each result's text (its images as image content beside
 * it), its error with the traceback. An error makes the answer one. */
int put_code(McpCall *c, json_t *res, FILE *f) {
        json_t *logs = json_object_get(res, "logs"), *v;
        size_t i;
        json_array_foreach(json_object_get(logs, "stdout"), i, v) fputs(json_string_value(v) ?: "", f);
        bool err_head = false;
        json_array_foreach(json_object_get(logs, "stderr"), i, v) {
                if (!err_head)
                        fputs("stderr:\n", f);
                err_head = true;
                fputs(json_string_value(v) ?: "", f);
        }
        json_t *r;
        json_array_foreach(json_object_get(res, "results"), i, r) {
                json_t *data = json_object_get(r, "data");
                const char *text = json_string_value(json_object_get(data, "text/plain"));
                const char *md = json_string_value(json_object_get(data, "text/markdown"));
                bool main = json_is_true(json_object_get(r, "isMainResult"));
                fprintf(f, "%s%s\n", main ? "Out: " : "", md ? md : text ? text : "(no text form)");
                static const char *const images[] = { "image/png", "image/jpeg" };
                for (size_t k = 0; k < ELEMENTSOF(images); k++) {
                        const char *b64 = json_string_value(json_object_get(data, images[k]));
                        if (!b64)
                                continue;
                        if (!c->extra_content && !(c->extra_content = json_array()))
                                return -ENOMEM;
                        json_array_append_new(c->extra_content, json_pack("{s:s, s:s, s:s}", "type", "image", "data", b64,
                                                                          "mimeType", images[k]));
                        fprintf(f, "(%s shown as an image)\n", images[k]);
                }
                if (json_object_get(data, "text/html") && !md)
                        fputs("(an HTML form of it exists: text/html)\n", f);
        }
        json_t *err = json_object_get(res, "error");
        if (json_is_object(err)) {
                const char *tb = json_string_value(json_object_get(err, "traceback"));
                if (tb && *tb)
                        fprintf(f, "%s\n", tb);
                fprintf(f, "%s: %s\n", json_string_value(json_object_get(err, "name")) ?: "Error",
                        json_string_value(json_object_get(err, "value")) ?: "");
        }
        json_t *w;
        json_array_foreach(json_object_get(res, "warnings"), i, w) fprintf(f, "warning: %s\n", json_string_value(w) ?: "");
        json_t *count = json_object_get(res, "executionCount");
        c->structured = json_pack("{s:O, s:O, s:O}", "context_id", json_object_get(res, "contextId"), "execution_count",
                                  count ? count : json_null(), "error", err ? err : json_null());
        return json_is_object(err) ? 1 : 0;
}

/* ---- processes */

int put_process_started(McpCall *c, json_t *res, FILE *f) {
        const char *id = json_string_value(json_object_get(res, "processId"));
        fprintf(f,
                "started process %s (pid %lld in the sandbox). Read its output with process_logs "
                "(process_id \"%s\"), stop it with process_kill.",
                id ? id : "?", (long long)json_integer_value(json_object_get(res, "pid")), id ? id : "?");
        c->structured = json_pack("{s:s, s:O}", "process_id", id ? id : "", "pid", json_object_get(res, "pid"));
        return 0;
}

/* "exited with exit code 0", "killed by TERM (exit code 143)", "running". */
static void put_status(FILE *f, json_t *o) {
        const char *st = json_string_value(json_object_get(o, "status"));
        json_t *code = json_object_get(o, "exitCode");
        const char *sig = json_string_value(json_object_get(o, "signal"));
        fputs(st ? st : "?", f);
        if (json_is_integer(code))
                fprintf(f, " (exit code %lld%s%s)", (long long)json_integer_value(code), sig ? ", signal " : "",
                        sig ? sig : "");
}

int put_process_list(McpCall *c, json_t *res, FILE *f) {
        json_t *list = json_object_get(res, "processes"), *o;
        size_t i;
        uint64_t now = wall_ms();
        if (json_array_size(list) == 0)
                fputs("no background processes\n", f);
        json_array_foreach(list, i, o) {
                const char *cmd = json_string_value(json_object_get(o, "command"));
                const char *label = json_string_value(json_object_get(o, "label"));
                json_int_t started = json_integer_value(json_object_get(o, "startedAt"));
                fprintf(f, "%s  ", json_string_value(json_object_get(o, "processId")));
                put_status(f, o);
                fprintf(f, "  pid %lld  started %llu s ago", (long long)json_integer_value(json_object_get(o, "pid")),
                        (unsigned long long)(now > (uint64_t)started ? (now - (uint64_t)started) / 1000 : 0));
                if (strcmp(json_string_value(json_object_get(o, "origin")) ?: "", "leftover") == 0)
                        fputs("  (left running by a run)", f);
                if (label)
                        fprintf(f, "  label: %s", label);
                /* The command's first line, as a reminder of what it is. */
                size_t n = cmd ? strcspn(cmd, "\n") : 0;
                fprintf(f, "  $ %.*s%s\n", (int)MIN(n, 200u), cmd ? cmd : "", cmd && cmd[MIN(n, 200u)] ? " ..." : "");
        }
        return 0;
}

int put_process_logs(McpCall *c, json_t *res, FILE *f) {
        if (put_streams(f, res) < 0)
                return -ENOMEM;
        json_int_t dropped = json_integer_value(json_object_get(res, "dropped"));
        json_int_t cursor = json_integer_value(json_object_get(res, "cursor"));
        if (dropped)
                fprintf(f, "(%lld bytes before these were no longer held: the log keeps the newest 1 MiB)\n",
                        (long long)dropped);
        fprintf(f, "%s; next cursor: %lld (pass cursor=%lld to read only newer output)\n",
                json_is_true(json_object_get(res, "eof")) ? "the process has ended and this is all of its output"
                                                          : "the process may write more",
                (long long)cursor, (long long)cursor);
        return 0;
}

int put_process_killed(McpCall *c, json_t *res, FILE *f) {
        fprintf(f, "process %s is gone, with everything it started: ", arg_str(c, "process_id"));
        put_status(f, res);
        fputc('\n', f);
        return 0;
}

/* ---- fork, snapshots */

int put_forked(McpCall *c, json_t *res, FILE *f) {
        const char *id = json_string_value(json_object_get(res, "sandboxId"));
        fprintf(f,
                "forked into sandbox %s: a copy of the files and of every session's state (background "
                "processes are not copied). Pass sandbox=\"%s\" to any tool to work in the copy; calls "
                "without it still use the original.",
                id ? id : "?", id ? id : "?");
        c->structured = json_pack("{s:s}", "sandbox", id ? id : "");
        return 0;
}

int put_snapshot(McpCall *c, json_t *res, FILE *f) {
        const char *id = json_string_value(json_object_get(res, "id"));
        fprintf(f, "snapshot %s saved (files and every session's state); restore it with "
                "restore(snapshot_id=\"%s\").", id ? id : "?", id ? id : "?");
        c->structured = json_pack("{s:s}", "snapshot_id", id ? id : "");
        return 0;
}

int put_restored(McpCall *c, json_t *res, FILE *f) {
        fprintf(f, "restored snapshot %s: files and sessions are as they were then; background "
                "processes were killed and sessions made since start fresh.", arg_str(c, "snapshot_id"));
        return 0;
}
