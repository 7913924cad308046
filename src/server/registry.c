/* SPDX-License-Identifier: MIT */
/* The sandbox registry: adding, finding under the ownership rules, destroying, and the cap
 * on how many there are. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/util.h"
#include "server/audit.h"
#include "server/conn.h"
#include "server/registry.h"
#include "session/internal.h"
#include "session/sandbox.h"

/* A connection's sandboxes; exists while it owns at least one. */
struct RegOwner {
        RegOwner *hnext; /* its bucket of by_owner */
        const Conn *conn;
        SrvSandbox *root; /* its root sandbox, or NULL */
        SrvSandbox *head; /* through own_next */
};

/* ---------------------------------------------------------------- the tables */

/* Ids are random hex: FNV-1a spreads them, and any other string, well enough. */
static size_t id_hash(const char *id) {
        uint64_t h = 1469598103934665603ULL;
        for (; *id; id++)
                h = (h ^ (unsigned char)*id) * 1099511628211ULL;
        return (size_t)(h ^ (h >> 32));
}

static size_t ptr_hash(const void *p) {
        uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ULL;
        return (size_t)(h >> 29);
}

#define TABLE_MIN_BUCKETS 64U

/* Doubles by_id when it holds as many sandboxes as buckets. Returns 0 or -ENOMEM. */
static int id_table_grow(Registry *reg) {
        if (reg->by_id && reg->n_sandboxes < reg->id_buckets)
                return 0;
        size_t nb = reg->by_id ? reg->id_buckets * 2 : TABLE_MIN_BUCKETS;
        SrvSandbox **t = calloc(nb, sizeof *t);
        if (!t)
                return reg->by_id ? 0 : -ENOMEM; /* a full table still works, only slower */
        for (size_t i = 0; i < reg->id_buckets; i++)
                for (SrvSandbox *sb = reg->by_id[i], *next; sb; sb = next) {
                        next = sb->id_next;
                        size_t k = id_hash(sb->id) & (nb - 1);
                        sb->id_next = t[k];
                        t[k] = sb;
                }
        free(reg->by_id);
        reg->by_id = t;
        reg->id_buckets = nb;
        return 0;
}

static SrvSandbox **id_slot(Registry *reg, const char *id) {
        return &reg->by_id[id_hash(id) & (reg->id_buckets - 1)];
}

static SrvSandbox *id_lookup(Registry *reg, const char *id) {
        if (!reg->by_id)
                return NULL;
        for (SrvSandbox *sb = *id_slot(reg, id); sb; sb = sb->id_next)
                if (strcmp(sb->id, id) == 0)
                        return sb;
        return NULL;
}

static void id_unlink(Registry *reg, SrvSandbox *sb) {
        for (SrvSandbox **pp = id_slot(reg, sb->id); *pp; pp = &(*pp)->id_next)
                if (*pp == sb) {
                        *pp = sb->id_next;
                        return;
                }
}

static RegOwner **owner_slot(Registry *reg, const Conn *c) {
        return &reg->by_owner[ptr_hash(c) & (reg->owner_buckets - 1)];
}

static RegOwner *owner_find(Registry *reg, const Conn *c) {
        if (!reg->by_owner)
                return NULL;
        for (RegOwner *o = *owner_slot(reg, c); o; o = o->hnext)
                if (o->conn == c)
                        return o;
        return NULL;
}

static void owner_table_grow(Registry *reg) {
        if (reg->by_owner && reg->n_owners < reg->owner_buckets)
                return;
        size_t nb = reg->by_owner ? reg->owner_buckets * 2 : TABLE_MIN_BUCKETS;
        RegOwner **t = calloc(nb, sizeof *t);
        if (!t)
                return;
        for (size_t i = 0; i < reg->owner_buckets; i++)
                for (RegOwner *o = reg->by_owner[i], *next; o; o = next) {
                        next = o->hnext;
                        size_t k = ptr_hash(o->conn) & (nb - 1);
                        o->hnext = t[k];
                        t[k] = o;
                }
        free(reg->by_owner);
        reg->by_owner = t;
        reg->owner_buckets = nb;
}

