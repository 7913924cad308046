/* SPDX-License-Identifier: MIT */
/* Sandboxes: options, creation and freeing, the sessions of each, its readiness (told to
 * observers from the loop, never waited for) and its background log. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include "base/job.h"
#include "base/limits.h"
#include "base/list.h"
#include "base/log.h"
#include "base/redact.h"
#include "base/util.h"
#include "oci/oci.h"
#include "sandbox/mount.h"
#include "cgroup/mover.h"
#include "sandbox/podnet.h"
#include "session/freeze.h"
#include "session/internal.h"
#include "session/run.h"
#include "options/options.h"
#include "session/sandbox.h"

struct SbxSandbox {
        SandboxCore core;
        SbxSandbox *next, *prev;
        SandboxList *list;
        SandboxHost *host;
        char **env;
        SbxSession *sessions;
        unsigned n_sessions;
        Watch init_w, ctl_w;
        int setup; /* see sandbox_setup_state() */
        int setup_timer; /* while setup is 0: fails it after SBX_CREATE_TIMEOUT_MS */
        Watch setup_w;
        SandboxObserver *observers;
        Freeze pause;             /* asked while core.paused */
        SbxPauseFn pause_done;    /* until the pause is confirmed */
        void *pause_ud;
        /* What a sandbox like this one needs (sandbox_options()). */
        SbxNetwork network;
        char **network_allow; /* SBX_NETWORK_ALLOWLIST's patterns, NULL when empty */
        char *rootfs;
        struct OciImage *image; /* oci/oci.h: the image it was made from (held), or NULL */
        char *image_ref;        /* ... as the caller named it (core.image) */
        char **policy_allow, **policy_deny; /* NULL when empty; `policy` points to them */
        LandlockPolicy policy;
        char **secrets; /* NAME=VALUE, NULL-terminated, or NULL; wiped when freed */
        /* Proxy secrets (sbx/egress.h): each's strings and hosts are sb's, its value wiped when
         * freed, its placeholder made at creation unless given; psec_env holds NAME=placeholder
         * for the shells. */
        SbxProxySecret *psec;
        size_t n_psec;
        char **psec_env;
        /* The daemon's end of the default session's socket, whose shell pid 1 started during
         * setup, until sbx_session_get() takes it for that session; else -1. */
        int default_sock;
        /* SBX_NETWORK_POD: its address (host order; 0 when none is held), as text, and the job
         * that puts its eth0 on the bridge once pid 1 sent the namespace (setup is settled
         * when that job ends). */
        uint32_t pod_addr;
        char pod_ip[16];
        Job pod_job;
        Watch pod_w;
        /* pid 1's READY came (setup may still wait for the pod job): what it sends from now on
         * are reports of ended processes, never a second READY. */
        bool init_ready;
        /* Parking's order (SandboxHost.lru_*): unparked sandboxes a client touched
         * (sbx_sandbox_touch()), least recently used first; lru_ms is when it was last. */
        SbxSandbox *lru_next, *lru_prev;
        uint64_t lru_ms;
        bool on_lru;
        /* sandbox_park_idle() retired its sessions' workers: parked once the last says so
         * (core_retired()), unless a client used it meanwhile. */
        bool park_when_retired;
        unsigned parked_cost; /* the fds it keeps parked, in SandboxHost.parked_fds */
        unsigned kept_fds;    /* held for it parked or not (sandbox_fds_keep()), in SandboxHost.held_fds */
        struct SpawnWait *spawn; /* its entry in SandboxHost.spawn_head until the answer */
};

typedef struct SpawnWait {
        struct SpawnWait *next;
        uint64_t seq;
        SbxSandbox *sb; /* NULL once freed */
        int slot;       /* then its host ids' slot, free again once its pid 1 is gone */
        char name[33];  /* its box id, which names its cgroups */
        /* pid 1, from the spawner's first answer (-1 until then). */
        pid_t pid;
        int pidfd;
        bool process;   /* process mode: the directory its pid 1 makes */
        char dir[BOX_DIR_BYTES];
} SpawnWait;

/* ---------------------------------------------------------------- lists and observers */

static void list_add(SandboxList *l, SbxSandbox *sb) {
        LIST_LINK(l->head, sb);
        l->n++;
        sb->list = l;
}

static void list_remove(SbxSandbox *sb) {
        LIST_UNLINK(sb->list->head, sb);
        sb->list->n--;
        sb->list = NULL;
}

void sandbox_list_move(SbxSandbox *sb, SandboxList *to) {
        list_remove(sb);
        list_add(to, sb);
}

SbxSandbox *sandbox_list_warmest(const SandboxList *l) {
        SbxSandbox *ready = NULL, *oldest = NULL;
        /* Newest first: the last match is the oldest. */
        for (SbxSandbox *sb = l->head; sb; sb = sb->next) {
                if (sb->setup >= 0)
                        oldest = sb;
                if (sb->setup > 0)
                        ready = sb;
        }
        for (SbxSandbox *sb = ready; sb; sb = sb->prev) {
                SbxSession *s = sbx_session_find(sb, NULL);
                if (sb->setup > 0 && s && session_idle(s))
                        return sb;
        }
        return ready ? ready : oldest;
}

static void tell_ready(void *data);

void sandbox_observe(SbxSandbox *sb, SandboxObserver *o, const SandboxObserverOps *ops) {
        o->ops = ops;
        o->told_ready = false;
        o->next = sb->observers;
        sb->observers = o;
        /* Settled already: told from the loop all the same. */
        if (sb->setup != 0)
                (void)loop_defer(sb->core.loop, tell_ready, sb);
}

void sandbox_unobserve(SbxSandbox *sb, SandboxObserver *o) {
        SandboxObserver **pp = &sb->observers;
        while (*pp && *pp != o)
                pp = &(*pp)->next;
        if (*pp)
                *pp = o->next;
        o->next = NULL;
}

SandboxObserver *sandbox_observer_find(SbxSandbox *sb, const SandboxObserverOps *ops) {
        for (SandboxObserver *o = sb->observers; o; o = o->next)
                if (o->ops == ops)
                        return o;
        return NULL;
}

SandboxObserver *sandbox_observer_state(SbxSandbox *sb, const SandboxObserverOps *ops, size_t size, size_t offset,
                                        bool create) {
        SandboxObserver *o = sandbox_observer_find(sb, ops);
        if (o || !create)
                return o;
        uint8_t *state = calloc(1, size);
        if (!state)
                return NULL;
        o = (SandboxObserver *)(state + offset);
        sandbox_observe(sb, o, ops);
        return o;
}

/* Tells one observer not yet told that the setup is settled, from the loop, and comes back
 * for the next on a later call: the observer may free anything, the sandbox included (whose
 * free cancels that next call). */
static void tell_ready(void *data) {
        SbxSandbox *sb = data;
        SandboxObserver *o = sb->observers;
        while (o && o->told_ready)
                o = o->next;
        if (!o)
                return;
        o->told_ready = true;
        (void)loop_defer(sb->core.loop, tell_ready, sb);
        if (o->ops->ready)
                o->ops->ready(o, sb, sb->setup > 0 ? 0 : sb->setup);
}

static void settle(SbxSandbox *sb, int state) {
        if (sb->setup != 0)
                return;
        sb->setup = state;
        (void)loop_defer(sb->core.loop, tell_ready, sb);
        loop_del(sb->core.loop, &sb->setup_w);
        sb->setup_timer = safe_close(sb->setup_timer);
}

/* ---------------------------------------------------------------- pid 1 */

static void init_gone(SbxSandbox *sb);

static void init_event(Watch *w, uint32_t events) {
        SbxSandbox *sb = w->data;
        /* pid 1 died (OOM killer, or it was killed from outside): every process of the
         * sandbox is gone with it. Sessions answer their runs and stop restarting. */
        log_warn("sandbox %s: init exited", sb->core.box.id);
        init_gone(sb);
}

