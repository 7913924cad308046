/* SPDX-License-Identifier: MIT */
/* Export, validation and extraction of sandbox archives; see archive.h for the layout. */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/sha256.h"
#include "base/text.h"
#include "base/util.h"
#include "fs/archive.h"

/* tmpfs charges whole pages, and keeps a symlink target shorter than this in the inode. */
#define ARCHIVE_PAGE 4096U
#define ARCHIVE_INLINE_LINK 128U

static const char *const tops[] = { "tmp", "home/user", "dev/shm" };

_printf_(3, 4) static int set_err(char *err, size_t errlen, const char *fmt, ...) {
        if (err && errlen && !err[0]) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(err, errlen, fmt, ap);
                va_end(ap);
        }
        return -EINVAL;
}

void archive_meta_clear(ArchiveMeta *m) {
        if (!m)
                return;
        for (size_t i = 0; i < m->n_sessions; i++) {
                free(m->sessions[i].name);
                free(m->sessions[i].state);
        }
        free(m->sessions);
        *m = (ArchiveMeta){ 0 };
}

/* Index into tops of the writable directory holding the canonical path p, or -1. */
static int top_of(const char *p) {
        for (size_t i = 0; i < ELEMENTSOF(tops); i++) {
                size_t l = strlen(tops[i]);
                if (strncmp(p, tops[i], l) == 0 && (p[l] == 0 || p[l] == '/'))
                        return (int)i;
        }
        return -1;
}

/* The read-only system directories every sandbox shows (sandbox/mount.c): a symlink into
 * them, like a virtualenv's bin/python -> /usr/bin/python3, points inside the sandbox. */
static const char *const system_tops[] = { "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32" };

static bool in_system_dir(const char *p) {
        for (size_t i = 0; i < ELEMENTSOF(system_tops); i++) {
                size_t l = strlen(system_tops[i]);
                if (strncmp(p, system_tops[i], l) == 0 && (p[l] == 0 || p[l] == '/'))
                        return true;
        }
        return false;
}

static bool is_top(const char *p) {
        for (size_t i = 0; i < ELEMENTSOF(tops); i++)
                if (strcmp(p, tops[i]) == 0)
                        return true;
        return false;
}

/* tmp and home/user share one filesystem in a sandbox, dev/shm has its own: a hard link can
 * only join entries of the same group. */
/* /tmp, /home/user and /dev/shm are one tmpfs but three bind mounts in a sandbox, and link()
 * does not cross mounts: a hard link stays within its top directory. */
static int link_group(int top) { return top; }

/* The digest's record of one entry's header; see archive.h. */
static void digest_header(struct sha256_ctx *s, const char *path, char type, unsigned mode, uint64_t size, const char *target) {
        char num[32];
        sha256_feed(s, path, strlen(path) + 1);
        char t[2] = { type, 0 };
        sha256_feed(s, t, 2);
        int n = snprintf(num, sizeof num, "%o", mode);
        sha256_feed(s, num, (size_t)n + 1);
        n = snprintf(num, sizeof num, "%llu", (unsigned long long)size);
        sha256_feed(s, num, (size_t)n + 1);
        if (target)
                sha256_feed(s, target, strlen(target));
        sha256_feed(s, "", 1);
}

/* ---- export ------------------------------------------------------------------------------ */

typedef struct ExportLink {
        dev_t dev;
        ino_t ino;
        int group;
        char *path;
} ExportLink;

typedef struct Export {
        struct archive *a;
        struct archive_entry *e;
        const TreeIds *ids;
        struct sha256_ctx sha;
        dev_t dev;   /* of the top directory being walked: other filesystems are skipped */
        int group;   /* link_group() of that top directory */
        char path[SBX_MAX_PATH_BYTES];
        size_t path_len;
        ExportLink *links;
        size_t n_links, cap_links;
        uint8_t *buf;
        uint64_t entries, bytes;
        uint64_t max_bytes; /* what an import may hold: a sparse file past it is refused now */
        char *err;
        size_t errlen;
} Export;

static int export_fail(Export *x, int r, const char *what) {
        set_err(x->err, x->errlen, "%s %s: %s", what, x->path, strerror(-r));
        return r;
}

static int export_archive_fail(Export *x) {
        int e = archive_errno(x->a);
        set_err(x->err, x->errlen, "write archive at %s: %s", x->path[0] ? x->path : ARCHIVE_MANIFEST,
                archive_error_string(x->a) ?: "unknown error");
        return e > 0 ? -e : -EIO;
}

static bool export_push(Export *x, const char *name, size_t *saved) {
        size_t l = strlen(name);
        *saved = x->path_len;
        if (x->path_len + l + 2 > sizeof x->path)
                return false;
        if (x->path_len)
                x->path[x->path_len++] = '/';
        memcpy(x->path + x->path_len, name, l + 1);
        x->path_len += l;
        return true;
}

static void export_pop(Export *x, size_t saved) {
        x->path_len = saved;
        x->path[saved] = 0;
}

static la_ssize_t write_cb(struct archive *a, void *data, const void *buf, size_t len) {
        int fd = *(int *)data;
        for (;;) {
                ssize_t n = write(fd, buf, len);
                if (n >= 0)
                        return n;
                if (errno == EINTR)
                        continue;
                if (errno == EAGAIN) {
                        /* A non-blocking pipe from the caller: wait for room rather than fail. */
                        struct pollfd p = { .fd = fd, .events = POLLOUT };
                        if (poll(&p, 1, -1) >= 0 || errno == EINTR)
                                continue;
                }
                archive_set_error(a, errno, "%s", strerror(errno));
                return -1;
        }
}

