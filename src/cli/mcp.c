/* SPDX-License-Identifier: MIT */
/* `sbx mcp`: a Model Context Protocol server on stdio over the sbx daemon: its own
 * `sbx serve --stdio` child, or a running `sbx serve --socket`. One poll loop relays: MCP
 * requests in, daemon requests out, their answers back as tool results. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include "base/list.h"
#include "base/log.h"
#include "base/queue.h"
#include "base/text.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/mcp.h"
#include "rpc/framer.h"
#include "rpc/jsonrpc.h"
#include "sbx/sbx.h"

/* Protocol revisions spoken, newest first: the first is offered to a client that asks for one
 * not listed. The official SDKs still send the older ones; for tools they differ only in
 * fields an older client ignores or never gets (mcp_tools_json). */
static const char *const versions[] = { "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", "2024-10-07" };

static const char instructions[] =
        "These tools work in one isolated Linux sandbox (bash and the usual command-line tools; network: its "
        "own loopback only). Files live in /home/user (the starting directory) and /tmp. `run` keeps shell "
        "state between calls (cwd, variables, functions); use process_start for servers and long jobs, and "
        "snapshot/restore or fork before risky changes. Everything is discarded when this connection ends.";

/* MCP's own error for a request that comes before initialize. */
enum { MCP_NOT_INITIALIZED = -32002 };

enum CreateState { CREATE_NONE, CREATE_PENDING, CREATE_DONE, CREATE_FAILED };

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

/* ---- writing lines */

/* Queues a line (malloc'd, taken over) for fd, writing what it takes at once so that an
 * answer costs no extra turn of the loop. Returns false when fd is broken. */
static bool send_line(int fd, ByteQueue *q, char *line, size_t len) {
        bool ok = true;
        if (!line)
                return true;
        size_t done = 0;
        if (bq_pending(q) == 0) {
                while (done < len) {
                        ssize_t n = write(fd, line + done, len - done);
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n < 0) {
                                ok = errno == EAGAIN;
                                break;
                        }
                        done += (size_t)n;
                }
        }
        if (ok && done < len && bq_push(q, line + done, len - done) < 0)
                ok = false;
        free(line);
        return ok;
}

static bool flush_queue(int fd, ByteQueue *q) {
        while (bq_pending(q) > 0) {
                ssize_t n = write(fd, bq_head(q), bq_pending(q));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return errno == EAGAIN;
                bq_consume(q, (size_t)n);
        }
        return true;
}

static void to_client(Mcp *m, char *line, size_t len) {
        if (m->out_broken) {
                free(line);
                return;
        }
        if (!send_line(m->out_fd, &m->out, line, len)) {
                /* The client stopped reading for good: nobody is left to answer. */
                m->out_broken = true;
                m->stop = true;
        }
}

static void client_result(Mcp *m, json_t *id, json_t *result) {
        size_t len;
        char *line = rpc_result_line(id, result, &len);
        to_client(m, line, len);
}

static void client_error(Mcp *m, json_t *id, int code, const char *fmt, ...) _printf_(4, 5);
static void client_error(Mcp *m, json_t *id, int code, const char *fmt, ...) {
        RpcError e = { .code = code };
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e.message, sizeof e.message, fmt, ap);
        va_end(ap);
        size_t len;
        char *line = rpc_error_line(id, &e, &len);
        to_client(m, line, len);
}

/* Sends a request to the daemon; returns its id, or 0 when the daemon is gone. */
static uint64_t daemon_request(Mcp *m, const char *method, json_t *params) {
        if (m->d_gone) {
                json_decref(params);
                return 0;
        }
        uint64_t id = ++m->next_id;
        json_t *msg = json_pack("{s:s, s:I, s:s, s:o}", "jsonrpc", "2.0", "id", (json_int_t)id, "method", method,
                                "params", params ? params : json_object());
        char *line = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
        json_decref(msg);
        if (!line)
                return 0;
        size_t len = strlen(line);
        /* Room for the newline that ends the line. */
        char *nl = realloc(line, len + 2);
        if (!nl) {
                free(line);
                return 0;
        }
        nl[len] = '\n';
        nl[len + 1] = '\0';
        if (!send_line(m->d_fd, &m->dq, nl, len + 1)) {
                m->d_gone = true;
                return 0;
        }
        return id;
}

