/* SPDX-License-Identifier: MIT */
/* The context: the event loop, what every sandbox shares, the sandboxes (made fresh or
 * taken from a pool kept ready by the loop) and the dying ones. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/list.h"
#include "base/log.h"
#include "base/redact.h"
#include "base/util.h"
#include "cgroup/cgroup.h"
#include "cgroup/mover.h"
#include "sandbox/podnet.h"
#include "session/context.h"
#include "oci/oci.h"
#include "sbx/image.h"
#include "session/internal.h"
#include "session/run.h"
#include "session/sandbox.h"

/* After the pool hands a sandbox out, the next is made this much later: not in the middle
 * of the caller's first run. */
#define POOL_REFILL_MS 50
/* Between two pooled sandboxes, so the loop stays responsive in between. */
#define POOL_STEP_MS 5
/* After a failure to make one. */
#define POOL_RETRY_MS 1000

/* Sandboxes of one image made ahead of time (sbx_context_set_image_pool()). */
typedef struct ImagePool {
        SandboxList list; /* first: the list's reaped() finds its pool */
        struct SbxContext *ctx;
        char ref[SBX_IMAGE_NAME_BYTES]; /* as the caller named it: resolved at each use */
        unsigned target;
} ImagePool;

struct SbxContext {
        SandboxHost host;
        char last_error[512];
        SandboxList sandboxes;
        /* Sandboxes made ahead of time with default options and a started default session:
         * a default sbx_sandbox_new() takes one, and the loop makes the next. */
        SandboxList pool;
        unsigned pool_target;
        int pool_timer;
        Watch pool_w;
        int metrics_timer; /* every SBX_METRICS_INTERVAL_MS: each handed-out sandbox sampled */
        Watch metrics_w;
        ImagePool image_pools[SBX_MAX_IMAGE_POOLS];
        unsigned n_image_pools;
};

const char *sbx_version(void) { return SBX_VERSION; }

const char *sbx_error_class_name(SbxErrorClass c) {
        switch (c) {
        case SBX_ERROR_TIMEOUT: return "TIMEOUT";
        case SBX_ERROR_CANCELLED: return "CANCELLED";
        case SBX_ERROR_LIMIT_EXCEEDED: return "LIMIT_EXCEEDED";
        case SBX_ERROR_PIDS_LIMIT: return "PIDS_LIMIT";
        case SBX_ERROR_OOM: return "OOM";
        case SBX_ERROR_FS_FULL: return "FS_FULL";
        case SBX_ERROR_UNAVAILABLE: return "UNAVAILABLE";
        case SBX_ERROR_NONE:
        default: return NULL;
        }
}

/* Default options but for the image, which may be any. */
static bool options_default_but_image(const SbxSandboxOptions *o) {
        static const SbxLimits zero;
        return memcmp(&o->limits, &zero, sizeof zero) == 0 && o->timeout_ms == 0 && o->network == SBX_NETWORK_NONE &&
               !o->network_allow && !o->rootfs &&
               (!o->env || !o->env[0]) && !o->kill_leftovers && (!o->policy_allow || !o->policy_allow[0]) &&
               (!o->policy_deny || !o->policy_deny[0]) && (!o->secrets || !o->secrets[0]);
}

static bool options_default(const SbxSandboxOptions *o) { return !o->image && options_default_but_image(o); }

static bool pools_short(const SbxContext *ctx) {
        if (ctx->pool.n < ctx->pool_target)
                return true;
        for (unsigned i = 0; i < ctx->n_image_pools; i++)
                if (ctx->image_pools[i].list.n < ctx->image_pools[i].target)
                        return true;
        return false;
}

