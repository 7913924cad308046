/* SPDX-License-Identifier: MIT */
/* Handlers for processes (process.*): start, list, logs, stream, write, closeStdin, resize,
 * kill, killAll, wait. A process is named by "p<id>" across the daemon; a connection reaches
 * the processes of every sandbox it may use.
 *
 * Requests answered later (start, stream, kill, wait) are PENDING_PROC pendings with a
 * ProcReq. A stream sends what the log holds from the client's cursor, then each new piece as
 * it comes; while its connection's answers pile up it sends nothing and only remembers its
 * cursor, and catches up from the log when they drain: the process never waits for a client,
 * and a client that keeps its cursors never gets a byte twice. */
#include <errno.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include "base/buf.h"
#include "base/limits.h"
#include "base/list.h"
#include "base/macro.h"
#include "base/text.h"
#include "base/util.h"
#include "server/handler.h"
#include "process/process.h"
#include "session/internal.h"
#include "methods/methods.h"

typedef enum ProcKind { PR_START, PR_STREAM, PR_WAIT_EXIT, PR_WAIT_LOG, PR_WAIT_PORT, PR_KILL } ProcKind;

typedef struct ProcReq {
        Pending *pending;
        ProcKind kind;
        SbxProcess *p;
        SbxSandbox *sb;
        SbxProcessWatcher w;
        uint64_t cursor;       /* stream: the next byte to send; wait log: the next to match */
        bool paused, ended;
        json_t *hit;           /* wait log: the answer, once a line matched */
        regex_t re;
        bool have_re;
        Buf line[2];           /* wait log: the partial last line of stdout, of stderr */
        int timer_fd;          /* wait: the timeout, and the port's polling */
        Watch timer_w;
        uint64_t deadline;     /* monotonic ns */
        uint16_t port;
        unsigned left, killed; /* killAll: kills not answered yet, and all it sent */
} ProcReq;

/* ---------------------------------------------------------------- lookup and JSON */

static const char *status_name(SbxProcessStatus s) {
        switch (s) {
        case SBX_PROCESS_RUNNING: return "running";
        case SBX_PROCESS_EXITED: return "exited";
        case SBX_PROCESS_KILLED: return "killed";
        case SBX_PROCESS_TIMEOUT: return "timeout";
        default: return "unknown";
        }
}

static json_t *signal_json(int sig) {
        const char *n = sig > 0 ? sigabbrev_np(sig) : NULL;
        return n ? json_string(n) : sig > 0 ? json_integer(sig) : json_null();
}

/* {status, exitCode, signal} of p. */
static json_t *status_json(const SbxProcess *p) {
        SbxProcessInfo i;
        sbx_process_info(p, &i);
        return json_pack("{s:s, s:o, s:o}", "status", status_name(i.status), "exitCode",
                         i.exit_code >= 0 ? json_integer(i.exit_code) : json_null(), "signal", signal_json(i.signal));
}

static json_t *proc_json(const SbxProcess *p) {
        SbxProcessInfo i;
        sbx_process_info(p, &i);
        char id[HANDLER_PROCESS_ID_MAX];
        json_t *o = status_json(p);
        json_object_update_new(o, json_pack("{s:s, s:i, s:s, s:o, s:I, s:o, s:s, s:b, s:b, s:b, s:I}", "processId",
                                            handler_process_id(i.id, id), "pid", i.pid, "command", i.command, "label",
                                            i.label ? json_string(i.label) : json_null(), "startedAt",
                                            (json_int_t)i.started_ms, "endedAt",
                                            i.ended_ms ? json_integer((json_int_t)i.ended_ms) : json_null(), "origin",
                                            i.leftover ? "leftover" : "start", "pty", i.pty, "stdin", i.stdin_open,
                                            "alive", i.alive, "logEnd", (json_int_t)i.log_end));
        return o;
}

/* p's name on the wire, in buf. */
static const char *proc_name(const SbxProcess *p, char buf[static HANDLER_PROCESS_ID_MAX]) {
        SbxProcessInfo i;
        sbx_process_info(p, &i);
        return handler_process_id(i.id, buf);
}

/* The process named by the `processId` param among the sandboxes r's connection may use
 * (only r's `sandboxId` if given). Returns 0 or -1 with e set. */
static int find_process(Req *r, SbxProcess **ret, RpcError *e) {
        const char *id, *sbid = NULL;
        if (param_string(r->params, "processId", true, &id, NULL, e) < 0 ||
            param_string(r->params, "sandboxId", false, &sbid, NULL, e) < 0)
                return -1;
        char *end;
        unsigned long long n = id[0] == 'p' && id[1] >= '1' && id[1] <= '9' ? strtoull(id + 1, &end, 10) : 0;
        /* Ids are unique in the context: one lookup, then the sandbox's rules. */
        SbxProcess *p = n && !*end ? sbx_context_process(r->core->ctx, n) : NULL;
        SrvSandbox *sb = p ? registry_by_box(&r->core->registry, sbx_process_sandbox(p)) : NULL;
        if (sb && registry_may_use(sb, r->conn, conn_uid(r->conn)) && (!sbid || strcmp(sbid, sbx_sandbox_id(sb->sb)) == 0)) {
                *ret = p;
                return 0;
        }
        return rpc_fail(e, RPC_INVALID_PARAMS, "Unknown processId: %s (process.list names them)", id);
}

