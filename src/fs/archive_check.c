/* SPDX-License-Identifier: MIT */
/* Checking a hostile archive before anything is cleared: entry types, paths, link targets,
 * the sizes tmpfs would charge, the digest and the manifest (rules in archive.h). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "base/limits.h"
#include "base/text.h"
#include "base/util.h"
#include "fs/archive.h"
#include "fs/archive_private.h"

/* tmpfs charges whole pages, and keeps a symlink target shorter than this in the inode. */
#define ARCHIVE_PAGE 4096U
#define ARCHIVE_INLINE_LINK 128U

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

enum {
        KIND_NONE,
        KIND_IMPLICIT_DIR, /* a parent no entry has named yet; extraction creates it 0700 */
        KIND_DIR,
        KIND_FILE, /* regular file or hard link: what a hard link may point to */
        KIND_OTHER,
};

typedef struct Check {
        struct archive *a;
        const ArchiveLimits *limits;
        ArchiveTree paths; /* every path so far, kinds KIND_*: duplicates, parents, link targets */
        ArchiveCursor cursor; /* the previous entry's */
        struct sha256_ctx sha;
        uint64_t entries, bytes;
        uint64_t charged;   /* bytes tmpfs will charge for what extraction creates */
        uint64_t inodes;    /* what extraction creates: entries and implicit parents */
        uint64_t max_read;  /* bound on the decompressed stream */
        /* The extraction's walk (archive_extract.c), played here: the directory it is in and
         * the directories it enters and leaves to get there, entry after entry. */
        uint32_t walk_at;
        uint64_t walk_steps;
        char *manifest;
        size_t manifest_len;
        uint8_t *buf;
        char *err;
        size_t errlen;
} Check;

static int check_read_fail(Check *c) {
        return archive_err(c->err, c->errlen, "archive unreadable: %s", archive_error_string(c->a) ?: "unknown error");
}

static int check_stream_bound(Check *c) {
        uint64_t n = (uint64_t)archive_filter_bytes(c->a, 0);
        if (n > c->max_read)
                return archive_err(c->err, c->errlen, "archive too large: %llu bytes decompressed, the limit is %llu",
                                   (unsigned long long)n, (unsigned long long)c->max_read);
        return 0;
}

static int check_count_inode(Check *c) {
        if (++c->inodes > c->limits->file_count)
                return archive_err(c->err, c->errlen, "archive has too many entries: more than %llu",
                                   (unsigned long long)c->limits->file_count);
        return 0;
}

/* Records path (and its implicit parents) in the tree, refusing duplicates and entries under
 * something that is not a directory: either would make extraction fail half-way. Adds nodes
 * exactly as archive_tree_place() does, so that the extraction's tree is this one; from the
 * deepest directory path shares with the previous entry (already checked). Returns the path's
 * node or -errno. */
static int64_t check_place(Check *c, const char *path, uint8_t kind) {
        const char *comp;
        uint32_t node = archive_cursor_start(&c->paths, &c->cursor, path, &comp);
        for (;;) {
                const char *end = strchrnul(comp, '/');
                size_t l = (size_t)(end - comp);
                bool last = !*end;
                int64_t i = archive_tree_child(&c->paths, node, comp, l);
                if (i < 0) {
                        /* Hard links too: tmpfs charges every extra link against its inode limit. */
                        int r = check_count_inode(c);
                        if (r < 0)
                                return r;
                        if ((i = archive_tree_add(&c->paths, node, comp, l, last ? kind : KIND_IMPLICIT_DIR)) < 0)
                                return i;
                } else {
                        uint8_t *k = &c->paths.nodes[i].kind;
                        if (last && kind == KIND_DIR && *k == KIND_IMPLICIT_DIR)
                                *k = KIND_DIR; /* its inode was counted as a parent */
                        else if (last)
                                return archive_err(c->err, c->errlen, "archive entry %.200s: duplicate entry", path);
                        else if (*k != KIND_DIR && *k != KIND_IMPLICIT_DIR)
                                return archive_err(c->err, c->errlen, "archive entry %.200s: parent %.*s is not a directory",
                                                   path, (int)MIN((size_t)(end - path), (size_t)200), path);
                }
                if (last) {
                        int r = archive_cursor_set(&c->cursor, path, (uint32_t)i);
                        return r < 0 ? r : i;
                }
                node = (uint32_t)i;
                comp = end + 1;
        }
}

