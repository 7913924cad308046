/* SPDX-License-Identifier: MIT */
/* Sandboxes: options, creation and freeing, the sessions of each, its readiness (told to
 * observers from the loop, never waited for) and its background log. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/list.h"
#include "base/log.h"
#include "base/redact.h"
#include "base/util.h"
#include "sandbox/mount.h"
#include "sandbox/mover.h"
#include "session/egress.h"
#include "session/egress_tls.h"
#include "session/freeze.h"
#include "session/internal.h"
#include "session/process.h"
#include "session/run.h"
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
        char **policy_allow, **policy_deny; /* NULL when empty; `policy` points to them */
        LandlockPolicy policy;
        char setup_error[512]; /* why pid 1's setup failed, as it said */
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
};

static const char *const default_env[] = {
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME=/home/user", "USER=user", "LOGNAME=user", "LANG=C.UTF-8", "TERM=dumb",
        "PAGER=cat", "GIT_PAGER=cat", "SHELL=/bin/bash", "HOSTNAME=sandbox",
};

void sbx_sandbox_options_init(SbxSandboxOptions *o) { *o = (SbxSandboxOptions){ 0 }; }

/* The CPUs a sandbox may ask for at most, and whose share its default is. */
static uint32_t host_cpus(void) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        return n > 0 ? (uint32_t)MIN(n, 1L << 20) : 1;
}

static void fill_limits(SbxLimits *l) {
        if (!l->stdout_bytes) l->stdout_bytes = SBX_DEFAULT_STDOUT_BYTES;
        if (!l->stderr_bytes) l->stderr_bytes = SBX_DEFAULT_STDERR_BYTES;
        if (!l->command_bytes) l->command_bytes = SBX_DEFAULT_COMMAND_BYTES;
        if (!l->fs_bytes) l->fs_bytes = SBX_DEFAULT_FS_BYTES;
        if (!l->file_count) l->file_count = SBX_DEFAULT_FILE_COUNT;
        if (!l->memory_bytes) l->memory_bytes = SBX_DEFAULT_MEMORY_BYTES;
        if (!l->pids) l->pids = SBX_DEFAULT_PIDS;
        if (!l->cpu_millis) l->cpu_millis = (uint32_t)((uint64_t)host_cpus() * 1000 * SBX_DEFAULT_CPU_PERCENT_OF_HOST / 100);
}

static void free_env(char **env) {
        for (char **e = env; e && *e; e++)
                free(*e);
        free(env);
}

/* A copy of a NULL-terminated list; NULL for an empty one. Returns -ENOMEM on failure. */
static int copy_list(const char *const *l, char ***ret) {
        size_t n = 0;
        *ret = NULL;
        while (l && l[n])
                n++;
        if (!n)
                return 0;
        char **c = calloc(n + 1, sizeof *c);
        if (!c)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                if (!(c[i] = strdup(l[i]))) {
                        free_env(c);
                        return -ENOMEM;
                }
        *ret = c;
        return 0;
}

/* Secrets do not stay in freed memory. */
static void free_secrets(char **v) {
        for (char **e = v; e && *e; e++) {
                explicit_bzero(*e, strlen(*e));
                free(*e);
        }
        free(v);
}

/* A copy of the secrets, wiped when freed; NULL when out of memory. */
static char **copy_secrets(const char *const *v) {
        size_t n = 0;
        for (const char *const *e = v; e && *e; e++)
                n++;
        char **c = calloc(n + 1, sizeof *c);
        for (size_t i = 0; c && i < n; i++)
                if (!(c[i] = strdup(v[i]))) {
                        free_secrets(c);
                        return NULL;
                }
        return c;
}

static void free_proxy_secrets(SbxProxySecret *v, size_t n) {
        for (size_t i = 0; v && i < n; i++) {
                if (v[i].value)
                        explicit_bzero((char *)v[i].value, strlen(v[i].value));
                free((char *)v[i].value);
                free((char *)v[i].name);
                free((char *)v[i].placeholder);
                free_env((char **)v[i].hosts);
        }
        free(v);
}

/* Copies of the proxy secrets, each with its placeholder: the one given (a fork's parent's),
 * else SBX_SECRET_<NAME>_<random hex>. Returns 0 or -ENOMEM. */
