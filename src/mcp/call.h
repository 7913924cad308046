/* SPDX-License-Identifier: MIT */
/* The bottom of `sbx mcp` (call.c): the server's state, one tool call, and what the tools and
 * the protocol loop both need of them: lines to the client and to the daemon, a call's next
 * daemon request, its answer (which frees it), its arguments. It calls nothing of src/mcp
 * above it: the tool table (tool.h) and the protocol loop (protocol.c) call in.
 *
 * A tool call is translated into the daemon's JSON-RPC methods one request at a time; the
 * loop routes each answer back to the call that waits for it and owns everything about the
 * MCP side (ids, progress, cancellation). */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/queue.h"
#include "rpc/framer.h"

typedef struct Mcp Mcp;
typedef struct McpCall McpCall;
typedef struct McpTool McpTool; /* tool.h */

/* The daemon's answer to the request a call waits for: its result (borrowed, valid during the
 * call), or NULL and the error's message. The function must either send the call's next
 * request (mcp_send) or answer it (mcp_answer*), which frees it. */
typedef void (*McpAnswerFn)(McpCall *c, json_t *result, const char *error);

enum CreateState { CREATE_NONE, CREATE_PENDING, CREATE_DONE, CREATE_FAILED };

/* One `sbx mcp` server: its client on stdio, its daemon, the calls in flight. Owns its fds
 * (but stdin and stdout), queues, framers, calls and the cached tools/list result. */
struct Mcp {
        int in_fd, out_fd, d_fd, sig_fd;
        pid_t child;
        int child_pidfd;
        int in_flags, out_flags; /* stdin's and stdout's file status flags, restored at exit */
        Framer in_fr, d_fr;
        ByteQueue out, dq;
        bool in_eof, out_broken, d_gone, stop, out_full;
        const char *version; /* negotiated; NULL before initialize */
        const char *sandbox; /* --sandbox: a persistent sandbox of a socket daemon */
        enum CreateState create;
        uint64_t create_id;
        char create_error[1024];
        uint64_t next_id;
        McpCall *calls;
        unsigned ncalls;
        json_t *tools; /* the tools/list result for the negotiated version */
};

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
        /* What the answer names (a process, a sandbox, a snapshot) for the client's program,
         * as structuredContent beside the text; set by a tool's put function, owned. */
        json_t *structured;
        /* More content items after the text (images a cell showed), owned; NULL for none. */
        json_t *extra_content;
        /* The tool's own state between requests, freed with the call. */
        void *state;
        void (*state_free)(void *state);
};

/* ---- lines */

/* Writes what q holds to fd until it would block. False when fd is broken. */
bool mcp_flush(int fd, ByteQueue *q);
/* Sends the client a line (malloc'd, taken over; NULL: nothing). A client that stops reading
 * for good stops the server. */
void mcp_to_client(Mcp *m, char *line, size_t len);
/* Answers a client's request with result (taken over), or with an error. */
void mcp_reply(Mcp *m, json_t *id, json_t *result);
void mcp_reply_error(Mcp *m, json_t *id, int code, const char *fmt, ...) _printf_(4, 5);
/* Sends method(params) to the daemon (params taken over; NULL: {}). Returns its id, or 0 when
 * the daemon is gone or memory ran out. */
uint64_t mcp_request(Mcp *m, const char *method, json_t *params);

/* ---- calls */

/* Unlinks c from its server and frees it and its state, unanswered. */
void mcp_call_free(McpCall *c);
/* Sends method(params) to the daemon for c (params is taken over; NULL: out of memory); fn
 * gets the answer. A run sent with stream: true reports progress to a caller that asked for
 * it. Returns 0; on failure c has been answered with a tool error (and freed) and -errno is
 * returned. */
int mcp_send(McpCall *c, const char *method, json_t *params, McpAnswerFn fn);
/* A params object addressing the call's sandbox: its `sandbox` argument, else the one given
 * with --sandbox, else none (the connection's own). NULL when out of memory. */
json_t *mcp_params(McpCall *c);
/* Answers the call with one text block (len bytes of valid UTF-8) and frees it. */
void mcp_answer(McpCall *c, const char *text, size_t len, bool is_error);
void mcp_answer_fmt(McpCall *c, bool is_error, const char *fmt, ...) _printf_(3, 4);
/* Answers the call with a malloc'd text (taken over; NULL: out of memory) up to its first NUL,
 * its bytes that are not UTF-8 shown as '?'. */
void mcp_answer_text(McpCall *c, char *text, bool is_error);
/* The same with the text f wrote: an open_memstream of *text, closed here. */
void mcp_answer_memstream(McpCall *c, FILE *f, char **text, bool is_error);
/* For an McpAnswerFn: when the daemon refused (result is NULL), answers the call with its error
 * text and returns true. */
bool mcp_refused(McpCall *c, json_t *result, const char *error);
/* Opens an open_memstream for an answer's text in a tool function returning void, or answers
 * the call with an error and returns. */
#define MEMSTREAM_OR_FAIL(c, f, text, len)                              \
        FILE *f = open_memstream(&(text), &(len));                      \
        if (!f) {                                                       \
                mcp_answer((c), "out of memory", 13, true);             \
                return;                                                 \
        }

/* ---- arguments: values checked already, NULL, false or def when absent (or null) */

const char *arg_str(McpCall *c, const char *name);
bool arg_bool(McpCall *c, const char *name);
double arg_num(McpCall *c, const char *name, double def);
/* A run's `timeout`, else the default for a call with or without a progressToken. */
double arg_timeout_s(McpCall *c);