/* The extraction's walk goes on to directory node `to`: refused once it would enter and leave
 * more directories than four per entry and SBX_ARCHIVE_WALK_SLACK, which an archive in
 * export's order never comes near; one in an order made to send it up and down the whole
 * depth for every entry does. */
static int check_walk(Check *c, uint32_t to) {
        c->walk_steps += archive_tree_distance(&c->paths, c->walk_at, to);
        c->walk_at = to;
        uint64_t max = 4 * (c->inodes + 16) + SBX_ARCHIVE_WALK_SLACK;
        if (c->walk_steps > max)
                return archive_err(c->err, c->errlen,
                                   "archive entries out of order: extracting them would enter and leave more than %llu "
                                   "directories", (unsigned long long)max);
        return 0;
}

/* The digest's type letter and the path set's kind of entry e at path, refusing the types
 * extraction cannot or must not recreate. */
static int check_type(Check *c, struct archive_entry *e, const char *path, char *ret_type, uint8_t *ret_kind) {
        unsigned ft = archive_entry_filetype(e);
        if (archive_hardlink_of(e)) {
                *ret_type = 'h', *ret_kind = KIND_FILE;
        } else if (ft == AE_IFREG) {
                *ret_type = 'f', *ret_kind = KIND_FILE;
        } else if (ft == AE_IFDIR) {
                *ret_type = 'd', *ret_kind = KIND_DIR;
        } else if (ft == AE_IFLNK) {
                *ret_type = 'l', *ret_kind = KIND_OTHER;
        } else if (ft == AE_IFIFO) {
                *ret_type = 'p', *ret_kind = KIND_OTHER;
        } else if (ft == AE_IFCHR || ft == AE_IFBLK) {
                return archive_err(c->err, c->errlen, "archive entry %s: device node", path);
        } else if (ft == AE_IFSOCK) {
                return archive_err(c->err, c->errlen, "archive entry %s: socket", path);
        } else {
                return archive_err(c->err, c->errlen, "archive entry %s: unsupported entry type", path);
        }
        return 0;
}

/* Refuses a symlink ('l') whose target resolves outside the sandbox, or a hard link ('h') to
 * anything but an earlier file of the same link group; *ret_target is the target the digest
 * records (borrowed from e), NULL for other types. */
static int check_link(Check *c, struct archive_entry *e, const char *path, char type, const char **ret_target,
                      uint32_t *ret_target_node) {
        *ret_target = NULL;
        if (type == 'l') {
                const char *target = archive_symlink_of(e);
                if (!target || !target[0] || strlen(target) >= SBX_MAX_PATH_BYTES)
                        return archive_err(c->err, c->errlen, "archive entry %.200s: empty or too long link target", path);
                /* Resolved against the link's directory, which may be longer than PATH_MAX. */
                size_t len = strlen(path) + strlen(target) + 2;
                _cleanup_free_ char *buf = malloc(len);
                if (!buf)
                        return -ENOMEM;
                if (!resolve_lexical(path, target, buf, len) || (archive_top_of(buf) < 0 && !in_system_dir(buf)))
                        return archive_err(c->err, c->errlen,
                                           "archive entry %.200s: link target outside the sandbox (its writable and system directories)", path);
                *ret_target = target;
        } else if (type == 'h') {
                const char *hardlink = archive_hardlink_of(e);
                char discard[256];
                discard[0] = 0;
                _cleanup_free_ char *buf = NULL;
                int r = archive_canonical_path(hardlink, "link target", &buf, discard, sizeof discard);
                if (r == -ENOMEM)
                        return r;
                int64_t node = r < 0 ? -1 : archive_tree_find(&c->paths, buf);
                if (node < 0 || c->paths.nodes[node].kind != KIND_FILE)
                        return archive_err(c->err, c->errlen,
                                           "archive entry %.200s: hard link target %.200s is not an earlier file of the archive",
                                           path, hardlink);
                if (archive_link_group(archive_top_of(buf)) != archive_link_group(archive_top_of(path)))
                        return archive_err(c->err, c->errlen,
                                           "archive entry %.200s: hard link between two of tmp, home/user and dev/shm", path);
                *ret_target = hardlink;
                *ret_target_node = (uint32_t)node;
        }
        return 0;
}

/* What tmpfs will charge: whole pages per file, and a page for a symlink too long to be kept
 * in its inode. Checked before any data is read: a bomb is refused at its header, and an
 * archive that could not fit is refused before anything is cleared. */