/* pid 1 is gone, or never came (the spawner could not make it). */
static void init_gone(SbxSandbox *sb) {
        /* Its end may be heard before its last words during setup: the reason it failed. */
        if (sb->setup == 0 && !sb->init_ready && !sb->core.setup_error[0] && sb->core.box.ctl_fd >= 0) {
                char err[512];
                if (box_ready(&sb->core.box, err, sizeof err) < 0)
                        snprintf(sb->core.setup_error, sizeof sb->core.setup_error, "%s", err);
        }
        loop_del(sb->core.loop, &sb->init_w);
        loop_del(sb->core.loop, &sb->ctl_w);
        /* Process mode: no pid namespace ended with it, so the same is done here. */
        if (sb->core.box.process && sb->core.box.cg.dir >= 0)
                (void)cgroup_kill(sb->core.box.cg.dir);
        if (sb->list && sb->list->reap_dead) {
                SandboxList *l = sb->list;
                sbx_sandbox_free(sb);
                if (l->reaped)
                        l->reaped(l);
                return;
        }
        sb->core.dying = true;
        for (SbxSession *s = sb->sessions; s; s = s->next)
                session_lose(s);
        for (unsigned i = 0; i < sb->host->rooms.n; i++)
                if (sb->host->rooms.v[i]->lost)
                        sb->host->rooms.v[i]->lost(&sb->core);
        settle(sb, -ESRCH);
}

/* ---------------------------------------------------------------- the pod network */

static int pod_alloc(SandboxHost *host, uint32_t *ret) {
        uint32_t n = podnet_capacity(host->podnet);
        for (uint32_t k = 0; k < n; k++) {
                uint32_t i = (host->pod_next + k) % n;
                if (!(host->pod_used[i / 8] & (1u << (i % 8)))) {
                        host->pod_used[i / 8] |= (uint8_t)(1u << (i % 8));
                        host->pod_next = (i + 1) % n;
                        *ret = host->podnet->gateway + 1 + i;
                        return 0;
                }
        }
        return -ENOSPC;
}

static void pod_release(SbxSandbox *sb) {
        if (!sb->pod_addr)
                return;
        uint32_t i = sb->pod_addr - sb->host->podnet->gateway - 1;
        sb->host->pod_used[i / 8] &= (uint8_t)~(1u << (i % 8));
        sb->pod_addr = 0;
}

typedef struct PodJobArgs {
        PodNetConfig c;
        int netns;
        char host_if[16];
        uint32_t addr;
} PodJobArgs;

static int pod_job_run(void *arg, char *err, size_t errlen) {
        PodJobArgs *a = arg;
        return podnet_attach(&a->c, a->netns, a->host_if, a->addr, err, errlen);
}

static void pod_job_event(Watch *w, uint32_t events) {
        SbxSandbox *sb = w->data;
        char err[JOB_ERR_MAX];
        loop_del(sb->core.loop, &sb->pod_w);
        int r = job_finish(&sb->pod_job, err, sizeof err);
        if (r < 0) {
                log_warn("sandbox %s: %s", sb->core.box.id, err);
                snprintf(sb->core.setup_error, sizeof sb->core.setup_error, "%s", err);
                box_kill(&sb->core.box, true);
        }
        settle(sb, r < 0 ? r : 1);
}

/* pid 1 sent the namespace: a job makes the veth (the netlink work enters the namespace, which
 * the daemon itself never does). */
static int pod_attach(SbxSandbox *sb) {
        PodJobArgs a = { .c = *sb->host->podnet, .netns = sb->core.box.netns_fd, .addr = sb->pod_addr };
        /* The host end's name is the host's to keep unique: the box id is random. */
        snprintf(a.host_if, sizeof a.host_if, "sbx%.12s", sb->core.box.id);
        int keep[] = { a.netns };
        int r = a.netns < 0 ? -EBADF : job_start(&sb->pod_job, pod_job_run, &a, keep, ELEMENTSOF(keep));
        if (r < 0)
                return r;
        r = loop_add(sb->core.loop, &sb->pod_w, sb->pod_job.pidfd, EPOLLIN, pod_job_event, sb);
        if (r < 0)
                job_kill(&sb->pod_job);
        return r;
}

/* pid 1's word on its setup, taken from the loop: creating a sandbox never waits for it.
 * After that, its reports of processes that ended. */
static int sandbox_unpark(SbxSandbox *sb);
static void core_unpark(SandboxCore *core);
static void core_retired(SandboxCore *core);

static void ctl_event(Watch *w, uint32_t events) {
        SbxSandbox *sb = w->data;
        sandbox_unpark(sb);
        char err[512];
        if (sb->setup > 0 || sb->init_ready) {
                pid_t pid;
                int ws, r;
                for (int i = 0; i < 64 && (r = box_read_exit(&sb->core.box, &pid, &ws)) > 0; i++)
                        for (unsigned k = 0; k < sb->host->rooms.n; k++)
                                if (sb->host->rooms.v[k]->exited)
                                        sb->host->rooms.v[k]->exited(&sb->core, pid, ws);
                if (r < 0)
                        loop_del(sb->core.loop, &sb->ctl_w); /* pid 1 is gone: init_event() follows */
                return;
        }
        int r = box_ready(&sb->core.box, err, sizeof err);
        if (r == 0)
                return;
        sb->init_ready = r > 0;
        if (r < 0) {
                loop_del(sb->core.loop, &sb->ctl_w);
                log_warn("sandbox %s: setup failed: %s", sb->core.box.id, err);
                snprintf(sb->core.setup_error, sizeof sb->core.setup_error, "%s", err);
        }
        /* With a pod network, setup is over when its job is (pod_job_event). */
        if (r > 0 && sb->pod_addr) {
                if ((r = pod_attach(sb)) == 0)
                        return;
                snprintf(sb->core.setup_error, sizeof sb->core.setup_error, "pod network: %s", strerror(-r));
                box_kill(&sb->core.box, true);
        }
        /* On failure pid 1 exits too, and init_event() answers what waits. */
        settle(sb, r > 0 ? 1 : r);
}

/* ---------------------------------------------------------------- the spawner's answers */

static void spawn_event(Watch *w, uint32_t events);

static int spawn_watch(SandboxHost *host) {
        int fd = box_spawner_fd(&host->shared);
        if (host->spawn_w.active && host->spawn_w.fd == fd)
                return 0;
        loop_del(host->loop, &host->spawn_w);
        return fd < 0 ? -EPIPE : loop_add(host->loop, &host->spawn_w, fd, EPOLLIN, spawn_event, host);
}

static SpawnWait *spawn_pop(SandboxHost *host) {
        SpawnWait *sw = host->spawn_head;
        host->spawn_head = sw->next;
        if (!host->spawn_head)
                host->spawn_tail = NULL;
        return sw;
}

/* What came for a sandbox freed meanwhile: its pid 1 (which dies on its own too: its control
 * socket is closed) and its cgroups, killed and removed by the corpses, which then free its
 * host ids' slot; in process mode the directory its pid 1 made goes too. */
static void spawn_orphan(SandboxHost *host, const SpawnWait *sw, SpawnReply *rep) {
        Box b;
        box_blank(&b);
        if (sw) {
                b.slot = sw->slot;
                snprintf(b.id, sizeof b.id, "%s", sw->name);
                b.process = sw->process;
                if (sw->process && rep->pidfd >= 0) {
                        snprintf(b.dir, sizeof b.dir, "%s", sw->dir);
                        b.dir_state = BOX_DIR_PRESENT;
                } else {
                        b.dir_state = BOX_DIR_GONE;
                }
        }
        box_spawned(&b, rep);
        b.cg.root = &host->shared.cg;
        corpse_add(&host->yard, &b);
}