static int copy_proxy_secrets(const SbxProxySecret *v, size_t n, SbxProxySecret **ret) {
        SbxProxySecret *c = calloc(n, sizeof *c);
        if (!c)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                char ph[12 + SBX_MAX_SECRET_NAME_BYTES + 2 * SBX_SECRET_PLACEHOLDER_RANDOM_BYTES + 2];
                char hex[2 * SBX_SECRET_PLACEHOLDER_RANDOM_BYTES + 1];
                if (!v[i].placeholder && random_hex(hex, SBX_SECRET_PLACEHOLDER_RANDOM_BYTES) < 0) {
                        free_proxy_secrets(c, i);
                        return -EIO;
                }
                if (!v[i].placeholder)
                        snprintf(ph, sizeof ph, "SBX_SECRET_%s_%s", v[i].name, hex);
                char **hosts = NULL;
                c[i] = (SbxProxySecret){ .name = strdup(v[i].name), .value = strdup(v[i].value),
                                         .placeholder = strdup(v[i].placeholder ? v[i].placeholder : ph) };
                int r = copy_list(v[i].hosts, &hosts);
                c[i].hosts = (const char *const *)hosts;
                if (r < 0 || !c[i].name || !c[i].value || !c[i].placeholder) {
                        free_proxy_secrets(c, i + 1);
                        return -ENOMEM;
                }
        }
        *ret = c;
        return 0;
}

/* NAME=placeholder for each proxy secret; NAME=VALUE too when `value` (for the redactor,
 * wiped by free_secrets()). NULL when out of memory. */
static char **proxy_secret_pairs(const SbxProxySecret *v, size_t n, bool value) {
        char **l = calloc(n + 1, sizeof *l);
        for (size_t i = 0; l && i < n; i++)
                if (asprintf(&l[i], "%s=%s", v[i].name, value ? v[i].value : v[i].placeholder) < 0) {
                        l[i] = NULL;
                        free_secrets(l);
                        return NULL;
                }
        return l;
}

/* An allowlist sandbox's way out: its proxy, for the clients that read these (curl, pip, npm,
 * git, python's urllib), and not for its own loopback. */
#define PROXY_URL "http://127.0.0.1:3128"
_Static_assert(SBX_EGRESS_PROXY_PORT == 3128, "PROXY_URL names the proxy's port");
static const char *const proxy_env[] = {
        "HTTP_PROXY=" PROXY_URL, "HTTPS_PROXY=" PROXY_URL, "http_proxy=" PROXY_URL, "https_proxy=" PROXY_URL,
        "NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
};

/* A sandbox with proxy secrets trusts its own CA: every client that reads one of these finds
 * the bundle that holds it (mount.c adds it to the host's). Node adds its file to its own. */
static const char *const trust_env[] = {
        "SSL_CERT_FILE=" SBX_TRUST_BUNDLE, "REQUESTS_CA_BUNDLE=" SBX_TRUST_BUNDLE, "CURL_CA_BUNDLE=" SBX_TRUST_BUNDLE,
        "PIP_CERT=" SBX_TRUST_BUNDLE, "GIT_SSL_CAINFO=" SBX_TRUST_BUNDLE, "NODE_EXTRA_CA_CERTS=" SBX_TRUST_CA,
};

/* The session shells' environment: the fixed defaults (and an allowlist sandbox's proxy, and
 * a sandbox with proxy secrets' trust store), then the context's entries (sbx_context_set_env()), then the caller's (a name given again
 * replaces the one before). That is all: pid 1 is a fork of the daemon, but it starts every
 * shell with execve() and exactly this list, so nothing else of the daemon's own environment
 * reaches a sandbox. */
