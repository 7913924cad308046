/* SPDX-License-Identifier: MIT */
/* Unit tests of fs/tree and fs/walk on trees deeper than PATH_MAX: copies (one copier and
 * two) and clears of a 5,000-level tree with few fds allowed, hard links whose paths pass
 * PATH_MAX, the depth ceiling, and a walk that finds a directory moved under it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/macro.h"
#include "fs/tree.h"
#include "fs/walk.h"
#include "tap.h"

#define DEPTH 5000
#define WIDE_AT 3000  /* a level with ten directories of its own */
#define LINK_AT 4000  /* a level with a hard link to the bottom file */
#define RO_AT 4500    /* a read-only level */

static char base_dir[64];

/* Makes `levels` directories "d" one in the other below dir; returns an fd of the deepest. */
static int make_chain(int dir, size_t levels) {
        int fd = fcntl(dir, F_DUPFD_CLOEXEC, 3);
        for (size_t i = 0; fd >= 0 && i < levels; i++) {
                int next = mkdirat(fd, "d", 0755) == 0 ? openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
                close(fd);
                fd = next;
        }
        return fd;
}

/* An fd of the directory `levels` "d" below dir, or -1. */
static int open_chain(int dir, size_t levels) {
        int fd = fcntl(dir, F_DUPFD_CLOEXEC, 3);
        for (size_t i = 0; fd >= 0 && i < levels; i++) {
                int next = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                close(fd);
                fd = next;
        }
        return fd;
}

static bool put(int dir, const char *name, const char *data, mode_t mode) {
        int fd = openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
        bool ok = fd >= 0 && write(fd, data, strlen(data)) == (ssize_t)strlen(data) && fchmod(fd, mode) == 0;
        safe_close(fd);
        return ok;
}

static bool has(int dir, const char *name, const char *data) {
        char buf[64] = "";
        int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
        safe_close(fd);
        return n >= 0 && (buf[n] = 0, strcmp(buf, data) == 0);
}

