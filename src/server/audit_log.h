/* SPDX-License-Identifier: MIT */
/* The audit log's file format, its writer process and its verifier.
 *
 * A log is one JSON object a line. The daemon makes each event ({"ts", "type", ...}); the
 * writer, the only process that writes the files, puts `seq` first and `prev` last:
 *
 *   {"seq":12,"ts":"2024-05-01T12:00:00.123Z","type":"run.end",...,"prev":"<64 hex>"}
 *
 * seq counts the lines of the whole log, one apart, across rotations and restarts; prev is the
 * sha256 of the line before it (its bytes without the newline), 64 zeros for the first line
 * of a new log. A line is written whole or not at all (a failed write is cut off again), so
 * the files always hold an unbroken chain. The files are PATH, PATH.1, ... (PATH.1 the most
 * recently rotated); the chain runs from the oldest through PATH. A new file starts with an
 * `audit.rotated` line and an `audit.carried` line ({"line": the original}) for the newest
 * server.start and each begin whose end is still to come (sandbox.create or .fork before its
 * destroy, process.start before its exit), so the kept files never hold an end without its
 * begin (SBX_AUDIT_CARRY_BYTES bounds them). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/sha256.h"

#define AUDIT_GENESIS "0000000000000000000000000000000000000000000000000000000000000000"
/* "2024-05-01T12:00:00.123Z" and its NUL, with room the compiler can see is enough. */
#define AUDIT_TS_SIZE 48

/* What the writer tells the daemon, one fixed-size record at a time on its status pipe
 * (smaller than PIPE_BUF, so never split). Counters are totals since the writer started, so
 * a record that could not be sent loses nothing: the next one carries it. */
typedef struct AuditStatus {
        uint32_t size;     /* sizeof(AuditStatus): a record of another build is refused */
        int32_t error;     /* errno of the last failure (start, write, rotation); 0 if none */
        uint64_t written;  /* lines written, the writer's own included */
        uint64_t failed;   /* event lines that could not be written (counted, then told in the
                              log by an `audit.lost` line once writing works again) */
        uint64_t seq;      /* of the last line written */
        uint8_t started;   /* the log is open: the first record says so, or why not */
        uint8_t failing;   /* the last write failed and no write has worked since */
        char detail[128];  /* what failed, for a person: "open /var/log/x: Permission denied" */
} AuditStatus;

/* The writer process (`sbx audit writer`): reads event lines from in_fd until EOF, numbers
 * and chains them and appends them to path, rotating at max_bytes and keeping `keep` files,
 * and reports on status_fd. A log that exists goes on from its last line (a partial last
 * line, from a crash, is cut off and said so). Returns the process's exit status. */
int audit_writer_main(int in_fd, int status_fd, const char *path, uint64_t max_bytes, unsigned keep);

/* The time as the log writes it (UTC, milliseconds). */
void audit_ts(uint64_t wall_ms, char out[AUDIT_TS_SIZE]);
/* sha256 (hex) of one line, without its newline. */
void audit_line_hash(const char *line, size_t len, char out[SHA256_HEX_SIZE]);

typedef struct AuditVerify {
        uint64_t lines;              /* lines checked, all files */
        uint64_t first_seq, last_seq;
        bool genesis;                /* the first line starts a new log (prev is all zeros) */
        char message[512];           /* when not intact: "FILE:N: what"; else empty */
} AuditVerify;

/* Checks the chain through files (oldest first): every line an object with seq and prev,
 * seq one more than the line before, prev the hash of the line before. The first line's prev
 * is taken on trust unless it is the genesis. Returns 0 when intact, 1 when not (message
 * names the file and line of the first line changed, removed or inserted), -errno when a
 * file cannot be read (message says which). */
int audit_verify(char *const *files, size_t n, AuditVerify *ret);