/* Writes the header of the entry at x->path and records it in the digest. */
static int export_header(Export *x, char type, const struct stat *st, uint64_t size, const char *target) {
        /* Import refuses setuid/setgid bits, so an archive keeping them could never be loaded
         * again; inside the sandbox they meant nothing (nosuid). */
        unsigned mode = st->st_mode & 07777 & ~(unsigned)(S_ISUID | S_ISGID);
        struct archive_entry *e = archive_entry_clear(x->e);
        archive_entry_set_pathname(e, x->path);
        switch (type) {
        case 'd': archive_entry_set_filetype(e, AE_IFDIR); break;
        case 'l': archive_entry_set_filetype(e, AE_IFLNK); archive_entry_set_symlink(e, target); break;
        case 'p': archive_entry_set_filetype(e, AE_IFIFO); break;
        case 'h': archive_entry_set_filetype(e, AE_IFREG); archive_entry_set_hardlink(e, target); break;
        case 'f':
        default: archive_entry_set_filetype(e, AE_IFREG); break;
        }
        archive_entry_set_perm(e, mode);
        archive_entry_set_size(e, (la_int64_t)size);
        archive_entry_set_mtime(e, st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
        uid_t uid = st->st_uid;
        gid_t gid = st->st_gid;
        if (x->ids && uid == x->ids->src_uid) {
                uid = x->ids->dst_uid;
                archive_entry_set_uname(e, "user");
        }
        if (x->ids && gid == x->ids->src_gid) {
                gid = x->ids->dst_gid;
                archive_entry_set_gname(e, "user");
        }
        archive_entry_set_uid(e, uid);
        archive_entry_set_gid(e, gid);
        /* ARCHIVE_WARN: a name not convertible to UTF-8 is stored as raw bytes; still fine. */
        if (archive_write_header(x->a, e) < ARCHIVE_WARN)
                return export_archive_fail(x);
        digest_header(&x->sha, x->path, type, mode, size, target);
        x->entries++;
        return 0;
}

static int export_data(Export *x, int fd, uint64_t size) {
        uint64_t done = 0;
        bool eof = false;
        while (done < size) {
                size_t want = (size_t)MIN((uint64_t)SBX_ARCHIVE_IO_BUF, size - done);
                ssize_t n = 0;
                if (!eof) {
                        n = read(fd, x->buf, want);
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n < 0)
                                return export_fail(x, negerrno(), "read");
                }
                if (n == 0) {
                        /* Shrunk since the header was written: the header's size is a promise,
                         * keep it with zeros (the digest sees the same zeros). */
                        eof = true;
                        memset(x->buf, 0, want);
                        n = (ssize_t)want;
                }
                sha256_feed(&x->sha, x->buf, (size_t)n);
                if (archive_write_data(x->a, x->buf, (size_t)n) < 0)
                        return export_archive_fail(x);
                done += (uint64_t)n;
        }
        x->bytes += size;
        return 0;
}

static const char *export_link_find(Export *x, const struct stat *st) {
        for (size_t i = 0; i < x->n_links; i++)
                if (x->links[i].ino == st->st_ino && x->links[i].dev == st->st_dev && x->links[i].group == x->group)
                        return x->links[i].path;
        return NULL;
}

static int export_link_add(Export *x, const struct stat *st) {
        if (x->n_links == x->cap_links) {
                size_t cap = x->cap_links ? x->cap_links * 2 : 64;
                ExportLink *l = reallocarray(x->links, cap, sizeof *l);
                if (!l)
                        return -ENOMEM;
                x->links = l;
                x->cap_links = cap;
        }
        char *p = strdup(x->path);
        if (!p)
                return -ENOMEM;
        x->links[x->n_links++] = (ExportLink){ st->st_dev, st->st_ino, x->group, p };
        return 0;
}

static int export_dir(Export *x, int dir, unsigned depth);

static int export_entry(Export *x, int dir, const char *name, unsigned depth) {
        struct stat st;
        if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : export_fail(x, negerrno(), "stat");
        if (st.st_dev != x->dev)
                return 0;
        size_t saved;
        if (!export_push(x, name, &saved))
                return export_fail(x, -ENAMETOOLONG, "export");
        int r = 0;
        if (S_ISDIR(st.st_mode)) {
                if (depth >= SBX_MAX_TREE_DEPTH) {
                        r = export_fail(x, -ELOOP, "export (too deep)");
                        goto out;
                }
                _cleanup_close_ int fd = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0) {
                        r = errno == ENOENT ? 0 : export_fail(x, negerrno(), "open");
                        goto out;
                }
                if (fstat(fd, &st) < 0) {
                        r = export_fail(x, negerrno(), "stat");
                        goto out;
                }
                if ((r = export_header(x, 'd', &st, 0, NULL)) < 0)
                        goto out;
                r = export_dir(x, fd, depth + 1);
        } else if (S_ISREG(st.st_mode)) {
                const char *first = st.st_nlink > 1 ? export_link_find(x, &st) : NULL;
                if (first) {
                        r = export_header(x, 'h', &st, 0, first);
                        goto out;
                }
                /* O_NONBLOCK: if the entry was swapped for a fifo since the stat, no hang. */
                _cleanup_close_ int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
                if (fd < 0) {
                        r = errno == ENOENT ? 0 : export_fail(x, negerrno(), "open");
                        goto out;
                }
                if (fstat(fd, &st) < 0) {
                        r = export_fail(x, negerrno(), "stat");
                        goto out;
                }
                if (!S_ISREG(st.st_mode))
                        goto out;
                /* The archive holds a file at its full size, holes written out; one larger than
                 * the sandbox's limit (sparse, or it could not exist) could never be imported. */
                if (x->max_bytes && x->bytes + (uint64_t)st.st_size > x->max_bytes) {
                        r = export_fail(x, -EFBIG, "export (sparse: larger than the sandbox's filesystem limit)");
                        goto out;
                }
                if ((r = export_header(x, 'f', &st, (uint64_t)st.st_size, NULL)) < 0)
                        goto out;
                if ((r = export_data(x, fd, (uint64_t)st.st_size)) < 0)
                        goto out;
                if (st.st_nlink > 1 && (r = export_link_add(x, &st)) < 0)
                        r = export_fail(x, r, "export");
        } else if (S_ISLNK(st.st_mode)) {
                char target[SBX_MAX_PATH_BYTES];
                ssize_t n = readlinkat(dir, name, target, sizeof target);
                if (n < 0) {
                        r = errno == ENOENT ? 0 : export_fail(x, negerrno(), "readlink");
                        goto out;
                }
                if ((size_t)n >= sizeof target) {
                        r = export_fail(x, -ENAMETOOLONG, "readlink");
                        goto out;
                }
                target[n] = 0;
                r = export_header(x, 'l', &st, 0, target);
        } else if (S_ISFIFO(st.st_mode)) {
                r = export_header(x, 'p', &st, 0, NULL);
        }
        /* Sockets and device nodes are left out: neither can be recreated meaningfully. */
