/* SPDX-License-Identifier: MIT */
/* The import job: from an OCI layout directory, an OCI archive or a docker/podman save tar to
 * layers and a record in the store. Runs in a job process (oci_import_run() is its JobFn),
 * holding the store's lock exclusively. Everything it reads is untrusted: JSON is bounded in
 * size and checked field by field, indexes may not loop, each digest is checked against the
 * bytes (the config's against the manifest's word, each layer's diff id against the config's,
 * an OCI layer's blob against the manifest's), and files of an archive or a layout directory
 * are opened beneath it (RESOLVE_IN_ROOT: its symlinks stay inside). */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <pwd.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/sha256.h"
#include "base/util.h"
#include "fs/tree.h"
#include "oci/oci_private.h"

typedef struct Plan {
        const char *format;     /* "oci" or "docker" */
        json_t *config;         /* the image config */
        char id_hex[65];        /* its digest */
        char manifest[72];      /* the manifest's digest ("" for a docker archive) */
        char *blobs[SBX_IMAGE_MAX_LAYERS];   /* each layer's file beneath the source */
        char blob_hex[SBX_IMAGE_MAX_LAYERS][65]; /* ... and its digest ("" when not known) */
        size_t n_layers;
        json_t *names;          /* array of normalized names */
} Plan;

static void plan_done(Plan *p) {
        json_decref(p->config);
        json_decref(p->names);
        for (size_t i = 0; i < p->n_layers; i++)
                free(p->blobs[i]);
}

static _printf_(3, 4) int fail(char *err, size_t errlen, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

/* The user whose rights the source is read with (ImportJob.as_uid): a client of the daemon
 * may import only what it could read itself. */
static struct {
        bool on;
        uid_t uid;
        gid_t gid;
        gid_t groups[64];
        int n_groups;
} client;

static int client_init(uid_t uid, char *err, size_t errlen) {
        client.on = false;
        if (uid == (uid_t)-1 || geteuid() != 0 || uid == 0)
                return 0;
        struct passwd *pw = getpwuid(uid);
        client.uid = uid;
        client.gid = pw ? pw->pw_gid : (gid_t)65534;
        client.n_groups = ELEMENTSOF(client.groups);
        if (!pw || getgrouplist(pw->pw_name, pw->pw_gid, client.groups, &client.n_groups) < 0)
                client.groups[0] = client.gid, client.n_groups = 1;
        client.on = true;
        (void)err, (void)errlen;
        return 0;
}

/* Takes the client's rights for an open (on), or the job's own back. */
static void as_client(bool on) {
        static gid_t own_groups[64];
        static int n_own = -1;
        static bool is_on;
        if (!client.on || on == is_on)
                return;
        is_on = on;
        if (on) {
                if (n_own < 0)
                        n_own = getgroups(ELEMENTSOF(own_groups), own_groups);
                (void)!setgroups((size_t)client.n_groups, client.groups);
                (void)!setfsgid(client.gid);
                (void)!setfsuid(client.uid);
        } else {
                (void)!setfsuid(0);
                (void)!setfsgid(0);
                (void)!setgroups(n_own > 0 ? (size_t)n_own : 0, own_groups);
        }
}

/* The source is a directory of the client's (a layout), not an archive unpacked by the job. */
static bool src_is_clients;

/* Opens the regular file rel beneath src (with the client's rights when it is the client's):
 * its symlinks resolve inside src, never to the host; O_NONBLOCK, so a FIFO cannot hold the
 * job (which holds the store's lock). -EINVAL for anything but a regular file. */
static int open_beneath(int src, const char *rel) {
        struct open_how how = { .flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
                                .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV };
        as_client(src_is_clients);
        long fd = syscall(SYS_openat2, src, rel, &how, sizeof how);
        int e = errno;
        as_client(false);
        if (fd < 0)
                return -e;
        struct stat st;
        if (fstat((int)fd, &st) < 0 || !S_ISREG(st.st_mode) || fcntl((int)fd, F_SETFL, O_RDONLY) < 0) {
                close((int)fd);
                return -EINVAL;
        }
        return (int)fd;
}

/* Reads a JSON file beneath src (at most SBX_IMAGE_JSON_BYTES); hex gets its sha256 when
 * not NULL. */
static json_t *read_json(int src, const char *rel, char *hex, char *err, size_t errlen) {
        _cleanup_close_ int fd = open_beneath(src, rel);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0) {
                fail(err, errlen, "image: cannot open %.200s: %s", rel, fd == -EINVAL ? "not a file" : strerror(-fd));
                return NULL;
        }
        if (!S_ISREG(st.st_mode) || st.st_size > SBX_IMAGE_JSON_BYTES) {
                fail(err, errlen, "image: %.200s is no file of at most %u bytes", rel, SBX_IMAGE_JSON_BYTES);
                return NULL;
        }
        size_t size = (size_t)st.st_size, n = 0;
        _cleanup_free_ char *buf = malloc(size + 1);
        while (buf && n < size) {
                ssize_t k = read(fd, buf + n, size - n);
                if (k <= 0)
                        break;
                n += (size_t)k;
        }
        if (!buf || n != size) {
                fail(err, errlen, "image: cannot read %.200s", rel);
                return NULL;
        }
        if (hex) {
                struct sha256_ctx c;
                sha256_init(&c);
                sha256_feed(&c, buf, size);
                sha256_digest_hex(&c, hex);
        }
        json_error_t je;
        json_t *j = json_loadb(buf, size, JSON_REJECT_DUPLICATES, &je);
        if (!j)
                fail(err, errlen, "image: %.200s is not JSON: %s (line %d)", rel, je.text, je.line);
        return j;
}

