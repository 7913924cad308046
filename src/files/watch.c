/* SPDX-License-Identifier: MIT */
/* File change events (sbx_file_watch): inotify, from the daemon, on the sandbox's own inodes.
 *
 * The daemon shares no mount namespace with the sandbox, but inotify watches inodes, not
 * paths: a directory opened through the jail (fs_watch_dir: openat2 RESOLVE_IN_ROOT from pid
 * 1's root fd, with the sandbox user's identity, only on the writable tmpfs) is added through
 * /proc/self/fd/N, the magic link to exactly that open directory, and its events are those of
 * the sandbox's tree. Nothing is ever resolved from a name the sandbox controls outside the
 * jail, and a walk never follows a symlink.
 *
 * Everything belongs to the sandbox: a WatchSet, kept on an observer of it, holds one inotify
 * instance (users get 128 by default, and the daemon's user holds all of them), its watches,
 * and a table from watch descriptors to directories. The kernel gives one descriptor per
 * inode and instance, so two watches covering one directory share it: a WDir lists every
 * watch's WRef to it, each with the path that watch reports it by. The inotify fd is in the
 * loop, read once per wakeup; what is read is told at once, or dropped while its watch is
 * paused, never queued: the daemon holds no events. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/list.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/util.h"
#include "fs/files.h"
#include "files/fileapi.h"
#include "session/sandbox.h"

/* IN_EXCL_UNLINK: what is done to an unlinked file still open (a temp file) is nobody's
 * business. */
#define WATCH_MASK                                                                                              \
        (IN_CREATE | IN_MODIFY | IN_CLOSE_WRITE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB |         \
         IN_DELETE_SELF | IN_MOVE_SELF | IN_EXCL_UNLINK)

/* A path told: a directory's (below SBX_MAX_FILES_PATH_BYTES with room, see FS_ABS_BYTES), a
 * slash and a name. */
#define EVENT_PATH_BYTES (FS_ABS_BYTES + NAME_MAX + 2)

typedef struct WatchSet WatchSet;
typedef struct WDir WDir;
typedef struct WRef WRef;

/* A directory as the kernel watches it: one watch descriptor of the set's instance. */
struct WDir {
        WDir *hnext; /* its bucket's */
        int wd;
        WRef *refs;  /* every watch that covers it */
};

/* A name a walk of a directory just covered told as created: the kernel may tell the same
 * creation again, if it came between the watch's start and the walk's read of the directory. */
typedef struct Fresh {
        struct Fresh *next;
        uint64_t batch; /* the set's read during which the walk told it */
        char name[];
} Fresh;

/* A directory covered by one watch, named as that watch reports it. */
struct WRef {
        WRef *next, *prev; /* the watch's */
        WRef *dnext;       /* the WDir's */
        WDir *dir;
        SbxFileWatch *watch;
        Fresh *fresh;      /* names its walk told created, until the kernel's queue is past it */
        char path[];       /* absolute, as the sandbox sees it */
};

struct SbxFileWatch {
        SbxFileWatch *next, *prev;
        WatchSet *set;
        const SbxFileWatchOps *ops;
        void *userdata;
        bool recursive;
        bool paused, dropped; /* dropped: something was lost while paused */
        bool overflowed;      /* the last thing told was an overflow: one says it all */
        WRef *root;           /* the watched directory; NULL once it is gone */
        WRef *refs;
        /* The last write told in the set's current batch: more writes of the same file right
         * after it are the same news. */
        uint64_t write_batch;
        const WRef *write_ref;
        char write_name[NAME_MAX + 1];
};

struct WatchSet {
        SandboxObserver o;
        SbxSandbox *sb;
        Loop *loop;
        int fd; /* the inotify instance; -1 until the first watch */
        Watch w;
        bool freeing;
        SbxFileWatch *head;
        unsigned n;      /* watches */
        unsigned n_dirs; /* WRefs, of all watches */
        uint64_t batch;  /* reads so far */
        unsigned n_fresh; /* Fresh names of all refs */
        uint32_t hidden_cookie; /* of this batch's last move of a files API temp file */
        WDir *buckets[SBX_WATCH_BUCKETS];
};