/* Its last answer: sw is unlinked (and freed here). A pidfd its first answer brought is in sw. */
static void spawn_answer(SandboxHost *host, SpawnWait *sw, SpawnReply *rep) {
        SbxSandbox *sb = sw->sb;
        if (sw->pidfd >= 0 && rep->pidfd < 0) {
                rep->pid = sw->pid;
                rep->pidfd = TAKE_FD(sw->pidfd);
        } else if (rep->pid <= 0 && sw->pid > 0) {
                rep->pid = sw->pid; /* its first answer came without the pidfd */
        }
        safe_close(sw->pidfd);
        /* Short of fds, an answer brought none: what was made is found by its name (and
         * its pid 1, killed, fails the sandbox). */
        if (rep->truncated || (rep->pid > 0 && rep->pidfd < 0)) {
                box_spawn_recover(&host->shared, sw->name, rep);
                if (rep->status >= 0 || !rep->text[0]) {
                        rep->status = rep->status < 0 ? rep->status : -EMFILE;
                        snprintf(rep->text, sizeof rep->text, "the daemon ran out of fds while the sandbox was made");
                }
        }
        if (!sb) {
                spawn_orphan(host, sw, rep);
                free(sw);
                return;
        }
        free(sw);
        sb->spawn = NULL;
        if (rep->status < 0) {
                log_warn("sandbox %s: %s", sb->core.box.id, rep->text);
                snprintf(sb->core.setup_error, sizeof sb->core.setup_error, "%s", rep->text);
                pidfd_sigkill(rep->pidfd);
        }
        box_spawned(&sb->core.box, rep);
        if (sb->core.box.init_pidfd < 0) {
                init_gone(sb);
                return;
        }
        /* Its setup's own time starts now, not when it was asked for (see sandbox_create()). */
        if (sb->setup_timer >= 0 && sb->setup == 0)
                (void)timerfd_arm_ms(sb->setup_timer, SBX_CREATE_TIMEOUT_MS);
        /* Its pid 1 exists (if its answer says it failed, it was killed: its end follows). */
        (void)loop_add(sb->core.loop, &sb->init_w, sb->core.box.init_pidfd, EPOLLIN, init_event, sb);
        if (rep->status >= 0)
                (void)loop_add(sb->core.loop, &sb->ctl_w, sb->core.box.ctl_fd, EPOLLIN, ctl_event, sb);
}

/* A request the spawner will never answer (it died, or answered a later one first): what it
 * may have made is found by name, its pid 1 killed, and the sandbox fails as after any failed
 * setup. */
static void spawn_lost(SandboxHost *host, SpawnWait *sw, pid_t pid, const char *why) {
        SpawnReply rep;
        spawn_reply_init(&rep, sw->seq);
        rep.pid = pid;
        rep.status = -EPIPE;
        rep.truncated = true;
        snprintf(rep.text, sizeof rep.text, "%s", why);
        spawn_answer(host, sw, &rep);
}

/* The spawner is gone: what waited for it never comes. The next create starts another. */
static void spawner_lost(SandboxHost *host) {
        log_warn("the sandbox spawner exited; sandboxes waiting for their pid 1 fail");
        loop_del(host->loop, &host->spawn_w);
        uint64_t seq;
        pid_t last = box_spawner_lost(&host->shared, &seq);
        SpawnWait *list = host->spawn_head;
        host->spawn_head = host->spawn_tail = NULL;
        while (list) {
                SpawnWait *sw = list;
                list = sw->next;
                spawn_lost(host, sw, sw->seq == seq ? last : 0, "the sandbox spawner exited before the sandbox was made");
        }
}

static void spawn_event(Watch *w, uint32_t events) {
        SandboxHost *host = w->data;
        /* A bounded batch a turn: the loop's other work goes on between them. */
        for (int i = 0; i < 64; i++) {
                SpawnReply rep;
                int r = box_spawn_reply(&host->shared, &rep);
                if (r == 0)
                        return;
                if (r < 0) {
                        spawner_lost(host);
                        return;
                }
                /* Answers come in the order asked: one for a later request means those before
                 * it were lost (never seen so far). */
                while (host->spawn_head && host->spawn_head->seq < rep.seq)
                        spawn_lost(host, spawn_pop(host), 0, "the sandbox spawner lost its request");
                SpawnWait *sw = host->spawn_head;
                if (!sw || sw->seq != rep.seq) {
                        log_warn("sandbox spawner: an answer for request %llu, none waits for it",
                                 (unsigned long long)rep.seq);
                        spawn_orphan(host, NULL, &rep);
                        continue;
                }
                if (rep.cloned) {
                        /* Kept until the last answer: a spawner that dies before it leaves no
                         * pid 1 unknown. */
                        safe_close(sw->pidfd);
                        sw->pid = rep.pid;
                        sw->pidfd = TAKE_FD(rep.pidfd);
                        continue;
                }
                spawn_answer(host, spawn_pop(host), &rep);
        }
}

void sandbox_host_spawns_done(SandboxHost *host) {
        loop_del(host->loop, &host->spawn_w);
        while (host->spawn_head) {
                SpawnWait *sw = spawn_pop(host);
                if (sw->sb)
                        sw->sb->spawn = NULL;
                /* A pid 1 made for it: gone before the spawner's last answers are taken. */
                pidfd_kill_reap(sw->pidfd);
                safe_close(sw->pidfd);
                free(sw);
        }
}

/* pid 1 did not build the root in time: setup fails and pid 1 goes (init_event() follows). */
static void setup_timeout_event(Watch *w, uint32_t events) {
        SbxSandbox *sb = w->data;
        log_warn("sandbox %s: no root after %d ms", sb->core.box.id, SBX_CREATE_TIMEOUT_MS);
        loop_del(sb->core.loop, &sb->ctl_w);
        box_kill(&sb->core.box, true);
        settle(sb, -ETIMEDOUT);
}

/* ---------------------------------------------------------------- life */

static void sandbox_dealloc(SbxSandbox *sb);

static SbxSandbox *sandbox_alloc(SandboxHost *host, const SbxSandboxOptions *o) {
        SbxSandbox *sb = calloc(1, sizeof *sb);
        if (!sb)
                return NULL;
        sb->host = host;
        sb->default_sock = -1;
        sb->core.loop = host->loop;
        sb->core.devnull = host->devnull;
        sb->core.shared = &host->shared;
        sb->core.mover = host->mover;
        sb->core.rooms = &host->rooms;
        host->n_sandboxes++;
        sb->core.limits = o->limits;
        options_fill_limits(&sb->core.limits);
        sb->core.timeout_ms = o->timeout_ms ? o->timeout_ms : SBX_DEFAULT_TIMEOUT_MS;
        sb->core.hold_after = UINT64_MAX;
        sb->core.unpark = core_unpark;
        sb->core.retired = core_retired;
        sb->core.self = sb;
        sb->core.kill_leftovers = o->kill_leftovers;
        sb->setup_timer = -1;
        sb->pod_job.pidfd = -1;
        sb->env = options_build_env((const char *const *)host->base_env, o->env, o->network == SBX_NETWORK_ALLOWLIST,
                            o->n_proxy_secrets > 0);
        sb->network = o->network;
        sb->rootfs = o->rootfs ? strdup(o->rootfs) : NULL;
        sb->secrets = o->secrets && o->secrets[0] ? options_copy_secrets(o->secrets) : NULL;
        if (o->n_proxy_secrets) {
                if (options_copy_proxy_secrets(o->proxy_secrets, o->n_proxy_secrets, &sb->psec) < 0 ||
                    !(sb->psec_env = options_proxy_secret_pairs(sb->psec, o->n_proxy_secrets)))
                        sb->env = (options_free_list(sb->env), NULL);
                else
                        sb->n_psec = o->n_proxy_secrets;
        }
        if (o->secrets && o->secrets[0]) {
                /* Its own rules: the context's plus its secrets. Not the proxy secrets' values:
                 * no command ever holds them, and a stream's hold-back of what may begin a value
                 * would tell a command that prints guesses which of them begin it (the proxy
                 * masks them in the answers it relays, without that hold-back). */
                char err[256];
                RedactConfig rc = { .secrets = o->secrets, .patterns = (const char *const *)host->redact_patterns,
                                    .no_defaults = host->redact_no_defaults };
                if (redactor_new(&rc, &sb->core.redact, err, sizeof err) < 0)
                        sb->env = (options_free_list(sb->env), NULL);
        } else {
                sb->core.redact = redactor_ref(host->redact);
        }
        if (!sb->env || (o->rootfs && !sb->rootfs) || (o->secrets && o->secrets[0] && !sb->secrets) ||
            options_copy_list(o->policy_allow, &sb->policy_allow) < 0 || options_copy_list(o->policy_deny, &sb->policy_deny) < 0 ||
            options_copy_list(o->network_allow, &sb->network_allow) < 0) {
                sandbox_dealloc(sb);
                return NULL;
        }
        sb->policy = (LandlockPolicy){ .allow = (const char *const *)sb->policy_allow,
                                       .deny = (const char *const *)sb->policy_deny, .connect_port = -1 };
        return sb;
}

