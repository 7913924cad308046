/* SPDX-License-Identifier: MIT */
/* Extracting a checked archive under a sandbox's root, each component opened relative to its
 * parent without following symlinks, directory modes and times set last. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "base/limits.h"
#include "fs/archive.h"
#include "fs/archive_private.h"

typedef struct DirFix {
        char *path;
        unsigned depth;
        mode_t mode;
        struct timespec mtime;
} DirFix;

typedef struct Extract {
        struct archive *a;
        int root;
        /* The parent directory of the previous entry, kept open: archives list a directory's
         * entries together, so most entries need no walk at all. */
        int cache_fd;
        char cache_path[SBX_MAX_PATH_BYTES];
        DirFix *dirs;
        size_t n_dirs, cap_dirs;
        char *err;
        size_t errlen;
} Extract;

static int extract_fail(Extract *x, int r, const char *what, const char *path) {
        archive_err(x->err, x->errlen, "%s %s: %s", what, path, strerror(-r));
        return r;
}

/* Whether the walk may create the directory `prefix` when missing: only below a top
 * directory; the tops and their parents belong to the sandbox's layout. */
static bool may_create(const char *prefix) { return archive_top_of(prefix) >= 0 && !archive_is_top(prefix); }

/* Returns a borrowed fd of directory `dir` (canonical, "" is the root), walked one component
 * at a time from the root with O_NOFOLLOW and created 0700 where missing. */
static int extract_open_dir(Extract *x, const char *dir) {
        if (!dir[0])
                return x->root;
        if (x->cache_fd >= 0 && strcmp(x->cache_path, dir) == 0)
                return x->cache_fd;
        x->cache_fd = safe_close(x->cache_fd);
        char prefix[SBX_MAX_PATH_BYTES];
        int fd = -1;
        for (const char *c = dir; *c;) {
                const char *end = strchrnul(c, '/');
                size_t plen = (size_t)(end - dir), l = (size_t)(end - c);
                memcpy(prefix, dir, plen);
                prefix[plen] = 0;
                char name[SBX_MAX_PATH_BYTES];
                memcpy(name, c, l);
                name[l] = 0;
                int parent = fd >= 0 ? fd : x->root;
                int next = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (next < 0 && errno == ENOENT && may_create(prefix)) {
                        if (mkdirat(parent, name, 0700) < 0 && errno != EEXIST) {
                                int r = negerrno();
                                safe_close(fd);
                                return extract_fail(x, r, "mkdir", prefix);
                        }
                        next = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                }
                if (next < 0) {
                        int r = negerrno();
                        safe_close(fd);
                        return extract_fail(x, r, "open", prefix);
                }
                safe_close(fd);
                fd = next;
                c = *end ? end + 1 : end;
        }
        x->cache_fd = fd;
        snprintf(x->cache_path, sizeof x->cache_path, "%s", dir);
        return fd;
}

