/* SPDX-License-Identifier: MIT */
/* The sbx binary: dispatches to one subcommand per file. It is the light half: the commands
 * that are clients of a daemon (and --help, --version) and `run` run here, linked with libc,
 * jansson, nettle and (for run's sandboxes) libseccomp alone, so they start like a small tool;
 * serve and audit, and a run with --import, --export or --image (libarchive), are
 * sbx-engine's, which this binary becomes (execv, same pid and argv) when one is asked for. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "base/macro.h"
#include "cli/cli.h"

static const struct {
        const char *name;
        int (*fn)(int argc, char **argv);
} commands[] = {
        { "run", cmd_run },   { "serve", NULL },      { "export", cmd_export }, { "import", cmd_import },
        { "ls", cmd_ls },     { "exec", cmd_exec },   { "ps", cmd_ps },         { "logs", cmd_logs },
        { "kill", cmd_kill }, { "shell", cmd_shell }, { "mcp", cmd_mcp },
        { "audit", NULL },    { "create", cmd_create }, { "rm", cmd_rm },       { "image", cmd_image },
};

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx COMMAND [OPTIONS]\n"
                "\n"
                "Run untrusted shell commands in local sandboxes with persistent sessions.\n"
                "\n"
                "Commands:\n"
                "  run [OPTIONS] -- CMD [CMD ...]   run commands in one session of a fresh sandbox\n"
                "  serve (--stdio | --socket PATH)  the JSON-RPC daemon\n"
                "  mcp [--socket PATH [--sandbox ID]]\n"
                "                                   an MCP server on stdio: a sandbox's tools for AI agents\n"
                "  audit verify FILE...             check an audit log's hash chain (serve --audit)\n"
                "\n"
                "Commands on a daemon's sandboxes (--socket PATH, or $SBX_SOCKET):\n"
                "  create [OPTIONS]                 a persistent sandbox; prints its id\n"
                "  rm ID...                         destroy sandboxes\n"
                "  ls                               its sandboxes\n"
                "  exec ID -- CMD [CMD ...]         run commands in sandbox ID, output streamed\n"
                "  ps ID                            the processes of sandbox ID\n"
                "  logs ID PROC [-f]                a process's output (-f: follow to its end)\n"
                "  kill ID PROC [-s SIGNAL]         signal a process and wait until it is dead\n"
                "  shell [ID]                       an interactive bash in sandbox ID (or in a\n"
                "                                   new sandbox, destroyed when it ends)\n"
                "  export ID [-o FILE]              save sandbox ID to an archive\n"
                "  import ID FILE                   load an archive into sandbox ID\n"
                "  image import|ls|inspect|rm|build OCI images for create --image\n"
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
                printf("sbx %s\n", SBX_VERSION);
                return 0;
        }
        for (size_t i = 0; i < ELEMENTSOF(commands); i++) {
                if (strcmp(cmd, commands[i].name) != 0)
                        continue;
                if (!commands[i].fn)
                        return cli_exec_engine(argv);
                /* getopt names its program in its messages: "sbx exec: unrecognized option". */
                char name[64];
                snprintf(name, sizeof name, "sbx %s", cmd);
                argv[1] = name;
                return commands[i].fn(argc - 1, argv + 1);
        }
        fprintf(stderr, "sbx: unknown command '%s'\n\n", cmd);
        usage(stderr);
        return 2;
}