/* ---------------------------------------------------------------- telling */

static void tell_path(SbxFileWatch *w, SbxFileEventType t, const char *path, bool is_dir) {
        if (w->paused) {
                w->dropped = true;
                return;
        }
        w->overflowed = false;
        if (t != SBX_FILE_EVENT_WRITE)
                w->write_batch = 0;
        w->ops->event(w->userdata, t, path, is_dir);
}

/* Tells an event on `name` in r's directory (name NULL: the directory itself). */
static void tell(SbxFileWatch *w, const WRef *r, const char *name, SbxFileEventType t, bool is_dir) {
        if (t == SBX_FILE_EVENT_WRITE && name) {
                if (w->write_batch == w->set->batch && w->write_ref == r && strcmp(w->write_name, name) == 0)
                        return;
                w->write_batch = w->set->batch;
                w->write_ref = r;
                snprintf(w->write_name, sizeof w->write_name, "%s", name);
        }
        if (!name) {
                tell_path(w, t, r->path, is_dir);
                return;
        }
        char path[EVENT_PATH_BYTES];
        snprintf(path, sizeof path, "%s/%s", strcmp(r->path, "/") == 0 ? "" : r->path, name);
        tell_path(w, t, path, is_dir);
}

static void overflow(SbxFileWatch *w) {
        if (w->paused) {
                w->dropped = true;
                return;
        }
        if (w->overflowed)
                return;
        w->overflowed = true;
        w->write_batch = 0;
        w->ops->event(w->userdata, SBX_FILE_EVENT_OVERFLOW, NULL, false);
}

static void tell_dropped(void *data) {
        SbxFileWatch *w = data;
        if (w->paused || !w->dropped)
                return;
        w->dropped = false;
        overflow(w);
}

/* ---------------------------------------------------------------- directories */

static WDir **bucket(WatchSet *set, int wd) { return &set->buckets[(unsigned)wd % SBX_WATCH_BUCKETS]; }

static WDir *dir_find(WatchSet *set, int wd) {
        WDir *d = *bucket(set, wd);
        while (d && d->wd != wd)
                d = d->hnext;
        return d;
}

static void dir_unlink(WatchSet *set, WDir *d) {
        WDir **pp = bucket(set, d->wd);
        while (*pp != d)
                pp = &(*pp)->hnext;
        *pp = d->hnext;
}

/* Drops r's fresh names told during reads before `before` (all: UINT64_MAX). */
static void fresh_drop(WatchSet *set, WRef *r, uint64_t before) {
        for (Fresh **pp = &r->fresh; *pp;) {
                Fresh *f = *pp;
                if (f->batch < before) {
                        *pp = f->next;
                        free(f);
                        set->n_fresh--;
                } else {
                        pp = &f->next;
                }
        }
}

static void fresh_add(WatchSet *set, WRef *r, const char *name) {
        size_t n = strlen(name) + 1;
        Fresh *f = malloc(sizeof *f + n);
        if (!f)
                return; /* a creation told twice, at worst */
        f->batch = set->batch;
        memcpy(f->name, name, n);
        f->next = r->fresh;
        r->fresh = f;
        set->n_fresh++;
}

/* True (and forgets it) when r's walk told name created already. */
static bool fresh_take(WatchSet *set, WRef *r, const char *name) {
        for (Fresh **pp = &r->fresh; *pp; pp = &(*pp)->next)
                if (strcmp((*pp)->name, name) == 0) {
                        Fresh *f = *pp;
                        *pp = f->next;
                        free(f);
                        set->n_fresh--;
                        return true;
                }
        return false;
}

static void ref_free(WatchSet *set, WRef *r) {
        SbxFileWatch *w = r->watch;
        fresh_drop(set, r, UINT64_MAX);
        LIST_UNLINK(w->refs, r);
        if (w->root == r)
                w->root = NULL;
        if (w->write_ref == r)
                w->write_ref = NULL;
        set->n_dirs--;
        free(r);
}

