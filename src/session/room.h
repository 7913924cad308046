/* SPDX-License-Identifier: MIT */
/* The rooms above the session core that must hear of every sandbox's life, not only of those a
 * caller asked them about: the egress proxy (net/) checks and attaches each allowlist sandbox,
 * the process room (process/) takes what runs leave running and hears pid 1's reports of ended
 * processes. A context holds a table of them, filled by the library's constructor (lib/),
 * and sandbox.c and run.c call the hooks at each step, in the order the rooms were added: the
 * core never names a room. Every hook may be NULL. Rooms that only need to hear of sandboxes
 * they were asked about (files, watches, images, ports) use SandboxObserver instead. */
#pragma once
#include <stddef.h>
#include <sys/types.h>
#include "base/limits.h"
#include "sandbox/box.h"
#include "sbx/sbx.h"

struct SandboxCore;
struct SandboxHost;

typedef struct Room {
        const char *name;
        /* A sandbox's options, before anything is made. Returns 0, or -EINVAL with err. */
        int (*check)(const SbxSandboxOptions *o, char *err, size_t errlen);
        /* Before pid 1 is cloned: what the room puts into its root (bc->trust_pem). What it
         * made is kept in *state until attach() or abandon() takes it. Returns 0 or -errno
         * with err. */
        int (*prepare)(SbxSandbox *sb, BoxConfig *bc, void **state, char *err, size_t errlen);
        /* pid 1 is made: the room attaches to sb with what prepare() made (it owns state from
         * here, failing or not). Returns 0 or -errno; sb is then freed unready. */
        int (*attach)(SbxSandbox *sb, void *state);
        /* The sandbox was not made after all: what prepare() made goes. */
        void (*abandon)(void *state);
        /* pid 1 reported that a process it watches ended (wait status ws). */
        void (*exited)(struct SandboxCore *core, pid_t pid, int ws);
        /* pid 1 is gone, and every process of the sandbox with it. */
        void (*lost)(struct SandboxCore *core);
        /* sb is being freed: its observers were told and its sessions are gone. */
        void (*freeing)(struct SandboxCore *core);
        /* The context is being freed, every sandbox gone. */
        void (*host_free)(struct SandboxHost *host);
        /* What an ended run left running (its cgroup `cg` still has processes), with the run's
         * output pipes: 0 when the room took all three fds, else -errno and they stay the
         * run's (the background log takes them). */
        int (*adopt_leftover)(struct SandboxCore *core, const char *command, size_t command_len, int out_fd,
                              int err_fd, int cg, const char *cg_name);
        /* Kills what earlier runs left running that the room holds; returns how many. */
        unsigned (*kill_leftovers)(struct SandboxCore *core);
        /* Kills every process the room holds of the sandbox (a restore replaces its tree);
         * returns how many. */
        unsigned (*kill_all)(struct SandboxCore *core);
        /* How many of what earlier runs left running are still alive. */
        unsigned (*count_alive)(const struct SandboxCore *core);
} Room;

/* A context's rooms, in the order added (context_add_room()). */
typedef struct RoomTable {
        const Room *v[SBX_MAX_ROOMS];
        unsigned n;
} RoomTable;
