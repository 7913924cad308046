/* SPDX-License-Identifier: MIT */
/* The holder/worker protocol of one session.
 *
 * A session is a holder bash (the state) plus, most of the time, one idle worker forked
 * from it (see bashext/session_builtin.c). Its state machine, driven by messages on the
 * session socket:
 *
 *   STARTING --HELLO--> WAIT_READY --SPAWNED--> CONTAINING --moved--> IDLE --run--> RUNNING
 *   RUNNING --DONE--> LEAVING --moved--> WAIT_READY   (worker became the holder; old holder
 *                                                     is killed; the holder is told MOVED)
 *   RUNNING --DONE--> LEAVING --KEPT--> IDLE   (a Python worker stays the worker after a
 *                                             clean end: its fork, the keeper, is the new
 *                                             holder, moved out of the worker's cgroup while
 *                                             the next cell may run already)
 *   LEAVING --run--> RUNNING --KEPT--> RUNNING (the same, the next cell sent before the worker
 *                                             named its keeper: it names it before it reads
 *                                             the cell, and a kill of the cell waits for it)
 *   RUNNING --DIED--> WAIT_READY        (worker died on its own; holder forks a new one)
 *   RUNNING --timeout/cancel--> KILLING --DIED--> WAIT_READY
 *   RUNNING --DETACHED--> KILLING --DIED--> WAIT_READY   (a process of its own runs the command)
 *   RUNNING, KILLING --DIED--> IDLE or CONTAINING        (a spare the holder forked while the
 *                                                       command ran takes the worker's place)
 *   IDLE --retire--> RETIRING --RETIRED--> RETIRED --run--> WAIT_READY   (bash only: before its
 *                                                       sandbox is parked the idle worker exits
 *                                                       and the holder forks the next when told)
 *
 * On SPAWNED (the holder's word, with a pidfd, on the worker it just forked) the next
 * command's cgroup is created and the worker moved into it before it has any command, so
 * containment costs nothing when the command arrives. Moves are the mover's (mover.h): the
 * loop never waits for the kernel's cgroup lock, and ("moved" above) hears when they are
 * done. What the shells do is reported to the
 * owner of the session's runs through SessionHooks. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include "base/limits.h"
#include "base/log.h"
#include "base/util.h"
#include "cgroup/mover.h"
#include "session/session.h"

static void holder_event(Watch *w, uint32_t events);

/* fd: a pidfd of pid, owned from now on (or -1: one is opened). */
static void set_holder_fd(SbxSession *s, pid_t pid, int fd) {
        Loop *l = s->core->loop;
        loop_del(l, &s->holder_w);
        s->holder_pidfd = safe_close(s->holder_pidfd);
        s->holder_pid = pid;
        if (fd < 0)
                fd = pidfd_open(pid, 0);
        if (fd >= 0 && loop_add(l, &s->holder_w, fd, EPOLLIN, holder_event, s) == 0)
                s->holder_pidfd = fd;
        else
                safe_close(fd);
}

static void set_holder(SbxSession *s, pid_t pid) { set_holder_fd(s, pid, -1); }

/* The holder before a worker that stayed, stopped until its keeper is announced (leave()). */
static void stale_keeper_kill(SbxSession *s) {
        pidfd_sigkill(s->stale_keeper_pidfd);
        s->stale_keeper_pidfd = safe_close(s->stale_keeper_pidfd);
}

static void forget_worker(SbxSession *s) {
        s->worker_pidfd = safe_close(s->worker_pidfd);
        s->spawned_pid = 0;
}

static void contained(void *ud, int r);
static void spare_contained(void *ud, int r);

/* A code context's worker is the OOM killer's first choice (oom_score_adj 500), so that a cell
 * that fills the sandbox's memory is what dies, not its holder, the context; a worker that
 * became the holder goes back to 0. Written from here: nothing in the sandbox may write to
 * /proc. Best effort (a rootless daemon may not write another process's either). */
static void oom_prefer(SbxSession *s, pid_t pid, bool prefer) {
        if (s->shell == SBX_SHELL_BASH || pid <= 0)
                return;
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/oom_score_adj", (int)pid);
        (void)write_file_at(AT_FDCWD, path, prefer ? "500" : "0");
}

/* The worker is in the next command's cgroup: the session is idle, and what the last command
 * left, if it was to be killed, may die now (the worker is out of that cgroup). */
static void worker_idle(SbxSession *s) {
        s->worker_pid = s->spawned_pid;
        s->state = SS_IDLE;
        bglog_kill_doomed(&s->core->bg, s);
        s->hooks->idle(s);
}

/* A spare's move under way, promoted or not. */
static bool spare_moving(const SbxSession *s) { return s->spare_move_id || (s->spare_promoted && s->move_id); }

/* The kill of a cell's cgroup that waited for the keeper's move out of it (session_kill_cgroup())
 * and for the move of a spare the keeper forked there meanwhile: done once neither is left. */
static void kill_after_keeper(SbxSession *s) {
        if (s->keeper_kill_cg < 0 || s->keeper_move_id || spare_moving(s))
                return;
        (void)cgroup_kill(s->keeper_kill_cg);
        s->keeper_kill_cg = safe_close(s->keeper_kill_cg);
}

/* The spare goes: killed, its move cancelled, its cgroup retired (it ran nothing). */
static void spare_drop(SbxSession *s) {
        if (s->spare_move_id && !s->spare_promoted)
                mover_cancel(s->core->mover, s->spare_move_id);
        s->spare_move_id = 0;
        pidfd_sigkill(s->spare_pidfd);
        s->spare_pidfd = safe_close(s->spare_pidfd);
        if (s->spare_cg >= 0)
                bglog_retire_cgroup(&s->core->bg, TAKE_FD(s->spare_cg), s->spare_cg_name);
        s->spare_pid = 0;
        s->spare_ready = false;
        kill_after_keeper(s);
}

