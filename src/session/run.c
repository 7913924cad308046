/* SPDX-License-Identifier: MIT */
/* Runs: each session's queue (one run at a time, in order), and each run's timeout, output,
 * stdin and result.
 *
 * A run waits in its session's queue until it is first, no operation holds it
 * (core->hold_after) and the session has an idle worker; it is then sent with fresh pipes
 * and owns the worker's command cgroup. It ends when the worker says DONE, when the worker
 * dies, or, once killed (timeout, cancel), when its cgroup is empty (cgroup.events): the
 * proof that every process it started is gone. What it leaves running keeps its pipes and
 * cgroup, handed to the sandbox's background log. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/random.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include "base/limits.h"
#include "base/log.h"
#include "base/util.h"
#include "session/internal.h"
#include "session/run.h"

static void pump(SbxSession *s);
static void fail_all(SbxSession *s, int exit_code, const char *msg);

static void pump_deferred(void *data) { pump(data); }

void run_pump_later(SbxSession *s) {
        if (!s->pump_pending && loop_defer(s->core->loop, pump_deferred, s) == 0)
                s->pump_pending = true;
}

static void run_close_io(SbxRun *r) {
        Loop *l = r->s->core->loop;
        loop_del(l, &r->in_w);
        r->in_fd = safe_close(r->in_fd);
        loop_del(l, &r->timer_w);
        r->timer_fd = safe_close(r->timer_fd);
        loop_del(l, &r->cg_w);
        r->cg_events = safe_close(r->cg_events);
}

static void run_free(SbxRun *r) {
        Loop *l = r->s->core->loop;
        for (int i = 0; i < 3; i++)
                safe_close(r->detach_fds[i]);
        loop_cancel_defer(l, r);
        loop_del(l, &r->out_w);
        loop_del(l, &r->err_w);
        loop_del(l, &r->ev_w);
        safe_close(r->out_fd);
        safe_close(r->err_fd);
        safe_close(r->ev_fd);
        run_close_io(r);
        safe_close(r->cg);
        buf_done(&r->ev);
        buf_done(&r->out);
        buf_done(&r->err);
        buf_done(&r->past);
        redact_stream_done(&r->rs_out);
        redact_stream_done(&r->rs_err);
        free(r->command);
        free(r->cwd);
        free(r->env);
        free(r->stdin_data);
        free(r);
}

/* Reads what a pipe has now, straight into the result buffer while under the cap, into a
 * scratch buffer past it. Every byte goes to on_output, past the cap too: the cap bounds what
 * the result keeps, not what a consumer of the stream may see. Returns false at EOF or error. */
static bool run_read(SbxRun *r, int fd, SbxStream stream, size_t budget) {
        static uint8_t discard[SBX_PIPE_BYTES]; /* one thread: one scratch buffer */
        Buf *b = stream == SBX_STDOUT ? &r->out : &r->err;
        while (budget > 0) {
                long room = buf_reserve(b, MIN(budget, (size_t)SBX_PIPE_BYTES));
                uint8_t *dst = room > 0 ? b->data + b->len : discard;
                size_t len = room > 0 ? (size_t)room : MIN(budget, sizeof discard);
                ssize_t n = read_ready(fd, dst, len);
                if (n == -EAGAIN)
                        return true;
                if (n <= 0)
                        return false;
                if (room > 0)
                        buf_commit(b, (size_t)n);
                else
                        buf_drop(b, (size_t)n);
                if (r->on_output)
                        r->on_output(r->ud, stream, dst, (size_t)n);
                budget = budget > (size_t)n ? budget - (size_t)n : 0;
        }
        return true;
}

/* Redacts data past the cap into r->past and hands it to on_output (final: data is the end). */
static void stream_past(SbxRun *r, int k, SbxStream stream, const uint8_t *data, size_t len, bool final) {
        RedactStream *rs = k == 0 ? &r->rs_out : &r->rs_err;
        r->past.len = 0;
        if (len)
                (void)redact_feed(rs, data, len, &r->past);
        if (final)
                (void)redact_flush(rs, false, &r->past);
        if (r->past.len)
                r->on_output(r->ud, stream, r->past.data, r->past.len);
}

/* The redacting twin of run_read(): raw bytes under the cap go through the stream's redactor
 * into the result, and what it gives (never a raw byte it may still replace) to on_output;
 * the cap, `truncated` and `dropped` count raw bytes, as the command wrote them. At the cap
 * the result is cut (a secret or key shape cut short there is replaced too); without
 * on_output the redactor stops there, with it the stream goes on from the same redactor, so
 * a secret across the cap is still caught in the stream. At EOF what it held back is decided. */
static bool run_read_redacted(SbxRun *r, int fd, SbxStream stream, size_t budget) {
        static uint8_t raw[SBX_PIPE_BYTES]; /* one thread: one scratch buffer */
        int k = stream == SBX_STDOUT ? 0 : 1;
        Buf *b = k == 0 ? &r->out : &r->err;
        RedactStream *rs = k == 0 ? &r->rs_out : &r->rs_err;
        while (budget > 0) {
                ssize_t n = read(fd, raw, MIN(budget, sizeof raw));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return true;
                size_t before = b->len;
                if (n <= 0) {
                        if (!r->past_cap[k])
                                (void)redact_flush(rs, false, b);
                        else if (r->on_output)
                                stream_past(r, k, stream, NULL, 0, true);
                } else {
                        uint64_t room = r->raw_cap[k] - r->raw_kept[k];
                        size_t keep = (size_t)MIN((uint64_t)n, room);
                        if (keep) {
                                (void)redact_feed(rs, raw, keep, b);
                                r->raw_kept[k] += keep;
                        }
                        if ((size_t)n > keep) {
                                if (r->on_output && b->len > before)
                                        r->on_output(r->ud, stream, b->data + before, b->len - before);
                                if (!r->past_cap[k]) {
                                        r->past_cap[k] = true;
                                        /* The result's end: what is held back, decided as cut
                                         * short, on a copy when the stream goes on. Not
                                         * streamed: the stream decides those bytes itself. */
                                        RedactStream copy;
                                        if (!r->on_output)
                                                (void)redact_flush(rs, true, b);
                                        else if (redact_stream_clone(&copy, rs) == 0) {
                                                (void)redact_flush(&copy, true, b);
                                                redact_stream_done(&copy);
                                        }
                                }
                                before = b->len;
                                buf_drop(b, (size_t)n - keep);
                                if (r->on_output)
                                        stream_past(r, k, stream, raw + keep, (size_t)n - keep, false);
                        }
                }
                if (r->on_output && b->len > before)
                        r->on_output(r->ud, stream, b->data + before, b->len - before);
                if (n <= 0)
                        return false;
                budget = budget > (size_t)n ? budget - (size_t)n : 0;
        }
        return true;
}