/* ---------------------------------------------------------------- pending requests */

/* A ProcReq and its Pending are freed together by req_free, once, by exactly one of:
 *  - whoever answers it (req_reply, req_error): libsbx's done callback of a start or a kill,
 *    or the watcher or the timer of a stream or a wait;
 *  - the handler that made it, when the request fails before libsbx or a watcher holds q
 *    (sbx_process_start or sbx_process_kill refused, a bad pattern, no timer, a killAll with
 *    nothing to kill): nothing calls back, and pending_free unlinks the pending, so it is
 *    never detached;
 *  - req_detached, when the connection closes first, for a stream or a wait: only its watcher
 *    and its timer hold it, and req_free takes both away. A start or a kill it leaves alone:
 *    libsbx holds q as the userdata of the done callbacks it owes (a kill's come when the
 *    process is freed too), and the last of them frees it, answering nobody.
 * So q->kind matters to req_detached and to the watchers' callbacks, never to req_free. */
static void req_free(ProcReq *q) {
        if (q->w.process)
                sbx_process_unwatch(&q->w);
        if (q->timer_fd >= 0) {
                loop_del(sbx_context_loop(q->pending->core->ctx), &q->timer_w);
                safe_close(q->timer_fd);
        }
        if (q->have_re)
                regfree(&q->re);
        json_decref(q->hit);
        buf_done(&q->line[0]);
        buf_done(&q->line[1]);
        pending_free(q->pending);
        free(q);
}

static void req_reply(ProcReq *q, json_t *result) {
        if (q->pending->conn)
                conn_reply(q->pending->conn, q->pending->id, result);
        else
                json_decref(result);
        req_free(q);
}

static void req_error(ProcReq *q, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void req_error(ProcReq *q, int code, const char *fmt, ...) {
        RpcError e = { .code = code };
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e.message, sizeof e.message, fmt, ap);
        va_end(ap);
        if (q->pending->conn)
                conn_reply_error(q->pending->conn, q->pending->id, &e);
        req_free(q);
}

static void req_detached(Pending *pd) {
        ProcReq *q = pd->proc;
        if (q->kind == PR_START || q->kind == PR_KILL)
                return; /* freed by the done callback still to come (above) */
        req_free(q);
}

static int req_new(Req *r, ProcKind kind, SbxProcess *p, ProcReq **ret, RpcError *e) {
        ProcReq *q = calloc(1, sizeof *q);
        if (!q || pending_new(&r->core->pending, r->core, r->conn, r->id, PENDING_PROC, &q->pending) < 0) {
                free(q);
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        }
        q->kind = kind;
        q->p = p;
        q->sb = p ? sbx_process_sandbox(p) : NULL;
        q->timer_fd = -1;
        buf_init(&q->line[0], SBX_WAIT_LINE_BYTES);
        buf_init(&q->line[1], SBX_WAIT_LINE_BYTES);
        q->pending->proc = q;
        q->pending->detached = req_detached;
        *ret = q;
        return 0;
}

/* Arms q's timer for ms from now (the first time: creates it). Returns 0 or -errno. */
static void timer_event(Watch *w, uint32_t events);
static int req_timer(ProcReq *q, uint64_t ms) {
        if (q->timer_fd < 0) {
                q->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
                if (q->timer_fd < 0)
                        return negerrno();
                int r = loop_add(sbx_context_loop(q->pending->core->ctx), &q->timer_w, q->timer_fd, EPOLLIN,
                                 timer_event, q);
                if (r < 0) {
                        q->timer_fd = safe_close(q->timer_fd);
                        return r;
                }
        }
        return timerfd_arm_ms(q->timer_fd, ms ? ms : 1);
}

/* ---------------------------------------------------------------- process.start */

static void start_done(void *ud, SbxProcess *p, int error) {
        ProcReq *q = ud;
        audit_process_started(q->pending->core->audit, TAKE_PTR(q->pending->audit), p, error);
        if (!p) {
                if (error == -ETIMEDOUT)
                        req_error(q, RPC_SANDBOX_ERROR, "ETIMEDOUT: the session gave no worker in time to start the process");
                else if (error == -ECANCELED)
                        req_error(q, RPC_SANDBOX_ERROR, "ECANCELED: the start was cancelled (session or sandbox gone)");
                else
                        req_error(q, RPC_SANDBOX_ERROR, "ECHILD: the process could not be started");
                return;
        }
        SbxProcessInfo i;
        sbx_process_info(p, &i);
        char id[HANDLER_PROCESS_ID_MAX];
        req_reply(q, json_pack("{s:s, s:i}", "processId", handler_process_id(i.id, id), "pid", i.pid));
}

