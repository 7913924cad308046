/* SPDX-License-Identifier: MIT */
/* Between the files of oci/: records (record.c), unpacking one layer (unpack.c) and the
 * import job (import.c), which store.c starts. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include <sys/types.h>
#include "oci/oci.h"

/* "sha256:" and 64 lowercase hex digits; *hex points to the digits. */
bool oci_digest_valid(const char *s, const char **hex);
/* Fills img from a record (taking a reference to it). Returns 0 or -EINVAL with err. */
int oci_record_load(OciImage *img, json_t *record, char *err, size_t errlen);
void oci_image_clear(OciImage *img);
/* Puts record (a reference taken) in place of img's, its names already in step with
 * img->names. Returns 0 or -ENOMEM (img unchanged). */
int oci_image_set_record(OciImage *img, json_t *record);
/* Writes the record into images/ of the store at dirfd (a new file, renamed into place).
 * Returns 0 or -errno. */
int oci_record_write(int dirfd, json_t *record);
/* A copy of record with names in place of its own. NULL out of memory. */
json_t *oci_record_with_names(json_t *record, char *const *names);

typedef struct UnpackStats {
        uint64_t bytes;   /* what it counts against the store: data, and SBX_IMAGE_ENTRY_BYTES an entry */
        uint64_t entries;
        uint64_t dropped; /* device nodes and the like, left out */
        uint64_t stripped; /* setuid and setgid bits taken off */
} UnpackStats;

/* Unpacks one layer (a tar, compressed or not) read from fd into the empty directory dst:
 * paths beneath it only, whiteouts as overlay's, no device, no setuid or setgid bit, no
 * extended attribute; owners kept as root (ids past 65535 become 65534), else the caller's.
 * The sha256 of the bytes read goes to blob_hex, of the uncompressed tar to diff_hex (65
 * bytes each). Stops with -EFBIG past room bytes. Returns 0 or -errno with err. */
int oci_unpack_layer(int fd, int dst, uint64_t room, UnpackStats *st, char *blob_hex, char *diff_hex, char *err,
                     size_t errlen);
/* Called while a layer unpacks, every SBX_IMAGE_PROGRESS_BYTES of what it counts. */
extern void (*oci_unpack_progress)(uint64_t bytes);

/* Which entries of an archive to unpack: want(path, size, ud) for each regular file (its path
 * cleaned, relative); directories and links always. */
typedef struct UnpackFilter {
        bool (*want)(const char *path, uint64_t size, void *ud);
        void *ud;
} UnpackFilter;

/* The same for an image archive (an OCI archive, a docker save) read from fd, with no digest:
 * the files f wants (all when NULL), the others skipped (seeked past when fd can seek). */
int oci_unpack_archive(int fd, int dst, uint64_t room, const UnpackFilter *f, UnpackStats *st, char *err,
                       size_t errlen);

typedef struct ImportJob {
        const char *dir;    /* the store */
        const char *path;   /* what to import */
        const char *name;   /* the name it gets, or NULL */
        uid_t as_uid;       /* path is read with this user's rights ((uid_t)-1: the job's own) */
        uint64_t room;      /* bytes the store may still take */
        int lock;           /* the store's lock (upgraded to exclusive for the job) */
        int out;            /* memfd: the new record's JSON is written here */
        int progress;       /* pipe: OciProgress records as layers go */
        OciImage *const *images; /* the store's images as the job was started (names move) */
        size_t n_images;
} ImportJob;

/* A JobFn (base/job.h) for an ImportJob. */
int oci_import_run(void *arg, char *err, size_t errlen);
/* Takes the store's lock for a change (in a job). Returns 0 or -errno with err. */
int oci_lock_for_change(int lock, char *err, size_t errlen);
