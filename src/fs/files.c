/* SPDX-License-Identifier: MIT */
/* The jailed files API; see files.h for the rules. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/util.h"
#include "fs/files.h"
#include "fs/tree.h"

#define ABS_BYTES FS_ABS_BYTES

const char *fs_type_name(FsType t) {
        switch (t) {
        case FS_FILE: return "file";
        case FS_DIR: return "dir";
        case FS_SYMLINK: return "symlink";
        case FS_OTHER:
        default: return "other";
        }
}

void fs_info_clear(FsInfo *i) {
        free(i->name);
        free(i->path);
        free(i->target);
        *i = (FsInfo){ 0 };
}

/* The daemon acts with the sandbox user's file-system identity for the whole call. */
static void as_user(const FsCtx *c) {
        (void)setfsgid(c->gid);
        (void)setfsuid(c->uid);
}

static void as_daemon(void) {
        (void)setfsuid(geteuid());
        (void)setfsgid(getegid());
}

/* Absolute form of a sandbox path: relative ones start at /home/user; trailing slashes go. */
static int normalize(const char *in, char *out) {
        if (!in || !*in)
                return -EINVAL;
        if (strlen(in) >= SBX_MAX_FILES_PATH_BYTES)
                return -ENAMETOOLONG;
        snprintf(out, ABS_BYTES, "%s%s", in[0] == '/' ? "" : "/home/user/", in);
        size_t n = strlen(out);
        for (;;) {
                if (n > 1 && out[n - 1] == '/')
                        out[--n] = 0;
                else if (n > 2 && out[n - 1] == '.' && out[n - 2] == '/')
                        out[n -= 2] = 0; /* "dir/." is "dir" */
                else
                        break;
        }
        if (n == 0)
                strcpy(out, "/");
        return 0;
}

/* Splits an absolute path into parent and last component; the last one must name something
 * ("/" , "." and ".." do not). */
static int split(const char *abs, char *dir, char *base) {
        const char *slash = strrchr(abs, '/');
        size_t dlen = (size_t)(slash - abs);
        memcpy(dir, abs, dlen);
        dir[dlen ? dlen : 1] = 0;
        if (!dlen)
                dir[0] = '/';
        if (strlen(slash + 1) > NAME_MAX)
                return -ENAMETOOLONG;
        snprintf(base, NAME_MAX + 1, "%s", slash + 1);
        if (!base[0] || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
                return -EINVAL;
        return 0;
}

/* Puts why a call failed into c->err and returns r: for `return fail(c, r, ...)`. */
__attribute__((format(printf, 3, 4))) static int fail(const FsCtx *c, int r, const char *fmt, ...) {
        if (c->err && c->errlen) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(c->err, c->errlen, fmt, ap);
                va_end(ap);
        }
        return r;
}

static bool failed_in_words(const FsCtx *c) { return c->err && c->err[0]; }

/* The absolute form of a path whose last component is to be changed, split. */
static int target(const FsCtx *c, const char *path, char *abs, char *dir, char *base) {
        int r = normalize(path, abs);
        if (r == 0 && (r = split(abs, dir, base)) == -EINVAL)
                return fail(c, r, "%s does not name an entry that can be changed (/, . and .. do not)", path);
        return r;
}

static int read_only(const FsCtx *c, const char *path) {
        return fail(c, -EROFS, "%s is in a read-only place (only /tmp, /home/user and /dev/shm can be changed)", path);
}

/* r in words when the writable tmpfs (the one fd is on) ran out of bytes or inodes. */
static int full(const FsCtx *c, int fd, int r, const char *path) {
        if (r != -ENOSPC && r != -EDQUOT)
                return r;
        struct statfs sf;
        if (fstatfs(fd, &sf) == 0 && sf.f_files && sf.f_ffree == 0)
                return fail(c, r, "the sandbox's filesystem is full: it holds its limit of %llu files and "
                            "directories (fileCount): %s", (unsigned long long)c->file_count, path);
        char limit[32];
        if (!c->fs_bytes)
                return fail(c, r, "the sandbox's filesystem is full: %s", path);
        format_size(c->fs_bytes, limit, sizeof limit);
        return fail(c, r, "the sandbox's filesystem is full (its limit, fsLimitBytes, is %s): %s", limit, path);
}