/* c's owner record, made if it has none. NULL when out of memory. */
static RegOwner *owner_get(Registry *reg, const Conn *c) {
        RegOwner *o = owner_find(reg, c);
        if (o)
                return o;
        owner_table_grow(reg);
        if (!reg->by_owner || !(o = calloc(1, sizeof *o)))
                return NULL;
        o->conn = c;
        RegOwner **slot = owner_slot(reg, c);
        o->hnext = *slot;
        *slot = o;
        reg->n_owners++;
        return o;
}

static void owner_drop(Registry *reg, RegOwner *o) {
        for (RegOwner **pp = owner_slot(reg, o->conn); *pp; pp = &(*pp)->hnext)
                if (*pp == o) {
                        *pp = o->hnext;
                        break;
                }
        reg->n_owners--;
        free(o);
}

/* ---------------------------------------------------------------- the cap */

/* A number from a one-line file ("max" and unreadable: UINT64_MAX). */
static uint64_t read_u64_file(const char *path) {
        char buf[64];
        FILE *f = fopen(path, "re");
        if (!f)
                return UINT64_MAX;
        uint64_t v = UINT64_MAX;
        if (fgets(buf, sizeof buf, f)) {
                char *end;
                unsigned long long x = strtoull(buf, &end, 10);
                if (end != buf && (*end == '\n' || !*end))
                        v = x;
        }
        fclose(f);
        return v;
}

/* A field of /proc/meminfo in bytes, 0 when missing. */
static uint64_t meminfo(const char *key) {
        char line[256];
        size_t n = strlen(key);
        uint64_t v = 0;
        FILE *f = fopen("/proc/meminfo", "re");
        if (!f)
                return 0;
        while (fgets(line, sizeof line, f))
                if (strncmp(line, key, n) == 0 && line[n] == ':') {
                        v = strtoull(line + n + 1, NULL, 10) * 1024;
                        break;
                }
        fclose(f);
        return v;
}

/* The least of file `name` (limit) less file `used` over the daemon's cgroup and its
 * ancestors, in the v2 hierarchy and in the v1 hierarchy of `controller`: what the sandboxes,
 * whose cgroups are made below the daemon's, may still take. UINT64_MAX when nothing limits. */
static uint64_t cgroup_room(const char *controller, const char *name, const char *v1_name, const char *used,
                            const char *v1_used) {
        char line[1024];
        uint64_t room = UINT64_MAX;
        FILE *f = fopen("/proc/self/cgroup", "re");
        if (!f)
                return room;
        while (fgets(line, sizeof line, f)) {
                line[strcspn(line, "\n")] = 0;
                char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
                if (!c2)
                        continue;
                *c2 = 0;
                const char *ctrls = c1 + 1, *path = c2 + 1;
                bool v2 = line[0] == '0' && !*ctrls;
                char base[128];
                if (v2)
                        snprintf(base, sizeof base, "%s",
                                 access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0 ? "/sys/fs/cgroup"
                                                                                       : "/sys/fs/cgroup/unified");
                else if (strstr(ctrls, controller))
                        snprintf(base, sizeof base, "/sys/fs/cgroup/%s", ctrls);
                else
                        continue;
                char dir[2048];
                snprintf(dir, sizeof dir, "%s%s", base, path);
                /* From the daemon's own cgroup up to the hierarchy's root. */
                for (;;) {
                        char p[2200];
                        snprintf(p, sizeof p, "%s/%s", dir, v2 ? name : v1_name);
                        uint64_t lim = read_u64_file(p);
                        if (lim != UINT64_MAX) {
                                snprintf(p, sizeof p, "%s/%s", dir, v2 ? used : v1_used);
                                uint64_t u = read_u64_file(p);
                                u = u == UINT64_MAX ? 0 : u;
                                room = MIN(room, lim > u ? lim - u : 0);
                        }
                        char *slash = strrchr(dir, '/');
                        if (!slash || (size_t)(slash - dir) <= strlen(base))
                                break;
                        *slash = 0;
                }
        }
        fclose(f);
        return room;
}

