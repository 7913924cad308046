/* SPDX-License-Identifier: MIT */
/* The jobs of fork, snapshots, export and import (see image_job.h): each runs in a forked
 * process (base/job.h) on what an ImageJob names, never in the daemon's loop. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <unistd.h>
#include "base/job.h"
#include "base/limits.h"
#include "base/util.h"
#include "fs/changes.h"
#include "fs/archive.h"
#include "fs/layer.h"
#include "fs/tree.h"
#include "image/image_job.h"

/* The writable directories, as the sandbox sees them and as a snapshot stores them. */
static const char *const tree_dirs[] = { "tmp", "home/user", "dev/shm" };
static const char *const store_dirs[] = { "tmp", "home", "shm" };
#define N_DIRS 3

void states_free(State *v, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(v[i].name);
                free(v[i].data);
        }
        free(v);
}

static int open_dir(int root, const char *path) {
        int fd = openat(root, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? negerrno() : fd;
}

/* Two copiers only when nothing can change the source meanwhile: they must list the same
 * entries. */
static int copy(bool source_still, int src, int dst, const TreeIds *ids, TreeStats *st, char *err,
                size_t errlen) {
        return source_still ? tree_copy_parallel(src, dst, ids, st, err, errlen) : tree_copy(src, dst, ids, st, err, errlen);
}

/* Owners from one sandbox's tree to another's: the user's host ids, and as root the whole
 * block (its root's files, /tmp itself, move to the other block's root). */
static TreeIds ids_between(const Box *from, const Box *to) {
        return (TreeIds){ from->host_uid, to->host_uid, from->host_gid, to->host_gid,
                          from->host_base, to->host_base, MIN(from->host_ids, to->host_ids) };
}

/* Owners as the sandbox sees them (for an archive): host ids to ids inside. */
static TreeIds ids_inside(const Box *b) {
        return (TreeIds){ b->host_uid, SBX_SANDBOX_UID, b->host_gid, SBX_SANDBOX_GID, b->host_base, 0, b->host_ids };
}

/* A job that creates files in b's tree acts as b's user. */
static int become(const Box *b, char *err, size_t errlen) {
        int r = tree_become(b->host_uid, b->host_gid);
        if (r < 0)
                snprintf(err, errlen, "cannot take the sandbox user's identity: %s", strerror(-r));
        return r;
}

int image_job_fork(void *arg, char *err, size_t errlen) {
        const ImageJob *a = arg;
        const Box *from = a->from, *to = a->to;
        TreeIds ids = ids_between(from, to);
        int r = become(to, err, errlen);
        if (r < 0)
                return r;
        for (int i = 0; i < N_DIRS; i++) {
                _cleanup_close_ int src = open_dir(from->root_fd, tree_dirs[i]);
                _cleanup_close_ int dst = open_dir(to->root_fd, tree_dirs[i]);
                if (src < 0 || dst < 0) {
                        snprintf(err, errlen, "open /%s: %s", tree_dirs[i], strerror(-(src < 0 ? src : dst)));
                        return src < 0 ? src : dst;
                }
                if ((r = tree_clear(dst, err, errlen)) < 0 ||
                    (r = copy(a->still, src, dst, &ids, NULL, err, errlen)) < 0)
                        return r;
        }
        return 0;
}

/* Whether a file of the sandbox's trees is open for writing: 1, 0, -errno. */
static int trees_writers(int root_fd) {
        static const char *const dirs[] = { "tmp", "home/user", "dev/shm" };
        dev_t seen[3];
        size_t n_seen = 0;
        for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
                struct stat st;
                if (fstatat(root_fd, dirs[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
                        return negerrno();
                bool done = false;
                for (size_t j = 0; j < n_seen; j++)
                        done |= seen[j] == st.st_dev;
                if (done)
                        continue;
                seen[n_seen++] = st.st_dev;
                int r = changes_fs_writers(root_fd, dirs[i]);
                if (r != 0)
                        return r;
        }
        return 0;
}

/* Whether the trees are tmpfs (where a lease says whether a file is open for writing). */
static bool tree_is_tmpfs(int root_fd) {
        struct statfs sfs;
        _cleanup_close_ int fd = openat(root_fd, "tmp", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd >= 0 && fstatfs(fd, &sfs) == 0 && sfs.f_type == TMPFS_MAGIC;
}

/* An unchanged tree's fork: its last index is the new one. */
static int copy_index(int from, int to, LayerDiffStats *st) {
        *st = (LayerDiffStats){ 0 };
        if (from < 0)
                return -EINVAL;
        off_t off = 0;
        for (;;) {
                ssize_t k = sendfile(to, from, &off, 1 << 20);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return negerrno();
                if (k == 0)
                        return 0;
        }
}

int image_job_fork_layered(void *arg, char *err, size_t errlen) {
        const ImageJob *a = arg;
        TreeIds ids = ids_inside(a->from);
        LayerDiffStats st;
        /* Files open for writing: asked of the kernel with the sandbox frozen (never while
         * it runs: the probe makes its trees read-only for a moment). */
        int writers = a->still ? trees_writers(a->from->root_fd) : -EAGAIN;
        bool skip = a->unchanged && writers == 0;
        if (a->unchanged && !skip && a->n_layers >= SBX_MAX_FORK_LAYERS) {
                /* A walk would add a layer past the cap, and the squash was not asked for. */
                snprintf(err, errlen, "layer: the layer cap is reached and a file is open for writing");
                return -EAGAIN;
        }
        LayerDiff d = { .root = a->from->root_fd, .layer = a->layer, .old_index = a->old_index,
                        .threshold = a->threshold, .new_index = a->new_index, .ids = &ids,
                        .writers = writers != 0,
                        .probe_leases = writers == 1 && tree_is_tmpfs(a->from->root_fd),
                        .closed = a->closed, .n_closed = a->n_closed, .closed_all = a->closed_all,
                        .touched_since = a->touched_since };
        int r = skip ? copy_index(a->old_index, a->new_index, &st) : layer_diff(&d, &st, err, errlen);
        if (r < 0)
                return r;
        /* An unchanged tree needs no new layer: the fork gets the ones there are. */
        bool used = st.copied > 0 || st.whiteouts > 0 || a->n_layers == 0;
        int list[SBX_MAX_FORK_LAYERS + 1];
        size_t n = 0;
        if (used)
                list[n++] = a->layer;
        for (size_t i = 0; i < a->n_layers && n < ELEMENTSOF(list); i++)
                list[n++] = a->layers[i];
        LayerMount m = { .init_pid = a->to->init_pid, .root = a->to->root_fd, .layers = list, .n_layers = n,
                         .upper = a->upper };
        int64_t threshold = 0;
        if ((r = layer_mount(&m, &threshold, err, errlen)) < 0)
                return r;
        snprintf(err, errlen, "%d %lld %llu %llu %llu %llu%s", used, (long long)threshold, (unsigned long long)st.entries,
                 (unsigned long long)st.copied, (unsigned long long)st.whiteouts, (unsigned long long)st.bytes,
                 skip ? " unchanged" : a->old_index < 0 ? " whole" : "");
        return 0;
}

int image_job_snapshot(void *arg, char *err, size_t errlen) {
        const ImageJob *a = arg;
        const Box *b = a->from;
        TreeIds ids = ids_between(b, b);
        TreeStats st = { 0 };
        int r = become(b, err, errlen);
        if (r < 0)
                return r;
        if (mkdirat(b->snap_fd, a->snap_id, 0700) < 0) {
                r = negerrno();
                snprintf(err, errlen, "%s", r == -ENOSPC ? "the snapshot budget is used up" : strerror(-r));
                return r;
        }
        _cleanup_close_ int dir = open_dir(b->snap_fd, a->snap_id);
        r = dir;
        for (int i = 0; r >= 0 && i < N_DIRS; i++) {
                _cleanup_close_ int src = open_dir(b->root_fd, tree_dirs[i]);
                if (src < 0) {
                        r = src;
                        snprintf(err, errlen, "open /%s: %s", tree_dirs[i], strerror(-r));
                        break;
                }
                if (mkdirat(dir, store_dirs[i], 0700) < 0) {
                        r = negerrno();
                        snprintf(err, errlen, "%s", strerror(-r));
                        break;
                }
                _cleanup_close_ int dst = open_dir(dir, store_dirs[i]);
                if ((r = dst) < 0 || (r = copy(a->still, src, dst, &ids, &st, err, errlen)) < 0)
                        break;
        }
        if (r < 0) {
                if (r == -ENOSPC || r == -EDQUOT)
                        snprintf(err, errlen, "the snapshot budget is used up (%u times the filesystem limits)",
                                 SBX_SNAPSHOT_BUDGET_FACTOR);
                char ignore[64];
                if (dir >= 0)
                        (void)tree_clear(dir, ignore, sizeof ignore);
                (void)unlinkat(b->snap_fd, a->snap_id, AT_REMOVEDIR);
                return r;
        }
        snprintf(err, errlen, "%llu", (unsigned long long)st.bytes);
        return 0;
}

int image_job_restore(void *arg, char *err, size_t errlen) {
        const ImageJob *a = arg;
        const Box *b = a->from;
        TreeIds ids = ids_between(b, b);
        int r = a->unlayer ? layer_unmount(b->init_pid, err, errlen) : 0;
        if (r < 0 || (r = become(b, err, errlen)) < 0)
                return r;
        _cleanup_close_ int snap = open_dir(b->snap_fd, a->snap_id);
        if (snap < 0) {
                snprintf(err, errlen, "snapshot %s: %s", a->snap_id, strerror(-snap));
                return snap;
        }
        for (int i = 0; i < N_DIRS; i++) {
                _cleanup_close_ int src = open_dir(snap, store_dirs[i]);
                _cleanup_close_ int dst = open_dir(b->root_fd, tree_dirs[i]);
                if (src < 0 || dst < 0) {
                        snprintf(err, errlen, "open %s: %s", tree_dirs[i], strerror(-(src < 0 ? src : dst)));
                        return src < 0 ? src : dst;
                }
                /* The store's copy never changes: two copiers whatever the freezer does. */
                if ((r = tree_clear(dst, err, errlen)) < 0 || (r = copy(true, src, dst, &ids, NULL, err, errlen)) < 0)
                        return r;
        }
        return 0;
}

int image_job_export(void *arg, char *err, size_t errlen) {
        const ImageJob *a = arg;
        const Box *b = a->from;
        const SbxLimits *l = a->limits;
        TreeIds ids = ids_inside(b);
        ArchiveMeta meta = {
                .limits = { .fs_bytes = l->fs_bytes, .file_count = l->file_count,
                            .memory_bytes = l->memory_bytes, .stdout_bytes = l->stdout_bytes,
                            .stderr_bytes = l->stderr_bytes, .command_bytes = l->command_bytes,
                            .timeout_ms = a->timeout_ms, .pids = l->pids },
                .created_ms = wall_ms(),
        };
        /* The states are borrowed from the op (this process exits right after). */
        ArchiveSession *ss = calloc(a->n_states ? a->n_states : 1, sizeof *ss);
        if (!ss)
                return -ENOMEM;
        for (size_t i = 0; i < a->n_states; i++)
                ss[i] = (ArchiveSession){ a->states[i].name, a->states[i].data, a->states[i].len };
        meta.sessions = ss;
        meta.n_sessions = a->n_states;
        return archive_export(b->root_fd, &ids, &meta, a->memfd, err, errlen);
}

/* Writes the checked archive's sessions to a->memfd: for each, name NUL, u64 length, state. */
int image_job_import_check(void *arg, char *err, size_t errlen) {
        const ImageJob *a = arg;
        const SbxLimits *l = a->limits;
        ArchiveLimits lim = { .fs_bytes = l->fs_bytes, .file_count = l->file_count };
        ArchiveMeta meta = { 0 };
        int r = job_drop_privileges();
        if (r < 0) {
                snprintf(err, errlen, "cannot drop privileges to check the archive: %s", strerror(-r));
                return r;
        }
        r = archive_check(a->archive, a->archive_len, &lim, &meta, err, errlen);
        if (r < 0)
                return r;
        for (size_t i = 0; i < meta.n_sessions; i++) {
                uint64_t len = meta.sessions[i].state_len;
                const char *name = meta.sessions[i].name;
                if (write(a->memfd, name, strlen(name) + 1) < 0 || write(a->memfd, &len, sizeof len) < 0 ||
                    (len && write(a->memfd, meta.sessions[i].state, len) != (ssize_t)len)) {
                        snprintf(err, errlen, "cannot pass the archive's sessions on");
                        return -EIO;
                }
        }
        return 0;
}

int image_job_import_extract(void *arg, char *err, size_t errlen) {
        const ImageJob *a = arg;
        const Box *b = a->from;
        int r = a->unlayer ? layer_unmount(b->init_pid, err, errlen) : 0;
        if (r < 0 || (r = become(b, err, errlen)) < 0)
                return r;
        for (int i = 0; i < N_DIRS; i++) {
                _cleanup_close_ int dst = open_dir(b->root_fd, tree_dirs[i]);
                if (dst < 0) {
                        snprintf(err, errlen, "open /%s: %s", tree_dirs[i], strerror(-dst));
                        return dst;
                }
                if ((r = tree_clear(dst, err, errlen)) < 0)
                        return r;
        }
        return archive_extract(a->archive, a->archive_len, b->root_fd, err, errlen);
}

int image_read_sessions(int memfd, State **states, size_t *n_states) {
        struct stat st;
        if (fstat(memfd, &st) < 0)
                return negerrno();
        size_t len = (size_t)st.st_size, off = 0;
        uint8_t *p = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, memfd, 0) : NULL;
        if (len && p == MAP_FAILED)
                return negerrno();
        int r = 0;
        while (off < len) {
                const uint8_t *nul = memchr(p + off, 0, len - off);
                uint64_t n;
                if (!nul || (size_t)(nul - p) + 1 + sizeof n > len) {
                        r = -EIO;
                        break;
                }
                const char *name = (const char *)p + off;
                off = (size_t)(nul - p) + 1;
                memcpy(&n, p + off, sizeof n);
                off += sizeof n;
                if (n > len - off) {
                        r = -EIO;
                        break;
                }
                State *v = realloc((*states), ((*n_states) + 1) * sizeof *v);
                if (!v) {
                        r = -ENOMEM;
                        break;
                }
                (*states) = v;
                State *s = &(*states)[(*n_states)];
                *s = (State){ strdup(name), malloc(n + 1), (size_t)n };
                (*n_states)++;
                if (!s->name || !s->data) {
                        r = -ENOMEM;
                        break;
                }
                memcpy(s->data, p + off, n);
                off += n;
        }
        if (len)
                munmap(p, len);
        return r;
}

/* Emptying a deleted snapshot's copy takes as long as the copy did: a job does it, and
 * nobody waits for it. The name is moved aside first, so a new snapshot may reuse it. */
typedef struct Sweep {
        Job job;
        Watch w;
        Loop *loop;
        int store;
        char name[32];
} Sweep;

static int job_sweep(void *arg, char *err, size_t errlen) {
        Sweep *sw = arg;
        _cleanup_close_ int dir = open_dir(sw->store, sw->name);
        int r = dir >= 0 ? tree_clear(dir, err, errlen) : dir;
        if (r >= 0 && unlinkat(sw->store, sw->name, AT_REMOVEDIR) < 0)
                r = negerrno();
        return r;
}

static void sweep_event(Watch *w, uint32_t events) {
        Sweep *sw = w->data;
        loop_del(sw->loop, &sw->w);
        (void)job_finish(&sw->job, NULL, 0);
        free(sw);
}

void image_sweep_start(Loop *loop, int store, const char *id) {
        Sweep *sw = calloc(1, sizeof *sw);
        if (!sw)
                return; /* the store goes with the sandbox */
        static uint64_t n;
        sw->loop = loop;
        sw->store = store;
        snprintf(sw->name, sizeof sw->name, "deleted-%llu", (unsigned long long)++n);
        if (renameat(sw->store, id, sw->store, sw->name) < 0 || job_start(&sw->job, job_sweep, sw, &sw->store, 1) < 0) {
                free(sw);
                return;
        }
        if (loop_add(sw->loop, &sw->w, sw->job.pidfd, EPOLLIN, sweep_event, sw) < 0) {
                job_kill(&sw->job);
                free(sw);
        }
}
