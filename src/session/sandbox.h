/* SPDX-License-Identifier: MIT */
/* Sandboxes as libsbx sees them (see sandbox.c): a Box (sandbox/box.h) with its options, its
 * sessions, its background log, and observers that hear when it becomes ready and when it is
 * freed. Owned by a context (context.c), which keeps them on lists; image.c reaches them
 * through the functions here and the public API, never their fields. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "base/loop.h"
#include "sandbox/box.h"
#include "sbx/sbx.h"
#include "session/core.h"
#include "session/corpse.h"

/* A list of sandboxes (newest first) with its length. reap_dead: a member whose pid 1 dies
 * is freed at once (the pool's members have no caller to tell), and then `reaped` (if set) is
 * called with the list, from the loop (the pool makes itself whole again). */
typedef struct SandboxList {
        SbxSandbox *head;
        unsigned n;
        bool reap_dead;
        void (*reaped)(struct SandboxList *l);
} SandboxList;

/* What every sandbox of a context shares; owned by the context. */
typedef struct SandboxHost {
        Loop *loop;
        BoxShared shared;
        bool shared_ready;
        struct Mover *mover; /* cgroup/mover.h: made with `shared` */
        /* fanotify groups of forks in layers (image.c) no sandbox uses now, marks flushed:
         * closing one waits for an SRCU grace period (ms), so the loop keeps them for the
         * next sandbox instead; closed with the context. */
        int changes_pool[8];
        unsigned n_changes_pool;
        bool process; /* SBX_MODE_PROCESS: shared is made (and stays) in process mode */
        bool spawn_inline; /* sbx_context_set_spawner(ctx, false): no spawner process */
        bool move_inline;  /* sbx_context_set_mover(ctx, false): no mover process */
        unsigned cpu_weight; /* sbx_context_set_sandboxes_cpu_weight(); 0: the kernel's default */
        int devnull;
        CorpseYard yard;
        /* sbx_context_set_env(): NAME=VALUE entries every new sandbox gets (NULL: none). */
        char **base_env;
        /* sbx_context_set_redaction(): the patterns, whether the key shapes are left out, and
         * those rules compiled (NULL: nothing to look for), which a sandbox without secrets
         * shares. */
        char **redact_patterns;
        bool redact_no_defaults;
        struct Redactor *redact;
        RoomTable rooms; /* room.h: the rooms above the core, told of every sandbox */
        /* fds: the daemon's soft RLIMIT_NOFILE (0: unknown), its sandboxes, and the fds held
         * for them beyond their idle cost (sandbox_fds_take()). */
        uint64_t nofile, held_fds;
        unsigned n_sandboxes;
        unsigned n_parked; /* of them, parked (sbx_sandbox_park()) */
        uint64_t parked_fds; /* what the parked ones keep, each its own count */
        SbxSandbox *lru_head, *lru_tail; /* parking's order (sandbox.c) */
        struct Egress *egress; /* net/egress.c: the allowlist proxies' resolver, made on first use */
        /* Every open upload of every sandbox (files/fileapi.c), so that a client's are found
         * without visiting every sandbox. */
        SbxUpload *uploads;
        /* Every process of every sandbox by id (process/process.c): chains in a power-of-two table
         * with at least as many buckets as processes, so that a process named by a client is
         * found without visiting every sandbox. */
        SbxProcess **procs_by_id;
        size_t proc_buckets, n_procs;
        struct OciStore *images; /* oci/oci.h: sbx_context_set_image_store(), or NULL */
        /* sbx_context_set_pod_network(), or NULL; pod_used has a bit per address of its range,
         * pod_next is where the next search for a free one starts (so that an address a freed
         * sandbox's dying veth may still hold is the last one handed out again). */
        struct PodNetConfig *podnet;
        uint8_t *pod_used;
        uint32_t pod_next;
        /* Sandboxes whose pid 1 the spawner has not answered for yet, in the order asked (it
         * answers in that order), and the watch on its answers (sandbox.c). An entry whose
         * sandbox was freed meanwhile stays, with no sandbox: its pid 1 is killed on arrival. */
        struct SpawnWait *spawn_head, *spawn_tail;
        Watch spawn_w;
} SandboxHost;

/* The context is going: forgets what still waits for the spawner (whose answers are then
 * taken by box_shared_done()). */
void sandbox_host_spawns_done(SandboxHost *host);

typedef struct SandboxObserver SandboxObserver;
typedef struct SandboxObserverOps {
        /* The sandbox's root is built (error 0) or its setup failed (-errno). Once, from the
         * loop; the observer stays registered. May be NULL. */
        void (*ready)(SandboxObserver *o, SbxSandbox *sb, int error);
        /* The sandbox is being freed; the observer has already been dropped from it. */
        void (*freeing)(SandboxObserver *o, SbxSandbox *sb);
} SandboxObserverOps;
struct SandboxObserver {
        SandboxObserver *next;
        const SandboxObserverOps *ops;
        bool told_ready;
};

/* Creates a sandbox on `list` and returns at once; pid 1 builds its root meanwhile (the
 * observers hear when). err says what failed. Returns 0 or -errno (-EINVAL bad options). */
int sandbox_new(SandboxHost *host, const SbxSandboxOptions *o, SandboxList *list, SbxSandbox **ret, char *err,
                size_t errlen);
