/* SPDX-License-Identifier: MIT */
/* Unpacking one layer of an untrusted image. Every entry is made relative to the layer's
 * top, one path component at a time with O_NOFOLLOW, so no name and no symlink the layer holds
 * can reach out of it (a symlink itself may point anywhere: it is read inside the sandbox's
 * root). What an image may not bring is left out or taken off, counted: device nodes,
 * setuid and setgid bits, extended attributes (file capabilities among them), and the write
 * bits of group and others: every file is the store owner's (the tar's owners would be host
 * users, who could then change what every sandbox of the image runs; inside a sandbox owners
 * are nobody either way, the root is read-only). OCI whiteouts
 * become overlay's: `.wh.NAME` a 0:0 character device NAME, `.wh..wh..opq` the
 * user.overlay.opaque attribute of its directory (the sandbox's overlay is mounted with
 * userxattr: pid 1 has no capability over the host to read trusted.* attributes).
 *
 * Two archive readers in a row: the first undoes any compression (raw format, every
 * filter), the second reads the tar from its bytes; the digests of both streams are taken
 * as they go, so the layer is read once. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/sha256.h"
#include "base/util.h"
#include "fs/tree.h"
#include "fs/walk.h"
#include "oci/oci_private.h"

typedef struct Src {
        int fd;
        uint64_t out_bytes, out_max; /* decompressed so far, and the most allowed (a bomb's end) */
        struct sha256_ctx blob, diff;
        struct archive *raw;
        uint8_t in[SBX_IMAGE_IO_BUF], out[SBX_IMAGE_IO_BUF];
} Src;

typedef struct DirFix {
        char *path;
        mode_t mode;
        uid_t uid;
        gid_t gid;
        struct timespec mtime;
} DirFix;

typedef struct Unpack {
        int top;
        const UnpackFilter *filter;
        uint64_t room;
        UnpackStats *st;
        char *err;
        size_t errlen;
        char cached[SBX_MAX_PATH_BYTES]; /* the directory cached_fd is, relative to top */
        int cached_fd;
        DirFix *dirs;
        size_t n_dirs, cap_dirs;
} Unpack;

static la_ssize_t read_blob(struct archive *a, void *ud, const void **buf) {
        Src *s = ud;
        ssize_t n;
        do
                n = read(s->fd, s->in, sizeof s->in);
        while (n < 0 && errno == EINTR);
        if (n < 0) {
                archive_set_error(a, errno, "read: %s", strerror(errno));
                return -1;
        }
        sha256_feed(&s->blob, s->in, (size_t)n);
        *buf = s->in;
        return n;
}

static la_ssize_t read_tar(struct archive *a, void *ud, const void **buf) {
        Src *s = ud;
        la_ssize_t n = archive_read_data(s->raw, s->out, sizeof s->out);
        if (n < 0) {
                archive_set_error(a, EIO, "%s", archive_error_string(s->raw));
                return -1;
        }
        if ((s->out_bytes += (uint64_t)n) > s->out_max) {
                archive_set_error(a, EFBIG, "it decompresses to more than the room left in the image store");
                return -1;
        }
        sha256_feed(&s->diff, s->out, (size_t)n);
        *buf = s->out;
        return n;
}

static _printf_(3, 4) int fail(Unpack *u, int r, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(u->err, u->errlen, fmt, ap);
        va_end(ap);
        return r;
}

/* The entry's path with "./" and "/" taken off its front and repeated slashes, "." parts and a
 * trailing slash removed; -EPERM for a ".." part. "" is the layer's top. */
static int clean_path(const char *in, char *out, size_t size) {
        size_t n = 0;
        for (const char *p = in; *p;) {
                while (*p == '/')
                        p++;
                const char *end = strchrnul(p, '/');
                size_t l = (size_t)(end - p);
                if (l == 0)
                        break;
                if (l == 2 && p[0] == '.' && p[1] == '.')
                        return -EPERM;
                if (!(l == 1 && p[0] == '.')) {
                        if (l > NAME_MAX || n + l + 2 > size)
                                return -ENAMETOOLONG;
                        if (n)
                                out[n++] = '/';
                        memcpy(out + n, p, l);
                        n += l;
                }
                p = end;
        }
        out[n] = 0;
        return 0;
}

/* Opens the directory of path (relative to top), making missing directories on the way. A
 * symlink on the way is refused: in a layer, a path through its own symlink is a way out. */
