/* SPDX-License-Identifier: MIT */
/* `sbx mcp`: a Model Context Protocol server on stdio over the sbx daemon: its own
 * `sbx serve --stdio` child, or a running `sbx serve --socket`. One poll loop relays: MCP
 * requests in, daemon requests out, their answers back as tool results. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>
#include "base/list.h"
#include "base/log.h"
#include "base/text.h"
#include "base/util.h"
#include "mcp/call.h"
#include "mcp/daemon.h"
#include "mcp/mcp.h"
#include "mcp/tool.h"
#include "rpc/jsonrpc.h"

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

/* ---- progress of streamed runs */

static McpCall *call_by_daemon_id(Mcp *m, uint64_t id) {
        for (McpCall *c = m->calls; c; c = c->next)
                if (c->daemon_id == id)
                        return c;
        return NULL;
}

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
        mcp_to_client(c->mcp, line, len);
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
        m->create_id = mcp_request(m, "create", json_object());
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
                mcp_call_free(c);
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
        json_t *info = json_pack("{s:s, s:s}", "name", "sbx", "version", SBX_VERSION);
        if (info && strcmp(v, "2025-06-18") >= 0)
                json_object_set_new(info, "title", json_string("sbx sandbox"));
        json_t *res = json_pack("{s:s, s:{s:{s:b}}, s:o}", "protocolVersion", v, "capabilities", "tools",
                                "listChanged", false, "serverInfo", info);
        if (res && strcmp(v, "2025-03-26") >= 0)
                json_object_set_new(res, "instructions", json_string(instructions));
        mcp_reply(m, id, res);
        /* Made now, while the client finishes its handshake: the first tool call finds it
         * ready (the daemon holds requests behind a create until it is answered). */
        create_sandbox(m);
}

static void on_tools_list(Mcp *m, json_t *id) {
        if (!m->tools)
                m->tools = mcp_tools_json(m->version);
        if (!m->tools) {
                mcp_reply_error(m, id, RPC_INTERNAL_ERROR, "out of memory");
                return;
        }
        mcp_reply(m, id, json_incref(m->tools));
}

