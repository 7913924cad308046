/* SPDX-License-Identifier: MIT */
/* libsbx's public API: contexts, sandboxes, sessions and runs.
 *
 * A session is a holder bash (the state) plus, most of the time, one idle worker forked
 * from it (see bashext/session_builtin.c). Its state machine, driven by messages on the
 * session socket:
 *
 *   STARTING --HELLO--> WAIT_READY --SPAWNED--> IDLE --run--> RUNNING
 *   RUNNING --DONE--> WAIT_READY        (worker became the holder; old holder is killed)
 *   RUNNING --DIED--> WAIT_READY        (worker died on its own; holder forks a new one)
 *   RUNNING --timeout/cancel--> KILLING --DIED--> WAIT_READY
 *
 * On SPAWNED (the holder's word, with a pidfd, on the worker it just forked) the daemon creates
 * the next command's cgroup and moves the worker into it before it has any command, so
 * containment costs nothing when the command arrives. A killed run ends when its cgroup
 * is empty (cgroup.events), which is the proof that every process it started is gone. */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <grp.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include "base/buf.h"
#include "base/limits.h"
#include "base/log.h"
#include "base/loop.h"
#include "base/util.h"
#include "fs/files.h"
#include "sandbox/box.h"
#include "session/internal.h"
#include "session/private.h"
#include "session/wire.h"
#include "sbx/sbx.h"

static const char *const default_env[] = {
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME=/home/user", "USER=user", "LOGNAME=user", "LANG=C.UTF-8", "TERM=dumb",
        "PAGER=cat", "GIT_PAGER=cat", "SHELL=/bin/bash", "HOSTNAME=sandbox",
};

const char *sbx_version(void) { return SBX_VERSION; }

const char *sbx_error_class_name(SbxErrorClass c) {
        switch (c) {
        case SBX_ERROR_TIMEOUT: return "TIMEOUT";
        case SBX_ERROR_CANCELLED: return "CANCELLED";
        case SBX_ERROR_LIMIT_EXCEEDED: return "LIMIT_EXCEEDED";
        case SBX_ERROR_NONE:
        default: return NULL;
        }
}

static int pidfd_open(pid_t pid) {
        long fd = syscall(SYS_pidfd_open, pid, 0);
        if (fd < 0)
                return negerrno();
        if (fcntl((int)fd, F_SETFD, FD_CLOEXEC) < 0) {
                close((int)fd);
                return -EIO;
        }
        return (int)fd;
}

static bool pidfd_dead(int pidfd) {
        struct pollfd p = { .fd = pidfd, .events = POLLIN };
        return poll(&p, 1, 0) != 0;
}

static void pidfd_kill(int pidfd) {
        if (pidfd >= 0)
                (void)syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
}

#define LIST_LINK(head, item)                           \
        do {                                            \
                (item)->prev = NULL;                    \
                (item)->next = (head);                  \
                if (head)                               \
                        (head)->prev = (item);          \
                (head) = (item);                        \
        } while (0)
#define LIST_UNLINK(head, item)                         \
        do {                                            \
                if ((item)->prev) {                     \
                        (item)->prev->next = (item)->next; \
                } else {                                \
                        (head) = (item)->next;          \
                }                                       \
                if ((item)->next)                       \
                        (item)->next->prev = (item)->prev; \
                (item)->next = (item)->prev = NULL;     \
        } while (0)

/* ---------------------------------------------------------------- background log */

static void bg_pipe_free(BgPipe *p) {
        loop_del(p->sb->ctx->loop, &p->w);
        safe_close(p->fd);
        LIST_UNLINK(p->sb->bg_pipes, p);
        free(p);
}

static void bg_pipe_event(Watch *w, uint32_t events) {
        BgPipe *p = w->data;
        uint8_t buf[65536];
        for (int i = 0; i < 16; i++) {
                ssize_t n = read(p->fd, buf, sizeof buf);
                if (n > 0) {
                        ring_append(&p->sb->bglog, buf, (size_t)n);
                        continue;
                }
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        return;
                bg_pipe_free(p);
                return;
        }
}

/* Takes ownership of fd, a pipe's read end. */
static void bg_pipe_adopt(SbxSandbox *sb, int fd) {
        unsigned n = 0;
        BgPipe *oldest = NULL;
        for (BgPipe *p = sb->bg_pipes; p; p = p->next, n++)
                oldest = p; /* the list is newest first */
        if (n >= SBX_MAX_BACKGROUND_PIPES && oldest)
                bg_pipe_free(oldest);
        BgPipe *p = calloc(1, sizeof *p);
        if (!p || loop_add(sb->ctx->loop, &p->w, fd, EPOLLIN, bg_pipe_event, p) < 0) {
                /* Out of memory: closing is the only option left; a writer may see EPIPE. */
                free(p);
                close(fd);
                return;
        }
        p->sb = sb;
        p->fd = fd;
        LIST_LINK(sb->bg_pipes, p);
}

#define BG_SWEEP_MS 1000

static void bg_cgroup_free(SbxSandbox *sb, BgCgroup *c) {
        LIST_UNLINK(sb->bg_cgroups, c);
        free(c);
}

/* Removes the retired cgroups that have emptied; comes back while any is left. */
static void bg_sweep(Watch *w, uint32_t events) {
        SbxSandbox *sb = w->data;
        uint64_t x;
        (void)!read(sb->bg_timer, &x, sizeof x);
        for (BgCgroup *c = sb->bg_cgroups, *next; c; c = next) {
                next = c->next;
                if (cgroup_child_remove(&sb->box.cg, c->name) == 0)
                        bg_cgroup_free(sb, c);
        }
        if (sb->bg_cgroups)
                (void)timerfd_arm_ms(sb->bg_timer, BG_SWEEP_MS);
}

/* A command cgroup whose command ended: removed now if empty, else swept later. */
static void cgroup_retire(SbxSandbox *sb, int dir, const char *name) {
        safe_close(dir);
        if (cgroup_child_remove(&sb->box.cg, name) == 0)
                return;
        BgCgroup *c = calloc(1, sizeof *c);
        if (!c)
                return; /* removed with the sandbox */
        snprintf(c->name, sizeof c->name, "%s", name);
        LIST_LINK(sb->bg_cgroups, c);
        if (sb->bg_timer >= 0)
                (void)timerfd_arm_ms(sb->bg_timer, BG_SWEEP_MS);
}

