/* SPDX-License-Identifier: MIT */
/* libsbx's own structures, shared by its files (session.c: sandboxes, sessions, runs;
 * image.c: fork, snapshots, export and import) and by nothing else. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "base/buf.h"
#include "base/loop.h"
#include "sandbox/box.h"
#include "sbx/sbx.h"

typedef enum SessionState {
        SS_STARTING, SS_WAIT_READY, SS_IDLE, SS_RUNNING, SS_KILLING,
} SessionState;

/* A pipe whose command ended while something it started still writes to it: read into the
 * sandbox's background log until EOF, never closed early (no SIGPIPE for the writer). */
typedef struct BgPipe {
        struct BgPipe *next, *prev;
        SbxSandbox *sb;
        int fd;
        Watch w;
} BgPipe;

/* A command cgroup that still holds processes after its command ended. Kept by name only
 * (no fds: their number is bounded by the pids limit, not by the daemon's fd budget) and
 * removed by a periodic sweep once empty. */
typedef struct BgCgroup {
        struct BgCgroup *next, *prev;
        char name[24];
} BgCgroup;

/* A destroyed sandbox whose processes are still dying; freed from the loop once pid 1 is
 * reaped and its cgroups are removed, so destroying never waits. */
typedef struct Corpse {
        struct Corpse *next, *prev;
        SbxContext *ctx;
        Box box;
        int events;
        Watch init_w, cg_w;
} Corpse;

struct SbxContext {
        Loop *loop;
        char last_error[512];
        BoxShared shared;
        bool shared_ready;
        int devnull;
        SbxSandbox *sandboxes;
        /* Sandboxes made ahead of time with default options and a started default session:
         * a default sbx_sandbox_new() takes one, and the loop makes the next. */
        SbxSandbox *pool;
        unsigned n_pool, pool_target;
        int pool_timer;
        Watch pool_w;
        Corpse *corpses;
};

struct SbxSandbox {
        SbxSandbox *next, *prev;
        SbxContext *ctx;
        Box box;
        SbxLimits limits;
        uint64_t timeout_ms;
        char **env;
        SbxSession *sessions;
        unsigned n_sessions;
        Ring bglog;
        BgPipe *bg_pipes;
        BgCgroup *bg_cgroups;
        int bg_timer;        /* sweeps bg_cgroups while there are any */
        Watch bg_w;
        uint64_t next_cmd;
        Watch init_w, ctl_w;
        bool dying, pooled;
        /* What a fork needs to make a sandbox like this one. */
        bool network;
        char *rootfs;
        /* image.c: operations queued on this sandbox (the first is running), its
         * snapshots, and the operation waiting for this sandbox's root to be ready. */
        struct Op *ops;
        struct Snapshot *snapshots;
        unsigned n_snapshots;
        uint64_t next_snapshot;
        struct Op *ready_waiter;
        uint64_t run_order; /* the last run's place in the sandbox-wide order of requests */
};

struct SbxSession {
        SbxSession *next, *prev;
        SbxSandbox *sb;
        char *name;
        SessionState state;
        int sock;
        Watch sock_w;
        pid_t holder_pid, worker_pid;
        int holder_pidfd;
        int worker_pidfd;     /* from the holder's SPAWNED: the only worker we trust */
        pid_t spawned_pid;    /* host pid of that worker */
        Watch holder_w;
        int cg;           /* cgroup of the next (or current) command, worker inside */
        char cg_name[24];
        SbxRun *queue, *queue_tail;
        unsigned n_queued;
        SbxRun *current;
        uint32_t seq;
        uint64_t nonce_state;
        bool pump_pending;
        bool broken; /* the shell could not start; retried on the next run */
};

struct SbxRun {
        SbxRun *next;
        SbxSession *s;
        char *command;
        size_t command_len;
        char *cwd;
        char *env;
        size_t env_len;
        uint8_t *stdin_data;
        size_t stdin_len, stdin_off;
        uint64_t timeout_ms;
        SbxOutputFn on_output;
        SbxDoneFn on_done;
        void *ud;
        uint32_t seq;
        uint64_t nonce;
        uint64_t t_start;
        int out_fd, err_fd, in_fd, timer_fd, cg, cg_events;
        char cg_name[24];
        Watch out_w, err_w, in_w, timer_w, cg_w;
        Buf out, err;
        bool sent, killed, paused, finished, persist_env, get_env;
        bool internal;
        uint64_t order;      /* sandbox-wide order of requests (caller runs only) */
        uint32_t wire_flags; /* WIRE_F_DUMP, WIRE_F_RESTORE or RUN_BARRIER */
        int exit_code;
        SbxErrorClass error_class;
};


/* Internal runs (session.c): the flags of session/wire.h, or RUN_BARRIER, which never
 * reaches a shell: it ends as soon as everything queued before it has. */
#define RUN_BARRIER (1u << 31)
/* Queues an internal run in front of every caller run requested after `mark` (a run_order;
 * 0: at the head). Its stdout (a state for WIRE_F_DUMP) may be up to SBX_MAX_STATE_BYTES.
 * Internal runs are never refused by the queue cap and never held. Returns 0 or -errno. */
int session_run_internal(SbxSession *s, uint32_t flags, const uint8_t *in, size_t in_len, uint64_t mark,
                         SbxDoneFn done, void *ud);
/* Looks again at every session's queue (an op has let runs go). */
void sandbox_pump_all(SbxSandbox *sb);
/* Replaces the session's shells with a fresh one (default state). Only while it is idle. */
int session_restart(SbxSession *s);
/* A new sandbox with the same options as sb (limits, timeout, environment, network, root). */
int sandbox_new_like(SbxSandbox *sb, SbxSandbox **ret, char *err, size_t errlen);

/* image.c: whether a caller's run must wait for an operation requested before it (fork,
 * snapshot, export, restore, import are barriers in the order of requests). */
bool image_run_held(const SbxSandbox *sb, uint64_t order);
/* image.c: whether an operation is copying or replacing the sandbox's tree right now (the
 * files API then refuses changes with -EBUSY: they would land half in, half out). */
bool image_tree_busy(const SbxSandbox *sb);
/* image.c's hooks: sb's pid 1 reported its root ready; sb is being freed. */
void image_sandbox_ready(SbxSandbox *sb);
void image_sandbox_freeing(SbxSandbox *sb);