/* What a redacting run's streams hold back, decided at its end. */
static void run_redact_flush(SbxRun *r) {
        for (int k = 0; r->redacting && k < 2; k++) {
                Buf *b = k == 0 ? &r->out : &r->err;
                SbxStream st = k == 0 ? SBX_STDOUT : SBX_STDERR;
                if (r->past_cap[k]) {
                        if (r->on_output)
                                stream_past(r, k, st, NULL, 0, true);
                        continue;
                }
                size_t before = b->len;
                (void)redact_flush(k == 0 ? &r->rs_out : &r->rs_err, false, b);
                if (r->on_output && b->len > before)
                        r->on_output(r->ud, st, b->data + before, b->len - before);
        }
}

/* Reads up to budget bytes of one output pipe; closes it at EOF. */
static void run_drain(SbxRun *r, bool is_out, size_t budget) {
        int *fd = is_out ? &r->out_fd : &r->err_fd;
        SbxStream st = is_out ? SBX_STDOUT : SBX_STDERR;
        if (*fd >= 0 && !(r->redacting ? run_read_redacted(r, *fd, st, budget) : run_read(r, *fd, st, budget))) {
                loop_del(r->s->core->loop, is_out ? &r->out_w : &r->err_w);
                *fd = safe_close(*fd);
        }
}

/* Splits a cell's events into lines, each handed over whole; what is over a line's or the
 * cell's bound is counted and told as data NULL (once per line left out). */
static void events_feed(SbxRun *r, const uint8_t *d, size_t n) {
        while (n > 0) {
                const uint8_t *nl = memchr(d, '\n', n);
                size_t k = nl ? (size_t)(nl - d) : n;
                if (!r->ev_skip && (r->ev.len + k > SBX_CODE_EVENT_LINE_BYTES ||
                                    r->ev_total + r->ev.len + k > SBX_CODE_EVENTS_BYTES || buf_append(&r->ev, d, k) < 0)) {
                        r->ev_dropped += r->ev.len;
                        r->ev.len = 0;
                        r->ev_skip = true;
                }
                if (r->ev_skip)
                        r->ev_dropped += k;
                if (nl) {
                        if (r->ev_skip) {
                                if (r->on_output)
                                        r->on_output(r->ud, SBX_EVENTS, NULL, (size_t)r->ev_dropped);
                                r->ev_dropped = 0;
                        } else if (r->ev.len > 0) {
                                r->ev_total += r->ev.len;
                                if (r->on_output)
                                        r->on_output(r->ud, SBX_EVENTS, r->ev.data, r->ev.len);
                        }
                        r->ev.len = 0;
                        r->ev_skip = false;
                        k++;
                }
                d += k;
                n -= k;
        }
}

/* Reads up to budget bytes of a cell's events; closes the pipe at its end (a line cut short
 * there is counted as left out). */
static void run_drain_events(SbxRun *r, size_t budget) {
        static uint8_t chunk[64 * 1024];
        while (r->ev_fd >= 0 && budget > 0) {
                ssize_t n = read_ready(r->ev_fd, chunk, MIN(budget, sizeof chunk));
                if (n == -EAGAIN)
                        return;
                if (n <= 0) {
                        loop_del(r->s->core->loop, &r->ev_w);
                        r->ev_fd = safe_close(r->ev_fd);
                        r->ev_dropped += r->ev.len;
                        r->ev.len = 0;
                        if (r->ev_dropped && r->on_output)
                                r->on_output(r->ud, SBX_EVENTS, NULL, (size_t)r->ev_dropped);
                        r->ev_dropped = 0;
                        return;
                }
                events_feed(r, chunk, (size_t)n);
                budget -= (size_t)n;
        }
}

static void run_events_event(Watch *w, uint32_t events) {
        SbxRun *r = w->data;
        run_drain_events(r, 4 * SBX_PIPE_BYTES);
}

static void run_output_event(Watch *w, uint32_t events) {
        SbxRun *r = w->data;
        /* A bounded amount per wakeup keeps one noisy command from starving the loop. */
        run_drain(r, w == &r->out_w, 4 * SBX_PIPE_BYTES);
}

static void run_stdin_event(Watch *w, uint32_t events) {
        SbxRun *r = w->data;
        while (r->stdin_off < r->stdin_len) {
                ssize_t n = write(r->in_fd, r->stdin_data + r->stdin_off, r->stdin_len - r->stdin_off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n < 0)
                        break; /* EPIPE: the command closed stdin */
                r->stdin_off += (size_t)n;
        }
        loop_del(r->s->core->loop, &r->in_w);
        r->in_fd = safe_close(r->in_fd);
}

static void refused_unlink(SbxRun *r) {
        SbxRun **pp = &r->s->refused;
        while (*pp && *pp != r)
                pp = &(*pp)->next;
        if (*pp)
                *pp = r->next;
}

/* Why a command that failed on its own may have: the kernel's OOM killer struck in the
 * sandbox since the last failed run (a kill during a run that succeeded counts for the next
 * failure), or its filesystem is out of bytes or inodes. Looked at only after a failure: no
 * file is read on the way of a command that succeeds. */
