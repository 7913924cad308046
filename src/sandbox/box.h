/* SPDX-License-Identifier: MIT */
/* A sandbox as the kernel sees it, from the daemon's side: namespaces around a pid 1 (see
 * init.h), its cgroups, and the control socket that asks it for session shells. Knows
 * nothing of sessions or commands. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <linux/filter.h>
#include "cgroup/cgroup.h"
#include "sandbox/spawner.h"
#include "sandbox/landlock.h"

/* Room for a process-mode sandbox's directory: the base (see plain_base_init()), "/", its
 * 32-hex id, and ".snap" for its snapshot store beside it. */
#define BOX_DIR_BYTES 320

/* What every sandbox of one context shares. */
typedef struct BoxShared {
        CgroupRoot cg;
        bool cg_open;
        bool rootless;
        bool process;              /* process mode (sandbox/plain.h): no namespace at all */
        char process_base[256];    /* process mode: where sandboxes' directories are made */
        int process_lock;          /* ... this daemon's own, locked while it lives (plain.h) */
        /* Whether the daemon may take fds from its sandboxes' pid 1s (pidfd_getfd(2) needs
         * ptrace's rights over them): 1 yes, 0 no, -1 not tried yet (box_park()). */
        int getfd_ok;
        int builtin_fd;            /* sealed memfd with the bash builtin */
        int pykernel_fd;           /* sealed memfd with the Python kernel, or -1 (box_pykernel_fd()) */
        struct sock_fprog seccomp; /* filter bytes, owned */
        char staging[256];         /* host directory each sandbox builds its root on */
        uid_t user_uid;            /* rootless: the sandbox's user as the host sees it */
        gid_t user_gid;
        uint32_t next_slot;        /* root: next host uid slot to try */
        uint8_t *slots;            /* root: SBX_HOST_UID_SLOTS bits, host id blocks in use */
        Spawner spawner;           /* makes every pid 1 (spawner.h) */
        bool spawn_inline;         /* ... in this process (spawner_start_inline()) */
} BoxShared;

typedef struct BoxConfig {
        uint64_t fs_bytes, file_count, memory_bytes;
        uint32_t pids;
        uint32_t cpu_millis; /* thousandths of a CPU (see SBX_CPU_PERIOD_US) */
        bool network;
        /* Not 0: pid 1 listens on 127.0.0.1:proxy_port of the sandbox's own network namespace
         * and hands the socket over with its root (Box.proxy_fd), for the egress proxy. */
        uint16_t proxy_port;
        const char *rootfs;
        /* An image's layers (directories, the top one first, NULL-terminated) as the root, read
         * only, instead of the host's directories or rootfs; or NULL. */
        const char *const *layers;
        const char *workdir; /* where session shells start (an image's WorkingDir), or NULL */
        char **env; /* complete environment of session shells */
        const LandlockPolicy *policy; /* exec policy, or NULL; read by pid 1 (its copy) */
        const char *trust_pem; /* a CA certificate the sandbox trusts (mount.h), or NULL */
        /* The shell's end of the default session's socket, or -1: pid 1 starts that shell
         * while it builds the root (see init.h). The caller keeps and closes it. Only for
         * shells with the fixed default environment, the host's tree and no policy. */
        int session_fd;
} BoxConfig;

typedef struct Box {
        char id[33];
        /* -1 while spawning: from box_create() until the spawner's answer (box_spawned()). */
        pid_t init_pid;
        int init_pidfd;
        bool spawning;
        uint64_t spawn_seq; /* the spawner's number for its pid 1's request */
        int ctl_fd;
        int root_fd;   /* O_PATH fd of the sandbox's / (from its pid 1) */
        int snap_fd;   /* fd of its snapshot store (see mount_build_root()), -1 while it has none */
        /* The daemon makes the store when first used (box_snap_store()), of this budget. */
        bool snap_lazy;
        uint64_t snap_bytes, snap_inodes;
        /* Its network namespace, for the sockets of exposed ports; -1 until ready. Pid 1
         * unshares it during setup (out of the daemon's clone3, which it would slow) and sends
         * it with its root: being non-dumpable, only pid 1 itself may open it without
         * CAP_SYS_PTRACE over the daemon's user namespace (rootless, nothing else may). */
        int netns_fd;
        /* The listening socket pid 1 made for BoxConfig.proxy_port (after READY), or -1. */
        int proxy_fd;
        uid_t host_uid; /* the sandbox's user (uid 1000 inside) as the host sees it */
        gid_t host_gid;
        /* Root: ids 0..host_ids-1 inside are host ids host_base.. (uids and gids alike), so
         * host_uid is host_base + 1000. Rootless: only the user is mapped, host_ids is 0. */
        uid_t host_base;
        uint32_t host_ids;
        int slot;       /* root: its host id block, else -1 */
        /* Without a pids cgroup: the RLIMIT_NPROC of its shells (its pids limit; commands get
         * that less SBX_PIDS_RESERVE), 0 where a cgroup limits processes or nothing does. */
        uint32_t nproc_limit;
        bool ready;     /* pid 1 reported its root built (root_fd valid) */
        /* Parked (box_park()): root_fd, snap_fd, netns_fd and init_pidfd closed, the cgroups'
         * fds too; pid 1 keeps the first three at these numbers of its own (-1: not kept). */
        bool parked;
        int keep_root, keep_snap, keep_net;
        dev_t writable_dev; /* st_dev of its writable tmpfs (/tmp, /home/user, /dev/shm) */
        CgroupSandbox cg;
        /* Process mode: the host directory that is its "/" for the files API (root_fd), ""
         * otherwise. Once everything of the sandbox is gone a remover process takes it away:
         * init_pid and init_pidfd are then the remover's (see box_try_finish()). */
        bool process;
        enum { BOX_DIR_PRESENT, BOX_DIR_REMOVING, BOX_DIR_GONE } dir_state;
        char dir[BOX_DIR_BYTES];
} Box;