static char **build_env(const char *const *base, const char *const *extra, bool proxy, bool trust) {
        size_t n = ELEMENTSOF(default_env) + (proxy ? ELEMENTSOF(proxy_env) : 0) + (trust ? ELEMENTSOF(trust_env) : 0),
               k = 0;
        for (const char *const *e = base; e && *e; e++)
                n++;
        for (const char *const *e = extra; e && *e; e++)
                n++;
        char **env = calloc(n + 1, sizeof *env);
        if (!env)
                return NULL;
        for (size_t i = 0; i < ELEMENTSOF(default_env); i++)
                env[k++] = strdup(default_env[i]);
        for (size_t i = 0; proxy && i < ELEMENTSOF(proxy_env); i++)
                env[k++] = strdup(proxy_env[i]);
        for (size_t i = 0; trust && i < ELEMENTSOF(trust_env); i++)
                env[k++] = strdup(trust_env[i]);
        for (size_t pass = 0; pass < 2; pass++) {
                for (const char *const *e = pass ? extra : base; e && *e; e++) {
                        size_t name_len = (size_t)(strchr(*e, '=') - *e) + 1;
                        size_t j;
                        for (j = 0; j < k; j++)
                                if (env[j] && strncmp(env[j], *e, name_len) == 0)
                                        break;
                        if (j < k)
                                free(env[j]);
                        env[j] = strdup(*e);
                        if (j == k)
                                k++;
                }
        }
        for (size_t i = 0; i < k; i++)
                if (!env[i]) {
                        env[k] = NULL;
                        for (size_t j = 0; j < k; j++)
                                free(env[j]);
                        free(env);
                        return NULL;
                }
        return env;
}

/* Secrets: each NAME=VALUE within the limits, no NAME twice nor also in env. Words never
 * show a value. Returns 0 or -EINVAL with err. */
static int validate_secrets(const SbxSandboxOptions *o, char *err, size_t errlen) {
        size_t n = 0;
        for (const char *const *e = o->secrets; e && *e; e++, n++) {
                const char *eq = strchr(*e, '=');
                size_t nl = eq ? (size_t)(eq - *e) : 0;
                if (n >= SBX_MAX_SECRETS) {
                        snprintf(err, errlen, "more than %u secrets", SBX_MAX_SECRETS);
                        return -EINVAL;
                }
                if (!eq || !env_name_valid(*e, nl) || nl > SBX_MAX_SECRET_NAME_BYTES) {
                        snprintf(err, errlen, "a secret's name must be 1-%u letters, digits and _, not starting with a "
                                              "digit", SBX_MAX_SECRET_NAME_BYTES);
                        return -EINVAL;
                }
                if (strlen(eq + 1) > SBX_MAX_SECRET_BYTES) {
                        snprintf(err, errlen, "secret %.*s is longer than %u bytes", (int)nl, *e, SBX_MAX_SECRET_BYTES);
                        return -EINVAL;
                }
                for (const char *const *f = o->secrets; f < e; f++)
                        if (strncmp(*f, *e, nl + 1) == 0) {
                                snprintf(err, errlen, "secret %.*s is given twice", (int)nl, *e);
                                return -EINVAL;
                        }
                for (const char *const *f = o->env; f && *f; f++)
                        if (strncmp(*f, *e, nl + 1) == 0) {
                                snprintf(err, errlen, "%.*s is both a secret and in env", (int)nl, *e);
                                return -EINVAL;
                        }
        }
        return 0;
}

/* A given placeholder: what a made one looks like, so that the proxy finds it. */
static bool placeholder_valid(const char *p) {
        size_t len = strlen(p);
        return len > 11 && len <= SBX_MAX_SECRET_NAME_BYTES + 12 + 2 * SBX_SECRET_PLACEHOLDER_RANDOM_BYTES &&
               strncmp(p, "SBX_SECRET_", 11) == 0 && env_name_valid(p, len);
}

/* Proxy secrets: an allowlist sandbox's, each named once among all secrets and env, with a
 * value, hosts that are patterns, and a placeholder of the form made. Returns 0 or -EINVAL. */
