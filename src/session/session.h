/* SPDX-License-Identifier: MIT */
/* A session's shells and the protocol with them (see session.c): the holder bash that is
 * the session's state, and the idle worker it forks for the next command. What the session
 * runs (its queue) belongs to run.c, which hears of the shells through SessionHooks; the
 * sessions of a sandbox are listed by sandbox.c. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include "base/loop.h"
#include "sbx/sbx.h"
#include "session/core.h"
#include "base/wire.h"

typedef enum SessionState {
        SS_STARTING, SS_WAIT_READY, SS_CONTAINING, SS_IDLE, SS_RUNNING, SS_KILLING, SS_LEAVING,
        /* session_retire(): RETIRE sent to the idle worker; RETIRED: the holder alone, waiting
         * for FORK (a run asks for it: session_rehire()). */
        SS_RETIRING, SS_RETIRED,
} SessionState;

/* What the shells tell the owner of the session's runs. Each is called from the loop. */
typedef struct SessionHooks {
        /* A worker is idle in its command cgroup: a run can be sent. */
        void (*idle)(SbxSession *s);
        /* The sent command ended; status is its exit code. The worker is now the holder.
         * clean: the worker was alone in the command's cgroup (the command left nothing
         * running) and may still be in it: the owner hands the cgroup back with
         * session_keep_cgroup() instead of looking for leftovers in it. */
        void (*ended)(SbxSession *s, int status, bool clean);
        /* The sent WIRE_F_DETACH command runs in a process of its own: pid (in the sandbox),
         * or -errno if the worker could not fork. The worker is dying; the holder forks the
         * next one. */
        void (*detached)(SbxSession *s, pid_t pid);
        /* The worker of the sent command died on its own (wait status). A spare may have
         * taken its place already: the session is then idle (or containing) again. */
        void (*died)(SbxSession *s, int wstatus);
        /* The holder is gone: the state is lost and no shell is left. never_started: it died
         * before saying hello (it cannot start at all). */
        void (*lost)(SbxSession *s, bool never_started);
} SessionHooks;

struct SbxSession {
        SbxSession *next, *prev; /* sandbox.c's list */
        SbxSandbox *sb;          /* owner, opaque here */
        SandboxCore *core;
        const SessionHooks *hooks;
        char *name;
        SbxShell shell;          /* bash, or a code interpreter's (never changes) */
        uint64_t losses;         /* times its holder died: the state was lost */
        /* session.c: the shells */
        SessionState state;
        int sock;
        Watch sock_w;
        pid_t holder_pid, worker_pid;
        int holder_pidfd;
        int worker_pidfd;   /* from the holder's SPAWNED: the only worker we trust */
        pid_t spawned_pid;  /* host pid of that worker */
        pid_t spawned_nspid; /* its pid in the sandbox (0: unknown), a RUN's address */
        Watch holder_w;
        int cg;             /* cgroup of the next command, the idle worker inside */
        char cg_name[24];
        int run_cg;         /* the sent command's cgroup, borrowed from its run (RUNNING) */
        int64_t move_id;    /* CONTAINING, LEAVING: the mover's request */
        int leaving_cg;     /* LEAVING after a clean end: the ended command's cgroup */
        char leaving_name[24];
        int ended_status;   /* LEAVING: the exit code, for an end told once moved */
        /* LEAVING, from DONE until leave() (deferred, so that it comes after the answer):
         * the holder from before the command, still to be killed */
        int old_holder_pidfd;
        int stale_keeper_pidfd; /* the old holder, stopped, when the worker stays: killed at KEPT */
        bool ended_told;    /* LEAVING: the owner has heard of the end */
        /* LEAVING after a clean end: MOVED was sent with the answer, before the holder's move
         * out, so the next worker may be born in the ended command's cgroup. */
        bool moved_early;
        int early_fd;       /* moved_early: a SPAWNED heard while LEAVING, the worker's pidfd */
        /* LEAVING after a clean end of a Python worker that offered to stay (WIRE_F_KEEPS):
         * told KEEP, it is not moved out; its KEPT makes its child, the keeper, the holder. */
        bool keeping;
        bool leave_pending;  /* leave() is deferred and has not run yet */
        /* The next cell's RUN went to a worker told KEEP before its KEPT came (RUNNING or
         * KILLING): the worker names its keeper before it reads the RUN, and a kill of that
         * cell waits for the name (kill_waits_cg, a dup of the cell's cgroup, and
         * kill_waits_urg, the holder's SIGURG), up to SBX_KEPT_WAIT_MS from kill_waits_ns. */
        bool kept_pending;
        bool kill_waits_urg;
        bool kill_waits_owned; /* the run gave kill_waits_cg up (session_take_killed_cgroup()) */
        int kill_waits_cg;
        uint64_t kill_waits_ns;
        /* After KEPT: the keeper's move out of the worker's cgroup (keeper_in, by name), while
         * the worker is idle or runs the next cell already. What would reach the keeper
         * there waits for the move (keeper_out()): */
        int64_t keeper_move_id;
        char keeper_in[24];
        int keeper_cg;          /* the cgroup of a worker that died idle: retired then */
        char keeper_cg_name[24];
        int keeper_kill_cg;     /* a cell's cgroup whose kill was asked for: killed then */
        bool died_deferred;     /* the running cell's worker died: its end is told then */
        int died_status;
        uint64_t ends;      /* DONEs taken: a done callback that turned the loop is told by it */
        /* A spare worker: a holder may fork one more while a command runs (the Python
         * kernel does, once a cell has run 10 ms). It has the state from before the command,
         * is contained in a cgroup of its own while the command runs, and takes the next
         * command at once if this one is killed or dies, so that the slow first cgroup move
         * after a kill is never on the way of the next command; it is killed when the
         * command ends normally. */
        int spare_pidfd;
        pid_t spare_pid, spare_nspid;
        int spare_cg;
        char spare_cg_name[24];
        int64_t spare_move_id;
        bool spare_ready;    /* moved into spare_cg */
        bool spare_promoted; /* now the worker, its move still on (CONTAINING) */
        uint32_t sent_seq;  /* the RUN being run: its DONE must echo both */
        uint64_t sent_nonce;
        /* run.c: the queue (the running run first, in `current`) */
        SbxRun *queue, *queue_tail;
        unsigned n_queued;
        SbxRun *current;
        SbxRun *refused;    /* answered at once (LIMIT_EXCEEDED), delivered from the loop */
        uint32_t seq;
        bool pump_pending;
        bool broken;        /* the shell could not start; retried on the next run */
        bool reset_unsaid;  /* the holder died with no run of a caller in it: the next such
                             * run's result says the session started over */
        bool parked;        /* idle, worker_pidfd and cg closed (session_park()) */
};

