/* SPDX-License-Identifier: MIT */
/* A sandbox's options: checked before anything is made, filled with the defaults, copied
 * (secrets wiped when freed), and the session shells' environment built from them. Plain
 * functions of SbxSandboxOptions: no sandbox, no loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/util.h"
#include "sandbox/landlock.h"
#include "sandbox/mount.h"
#include "options/options.h"

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

void options_fill_limits(SbxLimits *l) {
        if (!l->stdout_bytes) l->stdout_bytes = SBX_DEFAULT_STDOUT_BYTES;
        if (!l->stderr_bytes) l->stderr_bytes = SBX_DEFAULT_STDERR_BYTES;
        if (!l->command_bytes) l->command_bytes = SBX_DEFAULT_COMMAND_BYTES;
        if (!l->fs_bytes) l->fs_bytes = SBX_DEFAULT_FS_BYTES;
        if (!l->file_count) l->file_count = SBX_DEFAULT_FILE_COUNT;
        if (!l->memory_bytes) l->memory_bytes = SBX_DEFAULT_MEMORY_BYTES;
        if (!l->pids) l->pids = SBX_DEFAULT_PIDS;
        if (!l->cpu_millis) l->cpu_millis = (uint32_t)((uint64_t)host_cpus() * 1000 * SBX_DEFAULT_CPU_PERCENT_OF_HOST / 100);
}

void options_free_list(char **env) {
        for (char **e = env; e && *e; e++)
                free(*e);
        free(env);
}

/* A copy of a NULL-terminated list; NULL for an empty one. Returns -ENOMEM on failure. */
int options_copy_list(const char *const *l, char ***ret) {
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
                        options_free_list(c);
                        return -ENOMEM;
                }
        *ret = c;
        return 0;
}

/* Secrets do not stay in freed memory. */
void options_free_secrets(char **v) {
        for (char **e = v; e && *e; e++) {
                explicit_bzero(*e, strlen(*e));
                free(*e);
        }
        free(v);
}

/* A copy of the secrets, wiped when freed; NULL when out of memory. */
char **options_copy_secrets(const char *const *v) {
        size_t n = 0;
        for (const char *const *e = v; e && *e; e++)
                n++;
        char **c = calloc(n + 1, sizeof *c);
        for (size_t i = 0; c && i < n; i++)
                if (!(c[i] = strdup(v[i]))) {
                        options_free_secrets(c);
                        return NULL;
                }
        return c;
}

void options_free_proxy_secrets(SbxProxySecret *v, size_t n) {
        for (size_t i = 0; v && i < n; i++) {
                if (v[i].value)
                        explicit_bzero((char *)v[i].value, strlen(v[i].value));
                free((char *)v[i].value);
                free((char *)v[i].name);
                free((char *)v[i].placeholder);
                options_free_list((char **)v[i].hosts);
        }
        free(v);
}

/* Copies of the proxy secrets, each with its placeholder: the one given (a fork's parent's),
 * else SBX_SECRET_<NAME>_<random hex>. Returns 0 or -ENOMEM. */
int options_copy_proxy_secrets(const SbxProxySecret *v, size_t n, SbxProxySecret **ret) {
        SbxProxySecret *c = calloc(n, sizeof *c);
        if (!c)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                char ph[12 + SBX_MAX_SECRET_NAME_BYTES + 2 * SBX_SECRET_PLACEHOLDER_RANDOM_BYTES + 2];
                char hex[2 * SBX_SECRET_PLACEHOLDER_RANDOM_BYTES + 1];
                if (!v[i].placeholder && random_hex(hex, SBX_SECRET_PLACEHOLDER_RANDOM_BYTES) < 0) {
                        options_free_proxy_secrets(c, i);
                        return -EIO;
                }
                if (!v[i].placeholder)
                        snprintf(ph, sizeof ph, "SBX_SECRET_%s_%s", v[i].name, hex);
                char **hosts = NULL;
                c[i] = (SbxProxySecret){ .name = strdup(v[i].name), .value = strdup(v[i].value),
                                         .placeholder = strdup(v[i].placeholder ? v[i].placeholder : ph) };
                int r = options_copy_list(v[i].hosts, &hosts);
                c[i].hosts = (const char *const *)hosts;
                if (r < 0 || !c[i].name || !c[i].value || !c[i].placeholder) {
                        options_free_proxy_secrets(c, i + 1);
                        return -ENOMEM;
                }
        }
        *ret = c;
        return 0;
}

/* NAME=placeholder for each proxy secret. NULL when out of memory. */
char **options_proxy_secret_pairs(const SbxProxySecret *v, size_t n) {
        char **l = calloc(n + 1, sizeof *l);
        for (size_t i = 0; l && i < n; i++)
                if (asprintf(&l[i], "%s=%s", v[i].name, v[i].placeholder) < 0) {
                        l[i] = NULL;
                        options_free_secrets(l);
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
 * replaces the one before). That is all: pid 1 is a copy of the spawner (or of the daemon), but it starts every
 * shell with execve() and exactly this list, so nothing else of the daemon's own environment
 * reaches a sandbox. */
char **options_build_env(const char *const *base, const char *const *extra, bool proxy, bool trust) {
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
                         : o->image ? "image (there is no mount namespace to put it in)"
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
        if ((unsigned)o->network > SBX_NETWORK_POD) {
                snprintf(err, errlen, "network must be none, host, allowlist or pod");
                return -EINVAL;
        }
        if (o->network_allow && o->network != SBX_NETWORK_ALLOWLIST) {
                snprintf(err, errlen, "networkAllow is only for network \"allowlist\"");
                return -EINVAL;
        }
        LandlockPolicy lp = { .allow = o->policy_allow, .deny = o->policy_deny, .connect_port = -1 };
        int r = landlock_policy_check(&lp, err, errlen);
        if (r >= 0)
                r = validate_secrets(o, err, errlen);
        if (r >= 0)
                r = validate_proxy_secrets(o, err, errlen);
        if (r < 0)
                return r;
        if (o->rootfs && o->image) {
                snprintf(err, errlen, "rootfs and image are two roots: give one");
                return -EINVAL;
        }
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


/* Whether every entry of env is one of the fixed defaults (or an allowlist sandbox's proxy
 * settings). Only then may pid 1 start the default session's shell while it builds the root:
 * that shell starts in the host's tree, and an entry a client chose could make bash run code
 * there (BASH_ENV, SHELLOPTS with PS4, BASH_FUNC_*, LD_PRELOAD). */
bool options_env_fixed(char *const *env) {
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

int options_check(const SbxSandboxOptions *o, bool process_mode, char *err, size_t errlen) {
        int r = validate_options(o, err, errlen);
        if (r == 0 && process_mode)
                r = validate_process_mode(o, err, errlen);
        return r;
}