static SbxErrorClass failure_class(SandboxCore *core) {
        uint64_t kills;
        if (cgroup_sandbox_oom_kills(&core->box.cg, &kills) == 0) {
                bool oom = kills > core->oom_kills;
                core->oom_kills = kills;
                if (oom)
                        return SBX_ERROR_OOM;
        }
        struct statfs st;
        _cleanup_close_ int fd = core->box.root_fd >= 0 ? openat(core->box.root_fd, "tmp", O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
        if (fd >= 0 && fstatfs(fd, &st) == 0 && (st.f_bavail == 0 || st.f_ffree == 0))
                return SBX_ERROR_FS_FULL;
        return SBX_ERROR_NONE;
}

/* What earlier runs left running, in the background log and in the rooms (the process room's
 * leftovers): killed, or counted. */
static unsigned rooms_kill_leftovers(SandboxCore *core) {
        unsigned n = bglog_kill(&core->bg);
        for (unsigned i = 0; i < core->rooms->n; i++)
                if (core->rooms->v[i]->kill_leftovers)
                        n += core->rooms->v[i]->kill_leftovers(core);
        return n;
}

static unsigned rooms_count_alive(const SandboxCore *core) {
        unsigned n = 0;
        for (unsigned i = 0; i < core->rooms->n; i++)
                if (core->rooms->v[i]->count_alive)
                        n += core->rooms->v[i]->count_alive(core);
        return n;
}

/* What an ended run left running (its cgroup still has processes: the worker, now the holder,
 * has been moved out and forks the next worker only after that) becomes a process of the
 * sandbox with the run's pipes (a room takes it: the process room), unless none does: then it
 * goes to the background log. */
static void leftover_adopt(SbxRun *r) {
        SandboxCore *core = r->s->core;
        if (r->cg < 0 || r->kill_leftovers || r->internal || r->killed || r->detach || core->dying ||
            cgroup_populated(r->cg) != 1)
                return;
        loop_del(core->loop, &r->out_w);
        loop_del(core->loop, &r->err_w);
        for (unsigned i = 0; i < core->rooms->n; i++) {
                const Room *room = core->rooms->v[i];
                if (room->adopt_leftover &&
                    room->adopt_leftover(core, r->command, r->command_len, r->out_fd, r->err_fd, r->cg, r->cg_name) == 0) {
                        r->out_fd = r->err_fd = r->cg = -1;
                        return;
                }
        }
}

static int pids_refusing(SbxRun *r, bool once);
static void pids_limit_say(SbxRun *r);

/* Ends a run: result to the caller, pipes and cgroup handed over or released. */
static void run_finish(SbxRun *r) {
        SbxSession *s = r->s;
        SandboxCore *core = s->core;
        if (r->finished)
                return;
        r->finished = true;
        if (s->current == r)
                s->current = NULL;
        if (r->error_class == SBX_ERROR_LIMIT_EXCEEDED)
                refused_unlink(r);

        /* Everything the command wrote before it ended is in the pipes now (a bounded drain:
         * background writers could keep a pipe full forever; their bytes go to the log). */
        run_drain(r, true, 2 * SBX_PIPE_BYTES);
        run_drain(r, false, 2 * SBX_PIPE_BYTES);
        /* The kernel writes every event before its DONE and closes its end: all of them are
         * in the pipe, whose end comes after them. */
        run_drain_events(r, 2 * SBX_PIPE_BYTES);
        if (r->ev_fd >= 0) {
                loop_del(core->loop, &r->ev_w);
                r->ev_fd = safe_close(r->ev_fd);
        }
        run_close_io(r);
        leftover_adopt(r);
        if (r->out_fd >= 0) {
                loop_del(core->loop, &r->out_w);
                bglog_adopt_pipe(&core->bg, TAKE_FD(r->out_fd));
        }
        if (r->err_fd >= 0) {
                loop_del(core->loop, &r->err_w);
                bglog_adopt_pipe(&core->bg, TAKE_FD(r->err_fd));
        }
        if (r->cg >= 0 && r->kill_leftovers)
                bglog_doom_cgroup(&core->bg, TAKE_FD(r->cg), r->cg_name, s);
        if (r->cg >= 0)
                bglog_retire_cgroup(&core->bg, TAKE_FD(r->cg), r->cg_name);

        run_redact_flush(r);
        /* A command that failed after forks were refused at the limit, before the check's next
         * look (bash gives up its fork retries when a child's SIGCHLD interrupts them): said
         * as if the check had stopped it. Not a code cell: it ended, its context kept what it
         * did, and its own error (an OSError) says the rest. */
        if (r->exit_code != 0 && r->error_class == SBX_ERROR_NONE && !r->internal && !r->events && r->pids_watched &&
            r->sent && pids_refusing(r, true) > 0) {
                pids_limit_say(r);
                r->error_class = SBX_ERROR_PIDS_LIMIT;
        }
        if (r->exit_code != 0 && r->error_class == SBX_ERROR_NONE && !r->internal)
                r->error_class = failure_class(core);
        /* What a bash session's result says of its state; a code cell says it in contextReset. */
        bool bash = s->shell == SBX_SHELL_BASH && !r->internal && r->sent;
        if (bash && s->reset_unsaid) {
                r->session_reset = true;
                s->reset_unsaid = false;
        }
        SbxResult res = {
                .exit_code = r->exit_code,
                .error_class = r->error_class,
                .stdout_data = r->out.data ? r->out.data : (const uint8_t *)"", .stdout_len = r->out.len,
                .stderr_data = r->err.data ? r->err.data : (const uint8_t *)"", .stderr_len = r->err.len,
                .stdout_truncated = r->out.truncated, .stderr_truncated = r->err.truncated,
                .stdout_dropped = r->out.dropped, .stderr_dropped = r->err.dropped, .killed = r->killed_procs,
                .exec_time_us = r->t_start ? (now_ns() - r->t_start) / 1000 : 0,
                .state_discarded = bash && (r->killed || r->died || r->session_reset),
                .session_reset = bash && r->session_reset,
        };
        if (r->on_done)
                r->on_done(r->ud, &res);
        run_free(r);
        run_pump_later(s);
}

static void run_finish_deferred(void *data) { run_finish(data); }

/* A killed run's cgroup is empty. One sent before its worker named its keeper, which then
 * holds neither worker nor keeper, lost the context: said before the answer, which says so. */
static void run_emptied(SbxRun *r) {
        if (session_kept_pending(r->s))
                session_lose(r->s);
        run_finish(r);
}

static void run_cgroup_event(Watch *w, uint32_t events) {
        SbxRun *r = w->data;
        if (cgroup_events_populated(r->cg_events) == 0)
                run_emptied(r);
}

static void run_unstarve(SbxRun *r, const char *msg);

static void run_empty_look(Watch *w, uint32_t events) {
        SbxRun *r = w->data;
        uint64_t x;
        (void)!read(r->timer_fd, &x, sizeof x);
        if (cgroup_populated(r->cg) == 0) {
                run_emptied(r);
                return;
        }
        /* Nothing was killed yet (the worker names its keeper first): the looks start after.
         * A worker that takes this long is most likely refused its fork at the process limit,
         * which what earlier commands left holds: they go, once, as for a run no worker took. */
        uint64_t waited = 0;
        if (session_kill_waits(r->s, &waited)) {
                if (!r->kept_unstarved && waited >= SBX_KEPT_WAIT_MS / 2 * 1000000ULL && r->pids_watched &&
                    pids_refusing(r, true)) {
                        r->kept_unstarved = true;
                        run_unstarve(r, "sbx: the context's worker could not fork (process limit reached); "
                                        "background processes of earlier commands were killed\n");
                }
                if (waited < SBX_KEPT_WAIT_MS * 1000000ULL) {
                        (void)timerfd_arm_ms(r->timer_fd, SBX_KILL_LOOK_MS * 10);
                        return;
                }
                /* Answered now; the kill is the session's, done once the keeper is named. */
                session_take_killed_cgroup(r->s, TAKE_FD(r->cg));
                run_finish(r);
                return;
        }
        if (++r->empty_looks < SBX_KILL_LOOKS)
                (void)timerfd_arm_ms(r->timer_fd, SBX_KILL_LOOK_MS);
        else
                loop_del(r->s->core->loop, &r->timer_w);
}

/* Takes a run that has not been sent out of its session's queue (or current slot). */
static void run_unqueue(SbxRun *r) {
        SbxSession *s = r->s;
        if (s->current == r) {
                s->current = NULL;
                return;
        }
        SbxRun **pp = &s->queue, *prev = NULL;
        while (*pp && *pp != r) {
                prev = *pp;
                pp = &(*pp)->next;
        }
        if (!*pp)
                return;
        *pp = r->next;
        if (s->queue_tail == r)
                s->queue_tail = prev;
        s->n_queued--;
}

/* The whole timeout passed without a worker: the holder cannot fork, which means the
 * sandbox's process limit is held by what earlier commands left running (a backgrounded
 * fork bomb). Those processes starve the session, so they go; otherwise it would stay
 * bricked. */
static void run_unstarve(SbxRun *r, const char *msg) {
        size_t before = r->err.len;
        if (rooms_kill_leftovers(r->s->core) > 0)
                (void)buf_append(&r->err, msg, strlen(msg));
        if (r->on_output && r->err.len > before)
                r->on_output(r->ud, SBX_STDERR, r->err.data + before, r->err.len - before);
}

/* Timeout or cancel. A run that has not reached a worker simply ends; a running one has its
 * cgroup killed and ends when the cgroup is empty. */
static void run_kill(SbxRun *r, SbxErrorClass why) {
        SbxSession *s = r->s;
        Loop *l = s->core->loop;
        if (r->finished || r->killed)
                return;
        if (r->sent && s->current == r && (session_leaving(s) || session_end_pending(s))) {
                /* The command ended already (its DONE came, or its worker died); only a
                 * holder's move out of its cgroup is left (the new holder's, or the keeper's),
                 * after which its result is told. A kill now would take the holder, or leave it
                 * waiting for MOVED for ever: what the command left running is killed instead,
                 * once the holder is out. Its result stands. */
                r->kill_leftovers = true;
                loop_del(l, &r->timer_w);
                return;
        }
        r->killed = true;
        r->error_class = why;
        r->exit_code = why == SBX_ERROR_TIMEOUT ? SBX_EXIT_TIMEOUT : why == SBX_ERROR_CANCELLED ? SBX_EXIT_CANCELLED : 1;
        if (!r->sent) {
                if (s->current == r && why == SBX_ERROR_TIMEOUT && session_awaiting_worker(s))
                        run_unstarve(r, "sbx: no worker could start in time (process limit reached?); "
                                        "background processes of earlier commands were killed\n");
                run_unqueue(r);
                run_finish(r);
                return;
        }
        session_mark_killing(s);
        int n = cgroup_count_procs(r->cg);
        /* The keeper, still being moved out of it, is not the command's. */
        r->killed_procs = n > 0 ? (uint32_t)(n - (session_keeper_in(s, r->cg_name) && n > 1)) : 0;
        session_kill_cgroup(s, r->cg, r->cg_name);
        loop_del(l, &r->timer_w);
        r->cg_events = cgroup_events_open(r->cg);
        /* Finished from the loop, never here: the caller may be this run's own output
         * callback, with the run still on its stack. */
        bool unwatched = r->cg_events < 0 || loop_add(l, &r->cg_w, r->cg_events, EPOLLPRI, run_cgroup_event, r) < 0;
        if (unwatched && session_kill_waits(s, NULL))
                session_take_killed_cgroup(s, TAKE_FD(r->cg)); /* out of fds: answered now */
        if (unwatched || cgroup_populated(r->cg) == 0) {
                (void)loop_defer(l, run_finish_deferred, r);
                return;
        }
        /* The notification may come late (SBX_KILL_LOOK_MS): the timer looks meanwhile. */
        if (loop_add(l, &r->timer_w, r->timer_fd, EPOLLIN, run_empty_look, r) == 0)
                (void)timerfd_arm_ms(r->timer_fd, SBX_KILL_LOOK_MS);
}

/* The timer comes back every SBX_PIDS_CHECK_MS while the run is watched, else at the deadline. */
static void run_arm(SbxRun *r) {
        uint64_t now = now_ns(), left_ms = r->deadline > now ? (r->deadline - now + 999999) / 1000000 : 1;
        (void)timerfd_arm_ms(r->timer_fd, r->pids_watched ? MIN(left_ms, (uint64_t)SBX_PIDS_CHECK_MS) : left_ms);
}

/* A fork was refused at the commands' pids limit: bash would retry it until the timeout, and
 * what holds the limit is usually what earlier commands left running. Stopped now, saying so. */
/* Says in the run's stderr that the sandbox's process limit stopped it, and what holds it. */
static void pids_limit_say(SbxRun *r) {
        char msg[320];
        unsigned left = bglog_count_processes(&r->s->core->bg) + rooms_count_alive(r->s->core);
        if (left)
                snprintf(msg, sizeof msg,
                         "sbx: the sandbox's process limit (%u) was reached and the command was stopped; %u processes "
                         "left running by earlier commands hold part of it (killing them frees it: process.killAll, "
                         "or the sandbox option leftovers: kill, `sbx run --kill-leftovers`)\n",
                         r->s->core->limits.pids, left);
        else
                snprintf(msg, sizeof msg,
                         "sbx: the sandbox's process limit (%u) was reached and the command was stopped (it made "
                         "processes faster than they ended: a fork bomb?)\n",
                         r->s->core->limits.pids);
        size_t before = r->err.len;
        (void)buf_append(&r->err, msg, strlen(msg));
        if (r->on_output && r->err.len > before)
                r->on_output(r->ud, SBX_STDERR, r->err.data + before, r->err.len - before);
}

static void run_pids_limit(SbxRun *r) {
        pids_limit_say(r);
        run_kill(r, SBX_ERROR_PIDS_LIMIT);
}

/* Whether forks are being refused at the commands' share of the pids limit: 1 yes, 0 no (or
 * not known yet). With a pids cgroup, its count of refused forks has grown at a look and at
 * another within SBX_PIDS_AGAIN_MS before it: a fork bomb goes on forking (and bash retries a
 * refused fork after 1 s, 2 s...), while a command that met the limit once and handles it (a
 * fork failing with EAGAIN) does not, however long a loaded machine takes it to wind down.
 * With RLIMIT_NPROC alone (which counts every process of the sandbox), the sandbox has been at
 * the commands' share on two looks in a row, when any fork of a command fails. once: a fork
 * refused at any time of the run is enough (a command that failed after that). */
static int pids_refusing(SbxRun *r, bool once) {
        Box *b = &r->s->core->box;
        uint64_t now;
        if (b->nproc_limit) {
                int n = box_count_processes(b);
                uint32_t share = SBX_PIDS_FOR_COMMANDS(b->nproc_limit);
                now = n >= 0 && (uint32_t)n >= (share ? share : b->nproc_limit);
        } else if (cgroup_sandbox_pids_refused(&b->cg, &now) < 0) {
                return 0;
        }
        bool grew = r->pids_counted && now > r->pids_refused;
        uint64_t t = now_ns();
        bool again = r->pids_grew_ns && t - r->pids_grew_ns <= SBX_PIDS_AGAIN_MS * 1000000ULL;
        int refusing = r->pids_counted &&
                       (b->nproc_limit ? now && r->pids_refused : once ? grew || r->pids_grew_ns : grew && again);
        if (grew)
                r->pids_grew_ns = t;
        r->pids_refused = now;
        r->pids_counted = true;
        return refusing;
}

static void run_timer_event(Watch *w, uint32_t events) {
        SbxRun *r = w->data;
        uint64_t x;
        (void)!read(r->timer_fd, &x, sizeof x);
        if (now_ns() >= r->deadline) {
                run_kill(r, SBX_ERROR_TIMEOUT);
                return;
        }
        /* The first look only takes the count: a run over in less than SBX_PIDS_CHECK_MS (most
         * are) never reads it, and a limit still refusing forks shows on the next look. Before
         * the worker named its keeper, refusals are its fork's, not the cell's: counted anew. */
        if (session_kept_pending(r->s)) {
                r->pids_counted = false;
                r->pids_grew_ns = 0;
        } else if (r->pids_watched && pids_refusing(r, false)) {
                run_pids_limit(r);
                return;
        }
        run_arm(r);
}

int run_make_pipe(int *rd, int *wr) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return negerrno();
        (void)fcntl(p[0], F_SETPIPE_SZ, (int)SBX_PIPE_BYTES);
        *rd = p[0];
        *wr = p[1];
        return 0;
}