static int resolve(const FsCtx *c, const char *abs, uint64_t flags, uint64_t mode) {
        struct open_how how = {
                .flags = flags | O_CLOEXEC,
                .mode = mode,
                .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
        };
        /* No retry on EAGAIN: with O_NONBLOCK it means a lease held from inside the sandbox. */
        long fd = syscall(SYS_openat2, c->root, abs, &how, sizeof how);
        return fd < 0 ? negerrno() : (int)fd;
}

static int open_parent(const FsCtx *c, const char *dir) {
        return resolve(c, dir, O_PATH | O_DIRECTORY, 0);
}

/* What a call does to the entry it changes. */
typedef enum Change { CH_WRITE, CH_MKDIR, CH_REMOVE, CH_MOVE, CH_REPLACE } Change;

/* Whether entry `base` of directory pfd may be changed as ch says; when not, why, in words
 * naming path. Only entries of the writable tmpfs change (the read-only system binds, /proc,
 * /dev and the skeleton are refused with EROFS), and a mount point (/tmp, /home/user,
 * /dev/shm) is never removed, moved or replaced: the kernel would say EROFS (its parent is
 * the skeleton) or EBUSY, naming neither the path nor the cause. *ret_mode gets the entry's
 * st_mode, 0 when there is none. */
static int check_change(const FsCtx *c, int pfd, const char *base, const char *path, Change ch, mode_t *ret_mode) {
        static const char *const verbs[] = { "write", "create", "remove", "move", "replace" };
        struct statx sx;
        struct stat pst;
        *ret_mode = 0;
        if (fstat(pfd, &pst) < 0)
                return negerrno();
        if (statx(pfd, base, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, STATX_TYPE, &sx) == 0) {
                *ret_mode = sx.stx_mode;
                bool mount = (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT)
                                     ? (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0
                                     : makedev(sx.stx_dev_major, sx.stx_dev_minor) != pst.st_dev;
                if (ch == CH_MKDIR)
                        return -EEXIST;
                if (ch == CH_WRITE && S_ISDIR(sx.stx_mode))
                        return fail(c, -EISDIR, "cannot write %s: it is a directory", path);
                if (mount)
                        return fail(c, -EBUSY, "cannot %s %s: it is a mount point (a directory in use)", verbs[ch], path);
        } else if (errno != ENOENT) {
                return negerrno();
        } else if (ch == CH_REMOVE || ch == CH_MOVE) {
                return -ENOENT;
        }
        return pst.st_dev == c->writable ? 0 : read_only(c, path);
}

/* Kernel file systems whose files act on the kernel when read (or whose permission checks
 * look at the caller's effective ids, which are root's): never read through the API. */
static bool readable_fs(int fd) {
        struct statfs sf;
        if (fstatfs(fd, &sf) < 0)
                return false;
        return sf.f_type != PROC_SUPER_MAGIC && sf.f_type != SYSFS_MAGIC && sf.f_type != DEVPTS_SUPER_MAGIC &&
               sf.f_type != CGROUP2_SUPER_MAGIC && sf.f_type != CGROUP_SUPER_MAGIC;
}

static void fill_info(FsInfo *i, const struct stat *st) {
        i->type = S_ISREG(st->st_mode) ? FS_FILE : S_ISDIR(st->st_mode) ? FS_DIR
                : S_ISLNK(st->st_mode) ? FS_SYMLINK : FS_OTHER;
        i->size = (uint64_t)st->st_size;
        i->mode = st->st_mode & 07777;
        i->mtime_ms = (int64_t)st->st_mtim.tv_sec * 1000 + st->st_mtim.tv_nsec / 1000000;
}

/* Info on `name` in directory fd `dfd`, reported as `path`. */
static int info_at(int dfd, const char *name, const char *path, FsInfo *ret) {
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW | (*name ? 0 : AT_EMPTY_PATH)) < 0)
                return negerrno();
        *ret = (FsInfo){ 0 };
        fill_info(ret, &st);
        const char *slash = strrchr(path, '/');
        ret->name = strdup(slash && slash[1] ? slash + 1 : "/");
        ret->path = strdup(path);
        if (ret->type == FS_SYMLINK) {
                char t[SBX_MAX_PATH_BYTES];
                ssize_t n = readlinkat(dfd, name, t, sizeof t - 1);
                if (n >= 0) {
                        t[n] = 0;
                        ret->target = strdup(t);
                }
        }
        if (!ret->name || !ret->path) {
                fs_info_clear(ret);
                return -ENOMEM;
        }
        return 0;
}