/* Fills in a new session's shell fields (no shell yet). */
void session_init(SbxSession *s, SbxSandbox *sb, SandboxCore *core, const SessionHooks *hooks);
/* Starts a holder shell (state STARTING). Returns 0 or -errno. */
int session_start_shell(SbxSession *s);
/* A session socket pair as session_start_shell() makes one: sv[0] the daemon's, sv[1] the
 * shell's. Returns 0 or -errno. */
int session_socketpair(int sv[2]);
/* Takes sock (sv[0] of session_socketpair(), owned from now on, even on failure), whose shell
 * was started without a request (the default session's, during the sandbox's setup): state
 * STARTING, as after session_start_shell(). Returns 0 or -errno. */
int session_adopt_shell(SbxSession *s, int sock);
/* Kills the shells and forgets them; the idle worker's cgroup is retired. */
void session_close_shell(SbxSession *s);
/* Gives the shells up (the holder died, or pid 1 did): they are killed and the owner of the
 * runs is told the state is lost. */
void session_lose(SbxSession *s);
/* An idle session gives back the fds of its worker (its pidfd, its command cgroup's); its
 * holder's pidfd and its socket stay, on which its changes are heard. 0 when parked, -EBUSY
 * when it is not idle. session_unpark() takes them again and checks that the worker is the
 * one it was (alone in its cgroup): if it died meanwhile the session waits for the holder's
 * next worker, as after a death heard. */
int session_park(SbxSession *s);
/* 0, or -errno out of fds (it stays parked). */
int session_unpark(SbxSession *s);
/* An idle bash session's worker exits (state RETIRING, then RETIRED once its holder says so,
 * its command cgroup retired): what an idle sandbox keeps before it is parked is one shell,
 * not two. core->retired is called when it is RETIRED. 0, -EBUSY when not idle (or not
 * bash), -errno when the word cannot be sent. */
int session_retire(SbxSession *s);
/* A RETIRED session's holder is told to fork the next worker (state WAIT_READY); nothing
 * otherwise. */
void session_rehire(SbxSession *s);
/* A RETIRING session's worker is killed: its holder then says DIED (or RETIRED, had it read
 * the word) and forks the next, as after any death. For a run that will not wait for a
 * worker that does not read (stopped from inside the sandbox, say). */
void session_hurry_retire(SbxSession *s);
/* Whether a worker is idle, waiting for a run. */
bool session_idle(const SbxSession *s);
/* Whether a RUN may be sent now: the worker is idle, or it is a Python worker told KEEP after
 * a clean end, which names its keeper before it reads the RUN (kept_pending). */
bool session_can_send(const SbxSession *s);
/* Whether the kill of the running cell waits for its worker to name its keeper (how long in
 * ret_waited_ns). */
bool session_kill_waits(const SbxSession *s, uint64_t *ret_waited_ns);
/* A run that will not wait longer for that (SBX_KEPT_WAIT_MS) gives its cgroup (cg, owned from
 * now on) to the session, which kills it once the keeper is named, or with the session. */
void session_take_killed_cgroup(SbxSession *s, int cg);
bool session_kept_pending(const SbxSession *s); /* the running cell went before KEPT */
/* Whether the session waits for its holder to fork a worker. */
bool session_awaiting_worker(const SbxSession *s);
/* Sends a RUN message with its three fds (stdin, stdout, stderr) to the idle worker (see
 * session_can_send()), whose cgroup goes to the caller (ret_cg, name in ret_cg_name[24]).
 * Returns 0 (state RUNNING) or -errno. */
int session_send_run(SbxSession *s, const WireHdr *h, const struct iovec parts[3], const int fds[3],
                     int *ret_cg, char *ret_cg_name);
/* The sent command is being killed: its worker's DONE no longer counts. */
void session_mark_killing(SbxSession *s);
/* The sent command ended (DONE) and its worker, the new holder, is being moved out of its
 * cgroup: the result follows. */
bool session_leaving(const SbxSession *s);
/* Whether the holder, a keeper just forked, is still in the command cgroup named name (its
 * move out is on its way while the next cell may already run). */
bool session_keeper_in(const SbxSession *s, const char *name);
/* Kills what a running command's cgroup (cg, named name) holds: at once, or, while the keeper
 * is still in it, the worker now and the rest once the keeper is out; before the worker named
 * its keeper, all of it once it has (session_kill_waits()). */
void session_kill_cgroup(SbxSession *s, int cg, const char *name);
/* Whether the sent command's worker died and its end waits to be told (the keeper's move). */
bool session_end_pending(const SbxSession *s);
/* From the ended hook of a clean end: the command's cgroup (dir fd, owned from now on, and
 * name), retired once the worker is out of it. */
void session_keep_cgroup(SbxSession *s, int cg, const char *name);
