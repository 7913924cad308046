/* SPDX-License-Identifier: MIT */
/* `sbx rm`: destroys sandboxes of a running `sbx serve --socket`. */
#include <getopt.h>
#include <stdio.h>
#include "cli/cli.h"
#include "cli/client.h"

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx rm [--socket PATH] ID...\n"
                "\n"
                "Destroys each sandbox (as `sbx create` or an SDK made it) of a running\n"
                "`sbx serve --socket PATH`: every process of it killed, its files gone.\n"
                "\n"
                "Options:\n"
                "  -s, --socket PATH   the daemon's socket (default: $SBX_SOCKET)\n"
                "  -h, --help          show this help\n"
                "\n"
                "Exit status: 0 when every one was destroyed; 1 the daemon refused; 2 bad\n"
                "arguments; 3 no daemon at the socket; 4 one of them does not exist (the others\n"
                "are still destroyed).\n");
}

int cmd_rm(int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, 's' }, { "help", no_argument, NULL, 'h' }, {},
        };
        const char *sock = NULL;
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "s:h", opts, NULL)) != -1) {
                switch (c) {
                case 's': sock = optarg; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return CLIENT_EXIT_USAGE;
                }
        }
        if (optind >= argc) {
                fprintf(stderr, "sbx rm: no sandbox named (sbx ls lists them)\n\n");
                usage(stderr);
                return CLIENT_EXIT_USAGE;
        }
        if (!(sock = client_socket_path("rm", sock)))
                return CLIENT_EXIT_USAGE;
        int worst = 0;
        for (int i = optind; i < argc; i++) {
                json_t *res = NULL;
                int code = client_call_cli("rm", sock, "sandbox.destroy", json_pack("{s:s}", "sandboxId", argv[i]), &res);
                json_decref(res);
                if (code == CLIENT_EXIT_UNREACHABLE)
                        return code; /* said once: no daemon to ask about the rest */
                if (code > worst)
                        worst = code;
        }
        return worst;
}