int fs_read(const FsCtx *c, const char *path, uint64_t offset, uint64_t length, uint8_t **ret,
            size_t *ret_len, uint64_t *ret_size) {
        char abs[ABS_BYTES];
        int r = normalize(path, abs);
        if (r < 0)
                return r;
        as_user(c);
        _cleanup_close_ int fd = resolve(c, abs, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0);
        struct stat st;
        if (fd < 0) {
                r = fd;
        } else if (fstat(fd, &st) < 0) {
                r = negerrno();
        } else if (!S_ISREG(st.st_mode)) {
                r = S_ISDIR(st.st_mode) ? -EISDIR /* a fifo or device could block the daemon */
                    : fail(c, -EINVAL, "cannot read %s: it is not a regular file (but a fifo, socket or device)", path);
        } else if (!readable_fs(fd)) {
                r = -EACCES;
        } else {
                uint64_t size = (uint64_t)st.st_size, off = MIN(offset, size), n = size - off;
                if (length)
                        n = MIN(n, MIN(length, (uint64_t)SBX_MAX_FILE_READ_BYTES));
                else if (n > SBX_MAX_FILE_READ_BYTES)
                        r = -EFBIG;
                uint8_t *buf = r == 0 ? malloc(n ? n : 1) : NULL;
                size_t got = 0;
                if (r == 0 && !buf)
                        r = -ENOMEM;
                while (r == 0 && got < n) {
                        ssize_t k = pread(fd, buf + got, n - got, (off_t)(off + got));
                        if (k < 0 && errno == EINTR)
                                continue;
                        if (k <= 0) {
                                if (k < 0)
                                        r = negerrno();
                                break;
                        }
                        got += (size_t)k;
                }
                if (r == 0) {
                        *ret = buf;
                        *ret_len = got;
                        *ret_size = size;
                } else {
                        free(buf);
                }
        }
        as_daemon();
        return r;
}

/* mkdir -p of an absolute path, one component at a time, each resolved in the jail; path is
 * the caller's, for messages. */
static int mkdir_parents(const FsCtx *c, const char *abs, const char *path) {
        char prefix[ABS_BYTES], dir[ABS_BYTES], base[NAME_MAX + 1];
        size_t n = strlen(abs);
        for (size_t i = 1; i <= n; i++) {
                if (abs[i] != '/' && abs[i] != 0)
                        continue;
                memcpy(prefix, abs, i);
                prefix[i] = 0;
                if (split(prefix, dir, base) < 0)
                        continue; /* "." or ".." components resolve in the jail as they are */
                _cleanup_close_ int pfd = open_parent(c, dir);
                if (pfd < 0)
                        return pfd;
                struct stat st;
                if (fstatat(pfd, base, &st, 0) == 0 && S_ISDIR(st.st_mode))
                        continue;
                struct stat pst;
                if (fstat(pfd, &pst) < 0 || pst.st_dev != c->writable)
                        return read_only(c, path);
                if (mkdirat(pfd, base, 0755) < 0 && errno != EEXIST)
                        return full(c, pfd, negerrno(), path);
        }
        _cleanup_close_ int fd = resolve(c, abs, O_PATH | O_DIRECTORY, 0);
        return fd < 0 ? fd : 0;
}

