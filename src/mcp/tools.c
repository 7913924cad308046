/* SPDX-License-Identifier: MIT */
/* The tool table of `sbx mcp`: names, descriptions an agent acts on, arguments, hints, and
 * how each tool runs. A tool of one daemon request is a row: its method, the params its
 * arguments become, and the put function whose text answers it (commands.c, files.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mcp/tool.h"

/* ---- the table */

#define ARG_SANDBOX                                                                                             \
        { "sandbox", ARG_STRING, false, 0, 0,                                                                   \
          "a sandbox id that fork returned, to work in that copy (default: the main sandbox)" }
#define ARG_END { NULL, 0, false, 0, 0, NULL }
#define ARG_PROCESS_ID                                                                                          \
        { "process_id", ARG_STRING, true, 0, 0, "the process, as process_start or process_list name it (\"p3\")" }
#define ARG_FILE_PATH { "path", ARG_STRING, true, 0, 0, "the file; relative paths are from /home/user" }
#define MAX_TIMEOUT_S ((double)SBX_MAX_TIMEOUT_MS / 1000)

static const ToolArg run_args[] = {
        { "command", ARG_STRING, true, 0, 0, "bash source to run: one command, a pipeline or a whole script" },
        { "session", ARG_STRING, false, 0, 0,
          "name of the shell session (default \"default\"); each session keeps its own cwd, variables and "
          "functions, and is made on first use" },
        { "cwd", ARG_STRING, false, 0, 0, "directory to run in, for this command only" },
        { "timeout", ARG_NUMBER, false, 0.001, MAX_TIMEOUT_S, "seconds before the command is killed (default 50, below the 60 s after which MCP clients stop waiting; "
          "120 when the call carries a progressToken, whose notifications keep a client waiting)" },
        ARG_SANDBOX,
        ARG_END,
};
static const ToolArg run_code_args[] = {
        { "code", ARG_STRING, true, 0, 0, "the cell: Python source (or bash with language \"bash\")" },
        { "language", ARG_STRING, false, 0, 0, "\"python\" (default), \"javascript\" or \"bash\"" },
        { "context", ARG_STRING, false, 0, 0,
          "a context id from an earlier answer's structuredContent (default: the language's default context)" },
        { "timeout", ARG_NUMBER, false, 0.001, MAX_TIMEOUT_S,
          "seconds before the cell is killed (default 50; 120 with a progressToken); the context is then as it was "
          "before the cell" },
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
        ARG_PROCESS_ID,
        { "cursor", ARG_INTEGER, false, 0, ARG_UNBOUNDED,
          "byte offset in its output to read from: 0 (default) for all the log holds, or the cursor a previous "
          "process_logs returned for only what came since" },
        ARG_SANDBOX,
        ARG_END,
};
static const ToolArg process_kill_args[] = {
        ARG_PROCESS_ID,
        { "signal", ARG_STRING, false, 0, 0, "signal sent first: \"TERM\" (default), \"INT\", \"KILL\", ..." },
        ARG_SANDBOX,
        ARG_END,
};
static const ToolArg read_file_args[] = {
        ARG_FILE_PATH,
        { "offset", ARG_INTEGER, false, 1, ARG_UNBOUNDED, "first line to show, from 1 (default 1)" },
        { "limit", ARG_INTEGER, false, 1, 1000000, "how many lines to show (default 2000)" },
        ARG_SANDBOX,
        ARG_END,
};
static const ToolArg write_file_args[] = {
        ARG_FILE_PATH,
        { "content", ARG_STRING, true, 0, 0, "the whole new content of the file" },
        ARG_SANDBOX,
        ARG_END,
};
static const ToolArg edit_file_args[] = {
        ARG_FILE_PATH,
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

/* What the arguments of a one-request tool become in its daemon request. */
#define PARAM_END { NULL, NULL, 0, 0, NULL }

static const ToolParam run_params[] = {
        { "command", "command", PARAM_STRING },
        { "timeout", "timeoutMs", PARAM_RUN_MS },
        { "session", "session", PARAM_STRING },
        { "cwd", "cwd", PARAM_STRING },
        { NULL, "stream", PARAM_STREAM },
        PARAM_END,
};
static const ToolParam run_code_params[] = {
        { "code", "code", PARAM_STRING },
        { "language", "language", PARAM_STRING },
        { "context", "contextId", PARAM_STRING },
        { "timeout", "timeoutMs", PARAM_RUN_MS },
        PARAM_END,
};
static const ToolParam process_start_params[] = {
        { "command", "command", PARAM_STRING },
        { "session", "session", PARAM_STRING },
        { "cwd", "cwd", PARAM_STRING },
        { "label", "label", PARAM_STRING },
        { "timeout", "timeoutMs", PARAM_MS, 0 },
        PARAM_END,
};
static const ToolParam process_logs_params[] = {
        { "process_id", "processId", PARAM_STRING },
        { "cursor", "cursor", PARAM_INTEGER, 0 },
        PARAM_END,
};
static const ToolParam process_kill_params[] = {
        { "process_id", "processId", PARAM_STRING },
        { "signal", "signal", PARAM_STRING },
        PARAM_END,
};
static const ToolParam list_directory_params[] = {
        { "path", "path", PARAM_STRING, 0, "/home/user" },
        { "depth", "depth", PARAM_INTEGER, 1 },
        PARAM_END,
};
static const ToolParam restore_params[] = {
        { "snapshot_id", "id", PARAM_STRING },
        PARAM_END,
};

/* How a tool runs: one daemon request, or steps of its own. */
#define REQUEST(m, p, fn) .method = (m), .params = (p), .put = (fn)
#define STEPS(fn) .start = (fn)

static const McpTool tools[] = {
        { "run", "Run a command",
          "Run a bash command in the sandbox, an isolated Linux machine with the usual command-line tools and no "
          "network beyond its own loopback, and wait for it to end. The shell session persists between calls: "
          "cwd, variables, functions, aliases and options carry over (use `session` for independent shells). "
          "Returns stdout, stderr and the exit code; a non-zero exit is reported as an error. After `timeout` "
          "seconds (default 50; pass more for long builds) the command and everything it started are killed, and the session stays as it "
          "was. For servers and other long jobs use process_start. Long output shows its first and last 15,000 "
          "bytes per stream. Files live in /home/user (the starting directory) and /tmp.",
          run_args, false, true, false, REQUEST("run", run_params, put_run) },
        { "run_code", "Run Python code",
          "Run a cell of Python in the sandbox's Python context (IPython: the last expression's value is shown, "
          "`display()` works, `!cmd` runs a shell command) and wait for it to end. Variables, imports and loaded "
          "data persist between calls. numpy, pandas and matplotlib are there when the host has them: a "
          "matplotlib figure comes back as an image, a DataFrame as its text. A cell that runs past `timeout` "
          "seconds (default 50) is killed and the context stays exactly as it was before that cell, loaded data "
          "included. An exception is reported as an error with its traceback. language \"bash\" runs the cell in "
          "a bash context instead.",
          run_code_args, false, true, false, REQUEST("code.run", run_code_params, put_code) },
        { "process_start", "Start a background process",
          "Start a command in the background (a server, a watcher, a long build) and return at once with its "
          "process id. It starts from a session's cwd, variables and functions without changing them, and runs "
          "in its own group: process_kill stops it and everything it started. Follow it with process_logs.",
          process_start_args, false, true, false, REQUEST("process.start", process_start_params, put_process_started) },
        { "process_list", "List background processes",
          "List the sandbox's background processes: those process_start started and those a run left running "
          "(`cmd &`), with their status, exit code and command.",
          sandbox_only_args, true, false, true, REQUEST("process.list", NULL, put_process_list) },
        { "process_logs", "Read a background process's output",
          "Read a background process's stdout and stderr from `cursor` on (default: everything its log holds, "
          "the newest 1 MiB). The answer gives the next cursor: pass it to get only newer output, and says "
          "whether the process has ended.",
          process_logs_args, true, false, true, REQUEST("process.logs", process_logs_params, put_process_logs) },
        { "process_kill", "Stop a background process",
          "Stop a background process and everything it started: sends `signal` (default TERM) to all of it, then "
          "KILL after 2 s. Returns once nothing of it is left, with its exit status.",
          process_kill_args, false, true, false, REQUEST("process.kill", process_kill_params, put_process_killed) },
        { "read_file", "Read a file",
          "Read a text file of the sandbox, with line numbers (each line as: number, tab, text). Shows up to "
          "2000 lines from line `offset`; lines longer than 2000 bytes are cut. When the file goes on past what "
          "is shown, the answer says which offset to read next.",
          read_file_args, true, false, true, STEPS(tool_read_file) },
        { "write_file", "Write a file",
          "Write a file in the sandbox with the given content, replacing it whole if it exists (atomically, its "
          "permissions kept) and making missing parent directories. Writable places: /home/user, /tmp, /dev/shm. "
          "To change part of a file prefer edit_file.",
          write_file_args, false, true, true, STEPS(tool_write_file) },
        { "edit_file", "Edit a file",
          "Edit a file by exact string replacement: `old_string` must occur exactly once in the file (include "
          "enough surrounding lines to make it unique) unless replace_all is true, which replaces every "
          "occurrence. Whitespace and indentation must match the file exactly (read_file's line-number prefix "
          "is not part of the file). When old_string is missing or not unique the file is left unchanged.",
          edit_file_args, false, true, false, STEPS(tool_edit_file) },
        { "list_directory", "List a directory",
          "List a directory of the sandbox: one entry per line, directories ending in /, files with their size, "
          "symlinks with their target. depth above 1 lists subdirectories too.",
          list_directory_args, true, false, true, REQUEST("files.list", list_directory_params, put_directory) },
        { "fork", "Fork the sandbox",
          "Copy the whole sandbox (files and every session's state; background processes are not copied) into "
          "a new, independent sandbox and return its id. Pass it as `sandbox` to other tools to try something "
          "in the copy while the original stays as it is. Copies last until this connection ends.",
          sandbox_only_args, false, false, false, REQUEST("sandbox.fork", NULL, put_forked) },
        { "snapshot", "Snapshot the sandbox",
          "Save the sandbox's files and every session's state, and return a snapshot id that restore brings "
          "back. Cheap: take one before risky changes.",
          sandbox_only_args, false, false, false, REQUEST("snapshot.create", NULL, put_snapshot) },
        { "restore", "Restore a snapshot",
          "Bring the sandbox back to a snapshot: files and sessions' state as they were when it was taken. "
          "Background processes are killed; sessions made since start fresh.",
          restore_args, false, true, true, REQUEST("snapshot.restore", restore_params, put_restored) },
};

const McpTool *mcp_tool_find(const char *name) {
        for (size_t i = 0; i < ELEMENTSOF(tools); i++)
                if (strcmp(tools[i].name, name) == 0)
                        return &tools[i];
        return NULL;
}

/* ---- one-request tools */

/* Seconds as whole milliseconds, rounded up: 0.0001 s is still a timeout, not none. */
static json_int_t seconds_ms(double s) {
        json_int_t ms = (json_int_t)(s * 1000);
        return (double)ms < s * 1000 ? ms + 1 : ms;
}

static bool arg_required(const McpTool *t, const char *name) {
        for (const ToolArg *a = t->args; a->name; a++)
                if (strcmp(a->name, name) == 0)
                        return a->required;
        return false;
}

/* Adds row r's param to p when the call gives it a value. Returns 0, or -ENOMEM (also for a
 * required argument sent as null, which the daemon's params cannot hold). */
static int param_add(McpCall *c, const ToolParam *r, json_t *p) {
        json_t *v;
        switch (r->kind) {
        case PARAM_STRING: {
                const char *s = arg_str(c, r->arg) ?: r->text;
                if (!s)
                        return arg_required(c->tool, r->arg) ? -ENOMEM : 0;
                v = json_string(s);
                break;
        }
        case PARAM_MS:
        case PARAM_RUN_MS: {
                double s = r->kind == PARAM_RUN_MS ? arg_timeout_s(c) : arg_num(c, r->arg, r->def);
                if (!(s > 0))
                        return 0;
                v = json_integer(seconds_ms(s));
                break;
        }
        case PARAM_INTEGER: v = json_integer((json_int_t)arg_num(c, r->arg, r->def)); break;
        case PARAM_STREAM:
                if (!c->progress_token)
                        return 0;
                v = json_true();
                break;
        default: return -EINVAL;
        }
        return json_object_set_new(p, r->key, v) < 0 ? -ENOMEM : 0;
}

/* The tool's params for its request; NULL when out of memory. */
static json_t *request_params(McpCall *c) {
        json_t *p = mcp_params(c);
        for (const ToolParam *r = c->tool->params; p && r && r->key; r++)
                if (param_add(c, r, p) < 0) {
                        json_decref(p);
                        p = NULL;
                }
        return p;
}

static void request_answered(McpCall *c, json_t *res, const char *error) {
        if (mcp_refused(c, res, error))
                return;
        char *text = NULL;
        size_t len = 0;
        MEMSTREAM_OR_FAIL(c, f, text, len);
        int r = c->tool->put(c, res, f);
        if (r < 0) {
                fclose(f);
                free(text);
                mcp_answer(c, "out of memory", 13, true);
                return;
        }
        mcp_answer_memstream(c, f, &text, r > 0);
}

void mcp_tool_start(McpCall *c) {
        const McpTool *t = c->tool;
        if (t->start)
                t->start(c);
        else
                (void)mcp_send(c, t->method, request_params(c), request_answered);
}

/* ---- tools/list */

json_t *mcp_tools_json(const char *version) {
        json_t *list = json_array();
        json_t *res = json_pack("{s:o}", "tools", list);
        if (!res)
                return NULL;
        for (size_t i = 0; i < ELEMENTSOF(tools); i++) {
                const McpTool *t = &tools[i];
                json_t *o = json_pack("{s:s, s:s, s:o}", "name", t->name, "description", t->description,
                                      "inputSchema", mcp_tool_schema(t));
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