/* The kernel dropped d (its directory is gone, or its watch was removed). */
static void dir_gone(WatchSet *set, WDir *d) {
        dir_unlink(set, d);
        while (d->refs) {
                WRef *r = d->refs;
                d->refs = r->dnext;
                ref_free(set, r);
        }
        free(d);
}

/* Uncovers r's directory for its watch; the kernel's watch goes with the last one. */
static void ref_drop(WatchSet *set, WRef *r) {
        WDir *d = r->dir;
        WRef **pp = &d->refs;
        while (*pp != r)
                pp = &(*pp)->dnext;
        *pp = r->dnext;
        ref_free(set, r);
        if (!d->refs) {
                (void)inotify_rm_watch(set->fd, d->wd);
                dir_unlink(set, d);
                free(d);
        }
}

/* Covers directory `path` (the client's words for messages: fs_path; the name told: abs) for w.
 * Returns its fd, for reading its entries, with the new WRef in *ret; -EEXIST when w covers it
 * already, -E2BIG past SBX_MAX_WATCH_DIRS, or -errno. */
static int cover(SbxFileWatch *w, const FsCtx *c, const char *fs_path, const char *abs, bool follow, WRef **ret) {
        WatchSet *set = w->set;
        if (set->n_dirs >= SBX_MAX_WATCH_DIRS)
                return -E2BIG;
        int wd;
        _cleanup_close_ int fd = fs_watch_dir(c, fs_path, follow, set->fd, WATCH_MASK, &wd);
        if (fd < 0)
                return fd;
        WDir *d = dir_find(set, wd);
        for (WRef *r = d ? d->refs : NULL; r; r = r->dnext)
                if (r->watch == w)
                        return -EEXIST;
        bool fresh = !d;
        if (fresh) {
                if (!(d = calloc(1, sizeof *d))) {
                        (void)inotify_rm_watch(set->fd, wd);
                        return -ENOMEM;
                }
                d->wd = wd;
                d->hnext = *bucket(set, wd);
                *bucket(set, wd) = d;
        }
        size_t len = strlen(abs);
        WRef *r = malloc(sizeof *r + len + 1);
        if (!r) {
                if (fresh) {
                        (void)inotify_rm_watch(set->fd, wd);
                        dir_unlink(set, d);
                        free(d);
                }
                return -ENOMEM;
        }
        memcpy(r->path, abs, len + 1);
        r->dir = d;
        r->watch = w;
        r->fresh = NULL;
        r->dnext = d->refs;
        d->refs = r;
        LIST_LINK(w->refs, r);
        set->n_dirs++;
        *ret = r;
        return TAKE_FD(fd);
}

/* Whether a failure to cover a directory means events will be missed for want of room (the
 * bounds, the kernel's watches, a path too long to name), not that it went away. */
static bool out_of_room(int r) { return r == -E2BIG || r == -ENOSPC || r == -ENAMETOOLONG || r == -ENOMEM; }

typedef struct Walk {
        WRef **queue; /* covered directories whose entries are still to be read */
        size_t head, len, cap;
        unsigned entries;
} Walk;

/* Reads the entries of at's directory (fd), covering its subdirectories and queueing them;
 * told: each entry is told as created. Returns 0 or the out_of_room() error that stopped it. */
