/* SPDX-License-Identifier: MIT */
/* Walking a directory tree of any depth with a bounded number of open fds (see walk.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/util.h"
#include "fs/walk.h"

static int path_reserve(Walk *w, size_t need) {
        if (need <= w->path_cap)
                return 0;
        size_t cap = MAX(need, w->path_cap * 2);
        char *p = realloc(w->path, cap);
        if (!p)
                return -ENOMEM;
        w->path = p;
        w->path_cap = cap;
        return 0;
}

int walk_init(Walk *w, int top, const char *prefix, size_t max_depth) {
        *w = (Walk){ .max_depth = max_depth, .open_levels = SBX_TREE_OPEN_LEVELS };
        size_t l = strlen(prefix);
        w->v = calloc(16, sizeof *w->v);
        if (!w->v || path_reserve(w, MAX(l + 1, (size_t)256)) < 0) {
                walk_done(w);
                return -ENOMEM;
        }
        w->cap = 16;
        memcpy(w->path, prefix, l + 1);
        w->v[0] = (WalkLevel){ .fd = top, .path_len = l };
        if (fstat(top, &w->v[0].st) < 0) {
                int r = negerrno();
                walk_done(w);
                return r;
        }
        w->n = 1;
        return 0;
}

static void level_unlist(WalkLevel *l) {
        for (size_t i = 0; i < l->n_ents; i++)
                free(l->ents[i].name);
        free(l->ents);
        l->ents = NULL;
        l->n_ents = l->next = 0;
}

void walk_done(Walk *w) {
        for (size_t i = 0; i < w->n; i++) {
                if (i > 0)
                        safe_close(w->v[i].fd);
                level_unlist(&w->v[i]);
        }
        free(w->v);
        free(w->path);
        *w = (Walk){ 0 };
}

const char *walk_path(Walk *w) {
        w->path[w->v[w->n - 1].path_len] = 0;
        return w->path;
}

const char *walk_child_path(Walk *w, const char *name) {
        size_t len = w->v[w->n - 1].path_len, l = strlen(name);
        if (path_reserve(w, len + 1 + l + 1) < 0)
                return NULL;
        if (len)
                w->path[len++] = '/';
        memcpy(w->path + len, name, l + 1);
        return w->path;
}

int walk_push(Walk *w, int fd, const char *name) {
        _cleanup_close_ int own = fd;
        if (walk_depth(w) >= w->max_depth)
                return -ELOOP;
        WalkLevel l = { .fd = -1 };
        if (fstat(own, &l.st) < 0)
                return negerrno();
        if (ARRAY_GROW(w->v, w->n, w->cap, 16) < 0)
                return -ENOMEM;
        if (!walk_child_path(w, name))
                return -ENOMEM;
        l.path_len = strlen(w->path);
        l.fd = TAKE_FD(own);
        /* The parent keeps its fd only among the first open_levels levels: deeper ones are
         * opened again through ".." when the walk comes back (walk_pop()). */
        WalkLevel *parent = &w->v[w->n - 1];
        if (w->n - 1 > w->open_levels)
                parent->fd = safe_close(parent->fd);
        w->v[w->n++] = l;
        return 0;
}

