/* SPDX-License-Identifier: MIT */
/* What export, check and extract share (archive_private.h): the writable top directories, the
 * digest record, the reader and entry path checks; and archive_meta_clear(). */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/limits.h"
#include "base/macro.h"
#include "fs/archive.h"
#include "fs/archive_private.h"

const char *const archive_tops[ARCHIVE_N_TOPS] = { "tmp", "home/user", "dev/shm" };

int archive_err(char *err, size_t errlen, const char *fmt, ...) {
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

int archive_top_of(const char *p) {
        for (size_t i = 0; i < ELEMENTSOF(archive_tops); i++) {
                size_t l = strlen(archive_tops[i]);
                if (strncmp(p, archive_tops[i], l) == 0 && (p[l] == 0 || p[l] == '/'))
                        return (int)i;
        }
        return -1;
}

bool archive_is_top(const char *p) {
        for (size_t i = 0; i < ELEMENTSOF(archive_tops); i++)
                if (strcmp(p, archive_tops[i]) == 0)
                        return true;
        return false;
}

/* /tmp, /home/user and /dev/shm are one tmpfs but three bind mounts in a sandbox, and link()
 * does not cross mounts: a hard link stays within its top directory. */
int archive_link_group(int top) { return top; }

void archive_digest_header(struct sha256_ctx *s, const char *path, char type, unsigned mode, uint64_t size,
                           const char *target) {
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

struct archive *archive_reader_open(const uint8_t *data, size_t len) {
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

const char *archive_name_of(struct archive_entry *e) {
        const char *p = archive_entry_pathname(e);
        return p ? p : archive_entry_pathname_utf8(e);
}

const char *archive_symlink_of(struct archive_entry *e) {
        const char *p = archive_entry_symlink(e);
        return p ? p : archive_entry_symlink_utf8(e);
}

const char *archive_hardlink_of(struct archive_entry *e) {
        const char *p = archive_entry_hardlink(e);
        return p ? p : archive_entry_hardlink_utf8(e);
}

int archive_canonical_path(const char *raw, const char *what, char **ret, char *err, size_t errlen) {
        *ret = NULL;
        if (!raw || !raw[0])
                return archive_err(err, errlen, "archive entry with an empty %s", what);
        if (raw[0] == '/')
                return archive_err(err, errlen, "archive entry %.64s: absolute path", raw);
        size_t len = strnlen(raw, SBX_MAX_ARCHIVE_PATH_BYTES);
        if (len >= SBX_MAX_ARCHIVE_PATH_BYTES)
                return archive_err(err, errlen, "archive entry %.64s...: path longer than %u bytes", raw,
                                   SBX_MAX_ARCHIVE_PATH_BYTES - 1);
        _cleanup_free_ char *out = strdup(raw);
        if (!out)
                return -ENOMEM;
        /* Directories come with a trailing slash; the digest and messages name them without. */
        while (len > 0 && out[len - 1] == '/')
                out[--len] = 0;
        unsigned depth = 0;
        for (const char *c = out; *c; depth++) {
                const char *end = strchrnul(c, '/');
                size_t l = (size_t)(end - c);
                if (l == 2 && c[0] == '.' && c[1] == '.')
                        return archive_err(err, errlen, "archive entry %.200s: '..' component", out);
                if (l == 0 || (l == 1 && c[0] == '.'))
                        return archive_err(err, errlen, "archive entry %.200s: empty or '.' component", out);
                /* No directory entry takes a longer name: extraction would fail half-way. */
                if (l > NAME_MAX)
                        return archive_err(err, errlen, "archive entry %.64s...: a component longer than %d bytes", out,
                                           NAME_MAX);
                c = *end ? end + 1 : end;
        }
        int top = archive_top_of(out);
        if (top < 0)
                return archive_err(err, errlen, "archive entry %.200s: outside tmp, home/user and dev/shm", out);
        /* As deep as an export can go: SBX_MAX_TREE_DEPTH directories below a top directory,
         * and an entry in the deepest. */
        unsigned top_depth = archive_tops[top][strcspn(archive_tops[top], "/")] ? 2 : 1;
        if (depth - top_depth > SBX_MAX_TREE_DEPTH + 1)
                return archive_err(err, errlen, "archive entry %.64s...: more than %u levels deep", out,
                                   SBX_MAX_TREE_DEPTH);
        *ret = TAKE_PTR(out);
        return 0;
}

/* ---- ArchiveTree */

static uint64_t node_hash(uint32_t parent, const char *name, size_t len) {
        uint64_t h = 0xcbf29ce484222325ULL;
        for (int i = 0; i < 4; i++)
                h = (h ^ ((parent >> (8 * i)) & 0xff)) * 0x100000001b3ULL;
        for (size_t i = 0; i < len; i++)
                h = (h ^ (uint8_t)name[i]) * 0x100000001b3ULL;
        return h;
}

typedef struct NodeKey {
        const ArchiveTree *t;
        uint32_t parent;
        const char *name;
        size_t len;
} NodeKey;

static bool node_is(const void *ud, uint32_t i) {
        const NodeKey *k = ud;
        const ArchiveNode *n = &k->t->nodes[i];
        return n->parent == k->parent && strncmp(n->name, k->name, k->len) == 0 && n->name[k->len] == 0;
}

static uint64_t node_hash_of(const void *ud, uint32_t i) {
        const ArchiveNode *n = &((const ArchiveTree *)ud)->nodes[i];
        return node_hash(n->parent, n->name, strlen(n->name));
}

int archive_tree_init(ArchiveTree *t) {
        *t = (ArchiveTree){ 0 };
        t->nodes = calloc(64, sizeof *t->nodes);
        char *root = strdup("");
        if (!t->nodes || !root) {
                free(root);
                archive_tree_free(t);
                return -ENOMEM;
        }
        t->cap = 64;
        /* The root: its own parent, never in the index. */
        t->nodes[t->n++] = (ArchiveNode){ .name = root };
        return 0;
}

void archive_tree_free(ArchiveTree *t) {
        for (size_t i = 0; i < t->n; i++)
                free(t->nodes[i].name);
        free(t->nodes);
        slots_free(&t->slots);
        *t = (ArchiveTree){ 0 };
}

int64_t archive_tree_child(const ArchiveTree *t, uint32_t parent, const char *name, size_t len) {
        NodeKey k = { t, parent, name, len };
        return slots_find(&t->slots, node_hash(parent, name, len), node_is, &k);
}

static int tree_grow(ArchiveTree *t) {
        if (t->n == t->cap) {
                if (t->cap >= UINT32_MAX / 2)
                        return -E2BIG;
                ArchiveNode *v = reallocarray(t->nodes, t->cap * 2, sizeof *v);
                if (!v)
                        return -ENOMEM;
                t->nodes = v;
                t->cap *= 2;
        }
        return slots_reserve(&t->slots, t->n, 1, node_hash_of, t);
}

int64_t archive_tree_add(ArchiveTree *t, uint32_t parent, const char *name, size_t len, uint8_t kind) {
        int r = tree_grow(t);
        if (r < 0)
                return r;
        char *copy = strndup(name, len);
        if (!copy)
                return -ENOMEM;
        uint32_t i = (uint32_t)t->n++;
        t->nodes[i] = (ArchiveNode){ copy, parent, t->nodes[parent].depth + 1, kind };
        NodeKey k = { t, parent, name, len };
        t->slots.v[slots_probe(&t->slots, node_hash(parent, name, len), node_is, &k)] = i + 1;
        return i;
}

int64_t archive_tree_find(const ArchiveTree *t, const char *path) {
        int64_t node = 0;
        for (const char *c = path; *c && node >= 0;) {
                const char *end = strchrnul(c, '/');
                node = archive_tree_child(t, (uint32_t)node, c, (size_t)(end - c));
                c = *end ? end + 1 : end;
        }
        return node;
}

char *archive_tree_path(const ArchiveTree *t, uint32_t node) {
        size_t len = 0;
        for (uint32_t i = node; i != 0; i = t->nodes[i].parent)
                len += strlen(t->nodes[i].name) + 1;
        char *p = malloc(len ? len : 1);
        if (!p)
                return NULL;
        p[len ? len - 1 : 0] = 0;
        size_t end = len ? len - 1 : 0;
        for (uint32_t i = node; i != 0; i = t->nodes[i].parent) {
                size_t l = strlen(t->nodes[i].name);
                end -= l;
                memcpy(p + end, t->nodes[i].name, l);
                if (end > 0)
                        p[--end] = '/';
        }
        return p;
}

uint64_t archive_tree_distance(const ArchiveTree *t, uint32_t a, uint32_t b) {
        uint64_t d = 0;
        while (a != b) {
                if (t->nodes[a].depth >= t->nodes[b].depth)
                        a = t->nodes[a].parent;
                else
                        b = t->nodes[b].parent;
                d++;
        }
        return d;
}

int64_t archive_tree_place(ArchiveTree *t, uint32_t from, const char *rest, uint8_t kind) {
        int64_t node = from;
        for (const char *c = rest; *c;) {
                const char *end = strchrnul(c, '/');
                size_t l = (size_t)(end - c);
                int64_t i = archive_tree_child(t, (uint32_t)node, c, l);
                if (i < 0 && (i = archive_tree_add(t, (uint32_t)node, c, l, kind)) < 0)
                        return i;
                node = i;
                c = *end ? end + 1 : end;
        }
        return node;
}

uint32_t archive_cursor_start(const ArchiveTree *t, const ArchiveCursor *c, const char *path, const char **ret_rest) {
        /* The components path shares with the previous path: up to the first byte that
         * differs, back to the start of its component. */
        size_t i = 0;
        while (i < c->len && path[i] && path[i] == c->path[i])
                i++;
        size_t end;
        if ((path[i] == '/' || path[i] == 0) && (i == c->len || c->path[i] == '/'))
                end = i;
        else {
                while (i > 0 && c->path[i - 1] != '/')
                        i--;
                end = i ? i - 1 : 0;
        }
        uint32_t shared = 0;
        if (end > 0) {
                shared = 1;
                for (const char *s = path; (s = memchr(s, '/', (size_t)(path + end - s))); s++)
                        shared++;
        }
        /* Above the previous node and above path's own. */
        uint32_t prev_depth = t->nodes[c->node].depth, start = MIN(shared, prev_depth ? prev_depth - 1 : 0);
        if (path[end] == 0 && start == shared && start > 0)
                start--;
        uint32_t node = c->node;
        while (t->nodes[node].depth > start)
                node = t->nodes[node].parent;
        const char *rest = path;
        for (uint32_t k = 0; k < start; k++)
                rest = strchr(rest, '/') + 1;
        *ret_rest = rest;
        return node;
}

int archive_cursor_set(ArchiveCursor *c, const char *path, uint32_t node) {
        size_t l = strlen(path);
        if (l + 1 > c->cap) {
                size_t cap = MAX(l + 1, c->cap * 2);
                char *p = realloc(c->path, cap);
                if (!p)
                        return -ENOMEM;
                c->path = p;
                c->cap = cap;
        }
        memcpy(c->path, path, l + 1);
        c->len = l;
        c->node = node;
        return 0;
}

void archive_cursor_free(ArchiveCursor *c) {
        free(c->path);
        *c = (ArchiveCursor){ 0 };
}

int archive_tree_add_tops(ArchiveTree *t, uint8_t kind) {
        for (size_t i = 0; i < ELEMENTSOF(archive_tops); i++) {
                int64_t r = archive_tree_place(t, 0, archive_tops[i], kind);
                if (r < 0)
                        return (int)r;
        }
        return 0;
}