static void lru_unlink(SbxSandbox *sb);

static void sandbox_dealloc(SbxSandbox *sb) {
        /* Its pid 1, if the spawner makes it still, is an orphan's: killed as it comes. */
        if (sb->spawn) {
                sb->spawn->sb = NULL;
                sb->spawn->slot = sb->core.box.slot;
        }
        lru_unlink(sb);
        sb->host->n_sandboxes--;
        metrics_done(&sb->core.metrics);
        if (sb->pod_w.active)
                loop_del(sb->core.loop, &sb->pod_w);
        job_kill(&sb->pod_job);
        pod_release(sb);
        safe_close(sb->default_sock);
        options_free_list(sb->env);
        options_free_list(sb->network_allow);
        options_free_list(sb->policy_allow);
        options_free_list(sb->policy_deny);
        options_free_secrets(sb->secrets);
        options_free_proxy_secrets(sb->psec, sb->n_psec);
        options_free_list(sb->psec_env);
        redactor_unref(sb->core.redact);
        free(sb->rootfs);
        if (sb->image)
                oci_image_unuse(sb->image);
        free(sb->image_ref);
        free(sb);
}

/* What pid 1 starts shells with: the environment, then the secrets. Freed by the caller with
 * free() alone: the strings are sb's. */
static char **shell_env(const SbxSandbox *sb) {
        size_t n = 0, k = 0;
        for (char **e = sb->env; *e; e++)
                n++;
        for (char **e = sb->secrets; e && *e; e++)
                n++;
        n += sb->n_psec;
        char **v = calloc(n + 1, sizeof *v);
        for (char **e = sb->env; v && *e; e++) {
                /* A secret replaces an entry of the same name (one from sbx_context_set_env()). */
                size_t nl = strcspn(*e, "=") + 1;
                bool secret = false;
                for (char **f = sb->secrets; f && *f && !secret; f++)
                        secret = strncmp(*f, *e, nl) == 0;
                if (!secret)
                        v[k++] = *e;
        }
        for (char **e = sb->secrets; v && e && *e; e++)
                v[k++] = *e;
        /* A proxy secret's name holds its placeholder, never its value. */
        for (char **e = sb->psec_env; v && e && *e; e++)
                v[k++] = *e;
        return v;
}


/* What rooms prepared for a sandbox being made (Room.prepare()), until they attach. */
typedef struct Prepared {
        void *state[SBX_MAX_ROOMS];
} Prepared;

static void rooms_abandon(const RoomTable *t, Prepared *p) {
        for (unsigned i = 0; i < t->n; i++)
                if (t->v[i]->abandon && p->state[i])
                        t->v[i]->abandon(p->state[i]);
}

static int rooms_prepare(SbxSandbox *sb, BoxConfig *bc, Prepared *p, char *err, size_t errlen) {
        const RoomTable *t = &sb->host->rooms;
        for (unsigned i = 0; i < t->n; i++) {
                int r = t->v[i]->prepare ? t->v[i]->prepare(sb, bc, &p->state[i], err, errlen) : 0;
                if (r < 0) {
                        rooms_abandon(t, p);
                        return r;
                }
        }
        return 0;
}

/* Each room attaches with what it prepared, and owns it from then on. */
static int rooms_attach(SbxSandbox *sb, Prepared *p) {
        const RoomTable *t = &sb->host->rooms;
        int r = 0;
        for (unsigned i = 0; i < t->n; i++) {
                if (r == 0 && t->v[i]->attach)
                        r = t->v[i]->attach(sb, p->state[i]);
                else if (t->v[i]->abandon && p->state[i])
                        t->v[i]->abandon(p->state[i]);
                p->state[i] = NULL;
        }
        return r;
}

static int sandbox_create(SandboxHost *host, const SbxSandboxOptions *o, OciImage *img, const char *const *layers,
                          SandboxList *list, SbxSandbox **ret, char *err, size_t errlen);

/* The image o names, with what the sandbox needs of it: its layers' directories top first
 * (layers, SBX_IMAGE_MAX_LAYERS + 1 entries, malloc'd strings) and its Env before o's. */
static int image_options(SandboxHost *host, const SbxSandboxOptions *o, OciImage **ret, char **layers,
                         char ***ret_env, char *err, size_t errlen) {
        if (!host->images) {
                snprintf(err, errlen, "no image store: the daemon has none open (sbx serve --image-store DIR)");
                return -EINVAL;
        }
        OciImage *img = oci_store_find(host->images, o->image);
        if (!img) {
                snprintf(err, errlen, errno == EINVAL ? "image '%.200s' begins more than one image's id"
                                                      : "no image '%.200s' in the store (sbx image ls lists them)", o->image);
                return -EINVAL;
        }
        if (!img->bash) {
                snprintf(err, errlen, "image %.200s has no /bin/bash: sbx's sessions and commands run in bash (add "
                         "bash to the image)", o->image);
                return -EINVAL;
        }
        size_t n_env = 0, n_img = 0;
        while (o->env && o->env[n_env])
                n_env++;
        while (img->env[n_img])
                n_img++;
        char **env = calloc(n_env + n_img + 1, sizeof *env);
        if (!env)
                return -ENOMEM;
        for (size_t i = 0; i < n_img; i++)
                env[i] = img->env[i];
        for (size_t i = 0; i < n_env; i++)
                env[n_img + i] = (char *)o->env[i];
        /* A layer twice (overlay takes a directory once): the topmost has all of it. */
        size_t n = 0;
        bool failed = false;
        for (size_t i = 0; i < img->n_layers && !failed; i++) {
                char path[SBX_MAX_PATH_BYTES];
                bool twice = false;
                failed = oci_store_layer_path(host->images, img, img->n_layers - 1 - i, path, sizeof path) < 0;
                for (size_t k = 0; !failed && k < n && !twice; k++)
                        twice = strcmp(layers[k], path) == 0;
                if (!failed && !twice)
                        failed = !(layers[n++] = strdup(path));
        }
        layers[n] = NULL;
        if (failed) {
                for (size_t k = 0; k < n; k++)
                        free(layers[k]);
                layers[0] = NULL;
                free(env);
                return -ENOMEM;
        }
        *ret = img;
        *ret_env = env;
        return 0;
}

static void free_layers(char **layers) {
        for (size_t i = 0; layers[i]; i++)
                free(layers[i]);
}

int sandbox_new(SandboxHost *host, const SbxSandboxOptions *o, SandboxList *list, SbxSandbox **ret, char *err,
                size_t errlen) {
        char *layers[SBX_IMAGE_MAX_LAYERS + 1] = { NULL };
        _cleanup_free_ char **img_env = NULL;
        OciImage *img = NULL;
        SbxSandboxOptions with_image;
        int r = options_check(o, host->process, err, errlen);
        if (r == 0 && o->image) {
                r = image_options(host, o, &img, layers, &img_env, err, errlen);
                with_image = *o;
                with_image.env = (const char *const *)img_env;
                o = &with_image;
        }
        r = r < 0 ? r : sandbox_create(host, o, img, (const char *const *)layers, list, ret, err, errlen);
        free_layers(layers);
        return r;
}