out:
        export_pop(x, saved);
        return r;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int export_dir(Export *x, int dir, unsigned depth) {
        int fd = fcntl(dir, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return export_fail(x, negerrno(), "open");
        DIR *d = fdopendir(fd);
        if (!d) {
                int r = negerrno();
                close(fd);
                return export_fail(x, r, "read");
        }
        /* Sorted, so that the same tree always gives the same archive. */
        char **names = NULL;
        size_t n = 0, cap = 0;
        int r = 0;
        struct dirent *de;
        errno = 0;
        while ((de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if (n == cap) {
                        size_t c = cap ? cap * 2 : 32;
                        char **p = reallocarray(names, c, sizeof *p);
                        if (!p) {
                                r = -ENOMEM;
                                break;
                        }
                        names = p;
                        cap = c;
                }
                if (!(names[n] = strdup(de->d_name))) {
                        r = -ENOMEM;
                        break;
                }
                n++;
                errno = 0;
        }
        if (r == 0 && errno != 0)
                r = negerrno();
        closedir(d);
        if (r < 0)
                export_fail(x, r, "read");
        else if (n > 0)
                qsort(names, n, sizeof *names, cmp_names);
        for (size_t i = 0; i < n; i++) {
                if (r >= 0)
                        r = export_entry(x, dir, names[i], depth);
                free(names[i]);
        }
        free(names);
        return r;
}

/* Opens the top directory `path` (one of tops) component by component without following. */
static int open_top(int root, const char *path) {
        char buf[32];
        snprintf(buf, sizeof buf, "%s", path);
        int fd = -1;
        for (char *save = NULL, *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
                int next = openat(fd >= 0 ? fd : root, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                int e = errno;
                safe_close(fd);
                if (next < 0)
                        return -e;
                fd = next;
        }
        return fd;
}

static json_t *json_u64(uint64_t v) { return json_integer((json_int_t)MIN(v, (uint64_t)INT64_MAX)); }

static char *manifest_dump(const ArchiveMeta *meta, const char *hex, uint64_t entries, uint64_t bytes) {
        const ArchiveLimits *l = &meta->limits;
        json_t *sessions = json_array();
        for (size_t i = 0; sessions && i < meta->n_sessions; i++) {
                const ArchiveSession *s = &meta->sessions[i];
                _cleanup_free_ char *b64 = b64_encode(s->state ? s->state : (const uint8_t *)"", s->state_len, NULL);
                if (!b64 || json_array_append_new(sessions, json_pack("{s:s, s:s}", "name", s->name, "state", b64)) < 0) {
                        json_decref(sessions);
                        return NULL;
                }
        }
        if (!sessions)
                return NULL;
        json_t *root = json_pack("{s:s, s:i, s:o, s:{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}, s:o, s:{s:s, s:o, s:o}}",
                                 "format", ARCHIVE_FORMAT, "version", ARCHIVE_VERSION, "createdAt",
                                 json_u64(meta->created_ms), "limits", "fsBytes", json_u64(l->fs_bytes),
                                 "fileCount", json_u64(l->file_count), "memoryBytes", json_u64(l->memory_bytes),
                                 "pids", json_u64(l->pids), "stdoutBytes", json_u64(l->stdout_bytes),
                                 "stderrBytes", json_u64(l->stderr_bytes), "commandBytes",
                                 json_u64(l->command_bytes), "timeoutMs", json_u64(l->timeout_ms), "sessions",
                                 sessions, "payload", "sha256", hex, "entries", json_u64(entries), "bytes",
                                 json_u64(bytes));
        if (!root)
                return NULL;
        char *s = json_dumps(root, JSON_COMPACT);
        json_decref(root);
        return s;
}

static int export_manifest(Export *x, ArchiveMeta *meta) {
        char hex[SHA256_HEX_SIZE];
        sha256_digest_hex(&x->sha, hex);
        _cleanup_free_ char *json = manifest_dump(meta, hex, x->entries, x->bytes);
        if (!json) {
                set_err(x->err, x->errlen, "export: cannot build the manifest");
                return -ENOMEM;
        }
        size_t len = strlen(json);
        x->path[0] = 0;
        struct archive_entry *e = archive_entry_clear(x->e);
        archive_entry_set_pathname(e, ARCHIVE_MANIFEST);
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_perm(e, 0644);
        archive_entry_set_size(e, (la_int64_t)len);
        archive_entry_set_mtime(e, (time_t)(meta->created_ms / 1000), (long)(meta->created_ms % 1000) * 1000000);
        archive_entry_set_uid(e, x->ids ? x->ids->dst_uid : 0);
        archive_entry_set_gid(e, x->ids ? x->ids->dst_gid : 0);
        archive_entry_set_uname(e, "user");
        archive_entry_set_gname(e, "user");
        if (archive_write_header(x->a, e) < ARCHIVE_WARN || archive_write_data(x->a, json, len) < 0)
                return export_archive_fail(x);
        return 0;
}

int archive_export(int root, const TreeIds *ids, ArchiveMeta *meta, int out_fd, char *err, size_t errlen) {
        if (err && errlen)
                err[0] = 0;
        if (meta->created_ms == 0) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                meta->created_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
        }
        Export x = { .ids = ids, .err = err, .errlen = errlen, .max_bytes = meta->limits.fs_bytes };
        sha256_init(&x.sha);
        int r = -ENOMEM;
        x.buf = malloc(SBX_ARCHIVE_IO_BUF);
        x.a = archive_write_new();
        x.e = archive_entry_new();
        if (!x.buf || !x.a || !x.e) {
                set_err(err, errlen, "export: out of memory");
                goto out;
        }
        if (archive_write_set_format_pax_restricted(x.a) != ARCHIVE_OK ||
            archive_write_add_filter_zstd(x.a) != ARCHIVE_OK ||
            archive_write_set_filter_option(x.a, "zstd", "compression-level", "3") != ARCHIVE_OK ||
            /* No padding after the compressed stream: zstd readers take it for a bad frame. */
            archive_write_set_bytes_in_last_block(x.a, 1) != ARCHIVE_OK ||
            archive_write_open2(x.a, &out_fd, NULL, write_cb, NULL, NULL) != ARCHIVE_OK) {
                r = export_archive_fail(&x);
                goto out;
        }
        for (size_t i = 0; i < ELEMENTSOF(tops); i++) {
                snprintf(x.path, sizeof x.path, "%s", tops[i]);
                x.path_len = strlen(x.path);
                _cleanup_close_ int fd = open_top(root, tops[i]);
                if (fd == -ENOENT)
                        continue; /* a sandbox without this directory has nothing in it */
                struct stat st;
                if (fd < 0 || fstat(fd, &st) < 0) {
                        r = export_fail(&x, fd < 0 ? fd : negerrno(), "open");
                        goto out;
                }
                x.dev = st.st_dev;
                x.group = link_group((int)i);
                if ((r = export_header(&x, 'd', &st, 0, NULL)) < 0 || (r = export_dir(&x, fd, 1)) < 0)
                        goto out;
        }
        if ((r = export_manifest(&x, meta)) < 0)
                goto out;
        if (archive_write_close(x.a) != ARCHIVE_OK) {
                r = export_archive_fail(&x);
                goto out;
        }
        meta->entries = x.entries;
        meta->bytes = x.bytes;
        r = 0;
out:
        if (x.a)
                archive_write_free(x.a);
        if (x.e)
                archive_entry_free(x.e);
        for (size_t i = 0; i < x.n_links; i++)
                free(x.links[i].path);
        free(x.links);
        free(x.buf);
        return r;
}

/* ---- reading: shared by check and extract ------------------------------------------------- */

static struct archive *reader_open(const uint8_t *data, size_t len) {
        struct archive *a = archive_read_new();
        if (!a)
                return NULL;
        /* Only tar and zstd: anything else is refused before a single entry is looked at. */
        if (archive_read_support_format_tar(a) != ARCHIVE_OK || archive_read_support_filter_zstd(a) != ARCHIVE_OK ||
            archive_read_open_memory(a, data, len) != ARCHIVE_OK) {
                archive_read_free(a);
                return NULL;
        }
        return a;
}

static const char *entry_name(struct archive_entry *e) {
        const char *p = archive_entry_pathname(e);
        return p ? p : archive_entry_pathname_utf8(e);
}

static const char *entry_symlink(struct archive_entry *e) {
        const char *p = archive_entry_symlink(e);
        return p ? p : archive_entry_symlink_utf8(e);
}

static const char *entry_hardlink(struct archive_entry *e) {
        const char *p = archive_entry_hardlink(e);
        return p ? p : archive_entry_hardlink_utf8(e);
}

/* Copies an entry path into out (SBX_MAX_PATH_BYTES) without its trailing slashes and checks
 * it names something inside the writable directories. `what` names it in messages. */
static int canonical_path(const char *raw, const char *what, char *out, char *err, size_t errlen) {
        if (!raw || !raw[0])
                return set_err(err, errlen, "archive entry with an empty %s", what);
        if (raw[0] == '/')
                return set_err(err, errlen, "archive entry %s: absolute path", raw);
        size_t len = strlen(raw);
        if (len >= SBX_MAX_PATH_BYTES)
                return set_err(err, errlen, "archive entry %.64s...: path too long", raw);
        /* Directories come with a trailing slash; the digest and messages name them without. */
        memcpy(out, raw, len + 1);
        while (len > 0 && out[len - 1] == '/')
                out[--len] = 0;
        unsigned depth = 0;
        for (const char *c = out; *c; depth++) {
                const char *end = strchrnul(c, '/');
                size_t l = (size_t)(end - c);
                if (l == 2 && c[0] == '.' && c[1] == '.')
                        return set_err(err, errlen, "archive entry %s: '..' component", out);
                if (l == 0 || (l == 1 && c[0] == '.'))
                        return set_err(err, errlen, "archive entry %s: empty or '.' component", out);
                c = *end ? end + 1 : end;
        }
        /* As deep as an export can go: extraction walks every level from the root. */
        if (depth > SBX_MAX_TREE_DEPTH + 2)
                return set_err(err, errlen, "archive entry %.64s...: more than %u levels deep", out, SBX_MAX_TREE_DEPTH);
        if (top_of(out) < 0)
                return set_err(err, errlen, "archive entry %s: outside tmp, home/user and dev/shm", out);
        return 0;
}

/* Resolves a symlink target the way the kernel would inside the sandbox, but lexically:
 * relative to the link's directory, absolute ones from the sandbox's root. False if it climbs
 * above the root or gets too long. */
static bool resolve_lexical(const char *link_path, const char *target, char *out, size_t outlen) {
        size_t n = 0;
        out[0] = 0;
        if (target[0] != '/') {
                const char *slash = strrchr(link_path, '/');
                n = slash ? (size_t)(slash - link_path) : 0;
                if (n >= outlen)
                        return false;
                memcpy(out, link_path, n);
                out[n] = 0;
        }
        for (const char *c = target; *c;) {
                const char *end = strchrnul(c, '/');
                size_t l = (size_t)(end - c);
                if (l == 2 && c[0] == '.' && c[1] == '.') {
                        if (n == 0)
                                return false;
                        char *slash = memrchr(out, '/', n);
                        n = slash ? (size_t)(slash - out) : 0;
                        out[n] = 0;
                } else if (l > 0 && !(l == 1 && c[0] == '.')) {
                        if (n + 1 + l + 1 > outlen)
                                return false;
                        if (n)
                                out[n++] = '/';
                        memcpy(out + n, c, l);
                        n += l;
                        out[n] = 0;
                }
                c = *end ? end + 1 : end;
        }
        return true;
}

/* ---- check ------------------------------------------------------------------------------- */

enum {
        KIND_NONE,
        KIND_IMPLICIT_DIR, /* a parent no entry has named yet; extraction creates it 0700 */
        KIND_DIR,
        KIND_FILE, /* regular file or hard link: what a hard link may point to */
        KIND_OTHER,
};

/* Every path of the archive so far, open addressing, at most half full. It answers "is this a
 * duplicate", "is the parent a directory" and "is this hard link target an earlier file". */
typedef struct PathSet {
        char **keys;
        uint8_t *kinds;
        size_t cap, n;
} PathSet;

static uint64_t hash_str(const char *s) {
        uint64_t h = 0xcbf29ce484222325ULL;
        for (; *s; s++)
                h = (h ^ (uint8_t)*s) * 0x100000001b3ULL;
        return h;
}

static size_t set_slot(const PathSet *s, const char *key) {
        size_t i = (size_t)hash_str(key) & (s->cap - 1);
        while (s->keys[i] && strcmp(s->keys[i], key) != 0)
                i = (i + 1) & (s->cap - 1);
        return i;
}

static uint8_t set_get(const PathSet *s, const char *key) {
        if (!s->cap)
                return KIND_NONE;
        size_t i = set_slot(s, key);
        return s->keys[i] ? s->kinds[i] : KIND_NONE;
}

static int set_put(PathSet *s, const char *key, uint8_t kind) {
        if ((s->n + 1) * 2 > s->cap) {
                size_t cap = s->cap ? s->cap * 2 : 256;
                PathSet g = { calloc(cap, sizeof(char *)), calloc(cap, 1), cap, s->n };
                if (!g.keys || !g.kinds) {
                        free(g.keys);
                        free(g.kinds);
                        return -ENOMEM;
                }
                for (size_t i = 0; i < s->cap; i++)
                        if (s->keys[i]) {
                                size_t j = set_slot(&g, s->keys[i]);
                                g.keys[j] = s->keys[i];
                                g.kinds[j] = s->kinds[i];
                        }
                free(s->keys);
                free(s->kinds);
                *s = g;
        }
        size_t i = set_slot(s, key);
        if (!s->keys[i]) {
                if (!(s->keys[i] = strdup(key)))
                        return -ENOMEM;
                s->n++;
        }
        s->kinds[i] = kind;
        return 0;
}

static void set_free(PathSet *s) {
        for (size_t i = 0; i < s->cap; i++)
                free(s->keys[i]);
        free(s->keys);
        free(s->kinds);
        *s = (PathSet){ 0 };
}

typedef struct Check {
        struct archive *a;
        const ArchiveLimits *limits;
        PathSet paths;
        struct sha256_ctx sha;
        uint64_t entries, bytes;
        uint64_t charged;   /* bytes tmpfs will charge for what extraction creates */
        uint64_t inodes;    /* what extraction creates: entries and implicit parents */
        uint64_t max_read;  /* bound on the decompressed stream */
        char *manifest;
        size_t manifest_len;
        uint8_t *buf;
        char *err;
        size_t errlen;
} Check;

static int check_read_fail(Check *c) {
        return set_err(c->err, c->errlen, "archive unreadable: %s", archive_error_string(c->a) ?: "unknown error");
}

static int check_stream_bound(Check *c) {
        uint64_t n = (uint64_t)archive_filter_bytes(c->a, 0);
        if (n > c->max_read)
                return set_err(c->err, c->errlen, "archive too large: %llu bytes decompressed, the limit is %llu",
                               (unsigned long long)n, (unsigned long long)c->max_read);
        return 0;
}

static int check_count_inode(Check *c) {
        if (++c->inodes > c->limits->file_count)
                return set_err(c->err, c->errlen, "archive has too many entries: more than %llu",
                               (unsigned long long)c->limits->file_count);
        return 0;
}

/* Records path (and its implicit parents) in the set, refusing duplicates and entries under
 * something that is not a directory: either would make extraction fail half-way. */
static int check_place(Check *c, const char *path, uint8_t kind) {
        char parent[SBX_MAX_PATH_BYTES];
        size_t top_len = strlen(tops[top_of(path)]);
        for (const char *s = path + top_len; (s = strchr(s, '/')); s++) {
                if (s == path + top_len)
                        continue;
                size_t l = (size_t)(s - path);
                memcpy(parent, path, l);
                parent[l] = 0;
                uint8_t k = set_get(&c->paths, parent);
                if (k == KIND_NONE) {
                        int r = check_count_inode(c);
                        if (r < 0)
                                return r;
                        if ((r = set_put(&c->paths, parent, KIND_IMPLICIT_DIR)) < 0)
                                return r;
                } else if (k != KIND_DIR && k != KIND_IMPLICIT_DIR)
                        return set_err(c->err, c->errlen, "archive entry %s: parent %s is not a directory", path, parent);
        }
        uint8_t k = set_get(&c->paths, path);
        if (k == KIND_IMPLICIT_DIR && kind == KIND_DIR)
                return set_put(&c->paths, path, KIND_DIR); /* its inode was counted as a parent */
        if (k != KIND_NONE)
                return set_err(c->err, c->errlen, "archive entry %s: duplicate entry", path);
        /* Hard links too: tmpfs charges every extra link against its inode limit. */
        int r = check_count_inode(c);
        if (r < 0)
                return r;
        return set_put(&c->paths, path, kind);
}

static int check_entry(Check *c, struct archive_entry *e, const char *name) {
        char path[SBX_MAX_PATH_BYTES], buf[SBX_MAX_PATH_BYTES];
        int r = canonical_path(name, "path", path, c->err, c->errlen);
        if (r < 0)
                return r;
        unsigned ft = archive_entry_filetype(e);
        const char *hardlink = entry_hardlink(e);
        const char *target = NULL;
        la_int64_t size = archive_entry_size(e);
        if (size < 0)
                size = 0;
        char type;
        uint8_t kind;
        if (hardlink) {
                type = 'h', kind = KIND_FILE;
        } else if (ft == AE_IFREG) {
                type = 'f', kind = KIND_FILE;
        } else if (ft == AE_IFDIR) {
                type = 'd', kind = KIND_DIR;
        } else if (ft == AE_IFLNK) {
                type = 'l', kind = KIND_OTHER;
        } else if (ft == AE_IFIFO) {
                type = 'p', kind = KIND_OTHER;
        } else if (ft == AE_IFCHR || ft == AE_IFBLK) {
                return set_err(c->err, c->errlen, "archive entry %s: device node", path);
        } else if (ft == AE_IFSOCK) {
                return set_err(c->err, c->errlen, "archive entry %s: socket", path);
        } else {
                return set_err(c->err, c->errlen, "archive entry %s: unsupported entry type", path);
        }
        if (is_top(path) && type != 'd')
                return set_err(c->err, c->errlen, "archive entry %s: not a directory", path);
        /* Extraction creates with the caller's ids and never chowns, so a set-id bit would
         * hand out the sandbox user's ids; refused rather than silently dropped. */
        unsigned mode = archive_entry_mode(e) & 07777;
        if (mode & (S_ISUID | S_ISGID))
                return set_err(c->err, c->errlen, "archive entry %s: setuid/setgid bit", path);
        if (type != 'f' && size > 0)
                return set_err(c->err, c->errlen, "archive entry %s: data in an entry that is not a regular file", path);
        if (type == 'l') {
                target = entry_symlink(e);
                if (!target || !target[0] || strlen(target) >= SBX_MAX_PATH_BYTES)
                        return set_err(c->err, c->errlen, "archive entry %s: empty or too long link target", path);
                if (!resolve_lexical(path, target, buf, sizeof buf) || (top_of(buf) < 0 && !in_system_dir(buf)))
                        return set_err(c->err, c->errlen,
                                       "archive entry %s: link target outside the sandbox (its writable and system directories)", path);
        } else if (type == 'h') {
                target = hardlink;
                char discard[256];
                discard[0] = 0;
                if (canonical_path(hardlink, "link target", buf, discard, sizeof discard) < 0 ||
                    set_get(&c->paths, buf) != KIND_FILE)
                        return set_err(c->err, c->errlen,
                                       "archive entry %s: hard link target %s is not an earlier file of the archive",
                                       path, hardlink);
                if (link_group(top_of(buf)) != link_group(top_of(path)))
                        return set_err(c->err, c->errlen,
                                       "archive entry %s: hard link between two of tmp, home/user and dev/shm", path);
        }
        /* What tmpfs will charge: whole pages per file, and a page for a symlink too long to
         * be kept in its inode. Checked before any data is read: a bomb is refused at its
         * header, and an archive that could not fit is refused before anything is cleared. */
        uint64_t charge = type == 'f' ? ((uint64_t)size + ARCHIVE_PAGE - 1) / ARCHIVE_PAGE * ARCHIVE_PAGE
                        : type == 'l' && strlen(target) >= ARCHIVE_INLINE_LINK ? ARCHIVE_PAGE : 0;
        if (charge > c->limits->fs_bytes || c->charged > c->limits->fs_bytes - charge)
                return set_err(c->err, c->errlen, "archive too large: %llu bytes on the sandbox's filesystem, the limit is %llu",
                               (unsigned long long)(c->charged + charge), (unsigned long long)c->limits->fs_bytes);
        c->charged += charge;
        if ((r = check_place(c, path, kind)) < 0)
                return r;
        digest_header(&c->sha, path, type, mode, type == 'f' ? (uint64_t)size : 0, target);
        c->entries++;
        if (type != 'f')
                return 0;
        /* Streamed through the digest: a file is never held in memory whole. */
        uint64_t got = 0;
        for (;;) {
                la_ssize_t n = archive_read_data(c->a, c->buf, SBX_ARCHIVE_IO_BUF);
                if (n < 0)
                        return check_read_fail(c);
                if (n == 0)
                        break;
                sha256_feed(&c->sha, c->buf, (size_t)n);
                got += (uint64_t)n;
                if (got > (uint64_t)size)
                        return set_err(c->err, c->errlen, "archive entry %s: more data than its size", path);
                if ((r = check_stream_bound(c)) < 0)
                        return r;
        }
        if (got != (uint64_t)size)
                return set_err(c->err, c->errlen, "archive entry %s: truncated data", path);
        c->bytes += got;
        return 0;
}

static int check_manifest_entry(Check *c, struct archive_entry *e) {
        if (c->manifest)
                return set_err(c->err, c->errlen, "archive has more than one %s", ARCHIVE_MANIFEST);
        if (archive_entry_filetype(e) != AE_IFREG || entry_hardlink(e))
                return set_err(c->err, c->errlen, "archive manifest: not a regular file");
        la_int64_t size = archive_entry_size(e);
        if (size < 0 || (uint64_t)size > SBX_MAX_MANIFEST_BYTES)
                return set_err(c->err, c->errlen, "archive manifest: too large (%lld bytes, the limit is %u)",
                               (long long)size, SBX_MAX_MANIFEST_BYTES);
        c->manifest = malloc((size_t)size + 1);
        if (!c->manifest)
                return -ENOMEM;
        size_t got = 0;
        for (;;) {
                la_ssize_t n = archive_read_data(c->a, c->manifest + got, (size_t)size - got);
                if (n < 0)
                        return check_read_fail(c);
                if (n == 0 || (got += (size_t)n) == (size_t)size)
                        break;
        }
        if (got != (size_t)size)
                return set_err(c->err, c->errlen, "archive manifest: truncated");
        c->manifest[got] = 0;
        c->manifest_len = got;
        return 0;
}

static bool get_u64(json_t *obj, const char *key, uint64_t max, uint64_t *ret) {
        json_t *v = json_object_get(obj, key);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) > max)
                return false;
        *ret = (uint64_t)json_integer_value(v);
        return true;
}