/* ---- calls */

static void call_free(McpCall *c) {
        Mcp *m = c->mcp;
        LIST_UNLINK(m->calls, c);
        m->ncalls--;
        if (c->state_free)
                c->state_free(c->state);
        json_decref(c->id);
        json_decref(c->args);
        json_decref(c->progress_token);
        free(c);
}

void mcp_answer(McpCall *c, const char *text, size_t len, bool is_error) {
        json_t *res = json_pack("{s:[{s:s, s:s%}], s:b}", "content", "type", "text", "text", text, len, "isError",
                                is_error);
        client_result(c->mcp, c->id, res);
        call_free(c);
}

void mcp_answer_fmt(McpCall *c, bool is_error, const char *fmt, ...) {
        char *text = NULL;
        va_list ap;
        va_start(ap, fmt);
        int n = vasprintf(&text, fmt, ap);
        va_end(ap);
        if (n < 0) {
                mcp_answer(c, "out of memory", 13, true);
                return;
        }
        mcp_answer(c, text, (size_t)n, is_error);
        free(text);
}

json_t *mcp_params(McpCall *c) {
        json_t *p = json_object();
        const char *sb = arg_str(c, "sandbox");
        if (!sb)
                sb = c->mcp->sandbox;
        if (p && sb && json_object_set_new(p, "sandboxId", json_string(sb)) < 0) {
                json_decref(p);
                return NULL;
        }
        return p;
}

int mcp_send(McpCall *c, const char *method, json_t *params, McpAnswerFn fn) {
        if (!params) {
                mcp_answer(c, "out of memory", 13, true);
                return -ENOMEM;
        }
        uint64_t id = daemon_request(c->mcp, method, params);
        if (id == 0) {
                mcp_answer_fmt(c, true, "the sbx daemon is gone: %s could not be sent", method);
                return -EPIPE;
        }
        c->daemon_id = id;
        c->on_answer = fn;
        c->waits_run = strcmp(method, "run") == 0;
        return 0;
}

static McpCall *call_by_daemon_id(Mcp *m, uint64_t id) {
        for (McpCall *c = m->calls; c; c = c->next)
                if (c->daemon_id == id)
                        return c;
        return NULL;
}

/* ---- progress of streamed runs */

static void progress_send(McpCall *c, uint64_t now) {
        uint64_t v = now - c->started_ms;
        /* Each value must be larger than the last. */
        c->progress = v > c->progress ? v : c->progress + 1;
        c->last_progress_ms = now;
        c->next_progress_ms = now + SBX_MCP_PROGRESS_MS;
        char msg[SBX_MCP_PROGRESS_LINE_BYTES + 128];
        double s = (double)(now - c->started_ms) / 1000.0;
        if (!c->out_seen)
                snprintf(msg, sizeof msg, "running for %.1f s, no output yet", s);
        else
                snprintf(msg, sizeof msg, "running for %.1f s, %llu bytes of output; last line: %s", s,
                         (unsigned long long)c->out_bytes, c->last_line);
        (void)utf8_sanitize(msg);
        json_t *p = json_pack("{s:O, s:I, s:s}", "progressToken", c->progress_token, "progress",
                              (json_int_t)c->progress, "message", msg);
        size_t len = 0;
        char *line = p ? rpc_notification_line("notifications/progress", p, &len) : NULL;
        to_client(c->mcp, line, len);
}

/* The daemon's `output` notification of a streamed run: remembered, and reported at once
 * unless progress went out less than SBX_MCP_PROGRESS_MIN_MS ago. */
