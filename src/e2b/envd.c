/* SPDX-License-Identifier: MIT */
/* envd, E2B's in-sandbox API, served by the door: the Connect protocol (JSON codec) for the
 * process and filesystem services, `GET/POST /files` and `GET /health`. The sandbox is the one
 * the E2b-Sandbox-Id header names, and X-Access-Token must be its envdAccessToken (a token of
 * one sandbox opens no other).
 *
 * Connect, as the SDK speaks it: a unary call is a POST of `application/json` answered 200 with
 * the message, or an HTTP error status with {code, message}; a server stream is a POST of
 * `application/connect+json` whose body is one envelope (flags u8, length u32 big-endian, the
 * message), answered 200 with envelopes and a last one flagged 0x02, `{}` or {error}. */
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/sha256.h"
#include "base/log.h"
#include "base/text.h"
#include "base/util.h"
#include "e2b/e2b_private.h"

#define PROCESS_PREFIX "/process.Process/"
#define FS_PREFIX "/filesystem.Filesystem/"

bool envd_route(E2bReq *q) {
        const char *p = http_path(q->r);
        return !strncmp(p, PROCESS_PREFIX, strlen(PROCESS_PREFIX)) || !strncmp(p, FS_PREFIX, strlen(FS_PREFIX)) ||
               !strcmp(p, "/files") || !strcmp(p, "/health");
}

static bool is_stream_call(E2bReq *q) {
        const char *ct = http_header(q->r, "Content-Type");
        return ct && !strncmp(ct, "application/connect+json", 24);
}

/* ---------------------------------------------------------------- Connect answers */

static void unary_error(E2bReq *q, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void unary_error(E2bReq *q, const char *code, const char *fmt, ...) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        e2b_reply_json(q, e2b_connect_status(code), json_pack("{s:s, s:s}", "code", code, "message", msg));
}

static void unary_sbx_error(E2bReq *q, json_t *error) {
        const char *m = json_string_value(json_object_get(error, "message"));
        unary_error(q, e2b_connect_code(error), "%s", m ? m : "sbx error");
}