static int m_process_start(Req *r, json_t **ret, RpcError *e) {
        const char *cmd, *cwd = NULL, *label = NULL;
        size_t cmd_len;
        json_t *env = NULL, *pty = NULL;
        bool want_stdin = false;
        uint64_t timeout = 0, cols = 80, rows = 24;
        if (param_string(r->params, "command", true, &cmd, &cmd_len, e) < 0 ||
            param_string(r->params, "cwd", false, &cwd, NULL, e) < 0 ||
            param_string(r->params, "label", false, &label, NULL, e) < 0 ||
            param_u64(r->params, "timeoutMs", false, SBX_MAX_TIMEOUT_MS, &timeout, e) < 0 ||
            handler_while_paused(r, e) < 0 || audit_check_run(r->core->audit, e) < 0)
                return -1;
        env = json_object_get(r->params, "env");
        pty = json_object_get(r->params, "pty");
        json_t *in = json_object_get(r->params, "stdin");
        want_stdin = json_is_true(in);
        if (pty && !json_is_null(pty)) {
                if (param_u64(pty, "cols", false, UINT16_MAX, &cols, e) < 0 ||
                    param_u64(pty, "rows", false, UINT16_MAX, &rows, e) < 0)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "pty must be {cols, rows}, each 1-65535");
                if (cols == 0 || rows == 0)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "pty must be {cols, rows}, each 1-65535");
        }
        SbxSession *s;
        if (handler_open_session(r, handler_session_name(r), &s, e) < 0)
                return -1;
        const char **envl = NULL;
        if (handler_env_list(env, &envl, e) < 0)
                return -1;
        ProcReq *q;
        if (req_new(r, PR_START, NULL, &q, e) < 0) {
                handler_env_free(envl);
                return -1;
        }
        SbxProcessOptions o = { .command = cmd, .command_len = cmd_len, .cwd = cwd, .env = envl,
                                .stdin_pipe = want_stdin, .pty = pty && !json_is_null(pty), .cols = (uint16_t)cols,
                                .rows = (uint16_t)rows, .timeout_ms = timeout, .label = label };
        q->pending->audit = audit_process_begin(r->core->audit, r->sb, r->conn, cmd, cmd_len);
        int rr = sbx_process_start(s, &o, start_done, q);
        handler_env_free(envl);
        if (rr < 0) {
                req_free(q);
                if (rr == -EUSERS)
                        return rpc_fail(e, RPC_WORKER_UNAVAILABLE,
                                        "LIMIT_EXCEEDED: the sandbox runs %u processes already (kill one, or wait for "
                                        "one to end)", SBX_MAX_PROCESSES);
                if (rr == -EBUSY)
                        return rpc_fail(e, RPC_WORKER_UNAVAILABLE, "WORKER_UNAVAILABLE: session %s already holds %u runs",
                                        sbx_session_name(s), SBX_MAX_QUEUED_RUNS);
                if (rr == -E2BIG)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "LIMIT_EXCEEDED: command is %zu bytes, over the limit", cmd_len);
                if (rr == -EINVAL)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "invalid process options (cwd, env or timeoutMs)");
                return rpc_fail_errno(e, rr, "process.start");
        }
        return 1;
}

/* ---------------------------------------------------------------- list, logs */

static int m_process_list(Req *r, json_t **ret, RpcError *e) {
        json_t *list = json_array();
        for (SbxProcess *p = sbx_sandbox_next_process(r->sb->sb, NULL); p; p = sbx_sandbox_next_process(r->sb->sb, p))
                json_array_append_new(list, proc_json(p));
        *ret = json_pack("{s:o}", "processes", list);
        return 0;
}

typedef struct LogParts {
        Buf out, err;
} LogParts;

static void collect(void *ud, SbxStream st, const uint8_t *d, size_t n, uint64_t cursor) {
        LogParts *l = ud;
        (void)buf_append(st == SBX_STDOUT ? &l->out : &l->err, d, n);
}

static int m_process_logs(Req *r, json_t **ret, RpcError *e) {
        SbxProcess *p;
        uint64_t cursor = 0, max = SBX_PROCESS_LOG_BYTES, dropped;
        if (find_process(r, &p, e) < 0 || param_u64(r->params, "cursor", false, UINT64_MAX >> 1, &cursor, e) < 0 ||
            param_u64(r->params, "maxBytes", false, SBX_PROCESS_LOG_BYTES, &max, e) < 0)
                return -1;
        SbxProcessInfo i;
        sbx_process_info(p, &i);
        /* A cursor past what was ever written would skip the output still to come. */
        if (cursor > i.log_end)
                return rpc_fail(e, RPC_INVALID_PARAMS, "cursor %llu is past the end of the output (%llu so far): give "
                                "a cursor an earlier answer returned, or 0", (unsigned long long)cursor,
                                (unsigned long long)i.log_end);
        LogParts l;
        buf_init(&l.out, SBX_PROCESS_LOG_BYTES);
        buf_init(&l.err, SBX_PROCESS_LOG_BYTES);
        uint64_t next = sbx_process_read_log(p, cursor, max, collect, &l, &dropped);
        sbx_process_info(p, &i);
        json_t *o = json_pack("{s:I, s:I, s:b}", "cursor", (json_int_t)next, "dropped", (json_int_t)dropped, "eof",
                              i.status != SBX_PROCESS_RUNNING && !i.alive && next >= i.log_end);
        int rr = o ? json_set_bytes(o, "stdout", l.out.data, l.out.len) : -ENOMEM;
        if (rr >= 0)
                rr = json_set_bytes(o, "stderr", l.err.data, l.err.len);
        buf_done(&l.out);
        buf_done(&l.err);
        if (rr < 0) {
                json_decref(o);
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        }
        *ret = o;
        return 0;
}