/* The pool of the image o names, when o is otherwise the default: NULL if none. */
static ImagePool *image_pool_for(SbxContext *ctx, const SbxSandboxOptions *o) {
        if (!o->image || !ctx->host.images || !options_default_but_image(o))
                return NULL;
        OciImage *want = oci_store_find(ctx->host.images, o->image);
        for (unsigned i = 0; want && i < ctx->n_image_pools; i++)
                if (oci_store_find(ctx->host.images, ctx->image_pools[i].ref) == want)
                        return &ctx->image_pools[i];
        return NULL;
}

static void pool_arm(SbxContext *ctx, uint64_t ms) {
        if (ctx->pool_timer >= 0 && pools_short(ctx))
                (void)timerfd_arm_ms(ctx->pool_timer, ms);
}

/* Makes one pooled sandbox per tick. */
static void pool_event(Watch *w, uint32_t events) {
        SbxContext *ctx = w->data;
        uint64_t x;
        (void)!read(ctx->pool_timer, &x, sizeof x);
        SbxSandboxOptions o;
        SandboxList *list = &ctx->pool;
        sbx_sandbox_options_init(&o);
        /* The host's pool first, then each image's in turn. */
        if (ctx->pool.n >= ctx->pool_target) {
                list = NULL;
                for (unsigned i = 0; !list && i < ctx->n_image_pools; i++)
                        if (ctx->image_pools[i].list.n < ctx->image_pools[i].target) {
                                list = &ctx->image_pools[i].list;
                                o.image = ctx->image_pools[i].ref;
                        }
                if (!list)
                        return;
        }
        SbxSandbox *sb;
        SbxSession *s;
        char err[512];
        if (sandbox_new(&ctx->host, &o, list, &sb, err, sizeof err) < 0) {
                /* An image not imported yet is waited for. */
                log_debug("pool%s%s: %s", o.image ? " of " : "", o.image ? o.image : "", err);
                (void)timerfd_arm_ms(ctx->pool_timer, POOL_RETRY_MS);
                return;
        }
        (void)sbx_session_get(sb, NULL, &s);
        pool_arm(ctx, POOL_STEP_MS);
}

/* A pooled sandbox's pid 1 died and it was freed: made again, after a pause (what killed it,
 * the OOM killer or an operator, may be at work still). */
static void pool_reaped(SandboxList *l) {
        SbxContext *ctx = container_of(l, SbxContext, pool);
        pool_arm(ctx, POOL_RETRY_MS);
}

static void image_pool_reaped(SandboxList *l) {
        pool_arm(container_of(l, ImagePool, list)->ctx, POOL_RETRY_MS);
}

int sbx_sandbox_new(SbxContext *ctx, const SbxSandboxOptions *o, SbxSandbox **ret) {
        ctx->last_error[0] = 0;
        /* One whose setup failed waits for its pid 1's end to be reaped: never hand it out. */
        bool dropped = false;
        while (ctx->pool.head && sandbox_setup_state(ctx->pool.head) < 0) {
                sbx_sandbox_free(ctx->pool.head);
                dropped = true;
        }
        if (dropped)
                pool_arm(ctx, POOL_RETRY_MS);
        ImagePool *ip = image_pool_for(ctx, o);
        /* Failed ones, and those of an image the name no longer has, go. */
        OciImage *want = ip ? oci_store_find(ctx->host.images, o->image) : NULL;
        for (SbxSandbox *p = ip ? ip->list.head : NULL, *next; p; p = next) {
                next = sandbox_list_next(p);
                if (sandbox_setup_state(p) < 0 || sandbox_image(p) != want) {
                        sbx_sandbox_free(p);
                        pool_arm(ctx, POOL_RETRY_MS);
                }
        }
        /* Not the newest: the loop may have made it a moment ago, still building. */
        SbxSandbox *sb = ip ? sandbox_list_warmest(&ip->list) : options_default(o) ? sandbox_list_warmest(&ctx->pool) : NULL;
        if (sb) {
                sandbox_list_move(sb, &ctx->sandboxes);
                pool_arm(ctx, POOL_REFILL_MS);
                *ret = sb;
                return 0;
        }
        int r = sandbox_new(&ctx->host, o, &ctx->sandboxes, ret, ctx->last_error, sizeof ctx->last_error);
        if (r < 0 && !ctx->last_error[0])
                snprintf(ctx->last_error, sizeof ctx->last_error, "%s", strerror(-r));
        return r;
}

