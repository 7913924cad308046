/* SPDX-License-Identifier: MIT */
/* Processes: commands that run on their own beside a session's runs.
 *
 * Starting one is a run of its session (run_detach()): the worker forks the process from the
 * session's state and exits at once, so the session goes on unchanged and the process is an
 * orphan of the sandbox's pid 1, which reaps it and reports its wait status (INIT_EXITED, fed
 * in by sandbox.c). The worker's command cgroup becomes the process's own: kill and timeout
 * end its whole tree with cgroup.kill, and its cgroup.events says when nothing of it is left.
 * Its output (two pipes, or a terminal's master) goes into a log of its own, bounded: the
 * daemon always reads, so a writer never blocks and never gets SIGPIPE, and the newest
 * SBX_PROCESS_LOG_BYTES stay, addressed by cursors (offsets into everything it wrote).
 *
 * What a run leaves running becomes a process too (origin leftover), with the run's pipes and
 * cgroup; it ends when its cgroup is empty, with no status to tell. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <sys/ioctl.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/list.h"
#include "base/log.h"
#include "base/redact.h"
#include "base/util.h"
#include "process/process.h"
#include "session/context.h"
#include "session/run.h"
#include "session/sandbox.h"

typedef struct LogChunk {
        struct LogChunk *next;
        uint64_t start; /* cursor of data[0] */
        uint32_t len, cap;
        SbxStream stream;
        uint8_t data[];
} LogChunk;

/* Invariant: chunks are contiguous (each starts where the one before ends), `end` is where
 * the last ends, `held` counts their allocations and stays within SBX_PROCESS_LOG_BYTES. */
typedef struct ProcLog {
        LogChunk *head, *tail;
        LogChunk **tail_ref; /* the pointer that holds tail: &head, or the one before's next */
        uint64_t end;
        size_t held;
} ProcLog;

typedef struct KillWaiter {
        struct KillWaiter *next;
        SbxKillDoneFn done;
        void *ud;
} KillWaiter;

struct SbxProcess {
        SbxProcess *next, *prev; /* core->procs, newest first */
        SbxProcess *id_next;     /* its chain of SandboxHost.procs_by_id */
        SandboxCore *core;
        uint64_t id;
        pid_t pid;
        char *command, *label;
        bool started, ended, leftover, pty, kill_requested, timed_out, status_known, freeing;
        bool pinned; /* keeps its sandbox unparked (sandbox_pin()) until it ends, all of it */
        int wstatus;
        uint64_t started_ms, ended_ms;
        int out_fd, err_fd; /* a terminal's master is out_fd (and in_fd, a dup) */
        Watch out_w, err_w;
        int in_fd;
        Watch in_w;
        Buf in_buf;         /* queued for stdin, written from in_off on */
        size_t in_off;
        bool stdin_open, stdin_closing;
        int cg, cg_events;  /* the process's command cgroup, -1 once empty and removed */
        char cg_name[24];
        Watch cg_w;
        int timer_fd;
        Watch timer_w;
        uint64_t deadline, kill_at; /* monotonic ns, 0: none */
        uint64_t timeout_ms;        /* from the moment it runs (a start may wait in its queue) */
        ProcLog log;
        RedactStream rs[2]; /* stdout, stderr: the log holds only redacted output */
        SbxProcessWatcher *watchers;
        SbxProcessWatcher *iter_next; /* the next watcher a notification will reach */
        KillWaiter *kills;
        RunDetach detach;
        SbxProcessStartFn start_done;
        void *start_ud;
};

static uint64_t next_id;

/* ---------------------------------------------------------------- the log */

static void log_append(ProcLog *l, SbxStream stream, const uint8_t *d, size_t n) {
        LogChunk *t = l->tail;
        if (t && t->stream == stream && t->cap - t->len >= n) {
                memcpy(t->data + t->len, d, n);
                t->len += (uint32_t)n;
                l->end += n;
                return;
        }
        /* The last chunk is done: it gives back the room it will never use, so output that
         * switches streams often (a line each) costs its bytes, not a chunk's room each. */
        if (t && t->cap > t->len) {
                size_t unused = t->cap - t->len;
                LogChunk *shrunk = realloc(t, sizeof *t + t->len);
                if (shrunk) {
                        l->held -= unused;
                        shrunk->cap = shrunk->len;
                        *l->tail_ref = shrunk;
                        l->tail = t = shrunk;
                }
        }
        size_t cap = MAX(n, (size_t)SBX_PROCESS_LOG_CHUNK);
        LogChunk *c = malloc(sizeof *c + cap);
        if (!c) {
                /* Out of memory: the bytes are counted as written, and so as dropped. */
                l->end += n;
                return;
        }
        *c = (LogChunk){ .start = l->end, .len = (uint32_t)n, .cap = (uint32_t)cap, .stream = stream };
        memcpy(c->data, d, n);
        l->tail_ref = t ? &t->next : &l->head;
        *l->tail_ref = c;
        l->tail = c;
        l->end += n;
        l->held += sizeof *c + cap;
        while (l->held > SBX_PROCESS_LOG_BYTES && l->head != l->tail) {
                LogChunk *h = l->head;
                l->head = h->next;
                if (l->tail_ref == &h->next)
                        l->tail_ref = &l->head;
                l->held -= sizeof *h + h->cap;
                free(h);
        }
}