/* The directory of path (made if missing) and the checked name in it, for a write. */
static int open_for_write(const FsCtx *c, const char *path, char *base, mode_t *ret_mode) {
        char abs[ABS_BYTES], dir[ABS_BYTES];
        int r = target(c, path, abs, dir, base);
        if (r < 0 || (r = mkdir_parents(c, dir, path)) < 0)
                return r;
        int pfd = open_parent(c, dir);
        if (pfd >= 0 && (r = check_change(c, pfd, base, path, CH_WRITE, ret_mode)) < 0) {
                close(pfd);
                return r;
        }
        return pfd;
}

/* Whether the name tmp in dir is still the file open as fd (a command may have removed it or
 * put something else there). */
static bool still_there(int dir, const char *tmp, int fd) {
        struct stat mine, now;
        return fstat(fd, &mine) == 0 && fstatat(dir, tmp, &now, AT_SYMLINK_NOFOLLOW) == 0 &&
               now.st_ino == mine.st_ino && now.st_dev == mine.st_dev;
}

int fs_upload_begin(const FsCtx *c, const char *path, int mode, FsUpload *ret) {
        if (mode > 07777)
                return -EINVAL;
        FsUpload u = { .dir = -1, .fd = -1, .mode = mode >= 0 ? (mode_t)mode : 0644 };
        char hex[17];
        mode_t m;
        if (random_hex(hex, 8) < 0)
                snprintf(hex, sizeof hex, "%016llx", (unsigned long long)now_ns());
        snprintf(u.tmp, sizeof u.tmp, ".sbx-%s.tmp", hex);
        as_user(c);
        int r = u.dir = open_for_write(c, path, u.base, &m);
        /* Made by the sandbox's user, 0600 until the commit gives it its mode. */
        if (r >= 0 && (u.fd = openat(u.dir, ".", O_WRONLY | O_TMPFILE | O_CLOEXEC, 0600)) < 0)
                r = full(c, u.dir, negerrno(), path);
        as_daemon();
        if (r < 0) {
                safe_close(u.dir);
                return r;
        }
        *ret = u;
        return 0;
}

int fs_upload_write(const FsCtx *c, FsUpload *u, const void *data, size_t len, const char *path) {
        if (u->fd < 0)
                return -EBADF;
        int r = write_all(u->fd, data, len);
        return r < 0 ? full(c, u->fd, r, path) : 0;
}

int fs_upload_commit(const FsCtx *c, FsUpload *u, const char *path) {
        mode_t m;
        int r = 0;
        if (u->fd < 0)
                return -EBADF;
        as_user(c);
        if (fchmod(u->fd, u->mode) < 0)
                r = negerrno();
        /* The target again: it may have become a directory since the upload began. rename
         * replaces whatever else `base` is (a symlink included) without following it. */
        else if ((r = check_change(c, u->dir, u->base, path, CH_WRITE, &m)) == 0) {
                char proc[64];
                snprintf(proc, sizeof proc, "/proc/self/fd/%d", u->fd);
                /* The file had no name until now (O_TMPFILE), so no fork, snapshot or export
                 * copied it half written; it gets one for as long as the rename takes. */
                if (linkat(AT_FDCWD, proc, u->dir, u->tmp, AT_SYMLINK_FOLLOW) < 0)
                        r = errno == ENOENT ? fail(c, -ENOENT, "cannot write %s: its directory was removed meanwhile "
                                                   "(by a command, a restore or an import)", path)
                                            : full(c, u->dir, negerrno(), path);
                else if (renameat(u->dir, u->tmp, u->dir, u->base) < 0) {
                        r = negerrno();
                        (void)unlinkat(u->dir, u->tmp, 0);
                }
        }
        as_daemon();
        if (r < 0) {
                fs_upload_abort(u);
                return r;
        }
        u->fd = safe_close(u->fd);
        u->dir = safe_close(u->dir);
        return 0;
}

void fs_upload_abort(FsUpload *u) {
        /* The file has no name (O_TMPFILE): closing it gives its space back. */
        u->fd = safe_close(u->fd);
        u->dir = safe_close(u->dir);
}