/* Appends a run to its session's queue and looks at the queue from the loop. */
static void run_enqueue(SbxSession *s, SbxRun *r) {
        if (s->queue_tail)
                s->queue_tail->next = r;
        else
                s->queue = r;
        s->queue_tail = r;
        s->n_queued++;
        run_pump_later(s);
}

/* Watches the run's pipes once it is sent. Returns 0 or -errno. */
static int run_watch_io(SbxRun *r) {
        Loop *l = r->s->core->loop;
        int rr;
        /* Read ends run_make_pipe() made, no other status flag set: no F_GETFL first. */
        (void)fcntl(r->out_fd, F_SETFL, O_NONBLOCK);
        (void)fcntl(r->err_fd, F_SETFL, O_NONBLOCK);
        uint32_t ev = r->paused ? 0 : EPOLLIN;
        if ((rr = loop_add(l, &r->out_w, r->out_fd, ev, run_output_event, r)) < 0 ||
            (rr = loop_add(l, &r->err_w, r->err_fd, ev, run_output_event, r)) < 0)
                return rr;
        if (r->ev_fd >= 0) {
                (void)fcntl(r->ev_fd, F_SETFL, O_NONBLOCK);
                if ((rr = loop_add(l, &r->ev_w, r->ev_fd, ev, run_events_event, r)) < 0)
                        return rr;
        }
        if (r->in_fd >= 0) {
                (void)fd_set_nonblock(r->in_fd, true);
                if ((rr = loop_add(l, &r->in_w, r->in_fd, EPOLLOUT, run_stdin_event, r)) < 0)
                        return rr;
        }
        return 0;
}

