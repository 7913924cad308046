/* SPDX-License-Identifier: MIT */
/* Runs: a session's queue, each run's timeout, output, stdin and result (see run.c). The
 * session's shells (session.h) report to this room through run_session_hooks. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "base/buf.h"
#include "base/loop.h"
#include "base/redact.h"
#include "sbx/sbx.h"
#include "session/session.h"

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
        uint64_t t_start, deadline; /* ns, monotonic */
        uint64_t pids_refused;      /* forks refused at the commands' pids limit, last look
                                     * (RLIMIT_NPROC: 1 if the sandbox was at the limit) */
        bool pids_watched;          /* there is such a limit: looked at every SBX_PIDS_CHECK_MS */
        bool pids_counted;          /* pids_refused has been read */
        uint64_t pids_grew_ns;      /* ... and when it last grew (monotonic; 0: not yet) */
        int out_fd, err_fd, in_fd, timer_fd, cg, cg_events;
        char cg_name[24];
        Watch out_w, err_w, in_w, timer_w, cg_w;
        Buf out, err;
        bool sent, killed, paused, finished, persist_env, get_env;
        bool internal;
        bool died;           /* its shell died on its own (a signal), before it could end */
        bool session_reset;  /* the session's state was lost during or before it */
        bool kill_leftovers; /* its cgroup is killed when it ends: nothing it started survives */
        uint64_t order;      /* sandbox-wide order of requests (caller runs only) */
        uint32_t wire_flags; /* WIRE_F_DUMP, WIRE_F_RESTORE or RUN_BARRIER */
        uint32_t killed_procs; /* in its cgroup when run_kill() killed it */
        unsigned empty_looks; /* after the kill: cgroup.events read without its notification */
        bool kept_unstarved;  /* the kill waited for KEPT half SBX_KEPT_WAIT_MS: leftovers killed */
        int exit_code;
        SbxErrorClass error_class;
        /* Redaction (a caller run of a sandbox that redacts): each stream's redactor state,
         * and the raw bytes kept of it against the cap (out/err's limits then bound the
         * redacted text, SBX_REDACT_MAX_EXPANSION times the cap). */
        bool redacting;
        RedactStream rs_out, rs_err;
        uint64_t raw_kept[2], raw_cap[2];
        /* Streamed past the cap: the result was cut there, the stream goes on redacting into
         * `past` (emptied after each piece is handed to on_output). */
        bool past_cap[2];
        Buf past;
        /* A code cell (sbx_session_run_code()): its events pipe, the line being read (bounded
         * by SBX_CODE_EVENT_LINE_BYTES), the bytes of lines handed over and left out, and
         * whether the rest of an over-long line is being skipped. */
        bool events, ev_skip;
        int ev_fd;
        Watch ev_w;
        Buf ev;
        uint64_t ev_total, ev_dropped;
        /* A detached run (run_detach()): its process's fds until sent, and who takes it. */
        bool detach, pty;
        int detach_fds[3];
        struct RunDetach *detach_to;
};

/* Who takes a detached run's process: called once the process runs (pid in the sandbox),
 * before the run's done callback (exit 0). cg, the process's command cgroup named cg_name, is
 * the callee's. */
typedef struct RunDetach {
        void (*detached)(struct RunDetach *d, pid_t pid, int cg, const char *cg_name);
} RunDetach;

/* A pipe for a command's output or input (CLOEXEC, its buffer SBX_PIPE_BYTES where the
 * kernel allows). Returns 0 or -errno. */
int run_make_pipe(int *rd, int *wr);

/* Queues a caller run (in the sandbox-wide order, so operations hold it like any run) whose
 * command runs in a process of its own, forked from the session's state without changing it,
 * on the three fds given (taken: closed once sent or when the run ends). pty: they are one
 * terminal's. `to` hears of the process; done then gets exit 0, or only done with a failure
 * (124 timeout to start, 125 cancelled, 1 no process). Returns 0 or -errno (fds closed). */
int run_detach(SbxSession *s, const SbxRunOptions *o, const int fds[3], bool pty, RunDetach *to, SbxDoneFn done,
               void *ud, SbxRun **ret);

/* What the shells of every session report to. */
extern const SessionHooks run_session_hooks;

/* Internal runs: the flags of session/wire.h, or RUN_BARRIER, which never reaches a shell:
 * it ends as soon as everything queued before it has. */
#define RUN_BARRIER (1u << 31)
/* Queues an internal run in front of every caller run requested after `mark` (a run order;
 * 0: at the head). Its stdout (a state for WIRE_F_DUMP) may be up to SBX_MAX_STATE_BYTES.
 * Internal runs are never refused by the queue cap and never held. done is called from the
 * loop. Returns 0 or -errno. */
/* Sets env (NAME=VALUE, NULL-terminated) in s's shell for good, as env.set does, queued
 * behind the internal runs at the head of its queue (after an import's restore). Returns 0 or
 * -errno (-E2BIG over the run env limits). */
int run_internal_env(SbxSession *s, const char *const *env, SbxDoneFn done, void *ud);
int run_internal(SbxSession *s, uint32_t flags, const uint8_t *in, size_t in_len, uint64_t mark,
                 SbxDoneFn done, void *ud);
/* Looks at the session's queue again from the loop (a hold was lifted). */
void run_pump_later(SbxSession *s);
/* Answers every run of the session, the running one killed, with CANCELLED; done callbacks
 * fire before this returns. For a session being freed. */
void run_cancel_all(SbxSession *s);
/* Replaces the session's shells with a fresh one (default state). Only while no run is
 * running: -EBUSY otherwise. */
int run_restart_session(SbxSession *s);