static void log_done(ProcLog *l) {
        while (l->head) {
                LogChunk *h = l->head;
                l->head = h->next;
                free(h);
        }
        l->tail = NULL;
        l->held = 0;
}

uint64_t sbx_process_read_log(const SbxProcess *p, uint64_t cursor, size_t max, SbxLogFn fn, void *ud,
                              uint64_t *ret_dropped) {
        const ProcLog *l = &p->log;
        uint64_t oldest = l->head ? l->head->start : l->end;
        if (ret_dropped)
                *ret_dropped = cursor < oldest ? oldest - cursor : 0;
        if (cursor < oldest)
                cursor = oldest;
        /* A cursor past the end is where the caller wants to start once the bytes come. */
        for (const LogChunk *c = l->head; c && max > 0; c = c->next) {
                if (c->start + c->len <= cursor)
                        continue;
                size_t off = (size_t)(cursor - c->start), n = MIN((size_t)c->len - off, max);
                cursor += n;
                max -= n;
                fn(ud, c->stream, c->data + off, n, cursor);
        }
        return cursor;
}

/* ---------------------------------------------------------------- watchers */

void sbx_process_watch(SbxProcess *p, SbxProcessWatcher *w) {
        w->process = p;
        w->next = p->watchers;
        p->watchers = w;
}

void sbx_process_unwatch(SbxProcessWatcher *w) {
        SbxProcess *p = w->process;
        if (!p)
                return;
        if (p->iter_next == w)
                p->iter_next = w->next;
        for (SbxProcessWatcher **pp = &p->watchers; *pp; pp = &(*pp)->next)
                if (*pp == w) {
                        *pp = w->next;
                        break;
                }
        w->process = NULL;
        w->next = NULL;
}

typedef enum { TELL_OUTPUT, TELL_ENDED, TELL_FREEING } Tell;

/* Tells every watcher; each may unwatch itself or others meanwhile. */
static void tell(SbxProcess *p, Tell what, SbxStream st, const uint8_t *d, size_t n) {
        for (SbxProcessWatcher *w = p->watchers; w; w = p->iter_next) {
                p->iter_next = w->next;
                if (what == TELL_FREEING) {
                        sbx_process_unwatch(w);
                        if (w->freeing)
                                w->freeing(w);
                } else if (what == TELL_ENDED) {
                        if (w->ended)
                                w->ended(w);
                } else if (w->output) {
                        w->output(w, st, d, n, p->log.end);
                }
        }
        p->iter_next = NULL;
}

/* ---------------------------------------------------------------- output */

/* Output into the log and to the watchers, through the stream's redactor when the sandbox
 * has one: the log and its cursors count redacted bytes. flush: the stream ended. */
static void take_output(SbxProcess *p, SbxStream st, const uint8_t *d, size_t n, bool flush) {
        static Buf red = { .limit = SIZE_MAX }; /* one thread: one scratch buffer, kept */
        if (p->core->redact) {
                RedactStream *rs = &p->rs[st == SBX_STDOUT ? 0 : 1];
                red.len = 0;
                (void)(flush ? redact_flush(rs, false, &red) : redact_feed(rs, d, n, &red));
                d = red.data;
                n = red.len;
        }
        if (n == 0)
                return;
        log_append(&p->log, st, d, n);
        tell(p, TELL_OUTPUT, st, d, n);
}

static void close_out(SbxProcess *p, bool is_out) {
        Loop *l = p->core->loop;
        take_output(p, is_out ? SBX_STDOUT : SBX_STDERR, NULL, 0, true);
        loop_del(l, is_out ? &p->out_w : &p->err_w);
        if (is_out)
                p->out_fd = safe_close(p->out_fd);
        else
                p->err_fd = safe_close(p->err_fd);
}

