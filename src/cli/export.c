/* SPDX-License-Identifier: MIT */
/* `sbx export`: a sandbox of a running `sbx serve --socket` to an archive file. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/macro.h"
#include "base/text.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/client.h"

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx export [--socket PATH] ID [-o FILE]\n"
                "\n"
                "Saves a sandbox of a running `sbx serve --socket PATH` (one made with\n"
                "sandbox.create and persist: true) to FILE, or to stdout: its files under\n"
                "/tmp, /home/user and /dev/shm and the state of every session, as a\n"
                "zstd-compressed tar (`tar --zstd -tf FILE` lists it). `sbx import` and\n"
                "`sbx run --import` load it. `sbx run --export` saves a one-off sandbox.\n"
                "Exit status: 0, 1 the daemon failed, 2 usage, 3 no daemon, 4 no such sandbox.\n"
                "\n"
                "Options:\n"
                "  -s, --socket PATH   the daemon's socket (default: $SBX_SOCKET)\n"
                "  -S, --sandbox ID    the sandbox, as the ID argument names it\n"
                "  -o, --output FILE   where to write (default: stdout, if it is not a terminal)\n"
                "  -h, --help          show this help\n");
}

int cmd_export(int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, 's' }, { "sandbox", required_argument, NULL, 'S' },
                { "output", required_argument, NULL, 'o' }, { "help", no_argument, NULL, 'h' }, {},
        };
        const char *sock = NULL, *id = NULL, *out = NULL;
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "s:S:o:h", opts, NULL)) != -1) {
                switch (c) {
                case 's': sock = optarg; break;
                case 'S': id = optarg; break;
                case 'o': out = optarg; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        /* The id as the other commands take it, positional; --sandbox ID as before. */
        if (!id && optind < argc)
                id = argv[optind++];
        if (!id || optind < argc) {
                usage(stderr);
                return 2;
        }
        if (!(sock = client_socket_path("export", sock)))
                return 2;
        if (!out && isatty(STDOUT_FILENO)) {
                fprintf(stderr, "sbx export: not writing an archive to a terminal; give -o FILE\n");
                return 2;
        }
        json_t *res;
        int code = client_call_cli("export", sock, "persistence.export", json_pack("{s:s}", "sandboxId", id), &res);
        if (code)
                return code;
        const char *b64 = json_string_value(json_object_get(res, "data"));
        size_t n = 0;
        _cleanup_free_ uint8_t *data = b64 ? b64_decode(b64, json_string_length(json_object_get(res, "data")), &n) : NULL;
        json_decref(res);
        if (!data) {
                fprintf(stderr, "sbx export: the server's answer holds no archive\n");
                return 1;
        }
        /* An old file is never half replaced. */
        int r = out ? write_file_replace(out, data, n) : write_all(STDOUT_FILENO, data, n);
        if (r < 0) {
                fprintf(stderr, "sbx export: %s: %s\n", out ? out : "stdout", strerror(-r));
                return 1;
        }
        return 0;
}