/* Objects and arrays in a JSON text, strings skipped. */
static size_t json_containers(const char *s, size_t n) {
        size_t count = 0;
        bool in_string = false;
        for (size_t i = 0; i < n; i++) {
                char ch = s[i];
                if (in_string) {
                        if (ch == '\\')
                                i++;
                        else if (ch == '"')
                                in_string = false;
                } else if (ch == '"') {
                        in_string = true;
                } else if (ch == '{' || ch == '[') {
                        count++;
                }
        }
        return count;
}

/* A session state as the bash builtin writes it: its magic, then sections "T:LEN\n" + LEN
 * bytes + "\n". Checked here so that an import never clears a sandbox for states it could
 * not apply. */
static bool state_ok(const uint8_t *p, size_t len) {
        static const char magic[] = "SBXSTATE 1\n";
        if (len < sizeof magic - 1 || memcmp(p, magic, sizeof magic - 1) != 0)
                return false;
        size_t i = sizeof magic - 1;
        while (i < len) {
                if (len - i < 4 || p[i] < 'A' || p[i] > 'Z' || p[i + 1] != ':')
                        return false;
                size_t j = i + 2;
                uint64_t l = 0;
                while (j < len && p[j] >= '0' && p[j] <= '9' && j - i < 22)
                        l = l * 10 + (uint64_t)(p[j++] - '0');
                if (j == i + 2 || j >= len || p[j] != '\n' || l > len - j - 1 || len - j - 1 - l < 1 || p[j + 1 + l] != '\n')
                        return false;
                i = j + 2 + (size_t)l;
        }
        return true;
}

