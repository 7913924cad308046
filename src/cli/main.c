/* SPDX-License-Identifier: MIT */
/* The sbx binary: dispatches to one subcommand per file. */
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"
#include "sbx/sbx.h"

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx COMMAND [OPTIONS]\n"
                "\n"
                "Run untrusted shell commands in local sandboxes with persistent sessions.\n"
                "\n"
                "Commands:\n"
                "  run [OPTIONS] -- CMD [CMD ...]   run commands in one session of a fresh sandbox\n"
                "  serve (--stdio | --socket PATH)  the JSON-RPC daemon\n"
                "  export --socket PATH --sandbox ID [-o FILE]\n"
                "                                   save a daemon's sandbox to an archive\n"
                "  import --socket PATH --sandbox ID FILE\n"
                "                                   load an archive into a daemon's sandbox\n"
                "  mcp [--socket PATH [--sandbox ID]]\n"
                "                                   an MCP server on stdio: a sandbox's tools for AI agents\n"
                "\n"
                "Options:\n"
                "  -h, --help       show this help\n"
                "  -V, --version    show the version\n"
                "\n"
                "'sbx COMMAND --help' describes a command.\n");
}

int main(int argc, char **argv) {
        if (argc < 2) {
                usage(stderr);
                return 2;
        }
        const char *cmd = argv[1];
        if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
                usage(stdout);
                return 0;
        }
        if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
                printf("sbx %s\n", sbx_version());
                return 0;
        }
        if (strcmp(cmd, "run") == 0)
                return cmd_run(argc - 1, argv + 1);
        if (strcmp(cmd, "serve") == 0)
                return cmd_serve(argc - 1, argv + 1);
        if (strcmp(cmd, "export") == 0)
                return cmd_export(argc - 1, argv + 1);
        if (strcmp(cmd, "import") == 0)
                return cmd_import(argc - 1, argv + 1);
        if (strcmp(cmd, "mcp") == 0)
                return cmd_mcp(argc - 1, argv + 1);
        fprintf(stderr, "sbx: unknown command '%s'\n\n", cmd);
        usage(stderr);
        return 2;
}