static int open_parent(Unpack *u, const char *path, const char **ret_name) {
        const char *last = strrchr(path, '/');
        *ret_name = last ? last + 1 : path;
        size_t dl = last ? (size_t)(last - path) : 0;
        if (u->cached_fd >= 0 && strlen(u->cached) == dl && memcmp(u->cached, path, dl) == 0)
                return u->cached_fd;
        int fd = walk_open_parent_mk(u->top, path, 0755, ret_name);
        if (fd < 0)
                return fd;
        safe_close(u->cached_fd);
        u->cached_fd = fd;
        memcpy(u->cached, path, dl);
        u->cached[dl] = 0;
        return fd;
}

/* Removes what is at parent/name (a tree too), if anything. */
static int remove_entry(Unpack *u, int parent, const char *name) {
        if (unlinkat(parent, name, 0) == 0 || errno == ENOENT)
                return 0;
        if (errno != EISDIR && errno != EPERM)
                return negerrno();
        _cleanup_close_ int d = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (d < 0)
                return negerrno();
        int r = tree_clear(d, u->err, u->errlen);
        if (r < 0)
                return r;
        /* The cache may be the directory going away, or beneath it. */
        u->cached_fd = safe_close(u->cached_fd);
        return unlinkat(parent, name, AT_REMOVEDIR) < 0 ? negerrno() : 0;
}

static mode_t safe_mode(Unpack *u, mode_t mode) {
        if (mode & (S_ISUID | S_ISGID))
                u->st->stripped++;
        return mode & 01755;
}

static int write_data(Unpack *u, struct archive *a, int fd, const char *path) {
        const void *buf;
        size_t len;
        la_int64_t off;
        for (;;) {
                int h = archive_read_data_block(a, &buf, &len, &off);
                if (h == ARCHIVE_EOF)
                        return 0;
                if (h < ARCHIVE_WARN)
                        return fail(u, -EIO, "layer: %s: %s", path, archive_error_string(a));
                if (off < 0 || (uint64_t)off + len < (uint64_t)off)
                        return fail(u, -EINVAL, "layer: %s: bad offset", path);
                for (size_t done = 0; done < len;) {
                        ssize_t n = pwrite(fd, (const uint8_t *)buf + done, len - done, off + (off_t)done);
                        if (n < 0)
                                return fail(u, negerrno(), "layer: write %s: %s", path, strerror(errno));
                        done += (size_t)n;
                }
        }
}

static int dir_later(Unpack *u, const char *path, mode_t mode, uid_t uid, gid_t gid, struct timespec mtime) {
        if (array_grow((void **)&u->dirs, u->n_dirs + 1, &u->cap_dirs, sizeof *u->dirs, 64) < 0)
                return -ENOMEM;
        char *p = strdup(path);
        if (!p)
                return -ENOMEM;
        u->dirs[u->n_dirs++] = (DirFix){ .path = p, .mode = mode, .uid = uid, .gid = gid, .mtime = mtime };
        return 0;
}

/* Directories get their modes last (one that is read-only would refuse what goes in it),
 * deepest first. */
static int fix_dirs(Unpack *u) {
        u->cached_fd = safe_close(u->cached_fd);
        for (size_t i = u->n_dirs; i-- > 0;) {
                DirFix *d = &u->dirs[i];
                const char *name;
                int parent = walk_open_parent(u->top, d->path, &name);
                if (parent < 0)
                        continue; /* removed by a later entry */
                int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                close(parent);
                if (fd < 0)
                        continue;
                struct timespec ts[2] = { d->mtime, d->mtime };
                int r = (d->uid != (uid_t)-1 && fchown(fd, d->uid, d->gid) < 0) || fchmod(fd, d->mode) < 0 ||
                        futimens(fd, ts) < 0 ? negerrno() : 0;
                close(fd);
                if (r < 0)
                        return fail(u, r, "layer: %s: %s", d->path, strerror(-r));
        }
        return 0;
}

void (*oci_unpack_progress)(uint64_t bytes);

