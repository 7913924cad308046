/* SPDX-License-Identifier: MIT */
/* The image store as the daemon holds it: the records in memory, and one job at a time that
 * changes the disk (an import, a removal, the sweep of what a crash left), the others queued. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include "base/job.h"
#include "base/limits.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/util.h"
#include "fs/tree.h"
#include "oci/oci_private.h"

typedef enum OpKind { OP_IMPORT, OP_REMOVE, OP_SWEEP } OpKind;

typedef struct Op {
        struct Op *next;
        OpKind kind;
        char *path, *name;       /* import */
        uid_t as_uid;
        OciProgressFn progress;
        json_t *rewrite;         /* remove: a record to write again (a name taken off) */
        char drop_id[72];        /* remove: the record to delete ("" none) */
        char **drop_layers;      /* remove: the image's layers (hex), NULL-terminated: those no image
                                    has when the job runs go (an import before it may have one) */
        OciDoneFn fn;
        void *ud;
} Op;

struct OciStore {
        char *dir;
        int lock;
        uint64_t max_bytes;
        Loop *loop;
        OciImage **images;
        size_t n, cap;
        Op *head, *tail;
        size_t queued;
        Op *running;
        Job job;
        Watch job_w;
        int timer;               /* kills a job past SBX_IMAGE_JOB_TIMEOUT_MS */
        Watch timer_w;
        int out;                 /* the running import's record comes back here (memfd) */
        int progress;            /* ... and where it is, on this pipe (read end) */
        Watch progress_w;
        ImportJob ij;
};

static void op_free(Op *op) {
        if (!op)
                return;
        free(op->path);
        free(op->name);
        json_decref(op->rewrite);
        for (size_t i = 0; op->drop_layers && op->drop_layers[i]; i++)
                free(op->drop_layers[i]);
        free(op->drop_layers);
        free(op);
}

static void image_free(OciImage *img) {
        if (img) {
                oci_image_clear(img);
                free(img);
        }
}

static int mkdir_p(const char *path, mode_t mode) {
        char buf[SBX_MAX_PATH_BYTES];
        if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
                return -ENAMETOOLONG;
        for (char *p = buf + 1; *p; p++)
                if (*p == '/') {
                        *p = 0;
                        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
                                return negerrno();
                        *p = '/';
                }
        return mkdir(buf, mode) < 0 && errno != EEXIST ? negerrno() : 0;
}

static int add_image(OciStore *s, OciImage *img) {
        if (array_grow((void **)&s->images, s->n + 1, &s->cap, sizeof *s->images, 16) < 0)
                return -ENOMEM;
        s->images[s->n++] = img;
        return 0;
}

static bool layer_used(const OciStore *s, const char *hex) {
        for (size_t i = 0; i < s->n; i++)
                for (size_t k = 0; k < s->images[i]->n_layers; k++)
                        if (strcmp(s->images[i]->layers[k], hex) == 0)
                                return true;
        return false;
}

/* Reads every record; a record whose layers are not all there is left out (and said). */
static int load_records(OciStore *s, int dirfd) {
        _cleanup_close_ int d = openat(dirfd, "images", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *dir = d >= 0 ? fdopendir(d) : NULL;
        if (!dir)
                return negerrno();
        d = -1;
        for (struct dirent *e; (e = readdir(dir));) {
                size_t l = strlen(e->d_name);
                if (l != 69 || strcmp(e->d_name + 64, ".json") != 0 || s->n >= SBX_IMAGE_MAX_IMAGES)
                        continue;
                char path[SBX_MAX_PATH_BYTES], err[256] = "";
                snprintf(path, sizeof path, "%s/images/%s", s->dir, e->d_name);
                _cleanup_free_ uint8_t *data = NULL;
                size_t len;
                json_t *rec = read_file_whole(path, SBX_IMAGE_JSON_BYTES, &data, &len) >= 0
                                      ? json_loadb((const char *)data, len, 0, NULL) : NULL;
                OciImage *img = calloc(1, sizeof *img);
                int r = rec && img ? oci_record_load(img, rec, err, sizeof err) : -EINVAL;
                json_decref(rec);
                for (size_t k = 0; r >= 0 && k < img->n_layers; k++) {
                        struct stat st;
                        snprintf(path, sizeof path, "layers/%s", img->layers[k]);
                        if (fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode)) {
                                snprintf(err, sizeof err, "its layer %s is missing", img->layers[k]);
                                r = -ENOENT;
                        }
                }
                if (r >= 0 && strncmp(img->id + 7, e->d_name, 64) != 0) {
                        snprintf(err, sizeof err, "its id is %s", img->id);
                        r = -EINVAL;
                }
                if (r < 0 || add_image(s, img) < 0) {
                        log_warn("image store %s: %s left out: %s", s->dir, e->d_name, err[0] ? err : "unreadable");
                        if (img && img->record)
                                oci_image_clear(img);
                        free(img);
                }
        }
        closedir(dir);
        return 0;
}