static void on_output(Mcp *m, json_t *params) {
        json_t *rid = json_object_get(params, "requestId");
        if (!json_is_integer(rid))
                return;
        McpCall *c = call_by_daemon_id(m, (uint64_t)json_integer_value(rid));
        if (!c || !c->progress_token || c->cancelled)
                return;
        json_t *data = json_object_get(params, "data");
        const char *s = json_string_value(data);
        size_t n = json_string_length(data);
        if (!s)
                return;
        bool b64 = json_object_get(params, "encoding") != NULL;
        c->out_bytes += b64 ? n / 4 * 3 : n;
        c->out_seen = true;
        if (!b64) {
                /* The last line that holds something. */
                size_t end = n;
                while (end > 0 && (s[end - 1] == '\n' || s[end - 1] == '\r'))
                        end--;
                if (end > 0) {
                        size_t start = end;
                        while (start > 0 && s[start - 1] != '\n')
                                start--;
                        size_t k = MIN(end - start, sizeof c->last_line - 1);
                        memcpy(c->last_line, s + start, k);
                        c->last_line[k] = '\0';
                }
        }
        uint64_t now = now_ms();
        if (now >= c->last_progress_ms + SBX_MCP_PROGRESS_MIN_MS)
                progress_send(c, now);
        else
                c->next_progress_ms = MIN(c->next_progress_ms, c->last_progress_ms + SBX_MCP_PROGRESS_MIN_MS);
}

/* Sends what is due; returns the ms until the next is (-1: none). */
static int progress_tick(Mcp *m) {
        uint64_t now = now_ms();
        int64_t wait = -1;
        for (McpCall *c = m->calls; c; c = c->next) {
                if (!c->progress_token || !c->waits_run || c->cancelled)
                        continue;
                if (c->next_progress_ms <= now)
                        progress_send(c, now);
                int64_t w = (int64_t)(c->next_progress_ms - now);
                if (wait < 0 || w < wait)
                        wait = w;
        }
        return (int)wait;
}

/* ---- the daemon's errors */

/* Writes the text a tool shows for the daemon's error object err: its message, and, for the
 * codes that say the daemon cannot take the call at all or not now, what the agent can do
 * about it (the agent reads this text; it never sees the code). */
static void daemon_error_text(json_t *err, char *buf, size_t len) {
        const char *msg = json_string_value(json_object_get(err, "message"));
        json_t *retry = json_object_get(json_object_get(err, "data"), "retryAfterMs");
        if (!msg)
                msg = "the daemon's answer holds neither result nor error";
        switch (json_integer_value(json_object_get(err, "code"))) {
        case RPC_WORKER_UNAVAILABLE:
                if (json_is_integer(retry))
                        snprintf(buf, len,
                                 "%s\nThe sbx daemon has no free worker for this call now: make the same call again "
                                 "in %lld ms or later.",
                                 msg, (long long)json_integer_value(retry));
                else
                        snprintf(buf, len,
                                 "%s\nThe sandbox is at one of its limits: let running commands or background "
                                 "processes end (or stop some with process_kill), then call again.",
                                 msg);
                break;
        case RPC_SANDBOX_DISABLED:
                snprintf(buf, len,
                         "%s\nThis sbx daemon was started with --mode disabled: it runs no commands and serves no "
                         "files, so none of these tools can work until it is started without that option.",
                         msg);
                break;
        case RPC_SHUTTING_DOWN:
                snprintf(buf, len,
                         "%s\nThe sbx daemon is shutting down and takes no new work: the sandbox, its files and "
                         "processes go with it.",
                         msg);
                break;
        default: snprintf(buf, len, "%s", msg); break;
        }
}

/* ---- the sandbox */

static void create_sandbox(Mcp *m) {
        if (m->sandbox || m->create == CREATE_PENDING || m->create == CREATE_DONE)
                return;
        m->create_id = daemon_request(m, "create", json_object());
        m->create = m->create_id ? CREATE_PENDING : CREATE_FAILED;
        if (!m->create_id)
                snprintf(m->create_error, sizeof m->create_error, "the sbx daemon is gone");
}

static void on_create_answer(Mcp *m, json_t *msg) {
        m->create_id = 0;
        if (json_object_get(msg, "result")) {
                m->create = CREATE_DONE;
                return;
        }
        const char *e = json_string_value(json_object_get(json_object_get(msg, "error"), "message"));
        m->create = CREATE_FAILED;
        log_warn("mcp: the sandbox could not be created: %s", e ? e : "unknown error");
        daemon_error_text(json_object_get(msg, "error"), m->create_error, sizeof m->create_error);
}