/* Reads up to budget bytes of one output into the log; false at EOF (or a terminal's EIO,
 * which is how its master says every slave is closed). */
static bool read_output(SbxProcess *p, bool is_out, size_t budget) {
        static uint8_t buf[SBX_PROCESS_READ_BYTES]; /* one thread: one scratch buffer */
        int fd = is_out ? p->out_fd : p->err_fd;
        SbxStream st = is_out ? SBX_STDOUT : SBX_STDERR;
        while (fd >= 0 && budget > 0) {
                ssize_t n = read_ready(fd, buf, MIN(budget, sizeof buf));
                if (n == -EAGAIN)
                        return true;
                if (n <= 0)
                        return false;
                take_output(p, st, buf, (size_t)n, false);
                budget -= MIN(budget, (size_t)n);
        }
        return true;
}

static void drain(SbxProcess *p, bool is_out, size_t budget) {
        if ((is_out ? p->out_fd : p->err_fd) >= 0 && !read_output(p, is_out, budget))
                close_out(p, is_out);
}

static void output_event(Watch *w, uint32_t events) {
        SbxProcess *p = w->data;
        /* Bounded per wakeup: a flooding process must not starve the loop. */
        drain(p, w == &p->out_w, 4 * SBX_PROCESS_READ_BYTES);
}

/* ---------------------------------------------------------------- stdin */

static void close_stdin_now(SbxProcess *p) {
        loop_del(p->core->loop, &p->in_w);
        p->in_fd = safe_close(p->in_fd);
        p->stdin_open = false;
        buf_done(&p->in_buf);
        buf_init(&p->in_buf, SBX_PROCESS_STDIN_BYTES);
        p->in_off = 0;
}

static void stdin_event(Watch *w, uint32_t events);

/* Writes what is queued; watches for room while some is left. */
static void flush_stdin(SbxProcess *p) {
        while (p->in_off < p->in_buf.len) {
                ssize_t n = write(p->in_fd, p->in_buf.data + p->in_off, p->in_buf.len - p->in_off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN) {
                        if (!p->in_w.active &&
                            loop_add(p->core->loop, &p->in_w, p->in_fd, EPOLLOUT, stdin_event, p) < 0)
                                close_stdin_now(p);
                        return;
                }
                if (n < 0) {
                        /* EPIPE: nothing reads it any more. */
                        close_stdin_now(p);
                        return;
                }
                p->in_off += (size_t)n;
        }
        p->in_buf.len = 0;
        p->in_off = 0;
        /* Watched only while something waits to be written: a watch asking for nothing still
         * hears EPOLLHUP and EPOLLERR, which a pty whose other side closed, or a pipe whose
         * reader exited, reports without end. */
        loop_del(p->core->loop, &p->in_w);
        if (p->stdin_closing)
                close_stdin_now(p);
}

static void stdin_event(Watch *w, uint32_t events) { flush_stdin(w->data); }

int sbx_process_write(SbxProcess *p, const void *data, size_t len) {
        if (!p->stdin_open || p->stdin_closing)
                return -EPIPE;
        if (p->in_off > 0 && p->in_off == p->in_buf.len) {
                p->in_buf.len = 0;
                p->in_off = 0;
        }
        if (p->in_buf.len - p->in_off + len > SBX_PROCESS_STDIN_BYTES)
                return -EAGAIN;
        if (p->in_off > 0) {
                memmove(p->in_buf.data, p->in_buf.data + p->in_off, p->in_buf.len - p->in_off);
                p->in_buf.len -= p->in_off;
                p->in_off = 0;
        }
        if (buf_append(&p->in_buf, data, len) < 0)
                return -ENOMEM;
        flush_stdin(p);
        return 0;
}

int sbx_process_close_stdin(SbxProcess *p) {
        if (p->pty)
                return -ENOTTY;
        if (!p->stdin_open || p->stdin_closing)
                return -EPIPE;
        p->stdin_closing = true;
        flush_stdin(p);
        return 0;
}

int sbx_process_resize(SbxProcess *p, uint16_t cols, uint16_t rows) {
        if (!p->pty)
                return -ENOTTY;
        if (p->ended || p->in_fd < 0)
                return -ESRCH;
        struct winsize ws = { .ws_row = rows, .ws_col = cols };
        /* The kernel sends SIGWINCH to the terminal's foreground process group. */
        return ioctl(p->in_fd, TIOCSWINSZ, &ws) < 0 ? negerrno() : 0;
}