int sandbox_new_like(SbxSandbox *sb, SbxSandbox **ret, char *err, size_t errlen) {
        SbxContext *ctx = container_of(sandbox_host(sb), SbxContext, host);
        SbxSandboxOptions o;
        if (sandbox_is_default(sb)) {
                sbx_sandbox_options_init(&o);
                int r = sbx_sandbox_new(ctx, &o, ret);
                if (r < 0)
                        snprintf(err, errlen, "%s", ctx->last_error);
                return r;
        }
        sandbox_options(sb, &o);
        return sandbox_new(&ctx->host, &o, &ctx->sandboxes, ret, err, errlen);
}

/* Each sandbox handed out gets a sample; the pool's have done nothing yet. */
static void metrics_event(Watch *w, uint32_t events) {
        SbxContext *ctx = w->data;
        uint64_t ticks;
        (void)!read(ctx->metrics_timer, &ticks, sizeof ticks);
        uint64_t now = wall_ms();
        for (SbxSandbox *sb = ctx->sandboxes.head; sb; sb = sandbox_list_next(sb))
                metrics_sample(sandbox_core(sb), now);
}

/* Every pipe, pidfd and socket is an fd of the daemon: take the hard limit. */
static void raise_fd_limit(void) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                (void)setrlimit(RLIMIT_NOFILE, &rl);
        }
}

int context_new(SbxContext **ret) {
        SbxContext *ctx = calloc(1, sizeof *ctx);
        if (!ctx)
                return -ENOMEM;
        ctx->host.devnull = ctx->pool_timer = ctx->metrics_timer = -1;
        ctx->pool.reap_dead = true;
        ctx->pool.reaped = pool_reaped;
        int r = loop_new(&ctx->host.loop);
        if (r < 0) {
                free(ctx);
                return r;
        }
        ctx->host.yard = (CorpseYard){ .loop = ctx->host.loop, .shared = &ctx->host.shared };
        ctx->host.devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
        ctx->pool_timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (ctx->host.devnull < 0 || ctx->pool_timer < 0 ||
            loop_add(ctx->host.loop, &ctx->pool_w, ctx->pool_timer, EPOLLIN, pool_event, ctx) < 0) {
                r = negerrno();
                safe_close(ctx->pool_timer);
                safe_close(ctx->host.devnull);
                loop_free(ctx->host.loop);
                free(ctx);
                return r;
        }
        ctx->metrics_timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (ctx->metrics_timer < 0 ||
            loop_add(ctx->host.loop, &ctx->metrics_w, ctx->metrics_timer, EPOLLIN, metrics_event, ctx) < 0 ||
            timerfd_every_ms(ctx->metrics_timer, SBX_METRICS_INTERVAL_MS) < 0) {
                /* Metrics are not worth failing a context for: its sandboxes have none. */
                loop_del(ctx->host.loop, &ctx->metrics_w);
                ctx->metrics_timer = safe_close(ctx->metrics_timer);
        }
        /* Output and stdin pipes may lose their reader at any time; that must be EPIPE for
         * the daemon, never a signal. */
        signal(SIGPIPE, SIG_IGN);
        /* Every pid 1 and job is reaped through its pidfd, never by the kernel: an ignored
         * SIGCHLD inherited from whoever started us (a `trap '' CHLD`) would have them reaped
         * at exit and their pids free for others while the daemon still names them. */
        struct sigaction chld;
        if (sigaction(SIGCHLD, NULL, &chld) == 0 && (chld.sa_handler == SIG_IGN || (chld.sa_flags & SA_NOCLDWAIT))) {
                struct sigaction dfl = { .sa_handler = SIG_DFL };
                sigemptyset(&dfl.sa_mask);
                (void)sigaction(SIGCHLD, &dfl, NULL);
        }
        /* The files API acts with the sandbox user's fs ids; root's supplementary groups
         * must not come along. */
        if (geteuid() == 0)
                (void)setgroups(0, NULL);
        raise_fd_limit();
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
                ctx->host.nofile = rl.rlim_cur;
        /* The key shapes are redacted unless the caller says otherwise. */
        char err[256];
        r = redactor_new(&(RedactConfig){ 0 }, &ctx->host.redact, err, sizeof err);
        if (r < 0) {
                sbx_context_free(ctx);
                return r;
        }
        *ret = ctx;
        return 0;
}