/* ---------------------------------------------------------------- stream */

static void send_output(void *ud, SbxStream st, const uint8_t *d, size_t n, uint64_t cursor) {
        ProcReq *q = ud;
        q->cursor = cursor;
        Conn *c = q->pending->conn;
        if (!c)
                return;
        char id[HANDLER_PROCESS_ID_MAX];
        json_t *params = json_pack("{s:s, s:s, s:I}", "processId", proc_name(q->p, id), "stream",
                                   st == SBX_STDOUT ? "stdout" : "stderr", "cursor", (json_int_t)cursor);
        if (!params || json_set_bytes(params, "data", d, n) < 0) {
                json_decref(params);
                return;
        }
        conn_notify(c, "process.output", params);
}

/* The stream has sent everything and the process has ended: the exit, then the answer. */
static void stream_finish(ProcReq *q) {
        json_t *st = status_json(q->p);
        if (q->pending->conn) {
                json_t *params = json_deep_copy(st);
                char id[HANDLER_PROCESS_ID_MAX];
                json_object_set_new(params, "processId", json_string(proc_name(q->p, id)));
                conn_notify(q->pending->conn, "process.exit", params);
        }
        json_object_set_new(st, "cursor", json_integer((json_int_t)q->cursor));
        req_reply(q, st);
}

/* Sends from the log what the client has not had, until caught up or paused; then, if the
 * process has ended, finishes. Returns false when q was freed. */
static bool stream_catch_up(ProcReq *q) {
        while (!q->paused && q->pending->conn) {
                uint64_t dropped, before = q->cursor;
                /* What the log lost is said before what follows it. */
                (void)sbx_process_read_log(q->p, q->cursor, 0, send_output, q, &dropped);
                if (dropped) {
                        char id[HANDLER_PROCESS_ID_MAX];
                        conn_notify(q->pending->conn, "process.output",
                                    json_pack("{s:s, s:s, s:s, s:I, s:I}", "processId", proc_name(q->p, id), "stream",
                                              "stdout", "data", "", "cursor", (json_int_t)(before + dropped),
                                              "dropped", (json_int_t)dropped));
                        q->cursor = before + dropped;
                }
                uint64_t next = sbx_process_read_log(q->p, q->cursor, SBX_PROCESS_READ_BYTES, send_output, q, NULL);
                q->cursor = next;
                if (next == before && !dropped)
                        break;
        }
        if (q->ended && !q->paused) {
                stream_finish(q);
                return false;
        }
        return true;
}

static void stream_output(SbxProcessWatcher *w, SbxStream st, const uint8_t *d, size_t n, uint64_t cursor) {
        ProcReq *q = container_of(w, ProcReq, w);
        if (q->paused)
                return;
        if (cursor - n == q->cursor)
                send_output(q, st, d, n, cursor);
        else
                (void)stream_catch_up(q);
}

static void stream_ended(SbxProcessWatcher *w) {
        ProcReq *q = container_of(w, ProcReq, w);
        q->ended = true;
        sbx_process_unwatch(&q->w);
        (void)stream_catch_up(q);
}

static void proc_freeing(SbxProcessWatcher *w) {
        ProcReq *q = container_of(w, ProcReq, w);
        req_error(q, RPC_SANDBOX_ERROR, "ESRCH: the process is gone (its sandbox was destroyed, or it was forgotten)");
}

static void stream_paused(Pending *pd, bool paused) {
        ProcReq *q = pd->proc;
        q->paused = paused;
        if (!paused)
                (void)stream_catch_up(q);
}

static int m_process_stream(Req *r, json_t **ret, RpcError *e) {
        SbxProcess *p;
        uint64_t cursor = 0;
        ProcReq *q;
        if (find_process(r, &p, e) < 0 || param_u64(r->params, "cursor", false, UINT64_MAX >> 1, &cursor, e) < 0 ||
            req_new(r, PR_STREAM, p, &q, e) < 0)
                return -1;
        q->cursor = cursor;
        q->paused = conn_paused(r->conn);
        q->pending->paused = stream_paused;
        q->w = (SbxProcessWatcher){ .output = stream_output, .ended = stream_ended, .freeing = proc_freeing };
        SbxProcessInfo i;
        sbx_process_info(p, &i);
        if (i.status == SBX_PROCESS_RUNNING)
                sbx_process_watch(p, &q->w);
        else
                q->ended = true;
        (void)stream_catch_up(q);
        return 1;
}

/* ---------------------------------------------------------------- write, closeStdin, resize */

