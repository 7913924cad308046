/* SPDX-License-Identifier: MIT */
/* Copying and clearing a sandbox's writable trees, and the fs ids a job walks them with. */
#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/prctl.h>
#include <signal.h>
#include <unistd.h>
#include <linux/capability.h>
#include "base/limits.h"
#include "base/util.h"
#include "fs/tree.h"
#include "fs/walk.h"

/* A parallel copy found what two copiers cannot do (hard links, a tree that changed): the
 * copy is made again by one. */
#define TREE_ONE_COPIER (-ENOTUNIQ)

/* A copy walks the source and the destination in step (fs/walk.h): src.v[i] and dst.v[i]
 * are a directory and its copy, and have the same path relative to their tops. */
typedef struct Copy {
        const TreeIds *ids;
        TreeStats *stats;
        int dst_top;
        dev_t dev;
        Walk src, dst;
        WalkLinks links;
        uid_t own_uid; /* what a file this process creates belongs to */
        gid_t own_gid;
        /* Two processes copying one tree (tree_copy_parallel): this one's number, or -1. The
         * entries of the top directory and of its directories are dealt out in turn (k);
         * the top's directories themselves are made by both and finished by the caller. */
        int worker;
        uint64_t k;
        bool kernel_copy; /* copy_file_range() works between these two filesystems */
        uint8_t *buf;
        char *err;
        size_t errlen;
} Copy;

/* Says in c->err (unless something already did) what failed on the entry `name` of the
 * current directory (NULL: the directory itself), with its path relative to the top. */
static int fail(Copy *c, int r, const char *what, const char *name) {
        if (c->err && c->err[0] == 0) {
                const char *path = !c->src.v ? NULL : name ? walk_child_path(&c->src, name) : walk_path(&c->src);
                snprintf(c->err, c->errlen, "%s %s: %s", what, path ? path : name ? name : "", strerror(-r));
        }
        return r;
}


/* Owner and times of a copied entry; the owner only where creation did not already give it.
 * Entries without an fd (symlinks, fifos) are named by their parent's fd and their own name,
 * never by a longer path, whose directories could have been swapped meanwhile. */
static int finish_entry(Copy *c, int fd, int dir, const char *name, const struct stat *st, bool is_link) {
        uid_t u = tree_map_uid(c->ids, st->st_uid);
        gid_t g = tree_map_gid(c->ids, st->st_gid);
        /* Everything is created in directories that are 0700 until filled (never setgid),
         * so a new entry belongs to this process's fs ids. */
        int r = 0;
        if (c->own_uid != u || c->own_gid != g) {
                r = fd >= 0 ? fchown(fd, u, g) : fchownat(dir, name, u, g, AT_SYMLINK_NOFOLLOW);
                if (r < 0 && errno != EPERM)
                        return negerrno();
        }
        struct timespec ts[2] = { st->st_atim, st->st_mtim };
        if (fd >= 0 && !is_link) {
                /* Files are created with their mode (umask 0); directories were 0700. */
                if (!S_ISREG(st->st_mode) && fchmod(fd, st->st_mode & 07777) < 0)
                        return negerrno();
                if (futimens(fd, ts) < 0)
                        return negerrno();
        } else {
                (void)utimensat(dir, name, ts, AT_SYMLINK_NOFOLLOW);
        }
        return 0;
}

