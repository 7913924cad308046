/* SPDX-License-Identifier: MIT */
/* The programs sbx becomes for the commands that make sandboxes (main.c): sbx-engine (serve,
 * audit: libsbx, the server and every library they need) and, built from this same file with
 * SBX_ENGINE_RUN, sbx-run (run: libsbx alone, without the HTTP server and client libraries
 * the daemon links, whose loading was half of a one-shot run's time). Run alone, each takes
 * sbx's arguments. */
#include <stdio.h>
#include <string.h>
#include "base/macro.h"
#include "cli/cli.h"

static const struct {
        const char *name;
        int (*fn)(int argc, char **argv);
} commands[] = {
#ifdef SBX_ENGINE_RUN
        { "run", cmd_run },
#else
        { "serve", cmd_serve }, { "audit", cmd_audit },
#endif
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