static int envelope(E2bReq *q, uint8_t flags, json_t *msg) {
        char *s = json_dumps(msg, JSON_COMPACT);
        json_decref(msg);
        if (!s)
                return -ENOMEM;
        size_t n = strlen(s);
        uint8_t head[5] = { flags, (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n };
        int r = http_stream_write(q->r, head, sizeof head);
        if (r == 0)
                r = http_stream_write(q->r, s, n);
        free(s);
        return r;
}

static void keepalive_stop(E2bReq *q) {
        if (q->kw.active)
                loop_del(q->g->loop, &q->kw);
        q->keepalive_fd = safe_close(q->keepalive_fd);
}

/* The stream's last envelope: {} or {error: {code, message}}. */
static void stream_end(E2bReq *q, const char *code, const char *msg) {
        if (!q->streaming)
                return;
        keepalive_stop(q);
        (void)envelope(q, 0x02, code ? json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", msg)
                                    : json_object());
        http_stream_end(q->r);
        q->streaming = false;
}

/* A stream that failed before it began: still a stream, its one envelope the error. */
static void stream_fail(E2bReq *q, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void stream_fail(E2bReq *q, const char *code, const char *fmt, ...) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        if (!q->streaming) {
                if (http_stream_start(q->r, 200, "application/connect+json", NULL) < 0)
                        return;
                q->streaming = true;
        }
        stream_end(q, code, msg);
}

static void fail(E2bReq *q, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(E2bReq *q, const char *code, const char *fmt, ...) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        if (is_stream_call(q))
                stream_fail(q, code, "%s", msg);
        else
                unary_error(q, code, "%s", msg);
}

static void fail_sbx(E2bReq *q, json_t *error) {
        const char *m = json_string_value(json_object_get(error, "message"));
        fail(q, e2b_connect_code(error), "%s", m ? m : "sbx error");
}

static void keepalive_event(Watch *w, uint32_t events) {
        E2bReq *q = w->data;
        uint64_t n;
        (void)!read(q->keepalive_fd, &n, sizeof n);
        if (q->streaming)
                (void)envelope(q, 0, q->watch ? json_pack("{s:{}}", "keepalive")
                                              : json_pack("{s:{s:{}}}", "event", "keepalive"));
}

/* Keepalive-Ping-Interval (seconds): a keepalive event that often while the stream is open. */
static void keepalive_start(E2bReq *q) {
        const char *s = http_header(q->r, "Keepalive-Ping-Interval");
        uint64_t secs;
        if (!s || parse_u64(s, 3600, &secs) < 0 || secs == 0)
                return;
        q->keepalive_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        struct itimerspec its = { .it_interval = { (time_t)secs, 0 }, .it_value = { (time_t)secs, 0 } };
        if (q->keepalive_fd < 0 || timerfd_settime(q->keepalive_fd, 0, &its, NULL) < 0 ||
            loop_add(q->g->loop, &q->kw, q->keepalive_fd, EPOLLIN, keepalive_event, q) < 0)
                keepalive_stop(q);
}

/* ---------------------------------------------------------------- the sandbox and its token */

/* The sandbox a call is for, and its token checked. False when answered already. */
static bool authorize(E2bReq *q, bool token_needed) {
        char buf[64];
        const char *id = e2b_sandbox_of(q, buf);
        q->box = e2b_box_find(q->g, id);
        if (!q->box) {
                /* E2B's SDK reads 502 as "the sandbox is gone (killed or timed out)". */
                e2b_reply_json(q, 502, json_pack("{s:i, s:s}", "code", 502, "message",
                                                 id ? "sandbox not found (killed, or it timed out)"
                                                    : "the E2b-Sandbox-Id header is missing"));
                return false;
        }
        const char *tok = http_header(q->r, "X-Access-Token");
        if (token_needed && (!tok || strcmp(tok, q->box->token) != 0)) {
                fail(q, "unauthenticated", "X-Access-Token is not this sandbox's envdAccessToken");
                return false;
        }
        return true;
}

/* The call's message: an envelope's for a stream, the body for a unary call. False when
 * answered already. */
static bool read_message(E2bReq *q) {
        size_t n;
        const uint8_t *b = http_body(q->r, &n);
        const char *ct = http_header(q->r, "Content-Type");
        if (is_stream_call(q)) {
                if (n < 5) {
                        fail(q, "invalid_argument", "a stream's request is one envelope (5 bytes of head, then the "
                             "message): got %zu bytes", n);
                        return false;
                }
                uint32_t len = (uint32_t)b[1] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 8 | b[4];
                if (b[0] & 0x01) {
                        fail(q, "invalid_argument", "compressed envelopes are not accepted (no Connect-Content-"
                             "Encoding is offered)");
                        return false;
                }
                if ((size_t)len != n - 5) {
                        fail(q, "invalid_argument", "the envelope says %u bytes of message, the body has %zu", len,
                             n - 5);
                        return false;
                }
                b += 5;
                n -= 5;
        } else if (!ct || strncmp(ct, "application/json", 16) != 0) {
                unary_error(q, "unimplemented", "only the JSON codec is served (Content-Type application/json, or "
                            "application/connect+json for streams); got %s", ct ? ct : "none");
                return false;
        }
        json_error_t je;
        q->in = n ? json_loadb((const char *)b, n, 0, &je) : json_object();
        if (!json_is_object(q->in)) {
                fail(q, "invalid_argument", "the message is not a JSON object: %s", n ? je.text : "");
                return false;
        }
        return true;
}

/* ---------------------------------------------------------------- process */

/* 'text' with every ' as '\'': one word for bash whatever it holds. */
static int quote_into(char **buf, size_t *len, size_t *cap, const char *s) {
        size_t need = *len + 4 * strlen(s) + 4;
        if (need > *cap) {
                size_t c = MAX(need, 2 * *cap);
                char *n = realloc(*buf, c);
                if (!n)
                        return -ENOMEM;
                *buf = n;
                *cap = c;
        }
        char *o = *buf + *len;
        *o++ = ' ';
        *o++ = '\'';
        for (; *s; s++) {
                if (*s == '\'') {
                        memcpy(o, "'\\''", 4);
                        o += 4;
                } else {
                        *o++ = *s;
                }
        }
        *o++ = '\'';
        *o = 0;
        *len = (size_t)(o - *buf);
        return 0;
}

static bool is_bash(const char *cmd) {
        return !strcmp(cmd, "/bin/bash") || !strcmp(cmd, "/usr/bin/bash") || !strcmp(cmd, "bash");
}

/* The process's command line as bash source. What the SDK sends for commands.run, bash -l -c
 * TEXT (or -c), is TEXT itself: sbx's process is a bash already, started from the session's
 * environment, so no second bash starts, and no login profile is read for each command (the
 * sandbox's environment is already the user's). Anything else is exec 'cmd' 'arg'... */
static char *command_of(json_t *proc, const char **err) {
        const char *cmd = json_string_value(json_object_get(proc, "cmd"));
        json_t *args = json_object_get(proc, "args"), *a;
        if (!cmd || !*cmd) {
                *err = "process.cmd is required";
                return NULL;
        }
        if (args && !json_is_array(args)) {
                *err = "process.args must be a list of strings";
                return NULL;
        }
        size_t na = json_array_size(args);
        const char *a0 = json_string_value(json_array_get(args, 0)), *a1 = json_string_value(json_array_get(args, 1));
        const char *text = NULL;
        if (is_bash(cmd) && na == 2 && a0 && (!strcmp(a0, "-c") || !strcmp(a0, "-lc")))
                text = a1;
        else if (is_bash(cmd) && na == 3 && a0 && a1 && !strcmp(a0, "-l") && !strcmp(a1, "-c"))
                text = json_string_value(json_array_get(args, 2));
        if (text)
                return strdup(text);
        size_t len = 4, cap = 256, i;
        char *buf = malloc(cap);
        if (!buf)
                return NULL;
        memcpy(buf, "exec", 5);
        int r = quote_into(&buf, &len, &cap, cmd);
        json_array_foreach(args, i, a) {
                if (!json_is_string(a)) {
                        free(buf);
                        *err = "process.args must be a list of strings";
                        return NULL;
                }
                if (r == 0)
                        r = quote_into(&buf, &len, &cap, json_string_value(a));
        }
        if (r < 0) {
                free(buf);
                return NULL;
        }
        return buf;
}

static json_t *event_json(const char *root, json_t *params);

static void watch_event(E2bReq *q, json_t *params) {
        json_t *ev = event_json(q->watch_root, params);
        if (!ev)
                return; /* lost events: envd has no word for them */
        (void)envelope(q, 0, json_pack("{s:o}", "filesystem", ev));
        if (http_stream_queued(q->r) >= HTTP_STREAM_HIGH)
                rpc_client_pause(q->own, true);
}

static void stream_notify(void *ud, const char *method, json_t *params) {
        E2bReq *q = ud;
        if (q->watch && q->streaming && !strcmp(method, "files.event"))
                return watch_event(q, params);
        if (!q->streaming || strcmp(json_string_value(json_object_get(params, "processId")) ?: "", q->process_id))
                return;
        if (!strcmp(method, "process.output")) {
                const char *data = json_string_value(json_object_get(params, "data"));
                const char *enc = json_string_value(json_object_get(params, "dataEncoding"));
                const char *st = json_string_value(json_object_get(params, "stream"));
                if (!data || !*data)
                        return;
                size_t n;
                _cleanup_free_ char *b64 = NULL;
                if (enc && !strcmp(enc, "base64"))
                        b64 = strdup(data);
                else
                        b64 = b64_encode((const uint8_t *)data, strlen(data), &n);
                if (!b64)
                        return;
                const char *key = q->pty ? "pty" : st && !strcmp(st, "stderr") ? "stderr" : "stdout";
                (void)envelope(q, 0, json_pack("{s:{s:{s:s}}}", "event", "data", key, b64));
                if (http_stream_queued(q->r) >= HTTP_STREAM_HIGH)
                        rpc_client_pause(q->own, true);
        } else if (!strcmp(method, "process.exit")) {
                const char *status = json_string_value(json_object_get(params, "status")) ?: "";
                json_t *code = json_object_get(params, "exitCode");
                const char *sig = json_string_value(json_object_get(params, "signal"));
                char text[96];
                int exit_code = json_is_integer(code) ? (int)json_integer_value(code) : -1;
                if (sig && *sig) {
                        /* What Go's ProcessState says, as envd does: "signal: killed". */
                        int sn = 0;
                        for (int s = 1; s < NSIG && !sn; s++)
                                if (sigabbrev_np(s) && !strcmp(sigabbrev_np(s), sig + (strncmp(sig, "SIG", 3) ? 0 : 3)))
                                        sn = s;
                        const char *d = sn ? strsignal(sn) : sig;
                        snprintf(text, sizeof text, "signal: %s", d);
                        for (char *c = text; *c; c++)
                                *c = (char)tolower((unsigned char)*c);
                        exit_code = -1;
                } else {
                        snprintf(text, sizeof text, "exit status %d", exit_code);
                }
                json_t *end = json_pack("{s:i, s:b, s:s}", "exitCode", exit_code, "exited", !sig || !*sig, "status",
                                        text);
                if (!strcmp(status, "timeout"))
                        json_object_set_new(end, "error", json_string("context deadline exceeded"));
                (void)envelope(q, 0, json_pack("{s:{s:o}}", "event", "end", end));
                if (!strcmp(status, "timeout"))
                        stream_end(q, "deadline_exceeded", "the process ran past its deadline (Connect-Timeout-Ms) "
                                   "and was killed");
        }
}

/* process.stream is answered once the process has ended and everything was sent. */
static void stream_answered(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return stream_end(q, e2b_connect_code(error),
                                  json_string_value(json_object_get(error, "message")) ?: "sbx error");
        stream_end(q, NULL, NULL);
}

/* The start (or connect) event, then the process's output from cursor on. */
static void stream_from(E2bReq *q, uint64_t cursor) {
        if (http_stream_start(q->r, 200, "application/connect+json", NULL) < 0)
                return;
        q->streaming = true;
        (void)envelope(q, 0, json_pack("{s:{s:{s:I}}}", "event", "start", "pid", (json_int_t)q->pid));
        keepalive_start(q);
        (void)rpc_client_call(q->own, "process.stream",
                              json_pack("{s:s, s:s, s:I}", "sandboxId", q->box->id, "processId", q->process_id,
                                        "cursor", (json_int_t)cursor),
                              stream_answered, q);
}

static void started(void *ud, json_t *result, json_t *error);

static void start_again(Watch *w, uint32_t events) {
        E2bReq *q = w->data;
        keepalive_stop(q);
        (void)rpc_client_call(q->own, "process.start", json_incref(q->scratch), started, q);
}

/* A session queues at most SBX_MAX_QUEUED_RUNS starts: E2B has no such bound, so a start
 * refused for it is sent again shortly, until the call's deadline. */
static bool start_later(E2bReq *q, json_t *error) {
        const char *m = json_string_value(json_object_get(error, "message")) ?: "";
        if (json_integer_value(json_object_get(error, "code")) != -32001 || !strstr(m, "already holds") ||
            now_ms() >= q->deadline_ms)
                return false;
        q->keepalive_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (q->keepalive_fd < 0 || timerfd_arm_ms(q->keepalive_fd, SBX_E2B_START_RETRY_MS) < 0 ||
            loop_add(q->g->loop, &q->kw, q->keepalive_fd, EPOLLIN, start_again, q) < 0) {
                keepalive_stop(q);
                return false;
        }
        return true;
}

static void started(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result && start_later(q, error))
                return;
        if (!result)
                return fail_sbx(q, error);
        snprintf(q->process_id, sizeof q->process_id, "%s",
                 json_string_value(json_object_get(result, "processId")) ?: "");
        q->pid = (long)json_integer_value(json_object_get(result, "pid"));
        stream_from(q, 0);
}