static int validate_proxy_secrets(const SbxSandboxOptions *o, char *err, size_t errlen) {
        size_t n_env = 0;
        for (const char *const *e = o->secrets; e && *e; e++)
                n_env++;
        if (o->n_proxy_secrets && o->network != SBX_NETWORK_ALLOWLIST) {
                snprintf(err, errlen, "secrets with hosts (mode \"proxy\") need network \"allowlist\": the proxy puts "
                                      "their values into requests");
                return -EINVAL;
        }
        if (o->n_proxy_secrets > SBX_MAX_SECRETS - MIN(n_env, (size_t)SBX_MAX_SECRETS)) {
                snprintf(err, errlen, "more than %u secrets", SBX_MAX_SECRETS);
                return -EINVAL;
        }
        for (size_t i = 0; i < o->n_proxy_secrets; i++) {
                const SbxProxySecret *p = &o->proxy_secrets[i];
                size_t nl = p->name ? strlen(p->name) : 0, nh = 0;
                if (!p->name || !env_name_valid(p->name, nl) || nl > SBX_MAX_SECRET_NAME_BYTES) {
                        snprintf(err, errlen, "a secret's name must be 1-%u letters, digits and _, not starting with a "
                                              "digit", SBX_MAX_SECRET_NAME_BYTES);
                        return -EINVAL;
                }
                /* It goes into a header line: a line break would make headers of its own. */
                if (!p->value || !p->value[0] || strlen(p->value) > SBX_MAX_SECRET_BYTES ||
                    strpbrk(p->value, "\r\n")) {
                        snprintf(err, errlen, "secret %s: the value must be 1-%u bytes, without CR or LF (it goes "
                                              "into a request's header)", p->name, SBX_MAX_SECRET_BYTES);
                        return -EINVAL;
                }
                while (p->hosts && p->hosts[nh])
                        nh++;
                if (nh == 0 || nh > SBX_MAX_SECRET_HOSTS) {
                        snprintf(err, errlen, "secret %s: hosts must list 1-%u patterns", p->name, SBX_MAX_SECRET_HOSTS);
                        return -EINVAL;
                }
                EgressRules rules;
                char why[256];
                if (egress_rules_parse(p->hosts, &rules, why, sizeof why) < 0) {
                        snprintf(err, errlen, "secret %s: hosts: %s", p->name, why);
                        return -EINVAL;
                }
                egress_rules_clear(&rules);
                if (p->placeholder && !placeholder_valid(p->placeholder)) {
                        snprintf(err, errlen, "secret %s: a placeholder must be SBX_SECRET_ and letters, digits and _",
                                 p->name);
                        return -EINVAL;
                }
                bool twice = false;
                for (size_t j = 0; j < i && !twice; j++)
                        twice = strcmp(o->proxy_secrets[j].name, p->name) == 0;
                for (const char *const *e = o->secrets; e && *e && !twice; e++)
                        twice = strncmp(*e, p->name, nl) == 0 && (*e)[nl] == '=';
                for (const char *const *e = o->env; e && *e && !twice; e++)
                        twice = strncmp(*e, p->name, nl) == 0 && (*e)[nl] == '=';
                if (twice) {
                        snprintf(err, errlen, "secret %s is given twice (or is also in env)", p->name);
                        return -EINVAL;
                }
        }
        return 0;
}

/* What process mode (sandbox/plain.h) cannot do, refused rather than left undone. Returns
 * 0, or -EINVAL with err saying what and why. */
static int validate_process_mode(const SbxSandboxOptions *o, char *err, size_t errlen) {
        const char *what = o->rootfs ? "rootfs (there is no mount namespace to put it in)"
                         : o->limits.fs_bytes ? "limits.fs_bytes (the sandbox's files are a directory of the host: no "
                                                "tmpfs bounds them)"
                         : o->limits.file_count ? "limits.file_count (the sandbox's files are a directory of the host: "
                                                  "no tmpfs bounds them)"
                         : (o->policy_allow && o->policy_allow[0]) || (o->policy_deny && o->policy_deny[0])
                                 ? "an exec policy (its patterns name the files of a private root, which this mode has "
                                   "not)"
                         : o->network == SBX_NETWORK_ALLOWLIST
                                 ? "network \"allowlist\" (no network namespace keeps commands to the proxy)"
                                 : NULL;
        if (!what)
                return 0;
        snprintf(err, errlen, "%s cannot be honoured in process mode (sbx serve --mode process): leave it out, or use "
                              "--mode namespaces", what);
        return -EINVAL;
}