/* Appends to `base` in pfd, which check_change found to be of mode m (0: none). A failed
 * append leaves things as they were: the file is cut back to its old size, or removed if
 * this call made it, so the space comes back. */
static int append_at(const FsCtx *c, int pfd, const char *base, mode_t m, const void *data, size_t len, int mode,
                     const char *path) {
        if (S_ISLNK(m))
                return fail(c, -ELOOP, "cannot append to %s: it is a symbolic link, which appending does not follow "
                            "(a write without append replaces it)", path);
        if (m && !S_ISREG(m))
                return fail(c, -EINVAL, "cannot append to %s: it is not a regular file", path);
        /* Never following the last component: a symlink planted since the check (to
         * /proc/sys/..., say) is refused with ELOOP. */
        _cleanup_close_ int fd = openat(pfd, base, O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW |
                                        O_CLOEXEC, mode >= 0 ? (mode_t)mode : 0644);
        struct stat st;
        if (fd < 0)
                return full(c, pfd, negerrno(), path);
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_dev != c->writable)
                return fail(c, -EINVAL, "cannot append to %s: it is not a regular file", path);
        int r = write_all(fd, data, len);
        if (r < 0) {
                r = full(c, fd, r, path);
                if (!m && still_there(pfd, base, fd))
                        (void)unlinkat(pfd, base, 0);
                else
                        (void)!ftruncate(fd, st.st_size);
        }
        return r;
}

int fs_write(const FsCtx *c, const char *path, const void *data, size_t len, int mode, bool append) {
        char base[NAME_MAX + 1];
        mode_t m;
        if (mode > 07777)
                return -EINVAL;
        if (append) {
                as_user(c);
                _cleanup_close_ int pfd = open_for_write(c, path, base, &m);
                int r = pfd < 0 ? pfd : append_at(c, pfd, base, m, data, len, mode, path);
                as_daemon();
                return r;
        }
        FsUpload u = FS_UPLOAD_NONE;
        int r = fs_upload_begin(c, path, mode, &u);
        if (r == 0 && (r = fs_upload_write(c, &u, data, len, path)) == 0)
                return fs_upload_commit(c, &u, path);
        fs_upload_abort(&u);
        return r;
}

int fs_stat(const FsCtx *c, const char *path, FsInfo *ret) {
        char abs[ABS_BYTES], dir[ABS_BYTES], base[NAME_MAX + 1];
        int r = normalize(path, abs);
        if (r < 0)
                return r;
        as_user(c);
        if (strcmp(abs, "/") == 0) {
                r = info_at(c->root, "", "/", ret);
        } else if ((r = split(abs, dir, base)) == 0) {
                _cleanup_close_ int pfd = open_parent(c, dir);
                r = pfd < 0 ? pfd : info_at(pfd, base, abs, ret);
        }
        as_daemon();
        return r;
}

typedef struct List {
        FsInfo *v;
        size_t n, cap;
} List;

static int list_dir(int dfd, const char *path, unsigned depth, List *l) {
        int fd = dup(dfd);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
                int r = negerrno();
                safe_close(fd);
                return r;
        }
        int r = 0;
        for (struct dirent *de; r == 0 && (de = readdir(d));) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if (l->n >= SBX_MAX_LIST_ENTRIES) {
                        r = -E2BIG;
                        break;
                }
                if (ARRAY_GROW(l->v, l->n, l->cap, 64) < 0) {
                        r = -ENOMEM;
                        break;
                }
                char child[ABS_BYTES + NAME_MAX + 1];
                snprintf(child, sizeof child, "%s%s%s", path, strcmp(path, "/") ? "/" : "", de->d_name);
                if (info_at(dirfd(d), de->d_name, child, &l->v[l->n]) < 0)
                        continue; /* vanished meanwhile */
                bool is_dir = l->v[l->n].type == FS_DIR;
                l->n++;
                if (is_dir && depth > 1 && strlen(child) < SBX_MAX_FILES_PATH_BYTES) {
                        _cleanup_close_ int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (sub >= 0)
                                r = list_dir(sub, child, depth - 1, l);
                }
        }
        closedir(d);
        return r;
}