/* ---- the daemon's lines */

static void on_daemon_answer(Mcp *m, json_t *msg) {
        json_t *jid = json_object_get(msg, "id");
        if (!json_is_integer(jid))
                return;
        uint64_t id = (uint64_t)json_integer_value(jid);
        if (id != 0 && id == m->create_id) {
                on_create_answer(m, msg);
                return;
        }
        McpCall *c = call_by_daemon_id(m, id);
        if (!c)
                return; /* a cancel's answer */
        McpAnswerFn fn = c->on_answer;
        c->daemon_id = 0;
        c->on_answer = NULL;
        c->waits_run = false;
        if (c->cancelled) {
                call_free(c);
                return;
        }
        json_t *res = json_object_get(msg, "result");
        if (res) {
                fn(c, res, NULL);
                return;
        }
        json_t *err = json_object_get(msg, "error");
        const char *e = json_string_value(json_object_get(err, "message"));
        char buf[sizeof m->create_error + 64];
        if (m->create == CREATE_FAILED && e && strncmp(e, "Sandbox not created", 19) == 0)
                snprintf(buf, sizeof buf, "the sandbox could not be created: %s", m->create_error);
        else
                daemon_error_text(err, buf, sizeof buf);
        fn(c, NULL, buf);
}

static bool on_daemon_line(void *ud, const char *line, size_t len, bool too_large) {
        Mcp *m = ud;
        if (too_large) {
                /* Its call never hears back; nothing else is lost. */
                log_warn("mcp: an answer of the daemon over %llu bytes was skipped",
                         (unsigned long long)SBX_MAX_CLIENT_LINE_BYTES);
                return true;
        }
        json_t *msg = json_loadb(line, len, 0, NULL);
        if (!json_is_object(msg)) {
                json_decref(msg);
                return true;
        }
        const char *method = json_string_value(json_object_get(msg, "method"));
        if (method) {
                if (strcmp(method, "output") == 0)
                        on_output(m, json_object_get(msg, "params"));
        } else
                on_daemon_answer(m, msg);
        json_decref(msg);
        return true;
}

/* ---- MCP methods */

static void on_initialize(Mcp *m, json_t *id, json_t *params) {
        const char *want = json_string_value(json_object_get(params, "protocolVersion"));
        const char *v = versions[0];
        for (size_t i = 0; want && i < ELEMENTSOF(versions); i++)
                if (strcmp(want, versions[i]) == 0)
                        v = versions[i];
        if (m->version != v) {
                json_decref(m->tools);
                m->tools = NULL;
        }
        m->version = v;
        json_t *info = json_pack("{s:s, s:s}", "name", "sbx", "version", sbx_version());
        if (info && strcmp(v, "2025-06-18") >= 0)
                json_object_set_new(info, "title", json_string("sbx sandbox"));
        json_t *res = json_pack("{s:s, s:{s:{s:b}}, s:o}", "protocolVersion", v, "capabilities", "tools",
                                "listChanged", false, "serverInfo", info);
        if (res && strcmp(v, "2025-03-26") >= 0)
                json_object_set_new(res, "instructions", json_string(instructions));
        client_result(m, id, res);
        /* Made now, while the client finishes its handshake: the first tool call finds it
         * ready (the daemon holds requests behind a create until it is answered). */
        create_sandbox(m);
}

static void on_tools_list(Mcp *m, json_t *id) {
        if (!m->tools)
                m->tools = mcp_tools_json(m->version);
        if (!m->tools) {
                client_error(m, id, RPC_INTERNAL_ERROR, "out of memory");
                return;
        }
        client_result(m, id, json_incref(m->tools));
}