static int parse_sessions(Check *c, json_t *arr, ArchiveMeta *m) {
        if (!json_is_array(arr))
                return set_err(c->err, c->errlen, "archive manifest: missing or invalid sessions");
        size_t n = json_array_size(arr);
        if (n > SBX_MAX_SESSIONS)
                return set_err(c->err, c->errlen, "archive manifest: %zu sessions, the limit is %u", n, SBX_MAX_SESSIONS);
        if (n && !(m->sessions = calloc(n, sizeof *m->sessions)))
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                json_t *s = json_array_get(arr, i);
                const char *name = json_string_value(json_object_get(s, "name"));
                json_t *state = json_object_get(s, "state");
                if (!json_is_object(s) || !name || !json_is_string(state))
                        return set_err(c->err, c->errlen, "archive manifest: session %zu lacks a name or state", i);
                if (!name_valid(name, SBX_MAX_SESSION_NAME_BYTES))
                        return set_err(c->err, c->errlen, "archive manifest: invalid session name \"%.80s\"", name);
                for (size_t j = 0; j < i; j++)
                        if (strcmp(m->sessions[j].name, name) == 0)
                                return set_err(c->err, c->errlen, "archive manifest: duplicate session %s", name);
                ArchiveSession *out = &m->sessions[m->n_sessions];
                if (!(out->name = strdup(name)))
                        return -ENOMEM;
                m->n_sessions++;
                out->state = b64_decode(json_string_value(state), json_string_length(state), &out->state_len);
                if (!out->state)
                        return errno == ENOMEM ? -ENOMEM
                                               : set_err(c->err, c->errlen, "archive manifest: session %s: state is not base64", name);
                if (!state_ok(out->state, out->state_len))
                        return set_err(c->err, c->errlen, "archive manifest: session %s: not a session state", name);
        }
        return 0;
}