/* The sandbox after sb on its list, or NULL. */
SbxSandbox *sandbox_list_next(const SbxSandbox *sb);
/* The image sb was made from (oci/oci.h), or NULL. */
struct OciImage *sandbox_image(const SbxSandbox *sb);
/* The host sb was made with. */
SandboxHost *sandbox_host(const SbxSandbox *sb);
/* Moves sb to another list of the same context. */
void sandbox_list_move(SbxSandbox *sb, SandboxList *to);
/* The member of a pool to hand out: the oldest whose default session has a worker waiting,
 * else the oldest that is ready, else the oldest still setting up; NULL if there is none
 * (a member whose setup failed is never one). */
SbxSandbox *sandbox_list_warmest(const SandboxList *l);
/* Whether sb was made with default options. */
bool sandbox_is_default(const SbxSandbox *sb);
/* sb's options, pointing into sb (valid while it lives). */
void sandbox_options(const SbxSandbox *sb, SbxSandboxOptions *ret);

void sandbox_observe(SbxSandbox *sb, SandboxObserver *o, const SandboxObserverOps *ops);
void sandbox_unobserve(SbxSandbox *sb, SandboxObserver *o);
/* The registered observer with these ops, or NULL. */
SandboxObserver *sandbox_observer_find(SbxSandbox *sb, const SandboxObserverOps *ops);
/* A room's state kept on sb: its observer with these ops, or when absent and `create`, a
 * zeroed object of `size` bytes whose SandboxObserver is at `offset`, made and registered
 * (the room frees it from ops->freeing). NULL when absent or out of memory. */
SandboxObserver *sandbox_observer_state(SbxSandbox *sb, const SandboxObserverOps *ops, size_t size, size_t offset,
                                        bool create);

/* 1 when the root was built, 0 while it is being built, -errno when setup failed (or pid 1
 * died first). A pid 1 that dies later leaves it 1: sandbox_dying() says so. */
int sandbox_setup_state(const SbxSandbox *sb);
const Box *sandbox_box(const SbxSandbox *sb);
/* Its snapshot store, made now if the daemon makes it and it has none (box_snap_store()):
 * its fd (the sandbox's) or -errno. */
int sandbox_snap_store(SbxSandbox *sb);
Loop *sandbox_loop(const SbxSandbox *sb);
uint64_t sandbox_timeout_ms(const SbxSandbox *sb);
/* The last caller run's place in the sandbox-wide order of requests. */
uint64_t sandbox_run_order(const SbxSandbox *sb);
/* Caller runs requested after `after` (a run order) wait; UINT64_MAX lets all go. */
void sandbox_hold_runs(SbxSandbox *sb, uint64_t after);
/* While busy, the files API refuses changes with -EBUSY. */
void sandbox_set_tree_busy(SbxSandbox *sb, bool busy);
/* Its writable directories are now on the filesystem `dev` (an overlay put on or taken off by
 * image.c): the files API changes only entries there. */
void sandbox_set_writable_dev(SbxSandbox *sb, dev_t dev);
bool sandbox_tree_busy(const SbxSandbox *sb);
/* Being freed, or its pid 1 is gone. */
bool sandbox_dying(const SbxSandbox *sb);
unsigned *sandbox_freeze_holds(SbxSandbox *sb);
/* Reserves n fds the daemon is about to hold for sb (a forwarded connection, a relay, an
 * upload). Returns 0, -EMFILE past the sandbox's share (SBX_MAX_SANDBOX_HELD_FDS) or -ENFILE
 * when the daemon would keep fewer free than every sandbox's idle cost and its reserve; the
 * caller then refuses what it was asked. sandbox_fds_give() returns them. */
int sandbox_fds_take(SbxSandbox *sb, unsigned n);
/* A room's long-lived user of the sandbox's fds (a file watch, a running process, exposed
 * ports), whose events come without a request: the sandbox is unparked and stays so until
 * every pin is gone. */
void sandbox_pin(SbxSandbox *sb);
/* Parks the sandboxes touched (sbx_sandbox_touch()) and unused for idle_ms, least recently
 * used first; one found in use is looked at again idle_ms later. Returns how many. */
unsigned sandbox_park_idle(SandboxHost *h, uint64_t idle_ms);
/* fds its limit has left beyond its sandboxes' idle costs and the reserve (INT64_MAX: unknown). */
int64_t sandbox_host_fds_spare(const SandboxHost *h);
/* Parks touched sandboxes other than keep, least recently used first and whatever their idle
 * time, until `want` fds are spare (sbx_sandbox_fds_spare()) or none is left to try. */
void sandbox_park_for(SandboxHost *h, const SbxSandbox *keep, int64_t want);
void sandbox_unpin(SbxSandbox *sb);
void sandbox_fds_give(SbxSandbox *sb, unsigned n);
/* As sandbox_fds_take(), for fds the daemon holds for sb as long as it lives, parked or not
 * (its expiry timer): counted against the daemon's limit, never keeping sb from being parked.
 * sandbox_fds_unkeep() returns them. */
int sandbox_fds_keep(SbxSandbox *sb, unsigned n);
void sandbox_fds_unkeep(SbxSandbox *sb, unsigned n);