/* Threads in use on the whole host: the 4th field of /proc/loadavg is running/total. */
static uint64_t threads_in_use(void) {
        unsigned long long running, total = 0;
        FILE *f = fopen("/proc/loadavg", "re");
        if (f) {
                if (fscanf(f, "%*s %*s %*s %llu/%llu", &running, &total) != 2)
                        total = 0;
                fclose(f);
        }
        return total;
}

/* Raises RLIMIT_NOFILE towards want: the soft limit up to the hard one, and with
 * CAP_SYS_RESOURCE (root) the hard one up to fs.nr_open. Returns the soft limit then. */
static uint64_t fds_raise(uint64_t want) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
                return 1024;
        if (rl.rlim_cur >= want)
                return rl.rlim_cur;
        if (rl.rlim_max < want) {
                uint64_t nr_open = read_u64_file("/proc/sys/fs/nr_open");
                struct rlimit up = { MIN(want, nr_open), MIN(want, nr_open) };
                if (nr_open != UINT64_MAX && up.rlim_max > rl.rlim_max && setrlimit(RLIMIT_NOFILE, &up) == 0)
                        return up.rlim_cur;
        }
        struct rlimit soft = { MIN((uint64_t)rl.rlim_max, want), rl.rlim_max };
        if (soft.rlim_cur > rl.rlim_cur && setrlimit(RLIMIT_NOFILE, &soft) == 0)
                return soft.rlim_cur;
        return rl.rlim_cur;
}

/* Parking takes pid 1's fds back with pidfd_getfd(2), which needs CAP_SYS_PTRACE over it:
 * root's, in the initial user namespace. */
static bool parking_possible(void) {
        if (geteuid() != 0)
                return false;
        char text[4096];
        ssize_t n = read_file_at(AT_FDCWD, "/proc/self/status", text, sizeof text);
        const char *p = n > 0 ? strstr(text, "\nCapEff:") : NULL;
        unsigned long long caps;
        return p && sscanf(p + 8, "%llx", &caps) == 1 && (caps & (1ULL << 19)); /* CAP_SYS_PTRACE */
}

static unsigned clamp_count(uint64_t v) { return (unsigned)MIN(v, (uint64_t)SBX_MAX_SERVER_SANDBOXES); }

