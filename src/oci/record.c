/* SPDX-License-Identifier: MIT */
/* Image records: what the store keeps of an image (images/HEX.json), read back at open. A
 * record is checked as it is loaded: the store's files may have been edited by hand. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/util.h"
#include "oci/oci_private.h"

bool oci_digest_valid(const char *s, const char **hex) {
        if (!s || strncmp(s, "sha256:", 7) != 0 || strlen(s) != 71)
                return false;
        for (const char *p = s + 7; *p; p++)
                if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
                        return false;
        if (hex)
                *hex = s + 7;
        return true;
}

static bool tag_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
               c == '-';
}

static bool repo_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-' || c == '/' ||
               c == ':';
}

bool oci_name_normalize(const char *name, char *out, size_t size, char *err, size_t errlen) {
        size_t len = name ? strlen(name) : 0;
        if (len == 0 || len >= SBX_IMAGE_NAME_BYTES || len >= size) {
                snprintf(err, errlen, "an image name is 1 to %u bytes; got %zu", SBX_IMAGE_NAME_BYTES - 1, len);
                return false;
        }
        /* A digest reference (name@sha256:...) names content, not a tag: not a name to keep. */
        if (strchr(name, '@')) {
                snprintf(err, errlen, "image name '%.200s': a name@digest is no name to give; use name:tag", name);
                return false;
        }
        const char *p = name;
        static const char *const drop[] = { "docker.io/library/", "docker.io/", "localhost/" };
        for (size_t i = 0; i < ELEMENTSOF(drop); i++)
                if (strncmp(p, drop[i], strlen(drop[i])) == 0 && p[strlen(drop[i])]) {
                        p += strlen(drop[i]);
                        break;
                }
        /* The tag is after the last ':' that comes after the last '/' (a registry's port is not
         * a tag). */
        const char *slash = strrchr(p, '/');
        const char *colon = strrchr(slash ? slash : p, ':');
        size_t repo_len = colon ? (size_t)(colon - p) : strlen(p);
        if (repo_len == 0 || p[0] == '/' || p[0] == '.' || p[repo_len - 1] == '/' || strstr(p, "//")) {
                snprintf(err, errlen, "image name '%.200s' has no repository", name);
                return false;
        }
        for (size_t i = 0; i < repo_len; i++)
                if (!repo_char(p[i])) {
                        snprintf(err, errlen, "image name '%.200s': '%c' may not be in a repository (lowercase letters, "
                                 "digits, '.', '_', '-', '/')", name, p[i]);
                        return false;
                }
        const char *tag = colon ? colon + 1 : "latest";
        size_t tag_len = strlen(tag);
        if (tag_len == 0 || tag_len > 128) {
                snprintf(err, errlen, "image name '%.200s': a tag is 1 to 128 characters", name);
                return false;
        }
        for (size_t i = 0; i < tag_len; i++)
                if (!tag_char(tag[i])) {
                        snprintf(err, errlen, "image name '%.200s': '%c' may not be in a tag", name, tag[i]);
                        return false;
                }
        if ((size_t)snprintf(out, size, "%.*s:%s", (int)repo_len, p, tag) >= size) {
                snprintf(err, errlen, "image name '%.200s' is too long", name);
                return false;
        }
        return true;
}

static void strv_free(char **v) {
        for (size_t i = 0; v && v[i]; i++)
                free(v[i]);
        free(v);
}

void oci_image_clear(OciImage *img) {
        strv_free(img->names);
        strv_free(img->layers);
        strv_free(img->env);
        free(img->text);
        json_decref(img->record);
        unsigned users = img->users;
        *img = (OciImage){ .users = users };
}

/* A NULL-terminated copy of an array of strings; NULL (err says why) when it is not one. */
static char **strv_from(json_t *a, size_t max, const char *what, char *err, size_t errlen) {
        if (!json_is_array(a) || json_array_size(a) > max) {
                snprintf(err, errlen, "record: %s must be an array of at most %zu strings", what, max);
                return NULL;
        }
        char **v = calloc(json_array_size(a) + 1, sizeof *v);
        size_t i;
        json_t *x;
        json_array_foreach(a, i, x) {
                if (!v || !json_is_string(x) || !(v[i] = strdup(json_string_value(x)))) {
                        snprintf(err, errlen, "record: %s[%zu] must be a string", what, i);
                        strv_free(v);
                        return NULL;
                }
        }
        return v;
}

static const char *workdir_of(json_t *record) {
        const char *w = json_string_value(json_object_get(json_object_get(record, "config"), "workingDir"));
        return w ? w : "";
}