/* The holder forked a spare while the command runs: contained now, off the way of anything. */
static void on_spare(SbxSession *s, int fd, pid_t pid, pid_t nspid) {
        SandboxCore *core = s->core;
        s->spare_nspid = nspid;
        log_debug("session %s: spare %d", s->name, (int)pid);
        s->spare_pidfd = fd;
        s->spare_pid = pid;
        oom_prefer(s, pid, true);
        snprintf(s->spare_cg_name, sizeof s->spare_cg_name, "c%llu", (unsigned long long)++core->next_cmd);
        int dir = cgroup_child_create(&core->box.cg, s->spare_cg_name);
        int dirs[2] = { dir, core->box.cg.v1_pids_cmds };
        int64_t id = dir >= 0 ? mover_move(core->mover, pid, dirs, dirs[1] >= 0 ? 2 : 1, spare_contained, s) : dir;
        if (id < 0) {
                safe_close(dir);
                (void)cgroup_child_remove(&core->box.cg, s->spare_cg_name);
                spare_drop(s);
                return;
        }
        s->spare_cg = dir;
        s->spare_move_id = id;
}

static void spare_contained(void *ud, int r) {
        SbxSession *s = ud;
        if (s->spare_promoted) {
                /* It took the place of a worker that died while it was being moved. */
                s->spare_promoted = false;
                contained(ud, r);
                kill_after_keeper(s);
                return;
        }
        s->spare_move_id = 0;
        if (r < 0) {
                spare_drop(s);
                return;
        }
        s->spare_ready = true;
        kill_after_keeper(s);
}

/* The worker of the command died: a live spare becomes the worker. Returns true if it did. */
static bool spare_promote(SbxSession *s) {
        log_debug("session %s: worker died, spare %d %s", s->name, (int)s->spare_pid,
                  s->spare_pidfd < 0 ? "none" : pidfd_is_dead(s->spare_pidfd) ? "dead" : s->spare_ready ? "ready" : "moving");
        if (s->spare_pidfd < 0 || pidfd_is_dead(s->spare_pidfd)) {
                spare_drop(s);
                return false;
        }
        s->worker_pidfd = TAKE_FD(s->spare_pidfd);
        s->spawned_pid = s->spare_pid;
        s->spawned_nspid = s->spare_nspid;
        s->cg = TAKE_FD(s->spare_cg);
        memcpy(s->cg_name, s->spare_cg_name, sizeof s->cg_name);
        if (s->spare_ready) {
                s->worker_pid = s->spawned_pid;
                s->state = SS_IDLE;
        } else {
                s->move_id = s->spare_move_id;
                s->spare_promoted = true;
                s->state = SS_CONTAINING;
        }
        s->spare_pid = 0;
        s->spare_move_id = 0;
        s->spare_ready = false;
        return true;
}

/* The worker the holder announced is contained, then idle. No message of the worker itself
 * is waited for: anything inside the sandbox can write to the session socket, and a flood
 * of forged messages must not be able to hide or stand in for it. The moves are the mover's
 * (CONTAINING until it answers): most often this is right after the last command's end,
 * long before the next one comes. */
static void on_spawned(SbxSession *s, int fd) {
        SandboxCore *core = s->core;
        pid_t pid = pidfd_pid(fd), ppid = 0, nspid = 0;
        if (pid)
                proc_status_ids(pid, &ppid, &nspid);
        /* Only a live child of the holder: the holder's word names the process the daemon then
         * moves, sends commands to, or kills, and code can run in the holder (a Python thread a
         * cell started lives on in it). */
        if (!pid || pidfd_is_dead(fd) || ppid != s->holder_pid || pid == core->box.init_pid) {
                close(fd);
                return;
        }
        if (pid == s->spawned_pid && s->state != SS_WAIT_READY) {
                /* The worker told again (a spare that took its place, announced once more by
                 * the holder): it is the worker already. */
                close(fd);
                return;
        }
        /* While a killed worker dies, the holder may already have forked the next one (a code
         * context's holder does, as soon as it sees its worker gone): the spare that takes its
         * place, not a worker to kill. */
        if ((s->state == SS_RUNNING || s->state == SS_KILLING) && pid && s->spare_pidfd < 0 && !s->spare_promoted) {
                on_spare(s, fd, pid, nspid);
                return;
        }
        if (s->state == SS_LEAVING && s->moved_early) {
                /* The new holder's next worker, forked once told MOVED at the command's clean
                 * end: taken once the holder is out of the command's cgroup (left()). One told
                 * before it (a second SPAWNED, from code running in the holder) is killed: a
                 * worker nobody sends a command to must not read the socket. */
                pidfd_sigkill(s->early_fd);
                safe_close(s->early_fd);
                s->early_fd = fd;
                return;
        }
        if (s->state != SS_WAIT_READY || !pid) {
                /* A worker nobody will send a command to must not wait on the socket for one
                 * (a spare announced too late); the worker itself, told again, stays. */
                log_debug("session %s: SPAWNED %d refused in state %d", s->name, (int)pid, (int)s->state);
                pidfd_sigkill(fd);
                close(fd);
                return;
        }
        forget_worker(s);
        s->worker_pidfd = fd;
        s->spawned_pid = pid;
        s->spawned_nspid = nspid;
        oom_prefer(s, pid, true);
        int dir = -1;
        if (s->leaving_cg >= 0) {
                int cg = TAKE_FD(s->leaving_cg);
                if (cgroup_only_pid(cg, pid) == 1) {
                        /* Born in the cgroup of the command that ended clean, before its holder
                         * left it, and alone there now: that cgroup is the next command's, with
                         * no directory made and no move. (The v1 pids share too: the holder
                         * leaves v2 first, so a worker still in the v2 cgroup was forked while
                         * the holder was in the commands' share.) */
                        s->cg = cg;
                        memcpy(s->cg_name, s->leaving_name, sizeof s->cg_name);
                        worker_idle(s);
                        return;
                }
                if (cgroup_populated(cg) == 0) {
                        /* Born after the holder left: moved into the emptied cgroup. */
                        dir = cg;
                        memcpy(s->cg_name, s->leaving_name, sizeof s->cg_name);
                } else {
                        bglog_retire_cgroup(&core->bg, cg, s->leaving_name);
                }
        }
        if (dir < 0) {
                snprintf(s->cg_name, sizeof s->cg_name, "c%llu", (unsigned long long)++core->next_cmd);
                dir = cgroup_child_create(&core->box.cg, s->cg_name);
        }
        int dirs[2] = { dir, core->box.cg.v1_pids_cmds };
        /* v1 pids: into the commands' share too (moving never fails on a full limit). */
        size_t n = dirs[1] >= 0 ? 2 : 1;
        int64_t id = dir >= 0 ? mover_move(core->mover, pid, dirs, n, contained, s) : dir;
        if (id < 0) {
                log_warn("session %s: cannot contain worker: %s", s->name, strerror((int)-id));
                safe_close(dir);
                (void)cgroup_child_remove(&core->box.cg, s->cg_name);
                pidfd_sigkill(s->worker_pidfd);
                return;
        }
        s->cg = dir;
        s->move_id = id;
        s->state = SS_CONTAINING;
}