static int open_dir(const char *name) {
        char p[128];
        snprintf(p, sizeof p, "%s/%s", base_dir, name);
        if (mkdir(p, 0755) < 0 && errno != EEXIST)
                return -1;
        return open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

static int count_fds(void) {
        DIR *d = opendir("/proc/self/fd");
        int n = 0;
        while (d && readdir(d))
                n++;
        if (d)
                closedir(d);
        return n;
}

/* The source: a 5,000-level chain with a file, a symlink and a fifo at the bottom, ten
 * directories at WIDE_AT, a hard link to the bottom file at LINK_AT (both paths longer than
 * PATH_MAX), a read-only directory at RO_AT and known times on the bottom two levels. */
static bool fill(int src) {
        _cleanup_close_ int bottom = make_chain(src, DEPTH);
        bool ok = bottom >= 0 && put(bottom, "f", "bottom\n", 0640) && symlinkat("f", bottom, "l") == 0 &&
                  mkfifoat(bottom, "p", 0600) == 0;
        _cleanup_close_ int wide = open_chain(src, WIDE_AT);
        for (int i = 0; ok && i < 10; i++) {
                char name[8];
                snprintf(name, sizeof name, "w%d", i);
                ok = mkdirat(wide, name, 0755) == 0;
                _cleanup_close_ int w = openat(wide, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                ok = ok && w >= 0 && put(w, "file", name, 0644);
        }
        _cleanup_close_ int at_link = open_chain(src, LINK_AT);
        ok = ok && at_link >= 0 && mkdirat(at_link, "x", 0755) == 0;
        _cleanup_close_ int x = ok ? openat(at_link, "x", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        ok = ok && x >= 0 && linkat(bottom, "f", x, "hl", 0) == 0;
        struct timespec ts[2] = { { 1600000000, 0 }, { 1600000000, 0 } };
        ok = ok && futimens(bottom, ts) == 0;
        _cleanup_close_ int ro = open_chain(src, RO_AT);
        ok = ok && ro >= 0 && fchmod(ro, 0500) == 0;
        return ok;
}

static void check_copy(int dst, const char *what) {
        _cleanup_close_ int bottom = open_chain(dst, DEPTH);
        char target[8] = "";
        struct stat st, sl, sp;
        CHECK(bottom >= 0 && has(bottom, "f", "bottom\n") && fstatat(bottom, "f", &st, 0) == 0 && (st.st_mode & 07777) == 0640,
              "%s: the bottom file, 5,000 levels down, with its mode", what);
        CHECK(readlinkat(bottom, "l", target, sizeof target - 1) == 1 && target[0] == 'f' &&
              fstatat(bottom, "p", &sp, AT_SYMLINK_NOFOLLOW) == 0 && S_ISFIFO(sp.st_mode),
              "%s: symlink and fifo at the bottom", what);
        CHECK(fstat(bottom, &sl) == 0 && sl.st_mtim.tv_sec == 1600000000, "%s: the bottom directory's time", what);
        _cleanup_close_ int at_link = open_chain(dst, LINK_AT);
        struct stat sh;
        CHECK(at_link >= 0 && fstatat(at_link, "x/hl", &sh, 0) == 0 && sh.st_ino == st.st_ino && st.st_nlink == 2,
              "%s: the hard link between levels %d and %d is one inode", what, LINK_AT, DEPTH);
        _cleanup_close_ int wide = open_chain(dst, WIDE_AT);
        int found = 0;
        for (int i = 0; wide >= 0 && i < 10; i++) {
                char name[16], file[24];
                snprintf(name, sizeof name, "w%d", i);
                snprintf(file, sizeof file, "%s/file", name);
                found += has(wide, file, name);
        }
        CHECK(found == 10, "%s: all ten directories of level %d (%d)", what, WIDE_AT, found);
        _cleanup_close_ int ro = open_chain(dst, RO_AT);
        CHECK(ro >= 0 && fstat(ro, &st) == 0 && (st.st_mode & 07777) == 0500, "%s: the read-only level kept its mode",
              what);
}

static void test_deep_copy(void) {
        _cleanup_close_ int src = open_dir("src");
        _cleanup_close_ int one = open_dir("one");
        _cleanup_close_ int two = open_dir("two");
        CHECK(src >= 0 && one >= 0 && two >= 0 && fill(src), "a 5,000-level source tree made");
        TreeIds ids = { getuid(), getuid(), getgid(), getgid() };
        /* Far fewer fds than levels: a walk holding one per level would run out. */
        struct rlimit old, low = { 256, 256 };
        getrlimit(RLIMIT_NOFILE, &old);
        low.rlim_max = old.rlim_max;
        CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0, "fds limited to 256");
        char err[512] = "";
        TreeStats stats = { 0 };
        int r = tree_copy(src, one, &ids, &stats, err, sizeof err);
        CHECK(r == 0, "tree_copy of 5,000 levels (%d %s)", r, err);
        CHECK(stats.dirs == DEPTH + 11 && stats.files == 13, "counted %llu directories and %llu files",
              (unsigned long long)stats.dirs, (unsigned long long)stats.files);
        check_copy(one, "one copier");
        r = tree_copy_parallel(src, two, &ids, NULL, err, sizeof err);
        CHECK(r == 0, "tree_copy_parallel of 5,000 levels (%d %s)", r, err);
        check_copy(two, "parallel copy");
        r = tree_clear(one, err, sizeof err);
        _cleanup_close_ int gone = open_chain(one, 1);
        CHECK(r == 0 && gone < 0 && errno == ENOENT, "tree_clear of the copy (%d %s)", r, err);
        setrlimit(RLIMIT_NOFILE, &old);
        (void)tree_clear(two, err, sizeof err);
}

/* SBX_MAX_TREE_DEPTH levels copy; one more is refused. */
static void test_depth_ceiling(void) {
        _cleanup_close_ int src = open_dir("ceiling");
        _cleanup_close_ int dst = open_dir("ceiling-copy");
        _cleanup_close_ int bottom = make_chain(src, SBX_MAX_TREE_DEPTH);
        CHECK(bottom >= 0 && put(bottom, "f", "x", 0644), "a %u-level tree made", SBX_MAX_TREE_DEPTH);
        TreeIds ids = { getuid(), getuid(), getgid(), getgid() };
        char err[512] = "";
        int r = tree_copy(src, dst, &ids, NULL, err, sizeof err);
        int copied = open_chain(dst, SBX_MAX_TREE_DEPTH);
        CHECK(r == 0 && copied >= 0 && has(copied, "f", "x"), "%u levels are copied (%d %s)", SBX_MAX_TREE_DEPTH, r, err);
        /* No fd held in the tree while it is removed: the kernel would walk the deleted
         * directories below every rmdir (quadratic). */
        safe_close(copied);
        CHECK(tree_clear(dst, err, sizeof err) == 0, "and cleared");
        CHECK(mkdirat(bottom, "d", 0755) == 0, "one level more");
        bottom = safe_close(bottom);
        err[0] = 0;
        r = tree_copy(src, dst, &ids, NULL, err, sizeof err);
        CHECK(r == -ELOOP && strstr(err, "copy (too deep)"), "%u levels are refused (%d %.40s...)",
              SBX_MAX_TREE_DEPTH + 1, r, err);
        (void)tree_clear(dst, err, sizeof err);
        (void)tree_clear(src, err, sizeof err);
}

/* A walk keeps open_levels fds and goes back up through ".."; a directory moved meanwhile is
 * noticed rather than followed. */
static void test_walk_moved(void) {
        _cleanup_close_ int top = open_dir("walk");
        _cleanup_close_ int bottom = make_chain(top, 100);
        CHECK(bottom >= 0, "a 100-level chain made");
        Walk w;
        int before = count_fds();
        int r = walk_init(&w, top, "walk", 1000);
        w.open_levels = 4;
        for (int i = 0; r == 0 && i < 100; i++)
                r = walk_enter(&w, "d");
        CHECK(r == 0 && walk_depth(&w) == 100, "walked 100 levels down (%d)", r);
        CHECK(count_fds() - before <= 5, "with %d fds (4 levels and the current one)", count_fds() - before);
        const char *path = walk_path(&w);
        CHECK(strlen(path) == 4 + 2 * 100 && strncmp(path, "walk/d/d/", 9) == 0, "its path is walk/d/.../d");
        r = walk_pop_to(&w, 10);
        CHECK(r == 0 && walk_depth(&w) == 10, "and back up to level 10 through \"..\" (%d)", r);
        for (int i = 0; r == 0 && i < 90; i++)
                r = walk_enter(&w, "d");
        /* Level 50 moves to the top: going up from it leads to the top, not to level 49. */
        int l49 = open_chain(top, 49);
        CHECK(r == 0 && l49 >= 0 && renameat(l49, "d", top, "moved") == 0, "level 50 moved to the top");
        safe_close(l49);
        r = walk_pop_to(&w, 10);
        CHECK(r == -ESTALE && walk_depth(&w) == 50, "the walk stops at the moved level (%d, at %zu)", r, walk_depth(&w));
        walk_done(&w);
        CHECK(count_fds() == before, "walk_done closed everything");
        const char *name;
        _cleanup_close_ int moved = openat(top, "moved", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        _cleanup_close_ int parent = moved >= 0 ? walk_open_parent(moved, "d/d/d/d/x", &name) : -1;
        _cleanup_close_ int direct = open_chain(moved, 4);
        struct stat a, b;
        CHECK(parent >= 0 && strcmp(name, "x") == 0 && fstat(parent, &a) == 0 && fstat(direct, &b) == 0 &&
              a.st_ino == b.st_ino, "walk_open_parent finds the directory of a path");
        int bad = walk_open_parent(moved, "d/nope/x", &name);
        CHECK(bad == -ENOENT, "and says when it is missing (%d)", bad);
}

/* A root daemon's sandbox is a block of host ids: a copy between two moves every owner of
 * the block to the same place in the other; the user pair wins, ids outside stay. */
static void test_id_block(void) {
        TreeIds between = { 5001000, 7001000, 5001000, 7001000, 5000000, 7000000, 65536 };
        CHECK(tree_map_uid(&between, 5000000) == 7000000, "the block's root moves to the other block's");
        CHECK(tree_map_gid(&between, 5065534) == 7065534, "its nobody too");
        CHECK(tree_map_uid(&between, 5001000) == 7001000, "its user");
        CHECK(tree_map_uid(&between, 5065536) == 5065536 && tree_map_uid(&between, 4999999) == 4999999 &&
              tree_map_uid(&between, 0) == 0, "ids outside the block stay");
        TreeIds inside = { 5001000, 1000, 5001000, 1000, 5000000, 0, 65536 };
        CHECK(tree_map_uid(&inside, 5000000) == 0 && tree_map_gid(&inside, 5001000) == 1000,
              "an archive names owners as the sandbox sees them");
        TreeIds rootless = { 1234, 1000, 1234, 1000, 0, 0, 0 };
        CHECK(tree_map_uid(&rootless, 1234) == 1000 && tree_map_uid(&rootless, 0) == 0 &&
              tree_map_uid(&rootless, 5) == 5, "rootless: only the user is mapped");
}

/* The table of first copies: every inode found with its own path, the first path kept, an
 * inode never added not found, through many growths of the hash. */
static void test_links_table(void) {
        WalkLinks t = { 0 };
        bool all = true;
        char path[32];
        for (ino_t i = 1; i <= 100000 && all; i++) {
                snprintf(path, sizeof path, "p%lu", (unsigned long)(i * 4096));
                all = walk_links_add(&t, 7, i * 4096, 0, path) == 0;
        }
        CHECK(all && t.n == 100000, "100,000 inodes (multiples of 4096, so alike in their low bits) added");
        for (ino_t i = 1; i <= 100000 && all; i++) {
                snprintf(path, sizeof path, "p%lu", (unsigned long)(i * 4096));
                const char *p = walk_links_find(&t, 7, i * 4096, 0);
                all = p && strcmp(p, path) == 0;
        }
        CHECK(all, "each found with its own path");
        CHECK(!walk_links_find(&t, 7, 4097, 0) && !walk_links_find(&t, 7, 0, 0) && !walk_links_find(&t, 7, 100001 * 4096, 0),
              "inodes never added are not found");
        CHECK(!walk_links_find(&t, 8, 4096, 0) && !walk_links_find(&t, 7, 4096, 1),
              "nor one of another device or another group");
        CHECK(walk_links_add(&t, 7, 4096, 0, "other") == 0 && strcmp(walk_links_find(&t, 7, 4096, 0), "p4096") == 0 &&
                      t.n == 100000,
              "adding an inode again keeps its first path");
        CHECK(walk_links_add(&t, 7, 4096, 1, "group1") == 0 && strcmp(walk_links_find(&t, 7, 4096, 1), "group1") == 0 &&
                      strcmp(walk_links_find(&t, 7, 4096, 0), "p4096") == 0,
              "the same inode in another group is another entry");
        walk_links_done(&t);
        CHECK(t.n == 0 && !walk_links_find(&t, 7, 4096, 0), "done: empty and usable again");
}

/* 200 files with 50 names each, spread over 10 directories: the copy has 200 inodes of 50
 * links each, every name where it was. */
static void test_many_links(void) {
        _cleanup_close_ int src = open_dir("links-src");
        _cleanup_close_ int dst = open_dir("links-dst");
        bool made = src >= 0 && dst >= 0;
        char name[64], to[64];
        for (int d = 0; made && d < 10; d++) {
                snprintf(name, sizeof name, "d%d", d);
                made = mkdirat(src, name, 0755) == 0;
        }
        for (int f = 0; made && f < 200; f++) {
                snprintf(name, sizeof name, "d0/f%d", f);
                int fd = openat(src, name, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
                made = fd >= 0 && dprintf(fd, "file %d\n", f) > 0;
                if (fd >= 0)
                        close(fd);
                for (int k = 1; made && k < 50; k++) {
                        snprintf(to, sizeof to, "d%d/f%d-%d", k % 10, f, k);
                        made = linkat(src, name, src, to, 0) == 0;
                }
        }
        CHECK(made, "10,000 names of 200 files made");
        TreeIds ids = { getuid(), getuid(), getgid(), getgid() };
        char err[512] = "";
        int r = tree_copy(src, dst, &ids, NULL, err, sizeof err);
        CHECK(r == 0, "copied (%d %s)", r, err);
        bool same = true;
        for (int f = 0; same && f < 200; f++) {
                struct stat first, st;
                snprintf(name, sizeof name, "d0/f%d", f);
                same = fstatat(dst, name, &first, AT_SYMLINK_NOFOLLOW) == 0 && first.st_nlink == 50;
                for (int k = 1; same && k < 50; k++) {
                        snprintf(to, sizeof to, "d%d/f%d-%d", k % 10, f, k);
                        same = fstatat(dst, to, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_ino == first.st_ino;
                }
        }
        CHECK(same, "the copy: 200 inodes of 50 links each, every name where it was");
        (void)tree_clear(src, err, sizeof err);
        (void)tree_clear(dst, err, sizeof err);
}

int main(void) {
        /* tmpfs, as a sandbox's tree is: a disk filesystem takes far longer on deep trees. */
        snprintf(base_dir, sizeof base_dir, "/dev/shm/sbx-test-tree-XXXXXX");
        if (!mkdtemp(base_dir))
                snprintf(base_dir, sizeof base_dir, "/tmp/sbx-test-tree-XXXXXX");
        if (base_dir[1] == 't' && !mkdtemp(base_dir)) {
                CHECK(false, "mkdtemp");
                return tap_done();
        }
        test_id_block();
        test_deep_copy();
        test_depth_ceiling();
        test_walk_moved();
        test_links_table();
        test_many_links();
        char cmd[256];
        snprintf(cmd, sizeof cmd, "chmod -R u+rwx '%s' 2>/dev/null; rm -rf '%s'", base_dir, base_dir);
        if (system(cmd) != 0)
                printf("# could not remove %s\n", base_dir);
        return tap_done();
}