static const char *host_arch(void) {
        struct utsname u;
        if (uname(&u) < 0)
                return "";
        static const char *const map[][2] = { { "x86_64", "amd64" }, { "aarch64", "arm64" }, { "armv7l", "arm" },
                                              { "i686", "386" }, { "ppc64le", "ppc64le" }, { "s390x", "s390x" },
                                              { "riscv64", "riscv64" } };
        for (size_t i = 0; i < ELEMENTSOF(map); i++)
                if (strcmp(u.machine, map[i][0]) == 0)
                        return map[i][1];
        return "";
}

static bool is_index(const char *mt) {
        return mt && (strcmp(mt, "application/vnd.oci.image.index.v1+json") == 0 ||
                      strcmp(mt, "application/vnd.docker.distribution.manifest.list.v2+json") == 0);
}

static bool is_manifest(const char *mt) {
        return mt && (strcmp(mt, "application/vnd.oci.image.manifest.v1+json") == 0 ||
                      strcmp(mt, "application/vnd.docker.distribution.manifest.v2+json") == 0);
}

static bool layer_type_ok(const char *mt) {
        static const char *const ok[] = {
                "application/vnd.oci.image.layer.v1.tar", "application/vnd.oci.image.layer.v1.tar+gzip",
                "application/vnd.oci.image.layer.v1.tar+zstd", "application/vnd.oci.image.layer.nondistributable.v1.tar",
                "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
                "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
                "application/vnd.docker.image.rootfs.diff.tar.gzip", "application/vnd.docker.image.rootfs.diff.tar",
        };
        for (size_t i = 0; mt && i < ELEMENTSOF(ok); i++)
                if (strcmp(mt, ok[i]) == 0)
                        return true;
        return false;
}

static int add_name(Plan *p, const char *name, char *err, size_t errlen) {
        char n[SBX_IMAGE_NAME_BYTES], e[256];
        if (!oci_name_normalize(name, n, sizeof n, e, sizeof e))
                return fail(err, errlen, "%s", e);
        size_t i;
        json_t *x;
        json_array_foreach(p->names, i, x) if (strcmp(json_string_value(x), n) == 0) return 0;
        if (json_array_size(p->names) >= SBX_IMAGE_MAX_NAMES)
                return 0;
        json_array_append_new(p->names, json_string(n));
        return 0;
}

/* An index's entry whose platform is this machine's (or says none). */
static bool platform_ok(json_t *desc) {
        json_t *pl = json_object_get(desc, "platform");
        if (!pl)
                return true;
        const char *os = json_string_value(json_object_get(pl, "os"));
        const char *arch = json_string_value(json_object_get(pl, "architecture"));
        return (!os || strcmp(os, "linux") == 0) && (!arch || strcmp(arch, host_arch()) == 0);
}

static int blob_path(const char *digest, char *out, size_t size, const char **hex) {
        if (!oci_digest_valid(digest, hex))
                return -EINVAL;
        snprintf(out, size, "blobs/sha256/%s", *hex);
        return 0;
}