/* The end of a cell whose worker died while its keeper was on its way out of the cell's
 * cgroup (died_deferred), told once nothing of the session's is left there: the keeper
 * (keeper_move_id) and what the keeper forked there before it left, its next worker or a
 * spare (move_id: asked for after the keeper's move, so answered after it). Told earlier,
 * the cgroup still held that worker, which leftover_adopt() took for the cell's leftover. */
static void died_tell(SbxSession *s) {
        if (!s->died_deferred || s->keeper_move_id || s->move_id)
                return;
        s->died_deferred = false;
        s->hooks->died(s, s->died_status);
}

static void contained(void *ud, int r) {
        SbxSession *s = ud;
        SandboxCore *core = s->core;
        s->move_id = 0;
        /* Before the worker is idle: the next cell goes only after the died one's end. */
        died_tell(s);
        if (s->state != SS_CONTAINING)
                return;
        if (r < 0) {
                /* Without its cgroup the worker must not run anything: kill it; the holder
                 * reports the death and forks another. */
                log_warn("session %s: cannot contain worker: %s", s->name, strerror(-r));
                s->cg = safe_close(s->cg);
                (void)cgroup_child_remove(&core->box.cg, s->cg_name);
                pidfd_sigkill(s->worker_pidfd);
                s->state = SS_WAIT_READY;
                return;
        }
        worker_idle(s);
}

/* A worker told KEEP once its leave() ran (the old holder stopped, the spare gone), its
 * cgroup given back by the ended run. */
static bool keeper_pending(const SbxSession *s) {
        return s->state == SS_LEAVING && s->keeping && !s->leave_pending && s->leaving_cg >= 0 && s->holder_pidfd >= 0;
}

static void left(void *ud, int r);
static void leave(SbxSession *s);
static void leave_deferred(void *data);

/* The worker is the new holder: out of the command's cgroup, old holder gone. It forks the
 * next worker once told (MOVED), so the cgroup keeps only what the command left. The move
 * out is the mover's (LEAVING until it answers). When the worker was alone in the cgroup the
 * command left nothing running, and its end is told at once, before the old holder's kill and
 * the move are asked for (leave(), deferred): the answer's reader is woken while nothing else
 * of the sandbox is runnable, not behind the old holder's exit and the mover. Otherwise it is
 * told after the move, when what remains in the cgroup is the leftovers. */
