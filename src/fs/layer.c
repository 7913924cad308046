/* SPDX-License-Identifier: MIT */
/* Layers of forks: the diff that builds one from a sandbox's trees and the index of the last
 * one, and the overlay that puts them under a fork (see layer.h). */
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <linux/mount.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/mountfd.h"
#include "base/util.h"
#include "fs/changes.h"
#include "fs/layer.h"
#include "fs/walk.h"

/* The writable directories, as the sandbox sees them and as a layer's top holds them. */
static const char *const tree_dirs[] = { "tmp", "home/user", "dev/shm" };
static const char *const top_dirs[] = { "tmp", "home", "shm" };
#define N_TREES 3

#define INDEX_MAGIC 0x31525941594c5853ULL /* "SXLYAYR1" */

typedef struct IndexHead {
        uint64_t magic, count;
} IndexHead;

/* One entry as stored: the path (path_len bytes, no NUL) follows, padded to 8 bytes. */
typedef struct IndexRec {
        uint32_t path_len, mode, uid, gid;
        uint64_t ino, size;
        int64_t ctime_ns, mtime_ns;
} IndexRec;

typedef struct Ent {
        const IndexRec *rec;
        const char *path;
        int32_t first_child, next_sibling;
        bool seen;
} Ent;

/* The old index, mapped: entries, a hash of their paths (open addressing, slot = entry + 1)
 * and each directory's children in a list, for the whiteouts of a directory's lost ones. */
typedef struct Index {
        void *map;
        size_t map_len;
        Ent *v;
        size_t n;
        uint32_t *hash;
        size_t hash_mask;
        int64_t threshold;
} Index;

typedef struct Frame {
        const char *name;
        struct stat st;
        int layer_fd; /* its copy in the layer, -1 until something is put there */
        int32_t ent;  /* its entry in the old index, when it was a directory then */
} Frame;

typedef struct Diff {
        const LayerDiff *d;
        LayerDiffStats *st;
        Index idx;
        Frame frames[SBX_LAYER_MAX_DEPTH + 1];
        char *path; /* of the current directory, relative to the layer's top */
        size_t plen;
        dev_t dev;
        uint8_t *out;
        size_t out_len;
        WalkLinks links;
        char *err;
        size_t errlen;
} Diff;

#define PATH_CAP ((SBX_LAYER_MAX_DEPTH + 2) * 256)
#define OUT_CAP (256U * 1024)

static int fail(Diff *x, int r, const char *what, const char *name) {
        if (x->err[0] == 0)
                snprintf(x->err, x->errlen, "layer: %s %.*s%s%s: %s", what, (int)x->plen, x->path, name ? "/" : "",
                         name ? name : "", strerror(-r));
        return r;
}

static uint64_t hash_path(const char *p, size_t n) {
        uint64_t h = 1469598103934665603ULL;
        for (size_t i = 0; i < n; i++)
                h = (h ^ (uint8_t)p[i]) * 1099511628211ULL;
        return h;
}

static int32_t index_find(const Index *ix, const char *p, size_t n) {
        if (!ix->n)
                return -1;
        for (size_t s = hash_path(p, n) & ix->hash_mask;; s = (s + 1) & ix->hash_mask) {
                uint32_t k = ix->hash[s];
                if (!k)
                        return -1;
                const Ent *e = &ix->v[k - 1];
                if (e->rec->path_len == n && memcmp(e->path, p, n) == 0)
                        return (int32_t)(k - 1);
        }
}

static void index_free(Index *ix) {
        if (ix->map && ix->map != MAP_FAILED)
                munmap(ix->map, ix->map_len);
        free(ix->v);
        free(ix->hash);
}

/* Maps and checks the old index (it was written by an earlier diff, but a short or bad one
 * must fail the diff, never read past the map). */