static int entry(Unpack *u, struct archive *a, struct archive_entry *e) {
        char path[SBX_MAX_PATH_BYTES], target[SBX_MAX_PATH_BYTES];
        const char *raw = archive_entry_pathname(e);
        if (!raw)
                return fail(u, -EINVAL, "layer: an entry has no name");
        int r = clean_path(raw, path, sizeof path);
        if (r == -EPERM)
                return fail(u, r, "layer: entry '%.200s' climbs out of the layer ('..')", raw);
        if (r < 0)
                return fail(u, r, "layer: entry '%.200s': name too long", raw);
        if (++u->st->entries > SBX_IMAGE_LAYER_ENTRIES)
                return fail(u, -EFBIG, "layer: more than %u entries", SBX_IMAGE_LAYER_ENTRIES);
        la_int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
        if (u->filter && archive_entry_filetype(e) == AE_IFREG && !archive_entry_hardlink(e) &&
            !u->filter->want(path, (uint64_t)MAX(size, 0), u->filter->ud))
                return 0; /* its data is skipped by the next header */
        uint64_t before = u->st->bytes;
        u->st->bytes += SBX_IMAGE_ENTRY_BYTES + (uint64_t)MAX(size, 0);
        if (oci_unpack_progress && !u->filter && before / SBX_IMAGE_PROGRESS_BYTES != u->st->bytes / SBX_IMAGE_PROGRESS_BYTES)
                oci_unpack_progress(u->st->bytes);
        if (u->st->bytes > u->room)
                return fail(u, -EFBIG, "the image is larger than the room left in the image store");
        if (!path[0])
                return 0; /* the layer's top: the overlay's root is the sandbox's */
        const char *name;
        int parent = open_parent(u, path, &name);
        if (parent < 0)
                return fail(u, parent, "layer: '%.200s': %s%s", path, strerror(-parent),
                            parent == -ENOTDIR || parent == -ELOOP ? " (a path through a symlink of the layer)" : "");
        struct timespec mt = { .tv_sec = archive_entry_mtime(e), .tv_nsec = archive_entry_mtime_nsec(e) };
        struct timespec ts[2] = { mt, mt };
        uid_t uid = (uid_t)-1;
        gid_t gid = (gid_t)-1;

        if (strncmp(name, ".wh.", 4) == 0) {
                if (strcmp(name, ".wh..wh..opq") == 0)
                        return fsetxattr(parent, "user.overlay.opaque", "y", 1, 0) < 0
                                       ? fail(u, negerrno(), "layer: mark '%.200s' opaque: %s", path, strerror(errno)) : 0;
                const char *gone = name + 4;
                if (!gone[0] || strcmp(gone, ".") == 0 || strcmp(gone, "..") == 0 || strchr(gone, '/'))
                        return fail(u, -EINVAL, "layer: bad whiteout '%.200s'", path);
                if ((r = remove_entry(u, parent, gone)) < 0 || (parent = open_parent(u, path, &name)) < 0)
                        return fail(u, r < 0 ? r : parent, "layer: whiteout '%.200s': %s", path, strerror(-(r < 0 ? r : parent)));
                return mknodat(parent, gone, S_IFCHR, makedev(0, 0)) < 0
                               ? fail(u, negerrno(), "layer: whiteout '%.200s': %s", path, strerror(errno)) : 0;
        }

        const char *link = archive_entry_hardlink(e);
        mode_t type = archive_entry_filetype(e);
        if (type == AE_IFDIR && !link) {
                struct stat st;
                if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode) &&
                    unlinkat(parent, name, 0) < 0)
                        return fail(u, negerrno(), "layer: '%.200s': %s", path, strerror(errno));
                if (mkdirat(parent, name, 0755) < 0 && errno != EEXIST)
                        return fail(u, negerrno(), "layer: mkdir '%.200s': %s", path, strerror(errno));
                return dir_later(u, path, safe_mode(u, archive_entry_perm(e)), uid, gid, mt) < 0
                               ? fail(u, -ENOMEM, "out of memory") : 0;
        }
        if ((r = remove_entry(u, parent, name)) < 0 || (parent = open_parent(u, path, &name)) < 0)
                return fail(u, r < 0 ? r : parent, "layer: replace '%.200s': %s", path, strerror(-(r < 0 ? r : parent)));
        if (link) {
                if ((r = clean_path(link, target, sizeof target)) < 0 || !target[0])
                        return fail(u, -EPERM, "layer: hard link '%.200s' names '%.200s', out of the layer", path, link);
                const char *tname;
                _cleanup_close_ int tp = walk_open_parent(u->top, target, &tname);
                struct stat st;
                if (tp < 0 || fstatat(tp, tname, &st, AT_SYMLINK_NOFOLLOW) < 0 || S_ISDIR(st.st_mode))
                        return fail(u, -EPERM, "layer: hard link '%.200s' names '%.200s', which is no file of this layer",
                                    path, link);
                return linkat(tp, tname, parent, name, 0) < 0
                               ? fail(u, negerrno(), "layer: link '%.200s': %s", path, strerror(errno)) : 0;
        }
        switch (type) {
        case AE_IFREG: {
                _cleanup_close_ int fd = openat(parent, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
                if (fd < 0)
                        return fail(u, negerrno(), "layer: create '%.200s': %s", path, strerror(errno));
                if ((r = write_data(u, a, fd, path)) < 0)
                        return r;
                if (ftruncate(fd, MAX(size, 0)) < 0 || (uid != (uid_t)-1 && fchown(fd, uid, gid) < 0) ||
                    fchmod(fd, safe_mode(u, archive_entry_perm(e))) < 0 || futimens(fd, ts) < 0)
                        return fail(u, negerrno(), "layer: '%.200s': %s", path, strerror(errno));
                return 0;
        }
        case AE_IFLNK: {
                const char *to = archive_entry_symlink(e);
                if (!to || !to[0] || strlen(to) >= SBX_MAX_PATH_BYTES)
                        return fail(u, -EINVAL, "layer: symlink '%.200s' has no target", path);
                if (symlinkat(to, parent, name) < 0 ||
                    (uid != (uid_t)-1 && fchownat(parent, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0))
                        return fail(u, negerrno(), "layer: symlink '%.200s': %s", path, strerror(errno));
                (void)utimensat(parent, name, ts, AT_SYMLINK_NOFOLLOW);
                return 0;
        }
        case AE_IFIFO:
                if (mkfifoat(parent, name, safe_mode(u, archive_entry_perm(e))) < 0 ||
                    (uid != (uid_t)-1 && fchownat(parent, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0))
                        return fail(u, negerrno(), "layer: fifo '%.200s': %s", path, strerror(errno));
                return 0;
        default:
                /* Device nodes and sockets: nothing a sandbox may have from an image. */
                u->st->dropped++;
                return 0;
        }
}

static void unpack_done(Unpack *u) {
        safe_close(u->cached_fd);
        for (size_t i = 0; i < u->n_dirs; i++)
                free(u->dirs[i].path);
        free(u->dirs);
}

/* Every entry of tar into u. */
static int unpack_entries(Unpack *u, struct archive *tar) {
        struct archive_entry *e;
        for (;;) {
                int h = archive_read_next_header(tar, &e);
                if (h == ARCHIVE_EOF)
                        break;
                if (h < ARCHIVE_WARN && archive_errno(tar) == EFBIG)
                        return fail(u, -EFBIG, "the image is larger than the room left in the image store (%s)",
                                    archive_error_string(tar));
                if (h < ARCHIVE_WARN)
                        return fail(u, -EINVAL, "layer: not a tar: %s", archive_error_string(tar));
                int r = entry(u, tar, e);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* gzip, zstd and xz, done by libarchive itself: never an external program, never a filter a
 * layer's media type cannot name (bzip2, lzip, uudecode ...). */
static int support_filters(Unpack *u, struct archive *a, bool xz) {
        if (archive_read_support_filter_gzip(a) != ARCHIVE_OK || archive_read_support_filter_zstd(a) != ARCHIVE_OK ||
            (xz && archive_read_support_filter_xz(a) != ARCHIVE_OK))
                return fail(u, -ENOTSUP, "this libarchive cannot decompress gzip, zstd and xz itself");
        return 0;
}

/* After the first header: one filter at most (a layer compressed twice is a bomb's shape). */
static int filters_ok(Unpack *u, struct archive *a) {
        return archive_filter_count(a) > 2 ? fail(u, -EINVAL, "layer: compressed more than once") : 0;
}

/* The two readers in a row of the file comment, s->out_max bounding what the first may
 * decompress to; the tar reader in *ret_tar. */
static int open_two(Unpack *u, Src *s, bool xz, struct archive **ret_tar) {
        struct archive_entry *e;
        s->raw = archive_read_new();
        struct archive *tar = archive_read_new();
        *ret_tar = tar;
        if (!s->raw || !tar)
                return fail(u, -ENOMEM, "out of memory");
        int r = support_filters(u, s->raw, xz);
        if (r < 0)
                return r;
        archive_read_support_format_raw(s->raw);
        archive_read_support_format_tar(tar);
        if (archive_read_open(s->raw, s, NULL, read_blob, NULL) != ARCHIVE_OK ||
            archive_read_next_header(s->raw, &e) != ARCHIVE_OK)
                return fail(u, -EINVAL, "layer: not a tar: %s", archive_error_string(s->raw));
        if ((r = filters_ok(u, s->raw)) < 0)
                return r;
        if (archive_read_open(tar, s, NULL, read_tar, NULL) != ARCHIVE_OK)
                return fail(u, -EINVAL, "layer: not a tar: %s", archive_error_string(tar));
        return 0;
}

static void src_free(Src *s, struct archive *tar) {
        if (tar)
                archive_read_free(tar);
        if (s && s->raw)
                archive_read_free(s->raw);
        free(s);
}

/* Whether fd starts with a compressor's magic (gzip, zstd, xz); the offset is put back. */
static bool compressed(int fd) {
        uint8_t m[6] = { 0 };
        ssize_t n = pread(fd, m, sizeof m, 0);
        return n >= 2 && ((m[0] == 0x1f && m[1] == 0x8b) || (n >= 4 && m[0] == 0x28 && m[1] == 0xb5 && m[2] == 0x2f &&
                                                                m[3] == 0xfd) ||
                          (n >= 6 && memcmp(m, "\xfd" "7zXZ\0", 6) == 0));
}

int oci_unpack_archive(int fd, int dst, uint64_t room, const UnpackFilter *f, UnpackStats *st, char *err,
                       size_t errlen) {
        Unpack u = { .top = dst, .filter = f, .room = room, .st = st, .err = err, .errlen = errlen, .cached_fd = -1 };
        *st = (UnpackStats){ 0 };
        struct archive *tar = NULL;
        Src *s = NULL;
        struct stat fst;
        int r;
        if (fstat(fd, &fst) < 0)
                return fail(&u, negerrno(), "stat: %s", strerror(errno));
        if (!compressed(fd)) {
                /* A plain tar: what the filter leaves is seeked past, not read. */
                if (!(tar = archive_read_new()))
                        return fail(&u, -ENOMEM, "out of memory");
                archive_read_support_format_tar(tar);
                r = archive_read_open_fd(tar, fd, SBX_IMAGE_IO_BUF) != ARCHIVE_OK
                            ? fail(&u, -EINVAL, "not a tar: %s", archive_error_string(tar)) : 0;
        } else if (!(s = calloc(1, sizeof *s))) {
                r = fail(&u, -ENOMEM, "out of memory");
        } else {
                /* Compressed, what it skips is decompressed too: bounded like a layer. */
                s->fd = fd;
                s->out_max = room + (uint64_t)fst.st_size + SBX_IMAGE_TAR_SLACK;
                sha256_init(&s->blob);
                sha256_init(&s->diff);
                r = open_two(&u, s, true, &tar);
        }
        if (r >= 0 && (r = unpack_entries(&u, tar)) >= 0)
                r = fix_dirs(&u);
        src_free(s, s ? tar : NULL);
        if (!s && tar)
                archive_read_free(tar);
        unpack_done(&u);
        return r;
}

int oci_unpack_layer(int fd, int dst, uint64_t room, UnpackStats *st, char *blob_hex, char *diff_hex, char *err,
                     size_t errlen) {
        Src *s = calloc(1, sizeof *s);
        Unpack u = { .top = dst, .room = room, .st = st, .err = err, .errlen = errlen, .cached_fd = -1 };
        struct archive *tar = NULL;
        *st = (UnpackStats){ 0 };
        if (!s)
                return fail(&u, -ENOMEM, "out of memory");
        s->fd = fd;
        s->out_max = room + SBX_IMAGE_TAR_SLACK;
        sha256_init(&s->blob);
        sha256_init(&s->diff);
        int r = open_two(&u, s, false, &tar);
        if (r >= 0)
                r = unpack_entries(&u, tar);
        /* What follows the tar's end (its padding) is part of the diff id: bounded too. */
        for (la_ssize_t n; r >= 0 && (n = archive_read_data(s->raw, s->out, sizeof s->out)) != 0;) {
                if (n < 0 || (s->out_bytes += (uint64_t)n) > s->out_max)
                        r = n < 0 ? fail(&u, -EINVAL, "layer: %s", archive_error_string(s->raw))
                                  : fail(&u, -EFBIG, "the image is larger than the room left in the image store "
                                         "(what follows a layer's tar decompresses past it)");
                else
                        sha256_feed(&s->diff, s->out, (size_t)n);
        }
        /* And what the decompressor did not need, to the blob's end. */
        for (const void *b; r >= 0 && read_blob(s->raw, s, &b) > 0;)
                ;
        if (r >= 0)
                r = fix_dirs(&u);
        if (r >= 0) {
                sha256_digest_hex(&s->blob, blob_hex);
                sha256_digest_hex(&s->diff, diff_hex);
        }
        src_free(s, tar);
        unpack_done(&u);
        return r;
}