/* Layers no record has (an import or removal that a crash cut short) go to tmp/, which the
 * sweep clears. */
static void set_orphans_aside(OciStore *s, int dirfd) {
        _cleanup_close_ int d = openat(dirfd, "layers", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *dir = d >= 0 ? fdopendir(d) : NULL;
        if (!dir)
                return;
        d = -1;
        for (struct dirent *e; (e = readdir(dir));) {
                if (e->d_name[0] == '.' || layer_used(s, e->d_name))
                        continue;
                char from[SBX_MAX_PATH_BYTES], to[SBX_MAX_PATH_BYTES], rnd[9];
                (void)random_hex(rnd, 4);
                snprintf(from, sizeof from, "layers/%s", e->d_name);
                snprintf(to, sizeof to, "tmp/orphan-%s-%s", rnd, e->d_name);
                (void)renameat(dirfd, from, dirfd, to);
        }
        closedir(dir);
}

/* A root daemon's sandboxes mount the layers as no host user (pid 1 is an id of their own):
 * every directory down to the store must let others through. */
static int reachable(const char *dir, char *err, size_t errlen) {
        char buf[SBX_MAX_PATH_BYTES];
        if (geteuid() != 0)
                return 0;
        snprintf(buf, sizeof buf, "%s", dir);
        for (char *end = buf + strlen(buf); end > buf; end = strrchr(buf, '/')) {
                *end = 0;
                const char *p = buf[0] ? buf : "/";
                struct stat st;
                if (stat(p, &st) == 0 && !(st.st_mode & S_IXOTH)) {
                        snprintf(err, errlen, "image store %.200s is out of the sandboxes' reach: %.200s lets no other "
                                 "user through (chmod o+x it, or choose another place)", dir, p);
                        return -EACCES;
                }
                if (end == buf)
                        break;
        }
        return 0;
}

static void kick(OciStore *s);
static void progress_close(OciStore *s);

static void enqueue(OciStore *s, Op *op) {
        if (s->tail)
                s->tail->next = op;
        else
                s->head = op;
        s->tail = op;
        s->queued++;
        kick(s);
}

int oci_store_open(const char *dir, uint64_t max_bytes, Loop *loop, OciStore **ret, char *err, size_t errlen) {
        if (!dir || dir[0] != '/') {
                snprintf(err, errlen, "the image store must be an absolute path; got '%.200s'", dir ? dir : "");
                return -EINVAL;
        }
        OciStore *s = calloc(1, sizeof *s);
        if (!s || !(s->dir = strdup(dir))) {
                free(s);
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        s->lock = s->out = s->timer = s->progress = -1;
        s->job = (Job){ .pid = -1, .pidfd = -1, .result = -1 };
        s->loop = loop;
        s->max_bytes = max_bytes ? max_bytes : SBX_IMAGE_STORE_DEFAULT_BYTES;
        /* Its directories 0755: a sandbox's pid 1 (no host user) reads the layers through them. */
        int r = mkdir_p(dir, 0755);
        _cleanup_close_ int d = r >= 0 ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        if (r >= 0 && d < 0)
                r = negerrno();
        /* layers/ lets sandboxes through to what they mount (no listing); the records are the
         * daemon's. */
        if (r >= 0 && ((mkdirat(d, "layers", 0711) < 0 && errno != EEXIST) ||
                       (mkdirat(d, "images", 0700) < 0 && errno != EEXIST) ||
                       (mkdirat(d, "tmp", 0700) < 0 && errno != EEXIST)))
                r = negerrno();
        if (r < 0) {
                snprintf(err, errlen, "image store %.200s: %s", dir, strerror(-r));
                oci_store_free(s);
                return r;
        }
        if ((r = reachable(dir, err, errlen)) < 0) {
                oci_store_free(s);
                return r;
        }
        s->lock = openat(d, "lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (s->lock < 0 || flock(s->lock, LOCK_SH | LOCK_NB) < 0) {
                r = negerrno();
                snprintf(err, errlen, "image store %.200s: %s", dir,
                         r == -EWOULDBLOCK ? "another sbx process is changing it (an import): try again when it is done"
                                           : strerror(-r));
                oci_store_free(s);
                return r == -EWOULDBLOCK ? -EBUSY : r;
        }
        if ((r = load_records(s, d)) < 0) {
                snprintf(err, errlen, "image store %.200s: read its records: %s", dir, strerror(-r));
                oci_store_free(s);
                return r;
        }
        set_orphans_aside(s, d);
        Op *op = calloc(1, sizeof *op);
        if (op) {
                op->kind = OP_SWEEP;
                enqueue(s, op);
        }
        *ret = s;
        return 0;
}

static void finish(OciStore *s, Op *op, int r, const char *msg, const OciImage *img) {
        if (op->fn)
                op->fn(op->ud, r, msg, img);
        op_free(op);
}

OciStore *oci_store_free(OciStore *s) {
        if (!s)
                return NULL;
        loop_del(s->loop, &s->timer_w);
        safe_close(s->timer);
        progress_close(s);
        if (s->running) {
                loop_del(s->loop, &s->job_w);
                job_kill(&s->job);
                finish(s, TAKE_PTR(s->running), -ECANCELED, "the image store was closed", NULL);
        }
        while (s->head) {
                Op *op = s->head;
                s->head = op->next;
                finish(s, op, -ECANCELED, "the image store was closed", NULL);
        }
        for (size_t i = 0; i < s->n; i++)
                image_free(s->images[i]);
        free(s->images);
        safe_close(s->out);
        safe_close(s->lock);
        free(s->dir);
        free(s);
        return NULL;
}

const char *oci_store_dir(const OciStore *s) { return s->dir; }
uint64_t oci_store_max_bytes(const OciStore *s) { return s->max_bytes; }
size_t oci_store_count(const OciStore *s) { return s->n; }
OciImage *oci_store_at(OciStore *s, size_t i) { return i < s->n ? s->images[i] : NULL; }
void oci_image_use(OciImage *img) { img->users++; }
void oci_image_unuse(OciImage *img) {
        if (img->users)
                img->users--;
}

uint64_t oci_store_bytes(const OciStore *s) {
        uint64_t total = 0;
        for (size_t i = 0; i < s->n; i++) {
                json_t *ls = json_object_get(s->images[i]->record, "layers"), *l;
                size_t k;
                json_array_foreach(ls, k, l) {
                        /* Counted once, at its first image's first mention. */
                        bool before = false;
                        for (size_t j = 0; j <= i && !before; j++)
                                for (size_t m = 0; m < s->images[j]->n_layers && !before; m++) {
                                        if (j == i && m >= k)
                                                break;
                                        before = strcmp(s->images[j]->layers[m], s->images[i]->layers[k]) == 0;
                                }
                        if (!before)
                                total += (uint64_t)json_integer_value(json_object_get(l, "bytes"));
                }
        }
        return total;
}

OciImage *oci_store_find(OciStore *s, const char *ref) {
        size_t len = ref ? strlen(ref) : 0;
        bool hex = len >= 12 && len <= 64;
        for (size_t i = 0; hex && i < len; i++)
                hex = (ref[i] >= '0' && ref[i] <= '9') || (ref[i] >= 'a' && ref[i] <= 'f');
        const char *h;
        if (oci_digest_valid(ref, &h)) {
                ref = h;
                hex = true;
                len = 64;
        }
        OciImage *found = NULL;
        if (hex) {
                for (size_t i = 0; i < s->n; i++)
                        if (strncmp(s->images[i]->id + 7, ref, len) == 0) {
                                if (found) {
                                        errno = EINVAL;
                                        return NULL;
                                }
                                found = s->images[i];
                        }
                if (found)
                        return found;
        }
        char name[SBX_IMAGE_NAME_BYTES], err[256];
        if (len && oci_name_normalize(ref, name, sizeof name, err, sizeof err))
                for (size_t i = 0; i < s->n; i++)
                        for (size_t k = 0; s->images[i]->names[k]; k++)
                                if (strcmp(s->images[i]->names[k], name) == 0)
                                        return s->images[i];
        errno = ENOENT;
        return NULL;
}

int oci_store_layer_path(const OciStore *s, const OciImage *img, size_t i, char *buf, size_t size) {
        if (i >= img->n_layers)
                return -EINVAL;
        return (size_t)snprintf(buf, size, "%s/layers/%s", s->dir, img->layers[i]) >= size ? -ENAMETOOLONG : 0;
}

static int change_run(void *arg, char *err, size_t errlen) {
        Op *op = ((void **)arg)[0];
        OciStore *s = ((void **)arg)[1];
        int r = 0;
        if (op->kind == OP_REMOVE && (r = oci_lock_for_change(s->lock, err, errlen)) < 0)
                return r;
        _cleanup_close_ int d = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (d < 0)
                return negerrno();
        if (op->rewrite && (r = oci_record_write(d, op->rewrite)) < 0) {
                snprintf(err, errlen, "rewrite the image's record: %s", strerror(-r));
                return r;
        }
        if (op->drop_id[0]) {
                char path[96];
                snprintf(path, sizeof path, "images/%s.json", op->drop_id + 7);
                if (unlinkat(d, path, 0) < 0 && errno != ENOENT) {
                        r = negerrno();
                        snprintf(err, errlen, "remove the image's record: %s", strerror(-r));
                        return r;
                }
        }
        for (size_t i = 0; op->drop_layers && op->drop_layers[i]; i++) {
                char from[160], to[200], rnd[9];
                /* The store as this job began, every import before it included. */
                if (layer_used(s, op->drop_layers[i]))
                        continue;
                (void)random_hex(rnd, 4);
                snprintf(from, sizeof from, "layers/%s", op->drop_layers[i]);
                snprintf(to, sizeof to, "tmp/gone-%s-%s", rnd, op->drop_layers[i]);
                (void)renameat(d, from, d, to);
        }
        /* tmp/ holds only what this store's jobs left: no job of another process runs while
         * this one holds the lock, or (the sweep) while this daemon holds it shared. */
        _cleanup_close_ int t = openat(d, "tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (t >= 0 && tree_clear(t, err, errlen) < 0)
                log_warn("image store %s: clear tmp/: %s", s->dir, err);
        return 0;
}

/* The import's record, from the memfd it was written to. */
static json_t *read_out(int fd) {
        struct stat st;
        if (fstat(fd, &st) < 0 || st.st_size <= 0 || st.st_size > SBX_IMAGE_JSON_BYTES * 2)
                return NULL;
        _cleanup_free_ char *buf = malloc((size_t)st.st_size);
        if (!buf || pread(fd, buf, (size_t)st.st_size, 0) != st.st_size)
                return NULL;
        return json_loadb(buf, (size_t)st.st_size, 0, NULL);
}

/* The import is in the store: its record in memory, and its names off any other image. */
static OciImage *imported(OciStore *s, json_t *rec, char *err, size_t errlen) {
        OciImage *img = calloc(1, sizeof *img);
        if (!img || oci_record_load(img, rec, err, errlen) < 0) {
                free(img);
                return NULL;
        }
        for (size_t i = 0; i < s->n; i++) {
                OciImage *o = s->images[i];
                if (strcmp(o->id, img->id) == 0) {
                        img->users = o->users;
                        oci_image_clear(o);
                        *o = *img;
                        free(img);
                        img = o;
                        continue;
                }
                size_t w = 0;
                for (size_t k = 0; o->names[k]; k++) {
                        bool taken = false;
                        for (size_t m = 0; img->names[m]; m++)
                                taken = taken || strcmp(img->names[m], o->names[k]) == 0;
                        if (taken)
                                free(o->names[k]);
                        else
                                o->names[w++] = o->names[k];
                }
                if (o->names[w]) {
                        o->names[w] = NULL;
                        json_t *r2 = oci_record_with_names(o->record, o->names);
                        if (r2)
                                (void)oci_image_set_record(o, r2);
                        json_decref(r2);
                }
        }
        bool known = false;
        for (size_t i = 0; i < s->n; i++)
                known = known || s->images[i] == img;
        if (!known && add_image(s, img) < 0) {
                image_free(img);
                snprintf(err, errlen, "out of memory");
                return NULL;
        }
        return img;
}

/* Reads what is there of the import's progress (never waits: the pipe is non-blocking). */
static void progress_read(OciStore *s) {
        OciProgress p;
        while (s->progress >= 0 && read(s->progress, &p, sizeof p) == (ssize_t)sizeof p)
                if (s->running && s->running->progress)
                        s->running->progress(s->running->ud, &p);
}

static void progress_event(Watch *w, uint32_t events) {
        OciStore *s = w->data;
        progress_read(s);
        if (events & EPOLLHUP) {
                loop_del(s->loop, &s->progress_w);
                s->progress = safe_close(s->progress);
        }
}

static void progress_close(OciStore *s) {
        if (s->progress >= 0) {
                loop_del(s->loop, &s->progress_w);
                s->progress = safe_close(s->progress);
        }
}

static void job_ended(Watch *w, uint32_t events) {
        (void)events;
        OciStore *s = w->data;
        progress_read(s);
        progress_close(s);
        char err[JOB_ERR_MAX] = "";
        loop_del(s->loop, &s->job_w);
        int r = job_finish(&s->job, err, sizeof err);
        /* Back to shared: the job's exclusive lock was on this same open file. A failed upgrade
         * drops the lock (Linux converts by unlocking first): another process may hold it now,
         * and the loop does not wait for it. */
        if (flock(s->lock, LOCK_SH | LOCK_NB) < 0)
                log_warn("image store %s: another process is changing it: it is not locked for this one until "
                         "its next change", s->dir);
        loop_del(s->loop, &s->timer_w);
        s->timer = safe_close(s->timer);
        Op *op = TAKE_PTR(s->running);
        OciImage *img = NULL;
        if (r >= 0 && op->kind == OP_IMPORT) {
                _cleanup_(json_decrefp) json_t *rec = read_out(s->out);
                if (!rec || !(img = imported(s, rec, err, sizeof err))) {
                        r = -EIO;
                        if (!err[0])
                                snprintf(err, sizeof err, "the import's record did not come back");
                }
        }
        s->out = safe_close(s->out);
        if (r < 0 && op->kind == OP_SWEEP)
                log_warn("image store %s: sweep: %s", s->dir, err);
        finish(s, op, r, r < 0 ? err : NULL, img);
        kick(s);
}

static void job_overdue(Watch *w, uint32_t events) {
        OciStore *s = w->data;
        log_warn("image store %s: a job ran past %u s: killed", s->dir, SBX_IMAGE_JOB_TIMEOUT_MS / 1000);
        loop_del(s->loop, &s->timer_w);
        s->timer = safe_close(s->timer);
        if (s->job.pid > 0)
                (void)kill(s->job.pid, SIGKILL);
}

static void kick(OciStore *s) {
        static void *args[2];
        while (!s->running && s->head) {
                Op *op = s->head;
                s->head = op->next;
                if (!s->head)
                        s->tail = NULL;
                s->queued--;
                op->next = NULL;
                int r;
                if (op->kind == OP_IMPORT) {
                        uint64_t used = oci_store_bytes(s);
                        int pp[2] = { -1, -1 };
                        s->out = memfd_create("sbx-image-record", MFD_CLOEXEC);
                        r = s->out < 0 || pipe2(pp, O_CLOEXEC | O_NONBLOCK) < 0 ? negerrno() : 0;
                        /* The job's end blocks: it waits for the loop rather than lose a word. */
                        if (r >= 0)
                                (void)fd_set_nonblock(pp[1], false);
                        s->ij = (ImportJob){ .dir = s->dir, .path = op->path, .name = op->name, .as_uid = op->as_uid,
                                             .room = s->max_bytes > used ? s->max_bytes - used : 0, .lock = s->lock,
                                             .out = s->out, .progress = pp[1], .images = s->images, .n_images = s->n };
                        int keep[] = { s->lock, s->out, pp[1] };
                        if (r >= 0)
                                r = job_start(&s->job, oci_import_run, &s->ij, keep, ELEMENTSOF(keep));
                        safe_close(pp[1]);
                        s->progress = pp[0];
                        if (r >= 0 && loop_add(s->loop, &s->progress_w, s->progress, EPOLLIN, progress_event, s) < 0)
                                progress_close(s);
                } else {
                        args[0] = op;
                        args[1] = s;
                        int keep[] = { s->lock };
                        r = job_start(&s->job, change_run, args, keep, ELEMENTSOF(keep));
                }
                if (r >= 0 && (r = loop_add(s->loop, &s->job_w, s->job.pidfd, EPOLLIN, job_ended, s)) < 0)
                        job_kill(&s->job);
                /* Its end comes on the pidfd either way: a kill by the timer is just sooner. */
                if (r >= 0 && (s->timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK)) >= 0 &&
                    (timerfd_arm_ms(s->timer, SBX_IMAGE_JOB_TIMEOUT_MS) < 0 ||
                     loop_add(s->loop, &s->timer_w, s->timer, EPOLLIN, job_overdue, s) < 0))
                        s->timer = safe_close(s->timer);
                if (r < 0) {
                        s->out = safe_close(s->out);
                        progress_close(s);
                        char msg[128];
                        snprintf(msg, sizeof msg, "cannot start the job: %s", strerror(-r));
                        finish(s, op, r, msg, NULL);
                        continue;
                }
                s->running = op;
        }
}

int oci_store_import(OciStore *s, const char *path, const char *name, uid_t as_uid, OciProgressFn progress,
                     OciDoneFn fn, void *ud, char *err, size_t errlen) {
        char n[SBX_IMAGE_NAME_BYTES];
        if (!path || path[0] != '/') {
                snprintf(err, errlen, "the path to import must be absolute; got '%.200s'", path ? path : "");
                return -EINVAL;
        }
        if (name && !oci_name_normalize(name, n, sizeof n, err, errlen))
                return -EINVAL;
        if (s->queued >= SBX_IMAGE_MAX_QUEUED) {
                snprintf(err, errlen, "%u image operations are waiting already", SBX_IMAGE_MAX_QUEUED);
                return -EBUSY;
        }
        if (s->n >= SBX_IMAGE_MAX_IMAGES) {
                snprintf(err, errlen, "the store has %u images, its most: remove some first", SBX_IMAGE_MAX_IMAGES);
                return -ENOSPC;
        }
        Op *op = calloc(1, sizeof *op);
        if (!op || !(op->path = strdup(path)) || (name && !(op->name = strdup(n)))) {
                op_free(op);
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        op->kind = OP_IMPORT;
        op->as_uid = as_uid;
        op->progress = progress;
        op->fn = fn;
        op->ud = ud;
        enqueue(s, op);
        return 0;
}

int oci_store_remove(OciStore *s, const char *ref, OciDoneFn fn, void *ud, char *err, size_t errlen) {
        OciImage *img = oci_store_find(s, ref);
        if (!img) {
                snprintf(err, errlen, errno == EINVAL ? "'%.200s' begins more than one image's id" : "no image '%.200s'",
                         ref ? ref : "");
                return errno == EINVAL ? -EINVAL : -ENOENT;
        }
        if (s->queued >= SBX_IMAGE_MAX_QUEUED) {
                snprintf(err, errlen, "%u image operations are waiting already", SBX_IMAGE_MAX_QUEUED);
                return -EBUSY;
        }
        char name[SBX_IMAGE_NAME_BYTES], e[256];
        size_t n_names = 0, at = SIZE_MAX;
        bool by_name = !oci_digest_valid(ref, NULL) && oci_name_normalize(ref, name, sizeof name, e, sizeof e);
        for (; img->names[n_names]; n_names++)
                if (by_name && strcmp(img->names[n_names], name) == 0)
                        at = n_names;
        Op *op = calloc(1, sizeof *op);
        if (!op) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        op->kind = OP_REMOVE;
        op->fn = fn;
        op->ud = ud;
        if (at != SIZE_MAX && n_names > 1) {
                /* A name off an image that keeps others. */
                free(img->names[at]);
                memmove(&img->names[at], &img->names[at + 1], (n_names - at) * sizeof *img->names);
                json_t *rec = oci_record_with_names(img->record, img->names);
                if (!rec || oci_image_set_record(img, rec) < 0) {
                        json_decref(rec);
                        op_free(op);
                        snprintf(err, errlen, "out of memory");
                        return -ENOMEM;
                }
                op->rewrite = rec;
                enqueue(s, op);
                return 0;
        }
        if (img->users) {
                op_free(op);
                snprintf(err, errlen, "image %.200s is in use by %u sandbox%s: destroy them first", ref, img->users,
                         img->users == 1 ? "" : "es");
                return -EBUSY;
        }
        snprintf(op->drop_id, sizeof op->drop_id, "%s", img->id);
        size_t i = 0;
        while (s->images[i] != img)
                i++;
        memmove(&s->images[i], &s->images[i + 1], (s->n - i - 1) * sizeof *s->images);
        s->n--;
        /* Its layers are given to the job, not the image's strings: it goes now. */
        op->drop_layers = TAKE_PTR(img->layers);
        img->n_layers = 0;
        image_free(img);
        enqueue(s, op);
        return 0;
}