static void on_done(SbxSession *s, pid_t pid, int status, uint32_t flags) {
        SandboxCore *core = s->core;
        /* The keeper the cell started from may still be in its cgroup (its move out is on its
         * way): not a leftover, and the old holder from now on. */
        bool clean = s->run_cg >= 0 && cgroup_only_pids(s->run_cg, pid, s->keeper_move_id ? s->holder_pid : 0) == 1;
        s->run_cg = -1;
        mover_cancel(core->mover, s->keeper_move_id);
        s->keeper_move_id = 0;
        pidfd_sigkill(s->old_holder_pidfd); /* never set here: LEAVING ends with leave() */
        safe_close(s->old_holder_pidfd);
        s->old_holder_pidfd = TAKE_FD(s->holder_pidfd);
        loop_del(core->loop, &s->holder_w);
        set_holder(s, pid);
        s->worker_pid = 0;
        forget_worker(s);
        s->state = SS_LEAVING;
        s->ended_status = status;
        s->ended_told = clean;
        uint64_t end = ++s->ends;
        /* Deferred before the answer is given: a done callback that turns the loop itself
         * (the C API lets it) runs leave() first, and the session does not wait for it. */
        s->moved_early = false;
        /* A Python worker whose cell ended clean stays the worker if it offered to: no move
         * out, no fork in the way of the next cell but the keeper's, which the worker makes
         * while the answer is read. */
        s->keeping = clean && (flags & WIRE_F_KEEPS) && s->shell == SBX_SHELL_PYTHON;
        s->leave_pending = true;
        if (loop_defer(core->loop, leave_deferred, &s->old_holder_pidfd) < 0)
                leave(s);
        if (!clean)
                return;
        bool said_keep = false;
        if (s->keeping) {
                /* Told before the answer: the worker's fork of its keeper, the longest step
                 * between two cells, then runs while the answer is read and the next cell
                 * sent. Not told, it becomes the holder as any worker does (MOVED early,
                 * below, and the move out, in leave()). */
                WireHdr keep = { .type = WIRE_KEEP };
                said_keep = send(s->sock, &keep, sizeof keep, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof keep;
                if (!said_keep) {
                        s->keeping = false;
                        if (!s->leave_pending)
                                leave(s);
                }
        }
        s->hooks->ended(s, status, true);
        /* The loop turned in the done callback: left() said MOVED, or a later end (of the
         * same worker, had it stayed) is the session's now. */
        if (said_keep || s->state != SS_LEAVING || s->ends != end)
                return;
        /* Told to fork now, not after its move out: the fork (up to 1 ms for a Python
         * context here, the longest step between two cells) runs while the answer is read
         * and the holder moved. The cgroup had the worker alone: the next worker, if born
         * there before the holder leaves, is all it holds once it has, and it is the next
         * command's cgroup (on_spawned()). */
        WireHdr moved = { .type = WIRE_MOVED };
        s->moved_early = send(s->sock, &moved, sizeof moved, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof moved;
}

/* After on_done(): the spare (its state is from before the command) and the old holder are
 * killed, and the new holder is moved out of the command's cgroup. */
static void leave(SbxSession *s) {
        SandboxCore *core = s->core;
        s->leave_pending = false;
        spare_drop(s);
        if (s->keeping && s->state == SS_LEAVING && s->old_holder_pidfd >= 0) {
                /* Stopped now, killed once the worker's fork of its keeper is done (KEPT):
                 * the old holder's exit tears down a copy of the whole context, half a
                 * millisecond of CPU here, which would otherwise run beside that fork and
                 * the answer's reader, both on the way of the next cell. Stopped, it can do
                 * nothing meanwhile (it would fork from the state before this cell were the
                 * worker to die). */
                stale_keeper_kill(s);
                (void)pidfd_send_signal(s->old_holder_pidfd, SIGSTOP, NULL, 0);
                s->stale_keeper_pidfd = TAKE_FD(s->old_holder_pidfd);
        }
        pidfd_sigkill(s->old_holder_pidfd);
        s->old_holder_pidfd = safe_close(s->old_holder_pidfd);
        if (s->state == SS_LEAVING && !s->keeping)
                oom_prefer(s, s->holder_pid, false);
        if (s->state != SS_LEAVING || s->move_id || s->keeping) {
                /* A cell that came before this ran goes now. */
                if (keeper_pending(s) && (s->current || s->queue))
                        s->hooks->idle(s);
                return;
        }
        pid_t pid = s->holder_pid;
        _cleanup_close_ int init_cg = cgroup_sandbox_open_init(&core->box.cg); /* the mover keeps a dup */
        int dirs[2] = { init_cg, core->box.cg.v1_pids_cmds >= 0 ? core->box.cg.v1_pids : -1 };
        int64_t id = init_cg < 0 ? init_cg : mover_move(core->mover, pid, dirs, dirs[1] >= 0 ? 2 : 1, left, s);
        if (id < 0) {
                /* Out of memory for the request: moved here, the loop waiting. */
                for (size_t i = 0; i < ELEMENTSOF(dirs) && dirs[i] >= 0; i++)
                        (void)cgroup_move(dirs[i], pid);
                left(s, 0);
                return;
        }
        s->move_id = id;
}

static void leave_deferred(void *data) {
        leave((SbxSession *)((char *)data - offsetof(SbxSession, old_holder_pidfd)));
}

static void left(void *ud, int r) {
        SbxSession *s = ud;
        s->move_id = 0;
        if (s->state != SS_LEAVING)
                return;
        if (r < 0)
                log_warn("session %s: cannot move the holder out of its command's cgroup: %s", s->name, strerror(-r));
        if (!s->moved_early) {
                WireHdr moved = { .type = WIRE_MOVED };
                (void)send(s->sock, &moved, sizeof moved, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        /* Told MOVED early, the next worker may be in it: the next command's cgroup then
         * (on_spawned()). */
        if (s->leaving_cg >= 0 && !s->moved_early)
                bglog_retire_cgroup(&s->core->bg, TAKE_FD(s->leaving_cg), s->leaving_name);
        s->state = SS_WAIT_READY;
        if (!s->ended_told) {
                s->ended_told = true;
                s->hooks->ended(s, s->ended_status, false);
        }
        if (s->early_fd >= 0)
                on_spawned(s, TAKE_FD(s->early_fd));
}

static void keeper_out(void *ud, int r);

static void kill_waited(SbxSession *s);

/* The worker stayed (KEEP) and names the child of it that keeps the state the command left:
 * that keeper is the holder from now on, and is moved out of the command's cgroup, which
 * stays the worker's; the worker is idle at once, or runs the next cell already
 * (kept_pending), whose kill may have waited for this. Anything else the worker says here
 * (not a live child of it, no cgroup to keep) leaves a worker nobody can trust to be the
 * holder: it is killed, and the session with it. */
static void on_kept(SbxSession *s, int fd, pid_t sender) {
        SandboxCore *core = s->core;
        pid_t pid = pidfd_pid(fd), ppid = 0, nspid = 0;
        if (pid)
                proc_status_ids(pid, &ppid, &nspid);
        /* Only the worker's own live child, not pid 1: what is named is killed when refused,
         * moved when taken, and code can run in a holder (a thread a cell started). */
        bool child = pid && !pidfd_is_dead(fd) && ppid == s->holder_pid && pid != core->box.init_pid;
        /* Said by the worker told KEEP (the holder until then). */
        bool pending = s->kept_pending;
        bool waited = (s->state == SS_LEAVING || pending) && s->keeping && sender == s->holder_pid;
        if (waited)
                stale_keeper_kill(s);
        if (!waited || !child || (s->leaving_cg < 0 && !pending)) {
                if (waited) {
                        log_warn("session %s: the worker's keeper %d is not one (parent %d): the context is lost", s->name,
                                 (int)pid, (int)ppid);
                        pidfd_sigkill(s->holder_pidfd);
                }
                log_debug("session %s: KEPT %d refused in state %d", s->name, (int)pid, (int)s->state);
                /* A keeper nobody takes must not stay (it would read the session socket as a
                 * holder): killed if it is one. */
                if (child && sender == s->holder_pid)
                        pidfd_sigkill(fd);
                close(fd);
                return;
        }
        /* The worker it was: spawned_nspid, its address in the sandbox, is still its own. */
        pid_t wpid = s->holder_pid;
        loop_del(core->loop, &s->holder_w);
        forget_worker(s);
        s->worker_pidfd = TAKE_FD(s->holder_pidfd);
        s->spawned_pid = wpid;
        s->keeping = false;
        s->kept_pending = false;
        set_holder_fd(s, pid, fd);
        oom_prefer(s, pid, false);
        if (!pending) {
                s->cg = TAKE_FD(s->leaving_cg);
                memcpy(s->cg_name, s->leaving_name, sizeof s->cg_name);
        }
        _cleanup_close_ int init_cg = cgroup_sandbox_open_init(&core->box.cg); /* the mover keeps a dup */
        int dirs[2] = { init_cg, core->box.cg.v1_pids_cmds >= 0 ? core->box.cg.v1_pids : -1 };
        int64_t id = init_cg < 0 ? init_cg : mover_move(core->mover, pid, dirs, dirs[1] >= 0 ? 2 : 1, keeper_out, s);
        if (id < 0) {
                /* Out of memory for the request: moved here, the loop waiting. */
                int r = 0;
                for (size_t i = 0; i < ELEMENTSOF(dirs) && dirs[i] >= 0; i++)
                        if (cgroup_move(dirs[i], pid) < 0)
                                r = -EIO;
                if (init_cg < 0 || r < 0) {
                        log_warn("session %s: cannot move the keeper out of its command's cgroup: %s", s->name,
                                 strerror(init_cg < 0 ? -init_cg : EIO));
                        session_lose(s);
                        return;
                }
                if (pending)
                        kill_waited(s);
                else
                        worker_idle(s);
                return;
        }
        /* The next cell goes at once (or went), the keeper still in the worker's cgroup: what
         * would reach it there meanwhile waits for the move (keeper_out()). */
        s->keeper_move_id = id;
        memcpy(s->keeper_in, s->cg_name, sizeof s->keeper_in);
        if (pending)
                kill_waited(s);
        else
                worker_idle(s);
}

/* The kill of a cell asked for before its worker named its keeper, which it has now. */
static void kill_waited(SbxSession *s) {
        if (s->kill_waits_urg) {
                s->kill_waits_urg = false;
                if (s->holder_pidfd >= 0)
                        (void)pidfd_send_signal(s->holder_pidfd, SIGURG, NULL, 0);
        }
        if (s->kill_waits_cg < 0)
                return;
        int cg = TAKE_FD(s->kill_waits_cg);
        session_kill_cgroup(s, cg, s->cg_name);
        if (!s->kill_waits_owned) {
                close(cg);
                return;
        }
        /* Its run was answered meanwhile: the cgroup is retired once the keeper is out. */
        s->kill_waits_owned = false;
        if (s->keeper_cg >= 0)
                bglog_retire_cgroup(&s->core->bg, TAKE_FD(s->keeper_cg), s->keeper_cg_name);
        s->keeper_cg = cg;
        memcpy(s->keeper_cg_name, s->cg_name, sizeof s->keeper_cg_name);
        if (!s->keeper_move_id)
                bglog_retire_cgroup(&s->core->bg, TAKE_FD(s->keeper_cg), s->keeper_cg_name);
}

bool session_kept_pending(const SbxSession *s) { return s->kept_pending; }

bool session_kill_waits(const SbxSession *s, uint64_t *ret_waited_ns) {
        if (!s->kept_pending || s->kill_waits_cg < 0 || s->kill_waits_owned)
                return false;
        if (ret_waited_ns)
                *ret_waited_ns = now_ns() - s->kill_waits_ns;
        return true;
}

void session_take_killed_cgroup(SbxSession *s, int cg) {
        safe_close(s->kill_waits_cg);
        s->kill_waits_cg = cg;
        s->kill_waits_owned = true;
}

bool session_keeper_in(const SbxSession *s, const char *name) {
        return (s->keeper_move_id || s->kept_pending) && strcmp(s->keeper_in, name) == 0;
}

bool session_end_pending(const SbxSession *s) { return s->died_deferred; }

void session_kill_cgroup(SbxSession *s, int cg, const char *name) {
        if (s->kept_pending && strcmp(s->keeper_in, name) == 0) {
                /* The worker has not named its keeper: killed now, it would take the context
                 * with it. It names it before it reads the cell (on_kept(), kill_waited()). */
                if (s->kill_waits_cg < 0) {
                        s->kill_waits_cg = fcntl(cg, F_DUPFD_CLOEXEC, 3);
                        s->kill_waits_ns = now_ns();
                }
                if (s->kill_waits_cg < 0)
                        (void)cgroup_kill(cg); /* out of fds: the context rather than the kill */
                return;
        }
        if (!session_keeper_in(s, name)) {
                (void)cgroup_kill(cg);
                return;
        }
        pidfd_sigkill(s->worker_pidfd);
        if (s->keeper_kill_cg < 0)
                s->keeper_kill_cg = fcntl(cg, F_DUPFD_CLOEXEC, 3);
        if (s->keeper_kill_cg < 0)
                (void)cgroup_kill(cg); /* out of fds: the context rather than the kill */
}

/* The keeper is out of the worker's cgroup. What waited for that goes now: the kill of a
 * cell's cgroup asked for meanwhile (once a spare forked there meanwhile is out too), the
 * retirement of the cgroup of a worker that died idle, the end of a cell whose worker died
 * (told now, so that what its cgroup holds is the cell's leftovers only). A keeper that could
 * not leave it must not stay where the next command's kill, or a sweep of a retired cgroup,
 * reaches it: the context is given up (the session's loss, told as such). */
static void keeper_out(void *ud, int r) {
        SbxSession *s = ud;
        s->keeper_move_id = 0;
        if (r < 0) {
                log_warn("session %s: cannot move the keeper out of its command's cgroup: %s", s->name, strerror(-r));
                session_lose(s);
                return;
        }
        kill_after_keeper(s);
        if (s->keeper_cg >= 0)
                bglog_retire_cgroup(&s->core->bg, TAKE_FD(s->keeper_cg), s->keeper_cg_name);
        died_tell(s);
}

void session_keep_cgroup(SbxSession *s, int cg, const char *name) {
        if (s->state != SS_LEAVING) {
                bglog_retire_cgroup(&s->core->bg, cg, name);
                return;
        }
        safe_close(s->leaving_cg);
        s->leaving_cg = cg;
        snprintf(s->leaving_name, sizeof s->leaving_name, "%s", name);
}

static void on_died(SbxSession *s, int wstatus) {
        SessionState was = s->state;
        if (was == SS_LEAVING || was == SS_RETIRED)
                return; /* the holder has no worker until told MOVED or FORK: not its word */
        s->state = SS_WAIT_READY;
        s->worker_pid = 0;
        forget_worker(s);
        if (was == SS_CONTAINING) {
                mover_cancel(s->core->mover, s->move_id);
                s->move_id = 0;
                s->spare_promoted = false;
                kill_after_keeper(s);
                died_tell(s);
        }
        if (s->cg >= 0 && session_keeper_in(s, s->cg_name)) {
                /* Its keeper, the holder, is still in that cgroup: retired once it is out
                 * (keeper_out()), never swept with a holder in it. */
                if (s->keeper_cg >= 0)
                        bglog_retire_cgroup(&s->core->bg, TAKE_FD(s->keeper_cg), s->keeper_cg_name);
                s->keeper_cg = TAKE_FD(s->cg);
                memcpy(s->keeper_cg_name, s->cg_name, sizeof s->keeper_cg_name);
                return;
        }
        if ((was == SS_IDLE || was == SS_CONTAINING || was == SS_RETIRING) && s->cg >= 0) {
                /* The idle worker died (killed from inside the sandbox): drop its cgroup. */
                bglog_retire_cgroup(&s->core->bg, TAKE_FD(s->cg), s->cg_name);
                return;
        }
        bool promoted = (was == SS_RUNNING || was == SS_KILLING) && spare_promote(s);
        if (was == SS_RUNNING && (s->keeper_move_id || (promoted && s->move_id))) {
                /* The keeper, or a spare it forked, is still in the cell's cgroup: the cell's
                 * end is told once both are out (died_tell()), when what the cgroup holds is the
                 * cell's leftovers. */
                s->died_deferred = true;
                s->died_status = wstatus;
        } else if (was == SS_RUNNING) {
                s->hooks->died(s, wstatus);
        }
        if (promoted && s->state == SS_IDLE)
                s->hooks->idle(s);
}

/* The holder's word that its worker exited having said it retired (wstatus: how it ended),
 * after which the holder waits for FORK. Asked for (RETIRING): the session is RETIRED, and a
 * run that came meanwhile has it fork the next worker at once. Else it was not a retirement
 * (a command wrote the word through /proc and ended, or a RETIRE without its worker's pid
 * reached a later one): a death, and the holder is told to fork the next at once. */
static void on_retired(SbxSession *s, int wstatus) {
        SessionState was = s->state;
        if (was == SS_STARTING || was == SS_LEAVING || was == SS_RETIRED)
                return;
        if (was == SS_RETIRING) {
                s->worker_pid = 0;
                forget_worker(s);
                if (s->cg >= 0)
                        bglog_retire_cgroup(&s->core->bg, TAKE_FD(s->cg), s->cg_name);
                s->state = SS_RETIRED;
                if (s->current || s->queue)
                        s->hooks->idle(s);
                else if (s->core->retired)
                        s->core->retired(s->core);
                return;
        }
        WireHdr fork_now = { .type = WIRE_FORK };
        (void)send(s->sock, &fork_now, sizeof fork_now, MSG_NOSIGNAL | MSG_DONTWAIT);
        on_died(s, wstatus);
}

int session_retire(SbxSession *s) {
        if (s->shell != SBX_SHELL_BASH || s->state != SS_IDLE || s->parked || s->spare_pidfd >= 0 || s->move_id ||
            s->spare_move_id || s->leaving_cg >= 0 || s->run_cg >= 0 || s->worker_pidfd < 0 || s->queue || s->current)
                return -EBUSY;
        WireHdr h = { .type = WIRE_RETIRE, .status = (int32_t)s->spawned_nspid };
        if (send(s->sock, &h, sizeof h, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof h)
                return negerrno();
        s->state = SS_RETIRING;
        return 0;
}

void session_hurry_retire(SbxSession *s) {
        if (s->state == SS_RETIRING)
                pidfd_sigkill(s->worker_pidfd);
}

void session_rehire(SbxSession *s) {
        if (s->state != SS_RETIRED)
                return;
        WireHdr h = { .type = WIRE_FORK };
        if (send(s->sock, &h, sizeof h, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof h) {
                /* Its socket is full or gone: the holder is lost (its end heard from the loop). */
                log_debug("session %s: cannot tell the holder to fork: %s", s->name, strerror(errno));
                return;
        }
        s->state = SS_WAIT_READY;
}

void session_lose(SbxSession *s) {
        bool never_started = s->state == SS_STARTING;
        s->losses++;
        session_close_shell(s);
        s->hooks->lost(s, never_started);
}

/* Reads one message with its sender's pid (SO_PASSCRED) and up to ELEMENTSOF(fds) fds.
 * Returns the message's length, 0 at the end, -errno. */
static ssize_t recv_msg(int sock, WireHdr *h, pid_t *ret_pid, int fds[4], int *ret_n_fds) {
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(sizeof(int) * 4)];
        } cm;
        struct iovec iov = { h, sizeof *h };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf };
        ssize_t n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        *ret_pid = 0;
        *ret_n_fds = 0;
        if (n < 0)
                return negerrno();
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
                if (c->cmsg_level != SOL_SOCKET)
                        continue;
                if (c->cmsg_type == SCM_CREDENTIALS) {
                        struct ucred uc;
                        memcpy(&uc, CMSG_DATA(c), sizeof uc);
                        *ret_pid = uc.pid;
                } else if (c->cmsg_type == SCM_RIGHTS) {
                        int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
                        for (int j = 0; j < k; j++) {
                                int fd;
                                memcpy(&fd, CMSG_DATA(c) + (size_t)j * sizeof fd, sizeof fd);
                                if (*ret_n_fds < 4)
                                        fds[(*ret_n_fds)++] = fd;
                                else
                                        close(fd);
                        }
                }
        }
        return n;
}

static void on_message(SbxSession *s, const WireHdr *h, pid_t pid) {
        switch (h->type) {
        case WIRE_HELLO:
                if (s->state == SS_STARTING) {
                        set_holder(s, pid);
                        s->state = SS_WAIT_READY;
                }
                break;
        case WIRE_DONE:
                /* Stale (a worker we killed) or forged (written by the command itself) unless
                 * it comes from the worker and echoes the run's nonce. */
                if (s->state == SS_RUNNING && !s->kept_pending && pid == s->worker_pid && h->seq == s->sent_seq &&
                    h->nonce == s->sent_nonce)
                        on_done(s, pid, h->status, h->flags);
                else
                        log_debug("session %s: DONE from %d refused: state %d worker %d seq %u/%u", s->name, (int)pid,
                                  (int)s->state, (int)s->worker_pid, h->seq, s->sent_seq);
                break;
        case WIRE_DIED:
                if (pid == s->holder_pid)
                        on_died(s, h->status);
                break;
        case WIRE_RETIRED:
                if (pid == s->holder_pid)
                        on_retired(s, h->status);
                break;
        default:
                break;
        }
}

/* What is heard of a parked sandbox finds its fds first. */
static void wake(SbxSession *s) {
        if (s->core->parked && s->core->unpark)
                s->core->unpark(s->core);
        if (session_unpark(s) < 0)
                log_warn("session %s: heard while parked, but its fds cannot be had again (the daemon is out of "
                         "fds): handled without them", s->name);
}

static void session_event(Watch *w, uint32_t events) {
        SbxSession *s = w->data;
        wake(s);
        for (int i = 0; i < 8; i++) {
                WireHdr h;
                pid_t pid;
                int fds[4], n_fds;
                ssize_t n = recv_msg(s->sock, &h, &pid, fds, &n_fds);
                if (n == -EAGAIN || n == -EINTR)
                        return;
                if (n == 0 && s->holder_pidfd >= 0 && !pidfd_is_dead(s->holder_pidfd))
                        continue; /* an empty datagram (written from inside), not the end */
                if (n <= 0) {
                        session_lose(s);
                        return;
                }
                /* Only the holder may hand us an fd, and only a worker's pidfd. */
                if (n == (ssize_t)sizeof h && h.type == WIRE_SPAWNED && pid > 0 && pid == s->holder_pid && n_fds == 1) {
                        on_spawned(s, fds[0]);
                        continue;
                }
                /* ... or the keeper of the worker that stays after KEEP (the holder until
                 * then), from that worker or from the keeper itself (on_kept()). */
                if (n == (ssize_t)sizeof h && h.type == WIRE_KEPT && s->shell == SBX_SHELL_PYTHON && pid > 0 &&
                    n_fds == 1) {
                        on_kept(s, fds[0], pid);
                        continue;
                }
                /* The worker's word that a detached command runs: it counts once, from the
                 * worker, echoing the run. */
                if (n == (ssize_t)sizeof h && h.type == WIRE_DETACHED && s->state == SS_RUNNING && pid > 0 &&
                    pid == s->worker_pid && h.seq == s->sent_seq && h.nonce == s->sent_nonce && n_fds == 0) {
                        s->state = SS_KILLING;
                        s->hooks->detached(s, (pid_t)h.status);
                        continue;
                }
                for (int j = 0; j < n_fds; j++)
                        close(fds[j]);
                if (n == (ssize_t)sizeof h && pid > 0)
                        on_message(s, &h, pid);
        }
}

/* The holder died without being told to: the session's state is lost. */
static void holder_event(Watch *w, uint32_t events) {
        SbxSession *s = w->data;
        wake(s);
        log_debug("session %s: holder %d died", s->name, (int)s->holder_pid);
        session_lose(s);
}

void session_close_shell(SbxSession *s) {
        Loop *l = s->core->loop;
        wake(s);
        loop_cancel_defer(l, &s->old_holder_pidfd);
        pidfd_sigkill(s->old_holder_pidfd);
        s->old_holder_pidfd = safe_close(s->old_holder_pidfd);
        stale_keeper_kill(s);
        pidfd_sigkill(s->early_fd);
        s->early_fd = safe_close(s->early_fd);
        loop_del(l, &s->sock_w);
        s->sock = safe_close(s->sock);
        loop_del(l, &s->holder_w);
        pidfd_sigkill(s->holder_pidfd);
        s->holder_pidfd = safe_close(s->holder_pidfd);
        pidfd_sigkill(s->worker_pidfd);
        forget_worker(s);
        mover_cancel(s->core->mover, s->move_id);
        s->move_id = 0;
        mover_cancel(s->core->mover, s->keeper_move_id);
        s->keeper_move_id = 0;
        /* The holder goes: what waited for its move out goes now. */
        if (s->keeper_kill_cg >= 0)
                (void)cgroup_kill(s->keeper_kill_cg);
        s->keeper_kill_cg = safe_close(s->keeper_kill_cg);
        s->died_deferred = false;
        s->keeping = s->leave_pending = s->kept_pending = s->kill_waits_urg = false;
        /* A kill that waited for KEPT: done now (the cell's run ends when its cgroup is empty). */
        if (s->kill_waits_cg >= 0)
                (void)cgroup_kill(s->kill_waits_cg);
        if (s->kill_waits_owned && s->kill_waits_cg >= 0)
                bglog_retire_cgroup(&s->core->bg, TAKE_FD(s->kill_waits_cg), s->cg_name);
        s->kill_waits_owned = false;
        s->kill_waits_cg = safe_close(s->kill_waits_cg);
        if (s->keeper_cg >= 0)
                bglog_retire_cgroup(&s->core->bg, TAKE_FD(s->keeper_cg), s->keeper_cg_name);
        s->spare_promoted = false;
        spare_drop(s);
        if (s->cg >= 0)
                bglog_retire_cgroup(&s->core->bg, TAKE_FD(s->cg), s->cg_name);
        if (s->leaving_cg >= 0)
                bglog_retire_cgroup(&s->core->bg, TAKE_FD(s->leaving_cg), s->leaving_name);
        s->run_cg = -1;
        s->holder_pid = s->worker_pid = 0;
}

int session_socketpair(int sv[2]) {
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return negerrno();
        /* Set before the shell can send anything: a message carries its sender's pid only if
         * the receiver asked for it when it was sent. */
        int one = 1, bufsize = (int)WIRE_MAX_MSG * 2;
        (void)setsockopt(sv[0], SOL_SOCKET, SO_PASSCRED, &one, sizeof one);
        (void)setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof bufsize);
        (void)setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof bufsize);
        return 0;
}

