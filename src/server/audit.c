/* SPDX-License-Identifier: MIT */
/* The daemon's side of the audit log: making events, the bounded queue, the pipe to the
 * writer process, its reports, health and fail-closed (audit.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/wait.h>
#include <unistd.h>
#include "base/job.h"
#include "base/limits.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/queue.h"
#include "base/sha256.h"
#include "base/util.h"
#include "server/audit.h"
#include "server/audit_log.h"
#include "server/conn.h"
#include "server/handler.h"
#include "server/registry.h"

/* A started process whose end is still to be logged. */
typedef struct AuditProc {
        SbxProcessWatcher w;
        Audit *audit;
        struct AuditProc *next, *prev;
        char sandbox_id[64];
        char process_id[HANDLER_PROCESS_ID_MAX];
} AuditProc;

struct Audit {
        Loop *loop;
        char *path;
        bool fail_closed;
        pid_t pid;
        int pidfd;                /* the writer; -1 once reaped */
        Watch pw;
        int fd;                   /* events pipe, our end (non-blocking) */
        Watch ww;                 /* on fd, only while the queue waits for room in the pipe */
        int status_fd;            /* reports pipe, our end (non-blocking) */
        Watch sw;
        ByteQueue q;              /* whole lines, each ending in '\n', not yet in the pipe */
        uint64_t queued_lines;    /* in q, including a line partly written */
        AuditStatus st;           /* the writer's last report */
        uint64_t events, dropped; /* events made; of them dropped here */
        uint64_t untold;          /* dropped ones no audit.dropped line has told yet */
        bool gone;                /* the writer has exited: nothing can be logged any more */
        bool closing;             /* audit_close: the loop has stopped, no watch is added */
        AuditProc *procs;
        AuditRedactFn redact;
        void *redact_data;
        /* The last SBX_AUDIT_RECENT_EVENTS events made (as queued: before the writer numbers
         * and chains them), oldest first, for the console. */
        json_t *recent;
        /* audit_verify_start(): the job checking the log's chain, and who hears its end. */
        Job verify;
        Watch verify_w;
        AuditVerifyFn verify_done;
        void *verify_ud;
};

void audit_set_redact(Audit *a, AuditRedactFn fn, void *data) {
        if (!a)
                return;
        a->redact = fn;
        a->redact_data = data;
}

/* Replaces every string in v (objects and arrays, recursively) by its redacted text. */
static void redact_strings(Audit *a, const char *sandbox_id, json_t *v) {
        if (json_is_object(v)) {
                const char *key;
                json_t *x;
                json_object_foreach(v, key, x) {
                        if (json_is_string(x) && strcmp(key, "sandboxId") != 0) {
                                size_t n;
                                char *r = a->redact(a->redact_data, sandbox_id, json_string_value(x), json_string_length(x), &n);
                                if (r) {
                                        (void)json_string_setn(x, r, n);
                                        free(r);
                                }
                        } else {
                                redact_strings(a, sandbox_id, x);
                        }
                }
        } else if (json_is_array(v)) {
                size_t i;
                json_t *x;
                json_array_foreach(v, i, x) {
                        if (json_is_string(x)) {
                                size_t n;
                                char *r = a->redact(a->redact_data, sandbox_id, json_string_value(x), json_string_length(x), &n);
                                if (r) {
                                        (void)json_string_setn(x, r, n);
                                        free(r);
                                }
                        } else {
                                redact_strings(a, sandbox_id, x);
                        }
                }
        }
}

/* ------------------------------------------------------------------ the writer process */