int fs_list(const FsCtx *c, const char *path, unsigned depth, FsInfo **ret, size_t *ret_n) {
        char abs[ABS_BYTES];
        List l = { 0 };
        int r = normalize(path, abs);
        if (r < 0)
                return r;
        as_user(c);
        _cleanup_close_ int fd = resolve(c, abs, O_RDONLY | O_DIRECTORY, 0);
        r = fd < 0 ? fd : list_dir(fd, abs, MAX(1U, MIN(depth, SBX_MAX_LIST_DEPTH)), &l);
        as_daemon();
        if (r == -E2BIG)
                fail(c, r, "%s holds more than %u entries at that depth: list fewer levels (depth) or its "
                     "subdirectories one by one", path, SBX_MAX_LIST_ENTRIES);
        if (r < 0) {
                for (size_t i = 0; i < l.n; i++)
                        fs_info_clear(&l.v[i]);
                free(l.v);
                return r;
        }
        *ret = l.v;
        *ret_n = l.n;
        return 0;
}

int fs_mkdir(const FsCtx *c, const char *path, bool parents) {
        char abs[ABS_BYTES], dir[ABS_BYTES], base[NAME_MAX + 1];
        mode_t m;
        int r = target(c, path, abs, dir, base);
        if (r < 0)
                return r;
        as_user(c);
        if (parents) {
                r = mkdir_parents(c, abs, path);
        } else {
                _cleanup_close_ int pfd = open_parent(c, dir);
                if ((r = pfd) >= 0 && (r = check_change(c, pfd, base, path, CH_MKDIR, &m)) == 0 &&
                    mkdirat(pfd, base, 0755) < 0)
                        r = full(c, pfd, negerrno(), path);
        }
        as_daemon();
        return r;
}

/* Removes directory `name` of dfd and all below it, at any depth (tree_clear() walks it
 * without recursion); path is the caller's, for messages. */
static int remove_tree(const FsCtx *c, int dfd, const char *name, const char *path) {
        char why[256];
        _cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return negerrno();
        int r = tree_clear(fd, why, sizeof why);
        if (r < 0)
                return fail(c, r, "cannot remove all of %s: %s", path, why[0] ? why : strerror(-r));
        return unlinkat(dfd, name, AT_REMOVEDIR) < 0 ? negerrno() : 0;
}

int fs_remove(const FsCtx *c, const char *path, bool recursive) {
        char abs[ABS_BYTES], dir[ABS_BYTES], base[NAME_MAX + 1];
        mode_t m;
        int r = target(c, path, abs, dir, base);
        if (r < 0)
                return r;
        as_user(c);
        _cleanup_close_ int pfd = open_parent(c, dir);
        if (pfd < 0)
                r = pfd;
        else if ((r = check_change(c, pfd, base, path, CH_REMOVE, &m)) < 0)
                ;
        else if (!S_ISDIR(m))
                r = unlinkat(pfd, base, 0) < 0 ? negerrno() : 0;
        else if (recursive)
                r = remove_tree(c, pfd, base, path);
        else
                r = unlinkat(pfd, base, AT_REMOVEDIR) < 0 ? negerrno() : 0;
        as_daemon();
        return r;
}

/* Adds to c->err how to move `from` into the directory `dir` instead of replacing it. */
static int hint_into(const FsCtx *c, int r, const char *from, const char *dir, const char *name) {
        size_t n = c->err ? strlen(c->err) : 0;
        if (n)
                snprintf(c->err + n, c->errlen - n, "; to move %s into it, give the new path: %s/%s", from,
                         strcmp(dir, "/") ? dir : "", name);
        return r;
}

