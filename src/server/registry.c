/* SPDX-License-Identifier: MIT */
/* The sandbox registry: adding, finding under the ownership rules, destroying. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "base/limits.h"
#include "base/util.h"
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

void registry_destroy_owned(Registry *reg, const Conn *owner) {
        for (SrvSandbox *sb = reg->head, *next; sb; sb = next) {
                next = sb->next;
                if (sb->owner == owner)
                        registry_destroy(sb);
        }
}

void registry_destroy_all(Registry *reg) {
        while (reg->head)
                registry_destroy(reg->head);
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
