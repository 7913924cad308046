/* SPDX-License-Identifier: MIT */
/* `sbx mcp`: what the MCP front (mcp.c: transport, lifecycle, the daemon connection) and its
 * tools (mcp_tools.c, mcp_files.c) share. A tool call is translated into the daemon's JSON-RPC
 * methods one request at a time; the front routes each answer back to the call that waits
 * for it and owns everything about the MCP side (ids, progress, cancellation). */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "base/limits.h"
#include "base/macro.h"

typedef struct Mcp Mcp;
typedef struct McpCall McpCall;

/* The daemon's answer to the request a call waits for: its result (borrowed, valid during the
 * call), or NULL and the error's message. The function must either send the call's next
 * request (mcp_send) or answer it (mcp_answer*), which frees it. */
typedef void (*McpAnswerFn)(McpCall *c, json_t *result, const char *error);

typedef enum { ARG_STRING, ARG_INTEGER, ARG_NUMBER, ARG_BOOLEAN } ArgType;

/* One argument of a tool: the single source of its JSON schema and of the check that calls
 * are held to. min and max bound numbers (both 0: unbounded). */
typedef struct ToolArg {
        const char *name;
        ArgType type;
        bool required;
        double min, max;
        const char *description;
} ToolArg;

typedef struct McpTool {
        const char *name, *title, *description;
        const ToolArg *args; /* ends with a row whose name is NULL */
        bool read_only, destructive, idempotent;
        /* Starts a call whose arguments were checked: sends its first request, or answers. */
        void (*start)(McpCall *c);
} McpTool;

/* One tools/call from its request until it is answered or cancelled. Invariant: a live call
 * waits for exactly one daemon request (daemon_id != 0, on_answer set) or is being answered. */
struct McpCall {
        Mcp *mcp;
        McpCall *next, *prev;
        json_t *id;             /* the MCP request's id */
        json_t *args;           /* the tool's arguments, checked against its table */
        json_t *progress_token; /* NULL when the caller asked for no progress */
        const McpTool *tool;
        uint64_t daemon_id;
        McpAnswerFn on_answer;
        bool waits_run; /* the request is a run: a cancel reaches its command */
        bool cancelled; /* the client cancelled it: it ends without an answer */
        /* Progress of a streamed run: when it started and was last reported, the last value
         * sent (each must be larger), and what its output looked like so far. */
        uint64_t started_ms, last_progress_ms, next_progress_ms, progress;
        uint64_t out_bytes;
        bool out_seen;
        char last_line[SBX_MCP_PROGRESS_LINE_BYTES];
        /* The tool's own state between requests, freed with the call. */
        void *state;
        void (*state_free)(void *state);
};

/* ---- mcp.c, for the tools */

/* Sends method(params) to the daemon for c (params is taken over); fn gets the answer. A run
 * sent with stream: true reports progress to a caller that asked for it. Returns 0; on failure
 * c has been answered with a tool error (and freed) and -errno is returned. */
int mcp_send(McpCall *c, const char *method, json_t *params, McpAnswerFn fn);
/* A params object addressing the call's sandbox: its `sandbox` argument, else the one given
 * with --sandbox, else none (the connection's own). NULL when out of memory. */
json_t *mcp_params(McpCall *c);
/* Answers the call with one text block (len bytes of valid UTF-8) and frees it. */
void mcp_answer(McpCall *c, const char *text, size_t len, bool is_error);
void mcp_answer_fmt(McpCall *c, bool is_error, const char *fmt, ...) _printf_(3, 4);

/* ---- mcp_tools.c */

const McpTool *mcp_tool_find(const char *name);
/* The tools/list result for a protocol version (annotations from 2025-03-26, titles from
 * 2025-06-18), or NULL when out of memory. */
json_t *mcp_tools_json(const char *version);
/* Checks a call's arguments against the tool's table; on failure writes why into err and
 * returns -EINVAL. */
int mcp_args_check(const McpTool *t, json_t *args, char *err, size_t errlen);
/* Argument values, checked already: NULL, false or def when absent. */
const char *arg_str(McpCall *c, const char *name);
bool arg_bool(McpCall *c, const char *name);
double arg_num(McpCall *c, const char *name, double def);
/* A bytes field of a daemon answer ("stdout", with "stdoutEncoding": "base64" when it is not
 * UTF-8) as text: malloc'd, NUL-terminated, valid UTF-8 (other bytes and NULs become '?').
 * *ret_raw tells whether it had to change anything. NULL when out of memory. */
char *answer_text(json_t *obj, const char *key, size_t *ret_len, bool *ret_raw);
/* Writes len bytes of text to f, or its first and last halves of max with a line saying how
 * many bytes lie between; returns the bytes left out. */
size_t put_cut(FILE *f, const char *s, size_t len, size_t max);

/* Answers the call with a malloc'd text (taken over; NULL: out of memory) up to its first NUL,
 * its bytes that are not UTF-8 shown as '?'. */
void mcp_answer_text(McpCall *c, char *text, bool is_error);
/* The same with the text f wrote: an open_memstream of *text, closed here. */
void mcp_answer_memstream(McpCall *c, FILE *f, char **text, bool is_error);
/* Opens an open_memstream for an answer's text in a tool function returning void, or answers
 * the call with an error and returns. */
#define MEMSTREAM_OR_FAIL(c, f, text, len)                              \
        FILE *f = open_memstream(&(text), &(len));                      \
        if (!f) {                                                       \
                mcp_answer((c), "out of memory", 13, true);             \
                return;                                                 \
        }

/* ---- mcp_files.c: the file tools */

void tool_read_file(McpCall *c);
void tool_write_file(McpCall *c);
void tool_edit_file(McpCall *c);
void tool_list_directory(McpCall *c);
