/* SPDX-License-Identifier: MIT */
/* The tools of `sbx mcp`: their table (names, descriptions an agent acts on, arguments, hints),
 * the schemas and argument checks made from it, and the command, process and sandbox tools,
 * each a daemon method or two whose answer becomes text. The file tools are in mcp_files.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/text.h"
#include "base/util.h"
#include "cli/mcp.h"

/* ---- arguments */

/* The largest integer a JSON number holds exactly: an argument with no upper bound. */
#define ARG_UNBOUNDED 9007199254740991.0

static json_t *arg(McpCall *c, const char *name) {
        json_t *v = json_object_get(c->args, name);
        return json_is_null(v) ? NULL : v;
}

const char *arg_str(McpCall *c, const char *name) { return json_string_value(arg(c, name)); }

bool arg_bool(McpCall *c, const char *name) { return json_is_true(arg(c, name)); }

double arg_num(McpCall *c, const char *name, double def) {
        json_t *v = arg(c, name);
        return v ? json_number_value(v) : def;
}

static const char *type_name(ArgType t) {
        switch (t) {
        case ARG_STRING: return "string";
        case ARG_INTEGER: return "integer";
        case ARG_NUMBER: return "number";
        case ARG_BOOLEAN: return "boolean";
        default: return "?";
        }
}

static const char *json_kind(json_t *v) {
        switch (json_typeof(v)) {
        case JSON_OBJECT: return "an object";
        case JSON_ARRAY: return "an array";
        case JSON_STRING: return "a string";
        case JSON_INTEGER: return "an integer";
        case JSON_REAL: return "a number";
        case JSON_TRUE:
        case JSON_FALSE: return "a boolean";
        case JSON_NULL: return "null";
        default: return "?";
        }
}

static bool type_ok(ArgType t, json_t *v) {
        switch (t) {
        case ARG_STRING: return json_is_string(v);
        case ARG_BOOLEAN: return json_is_boolean(v);
        case ARG_NUMBER: return json_is_number(v);
        /* 10.0 is an integer to JSON Schema, and some clients send it so. */
        case ARG_INTEGER:
                return json_is_integer(v) || (json_is_real(v) && json_real_value(v) > -9e15 && json_real_value(v) < 9e15 &&
                                              (double)(long long)json_real_value(v) == json_real_value(v));
        default: return false;
        }
}

static void list_names(const McpTool *t, char *out, size_t len) {
        size_t k = 0;
        out[0] = '\0';
        for (const ToolArg *a = t->args; a->name && k < len; a++)
                k += (size_t)snprintf(out + k, len - k, "%s%s", k ? ", " : "", a->name);
}

int mcp_args_check(const McpTool *t, json_t *args, char *err, size_t errlen) {
        char names[256];
        const char *key;
        json_t *v;
        list_names(t, names, sizeof names);
        json_object_foreach(args, key, v) {
                const ToolArg *a = t->args;
                while (a->name && strcmp(a->name, key) != 0)
                        a++;
                if (!a->name) {
                        snprintf(err, errlen, "Invalid arguments for %s: unknown argument \"%s\" (it takes: %s)", t->name,
                                 key, names);
                        return -EINVAL;
                }
                if (json_is_null(v))
                        continue;
                if (!type_ok(a->type, v)) {
                        snprintf(err, errlen, "Invalid arguments for %s: \"%s\" must be %s %s; got %s", t->name, key,
                                 a->type == ARG_INTEGER ? "an" : "a", type_name(a->type), json_kind(v));
                        return -EINVAL;
                }
                double d = json_number_value(v);
                if ((a->type == ARG_INTEGER || a->type == ARG_NUMBER) && (a->min || a->max) &&
                    (d < a->min || d > a->max)) {
                        if (a->max >= ARG_UNBOUNDED)
                                snprintf(err, errlen, "Invalid arguments for %s: \"%s\" must be at least %g; got %g",
                                         t->name, key, a->min, d);
                        else
                                snprintf(err, errlen, "Invalid arguments for %s: \"%s\" must be from %g to %g; got %g",
                                         t->name, key, a->min, a->max, d);
                        return -EINVAL;
                }
        }
        for (const ToolArg *a = t->args; a->name; a++)
                if (a->required && !json_object_get(args, a->name)) {
                        snprintf(err, errlen, "Invalid arguments for %s: \"%s\" is required (%s)", t->name, a->name,
                                 a->description);
                        return -EINVAL;
                }
        return 0;
}