void registry_derive_max(bool parking, RegistryBound *ret) {
        RegistryBound b = { 0 };
        uint64_t mem = meminfo("MemAvailable");
        mem = MIN(mem ? mem : UINT64_MAX,
                  cgroup_room("memory", "memory.max", "memory.limit_in_bytes", "memory.current", "memory.usage_in_bytes"));
        b.by_memory = clamp_count(mem == UINT64_MAX ? UINT64_MAX
                                                    : mem / 100 * SBX_SANDBOX_MEMORY_PERCENT / SBX_SANDBOX_COST_MEMORY_BYTES);
        uint64_t pid_max = read_u64_file("/proc/sys/kernel/pid_max"), used = threads_in_use();
        uint64_t pids = pid_max == UINT64_MAX ? UINT64_MAX : pid_max > used ? pid_max - used : 0;
        pids = MIN(pids, read_u64_file("/proc/sys/kernel/threads-max"));
        pids = MIN(pids, cgroup_room("pids", "pids.max", "pids.max", "pids.current", "pids.current"));
        b.by_pids = clamp_count(pids == UINT64_MAX ? UINT64_MAX
                                : pids > SBX_HOST_RESERVE_PIDS ? (pids - SBX_HOST_RESERVE_PIDS) / SBX_SANDBOX_COST_PIDS
                                                               : 0);
        b.by_host_ids = geteuid() == 0 ? SBX_HOST_UID_SLOTS : SBX_MAX_SERVER_SANDBOXES;
        unsigned want = MIN(MIN(b.by_memory, b.by_pids), b.by_host_ids);
        uint64_t fds = fds_raise((uint64_t)want * SBX_SANDBOX_COST_FDS + SBX_DAEMON_RESERVE_FDS);
        b.by_fds = clamp_count(fds > SBX_DAEMON_RESERVE_FDS ? (fds - SBX_DAEMON_RESERVE_FDS) / SBX_SANDBOX_COST_FDS : 0);
        /* Parked, an idle sandbox costs SBX_SANDBOX_PARKED_FDS, with room kept for
         * SBX_PARK_HEADROOM of them in use at once. */
        uint64_t room = (uint64_t)SBX_DAEMON_RESERVE_FDS + (uint64_t)SBX_PARK_HEADROOM * SBX_SANDBOX_COST_FDS;
        if (parking && fds > room)
                b.by_fds = MAX(b.by_fds, clamp_count((fds - room) / SBX_SANDBOX_PARKED_FDS));
        b.max = b.by_memory, b.from = "memory";
        if (b.by_pids < b.max)
                b.max = b.by_pids, b.from = "pids";
        if (b.by_fds < b.max)
                b.max = b.by_fds, b.from = "fds";
        if (b.by_host_ids < b.max)
                b.max = b.by_host_ids, b.from = "host ids";
        /* A machine too small for one more sandbox by these shares may still run one. */
        b.max = MAX(b.max, 1U);
        *ret = b;
}

unsigned registry_set_max(Registry *reg, unsigned n) {
        if (n == 0) {
                RegistryBound b;
                registry_derive_max(reg->park_after_ms && parking_possible(), &b);
                reg->max_sandboxes = b.max;
                reg->max_from = b.from;
                log_debug("at most %u sandboxes (memory allows %u, pids %u, fds %u, host ids %u)", b.max, b.by_memory,
                          b.by_pids, b.by_fds, b.by_host_ids);
        } else {
                reg->max_sandboxes = MIN(n, SBX_MAX_SERVER_SANDBOXES);
                reg->max_from = "--max-sandboxes";
                RegistryBound b;
                registry_derive_max(reg->park_after_ms && parking_possible(), &b);
                (void)fds_raise((uint64_t)reg->max_sandboxes * SBX_SANDBOX_COST_FDS + SBX_DAEMON_RESERVE_FDS);
                /* The operator's word goes, but a cap the machine cannot hold fails later and
                 * less clearly (a create out of fds or pids): say so now. */
                if (reg->max_sandboxes > b.max)
                        log_warn("--max-sandboxes %u is above what this machine's %s allow (%u): creates past that "
                                 "may fail",
                                 reg->max_sandboxes, b.from, b.max);
        }
        return reg->max_sandboxes;
}

static unsigned max_of(const Registry *reg) { return reg->max_sandboxes ? reg->max_sandboxes : SBX_MAX_SERVER_SANDBOXES; }

/* ---------------------------------------------------------------- parking */

static int64_t headroom(void) { return (int64_t)SBX_PARK_HEADROOM * SBX_SANDBOX_COST_FDS; }

int registry_wake(SrvSandbox *sb) {
        if (!sb->sb || !sbx_sandbox_parked(sb->sb))
                return 0;
        Registry *reg = sb->registry;
        if (reg->park_after_ms && reg->ctx && sbx_sandbox_fds_spare(sb->sb) < headroom())
                sbx_context_park_for(reg->ctx, sb->sb, headroom());
        return sbx_sandbox_unpark(sb->sb);
}

static void park_event(Watch *w, uint32_t events) {
        Registry *reg = w->data;
        uint64_t ticks;
        (void)!read(reg->park_timer, &ticks, sizeof ticks);
        (void)sbx_context_park_idle(reg->ctx, reg->park_after_ms);
}

