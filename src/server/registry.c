/* SPDX-License-Identifier: MIT */
/* The sandbox registry: adding, finding under the ownership rules, destroying. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/util.h"
#include "server/audit.h"
#include "server/conn.h"
#include "server/registry.h"

int registry_check_room(const Registry *reg, RpcError *e) {
        if (reg->n_sandboxes >= SBX_MAX_SERVER_SANDBOXES)
                return rpc_fail(e, RPC_WORKER_UNAVAILABLE, "WORKER_UNAVAILABLE: Maximum of %u concurrent sandboxes reached",
                                SBX_MAX_SERVER_SANDBOXES);
        return 0;
}

int registry_add(Registry *reg, SbxSandbox *box, Conn *owner, uid_t uid, unsigned flags, const char *label,
                 SrvSandbox **ret) {
        SrvSandbox *sb = calloc(1, sizeof *sb);
        if (!sb)
                return -ENOMEM;
        sb->registry = reg;
        sb->sb = box;
        sb->persist = flags & REGISTRY_PERSIST;
        sb->owner = sb->persist ? NULL : owner;
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
        reg->n_sandboxes++;
        *ret = sb;
        return 0;
}

void registry_destroy(SrvSandbox *sb) {
        Registry *reg = sb->registry;
        if (sb->timer >= 0) {
                loop_del(sb->loop, &sb->timer_w);
                sb->timer = safe_close(sb->timer);
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
        log_info("sandbox %s expired (%s)", sbx_sandbox_id(sb->sb), why);
        if (sb->owner)
                conn_notify(sb->owner, "sandbox.expired",
                            json_pack("{s:s, s:s}", "sandboxId", sbx_sandbox_id(sb->sb), "reason", why));
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
        }
        if (expiry_due(sb, now, &due))
                due = now; /* idle for longer than the new idle time already: at once, from the loop */
        return timerfd_arm_ms(sb->timer, due == UINT64_MAX ? 0 : MAX(due - now, 1));
}

void registry_touch(SrvSandbox *sb) { sb->used_ms = now_ms(); }

void registry_destroy_owned(Registry *reg, const Conn *owner) {
        for (SrvSandbox *sb = reg->head, *next; sb; sb = next) {
                next = sb->next;
                if (sb->owner == owner) {
                        AUDIT(reg->audit, "sandbox.destroy", sb, owner, json_pack("{s:s}", "reason", "owner closed"));
                        registry_destroy(sb);
                }
        }
}

void registry_destroy_all(Registry *reg) {
        while (reg->head) {
                AUDIT(reg->audit, "sandbox.destroy", reg->head, NULL, json_pack("{s:s}", "reason", "shutdown"));
                registry_destroy(reg->head);
        }
}

bool registry_may_use(const SrvSandbox *sb, const Conn *c, uid_t uid) {
        return sb->owner == c || (sb->persist && (sb->uid == uid || uid == 0));
}

SrvSandbox *registry_find(Registry *reg, const Conn *c, uid_t uid, const char *id) {
        for (SrvSandbox *sb = reg->head; sb; sb = sb->next)
                if (strcmp(sbx_sandbox_id(sb->sb), id) == 0 && registry_may_use(sb, c, uid))
                        return sb;
        return NULL;
}

SrvSandbox *registry_find_id(Registry *reg, const char *id) {
        for (SrvSandbox *sb = reg->head; sb; sb = sb->next)
                if (strcmp(sbx_sandbox_id(sb->sb), id) == 0)
                        return sb;
        return NULL;
}

SrvSandbox *registry_root(Registry *reg, const Conn *c) {
        for (SrvSandbox *sb = reg->head; sb; sb = sb->next)
                if (sb->root && sb->owner == c)
                        return sb;
        return NULL;
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