/* Returns 0, or -EINVAL with err saying what is wrong. */
static int validate_options(const SbxSandboxOptions *o, char *err, size_t errlen) {
        const SbxLimits *l = &o->limits;
        /* 0 is "the default" here; anything else must be within its rule. */
        const struct {
                SbxLimitId id;
                uint64_t v;
                const char *name;
        } given[] = {
                { SBX_LIMIT_STDOUT, l->stdout_bytes, "limits.stdout_bytes" },
                { SBX_LIMIT_STDERR, l->stderr_bytes, "limits.stderr_bytes" },
                { SBX_LIMIT_COMMAND, l->command_bytes, "limits.command_bytes" },
                { SBX_LIMIT_FS, l->fs_bytes, "limits.fs_bytes" },
                { SBX_LIMIT_FILES, l->file_count, "limits.file_count" },
                { SBX_LIMIT_MEMORY, l->memory_bytes, "limits.memory_bytes" },
                { SBX_LIMIT_PIDS, l->pids, "limits.pids" },
                { SBX_LIMIT_CPU, l->cpu_millis, "limits.cpu_millis" },
                { SBX_LIMIT_TIMEOUT, o->timeout_ms, "timeout_ms" },
        };
        for (size_t i = 0; i < ELEMENTSOF(given); i++)
                if (given[i].v && sbx_limit_check(given[i].id, given[i].v, given[i].name, err, errlen) < 0)
                        return -EINVAL;
        for (const char *const *e = o->env; e && *e; e++) {
                const char *eq = strchr(*e, '=');
                if (!eq || !env_name_valid(*e, (size_t)(eq - *e))) {
                        snprintf(err, errlen, "env entry '%.64s' is not NAME=VALUE with NAME of letters, digits and _ "
                                              "(not starting with a digit)", *e);
                        return -EINVAL;
                }
        }
        if ((unsigned)o->network > SBX_NETWORK_ALLOWLIST) {
                snprintf(err, errlen, "network must be none, host or allowlist");
                return -EINVAL;
        }
        if (o->network_allow && o->network != SBX_NETWORK_ALLOWLIST) {
                snprintf(err, errlen, "networkAllow is only for network \"allowlist\"");
                return -EINVAL;
        }
        if (o->network == SBX_NETWORK_ALLOWLIST) {
                EgressRules rules;
                int er = egress_rules_parse(o->network_allow, &rules, err, errlen);
                if (er < 0)
                        return er;
                egress_rules_clear(&rules);
        }
        LandlockPolicy lp = { .allow = o->policy_allow, .deny = o->policy_deny, .connect_port = -1 };
        int r = landlock_policy_check(&lp, err, errlen);
        if (r >= 0)
                r = validate_secrets(o, err, errlen);
        if (r >= 0)
                r = validate_proxy_secrets(o, err, errlen);
        if (r < 0)
                return r;
        if (o->rootfs) {
                struct stat st;
                char bash[SBX_MAX_PATH_BYTES];
                snprintf(bash, sizeof bash, "%s/bin/bash", o->rootfs);
                if (o->rootfs[0] != '/' || stat(o->rootfs, &st) < 0 || !S_ISDIR(st.st_mode) || access(bash, X_OK) < 0) {
                        snprintf(err, errlen, "rootfs must be an absolute path to a directory with bin/bash; got '%.200s'",
                                 o->rootfs);
                        return -EINVAL;
                }
        }
        return 0;
}

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

static void init_event(Watch *w, uint32_t events) {
        SbxSandbox *sb = w->data;
        /* pid 1 died (OOM killer, or it was killed from outside): every process of the
         * sandbox is gone with it. Sessions answer their runs and stop restarting. */
        log_warn("sandbox %s: init exited", sb->core.box.id);
        loop_del(sb->core.loop, &sb->init_w);
        loop_del(sb->core.loop, &sb->ctl_w);
        /* Process mode: no pid namespace ended with it, so the same is done here. */
        if (sb->core.box.process && sb->core.box.cg.dir >= 0)
                (void)cgroup_kill(sb->core.box.cg.dir);
        if (sb->list && sb->list->reap_dead) {
                sbx_sandbox_free(sb);
                return;
        }
        sb->core.dying = true;
        for (SbxSession *s = sb->sessions; s; s = s->next)
                session_lose(s);
        process_all_lost(&sb->core);
        settle(sb, -ESRCH);
}