/* A failed renameat in words: most errnos are about one of the two paths, or both. */
static int rename_failed(const FsCtx *c, int r, int p2, const char *from, const char *to) {
        switch (-r) {
        case EISDIR:
                return fail(c, r, "cannot replace %s: it is a directory", to);
        case ENOTDIR:
                return fail(c, r, "cannot replace %s with the directory %s: it is not a directory", to, from);
        case ENOTEMPTY:
        case EEXIST:
                return fail(c, r, "cannot replace %s: it is a directory that is not empty", to);
        case EXDEV:
                return fail(c, r, "cannot move %s to %s: /tmp, /home/user and /dev/shm are separate mounts and a "
                            "rename stays within one (copy it instead)", from, to);
        case EINVAL:
                return fail(c, r, "cannot move %s into itself (%s)", from, to);
        case EBUSY:
                return fail(c, r, "cannot move %s to %s: one of them is in use (a mount point)", from, to);
        case ENOSPC:
        case EDQUOT:
                return full(c, p2, r, to);
        default:
                return fail(c, r, "%s: cannot move %s to %s", strerror(-r), from, to);
        }
}

/* Errors name the path they are about; those of `to` are always in words (a bare errno is
 * reported with `from`). */
int fs_rename(const FsCtx *c, const char *from, const char *to) {
        char a1[ABS_BYTES], d1[ABS_BYTES], b1[NAME_MAX + 1];
        char a2[ABS_BYTES], d2[ABS_BYTES], b2[NAME_MAX + 1];
        mode_t m1 = 0, m2 = 0;
        int r = target(c, from, a1, d1, b1);
        if (r < 0)
                return r;
        if ((r = target(c, to, a2, d2, b2)) < 0)
                return failed_in_words(c) ? r : fail(c, r, "%s: %s", strerror(-r), to);
        as_user(c);
        _cleanup_close_ int p1 = open_parent(c, d1);
        _cleanup_close_ int p2 = -1;
        if ((r = p1) >= 0 && (r = check_change(c, p1, b1, from, CH_MOVE, &m1)) == 0) {
                if ((r = p2 = open_parent(c, d2)) >= 0 && (r = check_change(c, p2, b2, to, CH_REPLACE, &m2)) == 0 &&
                    renameat(p1, b1, p2, b2) < 0)
                        r = rename_failed(c, negerrno(), p2, from, to);
                else if (r < 0 && !failed_in_words(c))
                        r = fail(c, r, "%s: %s", strerror(-r), to);
                if ((r == -EBUSY || r == -EISDIR) && S_ISDIR(m2) && !S_ISDIR(m1))
                        r = hint_into(c, r, from, a2, b1);
        }
        as_daemon();
        return r;
}

int fs_abs_path(const char *path, char out[FS_ABS_BYTES]) { return normalize(path, out); }

int fs_watch_dir(const FsCtx *c, const char *path, bool follow, int ifd, uint32_t mask, int *ret_wd) {
        char abs[ABS_BYTES];
        int r = normalize(path, abs);
        if (r < 0)
                return r;
        as_user(c);
        /* Not O_PATH: the walk reads its entries, and opening it for reading asks the
         * permission inotify asks. */
        int fd = resolve(c, abs, O_RDONLY | O_DIRECTORY | O_NONBLOCK | (follow ? 0 : O_NOFOLLOW), 0);
        struct stat st;
        if (fd < 0)
                r = fd == -ENOTDIR || (fd == -ELOOP && !follow)
                            ? fail(c, -ENOTDIR, "cannot watch %s: it is not a directory", path) : fd;
        else if (fstat(fd, &st) < 0)
                r = negerrno();
        else if (st.st_dev != c->writable)
                /* Nothing else changes, and procfs or sysfs are no business of a watch. */
                r = fail(c, -EROFS, "cannot watch %s: only directories of the sandbox's writable tree (/tmp, "
                         "/home/user, /dev/shm) can be watched", path);
        else if (ifd >= 0) {
                /* The kernel resolves the magic link to the very directory the jail opened. */
                char self[64];
                snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
                int wd = inotify_add_watch(ifd, self, mask | IN_ONLYDIR);
                if (wd < 0)
                        r = negerrno();
                else
                        *ret_wd = wd;
        }
        as_daemon();
        if (r < 0) {
                safe_close(fd);
                return r;
        }
        return fd;
}