/* A fresh nonce per run: a DONE (or DETACHED) counts only if it echoes it, so it must not be
 * derivable from any value a command could have seen. */
static int run_nonce(SbxRun *r) {
        return getrandom(&r->nonce, sizeof r->nonce, 0) == (ssize_t)sizeof r->nonce ? 0 : -EIO;
}

/* Sends a detached run with its process's own fds; its output is the process's, not the
 * run's. */
static int run_send_detached(SbxSession *s, SbxRun *r) {
        int rr = run_nonce(r);
        if (rr < 0)
                return rr;
        WireHdr h = { .type = WIRE_RUN, .seq = r->seq, .nonce = r->nonce,
                      .cwd_len = r->cwd ? (uint32_t)strlen(r->cwd) : 0,
                      .env_len = (uint32_t)r->env_len, .cmd_len = (uint32_t)r->command_len,
                      .flags = WIRE_F_DETACH | (r->pty ? WIRE_F_PTY : 0) };
        struct iovec parts[3] = { { r->cwd, h.cwd_len }, { r->env, r->env_len }, { r->command, r->command_len } };
        if ((rr = session_send_run(s, &h, parts, r->detach_fds, &r->cg, r->cg_name)) < 0)
                return rr;
        r->sent = true;
        for (int i = 0; i < 3; i++)
                r->detach_fds[i] = safe_close(r->detach_fds[i]);
        return 0;
}

/* Sends the current run to the idle worker with fresh pipes. Returns 0 or -errno (r->sent
 * says whether the worker has it). */
static int run_send(SbxSession *s, SbxRun *r) {
        int fds[WIRE_RUN_FDS] = { -1, -1, -1 };
        int r_in = -1, rr;

        if (r->detach)
                return run_send_detached(s, r);
        if ((rr = run_make_pipe(&r->out_fd, &fds[1])) < 0 || (rr = run_make_pipe(&r->err_fd, &fds[2])) < 0)
                goto out;
        if (r->events) {
                /* The worker's first fd is the write end of the events pipe. */
                if ((rr = run_make_pipe(&r->ev_fd, &r_in)) < 0)
                        goto out;
                fds[0] = r_in;
        } else if (r->stdin_len > 0) {
                if ((rr = run_make_pipe(&r_in, &r->in_fd)) < 0)
                        goto out;
                fds[0] = r_in;
        } else {
                fds[0] = s->core->devnull;
        }
        if ((rr = run_nonce(r)) < 0)
                goto out;
        WireHdr h = { .type = WIRE_RUN, .seq = r->seq, .nonce = r->nonce,
                      .cwd_len = r->cwd ? (uint32_t)strlen(r->cwd) : 0,
                      .env_len = (uint32_t)r->env_len, .cmd_len = (uint32_t)r->command_len,
                      .flags = (r->persist_env ? WIRE_F_PERSIST_ENV : 0) | (r->get_env ? WIRE_F_GETENV : 0) |
                               (r->events ? WIRE_F_EVENTS : 0) | (r->wire_flags & (WIRE_F_DUMP | WIRE_F_RESTORE)) };
        struct iovec parts[3] = { { r->cwd, h.cwd_len }, { r->env, r->env_len }, { r->command, r->command_len } };
        if ((rr = session_send_run(s, &h, parts, fds, &r->cg, r->cg_name)) < 0)
                goto out;
        r->sent = true;
        r->pids_watched = !r->internal && (s->core->box.cg.cmds_pids || s->core->box.nproc_limit);
        if (r->pids_watched) {
                (void)pids_refusing(r, false); /* the count as the command starts: its first look compares */
                run_arm(r);
        }
        rr = run_watch_io(r);
out:
        safe_close(fds[1]);
        safe_close(fds[2]);
        safe_close(r_in);
        return rr;
}

/* Ends a run the daemon could not start (out of fds or memory): nothing ran, and it says so,
 * never a bare exit 1. */
static void run_unavailable(SbxRun *r, int error) {
        char msg[256];
        int n = snprintf(msg, sizeof msg, "sbx: the command could not be started: %s%s; nothing ran, try again later\n",
                         strerror(-error),
                         error == -EMFILE || error == -ENFILE ? " (the daemon is out of file descriptors)"
                         : error == -ENOMEM                   ? " (the daemon is out of memory)"
                                                              : "");
        (void)buf_append(&r->err, msg, (size_t)MIN(n, (int)sizeof msg - 1));
        if (r->on_output)
                r->on_output(r->ud, SBX_STDERR, r->err.data, r->err.len);
        r->error_class = SBX_ERROR_UNAVAILABLE;
        r->exit_code = 1;
        run_finish(r);
}

