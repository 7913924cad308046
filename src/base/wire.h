/* SPDX-License-Identifier: MIT */
/* Messages on a session's SOCK_SEQPACKET socket, between the daemon and the shell processes of
 * that session (the holder and its worker): bash with the builtin, or the Python kernel
 * (sandbox/pykernel.py, which packs WireHdr itself: keep the two in step). Shared by libsbx and
 * the bash builtin; plain C types only, since the builtin is compiled against bash's headers.
 *
 * Every message starts with WireHdr. The daemon's end has SO_PASSCRED, so the kernel attaches
 * the sender's pid (translated into the daemon's pid namespace) to each message: that is how
 * the daemon learns the host pid of a worker to move into a cgroup, and no message can claim
 * another process's identity.
 *
 * The command runs inside the worker process, so it could write a message with the worker's
 * identity (e.g. `printf ... >&1001`). A DONE therefore counts only if it echoes the RUN's
 * random nonce, which lives in the builtin's memory; the worker is made non-dumpable so no
 * other process of the sandbox can read that memory either. */
#pragma once
#include <stdint.h>
#include "base/limits.h"

enum {
        WIRE_HELLO = 1, /* holder -> daemon: a session shell started (sender = holder) */
        WIRE_READY = 2, /* unused: a worker is known by its holder's SPAWNED alone */
        WIRE_RUN = 3,   /* daemon -> worker: payload cwd, env, command; fds stdin, stdout, stderr;
                           `status` the pid (in the sandbox) of the worker it is for, 0 if
                           unknown: a RUN read by another process is not its to run */
        WIRE_DONE = 4,  /* worker -> daemon: command ended, `status` is its exit code; the
                           worker is now the session's holder (until its KEPT, if told KEEP) */
        WIRE_DIED = 5,  /* holder -> daemon: the worker died, `status` is its wait status */
        WIRE_SPAWNED = 6, /* holder -> daemon: a pidfd of the worker it just forked; only
                             that process's READY counts (its siblings, background jobs of
                             earlier commands, could otherwise pose as the worker) */
        WIRE_DETACHED = 7, /* worker -> daemon, for a WIRE_F_DETACH run: `status` is the pid
                              (in the sandbox) of the process it forked for the command, or
                              -errno; seq and nonce echo the RUN. The worker then exits, and the
                              holder, untouched, forks the next one (DIED follows). */
        WIRE_MOVED = 8,    /* daemon -> the new holder, after its DONE: it is out of the
                              command's cgroup, so the worker it forks now is too. What is left
                              in that cgroup is then exactly what the command left running.
                              After a clean end (the worker was alone in the cgroup) it comes
                              with the answer, before that move: the next worker may be born
                              in the cgroup, which is then the next command's. */
        WIRE_RETIRE = 9,   /* daemon -> the idle worker of a bash session about to be parked: it
                              exits without running anything, its holder says RETIRED and forks
                              no worker until FORK (a parked sandbox keeps one shell, not two);
                              `status` as RUN's: a RETIRE read by a later worker is dropped */
        WIRE_RETIRED = 10, /* holder -> daemon: its worker exited having said it retired (on a
                              pipe to the holder); `status` its wait status. Asked for, the
                              session is retired; else it counts as the worker's death */
        WIRE_FORK = 11,    /* daemon -> a holder after its RETIRED: fork the next worker */
        WIRE_KEEP = 12,    /* daemon -> a worker whose DONE had WIRE_F_KEEPS, after a clean end:
                              it stays the worker and forks a keeper, told with KEPT (else
                              the daemon says MOVED, after its move out, as to any new holder) */
        WIRE_KEPT = 13,    /* worker -> daemon, after KEEP: a pidfd of its child, the keeper,
                              which holds the state the command left and is the holder from
                              now on; the worker takes the next command, in the same cgroup
                              once the keeper has been moved out of it */
};

typedef struct WireHdr {
        uint32_t type;
        uint32_t seq;
        int32_t status;
        uint32_t cwd_len; /* RUN: bytes of cwd override (0: none), no NUL */
        uint32_t env_len; /* RUN: bytes of "NAME=VALUE\0" entries */
        uint32_t cmd_len; /* RUN: bytes of command text */
        uint32_t flags;   /* RUN: WIRE_F_* */
        uint64_t nonce;   /* RUN: random; DONE must echo it */
} WireHdr;

/* RUN flag: the env entries are set in the session for good (exported), not for this run. */
#define WIRE_F_PERSIST_ENV 1u
/* RUN flag: no command; the text is a variable name, whose value (if set and exported) the
 * worker writes to stdout itself, status 0, else status 1. No shell code runs, so no function
 * of the session can answer in its place. */
#define WIRE_F_GETENV 2u
/* RUN flag: no command; the worker writes the session's state to stdout (see
 * session_builtin.c for the format), status 0. Nothing of the session's own code runs. */
#define WIRE_F_DUMP 4u
/* RUN flag: no command; stdin carries a state written by WIRE_F_DUMP (of any session),
 * which the worker applies to its own fresh state. */
#define WIRE_F_RESTORE 8u
/* RUN flag: the command runs in a process of its own, forked by the worker from the
 * session's state and orphaned at once (sandbox pid 1 reaps it and reports its status); the
 * session's state never changes. Answered by WIRE_DETACHED instead of DONE. */
#define WIRE_F_DETACH 16u
/* With WIRE_F_DETACH: the three fds are one terminal's; the process makes it its controlling
 * terminal in a session of its own. */
#define WIRE_F_PTY 32u
/* RUN flag, for a session whose shell is a code interpreter (sbx.h, SbxShell): the first fd is
 * not stdin but the write end of the cell's events pipe, one JSON object per line (see
 * sandbox/pykernel.py); the cell's stdin is /dev/null. With WIRE_F_PERSIST_ENV, the cwd is
 * kept too: that is how a context gets its starting cwd and env. */
#define WIRE_F_EVENTS 64u
/* DONE flag (the Python kernel's): the worker can stay the worker if told KEEP. */
#define WIRE_F_KEEPS 128u

#define WIRE_RUN_FDS 3
/* Largest RUN message: header + cwd + env + command (limits.h bounds each). */
#define WIRE_MAX_MSG (sizeof(WireHdr) + SBX_MAX_PATH_BYTES + SBX_MAX_RUN_ENV_BYTES + SBX_MAX_COMMAND_BYTES)