static int m_process_write(Req *r, json_t **ret, RpcError *e) {
        SbxProcess *p;
        const char *b64;
        size_t b64_len, len;
        if (find_process(r, &p, e) < 0 || param_string(r->params, "data", true, &b64, &b64_len, e) < 0)
                return -1;
        _cleanup_free_ uint8_t *data = b64_decode(b64, b64_len, &len);
        if (!data)
                return rpc_fail(e, RPC_INVALID_PARAMS, "data must be base64");
        int rr = sbx_process_write(p, data, len);
        if (rr == -EPIPE)
                return rpc_fail(e, RPC_INVALID_PARAMS, "stdin of %s is closed (or was never opened: start it with stdin: true)",
                                json_string_value(json_object_get(r->params, "processId")));
        if (rr == -EAGAIN)
                return rpc_fail(e, RPC_WORKER_UNAVAILABLE,
                                "EAGAIN: the process has not read the %u bytes queued for its stdin yet; retry later",
                                SBX_PROCESS_STDIN_BYTES);
        if (rr < 0)
                return rpc_fail_errno(e, rr, "process.write");
        *ret = handler_ok_json();
        return 0;
}

static int m_process_close_stdin(Req *r, json_t **ret, RpcError *e) {
        SbxProcess *p;
        if (find_process(r, &p, e) < 0)
                return -1;
        int rr = sbx_process_close_stdin(p);
        if (rr == -ENOTTY)
                return rpc_fail(e, RPC_INVALID_PARAMS, "a terminal has no stdin to close: write \\u0004 (Ctrl-D) instead");
        if (rr == -EPIPE)
                return rpc_fail(e, RPC_INVALID_PARAMS, "stdin is already closed (or was never opened)");
        if (rr < 0)
                return rpc_fail_errno(e, rr, "process.closeStdin");
        *ret = handler_ok_json();
        return 0;
}

static int m_process_resize(Req *r, json_t **ret, RpcError *e) {
        SbxProcess *p;
        uint64_t cols, rows;
        if (find_process(r, &p, e) < 0 || param_u64(r->params, "cols", true, UINT16_MAX, &cols, e) < 0 ||
            param_u64(r->params, "rows", true, UINT16_MAX, &rows, e) < 0)
                return -1;
        if (cols == 0 || rows == 0)
                return rpc_fail(e, RPC_INVALID_PARAMS, "cols and rows must be 1-65535");
        int rr = sbx_process_resize(p, (uint16_t)cols, (uint16_t)rows);
        if (rr == -ENOTTY)
                return rpc_fail(e, RPC_INVALID_PARAMS, "the process has no terminal (start it with pty)");
        if (rr == -ESRCH)
                return rpc_fail(e, RPC_INVALID_PARAMS, "the process has ended");
        if (rr < 0)
                return rpc_fail_errno(e, rr, "process.resize");
        *ret = handler_ok_json();
        return 0;
}

/* ---------------------------------------------------------------- kill */

/* A signal given as a name ("TERM", "SIGTERM") or a number; 0 if it is neither. */
static int parse_signal(json_t *v) {
        if (json_is_integer(v)) {
                json_int_t n = json_integer_value(v);
                return n > 0 && n < NSIG ? (int)n : 0;
        }
        const char *s = json_string_value(v);
        if (!s)
                return 0;
        if (strncasecmp(s, "SIG", 3) == 0)
                s += 3;
        for (int i = 1; i < NSIG; i++) {
                const char *n = sigabbrev_np(i);
                if (n && strcasecmp(n, s) == 0)
                        return i;
        }
        return 0;
}

static void kill_done(void *ud, SbxProcess *p) {
        ProcReq *q = ud;
        req_reply(q, status_json(p));
}

static int m_process_kill(Req *r, json_t **ret, RpcError *e) {
        SbxProcess *p;
        uint64_t grace = SBX_PROCESS_KILL_GRACE_MS;
        json_t *sv = json_object_get(r->params, "signal");
        int sig = sv && !json_is_null(sv) ? parse_signal(sv) : SIGTERM;
        ProcReq *q;
        if (find_process(r, &p, e) < 0 || param_u64(r->params, "graceMs", false, SBX_MAX_TIMEOUT_MS, &grace, e) < 0)
                return -1;
        if (!sig)
                return rpc_fail(e, RPC_INVALID_PARAMS, "signal must be a name like \"TERM\" or \"SIGKILL\", or a number 1-%d",
                                NSIG - 1);
        if (req_new(r, PR_KILL, p, &q, e) < 0)
                return -1;
        AUDIT(r->core->audit, "process.kill", NULL, r->conn,
              json_pack("{s:s, s:s, s:o, s:I}", "sandboxId", sbx_sandbox_id(sbx_process_sandbox(p)), "processId",
                        json_string_value(json_object_get(r->params, "processId")), "signal", signal_json(sig),
                        "graceMs", (json_int_t)grace));
        int rr = sbx_process_kill(p, sig, grace, kill_done, q);
        if (rr < 0) {
                req_free(q);
                if (rr == -ESRCH)
                        return rpc_fail(e, RPC_INVALID_PARAMS, "%s has ended and nothing of it is left to kill",
                                        json_string_value(json_object_get(r->params, "processId")));
                return rpc_fail_errno(e, rr, "process.kill");
        }
        return 1;
}

static json_t *kill_all_json(unsigned n) {
        return json_pack("{s:I, s:I}", "killed", (json_int_t)n, "groups", (json_int_t)n);
}