/* A stream's own connection: its output held back by the server's back-pressure alone. */
static int own_connection(E2bReq *q) {
        int fd, r = q->g->connect(q->g->connect_data, &fd);
        if (r == 0)
                r = rpc_client_new(q->g->loop, fd, stream_notify, q, &q->own);
        if (r < 0)
                fail(q, "unavailable", "cannot reach the sbx server: %s", strerror(-r));
        return r;
}

static void proc_start(E2bReq *q) {
        json_t *proc = json_object_get(q->in, "process");
        const char *err = "out of memory";
        _cleanup_free_ char *cmd = json_is_object(proc) ? command_of(proc, &err) : NULL;
        if (!cmd)
                return fail(q, "invalid_argument", "%s", json_is_object(proc) ? err : "process is required");
        json_t *p = json_pack("{s:s, s:s}", "sandboxId", q->box->id, "command", cmd);
        json_t *envs = json_object_get(proc, "envs"), *cwd = json_object_get(proc, "cwd");
        json_t *pty = json_object_get(q->in, "pty"), *stdin_ = json_object_get(q->in, "stdin");
        json_t *tag = json_object_get(q->in, "tag");
        if (json_is_object(envs) && json_object_size(envs))
                json_object_set(p, "env", envs);
        if (json_is_string(cwd) && *json_string_value(cwd))
                json_object_set(p, "cwd", cwd);
        if (json_is_string(tag))
                json_object_set(p, "label", tag);
        json_t *size = json_object_get(pty, "size");
        if (json_is_object(pty)) {
                q->pty = true;
                json_int_t cols = json_integer_value(json_object_get(size, "cols")),
                           rows = json_integer_value(json_object_get(size, "rows"));
                json_object_set_new(p, "pty", json_pack("{s:I, s:I}", "cols", cols > 0 ? cols : 80, "rows",
                                                        rows > 0 ? rows : 24));
        } else {
                /* envd keeps stdin open unless told not to (the SDK says stdin: false). */
                json_object_set_new(p, "stdin", json_boolean(!json_is_false(stdin_)));
        }
        const char *deadline = http_header(q->r, "Connect-Timeout-Ms");
        uint64_t ms = 0;
        if (deadline && parse_u64(deadline, UINT32_MAX, &ms) == 0 && ms > 0)
                json_object_set_new(p, "timeoutMs", json_integer((json_int_t)ms));
        if (own_connection(q) < 0) {
                json_decref(p);
                return;
        }
        q->deadline_ms = now_ms() + (deadline && ms ? ms : SBX_E2B_START_WAIT_MS);
        json_decref(q->scratch);
        q->scratch = json_incref(p);
        (void)rpc_client_call(q->own, "process.start", p, started, q);
}

/* The processes named by pid: process.list, then the step. */
static void with_process(E2bReq *q, RpcAnswerFn step);

static json_t *pid_of(json_t *in) { return json_object_get(json_object_get(in, "process"), "pid"); }

static void listed_for(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return fail_sbx(q, error);
        json_t *want = pid_of(q->in), *e;
        json_int_t pid = json_integer_value(want);
        size_t i;
        json_array_foreach(json_object_get(result, "processes"), i, e) {
                if (json_integer_value(json_object_get(e, "pid")) == pid &&
                    json_is_true(json_object_get(e, "alive"))) {
                        snprintf(q->process_id, sizeof q->process_id, "%s",
                                 json_string_value(json_object_get(e, "processId")) ?: "");
                        q->pid = (long)pid;
                        q->pty = json_is_true(json_object_get(e, "pty"));
                        return q->step(q, e, NULL);
                }
        }
        fail(q, "not_found", "process with pid %lld not found", (long long)pid);
}

static void with_process(E2bReq *q, RpcAnswerFn step) {
        if (!json_is_integer(pid_of(q->in)))
                return fail(q, "invalid_argument", "process.pid is required (a selector by tag is not served)");
        q->step = step;
        RpcClient *c = q->own ? q->own : q->g->rpc;
        (void)rpc_client_call(c, "process.list", json_pack("{s:s}", "sandboxId", q->box->id), listed_for, q);
}

static void ok_empty(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return unary_sbx_error(q, error);
        e2b_reply_json(q, 200, json_object());
}

static void connect_found(void *ud, json_t *entry, json_t *error) {
        E2bReq *q = ud;
        /* Output from now on, as envd's Connect gives. */
        stream_from(q, (uint64_t)json_integer_value(json_object_get(entry, "logEnd")));
}