int oci_record_load(OciImage *img, json_t *record, char *err, size_t errlen) {
        const char *hex;
        json_t *id = json_object_get(record, "id"), *layers = json_object_get(record, "layers");
        json_t *config = json_object_get(record, "config");
        if (!json_is_string(id) || !oci_digest_valid(json_string_value(id), &hex)) {
                snprintf(err, errlen, "record: no id");
                return -EINVAL;
        }
        *img = (OciImage){ .users = img->users };
        snprintf(img->id, sizeof img->id, "%s", json_string_value(id));
        img->record = json_incref(record);
        if (!json_is_array(layers) || json_array_size(layers) == 0 || json_array_size(layers) > SBX_IMAGE_MAX_LAYERS) {
                snprintf(err, errlen, "record: layers must be 1 to %u", SBX_IMAGE_MAX_LAYERS);
                goto fail;
        }
        img->n_layers = json_array_size(layers);
        img->layers = calloc(img->n_layers + 1, sizeof *img->layers);
        if (!img->layers)
                goto fail;
        size_t i;
        json_t *l;
        json_array_foreach(layers, i, l) {
                const char *lhex;
                json_t *d = json_object_get(l, "diffId");
                if (!json_is_string(d) || !oci_digest_valid(json_string_value(d), &lhex) || !(img->layers[i] = strdup(lhex))) {
                        snprintf(err, errlen, "record: layer %zu has no diffId", i);
                        goto fail;
                }
        }
        img->bytes = (uint64_t)json_integer_value(json_object_get(record, "bytes"));
        img->bash = json_is_true(json_object_get(record, "bash"));
        if (!(img->names = strv_from(json_object_get(record, "names"), SBX_IMAGE_MAX_NAMES, "names", err, errlen)))
                goto fail;
        json_t *env = json_object_get(config, "env");
        if (!(img->env = env ? strv_from(env, 4096, "config.env", err, errlen) : calloc(1, sizeof *img->env)))
                goto fail;
        for (size_t k = 0; img->env[k]; k++)
                if (!strchr(img->env[k], '=') || img->env[k][0] == '=') {
                        snprintf(err, errlen, "record: config.env[%zu] is not NAME=VALUE", k);
                        goto fail;
                }
        img->workdir = workdir_of(record);
        if (!(img->text = json_dumps(record, JSON_COMPACT)))
                goto fail;
        return 0;
fail:
        if (!err[0])
                snprintf(err, errlen, "out of memory");
        oci_image_clear(img);
        return -EINVAL;
}

int oci_image_set_record(OciImage *img, json_t *record) {
        char *text = json_dumps(record, JSON_COMPACT);
        if (!text)
                return -ENOMEM;
        json_decref(img->record);
        img->record = json_incref(record);
        free(img->text);
        img->text = text;
        img->workdir = workdir_of(record);
        return 0;
}

json_t *oci_record_with_names(json_t *record, char *const *names) {
        json_t *copy = json_deep_copy(record), *a = json_array();
        for (size_t i = 0; copy && a && names && names[i]; i++)
                json_array_append_new(a, json_string(names[i]));
        if (!copy || !a || json_object_set_new(copy, "names", a) < 0) {
                json_decref(copy);
                return NULL;
        }
        return copy;
}

int oci_record_write(int dirfd, json_t *record) {
        const char *hex;
        if (!oci_digest_valid(json_string_value(json_object_get(record, "id")), &hex))
                return -EINVAL;
        _cleanup_free_ char *text = json_dumps(record, JSON_INDENT(1) | JSON_SORT_KEYS);
        if (!text)
                return -ENOMEM;
        char tmp[96], path[96];
        snprintf(tmp, sizeof tmp, "images/.%s.%d", hex, (int)getpid());
        snprintf(path, sizeof path, "images/%s.json", hex);
        _cleanup_close_ int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
                return negerrno();
        int r = write_all(fd, text, strlen(text));
        if (r >= 0 && fsync(fd) < 0)
                r = negerrno();
        if (r >= 0 && renameat(dirfd, tmp, dirfd, path) < 0)
                r = negerrno();
        if (r < 0)
                (void)unlinkat(dirfd, tmp, 0);
        return r;
}

int oci_lock_for_change(int lock, char *err, size_t errlen) {
        if (flock(lock, LOCK_EX | LOCK_NB) == 0)
                return 0;
        int r = negerrno();
        if (r == -EWOULDBLOCK)
                snprintf(err, errlen, "the image store is open in another sbx process (a daemon, or `sbx run --image`): "
                         "it can be read but not changed until that one ends");
        else
                snprintf(err, errlen, "lock the image store: %s", strerror(-r));
        return r == -EWOULDBLOCK ? -EBUSY : r;
}
