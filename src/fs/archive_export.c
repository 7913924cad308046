/* SPDX-License-Identifier: MIT */
/* Writing an archive: the walk of a sandbox's writable directories into a zstd tar, in a
 * stable order, with the digest and the manifest last (layout in archive.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/text.h"
#include "base/util.h"
#include "fs/archive.h"
#include "fs/archive_private.h"
#include "fs/walk.h"

typedef struct Export {
        struct archive *a;
        struct archive_entry *e;
        const TreeIds *ids;
        struct sha256_ctx sha;
        dev_t dev;   /* of the top directory being walked: other filesystems are skipped */
        int group;   /* archive_link_group() of that top directory */
        Walk walk;   /* the directory being exported, from the top directory down */
        const char *path; /* the entry at hand: its archive path (borrowed) */
        WalkLinks links;
        uint8_t *buf;
        uint64_t entries, bytes;
        uint64_t max_bytes; /* what an import may hold: a sparse file past it is refused now */
        char *err;
        size_t errlen;
} Export;

static int export_fail(Export *x, int r, const char *what) {
        archive_err(x->err, x->errlen, "%s %s: %s", what, x->path, strerror(-r));
        return r;
}

static int export_archive_fail(Export *x) {
        int e = archive_errno(x->a);
        archive_err(x->err, x->errlen, "write archive at %s: %s", x->path[0] ? x->path : ARCHIVE_MANIFEST,
                    archive_error_string(x->a) ?: "unknown error");
        return e > 0 ? -e : -EIO;
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
        uid_t uid = x->ids ? tree_map_uid(x->ids, st->st_uid) : st->st_uid;
        gid_t gid = x->ids ? tree_map_gid(x->ids, st->st_gid) : st->st_gid;
        if (x->ids && st->st_uid == x->ids->src_uid)
                archive_entry_set_uname(e, "user");
        if (x->ids && st->st_gid == x->ids->src_gid)
                archive_entry_set_gname(e, "user");
        archive_entry_set_uid(e, uid);
        archive_entry_set_gid(e, gid);
        /* ARCHIVE_WARN: a name not convertible to UTF-8 is stored as raw bytes; still fine. */
        if (archive_write_header(x->a, e) < ARCHIVE_WARN)
                return export_archive_fail(x);
        archive_digest_header(&x->sha, x->path, type, mode, size, target);
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
        return walk_links_find(&x->links, st->st_dev, st->st_ino, x->group);
}

static int export_link_add(Export *x, const struct stat *st) {
        return walk_links_add(&x->links, st->st_dev, st->st_ino, x->group, x->path);
}

/* Opens name in dir with flags and stats what was opened (the entry may have been swapped
 * since the listing). Returns the fd, -ENOENT if it is gone (not an error: nothing is
 * exported), or -errno (x->err says why). */
static int export_open(Export *x, int dir, const char *name, int flags, struct stat *st) {
        _cleanup_close_ int fd = openat(dir, name, flags);
        if (fd < 0)
                return errno == ENOENT ? -ENOENT : export_fail(x, negerrno(), "open");
        if (fstat(fd, st) < 0)
                return export_fail(x, negerrno(), "stat");
        return TAKE_FD(fd);
}

/* The directory name of the current one, at x->path: its header, then it becomes the current
 * directory, its entries listed in order. */
static int export_subdir(Export *x, int dir, const char *name) {
        if (walk_depth(&x->walk) >= x->walk.max_depth)
                return export_fail(x, -ELOOP, "export (too deep)");
        struct stat st;
        int fd = export_open(x, dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, &st);
        if (fd < 0)
                return fd == -ENOENT ? 0 : fd;
        int r = export_header(x, 'd', &st, 0, NULL);
        if (r < 0) {
                safe_close(fd);
                return r;
        }
        r = walk_push(&x->walk, fd, name);
        x->path = walk_path(&x->walk); /* the push may have moved it */
        if (r < 0)
                return export_fail(x, r, "open");
        /* Sorted, so that the same tree always gives the same archive. */
        if ((r = walk_list(&x->walk, true)) < 0)
                return export_fail(x, r, "read");
        return 0;
}

/* The regular file name of dir at x->path (st: its stat from the listing): a hard link to a
 * file already exported, else its header and data. */