static void send_input_found(void *ud, json_t *entry, json_t *error) {
        E2bReq *q = ud;
        json_t *input = json_object_get(q->in, "input");
        const char *b64 = json_string_value(json_object_get(input, "stdin"));
        if (!b64)
                b64 = json_string_value(json_object_get(input, "pty"));
        if (!b64)
                return unary_error(q, "invalid_argument", "input.stdin or input.pty (base64) is required");
        (void)rpc_client_call(q->g->rpc, "process.write",
                              json_pack("{s:s, s:s, s:s}", "sandboxId", q->box->id, "processId", q->process_id, "data",
                                        b64),
                              ok_empty, q);
}

static void close_stdin_found(void *ud, json_t *entry, json_t *error) {
        E2bReq *q = ud;
        (void)rpc_client_call(q->g->rpc, "process.closeStdin",
                              json_pack("{s:s, s:s}", "sandboxId", q->box->id, "processId", q->process_id), ok_empty, q);
}

static void signal_found(void *ud, json_t *entry, json_t *error) {
        E2bReq *q = ud;
        const char *s = json_string_value(json_object_get(q->in, "signal"));
        if (!s || strncmp(s, "SIGNAL_SIG", 10) != 0)
                return unary_error(q, "invalid_argument", "signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
        const char *sig = s + 10;
        (void)rpc_client_call(q->g->rpc, "process.kill",
                              json_pack("{s:s, s:s, s:s, s:i}", "sandboxId", q->box->id, "processId", q->process_id,
                                        "signal", sig, "graceMs", strcmp(sig, "KILL") ? 2000 : 0),
                              ok_empty, q);
}

static void update_found(void *ud, json_t *entry, json_t *error) {
        E2bReq *q = ud;
        json_t *size = json_object_get(json_object_get(q->in, "pty"), "size");
        if (!json_is_object(size))
                return e2b_reply_json(q, 200, json_object());
        json_int_t cols = json_integer_value(json_object_get(size, "cols")),
                   rows = json_integer_value(json_object_get(size, "rows"));
        (void)rpc_client_call(q->g->rpc, "process.resize",
                              json_pack("{s:s, s:s, s:I, s:I}", "sandboxId", q->box->id, "processId", q->process_id,
                                        "cols", cols > 0 ? cols : 80, "rows", rows > 0 ? rows : 24),
                              ok_empty, q);
}

static void proc_listed(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return unary_sbx_error(q, error);
        json_t *out = json_array(), *e;
        size_t i;
        json_array_foreach(json_object_get(result, "processes"), i, e) {
                if (!json_is_true(json_object_get(e, "alive")))
                        continue;
                json_t *p = json_pack("{s:O, s:{s:s, s:[s, s], s:{}}}", "pid", json_object_get(e, "pid"), "config",
                                      "cmd", "/bin/bash", "args", "-c",
                                      json_string_value(json_object_get(e, "command")) ?: "", "envs");
                const char *label = json_string_value(json_object_get(e, "label"));
                if (p && label && *label)
                        json_object_set_new(p, "tag", json_string(label));
                json_array_append_new(out, p);
        }
        e2b_reply_json(q, 200, json_pack("{s:o}", "processes", out));
}

static void process_call(E2bReq *q, const char *m) {
        if (!strcmp(m, "Start"))
                return proc_start(q);
        if (!strcmp(m, "Connect"))
                return own_connection(q) < 0 ? (void)0 : with_process(q, connect_found);
        if (is_stream_call(q))
                return stream_fail(q, "unimplemented", "process.Process/%s is not a stream", m);
        if (!strcmp(m, "List"))
                return (void)rpc_client_call(q->g->rpc, "process.list", json_pack("{s:s}", "sandboxId", q->box->id),
                                             proc_listed, q);
        if (!strcmp(m, "SendInput"))
                return with_process(q, send_input_found);
        if (!strcmp(m, "CloseStdin"))
                return with_process(q, close_stdin_found);
        if (!strcmp(m, "SendSignal"))
                return with_process(q, signal_found);
        if (!strcmp(m, "Update"))
                return with_process(q, update_found);
        unary_error(q, "unimplemented", "process.Process/%s is not served (StreamInput needs a client stream)", m);
}

/* ---------------------------------------------------------------- filesystem */

static json_t *entry_json(json_t *i) {
        const char *type = json_string_value(json_object_get(i, "type")) ?: "";
        int mode = (int)json_integer_value(json_object_get(i, "mode"));
        char perms[11] = "----------";
        perms[0] = !strcmp(type, "dir") ? 'd' : !strcmp(type, "symlink") ? 'l' : '-';
        for (int b = 0; b < 9; b++)
                if (mode & (1 << (8 - b)))
                        perms[1 + b] = "rwx"[b % 3];
        json_t *o = json_pack("{s:O, s:s, s:O, s:O, s:i, s:s, s:s, s:s, s:O}", "name", json_object_get(i, "name"), "type",
                              !strcmp(type, "dir") ? "FILE_TYPE_DIRECTORY" : !strcmp(type, "file") ? "FILE_TYPE_FILE"
                                                                                                  : "FILE_TYPE_UNSPECIFIED",
                              "path", json_object_get(i, "path"), "size", json_object_get(i, "size"), "mode", mode,
                              "permissions", perms, "owner", "user", "group", "user", "modifiedTime",
                              json_object_get(i, "mtime"));
        json_t *t = json_object_get(i, "target");
        if (o && t)
                json_object_set(o, "symlinkTarget", t);
        return o;
}

static void stat_answer(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return unary_sbx_error(q, error);
        e2b_reply_json(q, 200, json_pack("{s:o}", "entry", entry_json(result)));
}

/* After a change, the entry at path as it is now. */
static void stat_of(E2bReq *q, const char *path) {
        (void)rpc_client_call(q->g->rpc, "files.stat", json_pack("{s:s, s:s}", "sandboxId", q->box->id, "path", path),
                              stat_answer, q);
}

static void list_answer(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return unary_sbx_error(q, error);
        json_t *out = json_array(), *e;
        size_t i;
        json_array_foreach(json_object_get(result, "entries"), i, e)
                json_array_append_new(out, entry_json(e));
        e2b_reply_json(q, 200, json_pack("{s:o}", "entries", out));
}

static const char *path_in(E2bReq *q, const char *key) {
        return json_string_value(json_object_get(q->in, key));
}

static void made(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return unary_sbx_error(q, error);
        stat_of(q, path_in(q, "path"));
}

static void mkdir_checked(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (result && json_is_true(json_object_get(result, "exists")))
                return unary_error(q, "already_exists", "%s already exists", path_in(q, "path"));
        (void)rpc_client_call(q->g->rpc, "files.mkdir",
                              json_pack("{s:s, s:s, s:b}", "sandboxId", q->box->id, "path", path_in(q, "path"), "parents",
                                        1),
                              made, q);
}

static void moved(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return unary_sbx_error(q, error);
        stat_of(q, path_in(q, "destination"));
}

static char *file_path(E2bReq *q, const char *p);

static void watching(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return fail_sbx(q, error);
        if (http_stream_start(q->r, 200, "application/connect+json", NULL) < 0)
                return;
        q->streaming = true;
        (void)envelope(q, 0, json_pack("{s:{}}", "start"));
        keepalive_start(q);
}

/* WatchDir: a files.watch on a connection of its own, which ends with the stream. */
static void watch_dir(E2bReq *q) {
        const char *path = json_string_value(json_object_get(q->in, "path"));
        q->watch = true;
        q->watch_root = file_path(q, path);
        if (!q->watch_root)
                return stream_fail(q, "invalid_argument", "path is required");
        size_t n = strlen(q->watch_root);
        while (n > 1 && q->watch_root[n - 1] == '/')
                q->watch_root[--n] = 0;
        if (own_connection(q) < 0)
                return;
        (void)rpc_client_call(q->own, "files.watch",
                              json_pack("{s:s, s:s, s:b}", "sandboxId", q->box->id, "path", q->watch_root, "recursive",
                                        json_is_true(json_object_get(q->in, "recursive"))),
                              watching, q);
}

/* ---------------------------------------------------------------- polled watchers
 *
 * E2B's synchronous Python SDK watches by polling: CreateWatcher, then GetWatcherEvents
 * (what came since the last poll), then RemoveWatcher. The watch is the door connection's
 * (files.watch); its events wait here. */

typedef struct E2bWatcher {
        struct E2bWatcher *next;
        char id[64];      /* the sbx watchId, which is the watcherId too */
        char sandbox[64];
        char *root;       /* names are told relative to it */
        json_t *events;   /* [{name, type}] since the last poll */
} E2bWatcher;

static E2bWatcher **watcher_find(E2b *g, const char *id, const char *sandbox) {
        for (E2bWatcher **w = &g->watchers; *w; w = &(*w)->next)
                if (id && !strcmp((*w)->id, id) && (!sandbox || !strcmp((*w)->sandbox, sandbox)))
                        return w;
        return NULL;
}

static void watcher_free(E2bWatcher *w) {
        json_decref(w->events);
        free(w->root);
        free(w);
}

void envd_watchers_drop(E2b *g, const char *sandbox) {
        for (E2bWatcher **w = &g->watchers; *w;) {
                if (!sandbox || !strcmp((*w)->sandbox, sandbox)) {
                        E2bWatcher *x = *w;
                        *w = x->next;
                        watcher_free(x);
                } else {
                        w = &(*w)->next;
                }
        }
}

/* {name, type} of a files.event under root; NULL when it is not one (an overflow). */
static json_t *event_json(const char *root, json_t *params) {
        const char *type = json_string_value(json_object_get(params, "type")) ?: "";
        const char *path = json_string_value(json_object_get(params, "path"));
        size_t n = strlen(root);
        if (!path || strncmp(path, root, n) != 0 || !strcmp(type, "overflow"))
                return NULL;
        char upper[32] = "EVENT_TYPE_";
        for (size_t i = 0; type[i] && i < 16; i++)
                upper[11 + i] = (char)toupper((unsigned char)type[i]);
        return json_pack("{s:s, s:s}", "name", path + n + (path[n] == '/'), "type", upper);
}

void envd_watcher_event(E2b *g, json_t *params) {
        E2bWatcher **w = watcher_find(g, json_string_value(json_object_get(params, "watchId")), NULL);
        if (w && json_array_size((*w)->events) < SBX_E2B_WATCHER_EVENTS)
                json_array_append_new((*w)->events, event_json((*w)->root, params));
}

static void watcher_made(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        if (!result)
                return unary_sbx_error(q, error);
        E2bWatcher *w = calloc(1, sizeof *w);
        const char *id = json_string_value(json_object_get(result, "watchId"));
        if (!w || !id || !(w->events = json_array())) {
                free(w);
                return unary_error(q, "internal", "out of memory");
        }
        snprintf(w->id, sizeof w->id, "%s", id);
        snprintf(w->sandbox, sizeof w->sandbox, "%s", q->box->id);
        w->root = TAKE_PTR(q->watch_root);
        w->next = q->g->watchers;
        q->g->watchers = w;
        e2b_reply_json(q, 200, json_pack("{s:s}", "watcherId", w->id));
}

static void watcher_removed(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        E2bWatcher **w = watcher_find(q->g, json_string_value(json_object_get(q->in, "watcherId")), q->box->id);
        if (w) {
                E2bWatcher *x = *w;
                *w = x->next;
                watcher_free(x);
        }
        e2b_reply_json(q, 200, json_object());
}

/* CreateWatcher, GetWatcherEvents, RemoveWatcher; false when m is none of them. */
static bool polled_watch(E2bReq *q, const char *m) {
        const char *wid = json_string_value(json_object_get(q->in, "watcherId"));
        if (!strcmp(m, "CreateWatcher")) {
                q->watch_root = file_path(q, json_string_value(json_object_get(q->in, "path")));
                if (!q->watch_root) {
                        unary_error(q, "invalid_argument", "path is required");
                        return true;
                }
                size_t n = strlen(q->watch_root);
                while (n > 1 && q->watch_root[n - 1] == '/')
                        q->watch_root[--n] = 0;
                (void)rpc_client_call(q->g->rpc, "files.watch",
                                      json_pack("{s:s, s:s, s:b}", "sandboxId", q->box->id, "path", q->watch_root,
                                                "recursive", json_is_true(json_object_get(q->in, "recursive"))),
                                      watcher_made, q);
                return true;
        }
        if (strcmp(m, "GetWatcherEvents") && strcmp(m, "RemoveWatcher"))
                return false;
        E2bWatcher **w = watcher_find(q->g, wid, q->box->id);
        if (!w) {
                unary_error(q, "not_found", "watcher %s not found", wid ? wid : "(none given)");
        } else if (!strcmp(m, "GetWatcherEvents")) {
                json_t *events = (*w)->events;
                (*w)->events = json_array();
                e2b_reply_json(q, 200, json_pack("{s:o}", "events", events));
        } else {
                (void)rpc_client_call(q->g->rpc, "files.unwatch",
                                      json_pack("{s:s, s:s}", "sandboxId", q->box->id, "watchId", wid),
                                      watcher_removed, q);
        }
        return true;
}

static void fs_call(E2bReq *q, const char *m) {
        const char *path = path_in(q, "path");
        const char *id = q->box->id;
        RpcClient *c = q->g->rpc;
        if (!strcmp(m, "WatchDir"))
                return is_stream_call(q) ? watch_dir(q) : unary_error(q, "invalid_argument", "WatchDir is a stream");
        if (is_stream_call(q))
                return stream_fail(q, "unimplemented", "filesystem.Filesystem/%s is not served as a stream here", m);
        if (polled_watch(q, m))
                return;
        if (strcmp(m, "Move") && strcmp(m, "Stat") && strcmp(m, "ListDir") && strcmp(m, "MakeDir") && strcmp(m, "Remove"))
                return unary_error(q, "unimplemented", "filesystem.Filesystem/%s is not served", m);
        if (!strcmp(m, "Move")) {
                const char *from = path_in(q, "source"), *to = path_in(q, "destination");
                if (!from || !to)
                        return unary_error(q, "invalid_argument", "source and destination are required");
                return (void)rpc_client_call(c, "files.rename",
                                             json_pack("{s:s, s:s, s:s}", "sandboxId", id, "from", from, "to", to), moved,
                                             q);
        }
        if (!path)
                return unary_error(q, "invalid_argument", "path is required");
        if (!strcmp(m, "Stat"))
                return stat_of(q, path);
        if (!strcmp(m, "ListDir")) {
                json_t *depth = json_object_get(q->in, "depth");
                json_int_t d = json_is_integer(depth) && json_integer_value(depth) > 0 ? json_integer_value(depth) : 1;
                return (void)rpc_client_call(c, "files.list",
                                             json_pack("{s:s, s:s, s:I}", "sandboxId", id, "path", path, "depth", d),
                                             list_answer, q);
        }
        if (!strcmp(m, "MakeDir"))
                return (void)rpc_client_call(c, "files.exists", json_pack("{s:s, s:s}", "sandboxId", id, "path", path),
                                             mkdir_checked, q);
        if (!strcmp(m, "Remove"))
                return (void)rpc_client_call(c, "files.rm",
                                             json_pack("{s:s, s:s, s:b}", "sandboxId", id, "path", path, "recursive", 1),
                                             ok_empty, q);
        unary_error(q, "unimplemented", "filesystem.Filesystem/%s is not served", m);
}

/* ---------------------------------------------------------------- /files and /health */

/* A relative path is the user's home's, as envd resolves it. */
static char *file_path(E2bReq *q, const char *p) {
        if (!p || !*p)
                return NULL;
        char *out;
        return asprintf(&out, "%s%s", p[0] == '/' ? "" : "/home/user/", p) < 0 ? NULL : out;
}

static void file_error(E2bReq *q, json_t *error) {
        const char *code = e2b_connect_code(error);
        const char *m = json_string_value(json_object_get(error, "message")) ?: "sbx error";
        unsigned st = !strcmp(code, "not_found") ? 404 : !strcmp(code, "resource_exhausted") ? 507
                      : !strcmp(code, "permission_denied") ? 401 : 400;
        if (q->streaming) {
                /* Headers are gone: a cut connection is all that can say it. */
                http_stream_end(q->r);
                q->streaming = false;
                return;
        }
        e2b_reply_rest_error(q, st, "%s", m);
}

static void read_next(E2bReq *q);

/* The memfd a file's bytes go through between the door and the server (files.write's dataFd,
 * files.read's toFd): no base64 and no JSON scan of megabytes on either side. One per request,
 * used again for every piece (its pages too): a piece goes only after the last one's answer. */
static int data_memfd(E2bReq *q) {
        if (q->data_fd < 0)
                q->data_fd = memfd_create("sbx-e2b-files", MFD_CLOEXEC);
        return q->data_fd;
}

static void read_answer(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        q->reading = false;
        if (!result)
                return file_error(q, error);
        json_int_t size = json_integer_value(json_object_get(result, "size"));
        json_int_t off = json_integer_value(json_object_get(result, "offset"));
        size_t n = (size_t)MIN(json_integer_value(json_object_get(result, "length")), (json_int_t)SBX_E2B_READ_BYTES);
        _cleanup_free_ uint8_t *data = malloc(n ? n : 1);
        if (!data || (n && pread(q->data_fd, data, n, 0) != (ssize_t)n))
                return file_error(q, NULL);
        if (!q->streaming) {
                /* A sandbox's bytes on the listener's origin, which the operator console shares:
                 * a download, never a page a browser would run (sniffed HTML, an inline view). */
                static const char *const download[] = { "X-Content-Type-Options", "nosniff", "Content-Disposition",
                                                        "attachment", "Content-Security-Policy", "sandbox", NULL };
                if (http_stream_start(q->r, 200, "application/octet-stream", download) < 0)
                        return;
                q->streaming = true;
        }
        if (n && http_stream_write(q->r, data, n) < 0)
                return file_error(q, NULL);
        uint64_t next = (uint64_t)off + n;
        q->read_off = next;
        if (n == 0 || next >= (uint64_t)size) {
                http_stream_end(q->r);
                q->streaming = false;
                return;
        }
        /* The next piece is read while the client takes this one: at most two held. A slow
         * client's request holds no memfd pages meanwhile. */
        if (http_stream_queued(q->r) <= SBX_E2B_READ_BYTES)
                read_next(q);
        else if (ftruncate(q->data_fd, 0) < 0)
                log_debug("e2b: cannot empty a download's memfd: %s", strerror(errno));
}

static void read_next(E2bReq *q) {
        if (q->reading)
                return;
        int fd = data_memfd(q);
        if (fd < 0)
                return file_error(q, NULL);
        q->reading = true;
        if (rpc_client_call_fd(q->g->rpc, "files.read",
                               json_pack("{s:s, s:s, s:I, s:I, s:b}", "sandboxId", q->box->id, "path",
                                         json_string_value(json_object_get(q->in, "path")), "offset",
                                         (json_int_t)q->read_off, "length", (json_int_t)SBX_E2B_READ_BYTES, "toFd", 1),
                               fd, read_answer, q) < 0) {
                q->reading = false;
                file_error(q, NULL);
        }
}

/* Uploads: each file part into an sbx upload (begin, append..., commit), one files.write out
 * at a time while the next piece fills (the body paused once that one is full too); parts
 * follow each other, each committed before the next one's first bytes go. */
static void upload_step(E2bReq *q);
static void upload_done(E2bReq *q);

static void upload_answer(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        json_t *part = json_array_get(q->parts, q->busy_part - 1);
        q->busy_part = 0;
        if (!result) {
                const char *m = json_string_value(json_object_get(error, "message")) ?: "sbx error";
                q->body_error = !strcmp(e2b_connect_code(error), "resource_exhausted") ? 507 : 400;
                json_object_set_new(part, "error", json_string(m));
        } else if (json_object_get(result, "uploadId")) {
                json_object_set(part, "uploadId", json_object_get(result, "uploadId"));
        }
        upload_step(q);
}

/* A part into the memfd, which then holds it and nothing else. */
static int put_part(int fd, const uint8_t *d, size_t n) {
        for (size_t done = 0; done < n;) {
                ssize_t k = pwrite(fd, d + done, n - done, (off_t)done);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return -EIO;
                done += (size_t)k;
        }
        return ftruncate(fd, (off_t)n) < 0 ? negerrno() : 0;
}

/* One files.write of part i's bytes d (through the request's memfd): its upload's first,
 * next or last step, or the whole file when it ended before a first step went. */
static void send_part(E2bReq *q, size_t i, const uint8_t *d, size_t n, bool ended) {
        json_t *cur = json_array_get(q->parts, i);
        int fd = data_memfd(q);
        if (fd < 0 || put_part(fd, d, n) < 0) {
                q->body_error = 503;
                json_object_set_new(cur, "error", json_string(fd < 0 ? "cannot make a memfd for the file's bytes"
                                                                     : "cannot hold the file's bytes"));
                return;
        }
        const char *uid = json_string_value(json_object_get(cur, "uploadId"));
        json_t *p = json_pack("{s:s, s:s, s:b}", "sandboxId", q->box->id, "path",
                              json_string_value(json_object_get(cur, "path")), "dataFd", 1);
        const char *kind = !uid ? (ended ? NULL : "begin") : ended ? "commit" : "append";
        if (kind)
                json_object_set_new(p, "upload", json_string(kind));
        if (uid)
                json_object_set_new(p, "uploadId", json_string(uid));
        if (ended)
                json_object_set_new(cur, "committed", json_true());
        q->busy_part = i + 1;
        if (rpc_client_call_fd(q->own, "files.write", p, fd, upload_answer, q) < 0) {
                q->busy_part = 0;
                q->body_error = 503;
                json_object_set_new(cur, "error", json_string("the door cannot reach the server (out of fds or memory)"));
        }
}

/* A part that ended while another's files.write was out keeps its last bytes here until
 * that one is answered: they go next, before any of a later part's. */
static int hold_tail(E2bReq *q, size_t i) {
        E2bHeld *h = reallocarray(q->held, q->n_held + 1, sizeof *q->held);
        if (!h)
                return -ENOMEM;
        q->held = h;
        h[q->n_held++] = (E2bHeld){ .part = i, .data = TAKE_PTR(q->part), .len = q->part_len };
        q->part_len = q->part_cap = 0;
        return 0;
}

static void upload_step(E2bReq *q) {
        if (q->busy_part) {
                /* One part is written while the next one fills: past a full one, or while ended
                 * parts wait, wait. */
                if (q->part_len >= SBX_E2B_UPLOAD_PART_BYTES || q->n_held)
                        http_pause_body(q->r);
                return;
        }
        while (q->n_held) {
                E2bHeld h = q->held[0];
                memmove(q->held, q->held + 1, --q->n_held * sizeof *q->held);
                _cleanup_free_ uint8_t *data = h.data;
                json_t *part = json_array_get(q->parts, h.part);
                if (!json_object_get(part, "error") && !q->body_error) {
                        send_part(q, h.part, data, h.len, true);
                        if (q->busy_part)
                                return;
                }
        }
        size_t i = json_array_size(q->parts);
        json_t *cur = json_array_get(q->parts, i - 1);
        bool done = !cur || json_object_get(cur, "error") || json_is_true(json_object_get(cur, "committed"));
        bool ended = cur && json_is_true(json_object_get(cur, "ended"));
        if (!done && !q->body_error && (ended || q->part_len >= SBX_E2B_UPLOAD_PART_BYTES)) {
                size_t n = q->part_len;
                q->part_len = 0;
                send_part(q, i - 1, q->part, n, ended);
                if (!q->busy_part)
                        return upload_step(q);
                /* The next part fills while this one is written. */
                if (!ended && !q->n_held)
                        http_resume_body(q->r);
                return;
        }
        if (q->request_in)
                return upload_done(q);
        http_resume_body(q->r);
}

static int part_push(E2bReq *q, const uint8_t *d, size_t n) {
        if (n == 0)
                return 0; /* MHD tells a part's start with no bytes (and no buffer) */
        if (q->part_len + n > q->part_cap) {
                size_t cap = MAX(q->part_len + n, (size_t)SBX_E2B_UPLOAD_PART_BYTES + SBX_HTTP_FORM_BUFFER);
                uint8_t *b = realloc(q->part, cap);
                if (!b)
                        return -ENOMEM;
                q->part = b;
                q->part_cap = cap;
        }
        memcpy(q->part + q->part_len, d, n);
        q->part_len += n;
        return 0;
}

/* A failed part is said in the answer, after the body was read to its end (what follows it is
 * dropped). */
static int form_piece(void *ud, const char *name, const char *filename, const uint8_t *data, size_t len,
                      uint64_t off) {
        E2bReq *q = ud;
        if (!filename || q->body_error)
                return 0;
        json_t *cur = json_array_get(q->parts, json_array_size(q->parts) - 1);
        /* MHD may hand a part's start twice at offset 0 (empty, then its first bytes). */
        bool fresh = !cur || (off == 0 && (json_integer_value(json_object_get(cur, "bytes")) > 0 ||
                                           strcmp(json_string_value(json_object_get(cur, "name")) ?: "", filename)));
        if (fresh) {
                if (cur) {
                        /* The part before is whole: it goes out (and is committed) first, now or,
                         * while another files.write is out, once that one is answered. */
                        json_object_set_new(cur, "ended", json_true());
                        upload_step(q);
                        if (!json_object_get(cur, "error") && !json_is_true(json_object_get(cur, "committed")) &&
                            !q->body_error && hold_tail(q, json_array_size(q->parts) - 1) < 0)
                                q->body_error = 503;
                }
                const char *given = json_string_value(json_object_get(q->in, "path"));
                _cleanup_free_ char *path = file_path(q, given ? given : filename);
                if (!path) {
                        q->body_error = 400;
                        json_array_append_new(q->parts, json_pack("{s:s, s:s}", "name", filename, "error",
                                                                  "a file part needs a name or the path query"));
                        return 0;
                }
                json_array_append_new(q->parts, json_pack("{s:s, s:s}", "path", path, "name", filename));
        }
        if (part_push(q, data, len) < 0) {
                q->body_error = 503;
                return 0;
        }
        cur = json_array_get(q->parts, json_array_size(q->parts) - 1);
        json_object_set_new(cur, "bytes", json_integer(json_integer_value(json_object_get(cur, "bytes")) + (json_int_t)len));
        upload_step(q);
        return 0;
}

/* The answer to POST /files once every part is committed, or the first part's error. */
static void upload_done(E2bReq *q) {
        json_t *out = json_array(), *p;
        size_t i;
        /* A failure of the door's own (memory for the bytes) is on no part: still a failure. */
        bool said = false;
        json_array_foreach(q->parts, i, p)
                said = said || json_object_get(p, "error");
        if (q->body_error && !said) {
                json_decref(out);
                return e2b_reply_rest_error(q, (unsigned)q->body_error, "the door could not hold the files' bytes "
                                            "(out of memory)");
        }
        json_array_foreach(q->parts, i, p) {
                const char *err = json_string_value(json_object_get(p, "error"));
                if (err) {
                        json_decref(out);
                        return e2b_reply_rest_error(q, q->body_error ? (unsigned)q->body_error : 400, "%s", err);
                }
                const char *path = json_string_value(json_object_get(p, "path"));
                const char *slash = strrchr(path, '/');
                json_array_append_new(out, json_pack("{s:s, s:s, s:s}", "path", path, "name", slash ? slash + 1 : path,
                                                     "type", "file"));
        }
        e2b_reply_json(q, 200, out);
}

/* /files: the sandbox's token, or a signature of the path, operation and user made with it:
 * "v1_" + base64(sha256("path:operation:username:token[:expiration]")), without padding. */
static bool signature_ok(E2bReq *q, const char *op) {
        const char *sig = http_query(q->r, "signature"), *path = http_query(q->r, "path");
        const char *user = http_query(q->r, "username"), *exp = http_query(q->r, "signature_expiration");
        if (!sig || strncmp(sig, "v1_", 3) != 0 || !q->box)
                return false;
        uint64_t e;
        if (exp && (parse_u64(exp, UINT64_MAX, &e) < 0 || e * 1000 < wall_ms()))
                return false;
        _cleanup_free_ char *text = NULL;
        if (asprintf(&text, "%s:%s:%s:%s%s%s", path ? path : "", op, user ? user : "", q->box->token, exp ? ":" : "",
                     exp ? exp : "") < 0)
                return false;
        uint8_t digest[SHA256_DIGEST_SIZE];
        struct sha256_ctx ctx;
        sha256_init(&ctx);
        sha256_feed(&ctx, text, strlen(text));
        sha256_digest(&ctx, sizeof digest, digest);
        size_t n;
        _cleanup_free_ char *b64 = b64_encode(digest, sizeof digest, &n);
        while (b64 && n && b64[n - 1] == '=')
                b64[--n] = 0;
        return b64 && strcmp(sig + 3, b64) == 0;
}

/* The sandbox of a /files call and its right to it; 0, or the HTTP status to refuse with. */
static unsigned files_access(E2bReq *q, const char *op) {
        char buf[64];
        q->box = e2b_box_find(q->g, e2b_sandbox_of(q, buf));
        if (!q->box)
                return 502;
        const char *tok = http_header(q->r, "X-Access-Token");
        if ((tok && strcmp(tok, q->box->token) == 0) || signature_ok(q, op))
                return 0;
        return 401;
}

/* POST /files: a multipart form (each file part a file), or since envd 0.5.7 the file itself
 * as application/octet-stream, written to the query's path. Both go through the same parts. */
int envd_head(E2bReq *q) {
        if (strcmp(http_path(q->r), "/files") != 0 || strcmp(http_method(q->r), "POST") != 0)
                return 0;
        unsigned refused = files_access(q, "write");
        if (refused)
                return (int)refused;
        const char *ct = http_header(q->r, "Content-Type"), *ce = http_header(q->r, "Content-Encoding");
        bool raw = ct && !strncmp(ct, "application/octet-stream", 24);
        if (!ct || (!raw && strncmp(ct, "multipart/form-data", 19) != 0))
                return 415;
        if (ce && strcmp(ce, "identity") != 0)
                return 415; /* gzip uploads: not served (the SDK sends them only when asked) */
        /* The uploads go on a connection of the request's own: what the request leaves unfinished
         * (its client gone, a part refused) ends with it, as the server ends a closed
         * connection's uploads, and does not count against the sandbox's open uploads after. */
        int fd, r = q->g->connect(q->g->connect_data, &fd);
        if (r == 0)
                r = rpc_client_new(q->g->loop, fd, NULL, q, &q->own);
        if (r < 0)
                return 503;
        q->parts = json_array();
        /* The query's path, if any: every part goes there. */
        const char *path = http_query(q->r, "path");
        q->in = path ? json_pack("{s:s}", "path", path) : json_object();
        if (!q->parts || !q->in)
                return 503;
        if (!raw)
                return http_form(q->r, form_piece, q) < 0 ? 400 : 0;
        _cleanup_free_ char *target = file_path(q, path);
        if (!target)
                return 400; /* the file's own body names no path: the query must */
        json_array_append_new(q->parts, json_pack("{s:s, s:s}", "path", target, "name", target));
        return 1;
}

int envd_body(E2bReq *q, const uint8_t *chunk, size_t len) {
        if (!q->body_error && part_push(q, chunk, len) < 0)
                q->body_error = 503;
        upload_step(q);
        return 0;
}

static void files_call(E2bReq *q) {
        const char *m = http_method(q->r);
        if (!strcmp(m, "GET")) {
                unsigned refused = files_access(q, "read");
                if (refused == 502)
                        return e2b_reply_rest_error(q, 502, "sandbox not found (killed, or it timed out)");
                if (refused)
                        return e2b_reply_rest_error(q, 401, "X-Access-Token (or the signature) is not this sandbox's");
                _cleanup_free_ char *path = file_path(q, http_query(q->r, "path"));
                if (!path)
                        return e2b_reply_rest_error(q, 400, "path is required");
                q->in = json_pack("{s:s}", "path", path);
                return read_next(q);
        }
        if (!strcmp(m, "POST")) {
                json_t *cur = json_array_get(q->parts, json_array_size(q->parts) - 1);
                if (!cur)
                        return e2b_reply_rest_error(q, 400, "no file part in the form");
                json_object_set_new(cur, "ended", json_true());
                q->request_in = true;
                return upload_step(q);
        }
        e2b_reply_rest_error(q, 405, "%s /files is not served", m);
}

static void health_answer(void *ud, json_t *result, json_t *error) {
        E2bReq *q = ud;
        e2b_reply_empty(q, result ? 204 : 502);
}

void envd_request(E2bReq *q) {
        const char *path = http_path(q->r);
        if (!strcmp(path, "/health")) {
                char buf[64];
                q->box = e2b_box_find(q->g, e2b_sandbox_of(q, buf));
                if (!q->box)
                        return e2b_reply_empty(q, 502);
                return (void)rpc_client_call(q->g->rpc, "files.exists",
                                             json_pack("{s:s, s:s}", "sandboxId", q->box->id, "path", "/"),
                                             health_answer, q);
        }
        if (!strcmp(path, "/files"))
                return files_call(q);
        if (!authorize(q, true) || !read_message(q))
                return;
        if (!strncmp(path, PROCESS_PREFIX, strlen(PROCESS_PREFIX)))
                return process_call(q, path + strlen(PROCESS_PREFIX));
        fs_call(q, path + strlen(FS_PREFIX));
}

void envd_drained(E2bReq *q) {
        if (q->own)
                rpc_client_pause(q->own, false);
        if (q->streaming && !strcmp(http_path(q->r), "/files"))
                read_next(q);
}

void envd_finished(E2bReq *q) {
        keepalive_stop(q);
        q->own = rpc_client_free(q->own);
        free(q->watch_root);
        json_decref(q->parts);
        free(q->part);
        for (size_t i = 0; i < q->n_held; i++)
                free(q->held[i].data);
        free(q->held);
        q->data_fd = safe_close(q->data_fd);
}