/* Follows an OCI descriptor to an image manifest, through indexes; fills p's manifest. */
static int oci_follow(int src, json_t *desc, unsigned depth, char seen[][65], Plan *p, char *err, size_t errlen) {
        const char *digest = json_string_value(json_object_get(desc, "digest")), *hex;
        const char *mt = json_string_value(json_object_get(desc, "mediaType"));
        char path[96], got[65];
        if (blob_path(digest, path, sizeof path, &hex) < 0)
                return fail(err, errlen, "image: a descriptor has no sha256 digest");
        if (depth >= SBX_IMAGE_INDEX_DEPTH)
                return fail(err, errlen, "image: indexes nested more than %u deep", SBX_IMAGE_INDEX_DEPTH);
        for (unsigned i = 0; i < depth; i++)
                if (strcmp(seen[i], hex) == 0)
                        return fail(err, errlen, "image: index %.19s... leads back to itself", digest);
        memcpy(seen[depth], hex, 65);
        _cleanup_(json_decrefp) json_t *j = read_json(src, path, got, err, errlen);
        if (!j)
                return -EINVAL;
        if (strcmp(got, hex) != 0)
                return fail(err, errlen, "image: %s does not match its digest (sha256:%s)", path, got);
        if (!mt)
                mt = json_string_value(json_object_get(j, "mediaType"));
        if (is_index(mt) || (!mt && json_is_array(json_object_get(j, "manifests")))) {
                json_t *ms = json_object_get(j, "manifests"), *m;
                size_t i;
                json_array_foreach(ms, i, m) if (platform_ok(m)) return oci_follow(src, m, depth + 1, seen, p, err, errlen);
                return fail(err, errlen, "image: no manifest for linux/%s in index %.19s...", host_arch(), digest);
        }
        if (mt && !is_manifest(mt))
                return fail(err, errlen, "image: %.100s is no image manifest", mt);
        snprintf(p->manifest, sizeof p->manifest, "%s", digest);
        json_t *config = json_object_get(j, "config"), *layers = json_object_get(j, "layers"), *l;
        const char *chex;
        if (blob_path(json_string_value(json_object_get(config, "digest")), path, sizeof path, &chex) < 0)
                return fail(err, errlen, "image: the manifest has no config digest");
        if (!(p->config = read_json(src, path, p->id_hex, err, errlen)))
                return -EINVAL;
        if (strcmp(p->id_hex, chex) != 0)
                return fail(err, errlen, "image: the config does not match its digest (sha256:%s)", p->id_hex);
        if (!json_is_array(layers) || json_array_size(layers) == 0 || json_array_size(layers) > SBX_IMAGE_MAX_LAYERS)
                return fail(err, errlen, "image: a manifest has 1 to %u layers", SBX_IMAGE_MAX_LAYERS);
        size_t i;
        json_array_foreach(layers, i, l) {
                const char *lt = json_string_value(json_object_get(l, "mediaType")), *lhex;
                if (!layer_type_ok(lt))
                        return fail(err, errlen, "image: layer %zu is of type %.100s, which sbx cannot unpack", i,
                                    lt ? lt : "(none)");
                if (blob_path(json_string_value(json_object_get(l, "digest")), path, sizeof path, &lhex) < 0)
                        return fail(err, errlen, "image: layer %zu has no sha256 digest", i);
                if (!(p->blobs[i] = strdup(path)))
                        return -ENOMEM;
                memcpy(p->blob_hex[i], lhex, 65);
                p->n_layers = i + 1;
        }
        return 0;
}

static int plan_oci(int src, const char *want, Plan *p, char *err, size_t errlen) {
        _cleanup_(json_decrefp) json_t *index = read_json(src, "index.json", NULL, err, errlen);
        if (!index)
                return -EINVAL;
        json_t *ms = json_object_get(index, "manifests"), *m, *pick = NULL;
        if (!json_is_array(ms) || json_array_size(ms) == 0)
                return fail(err, errlen, "image: index.json lists no manifest");
        size_t i;
        json_array_foreach(ms, i, m) {
                json_t *ann = json_object_get(m, "annotations");
                const char *names[] = { json_string_value(json_object_get(ann, "io.containerd.image.name")),
                                        json_string_value(json_object_get(ann, "org.opencontainers.image.ref.name")) };
                char n[SBX_IMAGE_NAME_BYTES], e[256];
                for (size_t k = 0; k < ELEMENTSOF(names); k++) {
                        /* A ref.name alone may be just a tag ("latest"): a name needs a repository. */
                        if (!names[k] || (k == 1 && !strchr(names[k], ':') && !strchr(names[k], '/')))
                                continue;
                        if (oci_name_normalize(names[k], n, sizeof n, e, sizeof e)) {
                                if (!want && !pick)
                                        pick = m;
                                if (want && strcmp(n, want) == 0)
                                        pick = m;
                                if (pick == m)
                                        (void)add_name(p, names[k], err, errlen);
                                break;
                        }
                }
        }
        if (!pick)
                pick = json_array_get(ms, 0);
        char seen[SBX_IMAGE_INDEX_DEPTH][65];
        return oci_follow(src, pick, 0, seen, p, err, errlen);
}

/* A relative path of manifest.json: no absolute path, no "..". */
static bool rel_ok(const char *s) {
        return s && s[0] && s[0] != '/' && !strstr(s, "..") && strlen(s) < SBX_MAX_PATH_BYTES;
}