static void kill_all_done(void *ud, SbxProcess *p) {
        ProcReq *q = ud;
        if (--q->left == 0)
                req_reply(q, kill_all_json(q->killed));
}

/* Every process of the sandbox gets SIGKILL through its cgroup, answered once all of them
 * are gone; what runs left past the processes' cap (the background log's cgroups) is killed
 * too, without a way to wait for it. */
static int m_process_kill_all(Req *r, json_t **ret, RpcError *e) {
        ProcReq *q;
        if (req_new(r, PR_KILL, NULL, &q, e) < 0)
                return -1;
        SbxSandbox *sb = r->sb->sb;
        for (SbxProcess *p = sbx_sandbox_next_process(sb, NULL); p; p = sbx_sandbox_next_process(sb, p))
                if (sbx_process_kill(p, SIGKILL, 0, kill_all_done, q) == 0)
                        q->left++;
        q->killed = q->left + sbx_sandbox_kill_background_log(sb);
        AUDIT(r->core->audit, "process.kill", r->sb, r->conn,
              json_pack("{s:b, s:s, s:I}", "all", 1, "signal", "KILL", "killed", (json_int_t)q->killed));
        if (q->left == 0) {
                *ret = kill_all_json(q->killed);
                req_free(q);
                return 0;
        }
        return 1;
}

/* ---------------------------------------------------------------- wait */

static void wait_timeout(ProcReq *q) {
        req_error(q, RPC_WAIT_TIMEOUT, "WAIT_TIMEOUT: the condition did not hold within timeoutMs");
}

static void wait_ended_first(ProcReq *q) {
        SbxProcessInfo i;
        sbx_process_info(q->p, &i);
        char code[32] = "unknown exit status";
        if (i.exit_code >= 0)
                snprintf(code, sizeof code, "exit code %d", i.exit_code);
        req_error(q, RPC_PROCESS_ENDED, "PROCESS_ENDED: the process ended (%s, %s) before the condition held",
                  status_name(i.status), code);
}

/* Answers with the matched line. */
static void reply_hit(ProcReq *q) {
        json_t *hit = q->hit;
        q->hit = NULL;
        req_reply(q, hit);
}

/* Matches one complete line; on a match keeps the answer in q->hit and returns false. */
static bool match_line(ProcReq *q, SbxStream st, const char *line, size_t len) {
        char *s = strndup(line, len);
        if (!s)
                return true;
        bool hit = regexec(&q->re, s, 0, NULL, 0) == 0;
        if (hit) {
                q->hit = json_pack("{s:s, s:s}", "stream", st == SBX_STDOUT ? "stdout" : "stderr", "line", "");
                if (q->hit)
                        (void)json_set_bytes(q->hit, "line", (const uint8_t *)s, strlen(s));
        }
        free(s);
        return !hit;
}

/* Feeds output to the line matcher. Returns false once a line matched (q->hit). A line
 * longer than SBX_WAIT_LINE_BYTES is matched in pieces of that size. */
static bool feed_lines(ProcReq *q, SbxStream st, const uint8_t *d, size_t n) {
        Buf *b = &q->line[st == SBX_STDOUT ? 0 : 1];
        while (n > 0) {
                const uint8_t *nl = memchr(d, '\n', n);
                size_t seg = nl ? (size_t)(nl - d) : n, take = MIN(seg, b->limit - b->len);
                (void)buf_append(b, d, take);
                d += take;
                n -= take;
                bool at_nl = nl && take == seg;
                if (at_nl) {
                        d++;
                        n--;
                }
                if (at_nl || b->len == b->limit) {
                        if (!match_line(q, st, (const char *)b->data, b->len))
                                return false;
                        b->len = 0;
                }
        }
        return true;
}

static void scan_piece(void *ud, SbxStream st, const uint8_t *d, size_t n, uint64_t cursor) {
        ProcReq *q = ud;
        if (q->hit)
                return;
        q->cursor = cursor;
        (void)feed_lines(q, st, d, n);
}

static void wait_output(SbxProcessWatcher *w, SbxStream st, const uint8_t *d, size_t n, uint64_t cursor) {
        ProcReq *q = container_of(w, ProcReq, w);
        if (q->kind != PR_WAIT_LOG)
                return;
        q->cursor = cursor;
        if (!feed_lines(q, st, d, n))
                reply_hit(q);
}

static void wait_ended(SbxProcessWatcher *w) {
        ProcReq *q = container_of(w, ProcReq, w);
        if (q->kind == PR_WAIT_EXIT) {
                req_reply(q, status_json(q->p));
                return;
        }
        if (q->kind == PR_WAIT_LOG) {
                /* The last line may have no newline. */
                for (int k = 0; k < 2; k++)
                        if (q->line[k].len > 0 &&
                            !match_line(q, k == 0 ? SBX_STDOUT : SBX_STDERR, (const char *)q->line[k].data, q->line[k].len)) {
                                reply_hit(q);
                                return;
                        }
        }
        if (q->kind == PR_WAIT_PORT && sbx_port_listening(q->sb, q->port) == 1) {
                req_reply(q, json_pack("{s:i}", "port", q->port));
                return;
        }
        wait_ended_first(q);
}