static int check_manifest(Check *c, ArchiveMeta *m) {
        json_error_t je;
        if (json_containers(c->manifest, c->manifest_len) > SBX_MAX_MANIFEST_NODES)
                return set_err(c->err, c->errlen, "archive manifest: more than %u objects and arrays",
                               SBX_MAX_MANIFEST_NODES);
        json_t *root = json_loadb(c->manifest, c->manifest_len, JSON_REJECT_DUPLICATES, &je);
        if (!root)
                return set_err(c->err, c->errlen, "archive manifest: not valid JSON (line %d: %s)", je.line, je.text);
        int r = 0;
        uint64_t v;
        const char *fmt = json_string_value(json_object_get(root, "format"));
        json_t *limits = json_object_get(root, "limits"), *payload = json_object_get(root, "payload");
        const char *sha = json_string_value(json_object_get(payload, "sha256"));
        uint64_t entries = 0, bytes = 0;
        if (!json_is_object(root))
                r = set_err(c->err, c->errlen, "archive manifest: not a JSON object");
        else if (!fmt || strcmp(fmt, ARCHIVE_FORMAT) != 0)
                r = set_err(c->err, c->errlen, "archive manifest: format is \"%.64s\", not %s", fmt ? fmt : "(missing)",
                            ARCHIVE_FORMAT);
        else if (!json_is_integer(json_object_get(root, "version")))
                r = set_err(c->err, c->errlen, "archive manifest: missing or invalid version");
        else if (json_integer_value(json_object_get(root, "version")) != ARCHIVE_VERSION)
                r = set_err(c->err, c->errlen, "archive manifest: unsupported version %lld",
                            (long long)json_integer_value(json_object_get(root, "version")));
        else if (!get_u64(root, "createdAt", UINT64_MAX, &m->created_ms))
                r = set_err(c->err, c->errlen, "archive manifest: missing or invalid createdAt");
        else if (!json_is_object(limits))
                r = set_err(c->err, c->errlen, "archive manifest: missing or invalid limits");
        else if (!json_is_object(payload) || !sha || !get_u64(payload, "entries", UINT64_MAX, &entries) ||
                 !get_u64(payload, "bytes", UINT64_MAX, &bytes))
                r = set_err(c->err, c->errlen, "archive manifest: missing or invalid payload");
        if (r < 0)
                goto out;
        struct {
                const char *key;
                uint64_t *dst, max;
        } lims[] = {
                { "fsBytes", &m->limits.fs_bytes, UINT64_MAX },
                { "fileCount", &m->limits.file_count, UINT64_MAX },
                { "memoryBytes", &m->limits.memory_bytes, UINT64_MAX },
                { "pids", &v, UINT32_MAX },
                { "stdoutBytes", &m->limits.stdout_bytes, UINT64_MAX },
                { "stderrBytes", &m->limits.stderr_bytes, UINT64_MAX },
                { "commandBytes", &m->limits.command_bytes, UINT64_MAX },
                { "timeoutMs", &m->limits.timeout_ms, UINT64_MAX },
        };
        for (size_t i = 0; i < ELEMENTSOF(lims); i++)
                if (!get_u64(limits, lims[i].key, lims[i].max, lims[i].dst)) {
                        r = set_err(c->err, c->errlen, "archive manifest: missing or invalid limits.%s", lims[i].key);
                        goto out;
                }
        m->limits.pids = (uint32_t)v;
        if ((r = parse_sessions(c, json_object_get(root, "sessions"), m)) < 0)
                goto out;
        char hex[SHA256_HEX_SIZE];
        sha256_digest_hex(&c->sha, hex);
        if (strcmp(sha, hex) != 0)
                r = set_err(c->err, c->errlen, "archive checksum mismatch");
        else if (entries != c->entries || bytes != c->bytes)
                r = set_err(c->err, c->errlen,
                            "archive checksum mismatch: %llu entries and %llu bytes, the manifest says %llu and %llu",
                            (unsigned long long)c->entries, (unsigned long long)c->bytes,
                            (unsigned long long)entries, (unsigned long long)bytes);
        m->entries = c->entries;
        m->bytes = c->bytes;
out:
        json_decref(root);
        return r;
}