static int walk_dir(SbxFileWatch *w, const FsCtx *c, Walk *k, WRef *at, int fd, bool told) {
        alignas(struct dirent64) char buf[4096];
        ssize_t n;
        while ((n = getdents64(fd, buf, sizeof buf)) > 0) {
                for (ssize_t off = 0; off < n;) {
                        struct dirent64 *de = (struct dirent64 *)(buf + off);
                        off += de->d_reclen;
                        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                                continue;
                        if (++k->entries > SBX_MAX_WATCH_WALK_ENTRIES)
                                return -E2BIG;
                        bool is_dir = de->d_type == DT_DIR;
                        if (de->d_type == DT_UNKNOWN) {
                                struct stat st;
                                is_dir = fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
                        }
                        if (told) {
                                tell(w, at, de->d_name, SBX_FILE_EVENT_CREATE, is_dir);
                                fresh_add(w->set, at, de->d_name);
                                /* Written before the watch could see it: its write is told too,
                                 * as it would have been had the directory been watched already. */
                                struct stat st;
                                if (!is_dir && fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                                    S_ISREG(st.st_mode) && st.st_size > 0)
                                        tell(w, at, de->d_name, SBX_FILE_EVENT_WRITE, false);
                        }
                        if (!is_dir || !w->recursive)
                                continue;
                        char child[EVENT_PATH_BYTES];
                        snprintf(child, sizeof child, "%s/%s", strcmp(at->path, "/") == 0 ? "" : at->path, de->d_name);
                        if (strlen(child) >= SBX_MAX_FILES_PATH_BYTES)
                                return -ENAMETOOLONG;
                        WRef *cr;
                        int cfd = cover(w, c, child, child, false, &cr);
                        if (cfd < 0) {
                                /* Gone, or swapped for a symlink, since it was listed: nothing to watch. */
                                if (out_of_room(cfd))
                                        return cfd;
                                continue;
                        }
                        close(cfd);
                        if (k->len == k->cap) {
                                size_t cap = k->cap ? k->cap * 2 : 64;
                                WRef **q = reallocarray(k->queue, cap, sizeof *q);
                                if (!q)
                                        return -ENOMEM;
                                k->queue = q;
                                k->cap = cap;
                        }
                        k->queue[k->len++] = cr;
                }
        }
        return 0;
}

/* Covers the directories below `top` (whose fd is top_fd) for w, breadth first, bounded by
 * SBX_MAX_WATCH_WALK_ENTRIES entries read and SBX_MAX_WATCH_DIRS: it runs in the loop. told:
 * what is found is told as created (a directory made or moved in after its parent's event:
 * what it holds was made before the watch could see it). Returns 0, or the out_of_room()
 * error that stopped it. */
static int walk(SbxFileWatch *w, const FsCtx *c, WRef *top, int top_fd, bool told) {
        Walk k = { 0 };
        int r = walk_dir(w, c, &k, top, top_fd, told);
        while (r == 0 && k.head < k.len) {
                WRef *at = k.queue[k.head++];
                /* Opened again by name: an fd held for every directory waiting would be
                 * thousands. One swapped since is refused (never followed) or is another of
                 * the writable tree: the jail holds either way. */
                _cleanup_close_ int fd = fs_watch_dir(c, at->path, false, -1, 0, NULL);
                if (fd >= 0)
                        r = walk_dir(w, c, &k, at, fd, told);
        }
        free(k.queue);
        return r;
}

/* ---------------------------------------------------------------- events */

/* The files API's temp files (".sbx-" 16 hex ".tmp"): its own business, not news. */
static bool hidden(const char *name) {
        if (strlen(name) != 25 || strncmp(name, ".sbx-", 5) != 0 || strcmp(name + 21, ".tmp") != 0)
                return false;
        for (int i = 5; i < 21; i++)
                if (!strchr("0123456789abcdef", name[i]))
                        return false;
        return true;
}

/* The jail for walks started by events: their failures are nobody's words. */
static int event_ctx(WatchSet *set, FsCtx *ret) {
        int r = fileapi_ctx(set->sb, ret);
        ret->err = NULL;
        ret->errlen = 0;
        return r;
}

/* A file without a name (O_TMPFILE: an upload's until its commit, or a command's): the kernel
 * tells its writes under "#<inode>" in its directory, a name that leads nowhere. Not news: it
 * is news once linked. A real file of such a name still has its writes told, unless it is
 * removed before its events are read (its create and its removal are told either way). */
