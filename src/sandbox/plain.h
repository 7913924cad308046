/* SPDX-License-Identifier: MIT */
/* Process mode: a sandbox with no namespace at all, for hosts where the daemon can make none
 * (no unprivileged user namespaces). Its files are a private directory of the host holding
 * home/user, tmp and dev/shm; its pid 1 is a plain child of the daemon (a child subreaper, so
 * orphans still come back to it) and its commands run in the same cgroups as in namespaces
 * mode. Not a security boundary: see "Process mode" in docs/ARCHITECTURE.md. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* What pid 1 of a process-mode sandbox builds. The strings are borrowed. */
typedef struct PlainConfig {
        const char *dir;   /* the sandbox's directory, its "/" for the files API: made here */
        const char *snap;  /* its snapshot store, beside it: made here */
        uid_t uid;         /* the sandbox's user, as the host knows it */
        gid_t gid;
        bool own;          /* root daemon: home/user goes to uid, the directory to gid */
} PlainConfig;

/* The directory sandboxes of this daemon get their directories in: a new <shared>/sbx-<pid>-
 * <random>, on which *ret_lock (owned) holds an flock for as long as the daemon keeps it open,
 * which is what tells other daemons it is in use. The shared directory is made (or, if it
 * exists, checked to be a directory of this user's, not a symlink) with the right mode: as
 * root /run/sbx-process (0711: each sandbox's user must reach its own directory), else
 * $XDG_RUNTIME_DIR/sbx-process or /tmp/sbx-process-<uid> (0700). What daemons that are gone
 * (their directories unlocked) left there is removed, in the background. Returns 0 or -errno
 * (-EPERM: the shared one exists and belongs to someone else). */
int plain_base_init(char *base, size_t size, int *ret_lock);

/* In pid 1: makes c->dir (home/user, tmp, dev/shm below it; it and its skeleton directories
 * read-only, so neither the files API nor a command removes /tmp or /home/user by mistake)
 * and c->snap, and opens them: *ret_root and *ret_snap get O_PATH fds. On failure err says
 * which step failed. Returns 0 or -errno. */
int plain_build_dir(const PlainConfig *c, int *ret_root, int *ret_snap, char *err, size_t errlen);

/* In pid 1: a copy of env (NULL-terminated) whose HOME is <dir>/home/user and TMPDIR
 * <dir>/tmp, the paths commands see. Malloc'd, never freed (pid 1 uses it until it exits);
 * NULL when out of memory. */
char **plain_env(char *const *env, const char *dir);

/* Removes directory `name` of `parent` and everything in it, whatever its depth, without
 * following a symlink, with two fds open at most: each directory met is emptied of its
 * other entries, its subdirectories are moved up into the top one under fresh names, and it
 * is removed; until the top is empty. Meant for a tree nothing else changes (the sandbox's
 * processes are gone). It blocks: called in a forked process or on the way out. Returns 0
 * (nothing there counts) or -errno. */
int plain_remove_tree(int parent, const char *name);

/* A session state taken in sandbox `from_dir` made right for sandbox `to_dir` (a fork):
 * every occurrence of from_dir in the len bytes at data becomes to_dir. The two have the
 * same length (base and a 32-hex id), so framing and lengths in the state stay valid.
 * Returns how many were replaced. */
size_t plain_rewrite_paths(uint8_t *data, size_t len, const char *from_dir, const char *to_dir);