int walk_enter(Walk *w, const char *name) {
        int fd = openat(walk_fd(w), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return negerrno();
        return walk_push(w, fd, name);
}

int walk_pop(Walk *w) {
        if (w->n < 2)
                return -EINVAL;
        WalkLevel *cur = &w->v[w->n - 1], *parent = &w->v[w->n - 2];
        if (parent->fd < 0) {
                /* ".." is where the current directory is now, which a rename may have changed:
                 * only the very directory the walk came down from will do. */
                _cleanup_close_ int fd = openat(cur->fd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                struct stat st;
                if (fd < 0 || fstat(fd, &st) < 0)
                        return negerrno();
                if (st.st_dev != parent->st.st_dev || st.st_ino != parent->st.st_ino)
                        return -ESTALE;
                parent->fd = TAKE_FD(fd);
        }
        level_unlist(cur);
        safe_close(cur->fd);
        w->n--;
        return 0;
}

int walk_pop_to(Walk *w, size_t depth) {
        while (walk_depth(w) > depth) {
                int r = walk_pop(w);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int cmp_entries(const void *a, const void *b) {
        return strcmp(((const WalkEntry *)a)->name, ((const WalkEntry *)b)->name);
}

int walk_list(Walk *w, bool sorted) {
        WalkLevel *l = &w->v[w->n - 1];
        level_unlist(l);
        /* A description of its own: the level's fd may be shared (the top is the caller's). */
        int fd = openat(l->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
                int r = negerrno();
                safe_close(fd);
                return r;
        }
        size_t cap = 0;
        int r = 0;
        struct dirent *de;
        errno = 0;
        while ((de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if (ARRAY_GROW(l->ents, l->n_ents, cap, 16) < 0) {
                        r = -ENOMEM;
                        break;
                }
                char *name = strdup(de->d_name);
                if (!name) {
                        r = -ENOMEM;
                        break;
                }
                l->ents[l->n_ents++] = (WalkEntry){ name, de->d_type };
                errno = 0;
        }
        if (r == 0 && errno != 0)
                r = negerrno();
        closedir(d);
        if (r < 0) {
                level_unlist(l);
                return r;
        }
        if (sorted && l->n_ents > 1)
                qsort(l->ents, l->n_ents, sizeof *l->ents, cmp_entries);
        return 0;
}

const WalkEntry *walk_next(Walk *w) {
        WalkLevel *l = &w->v[w->n - 1];
        return l->next < l->n_ents ? &l->ents[l->next++] : NULL;
}

int walk_open_parent(int top, const char *path, const char **ret_name) {
        return walk_open_parent_mk(top, path, 0, ret_name);
}

int walk_open_parent_mk(int top, const char *path, mode_t mk, const char **ret_name) {
        const char *last = strrchr(path, '/');
        *ret_name = last ? last + 1 : path;
        int fd = fcntl(top, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return negerrno();
        for (const char *c = path; last && c <= last;) {
                const char *end = strchr(c, '/');
                size_t l = (size_t)(end - c);
                char name[NAME_MAX + 1];
                if (l == 0 || l > NAME_MAX) {
                        safe_close(fd);
                        return l ? -ENAMETOOLONG : -EINVAL;
                }
                memcpy(name, c, l);
                name[l] = 0;
                int next = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (next < 0 && errno == ENOENT && mk && mkdirat(fd, name, mk) == 0)
                        next = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                int e = errno;
                safe_close(fd);
                if (next < 0)
                        return -e;
                fd = next;
                c = end + 1;
        }
        return fd;
}

static uint64_t link_hash(dev_t dev, ino_t ino, int group) {
        return ((uint64_t)ino ^ ((uint64_t)dev << 40) ^ (uint64_t)(unsigned)group) * 0x9e3779b97f4a7c15ULL;
}

static uint64_t link_hash_of(const void *ud, uint32_t i) {
        const struct WalkLink *l = &((const WalkLinks *)ud)->v[i];
        return link_hash(l->dev, l->ino, l->group);
}

typedef struct LinkKey {
        const WalkLinks *t;
        dev_t dev;
        ino_t ino;
        int group;
} LinkKey;

static bool link_is(const void *ud, uint32_t i) {
        const LinkKey *k = ud;
        const struct WalkLink *l = &k->t->v[i];
        return l->ino == k->ino && l->dev == k->dev && l->group == k->group;
}

const char *walk_links_find(const WalkLinks *t, dev_t dev, ino_t ino, int group) {
        LinkKey k = { t, dev, ino, group };
        int64_t i = slots_find(&t->slots, link_hash(dev, ino, group), link_is, &k);
        return i >= 0 ? t->v[i].path : NULL;
}

int walk_links_add(WalkLinks *t, dev_t dev, ino_t ino, int group, const char *path) {
        if (walk_links_find(t, dev, ino, group))
                return 0;
        if (slots_reserve(&t->slots, t->n, 0, link_hash_of, t) < 0 || ARRAY_GROW(t->v, t->n, t->cap, 16) < 0)
                return -ENOMEM;
        char *p = strdup(path);
        if (!p)
                return -ENOMEM;
        LinkKey k = { t, dev, ino, group };
        size_t at = slots_probe(&t->slots, link_hash(dev, ino, group), link_is, &k);
        t->v[t->n] = (struct WalkLink){ dev, ino, group, p };
        t->slots.v[at] = (uint32_t)++t->n;
        return 0;
}

void walk_links_done(WalkLinks *t) {
        for (size_t i = 0; i < t->n; i++)
                free(t->v[i].path);
        free(t->v);
        slots_free(&t->slots);
        *t = (WalkLinks){ 0 };
}
