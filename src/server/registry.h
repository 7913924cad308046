/* SPDX-License-Identifier: MIT */
/* The server's sandboxes, who may use each, and the caps on how many there are.
 *
 * A sandbox belongs to the connection that made it (its owner) and is destroyed when that
 * connection closes (registry_destroy_owned). A persistent one (socket server only) has no
 * owner: the server keeps it until sandbox.destroy or shutdown, and any connection of the
 * same uid, or root, may use it. Each connection has at most one root sandbox, the one made
 * by `create` and used when a request names no sandboxId. At most max_sandboxes exist at once
 * (registry_set_max: the server's --max-sandboxes, or derived from the machine), forks among
 * them, and at most SBX_MAX_FORKS forks exist or are being made.
 *
 * Nothing a request or a closing connection does scans all sandboxes: a sandbox is found by
 * id through a hash table, and a connection's sandboxes (its root among them) through an
 * owner record keyed by the connection. Only answers about all of them (sandbox.list, health)
 * and shutdown walk the whole list. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include "base/limits.h"
#include "base/loop.h"
#include "rpc/jsonrpc.h"
#include "sbx/sbx.h"
#include "server/history.h"

typedef struct Conn Conn;
typedef struct Registry Registry;
typedef struct RegOwner RegOwner;

/* A sandbox id (32 hex digits) and its NUL. */
#define REGISTRY_ID_MAX 33

typedef struct SrvSandbox {
        struct SrvSandbox *next, *prev;         /* every sandbox */
        struct SrvSandbox *id_next;             /* its bucket of the id table */
        struct SrvSandbox *own_next, *own_prev; /* its owner's sandboxes */
        RegOwner *own;                          /* NULL when persistent */
        Registry *registry;
        SbxSandbox *sb;
        char id[REGISTRY_ID_MAX]; /* sbx_sandbox_id(sb), which never changes: what by_id hashes */
        Conn *owner;         /* NULL when persistent; told when the sandbox expires */
        uid_t uid;           /* who made it */
        bool persist, root;
        bool is_fork;        /* counts against SBX_MAX_FORKS */
        char fork_of[REGISTRY_ID_MAX]; /* the sandbox it was forked from, "" when none */
        char *label;
        json_t *metadata;    /* {key: string}, NULL when none was given */
        json_t *contexts;    /* code contexts (m_code.c): {id: {language, cwd, env}}, NULL when none */
        uint64_t created_ms; /* wall clock */
        History *history;
        /* Expiry (lifetimeMs, idleTimeoutMs, sandbox.setTimeout), monotonic ms, 0 for none; one
         * timerfd armed for the nearer, created on first use. */
        uint64_t expires_ms, idle_ms, used_ms;
        bool export_on_expiry; /* onExpiry "export": the archive is written before the destroy */
        bool expiring;         /* that export is under way: the timer does not fire again */
        int timer;
        bool timer_counted; /* its fd counted with the daemon's held ones (sandbox_fds_keep) */
        Watch timer_w;
        Loop *loop;
        /* Its network.denied events (audit_event_limited): a token bucket in thousandths of an
         * event, refilled since denied_at_ms, and the events left out since the last written. */
        uint64_t denied_tokens, denied_at_ms, denied_suppressed;
} SrvSandbox;

/* Invariants: every sandbox is on the list from head and in by_id (a power-of-two table of
 * chains, at least as many buckets as sandboxes once one exists); one with an owner is on
 * that owner's list, and an owner record exists exactly while its list is not empty. */
struct Registry {
        SrvSandbox *head;
        struct Audit *audit; /* the server's audit log (NULL when off): told of destroys it did not ask for */
        /* An expired sandbox made with onExpiry "export": takes it over (exports it, then
         * destroys it) and returns true, or false to have it destroyed now. */
        bool (*expire_export)(void *data, SrvSandbox *sb, const char *why);
        void *expire_data;
        unsigned n_sandboxes;
        unsigned n_forks;       /* forks alive or being made */
        unsigned max_sandboxes; /* the cap (registry_set_max; 0 before: SBX_MAX_SERVER_SANDBOXES) */
        const char *max_from;   /* what set it: a RegistryBound name */
        SrvSandbox **by_id;
        size_t id_buckets;
        RegOwner **by_owner;
        size_t owner_buckets, n_owners;
        /* Parking (session/internal.h): sandboxes unused for park_after_ms are parked by a
         * sweep on park_timer; 0: never. */
        uint64_t park_after_ms;
        int park_timer;
        Watch park_w;
        Loop *loop;
        struct SbxContext *ctx;
};

/* What one idle sandbox with a warm session costs, measured at start or named by the flag,
 * and what each resource allows (registry_derive_max). */