static uint64_t add_sat(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

static int check_all(Check *c, ArchiveMeta *m) {
        const ArchiveLimits *l = c->limits;
        /* Bounds what a zstd bomb can make us decompress: the data allowed, the manifest and
         * per-entry header overhead; nothing but the manifest is buffered, so this bounds time. */
        c->max_read = add_sat(add_sat(l->fs_bytes, SBX_MAX_MANIFEST_BYTES),
                              (MIN(l->file_count, (uint64_t)1 << 40) + 16) * SBX_ARCHIVE_ENTRY_SLACK);
        for (size_t i = 0; i < ELEMENTSOF(tops); i++)
                if (set_put(&c->paths, tops[i], KIND_IMPLICIT_DIR) < 0)
                        return -ENOMEM;
        bool first = true;
        for (;;) {
                struct archive_entry *e;
                int r = archive_read_next_header(c->a, &e);
                if (r == ARCHIVE_EOF && !first)
                        break;
                if (first) {
                        /* An empty stream has no format to ask about: only its filter. */
                        if (r < ARCHIVE_WARN || archive_filter_code(c->a, 0) != ARCHIVE_FILTER_ZSTD ||
                            (r != ARCHIVE_EOF && (archive_format(c->a) & ARCHIVE_FORMAT_BASE_MASK) != ARCHIVE_FORMAT_TAR))
                                return set_err(c->err, c->errlen, "not an sbx archive: not a zstd-compressed tar");
                        first = false;
                        if (r == ARCHIVE_EOF)
                                break;
                }
                if (r < ARCHIVE_WARN)
                        return check_read_fail(c);
                if ((r = check_stream_bound(c)) < 0)
                        return r;
                const char *raw = entry_name(e);
                if (c->manifest)
                        return set_err(c->err, c->errlen, "archive entry %s: after the manifest", raw ? raw : "");
                if (raw && strcmp(raw, ARCHIVE_MANIFEST) == 0)
                        r = check_manifest_entry(c, e);
                else
                        r = check_entry(c, e, raw);
                if (r < 0)
                        return r;
        }
        if (!c->manifest)
                return set_err(c->err, c->errlen, "not an sbx archive: no %s", ARCHIVE_MANIFEST);
        return check_manifest(c, m);
}

int archive_check(const uint8_t *data, size_t len, const ArchiveLimits *limits, ArchiveMeta *meta, char *err,
                  size_t errlen) {
        if (err && errlen)
                err[0] = 0;
        if (!limits)
                return set_err(err, errlen, "archive check: no limits given");
        ArchiveMeta m = { 0 };
        Check c = { .limits = limits, .err = err, .errlen = errlen };
        sha256_init(&c.sha);
        c.buf = malloc(SBX_ARCHIVE_IO_BUF);
        if (!c.buf)
                return -ENOMEM;
        int r;
        c.a = reader_open(data, len);
        if (!c.a)
                r = set_err(err, errlen, "not an sbx archive: not a zstd-compressed tar");
        else
                r = check_all(&c, &m);
        if (c.a)
                archive_read_free(c.a);
        set_free(&c.paths);
        free(c.manifest);
        free(c.buf);
        if (r == -ENOMEM)
                set_err(err, errlen, "archive check: out of memory");
        if (r < 0 || !meta)
                archive_meta_clear(&m);
        else {
                archive_meta_clear(meta);
                *meta = m;
        }
        return r;
}

/* ---- extract ----------------------------------------------------------------------------- */

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
        set_err(x->err, x->errlen, "%s %s: %s", what, path, strerror(-r));
        return r;
}