int session_adopt_shell(SbxSession *s, int sock) {
        s->state = SS_STARTING;
        int r = loop_add(s->core->loop, &s->sock_w, sock, EPOLLIN, session_event, s);
        if (r < 0) {
                close(sock);
                return r;
        }
        s->sock = sock;
        return 0;
}

int session_start_shell(SbxSession *s) {
        int sv[2];
        s->state = SS_STARTING;
        int r = session_socketpair(sv);
        if (r < 0)
                return r;
        int script = -1;
        if (s->shell != SBX_SHELL_BASH && (script = box_pykernel_fd(s->core->shared)) < 0)
                r = script;
        else
                r = box_spawn_session(&s->core->box, sv[1], script, s->shell == SBX_SHELL_JAVASCRIPT);
        close(sv[1]);
        if ((r == -EPIPE || r == -ECONNRESET) && !s->core->dying) {
                /* pid 1 is gone, its setup failed: what it said and its end come from the
                 * loop, which loses this session then and answers its runs with why. */
                close(sv[0]);
                return 0;
        }
        if (r < 0) {
                close(sv[0]);
                return r;
        }
        return session_adopt_shell(s, sv[0]);
}

void session_init(SbxSession *s, SbxSandbox *sb, SandboxCore *core, const SessionHooks *hooks) {
        s->sb = sb;
        s->core = core;
        s->hooks = hooks;
        s->sock = s->holder_pidfd = s->cg = s->worker_pidfd = s->run_cg = s->leaving_cg = -1;
        s->spare_pidfd = s->spare_cg = s->old_holder_pidfd = s->stale_keeper_pidfd = s->early_fd = s->keeper_cg = -1;
        s->keeper_kill_cg = s->kill_waits_cg = -1;
}

