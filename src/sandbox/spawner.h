/* SPDX-License-Identifier: MIT */
/* The spawner: a small process forked once, when a context first makes sandboxes, that clones
 * every pid 1 so that the daemon's loop never does.
 *
 * Why a process: a clone3 from the daemon copies the daemon's address space (its page tables
 * grow with every sandbox it holds), and every page the daemon writes afterwards, still shared
 * with the new child, is copied on a fault that flushes the TLB on every CPU. Measured in a
 * burst of 500 creates, two thirds of the loop's time went there. The spawner is the daemon as
 * it was before it held any sandbox; it clones with CLONE_PARENT, so each pid 1 is still the
 * daemon's child (the daemon reaps it, watches its pidfd, checks its PPid when it parks), and
 * pid 1's memory is a copy of that small process, not of the grown daemon.
 *
 * The spawner also makes each sandbox's cgroups (a cgroup's mkdir brings its controllers
 * online, which on some kernels costs more than the clone). The daemon sends one request per
 * sandbox (its InitConfig and limits packed with its strings, and its end of the control
 * socket); the spawner answers each, in order, with the cgroups' fds, the pid and a pidfd, or
 * why it could not. Nothing the daemon does waits for an answer: it comes on Spawner.fd like
 * any other event. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include "cgroup/cgroup.h"
#include "sandbox/init.h"

/* A page the spawner shares with the daemon: the request it is cloning for, and the pid the
 * kernel writes there as part of the clone (CLONE_PARENT_SETTID), before the spawner could be
 * killed: a spawner that dies at any point leaves no pid 1 the daemon cannot name. */
typedef struct SpawnShared {
        uint64_t seq;
        int32_t pid;
} SpawnShared;

typedef struct Spawner {
        int fd;      /* the daemon's end of the request socket; -1 when not started */
        SpawnShared *shared; /* mmap'd, MAP_SHARED with the spawner; NULL when not started */
        pid_t pid;
        int pidfd;
        uint64_t next_seq; /* the sequence number the next request gets */
        CgroupRoot *root;  /* the caller's, where spawner_stop() removes what it still made */
        /* spawner_start_inline(): the other end of fd, on which the caller answers itself,
         * and what it clones with; else -1. */
        int inline_fd;
        int builtin_fd;
        const struct sock_fprog *seccomp;
} Spawner;

/* What the spawner makes for a new pid 1 besides its InitConfig: its cgroups (named cg_name
 * below the daemon's bases, with these limits), its id maps (root: a block of host ids;
 * rootless: the caller's ids alone), whether it gets a lower priority (no cpu controller) and,
 * in process mode, the cgroup.kill it writes when the daemon goes. */
typedef struct SpawnIds {
        bool rootless;
        bool maps;          /* namespaces mode: write the maps; process mode has none */
        bool lower_priority;
        bool kill_fd;       /* process mode: give pid 1 its cgroup's cgroup.kill */
        uint32_t host_uid, host_gid, host_base, host_ids;
        const char *cg_name;
        CgroupLimits limits;
} SpawnIds;

/* One answer, for the request numbered seq: pid > 0 and pidfd (owned by the caller) when the
 * clone succeeded (in the first answer, `cloned`), and cg's fds when the cgroups were made
 * (the caller's; cg.root is to be set by it). status < 0 says the sandbox cannot be (text says
 * why); cgroups may still come with it (pid 1 cloned, then killed: it is the daemon's to
 * reap). */
typedef struct SpawnReply {
        uint64_t seq;
        /* A request's first answer when pid 1 was cloned: only pid and pidfd, the moment it
         * exists; its last answer (status, cgroups) follows. */
        bool cloned;
        /* The daemon was short of fds: the answer came without any (its pid and cg.name
         * kept, status -EMFILE). */
        bool truncated;
        pid_t pid;
        int pidfd;
        int status;
        CgroupSandbox cg;
        char text[256];
} SpawnReply;

/* An answer with nothing in it (no pid, every fd -1), for seq. */
void spawn_reply_init(SpawnReply *r, uint64_t seq);

/* Starts the spawner, a child of the calling process, which is also the parent of every pid 1
 * it makes: sbx-spawner, the program beside the caller's own (spawner_program()), exec'd and
 * sent what it needs first; where there is none, a fork of the caller. builtin_fd, seccomp and
 * cg (whose base directories it makes cgroups in) are the caller's, which the spawner keeps
 * copies of. Returns 0 or -errno. */
int spawner_start(Spawner *sp, int builtin_fd, const struct sock_fprog *seccomp, CgroupRoot *cg);
/* The path of sbx-spawner beside the calling program (sbx-engine's, in the build tree or where
 * both are installed) in out; -ENOENT (or another -errno) when there is none to run. */
int spawner_program(char *out, size_t size);
/* sbx-spawner's main(): takes the setup on fd 3, says so, and answers requests until the
 * daemon closes its end. Returns only when it cannot: 2 when not started by its own build's
 * sbx-engine (or with no setup), 1 on a system error. */
int spawner_program_main(int argc, char **argv);
/* The same without a process: each request is done by the caller in spawner_request(), which
 * is then pid 1's parent, and its answers come on sp->fd as a spawner's would. For a short-lived
 * process with one sandbox (sbx run), which a spawner's fork would only slow. */
int spawner_start_inline(Spawner *sp, int builtin_fd, const struct sock_fprog *seccomp, CgroupRoot *cg);
/* spawner_program_main() preloaded into bash as sbx-spawner.so (src/cli/spawner_preload.c): abi is what the
 * daemon put in its environment (SPAWNER_ABI_ENV), z where its pid 1s' session shells go on
 * into bash (init.h). Its arguments and environment are wiped. */
int spawner_preload_main(const char *abi, InitZygote *z);
/* The variable that carries the build's abi to sbx-spawner.so, which does nothing without it. */
#define SPAWNER_ABI_ENV "SBX_SPAWNER_ABI"
/* Stops it: no request is taken after this, clones it made meanwhile are killed and reaped.
 * May block (bounded): only on the way out. */
void spawner_stop(Spawner *sp);
/* Sends one request. ic's ctl_fd and session_fd stay the caller's: the spawner gets copies.
 * ic's seccomp, builtin_fd, kill_fd and v1_procs are ignored (the spawner has its own, and
 * opens the others in the cgroups it makes). On success *ret_seq is the number its answer will
 * carry. Returns 0, -EAGAIN when the spawner has too many requests queued, -EMSGSIZE when the
 * config does not fit in a request, or -errno (-EPIPE: the spawner is gone). */
int spawner_request(Spawner *sp, const InitConfig *ic, const SpawnIds *ids, uint64_t *ret_seq);
/* Once the spawner is gone (spawner_reply() said -EPIPE), before spawner_stop(): the pid 1 it
 * was cloning when it died (0 for none) and the request it was for, in *ret_seq. */
pid_t spawner_last_clone(const Spawner *sp, uint64_t *ret_seq);
/* Takes the next answer without waiting: 1 with *ret filled, 0 when none is there, -EPIPE
 * once the spawner is gone (every request still unanswered will never be). */
int spawner_reply(Spawner *sp, SpawnReply *ret);