/* Makes the queue's head current, with its timer running. Returns false if it ended at once. */
static bool run_begin(SbxSession *s) {
        SbxRun *r = s->queue;
        s->queue = r->next;
        if (!s->queue)
                s->queue_tail = NULL;
        s->n_queued--;
        r->next = NULL;
        s->current = r;
        r->t_start = now_ns();
        if (!r->internal)
                s->core->runs_started++;
        r->deadline = r->t_start + r->timeout_ms * 1000000ULL;
        r->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        int rr = r->timer_fd < 0 ? negerrno() : 0;
        if (rr == 0 && (rr = loop_add(s->core->loop, &r->timer_w, r->timer_fd, EPOLLIN, run_timer_event, r)) == 0)
                rr = timerfd_arm_ms(r->timer_fd, r->timeout_ms);
        if (rr < 0) {
                run_unavailable(r, rr);
                return false;
        }
        if (r->wire_flags & RUN_BARRIER) {
                /* Everything queued before it has ended: that is all it waits for. */
                r->exit_code = 0;
                run_finish(r);
                return false;
        }
        return true;
}

static void pump(SbxSession *s) {
        SandboxCore *core = s->core;
        s->pump_pending = false;
        if (core->dying && (s->queue || s->current) && s->sock < 0) {
                /* pid 1 is gone and no shell is left to run anything: what waits would only
                 * time out. */
                fail_all(s, 1, "sbx: the sandbox is gone (its pid 1 exited)\n");
                return;
        }
        if (s->broken && s->queue && !core->dying) {
                s->broken = false;
                if (session_start_shell(s) < 0)
                        s->broken = true;
        }
        if (!s->current && s->queue && (s->queue->internal || (!core->paused && s->queue->order <= core->hold_after)) && !run_begin(s))
                return;
        SbxRun *r = s->current;
        if (r && !r->sent) {
                /* A retired worker's holder forks the next: idle soon. One still retiring is
                 * not waited for. */
                session_rehire(s);
                session_hurry_retire(s);
        }
        if (!r || r->sent || !session_can_send(s))
                return;
        int rr = run_send(s, r);
        if (rr < 0) {
                log_debug("session %s: cannot send run: %s", s->name, strerror(-rr));
                if (r->sent) {
                        run_kill(r, SBX_ERROR_CANCELLED);
                } else {
                        run_unavailable(r, rr);
                }
        }
}

/* ---------------------------------------------------------------- what the shells say */

static void hook_idle(SbxSession *s) { pump(s); }

static void hook_ended(SbxSession *s, int status, bool clean) {
        SbxRun *r = s->current;
        if (!r)
                return;
        /* Nothing was left: the cgroup, the worker maybe still in it, is the session's to
         * retire; nothing in it is a leftover. */
        if (clean && r->cg >= 0)
                session_keep_cgroup(s, TAKE_FD(r->cg), r->cg_name);
        r->exit_code = status;
        run_finish(r);
}

static void hook_died(SbxSession *s, int wstatus) {
        SbxRun *r = s->current;
        if (!r || !r->sent || r->killed)
                return;
        r->exit_code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : WIFSIGNALED(wstatus) ? 128 + WTERMSIG(wstatus) : 1;
        r->died = true;
        run_finish(r);
}

static void hook_detached(SbxSession *s, pid_t pid) {
        SbxRun *r = s->current;
        if (!r || !r->sent || r->killed || !r->detach)
                return;
        if (pid > 0) {
                r->detach_to->detached(r->detach_to, pid, TAKE_FD(r->cg), r->cg_name);
                r->exit_code = 0;
        } else {
                r->exit_code = 1;
        }
        run_finish(r);
}

/* Answers the session's running run (if any) and its whole queue with exit_code and msg. A
 * run already killed keeps its own end: its cgroup's emptying answers it (124 or 125). */
static void fail_all(SbxSession *s, int exit_code, const char *msg) {
        SbxRun *r;
        while ((r = s->current && !s->current->killed ? s->current : s->queue)) {
                if (r != s->current)
                        run_unqueue(r);
                else
                        s->current = NULL;
                r->exit_code = exit_code;
                (void)buf_append(&r->err, msg, strlen(msg));
                run_finish(r);
        }
}

/* The running command (if any) is killed and answered, and a fresh shell takes over for
 * what is queued. */
static void hook_lost(SbxSession *s, bool never_started) {
        SbxRun *r = s->current;
        if (s->core->dying && s->core->setup_error[0]) {
                /* The sandbox never was: its shell could not start for that reason. */
                char msg[640];
                snprintf(msg, sizeof msg, "sbx: the sandbox's setup failed: %s\n", s->core->setup_error);
                fail_all(s, 1, msg);
                return;
        }
        if (never_started) {
                /* It cannot start at all (no bash in the root, exec refused). Answer what waits
                 * instead of retrying in a loop; the next run tries again. */
                s->broken = true;
                char msg[512];
                if (s->shell == SBX_SHELL_BASH && s->core->image) {
                        snprintf(msg, sizeof msg, "sbx: the session shell could not start: image %.200s has a /bin/bash "
                                 "that cannot run here or cannot load sbx's session builtin (it needs a glibc bash for "
                                 "this machine's architecture; a musl one, Alpine's, cannot load it)\n", s->core->image);
                        fail_all(s, 127, msg);
                        return;
                }
                fail_all(s, 127, s->shell != SBX_SHELL_BASH
                                         ? "sbx: the code interpreter could not start (is /usr/bin/python3 installed on the host?)\n"
                                         : "sbx: the session shell could not start (is /bin/bash usable in this root?)\n");
                return;
        }
        if (r && r->sent && !r->killed) {
                r->exit_code = 137;
                r->session_reset = true;
                (void)cgroup_kill(r->cg);
                run_finish(r);
        } else if (s->shell == SBX_SHELL_BASH) {
                s->reset_unsaid = true;
        }
        if (s->core->dying) {
                /* The sandbox is gone: what waits would only time out. */
                fail_all(s, 1, "sbx: the sandbox is gone (its pid 1 exited)\n");
                return;
        }
        if (session_start_shell(s) < 0) {
                log_warn("session %s: cannot restart shell", s->name);
                s->broken = true;
        }
}

const SessionHooks run_session_hooks = {
        .idle = hook_idle, .ended = hook_ended, .detached = hook_detached, .died = hook_died,
        .lost = hook_lost,
};

/* ---------------------------------------------------------------- queueing */