static void tool_error(Mcp *m, json_t *id, const char *text) {
        client_result(m, id, json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", text, "isError", true));
}

static void on_tools_call(Mcp *m, json_t *id, json_t *params) {
        const char *name = json_string_value(json_object_get(params, "name"));
        json_t *args = json_object_get(params, "arguments");
        if (!name) {
                client_error(m, id, RPC_INVALID_PARAMS, "tools/call needs params.name, the tool's name (a string)");
                return;
        }
        const McpTool *t = mcp_tool_find(name);
        if (!t) {
                client_error(m, id, RPC_INVALID_PARAMS, "Unknown tool: %s", name);
                return;
        }
        if (args && !json_is_object(args) && !json_is_null(args)) {
                client_error(m, id, RPC_INVALID_PARAMS, "params.arguments must be an object");
                return;
        }
        char err[512];
        if (mcp_args_check(t, args, err, sizeof err) < 0) {
                tool_error(m, id, err);
                return;
        }
        if (m->ncalls >= SBX_MCP_MAX_CALLS) {
                snprintf(err, sizeof err, "too many tool calls at once (%u): retry when some have finished",
                         SBX_MCP_MAX_CALLS);
                tool_error(m, id, err);
                return;
        }
        json_t *token = json_object_get(json_object_get(params, "_meta"), "progressToken");
        McpCall *c = calloc(1, sizeof *c);
        json_t *a = json_is_object(args) ? json_deep_copy(args) : json_object();
        if (!c || !a) {
                free(c);
                json_decref(a);
                client_error(m, id, RPC_INTERNAL_ERROR, "out of memory");
                return;
        }
        c->mcp = m;
        c->id = json_incref(id);
        c->args = a;
        c->tool = t;
        if (json_is_string(token) || json_is_integer(token))
                c->progress_token = json_incref(token);
        /* The first output is reported at once; silence, after SBX_MCP_PROGRESS_MS. */
        c->started_ms = now_ms();
        c->next_progress_ms = c->started_ms + SBX_MCP_PROGRESS_MS;
        LIST_LINK(m->calls, c);
        m->ncalls++;
        /* A create that failed is tried again: what was wrong may be gone. */
        if (m->create == CREATE_FAILED)
                create_sandbox(m);
        t->start(c);
}

static void on_cancelled(Mcp *m, json_t *params) {
        json_t *rid = json_object_get(params, "requestId");
        for (McpCall *c = m->calls; rid && c; c = c->next) {
                if (c->cancelled || !json_equal(c->id, rid))
                        continue;
                c->cancelled = true;
                if (c->waits_run && c->daemon_id)
                        (void)daemon_request(m, "cancel", json_pack("{s:I}", "requestId", (json_int_t)c->daemon_id));
                return;
        }
}

static bool on_client_line(void *ud, const char *line, size_t len, bool too_large) {
        Mcp *m = ud;
        if (too_large) {
                client_error(m, NULL, RPC_PARSE_ERROR, "Request too large: a message is at most %u bytes",
                             SBX_MCP_LINE_BYTES);
                return true;
        }
        size_t i = 0;
        while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
                i++;
        if (i == len)
                return true;
        RpcRequest req;
        RpcError e;
        if (rpc_parse_request(line, len, &req, &e) < 0) {
                /* An answer to a request of ours: we send none, so it answers nothing. */
                bool answer = json_is_object(req.msg) && !json_object_get(req.msg, "method") &&
                              (json_object_get(req.msg, "result") || json_object_get(req.msg, "error"));
                if (json_is_array(req.msg))
                        rpc_fail(&e, RPC_INVALID_REQUEST, "Invalid Request: batches are not supported");
                if (!answer && rpc_request_wants_error(&req, &e))
                        client_error(m, req.id, e.code, "%s", e.message);
                rpc_request_done(&req);
                return true;
        }
        const char *method = req.method;
        if (!req.has_id) {
                if (strcmp(method, "notifications/cancelled") == 0)
                        on_cancelled(m, req.params);
                /* notifications/initialized and the others need nothing from us. */
        } else if (strcmp(method, "initialize") == 0)
                on_initialize(m, req.id, req.params);
        else if (strcmp(method, "ping") == 0)
                client_result(m, req.id, json_object());
        else if ((strcmp(method, "tools/list") == 0 || strcmp(method, "tools/call") == 0) && !m->version)
                client_error(m, req.id, MCP_NOT_INITIALIZED, "Server not initialized: send initialize first");
        else if (strcmp(method, "tools/list") == 0)
                on_tools_list(m, req.id);
        else if (strcmp(method, "tools/call") == 0)
                on_tools_call(m, req.id, req.params);
        else
                client_error(m, req.id, RPC_METHOD_NOT_FOUND, "Method not found: %s", method);
        rpc_request_done(&req);
        return true;
}

/* ---- the daemon */

static int spawn_daemon(Mcp *m, bool verbose) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                return negerrno();
        _cleanup_close_ int ours = sv[0], theirs = sv[1];
        posix_spawn_file_actions_t fa;
        posix_spawnattr_t at;
        sigset_t none, pipe;
        sigemptyset(&none);
        sigemptyset(&pipe);
        sigaddset(&pipe, SIGPIPE);
        int r = posix_spawn_file_actions_init(&fa);
        if (r)
                return -r;
        r = posix_spawnattr_init(&at);
        if (r) {
                posix_spawn_file_actions_destroy(&fa);
                return -r;
        }
        /* The daemon reads and writes the socket as its stdin and stdout; stderr stays ours,
         * which is where MCP clients collect a server's log. Our blocked signals and ignored
         * SIGPIPE are not its. */
        if (!(r = posix_spawn_file_actions_adddup2(&fa, theirs, STDIN_FILENO)) &&
            !(r = posix_spawn_file_actions_adddup2(&fa, theirs, STDOUT_FILENO)) &&
            !(r = posix_spawnattr_setsigmask(&at, &none)) && !(r = posix_spawnattr_setsigdefault(&at, &pipe)) &&
            !(r = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))) {
                char *argv[] = { "sbx", "serve", "--stdio", verbose ? "--verbose" : NULL, NULL };
                extern char **environ;
                r = posix_spawn(&m->child, "/proc/self/exe", &fa, &at, argv, environ);
        }
        posix_spawn_file_actions_destroy(&fa);
        posix_spawnattr_destroy(&at);
        if (r)
                return -r;
        m->child_pidfd = pidfd_open(m->child, 0);
        m->d_fd = TAKE_FD(ours);
        return 0;
}

