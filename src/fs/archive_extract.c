/* SPDX-License-Identifier: MIT */
/* Extracting a checked archive under a sandbox's root, each component opened relative to its
 * parent without following symlinks, directory modes and times set last. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/util.h"
#include "fs/archive.h"
#include "fs/archive_private.h"
#include "fs/walk.h"

typedef struct DirFix {
        uint32_t node; /* in Extract.paths */
        mode_t mode;
        struct timespec mtime;
} DirFix;

typedef struct Extract {
        struct archive *a;
        int root;
        /* Every path, node for node the tree archive_check() built: it played this walk. */
        ArchiveTree paths;
        ArchiveCursor cursor; /* the previous entry's */
        uint32_t tops[ARCHIVE_N_TOPS]; /* their nodes */
        /* The directory of the previous entry, from the root down: archives list a directory's
         * entries together, so most entries need no walk at all, and the next directory is
         * reached from the deepest one both share. at[k] is the node of the walk's level k,
         * under[k] whether it is a top directory or below one. */
        Walk walk;
        uint32_t *at;
        bool *under;
        uint32_t *down; /* scratch: the nodes extract_goto() enters */
        size_t cap_at;
        DirFix *dirs;
        size_t n_dirs, cap_dirs;
        char *err;
        size_t errlen;
} Extract;

static int extract_fail(Extract *x, int r, const char *what, const char *path) {
        archive_err(x->err, x->errlen, "%s %s: %s", what, path, strerror(-r));
        return r;
}

static int extract_fail_node(Extract *x, int r, const char *what, uint32_t node) {
        _cleanup_free_ char *path = archive_tree_path(&x->paths, node);
        return extract_fail(x, r, what, path ? path : "?");
}

static bool is_top(const Extract *x, uint32_t node) {
        for (size_t i = 0; i < ELEMENTSOF(x->tops); i++)
                if (x->tops[i] == node)
                        return true;
        return false;
}

/* Makes directory `target` the walk's current directory: up to the deepest directory it
 * shares with the current one, then down one component at a time with O_NOFOLLOW, creating
 * directories 0700 where missing but only below a top directory (the tops and their parents
 * belong to the sandbox's layout). Enters and leaves exactly the directories between the two
 * nodes, as check_walk() counted. */
static int extract_goto(Extract *x, uint32_t target) {
        const ArchiveNode *nodes = x->paths.nodes;
        size_t need = nodes[target].depth + 1;
        if (need > x->cap_at) {
                size_t cap = MAX(need, x->cap_at * 2);
                uint32_t *at = reallocarray(x->at, cap, sizeof *at), *down = at ? reallocarray(x->down, cap, sizeof *down) : NULL;
                bool *under = down ? reallocarray(x->under, cap, sizeof *under) : NULL;
                if (at)
                        x->at = at;
                if (down)
                        x->down = down;
                if (!under)
                        return -ENOMEM;
                x->under = under;
                x->cap_at = cap;
        }
        size_t n_down = 0;
        uint32_t t = target;
        while (nodes[t].depth > walk_depth(&x->walk)) {
                x->down[n_down++] = t;
                t = nodes[t].parent;
        }
        int r = walk_pop_to(&x->walk, nodes[t].depth);
        while (r >= 0 && t != x->at[nodes[t].depth]) {
                x->down[n_down++] = t;
                t = nodes[t].parent;
                r = walk_pop(&x->walk);
        }
        if (r < 0)
                return extract_fail(x, r, "open", walk_path(&x->walk));
        while (n_down > 0) {
                uint32_t n = x->down[--n_down];
                size_t k = walk_depth(&x->walk);
                const char *name = nodes[n].name;
                int parent = walk_fd(&x->walk);
                int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0 && errno == ENOENT && x->under[k]) {
                        if (mkdirat(parent, name, 0700) < 0 && errno != EEXIST)
                                return extract_fail_node(x, negerrno(), "mkdir", n);
                        fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                }
                if (fd < 0 || (r = walk_push(&x->walk, fd, name)) < 0)
                        return extract_fail_node(x, fd < 0 ? negerrno() : r, "open", n);
                x->at[k + 1] = n;
                x->under[k + 1] = x->under[k] || is_top(x, n);
        }
        return 0;
}

static struct timespec entry_mtime(struct archive_entry *e) {
        if (!archive_entry_mtime_is_set(e))
                return (struct timespec){ .tv_nsec = UTIME_OMIT };
        return (struct timespec){ archive_entry_mtime(e), archive_entry_mtime_nsec(e) };
}