/* Whether the walk may create the directory `prefix` when missing: only below a top
 * directory; the tops and their parents belong to the sandbox's layout. */
static bool may_create(const char *prefix) { return top_of(prefix) >= 0 && !is_top(prefix); }

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
                        return set_err(x->err, x->errlen, "archive unreadable: %s", archive_error_string(x->a) ?: "unknown error");
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
        int r = canonical_path(entry_name(e), "path", path, x->err, x->errlen);
        if (r < 0)
                return r;
        const char *name = split_path(path, dir);
        int pfd = extract_open_dir(x, dir);
        if (pfd < 0)
                return pfd;
        mode_t mode = archive_entry_mode(e) & 0777;
        struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, entry_mtime(e) };
        const char *hardlink = entry_hardlink(e);
        unsigned ft = archive_entry_filetype(e);
        if (hardlink) {
                char tpath[SBX_MAX_PATH_BYTES], tdir[SBX_MAX_PATH_BYTES];
                if ((r = canonical_path(hardlink, "link target", tpath, x->err, x->errlen)) < 0)
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
                if (!is_top(path) && mkdirat(pfd, name, 0700) < 0 && errno != EEXIST)
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
                const char *target = entry_symlink(e);
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
                return set_err(x->err, x->errlen, "archive entry %s: unsupported entry type", path);
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
                        if (errno == EPERM && is_top(d->path))
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
        x.a = reader_open(data, len);
        if (!x.a)
                return set_err(err, errlen, "not an sbx archive: not a zstd-compressed tar");
        for (;;) {
                struct archive_entry *e;
                int h = archive_read_next_header(x.a, &e);
                if (h == ARCHIVE_EOF)
                        break;
                if (h < ARCHIVE_WARN) {
                        r = set_err(err, errlen, "archive unreadable: %s", archive_error_string(x.a) ?: "unknown error");
                        break;
                }
                const char *raw = entry_name(e);
                if (raw && strcmp(raw, ARCHIVE_MANIFEST) == 0)
                        continue;
                if ((r = extract_entry(&x, e)) < 0)
                        break;
        }
        if (r >= 0)
                r = extract_fix_dirs(&x);
        if (r == -ENOMEM)
                set_err(err, errlen, "extract: out of memory");
        safe_close(x.cache_fd);
        archive_read_free(x.a);
        for (size_t i = 0; i < x.n_dirs; i++)
                free(x.dirs[i].path);
        free(x.dirs);
        return r;
}