/* ---------------------------------------------------------------- end, kill, timeout */

static void timer_event(Watch *w, uint32_t events);

static void arm_timer(SbxProcess *p) {
        uint64_t due = 0;
        if (p->deadline && !p->ended)
                due = p->deadline;
        if (p->kill_at && (!due || p->kill_at < due))
                due = p->kill_at;
        if (!due) {
                if (p->timer_fd >= 0)
                        (void)timerfd_arm_ms(p->timer_fd, 0);
                return;
        }
        /* Made on first need: most processes never have a timeout or a kill in progress, and a
         * sandbox may hold many (their fds count). */
        if (p->timer_fd < 0) {
                p->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
                if (p->timer_fd < 0 || loop_add(p->core->loop, &p->timer_w, p->timer_fd, EPOLLIN, timer_event, p) < 0) {
                        log_warn("process p%llu: no timer: its timeout or kill grace will not fire",
                                 (unsigned long long)p->id);
                        p->timer_fd = safe_close(p->timer_fd);
                        return;
                }
        }
        uint64_t now = now_ns();
        (void)timerfd_arm_ms(p->timer_fd, due > now ? (due - now + 999999) / 1000000 : 1);
}

/* Answers the kills once nothing of the process is left and its status is final. */
static void check_kills(SbxProcess *p) {
        if (!p->freeing && (!p->ended || p->cg >= 0))
                return;
        while (p->kills) {
                KillWaiter *k = p->kills;
                p->kills = k->next;
                k->done(k->ud, p);
                free(k);
        }
}

static void unpin(SbxProcess *p) {
        if (p->pinned)
                sandbox_unpin(p->core->self);
        p->pinned = false;
}

static void cgroup_gone(SbxProcess *p) {
        Loop *l = p->core->loop;
        loop_del(l, &p->cg_w);
        p->cg_events = safe_close(p->cg_events);
        p->cg = safe_close(p->cg);
        (void)cgroup_child_remove(&p->core->box.cg, p->cg_name);
        p->kill_at = 0;
        arm_timer(p);
        if (p->ended)
                unpin(p);
}

static void proc_end(SbxProcess *p) {
        if (p->ended)
                return;
        /* Everything it wrote before it ended is in the pipes (a full pipe at most): into the
         * log before the end is told (bounded: what it left running may keep writing). */
        drain(p, true, 2 * SBX_PIPE_BYTES);
        drain(p, false, 2 * SBX_PIPE_BYTES);
        p->ended = true;
        p->ended_ms = wall_ms();
        p->deadline = 0;
        arm_timer(p);
        tell(p, TELL_ENDED, 0, NULL, 0);
        check_kills(p);
        if (p->cg < 0)
                unpin(p);
}

static void cgroup_event(Watch *w, uint32_t events) {
        SbxProcess *p = w->data;
        if (p->cg < 0 || (p->cg_events >= 0 ? cgroup_events_populated(p->cg_events) : cgroup_populated(p->cg)) != 0)
                return;
        cgroup_gone(p);
        /* A leftover has no status to wait for: it ends when nothing of it is left. */
        if (p->leftover)
                proc_end(p);
        check_kills(p);
}

static void kill_tree(SbxProcess *p) {
        if (p->cg >= 0)
                (void)cgroup_kill(p->cg);
}

static void timer_event(Watch *w, uint32_t events) {
        SbxProcess *p = w->data;
        uint64_t x, now = now_ns();
        (void)!read(p->timer_fd, &x, sizeof x);
        if (p->deadline && now >= p->deadline && !p->ended) {
                p->timed_out = true;
                p->deadline = 0;
                kill_tree(p);
        }
        if (p->kill_at && now >= p->kill_at) {
                p->kill_at = 0;
                kill_tree(p);
        }
        arm_timer(p);
}

int sbx_process_kill(SbxProcess *p, int sig, uint64_t grace_ms, SbxKillDoneFn done, void *ud) {
        if (!p->started || (p->ended && p->cg < 0))
                return -ESRCH;
        if (sig <= 0 || sig >= NSIG)
                return -EINVAL;
        KillWaiter *k = calloc(1, sizeof *k);
        if (!k)
                return -ENOMEM;
        k->done = done;
        k->ud = ud;
        k->next = p->kills;
        p->kills = k;
        if (!p->ended)
                p->kill_requested = true;
        if (sig == SIGKILL || grace_ms == 0) {
                kill_tree(p);
        } else {
                (void)cgroup_signal(p->cg, sig);
                uint64_t at = now_ns() + grace_ms * 1000000ULL;
                if (!p->kill_at || at < p->kill_at)
                        p->kill_at = at;
                arm_timer(p);
        }
        return 0;
}