static int extract_data(Extract *x, int fd, la_int64_t size, const char *path) {
        const void *buf;
        size_t len;
        la_int64_t off, end = 0;
        for (;;) {
                int r = archive_read_data_block(x->a, &buf, &len, &off);
                if (r == ARCHIVE_EOF)
                        break;
                if (r < ARCHIVE_WARN)
                        return archive_err(x->err, x->errlen, "archive unreadable: %s", archive_error_string(x->a) ?: "unknown error");
                /* At the block's offset: holes of sparse entries stay holes. */
                for (size_t done = 0; done < len;) {
                        ssize_t n = pwrite(fd, (const uint8_t *)buf + done, len - done, off + (off_t)done);
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n < 0)
                                return extract_fail(x, negerrno(), "write", path);
                        done += (size_t)n;
                }
                end = MAX(end, off + (la_int64_t)len);
        }
        if (end < size && ftruncate(fd, size) < 0)
                return extract_fail(x, negerrno(), "write", path);
        return 0;
}

static int extract_dir_later(Extract *x, uint32_t node, mode_t mode, struct timespec mtime) {
        if (ARRAY_GROW(x->dirs, x->n_dirs, x->cap_dirs, 64) < 0)
                return -ENOMEM;
        x->dirs[x->n_dirs++] = (DirFix){ node, mode, mtime };
        return 0;
}

