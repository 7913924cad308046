/* SPDX-License-Identifier: MIT */
/* The tools of `sbx mcp`: a table of rows (tools.c), each the single source of a tool's
 * schema, the checks its calls are held to (schema.c) and the way it runs. Most tools are one
 * daemon request whose params the row maps from the arguments and whose result a put function
 * (commands.c, files.c) turns into the answer's text; the file tools that take several
 * requests run steps of their own (files.c). The protocol loop reaches the tools only through
 * the table: mcp_tool_find, mcp_args_check, mcp_tool_start, mcp_tools_json. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include "mcp/call.h"

/* The largest integer a JSON number holds exactly: an argument with no upper bound. */
#define ARG_UNBOUNDED 9007199254740991.0

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

typedef enum {
        PARAM_STRING,  /* the argument's string, else text; left out when neither (a required
                        * argument given as null fails the call as out of memory) */
        PARAM_MS,      /* seconds (the argument, else def) as whole ms; left out unless above 0 */
        PARAM_RUN_MS,  /* PARAM_MS with arg_timeout_s()'s default */
        PARAM_INTEGER, /* the argument, else def */
        PARAM_STREAM,  /* true when the caller asked for progress; arg is unused */
} ParamKind;

/* One param of a one-request tool's daemon request, after the sandbox's (mcp_params). */
typedef struct ToolParam {
        const char *arg, *key;
        ParamKind kind;
        double def;
        const char *text;
} ToolParam;

/* Writes the text of the daemon's result res into f. Returns 0, 1 when the answer is an error
 * (a command that failed), -ENOMEM. */
typedef int (*McpPutFn)(McpCall *c, json_t *res, FILE *f);

struct McpTool {
        const char *name, *title, *description;
        const ToolArg *args; /* ends with a row whose name is NULL */
        bool read_only, destructive, idempotent;
        /* A tool of one request: the daemon's method, its params (NULL: only the sandbox's;
         * else ends with a row whose key is NULL) and what makes the answer of its result. */
        const char *method;
        const ToolParam *params;
        McpPutFn put;
        /* A tool of its own steps (method is NULL): starts a call whose arguments were
         * checked, sending its first request or answering. */
        void (*start)(McpCall *c);
};

/* ---- tools.c: the table */

const McpTool *mcp_tool_find(const char *name);
/* Starts a call whose arguments were checked: sends its first request, or answers. */
void mcp_tool_start(McpCall *c);
/* The tools/list result for a protocol version (annotations from 2025-03-26, titles from
 * 2025-06-18), or NULL when out of memory. */
json_t *mcp_tools_json(const char *version);

/* ---- schema.c */

/* Checks a call's arguments against the tool's rows; on failure writes why into err and
 * returns -EINVAL. */
int mcp_args_check(const McpTool *t, json_t *args, char *err, size_t errlen);
/* The inputSchema of a tool, or NULL when out of memory. */
json_t *mcp_tool_schema(const McpTool *t);

/* ---- commands.c: the answers of the command, process and sandbox tools */

int put_run(McpCall *c, json_t *res, FILE *f);
int put_code(McpCall *c, json_t *res, FILE *f);
int put_process_started(McpCall *c, json_t *res, FILE *f);
int put_process_list(McpCall *c, json_t *res, FILE *f);
int put_process_logs(McpCall *c, json_t *res, FILE *f);
int put_process_killed(McpCall *c, json_t *res, FILE *f);
int put_forked(McpCall *c, json_t *res, FILE *f);
int put_snapshot(McpCall *c, json_t *res, FILE *f);
int put_restored(McpCall *c, json_t *res, FILE *f);

/* ---- files.c: the file tools */

void tool_read_file(McpCall *c);
void tool_write_file(McpCall *c);
void tool_edit_file(McpCall *c);
int put_directory(McpCall *c, json_t *res, FILE *f);
