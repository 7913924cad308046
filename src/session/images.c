/* SPDX-License-Identifier: MIT */
/* sbx/image.h: the context's image store (oci/oci.h) behind the public API. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "base/macro.h"
#include "oci/oci.h"
#include "sbx/image.h"
#include "session/context.h"
#include "session/sandbox.h"

static void info_of(const OciImage *img, SbxImageInfo *ret) {
        *ret = (SbxImageInfo){ .id = img->id, .names = (const char *const *)img->names, .layers = img->n_layers,
                               .bytes = img->bytes, .has_bash = img->bash, .sandboxes = img->users,
                               .json = img->text };
}

int sbx_context_set_image_store(SbxContext *ctx, const char *dir, uint64_t max_bytes, char *err, size_t errlen) {
        SandboxHost *host = context_host(ctx);
        OciStore *s;
        if (host->images) {
                snprintf(err, errlen, "the context has an image store already (%s)", oci_store_dir(host->images));
                return -EEXIST;
        }
        int r = oci_store_open(dir, max_bytes, host->loop, &s, err, errlen);
        if (r < 0)
                return r;
        host->images = s;
        return 0;
}

int sbx_image_store_default(char *buf, size_t size) {
        const char *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
        int n;
        if (geteuid() == 0)
                n = snprintf(buf, size, "/var/lib/sbx/images");
        else if (xdg && xdg[0] == '/')
                n = snprintf(buf, size, "%s/sbx/images", xdg);
        else if (home && home[0] == '/')
                n = snprintf(buf, size, "%s/.local/share/sbx/images", home);
        else
                return -ENOENT;
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

const char *sbx_image_store_dir(SbxContext *ctx) {
        SandboxHost *host = context_host(ctx);
        return host->images ? oci_store_dir(host->images) : NULL;
}

uint64_t sbx_image_store_bytes(SbxContext *ctx, uint64_t *max_bytes) {
        SandboxHost *host = context_host(ctx);
        if (max_bytes)
                *max_bytes = host->images ? oci_store_max_bytes(host->images) : 0;
        return host->images ? oci_store_bytes(host->images) : 0;
}

size_t sbx_image_count(SbxContext *ctx) {
        SandboxHost *host = context_host(ctx);
        return host->images ? oci_store_count(host->images) : 0;
}

int sbx_image_get(SbxContext *ctx, size_t i, SbxImageInfo *ret) {
        SandboxHost *host = context_host(ctx);
        OciImage *img = host->images ? oci_store_at(host->images, i) : NULL;
        if (!img)
                return -ENOENT;
        info_of(img, ret);
        return 0;
}

int sbx_image_find(SbxContext *ctx, const char *ref, SbxImageInfo *ret) {
        SandboxHost *host = context_host(ctx);
        if (!host->images)
                return -ENOENT;
        OciImage *img = oci_store_find(host->images, ref);
        if (!img)
                return errno == EINVAL ? -EINVAL : -ENOENT;
        info_of(img, ret);
        return 0;
}

typedef struct ImageCall {
        SbxImageFn fn;
        SbxImageProgressFn progress;
        void *ud;
} ImageCall;

static void call_progress(void *ud, const OciProgress *p) {
        ImageCall *c = ud;
        SbxImageProgress sp = { .layer = p->layer, .layers = p->layers, .bytes = p->bytes, .done = p->done,
                                .have = p->have };
        if (c->progress)
                c->progress(c->ud, &sp);
}

static void call_done(void *ud, int error, const char *message, const OciImage *img) {
        ImageCall *c = ud;
        SbxImageInfo info;
        if (img)
                info_of(img, &info);
        if (c->fn)
                c->fn(c->ud, error, message, img ? &info : NULL);
        free(c);
}

/* The call of an operation on host's store, or NULL with *r set: -ENOENT without a store (err
 * says so), -ENOMEM. */
static ImageCall *call_new(SandboxHost *host, SbxImageFn fn, SbxImageProgressFn progress, void *ud, char *err,
                           size_t errlen, int *r) {
        ImageCall *c = host->images ? calloc(1, sizeof *c) : NULL;
        if (!host->images)
                snprintf(err, errlen, "no image store: start the daemon with one (sbx serve --image-store DIR)");
        *r = !host->images ? -ENOENT : !c ? -ENOMEM : 0;
        if (c)
                *c = (ImageCall){ .fn = fn, .progress = progress, .ud = ud };
        return c;
}

int sbx_image_import(SbxContext *ctx, const char *path, const char *name, int as_uid, SbxImageProgressFn progress,
                     SbxImageFn fn, void *userdata, char *err, size_t errlen) {
        SandboxHost *host = context_host(ctx);
        int r;
        ImageCall *c = call_new(host, fn, progress, userdata, err, errlen, &r);
        if (c && (r = oci_store_import(host->images, path, name, (uid_t)as_uid, call_progress, call_done, c, err,
                                       errlen)) < 0)
                free(c);
        return r;
}

int sbx_image_remove(SbxContext *ctx, const char *ref, SbxImageFn fn, void *userdata, char *err, size_t errlen) {
        SandboxHost *host = context_host(ctx);
        int r;
        ImageCall *c = call_new(host, fn, NULL, userdata, err, errlen, &r);
        if (c && (r = oci_store_remove(host->images, ref, call_done, c, err, errlen)) < 0)
                free(c);
        return r;
}