int registry_set_parking(Registry *reg, Loop *loop, SbxContext *ctx, uint64_t after_ms) {
        registry_stop_parking(reg);
        reg->park_after_ms = 0;
        if (!after_ms)
                return 0;
        int fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (fd < 0)
                return negerrno();
        uint64_t every = MAX(MIN(after_ms / 2, (uint64_t)SBX_PARK_SWEEP_MS), 10);
        struct itimerspec its = { .it_interval = { (time_t)(every / 1000), (long)(every % 1000) * 1000000L } };
        its.it_value = its.it_interval;
        int r = timerfd_settime(fd, 0, &its, NULL) < 0 ? negerrno() : loop_add(loop, &reg->park_w, fd, EPOLLIN, park_event, reg);
        if (r < 0) {
                close(fd);
                return r;
        }
        reg->park_timer = fd;
        reg->loop = loop;
        reg->ctx = ctx;
        reg->park_after_ms = after_ms;
        return 0;
}

void registry_stop_parking(Registry *reg) {
        if (reg->park_timer > 0) {
                loop_del(reg->loop, &reg->park_w);
                reg->park_timer = safe_close(reg->park_timer);
        }
        reg->park_timer = 0;
}

int registry_check_room(Registry *reg, RpcError *e) {
        if (reg->park_after_ms && reg->ctx && sbx_context_fds_spare(reg->ctx) < headroom())
                sbx_context_park_for(reg->ctx, NULL, headroom());
        /* Nothing more to park (the rest are being made or in use): a create now would fail
         * later, out of fds, and less clearly. */
        if (reg->ctx && sbx_context_fds_spare(reg->ctx) < 2 * (int64_t)SBX_SANDBOX_COST_FDS)
                return rpc_fail(e, RPC_WORKER_UNAVAILABLE,
                                "WORKER_UNAVAILABLE: the server's fds are all held by its %u sandboxes, those being made "
                                "or in use; retry when some are idle, or destroy some",
                                reg->n_sandboxes);
        if (reg->n_sandboxes >= max_of(reg))
                return rpc_fail(e, RPC_WORKER_UNAVAILABLE,
                                "WORKER_UNAVAILABLE: Maximum of %u concurrent sandboxes reached (the server's "
                                "--max-sandboxes); destroy one or retry later",
                                max_of(reg));
        return 0;
}

/* ---------------------------------------------------------------- sandboxes */

int registry_add(Registry *reg, SbxSandbox *box, Conn *owner, uid_t uid, unsigned flags, const char *label,
                 SrvSandbox **ret) {
        return registry_add_id(reg, box, sbx_sandbox_id(box), owner, uid, flags, label, ret);
}

int registry_add_id(Registry *reg, SbxSandbox *box, const char *id, Conn *owner, uid_t uid, unsigned flags,
                    const char *label, SrvSandbox **ret) {
        if (id_table_grow(reg) < 0)
                return -ENOMEM;
        _cleanup_free_ SrvSandbox *sb = calloc(1, sizeof *sb);
        if (!sb)
                return -ENOMEM;
        sb->persist = flags & REGISTRY_PERSIST;
        sb->owner = sb->persist ? NULL : owner;
        if (sb->owner) {
                sb->own = owner_get(reg, owner);
                if (!sb->own)
                        return -ENOMEM;
        }
        sb->registry = reg;
        sb->sb = box;
        snprintf(sb->id, sizeof sb->id, "%s", id);
        sb->uid = uid;
        sb->root = flags & REGISTRY_ROOT;
        sb->is_fork = flags & REGISTRY_FORK;
        sb->label = label ? strdup(label) : NULL;
        sb->created_ms = wall_ms();
        sb->used_ms = now_ms();
        sb->timer = -1;
        sb->next = reg->head;
        if (reg->head)
                reg->head->prev = sb;
        reg->head = sb;
        SrvSandbox **slot = id_slot(reg, sb->id);
        sb->id_next = *slot;
        *slot = sb;
        if (sb->own) {
                sb->own_next = sb->own->head;
                if (sb->own->head)
                        sb->own->head->own_prev = sb;
                sb->own->head = sb;
                if (sb->root)
                        sb->own->root = sb;
        }
        reg->n_sandboxes++;
        if (box)
                sbx_sandbox_touch(box);
        *ret = TAKE_PTR(sb);
        return 0;
}