static int sandbox_create(SandboxHost *host, const SbxSandboxOptions *o, OciImage *img, const char *const *layers,
                          SandboxList *list, SbxSandbox **ret, char *err, size_t errlen) {
        int r = 0;
        for (unsigned i = 0; r == 0 && i < host->rooms.n; i++)
                if (host->rooms.v[i]->check)
                        r = host->rooms.v[i]->check(o, err, errlen);
        if (r < 0)
                return r;
        err[0] = 0;
        if (!host->shared_ready) {
                r = box_shared_init(&host->shared, host->process, host->spawn_inline);
                if (r < 0) {
                        if (r == -ENOTSUP)
                                snprintf(err, errlen, "no cgroup v2 hierarchy: sbx needs one to contain commands");
                        else if (host->process && host->shared.process_base[0])
                                snprintf(err, errlen, "cannot prepare sandboxes in %s: %s%s", host->shared.process_base,
                                         strerror(-r), r == -EPERM ? " (it is not a directory of this user's)" : "");
                        else
                                snprintf(err, errlen, "cannot prepare sandboxes");
                        return r;
                }
                host->shared_ready = true;
                if (host->cpu_weight && (r = cgroup_root_set_weight(&host->shared.cg, host->cpu_weight)) < 0)
                        log_debug("the sandboxes' cpu weight stays the kernel's default: %s", strerror(-r));
        }
        if (!host->mover && (r = mover_new(host->loop, !host->move_inline, &host->mover)) < 0)
                return r;
        host->yard.mover = host->mover;
        if (o->network == SBX_NETWORK_POD && !host->podnet) {
                snprintf(err, errlen, "network \"pod\" needs the daemon's pod network (sbx serve --pod-cidr)");
                return -EINVAL;
        }
        SbxSandbox *sb = sandbox_alloc(host, o);
        if (!sb)
                return -ENOMEM;
        if (o->network == SBX_NETWORK_POD) {
                if (pod_alloc(host, &sb->pod_addr) < 0) {
                        sandbox_dealloc(sb);
                        snprintf(err, errlen, "the pod network has no free address (%u in use)",
                                 podnet_capacity(host->podnet));
                        return -ENOSPC;
                }
                podnet_ntoa(sb->pod_addr, sb->pod_ip);
        }
        if (img) {
                sb->image = img;
                oci_image_use(img);
                sb->core.image = sb->image_ref = strdup(o->image);
        }
        /* pid 1 takes its copy of the list at clone3: it is not needed after box_create(). */
        _cleanup_free_ char **env = shell_env(sb);
        if (!env) {
                sandbox_dealloc(sb);
                return -ENOMEM;
        }
        BoxConfig bc = {
                .fs_bytes = sb->core.limits.fs_bytes, .file_count = sb->core.limits.file_count,
                .memory_bytes = sb->core.limits.memory_bytes, .pids = sb->core.limits.pids,
                .cpu_millis = sb->core.limits.cpu_millis,
                .network = o->network == SBX_NETWORK_HOST, .rootfs = o->rootfs, .layers = img ? layers : NULL,
                .workdir = img && img->workdir[0] ? img->workdir : NULL, .env = env,
                .proxy_port = o->network == SBX_NETWORK_ALLOWLIST ? SBX_EGRESS_PROXY_PORT : 0,
                .policy = landlock_policy_active(&sb->policy) ? &sb->policy : NULL,
                .session_fd = -1,
        };
        /* Before pid 1, so that what rooms put into the root is in the root it builds (the
         * proxy secrets' CA certificate). */
        Prepared prep = { 0 };
        if ((r = rooms_prepare(sb, &bc, &prep, err, errlen)) < 0) {
                sandbox_dealloc(sb);
                return r;
        }
        /* The default session's shell starts with the sandbox (the pool starts one anyway,
         * and almost every sandbox runs commands there), unless it may not (options_env_fixed()). */
        int sv[2] = { -1, -1 };
        /* Not when the host preloads a library into every program: the shell starts on the
         * host's tree, where that library would run and stay loaded in the session's shells. */
        /* Nor rootless: not verified there yet. */
        if (!host->process && !host->shared.rootless && !o->rootfs && !img && !bc.policy && !bc.trust_pem && options_env_fixed(env) &&
            access("/etc/ld.so.preload", F_OK) != 0 && session_socketpair(sv) == 0)
                bc.session_fd = sv[1];
        SpawnWait *sw = calloc(1, sizeof *sw);
        r = sw ? box_create(&host->shared, &bc, &sb->core.box, err, errlen) : -ENOMEM;
        safe_close(sv[1]);
        if (r < 0) {
                free(sw);
                rooms_abandon(&host->rooms, &prep);
                safe_close(sv[0]);
                sandbox_dealloc(sb);
                return r;
        }
        /* pid 1 comes with the spawner's answers (spawn_answer()), which add its watches. */
        *sw = (SpawnWait){ .seq = sb->core.box.spawn_seq, .sb = sb, .slot = -1, .pid = -1, .pidfd = -1,
                           .process = sb->core.box.process };
        snprintf(sw->name, sizeof sw->name, "%s", sb->core.box.id);
        snprintf(sw->dir, sizeof sw->dir, "%s", sb->core.box.dir);
        sb->spawn = sw;
        if (host->spawn_tail)
                host->spawn_tail->next = sw;
        else
                host->spawn_head = sw;
        host->spawn_tail = sw;
        if ((r = spawn_watch(host)) < 0) {
                snprintf(err, errlen, "cannot hear the sandbox spawner: %s", strerror(-r));
                rooms_abandon(&host->rooms, &prep);
                safe_close(sv[0]);
                corpse_add(&host->yard, &sb->core.box);
                sandbox_dealloc(sb);
                return r;
        }
        sb->default_sock = sv[0];
        if ((r = bglog_init(&sb->core.bg, host->loop, &sb->core.box.cg)) < 0) {
                rooms_abandon(&host->rooms, &prep);
                corpse_add(&host->yard, &sb->core.box);
                sandbox_dealloc(sb);
                return r;
        }
        sb->core.bg.redact = sb->core.redact;
        if ((r = rooms_attach(sb, &prep)) < 0) {
                bglog_done(&sb->core.bg);
                corpse_add(&host->yard, &sb->core.box);
                sandbox_dealloc(sb);
                return r;
        }
        sb->setup_timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (sb->setup_timer >= 0 &&
            (loop_add(host->loop, &sb->setup_w, sb->setup_timer, EPOLLIN, setup_timeout_event, sb) < 0 ||
             /* Until the spawner's answer re-arms it, the time the create waits for the
              * spawner too (a burst's last ones wait for the others). */
             timerfd_arm_ms(sb->setup_timer, SBX_SPAWN_WAIT_MS + SBX_CREATE_TIMEOUT_MS) < 0)) {
                loop_del(host->loop, &sb->setup_w);
                sb->setup_timer = safe_close(sb->setup_timer);
        }
        list_add(list, sb);
        *ret = sb;
        return 0;
}

SbxSandbox *sbx_sandbox_free(SbxSandbox *sb) {
        if (!sb)
                return NULL;
        Loop *l = sb->core.loop;
        if (sb->core.parked) {
                /* Its box goes to the corpses parked (corpse.h): taking thousands of boxes' fds
                 * back to kill them would run out. Its sessions close without their workers'
                 * fds: the workers die with pid 1, their cgroups with the sandbox's. */
                sb->core.parked = false;
                sb->host->n_parked--;
                sb->host->parked_fds -= MIN(sb->parked_cost, sb->host->parked_fds);
                sb->parked_cost = 0;
                for (SbxSession *s = sb->sessions; s; s = s->next)
                        s->parked = false;
        }
        sb->core.dying = true;
        /* Observers first (an operation in flight fails and lets go of its runs), each
         * dropped before it is told. */
        while (sb->observers) {
                SandboxObserver *o = sb->observers;
                sb->observers = o->next;
                o->next = NULL;
                o->ops->freeing(o, sb);
        }
        while (sb->sessions)
                sbx_session_free(sb->sessions);
        /* After the sessions: a process still starting is a run of one, answered above. */
        for (unsigned i = 0; i < sb->host->rooms.n; i++)
                if (sb->host->rooms.v[i]->freeing)
                        sb->host->rooms.v[i]->freeing(&sb->core);
        if (sb->pause_done) {
                SbxPauseFn done = sb->pause_done;
                sb->pause_done = NULL;
                done(sb->pause_ud, sb, -ECANCELED);
        }
        freeze_thaw(&sb->pause);
        loop_cancel_defer(l, sb);
        loop_del(l, &sb->init_w);
        loop_del(l, &sb->ctl_w);
        loop_del(l, &sb->setup_w);
        sb->setup_timer = safe_close(sb->setup_timer);
        bglog_done(&sb->core.bg);
        corpse_add(&sb->host->yard, &sb->core.box);
        if (sb->list)
                list_remove(sb);
        sandbox_dealloc(sb);
        return NULL;
}

