/* SPDX-License-Identifier: MIT */
/* OCI images: a store on disk of layers, each unpacked once under its diff id and shared by
 * every image that has it, and of images, each a record naming its layers and its config.
 * Imports read an OCI layout directory, an OCI archive or a `docker save`/`podman save` tar;
 * what an image holds is untrusted (see docs/ARCHITECTURE.md, "Images").
 *
 * The store (below DIR):
 *   lock             flock: shared while a process has the store open, exclusive while one
 *                    imports or removes (the job upgrades its daemon's own lock, so a store
 *                    another process has open can be used but not changed)
 *   layers/HEX/      a layer's tree, HEX its diff id (sha256 of its uncompressed tar); OCI
 *                    whiteouts as overlay's (a 0:0 character device, user.overlay.opaque)
 *   images/HEX.json  an image's record, HEX the digest of its config (its id)
 *   tmp/             what an import or removal is working on; cleared at open
 * A layer is renamed into layers/ only once whole and checked, a record written only once its
 * layers are there: a half-imported image is never listed.
 *
 * Everything that reads an image or writes the store runs in a job process (base/job.h);
 * the loop only reads records at open and keeps them in memory. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include <sys/types.h>
#include "base/loop.h"

typedef struct OciImage {
        char id[72];      /* "sha256:" and the config's digest in hex */
        json_t *record;   /* the record as stored (names kept in step) */
        char *text;       /* the record's JSON text, for readers */
        char **names;     /* "repository:tag", NULL-terminated */
        char **layers;    /* diff ids' hex, bottom first */
        size_t n_layers;
        char **env;       /* the config's Env, NULL-terminated */
        const char *workdir; /* the config's WorkingDir ("" none), in record */
        uint64_t bytes;   /* its layers' unpacked bytes */
        bool bash;        /* it has /bin/bash (sessions need it) */
        unsigned users;   /* sandboxes made from it that live (oci_image_use()) */
} OciImage;

typedef struct OciStore OciStore;

/* Where an import is: layer (1-based) of layers, bytes of it unpacked so far (counted as the
 * store counts them), done once that layer is there (have: the store had it already). */
typedef struct OciProgress {
        uint32_t layer, layers;
        uint64_t bytes;
        uint8_t done, have;
} OciProgress;
typedef void (*OciProgressFn)(void *ud, const OciProgress *p);

/* An import's or removal's end: error 0 or -errno with message in words; img the image
 * imported (NULL after a removal or failure), valid during the call. */
typedef void (*OciDoneFn)(void *ud, int error, const char *message, const OciImage *img);

/* Opens (making it if needed) the store in dir and reads its records. max_bytes bounds its
 * layers' bytes (0: SBX_IMAGE_STORE_DEFAULT_BYTES). Returns 0, or -errno with err. */
int oci_store_open(const char *dir, uint64_t max_bytes, Loop *loop, OciStore **ret, char *err, size_t errlen);
/* Kills a running job; queued and running operations get -ECANCELED. */
OciStore *oci_store_free(OciStore *s);
const char *oci_store_dir(const OciStore *s);
uint64_t oci_store_bytes(const OciStore *s);
uint64_t oci_store_max_bytes(const OciStore *s);
size_t oci_store_count(const OciStore *s);
OciImage *oci_store_at(OciStore *s, size_t i);
/* By a name ("busybox" is "busybox:latest"), "sha256:HEX", or 12 or more hex digits that
 * begin one id alone. NULL if none (errno ENOENT) or ambiguous (EINVAL). */
OciImage *oci_store_find(OciStore *s, const char *ref);
/* The directory of an image's layer i (0 the bottom one). Returns 0 or -ENAMETOOLONG. */
int oci_store_layer_path(const OciStore *s, const OciImage *img, size_t i, char *buf, size_t size);
/* A sandbox made from img holds it: oci_store_remove() refuses an image in use. */
void oci_image_use(OciImage *img);
void oci_image_unuse(OciImage *img);

/* Imports the image at path (an OCI layout directory, an OCI archive, or a docker/podman save
 * tar; compressed or not), named name when not NULL (else by the names it carries), in a job,
 * reading path with the rights of user as_uid ((uid_t)-1: the daemon's own); progress (may be
 * NULL) hears of each layer as it starts and ends, and every 16 MiB of one:
 * fn follows from the loop. At most SBX_IMAGE_MAX_QUEUED wait behind the running one.
 * Returns 0, or -errno with err (-EBUSY: too many waiting). */
int oci_store_import(OciStore *s, const char *path, const char *name, uid_t as_uid, OciProgressFn progress,
                     OciDoneFn fn, void *ud, char *err, size_t errlen);
/* Removes a name, or the image when ref is its id or its last name (with the layers no other
 * image has), refused with -EBUSY while a sandbox uses it. The store in memory changes at
 * once; fn follows from the loop once the disk has. Returns 0 or -errno with err. */
int oci_store_remove(OciStore *s, const char *ref, OciDoneFn fn, void *ud, char *err, size_t errlen);

/* Writes name as the store keeps it ("docker.io/library/x" and "x" are "x:latest"). Returns
 * false (with err) for a name that is not one. */
bool oci_name_normalize(const char *name, char *out, size_t size, char *err, size_t errlen);