static bool nameless(WatchSet *set, const WDir *d, const struct inotify_event *ev) {
        if (ev->name[0] != '#' || !ev->name[1] || strspn(ev->name + 1, "0123456789") != strlen(ev->name + 1) ||
            (ev->mask & (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO)) || !d->refs)
                return false;
        FsCtx c;
        FsInfo info;
        char path[EVENT_PATH_BYTES];
        const char *dir = d->refs->path;
        if (snprintf(path, sizeof path, "%s/%s", strcmp(dir, "/") == 0 ? "" : dir, ev->name) >= (int)sizeof path ||
            event_ctx(set, &c) < 0)
                return false;
        int r = fs_stat(&c, path, &info);
        if (r >= 0)
                fs_info_clear(&info);
        return r == -ENOENT;
}

/* A directory appeared in r's (made, or moved in): w covers it and what is below it. */
static void cover_new(WatchSet *set, SbxFileWatch *w, const WRef *r, const char *name) {
        FsCtx c;
        char child[EVENT_PATH_BYTES];
        snprintf(child, sizeof child, "%s/%s", strcmp(r->path, "/") == 0 ? "" : r->path, name);
        if (event_ctx(set, &c) < 0)
                return;
        int k = strlen(child) >= SBX_MAX_FILES_PATH_BYTES ? -ENAMETOOLONG : 0;
        WRef *cr;
        int fd = k < 0 ? k : cover(w, &c, child, child, false, &cr);
        if (fd >= 0) {
                k = walk(w, &c, cr, fd, true);
                close(fd);
        } else {
                k = fd;
        }
        if (out_of_room(k))
                overflow(w);
}

/* w's directories at and below path (a directory moved away), uncovered. */
static void uncover_below(WatchSet *set, SbxFileWatch *w, const char *path) {
        size_t n = strlen(path);
        for (WRef *r = w->refs, *next; r; r = next) {
                next = r->next;
                if (strncmp(r->path, path, n) == 0 && (r->path[n] == 0 || r->path[n] == '/'))
                        ref_drop(set, r);
        }
}

/* One event of the directory r covers for its watch. */
static void dispatch(WatchSet *set, WRef *r, const struct inotify_event *ev, bool committed) {
        SbxFileWatch *w = r->watch;
        bool is_dir = ev->mask & IN_ISDIR;
        if (!ev->len) {
                /* Events of the directory itself: its parent's watch tells those of the
                 * directories below the top. */
                if (r != w->root)
                        return;
                if (ev->mask & IN_ATTRIB)
                        tell(w, r, NULL, SBX_FILE_EVENT_CHMOD, true);
                if (ev->mask & IN_DELETE_SELF)
                        tell(w, r, NULL, SBX_FILE_EVENT_REMOVE, true);
                if (ev->mask & IN_MOVE_SELF) {
                        /* What it holds would be told by a name it no longer has. */
                        tell(w, r, NULL, SBX_FILE_EVENT_RENAME, true);
                        while (w->refs)
                                ref_drop(set, w->refs);
                }
                return;
        }
        const char *name = ev->name;
        if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
                /* Told by the walk that covered r already (created as it began). */
                if (!((ev->mask & IN_CREATE) && r->fresh && fresh_take(set, r, name)))
                        tell(w, r, name, SBX_FILE_EVENT_CREATE, is_dir);
                if (committed)
                        tell(w, r, name, SBX_FILE_EVENT_WRITE, false);
                if (is_dir && w->recursive)
                        cover_new(set, w, r, name);
        }
        if (ev->mask & (IN_MODIFY | IN_CLOSE_WRITE))
                tell(w, r, name, SBX_FILE_EVENT_WRITE, is_dir);
        if (ev->mask & IN_ATTRIB)
                tell(w, r, name, SBX_FILE_EVENT_CHMOD, is_dir);
        if (ev->mask & IN_DELETE)
                tell(w, r, name, SBX_FILE_EVENT_REMOVE, is_dir);
        if (ev->mask & IN_MOVED_FROM) {
                tell(w, r, name, SBX_FILE_EVENT_RENAME, is_dir);
                if (is_dir && w->recursive) {
                        char path[EVENT_PATH_BYTES];
                        snprintf(path, sizeof path, "%s/%s", strcmp(r->path, "/") == 0 ? "" : r->path, name);
                        uncover_below(set, w, path);
                }
        }
}