static int plan_docker(int src, const char *want, Plan *p, char *err, size_t errlen) {
        _cleanup_(json_decrefp) json_t *man = read_json(src, "manifest.json", NULL, err, errlen);
        if (!man)
                return -EINVAL;
        json_t *m, *pick = NULL, *t;
        size_t i, k;
        if (!json_is_array(man) || json_array_size(man) == 0)
                return fail(err, errlen, "image: manifest.json lists no image");
        json_array_foreach(man, i, m) {
                json_array_foreach(json_object_get(m, "RepoTags"), k, t) {
                        char n[SBX_IMAGE_NAME_BYTES], e[256];
                        if (want && json_is_string(t) && oci_name_normalize(json_string_value(t), n, sizeof n, e, sizeof e) &&
                            strcmp(n, want) == 0 && !pick)
                                pick = m;
                }
        }
        if (!pick)
                pick = json_array_get(man, 0);
        json_array_foreach(json_object_get(pick, "RepoTags"), k, t) if (json_is_string(t))(void) add_name(p, json_string_value(t), err, errlen);
        const char *cfg = json_string_value(json_object_get(pick, "Config"));
        json_t *layers = json_object_get(pick, "Layers"), *l;
        if (!rel_ok(cfg))
                return fail(err, errlen, "image: manifest.json names no config");
        if (!(p->config = read_json(src, cfg, p->id_hex, err, errlen)))
                return -EINVAL;
        if (!json_is_array(layers) || json_array_size(layers) == 0 || json_array_size(layers) > SBX_IMAGE_MAX_LAYERS)
                return fail(err, errlen, "image: an image has 1 to %u layers", SBX_IMAGE_MAX_LAYERS);
        json_array_foreach(layers, i, l) {
                if (!rel_ok(json_string_value(l)))
                        return fail(err, errlen, "image: layer %zu of manifest.json is no path beneath the archive", i);
                if (!(p->blobs[i] = strdup(json_string_value(l))))
                        return -ENOMEM;
                p->n_layers = i + 1;
        }
        return 0;
}

/* Entrypoint then Cmd as one bash command line, each word single-quoted (what the image would
 * run, offered to the caller: sbx runs nothing unasked); JSON null when the image names none. */
static json_t *start_command(json_t *entrypoint, json_t *cmd) {
        size_t len = 0, i;
        json_t *parts[2] = { entrypoint, cmd }, *w;
        for (size_t k = 0; k < 2; k++)
                json_array_foreach(parts[k], i, w) len += 3 + 4 * strlen(json_string_value(w));
        if (!len)
                return json_null();
        _cleanup_free_ char *out = malloc(len + 1);
        if (!out)
                return json_null();
        char *o = out;
        for (size_t k = 0; k < 2; k++)
                json_array_foreach(parts[k], i, w) {
                        if (o != out)
                                *o++ = ' ';
                        *o++ = '\'';
                        for (const char *c = json_string_value(w); *c; c++)
                                if (*c == '\'') {
                                        memcpy(o, "'\\''", 4);
                                        o += 4;
                                } else {
                                        *o++ = *c;
                                }
                        *o++ = '\'';
                }
        *o = 0;
        return json_string(out) ?: json_null();
}

/* The config's fields as a record keeps them; checks what the sandbox will use. */
static json_t *record_config(const Plan *p, char *err, size_t errlen) {
        json_t *c = p->config, *cc = json_object_get(c, "config");
        const char *os = json_string_value(json_object_get(c, "os"));
        const char *arch = json_string_value(json_object_get(c, "architecture"));
        if (os && strcmp(os, "linux") != 0) {
                fail(err, errlen, "image: it is for %.40s, not linux", os);
                return NULL;
        }
        if (arch && host_arch()[0] && strcmp(arch, host_arch()) != 0) {
                fail(err, errlen, "image: it is for %.40s; this machine runs %s", arch, host_arch());
                return NULL;
        }
        json_t *env = json_object_get(cc, "Env"), *x;
        size_t i;
        if (env && !json_is_null(env)) {
                if (!json_is_array(env) || json_array_size(env) > 4096) {
                        fail(err, errlen, "image: config Env is no array of NAME=VALUE");
                        return NULL;
                }
                json_array_foreach(env, i, x) {
                        const char *s = json_string_value(x), *eq = s ? strchr(s, '=') : NULL;
                        if (!eq || eq == s || !env_name_valid(s, (size_t)(eq - s))) {
                                fail(err, errlen, "image: config Env[%zu] is not NAME=VALUE", i);
                                return NULL;
                        }
                }
        }
        json_t *out = json_object();
        json_object_set_new(out, "env", env && json_is_array(env) ? json_deep_copy(env) : json_array());
        static const char *const keys[][2] = { { "WorkingDir", "workingDir" }, { "User", "user" } };
        for (size_t k = 0; k < ELEMENTSOF(keys); k++) {
                json_t *v = json_object_get(cc, keys[k][0]);
                json_object_set_new(out, keys[k][1], json_is_string(v) ? json_deep_copy(v) : json_string(""));
        }
        static const char *const lists[][2] = { { "Entrypoint", "entrypoint" }, { "Cmd", "cmd" } };
        for (size_t k = 0; k < ELEMENTSOF(lists); k++) {
                json_t *v = json_object_get(cc, lists[k][0]);
                bool ok = json_is_array(v) && json_array_size(v) <= 4096;
                json_array_foreach(v, i, x) ok = ok && json_is_string(x);
                json_object_set_new(out, lists[k][1], ok ? json_deep_copy(v) : json_null());
        }
        json_object_set_new(out, "startCommand", start_command(json_object_get(out, "entrypoint"),
                                                               json_object_get(out, "cmd")));
        json_object_set_new(out, "architecture", json_string(arch ? arch : ""));
        json_object_set_new(out, "os", json_string("linux"));
        json_t *created = json_object_get(c, "created");
        json_object_set_new(out, "created", json_is_string(created) ? json_deep_copy(created) : json_null());
        return out;
}