unsigned sbx_sandbox_kill_background(SbxSandbox *sb) {
        unsigned n = 0;
        for (BgCgroup *c = sb->bg_cgroups; c; c = c->next) {
                _cleanup_close_ int dir = openat(sb->box.cg.dir, c->name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (dir >= 0 && cgroup_kill(dir) == 0)
                        n++;
        }
        if (n > 0 && sb->bg_timer >= 0)
                (void)timerfd_arm_ms(sb->bg_timer, 50);
        return n;
}

size_t sbx_sandbox_background_log(const SbxSandbox *sb, uint8_t *buf, size_t size) {
        if (size < sb->bglog.len) {
                uint8_t *all = malloc(sb->bglog.len);
                if (!all)
                        return 0;
                size_t n = ring_copy(&sb->bglog, all);
                memcpy(buf, all + (n - size), size);
                free(all);
                return size;
        }
        return ring_copy(&sb->bglog, buf);
}

/* ---------------------------------------------------------------- runs */

static void session_pump(SbxSession *s);
static void session_pump_deferred(void *data);
static int session_start_shell(SbxSession *s);

static void schedule_pump(SbxSession *s) {
        if (!s->pump_pending && loop_defer(s->sb->ctx->loop, session_pump_deferred, s) == 0)
                s->pump_pending = true;
}

static void run_close_io(SbxRun *r) {
        Loop *l = r->s->sb->ctx->loop;
        loop_del(l, &r->in_w);
        r->in_fd = safe_close(r->in_fd);
        loop_del(l, &r->timer_w);
        r->timer_fd = safe_close(r->timer_fd);
        loop_del(l, &r->cg_w);
        r->cg_events = safe_close(r->cg_events);
}

static void run_free(SbxRun *r) {
        Loop *l = r->s->sb->ctx->loop;
        loop_cancel_defer(l, r);
        loop_del(l, &r->out_w);
        loop_del(l, &r->err_w);
        safe_close(r->out_fd);
        safe_close(r->err_fd);
        run_close_io(r);
        safe_close(r->cg);
        buf_done(&r->out);
        buf_done(&r->err);
        free(r->command);
        free(r->cwd);
        free(r->env);
        free(r->stdin_data);
        free(r);
}

/* Reads what a pipe has now, straight into the result buffer while under the cap, into a
 * scratch buffer past it (read and dropped). Returns false at EOF or error. */
static bool run_read(SbxRun *r, int fd, SbxStream stream, size_t budget) {
        static uint8_t discard[SBX_PIPE_BYTES]; /* one thread: one scratch buffer */
        Buf *b = stream == SBX_STDOUT ? &r->out : &r->err;
        while (budget > 0) {
                long room = buf_reserve(b, MIN(budget, (size_t)SBX_PIPE_BYTES));
                uint8_t *dst = room > 0 ? b->data + b->len : discard;
                size_t len = room > 0 ? (size_t)room : MIN(budget, sizeof discard);
                ssize_t n = read(fd, dst, len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return true;
                if (n <= 0)
                        return false;
                if (room > 0) {
                        buf_commit(b, (size_t)n);
                        /* Only what the cap keeps is streamed, so a consumer never sees bytes
                         * the result does not have. */
                        if (r->on_output)
                                r->on_output(r->ud, stream, dst, (size_t)n);
                } else {
                        buf_drop(b, (size_t)n);
                }
                budget = budget > (size_t)n ? budget - (size_t)n : 0;
        }
        return true;
}

static void run_output_event(Watch *w, uint32_t events) {
        SbxRun *r = w->data;
        bool is_out = w == &r->out_w;
        int *fd = is_out ? &r->out_fd : &r->err_fd;
        /* A bounded amount per wakeup keeps one noisy command from starving the loop. */
        if (!run_read(r, *fd, is_out ? SBX_STDOUT : SBX_STDERR, 4 * SBX_PIPE_BYTES)) {
                loop_del(r->s->sb->ctx->loop, w);
                *fd = safe_close(*fd);
        }
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
        loop_del(r->s->sb->ctx->loop, &r->in_w);
        r->in_fd = safe_close(r->in_fd);
}

/* Ends a run: result to the caller, pipes and cgroup handed over or released. */
static void run_finish(SbxRun *r) {
        SbxSession *s = r->s;
        SbxSandbox *sb = s->sb;
        if (r->finished)
                return;
        r->finished = true;
        if (s->current == r)
                s->current = NULL;

        /* Everything the command wrote before it ended is in the pipes now (a bounded drain:
         * background writers could keep a pipe full forever; their bytes go to the log). */
        if (r->out_fd >= 0 && !run_read(r, r->out_fd, SBX_STDOUT, 2 * SBX_PIPE_BYTES)) {
                loop_del(sb->ctx->loop, &r->out_w);
                r->out_fd = safe_close(r->out_fd);
        }
        if (r->err_fd >= 0 && !run_read(r, r->err_fd, SBX_STDERR, 2 * SBX_PIPE_BYTES)) {
                loop_del(sb->ctx->loop, &r->err_w);
                r->err_fd = safe_close(r->err_fd);
        }
        run_close_io(r);
        if (r->out_fd >= 0) {
                loop_del(sb->ctx->loop, &r->out_w);
                bg_pipe_adopt(sb, TAKE_FD(r->out_fd));
        }
        if (r->err_fd >= 0) {
                loop_del(sb->ctx->loop, &r->err_w);
                bg_pipe_adopt(sb, TAKE_FD(r->err_fd));
        }
        if (r->cg >= 0)
                cgroup_retire(sb, TAKE_FD(r->cg), r->cg_name);

        SbxResult res = {
                .exit_code = r->exit_code,
                .error_class = r->error_class,
                .stdout_data = r->out.data, .stdout_len = r->out.len,
                .stderr_data = r->err.data, .stderr_len = r->err.len,
                .stdout_truncated = r->out.truncated, .stderr_truncated = r->err.truncated,
                .exec_time_us = r->t_start ? (now_ns() - r->t_start) / 1000 : 0,
        };
        if (r->on_done)
                r->on_done(r->ud, &res);
        run_free(r);
        schedule_pump(s);
}

static void run_finish_deferred(void *data) { run_finish(data); }

static void run_cgroup_event(Watch *w, uint32_t events) {
        SbxRun *r = w->data;
        if (cgroup_populated(r->cg) == 0)
                run_finish(r);
}

/* Timeout or cancel. A run that has not reached a worker simply ends; a running one has its
 * cgroup killed and ends when the cgroup is empty. */
static void run_kill(SbxRun *r, SbxErrorClass why) {
        SbxSession *s = r->s;
        if (r->finished || r->killed)
                return;
        r->killed = true;
        r->error_class = why;
        r->exit_code = why == SBX_ERROR_TIMEOUT ? SBX_EXIT_TIMEOUT : SBX_EXIT_CANCELLED;
        if (!r->sent) {
                if (s->current == r && why == SBX_ERROR_TIMEOUT && s->state == SS_WAIT_READY) {
                        /* The whole timeout passed without a worker: the holder cannot fork,
                         * which means the sandbox's process limit is held by what earlier
                         * commands left running (a backgrounded fork bomb). Those processes
                         * starve the session, so they go; otherwise it would stay bricked. */
                        static const char msg[] = "sbx: no worker could start in time (process limit reached?); "
                                                  "background processes of earlier commands were killed\n";
                        unsigned n = sbx_sandbox_kill_background(s->sb);
                        size_t before = r->err.len;
                        if (n > 0)
                                (void)buf_append(&r->err, msg, sizeof msg - 1);
                        if (r->on_output && r->err.len > before)
                                r->on_output(r->ud, SBX_STDERR, r->err.data + before, r->err.len - before);
                }
                if (s->current == r)
                        s->current = NULL;
                else {
                        SbxRun **pp = &s->queue;
                        while (*pp && *pp != r)
                                pp = &(*pp)->next;
                        if (*pp) {
                                *pp = r->next;
                                if (s->queue_tail == r) {
                                        s->queue_tail = NULL;
                                        for (SbxRun *q = s->queue; q; q = q->next)
                                                s->queue_tail = q;
                                }
                                s->n_queued--;
                        }
                }
                run_finish(r);
                return;
        }
        s->state = SS_KILLING;
        (void)cgroup_kill(r->cg);
        loop_del(s->sb->ctx->loop, &r->timer_w);
        r->cg_events = cgroup_events_open(r->cg);
        /* Finished from the loop, never here: the caller may be this run's own output
         * callback, with the run still on its stack. */
        if (r->cg_events < 0 ||
            loop_add(s->sb->ctx->loop, &r->cg_w, r->cg_events, EPOLLPRI, run_cgroup_event, r) < 0 ||
            cgroup_populated(r->cg) == 0)
                (void)loop_defer(s->sb->ctx->loop, run_finish_deferred, r);
}

static void run_timer_event(Watch *w, uint32_t events) {
        SbxRun *r = w->data;
        uint64_t x;
        (void)!read(r->timer_fd, &x, sizeof x);
        run_kill(r, SBX_ERROR_TIMEOUT);
}

static int make_pipe(int *rd, int *wr) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return negerrno();
        (void)fcntl(p[0], F_SETPIPE_SZ, (int)SBX_PIPE_BYTES);
        *rd = p[0];
        *wr = p[1];
        return 0;
}

/* An unpredictable 64-bit value per run: xorshift64* seeded from getrandom per session. */
static uint64_t next_nonce(SbxSession *s) {
        if (s->nonce_state == 0 && getrandom(&s->nonce_state, sizeof s->nonce_state, 0) != sizeof s->nonce_state)
                s->nonce_state = now_ns() | 1;
        s->nonce_state ^= s->nonce_state >> 12;
        s->nonce_state ^= s->nonce_state << 25;
        s->nonce_state ^= s->nonce_state >> 27;
        return s->nonce_state * 0x2545F4914F6CDD1DULL;
}

/* Sends the current run to the idle worker. */
static int run_send(SbxSession *s, SbxRun *r) {
        SbxContext *ctx = s->sb->ctx;
        int fds[WIRE_RUN_FDS] = { -1, -1, -1 };
        int r_in = -1, rr;

        if ((rr = make_pipe(&r->out_fd, &fds[1])) < 0 || (rr = make_pipe(&r->err_fd, &fds[2])) < 0)
                goto out;
        if (r->stdin_len > 0) {
                if ((rr = make_pipe(&r_in, &r->in_fd)) < 0)
                        goto out;
                fds[0] = r_in;
        } else {
                fds[0] = ctx->devnull;
        }
        r->nonce = next_nonce(s);
        WireHdr h = { .type = WIRE_RUN, .seq = r->seq, .nonce = r->nonce,
                      .cwd_len = r->cwd ? (uint32_t)strlen(r->cwd) : 0,
                      .env_len = (uint32_t)r->env_len, .cmd_len = (uint32_t)r->command_len,
                      .flags = (r->persist_env ? WIRE_F_PERSIST_ENV : 0) | (r->get_env ? WIRE_F_GETENV : 0) |
                               (r->wire_flags & (WIRE_F_DUMP | WIRE_F_RESTORE)) };
        struct iovec iov[4] = {
                { &h, sizeof h }, { r->cwd, h.cwd_len }, { r->env, r->env_len },
                { r->command, r->command_len },
        };
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int) * WIRE_RUN_FDS)];
        } cm;
        struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 4,
                             .msg_control = cm.buf, .msg_controllen = sizeof cm.buf };
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof fds);
        memcpy(CMSG_DATA(c), fds, sizeof fds);
        if (sendmsg(s->sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
                rr = negerrno();
                goto out;
        }
        (void)fd_set_nonblock(r->out_fd, true);
        (void)fd_set_nonblock(r->err_fd, true);
        uint32_t ev = r->paused ? 0 : EPOLLIN;
        if ((rr = loop_add(ctx->loop, &r->out_w, r->out_fd, ev, run_output_event, r)) < 0 ||
            (rr = loop_add(ctx->loop, &r->err_w, r->err_fd, ev, run_output_event, r)) < 0)
                goto out;
        if (r->in_fd >= 0) {
                (void)fd_set_nonblock(r->in_fd, true);
                if ((rr = loop_add(ctx->loop, &r->in_w, r->in_fd, EPOLLOUT, run_stdin_event, r)) < 0)
                        goto out;
        }
        rr = 0;
out:
        safe_close(fds[1]);
        safe_close(fds[2]);
        safe_close(r_in);
        return rr;
}