static int check_charge(Check *c, char type, uint64_t size, const char *target) {
        uint64_t charge = type == 'f' ? (size + ARCHIVE_PAGE - 1) / ARCHIVE_PAGE * ARCHIVE_PAGE
                        : type == 'l' && strlen(target) >= ARCHIVE_INLINE_LINK ? ARCHIVE_PAGE : 0;
        if (charge > c->limits->fs_bytes || c->charged > c->limits->fs_bytes - charge)
                return archive_err(c->err, c->errlen, "archive too large: %llu bytes on the sandbox's filesystem, the limit is %llu",
                                   (unsigned long long)(c->charged + charge), (unsigned long long)c->limits->fs_bytes);
        c->charged += charge;
        return 0;
}

/* Streams a regular file's data through the digest: a file is never held in memory whole. */
static int check_data(Check *c, const char *path, uint64_t size) {
        uint64_t got = 0;
        for (;;) {
                la_ssize_t n = archive_read_data(c->a, c->buf, SBX_ARCHIVE_IO_BUF);
                if (n < 0)
                        return check_read_fail(c);
                if (n == 0)
                        break;
                sha256_feed(&c->sha, c->buf, (size_t)n);
                got += (uint64_t)n;
                if (got > size)
                        return archive_err(c->err, c->errlen, "archive entry %s: more data than its size", path);
                int r = check_stream_bound(c);
                if (r < 0)
                        return r;
        }
        if (got != size)
                return archive_err(c->err, c->errlen, "archive entry %s: truncated data", path);
        c->bytes += got;
        return 0;
}

static int check_entry(Check *c, struct archive_entry *e, const char *name) {
        _cleanup_free_ char *path = NULL;
        int r = archive_canonical_path(name, "path", &path, c->err, c->errlen);
        if (r < 0)
                return r;
        la_int64_t size = archive_entry_size(e);
        if (size < 0)
                size = 0;
        char type = 0;
        uint8_t kind = KIND_NONE;
        if ((r = check_type(c, e, path, &type, &kind)) < 0)
                return r;
        if (archive_is_top(path) && type != 'd')
                return archive_err(c->err, c->errlen, "archive entry %s: not a directory", path);
        /* Extraction creates with the caller's ids and never chowns, so a set-id bit would
         * hand out the sandbox user's ids; refused rather than silently dropped. */
        unsigned mode = archive_entry_mode(e) & 07777;
        if (mode & (S_ISUID | S_ISGID))
                return archive_err(c->err, c->errlen, "archive entry %s: setuid/setgid bit", path);
        if (type != 'f' && size > 0)
                return archive_err(c->err, c->errlen, "archive entry %s: data in an entry that is not a regular file", path);
        const char *target;
        uint32_t target_node = 0;
        if ((r = check_link(c, e, path, type, &target, &target_node)) < 0)
                return r;
        if ((r = check_charge(c, type, (uint64_t)size, target)) < 0)
                return r;
        int64_t node = check_place(c, path, kind);
        if (node < 0)
                return (int)node;
        /* Extraction goes to the entry's directory, and for a hard link on to its target's. */
        if ((r = check_walk(c, c->paths.nodes[node].parent)) < 0)
                return r;
        if (type == 'h' && (r = check_walk(c, c->paths.nodes[target_node].parent)) < 0)
                return r;
        archive_digest_header(&c->sha, path, type, mode, type == 'f' ? (uint64_t)size : 0, target);
        c->entries++;
        if (type != 'f')
                return 0;
        return check_data(c, path, (uint64_t)size);
}