/* ---------------------------------------------------------------- life */

static SbxProcess *proc_new(SandboxCore *core, const char *command, size_t command_len, const char *label) {
        SbxProcess *p = calloc(1, sizeof *p);
        if (!p)
                return NULL;
        p->core = core;
        p->out_fd = p->err_fd = p->in_fd = p->cg = p->cg_events = p->timer_fd = -1;
        buf_init(&p->in_buf, SBX_PROCESS_STDIN_BYTES);
        redact_stream_init(&p->rs[0], core->redact);
        redact_stream_init(&p->rs[1], core->redact);
        /* The command is shown (process.list): redacted like its output. */
        size_t cl = 0;
        char *shown = NULL;
        if (redact_text(core->redact, command, command_len, &shown, &cl) == 0 && cl > SBX_PROCESS_COMMAND_SHOWN) {
                cl = SBX_PROCESS_COMMAND_SHOWN;
                shown[cl] = 0;
        }
        p->command = shown;
        /* The label is shown too: a secret put into it is redacted as in the command. */
        size_t ll = 0;
        if (label && redact_text(core->redact, label, strnlen(label, SBX_PROCESS_LABEL_BYTES), &p->label, &ll) < 0)
                p->label = NULL;
        if (!p->command || (label && !p->label)) {
                free(p->command);
                free(p->label);
                free(p);
                return NULL;
        }
        p->id = ++next_id;
        p->started_ms = wall_ms();
        return p;
}

/* ---------------------------------------------------------------- the host's index by id */

static SbxProcess **id_chain(SandboxHost *h, uint64_t id) {
        return &h->procs_by_id[(id * 0x9E3779B97F4A7C15ULL >> 32) & (h->proc_buckets - 1)];
}

/* Puts p in the host's index, doubling it when full (a table that cannot grow stays usable,
 * its chains only longer). Returns false when there is no table at all. */
static bool index_add(SandboxHost *h, SbxProcess *p) {
        if (!h->procs_by_id || h->n_procs >= h->proc_buckets) {
                size_t nb = h->procs_by_id ? h->proc_buckets * 2 : 256;
                SbxProcess **t = calloc(nb, sizeof *t);
                if (t) {
                        SbxProcess **old = h->procs_by_id;
                        size_t ob = h->proc_buckets;
                        h->procs_by_id = t;
                        h->proc_buckets = nb;
                        for (size_t i = 0; i < ob; i++)
                                for (SbxProcess *q = old[i], *next; q; q = next) {
                                        next = q->id_next;
                                        SbxProcess **c = id_chain(h, q->id);
                                        q->id_next = *c;
                                        *c = q;
                                }
                        free(old);
                } else if (!h->procs_by_id) {
                        return false;
                }
        }
        SbxProcess **c = id_chain(h, p->id);
        p->id_next = *c;
        *c = p;
        h->n_procs++;
        return true;
}

static void index_del(SandboxHost *h, SbxProcess *p) {
        if (!h->procs_by_id)
                return;
        for (SbxProcess **pp = id_chain(h, p->id); *pp; pp = &(*pp)->id_next)
                if (*pp == p) {
                        *pp = p->id_next;
                        h->n_procs--;
                        return;
                }
}

static SbxProcess *process_by_id(SandboxHost *h, uint64_t id) {
        for (SbxProcess *p = h->procs_by_id ? *id_chain(h, id) : NULL; p; p = p->id_next)
                if (p->id == id)
                        return p->started ? p : NULL;
        return NULL;
}

static void link_proc(SandboxCore *core, SbxProcess *p) {
        sandbox_pin(core->self);
        p->pinned = true;
        TLIST_PUSH_FRONT(core->procs, core->procs_tail, p, next, prev);
        core->n_procs++;
        /* Without a table (out of memory at the first process) sbx_sandbox_process still
         * finds it; only the host-wide lookup does not. */
        (void)index_add(sandbox_host(core->self), p);
}

static void unlink_proc(SandboxCore *core, SbxProcess *p) {
        unpin(p);
        TLIST_UNLINK(core->procs, core->procs_tail, p, next, prev);
        core->n_procs--;
        index_del(sandbox_host(core->self), p);
}