/* ---------------------------------------------------------------- parking */

/* The fds the daemon holds for its sandboxes, by their idle costs, plus its reserve. */
static uint64_t host_fds_estimate(const SandboxHost *h) {
        unsigned parked = MIN(h->n_parked, h->n_sandboxes);
        /* Parked ones by what each keeps (1, and 2 a session), the rest by the idle cost. */
        return (uint64_t)(h->n_sandboxes - parked) * SBX_SANDBOX_COST_FDS + h->parked_fds + h->held_fds +
               SBX_DAEMON_RESERVE_FDS;
}

int64_t sandbox_host_fds_spare(const SandboxHost *h) {
        return h->nofile ? (int64_t)h->nofile - (int64_t)host_fds_estimate(h) : INT64_MAX;
}

int64_t sbx_sandbox_fds_spare(const SbxSandbox *sb) { return sandbox_host_fds_spare(sb->host); }

unsigned sbx_sandbox_parked_count(const SbxSandbox *sb) { return sb->host->n_parked; }

static void lru_unlink(SbxSandbox *sb) {
        if (!sb->on_lru)
                return;
        SandboxHost *h = sb->host;
        if (sb->lru_prev)
                sb->lru_prev->lru_next = sb->lru_next;
        else
                h->lru_head = sb->lru_next;
        if (sb->lru_next)
                sb->lru_next->lru_prev = sb->lru_prev;
        else
                h->lru_tail = sb->lru_prev;
        sb->lru_next = sb->lru_prev = NULL;
        sb->on_lru = false;
}

/* Last in parking's order: used now. */
static void lru_use(SbxSandbox *sb) {
        SandboxHost *h = sb->host;
        lru_unlink(sb);
        sb->lru_prev = h->lru_tail;
        if (h->lru_tail)
                h->lru_tail->lru_next = sb;
        else
                h->lru_head = sb;
        h->lru_tail = sb;
        sb->on_lru = true;
        sb->lru_ms = now_ms();
}

void sbx_sandbox_touch(SbxSandbox *sb) {
        sb->park_when_retired = false;
        if (!sb->core.parked)
                lru_use(sb);
}

static int sandbox_unpark(SbxSandbox *sb) {
        if (!sb->core.parked)
                return 0;
        /* Room first: other idle sandboxes are parked, least recently used first. */
        if (sandbox_host_fds_spare(sb->host) < 2 * (int64_t)SBX_SANDBOX_COST_FDS)
                sandbox_park_for(sb->host, sb, (int64_t)SBX_PARK_HEADROOM * SBX_SANDBOX_COST_FDS);
        int r = box_unpark(&sb->core.box);
        if (r < 0 && r != -ESRCH) {
                log_warn("sandbox %s: cannot take its fds again: %s", sb->core.box.id, strerror(-r));
                return r;
        }
        sb->core.parked = false;
        sb->host->n_parked--;
        sb->host->parked_fds -= MIN(sb->parked_cost, sb->host->parked_fds);
        sb->parked_cost = 0;
        /* Woken by a request or by an event of its own: in use again, parked again once idle. */
        lru_use(sb);
        /* A pid 1 that died while parked is heard now: its pidfd is readable at once. */
        if (sb->core.box.init_pidfd >= 0)
                (void)loop_add(sb->core.loop, &sb->init_w, sb->core.box.init_pidfd, EPOLLIN, init_event, sb);
        int rs = 0;
        for (SbxSession *s = sb->sessions; s; s = s->next) {
                int k = session_unpark(s);
                if (k < 0)
                        rs = k;
        }
        return r < 0 ? r : rs;
}

static void core_unpark(SandboxCore *core) {
        if (sandbox_unpark(core->self) < 0)
                log_warn("sandbox %s: heard while parked, but its fds cannot be had again (the daemon is out of fds)",
                         core->box.id);
}

/* 0 if sb could be parked but for its sessions' states, else why not: -EPERM never here
 * (rootless, process mode), -EBUSY not now. */
static int parkable(const SbxSandbox *sb) {
        if (sb->host->shared.getfd_ok == 0 || sb->core.box.process)
                return -EPERM;
        if (sb->setup <= 0 || sb->core.dying || sb->core.paused || sb->pause_done || sb->observers || sb->core.pins ||
            sb->core.held_fds || sb->core.tree_busy || sb->core.hold_after != UINT64_MAX || sb->core.bg.pipes ||
            sb->core.bg.cgroups || sb->pod_job.pidfd >= 0 || sb->core.box.proxy_fd >= 0)
                return -EBUSY;
        return 0;
}

/* Whether every session of sb is at rest: nothing queued, no shell at work (a worker still
 * retiring counts as at rest when `retiring`). */
static bool sessions_at_rest(const SbxSandbox *sb, bool retiring) {
        for (const SbxSession *s = sb->sessions; s; s = s->next)
                if ((s->state != SS_IDLE && s->state != SS_RETIRED && !(retiring && s->state == SS_RETIRING) &&
                     s->sock >= 0) ||
                    s->current || s->queue || s->refused || s->pump_pending)
                        return false;
        return true;
}

int sbx_sandbox_park(SbxSandbox *sb) {
        if (sb->core.parked)
                return 0;
        int r = parkable(sb);
        if (r < 0)
                return r;
        if (sb->default_sock >= 0) {
                /* Never used: its default session's shell, started with the root, is taken as
                 * its first run would, and is parked with the sandbox once it is idle. */
                SbxSession *s;
                (void)sbx_session_get(sb, NULL, &s);
                return -EBUSY;
        }
        if (!sessions_at_rest(sb, false))
                return -EBUSY;
        SbxMetricsSample m;
        if (metrics_read(&sb->core, true, &m) == 0) {
                sb->core.park_fs_bytes = m.fs_bytes;
                sb->core.park_fs_files = m.fs_files;
        }
        /* Out of epoll before its fd is closed: a copy of it in a fork of the daemon (a new
         * sandbox's pid 1, a job) would keep it registered, and its events coming. */
        bool watched = sb->init_w.active;
        loop_del(sb->core.loop, &sb->init_w);
        r = box_park(&sb->host->shared, &sb->core.box);
        if (r < 0) {
                if (watched)
                        (void)loop_add(sb->core.loop, &sb->init_w, sb->core.box.init_pidfd, EPOLLIN, init_event, sb);
                return r;
        }
        unsigned cost = 1;
        for (SbxSession *s = sb->sessions; s; s = s->next)
                if (s->sock >= 0) {
                        (void)session_park(s);
                        cost += 2;
                }
        sb->core.parked = true;
        sb->parked_cost = cost;
        sb->host->n_parked++;
        sb->host->parked_fds += cost;
        lru_unlink(sb);
        return 0;
}

/* The idle workers of sb's bash sessions exit before it is parked (session_retire()): each
 * is a process with its own page tables, kernel stack and command cgroup, about a tenth of
 * what an idle sandbox costs, and the first run after it wakes forks another. Returns how
 * many are retiring (0: none to wait for). */
static unsigned retire_workers(SbxSandbox *sb) {
        /* Not parked now anyway: its workers stay. */
        if (sb->core.parked || parkable(sb) < 0 || sb->default_sock >= 0 || !sessions_at_rest(sb, true))
                return 0;
        unsigned n = 0;
        for (SbxSession *s = sb->sessions; s; s = s->next) {
                /* Still retiring a sweep later: its worker does not read (stopped from inside,
                 * say). Killed; its holder forks the next as after any death, and the word it
                 * never read is dropped by that one (it names the dead worker). */
                if (s->state == SS_RETIRING) {
                        session_hurry_retire(s);
                        n++;
                } else if (session_retire(s) == 0) {
                        n++;
                }
        }
        return n;
}

static void core_retired(SandboxCore *core) {
        SbxSandbox *sb = core->self;
        if (!sb->park_when_retired)
                return;
        for (SbxSession *s = sb->sessions; s; s = s->next)
                if (s->state == SS_RETIRING)
                        return;
        sb->park_when_retired = false;
        if (sbx_sandbox_park(sb) < 0)
                lru_use(sb);
}