static int copy_data(Copy *c, int in, int out, const struct stat *st) {
        off_t size = st->st_size;
        if (size == 0)
                return 0;
        /* Sparse: copy only the data, so a file that fits holes and all fits again. */
        if ((off_t)st->st_blocks * 512 < size) {
                if (ftruncate(out, size) < 0)
                        return negerrno();
                off_t pos = 0;
                while (pos < size) {
                        off_t data = lseek(in, pos, SEEK_DATA);
                        if (data < 0)
                                break;
                        off_t hole = lseek(in, data, SEEK_HOLE);
                        if (hole < 0)
                                hole = size;
                        for (off_t o = data; o < hole;) {
                                ssize_t n = pread(in, c->buf, (size_t)MIN((off_t)SBX_TREE_COPY_BUF, hole - o), o);
                                if (n < 0 && errno == EINTR)
                                        continue;
                                if (n <= 0)
                                        return n < 0 ? negerrno() : 0;
                                if (pwrite(out, c->buf, (size_t)n, o) != n)
                                        return errno ? negerrno() : -EIO;
                                o += n;
                        }
                        pos = hole;
                }
                return 0;
        }
        /* The size from the stat is what is copied: the tree is frozen, and a file growing
         * meanwhile (no freezer) is taken as it was. In the kernel where it can (one call
         * for a small file instead of a read and a write). */
        off_t left = size;
        while (left > 0 && c->kernel_copy) {
                ssize_t n = copy_file_range(in, NULL, out, NULL, (size_t)left, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && left == size && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) {
                        c->kernel_copy = false;
                        break;
                }
                if (n < 0)
                        return negerrno();
                if (n == 0)
                        return 0;
                left -= n;
        }
        while (left > 0) {
                ssize_t n = read(in, c->buf, (size_t)MIN(left, (off_t)SBX_TREE_COPY_BUF));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return negerrno();
                if (n == 0)
                        return 0;
                left -= n;
                for (ssize_t off = 0; off < n;) {
                        ssize_t w = write(out, c->buf + off, (size_t)(n - off));
                        if (w < 0 && errno == EINTR)
                                continue;
                        if (w < 0)
                                return negerrno();
                        off += w;
                }
        }
        return 0;
}

/* Records the file `name` of the current directory, just copied, as the first copy of ino. */
static void link_add(Copy *c, ino_t ino, const char *name) {
        const char *path = walk_child_path(&c->src, name);
        /* Out of memory: the next link becomes a copy (correct bytes, one inode more). */
        if (path)
                (void)walk_links_add(&c->links, c->dev, ino, 0, path);
}

/* The file `name` of the current destination directory as a hard link to `first` (a path
 * relative to the destination's top), reached one directory at a time without following
 * symlinks, and at any length. */
static int copy_hard_link(Copy *c, const char *first, const char *name) {
        const char *tname;
        _cleanup_close_ int tdir = walk_open_parent(c->dst_top, first, &tname);
        if (tdir < 0)
                return fail(c, tdir, "link", name);
        /* No AT_SYMLINK_FOLLOW: the first copy itself is linked, never what it points to. */
        if (linkat(tdir, tname, walk_fd(&c->dst), name, 0) < 0)
                return fail(c, negerrno(), "link", name);
        return 0;
}

/* Copies the regular file open as `in_fd` (taken over), the entry `name` of the current
 * source directory, into the current destination directory. */
static int copy_file(Copy *c, const char *name, int in_fd) {
        _cleanup_close_ int in = in_fd;
        struct stat st;
        if (fstat(in, &st) < 0)
                return fail(c, negerrno(), "stat", name);
        if (!S_ISREG(st.st_mode) || st.st_dev != c->dev)
                return 0;
        /* Two copiers cannot share a table of hard links: such a tree is copied by one. */
        if (c->worker >= 0 && st.st_nlink > 1)
                return TREE_ONE_COPIER;
        const char *first = st.st_nlink > 1 ? walk_links_find(&c->links, st.st_dev, st.st_ino, 0) : NULL;
        if (first)
                return copy_hard_link(c, first, name);
        /* Created with its final mode (the job's umask is 0): a file needs no chmod. */
        _cleanup_close_ int out = openat(walk_fd(&c->dst), name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                                         st.st_mode & 07777);
        if (out < 0 && errno == EEXIST && c->worker >= 0)
                /* The two copiers did not list the same entries: the tree changed after all. */
                return TREE_ONE_COPIER;
        if (out < 0)
                return fail(c, negerrno(), "create", name);
        int r = copy_data(c, in, out, &st);
        if (r < 0)
                return fail(c, r, "write", name);
        if ((r = finish_entry(c, out, -1, NULL, &st, false)) < 0)
                return fail(c, r, "set attributes of", name);
        c->stats->files++;
        c->stats->bytes += (uint64_t)st.st_size;
        if (st.st_nlink > 1)
                link_add(c, st.st_ino, name);
        return 0;
}

static int copy_symlink(Copy *c, const char *name, const struct stat *st) {
        char target[SBX_MAX_PATH_BYTES];
        ssize_t n = readlinkat(walk_fd(&c->src), name, target, sizeof target - 1);
        if (n < 0)
                return errno == ENOENT ? 0 : fail(c, negerrno(), "readlink", name);
        target[n] = 0;
        int dst = walk_fd(&c->dst);
        if (symlinkat(target, dst, name) < 0)
                return fail(c, negerrno(), "symlink", name);
        (void)finish_entry(c, -1, dst, name, st, true);
        c->stats->files++;
        return 0;
}