static void session_pump(SbxSession *s) {
        s->pump_pending = false;
        if (s->broken && s->queue && !s->sb->dying) {
                s->broken = false;
                if (session_start_shell(s) < 0)
                        s->broken = true;
        }
        if (!s->current && s->queue && (s->queue->internal || !image_run_held(s->sb, s->queue->order))) {
                SbxRun *r = s->queue;
                s->queue = r->next;
                if (!s->queue)
                        s->queue_tail = NULL;
                s->n_queued--;
                r->next = NULL;
                s->current = r;
                r->t_start = now_ns();
                r->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
                if (r->timer_fd < 0 ||
                    loop_add(s->sb->ctx->loop, &r->timer_w, r->timer_fd, EPOLLIN, run_timer_event, r) < 0 ||
                    timerfd_arm_ms(r->timer_fd, r->timeout_ms) < 0) {
                        r->exit_code = 1;
                        run_finish(r);
                        return;
                }
                if (r->wire_flags & RUN_BARRIER) {
                        /* Everything queued before it has ended: that is all it waits for. */
                        r->exit_code = 0;
                        run_finish(r);
                        return;
                }
        }
        SbxRun *r = s->current;
        if (!r || r->sent || s->state != SS_IDLE)
                return;
        r->cg = TAKE_FD(s->cg);
        memcpy(r->cg_name, s->cg_name, sizeof r->cg_name);
        if (run_send(s, r) < 0) {
                log_debug("session %s: cannot send run", s->name);
                r->exit_code = 1;
                run_finish(r);
                return;
        }
        r->sent = true;
        s->state = SS_RUNNING;
}

static void session_pump_deferred(void *data) { session_pump(data); }

/* ---------------------------------------------------------------- session messages */

static void holder_event(Watch *w, uint32_t events);

static void set_holder(SbxSession *s, pid_t pid) {
        Loop *l = s->sb->ctx->loop;
        loop_del(l, &s->holder_w);
        s->holder_pidfd = safe_close(s->holder_pidfd);
        s->holder_pid = pid;
        int fd = pidfd_open(pid);
        if (fd >= 0 && loop_add(l, &s->holder_w, fd, EPOLLIN, holder_event, s) == 0)
                s->holder_pidfd = fd;
        else
                safe_close(fd);
}

/* The pid a pidfd refers to, as the daemon sees it; 0 if unknown. */
static pid_t pidfd_pid(int fd) {
        char path[64], info[512];
        snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
        if (read_file_at(AT_FDCWD, path, info, sizeof info) <= 0)
                return 0;
        const char *p = strstr(info, "\nPid:");
        int pid;
        return p && sscanf(p + 5, "%d", &pid) == 1 && pid > 0 ? (pid_t)pid : 0;
}

static void on_ready(SbxSession *s, pid_t pid);

static void forget_worker(SbxSession *s) {
        s->worker_pidfd = safe_close(s->worker_pidfd);
        s->spawned_pid = 0;
}

static void on_spawned(SbxSession *s, int fd) {
        pid_t pid = pidfd_pid(fd);
        if (s->state != SS_WAIT_READY || !pid) {
                close(fd);
                return;
        }
        forget_worker(s);
        s->worker_pidfd = fd;
        s->spawned_pid = pid;
        on_ready(s, pid);
}

