/* SPDX-License-Identifier: MIT */
/* OCI images as sandbox roots: a store of images imported from an OCI layout, an OCI archive or
 * a `docker save`/`podman save` tar, each layer unpacked once and shared read-only by every
 * image and sandbox that has it. A sandbox made with SbxSandboxOptions.image sees the image's
 * tree as its root, read-only like the host's system directories, with its own /tmp,
 * /home/user and /dev/shm under its fs limits as always; its user is uid 1000 whatever the
 * image's User, and its environment starts from the image's Env.
 *
 * Everything here is driven by the context's loop: imports and removals run in job processes
 * and answer through their callbacks, never before the call returns. */
#pragma once
#include "sbx/sbx.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct SbxImageInfo {
        const char *id;            /* "sha256:" and 64 hex digits: the digest of its config */
        const char *const *names;  /* "repository:tag", NULL-terminated, may be empty */
        size_t layers;
        uint64_t bytes;            /* its layers unpacked (shared ones too) */
        bool has_bash;             /* sessions need /bin/bash: without it, no sandbox is made from it */
        unsigned sandboxes;        /* sandboxes made from it that live */
        const char *json;          /* the store's record of it: a JSON object (id, names, layers,
                                      bytes, config {env, workingDir, user, entrypoint, cmd,
                                      startCommand,
                                      architecture, os, created}, source, manifest, importedAt) */
} SbxImageInfo;

/* Opens the image store in dir (made if missing; absolute path), bounded to max_bytes of
 * unpacked layers (0: 32 GiB). Without one, sbx_image_*() and SbxSandboxOptions.image answer
 * -ENOENT. Another sbx process may have the same store open: both read it, neither can import
 * into it or remove from it meanwhile (-EBUSY, said in words). Returns 0, or -errno with err. */
SBX_API int sbx_context_set_image_store(SbxContext *ctx, const char *dir, uint64_t max_bytes, char *err,
                                        size_t errlen);
/* Where a store is by default: /var/lib/sbx/images as root, else $XDG_DATA_HOME/sbx/images or
 * ~/.local/share/sbx/images. Returns 0, or -ENOENT when there is no such place. */
SBX_API int sbx_image_store_default(char *buf, size_t size);
/* The store's directory, or NULL when none is open. */
SBX_API const char *sbx_image_store_dir(SbxContext *ctx);
/* The bytes its layers take, and its bound. */
SBX_API uint64_t sbx_image_store_bytes(SbxContext *ctx, uint64_t *max_bytes);
SBX_API size_t sbx_image_count(SbxContext *ctx);
/* The image at i (0 .. count-1); valid until the next import, removal or context free. */
SBX_API int sbx_image_get(SbxContext *ctx, size_t i, SbxImageInfo *ret);
/* By a name ("busybox" is "busybox:latest"), "sha256:HEX", or 12 or more hex digits that begin
 * one image's id alone. Returns 0, -ENOENT, or -EINVAL when the digits begin several ids. */
SBX_API int sbx_image_find(SbxContext *ctx, const char *ref, SbxImageInfo *ret);

/* Keeps n sandboxes (at most 8) of image ready ahead of time, as sbx_context_set_pool() does
 * for the host's root: sbx_sandbox_new() with default options but this image takes one. The
 * image is found by its name at each use: a pool of one not imported yet waits for it, and
 * after a name moves to another image the pool's sandboxes are made again. They hold their
 * image (it cannot be removed while they live): n = 0 ends the pool. At most 8 images have
 * pools. Returns 0, -EINVAL for a bad name, -ENOSPC past 8. */
SBX_API int sbx_context_set_image_pool(SbxContext *ctx, const char *image, unsigned n);

/* The end of an import or removal: error 0 or -errno, message in words, image the image
 * imported (NULL otherwise), valid during the call. */
typedef void (*SbxImageFn)(void *userdata, int error, const char *message, const SbxImageInfo *image);
/* Imports the image at path (absolute; a directory or a file, on the host), named name when not
 * NULL (else by the names it carries), read with the rights of user as_uid (-1: the caller's own;
 * a daemon passes its client's, who may import only what it could read). Untrusted input: paths out of a layer, links out of it
 * and digests that do not hold are refused; device nodes, setuid/setgid bits and extended
 * attributes are left out. Returns 0, or -errno with err (-EBUSY: too many waiting). */
/* Where an import is: layer (1-based) of layers and bytes of it unpacked so far (data plus 512 an
 * entry, as the store counts them); done once the layer is in the store (have: it was already,
 * nothing was read). Told as each layer starts and ends, and every 16 MiB of one. */
typedef struct SbxImageProgress {
        unsigned layer, layers;
        uint64_t bytes;
        bool done, have;
} SbxImageProgress;
typedef void (*SbxImageProgressFn)(void *userdata, const SbxImageProgress *progress);
SBX_API int sbx_image_import(SbxContext *ctx, const char *path, const char *name, int as_uid,
                             SbxImageProgressFn progress, SbxImageFn fn, void *userdata, char *err, size_t errlen);
/* Takes a name off its image, or removes the image (its id, or its last name) and the layers no
 * other image has. Refused with -EBUSY while a sandbox uses it. */
SBX_API int sbx_image_remove(SbxContext *ctx, const char *ref, SbxImageFn fn, void *userdata, char *err,
                             size_t errlen);

#ifdef __cplusplus
}
#endif