/* Bytes and entries of a layer the store has, from a record that lists it. */
static json_t *known_layer(const ImportJob *j, const char *hex) {
        for (size_t i = 0; i < j->n_images; i++) {
                json_t *ls = json_object_get(j->images[i]->record, "layers"), *l;
                size_t k;
                json_array_foreach(ls, k, l) {
                        const char *h = json_string_value(json_object_get(l, "diffId"));
                        if (h && strlen(h) == 71 && strcmp(h + 7, hex) == 0)
                                return l;
                }
        }
        return NULL;
}

/* lstat of rel inside layer hex, no symlink followed on the way (a layer's usr may be a link to
 * anywhere); a symlink's target goes to link (size bytes, "" when unreadable) when it is not
 * NULL. Returns 0 or -errno. */
static int layer_lstat(int store, const char *hex, const char *rel, struct stat *st, char *link, size_t size) {
        char path[200];
        snprintf(path, sizeof path, "layers/%.64s/%s", hex, rel);
        struct open_how how = { .flags = O_PATH | O_NOFOLLOW | O_CLOEXEC, .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH };
        _cleanup_close_ int fd = (int)syscall(SYS_openat2, store, path, &how, sizeof how);
        if (fd < 0 || fstat(fd, st) < 0)
                return negerrno();
        if (link && S_ISLNK(st->st_mode)) {
                ssize_t n = readlinkat(fd, "", link, size - 1);
                link[n > 0 ? n : 0] = 0;
        }
        return 0;
}

/* Whether the image has /bin/bash: the topmost layer that has bin (a symlink to usr/bin, as
 * merged-/usr systems have it, or a directory) and then bash in it, nothing followed out of a
 * layer. */
static bool has_bash(int store, const Plan *p, char diff_hex[][65]) {
        const char *where = NULL;
        for (size_t i = p->n_layers; i-- > 0 && !where;) {
                char target[64];
                struct stat st;
                if (layer_lstat(store, diff_hex[i], "bin", &st, target, sizeof target) < 0)
                        continue;
                if (S_ISLNK(st.st_mode)) {
                        where = strcmp(target, "usr/bin") == 0 || strcmp(target, "/usr/bin") == 0 ? "usr/bin/bash" : "";
                } else {
                        where = S_ISDIR(st.st_mode) ? "bin/bash" : "";
                }
        }
        for (size_t i = p->n_layers; where && where[0] && i-- > 0;) {
                struct stat st;
                if (layer_lstat(store, diff_hex[i], where, &st, NULL, 0) == 0)
                        return S_ISREG(st.st_mode) || S_ISLNK(st.st_mode);
        }
        return false;
}

/* Where the import is, told to the loop (ImportJob.progress); a failed write is no failure. */
static int progress_fd = -1;
static OciProgress progress_now;

static void progress_send(void) {
        if (progress_fd >= 0)
                (void)!write(progress_fd, &progress_now, sizeof progress_now);
}

static void progress_bytes(uint64_t bytes) {
        progress_now.bytes = bytes;
        progress_send();
}

/* The layers this job moved into layers/: set aside again if it fails after. */
static char moved[SBX_IMAGE_MAX_LAYERS][65];
static size_t n_moved;

/* Moves layers/HEX into tmp/ of the store (which is cleared after). */
static int set_aside(int store, const char *hex) {
        char from[160], to[200], rnd[9];
        (void)random_hex(rnd, 4);
        snprintf(from, sizeof from, "layers/%.64s", hex);
        snprintf(to, sizeof to, "tmp/gone-%s-%.64s", rnd, hex);
        return renameat(store, from, store, to) < 0 && errno != ENOENT ? negerrno() : 0;
}

