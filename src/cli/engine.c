/* SPDX-License-Identifier: MIT */
/* sbx-engine: the half of sbx that makes sandboxes and serves them (run, serve, audit), linked
 * with libsbx and every library it needs. sbx becomes it for those commands (main.c); run
 * alone, it takes the same arguments. */
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
                if (strcmp(argv[1], commands[i].name) == 0)
                        return commands[i].fn(argc - 1, argv + 1);
        fprintf(stderr, "sbx-engine: runs `sbx run`, `sbx serve` and `sbx audit` for sbx; use sbx (sbx --help)\n");
        return 2;
}