static int copy_fifo(Copy *c, const char *name, const struct stat *st) {
        int dst = walk_fd(&c->dst);
        if (mkfifoat(dst, name, st->st_mode & 07777) < 0)
                return fail(c, negerrno(), "mkfifo", name);
        /* mkfifoat() gave it its mode (umask 0); a chmod by name could follow a symlink
         * swapped in meanwhile. */
        (void)finish_entry(c, -1, dst, name, st, true);
        c->stats->files++;
        return 0;
}

/* Enters the directory `name` of the current source directory and makes its copy, which
 * becomes the current destination directory; its entries are listed for the walk. `shared`:
 * a directory of the top in a parallel copy, which both copiers make (whoever comes second
 * finds it there). Returns 0, 1 if there is nothing to copy (gone, no longer a directory, on
 * another filesystem), or -errno. */
static int copy_enter(Copy *c, const char *name, bool shared) {
        if (walk_depth(&c->src) >= c->src.max_depth)
                return fail(c, -ELOOP, "copy (too deep)", name);
        _cleanup_close_ int in = openat(walk_fd(&c->src), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (in < 0)
                return errno == ENOENT || errno == ENOTDIR || errno == ELOOP ? 1 : fail(c, negerrno(), "open", name);
        if (fstat(in, &st) < 0)
                return fail(c, negerrno(), "stat", name);
        if (st.st_dev != c->dev)
                return 1;
        int dst = walk_fd(&c->dst);
        if (mkdirat(dst, name, 0700) < 0 && !(shared && errno == EEXIST))
                return fail(c, negerrno(), "mkdir", name);
        int out = openat(dst, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (out < 0)
                return fail(c, negerrno(), "open the copy of", name);
        int r = walk_push(&c->dst, out, name);
        if (r < 0)
                return fail(c, r, "open the copy of", name);
        if ((r = walk_push(&c->src, TAKE_FD(in), name)) < 0)
                return fail(c, r, "open", name);
        if (!shared || c->worker == 0)
                c->stats->dirs++;
        if ((r = walk_list(&c->src, false)) < 0)
                return fail(c, r, "read", NULL);
        return 0;
}

/* The current directory is copied: its copy gets its attributes, and both walks go up. */
static int copy_leave(Copy *c) {
        int r;
        /* The top's directories of a parallel copy get theirs from finish_shared_dirs(). */
        bool shared = c->worker >= 0 && walk_depth(&c->src) == 1;
        if (!shared && (r = finish_entry(c, walk_fd(&c->dst), -1, NULL, walk_stat(&c->src), false)) < 0)
                return fail(c, r, "set attributes of", NULL);
        if ((r = walk_pop(&c->src)) < 0 || (r = walk_pop(&c->dst)) < 0)
                return fail(c, r, r == -ESTALE ? "copy (a directory was moved meanwhile)" : "open the parent of", NULL);
        return 0;
}

/* The entry `name` (d_type: its type as listed) of the current source directory. */
static int copy_entry(Copy *c, const char *name, unsigned char d_type) {
        int src = walk_fd(&c->src);
        size_t depth = walk_depth(&c->src);
        struct stat st;
        if (c->worker >= 0 && depth <= 1) {
                if (d_type == DT_UNKNOWN) {
                        if (fstatat(src, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                                return errno == ENOENT ? 0 : fail(c, negerrno(), "stat", name);
                        d_type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_LNK;
                }
                if (depth == 0 && d_type == DT_DIR)
                        return MIN(copy_enter(c, name, true), 0);
                if (c->k++ % 2 != (uint64_t)c->worker)
                        return 0;
        }
        if (d_type == DT_REG) {
                /* Most entries: opened at once, and the open file is what gets stat'ed. */
                int in = openat(src, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
                if (in >= 0)
                        return copy_file(c, name, in);
                if (errno == ENOENT)
                        return 0;
                if (errno != ELOOP && errno != ENXIO)
                        return fail(c, negerrno(), "open", name);
                /* Swapped for a symlink or a socket since the listing: look again. */
        }
        if (fstatat(src, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : fail(c, negerrno(), "stat", name);
        if (st.st_dev != c->dev)
                return 0;
        if (S_ISREG(st.st_mode)) {
                int in = openat(src, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
                if (in < 0)
                        return errno == ENOENT || errno == ELOOP ? 0 : fail(c, negerrno(), "open", name);
                return copy_file(c, name, in);
        }
        if (S_ISDIR(st.st_mode))
                return MIN(copy_enter(c, name, false), 0);
        if (S_ISLNK(st.st_mode))
                return copy_symlink(c, name, &st);
        if (S_ISFIFO(st.st_mode))
                return copy_fifo(c, name, &st);
        return 0;
}

/* Copies everything inside src into dst without recursion: the walks go down into each
 * directory as they meet it and back up once it is done, so the depth costs heap (a level
 * and its listing each), never stack, and at most SBX_TREE_OPEN_LEVELS fds a walk. */
static int copy_run(Copy *c, int src, int dst) {
        int r = walk_init(&c->src, src, "", SBX_MAX_TREE_DEPTH);
        if (r < 0 || (r = walk_init(&c->dst, dst, "", SBX_MAX_TREE_DEPTH)) < 0) {
                walk_done(&c->src);
                return fail(c, r, "open", NULL);
        }
        if ((r = walk_list(&c->src, false)) < 0)
                r = fail(c, r, "read", NULL);
        while (r >= 0) {
                const WalkEntry *e = walk_next(&c->src);
                if (e)
                        r = copy_entry(c, e->name, e->type);
                else if (walk_depth(&c->src) > 0)
                        r = copy_leave(c);
                else
                        break;
        }
        walk_done(&c->src);
        walk_done(&c->dst);
        return r;
}

/* What the second worker of a parallel copy reports. */
typedef struct WorkerResult {
        int r;
        TreeStats stats;
        char err[256];
} WorkerResult;

/* After a parallel copy: the top's directories get their attributes. */
static int finish_shared_dirs(Copy *c, int src, int dst) {
        /* A description of its own: a dup would share the read position (with the other
         * copier of a parallel copy, or with the caller). */
        int fd = openat(src, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
                safe_close(fd);
                return fail(c, -EIO, "read", NULL);
        }
        int r = 0;
        struct dirent *de;
        while ((de = readdir(d)) && r >= 0) {
                struct stat st;
                if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
                    fstatat(src, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode) || st.st_dev != c->dev)
                        continue;
                _cleanup_close_ int o = openat(dst, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (o >= 0 && (r = finish_entry(c, o, -1, NULL, &st, false)) < 0)
                        r = fail(c, r, "set attributes of", de->d_name);
        }
        closedir(d);
        return r;
}

static int copy_top(Copy *c, int src, int dst, bool parallel) {
        if (!parallel)
                return copy_run(c, src, dst);
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return copy_run(c, src, dst);
        pid_t pid = fork();
        if (pid < 0) {
                close(p[0]);
                close(p[1]);
                return copy_run(c, src, dst);
        }
        if (pid == 0) {
                (void)prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
                close(p[0]);
                WorkerResult wr = { 0 };
                c->worker = 1;
                c->stats = &wr.stats;
                c->err = wr.err;
                c->errlen = sizeof wr.err;
                wr.r = copy_run(c, src, dst);
                (void)!write(p[1], &wr, sizeof wr);
                _exit(0);
        }
        close(p[1]);
        c->worker = 0;
        int r = copy_run(c, src, dst);
        if (r < 0)
                kill(pid, SIGKILL);
        WorkerResult wr = { .r = -EIO };
        snprintf(wr.err, sizeof wr.err, "the second copier died");
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
        if (read(p[0], &wr, sizeof wr) != (ssize_t)sizeof wr)
                wr.r = r < 0 ? r : -EIO;
        close(p[0]);
        c->worker = -1;
        if (r >= 0 && wr.r < 0 && r != TREE_ONE_COPIER) {
                r = wr.r;
                if (c->err && c->errlen)
                        snprintf(c->err, c->errlen, "%s", wr.err);
        }
        if (r == TREE_ONE_COPIER) {
                char ignore[64];
                TreeStats zero = { 0 };
                *c->stats = zero;
                if (c->err && c->errlen)
                        c->err[0] = 0;
                if ((r = tree_clear(dst, ignore, sizeof ignore)) < 0)
                        return fail(c, r, "clear for a second try", NULL);
                return copy_run(c, src, dst);
        }
        c->stats->files += wr.stats.files;
        c->stats->dirs += wr.stats.dirs;
        c->stats->bytes += wr.stats.bytes;
        return r < 0 ? r : finish_shared_dirs(c, src, dst);
}

static int tree_copy_impl(int src, int dst, const TreeIds *ids, TreeStats *stats, bool parallel, char *err,
                          size_t errlen) {
        TreeStats dummy = { 0 };
        Copy c = { .ids = ids, .stats = stats ? stats : &dummy, .dst_top = dst, .err = err, .errlen = errlen,
                   .worker = -1, .kernel_copy = true };
        struct stat st;
        if (err && errlen)
                err[0] = 0;
        if (fstat(src, &st) < 0)
                return fail(&c, negerrno(), "stat", NULL);
        c.dev = st.st_dev;
        c.own_uid = (uid_t)setfsuid((uid_t)-1);
        c.own_gid = (gid_t)setfsgid((gid_t)-1);
        c.buf = malloc(SBX_TREE_COPY_BUF);
        if (!c.buf)
                return -ENOMEM;
        mode_t old_umask = umask(0);
        int r = copy_top(&c, src, dst, parallel);
        umask(old_umask);
        if (r >= 0 && (r = finish_entry(&c, dst, -1, NULL, &st, false)) < 0)
                r = fail(&c, r, "set attributes of", NULL);
        walk_links_done(&c.links);
        free(c.buf);
        return r;
}

int tree_copy(int src, int dst, const TreeIds *ids, TreeStats *stats, char *err, size_t errlen) {
        return tree_copy_impl(src, dst, ids, stats, false, err, errlen);
}

int tree_copy_parallel(int src, int dst, const TreeIds *ids, TreeStats *stats, char *err, size_t errlen) {
        return tree_copy_impl(src, dst, ids, stats, sysconf(_SC_NPROCESSORS_ONLN) > 1, err, errlen);
}

/* One level of the clear's walk: the directory's fd, its listing (closed beyond
 * SBX_TREE_OPEN_LEVELS, then listed again on the way back up), which directory it is (to know
 * it again when it is opened through "..") and its name in its parent. */
typedef struct Level {
        int fd;
        DIR *d;
        dev_t dev;
        ino_t ino;
        char *name;
} Level;

static DIR *list_dir(int fd) {
        int own = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = own >= 0 ? fdopendir(own) : NULL;
        if (!d)
                safe_close(own);
        return d;
}

/* The clear's walk: the directory being emptied and the levels above it. */
typedef struct Clear {
        Level *stack; /* from the top down to cur's parent */
        size_t n, cap;
        int cur;
        DIR *d; /* cur's listing */
        dev_t cur_dev; /* which directory cur is */
        ino_t cur_ino;
        char *err;
        size_t errlen;
} Clear;

/* Removes every entry of the current directory but directories; *ret_sub is the first
 * directory met (owned), NULL once none is left. */
static int clear_files(Clear *k, char **ret_sub) {
        struct dirent *de;
        *ret_sub = NULL;
        errno = 0;
        while ((de = readdir(k->d))) {
                const char *name = de->d_name;
                if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
                        continue;
                if (unlinkat(k->cur, name, 0) == 0 || errno == ENOENT)
                        continue;
                if (errno != EISDIR) {
                        int r = negerrno();
                        snprintf(k->err, k->errlen, "remove %s: %s", name, strerror(-r));
                        return r;
                }
                if (!(*ret_sub = strdup(name)))
                        return -ENOMEM;
                break;
        }
        return 0;
}

/* Makes the directory sub (taken over) of the current one the current one. */
static int clear_descend(Clear *k, char *sub) {
        int s = openat(k->cur, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        DIR *sd = s >= 0 && fstat(s, &st) == 0 ? list_dir(s) : NULL;
        if (!sd) {
                int r = s < 0 ? negerrno() : -EIO;
                snprintf(k->err, k->errlen, "open %s: %s", sub, strerror(-r));
                safe_close(s);
                free(sub);
                return r;
        }
        /* Rootless, our own read-only directory must become writable to be emptied. */
        (void)fchmod(s, 0700);
        if (ARRAY_GROW(k->stack, k->n, k->cap, 64) < 0) {
                closedir(sd);
                close(s);
                free(sub);
                return -ENOMEM;
        }
        if (k->n >= SBX_TREE_OPEN_LEVELS) {
                closedir(k->d);
                k->d = NULL;
                k->cur = safe_close(k->cur);
        }
        k->stack[k->n++] = (Level){ k->cur, k->d, k->cur_dev, k->cur_ino, sub };
        k->cur = s;
        k->d = sd;
        k->cur_dev = st.st_dev;
        k->cur_ino = st.st_ino;
        return 0;
}

/* The current directory is empty: back to its parent, and remove it there. Returns 1 when
 * the current directory was the top, 0 when its parent is now the current one, or -errno. */
static int clear_ascend(Clear *k) {
        closedir(k->d);
        k->d = NULL;
        if (k->n == 0)
                return 1;
        Level up = k->stack[--k->n];
        int r = 0;
        if (up.fd < 0) {
                /* ".." is where cur is now, which a rename may have changed: only the very
                 * directory the walk came down from will do. */
                struct stat st;
                up.fd = openat(k->cur, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (up.fd < 0 || fstat(up.fd, &st) < 0)
                        r = negerrno();
                else if (st.st_dev != up.dev || st.st_ino != up.ino)
                        r = -ESTALE;
                else
                        up.d = list_dir(up.fd);
        }
        k->cur = safe_close(k->cur);
        k->cur = up.fd;
        k->d = up.d;
        k->cur_dev = up.dev;
        k->cur_ino = up.ino;
        if (r == 0 && (!k->d || (unlinkat(k->cur, up.name, AT_REMOVEDIR) < 0 && errno != ENOENT)))
                r = !k->d ? -EIO : negerrno();
        if (r < 0) {
                snprintf(k->err, k->errlen, "rmdir %s: %s", up.name,
                         r == -ESTALE ? "a directory was moved meanwhile" : strerror(-r));
                free(up.name);
                return r;
        }
        free(up.name);
        return 0;
}

/* Iterative, without a depth limit: a tree a command made as deep as it liked must never
 * stand in the way of a restore. Below SBX_TREE_OPEN_LEVELS it goes back up through "..",
 * which is the parent it came from as long as nothing renames directories meanwhile (the
 * sandbox is frozen); if something did, the parent is no longer the directory it was and the
 * clear stops (-ESTALE) rather than remove anything elsewhere. */
int tree_clear(int top, char *err, size_t errlen) {
        if (err && errlen)
                err[0] = 0;
        Clear k = { .err = err, .errlen = errlen };
        k.cur = openat(top, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct stat st;
        k.d = k.cur >= 0 && fstat(k.cur, &st) == 0 ? list_dir(k.cur) : NULL;
        if (!k.d) {
                safe_close(k.cur);
                return -EIO;
        }
        k.cur_dev = st.st_dev;
        k.cur_ino = st.st_ino;
        int r;
        for (;;) {
                char *sub;
                if ((r = clear_files(&k, &sub)) < 0)
                        break;
                r = sub ? clear_descend(&k, sub) : clear_ascend(&k);
                if (r != 0)
                        break;
        }
        if (k.d)
                closedir(k.d);
        safe_close(k.cur);
        while (k.n > 0) {
                Level *l = &k.stack[--k.n];
                if (l->d)
                        closedir(l->d);
                safe_close(l->fd);
                free(l->name);
        }
        free(k.stack);
        return r < 0 ? r : 0;
}

int tree_become(uid_t uid, gid_t gid) {
        if (geteuid() != 0)
                return 0;
        (void)setfsgid(gid);
        (void)setfsuid(uid);
        /* A fs uid other than 0 drops the fs capabilities from the effective set; they are
         * still permitted, so take back the ones a copy needs. */
        struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
        struct __user_cap_data_struct d[2];
        if (syscall(SYS_capget, &h, d) < 0)
                return negerrno();
        const int caps[] = { CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_FSETID };
        /* Those and nothing else: no CAP_SYS_ADMIN, CAP_MKNOD... in a process that walks
         * trees a sandbox controls. */
        d[0].effective = d[1].effective = 0;
        for (size_t i = 0; i < ELEMENTSOF(caps); i++)
                d[caps[i] / 32].effective |= 1u << (caps[i] % 32);
        d[0].effective &= d[0].permitted;
        d[1].effective &= d[1].permitted;
        return syscall(SYS_capset, &h, d) < 0 ? negerrno() : 0;
}