/* pid 1's word on its setup, taken from the loop: creating a sandbox never waits for it.
 * After that, its reports of processes that ended. */
static void ctl_event(Watch *w, uint32_t events) {
        SbxSandbox *sb = w->data;
        char err[512];
        if (sb->setup > 0) {
                pid_t pid;
                int ws, r;
                for (int i = 0; i < 64 && (r = box_read_exit(&sb->core.box, &pid, &ws)) > 0; i++)
                        process_exited(&sb->core, pid, ws);
                if (r < 0)
                        loop_del(sb->core.loop, &sb->ctl_w); /* pid 1 is gone: init_event() follows */
                return;
        }
        int r = box_ready(&sb->core.box, err, sizeof err);
        if (r == 0)
                return;
        if (r < 0) {
                loop_del(sb->core.loop, &sb->ctl_w);
                log_warn("sandbox %s: setup failed: %s", sb->core.box.id, err);
                snprintf(sb->setup_error, sizeof sb->setup_error, "%s", err);
        }
        /* On failure pid 1 exits too, and init_event() answers what waits. */
        settle(sb, r > 0 ? 1 : r);
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
        sb->core.mover = host->mover;
        sb->core.limits = o->limits;
        fill_limits(&sb->core.limits);
        sb->core.timeout_ms = o->timeout_ms ? o->timeout_ms : SBX_DEFAULT_TIMEOUT_MS;
        sb->core.hold_after = UINT64_MAX;
        sb->core.self = sb;
        sb->core.kill_leftovers = o->kill_leftovers;
        sb->setup_timer = -1;
        sb->env = build_env((const char *const *)host->base_env, o->env, o->network == SBX_NETWORK_ALLOWLIST,
                            o->n_proxy_secrets > 0);
        sb->network = o->network;
        sb->rootfs = o->rootfs ? strdup(o->rootfs) : NULL;
        sb->secrets = o->secrets && o->secrets[0] ? copy_secrets(o->secrets) : NULL;
        if (o->n_proxy_secrets) {
                if (copy_proxy_secrets(o->proxy_secrets, o->n_proxy_secrets, &sb->psec) < 0 ||
                    !(sb->psec_env = proxy_secret_pairs(sb->psec, o->n_proxy_secrets, false)))
                        sb->env = (free_env(sb->env), NULL);
                else
                        sb->n_psec = o->n_proxy_secrets;
        }
        if ((o->secrets && o->secrets[0]) || sb->n_psec) {
                /* Its own rules: the context's plus its secrets, the proxy secrets' values too
                 * (they never reach a command, unless a server sends them some way the proxy
                 * does not see). */
                char err[256];
                size_t ne = 0;
                while (o->secrets && o->secrets[ne])
                        ne++;
                char **pv = proxy_secret_pairs(sb->psec, sb->n_psec, true);
                _cleanup_free_ const char **all = calloc(ne + sb->n_psec + 1, sizeof *all);
                if (all && pv) {
                        memcpy(all, o->secrets ? o->secrets : all, ne * sizeof *all);
                        memcpy(all + ne, pv, sb->n_psec * sizeof *all);
                }
                RedactConfig rc = { .secrets = all, .patterns = (const char *const *)host->redact_patterns,
                                    .no_defaults = host->redact_no_defaults };
                if (!all || !pv || redactor_new(&rc, &sb->core.redact, err, sizeof err) < 0)
                        sb->env = (free_env(sb->env), NULL);
                free_secrets(pv);
        } else {
                sb->core.redact = redactor_ref(host->redact);
        }
        if (!sb->env || (o->rootfs && !sb->rootfs) || (o->secrets && o->secrets[0] && !sb->secrets) ||
            copy_list(o->policy_allow, &sb->policy_allow) < 0 || copy_list(o->policy_deny, &sb->policy_deny) < 0 ||
            copy_list(o->network_allow, &sb->network_allow) < 0) {
                sandbox_dealloc(sb);
                return NULL;
        }
        sb->policy = (LandlockPolicy){ .allow = (const char *const *)sb->policy_allow,
                                       .deny = (const char *const *)sb->policy_deny, .connect_port = -1 };
        return sb;
}

