/* SPDX-License-Identifier: MIT */
/* A sandbox's exec policy, enforced by the kernel: a Landlock ruleset that pid 1 builds over
 * its finished root and restricts itself to, so that every process of the sandbox inherits it
 * and the daemon does not. See "Exec policy" in docs/ARCHITECTURE.md for what it stops. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

/* What a policy says. allow and deny are NULL-terminated lists of absolute paths or glob(3)
 * patterns (NULL or empty: none); a pattern that names a directory, or ends in a "**"
 * component, covers everything beneath it. The strings are borrowed. With allow, only the files it names (and
 * the ELF interpreters they name, and the session shell /bin/bash with its own) may be
 * executed; with deny alone, everything may but the files it names. A denied file can be
 * neither executed nor read. connect_port, if >= 0, also limits TCP connect(2) to that one
 * port (Landlock ABI 4); -1 leaves the network alone. */
typedef struct LandlockPolicy {
        const char *const *allow;
        const char *const *deny;
        int connect_port;
} LandlockPolicy;

/* The running kernel's Landlock ABI version (>= 1), or -EOPNOTSUPP when Landlock is not
 * built in or not enabled (lsm= boot list), -ENOSYS on kernels before it. */
int landlock_abi(void);

/* Whether p asks for anything at all (NULL does not). */
bool landlock_policy_active(const LandlockPolicy *p);

/* Checks a policy where it is given, before any sandbox exists: the number and length of
 * patterns, that each is absolute with no "." or ".." component and "**" only as its last
 * one, that none lies in the sandbox's writable directories (whose files a command can make
 * at will), and that the kernel offers what the policy needs. Returns 0, or -EINVAL (the
 * kernel lacks it: -EOPNOTSUPP) with err saying what is wrong. */
int landlock_policy_check(const LandlockPolicy *p, char *err, size_t errlen);

/* In pid 1, after the root is built and no_new_privs is set, before any command exists:
 * matches the patterns against the sandbox's files, builds the ruleset and restricts the
 * calling process to it. With allow, also refuses executable memfds (see landlock.c). On
 * failure err names the pattern or path at fault. Returns 0 or -errno. */
int landlock_policy_apply(const LandlockPolicy *p, char *err, size_t errlen);