static int check_manifest_entry(Check *c, struct archive_entry *e) {
        if (c->manifest)
                return archive_err(c->err, c->errlen, "archive has more than one %s", ARCHIVE_MANIFEST);
        if (archive_entry_filetype(e) != AE_IFREG || archive_hardlink_of(e))
                return archive_err(c->err, c->errlen, "archive manifest: not a regular file");
        la_int64_t size = archive_entry_size(e);
        if (size < 0 || (uint64_t)size > SBX_MAX_MANIFEST_BYTES)
                return archive_err(c->err, c->errlen, "archive manifest: too large (%lld bytes, the limit is %u)",
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
                return archive_err(c->err, c->errlen, "archive manifest: truncated");
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

/* A session state as the bash builtin writes it: its magic, then sections "T:LEN\n" + LEN
 * bytes + "\n". Checked here so that an import never clears a sandbox for states it could
 * not apply. */
int archive_state_walk(const uint8_t *p, size_t len, ArchiveStateFn fn, void *ud) {
        static const char magic[] = "SBXSTATE 1\n";
        if (len < sizeof magic - 1 || memcmp(p, magic, sizeof magic - 1) != 0)
                return -EINVAL;
        size_t i = sizeof magic - 1;
        while (i < len) {
                if (len - i < 4 || p[i] < 'A' || p[i] > 'Z' || p[i + 1] != ':')
                        return -EINVAL;
                size_t j = i + 2;
                uint64_t l = 0;
                while (j < len && p[j] >= '0' && p[j] <= '9' && j - i < 22)
                        l = l * 10 + (uint64_t)(p[j++] - '0');
                if (j == i + 2 || j >= len || p[j] != '\n' || l > len - j - 1 || len - j - 1 - l < 1 || p[j + 1 + l] != '\n')
                        return -EINVAL;
                int r = fn ? fn(ud, (char)p[i], p + j + 1, (size_t)l) : 0;
                if (r < 0)
                        return r;
                i = j + 2 + (size_t)l;
        }
        return 0;
}

static int parse_sessions(Check *c, json_t *arr, ArchiveMeta *m) {
        if (!json_is_array(arr))
                return archive_err(c->err, c->errlen, "archive manifest: missing or invalid sessions");
        size_t n = json_array_size(arr);
        if (n > SBX_MAX_SESSIONS)
                return archive_err(c->err, c->errlen, "archive manifest: %zu sessions, the limit is %u", n, SBX_MAX_SESSIONS);
        if (n && !(m->sessions = calloc(n, sizeof *m->sessions)))
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                json_t *s = json_array_get(arr, i);
                const char *name = json_string_value(json_object_get(s, "name"));
                json_t *state = json_object_get(s, "state");
                if (!json_is_object(s) || !name || !json_is_string(state))
                        return archive_err(c->err, c->errlen, "archive manifest: session %zu lacks a name or state", i);
                if (!name_valid(name, SBX_MAX_SESSION_NAME_BYTES))
                        return archive_err(c->err, c->errlen, "archive manifest: invalid session name \"%.80s\"", name);
                for (size_t j = 0; j < i; j++)
                        if (strcmp(m->sessions[j].name, name) == 0)
                                return archive_err(c->err, c->errlen, "archive manifest: duplicate session %s", name);
                ArchiveSession *out = &m->sessions[m->n_sessions];
                if (!(out->name = strdup(name)))
                        return -ENOMEM;
                m->n_sessions++;
                out->state = b64_decode(json_string_value(state), json_string_length(state), &out->state_len);
                if (!out->state)
                        return errno == ENOMEM ? -ENOMEM
                                               : archive_err(c->err, c->errlen, "archive manifest: session %s: state is not base64", name);
                if (archive_state_walk(out->state, out->state_len, NULL, NULL) < 0)
                        return archive_err(c->err, c->errlen, "archive manifest: session %s: not a session state", name);
        }
        return 0;
}

static int check_manifest(Check *c, ArchiveMeta *m) {
        json_error_t je;
        if (json_marks(c->manifest, c->manifest_len, "{[") > SBX_MAX_MANIFEST_NODES)
                return archive_err(c->err, c->errlen, "archive manifest: more than %u objects and arrays",
                                   SBX_MAX_MANIFEST_NODES);
        json_t *root = json_loadb(c->manifest, c->manifest_len, JSON_REJECT_DUPLICATES, &je);
        if (!root)
                return archive_err(c->err, c->errlen, "archive manifest: not valid JSON (line %d: %s)", je.line, je.text);
        int r = 0;
        uint64_t v;
        const char *fmt = json_string_value(json_object_get(root, "format"));
        json_t *limits = json_object_get(root, "limits"), *payload = json_object_get(root, "payload");
        const char *sha = json_string_value(json_object_get(payload, "sha256"));
        uint64_t entries = 0, bytes = 0;
        if (!json_is_object(root))
                r = archive_err(c->err, c->errlen, "archive manifest: not a JSON object");
        else if (!fmt || strcmp(fmt, ARCHIVE_FORMAT) != 0)
                r = archive_err(c->err, c->errlen, "archive manifest: format is \"%.64s\", not %s", fmt ? fmt : "(missing)",
                                ARCHIVE_FORMAT);
        else if (!json_is_integer(json_object_get(root, "version")))
                r = archive_err(c->err, c->errlen, "archive manifest: missing or invalid version");
        else if (json_integer_value(json_object_get(root, "version")) != ARCHIVE_VERSION)
                r = archive_err(c->err, c->errlen, "archive manifest: unsupported version %lld",
                                (long long)json_integer_value(json_object_get(root, "version")));
        else if (!get_u64(root, "createdAt", UINT64_MAX, &m->created_ms))
                r = archive_err(c->err, c->errlen, "archive manifest: missing or invalid createdAt");
        else if (!json_is_object(limits))
                r = archive_err(c->err, c->errlen, "archive manifest: missing or invalid limits");
        else if (!json_is_object(payload) || !sha || !get_u64(payload, "entries", UINT64_MAX, &entries) ||
                 !get_u64(payload, "bytes", UINT64_MAX, &bytes))
                r = archive_err(c->err, c->errlen, "archive manifest: missing or invalid payload");
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
                        r = archive_err(c->err, c->errlen, "archive manifest: missing or invalid limits.%s", lims[i].key);
                        goto out;
                }
        m->limits.pids = (uint32_t)v;
        if ((r = parse_sessions(c, json_object_get(root, "sessions"), m)) < 0)
                goto out;
        char hex[SHA256_HEX_SIZE];
        sha256_digest_hex(&c->sha, hex);
        if (strcmp(sha, hex) != 0)
                r = archive_err(c->err, c->errlen, "archive checksum mismatch");
        else if (entries != c->entries || bytes != c->bytes)
                r = archive_err(c->err, c->errlen,
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
        if (archive_tree_init(&c->paths) < 0 || archive_tree_add_tops(&c->paths, KIND_IMPLICIT_DIR) < 0)
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
                                return archive_err(c->err, c->errlen, "not an sbx archive: not a zstd-compressed tar");
                        first = false;
                        if (r == ARCHIVE_EOF)
                                break;
                }
                if (r < ARCHIVE_WARN)
                        return check_read_fail(c);
                /* A path past PATH_MAX (a deep tree) takes a pax header of its length, on top of
                 * the per-entry slack: allowed for what the entry really names. */
                const char *raw = archive_name_of(e), *link = archive_symlink_of(e);
                if (!link)
                        link = archive_hardlink_of(e);
                c->max_read = add_sat(c->max_read, (raw ? strnlen(raw, SBX_MAX_ARCHIVE_PATH_BYTES) : 0) +
                                                           (link ? strnlen(link, SBX_MAX_ARCHIVE_PATH_BYTES) : 0));
                if ((r = check_stream_bound(c)) < 0)
                        return r;
                if (c->manifest)
                        return archive_err(c->err, c->errlen, "archive entry %s: after the manifest", raw ? raw : "");
                if (raw && strcmp(raw, ARCHIVE_MANIFEST) == 0)
                        r = check_manifest_entry(c, e);
                else
                        r = check_entry(c, e, raw);
                if (r < 0)
                        return r;
        }
        if (!c->manifest)
                return archive_err(c->err, c->errlen, "not an sbx archive: no %s", ARCHIVE_MANIFEST);
        /* Last, extraction sets the directories' modes and times, children first: in
         * decreasing order of their nodes (see ArchiveTree). */
        for (size_t i = c->paths.n; i-- > 0;) {
                int r = c->paths.nodes[i].kind == KIND_DIR ? check_walk(c, c->paths.nodes[i].parent) : 0;
                if (r < 0)
                        return r;
        }
        return check_manifest(c, m);
}

int archive_check(const uint8_t *data, size_t len, const ArchiveLimits *limits, ArchiveMeta *meta, char *err,
                  size_t errlen) {
        if (err && errlen)
                err[0] = 0;
        if (!limits)
                return archive_err(err, errlen, "archive check: no limits given");
        ArchiveMeta m = { 0 };
        Check c = { .limits = limits, .err = err, .errlen = errlen };
        sha256_init(&c.sha);
        c.buf = malloc(SBX_ARCHIVE_IO_BUF);
        if (!c.buf)
                return -ENOMEM;
        int r;
        c.a = archive_reader_open(data, len);
        if (!c.a)
                r = archive_err(err, errlen, "not an sbx archive: not a zstd-compressed tar");
        else
                r = check_all(&c, &m);
        if (c.a)
                archive_read_free(c.a);
        archive_tree_free(&c.paths);
        archive_cursor_free(&c.cursor);
        free(c.manifest);
        free(c.buf);
        if (r == -ENOMEM)
                archive_err(err, errlen, "archive check: out of memory");
        if (r < 0 || !meta)
                archive_meta_clear(&m);
        else {
                archive_meta_clear(meta);
                *meta = m;
        }
        return r;
}
