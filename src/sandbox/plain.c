/* SPDX-License-Identifier: MIT */
/* Process mode's files: the host directory each sandbox has instead of a private root, the
 * environment that names it, and its removal. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/util.h"
#include "sandbox/plain.h"

/* What daemons killed with SIGKILL left (their sandboxes died with them: pid 1 with its
 * parent, commands through their cgroups, so nothing uses these) is renamed aside at once and
 * removed by a process of its own, which may take long (a directory's size is bounded only
 * by the host's filesystem) and must not hold this daemon up. That process is a grandchild,
 * reparented as soon as its parent exits, so no daemon ever waits for it; one that dies
 * midway leaves `.gone-*` names, which the next sweep removes too. */
static void sweep_gone(int base_fd) {
        pid_t pid = fork();
        if (pid < 0)
                return;
        if (pid == 0) {
                if (fork() != 0)
                        _exit(0);
                /* No fd of the daemon's but the base's (as fd 3): a client waiting for the
                 * daemon's stdout or socket to close must not wait for this. The base is
                 * moved above 2 first: a daemon started with 0-2 closed may hold it there. */
                int keep = fcntl(base_fd, F_DUPFD, 3), nul = open("/dev/null", O_RDWR);
                if (keep < 0 || nul < 0)
                        _exit(1);
                for (int fd = 0; fd < 3; fd++)
                        if (dup2(nul, fd) < 0)
                                _exit(1);
                if (keep != 3 && dup2(keep, 3) < 0)
                        _exit(1);
                close_range(4, ~0U, 0);
                (void)prctl(PR_SET_NAME, "sbx-rm", 0, 0, 0);
                int fd = openat(3, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
                for (struct dirent *e; d && (e = readdir(d));)
                        if (strncmp(e->d_name, ".gone-", 6) == 0)
                                (void)plain_remove_tree(dirfd(d), e->d_name);
                _exit(0);
        }
        (void)waitpid(pid, NULL, 0);
}

/* A daemon's directory is alive while its daemon holds the flock it took on it (see
 * plain_base_init()): a lock, unlike a pid, means the same in every pid namespace and is never
 * reused. One being made (".new-") is left alone for a minute, the time between its mkdir and
 * its lock. */
static void sweep_stale(const char *base) {
        _cleanup_close_ int fd = open(base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int dfd = fd >= 0 ? dup(fd) : -1;
        DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
        if (!d) {
                safe_close(dfd);
                return;
        }
        bool gone = false;
        for (struct dirent *e; (e = readdir(d));) {
                if (strncmp(e->d_name, ".gone-", 6) == 0) {
                        gone = true;
                        continue;
                }
                bool fresh = strncmp(e->d_name, ".new-", 5) == 0;
                if (!fresh && strncmp(e->d_name, "sbx-", 4) != 0)
                        continue;
                _cleanup_close_ int one = openat(fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                struct stat st;
                if (one < 0 || fstat(one, &st) < 0 || st.st_uid != geteuid() ||
                    (fresh && (uint64_t)st.st_mtime + 60 > wall_ms() / 1000) || flock(one, LOCK_EX | LOCK_NB) < 0)
                        continue;
                char to[64], id[17];
                if (random_hex(id, 8) < 0)
                        continue;
                snprintf(to, sizeof to, ".gone-%s", id);
                if (renameat(fd, e->d_name, fd, to) == 0)
                        gone = true;
        }
        closedir(d);
        if (gone)
                sweep_gone(fd);
}

/* Makes dir, or checks that the one there is a directory of this user's (in /tmp anyone could
 * have made it first, or put a symlink there), with mode. */
static int own_dir(const char *dir, mode_t mode) {
        if (mkdir(dir, mode) < 0 && errno != EEXIST)
                return negerrno();
        struct stat st;
        if (lstat(dir, &st) < 0)
                return negerrno();
        if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid())
                return -EPERM;
        return (st.st_mode & 07777) == mode || chmod(dir, mode) == 0 ? 0 : negerrno();
}

int plain_base_init(char *base, size_t size, int *ret_lock) {
        mode_t mode = geteuid() == 0 ? 0711 : 0700;
        const char *rt = getenv("XDG_RUNTIME_DIR");
        *ret_lock = -1;
        if (geteuid() == 0)
                snprintf(base, size, "/run/sbx-process");
        else if (rt && rt[0] == '/')
                snprintf(base, size, "%s/sbx-process", rt);
        else
                snprintf(base, size, "/tmp/sbx-process-%u", (unsigned)geteuid());
        int r = own_dir(base, mode);
        if (r < 0)
                return r;
        sweep_stale(base);
        /* This daemon's own directory in it, made under a name sweeps leave alone for a while,
         * locked, then named: from then on its lock says it is in use. */
        char id[17], made[PATH_MAX], own[PATH_MAX];
        if ((r = random_hex(id, 8)) < 0)
                return r;
        snprintf(made, sizeof made, "%s/.new-%s", base, id);
        if (snprintf(own, sizeof own, "%s/sbx-%d-%s", base, (int)getpid(), id) >= (int)size)
                return -ENAMETOOLONG;
        if (mkdir(made, mode) < 0)
                return negerrno();
        _cleanup_close_ int fd = open(made, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0 || fchmod(fd, mode) < 0 || rename(made, own) < 0) {
                r = negerrno();
                (void)rmdir(made);
                return r;
        }
        snprintf(base, size, "%s", own);
        *ret_lock = TAKE_FD(fd);
        return 0;
}

static int fail(char *err, size_t errlen, const char *what, const char *path) {
        int r = negerrno();
        snprintf(err, errlen, "%s %s: %s", what, path, strerror(-r));
        return r;
}

int plain_build_dir(const PlainConfig *c, int *ret_root, int *ret_snap, char *err, size_t errlen) {
        if (mkdir(c->snap, 0700) < 0)
                return fail(err, errlen, "mkdir", c->snap);
        if (mkdir(c->dir, 0700) < 0)
                return fail(err, errlen, "mkdir", c->dir);
        _cleanup_close_ int d = open(c->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (d < 0)
                return fail(err, errlen, "open", c->dir);
        /* The same shape as a namespaces sandbox's writable tree, which fork, snapshots and
         * archives copy (tmp, home/user, dev/shm). */
        if (mkdirat(d, "tmp", 0700) < 0 || fchmodat(d, "tmp", 01777, 0) < 0 || mkdirat(d, "home", 0755) < 0 ||
            mkdirat(d, "home/user", 0755) < 0 || mkdirat(d, "dev", 0755) < 0 || mkdirat(d, "dev/shm", 0700) < 0 ||
            fchmodat(d, "dev/shm", 01777, 0) < 0)
                return fail(err, errlen, "make the tree of", c->dir);
        if (c->own && fchownat(d, "home/user", c->uid, c->gid, AT_SYMLINK_NOFOLLOW) < 0)
                return fail(err, errlen, "chown home/user of", c->dir);
        /* The skeleton is read-only to its user: /tmp, /home/user and /dev/shm stay where the
         * files API and the session shells expect them. As root the directory is the
         * sandbox's group's alone: no other host user may look in. */
        if (fchmodat(d, "home", 0555, 0) < 0 || fchmodat(d, "dev", 0555, 0) < 0)
                return fail(err, errlen, "chmod the skeleton of", c->dir);
        if (c->own && fchown(d, 0, c->gid) < 0)
                return fail(err, errlen, "chown", c->dir);
        if (fchmod(d, c->own ? 0550 : 0555) < 0)
                return fail(err, errlen, "chmod", c->dir);
        *ret_root = open(c->dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (*ret_root < 0)
                return fail(err, errlen, "open", c->dir);
        *ret_snap = open(c->snap, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (*ret_snap < 0) {
                *ret_root = safe_close(*ret_root);
                return fail(err, errlen, "open", c->snap);
        }
        return 0;
}

/* env with NAME=<dir><suffix> in place of NAME's entry, or added; the rest borrowed. */
static int set_path(char **env, size_t *n, const char *name, const char *dir, const char *suffix) {
        size_t len = strlen(name);
        char *e = NULL;
        if (asprintf(&e, "%s=%s%s", name, dir, suffix) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < *n; i++)
                if (strncmp(env[i], name, len) == 0 && env[i][len] == '=') {
                        env[i] = e;
                        return 0;
                }
        env[(*n)++] = e;
        return 0;
}

char **plain_env(char *const *env, const char *dir) {
        size_t n = 0;
        while (env && env[n])
                n++;
        char **out = calloc(n + 3, sizeof *out);
        if (!out)
                return NULL;
        for (size_t i = 0; i < n; i++)
                out[i] = env[i];
        if (set_path(out, &n, "HOME", dir, "/home/user") < 0 || set_path(out, &n, "TMPDIR", dir, "/tmp") < 0) {
                free(out); /* and a string perhaps: pid 1 exits at once */
                return NULL;
        }
        out[n] = NULL;
        return out;
}

/* Empties directory `name` of top: its non-directories are removed, its directories moved
 * into top under fresh names (the caller's pass over top comes to them), then it is removed.
 * Returns 1 when something went, 0 when nothing could, -errno. */
static int hoist(int top, const char *name, unsigned long *seq) {
        /* A command may have left it unreadable or unwritable; its owner (the daemon's user,
         * or root) may change that. */
        (void)!fchmodat(top, name, 0700, 0);
        int fd = openat(top, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT ? 1 : negerrno();
        DIR *d = fdopendir(fd);
        if (!d) {
                close(fd);
                return -ENOMEM;
        }
        int progress = 0;
        for (struct dirent *e; (e = readdir(d));) {
                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                        continue;
                if (unlinkat(fd, e->d_name, 0) == 0) {
                        progress = 1;
                        continue;
                }
                if (errno != EISDIR)
                        continue;
                char fresh[48];
                snprintf(fresh, sizeof fresh, ".sbx-rm-%lu", (*seq)++);
                /* Moving a directory rewrites its "..": it must be writable too. */
                (void)!fchmodat(fd, e->d_name, 0700, 0);
                if (unlinkat(fd, e->d_name, AT_REMOVEDIR) == 0 || renameat(fd, e->d_name, top, fresh) == 0)
                        progress = 1;
        }
        closedir(d);
        if (unlinkat(top, name, AT_REMOVEDIR) == 0)
                return 1;
        return progress;
}

int plain_remove_tree(int parent, const char *name) {
        (void)!fchmodat(parent, name, 0700, AT_SYMLINK_NOFOLLOW);
        int top = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (top < 0)
                return errno == ENOENT ? 0 : negerrno();
        unsigned long seq = 0;
        int r = 0;
        for (;;) {
                int fd = openat(top, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
                if (!d) {
                        r = fd < 0 ? negerrno() : -ENOMEM;
                        safe_close(fd);
                        break;
                }
                bool any = false, progress = false;
                for (struct dirent *e; (e = readdir(d));) {
                        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                                continue;
                        any = true;
                        if (unlinkat(top, e->d_name, 0) == 0 || errno == ENOENT) {
                                progress = true;
                                continue;
                        }
                        if (errno != EISDIR)
                                continue;
                        int h = hoist(top, e->d_name, &seq);
                        if (h > 0)
                                progress = true;
                }
                closedir(d);
                if (!any)
                        break;
                /* Something nobody may remove (an immutable file): give up rather than spin. */
                if (!progress) {
                        r = -EPERM;
                        break;
                }
        }
        close(top);
        if (r == 0 && unlinkat(parent, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
                r = negerrno();
        return r;
}

size_t plain_rewrite_paths(uint8_t *data, size_t len, const char *from_dir, const char *to_dir) {
        size_t n = strlen(from_dir), k = 0;
        if (!n || strlen(to_dir) != n || len < n)
                return 0;
        for (size_t i = 0; i + n <= len;) {
                uint8_t *p = memmem(data + i, len - i, from_dir, n);
                if (!p)
                        break;
                memcpy(p, to_dir, n);
                i = (size_t)(p - data) + n;
                k++;
        }
        return k;
}