static int connect_daemon(Mcp *m, const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (strlen(path) >= sizeof sa.sun_path)
                return -ENAMETOOLONG;
        memcpy(sa.sun_path, path, strlen(path) + 1);
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
                return negerrno();
        m->d_fd = TAKE_FD(fd);
        return 0;
}

/* The daemon is gone (it closed the connection, or a request could not be written): every
 * call is answered, since no answer will come. */
static void daemon_lost(Mcp *m) {
        m->d_gone = true;
        while (m->calls) {
                McpCall *c = m->calls;
                if (c->cancelled)
                        call_free(c);
                else
                        mcp_answer(c, "the sbx daemon exited: the sandbox is gone", 42, true);
        }
}

/* The end of the connection is what tells the daemon to destroy this connection's sandboxes
 * (our own child: everything, then it exits), and the child is given the time that takes. Our
 * side is shut for writing first and left open, so the daemon sees a plain EOF and still
 * writes its last answers somewhere instead of failing on a closed socket. */
static void daemon_close(Mcp *m) {
        if (m->child > 0 && m->d_fd >= 0)
                (void)shutdown(m->d_fd, SHUT_WR);
        else
                m->d_fd = safe_close(m->d_fd);
        if (m->child <= 0)
                return;
        if (m->child_pidfd >= 0) {
                struct pollfd p = { .fd = m->child_pidfd, .events = POLLIN };
                uint64_t end = now_ms() + SBX_MCP_CHILD_EXIT_MS;
                for (uint64_t now = now_ms(); now < end; now = now_ms()) {
                        int r = poll(&p, 1, (int)(end - now));
                        if (r > 0 || (r < 0 && errno != EINTR))
                                break;
                }
                if (!pidfd_is_dead(m->child_pidfd)) {
                        log_warn("mcp: the daemon did not exit within %u ms: killing it", SBX_MCP_CHILD_EXIT_MS);
                        pidfd_sigkill(m->child_pidfd);
                }
        }
        while (waitpid(m->child, NULL, 0) < 0 && errno == EINTR)
                ;
        m->d_fd = safe_close(m->d_fd);
        m->child_pidfd = safe_close(m->child_pidfd);
        m->child = 0;
}