static void handle(WatchSet *set, const struct inotify_event *ev) {
        if (ev->mask & IN_Q_OVERFLOW) {
                for (SbxFileWatch *w = set->head; w; w = w->next)
                        overflow(w);
                return;
        }
        WDir *d = dir_find(set, ev->wd);
        if (!d)
                return; /* uncovered since */
        if (ev->mask & IN_IGNORED) {
                dir_gone(set, d);
                return;
        }
        bool committed = false;
        if (ev->len) {
                if (hidden(ev->name)) {
                        if (ev->mask & IN_MOVED_FROM)
                                set->hidden_cookie = ev->cookie;
                        return;
                }
                if (nameless(set, d, ev))
                        return;
                /* A temp file renamed over its target: the files API wrote it. */
                committed = (ev->mask & IN_MOVED_TO) && ev->cookie && ev->cookie == set->hidden_cookie;
        }
        /* Telling covers and uncovers other directories, never d: one watch's moved subtree
         * is below d, and a watch whose top moved drops its own refs only (d goes with its
         * last ref, when `next` is NULL). */
        for (WRef *r = d->refs, *next; r; r = next) {
                next = r->dnext;
                dispatch(set, r, ev, committed);
        }
}

static void set_event(Watch *lw, uint32_t events) {
        WatchSet *set = lw->data;
        alignas(struct inotify_event) char buf[SBX_WATCH_READ_BYTES];
        ssize_t n = read(set->fd, buf, sizeof buf);
        if (n < 0) {
                if (errno != EAGAIN && errno != EINTR) {
                        log_warn("watch: cannot read inotify events: %s", strerror(errno));
                        loop_del(set->loop, &set->w);
                        for (SbxFileWatch *w = set->head; w; w = w->next)
                                overflow(w);
                }
                return;
        }
        set->batch++;
        set->hidden_cookie = 0;
        for (ssize_t off = 0; off + (ssize_t)sizeof(struct inotify_event) <= n;) {
                const struct inotify_event *ev = (const struct inotify_event *)(buf + off);
                off += (ssize_t)(sizeof *ev + ev->len);
                handle(set, ev);
        }
        /* A read that did not fill the buffer took what the kernel had queued: every creation
         * that came before a walk of an earlier read has been seen by now. */
        if (set->n_fresh && (size_t)n < sizeof buf)
                for (SbxFileWatch *w = set->head; w && set->n_fresh; w = w->next)
                        for (WRef *r = w->refs; r; r = r->next)
                                if (r->fresh)
                                        fresh_drop(set, r, set->batch);
}

/* ---------------------------------------------------------------- sets and watches */

static void set_close(WatchSet *set) {
        if (set->w.active)
                loop_del(set->loop, &set->w);
        safe_close(set->fd);
        for (unsigned i = 0; i < SBX_WATCH_BUCKETS; i++)
                while (set->buckets[i])
                        dir_gone(set, set->buckets[i]);
        free(set);
}

static void set_freeing(SandboxObserver *o, SbxSandbox *sb) {
        WatchSet *set = container_of(o, WatchSet, o);
        set->freeing = true;
        while (set->head) {
                SbxFileWatch *w = set->head;
                if (w->ops->freeing)
                        w->ops->freeing(w->userdata);
                sbx_file_watch_free(w);
        }
        set_close(set);
}

static const SandboxObserverOps set_ops = { .freeing = set_freeing };

/* sb's set, made with its inotify instance in the loop if it has none. Returns 0 or -errno,
 * in words. */