static void free_list(char **v) {
        for (char **e = v; e && *e; e++)
                free(*e);
        free(v);
}

static int dup_list(const char *const *v, char ***ret) {
        size_t n = 0;
        *ret = NULL;
        if (!v || !v[0])
                return 0;
        while (v[n])
                n++;
        char **c = calloc(n + 1, sizeof *c);
        for (size_t i = 0; c && i < n; i++)
                if (!(c[i] = strdup(v[i]))) {
                        free_list(c);
                        return -ENOMEM;
                }
        if (!c)
                return -ENOMEM;
        *ret = c;
        return 0;
}

/* Pooled sandboxes were made with the old settings: they go, and the loop makes new ones. */
static void pool_renew(SbxContext *ctx) {
        while (ctx->pool.head)
                sbx_sandbox_free(ctx->pool.head);
        for (unsigned i = 0; i < ctx->n_image_pools; i++)
                while (ctx->image_pools[i].list.head)
                        sbx_sandbox_free(ctx->image_pools[i].list.head);
        pool_arm(ctx, 1);
}

int sbx_context_set_redaction(SbxContext *ctx, const char *const *patterns, bool defaults, char *err, size_t errlen) {
        Redactor *r = NULL;
        char **copy = NULL;
        RedactConfig rc = { .patterns = patterns, .no_defaults = !defaults };
        int e = redactor_new(&rc, &r, err, errlen);
        if (e == 0 && (e = dup_list(patterns, &copy)) < 0)
                redactor_unref(r);
        if (e < 0)
                return e;
        redactor_unref(ctx->host.redact);
        free_list(ctx->host.redact_patterns);
        ctx->host.redact = r;
        ctx->host.redact_patterns = copy;
        ctx->host.redact_no_defaults = !defaults;
        pool_renew(ctx);
        return 0;
}

int sbx_context_set_pod_network(SbxContext *ctx, const char *cidr, const char *bridge, char *err, size_t errlen) {
        PodNetConfig c = { 0 };
        int r = podnet_parse(cidr, &c, err, errlen);
        if (r < 0)
                return r;
        if (!bridge || !bridge[0] || strlen(bridge) >= sizeof c.bridge || strchr(bridge, '/') || strchr(bridge, ' ')) {
                snprintf(err, errlen, "pod bridge '%.32s': a network interface's name is 1 to 15 bytes, no / or space",
                         bridge ? bridge : "");
                return -EINVAL;
        }
        if (ctx->host.process || geteuid() != 0) {
                snprintf(err, errlen, "a pod network needs root and namespaces mode (its veths go into the host's "
                                      "network namespace)");
                return -EPERM;
        }
        if (ctx->host.podnet) {
                snprintf(err, errlen, "the pod network is set already");
                return -EALREADY;
        }
        if (c.prefix < 16) {
                snprintf(err, errlen, "pod network %s: at most a /16 (65,533 addresses) per daemon", cidr);
                return -EINVAL;
        }
        snprintf(c.bridge, sizeof c.bridge, "%s", bridge);
        if ((r = podnet_bridge_up(&c, err, errlen)) < 0)
                return r;
        PodNetConfig *p = malloc(sizeof *p);
        uint8_t *used = calloc(podnet_capacity(&c) / 8 + 1, 1);
        if (!p || !used) {
                free(p);
                free(used);
                return -ENOMEM;
        }
        *p = c;
        ctx->host.podnet = p;
        ctx->host.pod_used = used;
        return 0;
}