static void sandbox_dealloc(SbxSandbox *sb) {
        safe_close(sb->default_sock);
        free_env(sb->env);
        free_env(sb->network_allow);
        free_env(sb->policy_allow);
        free_env(sb->policy_deny);
        free_secrets(sb->secrets);
        free_proxy_secrets(sb->psec, sb->n_psec);
        free_env(sb->psec_env);
        redactor_unref(sb->core.redact);
        free(sb->rootfs);
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

/* Whether every entry of env is one of the fixed defaults (or an allowlist sandbox's proxy
 * settings). Only then may pid 1 start the default session's shell while it builds the root:
 * that shell starts in the host's tree, and an entry a client chose could make bash run code
 * there (BASH_ENV, SHELLOPTS with PS4, BASH_FUNC_*, LD_PRELOAD). */
static bool env_fixed(char *const *env) {
        for (char *const *e = env; *e; e++) {
                bool found = false;
                for (size_t i = 0; i < ELEMENTSOF(default_env) && !found; i++)
                        found = strcmp(*e, default_env[i]) == 0;
                for (size_t i = 0; i < ELEMENTSOF(proxy_env) && !found; i++)
                        found = strcmp(*e, proxy_env[i]) == 0;
                if (!found)
                        return false;
        }
        return true;
}

int sandbox_new(SandboxHost *host, const SbxSandboxOptions *o, SandboxList *list, SbxSandbox **ret, char *err,
                size_t errlen) {
        int r = validate_options(o, err, errlen);
        if (r == 0 && host->process)
                r = validate_process_mode(o, err, errlen);
        if (r < 0)
                return r;
        err[0] = 0;
        if (!host->shared_ready) {
                r = box_shared_init(&host->shared, host->process);
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
        }
        if (!host->mover && (r = mover_new(host->loop, &host->mover)) < 0)
                return r;
        host->yard.mover = host->mover;
        SbxSandbox *sb = sandbox_alloc(host, o);
        if (!sb)
                return -ENOMEM;
        /* pid 1 takes its copy of the list at clone3: it is not needed after box_create(). */
        _cleanup_free_ char **env = shell_env(sb);
        if (!env) {
                sandbox_dealloc(sb);
                return -ENOMEM;
        }
        /* Its CA, made before pid 1 so that its certificate is in the root pid 1 builds; the
         * key stays in the daemon's memory (the proxy's, with egress_attach()). */
        EgressCa *ca = NULL;
        if (sb->n_psec && (r = egress_ca_new("", &ca)) < 0) {
                snprintf(err, errlen, "cannot make the sandbox's CA for its proxy secrets");
                sandbox_dealloc(sb);
                return r;
        }
        BoxConfig bc = {
                .fs_bytes = sb->core.limits.fs_bytes, .file_count = sb->core.limits.file_count,
                .memory_bytes = sb->core.limits.memory_bytes, .pids = sb->core.limits.pids,
                .cpu_millis = sb->core.limits.cpu_millis,
                .network = o->network == SBX_NETWORK_HOST, .rootfs = o->rootfs, .env = env,
                .proxy_port = o->network == SBX_NETWORK_ALLOWLIST ? SBX_EGRESS_PROXY_PORT : 0,
                .policy = landlock_policy_active(&sb->policy) ? &sb->policy : NULL,
                .trust_pem = ca ? egress_ca_pem(ca) : NULL,
                .session_fd = -1,
        };
        /* The default session's shell starts with the sandbox (the pool starts one anyway,
         * and almost every sandbox runs commands there), unless it may not (env_fixed()). */
        int sv[2] = { -1, -1 };
        /* Not when the host preloads a library into every program: the shell starts on the
         * host's tree, where that library would run and stay loaded in the session's shells. */
        /* Nor rootless: not verified there yet. */
        if (!host->process && !host->shared.rootless && !o->rootfs && !bc.policy && !bc.trust_pem && env_fixed(env) &&
            access("/etc/ld.so.preload", F_OK) != 0 && session_socketpair(sv) == 0)
                bc.session_fd = sv[1];
        r = box_create(&host->shared, &bc, &sb->core.box, err, errlen);
        safe_close(sv[1]);
        if (r < 0) {
                egress_ca_free(ca);
                safe_close(sv[0]);
                sandbox_dealloc(sb);
                return r;
        }
        sb->default_sock = sv[0];
        if ((r = bglog_init(&sb->core.bg, host->loop, &sb->core.box.cg)) < 0) {
                egress_ca_free(ca);
                corpse_add(&host->yard, &sb->core.box);
                sandbox_dealloc(sb);
                return r;
        }
        sb->core.bg.redact = sb->core.redact;
        if (sb->network == SBX_NETWORK_ALLOWLIST &&
            (r = egress_attach(sb, (const char *const *)sb->network_allow, sb->psec, sb->n_psec, ca)) < 0) {
                bglog_done(&sb->core.bg);
                corpse_add(&host->yard, &sb->core.box);
                sandbox_dealloc(sb);
                return r;
        }
        (void)loop_add(host->loop, &sb->init_w, sb->core.box.init_pidfd, EPOLLIN, init_event, sb);
        (void)loop_add(host->loop, &sb->ctl_w, sb->core.box.ctl_fd, EPOLLIN, ctl_event, sb);
        sb->setup_timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (sb->setup_timer >= 0 &&
            (loop_add(host->loop, &sb->setup_w, sb->setup_timer, EPOLLIN, setup_timeout_event, sb) < 0 ||
             timerfd_arm_ms(sb->setup_timer, SBX_CREATE_TIMEOUT_MS) < 0)) {
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
        process_free_all(&sb->core);
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

bool sandbox_is_default(const SbxSandbox *sb) {
        SbxLimits l = { 0 };
        fill_limits(&l);
        char **want = build_env((const char *const *)sb->host->base_env, NULL, false, false);
        size_t n = 0;
        bool same_env = want != NULL;
        for (; same_env && sb->env[n] && want[n]; n++)
                same_env = strcmp(sb->env[n], want[n]) == 0;
        same_env = same_env && !sb->env[n] && !want[n];
        free_env(want);
        return same_env && !sb->secrets && memcmp(&l, &sb->core.limits, sizeof l) == 0 &&
               sb->core.timeout_ms == SBX_DEFAULT_TIMEOUT_MS && sb->network == SBX_NETWORK_NONE && !sb->rootfs &&
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

const char *sbx_sandbox_setup_error(const SbxSandbox *sb) { return sb->setup_error; }

SandboxHost *sandbox_host(const SbxSandbox *sb) { return sb->host; }
SandboxCore *sandbox_core(SbxSandbox *sb) { return &sb->core; }
int sandbox_setup_state(const SbxSandbox *sb) { return sb->setup; }
const Box *sandbox_box(const SbxSandbox *sb) { return &sb->core.box; }
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
const SbxLimits *sbx_sandbox_limits(const SbxSandbox *sb) { return &sb->core.limits; }
int sbx_sandbox_init_pid(const SbxSandbox *sb) { return sb->core.box.init_pid; }
bool sbx_sandbox_ready(const SbxSandbox *sb) { return sb->setup > 0; }

unsigned sbx_sandbox_kill_background(SbxSandbox *sb) { return sbx_sandbox_kill_processes(sb); }

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

SbxSession *sbx_session_find(SbxSandbox *sb, const char *name) {
        if (!name)
                name = "default";
        for (SbxSession *s = sb->sessions; s; s = s->next)
                if (strcmp(s->name, name) == 0)
                        return s;
        return NULL;
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
        if (sb->n_sessions >= SBX_MAX_SESSIONS)
                return -EMFILE;
        s = calloc(1, sizeof *s);
        if (!s || !(s->name = strdup(name))) {
                free(s);
                return -ENOMEM;
        }
        session_init(s, sb, &sb->core, &run_session_hooks);
        int r = strcmp(name, "default") == 0 && sb->default_sock >= 0 ? session_adopt_shell(s, TAKE_FD(sb->default_sock))
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

const char *sbx_session_name(const SbxSession *s) { return s->name; }

unsigned sbx_session_runs(const SbxSession *s) { return s->n_queued + (s->current != NULL); }

SbxSession *sbx_session_next(SbxSandbox *sb, SbxSession *prev) { return prev ? prev->next : sb->sessions; }

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