void registry_destroy(SrvSandbox *sb) {
        audit_flush_suppressed(sb->registry->audit, sb);
        Registry *reg = sb->registry;
        if (sb->timer >= 0) {
                loop_del(sb->loop, &sb->timer_w);
                sb->timer = safe_close(sb->timer);
                if (sb->timer_counted)
                        sandbox_fds_unkeep(sb->sb, 1);
        }
        /* Out of the tables first: nothing that freeing the box calls back can find it any
         * more. */
        id_unlink(reg, sb);
        if (sb->own) {
                RegOwner *o = sb->own;
                if (sb->own_prev)
                        sb->own_prev->own_next = sb->own_next;
                else
                        o->head = sb->own_next;
                if (sb->own_next)
                        sb->own_next->own_prev = sb->own_prev;
                if (o->root == sb)
                        o->root = NULL;
                if (!o->head)
                        owner_drop(reg, o);
        }
        sbx_sandbox_free(sb->sb);
        sb->history = history_free(sb->history);
        if (sb->is_fork)
                reg->n_forks--;
        if (sb->prev)
                sb->prev->next = sb->next;
        else
                reg->head = sb->next;
        if (sb->next)
                sb->next->prev = sb->prev;
        reg->n_sandboxes--;
        free(sb->label);
        json_decref(sb->metadata);
        json_decref(sb->contexts);
        free(sb);
}

/* Why sb has expired by now, or NULL with *ret_due set to when it will next be due. */
static const char *expiry_due(const SrvSandbox *sb, uint64_t now, uint64_t *ret_due) {
        uint64_t due = UINT64_MAX;
        if (sb->expires_ms) {
                if (now >= sb->expires_ms)
                        return "lifetime";
                due = sb->expires_ms;
        }
        if (sb->idle_ms) {
                if (now >= sb->used_ms + sb->idle_ms)
                        return "idle";
                due = MIN(due, sb->used_ms + sb->idle_ms);
        }
        *ret_due = due;
        return NULL;
}

/* The timer fires at the deadline it was armed for; a request since then (registry_touch
 * changes no timer, so that it stays O(1)) only moves the idle deadline, found here. */
static void expiry_event(Watch *w, uint32_t events) {
        SrvSandbox *sb = w->data;
        uint64_t ticks, now = now_ms(), due = UINT64_MAX;
        (void)!read(sb->timer, &ticks, sizeof ticks);
        const char *why = expiry_due(sb, now, &due);
        if (!why) {
                if (due != UINT64_MAX)
                        (void)timerfd_arm_ms(sb->timer, MAX(due - now, 1));
                return;
        }
        if (sb->expiring)
                return;
        log_info("sandbox %s expired (%s)", sb->id, why);
        if (sb->export_on_expiry && sb->registry->expire_export &&
            sb->registry->expire_export(sb->registry->expire_data, sb, why)) {
                sb->expiring = true;
                return;
        }
        if (sb->owner)
                conn_notify(sb->owner, "sandbox.expired",
                            json_pack("{s:s, s:s}", "sandboxId", sb->id, "reason", why));
        audit_flush_suppressed(sb->registry->audit, sb);
        AUDIT(sb->registry->audit, "sandbox.destroy", sb, NULL, json_pack("{s:s}", "reason", why));
        registry_destroy(sb);
}