static void tool_error(Mcp *m, json_t *id, const char *text) {
        mcp_reply(m, id, json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", text, "isError", true));
}

static void on_tools_call(Mcp *m, json_t *id, json_t *params) {
        const char *name = json_string_value(json_object_get(params, "name"));
        json_t *args = json_object_get(params, "arguments");
        if (!name) {
                mcp_reply_error(m, id, RPC_INVALID_PARAMS, "tools/call needs params.name, the tool's name (a string)");
                return;
        }
        const McpTool *t = mcp_tool_find(name);
        if (!t) {
                mcp_reply_error(m, id, RPC_INVALID_PARAMS, "Unknown tool: %s", name);
                return;
        }
        if (args && !json_is_object(args) && !json_is_null(args)) {
                mcp_reply_error(m, id, RPC_INVALID_PARAMS, "params.arguments must be an object");
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
                mcp_reply_error(m, id, RPC_INTERNAL_ERROR, "out of memory");
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
        mcp_tool_start(c);
}

static void on_cancelled(Mcp *m, json_t *params) {
        json_t *rid = json_object_get(params, "requestId");
        for (McpCall *c = m->calls; rid && c; c = c->next) {
                if (c->cancelled || !json_equal(c->id, rid))
                        continue;
                c->cancelled = true;
                if (c->waits_run && c->daemon_id)
                        (void)mcp_request(m, "cancel", json_pack("{s:I}", "requestId", (json_int_t)c->daemon_id));
                return;
        }
}

static bool on_client_line(void *ud, const char *line, size_t len, bool too_large) {
        Mcp *m = ud;
        if (too_large) {
                /* Answered to its own id (found at either end of the line), so the client's call
                 * does not wait forever; the advice is what write_file's own limit says. */
                json_t *id = rpc_cut_line_id(line, len);
                mcp_reply_error(m, id, RPC_PARSE_ERROR, "Request too large: a message is at most %u bytes (write_file "
                                "takes at most %u bytes of content at a time: write a large file in parts)",
                                SBX_MCP_LINE_BYTES, SBX_MCP_FILE_BYTES);
                json_decref(id);
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
                        mcp_reply_error(m, req.id, e.code, "%s", e.message);
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
                mcp_reply(m, req.id, json_object());
        else if ((strcmp(method, "tools/list") == 0 || strcmp(method, "tools/call") == 0) && !m->version)
                mcp_reply_error(m, req.id, MCP_NOT_INITIALIZED, "Server not initialized: send initialize first");
        else if (strcmp(method, "tools/list") == 0)
                on_tools_list(m, req.id);
        else if (strcmp(method, "tools/call") == 0)
                on_tools_call(m, req.id, req.params);
        else
                mcp_reply_error(m, req.id, RPC_METHOD_NOT_FOUND, "Method not found: %s", method);
        rpc_request_done(&req);
        return true;
}

/* ---- the loop */

/* The daemon is gone (it closed the connection, or a request could not be written): every
 * call is answered, since no answer will come. */
static void daemon_lost(Mcp *m) {
        m->d_gone = true;
        while (m->calls) {
                McpCall *c = m->calls;
                if (c->cancelled)
                        mcp_call_free(c);
                else
                        mcp_answer(c, "the sbx daemon exited: the sandbox is gone", 42, true);
        }
}

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
                if (p[1].revents && !mcp_flush(m->out_fd, &m->out)) {
                        m->out_broken = m->stop = true;
                        break;
                }
                if (p[2].revents & POLLOUT && !mcp_flush(m->d_fd, &m->dq))
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
                if (poll(&p, 1, (int)(end - now)) > 0 && !mcp_flush(m->out_fd, &m->out))
                        break;
        }
}

/* ---- start and end */

/* Stopping signals arrive as lines of the loop; a client gone mid-write is EPIPE. Then the
 * daemon. Returns 0, or -errno after saying why on stderr. */
static int mcp_open(Mcp *m, const McpOptions *o) {
        sigset_t stop;
        sigemptyset(&stop);
        sigaddset(&stop, SIGTERM);
        sigaddset(&stop, SIGINT);
        sigaddset(&stop, SIGHUP);
        (void)signal(SIGPIPE, SIG_IGN);
        int r = sigprocmask(SIG_BLOCK, &stop, NULL) < 0 ? negerrno() : 0;
        if (r >= 0 && (m->sig_fd = signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK)) < 0)
                r = negerrno();
        if (r >= 0)
                r = o->socket_path ? mcp_daemon_connect(m, o->socket_path) : mcp_daemon_spawn(m, o->verbose);
        if (r < 0) {
                fprintf(stderr, "sbx mcp: %s%s%s\n", o->socket_path ? o->socket_path : "starting the daemon", ": ",
                        strerror(-r));
                m->sig_fd = safe_close(m->sig_fd);
        }
        return r;
}

static void mcp_close(Mcp *m) {
        /* Calls still running (a signal stopped us) get no answer: the client is leaving. */
        while (m->calls)
                mcp_call_free(m->calls);
        mcp_daemon_close(m);
        if (m->in_flags >= 0)
                (void)fcntl(m->in_fd, F_SETFL, m->in_flags);
        if (m->out_flags >= 0)
                (void)fcntl(m->out_fd, F_SETFL, m->out_flags);
        close(m->sig_fd);
        framer_done(&m->in_fr);
        framer_done(&m->d_fr);
        bq_done(&m->out);
        bq_done(&m->dq);
        json_decref(m->tools);
}

int mcp_serve(const McpOptions *o) {
        Mcp m = { .in_fd = STDIN_FILENO, .out_fd = STDOUT_FILENO, .d_fd = -1, .sig_fd = -1, .child_pidfd = -1,
                  .sandbox = o->sandbox };
        framer_init(&m.in_fr, SBX_MCP_LINE_BYTES);
        framer_init(&m.d_fr, SBX_MAX_CLIENT_LINE_BYTES);
        int r = mcp_open(&m, o);
        if (r < 0)
                return r;
        m.in_flags = fcntl(m.in_fd, F_GETFL);
        m.out_flags = fcntl(m.out_fd, F_GETFL);
        (void)fd_set_nonblock(m.in_fd, true);
        (void)fd_set_nonblock(m.out_fd, true);
        (void)fd_set_nonblock(m.d_fd, true);
        r = loop(&m);
        flush_client(&m);
        mcp_close(&m);
        return r;
}