static void timer_event(Watch *w, uint32_t events) {
        ProcReq *q = w->data;
        uint64_t x;
        (void)!read(q->timer_fd, &x, sizeof x);
        if (q->kind == PR_WAIT_PORT && sbx_port_listening(q->sb, q->port) == 1) {
                req_reply(q, json_pack("{s:i}", "port", q->port));
                return;
        }
        uint64_t now = now_ns();
        if (now >= q->deadline) {
                wait_timeout(q);
                return;
        }
        uint64_t left = (q->deadline - now + 999999) / 1000000;
        (void)req_timer(q, q->kind == PR_WAIT_PORT ? MIN(left, (uint64_t)SBX_WAIT_PORT_POLL_MS) : left);
}

static int m_process_wait(Req *r, json_t **ret, RpcError *e) {
        SbxProcess *p;
        const char *until, *pattern = NULL;
        uint64_t timeout, port = 0;
        if (find_process(r, &p, e) < 0 || param_string(r->params, "until", true, &until, NULL, e) < 0 ||
            param_string(r->params, "pattern", false, &pattern, NULL, e) < 0 ||
            param_u64(r->params, "port", false, UINT64_MAX, &port, e) < 0 ||
            param_u64(r->params, "timeoutMs", true, SBX_MAX_TIMEOUT_MS, &timeout, e) < 0)
                return -1;
        ProcKind kind = strcmp(until, "exit") == 0 ? PR_WAIT_EXIT
                        : strcmp(until, "log") == 0 ? PR_WAIT_LOG
                        : strcmp(until, "port") == 0 ? PR_WAIT_PORT : PR_START;
        if (kind == PR_START)
                return rpc_fail(e, RPC_INVALID_PARAMS, "until must be \"exit\", \"log\" or \"port\"");
        if (kind == PR_WAIT_LOG && !pattern)
                return rpc_fail(e, RPC_INVALID_PARAMS, "until \"log\" needs a pattern (a POSIX extended regex)");
        if (kind == PR_WAIT_PORT && (port < 1 || port > 65535))
                return rpc_fail(e, RPC_INVALID_PARAMS, "until \"port\" needs a port, 1-65535");
        ProcReq *q;
        if (req_new(r, kind, p, &q, e) < 0)
                return -1;
        if (kind == PR_WAIT_LOG) {
                int rc = regcomp(&q->re, pattern, REG_EXTENDED | REG_NOSUB);
                if (rc != 0) {
                        char msg[256];
                        regerror(rc, &q->re, msg, sizeof msg);
                        req_free(q);
                        return rpc_fail(e, RPC_INVALID_PARAMS, "pattern: %s", msg);
                }
                q->have_re = true;
        }
        q->port = (uint16_t)port;
        q->deadline = now_ns() + timeout * 1000000ULL;
        q->w = (SbxProcessWatcher){ .output = wait_output, .ended = wait_ended, .freeing = proc_freeing };
        if (req_timer(q, kind == PR_WAIT_PORT ? MIN(timeout, (uint64_t)SBX_WAIT_PORT_POLL_MS) : timeout) < 0) {
                req_free(q);
                return rpc_fail(e, RPC_INTERNAL_ERROR, "cannot arm a timer");
        }
        SbxProcessInfo i;
        sbx_process_info(p, &i);
        /* What the process already wrote counts: a server's "listening" line may come first. */
        if (kind == PR_WAIT_LOG) {
                uint64_t c = 0, next;
                do {
                        uint64_t before = c;
                        next = sbx_process_read_log(p, c, SBX_PROCESS_READ_BYTES, scan_piece, q, NULL);
                        if (q->hit) {
                                reply_hit(q);
                                return 1;
                        }
                        c = next;
                        if (c == before)
                                break;
                } while (c < i.log_end);
        }
        if (kind == PR_WAIT_PORT && sbx_port_listening(q->sb, q->port) == 1) {
                req_reply(q, json_pack("{s:i}", "port", q->port));
                return 1;
        }
        if (i.status != SBX_PROCESS_RUNNING) {
                q->w.process = NULL;
                wait_ended(&q->w);
                return 1;
        }
        sbx_process_watch(p, &q->w);
        return 1;
}

/* ---------------------------------------------------------------- the table */

#define PARAM_PROCESS_ID { "processId", P_STRING, true, "the process (\"p12\"), as process.start or process.list name it" }
#define PARAM_SANDBOX_FILTER { "sandboxId", P_STRING, false, "look for the process in this sandbox only" }

static const Param p_start[] = {
        { "command", P_STRING, true, "bash source text (at most limits.commandBytes)" },
        PARAM_SANDBOX_ID,
        { "session", P_STRING, false, "session whose cwd, env, functions and aliases the process starts from (default \"default\"); its state never changes" },
        { "cwd", P_STRING, false, "working directory of the process" },
        { "env", P_OBJECT, false, "{NAME: value} for the process only" },
        { "stdin", P_BOOL, false, "true: keep a stdin open for process.write (default: /dev/null)" },
        { "pty", P_OBJECT, false, "{cols, rows}: run it on a terminal of the sandbox's own (stdin, stdout and stderr; its output is all stdout)" },
        { "timeoutMs", P_INT, false, "kill it (its whole tree) after this long; default: never" },
        { "label", P_STRING, false, "free text shown by process.list" },
        PARAM_WHILE_PAUSED,
        { 0 } };