/* Splits canonical path into its parent (in buf) and last component. */
static const char *split_path(const char *path, char *parent) {
        const char *slash = strrchr(path, '/');
        size_t l = slash ? (size_t)(slash - path) : 0;
        memcpy(parent, path, l);
        parent[l] = 0;
        return slash ? slash + 1 : path;
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

static int extract_dir_later(Extract *x, const char *path, mode_t mode, struct timespec mtime) {
        if (x->n_dirs == x->cap_dirs) {
                size_t cap = x->cap_dirs ? x->cap_dirs * 2 : 64;
                DirFix *d = reallocarray(x->dirs, cap, sizeof *d);
                if (!d)
                        return -ENOMEM;
                x->dirs = d;
                x->cap_dirs = cap;
        }
        char *p = strdup(path);
        if (!p)
                return -ENOMEM;
        unsigned depth = 0;
        for (const char *s = p; *s; s++)
                depth += *s == '/';
        x->dirs[x->n_dirs++] = (DirFix){ p, depth, mode, mtime };
        return 0;
}

static int extract_entry(Extract *x, struct archive_entry *e) {
        char path[SBX_MAX_PATH_BYTES], dir[SBX_MAX_PATH_BYTES];
        int r = archive_canonical_path(archive_name_of(e), "path", path, x->err, x->errlen);
        if (r < 0)
                return r;
        const char *name = split_path(path, dir);
        int pfd = extract_open_dir(x, dir);
        if (pfd < 0)
                return pfd;
        mode_t mode = archive_entry_mode(e) & 0777;
        struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, entry_mtime(e) };
        const char *hardlink = archive_hardlink_of(e);
        unsigned ft = archive_entry_filetype(e);
        if (hardlink) {
                char tpath[SBX_MAX_PATH_BYTES], tdir[SBX_MAX_PATH_BYTES];
                if ((r = archive_canonical_path(hardlink, "link target", tpath, x->err, x->errlen)) < 0)
                        return r;
                const char *tname = split_path(tpath, tdir);
                /* Walking to the target replaces the cached parent: keep ours open meanwhile. */
                _cleanup_close_ int keep = fcntl(pfd, F_DUPFD_CLOEXEC, 3);
                if (keep < 0)
                        return extract_fail(x, negerrno(), "open", dir);
                int tfd = extract_open_dir(x, tdir);
                if (tfd < 0)
                        return tfd;
                /* No AT_SYMLINK_FOLLOW: the target itself is linked, never what it points to. */
                if (linkat(tfd, tname, keep, name, 0) < 0)
                        return extract_fail(x, negerrno(), "link", path);
        } else if (ft == AE_IFDIR) {
                if (!archive_is_top(path) && mkdirat(pfd, name, 0700) < 0 && errno != EEXIST)
                        return extract_fail(x, negerrno(), "mkdir", path);
                /* Made before as a parent of an earlier entry, or a top directory: it must
                 * still be a directory, not something swapped in. */
                _cleanup_close_ int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0)
                        return extract_fail(x, negerrno(), "open", path);
                if ((r = extract_dir_later(x, path, archive_entry_mode(e) & 01777, ts[1])) < 0)
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
        if (x->depth != y->depth)
                return x->depth > y->depth ? -1 : 1;
        return strcmp(x->path, y->path);
}

/* Directory modes and times last, deepest first: a read-only directory could not have been
 * filled, and every entry made inside a directory moves its mtime. */
static int extract_fix_dirs(Extract *x) {
        if (x->n_dirs)
                qsort(x->dirs, x->n_dirs, sizeof *x->dirs, cmp_dirfix);
        for (size_t i = 0; i < x->n_dirs; i++) {
                const DirFix *d = &x->dirs[i];
                char dir[SBX_MAX_PATH_BYTES];
                const char *name = split_path(d->path, dir);
                int pfd = extract_open_dir(x, dir);
                if (pfd < 0)
                        return pfd;
                _cleanup_close_ int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0)
                        return extract_fail(x, negerrno(), "open", d->path);
                struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, d->mtime };
                if (fchmod(fd, d->mode) < 0 || futimens(fd, ts) < 0) {
                        /* The top directories are the sandbox's; when not ours to change,
                         * their contents still are. */
                        if (errno == EPERM && archive_is_top(d->path))
                                continue;
                        return extract_fail(x, negerrno(), "set attributes of", d->path);
                }
        }
        return 0;
}

int archive_extract(const uint8_t *data, size_t len, int root, char *err, size_t errlen) {
        if (err && errlen)
                err[0] = 0;
        Extract x = { .root = root, .cache_fd = -1, .err = err, .errlen = errlen };
        int r = 0;
        x.a = archive_reader_open(data, len);
        if (!x.a)
                return archive_err(err, errlen, "not an sbx archive: not a zstd-compressed tar");
        for (;;) {
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
        safe_close(x.cache_fd);
        archive_read_free(x.a);
        for (size_t i = 0; i < x.n_dirs; i++)
                free(x.dirs[i].path);
        free(x.dirs);
        return r;
}