/* ---- the loop */

static void read_into(Mcp *m, int fd, Framer *fr, FrameFn fn, bool *ret_eof) {
        uint8_t buf[65536];
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
                return;
        if (n <= 0) {
                *ret_eof = true;
                return;
        }
        if (framer_feed(fr, buf, (size_t)n, fn, m) < 0) {
                log_error("mcp: out of memory");
                m->stop = true;
        }
}

static int loop(Mcp *m) {
        while (!m->stop) {
                /* A client that stopped reading: neither its requests nor the daemon's answers
                 * are read until it takes what waits for it, which bounds both queues. */
                size_t pending = bq_pending(&m->out);
                if (pending > SBX_OUTPUT_QUEUE_HIGH_BYTES)
                        m->out_full = true;
                else if (pending < SBX_OUTPUT_QUEUE_LOW_BYTES)
                        m->out_full = false;
                bool take_requests = !m->in_eof && !m->out_full && bq_pending(&m->dq) < SBX_OUTPUT_QUEUE_HIGH_BYTES;
                if (m->in_eof && !m->calls)
                        break; /* the client is done and everything it asked is answered */
                if (m->d_gone) {
                        daemon_lost(m);
                        break;
                }
                struct pollfd p[4] = {
                        { .fd = take_requests ? m->in_fd : -1, .events = POLLIN },
                        { .fd = pending ? m->out_fd : -1, .events = POLLOUT },
                        { .fd = m->d_fd, .events = (m->out_full ? 0 : POLLIN) | (bq_pending(&m->dq) ? POLLOUT : 0) },
                        { .fd = m->sig_fd, .events = POLLIN },
                };
                int r = poll(p, ELEMENTSOF(p), progress_tick(m));
                if (r < 0 && errno != EINTR)
                        return negerrno();
                if (r <= 0)
                        continue;
                if (p[3].revents) {
                        struct signalfd_siginfo si;
                        if (read(m->sig_fd, &si, sizeof si) > 0)
                                log_debug("mcp: signal %u: stopping", si.ssi_signo);
                        m->stop = true;
                        break;
                }
                if (p[1].revents && !flush_queue(m->out_fd, &m->out)) {
                        m->out_broken = m->stop = true;
                        break;
                }
                if (p[2].revents & POLLOUT && !flush_queue(m->d_fd, &m->dq))
                        m->d_gone = true;
                if (p[2].revents & (POLLIN | POLLHUP | POLLERR)) {
                        bool eof = false;
                        read_into(m, m->d_fd, &m->d_fr, on_daemon_line, &eof);
                        if (eof) {
                                log_error("mcp: the sbx daemon closed the connection");
                                m->d_gone = true;
                        }
                }
                if (p[0].revents)
                        read_into(m, m->in_fd, &m->in_fr, on_client_line, &m->in_eof);
        }
        return m->d_gone ? -EPIPE : 0;
}

