/* SPDX-License-Identifier: MIT */
/* Fuzz target: archive_check() on hostile archives (persistence.import's first step). The
 * first byte picks the mode: even, the rest is a tar that the harness compresses with zstd
 * first (so that mutations reach the tar and manifest checks instead of dying in zstd's
 * frame checksum); odd, the rest goes in as it is. The invariants: it never crashes, never
 * reads out of bounds (ASan), and what it accepts stays within the limits given and has
 * sessions that are states. */
#include <archive.h>
#include <archive_entry.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "fs/archive.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t *zstd_of(const uint8_t *data, size_t size, size_t *out_len) {
        size_t cap = size + 4096;
        uint8_t *out = malloc(cap);
        struct archive *a = archive_write_new();
        if (!out || !a || archive_write_add_filter_zstd(a) != ARCHIVE_OK || archive_write_set_format_raw(a) != ARCHIVE_OK ||
            archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
            archive_write_open_memory(a, out, cap, out_len) != ARCHIVE_OK) {
                if (a)
                        archive_write_free(a);
                free(out);
                return NULL;
        }
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_pathname(e, "raw");
        archive_entry_set_size(e, (la_int64_t)size);
        if (archive_write_header(a, e) != ARCHIVE_OK || archive_write_data(a, data, size) < 0 ||
            archive_write_close(a) != ARCHIVE_OK) {
                free(out);
                out = NULL;
        }
        archive_entry_free(e);
        archive_write_free(a);
        return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static const ArchiveLimits lim = { .fs_bytes = 1 << 20, .file_count = 64 };
        if (size < 1)
                return 0;
        size_t len = size - 1;
        uint8_t *z = NULL;
        const uint8_t *in = data + 1;
        if (data[0] % 2 == 0) {
                z = zstd_of(data + 1, size - 1, &len);
                if (!z)
                        return 0;
                in = z;
        }
        ArchiveMeta meta = { 0 };
        char err[512];
        int r = archive_check(in, len, &lim, &meta, err, sizeof err);
        if (r == 0 && meta.bytes > lim.fs_bytes)
                abort();
        for (size_t i = 0; r == 0 && i < meta.n_sessions; i++)
                if (!meta.sessions[i].name || meta.sessions[i].state_len < 11 ||
                    memcmp(meta.sessions[i].state, "SBXSTATE 1\n", 11) != 0)
                        abort();
        archive_meta_clear(&meta);
        free(z);
        return 0;
}