static void on_ready(SbxSession *s, pid_t pid) {
        SbxSandbox *sb = s->sb;
        /* The worker is the process the holder announced (SPAWNED): that is all the daemon
         * needs to contain it. No message of the worker itself is waited for, since anything
         * inside the sandbox can write to the session socket, and a flood of forged messages
         * must not be able to hide or stand in for it. */
        if (s->state != SS_WAIT_READY || s->spawned_pid != pid)
                return;
        snprintf(s->cg_name, sizeof s->cg_name, "c%llu", (unsigned long long)++sb->next_cmd);
        int dir = cgroup_child_create(&sb->box.cg, s->cg_name);
        if (dir < 0 || cgroup_move(dir, pid) < 0) {
                /* Without its cgroup the worker must not run anything: kill it; the holder
                 * reports the death and forks another. */
                log_warn("session %s: cannot contain worker: %s", s->name, strerror(dir < 0 ? -dir : errno));
                safe_close(dir);
                (void)cgroup_child_remove(&sb->box.cg, s->cg_name);
                pidfd_kill(s->worker_pidfd);
                return;
        }
        s->cg = dir;
        s->worker_pid = pid;
        s->state = SS_IDLE;
        session_pump(s);
}

static void on_done(SbxSession *s, pid_t pid, uint32_t seq, uint64_t nonce, int status) {
        SbxRun *r = s->current;
        /* Stale (a worker we killed) or forged (written by the command itself). */
        if (s->state != SS_RUNNING || !r || r->seq != seq || pid != s->worker_pid || nonce != r->nonce)
                return;
        /* The worker is the new holder: out of the command's cgroup, old holder gone. */
        (void)cgroup_move(s->sb->box.cg.init, pid);
        int old = TAKE_FD(s->holder_pidfd);
        loop_del(s->sb->ctx->loop, &s->holder_w);
        pidfd_kill(old);
        safe_close(old);
        set_holder(s, pid);
        s->worker_pid = 0;
        forget_worker(s);
        s->state = SS_WAIT_READY;
        r->exit_code = status;
        run_finish(r);
}

static void on_died(SbxSession *s, int wstatus) {
        SbxRun *r = s->current;
        SessionState was = s->state;
        s->state = SS_WAIT_READY;
        s->worker_pid = 0;
        forget_worker(s);
        if (was == SS_IDLE) {
                /* The idle worker died (killed from inside the sandbox): drop its cgroup. */
                if (s->cg >= 0)
                        cgroup_retire(s->sb, TAKE_FD(s->cg), s->cg_name);
                return;
        }
        if (was == SS_RUNNING && r && r->sent && !r->killed) {
                r->exit_code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus)
                             : WIFSIGNALED(wstatus) ? 128 + WTERMSIG(wstatus) : 1;
                run_finish(r);
        }
}

static void session_reset(SbxSession *s);

static void session_event(Watch *w, uint32_t events) {
        SbxSession *s = w->data;
        for (int i = 0; i < 8; i++) {
                WireHdr h;
                union {
                        struct cmsghdr align;
                        char buf[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(sizeof(int) * 4)];
                } cm;
                struct iovec iov = { &h, sizeof h };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                                     .msg_control = cm.buf, .msg_controllen = sizeof cm.buf };
                ssize_t n = recvmsg(s->sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        return;
                if (n == 0 && s->holder_pidfd >= 0 && !pidfd_dead(s->holder_pidfd))
                        continue; /* an empty datagram (written from inside), not the end */
                if (n <= 0) {
                        session_reset(s);
                        return;
                }
                pid_t pid = 0;
                int fds[4], n_fds = 0;
                for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
                        if (c->cmsg_level != SOL_SOCKET)
                                continue;
                        if (c->cmsg_type == SCM_CREDENTIALS) {
                                struct ucred uc;
                                memcpy(&uc, CMSG_DATA(c), sizeof uc);
                                pid = uc.pid;
                        } else if (c->cmsg_type == SCM_RIGHTS) {
                                int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
                                for (int j = 0; j < k; j++) {
                                        int fd;
                                        memcpy(&fd, CMSG_DATA(c) + (size_t)j * sizeof fd, sizeof fd);
                                        if (n_fds < (int)ELEMENTSOF(fds))
                                                fds[n_fds++] = fd;
                                        else
                                                close(fd);
                                }
                        }
                }
                /* Only the holder may hand us an fd, and only a worker's pidfd. */
                if (n == (ssize_t)sizeof h && h.type == WIRE_SPAWNED && pid > 0 && pid == s->holder_pid && n_fds == 1) {
                        on_spawned(s, fds[0]);
                        continue;
                }
                for (int j = 0; j < n_fds; j++)
                        close(fds[j]);
                if (n != (ssize_t)sizeof h || pid <= 0)
                        continue;
                switch (h.type) {
                case WIRE_HELLO:
                        if (s->state == SS_STARTING) {
                                set_holder(s, pid);
                                s->state = SS_WAIT_READY;
                        }
                        break;
                case WIRE_DONE:
                        on_done(s, pid, h.seq, h.nonce, h.status);
                        break;
                case WIRE_DIED:
                        if (pid == s->holder_pid)
                                on_died(s, h.status);
                        break;
                default:
                        break;
                }
        }
}

/* The holder died without being told to: the session's state is lost. The running command
 * (if any) is killed and answered, and a fresh shell takes over for what is queued. */
static void holder_event(Watch *w, uint32_t events) {
        SbxSession *s = w->data;
        log_debug("session %s: holder %d died", s->name, (int)s->holder_pid);
        session_reset(s);
}

static void session_close_shell(SbxSession *s) {
        Loop *l = s->sb->ctx->loop;
        loop_del(l, &s->sock_w);
        s->sock = safe_close(s->sock);
        loop_del(l, &s->holder_w);
        pidfd_kill(s->holder_pidfd);
        s->holder_pidfd = safe_close(s->holder_pidfd);
        pidfd_kill(s->worker_pidfd);
        forget_worker(s);
        if (s->cg >= 0)
                cgroup_retire(s->sb, TAKE_FD(s->cg), s->cg_name);
        s->holder_pid = s->worker_pid = 0;
}

static void session_reset(SbxSession *s) {
        SbxRun *r = s->current;
        bool never_started = s->state == SS_STARTING;
        session_close_shell(s);
        if (never_started) {
                /* The shell died before saying hello: it cannot start at all (no bash in the
                 * root, exec refused). Answer what waits instead of retrying in a loop; the
                 * next run tries again. */
                static const char msg[] = "sbx: the session shell could not start (is /bin/bash usable in this root?)\n";
                s->broken = true;
                while ((r = s->current ? s->current : s->queue)) {
                        if (r == s->current)
                                s->current = NULL;
                        else {
                                s->queue = r->next;
                                if (!s->queue)
                                        s->queue_tail = NULL;
                                s->n_queued--;
                        }
                        r->exit_code = 127;
                        (void)buf_append(&r->err, msg, sizeof msg - 1);
                        run_finish(r);
                }
                return;
        }
        if (r && r->sent && !r->killed) {
                r->exit_code = 137;
                (void)cgroup_kill(r->cg);
                run_finish(r);
        }
        if (s->sb->dying) {
                /* The sandbox is gone: what waits would only time out. */
                static const char msg[] = "sbx: the sandbox is gone (its pid 1 exited)\n";
                while ((r = s->queue)) {
                        s->queue = r->next;
                        if (!s->queue)
                                s->queue_tail = NULL;
                        s->n_queued--;
                        r->exit_code = 1;
                        (void)buf_append(&r->err, msg, sizeof msg - 1);
                        run_finish(r);
                }
                return;
        }
        if (session_start_shell(s) < 0) {
                log_warn("session %s: cannot restart shell", s->name);
                s->broken = true;
        }
}