unsigned sandbox_park_idle(SandboxHost *h, uint64_t idle_ms) {
        uint64_t now = now_ms();
        unsigned n = 0, seen = 0;
        /* Each sandbox is looked at once per idle_ms at most: one in use goes last again (its
         * time then is past `now`, which ends the walk), and one sweep does a bounded share. */
        for (SbxSandbox *sb; (sb = h->lru_head) && sb->lru_ms <= now && now - sb->lru_ms >= idle_ms &&
                             seen < SBX_PARK_SWEEP_MAX;
             seen++) {
                if (retire_workers(sb) > 0) {
                        /* Parked when the last worker is gone (core_retired()); looked at
                         * again after idle_ms if that never comes. */
                        lru_use(sb);
                        sb->park_when_retired = true;
                        continue;
                }
                int r = sbx_sandbox_park(sb);
                if (r < 0)
                        lru_use(sb);
                else
                        n++;
                if (r == -EPERM && h->shared.getfd_ok == 0)
                        break;
        }
        return n;
}

void sandbox_park_for(SandboxHost *h, const SbxSandbox *keep, int64_t want) {
        /* Least recently used first, at most once each. */
        SbxSandbox *last = h->lru_tail;
        for (SbxSandbox *sb = h->lru_head, *next; sb && sandbox_host_fds_spare(h) < want; sb = next) {
                next = sb == last ? NULL : sb->lru_next;
                if (sb == keep)
                        continue;
                if (sbx_sandbox_park(sb) == -EPERM && h->shared.getfd_ok == 0)
                        return;
        }
}

int sbx_sandbox_unpark(SbxSandbox *sb) { return sandbox_unpark(sb); }

bool sbx_sandbox_parked(const SbxSandbox *sb) { return sb->core.parked; }

void sandbox_pin(SbxSandbox *sb) {
        (void)sandbox_unpark(sb);
        sb->core.pins++;
}

void sandbox_unpin(SbxSandbox *sb) {
        if (sb->core.pins)
                sb->core.pins--;
}

/* n more fds held by the daemon, if its limit leaves room for them beyond every sandbox's
 * idle cost and the reserve. */
static int host_fds_hold(SandboxHost *h, unsigned n) {
        uint64_t keep = host_fds_estimate(h) - h->held_fds;
        if (h->nofile && h->held_fds + n + keep > h->nofile)
                return -ENFILE;
        h->held_fds += n;
        return 0;
}

int sandbox_fds_take(SbxSandbox *sb, unsigned n) {
        if (sb->core.held_fds + n > SBX_MAX_SANDBOX_HELD_FDS)
                return -EMFILE;
        int r = host_fds_hold(sb->host, n);
        if (r == 0)
                sb->core.held_fds += n;
        return r;
}

void sandbox_fds_give(SbxSandbox *sb, unsigned n) {
        sb->core.held_fds -= MIN(n, sb->core.held_fds);
        sb->host->held_fds -= MIN(n, sb->host->held_fds);
}

int sandbox_fds_keep(SbxSandbox *sb, unsigned n) {
        if (sb->kept_fds + n > SBX_MAX_SANDBOX_HELD_FDS)
                return -EMFILE;
        int r = host_fds_hold(sb->host, n);
        if (r == 0)
                sb->kept_fds += n;
        return r;
}

void sandbox_fds_unkeep(SbxSandbox *sb, unsigned n) {
        n = MIN(n, sb->kept_fds);
        sb->kept_fds -= n;
        sb->host->held_fds -= MIN(n, sb->host->held_fds);
}

unsigned sbx_sandbox_kill_background(SbxSandbox *sb) {
        unsigned n = 0;
        for (unsigned i = 0; i < sb->host->rooms.n; i++)
                if (sb->host->rooms.v[i]->kill_all)
                        n += sb->host->rooms.v[i]->kill_all(&sb->core);
        return n + bglog_kill(&sb->core.bg);
}

bool sandbox_is_default(const SbxSandbox *sb) {
        SbxLimits l = { 0 };
        options_fill_limits(&l);
        char **want = options_build_env((const char *const *)sb->host->base_env, NULL, false, false);
        size_t n = 0;
        bool same_env = want != NULL;
        for (; same_env && sb->env[n] && want[n]; n++)
                same_env = strcmp(sb->env[n], want[n]) == 0;
        same_env = same_env && !sb->env[n] && !want[n];
        options_free_list(want);
        return same_env && !sb->secrets && memcmp(&l, &sb->core.limits, sizeof l) == 0 &&
               sb->core.timeout_ms == SBX_DEFAULT_TIMEOUT_MS && sb->network == SBX_NETWORK_NONE && !sb->rootfs && !sb->image &&
               !sb->core.kill_leftovers && !sb->policy_allow && !sb->policy_deny;
}

void sandbox_options(const SbxSandbox *sb, SbxSandboxOptions *ret) {
        sbx_sandbox_options_init(ret);
        ret->limits = sb->core.limits;
        ret->timeout_ms = sb->core.timeout_ms;
        ret->env = (const char *const *)sb->env;
        ret->network = sb->network;
        /* An allowlist sandbox's list, even when empty (which NULL would say otherwise). */
        static const char *const none[] = { NULL };
        ret->network_allow = sb->network_allow ? (const char *const *)sb->network_allow
                             : sb->network == SBX_NETWORK_ALLOWLIST ? none : NULL;
        ret->rootfs = sb->rootfs;
        ret->image = sb->image ? sb->image->id : NULL;
        ret->kill_leftovers = sb->core.kill_leftovers;
        ret->policy_allow = (const char *const *)sb->policy_allow;
        ret->policy_deny = (const char *const *)sb->policy_deny;
        ret->secrets = (const char *const *)sb->secrets;
        /* With their placeholders: a sandbox made like this one (a fork) names the same. */
        ret->proxy_secrets = sb->psec;
        ret->n_proxy_secrets = sb->n_psec;
        /* Process mode's were never chosen (it refuses them): a sandbox like this one is made
         * with the defaults again. */
        if (sb->host->process)
                ret->limits.fs_bytes = ret->limits.file_count = 0;
}

char *sbx_sandbox_redact(const SbxSandbox *sb, const void *data, size_t len, size_t *ret_len) {
        char *out = NULL;
        return redact_text(sb->core.redact, data, len, &out, ret_len) < 0 ? NULL : out;
}

const char *sbx_sandbox_setup_error(const SbxSandbox *sb) { return sb->core.setup_error; }

struct OciImage *sandbox_image(const SbxSandbox *sb) { return sb->image; }
SbxSandbox *sandbox_list_next(const SbxSandbox *sb) { return sb->next; }

SandboxHost *sandbox_host(const SbxSandbox *sb) { return sb->host; }
SandboxCore *sandbox_core(SbxSandbox *sb) { return &sb->core; }
int sandbox_setup_state(const SbxSandbox *sb) { return sb->setup; }
const Box *sandbox_box(const SbxSandbox *sb) { return &sb->core.box; }

int sandbox_snap_store(SbxSandbox *sb) { return box_snap_store(&sb->core.box); }
Loop *sandbox_loop(const SbxSandbox *sb) { return sb->core.loop; }
uint64_t sandbox_timeout_ms(const SbxSandbox *sb) { return sb->core.timeout_ms; }
uint64_t sandbox_run_order(const SbxSandbox *sb) { return sb->core.run_order; }

void sandbox_hold_runs(SbxSandbox *sb, uint64_t after) {
        bool lifted = after > sb->core.hold_after;
        sb->core.hold_after = after;
        if (lifted)
                for (SbxSession *s = sb->sessions; s; s = s->next)
                        run_pump_later(s);
}

void sandbox_set_tree_busy(SbxSandbox *sb, bool busy) { sb->core.tree_busy = busy; }
void sandbox_set_writable_dev(SbxSandbox *sb, dev_t dev) { sb->core.box.writable_dev = dev; }
bool sandbox_tree_busy(const SbxSandbox *sb) { return sb->core.tree_busy; }
bool sandbox_dying(const SbxSandbox *sb) { return sb->core.dying; }
unsigned *sandbox_freeze_holds(SbxSandbox *sb) { return &sb->core.freeze_holds; }