/* ---- text */

char *answer_text(json_t *obj, const char *key, size_t *ret_len, bool *ret_raw) {
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

size_t put_cut(FILE *f, const char *s, size_t len, size_t max) {
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

void mcp_answer_text(McpCall *c, char *text, bool is_error) {
        if (!text) {
                mcp_answer(c, "out of memory", 13, true);
                return;
        }
        (void)utf8_sanitize(text);
        mcp_answer(c, text, strlen(text), is_error);
        free(text);
}

void mcp_answer_memstream(McpCall *c, FILE *f, char **text, bool is_error) {
        if (fclose(f) != 0) {
                free(*text);
                *text = NULL;
        }
        mcp_answer_text(c, TAKE_PTR(*text), is_error);
}

/* Seconds as whole milliseconds, rounded up: 0.0001 s is still a timeout, not none. */
static json_int_t seconds_ms(double s) {
        json_int_t ms = (json_int_t)(s * 1000);
        return (double)ms < s * 1000 ? ms + 1 : ms;
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
        return NULL;
}

static void run_answered(McpCall *c, json_t *res, const char *error) {
        if (!res) {
                mcp_answer_fmt(c, true, "%s", error);
                return;
        }
        char *text = NULL;
        size_t len = 0;
        MEMSTREAM_OR_FAIL(c, f, text, len);
        int code = (int)json_integer_value(json_object_get(res, "exitCode"));
        const char *cls = json_string_value(json_object_get(res, "errorClass"));
        json_int_t killed = json_integer_value(json_object_get(res, "killedProcesses"));
        if (put_streams(f, res) < 0) {
                fclose(f);
                free(text);
                mcp_answer(c, "out of memory", 13, true);
                return;
        }
        json_t *dropped = json_object_get(res, "droppedBytes");
        json_int_t dout = json_integer_value(json_object_get(dropped, "stdout"));
        json_int_t derr = json_integer_value(json_object_get(dropped, "stderr"));
        if (dout || derr)
                fprintf(f, "(output past the 1 MiB kept per stream was dropped: %lld bytes of stdout, %lld of stderr)\n",
                        (long long)dout, (long long)derr);
        fprintf(f, "exit code: %d", code);
        bool timeout = cls && strcmp(cls, "TIMEOUT") == 0, cancelled = cls && strcmp(cls, "CANCELLED") == 0;
        if (timeout)
                fprintf(f, " (timed out after %g s", arg_num(c, "timeout", SBX_MCP_DEFAULT_TIMEOUT_MS / 1000.0));
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
        mcp_answer_memstream(c, f, &text, code != 0);
}

static void tool_run(McpCall *c) {
        json_t *p = mcp_params(c);
        double t = arg_num(c, "timeout", SBX_MCP_DEFAULT_TIMEOUT_MS / 1000.0);
        if (p && (json_object_set_new(p, "command", json_string(arg_str(c, "command"))) < 0 ||
                  json_object_set_new(p, "timeoutMs", json_integer(seconds_ms(t))) < 0 ||
                  (arg_str(c, "session") && json_object_set_new(p, "session", json_string(arg_str(c, "session"))) < 0) ||
                  (arg_str(c, "cwd") && json_object_set_new(p, "cwd", json_string(arg_str(c, "cwd"))) < 0) ||
                  (c->progress_token && json_object_set_new(p, "stream", json_true()) < 0))) {
                json_decref(p);
                p = NULL;
        }
        (void)mcp_send(c, "run", p, run_answered);
}

/* ---- processes */

static void process_started(McpCall *c, json_t *res, const char *error) {
        if (!res) {
                mcp_answer_fmt(c, true, "%s", error);
                return;
        }
        const char *id = json_string_value(json_object_get(res, "processId"));
        mcp_answer_fmt(c, false,
                       "started process %s (pid %lld in the sandbox). Read its output with process_logs "
                       "(process_id \"%s\"), stop it with process_kill.",
                       id ? id : "?", (long long)json_integer_value(json_object_get(res, "pid")), id ? id : "?");
}

static void tool_process_start(McpCall *c) {
        json_t *p = mcp_params(c);
        if (p && (json_object_set_new(p, "command", json_string(arg_str(c, "command"))) < 0 ||
                  (arg_str(c, "session") && json_object_set_new(p, "session", json_string(arg_str(c, "session"))) < 0) ||
                  (arg_str(c, "cwd") && json_object_set_new(p, "cwd", json_string(arg_str(c, "cwd"))) < 0) ||
                  (arg_str(c, "label") && json_object_set_new(p, "label", json_string(arg_str(c, "label"))) < 0) ||
                  (arg_num(c, "timeout", 0) > 0 &&
                   json_object_set_new(p, "timeoutMs", json_integer(seconds_ms(arg_num(c, "timeout", 0)))) < 0))) {
                json_decref(p);
                p = NULL;
        }
        (void)mcp_send(c, "process.start", p, process_started);
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

static void processes_listed(McpCall *c, json_t *res, const char *error) {
        if (!res) {
                mcp_answer_fmt(c, true, "%s", error);
                return;
        }
        char *text = NULL;
        size_t len = 0;
        MEMSTREAM_OR_FAIL(c, f, text, len);
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
        mcp_answer_memstream(c, f, &text, false);
}

static void tool_process_list(McpCall *c) { (void)mcp_send(c, "process.list", mcp_params(c), processes_listed); }

static void logs_answered(McpCall *c, json_t *res, const char *error) {
        if (!res) {
                mcp_answer_fmt(c, true, "%s", error);
                return;
        }
        char *text = NULL;
        size_t len = 0;
        MEMSTREAM_OR_FAIL(c, f, text, len);
        if (put_streams(f, res) < 0) {
                fclose(f);
                free(text);
                mcp_answer(c, "out of memory", 13, true);
                return;
        }
        json_int_t dropped = json_integer_value(json_object_get(res, "dropped"));
        json_int_t cursor = json_integer_value(json_object_get(res, "cursor"));
        if (dropped)
                fprintf(f, "(%lld bytes before these were no longer held: the log keeps the newest 1 MiB)\n",
                        (long long)dropped);
        fprintf(f, "%s; next cursor: %lld (pass cursor=%lld to read only newer output)\n",
                json_is_true(json_object_get(res, "eof")) ? "the process has ended and this is all of its output"
                                                          : "the process may write more",
                (long long)cursor, (long long)cursor);
        mcp_answer_memstream(c, f, &text, false);
}

static void tool_process_logs(McpCall *c) {
        json_t *p = mcp_params(c);
        if (p && (json_object_set_new(p, "processId", json_string(arg_str(c, "process_id"))) < 0 ||
                  json_object_set_new(p, "cursor", json_integer((json_int_t)arg_num(c, "cursor", 0))) < 0)) {
                json_decref(p);
                p = NULL;
        }
        (void)mcp_send(c, "process.logs", p, logs_answered);
}

static void process_killed(McpCall *c, json_t *res, const char *error) {
        if (!res) {
                mcp_answer_fmt(c, true, "%s", error);
                return;
        }
        char *text = NULL;
        size_t len = 0;
        MEMSTREAM_OR_FAIL(c, f, text, len);
        fprintf(f, "process %s is gone, with everything it started: ", arg_str(c, "process_id"));
        put_status(f, res);
        fputc('\n', f);
        mcp_answer_memstream(c, f, &text, false);
}

static void tool_process_kill(McpCall *c) {
        json_t *p = mcp_params(c);
        if (p && (json_object_set_new(p, "processId", json_string(arg_str(c, "process_id"))) < 0 ||
                  (arg_str(c, "signal") && json_object_set_new(p, "signal", json_string(arg_str(c, "signal"))) < 0))) {
                json_decref(p);
                p = NULL;
        }
        (void)mcp_send(c, "process.kill", p, process_killed);
}

/* ---- fork, snapshots */

static void forked(McpCall *c, json_t *res, const char *error) {
        if (!res) {
                mcp_answer_fmt(c, true, "%s", error);
                return;
        }
        const char *id = json_string_value(json_object_get(res, "sandboxId"));
        mcp_answer_fmt(c, false,
                       "forked into sandbox %s: a copy of the files and of every session's state (background "
                       "processes are not copied). Pass sandbox=\"%s\" to any tool to work in the copy; calls "
                       "without it still use the original.",
                       id ? id : "?", id ? id : "?");
}

static void tool_fork(McpCall *c) { (void)mcp_send(c, "sandbox.fork", mcp_params(c), forked); }

static void snapshotted(McpCall *c, json_t *res, const char *error) {
        if (!res) {
                mcp_answer_fmt(c, true, "%s", error);
                return;
        }
        const char *id = json_string_value(json_object_get(res, "id"));
        mcp_answer_fmt(c, false, "snapshot %s saved (files and every session's state); restore it with "
                       "restore(snapshot_id=\"%s\").", id ? id : "?", id ? id : "?");
}

static void tool_snapshot(McpCall *c) { (void)mcp_send(c, "snapshot.create", mcp_params(c), snapshotted); }

static void restored(McpCall *c, json_t *res, const char *error) {
        if (!res) {
                mcp_answer_fmt(c, true, "%s", error);
                return;
        }
        mcp_answer_fmt(c, false, "restored snapshot %s: files and sessions are as they were then; background "
                       "processes were killed and sessions made since start fresh.", arg_str(c, "snapshot_id"));
}

static void tool_restore(McpCall *c) {
        json_t *p = mcp_params(c);
        if (p && json_object_set_new(p, "id", json_string(arg_str(c, "snapshot_id"))) < 0) {
                json_decref(p);
                p = NULL;
        }
        (void)mcp_send(c, "snapshot.restore", p, restored);
}

/* ---- the table */

#define ARG_SANDBOX                                                                                             \
        { "sandbox", ARG_STRING, false, 0, 0,                                                                   \
          "a sandbox id that fork returned, to work in that copy (default: the main sandbox)" }
#define ARG_END { NULL, 0, false, 0, 0, NULL }
#define MAX_TIMEOUT_S ((double)SBX_MAX_TIMEOUT_MS / 1000)

static const ToolArg run_args[] = {
        { "command", ARG_STRING, true, 0, 0, "bash source to run: one command, a pipeline or a whole script" },
        { "session", ARG_STRING, false, 0, 0,
          "name of the shell session (default \"default\"); each session keeps its own cwd, variables and "
          "functions, and is made on first use" },
        { "cwd", ARG_STRING, false, 0, 0, "directory to run in, for this command only" },
        { "timeout", ARG_NUMBER, false, 0.001, MAX_TIMEOUT_S, "seconds before the command is killed (default 120)" },
        ARG_SANDBOX,
        ARG_END,
};
static const ToolArg process_start_args[] = {
        { "command", ARG_STRING, true, 0, 0, "bash source to run in the background" },
        { "session", ARG_STRING, false, 0, 0,
          "session whose cwd, variables and functions it starts from (default \"default\"); the session itself "
          "is not changed" },
        { "cwd", ARG_STRING, false, 0, 0, "directory to start it in" },
        { "timeout", ARG_NUMBER, false, 0.001, MAX_TIMEOUT_S, "seconds after which it is killed (default: never)" },
        { "label", ARG_STRING, false, 0, 0, "a note shown by process_list" },
        ARG_SANDBOX,
        ARG_END,
};
static const ToolArg sandbox_only_args[] = { ARG_SANDBOX, ARG_END };
static const ToolArg process_logs_args[] = {
        { "process_id", ARG_STRING, true, 0, 0, "the process, as process_start or process_list name it (\"p3\")" },
        { "cursor", ARG_INTEGER, false, 0, ARG_UNBOUNDED,
          "byte offset in its output to read from: 0 (default) for all the log holds, or the cursor a previous "
          "process_logs returned for only what came since" },
        ARG_SANDBOX,
        ARG_END,
};
static const ToolArg process_kill_args[] = {
        { "process_id", ARG_STRING, true, 0, 0, "the process, as process_start or process_list name it (\"p3\")" },
        { "signal", ARG_STRING, false, 0, 0, "signal sent first: \"TERM\" (default), \"INT\", \"KILL\", ..." },
        ARG_SANDBOX,
        ARG_END,
};
static const ToolArg read_file_args[] = {
        { "path", ARG_STRING, true, 0, 0, "the file; relative paths are from /home/user" },
        { "offset", ARG_INTEGER, false, 1, ARG_UNBOUNDED, "first line to show, from 1 (default 1)" },
        { "limit", ARG_INTEGER, false, 1, 1000000, "how many lines to show (default 2000)" },
        ARG_SANDBOX,
        ARG_END,
};
static const ToolArg write_file_args[] = {
        { "path", ARG_STRING, true, 0, 0, "the file; relative paths are from /home/user" },
        { "content", ARG_STRING, true, 0, 0, "the whole new content of the file" },
        ARG_SANDBOX,
        ARG_END,
};
static const ToolArg edit_file_args[] = {
        { "path", ARG_STRING, true, 0, 0, "the file; relative paths are from /home/user" },
        { "old_string", ARG_STRING, true, 0, 0, "the exact text to replace, whitespace and indentation included" },
        { "new_string", ARG_STRING, true, 0, 0, "the text to put in its place (different from old_string)" },
        { "replace_all", ARG_BOOLEAN, false, 0, 0, "replace every occurrence (default false: exactly one must exist)" },
        ARG_SANDBOX,
        ARG_END,
};
static const ToolArg list_directory_args[] = {
        { "path", ARG_STRING, false, 0, 0, "the directory (default /home/user); relative paths are from /home/user" },
        { "depth", ARG_INTEGER, false, 1, SBX_MAX_LIST_DEPTH, "levels to list: 1 (default) for its entries only" },
        ARG_SANDBOX,
        ARG_END,
};
static const ToolArg restore_args[] = {
        { "snapshot_id", ARG_STRING, true, 0, 0, "the id snapshot returned" },
        ARG_SANDBOX,
        ARG_END,
};

static const McpTool tools[] = {
        { "run", "Run a command",
          "Run a bash command in the sandbox, an isolated Linux machine with the usual command-line tools and no "
          "network beyond its own loopback, and wait for it to end. The shell session persists between calls: "
          "cwd, variables, functions, aliases and options carry over (use `session` for independent shells). "
          "Returns stdout, stderr and the exit code; a non-zero exit is reported as an error. After `timeout` "
          "seconds (default 120) the command and everything it started are killed, and the session stays as it "
          "was. For servers and other long jobs use process_start. Long output shows its first and last 15,000 "
          "bytes per stream. Files live in /home/user (the starting directory) and /tmp.",
          run_args, false, true, false, tool_run },
        { "process_start", "Start a background process",
          "Start a command in the background (a server, a watcher, a long build) and return at once with its "
          "process id. It starts from a session's cwd, variables and functions without changing them, and runs "
          "in its own group: process_kill stops it and everything it started. Follow it with process_logs.",
          process_start_args, false, true, false, tool_process_start },
        { "process_list", "List background processes",
          "List the sandbox's background processes: those process_start started and those a run left running "
          "(`cmd &`), with their status, exit code and command.",
          sandbox_only_args, true, false, true, tool_process_list },
        { "process_logs", "Read a background process's output",
          "Read a background process's stdout and stderr from `cursor` on (default: everything its log holds, "
          "the newest 1 MiB). The answer gives the next cursor: pass it to get only newer output, and says "
          "whether the process has ended.",
          process_logs_args, true, false, true, tool_process_logs },
        { "process_kill", "Stop a background process",
          "Stop a background process and everything it started: sends `signal` (default TERM) to all of it, then "
          "KILL after 2 s. Returns once nothing of it is left, with its exit status.",
          process_kill_args, false, true, false, tool_process_kill },
        { "read_file", "Read a file",
          "Read a text file of the sandbox, with line numbers (each line as: number, tab, text). Shows up to "
          "2000 lines from line `offset`; lines longer than 2000 bytes are cut. When the file goes on past what "
          "is shown, the answer says which offset to read next.",
          read_file_args, true, false, true, tool_read_file },
        { "write_file", "Write a file",
          "Write a file in the sandbox with the given content, replacing it whole if it exists (atomically, its "
          "permissions kept) and making missing parent directories. Writable places: /home/user, /tmp, /dev/shm. "
          "To change part of a file prefer edit_file.",
          write_file_args, false, true, true, tool_write_file },
        { "edit_file", "Edit a file",
          "Edit a file by exact string replacement: `old_string` must occur exactly once in the file (include "
          "enough surrounding lines to make it unique) unless replace_all is true, which replaces every "
          "occurrence. Whitespace and indentation must match the file exactly (read_file's line-number prefix "
          "is not part of the file). When old_string is missing or not unique the file is left unchanged.",
          edit_file_args, false, true, false, tool_edit_file },
        { "list_directory", "List a directory",
          "List a directory of the sandbox: one entry per line, directories ending in /, files with their size, "
          "symlinks with their target. depth above 1 lists subdirectories too.",
          list_directory_args, true, false, true, tool_list_directory },
        { "fork", "Fork the sandbox",
          "Copy the whole sandbox (files and every session's state; background processes are not copied) into "
          "a new, independent sandbox and return its id. Pass it as `sandbox` to other tools to try something "
          "in the copy while the original stays as it is. Copies last until this connection ends.",
          sandbox_only_args, false, false, false, tool_fork },
        { "snapshot", "Snapshot the sandbox",
          "Save the sandbox's files and every session's state, and return a snapshot id that restore brings "
          "back. Cheap: take one before risky changes.",
          sandbox_only_args, false, false, false, tool_snapshot },
        { "restore", "Restore a snapshot",
          "Bring the sandbox back to a snapshot: files and sessions' state as they were when it was taken. "
          "Background processes are killed; sessions made since start fresh.",
          restore_args, false, true, true, tool_restore },
};

const McpTool *mcp_tool_find(const char *name) {
        for (size_t i = 0; i < ELEMENTSOF(tools); i++)
                if (strcmp(tools[i].name, name) == 0)
                        return &tools[i];
        return NULL;
}

static json_t *tool_schema(const McpTool *t) {
        json_t *props = json_object(), *req = json_array();
        json_t *s = json_pack("{s:s, s:o, s:o, s:b}", "type", "object", "properties", props, "required", req,
                              "additionalProperties", false);
        if (!s)
                return NULL;
        for (const ToolArg *a = t->args; a->name; a++) {
                json_t *p = json_pack("{s:s, s:s}", "type", type_name(a->type), "description", a->description);
                if (!p || json_object_set_new(props, a->name, p) < 0 ||
                    (a->required && json_array_append_new(req, json_string(a->name)) < 0))
                        goto fail;
                if ((a->min || a->max) && a->type == ARG_INTEGER &&
                    (json_object_set_new(p, "minimum", json_integer((json_int_t)a->min)) < 0 ||
                     json_object_set_new(p, "maximum", json_integer((json_int_t)a->max)) < 0))
                        goto fail;
                if ((a->min || a->max) && a->type == ARG_NUMBER &&
                    (json_object_set_new(p, "minimum", json_real(a->min)) < 0 ||
                     json_object_set_new(p, "maximum", json_real(a->max)) < 0))
                        goto fail;
        }
        return s;
fail:
        json_decref(s);
        return NULL;
}

json_t *mcp_tools_json(const char *version) {
        json_t *list = json_array();
        json_t *res = json_pack("{s:o}", "tools", list);
        if (!res)
                return NULL;
        for (size_t i = 0; i < ELEMENTSOF(tools); i++) {
                const McpTool *t = &tools[i];
                json_t *o = json_pack("{s:s, s:s, s:o}", "name", t->name, "description", t->description,
                                      "inputSchema", tool_schema(t));
                if (!o || json_array_append_new(list, o) < 0)
                        goto fail;
                /* Fields a revision added, only for clients that speak it. */
                if (strcmp(version, "2025-06-18") >= 0 && json_object_set_new(o, "title", json_string(t->title)) < 0)
                        goto fail;
                if (strcmp(version, "2025-03-26") >= 0 &&
                    json_object_set_new(o, "annotations",
                                        json_pack("{s:s, s:b, s:b, s:b, s:b}", "title", t->title, "readOnlyHint",
                                                  t->read_only, "destructiveHint", t->destructive, "idempotentHint",
                                                  t->idempotent, "openWorldHint", false)) < 0)
                        goto fail;
        }
        return res;
fail:
        json_decref(res);
        return NULL;
}
