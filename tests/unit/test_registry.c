/* SPDX-License-Identifier: MIT */
/* The sandbox registry (src/server/registry.c) with no sandbox made (registry_add_id names
 * each entry): owners and roots, who may use what, lookups through tables that grow, the
 * caps on sandboxes and forks, metadata freed with its sandbox, and expiry told to the owner. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/timerfd.h>
#include "base/limits.h"
#include "base/util.h"
#include "server/registry.h"
#include "server_peer.h"
#include "tap.h"

/* Owners compared by the registry and asked only whether they are an operator's connection
 * (conn_operator): zeroed memory, aligned and larger than a Conn's first fields, says no. The
 * one told of an expiry is a real connection. */
static _Alignas(max_align_t) unsigned char conn_mem[200][512];
#define OWNER(i) ((Conn *)conn_mem[i])

static SrvSandbox *add(Registry *reg, const char *id, Conn *owner, uid_t uid, unsigned flags) {
        SrvSandbox *sb = NULL;
        return registry_add_id(reg, NULL, id, owner, uid, flags, NULL, &sb) < 0 ? NULL : sb;
}

static void test_owners(void) {
        Registry reg = { 0 };
        Conn *a = OWNER(0), *b = OWNER(1), *c = OWNER(2);
        CHECK(registry_root(&reg, a) == NULL && registry_find_id(&reg, "a1") == NULL && registry_count(&reg) == 0,
              "an empty registry finds nothing");
        SrvSandbox *a1 = NULL;
        CHECK(registry_add_id(&reg, NULL, "a1", a, 1000, REGISTRY_ROOT, "first", &a1) == 0 && a1 &&
                      strcmp(a1->label, "first") == 0 && a1->owner == a && a1->root,
              "a connection's root sandbox, labelled");
        SrvSandbox *a2 = add(&reg, "a2", a, 1000, 0);
        SrvSandbox *b1 = add(&reg, "b1", b, 1000, REGISTRY_ROOT);
        SrvSandbox *p1 = add(&reg, "p1", a, 1000, REGISTRY_PERSIST);
        CHECK(a2 && b1 && p1 && registry_count(&reg) == 4 && p1->owner == NULL && p1->persist,
              "four sandboxes; a persistent one has no owner");
        CHECK(registry_root(&reg, a) == a1 && registry_root(&reg, b) == b1 && registry_root(&reg, c) == NULL,
              "each connection's root is its own; a connection with none has none");
        CHECK(registry_find(&reg, a, 1000, "a1") == a1 && registry_find(&reg, a, 1000, "a2") == a2 &&
                      registry_find(&reg, b, 1000, "a1") == NULL && registry_find(&reg, a, 1000, "b1") == NULL,
              "a connection finds its own sandboxes, not another's, even of the same uid");
        CHECK(registry_find(&reg, c, 1000, "p1") == p1 && registry_find(&reg, c, 1001, "p1") == NULL &&
                      registry_find(&reg, c, 0, "p1") == p1,
              "a persistent sandbox is found by any connection of its uid, or root, and no other");
        CHECK(registry_find_id(&reg, "b1") == b1 && registry_find_id(&reg, "b2") == NULL &&
                      registry_find(&reg, a, 0, "b1") == NULL,
              "the server's own lookup finds any; root finds no other connection's own sandbox");
        unsigned n = 0;
        for (SrvSandbox *sb = registry_next(&reg, NULL); sb; sb = registry_next(&reg, sb))
                n++;
        CHECK(n == 4, "the iteration visits each once (%u)", n);

        a1->metadata = json_pack("{s:s}", "team", "blue");
        registry_destroy_owned(&reg, a);
        CHECK(registry_count(&reg) == 2 && registry_find_id(&reg, "a1") == NULL &&
                      registry_find_id(&reg, "a2") == NULL &&
                      registry_root(&reg, a) == NULL && reg.n_owners == 1,
              "a closing connection's sandboxes go, with its owner record (owners left: %zu)", reg.n_owners);
        CHECK(registry_find_id(&reg, "b1") == b1 && registry_find_id(&reg, "p1") == p1,
              "the others stay, the persistent one too");
        SrvSandbox *b2 = add(&reg, "b2", b, 1000, 0);
        registry_destroy(b1);
        CHECK(registry_root(&reg, b) == NULL && registry_find(&reg, b, 1000, "b2") == b2 && reg.n_owners == 1,
              "destroying a root leaves the connection without one, its other sandboxes its own");
        registry_destroy(b2);
        CHECK(reg.n_owners == 0 && registry_count(&reg) == 1, "its last sandbox gone, its owner record goes");
        registry_destroy_all(&reg);
        CHECK(registry_count(&reg) == 0 && reg.head == NULL && reg.by_id == NULL && reg.by_owner == NULL,
              "destroying all empties the registry and frees its tables");
}