static int session_start_shell(SbxSession *s) {
        int sv[2];
        s->state = SS_STARTING;
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return negerrno();
        int one = 1, sndbuf = (int)WIRE_MAX_MSG * 2;
        (void)setsockopt(sv[0], SOL_SOCKET, SO_PASSCRED, &one, sizeof one);
        (void)setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
        (void)setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &sndbuf, sizeof sndbuf);
        int r = box_spawn_session(&s->sb->box, sv[1]);
        close(sv[1]);
        if (r < 0 || (r = loop_add(s->sb->ctx->loop, &s->sock_w, sv[0], EPOLLIN, session_event, s)) < 0) {
                close(sv[0]);
                return r;
        }
        s->sock = sv[0];
        return 0;
}

/* ---------------------------------------------------------------- public: sessions */

static bool session_name_valid(const char *name) {
        size_t n = strlen(name);
        if (n == 0 || n > 64)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = name[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '-' || c == '.'))
                        return false;
        }
        return true;
}

SbxSession *sbx_session_find(SbxSandbox *sb, const char *name) {
        if (!name)
                name = "default";
        for (SbxSession *s = sb->sessions; s; s = s->next)
                if (strcmp(s->name, name) == 0)
                        return s;
        return NULL;
}

int sbx_session_get(SbxSandbox *sb, const char *name, SbxSession **ret) {
        if (!name)
                name = "default";
        if (!session_name_valid(name))
                return -EINVAL;
        SbxSession *s = sbx_session_find(sb, name);
        if (s) {
                *ret = s;
                return 0;
        }
        if (sb->n_sessions >= SBX_MAX_SESSIONS)
                return -EMFILE;
        s = calloc(1, sizeof *s);
        if (!s || !(s->name = strdup(name))) {
                free(s);
                return -ENOMEM;
        }
        s->sb = sb;
        s->sock = s->holder_pidfd = s->cg = s->worker_pidfd = -1;
        int r = session_start_shell(s);
        if (r < 0) {
                free(s->name);
                free(s);
                return r;
        }
        LIST_LINK(sb->sessions, s);
        sb->n_sessions++;
        *ret = s;
        return 0;
}

const char *sbx_session_name(const SbxSession *s) { return s->name; }

SbxSession *sbx_session_next(SbxSandbox *sb, SbxSession *prev) {
        return prev ? prev->next : sb->sessions;
}

SbxSession *sbx_session_free(SbxSession *s) {
        if (!s)
                return NULL;
        SbxSandbox *sb = s->sb;
        loop_cancel_defer(sb->ctx->loop, s);
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
        session_close_shell(s);
        loop_cancel_defer(sb->ctx->loop, s);
        LIST_UNLINK(sb->sessions, s);
        sb->n_sessions--;
        free(s->name);
        free(s);
        return NULL;
}

/* ---------------------------------------------------------------- public: runs */

/* A run of session s with no fds yet and output buffers capped as given. */
static SbxRun *run_new(SbxSession *s, size_t out_cap, size_t err_cap, SbxDoneFn done, void *ud) {
        SbxRun *r = calloc(1, sizeof *r);
        if (!r)
                return NULL;
        r->s = s;
        r->out_fd = r->err_fd = r->in_fd = r->timer_fd = r->cg = r->cg_events = -1;
        buf_init(&r->out, out_cap);
        buf_init(&r->err, err_cap);
        r->on_done = done;
        r->ud = ud;
        r->seq = ++s->seq;
        return r;
}

static void run_refuse(SbxRun *r, SbxErrorClass ec, const char *msg) {
        r->exit_code = 1;
        r->error_class = ec;
        (void)buf_append(&r->err, msg, strlen(msg));
}

int sbx_session_run(SbxSession *s, const SbxRunOptions *o, SbxOutputFn on_output,
                    SbxDoneFn on_done_fn, void *ud, SbxRun **ret) {
        SbxSandbox *sb = s->sb;
        if (!o || (!o->command && o->command_len > 0) || o->timeout_ms > SBX_MAX_TIMEOUT_MS)
                return -EINVAL;
        if (o->cwd && (strlen(o->cwd) == 0 || strlen(o->cwd) >= SBX_MAX_PATH_BYTES))
                return -EINVAL;
        if (s->n_queued + (s->current != NULL) >= SBX_MAX_QUEUED_RUNS)
                return -EBUSY;

        size_t env_len = 0, n_env = 0;
        for (const char *const *e = o->env; e && *e; e++, n_env++) {
                const char *eq = strchr(*e, '=');
                if (!eq || !env_name_valid(*e, (size_t)(eq - *e)) || n_env >= SBX_MAX_RUN_ENV)
                        return -EINVAL;
                env_len += strlen(*e) + 1;
        }
        if (env_len > SBX_MAX_RUN_ENV_BYTES)
                return -E2BIG;

        SbxRun *r = run_new(s, sb->limits.stdout_bytes, sb->limits.stderr_bytes, on_done_fn, ud);
        if (!r)
                return -ENOMEM;
        r->on_output = on_output;
        r->order = ++sb->run_order;
        r->timeout_ms = o->timeout_ms ? o->timeout_ms : sb->timeout_ms;
        r->persist_env = o->persist_env;
        r->get_env = o->get_env;

        if (o->command_len > sb->limits.command_bytes) {
                /* Refused before it reaches the shell: answered here and now. */
                char msg[128];
                snprintf(msg, sizeof msg, "sbx: command is %zu bytes, the limit is %llu\n",
                         o->command_len, (unsigned long long)sb->limits.command_bytes);
                run_refuse(r, SBX_ERROR_LIMIT_EXCEEDED, msg);
                SbxResult res = { .exit_code = r->exit_code, .error_class = r->error_class,
                                  .stderr_data = r->err.data, .stderr_len = r->err.len,
                                  .stdout_data = (const uint8_t *)"" };
                if (ret)
                        *ret = NULL;
                if (on_output)
                        on_output(ud, SBX_STDERR, r->err.data, r->err.len);
                if (on_done_fn)
                        on_done_fn(ud, &res);
                run_free(r);
                return 0;
        }
        r->command = malloc(o->command_len + 1);
        r->cwd = o->cwd ? strdup(o->cwd) : NULL;
        r->env = env_len ? malloc(env_len) : NULL;
        r->stdin_data = o->stdin_len ? malloc(o->stdin_len) : NULL;
        if (!r->command || (o->cwd && !r->cwd) || (env_len && !r->env) || (o->stdin_len && !r->stdin_data)) {
                run_free(r);
                return -ENOMEM;
        }
        memcpy(r->command, o->command, o->command_len);
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

        if (s->queue_tail)
                s->queue_tail->next = r;
        else
                s->queue = r;
        s->queue_tail = r;
        s->n_queued++;
        schedule_pump(s);
        if (ret)
                *ret = r;
        return 0;
}

int session_run_internal(SbxSession *s, uint32_t flags, const uint8_t *in, size_t in_len, uint64_t mark,
                         SbxDoneFn done, void *ud) {
        SbxRun *r = run_new(s, SBX_MAX_STATE_BYTES, 64 * 1024, done, ud);
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
        SbxRun **pp = &s->queue;
        if (mark > 0)
                while (*pp && ((*pp)->internal || (*pp)->order <= mark))
                        pp = &(*pp)->next;
        r->next = *pp;
        *pp = r;
        if (!r->next)
                s->queue_tail = r;
        s->n_queued++;
        schedule_pump(s);
        return 0;
}

