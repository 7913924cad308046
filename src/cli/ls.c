/* SPDX-License-Identifier: MIT */
/* `sbx ls`: the sandboxes of a running `sbx serve --socket` that we may use. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"
#include "cli/client.h"
#include "cli/procs.h"

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx ls [--socket PATH] [-q | --json]\n"
                "\n"
                "Lists the sandboxes of a running `sbx serve --socket PATH` that this user may\n"
                "use (the persistent ones: made with sandbox.create and persist: true), oldest\n"
                "first: id, when it was created, its label.\n"
                "\n"
                "Options:\n"
                "      --socket PATH   the daemon's socket (default: $SBX_SOCKET)\n"
                "  -q, --quiet         only the ids, one a line\n"
                "      --json          the daemon's answer as JSON\n"
                "  -h, --help          show this help\n"
                "\n"
                "Exit status: 0; 1 the daemon refused; 2 bad arguments; 3 no daemon at the socket.\n");
}

enum { OPT_SOCKET = 256, OPT_JSON };

int cmd_ls(int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, OPT_SOCKET }, { "quiet", no_argument, NULL, 'q' },
                { "json", no_argument, NULL, OPT_JSON },           { "help", no_argument, NULL, 'h' },
                {},
        };
        const char *sock = NULL;
        bool quiet = false, as_json = false;
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "qh", opts, NULL)) != -1) {
                switch (c) {
                case OPT_SOCKET: sock = optarg; break;
                case 'q': quiet = true; break;
                case OPT_JSON: as_json = true; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return CLIENT_EXIT_USAGE;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "sbx ls: unexpected argument '%s'\n\n", argv[optind]);
                usage(stderr);
                return CLIENT_EXIT_USAGE;
        }
        if (!(sock = client_socket_path("ls", sock)))
                return CLIENT_EXIT_USAGE;
        ClientError err;
        Client *cl = NULL;
        json_t *res = NULL;
        int r = client_connect(sock, &cl, &err);
        if (r >= 0)
                r = client_request(cl, "sandbox.list", NULL, NULL, NULL, &res, &err);
        client_free(cl);
        if (r < 0)
                return client_fail("ls", sock, &err);
        json_t *list = json_object_get(res, "sandboxes"), *s;
        size_t i;
        if (as_json) {
                json_dumpf(res, stdout, JSON_INDENT(2));
                putchar('\n');
        } else if (!quiet) {
                printf("%-32s  %-24s  %s\n", "SANDBOX", "CREATED", "LABEL");
        }
        json_array_foreach(list, i, s) {
                const char *id = json_string_value(json_object_get(s, "sandboxId"));
                if (as_json || !id)
                        continue;
                if (quiet) {
                        puts(id);
                        continue;
                }
                const char *created = json_string_value(json_object_get(s, "createdAt"));
                const char *label = json_string_value(json_object_get(s, "label"));
                printf("%-32s  %-24s  ", id, created ? created : "-");
                procs_print_text(stdout, label);
                putchar('\n');
        }
        json_decref(res);
        return fflush(stdout) == 0 ? 0 : CLIENT_EXIT_FAILURE;
}
