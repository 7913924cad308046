/* SPDX-License-Identifier: MIT */
/* What export, check and extract share (archive_private.h): the writable top directories, the
 * digest record, the reader and entry path checks; and archive_meta_clear(). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/limits.h"
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

int archive_canonical_path(const char *raw, const char *what, char *out, char *err, size_t errlen) {
        if (!raw || !raw[0])
                return archive_err(err, errlen, "archive entry with an empty %s", what);
        if (raw[0] == '/')
                return archive_err(err, errlen, "archive entry %s: absolute path", raw);
        size_t len = strlen(raw);
        if (len >= SBX_MAX_PATH_BYTES)
                return archive_err(err, errlen, "archive entry %.64s...: path too long", raw);
        /* Directories come with a trailing slash; the digest and messages name them without. */
        memcpy(out, raw, len + 1);
        while (len > 0 && out[len - 1] == '/')
                out[--len] = 0;
        unsigned depth = 0;
        for (const char *c = out; *c; depth++) {
                const char *end = strchrnul(c, '/');
                size_t l = (size_t)(end - c);
                if (l == 2 && c[0] == '.' && c[1] == '.')
                        return archive_err(err, errlen, "archive entry %s: '..' component", out);
                if (l == 0 || (l == 1 && c[0] == '.'))
                        return archive_err(err, errlen, "archive entry %s: empty or '.' component", out);
                c = *end ? end + 1 : end;
        }
        /* As deep as an export can go: extraction walks every level from the root. */
        if (depth > SBX_MAX_TREE_DEPTH + 2)
                return archive_err(err, errlen, "archive entry %.64s...: more than %u levels deep", out,
                                   SBX_MAX_TREE_DEPTH);
        if (archive_top_of(out) < 0)
                return archive_err(err, errlen, "archive entry %s: outside tmp, home/user and dev/shm", out);
        return 0;
}
