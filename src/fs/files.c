/* SPDX-License-Identifier: MIT */
/* The jailed files API; see files.h for the rules. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/random.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/util.h"
#include "fs/files.h"

/* A normalized path: a client's, with "/home/user/" in front at most. */
#define ABS_BYTES (SBX_MAX_FILES_PATH_BYTES + 16)

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
        snprintf(base, NAME_MAX + 1, "%s", slash + 1);
        if (!base[0] || strcmp(base, ".") == 0 || strcmp(base, "..") == 0 || strlen(slash + 1) > NAME_MAX)
                return -EINVAL;
        return 0;
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

/* A parent directory whose entries may be changed: on the writable tmpfs, else EROFS (the
 * read-only system binds, /proc, /dev and the skeleton all land here). */
static int open_parent_writable(const FsCtx *c, const char *dir) {
        int fd = open_parent(c, dir);
        struct stat st;
        if (fd >= 0 && (fstat(fd, &st) < 0 || st.st_dev != c->writable)) {
                close(fd);
                return -EROFS;
        }
        return fd;
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
                r = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL; /* a fifo or device would block */
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

/* mkdir -p of an absolute path, one component at a time, each resolved in the jail. */
static int mkdir_parents(const FsCtx *c, const char *abs) {
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
                        return -EROFS;
                if (mkdirat(pfd, base, 0755) < 0 && errno != EEXIST)
                        return negerrno();
        }
        _cleanup_close_ int fd = resolve(c, abs, O_PATH | O_DIRECTORY, 0);
        return fd < 0 ? fd : 0;
}

int fs_write(const FsCtx *c, const char *path, const void *data, size_t len, int mode, bool append) {
        char abs[ABS_BYTES], dir[ABS_BYTES], base[NAME_MAX + 1], tmp[64];
        int r = normalize(path, abs);
        if (r < 0 || (r = split(abs, dir, base)) < 0)
                return r;
        if (mode > 07777)
                return -EINVAL;
        as_user(c);
        r = mkdir_parents(c, dir);
        _cleanup_close_ int pfd = r < 0 ? -1 : open_parent_writable(c, dir);
        if (r == 0 && pfd < 0)
                r = pfd;
        if (r == 0 && append) {
                /* Relative to the checked parent, never following the last component: a
                 * symlink planted there (to /proc/sys/..., say) is refused with ELOOP. */
                _cleanup_close_ int fd = openat(pfd, base, O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_NOCTTY |
                                                O_NOFOLLOW | O_CLOEXEC, mode >= 0 ? (mode_t)mode : 0644);
                struct stat st;
                if (fd < 0)
                        r = negerrno();
                else if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_dev != c->writable)
                        r = -EINVAL;
                else
                        r = write_all(fd, data, len);
        } else if (r == 0) {
                /* Written aside, then renamed over: nobody sees half a file, and rename
                 * replaces whatever `base` is (a symlink included) without following it. */
                char hex[17];
                if (random_hex(hex, 8) < 0)
                        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)now_ns());
                snprintf(tmp, sizeof tmp, ".sbx-%s.tmp", hex);
                int fd = openat(pfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
                if (fd < 0) {
                        r = negerrno();
                } else {
                        r = write_all(fd, data, len);
                        if (r == 0 && fchmod(fd, mode >= 0 ? (mode_t)mode : 0644) < 0)
                                r = negerrno();
                        close(fd);
                        if (r == 0 && renameat(pfd, tmp, pfd, base) < 0)
                                r = negerrno();
                        if (r < 0)
                                (void)unlinkat(pfd, tmp, 0);
                }
        }
        as_daemon();
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
                if (l->n == l->cap) {
                        size_t ncap = l->cap ? l->cap * 2 : 64;
                        FsInfo *nv = realloc(l->v, ncap * sizeof *nv);
                        if (!nv) {
                                r = -ENOMEM;
                                break;
                        }
                        l->v = nv;
                        l->cap = ncap;
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
        int r = normalize(path, abs);
        if (r < 0 || (r = split(abs, dir, base)) < 0)
                return r;
        as_user(c);
        if (parents) {
                r = mkdir_parents(c, abs);
        } else {
                _cleanup_close_ int pfd = open_parent_writable(c, dir);
                r = pfd < 0 ? pfd : mkdirat(pfd, base, 0755) < 0 ? negerrno() : 0;
        }
        as_daemon();
        return r;
}

static int remove_tree(int dfd, const char *name, unsigned depth) {
        if (depth > SBX_MAX_REMOVE_DEPTH)
                return -ELOOP;
        int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
                safe_close(fd);
                return negerrno();
        }
        int r = 0;
        for (struct dirent *de; r == 0 && (de = readdir(d));) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                struct stat st;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                if (S_ISDIR(st.st_mode))
                        r = remove_tree(dirfd(d), de->d_name, depth + 1);
                else if (unlinkat(dirfd(d), de->d_name, 0) < 0)
                        r = negerrno();
        }
        closedir(d);
        if (r == 0 && unlinkat(dfd, name, AT_REMOVEDIR) < 0)
                r = negerrno();
        return r;
}

int fs_remove(const FsCtx *c, const char *path, bool recursive) {
        char abs[ABS_BYTES], dir[ABS_BYTES], base[NAME_MAX + 1];
        int r = normalize(path, abs);
        if (r < 0 || (r = split(abs, dir, base)) < 0)
                return r;
        as_user(c);
        _cleanup_close_ int pfd = open_parent_writable(c, dir);
        struct stat st;
        if (pfd < 0)
                r = pfd;
        else if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0)
                r = negerrno();
        else if (!S_ISDIR(st.st_mode))
                r = unlinkat(pfd, base, 0) < 0 ? negerrno() : 0;
        else if (recursive)
                r = remove_tree(pfd, base, 0);
        else
                r = unlinkat(pfd, base, AT_REMOVEDIR) < 0 ? negerrno() : 0;
        as_daemon();
        return r;
}

int fs_rename(const FsCtx *c, const char *from, const char *to) {
        char a1[ABS_BYTES], d1[ABS_BYTES], b1[NAME_MAX + 1];
        char a2[ABS_BYTES], d2[ABS_BYTES], b2[NAME_MAX + 1];
        int r = normalize(from, a1);
        if (r < 0 || (r = normalize(to, a2)) < 0 || (r = split(a1, d1, b1)) < 0 || (r = split(a2, d2, b2)) < 0)
                return r;
        as_user(c);
        _cleanup_close_ int p1 = open_parent_writable(c, d1);
        _cleanup_close_ int p2 = p1 < 0 ? -1 : open_parent_writable(c, d2);
        if (p1 < 0)
                r = p1;
        else if (p2 < 0)
                r = p2;
        else
                r = renameat(p1, b1, p2, b2) < 0 ? negerrno() : 0;
        as_daemon();
        return r;
}