int session_park(SbxSession *s) {
        if (s->parked)
                return 0;
        if (s->state == SS_RETIRED) {
                s->parked = true; /* no worker: nothing to give back */
                return 0;
        }
        if (s->state != SS_IDLE || s->spare_pidfd >= 0 || s->move_id || s->spare_move_id || s->keeper_move_id ||
            s->leaving_cg >= 0 || s->run_cg >= 0 || s->worker_pidfd < 0 || s->cg < 0 || s->queue)
                return -EBUSY;
        s->worker_pidfd = safe_close(s->worker_pidfd);
        s->cg = safe_close(s->cg);
        s->parked = true;
        return 0;
}

int session_unpark(SbxSession *s) {
        if (!s->parked)
                return 0;
        if (s->state == SS_RETIRED) {
                s->parked = false;
                return 0;
        }
        SandboxCore *core = s->core;
        int cg = cgroup_child_open(&core->box.cg, s->cg_name);
        int fd = pidfd_open(s->spawned_pid, 0);
        int fd_err = fd < 0 ? errno : 0;
        /* Out of fds: it stays parked, whole. */
        if ((cg < 0 && cg != -ENOENT) || (fd < 0 && fd_err != ESRCH)) {
                safe_close(cg < 0 ? -1 : cg);
                safe_close(fd);
                return cg < 0 && cg != -ENOENT ? cg : -fd_err;
        }
        s->parked = false;
        /* The pid may be another process's if the worker died meanwhile: it is the worker only
         * if it is still the one process of the cgroup the daemon moved the worker into (no
         * process of the sandbox can move itself there). */
        if (fd >= 0 && cg >= 0 && cgroup_only_pid(cg, s->spawned_pid) == 1 && !pidfd_is_dead(fd)) {
                s->cg = cg;
                s->worker_pidfd = fd;
                return 0;
        }
        safe_close(fd);
        log_debug("session %s: idle worker %d gone while parked", s->name, (int)s->spawned_pid);
        /* As on_died() for an idle worker: the holder, its parent, says DIED and forks the next. */
        s->state = SS_WAIT_READY;
        s->worker_pid = 0;
        forget_worker(s);
        if (cg >= 0)
                bglog_retire_cgroup(&core->bg, cg, s->cg_name);
        return 0;
}