/* Unpacks layer i into work/L and moves it into layers/ when its digests hold. */
static int take_layer(int store, int src, const char *work, const Plan *p, size_t i, const char *want_diff,
                      uint64_t *room, json_t *out, char *err, size_t errlen) {
        char tmp[160], final[160], blob[65], diff[65];
        snprintf(tmp, sizeof tmp, "%s/L%zu", work, i);
        snprintf(final, sizeof final, "layers/%.64s", want_diff);
        _cleanup_close_ int in = open_beneath(src, p->blobs[i]);
        struct stat st;
        if (in < 0 || fstat(in, &st) < 0 || !S_ISREG(st.st_mode))
                return fail(err, errlen, "image: layer %zu (%.200s) cannot be read: %s", i, p->blobs[i],
                            in < 0 ? strerror(-in) : "not a file");
        _cleanup_close_ int dst = mkdirat(store, tmp, 0755) < 0 ? -1 : openat(store, tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dst < 0)
                return fail(err, errlen, "image: make %s in the store: %s", tmp, strerror(errno)), -EIO;
        UnpackStats us;
        oci_unpack_progress = progress_bytes;
        int r = oci_unpack_layer(in, dst, *room, &us, blob, diff, err, errlen);
        oci_unpack_progress = NULL;
        if (r < 0)
                return r;
        if (p->blob_hex[i][0] && strcmp(blob, p->blob_hex[i]) != 0)
                return fail(err, errlen, "image: layer %zu does not match its digest: the manifest says sha256:%.12s..., "
                            "its bytes are sha256:%.12s...", i, p->blob_hex[i], blob);
        if (strcmp(diff, want_diff) != 0)
                return fail(err, errlen, "image: layer %zu does not match its diff id: the config says sha256:%.12s..., "
                            "its tar is sha256:%.12s...", i, want_diff, diff);
        if (renameat(store, tmp, store, final) < 0)
                return fail(err, errlen, "image: move layer %zu into the store: %s", i, strerror(errno));
        snprintf(moved[n_moved++], sizeof moved[0], "%.64s", want_diff);
        *room -= MIN(*room, us.bytes);
        json_object_set_new(out, "bytes", json_integer((json_int_t)us.bytes));
        json_object_set_new(out, "entries", json_integer((json_int_t)us.entries));
        json_object_set_new(out, "dropped", json_integer((json_int_t)us.dropped));
        json_object_set_new(out, "stripped", json_integer((json_int_t)us.stripped));
        return 0;
}