static void pause_frozen(Freeze *f) {
        SbxSandbox *sb = container_of(f, SbxSandbox, pause);
        SbxPauseFn done = sb->pause_done;
        sb->pause_done = NULL;
        if (!f->still) {
                /* A pause that may not hold is none: the caller is told and nothing stays asked. */
                freeze_thaw(f);
                sb->core.paused = false;
                for (SbxSession *s = sb->sessions; s; s = s->next)
                        run_pump_later(s);
        }
        done(sb->pause_ud, sb, f->still ? 0 : -ETIMEDOUT);
}

int sbx_sandbox_pause(SbxSandbox *sb, SbxPauseFn done, void *userdata) {
        if (sb->core.paused)
                return -EALREADY;
        if (sb->setup <= 0 || sb->core.dying)
                return -EAGAIN;
        freeze_init(&sb->pause);
        sb->core.paused = true;
        sb->pause_done = done;
        sb->pause_ud = userdata;
        if (freeze_start(&sb->pause, sb->core.loop, sb->core.box.cg.dir, &sb->core.freeze_holds, sb->core.box.id,
                         pause_frozen) == 0)
                return 0;
        sb->pause_done = NULL;
        if (!sb->pause.still) {
                freeze_thaw(&sb->pause);
                sb->core.paused = false;
                return -ENOTSUP;
        }
        return 1;
}

int sbx_sandbox_resume(SbxSandbox *sb) {
        if (!sb->core.paused)
                return -EALREADY;
        if (sb->pause_done)
                return -EBUSY;
        freeze_thaw(&sb->pause);
        sb->core.paused = false;
        for (SbxSession *s = sb->sessions; s; s = s->next)
                run_pump_later(s);
        return 0;
}

bool sbx_sandbox_paused(const SbxSandbox *sb) { return sb->core.paused; }

/* ---------------------------------------------------------------- public */

const char *sbx_sandbox_id(const SbxSandbox *sb) { return sb->core.box.id; }
const char *sbx_sandbox_address(const SbxSandbox *sb) { return sb->pod_addr ? sb->pod_ip : NULL; }
const SbxLimits *sbx_sandbox_limits(const SbxSandbox *sb) { return &sb->core.limits; }
int sbx_sandbox_init_pid(const SbxSandbox *sb) { return sb->core.box.init_pid; }

bool sbx_sandbox_gone(const SbxSandbox *sb) { return sb->core.dying; }

int sbx_sandbox_sample(SbxSandbox *sb, SbxMetricsSample *ret) { return metrics_read(&sb->core, false, ret); }

int sbx_sandbox_last_sample(const SbxSandbox *sb, SbxMetricsSample *ret) {
        return metrics_last(&sb->core.metrics, ret);
}

size_t sbx_sandbox_metrics(const SbxSandbox *sb, uint64_t start_ms, uint64_t end_ms, SbxMetricsSample *out,
                           size_t max) {
        return metrics_query(&sb->core.metrics, start_ms, end_ms, out, max);
}
bool sbx_sandbox_ready(const SbxSandbox *sb) { return sb->setup > 0; }


size_t sbx_sandbox_background_log(const SbxSandbox *sb, uint8_t *buf, size_t size) {
        return bglog_copy(&sb->core.bg, buf, size);
}

/* sbx_sandbox_on_ready()'s observer: told once, then gone. */
typedef struct ReadyCall {
        SandboxObserver o; /* first */
        SbxSandbox *sb;
        SbxReadyFn fn;
        void *ud;
} ReadyCall;

static void ready_call_fire(ReadyCall *c, int error) {
        SbxReadyFn fn = c->fn;
        void *ud = c->ud;
        SbxSandbox *sb = c->sb;
        free(c);
        fn(ud, sb, error);
}

static void ready_call_ready(SandboxObserver *o, SbxSandbox *sb, int error) {
        sandbox_unobserve(sb, o);
        ready_call_fire((ReadyCall *)o, error);
}

static void ready_call_freeing(SandboxObserver *o, SbxSandbox *sb) {
        ready_call_fire((ReadyCall *)o, -ECANCELED);
}

static const SandboxObserverOps ready_call_ops = { ready_call_ready, ready_call_freeing };

int sbx_sandbox_on_ready(SbxSandbox *sb, SbxReadyFn fn, void *ud) {
        if (!fn)
                return -EINVAL;
        ReadyCall *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        *c = (ReadyCall){ .sb = sb, .fn = fn, .ud = ud };
        sandbox_observe(sb, &c->o, &ready_call_ops);
        return 0;
}

/* ---------------------------------------------------------------- sessions */

SbxSession *sbx_session_find_shell(SbxSandbox *sb, const char *name, SbxShell shell) {
        if (!name)
                name = "default";
        for (SbxSession *s = sb->sessions; s; s = s->next)
                if (s->shell == shell && strcmp(s->name, name) == 0)
                        return s;
        return NULL;
}

SbxSession *sbx_session_find(SbxSandbox *sb, const char *name) { return sbx_session_find_shell(sb, name, SBX_SHELL_BASH); }

/* A new session of that shell and name, its shell started. */
static int session_new(SbxSandbox *sb, const char *name, SbxShell shell, SbxSession **ret) {
        if (sb->n_sessions >= SBX_MAX_SESSIONS)
                return -EMFILE;
        SbxSession *s = calloc(1, sizeof *s);
        if (!s || !(s->name = strdup(name))) {
                free(s);
                return -ENOMEM;
        }
        session_init(s, sb, &sb->core, &run_session_hooks);
        s->shell = shell;
        int r = shell == SBX_SHELL_BASH && strcmp(name, "default") == 0 && sb->default_sock >= 0
                        ? session_adopt_shell(s, TAKE_FD(sb->default_sock))
                        : session_start_shell(s);
        if (r < 0) {
                free(s->name);
                free(s);
                return r;
        }
        LIST_LINK(sb->sessions, s);
        sb->n_sessions++;
        *ret = s;
        return 0;
}

int sbx_session_get(SbxSandbox *sb, const char *name, SbxSession **ret) {
        if (!name)
                name = "default";
        if (!name_valid(name, SBX_MAX_SESSION_NAME_BYTES))
                return -EINVAL;
        SbxSession *s = sbx_session_find(sb, name);
        if (s) {
                *ret = s;
                return 0;
        }
        return session_new(sb, name, SBX_SHELL_BASH, ret);
}

int sbx_session_new_shell(SbxSandbox *sb, const char *name, SbxShell shell, SbxSession **ret) {
        if (!name || !name_valid(name, SBX_MAX_SESSION_NAME_BYTES) || (shell != SBX_SHELL_PYTHON && shell != SBX_SHELL_JAVASCRIPT))
                return -EINVAL;
        if (sbx_session_find_shell(sb, name, shell))
                return -EEXIST;
        return session_new(sb, name, shell, ret);
}

SbxShell sbx_session_shell(const SbxSession *s) { return s->shell; }
uint64_t sbx_session_losses(const SbxSession *s) { return s->losses; }

const char *sbx_session_name(const SbxSession *s) { return s->name; }

unsigned sbx_session_runs(const SbxSession *s) { return s->n_queued + (s->current != NULL); }

unsigned sbx_session_queued(const SbxSession *s) {
        unsigned n = 0;
        for (const SbxRun *r = s->queue; r; r = r->next)
                n += !r->internal;
        return n;
}

const char *sbx_session_current(const SbxSession *s, uint64_t *ret_ms) {
        const SbxRun *r = s->current;
        if (!r || r->internal || !r->command)
                return NULL;
        *ret_ms = (now_ns() - r->t_start) / 1000000ULL;
        return r->command;
}

SbxSession *sbx_session_next(SbxSandbox *sb, SbxSession *prev) {
        SbxSession *s = prev ? prev->next : sb->sessions;
        while (s && s->shell != SBX_SHELL_BASH)
                s = s->next;
        return s;
}

SbxSession *sbx_session_free(SbxSession *s) {
        if (!s)
                return NULL;
        SbxSandbox *sb = s->sb;
        run_cancel_all(s);
        session_close_shell(s);
        LIST_UNLINK(sb->sessions, s);
        sb->n_sessions--;
        free(s->name);
        free(s);
        return NULL;
}