static void test_many(void) {
        Registry reg = { 0 };
        char id[REGISTRY_ID_MAX];
        bool added = true;
        /* 300 sandboxes of 150 connections: both tables grow past their first size. */
        for (int i = 0; i < 300; i++) {
                snprintf(id, sizeof id, "%032x", i * 7919);
                added &= add(&reg, id, OWNER(i / 2), 1000, i % 2 == 0 ? REGISTRY_ROOT : 0) != NULL;
        }
        CHECK(added && registry_count(&reg) == 300 && reg.id_buckets >= 300 && reg.owner_buckets >= reg.n_owners &&
                      reg.n_owners == 150,
              "300 added: %zu id buckets, %zu owner buckets for %zu owners", reg.id_buckets, reg.owner_buckets,
              reg.n_owners);
        unsigned found = 0, roots = 0;
        for (int i = 0; i < 300; i++) {
                snprintf(id, sizeof id, "%032x", i * 7919);
                SrvSandbox *sb = registry_find(&reg, OWNER(i / 2), 1000, id);
                found += sb && strcmp(sb->id, id) == 0;
                roots += i % 2 == 0 && registry_root(&reg, OWNER(i / 2)) == sb;
        }
        CHECK(found == 300 && roots == 150, "after growing every one is found by its owner (%u) and roots kept (%u)",
              found, roots);
        for (int o = 0; o < 150; o += 2)
                registry_destroy_owned(&reg, OWNER(o));
        found = 0;
        unsigned gone = 0;
        for (int i = 0; i < 300; i++) {
                snprintf(id, sizeof id, "%032x", i * 7919);
                bool has = registry_find_id(&reg, id) != NULL;
                found += has && (i / 2) % 2 == 1;
                gone += !has && (i / 2) % 2 == 0;
        }
        CHECK(found == 150 && gone == 150 && registry_count(&reg) == 150 && reg.n_owners == 75,
              "half the connections closed: their sandboxes gone, the rest found");
        registry_destroy_all(&reg);
}

static void test_caps(void) {
        Registry reg = { 0 };
        RpcError e = { 0 };
        CHECK(registry_check_room(&reg, &e) == 0, "before a cap is set, room");
        CHECK(registry_set_max(&reg, 3) == 3 && strcmp(reg.max_from, "--max-sandboxes") == 0,
              "the operator's cap is taken as given");
        add(&reg, "s1", OWNER(0), 1000, 0);
        add(&reg, "s2", OWNER(0), 1000, 0);
        CHECK(registry_check_room(&reg, &e) == 0, "room for the third");
        SrvSandbox *s3 = add(&reg, "s3", OWNER(1), 1000, REGISTRY_PERSIST);
        e = (RpcError){ 0 };
        CHECK(registry_check_room(&reg, &e) == -1 && e.code == RPC_WORKER_UNAVAILABLE &&
                      strstr(e.message, "Maximum of 3 concurrent sandboxes"),
              "at the cap: -32001 %s", e.message);
        e = (RpcError){ 0 };
        CHECK(registry_fork_begin(&reg, &e) == -1 && e.code == RPC_WORKER_UNAVAILABLE && reg.n_forks == 0,
              "a fork needs room too");
        registry_destroy(s3);
        CHECK(registry_fork_begin(&reg, &e) == 0 && reg.n_forks == 1, "with room a fork is counted from its start");
        SrvSandbox *f = add(&reg, "f1", OWNER(0), 1000, REGISTRY_FORK);
        CHECK(f && f->is_fork && reg.n_forks == 1, "the fork's sandbox keeps the count");
        registry_destroy(f);
        CHECK(reg.n_forks == 0, "and gives it back when destroyed");
        registry_set_max(&reg, 1000);
        bool ok = true;
        for (unsigned i = 0; i < SBX_MAX_FORKS; i++)
                ok &= registry_fork_begin(&reg, &e) == 0;
        e = (RpcError){ 0 };
        CHECK(ok && registry_fork_begin(&reg, &e) == -1 && e.code == RPC_INVALID_PARAMS &&
                      strstr(e.message, "concurrent forks"),
              "at most %u forks at once: %s", SBX_MAX_FORKS, e.message);
        registry_fork_abort(&reg);
        CHECK(registry_fork_begin(&reg, &e) == 0, "a fork that failed gives its place back");
        for (unsigned i = 0; i < SBX_MAX_FORKS; i++)
                registry_fork_abort(&reg);
        CHECK(registry_set_max(&reg, UINT32_MAX) == SBX_MAX_SERVER_SANDBOXES,
              "a cap above what the server holds is cut to %u", SBX_MAX_SERVER_SANDBOXES);
        unsigned derived = registry_set_max(&reg, 0);
        CHECK(derived >= 1 && derived <= SBX_MAX_SERVER_SANDBOXES &&
                      (strcmp(reg.max_from, "memory") == 0 || strcmp(reg.max_from, "pids") == 0 ||
                       strcmp(reg.max_from, "fds") == 0 || strcmp(reg.max_from, "host ids") == 0),
              "without one it is derived from the machine: %u (%s)", derived, reg.max_from);
        registry_destroy_all(&reg);
}