bool session_idle(const SbxSession *s) { return s->state == SS_IDLE; }

bool session_can_send(const SbxSession *s) { return s->state == SS_IDLE || keeper_pending(s); }

bool session_awaiting_worker(const SbxSession *s) {
        return s->state == SS_WAIT_READY || s->state == SS_CONTAINING || s->state == SS_LEAVING ||
               s->state == SS_RETIRING || s->state == SS_RETIRED;
}

/* A Python holder is told of the kill (SIGURG, which it catches while it holds, and which is
 * ignored by default). With no spare yet it forks one at once: the killed worker takes as long
 * to tear down its copy of the context as a fork takes to make one, so the next cell's worker
 * is made while the old one dies instead of after. A keeper (not its worker's parent) then
 * says DIED at its worker's exit instead of after pid 1 reaped it: a killed cell's status does
 * not count. bash holders are not told: a session's own `trap ... URG` would run. */
void session_mark_killing(SbxSession *s) {
        s->state = SS_KILLING;
        if (s->kept_pending) {
                /* The holder is still the worker: its keeper is told once named. */
                s->kill_waits_urg = true;
                return;
        }
        if (s->shell == SBX_SHELL_PYTHON && s->holder_pidfd >= 0)
                (void)pidfd_send_signal(s->holder_pidfd, SIGURG, NULL, 0);
}