static int index_load(Index *ix, int fd, int64_t threshold) {
        *ix = (Index){ .threshold = threshold };
        if (fd < 0)
                return 0;
        struct stat st;
        if (fstat(fd, &st) < 0)
                return negerrno();
        if ((size_t)st.st_size < sizeof(IndexHead))
                return -EINVAL;
        ix->map_len = (size_t)st.st_size;
        ix->map = mmap(NULL, ix->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (ix->map == MAP_FAILED)
                return negerrno();
        const IndexHead *h = ix->map;
        if (h->magic != INDEX_MAGIC || h->count > ix->map_len / sizeof(IndexRec))
                return -EINVAL;
        ix->v = calloc(h->count ? h->count : 1, sizeof *ix->v);
        size_t hs = 16;
        while (hs < h->count * 2)
                hs *= 2;
        ix->hash = calloc(hs, sizeof *ix->hash);
        if (!ix->v || !ix->hash)
                return -ENOMEM;
        ix->hash_mask = hs - 1;
        size_t off = sizeof *h;
        for (uint64_t i = 0; i < h->count; i++) {
                if (ix->map_len - off < sizeof(IndexRec))
                        return -EINVAL;
                const IndexRec *r = (const IndexRec *)((const uint8_t *)ix->map + off);
                off += sizeof *r;
                if (r->path_len == 0 || ix->map_len - off < r->path_len)
                        return -EINVAL;
                Ent *e = &ix->v[ix->n];
                *e = (Ent){ r, (const char *)ix->map + off, -1, -1, false };
                off += (r->path_len + 7) & ~7U;
                if (off > ix->map_len)
                        off = ix->map_len;
                size_t s = hash_path(e->path, r->path_len) & ix->hash_mask;
                while (ix->hash[s])
                        s = (s + 1) & ix->hash_mask;
                ix->hash[s] = (uint32_t)++ix->n;
        }
        /* Each entry into its parent's list: entries come parents first (the walk wrote them
         * so), so a parent is always found. */
        for (size_t i = 0; i < ix->n; i++) {
                Ent *e = &ix->v[i];
                const char *slash = memrchr(e->path, '/', e->rec->path_len);
                if (!slash)
                        continue;
                int32_t p = index_find(ix, e->path, (size_t)(slash - e->path));
                if (p < 0)
                        continue;
                e->next_sibling = ix->v[p].first_child;
                ix->v[p].first_child = (int32_t)i;
        }
        return 0;
}

static int64_t ts_ns(const struct timespec *t) { return (int64_t)t->tv_sec * 1000000000LL + t->tv_nsec; }

static bool unchanged(const Index *ix, const IndexRec *r, const struct stat *st) {
        if ((r->mode & S_IFMT) != (st->st_mode & S_IFMT))
                return false;
        if (ix->threshold)
                return ts_ns(&st->st_ctim) < ix->threshold;
        return r->ino == st->st_ino && r->ctime_ns == ts_ns(&st->st_ctim) && r->mtime_ns == ts_ns(&st->st_mtim) &&
               r->size == (uint64_t)st->st_size && r->mode == st->st_mode && r->uid == st->st_uid &&
               r->gid == st->st_gid;
}

static int out_flush(Diff *x) {
        int r = write_all(x->d->new_index, x->out, x->out_len);
        x->out_len = 0;
        return r;
}

/* Appends the entry at the current path + name to the new index. */
static int out_entry(Diff *x, const char *name, const struct stat *st) {
        size_t nl = strlen(name), pl = x->plen ? x->plen + 1 + nl : nl;
        size_t need = sizeof(IndexRec) + ((pl + 7) & ~(size_t)7);
        if (x->out_len + need > OUT_CAP) {
                int r = out_flush(x);
                if (r < 0)
                        return r;
        }
        IndexRec rec = { (uint32_t)pl, st->st_mode, st->st_uid, st->st_gid, st->st_ino, (uint64_t)st->st_size,
                         ts_ns(&st->st_ctim), ts_ns(&st->st_mtim) };
        uint8_t *p = x->out + x->out_len;
        memcpy(p, &rec, sizeof rec);
        if (x->plen) {
                memcpy(p + sizeof rec, x->path, x->plen);
                p[sizeof rec + x->plen] = '/';
                memcpy(p + sizeof rec + x->plen + 1, name, nl);
        } else {
                memcpy(p + sizeof rec, name, nl);
        }
        memset(p + sizeof rec + pl, 0, need - sizeof rec - pl);
        x->out_len += need;
        return 0;
}

/* Owner, mode and times of an entry made in the layer (owners as the sandbox sees them). */
static int finish(Diff *x, int fd, int dir, const char *name, const struct stat *st) {
        uid_t u = tree_map_uid(x->d->ids, st->st_uid);
        gid_t g = tree_map_gid(x->d->ids, st->st_gid);
        struct timespec ts[2] = { st->st_atim, st->st_mtim };
        if (fd >= 0) {
                /* chown first: it clears setuid and setgid bits the mode then sets again. */
                if (fchown(fd, u, g) < 0 || (!S_ISLNK(st->st_mode) && fchmod(fd, st->st_mode & 07777) < 0))
                        return negerrno();
                return S_ISDIR(st->st_mode) ? 0 : futimens(fd, ts) < 0 ? negerrno() : 0;
        }
        if (fchownat(dir, name, u, g, AT_SYMLINK_NOFOLLOW) < 0)
                return negerrno();
        if (!S_ISLNK(st->st_mode) && fchmodat(dir, name, st->st_mode & 07777, 0) < 0)
                return negerrno();
        return utimensat(dir, name, ts, AT_SYMLINK_NOFOLLOW) < 0 ? negerrno() : 0;
}

/* Makes frame k's directory in the layer (and the ones above it) if it is not there yet. */
static int ensure(Diff *x, size_t k) {
        Frame *f = &x->frames[k];
        if (f->layer_fd >= 0)
                return 0;
        int parent = k == 0 ? x->d->layer : (ensure(x, k - 1) < 0 ? -1 : x->frames[k - 1].layer_fd);
        if (parent < 0)
                return -EIO;
        if (mkdirat(parent, f->name, 0700) < 0 && errno != EEXIST)
                return negerrno();
        f->layer_fd = openat(parent, f->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (f->layer_fd < 0)
                return negerrno();
        x->st->copied++;
        return finish(x, f->layer_fd, -1, NULL, &f->st);
}

static int copy_data(int in, int out, const struct stat *st) {
        off_t size = st->st_size, pos = 0;
        if (size == 0)
                return 0;
        if (ftruncate(out, size) < 0)
                return negerrno();
        /* Only the data: a sparse file stays sparse, and fits the layer as it fit the tree. */
        while (pos < size) {
                off_t data = lseek(in, pos, SEEK_DATA);
                if (data < 0)
                        return errno == ENXIO ? 0 : negerrno();
                off_t hole = lseek(in, data, SEEK_HOLE);
                if (hole < 0)
                        hole = size;
                off_t o = data;
                if (lseek(out, data, SEEK_SET) < 0)
                        return negerrno();
                while (o < hole) {
                        ssize_t n = sendfile(out, in, &o, (size_t)MIN(hole - o, (off_t)(1 << 30)));
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n <= 0)
                                return n < 0 ? negerrno() : 0;
                }
                pos = hole;
        }
        return 0;
}

static int copy_entry(Diff *x, size_t k, int sdir, const char *name, const struct stat *st) {
        int dir = x->frames[k].layer_fd;
        int r;
        if (S_ISREG(st->st_mode) && st->st_nlink > 1) {
                const char *first = walk_links_find(&x->links, st->st_dev, st->st_ino, 0);
                if (first)
                        return linkat(x->d->layer, first, dir, name, 0) < 0 ? negerrno() : 0;
                _cleanup_free_ char *p = NULL;
                if (asprintf(&p, "%.*s/%s", (int)x->plen, x->path, name) < 0 ||
                    walk_links_add(&x->links, st->st_dev, st->st_ino, 0, p) < 0)
                        return -ENOMEM;
        }
        if (S_ISREG(st->st_mode)) {
                /* O_NONBLOCK, and a regular file still: in a tree that was not frozen the name
                 * may be a fifo by now, whose open would wait for a writer. */
                _cleanup_close_ int in = openat(sdir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOATIME | O_NONBLOCK);
                struct stat now;
                if (in < 0 || fstat(in, &now) < 0)
                        return negerrno();
                if (!S_ISREG(now.st_mode) || now.st_ino != st->st_ino)
                        return -ESTALE;
                _cleanup_close_ int out = openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
                if (out < 0)
                        return negerrno();
                if ((r = copy_data(in, out, st)) < 0)
                        return r;
                x->st->bytes += (uint64_t)st->st_size;
                return finish(x, out, -1, NULL, st);
        }
        if (S_ISLNK(st->st_mode)) {
                char target[SBX_MAX_PATH_BYTES];
                ssize_t n = readlinkat(sdir, name, target, sizeof target - 1);
                if (n < 0)
                        return negerrno();
                target[n] = 0;
                if (symlinkat(target, dir, name) < 0)
                        return negerrno();
        } else if (mknodat(dir, name, S_IFIFO | 0600, 0) < 0) {
                return negerrno();
        }
        return finish(x, -1, dir, name, st);
}

static int whiteout(Diff *x, size_t k, const char *name) {
        int r = ensure(x, k);
        if (r < 0)
                return r;
        if (mknodat(x->frames[k].layer_fd, name, S_IFCHR, makedev(0, 0)) < 0)
                return negerrno();
        x->st->whiteouts++;
        return 0;
}

static int walk(Diff *x, size_t k, int sdir);

/* Whether a regular file's bytes may have changed since the old index with no trace in its
 * stat (LayerDiff: closed, writers, touched_since). */
static bool maybe_written(const Diff *x, int sdir, const char *name, const struct stat *st) {
        const LayerDiff *d = x->d;
        if (!S_ISREG(st->st_mode))
                return false;
        if (d->touched_since && ts_ns(&st->st_ctim) >= d->touched_since)
                return true;
        /* A threshold-mode index is a fork's first: its files all came from the layers. */
        if (!x->idx.threshold && (d->closed_all || changes_closed_has(d->closed, d->n_closed, st->st_ino)))
                return true;
        if (d->writers)
                return d->probe_leases ? changes_file_writers(sdir, name) != 0 : !d->touched_since;
        return false;
}

/* Entry `name` of frame k's directory (sdir). */
static int visit(Diff *x, size_t k, int sdir, const char *name) {
        struct stat st;
        if (fstatat(sdir, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : fail(x, negerrno(), "stat", name);
        /* What a copy leaves out is left out here too, and so counts as gone. */
        if (st.st_dev != x->dev ||
            !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode) || S_ISLNK(st.st_mode) || S_ISFIFO(st.st_mode)))
                return 0;
        size_t nl = strlen(name);
        if (x->plen + 1 + nl + 1 > PATH_CAP)
                return fail(x, -ENAMETOOLONG, "walk", name);
        x->path[x->plen] = '/';
        memcpy(x->path + x->plen + 1, name, nl);
        int32_t e = index_find(&x->idx, x->path, x->plen + 1 + nl);
        bool same = e >= 0 && unchanged(&x->idx, x->idx.v[e].rec, &st) && !maybe_written(x, sdir, name, &st);
        if (e >= 0)
                x->idx.v[e].seen = true;
        int r = out_entry(x, name, &st);
        if (r < 0)
                return fail(x, r, "index", name);
        x->st->entries++;
        if (!S_ISDIR(st.st_mode)) {
                if (same)
                        return 0;
                if ((r = ensure(x, k)) < 0 || (r = copy_entry(x, k, sdir, name, &st)) < 0)
                        return fail(x, r, "copy", name);
                x->st->copied++;
                return 0;
        }
        if (k + 1 >= SBX_LAYER_MAX_DEPTH)
                return fail(x, -ELOOP, "walk (too deep)", name);
        bool was_dir = e >= 0 && S_ISDIR(x->idx.v[e].rec->mode);
        Frame *f = &x->frames[k + 1];
        *f = (Frame){ name, st, -1, was_dir ? e : -1 };
        if (!same && (r = ensure(x, k + 1)) < 0)
                return fail(x, r, "mkdir", name);
        int sub = openat(sdir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0)
                return errno == ENOENT ? 0 : fail(x, negerrno(), "open", name);
        size_t saved = x->plen;
        x->plen += 1 + nl;
        r = walk(x, k + 1, sub);
        x->plen = saved;
        close(sub);
        if (f->layer_fd >= 0) {
                struct timespec ts[2] = { st.st_atim, st.st_mtim };
                if (r >= 0 && futimens(f->layer_fd, ts) < 0)
                        r = fail(x, negerrno(), "times", name);
                f->layer_fd = safe_close(f->layer_fd);
        }
        return r;
}

/* Frame k's directory: its entries, then a whiteout for each entry it had at the last layer
 * and has no more. */
static int walk(Diff *x, size_t k, int sdir) {
        int fd = dup(sdir);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
                safe_close(fd);
                return fail(x, negerrno(), "list", NULL);
        }
        struct dirent *de;
        int r = 0;
        errno = 0;
        while (r >= 0 && (de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                r = visit(x, k, sdir, de->d_name);
                errno = 0;
        }
        if (r >= 0 && errno)
                r = fail(x, negerrno(), "list", NULL);
        closedir(d);
        for (int32_t c = x->frames[k].ent >= 0 ? x->idx.v[x->frames[k].ent].first_child : -1; r >= 0 && c >= 0;
             c = x->idx.v[c].next_sibling) {
                Ent *e = &x->idx.v[c];
                if (e->seen)
                        continue;
                const char *base = (const char *)memrchr(e->path, '/', e->rec->path_len) + 1;
                char name[256];
                size_t bl = e->rec->path_len - (size_t)(base - e->path);
                if (bl >= sizeof name)
                        continue;
                memcpy(name, base, bl);
                name[bl] = 0;
                if ((r = whiteout(x, k, name)) < 0)
                        r = fail(x, r, "whiteout", name);
        }
        return r;
}

int layer_diff(const LayerDiff *d, LayerDiffStats *st, char *err, size_t errlen) {
        Diff x = { .d = d, .st = st, .err = err, .errlen = errlen };
        *st = (LayerDiffStats){ 0 };
        err[0] = 0;
        umask(0);
        int r = index_load(&x.idx, d->old_index, d->threshold);
        x.path = malloc(PATH_CAP);
        x.out = malloc(OUT_CAP);
        if (r < 0 || !x.path || !x.out) {
                snprintf(err, errlen, "layer: cannot read the last index: %s", strerror(-(r < 0 ? r : -ENOMEM)));
                r = r < 0 ? r : -ENOMEM;
                goto out;
        }
        IndexHead h = { INDEX_MAGIC, 0 };
        if ((r = write_all(d->new_index, &h, sizeof h)) < 0)
                goto out;
        for (int i = 0; r >= 0 && i < N_TREES; i++) {
                _cleanup_close_ int top = openat(d->root, tree_dirs[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                struct stat tst;
                if (top < 0 || fstat(top, &tst) < 0) {
                        r = negerrno();
                        snprintf(err, errlen, "layer: open /%s: %s", tree_dirs[i], strerror(-r));
                        break;
                }
                x.dev = tst.st_dev;
                x.plen = strlen(top_dirs[i]);
                memcpy(x.path, top_dirs[i], x.plen);
                int32_t e = index_find(&x.idx, x.path, x.plen);
                bool same = e >= 0 && unchanged(&x.idx, x.idx.v[e].rec, &tst);
                if (e >= 0)
                        x.idx.v[e].seen = true;
                x.plen = 0;
                if ((r = out_entry(&x, top_dirs[i], &tst)) < 0)
                        break;
                x.plen = strlen(top_dirs[i]);
                x.frames[0] = (Frame){ top_dirs[i], tst, -1, e >= 0 && S_ISDIR(x.idx.v[e].rec->mode) ? e : -1 };
                if (!same && (r = ensure(&x, 0)) < 0) {
                        fail(&x, r, "mkdir", NULL);
                        break;
                }
                r = walk(&x, 0, top);
                if (x.frames[0].layer_fd >= 0) {
                        struct timespec ts[2] = { tst.st_atim, tst.st_mtim };
                        (void)futimens(x.frames[0].layer_fd, ts);
                        x.frames[0].layer_fd = safe_close(x.frames[0].layer_fd);
                }
        }
        if (r >= 0 && (r = out_flush(&x)) >= 0) {
                h.count = st->entries + N_TREES;
                if (pwrite(d->new_index, &h, sizeof h, 0) != (ssize_t)sizeof h)
                        r = -EIO;
        }
        if (r < 0 && !err[0])
                snprintf(err, errlen, "layer: %s", strerror(-r));
out:
        index_free(&x.idx);
        walk_links_done(&x.links);
        free(x.path);
        free(x.out);
        return r;
}

/* ---------------------------------------------------------------- mounts */

int layer_tmpfs_new(uint64_t bytes, uint64_t inodes, int *ret_fd) {
        /* inode32: xino needs free high bits in the layers' inode numbers. */
        int m = tmpfs_detached("sbx-layer", "0755", bytes, inodes, true, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
        if (m < 0)
                return m;
        *ret_fd = m;
        return 0;
}

static int ns_fd(pid_t pid, const char *ns) {
        char p[64];
        snprintf(p, sizeof p, "/proc/%d/ns/%s", (int)pid, ns);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        return fd < 0 ? negerrno() : fd;
}

/* The overlay's words (fsconfig's log) on why it refused. */
static void fs_log(int fs, char *err, size_t errlen) {
        size_t n = strlen(err);
        char line[256];
        ssize_t k;
        while (n + 3 < errlen && (k = read(fs, line, sizeof line - 1)) > 0) {
                line[k] = 0;
                n += (size_t)snprintf(err + n, errlen - n, "; %s", line);
        }
}

int layer_mount(const LayerMount *m, int64_t *ret_threshold, char *err, size_t errlen) {
        int clones[SBX_MAX_FORK_LAYERS + 1];
        int subs[N_TREES] = { -1, -1, -1 };
        size_t n_clones = 0;
        int moved = 0, r = 0;
        char v[64];
        _cleanup_close_ int userns = ns_fd(m->init_pid, "user");
        _cleanup_close_ int mntns = ns_fd(m->init_pid, "mnt");
        _cleanup_close_ int fs = -1;
        _cleanup_close_ int ovl = -1;
        err[0] = 0;
        if (userns < 0 || mntns < 0 || m->n_layers == 0 || m->n_layers > SBX_MAX_FORK_LAYERS + 1) {
                r = userns < 0 ? userns : mntns < 0 ? mntns : -EINVAL;
                snprintf(err, errlen, "layer: the fork's namespaces: %s", strerror(-r));
                return r;
        }
        /* The fork's writable directories keep their flags (noexec under an exec policy). */
        unsigned attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
        for (int i = 0; i < N_TREES; i++) {
                _cleanup_close_ int dir = openat(m->root, tree_dirs[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                struct statvfs sv;
                if (dir < 0 || (i == 0 && fstatvfs(dir, &sv) < 0) || tree_clear(dir, err, errlen) < 0) {
                        r = dir < 0 ? negerrno() : -EIO;
                        if (!err[0])
                                snprintf(err, errlen, "layer: the fork's /%s: %s", tree_dirs[i], strerror(-r));
                        return r;
                }
                if (i == 0 && (sv.f_flag & ST_NOEXEC))
                        attrs |= MOUNT_ATTR_NOEXEC;
        }
        struct stat sst;
        _cleanup_close_ int stamp = -1;
        if (mkdirat(m->upper, "u", 0755) < 0 || mkdirat(m->upper, "w", 0700) < 0 ||
            (stamp = openat(m->upper, "stamp", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0 ||
            fstat(stamp, &sst) < 0) {
                r = negerrno();
                snprintf(err, errlen, "layer: prepare the upper tmpfs: %s", strerror(-r));
                return r;
        }
        /* Every change through the overlay comes after this: its ctime is no older. */
        *ret_threshold = ts_ns(&sst.st_ctim);
        for (; n_clones < m->n_layers; n_clones++) {
                struct mount_attr a = { .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                                        .userns_fd = (uint64_t)userns };
                clones[n_clones] = sys_open_tree(m->layers[n_clones], "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
                if (clones[n_clones] < 0 || sys_mount_setattr(clones[n_clones], "", AT_EMPTY_PATH, &a) < 0) {
                        r = negerrno();
                        if (clones[n_clones] >= 0)
                                close(clones[n_clones]);
                        snprintf(err, errlen, "layer: idmapped layer: %s", strerror(-r));
                        goto out;
                }
        }
        fs = sys_fsopen("overlay", FSOPEN_CLOEXEC);
        if (fs < 0) {
                r = negerrno();
                snprintf(err, errlen, "layer: overlay: %s", strerror(-r));
                goto out;
        }
        for (size_t i = 0; i < n_clones && r >= 0; i++) {
                snprintf(v, sizeof v, "/proc/self/fd/%d", clones[i]);
                r = sys_fsconfig(fs, FSCONFIG_SET_STRING, "lowerdir+", v, 0);
        }
        /* redirect_dir: an inherited directory can be renamed; index: a hard link stays one
         * across copy-up; xino: one st_dev and distinct inode numbers for every file. */
        static const char *const opts[][2] = { { "redirect_dir", "on" }, { "index", "on" }, { "xino", "on" } };
        for (size_t i = 0; i < ELEMENTSOF(opts) && r >= 0; i++)
                r = sys_fsconfig(fs, FSCONFIG_SET_STRING, opts[i][0], opts[i][1], 0);
        if (r >= 0) {
                snprintf(v, sizeof v, "/proc/self/fd/%d/u", m->upper);
                r = sys_fsconfig(fs, FSCONFIG_SET_STRING, "upperdir", v, 0);
        }
        if (r >= 0) {
                snprintf(v, sizeof v, "/proc/self/fd/%d/w", m->upper);
                r = sys_fsconfig(fs, FSCONFIG_SET_STRING, "workdir", v, 0);
        }
        if (r < 0 || sys_fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0 ||
            (ovl = sys_fsmount(fs, FSMOUNT_CLOEXEC, attrs)) < 0) {
                r = negerrno();
                snprintf(err, errlen, "layer: overlay: %s", strerror(-r));
                fs_log(fs, err, errlen);
                goto out;
        }
        for (int i = 0; i < N_TREES; i++)
                if ((subs[i] = sys_open_tree(ovl, top_dirs[i], OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)) < 0) {
                        r = negerrno();
                        snprintf(err, errlen, "layer: overlay's %s: %s", top_dirs[i], strerror(-r));
                        goto out;
                }
        if (setns(mntns, CLONE_NEWNS) < 0) {
                r = negerrno();
                snprintf(err, errlen, "layer: enter the fork's mount namespace: %s", strerror(-r));
                goto out;
        }
        for (; moved < N_TREES; moved++) {
                char target[32];
                snprintf(target, sizeof target, "/%s", tree_dirs[moved]);
                if (sys_move_mount(subs[moved], "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) < 0) {
                        r = negerrno();
                        snprintf(err, errlen, "layer: mount on /%s: %s", tree_dirs[moved], strerror(-r));
                        /* Nothing half-done: the plain copy that follows needs the fork's own
                         * directories back. */
                        while (moved-- > 0) {
                                snprintf(target, sizeof target, "/%s", tree_dirs[moved]);
                                (void)umount2(target, MNT_DETACH);
                        }
                        goto out;
                }
        }
out:
        for (size_t i = 0; i < n_clones; i++)
                close(clones[i]);
        for (int i = 0; i < N_TREES; i++)
                safe_close(subs[i]);
        return r;
}

int layer_unmount(pid_t init_pid, char *err, size_t errlen) {
        _cleanup_close_ int mntns = ns_fd(init_pid, "mnt");
        if (mntns < 0 || setns(mntns, CLONE_NEWNS) < 0) {
                int r = mntns < 0 ? mntns : negerrno();
                snprintf(err, errlen, "layer: enter the sandbox's mount namespace: %s", strerror(-r));
                return r;
        }
        for (int i = 0; i < N_TREES; i++) {
                char target[32];
                struct statfs sf;
                snprintf(target, sizeof target, "/%s", tree_dirs[i]);
                /* Only an overlay comes off: beneath it is the sandbox's own tmpfs. */
                while (statfs(target, &sf) == 0 && sf.f_type == OVERLAYFS_SUPER_MAGIC)
                        if (umount2(target, MNT_DETACH) < 0) {
                                int r = negerrno();
                                snprintf(err, errlen, "layer: unmount /%s: %s", tree_dirs[i], strerror(-r));
                                return r;
                        }
        }
        return 0;
}