/* Frees p. What it left running, if the sandbox lives on, goes to the background log. */
static void proc_free(SbxProcess *p, bool sandbox_dying) {
        SandboxCore *core = p->core;
        Loop *l = core->loop;
        p->freeing = true;
        check_kills(p);
        tell(p, TELL_FREEING, 0, NULL, 0);
        unlink_proc(core, p);
        loop_del(l, &p->out_w);
        loop_del(l, &p->err_w);
        loop_del(l, &p->in_w);
        loop_del(l, &p->cg_w);
        loop_del(l, &p->timer_w);
        if (!sandbox_dying && p->out_fd >= 0 && !p->pty)
                bglog_adopt_pipe(&core->bg, TAKE_FD(p->out_fd));
        if (!sandbox_dying && p->err_fd >= 0)
                bglog_adopt_pipe(&core->bg, TAKE_FD(p->err_fd));
        if (!sandbox_dying && p->cg >= 0)
                bglog_retire_cgroup(&core->bg, TAKE_FD(p->cg), p->cg_name);
        safe_close(p->out_fd);
        safe_close(p->err_fd);
        safe_close(p->in_fd);
        safe_close(p->cg);
        safe_close(p->cg_events);
        safe_close(p->timer_fd);
        buf_done(&p->in_buf);
        log_done(&p->log);
        redact_stream_done(&p->rs[0]);
        redact_stream_done(&p->rs[1]);
        free(p->command);
        free(p->label);
        free(p);
}

/* Room for one more process: the oldest ended one is forgotten when the sandbox is full.
 * Returns 0 or -EUSERS when every tracked process still runs. */
static int make_room(SandboxCore *core) {
        if (core->n_procs < SBX_MAX_PROCESSES)
                return 0;
        for (SbxProcess *p = core->procs_tail; p; p = p->prev)
                if (p->ended && p->started) {
                        proc_free(p, false);
                        return 0;
                }
        return -EUSERS;
}

/* Watches its cgroup (the process's, from now on) for emptiness. */
static void take_cgroup(SbxProcess *p, int cg, const char *cg_name) {
        p->cg = cg;
        snprintf(p->cg_name, sizeof p->cg_name, "%s", cg_name);
        p->cg_events = cgroup_events_open(cg);
        if (p->cg_events < 0 ||
            loop_add(p->core->loop, &p->cg_w, p->cg_events, EPOLLPRI, cgroup_event, p) < 0)
                log_warn("process p%llu: cannot watch its cgroup", (unsigned long long)p->id);
}

static int watch_output(SbxProcess *p) {
        Loop *l = p->core->loop;
        int r;
        if (p->out_fd >= 0 && (r = loop_add(l, &p->out_w, p->out_fd, EPOLLIN, output_event, p)) < 0)
                return r;
        if (p->err_fd >= 0 && (r = loop_add(l, &p->err_w, p->err_fd, EPOLLIN, output_event, p)) < 0)
                return r;
        return 0;
}

static void on_detached(RunDetach *d, pid_t pid, int cg, const char *cg_name) {
        SbxProcess *p = container_of(d, SbxProcess, detach);
        p->pid = pid;
        p->started = true;
        p->started_ms = wall_ms();
        p->deadline = p->timeout_ms ? now_ns() + p->timeout_ms * 1000000ULL : 0;
        take_cgroup(p, cg, cg_name);
        (void)box_watch_pid(&p->core->box, pid);
        arm_timer(p);
}

static void start_done(void *ud, const SbxResult *res) {
        SbxProcess *p = ud;
        SbxProcessStartFn done = p->start_done;
        void *dud = p->start_ud;
        if (p->started) {
                done(dud, p, 0);
                return;
        }
        int err = res->error_class == SBX_ERROR_TIMEOUT ? -ETIMEDOUT
                  : res->error_class == SBX_ERROR_CANCELLED ? -ECANCELED : -ECHILD;
        proc_free(p, false);
        done(dud, NULL, err);
}