/* The string n.params.key, or "". */
static const char *param_of(json_t *n, const char *key) {
        const char *v = json_string_value(json_object_get(json_object_get(n, "params"), key));
        return v ? v : "";
}

/* Runs the loop until the sandbox with that id is gone (at most about 10 s). */
static bool wait_gone(Loop *loop, Registry *reg, const char *id) {
        for (int i = 0; i < 100 && registry_find_id(reg, id); i++)
                (void)loop_run_once(loop, 100);
        return registry_find_id(reg, id) == NULL;
}

static void test_expiry(Loop *loop) {
        ConnList list;
        conn_list_init(&list, loop, peer_ops_ignored(), NULL);
        Peer x;
        if (peer_open(&list, &x) < 0) {
                CHECK(false, "a connection");
                return;
        }
        Registry reg = { 0 };
        SrvSandbox *sb = add(&reg, "e1", x.conn, 1000, REGISTRY_ROOT);
        CHECK(registry_set_expiry(sb, loop, 0, 0) == 0 && sb->timer < 0, "no lifetime and no idle time: no timer");
        CHECK(registry_set_expiry(sb, loop, 1, 0) == 0 && sb->timer >= 0, "a lifetime arms the sandbox's timer");
        CHECK(wait_gone(loop, &reg, "e1"), "the sandbox is destroyed when its lifetime is over");
        json_t *got = peer_read(&x);
        json_t *n = json_array_get(got, 0);
        CHECK(json_array_size(got) == 1 &&
                      json_is_string(json_object_get(n, "method")) &&
                      strcmp(json_string_value(json_object_get(n, "method")), "sandbox.expired") == 0 &&
                      strcmp(param_of(n, "sandboxId"), "e1") == 0 &&
                      strcmp(param_of(n, "reason"), "lifetime") == 0,
              "its owner is told: sandbox.expired, lifetime");
        json_decref(got);

        /* Idle: a request since the timer was armed moves the deadline; the timer re-arms. */
        sb = add(&reg, "e2", x.conn, 1000, 0);
        CHECK(registry_set_expiry(sb, loop, 0, 20) == 0, "an idle time");
        sb->used_ms = now_ms() + 3600 * 1000; /* as if a request came much later */
        int r = 0;
        for (int i = 0; i < 100 && r <= 0; i++)
                r = loop_run_once(loop, 100);
        struct itimerspec left = { 0 };
        CHECK(r == 1 && registry_find_id(&reg, "e2") == sb && timerfd_gettime(sb->timer, &left) == 0 &&
                      left.it_value.tv_sec > 60,
              "when the timer fires after a request, the sandbox stays and the timer is armed again for the new "
              "deadline (%lld s)",
              (long long)left.it_value.tv_sec);
        sb->used_ms = 0;
        CHECK(registry_set_expiry(sb, loop, 0, 20) == 0 && wait_gone(loop, &reg, "e2"),
              "idle for longer than its idle time, it goes");
        got = peer_read(&x);
        n = json_array_get(got, 0);
        CHECK(json_array_size(got) == 1 &&
                      strcmp(param_of(n, "reason"), "idle") == 0,
              "its owner is told why: idle");
        json_decref(got);
        registry_touch(add(&reg, "e3", x.conn, 1000, 0));
        sb = registry_find_id(&reg, "e3");
        CHECK(sb && registry_set_expiry(sb, loop, 3600 * 1000, 0) == 0 && sb->timer >= 0,
              "one with a timer still armed");
        registry_destroy_all(&reg);
        CHECK(registry_count(&reg) == 0, "is destroyed with the rest, its timer with it");
        conn_close_all(&list);
        close(x.fd);
}

int main(void) {
        test_owners();
        test_many();
        test_caps();
        Loop *loop;
        if (loop_new(&loop) < 0) {
                CHECK(false, "loop");
                return tap_done();
        }
        test_expiry(loop);
        loop_free(loop);
        return tap_done();
}