static int spawn_writer(Audit *a, const AuditOptions *o, int in_fd, int st_fd) {
        char max[32], keep[32];
        snprintf(max, sizeof max, "%llu", (unsigned long long)o->max_bytes);
        snprintf(keep, sizeof keep, "%u", o->keep);
        posix_spawn_file_actions_t fa;
        posix_spawnattr_t at;
        sigset_t mask, none;
        sigemptyset(&none);
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        int r = posix_spawn_file_actions_init(&fa);
        if (r)
                return -r;
        r = posix_spawnattr_init(&at);
        if (r) {
                posix_spawn_file_actions_destroy(&fa);
                return -r;
        }
        /* fds 3 and 4 are the pipes; stdin and stdout are not the writer's (with --stdio they
         * are the client's). Its own process group and the termination signals blocked: a
         * Ctrl-C or a `kill` of the daemon does not stop the writer, which ends at the pipe's
         * EOF, after the daemon's last events. stderr is the daemon's. */
        if (!(r = posix_spawn_file_actions_adddup2(&fa, in_fd, 3)) &&
            !(r = posix_spawn_file_actions_adddup2(&fa, st_fd, 4)) &&
            !(r = posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0)) &&
            !(r = posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0)) &&
            !(r = posix_spawnattr_setsigmask(&at, &mask)) && !(r = posix_spawnattr_setpgroup(&at, 0)) &&
            !(r = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP))) {
                char *argv[] = { "sbx", "audit", "writer", "--", a->path, max, keep, NULL };
                extern char **environ;
                r = posix_spawn(&a->pid, "/proc/self/exe", &fa, &at, argv, environ);
        }
        posix_spawn_file_actions_destroy(&fa);
        posix_spawnattr_destroy(&at);
        if (r)
                return -r;
        a->pidfd = pidfd_open(a->pid, 0);
        if (a->pidfd < 0) {
                r = negerrno();
                kill(a->pid, SIGKILL);
                (void)waitpid(a->pid, NULL, 0);
                return r;
        }
        return 0;
}

static void reap(Audit *a) {
        if (a->pidfd < 0)
                return;
        if (a->pw.active)
                loop_del(a->loop, &a->pw);
        siginfo_t si = { 0 };
        (void)waitid(P_PIDFD, (id_t)a->pidfd, &si, WEXITED | WNOHANG);
        a->pidfd = safe_close(a->pidfd);
        a->gone = true;
}

/* Takes every whole report waiting; the last one counts (they carry totals). */
static void read_reports(Audit *a) {
        AuditStatus st;
        for (;;) {
                ssize_t n = read(a->status_fd, &st, sizeof st);
                if (n == (ssize_t)sizeof st && st.size == sizeof st) {
                        a->st = st;
                        continue;
                }
                if (n < 0 && errno == EINTR)
                        continue;
                if (n == 0 && a->sw.active)
                        loop_del(a->loop, &a->sw); /* the writer closed it: it is exiting */
                return;
        }
}

static void status_event(Watch *w, uint32_t events) { read_reports(w->data); }

static void drop_queue(Audit *a) {
        a->dropped += a->queued_lines;
        a->untold += a->queued_lines;
        a->queued_lines = 0;
        bq_clear(&a->q);
        if (a->ww.active)
                loop_del(a->loop, &a->ww);
}

static void writer_exited(Watch *w, uint32_t events) {
        Audit *a = w->data;
        read_reports(a);
        reap(a);
        drop_queue(a);
        log_error("audit: the writer process exited; events are no longer logged, only counted "
                  "(health's audit.dropped)");
}

/* Waits, before the loop runs, for the writer's first report: the log is open, or why not. */
static int wait_started(Audit *a, char *err, size_t errlen) {
        uint64_t deadline = now_ms() + SBX_AUDIT_START_MS;
        for (;;) {
                uint64_t now = now_ms();
                struct pollfd p = { .fd = a->status_fd, .events = POLLIN };
                int n = now < deadline ? poll(&p, 1, (int)(deadline - now)) : 0;
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        snprintf(err, errlen, "the audit writer did not open %s within %u ms", a->path,
                                 SBX_AUDIT_START_MS);
                        return -ETIMEDOUT;
                }
                AuditStatus st;
                ssize_t got = read(a->status_fd, &st, sizeof st);
                if (got < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                if (got != (ssize_t)sizeof st || st.size != sizeof st) {
                        snprintf(err, errlen, "the audit writer exited before opening %s", a->path);
                        return -EIO;
                }
                a->st = st;
                if (st.started)
                        return 0;
                snprintf(err, errlen, "%s", st.detail[0] ? st.detail : "the audit writer failed");
                return st.error > 0 ? -st.error : -EIO;
        }
}