int sbx_context_set_env(SbxContext *ctx, const char *const *env) {
        char **copy;
        for (const char *const *e = env; e && *e; e++) {
                const char *eq = strchr(*e, '=');
                if (!eq || !env_name_valid(*e, (size_t)(eq - *e)))
                        return -EINVAL;
        }
        int r = dup_list(env, &copy);
        if (r < 0)
                return r;
        free_list(ctx->host.base_env);
        ctx->host.base_env = copy;
        pool_renew(ctx);
        return 0;
}

int sbx_context_set_image_pool(SbxContext *ctx, const char *image, unsigned n) {
        if (!image || strlen(image) >= SBX_IMAGE_NAME_BYTES)
                return -EINVAL;
        ImagePool *p = NULL;
        for (unsigned i = 0; !p && i < ctx->n_image_pools; i++)
                if (strcmp(ctx->image_pools[i].ref, image) == 0)
                        p = &ctx->image_pools[i];
        if (!p) {
                if (ctx->n_image_pools >= SBX_MAX_IMAGE_POOLS)
                        return -ENOSPC;
                p = &ctx->image_pools[ctx->n_image_pools++];
                *p = (ImagePool){ .ctx = ctx, .list = { .reap_dead = true, .reaped = image_pool_reaped } };
                snprintf(p->ref, sizeof p->ref, "%s", image);
        }
        p->target = MIN(n, SBX_MAX_POOL);
        while (p->list.n > p->target)
                sbx_sandbox_free(p->list.head);
        pool_arm(ctx, 1);
        return 0;
}

void sbx_context_set_pool(SbxContext *ctx, unsigned n) {
        ctx->pool_target = MIN(n, SBX_MAX_POOL);
        while (ctx->pool.n > ctx->pool_target)
                sbx_sandbox_free(ctx->pool.head);
        pool_arm(ctx, 1);
}

void sbx_context_pool_stats(const SbxContext *ctx, unsigned *ret_target, unsigned *ret_held, unsigned *ret_ready) {
        unsigned ready = 0;
        for (SbxSandbox *sb = ctx->pool.head; sb; sb = sandbox_list_next(sb))
                ready += sandbox_setup_state(sb) > 0;
        *ret_target = ctx->pool_target;
        *ret_held = ctx->pool.n;
        *ret_ready = ready;
}

int sbx_context_set_mode(SbxContext *ctx, SbxMode mode) {
        if (mode != SBX_MODE_NAMESPACES && mode != SBX_MODE_PROCESS)
                return -EINVAL;
        /* Every sandbox of a context shares its BoxShared, made for one mode. */
        if (ctx->host.shared_ready)
                return (mode == SBX_MODE_PROCESS) == ctx->host.process ? 0 : -EBUSY;
        ctx->host.process = mode == SBX_MODE_PROCESS;
        return 0;
}

int sbx_context_set_spawner(SbxContext *ctx, bool separate) {
        /* Every sandbox of a context shares its BoxShared, and so its spawner. */
        if (ctx->host.shared_ready)
                return separate == !ctx->host.spawn_inline ? 0 : -EBUSY;
        ctx->host.spawn_inline = !separate;
        return 0;
}

int sbx_context_set_mover(SbxContext *ctx, bool separate) {
        if (ctx->host.mover)
                return separate == !ctx->host.move_inline ? 0 : -EBUSY;
        ctx->host.move_inline = !separate;
        return 0;
}

int sbx_context_set_sandboxes_cpu_weight(SbxContext *ctx, unsigned weight) {
        if (weight < 1 || weight > SBX_MAX_CPU_WEIGHT)
                return -EINVAL;
        ctx->host.cpu_weight = weight;
        /* Made already: now; otherwise with the base, before the first sandbox. */
        return ctx->host.shared_ready ? cgroup_root_set_weight(&ctx->host.shared.cg, weight) : 0;
}