static int set_get(SbxSandbox *sb, const char *path, WatchSet **ret) {
        SandboxObserver *o = sandbox_observer_state(sb, &set_ops, sizeof(WatchSet), offsetof(WatchSet, o), true);
        if (!o)
                return -ENOMEM;
        WatchSet *set = container_of(o, WatchSet, o);
        if (!set->sb) {
                set->sb = sb;
                set->loop = sandbox_loop(sb);
                set->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
                int r = set->fd < 0 ? negerrno() : loop_add(set->loop, &set->w, set->fd, EPOLLIN, set_event, set);
                if (r < 0) {
                        sandbox_unobserve(sb, &set->o);
                        set_close(set);
                        if (r == -EMFILE)
                                return fileapi_fail(r, "cannot watch %s: the daemon's user has no inotify instances "
                                                    "left (fs.inotify.max_user_instances)", path);
                        return r;
                }
        }
        *ret = set;
        return 0;
}

int sbx_file_watch(SbxSandbox *sb, const char *path, bool recursive, const SbxFileWatchOps *ops, void *userdata,
                   SbxFileWatch **ret) {
        FsCtx c;
        char abs[FS_ABS_BYTES];
        WatchSet *set = NULL;
        int r = fileapi_ctx(sb, &c);
        if (r < 0 || (r = fs_abs_path(path, abs)) < 0 || (r = set_get(sb, path, &set)) < 0)
                return r;
        if (set->n >= SBX_MAX_WATCHES)
                return fileapi_fail(-EUSERS, "cannot watch %s: the sandbox has %u watches, the most it may (end "
                                    "one first)", path, SBX_MAX_WATCHES);
        SbxFileWatch *w = calloc(1, sizeof *w);
        if (!w) {
                r = -ENOMEM;
                goto fail_set;
        }
        *w = (SbxFileWatch){ .set = set, .ops = ops, .userdata = userdata, .recursive = recursive };
        LIST_LINK(set->head, w);
        set->n++;
        WRef *root;
        int fd = cover(w, &c, path, abs, true, &root);
        if (fd < 0) {
                r = fd;
                goto fail_watch;
        }
        w->root = root;
        r = recursive ? walk(w, &c, root, fd, false) : 0;
        close(fd);
        if (r < 0)
                goto fail_watch;
        *ret = w;
        return 0;

fail_watch:
        sbx_file_watch_free(w);
        set = NULL;
fail_set:
        if (set && !set->head) {
                sandbox_unobserve(sb, &set->o);
                set_close(set);
        }
        if (r == -E2BIG || r == -ENAMETOOLONG)
                return fileapi_fail(-E2BIG, "cannot watch %s recursively: it holds more than a watch may cover "
                                    "(%u directories for all of the sandbox's watches, %u entries read, paths "
                                    "under %u bytes)", path, SBX_MAX_WATCH_DIRS, SBX_MAX_WATCH_WALK_ENTRIES,
                                    SBX_MAX_FILES_PATH_BYTES);
        if (r == -ENOSPC)
                return fileapi_fail(r, "cannot watch %s: the daemon's user has no inotify watches left "
                                    "(fs.inotify.max_user_watches)", path);
        return r;
}

void sbx_file_watch_pause(SbxFileWatch *w, bool paused) {
        if (w->paused == paused)
                return;
        w->paused = paused;
        /* From the loop: the caller is in the middle of something (its client's queue). */
        if (!paused && w->dropped)
                (void)loop_defer(w->set->loop, tell_dropped, w);
}

SbxFileWatch *sbx_file_watch_free(SbxFileWatch *w) {
        if (!w)
                return NULL;
        WatchSet *set = w->set;
        loop_cancel_defer(set->loop, w);
        while (w->refs)
                ref_drop(set, w->refs);
        LIST_UNLINK(set->head, w);
        set->n--;
        free(w);
        /* Its instance is the daemon user's to share: given back with the last watch. */
        if (!set->head && !set->freeing) {
                sandbox_unobserve(set->sb, &set->o);
                set_close(set);
        }
        return NULL;
}
