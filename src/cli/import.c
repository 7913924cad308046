/* SPDX-License-Identifier: MIT */
/* `sbx import`: an archive file into a sandbox of a running `sbx serve --socket`. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/text.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/client.h"

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx import [--socket PATH] ID FILE\n"
                "\n"
                "Replaces the files (/tmp, /home/user, /dev/shm) and session states of a sandbox\n"
                "of a running `sbx serve --socket PATH` with those of FILE, an archive made by\n"
                "`sbx export` or `sbx run --export`. The whole archive is checked first; a\n"
                "refused one (bad format, version or checksum, unsafe paths or links, device\n"
                "nodes, setuid bits, over the sandbox's limits) changes nothing. The archive\n"
                "travels in one request line, so it must fit the server's line limit (8 MiB by\n"
                "default: an archive of about 6 MiB).\n"
                "Exit status: 0, 1 the daemon refused it, 2 usage, 3 no daemon, 4 no such sandbox.\n"
                "\n"
                "Options:\n"
                "  -s, --socket PATH   the daemon's socket (default: $SBX_SOCKET)\n"
                "  -S, --sandbox ID    the sandbox, as the ID argument names it\n"
                "  -h, --help          show this help\n");
}

int cmd_import(int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, 's' }, { "sandbox", required_argument, NULL, 'S' },
                { "help", no_argument, NULL, 'h' }, {},
        };
        const char *sock = NULL, *id = NULL;
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "s:S:h", opts, NULL)) != -1) {
                switch (c) {
                case 's': sock = optarg; break;
                case 'S': id = optarg; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        /* ID FILE as the other commands take an id; --sandbox ID FILE as before. */
        if (!id && argc - optind == 2)
                id = argv[optind++];
        if (!id || optind != argc - 1) {
                usage(stderr);
                return 2;
        }
        if (!(sock = client_socket_path("import", sock)))
                return 2;
        const char *path = argv[optind];
        _cleanup_free_ uint8_t *data = NULL;
        size_t n = 0;
        int r = read_file_whole(path, SBX_MAX_ARCHIVE_BYTES, &data, &n);
        if (r == -EFBIG) {
                fprintf(stderr, "sbx import: %s: not a regular file of at most %llu bytes\n", path,
                        (unsigned long long)SBX_MAX_ARCHIVE_BYTES);
                return 1;
        }
        if (r < 0) {
                fprintf(stderr, "sbx import: %s: %s\n", path, strerror(-r));
                return 1;
        }
        size_t blen;
        char *b64 = b64_encode(data, n, &blen);
        json_t *params = b64 ? json_pack("{s:s, s:o}", "sandboxId", id, "data", json_stringn_nocheck(b64, blen)) : NULL;
        free(b64);
        if (!params) {
                fprintf(stderr, "sbx import: out of memory\n");
                return 1;
        }
        /* One request carries the archive: past the daemon's default line, this connection says
         * first how long its line will be (an export of more than about 6 MiB). */
        Client *cl = NULL;
        ClientError err = { 0 };
        r = client_connect(sock, &cl, &err);
        if (r == 0 && blen + 4096 > SBX_DEFAULT_RPC_BYTES)
                r = client_request(cl, "connection.configure",
                                   json_pack("{s:I}", "rpcBytes", (json_int_t)MIN(blen + 4096, (size_t)1 << 30)), NULL,
                                   NULL, NULL, &err);
        if (r == 0)
                r = client_request(cl, "persistence.import", TAKE_PTR(params), NULL, NULL, NULL, &err);
        json_decref(params);
        client_free(cl);
        return r < 0 ? client_fail("import", sock, &err) : 0;
}