/* ------------------------------------------------------------------ queue and pipe */

static void flush(Audit *a);

static void writable_event(Watch *w, uint32_t events) { flush(w->data); }

/* Queues one line (len bytes, its '\n' included). Returns 0 or -ENOBUFS. */
static int push(Audit *a, const char *line, size_t len) {
        if (a->gone || bq_pending(&a->q) + len > SBX_AUDIT_QUEUE_BYTES || bq_push(&a->q, line, len) < 0)
                return -ENOBUFS;
        a->queued_lines++;
        return 0;
}

/* The one place an event becomes text: secrets would be redacted here, on the serialized
 * line, before it is queued. */
static void enqueue(Audit *a, json_t *ev) {
        a->events++;
        if (a->recent && json_array_append(a->recent, ev) == 0 && json_array_size(a->recent) > SBX_AUDIT_RECENT_EVENTS)
                json_array_remove(a->recent, 0);
        char *s = json_dumps(ev, JSON_COMPACT);
        json_decref(ev);
        size_t n = s ? strlen(s) : 0;
        if (s && n < SBX_AUDIT_LINE_BYTES) {
                s[n++] = '\n'; /* json_dumps' NUL becomes the newline: the line is not a C string */
                if (push(a, s, n) == 0) {
                        free(s);
                        flush(a);
                        return;
                }
        } else {
                log_warn("audit: an event of %zu bytes was dropped (at most %u)", n, SBX_AUDIT_LINE_BYTES);
        }
        free(s);
        a->dropped++;
        a->untold++;
}

/* Counts newlines in the n bytes about to leave the queue. */
static uint64_t lines_in(const uint8_t *d, size_t n) {
        uint64_t k = 0;
        for (const uint8_t *p = d, *end = d + n; (p = memchr(p, '\n', (size_t)(end - p))); p++)
                k++;
        return k;
}

/* Writes what the pipe takes; waits for room with EPOLLOUT, never in a loop. */
static void flush(Audit *a) {
        while (bq_pending(&a->q) > 0 && !a->gone) {
                ssize_t n = write(a->fd, bq_head(&a->q), bq_pending(&a->q));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        break;
                if (n <= 0) {
                        /* EPIPE: the writer is gone; its pidfd tells the rest. */
                        drop_queue(a);
                        return;
                }
                a->queued_lines -= lines_in(bq_head(&a->q), (size_t)n);
                bq_consume(&a->q, (size_t)n);
        }
        /* Drops are told in the log once the queue is empty again: the writer has caught up. */
        if (bq_pending(&a->q) == 0 && a->untold > 0 && !a->gone) {
                char line[160], ts[AUDIT_TS_SIZE];
                audit_ts(wall_ms(), ts);
                int k = snprintf(line, sizeof line, "{\"ts\":\"%s\",\"type\":\"audit.dropped\",\"count\":%llu}\n", ts,
                                 (unsigned long long)a->untold);
                if (push(a, line, (size_t)k) == 0) {
                        a->untold = 0;
                        flush(a);
                        return;
                }
        }
        bool want = bq_pending(&a->q) > 0 && !a->gone && !a->closing;
        if (want && !a->ww.active && loop_add(a->loop, &a->ww, a->fd, EPOLLOUT, writable_event, a) < 0)
                drop_queue(a);
        else if (!want && a->ww.active)
                loop_del(a->loop, &a->ww);
}

/* ------------------------------------------------------------------ life */