bool session_leaving(const SbxSession *s) { return s->state == SS_LEAVING; }

int session_send_run(SbxSession *s, const WireHdr *h, const struct iovec parts[3], const int fds[3],
                     int *ret_cg, char *ret_cg_name) {
        bool pending = keeper_pending(s);
        if (s->state != SS_IDLE && !pending)
                return -EAGAIN;
        /* Addressed to the worker (its pid in the sandbox): a RUN that no worker took (its
         * worker died before reading it) must not run later in another. */
        WireHdr addressed = *h;
        addressed.status = (int32_t)s->spawned_nspid;
        struct iovec iov[4] = { { &addressed, sizeof addressed }, parts[0], parts[1], parts[2] };
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int) * WIRE_RUN_FDS)];
        } cm;
        struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 4, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf };
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * WIRE_RUN_FDS);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * WIRE_RUN_FDS);
        if (sendmsg(s->sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
                return negerrno();
        s->sent_seq = h->seq;
        s->sent_nonce = h->nonce;
        if (pending) {
                /* The worker, still the holder here, runs it once it named its keeper, which
                 * is in the cgroup until moved out (on_kept()). */
                s->cg = TAKE_FD(s->leaving_cg);
                memcpy(s->cg_name, s->leaving_name, sizeof s->cg_name);
                memcpy(s->keeper_in, s->cg_name, sizeof s->keeper_in);
                s->worker_pid = s->holder_pid;
                s->kept_pending = true;
                /* The answer was read and this cell sent: the old holder's exit now runs
                 * while the worker forks, on the CPU the answer's reader and the loop left. */
                stale_keeper_kill(s);
        }
        s->run_cg = s->cg;
        *ret_cg = TAKE_FD(s->cg);
        memcpy(ret_cg_name, s->cg_name, sizeof s->cg_name);
        s->state = SS_RUNNING;
        return 0;
}