static int export_file(Export *x, int dir, const char *name, struct stat *st) {
        const char *first = st->st_nlink > 1 ? export_link_find(x, st) : NULL;
        if (first)
                return export_header(x, 'h', st, 0, first);
        /* O_NONBLOCK: if the entry was swapped for a fifo since the stat, no hang. */
        _cleanup_close_ int fd = export_open(x, dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, st);
        if (fd < 0)
                return fd == -ENOENT ? 0 : fd;
        if (!S_ISREG(st->st_mode))
                return 0;
        /* The archive holds a file at its full size, holes written out; one larger than the
         * sandbox's limit (sparse, or it could not exist) could never be imported. */
        if (x->max_bytes && x->bytes + (uint64_t)st->st_size > x->max_bytes)
                return export_fail(x, -EFBIG, "export (sparse: larger than the sandbox's filesystem limit)");
        int r = export_header(x, 'f', st, (uint64_t)st->st_size, NULL);
        if (r < 0)
                return r;
        if ((r = export_data(x, fd, (uint64_t)st->st_size)) < 0)
                return r;
        if (st->st_nlink > 1 && (r = export_link_add(x, st)) < 0)
                return export_fail(x, r, "export");
        return 0;
}

static int export_symlink(Export *x, int dir, const char *name, const struct stat *st) {
        char target[SBX_MAX_PATH_BYTES];
        ssize_t n = readlinkat(dir, name, target, sizeof target);
        if (n < 0)
                return errno == ENOENT ? 0 : export_fail(x, negerrno(), "readlink");
        if ((size_t)n >= sizeof target)
                return export_fail(x, -ENAMETOOLONG, "readlink");
        target[n] = 0;
        return export_header(x, 'l', st, 0, target);
}

static int export_entry(Export *x, const char *name) {
        int dir = walk_fd(&x->walk);
        struct stat st;
        if (!(x->path = walk_child_path(&x->walk, name)))
                return export_fail(x, -ENOMEM, "export");
        if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : export_fail(x, negerrno(), "stat");
        if (st.st_dev != x->dev)
                return 0;
        /* Longer paths would be refused on import; the archive names every entry by its
         * whole path, whatever the depth. */
        if (strlen(x->path) >= SBX_MAX_ARCHIVE_PATH_BYTES)
                return export_fail(x, -ENAMETOOLONG, "export (path too long)");
        if (S_ISDIR(st.st_mode))
                return export_subdir(x, dir, name);
        if (S_ISREG(st.st_mode))
                return export_file(x, dir, name, &st);
        if (S_ISLNK(st.st_mode))
                return export_symlink(x, dir, name, &st);
        if (S_ISFIFO(st.st_mode))
                return export_header(x, 'p', &st, 0, NULL);
        /* Sockets and device nodes are left out: neither can be recreated meaningfully. */
        return 0;
}

/* The tree below the top directory open as fd (borrowed), whose header is written, without
 * recursion: the walk goes down into each directory as it meets it (pre-order, by name) and
 * back up once it is done. */
static int export_tree(Export *x, int fd, const char *top) {
        int r = walk_init(&x->walk, fd, top, SBX_MAX_TREE_DEPTH);
        if (r < 0)
                return export_fail(x, r, "open");
        if ((r = walk_list(&x->walk, true)) < 0)
                r = export_fail(x, r, "read");
        while (r >= 0) {
                const WalkEntry *e = walk_next(&x->walk);
                if (e)
                        r = export_entry(x, e->name);
                else if (walk_depth(&x->walk) > 0)
                        r = walk_pop(&x->walk);
                else
                        break;
        }
        if (r < 0) {
                x->path = walk_path(&x->walk);
                r = export_fail(x, r, r == -ESTALE ? "export (a directory was moved meanwhile)" : "export");
        }
        walk_done(&x->walk);
        x->path = "";
        return r;
}

/* Opens the top directory `path` (one of archive_tops) component by component, following no
 * symlink. */
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
                archive_err(x->err, x->errlen, "export: cannot build the manifest");
                return -ENOMEM;
        }
        size_t len = strlen(json);
        x->path = "";
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
        Export x = { .ids = ids, .path = "", .err = err, .errlen = errlen, .max_bytes = meta->limits.fs_bytes };
        sha256_init(&x.sha);
        int r = -ENOMEM;
        x.buf = malloc(SBX_ARCHIVE_IO_BUF);
        x.a = archive_write_new();
        x.e = archive_entry_new();
        if (!x.buf || !x.a || !x.e) {
                archive_err(err, errlen, "export: out of memory");
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
        for (size_t i = 0; i < ELEMENTSOF(archive_tops); i++) {
                x.path = archive_tops[i];
                _cleanup_close_ int fd = open_top(root, archive_tops[i]);
                if (fd == -ENOENT)
                        continue; /* a sandbox without this directory has nothing in it */
                struct stat st;
                if (fd < 0 || fstat(fd, &st) < 0) {
                        r = export_fail(&x, fd < 0 ? fd : negerrno(), "open");
                        goto out;
                }
                x.dev = st.st_dev;
                x.group = archive_link_group((int)i);
                if ((r = export_header(&x, 'd', &st, 0, NULL)) < 0 || (r = export_tree(&x, fd, archive_tops[i])) < 0)
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
        walk_links_done(&x.links);
        free(x.buf);
        return r;
}