int audit_new(Loop *loop, const AuditOptions *o, Audit **ret, char *err, size_t errlen) {
        AuditOptions opt = *o;
        if (!opt.max_bytes)
                opt.max_bytes = SBX_AUDIT_DEFAULT_MAX_BYTES;
        if (!opt.keep)
                opt.keep = SBX_AUDIT_DEFAULT_KEEP;
        Audit *a = calloc(1, sizeof *a);
        if (a) {
                a->recent = json_array();
                a->verify = (Job){ .pid = -1, .pidfd = -1, .result = -1 };
        }
        if (!a || !(a->path = strdup(o->path))) {
                free(a);
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        a->loop = loop;
        a->fail_closed = opt.fail_closed;
        a->pidfd = a->fd = a->status_fd = -1;
        int ev[2] = { -1, -1 }, st[2] = { -1, -1 };
        int r = 0;
        if (pipe2(ev, O_CLOEXEC) < 0 || pipe2(st, O_CLOEXEC) < 0)
                r = negerrno();
        /* The writer's ends go to fds 3 and 4 in order: neither may be 3 or 4 already, or the
         * first dup2 would overwrite the second's source. */
        for (int *fd = &ev[0]; r == 0 && fd; fd = fd == &ev[0] ? &st[1] : NULL)
                if (*fd < 5) {
                        int moved = fcntl(*fd, F_DUPFD_CLOEXEC, 5);
                        if (moved < 0)
                                r = negerrno();
                        else {
                                close(*fd);
                                *fd = moved;
                        }
                }
        if (r == 0) {
                /* A bigger pipe holds more events while the writer is behind; refused rootless
                 * past the user's pipe budget, which only leaves the default. */
                (void)fcntl(ev[1], F_SETPIPE_SZ, (int)SBX_AUDIT_PIPE_BYTES);
                r = spawn_writer(a, &opt, ev[0], st[1]);
        }
        safe_close(ev[0]);
        safe_close(st[1]);
        a->fd = ev[1];
        a->status_fd = st[0];
        if (r < 0) {
                snprintf(err, errlen, "cannot start the audit writer: %s", strerror(-r));
                audit_free(a);
                return r;
        }
        r = wait_started(a, err, errlen);
        if (r == 0 && ((r = fd_set_nonblock(a->fd, true)) < 0 || (r = fd_set_nonblock(a->status_fd, true)) < 0 ||
                       (r = loop_add(loop, &a->sw, a->status_fd, EPOLLIN, status_event, a)) < 0 ||
                       (r = loop_add(loop, &a->pw, a->pidfd, EPOLLIN, writer_exited, a)) < 0))
                snprintf(err, errlen, "audit: %s", strerror(-r));
        if (r < 0) {
                audit_free(a);
                return r;
        }
        audit_event(a, "server.start", NULL, NULL,
                    json_pack("{s:i, s:s, s:b}", "serverPid", (int)getpid(), "version", sbx_version(), "failClosed",
                              a->fail_closed));
        *ret = a;
        return 0;
}

void audit_close(Audit *a) {
        if (!a || a->fd < 0)
                return;
        audit_event(a, "server.stop", NULL, NULL, NULL);
        a->closing = true;
        if (a->ww.active)
                loop_del(a->loop, &a->ww);
        if (a->sw.active)
                loop_del(a->loop, &a->sw);
        if (a->pw.active)
                loop_del(a->loop, &a->pw);
        /* The loop has stopped: waiting is what shutdown does, within a bound. */
        uint64_t deadline = now_ms() + SBX_AUDIT_CLOSE_MS;
        while (bq_pending(&a->q) > 0 && !a->gone && now_ms() < deadline) {
                struct pollfd p = { .fd = a->fd, .events = POLLOUT };
                if (poll(&p, 1, (int)(deadline - now_ms())) > 0 && (p.revents & (POLLERR | POLLHUP)))
                        break;
                flush(a);
        }
        a->fd = safe_close(a->fd);
        a->gone = true; /* what comes after this is counted, not logged */
        if (bq_pending(&a->q) > 0) {
                log_warn("audit: %llu events were not handed to the writer in time",
                         (unsigned long long)a->queued_lines);
                drop_queue(a);
        }
        /* At EOF the writer writes the rest, reports and exits. */
        while (a->pidfd >= 0 && now_ms() < deadline) {
                struct pollfd p = { .fd = a->pidfd, .events = POLLIN };
                int n = poll(&p, 1, (int)(deadline - now_ms()));
                if (n > 0) {
                        read_reports(a);
                        reap(a);
                } else if (n == 0 || errno != EINTR) {
                        break;
                }
        }
        if (a->pidfd >= 0)
                log_warn("audit: the writer is still writing; it ends on its own once done");
        if (a->st.failed || a->dropped)
                log_warn("audit: %llu events dropped, %llu could not be written",
                         (unsigned long long)a->dropped, (unsigned long long)a->st.failed);
}

Audit *audit_free(Audit *a) {
        if (!a)
                return NULL;
        while (a->procs) {
                AuditProc *ap = a->procs;
                a->procs = ap->next;
                sbx_process_unwatch(&ap->w);
                free(ap);
        }
        if (a->ww.active)
                loop_del(a->loop, &a->ww);
        if (a->sw.active)
                loop_del(a->loop, &a->sw);
        if (a->pw.active)
                loop_del(a->loop, &a->pw);
        safe_close(a->fd);
        safe_close(a->status_fd);
        /* A writer that never started (audit_new failing) is killed; one that runs was told
         * to end by the pipe's EOF and is not waited for again. */
        if (a->pidfd >= 0 && !a->st.started) {
                pidfd_sigkill(a->pidfd);
                (void)waitid(P_PIDFD, (id_t)a->pidfd, &(siginfo_t){ 0 }, WEXITED);
        }
        safe_close(a->pidfd);
        bq_done(&a->q);
        if (a->verify_w.active)
                loop_del(a->loop, &a->verify_w);
        job_kill(&a->verify);
        if (a->verify_done)
                a->verify_done(a->verify_ud, -ECANCELED, "the server is shutting down", NULL);
        json_decref(a->recent);
        free(a->path);
        free(a);
        return NULL;
}

json_t *audit_recent_json(const Audit *a, size_t limit) {
        json_t *out = json_array();
        size_t n = a && a->recent ? json_array_size(a->recent) : 0;
        for (size_t i = n > limit ? n - limit : 0; i < n; i++)
                json_array_append(out, json_array_get(a->recent, i));
        return out;
}

/* In the job: the chain of the log's current file (its rotated ones are not read: the first
 * line's link to them is taken on trust). */
static int verify_job(void *arg, char *err, size_t errlen) {
        char *files[] = { arg };
        AuditVerify v;
        int r = audit_verify(files, 1, &v);
        if (r < 0 || r > 0)
                snprintf(err, errlen, "%s", v.message);
        else
                snprintf(err, errlen, "intact: %llu lines, seq %llu to %llu", (unsigned long long)v.lines,
                         (unsigned long long)v.first_seq, (unsigned long long)v.last_seq);
        return r > 0 ? -EBADMSG : r < 0 ? r : (int)MIN(v.lines, (uint64_t)INT32_MAX);
}

static void verify_ended(Watch *w, uint32_t events) {
        Audit *a = w->data;
        char msg[JOB_ERR_MAX];
        loop_del(a->loop, &a->verify_w);
        int r = job_finish(&a->verify, msg, sizeof msg);
        AuditVerifyFn done = a->verify_done;
        a->verify_done = NULL;
        if (r == -EIO && !msg[0])
                snprintf(msg, sizeof msg, "the check ended without a result");
        done(a->verify_ud, r, msg, a);
}

int audit_verify_start(Audit *a, AuditVerifyFn done, void *ud) {
        if (!a)
                return -ENOTCONN;
        if (a->verify_done)
                return -EBUSY;
        int r = job_start(&a->verify, verify_job, a->path, NULL, 0);
        if (r < 0)
                return r;
        if ((r = loop_add(a->loop, &a->verify_w, a->verify.pidfd, EPOLLIN, verify_ended, a)) < 0) {
                job_kill(&a->verify);
                return r;
        }
        a->verify_done = done;
        a->verify_ud = ud;
        return 0;
}

/* ------------------------------------------------------------------ events */

static json_t *begin_peer(const char *type, const SrvSandbox *sb, long uid, long pid) {
        return json_pack("{s:s, s:o, s:o, s:o}", "type", type, "sandboxId",
                         sb ? json_string(sbx_sandbox_id(sb->sb)) : json_null(), "clientUid",
                         uid >= 0 ? json_integer(uid) : json_null(), "clientPid",
                         pid >= 0 ? json_integer(pid) : json_null());
}

json_t *audit_begin(Audit *a, const char *type, const SrvSandbox *sb, const Conn *c) {
        if (!a)
                return NULL;
        json_t *ev = begin_peer(type, sb, c ? (long)conn_uid(c) : -1, c ? (long)conn_pid(c) : -1);
        /* The console's connections are the daemon's own (its uid and pid): say whose act it was. */
        if (ev && c && conn_operator(c))
                json_object_set_new(ev, "via", json_string("console"));
        return ev;
}

void audit_finish(Audit *a, json_t *ev, json_t *fields) {
        if (!a || !ev) {
                json_decref(ev);
                json_decref(fields);
                return;
        }
        /* ts first: the line reads in time order at a glance. */
        char ts[AUDIT_TS_SIZE];
        audit_ts(wall_ms(), ts);
        json_t *line = json_pack("{s:s}", "ts", ts);
        if (!line || json_object_update(line, ev) < 0 || (fields && json_object_update(line, fields) < 0)) {
                json_decref(line);
                line = NULL;
        }
        json_decref(ev);
        json_decref(fields);
        if (!line) {
                a->events++;
                a->dropped++;
                a->untold++;
                return;
        }
        /* Redacted as the sandbox's output is: its secrets' values and the key shapes. */
        const char *sid = json_string_value(json_object_get(line, "sandboxId"));
        if (a->redact && sid)
                redact_strings(a, sid, line);
        enqueue(a, line);
}

void audit_event_peer(Audit *a, const char *type, const SrvSandbox *sb, long uid, long pid, json_t *fields) {
        if (!a) {
                json_decref(fields);
                return;
        }
        audit_finish(a, begin_peer(type, sb, uid, pid), fields);
}

void audit_event(Audit *a, const char *type, const SrvSandbox *sb, const Conn *c, json_t *fields) {
        if (!a) {
                json_decref(fields);
                return;
        }
        audit_finish(a, audit_begin(a, type, sb, c), fields);
}

void audit_flush_suppressed(Audit *a, SrvSandbox *sb) {
        if (a && sb && sb->denied_suppressed) {
                audit_event(a, "network.denied.suppressed", sb, NULL,
                            json_pack("{s:I}", "count", (json_int_t)sb->denied_suppressed));
                sb->denied_suppressed = 0;
        }
}

void audit_event_limited(Audit *a, const char *type, SrvSandbox *sb, json_t *fields) {
        if (!a) {
                json_decref(fields);
                return;
        }
        uint64_t now = now_ns() / 1000000, full = (uint64_t)SBX_AUDIT_DENIED_BURST * 1000;
        if (!sb->denied_at_ms)
                sb->denied_tokens = full;
        else
                sb->denied_tokens = MIN(full, sb->denied_tokens + (now - sb->denied_at_ms) * SBX_AUDIT_DENIED_PER_S);
        sb->denied_at_ms = now;
        if (sb->denied_tokens < 1000) {
                sb->denied_suppressed++;
                json_decref(fields);
                return;
        }
        sb->denied_tokens -= 1000;
        audit_flush_suppressed(a, sb);
        audit_event(a, type, sb, NULL, fields);
}

json_t *audit_outcome(int rr, json_t *fields) {
        if (rr < 0 && fields) {
                const char *name = strerrorname_np(-rr);
                json_object_set_new(fields, "error", json_string(name ? name : "EIO"));
        }
        return fields;
}

/* command, redacted, cut at SBX_AUDIT_COMMAND_BYTES on a character boundary; past it, its
 * length and sha256 (of the redacted text) say which command it was. */
static void add_command(Audit *a, const SrvSandbox *sb, json_t *ev, const char *command, size_t len) {
        /* Redacted whole before it is cut and hashed: a cut must not leave a secret's head,
         * nor a hash of the raw text let a reader test guesses of it. */
        _cleanup_free_ char *red = NULL;
        size_t rl = 0;
        if (a->redact && sb && (red = a->redact(a->redact_data, sbx_sandbox_id(sb->sb), command, len, &rl))) {
                command = red;
                len = rl;
        }
        size_t keep = len;
        if (keep > SBX_AUDIT_COMMAND_BYTES) {
                keep = SBX_AUDIT_COMMAND_BYTES;
                while (keep > 0 && ((unsigned char)command[keep] & 0xC0) == 0x80)
                        keep--;
        }
        json_object_set_new(ev, "command", json_stringn(command, keep));
        if (keep < len) {
                struct sha256_ctx ctx;
                char hex[SHA256_HEX_SIZE];
                sha256_init(&ctx);
                sha256_feed(&ctx, command, len);
                sha256_digest_hex(&ctx, hex);
                json_object_set_new(ev, "commandBytes", json_integer((json_int_t)len));
                json_object_set_new(ev, "commandSha256", json_string(hex));
        }
}

json_t *audit_run_begin(Audit *a, const SrvSandbox *sb, const Conn *c, const char *session, const char *command,
                        size_t len) {
        json_t *ev = audit_begin(a, "run.end", sb, c);
        if (!ev)
                return NULL;
        json_object_set_new(ev, "session", json_string(session));
        add_command(a, sb, ev, command, len);
        return ev;
}

void audit_run_end(Audit *a, json_t *ev, const SbxResult *res) {
        if (!ev)
                return audit_finish(a, NULL, NULL);
        json_t *f = json_pack("{s:i, s:I, s:o, s:b}", "exitCode", res->exit_code, "durationMs",
                              (json_int_t)(res->exec_time_us / 1000), "errorClass",
                              res->error_class != SBX_ERROR_NONE ? json_string(sbx_error_class_name(res->error_class))
                                                                 : json_null(),
                              "truncated", res->stdout_truncated || res->stderr_truncated);
        audit_finish(a, ev, f);
}

static void proc_forget(AuditProc *ap) {
        Audit *a = ap->audit;
        if (ap->prev)
                ap->prev->next = ap->next;
        else
                a->procs = ap->next;
        if (ap->next)
                ap->next->prev = ap->prev;
        free(ap);
}

static void proc_ended(SbxProcessWatcher *w) {
        AuditProc *ap = (AuditProc *)w;
        Audit *a = ap->audit;
        SbxProcessInfo i;
        sbx_process_info(w->process, &i);
        static const char *const status[] = { "running", "exited", "killed", "timeout" };
        const char *sig = i.signal > 0 ? sigabbrev_np(i.signal) : NULL;
        json_t *ev = begin_peer("process.exit", NULL, -1, -1);
        if (ev)
                json_object_set_new(ev, "sandboxId", json_string(ap->sandbox_id));
        audit_finish(a, ev,
                     json_pack("{s:s, s:s, s:o, s:o}", "processId", ap->process_id, "status",
                               i.status <= SBX_PROCESS_TIMEOUT ? status[i.status] : "unknown", "exitCode",
                               i.exit_code >= 0 ? json_integer(i.exit_code) : json_null(), "signal",
                               sig ? json_string(sig) : json_null()));
        sbx_process_unwatch(w);
        proc_forget(ap);
}

/* The process goes before it ended (its sandbox freed): no exit to log. */
static void proc_freeing(SbxProcessWatcher *w) { proc_forget((AuditProc *)w); }

json_t *audit_process_begin(Audit *a, const SrvSandbox *sb, const Conn *c, const char *command, size_t len) {
        json_t *ev = audit_begin(a, "process.start", sb, c);
        if (ev)
                add_command(a, sb, ev, command, len);
        return ev;
}

json_t *audit_op_fields(const SbxOpResult *res) {
        const char *name = res->error ? strerrorname_np(-res->error) : NULL;
        if (res->error)
                return json_pack("{s:s, s:s}", "error", name ? name : "EIO", "message", res->message ? res->message : "");
        return res->data ? json_pack("{s:I}", "bytes", (json_int_t)res->len) : NULL;
}

void audit_process_started(Audit *a, json_t *ev, SbxProcess *p, int error) {
        if (!a || !ev || !p) {
                audit_finish(a, ev, audit_outcome(error < 0 ? error : -ECHILD, json_object()));
                return;
        }
        SbxProcessInfo i;
        sbx_process_info(p, &i);
        char id[HANDLER_PROCESS_ID_MAX];
        audit_finish(a, ev, json_pack("{s:s, s:i}", "processId", handler_process_id(i.id, id), "processPid", i.pid));
        AuditProc *ap = calloc(1, sizeof *ap);
        if (!ap)
                return;
        ap->audit = a;
        snprintf(ap->sandbox_id, sizeof ap->sandbox_id, "%s", sbx_sandbox_id(sbx_process_sandbox(p)));
        snprintf(ap->process_id, sizeof ap->process_id, "%s", id);
        ap->w.ended = proc_ended;
        ap->w.freeing = proc_freeing;
        ap->next = a->procs;
        if (a->procs)
                a->procs->prev = ap;
        a->procs = ap;
        sbx_process_watch(p, &ap->w);
}

/* ------------------------------------------------------------------ health, fail-closed */

static const char *lag(const Audit *a) {
        if (a->gone)
                return "its writer process has exited";
        if (a->st.failing)
                return a->st.detail[0] ? a->st.detail : "writes fail";
        if (a->untold > 0)
                return "events were dropped (the writer is behind)";
        return NULL;
}

int audit_check_run(const Audit *a, RpcError *e) {
        const char *why = a && a->fail_closed ? lag(a) : NULL;
        if (!why)
                return 0;
        return rpc_fail(e, RPC_WORKER_UNAVAILABLE,
                        "WORKER_UNAVAILABLE: the audit log is not keeping up (%s); with --audit-fail-closed no "
                        "command runs until it does",
                        why);
}

json_t *audit_health_json(const Audit *a) {
        if (!a)
                return json_pack("{s:b}", "enabled", 0);
        const char *why = lag(a);
        return json_pack("{s:b, s:s, s:b, s:b, s:b, s:o, s:I, s:I, s:I, s:I, s:I, s:b, s:o}", "enabled", 1, "path",
                         a->path, "failClosed", a->fail_closed, "refusing", a->fail_closed && why, "writerAlive",
                         !a->gone, "writerPid", a->gone ? json_null() : json_integer(a->pid), "events",
                         (json_int_t)a->events, "written", (json_int_t)a->st.written, "dropped",
                         (json_int_t)a->dropped, "failed", (json_int_t)a->st.failed, "queuedBytes",
                         (json_int_t)bq_pending(&a->q), "failing", (bool)a->st.failing, "error",
                         why ? json_string(why) : json_null());
}