/* Prepares the shared part; `process`: every sandbox in process mode; `spawn_inline`: this
 * process clones each pid 1 itself, with no spawner process (spawner_start_inline()). Returns
 * 0 or -errno (-ENOTSUP: no cgroup v2; -EPERM: process mode's base directory belongs to
 * another user). */
int box_shared_init(BoxShared *s, bool process, bool spawn_inline);
/* The sealed memfd of the Python kernel (pykernel.py), made at the first call: a context
 * without code sessions (every `sbx run`) never writes it. Returns the fd (s's) or -errno. */
int box_pykernel_fd(BoxShared *s);
void box_shared_done(BoxShared *s);

/* Creates the sandbox and returns at once: its cgroups and control socket exist, its pid 1 is
 * asked of the spawner, whose answer comes on box_spawner_fd() (box_spawn_reply()) and is
 * given to the box with box_spawned(); pid 1 then builds the root (session shells may already
 * be asked for: pid 1 starts them after). Only after that answer may ctl_fd be read. On
 * failure err says what failed (-EAGAIN: too many creates wait for the spawner). Returns 0 or
 * -errno. */
int box_create(BoxShared *s, const BoxConfig *c, Box *ret, char *err, size_t errlen);
/* The spawner's answers: its socket (-1 when it is not running), the next answer without
 * waiting (see spawner_reply()), and, once it said -EPIPE, the spawner stopped (the next
 * box_create() starts another), returning the pid 1 it was cloning when it died, if any (0),
 * and for which request (*ret_seq). */
int box_spawner_fd(const BoxShared *s);
int box_spawn_reply(BoxShared *s, SpawnReply *ret);
pid_t box_spawner_lost(BoxShared *s, uint64_t *ret_seq);
/* What a request named `name` (its box id) got that its answer did not bring (the spawner
 * died, or the daemon was short of fds): its cgroups found by name, and its pid 1 (rep->pid,
 * or the daemon's child in its init cgroup), killed, into rep. */
void box_spawn_recover(BoxShared *s, const char *name, SpawnReply *rep);
/* The spawner's answer for b: its pid 1 (init_pid and init_pidfd, taken from rep) or none. */
void box_spawned(Box *b, SpawnReply *rep);
/* A Box that holds nothing (every fd -1): for a pid 1 whose sandbox is gone before its
 * spawner's answer came, given to the corpses to be killed and reaped. */
void box_blank(Box *b);
/* The processes of the sandbox (entries of its /proc), or -errno. */
int box_count_processes(const Box *b);
/* Takes pid 1's word when it has come (wait on ctl_fd): 1 ready, 0 not yet, -errno if setup
 * failed (err says why; pid 1 then exits). */
int box_ready(Box *b, char *err, size_t errlen);
/* Asks init for a session shell on `sock` (the shell's end of a session socketpair; the
 * caller keeps its own copy): bash, or python3 running `script` (a memfd, e.g.
 * box_pykernel_fd(); -1 for bash), told to drive node when javascript. Returns 0 or
 * -errno. */
int box_spawn_session(Box *b, int sock, int script, bool javascript);
/* Asks init to report the end of process pid (a pid of the sandbox). Returns 0 or -errno. */
int box_watch_pid(Box *b, pid_t pid);
/* After READY: takes init's next report without waiting. 1 with the ended process's pid and
 * wait status, 0 when there is none now, -errno when init is gone. */
int box_read_exit(Box *b, pid_t *ret_pid, int *ret_status);
/* Kills everything and removes the cgroups. Waits (bounded) for the processes to be gone. */
void box_destroy(BoxShared *s, Box *b);
/* The same in two steps that never block: box_kill() sends the kills; box_try_finish()
 * reaps pid 1 and removes the cgroups once everything is gone, returning 1 when done and 0
 * while something is still dying (wait on b->init_pidfd or the sandbox's cgroup.events). In
 * process mode it then starts a process that removes the sandbox's directory, and returns 0
 * with b->init_pidfd the remover's (wait on it: it may be a new fd) until that one is
 * reaped. */
/* An idle sandbox gives its fds back to the daemon's limit: its root's, store's and network
 * namespace's (pid 1 keeps them), its pid 1's pidfd (its end is heard on ctl_fd, which stays)
 * and its cgroups'. Only after READY, not in process mode, and where the daemon may take fds
 * of pid 1 back (as root): 0 when parked, -EPERM (-EBUSY) when it cannot be (yet). */
int box_park(BoxShared *s, Box *b);
/* Takes them again: 0, or -errno when pid 1 is gone (what could not be had stays -1: the
 * sandbox is dying). A no-op unless parked. */
int box_unpark(Box *b);
/* The sandbox's snapshot store, made now when the daemon makes it (Box.snap_lazy) and it has
 * none yet: its fd (b's) or -errno (-ENOENT: none to be had, parked or not ready). */
int box_snap_store(Box *b);
/* A parked box killed without taking its fds again: pid 1 by its pid (the daemon's child, not
 * reaped yet); the caller has its cgroup's kill written. It stays parked. */
void box_kill_parked(Box *b);
/* kill_cgroup: write its cgroup.kill here too (else the caller has it written). */
void box_kill(Box *b, bool kill_cgroup);
int box_try_finish(BoxShared *s, Box *b);