int registry_set_expiry(SrvSandbox *sb, Loop *loop, uint64_t lifetime_ms, uint64_t idle_ms) {
        uint64_t now = now_ms(), due = UINT64_MAX;
        sb->expires_ms = lifetime_ms ? now + lifetime_ms : 0;
        sb->idle_ms = idle_ms;
        if (sb->timer < 0 && !lifetime_ms && !idle_ms)
                return 0;
        if (sb->timer < 0) {
                int fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
                if (fd < 0)
                        return -errno;
                int r = loop_add(loop, &sb->timer_w, fd, EPOLLIN, expiry_event, sb);
                if (r < 0) {
                        close(fd);
                        return r;
                }
                sb->timer = fd;
                sb->loop = loop;
                /* Counted with what the daemon holds beyond the sandboxes' idle costs, parked
                 * or not: a sandbox with an expiry is parked as any other. */
                sb->timer_counted = sb->sb && sandbox_fds_keep(sb->sb, 1) == 0;
        }
        if (expiry_due(sb, now, &due))
                due = now; /* idle for longer than the new idle time already: at once, from the loop */
        return timerfd_arm_ms(sb->timer, due == UINT64_MAX ? 0 : MAX(due - now, 1));
}

void registry_touch(SrvSandbox *sb) {
        sb->used_ms = now_ms();
        if (sb->sb)
                sbx_sandbox_touch(sb->sb);
}

void registry_destroy_owned(Registry *reg, const Conn *owner) {
        /* Looked up again each time: the record goes with the owner's last sandbox. */
        for (RegOwner *o; (o = owner_find(reg, owner));) {
                audit_flush_suppressed(reg->audit, o->head);
                AUDIT(reg->audit, "sandbox.destroy", o->head, owner, json_pack("{s:s}", "reason", "owner closed"));
                registry_destroy(o->head);
        }
}

void registry_destroy_all(Registry *reg) {
        while (reg->head) {
                audit_flush_suppressed(reg->audit, reg->head);
                AUDIT(reg->audit, "sandbox.destroy", reg->head, NULL, json_pack("{s:s}", "reason", "shutdown"));
                registry_destroy(reg->head);
        }
        free(reg->by_id);
        reg->by_id = NULL;
        reg->id_buckets = 0;
        free(reg->by_owner);
        reg->by_owner = NULL;
        reg->owner_buckets = 0;
}

bool registry_may_use(const SrvSandbox *sb, const Conn *c, uid_t uid) {
        return sb->owner == c || (sb->persist && (sb->uid == uid || uid == 0)) || (c && conn_operator(c));
}

SrvSandbox *registry_find(Registry *reg, const Conn *c, uid_t uid, const char *id) {
        SrvSandbox *sb = id_lookup(reg, id);
        return sb && registry_may_use(sb, c, uid) ? sb : NULL;
}

SrvSandbox *registry_find_id(Registry *reg, const char *id) { return id_lookup(reg, id); }

SrvSandbox *registry_root(Registry *reg, const Conn *c) {
        RegOwner *o = owner_find(reg, c);
        return o ? o->root : NULL;
}

SrvSandbox *registry_by_box(Registry *reg, const SbxSandbox *box) {
        SrvSandbox *sb = id_lookup(reg, sbx_sandbox_id(box));
        return sb && sb->sb == box ? sb : NULL;
}

SrvSandbox *registry_next(Registry *reg, SrvSandbox *prev) { return prev ? prev->next : reg->head; }

unsigned registry_count(const Registry *reg) { return reg->n_sandboxes; }

int registry_fork_begin(Registry *reg, RpcError *e) {
        if (reg->n_forks >= SBX_MAX_FORKS)
                return rpc_fail(e, RPC_INVALID_PARAMS, "Maximum of %u concurrent forks reached", SBX_MAX_FORKS);
        if (registry_check_room(reg, e) < 0)
                return -1;
        reg->n_forks++;
        return 0;
}

void registry_fork_abort(Registry *reg) { reg->n_forks--; }
