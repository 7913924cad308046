/* SPDX-License-Identifier: MIT */
/* `sbx mcp`: its options; the server is src/mcp. */
#include <getopt.h>
#include <stdio.h>
#include "base/log.h"
#include "cli/cli.h"
#include "cli/client.h"
#include "mcp/mcp.h"

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx mcp [--socket PATH [--sandbox ID]] [-v]\n"
                "\n"
                "A Model Context Protocol server on stdin/stdout: gives an AI agent the tools of one\n"
                "sandbox (run commands in persistent sessions, background processes, read, write and\n"
                "edit files, list directories, fork, snapshot and restore). By default it starts its\n"
                "own daemon (`sbx serve --stdio`) and a fresh sandbox, both gone when the client\n"
                "disconnects.\n"
                "\n"
                "Options:\n"
                "      --socket PATH   use a running `sbx serve --socket PATH` instead\n"
                "      --sandbox ID    with --socket: work in that persistent sandbox (sandbox.create\n"
                "                      with persist: true), which is kept at exit\n"
                "  -v, --verbose       debug logging on stderr (the daemon's too)\n"
                "  -h, --help          show this help\n"
                "\n"
                "Add it to an MCP client (sbx makes sandboxes as root, or rootless as README.md says):\n"
                "\n"
                "  Claude Code:\n"
                "    claude mcp add sbx -- sbx mcp\n"
                "\n"
                "  Cursor, in .cursor/mcp.json of a project (or ~/.cursor/mcp.json):\n"
                "    { \"mcpServers\": { \"sbx\": { \"command\": \"sbx\", \"args\": [\"mcp\"] } } }\n"
                "\n"
                "  Claude Desktop, in claude_desktop_config.json (Settings > Developer > Edit Config):\n"
                "    { \"mcpServers\": { \"sbx\": { \"command\": \"/usr/local/bin/sbx\", \"args\": [\"mcp\"] } } }\n");
}

int cmd_mcp(int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, 's' }, { "sandbox", required_argument, NULL, 'S' },
                { "verbose", no_argument, NULL, 'v' },      { "help", no_argument, NULL, 'h' },
                {},
        };
        McpOptions o = { 0 };
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
                switch (c) {
                case 's': o.socket_path = optarg; break;
                case 'S': o.sandbox = optarg; break;
                case 'v': o.verbose = true; sbx_log_level = LOG_DEBUG; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        if (optind < argc || (o.sandbox && !o.socket_path)) {
                fprintf(stderr, "sbx mcp: %s\n\n",
                        o.sandbox && !o.socket_path ? "--sandbox needs --socket" : "unexpected argument");
                usage(stderr);
                return 2;
        }
        /* A daemon or a sandbox that is not there (or not ours) is said now, not as the failure
         * of every tool call once a client has started us. */
        if (o.socket_path) {
                /* No daemon at the socket (or not a socket) is said the way every client command
                 * says it, with exit 3; with --sandbox, one that is not there is exit 4. */
                json_t *res = NULL;
                int code = o.sandbox ? client_call_cli("mcp", o.socket_path, "process.list",
                                                       json_pack("{s:s}", "sandboxId", o.sandbox), &res)
                                     : client_call_cli("mcp", o.socket_path, "ping", json_object(), &res);
                json_decref(res);
                if (code)
                        return code;
        }
        return mcp_serve(&o) < 0 ? 1 : 0;
}
