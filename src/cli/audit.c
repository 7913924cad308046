/* SPDX-License-Identifier: MIT */
/* `sbx audit verify`: checks the hash chain of an audit log (sbx serve --audit). Also the
 * daemon's hidden `sbx audit writer`, the process that writes the log. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/util.h"
#include "cli/cli.h"
#include "server/audit_log.h"

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx audit verify FILE...\n"
                "\n"
                "Checks the hash chain of an audit log written by `sbx serve --audit PATH`: each\n"
                "line's seq follows the one before it and its prev is the sha256 of the line\n"
                "before it. Give rotated files oldest first (PATH.2 PATH.1 PATH) to check them as\n"
                "one chain; a single file is checked from its first line on, which is taken on\n"
                "trust unless it starts a new log.\n"
                "\n"
                "What the chain does not show: lines cut off at the end, or a whole chain\n"
                "written anew; keep the last line's hash elsewhere to detect those.\n"
                "\n"
                "Options:\n"
                "  -h, --help    show this help\n"
                "\n"
                "Exit status: 0 intact (the line count is printed); 1 a line was changed, removed\n"
                "or inserted (the first one is named as FILE:LINE); 2 bad arguments or a file\n"
                "that cannot be read.\n");
}

static int verify(int argc, char **argv) {
        if (argc < 1) {
                fprintf(stderr, "sbx audit verify: give the log's files, oldest first\n");
                return 2;
        }
        AuditVerify v;
        int r = audit_verify(argv, (size_t)argc, &v);
        if (r < 0) {
                fprintf(stderr, "sbx audit verify: %s\n", v.message);
                return 2;
        }
        if (r > 0) {
                printf("%s\n", v.message);
                return 1;
        }
        if (v.lines == 0)
                printf("intact: no lines\n");
        else
                printf("intact: %llu lines, seq %llu to %llu%s\n", (unsigned long long)v.lines,
                       (unsigned long long)v.first_seq, (unsigned long long)v.last_seq,
                       v.genesis ? " (from the start of the log)"
                                 : " (the first line's link to earlier lines is taken on trust)");
        return 0;
}

/* `sbx audit writer -- PATH MAX_BYTES KEEP`, started by `sbx serve --audit` with the event
 * pipe as fd 3 and the report pipe as fd 4. */
static int writer(int argc, char **argv) {
        uint64_t max, keep;
        if (argc != 5 || strcmp(argv[1], "--") != 0 || parse_u64(argv[3], UINT64_MAX, &max) < 0 ||
            parse_u64(argv[4], SBX_AUDIT_MAX_KEEP, &keep) < 0 || keep < 1) {
                fprintf(stderr, "sbx audit writer: started by sbx serve --audit only\n");
                return 2;
        }
        /* Whatever the daemon was started with and did not mark close-on-exec is not ours to
         * hold open (a socket whose other end waits for it to close). */
        (void)close_range(5, ~0U, 0);
        return audit_writer_main(3, 4, argv[2], max, (unsigned)keep);
}

int cmd_audit(int argc, char **argv) {
        if (argc >= 2 && strcmp(argv[1], "verify") == 0) {
                if (argc >= 3 && (strcmp(argv[2], "-h") == 0 || strcmp(argv[2], "--help") == 0)) {
                        usage(stdout);
                        return 0;
                }
                /* FILE names may start with '-' after "--". */
                int skip = argc >= 3 && strcmp(argv[2], "--") == 0;
                return verify(argc - 2 - skip, argv + 2 + skip);
        }
        if (argc >= 2 && strcmp(argv[1], "writer") == 0)
                return writer(argc - 1, argv + 1);
        if (argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
                usage(stdout);
                return 0;
        }
        usage(stderr);
        return 2;
}