void sandbox_pump_all(SbxSandbox *sb) {
        for (SbxSession *s = sb->sessions; s; s = s->next)
                schedule_pump(s);
}

int session_restart(SbxSession *s) {
        if (s->current)
                return -EBUSY;
        session_close_shell(s);
        int r = session_start_shell(s);
        s->broken = r < 0;
        return r;
}

int sbx_run_cancel(SbxRun *r) {
        if (!r || r->finished || r->killed)
                return -ESRCH;
        run_kill(r, SBX_ERROR_CANCELLED);
        return 0;
}

bool sbx_run_started(const SbxRun *r) { return r->sent; }

void sbx_run_pause_output(SbxRun *r, bool paused) {
        Loop *l = r->s->sb->ctx->loop;
        if (r->paused == paused)
                return;
        r->paused = paused;
        if (r->out_w.active)
                (void)loop_mod(l, &r->out_w, paused ? 0 : EPOLLIN);
        if (r->err_w.active)
                (void)loop_mod(l, &r->err_w, paused ? 0 : EPOLLIN);
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

int sbx_session_run_sync(SbxSession *s, const SbxRunOptions *o, SbxOutputFn on_output, void *ud,
                         SbxResult *ret) {
        SyncRun sr = { .res = ret, .fn = on_output, .ud = ud };
        int r = sbx_session_run(s, o, sync_output, sync_done, &sr, NULL);
        if (r < 0)
                return r;
        while (!sr.done) {
                r = loop_run_once(s->sb->ctx->loop, -1);
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

/* ---------------------------------------------------------------- public: sandboxes */

void sbx_sandbox_options_init(SbxSandboxOptions *o) {
        *o = (SbxSandboxOptions){ 0 };
}

static void fill_limits(SbxLimits *l) {
        if (!l->stdout_bytes) l->stdout_bytes = SBX_DEFAULT_STDOUT_BYTES;
        if (!l->stderr_bytes) l->stderr_bytes = SBX_DEFAULT_STDERR_BYTES;
        if (!l->command_bytes) l->command_bytes = SBX_DEFAULT_COMMAND_BYTES;
        if (!l->fs_bytes) l->fs_bytes = SBX_DEFAULT_FS_BYTES;
        if (!l->file_count) l->file_count = SBX_DEFAULT_FILE_COUNT;
        if (!l->memory_bytes) l->memory_bytes = SBX_DEFAULT_MEMORY_BYTES;
        if (!l->pids) l->pids = SBX_DEFAULT_PIDS;
}

/* The session shells' environment: the fixed defaults, then the caller's entries (a name
 * given again replaces the default). Nothing of the daemon's own environment. */
static char **build_env(const char *const *extra) {
        size_t n = ELEMENTSOF(default_env), k = 0;
        for (const char *const *e = extra; e && *e; e++)
                n++;
        char **env = calloc(n + 1, sizeof *env);
        if (!env)
                return NULL;
        for (size_t i = 0; i < ELEMENTSOF(default_env); i++)
                env[k++] = strdup(default_env[i]);
        for (const char *const *e = extra; e && *e; e++) {
                size_t name_len = (size_t)(strchr(*e, '=') - *e) + 1;
                size_t j;
                for (j = 0; j < k; j++)
                        if (strncmp(env[j], *e, name_len) == 0)
                                break;
                if (j < k)
                        free(env[j]);
                env[j] = strdup(*e);
                if (j == k)
                        k++;
        }
        for (size_t i = 0; i < k; i++)
                if (!env[i]) {
                        for (size_t j = 0; j < k; j++)
                                free(env[j]);
                        free(env);
                        return NULL;
                }
        return env;
}

static void free_env(char **env) {
        for (char **e = env; e && *e; e++)
                free(*e);
        free(env);
}

static void init_event(Watch *w, uint32_t events) {
        SbxSandbox *sb = w->data;
        /* pid 1 died (OOM killer, or it was killed from outside): every process of the
         * sandbox is gone with it. Sessions answer their runs and stop restarting. */
        log_warn("sandbox %s: init exited", sb->box.id);
        loop_del(sb->ctx->loop, &sb->init_w);
        loop_del(sb->ctx->loop, &sb->ctl_w);
        if (sb->pooled) {
                sbx_sandbox_free(sb);
                return;
        }
        sb->dying = true;
        for (SbxSession *s = sb->sessions; s; s = s->next)
                session_reset(s);
        image_sandbox_ready(sb); /* a fork waiting for this sandbox fails */
}

/* pid 1's word on its setup, taken from the loop: creating a sandbox never waits for it. */
static void ctl_event(Watch *w, uint32_t events) {
        SbxSandbox *sb = w->data;
        char err[512];
        int r = box_ready(&sb->box, err, sizeof err);
        if (r == 0)
                return;
        loop_del(sb->ctx->loop, &sb->ctl_w);
        if (r > 0)
                image_sandbox_ready(sb);
        /* On failure pid 1 exits; init_event answers what waits. */
        if (r < 0)
                log_warn("sandbox %s: setup failed: %s", sb->box.id, err);
}

/* The files API needs the root: wait for it in the rare case of a call right after create. */
static int ensure_ready(SbxSandbox *sb) {
        char err[512];
        if (sb->box.ready)
                return 0;
        int r = box_wait_ready(&sb->box, SBX_CREATE_TIMEOUT_MS, err, sizeof err);
        if (r > 0) {
                loop_del(sb->ctx->loop, &sb->ctl_w);
                image_sandbox_ready(sb);
        }
        return r > 0 ? 0 : r < 0 ? r : -ESRCH;
}

static int validate_options(const SbxSandboxOptions *o) {
        const SbxLimits *l = &o->limits;
        if (l->stdout_bytes > SBX_MAX_OUTPUT_BYTES || l->stderr_bytes > SBX_MAX_OUTPUT_BYTES ||
            l->command_bytes > SBX_MAX_COMMAND_BYTES || o->timeout_ms > SBX_MAX_TIMEOUT_MS)
                return -EINVAL;
        if (l->fs_bytes && l->fs_bytes < 64 * 1024)
                return -EINVAL;
        for (const char *const *e = o->env; e && *e; e++) {
                const char *eq = strchr(*e, '=');
                if (!eq || !env_name_valid(*e, (size_t)(eq - *e)))
                        return -EINVAL;
        }
        if (o->rootfs) {
                struct stat st;
                char bash[4096];
                snprintf(bash, sizeof bash, "%s/bin/bash", o->rootfs);
                if (o->rootfs[0] != '/' || stat(o->rootfs, &st) < 0 || !S_ISDIR(st.st_mode) || access(bash, X_OK) < 0)
                        return -EINVAL;
        }
        return 0;
}

static int sandbox_new(SbxContext *ctx, const SbxSandboxOptions *o, SbxSandbox **ret, char *err, size_t errlen) {
        int r = validate_options(o);
        if (r < 0) {
                snprintf(err, errlen, "invalid sandbox options%s", o->rootfs ? " (rootfs must be an absolute path to a directory with bin/bash)" : "");
                return r;
        }
        if (!ctx->shared_ready) {
                r = box_shared_init(&ctx->shared);
                if (r < 0) {
                        snprintf(err, errlen, "%s", r == -ENOTSUP ? "no cgroup v2 hierarchy: sbx needs one to contain commands"
                                                                  : "cannot prepare sandboxes");
                        return r;
                }
                ctx->shared_ready = true;
        }
        SbxSandbox *sb = calloc(1, sizeof *sb);
        if (!sb)
                return -ENOMEM;
        sb->ctx = ctx;
        sb->limits = o->limits;
        fill_limits(&sb->limits);
        sb->timeout_ms = o->timeout_ms ? o->timeout_ms : SBX_DEFAULT_TIMEOUT_MS;
        sb->env = build_env(o->env);
        sb->network = o->network;
        sb->rootfs = o->rootfs ? strdup(o->rootfs) : NULL;
        if (!sb->env || (o->rootfs && !sb->rootfs) || ring_init(&sb->bglog, SBX_BACKGROUND_LOG_BYTES) < 0) {
                free(sb->rootfs);
                free_env(sb->env);
                free(sb);
                return -ENOMEM;
        }
        BoxConfig bc = {
                .fs_bytes = sb->limits.fs_bytes, .file_count = sb->limits.file_count,
                .memory_bytes = sb->limits.memory_bytes, .pids = sb->limits.pids,
                .network = o->network, .rootfs = o->rootfs, .env = sb->env,
        };
        r = box_create(&ctx->shared, &bc, &sb->box, err, errlen);
        if (r < 0) {
                ring_done(&sb->bglog);
                free(sb->rootfs);
                free_env(sb->env);
                free(sb);
                return r;
        }
        sb->bg_timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (sb->bg_timer >= 0 && loop_add(ctx->loop, &sb->bg_w, sb->bg_timer, EPOLLIN, bg_sweep, sb) < 0)
                sb->bg_timer = safe_close(sb->bg_timer);
        (void)loop_add(ctx->loop, &sb->init_w, sb->box.init_pidfd, EPOLLIN, init_event, sb);
        (void)loop_add(ctx->loop, &sb->ctl_w, sb->box.ctl_fd, EPOLLIN, ctl_event, sb);
        LIST_LINK(ctx->sandboxes, sb);
        *ret = sb;
        return 0;
}

/* Whether sb was made with default options (then a fork may take a pooled sandbox). */
static bool sandbox_default(const SbxSandbox *sb) {
        SbxLimits l = { 0 };
        fill_limits(&l);
        size_t n = 0;
        for (char **e = sb->env; e && *e; e++, n++)
                if (n >= ELEMENTSOF(default_env) || strcmp(*e, default_env[n]) != 0)
                        return false;
        return n == ELEMENTSOF(default_env) && memcmp(&l, &sb->limits, sizeof l) == 0 &&
               sb->timeout_ms == SBX_DEFAULT_TIMEOUT_MS && !sb->network && !sb->rootfs;
}

int sandbox_new_like(SbxSandbox *sb, SbxSandbox **ret, char *err, size_t errlen) {
        SbxSandboxOptions o;
        sbx_sandbox_options_init(&o);
        if (sandbox_default(sb)) {
                int r = sbx_sandbox_new(sb->ctx, &o, ret);
                if (r < 0)
                        snprintf(err, errlen, "%s", sb->ctx->last_error);
                return r;
        }
        o.limits = sb->limits;
        o.timeout_ms = sb->timeout_ms;
        o.env = (const char *const *)sb->env;
        o.network = sb->network;
        o.rootfs = sb->rootfs;
        return sandbox_new(sb->ctx, &o, ret, err, errlen);
}

static bool options_default(const SbxSandboxOptions *o) {
        static const SbxLimits zero;
        return memcmp(&o->limits, &zero, sizeof zero) == 0 && o->timeout_ms == 0 && !o->network && !o->rootfs &&
               (!o->env || !o->env[0]);
}

static void pool_arm(SbxContext *ctx, uint64_t ms) {
        if (ctx->pool_timer >= 0 && ctx->n_pool < ctx->pool_target)
                (void)timerfd_arm_ms(ctx->pool_timer, ms);
}

int sbx_sandbox_new(SbxContext *ctx, const SbxSandboxOptions *o, SbxSandbox **ret) {
        ctx->last_error[0] = 0;
        if (ctx->pool && options_default(o)) {
                SbxSandbox *sb = ctx->pool;
                LIST_UNLINK(ctx->pool, sb);
                ctx->n_pool--;
                sb->pooled = false;
                LIST_LINK(ctx->sandboxes, sb);
                /* Refill later, not in the middle of the caller's first run. */
                pool_arm(ctx, 50);
                *ret = sb;
                return 0;
        }
        int r = sandbox_new(ctx, o, ret, ctx->last_error, sizeof ctx->last_error);
        if (r < 0 && !ctx->last_error[0])
                snprintf(ctx->last_error, sizeof ctx->last_error, "%s", strerror(-r));
        return r;
}

static void corpse_free(Corpse *c) {
        Loop *l = c->ctx->loop;
        loop_del(l, &c->init_w);
        loop_del(l, &c->cg_w);
        safe_close(c->events);
        LIST_UNLINK(c->ctx->corpses, c);
        free(c);
}

/* box_try_finish() reaps pid 1 and closes its pidfd: it may be called only once the pidfd is
 * out of epoll. An fd closed while still registered stays registered as long as another copy
 * of it lives (a fork of the daemon holds copies of every fd for a moment, a job for longer),
 * and its events would then come for a freed watch. So while pid 1 lives, its pidfd's event
 * brings us back here; a check and the reap must not straddle its death. */
static void corpse_try(Corpse *c) {
        if (c->init_w.active) {
                if (!pidfd_dead(c->box.init_pidfd))
                        return;
                loop_del(c->ctx->loop, &c->init_w);
        }
        if (box_try_finish(&c->ctx->shared, &c->box))
                corpse_free(c);
}

static void corpse_event(Watch *w, uint32_t events) {
        corpse_try(w->data);
}

/* Kills a sandbox's processes and lets the loop finish the cleanup. */
static void corpse_add(SbxContext *ctx, Box *b) {
        Corpse *c = calloc(1, sizeof *c);
        box_kill(b);
        if (!c) {
                box_destroy(&ctx->shared, b);
                return;
        }
        c->ctx = ctx;
        c->box = *b;
        c->events = c->box.cg.dir >= 0 ? cgroup_events_open(c->box.cg.dir) : -1;
        LIST_LINK(ctx->corpses, c);
        if ((c->box.init_pidfd >= 0 && loop_add(ctx->loop, &c->init_w, c->box.init_pidfd, EPOLLIN, corpse_event, c) < 0) ||
            (c->events >= 0 && loop_add(ctx->loop, &c->cg_w, c->events, EPOLLPRI, corpse_event, c) < 0)) {
                box_destroy(&ctx->shared, &c->box);
                corpse_free(c);
                return;
        }
        corpse_try(c);
}

SbxSandbox *sbx_sandbox_free(SbxSandbox *sb) {
        if (!sb)
                return NULL;
        SbxContext *ctx = sb->ctx;
        image_sandbox_freeing(sb);
        sb->dying = true;
        while (sb->sessions)
                sbx_session_free(sb->sessions);
        loop_del(ctx->loop, &sb->init_w);
        loop_del(ctx->loop, &sb->ctl_w);
        while (sb->bg_pipes)
                bg_pipe_free(sb->bg_pipes);
        while (sb->bg_cgroups)
                bg_cgroup_free(sb, sb->bg_cgroups);
        loop_del(ctx->loop, &sb->bg_w);
        sb->bg_timer = safe_close(sb->bg_timer);
        corpse_add(ctx, &sb->box);
        ring_done(&sb->bglog);
        free_env(sb->env);
        free(sb->rootfs);
        if (sb->pooled) {
                LIST_UNLINK(ctx->pool, sb);
                ctx->n_pool--;
        } else {
                LIST_UNLINK(ctx->sandboxes, sb);
        }
        free(sb);
        return NULL;
}

const char *sbx_sandbox_id(const SbxSandbox *sb) { return sb->box.id; }
const SbxLimits *sbx_sandbox_limits(const SbxSandbox *sb) { return &sb->limits; }
int sbx_sandbox_init_pid(const SbxSandbox *sb) { return sb->box.init_pid; }

/* ---------------------------------------------------------------- public: files */

static FsCtx fs_ctx(SbxSandbox *sb) {
        if (ensure_ready(sb) < 0)
                return (FsCtx){ .root = -1 };
        return (FsCtx){ .root = sb->box.root_fd, .uid = sb->box.host_uid, .gid = sb->box.host_gid,
                        .writable = sb->box.writable_dev };
}

int sbx_file_read(SbxSandbox *sb, const char *path, uint64_t offset, uint64_t length, uint8_t **ret_data,
                  size_t *ret_len, uint64_t *ret_size) {
        FsCtx c = fs_ctx(sb);
        return c.root < 0 ? -ESRCH : fs_read(&c, path, offset, length, ret_data, ret_len, ret_size);
}

int sbx_file_write(SbxSandbox *sb, const char *path, const void *data, size_t len, int mode, bool append) {
        if (image_tree_busy(sb))
                return -EBUSY;
        FsCtx c = fs_ctx(sb);
        return c.root < 0 ? -ESRCH : fs_write(&c, path, data, len, mode, append);
}

int sbx_file_stat(SbxSandbox *sb, const char *path, SbxFileInfo *ret) {
        FsCtx c = fs_ctx(sb);
        return c.root < 0 ? -ESRCH : fs_stat(&c, path, ret);
}

int sbx_file_list(SbxSandbox *sb, const char *path, unsigned depth, SbxFileInfo **ret, size_t *ret_n) {
        FsCtx c = fs_ctx(sb);
        return c.root < 0 ? -ESRCH : fs_list(&c, path, depth, ret, ret_n);
}

int sbx_file_mkdir(SbxSandbox *sb, const char *path, bool parents) {
        if (image_tree_busy(sb))
                return -EBUSY;
        FsCtx c = fs_ctx(sb);
        return c.root < 0 ? -ESRCH : fs_mkdir(&c, path, parents);
}

int sbx_file_remove(SbxSandbox *sb, const char *path, bool recursive) {
        if (image_tree_busy(sb))
                return -EBUSY;
        FsCtx c = fs_ctx(sb);
        return c.root < 0 ? -ESRCH : fs_remove(&c, path, recursive);
}

int sbx_file_rename(SbxSandbox *sb, const char *from, const char *to) {
        if (image_tree_busy(sb))
                return -EBUSY;
        FsCtx c = fs_ctx(sb);
        return c.root < 0 ? -ESRCH : fs_rename(&c, from, to);
}

void sbx_file_info_clear(SbxFileInfo *i) { fs_info_clear(i); }

void sbx_file_list_free(SbxFileInfo *v, size_t n) {
        for (size_t i = 0; i < n; i++)
                fs_info_clear(&v[i]);
        free(v);
}

/* ---------------------------------------------------------------- public: context */

/* Makes one pooled sandbox per tick, so the loop stays responsive in between. */
static void pool_event(Watch *w, uint32_t events) {
        SbxContext *ctx = w->data;
        uint64_t x;
        (void)!read(ctx->pool_timer, &x, sizeof x);
        if (ctx->n_pool >= ctx->pool_target)
                return;
        SbxSandboxOptions o;
        SbxSandbox *sb;
        SbxSession *s;
        char err[512];
        sbx_sandbox_options_init(&o);
        if (sandbox_new(ctx, &o, &sb, err, sizeof err) < 0) {
                log_debug("pool: %s", err);
                (void)timerfd_arm_ms(ctx->pool_timer, 1000);
                return;
        }
        LIST_UNLINK(ctx->sandboxes, sb);
        LIST_LINK(ctx->pool, sb);
        sb->pooled = true;
        ctx->n_pool++;
        (void)sbx_session_get(sb, NULL, &s);
        pool_arm(ctx, 5);
}

/* Every pipe, pidfd and socket is an fd of the daemon: take the hard limit. */
static void raise_fd_limit(void) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                (void)setrlimit(RLIMIT_NOFILE, &rl);
        }
}

int sbx_context_new(SbxContext **ret) {
        SbxContext *ctx = calloc(1, sizeof *ctx);
        if (!ctx)
                return -ENOMEM;
        int r = loop_new(&ctx->loop);
        if (r < 0) {
                free(ctx);
                return r;
        }
        ctx->devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (ctx->devnull < 0) {
                r = negerrno();
                loop_free(ctx->loop);
                free(ctx);
                return r;
        }
        ctx->pool_timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (ctx->pool_timer < 0 || loop_add(ctx->loop, &ctx->pool_w, ctx->pool_timer, EPOLLIN, pool_event, ctx) < 0) {
                r = negerrno();
                safe_close(ctx->pool_timer);
                safe_close(ctx->devnull);
                loop_free(ctx->loop);
                free(ctx);
                return r;
        }
        /* Output and stdin pipes may lose their reader at any time; that must be EPIPE for
         * the daemon, never a signal. */
        signal(SIGPIPE, SIG_IGN);
        /* The files API acts with the sandbox user's fs ids; root's supplementary groups
         * must not come along. */
        if (geteuid() == 0)
                (void)setgroups(0, NULL);
        raise_fd_limit();
        *ret = ctx;
        return 0;
}

void sbx_context_set_pool(SbxContext *ctx, unsigned n) {
        ctx->pool_target = MIN(n, SBX_MAX_POOL);
        while (ctx->n_pool > ctx->pool_target)
                sbx_sandbox_free(ctx->pool);
        pool_arm(ctx, 1);
}

SbxContext *sbx_context_free(SbxContext *ctx) {
        if (!ctx)
                return NULL;
        while (ctx->sandboxes)
                sbx_sandbox_free(ctx->sandboxes);
        while (ctx->pool)
                sbx_sandbox_free(ctx->pool);
        /* What is still dying is waited for here: nothing may outlive the context. */
        while (ctx->corpses) {
                box_destroy(&ctx->shared, &ctx->corpses->box);
                corpse_free(ctx->corpses);
        }
        loop_del(ctx->loop, &ctx->pool_w);
        safe_close(ctx->pool_timer);
        if (ctx->shared_ready)
                box_shared_done(&ctx->shared);
        safe_close(ctx->devnull);
        loop_free(ctx->loop);
        free(ctx);
        return NULL;
}

int sbx_context_fd(SbxContext *ctx) { return loop_fd(ctx->loop); }

Loop *sbx_context_loop(SbxContext *ctx) { return ctx->loop; }

const char *sbx_context_last_error(const SbxContext *ctx) { return ctx->last_error; }

int sbx_context_run_once(SbxContext *ctx, int timeout_ms) {
        return loop_run_once(ctx->loop, timeout_ms);
}
