/* SPDX-License-Identifier: MIT */
/* sbx-engine, the program sbx becomes (main.c) for serve and audit (libsbx, the server and
 * every library they need: GnuTLS, c-ares, libmicrohttpd, libcurl, libarchive), and for a run
 * with --import, --export or --image (libarchive, which sbx does not load). Run alone, it takes
 * sbx's arguments. */
#include <stdio.h>
#include <string.h>
#include "base/macro.h"
#include "cli/cli.h"

static const struct {
        const char *name;
        int (*fn)(int argc, char **argv);
} commands[] = {
        { "run", cmd_run }, { "serve", cmd_serve }, { "audit", cmd_audit },
};

int main(int argc, char **argv) {
        for (size_t i = 0; argc >= 2 && i < ELEMENTSOF(commands); i++)
                if (strcmp(argv[1], commands[i].name) == 0) {
                        /* getopt names its program in its messages: "sbx run: unrecognized option". */
                        char name[64];
                        snprintf(name, sizeof name, "sbx %s", argv[1]);
                        argv[1] = name;
                        return commands[i].fn(argc - 1, argv + 1);
                }
        fprintf(stderr, "%s: a part of sbx; use sbx (sbx --help)\n", argc ? argv[0] : "sbx-engine");
        return 2;
}