typedef struct RegistryBound {
        unsigned max;           /* the fewest of the rest */
        const char *from;       /* which one: "memory", "pids", "fds", "host ids" */
        unsigned by_memory, by_pids, by_fds, by_host_ids;
} RegistryBound;

enum {
        REGISTRY_PERSIST = 1 << 0, /* outlives its connection */
        REGISTRY_ROOT = 1 << 1,    /* the connection's root sandbox */
        REGISTRY_FORK = 1 << 2,    /* made by a fork that registry_fork_begin counted */
};

/* How many sandboxes this machine holds, from what is free at start: MemAvailable (and the
 * daemon's memory cgroup limit), pid_max and the pids cgroup limit, less what is in use, and
 * the daemon's RLIMIT_NOFILE once raised as far as the count needs (the soft limit to the hard
 * one, and as root the hard one up to fs.nr_open), each divided by one sandbox's share of it
 * (SBX_SANDBOX_COST_*, limits.h); as root also the blocks of host ids. With `parking`, fds
 * count parked sandboxes (SBX_SANDBOX_PARKED_FDS) with room for SBX_PARK_HEADROOM in use.
 * Never 0. */
void registry_derive_max(bool parking, RegistryBound *ret);
/* Sets the cap: n, or for 0 what registry_derive_max finds. The daemon's fd limit is raised
 * to fit n sandboxes where it can be. Returns the cap. */
unsigned registry_set_max(Registry *reg, unsigned n);
/* Fails with -32001 WORKER_UNAVAILABLE when no sandbox may be added. Returns 0 or -1. Parks
 * idle sandboxes first when fds are short (SBX_PARK_HEADROOM). */
int registry_check_room(Registry *reg, RpcError *e);
/* Parks sandboxes unused for after_ms (0: none is ever parked), from a sweep on loop. Returns
 * 0 or -errno. */
int registry_set_parking(Registry *reg, Loop *loop, struct SbxContext *ctx, uint64_t after_ms);
/* Stops the sweep (the server's end). */
void registry_stop_parking(Registry *reg);
/* Takes box into the registry, owned by owner (none with REGISTRY_PERSIST), usable by uid;
 * label may be NULL. Returns 0, or -ENOMEM with box still the caller's. */
int registry_add(Registry *reg, SbxSandbox *box, Conn *owner, uid_t uid, unsigned flags, const char *label,
                 SrvSandbox **ret);
/* registry_add under the id given (at most REGISTRY_ID_MAX - 1 bytes, unique) rather than
 * box's: box may be NULL, for the unit tests, which make no sandbox. */
int registry_add_id(Registry *reg, SbxSandbox *box, const char *id, Conn *owner, uid_t uid, unsigned flags,
                    const char *label, SrvSandbox **ret);
/* Frees the sandbox (killing its processes) and its history. */
void registry_destroy(SrvSandbox *sb);
void registry_destroy_owned(Registry *reg, const Conn *owner);
void registry_destroy_all(Registry *reg);

/* sb expires lifetime_ms from now and after idle_ms without a request naming it (0: never,
 * for either): it is destroyed and its owner told with a `sandbox.expired` notification
 * {sandboxId, reason: "lifetime" or "idle"}. Returns 0 or -errno. */
int registry_set_expiry(SrvSandbox *sb, Loop *loop, uint64_t lifetime_ms, uint64_t idle_ms);
/* A request named sb: its idle time starts again. */
void registry_touch(SrvSandbox *sb);
/* Unparks it, making room first when fds are short: 0, or -errno (out of fds, it stays
 * parked). */
int registry_wake(SrvSandbox *sb);

/* Whether connection c, of user uid, may use sb. */
bool registry_may_use(const SrvSandbox *sb, const Conn *c, uid_t uid);
/* The sandbox with this id that c may use, or NULL. */
SrvSandbox *registry_find(Registry *reg, const Conn *c, uid_t uid, const char *id);
/* The sandbox with that id whoever may use it, or NULL (the server's own bookkeeping). */
SrvSandbox *registry_find_id(Registry *reg, const char *id);
/* c's root sandbox, or NULL. */
SrvSandbox *registry_root(Registry *reg, const Conn *c);
/* The registry's sandbox holding box, or NULL. */
SrvSandbox *registry_by_box(Registry *reg, const SbxSandbox *box);
/* Iterates: the first sandbox for prev NULL, NULL after the last. */
SrvSandbox *registry_next(Registry *reg, SrvSandbox *prev);
unsigned registry_count(const Registry *reg);

/* Counts a fork about to start. Fails with -32602 at SBX_MAX_FORKS forks, or as
 * registry_check_room. Returns 0 or -1. */
int registry_fork_begin(Registry *reg, RpcError *e);
/* A counted fork failed or was dropped before registry_add. */
void registry_fork_abort(Registry *reg);
