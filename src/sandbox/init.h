/* SPDX-License-Identifier: MIT */
/* The sandbox's pid 1: builds the root, reaps orphans, starts session shells on request.
 * It runs the daemon's code image (forked by clone3, never exec'd) but keeps only the fds
 * named here. When its control socket closes it exits, and the kernel kills every process
 * of the pid namespace with it. */
#pragma once
#include <linux/capability.h>
#include <linux/filter.h>
#include <setjmp.h>
#include <stdint.h>
#include "base/macro.h"
#include "sandbox/landlock.h"
#include "sandbox/mount.h"
#include "sandbox/plain.h"

/* fd numbers a session shell starts with: its end of the session socket, and the sealed
 * memfd of the bash builtin (session/wire.h speaks on the first). */
#define INIT_SESSION_FD 3
#define INIT_BUILTIN_FD 4
/* A shell started during setup (InitConfig.session_fd) also has this: the read end of a pipe
 * on which pid 1 writes one byte once the root is built and closes without one if it never
 * will be. The shell waits on it before it says anything (see init.c, prestart_session()). */
#define INIT_GO_FD 5
/* ... and, until it execs, this: its end of a socket on which pid 1 sends one byte once its id
 * maps are there (the shell needs them to take its user's ids), and which it closes without a
 * word if its setup failed. The shell sent pid 1 the network namespace it made on it first
 * (init.c, early_make_net()). */
#define INIT_EARLY_FD 6

/* Control messages on the SOCK_SEQPACKET socket between the daemon and init. */
enum {
        INIT_READY = 1, /* init -> daemon: root built (status 0) or failed (-errno, text) */
        INIT_SPAWN = 2, /* daemon -> init: start a session shell on the attached socket */
        INIT_WATCH = 3, /* daemon -> init: report when process `pid` (of the sandbox) ends */
        INIT_EXITED = 4, /* init -> daemon: watched process `pid` ended, `status` is its wait
                            status */
};

typedef struct InitMsg {
        uint32_t type;
        int32_t status;
        int32_t pid;
        /* READY: where pid 1 keeps the root, the snapshot store and the network namespace it
         * sent (its own fd numbers, -1 when not kept), for a daemon that gave its copies back
         * to take them again (pidfd_getfd(2); see box_park()). */
        int32_t keep_root, keep_snap, keep_net;
        char text[480];
} InitMsg;

/* How many watched pids init holds, and how many exits of unwatched orphans it remembers (a
 * process can end, and be reaped, before the daemon's WATCH for it arrives). */
#define INIT_MAX_WATCHED 256
#define INIT_RECENT_EXITS 256

typedef struct InitConfig {
        MountConfig mount;
        int ctl_fd;           /* control socket */
        int builtin_fd;       /* sealed memfd holding the bash builtin */
        int userns_sync_fd;   /* one byte comes on it once the id maps are written */
        /* cgroup.procs of the sandbox's v1 memory, pids and cpu cgroups, opened for writing
         * by the daemon (the kernel checks the opener's credentials), or -1: pid 1 joins
         * them itself, first thing, so that the daemon's loop never waits on the kernel's
         * cgroup lock for it (see cgroup/mover.h). */
        int v1_procs[3];
        bool ns_root;         /* uid 0 is mapped (root daemon): pid 1 takes it before setup */
        char **env;           /* environment of session shells */
        const char *workdir;  /* where session shells start, when it is a directory of the root
                                 (an image's WorkingDir); else /home/user */
        unsigned uid, gid;    /* identity commands run as */
        bool network;
        /* Cloned into its network namespace, one the spawner made ahead (spawner.c, NetSpare)
         * with loopback up: pid 1 makes none, and the shell started early joins none. */
        bool net_born;
        uint16_t proxy_port;  /* not 0: listen on 127.0.0.1:proxy_port, handed over with READY */
        const struct sock_fprog *seccomp; /* filter of pid 1 after setup, and so of everything
                                           * it starts; NULL for none */
        uint64_t rlimit_as;    /* fallback when no memory cgroup: per-process bytes, 0 none */
        uint64_t rlimit_nproc; /* fallback when no pids cgroup: processes, 0 none */
        const LandlockPolicy *policy; /* the exec policy pid 1 takes after setup, or NULL */
        /* Process mode (plain.h): no namespace, no private root; `mount` is not used. NULL in
         * namespaces mode. */
        const PlainConfig *plain;
        /* Process mode: the sandbox cgroup's cgroup.kill, which pid 1 writes when the daemon
         * goes (no pid namespace takes the sandbox's processes down with it); else -1. */
        int kill_fd;
        /* The shell's end of the default session's socket, whose shell pid 1 starts while it
         * builds the root instead of after (prestart_session()); -1 for none. Only for a
         * sandbox whose shells get the fixed default environment, the host's bash and no exec
         * policy: that shell starts before the host's tree is out of sight. */
        int session_fd;
        /* The spawner's mapping of request_len bytes these strings point into (NULL when
         * none): a shell that goes on as the spawner's bash unmaps it, its environment copied
         * out first. */
        void *request;
        size_t request_len;
} InitConfig;

_noreturn_ void init_main(const InitConfig *c);

/* bash --norc --noprofile -c CMD, which is also how the spawner's bash is exec'd. */
#define INIT_ZYGOTE_ARGC 5
/* Files a spawner's bash may map besides sbx-spawner.so; more and its shells exec. */
#define INIT_ZYGOTE_FILES 8

/* The spawner's program as a library preloaded into the host's bash and stopped before bash's
 * main (sbx-spawner.so, src/cli/spawner_preload.c): every pid 1 is then a copy of a bash not
 * yet started, and a session shell of a sandbox on the host's root, forked by pid 1, goes on
 * into that bash's main instead of exec'ing one (exec_shell() in init.c): a fork and bash's own
 * startup, without an exec and its dynamic linking (1.3 ms here, against 0.25). Set once by
 * the spawner (init_use_zygote()); the areas are those of the spawner's execve, which the
 * kernel shows as /proc/PID/cmdline and environ. */
typedef struct InitZygote {
        sigjmp_buf back; /* in the constructor, which then returns into bash's start */
        char **argv;     /* bash's argv: INIT_ZYGOTE_ARGC entries and a NULL */
        char *args, *args_end, *env, *env_end;
        /* The files mapped into it (bash, libc, libtinfo, the loader): a shell goes on as this
         * bash only while each path still names the same file, which an upgrade replaces. */
        size_t nfiles;
        struct {
                char path[256];
                dev_t dev;
                ino_t ino;
        } files[INIT_ZYGOTE_FILES];
} InitZygote;


void init_use_zygote(InitZygote *z);

/* Capabilities pid 1 keeps after setup: to give each session shell the sandbox user's ids
 * and to empty its bounding set. Nothing else: no mount, no chown, no kill, no ptrace. */
#define INIT_KEPT_CAPS ((1ULL << CAP_SETGID) | (1ULL << CAP_SETUID) | (1ULL << CAP_SETPCAP))

/* Drops every capability, sets the ids and no_new_privs (the seccomp filter is inherited
 * from pid 1). Returns 0 or -errno. Used between fork and exec: no allocation. */
int identity_drop(unsigned uid, unsigned gid);

/* Brings up "lo" of the calling process's network namespace. Returns 0 or -errno. */
int init_loopback_up(void);

/* Builds the seccomp filter applied to every command (see seccomp.c). The program is
 * malloc'd and owned by the caller. Returns 0 or -errno. */
int seccomp_build(struct sock_fprog *ret);
