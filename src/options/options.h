/* SPDX-License-Identifier: MIT */
/* A sandbox's options (options.c), for sandbox.c: checking, defaults, copies and the shells'
 * environment. Every list is NULL-terminated and owned by whoever the copy was made for;
 * secrets are wiped when freed. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include "sbx/sbx.h"

/* Everything a sandbox's options must be that needs no room above the core (limits, env,
 * network mode, exec policy, secrets, rootfs), and in process mode what it cannot honour.
 * Returns 0, or -EINVAL with err saying what is wrong. */
int options_check(const SbxSandboxOptions *o, bool process_mode, char *err, size_t errlen);
/* Fills each limit left 0 with its default. */
void options_fill_limits(SbxLimits *l);
/* A copy of a list; NULL for an empty one. Returns 0 or -ENOMEM. */
int options_copy_list(const char *const *l, char ***ret);
void options_free_list(char **l);
/* A copy of NAME=VALUE secrets, wiped when freed; NULL when out of memory. */
char **options_copy_secrets(const char *const *v);
void options_free_secrets(char **v);
/* Copies of the proxy secrets, each with its placeholder: the one given (a fork's parent's),
 * else SBX_SECRET_<NAME>_<random hex>. Returns 0, -EIO or -ENOMEM. */
int options_copy_proxy_secrets(const SbxProxySecret *v, size_t n, SbxProxySecret **ret);
void options_free_proxy_secrets(SbxProxySecret *v, size_t n);
/* NAME=placeholder for each proxy secret (the shells' environment). NULL when out of memory. */
char **options_proxy_secret_pairs(const SbxProxySecret *v, size_t n);
/* The session shells' environment: the fixed defaults (an allowlist sandbox's proxy when
 * `proxy`, a sandbox with proxy secrets' trust store when `trust`), then `base` (the
 * context's), then `extra` (the caller's); a name given again replaces the one before. */
char **options_build_env(const char *const *base, const char *const *extra, bool proxy, bool trust);
/* Whether every entry is one of the fixed defaults (or an allowlist sandbox's proxy settings):
 * only then may pid 1 start the default session's shell while it builds the root. */
bool options_env_fixed(char *const *env);