/* A run of session s with no fds yet and output buffers capped as given. */
static SbxRun *run_new(SbxSession *s, size_t out_cap, size_t err_cap, SbxDoneFn done, void *ud) {
        SbxRun *r = calloc(1, sizeof *r);
        if (!r)
                return NULL;
        r->s = s;
        r->out_fd = r->err_fd = r->in_fd = r->timer_fd = r->cg = r->cg_events = r->ev_fd = -1;
        r->detach_fds[0] = r->detach_fds[1] = r->detach_fds[2] = -1;
        buf_init(&r->out, out_cap);
        buf_init(&r->err, err_cap);
        buf_init(&r->past, SIZE_MAX);
        buf_init(&r->ev, SBX_CODE_EVENT_LINE_BYTES);
        r->on_done = done;
        r->ud = ud;
        r->seq = ++s->seq;
        return r;
}

/* A refused run's answer: its stderr as output, then its result. */
static void refused_deliver(void *data) {
        SbxRun *r = data;
        if (r->on_output && r->err.len)
                r->on_output(r->ud, SBX_STDERR, r->err.data, r->err.len);
        run_finish(r);
}

/* Refused before it reaches the shell: answered from the loop, never before the call that
 * made it returns. */
static void run_refuse(SbxRun *r, const char *msg) {
        SbxSession *s = r->s;
        r->exit_code = 1;
        r->error_class = SBX_ERROR_LIMIT_EXCEEDED;
        r->killed = true; /* nothing left to cancel */
        (void)buf_append(&r->err, msg, strlen(msg));
        r->next = s->refused;
        s->refused = r;
        (void)loop_defer(s->core->loop, refused_deliver, r);
}

/* Checks a caller's options; returns the bytes its env entries take, or -errno. */
static long run_check_options(const SbxRunOptions *o) {
        if (!o || (!o->command && o->command_len > 0) || o->timeout_ms > SBX_MAX_TIMEOUT_MS)
                return -EINVAL;
        if (o->cwd && (strlen(o->cwd) == 0 || strlen(o->cwd) >= SBX_MAX_PATH_BYTES))
                return -EINVAL;
        if (o->leftovers != SBX_LEFTOVERS_DEFAULT && o->leftovers != SBX_LEFTOVERS_KEEP &&
            o->leftovers != SBX_LEFTOVERS_KILL)
                return -EINVAL;
        size_t env_len = 0, n_env = 0;
        for (const char *const *e = o->env; e && *e; e++, n_env++) {
                const char *eq = strchr(*e, '=');
                if (!eq || !env_name_valid(*e, (size_t)(eq - *e)) || n_env >= SBX_MAX_RUN_ENV)
                        return -EINVAL;
                env_len += strlen(*e) + 1;
        }
        return env_len > SBX_MAX_RUN_ENV_BYTES ? -E2BIG : (long)env_len;
}

/* Copies the caller's command, cwd, env and stdin into the run. Returns 0 or -ENOMEM. */
static int run_copy_options(SbxRun *r, const SbxRunOptions *o, size_t env_len) {
        r->command = malloc(o->command_len + 1);
        r->cwd = o->cwd ? strdup(o->cwd) : NULL;
        r->env = env_len ? malloc(env_len) : NULL;
        r->stdin_data = o->stdin_len ? malloc(o->stdin_len) : NULL;
        if (!r->command || (o->cwd && !r->cwd) || (env_len && !r->env) || (o->stdin_len && !r->stdin_data))
                return -ENOMEM;
        if (o->command_len)
                memcpy(r->command, o->command, o->command_len);
        r->command[o->command_len] = 0; /* sbx_session_current() hands it out as a string */
        r->command_len = o->command_len;
        size_t off = 0;
        for (const char *const *e = o->env; e && *e; e++) {
                size_t l = strlen(*e) + 1;
                memcpy(r->env + off, *e, l);
                off += l;
        }
        r->env_len = env_len;
        if (o->stdin_len)
                memcpy(r->stdin_data, o->stdin_data, o->stdin_len);
        r->stdin_len = o->stdin_len;
        return 0;
}

static int session_run(SbxSession *s, const SbxRunOptions *o, bool events, SbxOutputFn on_output, SbxDoneFn on_done,
                       void *ud, SbxRun **ret);

int sbx_session_run(SbxSession *s, const SbxRunOptions *o, SbxOutputFn on_output, SbxDoneFn on_done, void *ud,
                    SbxRun **ret) {
        if (s->shell != SBX_SHELL_BASH)
                return -EPROTOTYPE;
        return session_run(s, o, false, on_output, on_done, ud, ret);
}

int sbx_session_run_code(SbxSession *s, const SbxRunOptions *o, SbxOutputFn on_output, SbxDoneFn on_done, void *ud,
                         SbxRun **ret) {
        if (s->shell == SBX_SHELL_BASH)
                return -EPROTOTYPE;
        if (!o || o->stdin_data || o->stdin_len || o->get_env)
                return -EINVAL;
        return session_run(s, o, true, on_output, on_done, ud, ret);
}

static int session_run(SbxSession *s, const SbxRunOptions *o, bool events, SbxOutputFn on_output, SbxDoneFn on_done,
                       void *ud, SbxRun **ret) {
        SandboxCore *core = s->core;
        long env_len = run_check_options(o);
        if (env_len < 0)
                return (int)env_len;
        if (s->n_queued + (s->current != NULL) >= SBX_MAX_QUEUED_RUNS)
                return -EBUSY;
        SbxRun *r = run_new(s, core->limits.stdout_bytes, core->limits.stderr_bytes, on_done, ud);
        if (!r)
                return -ENOMEM;
        r->on_output = on_output;
        r->events = events;
        if (core->redact) {
                r->redacting = true;
                for (int k = 0; k < 2; k++) {
                        Buf *b = k == 0 ? &r->out : &r->err;
                        r->raw_cap[k] = b->limit;
                        b->limit = b->limit > SIZE_MAX / SBX_REDACT_MAX_EXPANSION ? SIZE_MAX
                                                                                 : b->limit * SBX_REDACT_MAX_EXPANSION;
                }
                redact_stream_init(&r->rs_out, core->redact);
                redact_stream_init(&r->rs_err, core->redact);
        }
        r->order = ++core->run_order;
        r->timeout_ms = o->timeout_ms ? o->timeout_ms : core->timeout_ms;
        r->persist_env = o->persist_env;
        r->get_env = o->get_env;
        r->kill_leftovers = o->leftovers == SBX_LEFTOVERS_DEFAULT ? core->kill_leftovers
                                                                   : o->leftovers == SBX_LEFTOVERS_KILL;
        if (o->command_len > core->limits.command_bytes) {
                char msg[128];
                snprintf(msg, sizeof msg, "sbx: the command was not run: it is %zu bytes, over the limit of %llu\n",
                         o->command_len, (unsigned long long)core->limits.command_bytes);
                run_refuse(r, msg);
        } else if (run_copy_options(r, o, (size_t)env_len) < 0) {
                run_free(r);
                return -ENOMEM;
        } else {
                run_enqueue(s, r);
        }
        if (ret)
                *ret = r;
        return 0;
}