static void remove_work(int store, const char *work) {
        char e[128];
        _cleanup_close_ int d = openat(store, work, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (d >= 0 && tree_clear(d, e, sizeof e) >= 0)
                (void)unlinkat(store, work, AT_REMOVEDIR);
}

/* Other images that had one of the new image's names lose it (a name is one image's). */
static int move_names(int store, const ImportJob *j, const char *id, json_t *names) {
        for (size_t i = 0; i < j->n_images; i++) {
                OciImage *o = j->images[i];
                if (strcmp(o->id, id) == 0)
                        continue;
                char *keep[SBX_IMAGE_MAX_NAMES + 1];
                size_t n = 0;
                bool lost = false;
                for (size_t k = 0; o->names[k]; k++) {
                        bool taken = false;
                        size_t x;
                        json_t *v;
                        json_array_foreach(names, x, v) taken = taken || strcmp(json_string_value(v), o->names[k]) == 0;
                        if (taken)
                                lost = true;
                        else if (n < SBX_IMAGE_MAX_NAMES)
                                keep[n++] = o->names[k];
                }
                keep[n] = NULL;
                if (!lost)
                        continue;
                _cleanup_(json_decrefp) json_t *rec = oci_record_with_names(o->record, keep);
                int r = rec ? oci_record_write(store, rec) : -ENOMEM;
                if (r < 0)
                        return r;
        }
        return 0;
}

static bool want_small(const char *path, uint64_t size, void *ud) { return size <= SBX_IMAGE_JSON_BYTES; }

static bool want_missing(const char *path, uint64_t size, void *ud) {
        return faccessat(*(int *)ud, path, F_OK, AT_SYMLINK_NOFOLLOW) < 0;
}

/* The rest of an archive's files, when a layer to unpack is among them. */
static int archive_rest(ImportJob *j, int store, int afd, int src, const Plan *p, char diff_hex[][65], char *err,
                        size_t errlen) {
        bool needed = false;
        struct stat st;
        for (size_t i = 0; i < p->n_layers && !needed; i++) {
                char path[160];
                snprintf(path, sizeof path, "layers/%.64s", diff_hex[i]);
                needed = fstatat(store, path, &st, AT_SYMLINK_NOFOLLOW) < 0;
        }
        if (!needed || afd < 0)
                return 0;
        UnpackStats us;
        UnpackFilter rest = { want_missing, &src };
        if (lseek(afd, 0, SEEK_SET) < 0)
                return fail(err, errlen, "image: read %.200s again: %s", j->path, strerror(errno)), -EIO;
        return oci_unpack_archive(afd, src, j->room, &rest, &us, err, errlen);
}

static int import(ImportJob *j, int store, const char *work, Plan *p, char *err, size_t errlen) {
        _cleanup_close_ int src = -1;
        int archive_fd = -1;
        struct stat st;
        const char *source;
        char want[SBX_IMAGE_NAME_BYTES] = "";
        if (j->name && !oci_name_normalize(j->name, want, sizeof want, err, errlen))
                return -EINVAL;
        as_client(true);
        int in = open(j->path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        as_client(false);
        if (in >= 0 && (fstat(in, &st) < 0 || (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)))) {
                close(in);
                return fail(err, errlen, "image: %.200s is neither a directory nor a file", j->path);
        }
        if (in >= 0)
                (void)fcntl(in, F_SETFL, O_RDONLY);
        if (in < 0 || fstat(in, &st) < 0) {
                int r = negerrno();
                safe_close(in);
                return fail(err, errlen, "image: cannot open %.200s: %s", j->path, strerror(-r)), r;
        }
        if (S_ISDIR(st.st_mode)) {
                src = in;
                src_is_clients = true;
                source = "oci-layout";
        } else if (S_ISREG(st.st_mode)) {
                /* An archive is unpacked beneath the store's tmp/ as a layer would be (no name out
                 * of it, no device), into the store's room, and read as a directory: first its
                 * small files (the JSON), then, only if a layer the store has not is in it, the
                 * rest. */
                char dir[160];
                UnpackStats us;
                snprintf(dir, sizeof dir, "%s/src", work);
                int r = mkdirat(store, dir, 0700) < 0 ? negerrno() : 0;
                if (r >= 0 && (src = openat(store, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
                        r = negerrno();
                UnpackFilter small = { want_small, NULL };
                if (r >= 0)
                        r = oci_unpack_archive(in, src, j->room, &small, &us, err, errlen);
                archive_fd = in;
                if (r < 0) {
                        close(in);
                        if (r == -EINVAL && strstr(err, "not a tar"))
                                fail(err, errlen, "image: %.200s is no tar (an OCI archive or a docker/podman save): %s",
                                     j->path, err);
                        return r;
                }
                source = "archive";
        } else {
                close(in);
                return fail(err, errlen, "image: %.200s is neither a directory nor a file", j->path);
        }
        _cleanup_close_ int afd = archive_fd;
        int r;
        bool oci = faccessat(src, "index.json", F_OK, AT_SYMLINK_NOFOLLOW) == 0;
        if (oci)
                r = plan_oci(src, want[0] ? want : NULL, p, err, errlen);
        else if (faccessat(src, "manifest.json", F_OK, AT_SYMLINK_NOFOLLOW) == 0)
                r = plan_docker(src, want[0] ? want : NULL, p, err, errlen);
        else
                return fail(err, errlen, "image: %.200s has neither index.json (an OCI layout) nor manifest.json (a "
                            "docker or podman save)", j->path);
        if (r < 0)
                return r;
        p->format = oci ? (strcmp(source, "archive") == 0 ? "oci-archive" : "oci-layout") : "docker-archive";
        if (want[0]) {
                json_array_clear(p->names);
                json_array_append_new(p->names, json_string(want));
        }
        _cleanup_(json_decrefp) json_t *config = record_config(p, err, errlen);
        if (!config)
                return -EINVAL;
        json_t *rootfs = json_object_get(p->config, "rootfs"), *diffs = json_object_get(rootfs, "diff_ids"), *x;
        if (!json_is_array(diffs) || json_array_size(diffs) != p->n_layers)
                return fail(err, errlen, "image: the config's rootfs.diff_ids do not match its %zu layers", p->n_layers);
        char diff_hex[SBX_IMAGE_MAX_LAYERS][65];
        size_t i;
        json_array_foreach(diffs, i, x) {
                const char *h;
                if (!oci_digest_valid(json_string_value(x), &h))
                        return fail(err, errlen, "image: diff id %zu is no sha256 digest", i);
                memcpy(diff_hex[i], h, 65);
        }
        if ((r = archive_rest(j, store, afd, src, p, diff_hex, err, errlen)) < 0)
                return r;
        json_t *layers = json_array();
        _cleanup_(json_decrefp) json_t *record = json_object();
        json_object_set_new(record, "layers", layers);
        uint64_t bytes = 0, fresh = 0;
        for (i = 0; i < p->n_layers; i++) {
                json_t *l = json_object(), *known;
                char final[160];
                json_array_append_new(layers, l);
                json_object_set_new(l, "diffId", json_sprintf("sha256:%s", diff_hex[i]));
                snprintf(final, sizeof final, "layers/%.64s", diff_hex[i]);
                /* Twice in one image: as the first time (the sandbox's overlay has it once). */
                size_t k = 0;
                while (k < i && strcmp(diff_hex[k], diff_hex[i]) != 0)
                        k++;
                if (k < i) {
                        json_t *first = json_array_get(layers, k);
                        json_object_set(l, "bytes", json_object_get(first, "bytes"));
                        json_object_set(l, "entries", json_object_get(first, "entries"));
                        continue;
                }
                uint64_t fresh_before = fresh;
                progress_now = (OciProgress){ .layer = (uint32_t)i + 1, .layers = (uint32_t)p->n_layers };
                progress_send();
                bool on_disk = fstatat(store, final, &st, AT_SYMLINK_NOFOLLOW) == 0;
                if (on_disk && S_ISDIR(st.st_mode) && (known = known_layer(j, diff_hex[i]))) {
                        json_object_set(l, "bytes", json_object_get(known, "bytes"));
                        json_object_set(l, "entries", json_object_get(known, "entries"));
                } else {
                        /* There but no record's: what an earlier job left; made again. */
                        if (on_disk && (r = set_aside(store, diff_hex[i])) < 0)
                                return fail(err, errlen, "image: set layer %zu aside: %s", i, strerror(-r)), r;
                        if ((r = take_layer(store, src, work, p, i, diff_hex[i], &j->room, l, err, errlen)) < 0)
                                return r;
                        fresh++;
                }
                bytes += (uint64_t)json_integer_value(json_object_get(l, "bytes"));
                progress_now.bytes = (uint64_t)json_integer_value(json_object_get(l, "bytes"));
                progress_now.done = 1;
                progress_now.have = fresh == fresh_before;
                progress_send();
        }
        /* The layers' files on disk before the record that names them. */
        if (fresh && syncfs(store) < 0)
                return fail(err, errlen, "image: sync the store: %s", strerror(errno)), -EIO;
        char id[72];
        snprintf(id, sizeof id, "sha256:%s", p->id_hex);
        /* Imported before under other names: it keeps them. */
        for (size_t k = 0; k < j->n_images; k++)
                if (strcmp(j->images[k]->id, id) == 0)
                        for (size_t n = 0; j->images[k]->names[n]; n++)
                                (void)add_name(p, j->images[k]->names[n], err, errlen);
        json_object_set_new(record, "id", json_string(id));
        json_object_set(record, "names", p->names);
        json_object_set_new(record, "bytes", json_integer((json_int_t)bytes));
        json_object_set_new(record, "bash", json_boolean(has_bash(store, p, diff_hex)));
        json_object_set_new(record, "config", json_incref(config));
        json_object_set_new(record, "source", json_string(p->format));
        json_object_set_new(record, "manifest", p->manifest[0] ? json_string(p->manifest) : json_null());
        json_object_set_new(record, "importedAt", json_integer((json_int_t)(wall_ms() / 1000)));
        json_object_set_new(record, "newLayers", json_integer((json_int_t)fresh));
        _cleanup_free_ char *text = json_dumps(record, JSON_COMPACT);
        if (text && strlen(text) > SBX_IMAGE_JSON_BYTES)
                return fail(err, errlen, "image: its config makes a record of more than %u bytes", SBX_IMAGE_JSON_BYTES);
        if ((r = move_names(store, j, id, p->names)) < 0 || (r = oci_record_write(store, record)) < 0)
                return fail(err, errlen, "image: write its record: %s", strerror(-r)), r;
        if (!text || write_all(j->out, text, strlen(text)) < 0)
                return fail(err, errlen, "image: hand its record over: %s", strerror(errno)), -EIO;
        return 0;
}

int oci_import_run(void *arg, char *err, size_t errlen) {
        ImportJob *j = arg;
        int r = oci_lock_for_change(j->lock, err, errlen);
        if (r < 0 || (r = client_init(j->as_uid, err, errlen)) < 0)
                return r;
        progress_fd = j->progress;
        _cleanup_close_ int store = open(j->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        char work[64], rnd[17];
        if (store < 0 || random_hex(rnd, 8) < 0)
                return fail(err, errlen, "image store %.200s: %s", j->dir, strerror(errno)), -EIO;
        snprintf(work, sizeof work, "tmp/import-%s", rnd);
        if (mkdirat(store, work, 0700) < 0)
                return fail(err, errlen, "image store: mkdir %s: %s", work, strerror(errno)), -EIO;
        Plan p = { .names = json_array() };
        r = p.names ? import(j, store, work, &p, err, errlen) : -ENOMEM;
        for (size_t i = 0; r < 0 && i < n_moved; i++)
                (void)set_aside(store, moved[i]);
        plan_done(&p);
        remove_work(store, work);
        return r;
}
