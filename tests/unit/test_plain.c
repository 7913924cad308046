/* SPDX-License-Identifier: MIT */
/* Unit tests of process mode's files (sandbox/plain.c): the sandbox directory's shape and
 * modes, the environment naming it, the removal of a tree deeper than any path and made
 * unreadable, which never follows a symlink out, and the rewriting of a fork's states. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/limits.h"
#include "sandbox/plain.h"
#include "tap.h"

static bool exists(int dir, const char *name) {
        struct stat st;
        return fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

static mode_t mode_of(const char *path) {
        struct stat st;
        return stat(path, &st) == 0 ? st.st_mode & 07777 : 0;
}

static void test_build(const char *base) {
        char dir[512], snap[520], p[600], err[400] = "";
        snprintf(dir, sizeof dir, "%s/box", base);
        snprintf(snap, sizeof snap, "%s/box.snap", base);
        PlainConfig c = { .dir = dir, .snap = snap, .uid = geteuid(), .gid = getegid(), .own = false };
        int root = -1, sfd = -1;
        CHECK(plain_build_dir(&c, &root, &sfd, err, sizeof err) == 0 && root >= 0 && sfd >= 0, "built: %s", err);
        CHECK(exists(root, "tmp") && exists(root, "home/user") && exists(root, "dev/shm"), "tmp, home/user, dev/shm");
        snprintf(p, sizeof p, "%s/tmp", dir);
        CHECK(mode_of(p) == 01777, "tmp is 1777: %o", mode_of(p));
        snprintf(p, sizeof p, "%s/home", dir);
        CHECK(mode_of(dir) == 0555 && mode_of(p) == 0555, "the skeleton is read-only: %o %o", mode_of(dir), mode_of(p));
        err[0] = 0;
        int r2 = -1, s2 = -1;
        CHECK(plain_build_dir(&c, &r2, &s2, err, sizeof err) == -EEXIST && strstr(err, "mkdir"),
              "a directory that exists is never taken over: %s", err);
        close(root);
        close(sfd);

        char *env[] = { (char *)"PATH=/bin", (char *)"HOME=/home/user", NULL };
        char **e = plain_env(env, dir);
        char home[600], tmpdir[600];
        snprintf(home, sizeof home, "HOME=%s/home/user", dir);
        snprintf(tmpdir, sizeof tmpdir, "TMPDIR=%s/tmp", dir);
        CHECK(e && strcmp(e[0], "PATH=/bin") == 0 && strcmp(e[1], home) == 0 && e[2] && strcmp(e[2], tmpdir) == 0 && !e[3],
              "HOME replaced, TMPDIR added");
        if (e) {
                free(e[1]);
                free(e[2]);
                free(e);
        }

        int b = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        CHECK(plain_remove_tree(b, "box") == 0 && plain_remove_tree(b, "box.snap") == 0 && !exists(b, "box") &&
              !exists(b, "box.snap"), "removed, read-only skeleton and all");
        CHECK(plain_remove_tree(b, "box") == 0, "removing what is not there succeeds");
        close(b);
}

static void test_remove_deep(const char *base) {
        int b = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        CHECK(mkdirat(b, "deep", 0755) == 0, "mkdir deep");
        /* Deeper than any path may be long: only fds can walk it. */
        int levels = (int)SBX_MAX_PATH_BYTES, fd = openat(b, "deep", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        bool ok = fd >= 0;
        for (int i = 0; ok && i < levels; i++) {
                int f = openat(fd, "f", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
                ok = f >= 0 && mkdirat(fd, "d", 0755) == 0;
                if (f >= 0)
                        close(f);
                int next = ok ? openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
                /* Every 100th level unreadable and unwritable, as a command could leave it. */
                if (ok && i % 100 == 50)
                        ok = fchmod(fd, 0) == 0;
                close(fd);
                fd = next;
                ok = ok && fd >= 0;
        }
        if (fd >= 0)
                close(fd);
        CHECK(ok, "%d levels made", levels);
        /* A symlink out of the tree, to a directory holding a file that must survive. */
        CHECK(mkdirat(b, "outside", 0755) == 0 && close(openat(b, "outside/keep", O_WRONLY | O_CREAT | O_CLOEXEC, 0600)) == 0 &&
              symlinkat("../outside", b, "deep/link") == 0, "a symlink out");
        int r = plain_remove_tree(b, "deep");
        CHECK(r == 0 && !exists(b, "deep"), "the whole tree removed: %d", r);
        CHECK(exists(b, "outside/keep"), "nothing followed out of it");
        close(b);
}

static void test_rewrite(void) {
        const char *from = "/run/sbx-process/0123456789abcdef0123456789abcdef";
        const char *to = "/run/sbx-process/fedcba9876543210fedcba9876543210";
        char state[512];
        int n = snprintf(state, sizeof state, "C%s/home/user/w\n%cHOME=%s/home/user TMPDIR=%s/tmp other=/run/sbx-process/x",
                         from, 0, from, from);
        size_t k = plain_rewrite_paths((uint8_t *)state, (size_t)n, from, to);
        char want[512];
        int m = snprintf(want, sizeof want, "C%s/home/user/w\n%cHOME=%s/home/user TMPDIR=%s/tmp other=/run/sbx-process/x", to,
                         0, to, to);
        CHECK(k == 3 && n == m && memcmp(state, want, (size_t)n) == 0, "every occurrence, past a NUL, and nothing else: %zu",
              k);
        CHECK(plain_rewrite_paths((uint8_t *)state, (size_t)n, to, "/short") == 0, "never to another length");
}

int main(void) {
        char base[] = "/tmp/sbx-test-plain-XXXXXX";
        if (!mkdtemp(base)) {
                printf("Bail out! mkdtemp: %s\n", strerror(errno));
                return 1;
        }
        test_build(base);
        test_remove_deep(base);
        test_rewrite();
        int b = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        CHECK(plain_remove_tree(b, base + 5) == 0, "clean up");
        close(b);
        return tap_done();
}