/* Gives the client what is still queued for it, for a second at most. */
static void flush_client(Mcp *m) {
        uint64_t end = now_ms() + 1000;
        while (!m->out_broken && bq_pending(&m->out) > 0) {
                uint64_t now = now_ms();
                if (now >= end)
                        break;
                struct pollfd p = { .fd = m->out_fd, .events = POLLOUT };
                if (poll(&p, 1, (int)(end - now)) > 0 && !flush_queue(m->out_fd, &m->out))
                        break;
        }
}

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx mcp [--socket PATH [--sandbox ID]] [-v]\n"
                "\n"
                "A Model Context Protocol server on stdin/stdout: gives an AI agent the tools of one\n"
                "sandbox (run commands in persistent sessions, background processes, read, write and\n"
                "edit files, list directories, fork, snapshot and restore). By default it starts its\n"
                "own daemon (`sbx serve --stdio`) and a fresh sandbox, both gone when the client\n"
                "disconnects.\n"
                "\n"
                "Options:\n"
                "      --socket PATH   use a running `sbx serve --socket PATH` instead\n"
                "      --sandbox ID    with --socket: work in that persistent sandbox (sandbox.create\n"
                "                      with persist: true), which is kept at exit\n"
                "  -v, --verbose       debug logging on stderr (the daemon's too)\n"
                "  -h, --help          show this help\n"
                "\n"
                "Add it to an MCP client (sbx makes sandboxes as root, or rootless as README.md says):\n"
                "\n"
                "  Claude Code:\n"
                "    claude mcp add sbx -- sbx mcp\n"
                "\n"
                "  Cursor, in .cursor/mcp.json of a project (or ~/.cursor/mcp.json):\n"
                "    { \"mcpServers\": { \"sbx\": { \"command\": \"sbx\", \"args\": [\"mcp\"] } } }\n"
                "\n"
                "  Claude Desktop, in claude_desktop_config.json (Settings > Developer > Edit Config):\n"
                "    { \"mcpServers\": { \"sbx\": { \"command\": \"/usr/local/bin/sbx\", \"args\": [\"mcp\"] } } }\n");
}

int cmd_mcp(int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, 's' }, { "sandbox", required_argument, NULL, 'S' },
                { "verbose", no_argument, NULL, 'v' },      { "help", no_argument, NULL, 'h' },
                {},
        };
        const char *sock = NULL, *sandbox = NULL;
        bool verbose = false;
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
                switch (c) {
                case 's': sock = optarg; break;
                case 'S': sandbox = optarg; break;
                case 'v': verbose = true; sbx_log_level = LOG_DEBUG; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        if (optind < argc || (sandbox && !sock)) {
                fprintf(stderr, "sbx mcp: %s\n\n", sandbox && !sock ? "--sandbox needs --socket" : "unexpected argument");
                usage(stderr);
                return 2;
        }
        Mcp m = { .in_fd = STDIN_FILENO, .out_fd = STDOUT_FILENO, .d_fd = -1, .sig_fd = -1, .child_pidfd = -1,
                  .sandbox = sandbox };
        framer_init(&m.in_fr, SBX_MCP_LINE_BYTES);
        framer_init(&m.d_fr, SBX_MAX_CLIENT_LINE_BYTES);
        /* Stopping signals arrive as lines of the loop; a client gone mid-write is EPIPE. */
        sigset_t stop;
        sigemptyset(&stop);
        sigaddset(&stop, SIGTERM);
        sigaddset(&stop, SIGINT);
        sigaddset(&stop, SIGHUP);
        (void)signal(SIGPIPE, SIG_IGN);
        int r = sigprocmask(SIG_BLOCK, &stop, NULL) < 0 ? negerrno() : 0;
        if (r >= 0 && (m.sig_fd = signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK)) < 0)
                r = negerrno();
        if (r >= 0)
                r = sock ? connect_daemon(&m, sock) : spawn_daemon(&m, verbose);
        if (r < 0) {
                fprintf(stderr, "sbx mcp: %s%s%s\n", sock ? sock : "starting the daemon", ": ", strerror(-r));
                safe_close(m.sig_fd);
                return 1;
        }
        m.in_flags = fcntl(m.in_fd, F_GETFL);
        m.out_flags = fcntl(m.out_fd, F_GETFL);
        (void)fd_set_nonblock(m.in_fd, true);
        (void)fd_set_nonblock(m.out_fd, true);
        (void)fd_set_nonblock(m.d_fd, true);
        r = loop(&m);
        flush_client(&m);
        /* Calls still running (a signal stopped us) get no answer: the client is leaving. */
        while (m.calls)
                call_free(m.calls);
        daemon_close(&m);
        if (m.in_flags >= 0)
                (void)fcntl(m.in_fd, F_SETFL, m.in_flags);
        if (m.out_flags >= 0)
                (void)fcntl(m.out_fd, F_SETFL, m.out_flags);
        close(m.sig_fd);
        framer_done(&m.in_fr);
        framer_done(&m.d_fr);
        bq_done(&m.out);
        bq_done(&m.dq);
        json_decref(m.tools);
        return r < 0 ? 1 : 0;
}