/* Opens a terminal of the sandbox's own devpts: *master (nonblocking) and *slave. */
static int open_pty(SandboxCore *core, uint16_t cols, uint16_t rows, int *master, int *slave) {
        if (core->box.root_fd < 0)
                return -EAGAIN;
        /* Resolved inside the sandbox's root with no symlink followed, and checked to be a
         * devpts: whatever the sandbox did to its /dev, the terminal is one of its own. */
        struct open_how how = { .flags = O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC,
                                .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
        /* Process mode has no devpts of its own: the host's. */
        _cleanup_close_ int m = core->box.process ? open("/dev/ptmx", (int)how.flags)
                                                  : (int)syscall(SYS_openat2, core->box.root_fd, "dev/pts/ptmx", &how, sizeof how);
        struct statfs sf;
        if (m < 0)
                return negerrno();
        if (fstatfs(m, &sf) < 0 || sf.f_type != DEVPTS_SUPER_MAGIC)
                return -ENOTTY;
        int unlock = 0;
        if (ioctl(m, TIOCSPTLCK, &unlock) < 0)
                return negerrno();
        struct winsize ws = { .ws_row = rows ? rows : 24, .ws_col = cols ? cols : 80 };
        (void)ioctl(m, TIOCSWINSZ, &ws);
        int s = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (s < 0)
                return negerrno();
        *master = TAKE_FD(m);
        *slave = s;
        return 0;
}

int sbx_process_start(SbxSession *s, const SbxProcessOptions *o, SbxProcessStartFn done, void *ud) {
        SandboxCore *core = s->core;
        if (!o || (!o->command && o->command_len) || !done || o->timeout_ms > SBX_MAX_TIMEOUT_MS)
                return -EINVAL;
        if (core->dying)
                return -ESRCH;
        int r = make_room(core);
        if (r < 0)
                return r;
        SbxProcess *p = proc_new(core, o->command ? o->command : "", o->command_len, o->label);
        if (!p)
                return -ENOMEM;
        int fds[3] = { -1, -1, -1 };
        p->pty = o->pty;
        if (o->pty) {
                r = open_pty(core, o->cols, o->rows, &p->out_fd, &fds[0]);
                if (r >= 0) {
                        fds[1] = fcntl(fds[0], F_DUPFD_CLOEXEC, 3);
                        fds[2] = fcntl(fds[0], F_DUPFD_CLOEXEC, 3);
                        p->in_fd = fcntl(p->out_fd, F_DUPFD_CLOEXEC, 3);
                        if (fds[1] < 0 || fds[2] < 0 || p->in_fd < 0)
                                r = -EMFILE;
                }
        } else {
                r = run_make_pipe(&p->out_fd, &fds[1]);
                if (r >= 0)
                        r = run_make_pipe(&p->err_fd, &fds[2]);
                if (r >= 0 && o->stdin_pipe)
                        r = run_make_pipe(&fds[0], &p->in_fd);
                else if (r >= 0 && (fds[0] = fcntl(core->devnull, F_DUPFD_CLOEXEC, 3)) < 0)
                        r = negerrno();
        }
        if (r >= 0) {
                (void)fd_set_nonblock(p->out_fd, true);
                (void)fd_set_nonblock(p->err_fd, true);
                (void)fd_set_nonblock(p->in_fd, true);
                r = watch_output(p);
        }
        if (r < 0) {
                for (int i = 0; i < 3; i++)
                        safe_close(fds[i]);
                link_proc(core, p);
                proc_free(p, false);
                return r;
        }
        p->stdin_open = p->in_fd >= 0;
        p->timeout_ms = o->timeout_ms;
        p->detach.detached = on_detached;
        p->start_done = done;
        p->start_ud = ud;
        link_proc(core, p);
        SbxRunOptions ro = { .command = o->command ? o->command : "", .command_len = o->command_len, .cwd = o->cwd,
                             .env = o->env };
        r = run_detach(s, &ro, fds, o->pty, &p->detach, start_done, p, NULL);
        if (r < 0) {
                proc_free(p, false);
                return r;
        }
        return 0;
}

/* The sandbox pid of a host pid, from its NSpid line (the last entry is the innermost). */
static pid_t ns_pid_of(pid_t host) {
        pid_t ppid, nspid;
        proc_status_ids(host, &ppid, &nspid);
        return nspid;
}

static int process_adopt_leftover(SandboxCore *core, const char *command, size_t command_len, int out_fd, int err_fd, int cg,
                           const char *cg_name) {
        if (core->dying || make_room(core) < 0)
                return -EUSERS;
        SbxProcess *p = proc_new(core, command, command_len, NULL);
        if (!p)
                return -ENOMEM;
        p->leftover = p->started = true;
        p->out_fd = out_fd;
        p->err_fd = err_fd;
        if (watch_output(p) < 0) {
                p->out_fd = p->err_fd = -1;
                link_proc(core, p);
                proc_free(p, false);
                return -ENOMEM;
        }
        pid_t first = cgroup_first_pid(cg);
        p->pid = first > 0 ? ns_pid_of(first) : 0;
        link_proc(core, p);
        take_cgroup(p, cg, cg_name);
        if (cgroup_populated(cg) == 0)
                cgroup_event(&p->cg_w, 0);
        return 0;
}

static void process_exited(SandboxCore *core, pid_t pid, int ws) {
        for (SbxProcess *p = core->procs; p; p = p->next)
                if (p->started && !p->leftover && !p->ended && p->pid == pid) {
                        p->wstatus = ws;
                        p->status_known = true;
                        proc_end(p);
                        return;
                }
}

static void process_all_lost(SandboxCore *core) {
        for (SbxProcess *p = core->procs; p; p = p->next) {
                if (p->cg >= 0)
                        cgroup_gone(p);
                if (p->started && !p->ended) {
                        p->kill_requested = true;
                        proc_end(p);
                }
        }
}

static void process_free_all(SandboxCore *core) {
        while (core->procs)
                proc_free(core->procs, true);
}

/* ---------------------------------------------------------------- public */

SbxProcess *sbx_sandbox_process(SbxSandbox *sb, uint64_t id) {
        for (SbxProcess *p = sandbox_core(sb)->procs; p; p = p->next)
                if (p->id == id && p->started)
                        return p;
        return NULL;
}

SbxProcess *sbx_sandbox_next_process(SbxSandbox *sb, SbxProcess *after) {
        SbxProcess *p = after ? after->prev : sandbox_core(sb)->procs_tail;
        while (p && !p->started)
                p = p->prev;
        return p;
}

SbxSandbox *sbx_process_sandbox(const SbxProcess *p) { return p->core->self; }

void sbx_process_info(const SbxProcess *p, SbxProcessInfo *ret) {
        int code = -1, sig = 0;
        if (p->ended && p->status_known) {
                if (WIFEXITED(p->wstatus)) {
                        code = WEXITSTATUS(p->wstatus);
                } else if (WIFSIGNALED(p->wstatus)) {
                        sig = WTERMSIG(p->wstatus);
                        code = 128 + sig;
                }
        }
        *ret = (SbxProcessInfo){
                .id = p->id, .pid = p->pid, .command = p->command, .label = p->label,
                .status = !p->ended ? SBX_PROCESS_RUNNING : p->timed_out ? SBX_PROCESS_TIMEOUT
                          : p->kill_requested ? SBX_PROCESS_KILLED : SBX_PROCESS_EXITED,
                .exit_code = code, .signal = sig, .started_ms = p->started_ms, .ended_ms = p->ended ? p->ended_ms : 0,
                .leftover = p->leftover, .pty = p->pty, .stdin_open = p->stdin_open && !p->stdin_closing,
                .alive = p->cg >= 0, .log_end = p->log.end,
        };
}

static unsigned process_kill_leftovers(SandboxCore *core) {
        unsigned n = 0;
        for (SbxProcess *p = core->procs; p; p = p->next)
                if (p->leftover && p->cg >= 0) {
                        kill_tree(p);
                        n++;
                }
        return n;
}

static unsigned process_count_alive(const SandboxCore *core) {
        unsigned n = 0;
        for (const SbxProcess *p = core->procs; p; p = p->next) {
                int k = p->cg >= 0 ? cgroup_count_procs(p->cg) : 0;
                n += k > 0 ? (unsigned)k : 0;
        }
        return n;
}

unsigned sbx_sandbox_kill_background_log(SbxSandbox *sb) { return bglog_kill(&sandbox_core(sb)->bg); }

/* Kills every process of the sandbox, started or left running; returns how many. */
static unsigned process_kill_all(SandboxCore *core) {
        unsigned n = 0;
        for (SbxProcess *p = core->procs; p; p = p->next)
                if (p->cg >= 0) {
                        if (!p->ended)
                                p->kill_requested = true;
                        kill_tree(p);
                        n++;
                }
        return n;
}

unsigned sbx_sandbox_kill_processes(SbxSandbox *sb) {
        SandboxCore *core = sandbox_core(sb);
        return process_kill_all(core) + bglog_kill(&core->bg);
}

SbxProcess *sbx_context_process(SbxContext *ctx, uint64_t id) { return process_by_id(context_host(ctx), id); }

static void process_host_free(SandboxHost *host) {
        free(host->procs_by_id);
        host->procs_by_id = NULL;
        host->proc_buckets = host->n_procs = 0;
}

const Room process_room = {
        .name = "process",
        .exited = process_exited,
        .lost = process_all_lost,
        .freeing = process_free_all,
        .host_free = process_host_free,
        .adopt_leftover = process_adopt_leftover,
        .kill_leftovers = process_kill_leftovers,
        .kill_all = process_kill_all,
        .count_alive = process_count_alive,
};