int sbx_host_favor_cgroup_moves(char *where, size_t size) {
        if (!where || size == 0)
                return -EINVAL;
        where[0] = 0;
        return cgroup_favor_dynmods(where, size);
}

SbxMode sbx_context_mode(const SbxContext *ctx) { return ctx->host.process ? SBX_MODE_PROCESS : SBX_MODE_NAMESPACES; }

SbxContext *sbx_context_free(SbxContext *ctx) {
        if (!ctx)
                return NULL;
        while (ctx->sandboxes.head)
                sbx_sandbox_free(ctx->sandboxes.head);
        while (ctx->pool.head)
                sbx_sandbox_free(ctx->pool.head);
        for (unsigned i = 0; i < ctx->n_image_pools; i++)
                while (ctx->image_pools[i].list.head)
                        sbx_sandbox_free(ctx->image_pools[i].list.head);
        /* What is still dying is waited for here: nothing may outlive the context. */
        corpse_bury_all(&ctx->host.yard);
        for (unsigned i = ctx->host.rooms.n; i-- > 0;)
                if (ctx->host.rooms.v[i]->host_free)
                        ctx->host.rooms.v[i]->host_free(&ctx->host);
        loop_del(ctx->host.loop, &ctx->pool_w);
        safe_close(ctx->pool_timer);
        loop_del(ctx->host.loop, &ctx->metrics_w);
        safe_close(ctx->metrics_timer);
        mover_free(ctx->host.mover);
        sandbox_host_spawns_done(&ctx->host);
        while (ctx->host.n_changes_pool > 0)
                safe_close(ctx->host.changes_pool[--ctx->host.n_changes_pool]);
        if (ctx->host.shared_ready)
                box_shared_done(&ctx->host.shared);
        oci_store_free(ctx->host.images);
        free(ctx->host.podnet);
        free(ctx->host.pod_used);
        safe_close(ctx->host.devnull);
        loop_free(ctx->host.loop);
        redactor_unref(ctx->host.redact);
        free_list(ctx->host.redact_patterns);
        free_list(ctx->host.base_env);
        free(ctx);
        return NULL;
}

int sbx_context_fd(SbxContext *ctx) { return loop_fd(ctx->host.loop); }

Loop *sbx_context_loop(SbxContext *ctx) { return ctx->host.loop; }

const char *sbx_context_last_error(const SbxContext *ctx) { return ctx->last_error; }

int sbx_context_run_once(SbxContext *ctx, int timeout_ms) { return loop_run_once(ctx->host.loop, timeout_ms); }

SandboxHost *context_host(SbxContext *ctx) { return &ctx->host; }

int context_add_room(SbxContext *ctx, const Room *room) {
        if (ctx->host.rooms.n >= SBX_MAX_ROOMS)
                return -ENOSPC;
        ctx->host.rooms.v[ctx->host.rooms.n++] = room;
        return 0;
}

int context_new_with_rooms(const Room *const *rooms, size_t n, SbxContext **ret) {
        SbxContext *ctx;
        int r = context_new(&ctx);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n; i++)
                if ((r = context_add_room(ctx, rooms[i])) < 0) {
                        sbx_context_free(ctx);
                        return r;
                }
        *ret = ctx;
        return 0;
}

unsigned sbx_context_park_idle(SbxContext *ctx, uint64_t idle_ms) { return sandbox_park_idle(&ctx->host, idle_ms); }

int64_t sbx_context_fds_spare(SbxContext *ctx) { return sandbox_host_fds_spare(&ctx->host); }

void sbx_context_park_for(SbxContext *ctx, const SbxSandbox *keep, int64_t want) {
        sandbox_park_for(&ctx->host, keep, want);
}