static int extract_entry(Extract *x, struct archive_entry *e) {
        _cleanup_free_ char *path = NULL;
        const char *rest;
        int r = archive_canonical_path(archive_name_of(e), "path", &path, x->err, x->errlen);
        if (r < 0)
                return r;
        uint32_t from = archive_cursor_start(&x->paths, &x->cursor, path, &rest);
        int64_t node = archive_tree_place(&x->paths, from, rest, 0);
        if (node < 0 || (r = archive_cursor_set(&x->cursor, path, (uint32_t)node)) < 0)
                return extract_fail(x, node < 0 ? (int)node : r, "extract", path);
        const char *name = x->paths.nodes[node].name;
        if ((r = extract_goto(x, x->paths.nodes[node].parent)) < 0)
                return r;
        int pfd = walk_fd(&x->walk);
        mode_t mode = archive_entry_mode(e) & 0777;
        struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, entry_mtime(e) };
        const char *hardlink = archive_hardlink_of(e);
        unsigned ft = archive_entry_filetype(e);
        if (hardlink) {
                _cleanup_free_ char *tpath = NULL;
                if ((r = archive_canonical_path(hardlink, "link target", &tpath, x->err, x->errlen)) < 0)
                        return r;
                int64_t tnode = archive_tree_find(&x->paths, tpath);
                if (tnode < 0)
                        return extract_fail(x, -ENOENT, "link", path);
                /* Walking to the target leaves the entry's directory: keep it open meanwhile. */
                _cleanup_close_ int keep = fcntl(pfd, F_DUPFD_CLOEXEC, 3);
                if (keep < 0)
                        return extract_fail(x, negerrno(), "open", path);
                if ((r = extract_goto(x, x->paths.nodes[tnode].parent)) < 0)
                        return r;
                /* No AT_SYMLINK_FOLLOW: the target itself is linked, never what it points to. */
                if (linkat(walk_fd(&x->walk), x->paths.nodes[tnode].name, keep, name, 0) < 0)
                        return extract_fail(x, negerrno(), "link", path);
        } else if (ft == AE_IFDIR) {
                if (!is_top(x, (uint32_t)node) && mkdirat(pfd, name, 0700) < 0 && errno != EEXIST)
                        return extract_fail(x, negerrno(), "mkdir", path);
                /* Made before as a parent of an earlier entry, or a top directory: it must
                 * still be a directory, not something swapped in. */
                _cleanup_close_ int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0)
                        return extract_fail(x, negerrno(), "open", path);
                if ((r = extract_dir_later(x, (uint32_t)node, archive_entry_mode(e) & 01777, ts[1])) < 0)
                        return extract_fail(x, r, "extract", path);
        } else if (ft == AE_IFREG) {
                _cleanup_close_ int fd = openat(pfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
                if (fd < 0)
                        return extract_fail(x, negerrno(), "create", path);
                if ((r = extract_data(x, fd, archive_entry_size(e), path)) < 0)
                        return r;
                if (fchmod(fd, mode) < 0 || futimens(fd, ts) < 0)
                        return extract_fail(x, negerrno(), "set attributes of", path);
        } else if (ft == AE_IFLNK) {
                const char *target = archive_symlink_of(e);
                if (!target || symlinkat(target, pfd, name) < 0)
                        return extract_fail(x, target ? negerrno() : -EINVAL, "symlink", path);
                if (utimensat(pfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
                        return extract_fail(x, negerrno(), "set attributes of", path);
        } else if (ft == AE_IFIFO) {
                if (mkfifoat(pfd, name, 0600) < 0)
                        return extract_fail(x, negerrno(), "mkfifo", path);
                /* Mode and time through an fd of the fifo itself, so nothing swapped in by a
                 * running sandbox could be followed. O_NONBLOCK: a read open needs no writer. */
                _cleanup_close_ int fd = openat(pfd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
                struct stat st;
                if (fd < 0 || fstat(fd, &st) < 0)
                        return extract_fail(x, negerrno(), "open", path);
                if (!S_ISFIFO(st.st_mode))
                        return extract_fail(x, -EEXIST, "mkfifo", path);
                if (fchmod(fd, mode) < 0 || futimens(fd, ts) < 0)
                        return extract_fail(x, negerrno(), "set attributes of", path);
        } else {
                return archive_err(x->err, x->errlen, "archive entry %s: unsupported entry type", path);
        }
        return 0;
}

static int cmp_dirfix(const void *a, const void *b) {
        const DirFix *x = a, *y = b;
        return x->node == y->node ? 0 : x->node > y->node ? -1 : 1;
}

/* Directory modes and times last, children first (decreasing nodes, see ArchiveTree): a
 * read-only directory could not have been filled, and every entry made inside a directory
 * moves its mtime. */
static int extract_fix_dirs(Extract *x) {
        if (x->n_dirs)
                qsort(x->dirs, x->n_dirs, sizeof *x->dirs, cmp_dirfix);
        for (size_t i = 0; i < x->n_dirs; i++) {
                const DirFix *d = &x->dirs[i];
                int r = extract_goto(x, x->paths.nodes[d->node].parent);
                if (r < 0)
                        return r;
                _cleanup_close_ int fd = openat(walk_fd(&x->walk), x->paths.nodes[d->node].name,
                                                O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0)
                        return extract_fail_node(x, negerrno(), "open", d->node);
                struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, d->mtime };
                if (fchmod(fd, d->mode) < 0 || futimens(fd, ts) < 0) {
                        /* The top directories are the sandbox's; when not ours to change,
                         * their contents still are. */
                        if (errno == EPERM && is_top(x, d->node))
                                continue;
                        return extract_fail_node(x, negerrno(), "set attributes of", d->node);
                }
        }
        return 0;
}

int archive_extract(const uint8_t *data, size_t len, int root, char *err, size_t errlen) {
        if (err && errlen)
                err[0] = 0;
        Extract x = { .root = root, .err = err, .errlen = errlen };
        int r = walk_init(&x.walk, root, "", SBX_MAX_TREE_DEPTH + 2);
        if (r < 0)
                return extract_fail(&x, r, "open", "/");
        if ((r = archive_tree_init(&x.paths)) < 0 || (r = archive_tree_add_tops(&x.paths, 0)) < 0 ||
            !(x.at = calloc(1, sizeof *x.at)) || !(x.under = calloc(1, sizeof *x.under))) {
                walk_done(&x.walk);
                archive_tree_free(&x.paths);
                free(x.at);
                return extract_fail(&x, r < 0 ? r : -ENOMEM, "extract", "/");
        }
        x.cap_at = 1;
        for (size_t i = 0; i < ELEMENTSOF(x.tops); i++)
                x.tops[i] = (uint32_t)archive_tree_find(&x.paths, archive_tops[i]);
        x.a = archive_reader_open(data, len);
        if (!x.a)
                r = archive_err(err, errlen, "not an sbx archive: not a zstd-compressed tar");
        for (; x.a;) {
                struct archive_entry *e;
                int h = archive_read_next_header(x.a, &e);
                if (h == ARCHIVE_EOF)
                        break;
                if (h < ARCHIVE_WARN) {
                        r = archive_err(err, errlen, "archive unreadable: %s", archive_error_string(x.a) ?: "unknown error");
                        break;
                }
                const char *raw = archive_name_of(e);
                if (raw && strcmp(raw, ARCHIVE_MANIFEST) == 0)
                        continue;
                if ((r = extract_entry(&x, e)) < 0)
                        break;
        }
        if (r >= 0)
                r = extract_fix_dirs(&x);
        if (r == -ENOMEM)
                archive_err(err, errlen, "extract: out of memory");
        if (x.a)
                archive_read_free(x.a);
        walk_done(&x.walk);
        archive_tree_free(&x.paths);
        archive_cursor_free(&x.cursor);
        free(x.at);
        free(x.under);
        free(x.down);
        free(x.dirs);
        return r;
}