static const Param p_id[] = { PARAM_PROCESS_ID, PARAM_SANDBOX_FILTER, { 0 } };
static const Param p_logs[] = {
        PARAM_PROCESS_ID, PARAM_SANDBOX_FILTER,
        { "cursor", P_INT, false, "offset into the process's output stream to read from (default 0); past what was written so far: -32602" },
        { "maxBytes", P_INT, false, "at most this many bytes (default and most: 1 MiB)" },
        { 0 } };
static const Param p_stream[] = {
        PARAM_PROCESS_ID, PARAM_SANDBOX_FILTER,
        { "cursor", P_INT, false, "offset to stream from (default 0): the last cursor seen resumes exactly" },
        { 0 } };
static const Param p_write[] = {
        PARAM_PROCESS_ID, PARAM_SANDBOX_FILTER, { "data", P_STRING, true, "base64 bytes for its stdin (or terminal)" }, { 0 } };
static const Param p_resize[] = {
        PARAM_PROCESS_ID, PARAM_SANDBOX_FILTER, { "cols", P_INT, true, "columns, 1-65535" },
        { "rows", P_INT, true, "rows, 1-65535" }, { 0 } };
static const Param p_kill[] = {
        PARAM_PROCESS_ID, PARAM_SANDBOX_FILTER,
        { "signal", P_ANY, false, "\"TERM\" (default), \"INT\", \"SIGKILL\"... or a number; sent to every process of it" },
        { "graceMs", P_INT, false, "then SIGKILL to all of it after this long (default 2000; 0: at once)" },
        { 0 } };
static const Param p_wait[] = {
        PARAM_PROCESS_ID, PARAM_SANDBOX_FILTER,
        { "until", P_STRING, true, "\"exit\", \"log\" (a line of stdout or stderr matches pattern) or \"port\" (something in the sandbox accepts TCP connections on port)" },
        { "pattern", P_STRING, false, "POSIX extended regex, for until \"log\"; what it already wrote counts" },
        { "port", P_INT, false, "for until \"port\"" },
        { "timeoutMs", P_INT, true, "give up after this long: error -32011 WAIT_TIMEOUT" },
        { 0 } };

const Method server_methods_process[] = {
        { "process.start", m_process_start, M_SANDBOX | M_LANE, p_start, "{processId, pid}",
          "Starts a command as a process of its own, beside the session's runs (queued behind them). pid is "
          "its pid in the sandbox. Its own cgroup, log (1 MiB, newest kept), stdin or terminal. "
          "-32001 LIMIT_EXCEEDED past 64 running processes." },
        { "process.list", m_process_list, M_SANDBOX, handler_params_sandbox,
          "{processes: [{processId, pid, command, label, status, exitCode, signal, startedAt, endedAt, origin, pty, stdin, alive, logEnd}]}",
          "The sandbox's processes, oldest first. status: running, exited, killed or timeout; exitCode: the "
          "exit status or 128+signal (null while running or unknown); startedAt/endedAt: ms since the epoch; "
          "origin: start, or leftover (what a run left running, with the run's later output as its log); "
          "alive: something of it still runs." },
        { "process.logs", m_process_logs, 0, p_logs, "{stdout, stderr, cursor, dropped, eof}",
          "Its output from cursor on, split by stream; cursor: where to read next; dropped: bytes before the "
          "oldest kept that the cursor asked for; eof: it ended and everything is read." },
        { "process.stream", m_process_stream, 0, p_stream, "{status, exitCode, signal, cursor}",
          "Sends `process.output` {processId, stream, data, cursor (after this piece)} from the cursor on "
          "(first one with `dropped` if the log lost some), then `process.exit` {processId, status, exitCode, "
          "signal}; answered when the process has ended." },
        { "process.write", m_process_write, 0, p_write, "{ok: true}",
          "Queues bytes for its stdin or terminal (at most 1 MiB not yet read: -32001 EAGAIN)." },
        { "process.closeStdin", m_process_close_stdin, 0, p_id, "{ok: true}",
          "Closes its stdin once what is queued is written." },
        { "process.resize", m_process_resize, 0, p_resize, "{ok: true}", "A terminal's new size (SIGWINCH follows)." },
        { "process.kill", m_process_kill, 0, p_kill, "{status, exitCode, signal}",
          "Signals every process of it, then kills its whole tree (cgroup.kill) after graceMs; answered when "
          "nothing of it is left." },
        { "process.killAll", m_process_kill_all, M_SANDBOX, handler_params_sandbox, "{killed, groups}",
          "Kills every process of the sandbox and everything earlier commands left running, in one call; "
          "running commands and session shells are untouched. killed (and its older name groups): how many "
          "process trees." },
        { "process.wait", m_process_wait, 0, p_wait, "exit: {status, exitCode, signal}; log: {stream, line}; port: {port}",
          "Answered when the condition holds; -32010 PROCESS_ENDED if the process ends first, -32011 "
          "WAIT_TIMEOUT after timeoutMs." },
        { 0 } };