int run_detach(SbxSession *s, const SbxRunOptions *o, const int fds[3], bool pty, RunDetach *to, SbxDoneFn done,
               void *ud, SbxRun **ret) {
        SandboxCore *core = s->core;
        long env_len = run_check_options(o);
        int rr = env_len < 0 ? (int)env_len : 0;
        SbxRun *r = NULL;
        if (rr == 0 && o->command_len > core->limits.command_bytes)
                rr = -E2BIG;
        if (rr == 0 && s->n_queued + (s->current != NULL) >= SBX_MAX_QUEUED_RUNS)
                rr = -EBUSY;
        if (rr == 0 && !(r = run_new(s, 0, SBX_INTERNAL_STDERR_BYTES, done, ud)))
                rr = -ENOMEM;
        if (rr < 0) {
                for (int i = 0; i < 3; i++)
                        safe_close(fds[i]);
                return rr;
        }
        for (int i = 0; i < 3; i++)
                r->detach_fds[i] = fds[i];
        r->detach = true;
        r->pty = pty;
        r->detach_to = to;
        r->kill_leftovers = true; /* only its worker is in its cgroup if it never detaches */
        r->order = ++core->run_order;
        r->timeout_ms = SBX_STATE_TIMEOUT_MS;
        SbxRunOptions copy = *o;
        copy.stdin_len = 0;
        if (run_copy_options(r, &copy, (size_t)env_len) < 0) {
                run_free(r);
                return -ENOMEM;
        }
        run_enqueue(s, r);
        if (ret)
                *ret = r;
        return 0;
}

/* Puts an internal run at the head of s's queue: first of all (skip false), or behind the
 * internal runs there and, with mark, the runs ordered up to mark. */
static void queue_internal(SbxSession *s, SbxRun *r, bool skip, uint64_t mark) {
        SbxRun **pp = &s->queue;
        while (skip && *pp && ((*pp)->internal || (mark && (*pp)->order <= mark)))
                pp = &(*pp)->next;
        r->next = *pp;
        *pp = r;
        if (!r->next)
                s->queue_tail = r;
        s->n_queued++;
        run_pump_later(s);
}

int run_internal_env(SbxSession *s, const char *const *env, SbxDoneFn done, void *ud) {
        SbxRunOptions o = { .command = "", .env = env, .persist_env = true };
        long env_len = run_check_options(&o);
        if (env_len < 0)
                return (int)env_len;
        SbxRun *r = run_new(s, SBX_INTERNAL_STDERR_BYTES, SBX_INTERNAL_STDERR_BYTES, done, ud);
        if (!r)
                return -ENOMEM;
        r->timeout_ms = SBX_STATE_TIMEOUT_MS;
        r->internal = true;
        r->persist_env = true;
        if (run_copy_options(r, &o, (size_t)env_len) < 0) {
                run_free(r);
                return -ENOMEM;
        }
        queue_internal(s, r, true, 0);
        return 0;
}

int run_internal(SbxSession *s, uint32_t flags, const uint8_t *in, size_t in_len, uint64_t mark, SbxDoneFn done,
                 void *ud) {
        SbxRun *r = run_new(s, SBX_MAX_STATE_BYTES, SBX_INTERNAL_STDERR_BYTES, done, ud);
        if (!r)
                return -ENOMEM;
        r->timeout_ms = SBX_STATE_TIMEOUT_MS;
        r->internal = true;
        r->wire_flags = flags;
        r->command = strdup("");
        if (in_len) {
                r->stdin_data = malloc(in_len);
                if (r->stdin_data)
                        memcpy(r->stdin_data, in, in_len);
                r->stdin_len = in_len;
        }
        if (!r->command || (in_len && !r->stdin_data)) {
                run_free(r);
                return -ENOMEM;
        }
        queue_internal(s, r, mark > 0, mark);
        return 0;
}

void run_cancel_all(SbxSession *s) {
        loop_cancel_defer(s->core->loop, s);
        s->pump_pending = false;
        while (s->refused)
                refused_deliver(s->refused);
        while (s->queue)
                run_kill(s->queue, SBX_ERROR_CANCELLED);
        if (s->current) {
                SbxRun *r = s->current;
                if (r->sent && r->cg >= 0)
                        (void)cgroup_kill(r->cg);
                r->killed = true;
                r->exit_code = SBX_EXIT_CANCELLED;
                r->error_class = SBX_ERROR_CANCELLED;
                run_finish(r);
        }
        loop_cancel_defer(s->core->loop, s);
        s->pump_pending = false;
}

int run_restart_session(SbxSession *s) {
        if (s->current)
                return -EBUSY;
        session_close_shell(s);
        int r = session_start_shell(s);
        s->broken = r < 0;
        return r;
}

/* ---------------------------------------------------------------- public: runs */

int sbx_run_cancel(SbxRun *r) {
        if (!r || r->finished || r->killed)
                return -ESRCH;
        run_kill(r, SBX_ERROR_CANCELLED);
        return 0;
}

bool sbx_run_started(const SbxRun *r) { return r->sent; }

void sbx_run_pause_output(SbxRun *r, bool paused) {
        Loop *l = r->s->core->loop;
        if (r->paused == paused)
                return;
        r->paused = paused;
        if (r->out_w.active)
                (void)loop_mod(l, &r->out_w, paused ? 0 : EPOLLIN);
        if (r->err_w.active)
                (void)loop_mod(l, &r->err_w, paused ? 0 : EPOLLIN);
        if (r->ev_w.active)
                (void)loop_mod(l, &r->ev_w, paused ? 0 : EPOLLIN);
}

typedef struct SyncRun {
        bool done;
        SbxResult *res;
        SbxOutputFn fn;
        void *ud;
} SyncRun;

static void sync_output(void *ud, SbxStream st, const uint8_t *d, size_t n) {
        SyncRun *sr = ud;
        if (sr->fn)
                sr->fn(sr->ud, st, d, n);
}

static uint8_t *dup_bytes(const uint8_t *d, size_t n) {
        uint8_t *p = malloc(n + 1);
        if (p) {
                if (n)
                        memcpy(p, d, n);
                p[n] = 0;
        }
        return p;
}

static void sync_done(void *ud, const SbxResult *r) {
        SyncRun *sr = ud;
        *sr->res = *r;
        sr->res->stdout_data = dup_bytes(r->stdout_data, r->stdout_len);
        sr->res->stderr_data = dup_bytes(r->stderr_data, r->stderr_len);
        sr->done = true;
}

int sbx_session_run_sync(SbxSession *s, const SbxRunOptions *o, SbxOutputFn on_output, void *ud, SbxResult *ret) {
        SyncRun sr = { .res = ret, .fn = on_output, .ud = ud };
        int r = sbx_session_run(s, o, sync_output, sync_done, &sr, NULL);
        if (r < 0)
                return r;
        while (!sr.done) {
                r = loop_run_once(s->core->loop, -1);
                if (r < 0)
                        return r;
        }
        return 0;
}

void sbx_result_clear(SbxResult *r) {
        free((void *)r->stdout_data);
        free((void *)r->stderr_data);
        r->stdout_data = r->stderr_data = NULL;
}
