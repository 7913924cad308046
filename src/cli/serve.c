/* SPDX-License-Identifier: MIT */
/* `sbx serve`: the JSON-RPC daemon on stdio or a Unix socket. */
#include <getopt.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/log.h"
#include "cli/cli.h"
#include "server/server.h"

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx serve (--stdio | --socket PATH) [OPTIONS]\n"
                "\n"
                "Serves newline-delimited JSON-RPC 2.0 (see docs/PROTOCOL.md).\n"
                "\n"
                "Options:\n"
                "      --stdio          one client on stdin/stdout; exits when stdin closes\n"
                "      --socket PATH    many clients on a Unix socket (mode 0600, same uid or root)\n"
                "      --pool N         sandboxes kept ready for `create` with default options\n"
                "                       (default 2 with --socket, 0 with --stdio; at most 8)\n"
                "      --protocol       print the protocol reference (Markdown) and exit\n"
                "  -v, --verbose        debug logging on stderr\n"
                "  -h, --help           show this help\n");
}

int cmd_serve(int argc, char **argv) {
        static const struct option opts[] = {
                { "stdio", no_argument, NULL, 's' },
                { "socket", required_argument, NULL, 'S' },
                { "protocol", no_argument, NULL, 'P' },
                { "pool", required_argument, NULL, 'p' },
                { "verbose", no_argument, NULL, 'v' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        bool stdio = false;
        const char *path = NULL;
        long pool = -1;
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
                switch (c) {
                case 's': stdio = true; break;
                case 'S': path = optarg; break;
                case 'P': dispatch_print_protocol(stdout); return 0;
                case 'p': {
                        char *end;
                        pool = strtol(optarg, &end, 10);
                        if (*end || pool < 0 || pool > 8) {
                                fprintf(stderr, "sbx serve: --pool takes 0 to 8\n");
                                return 2;
                        }
                        break;
                }
                case 'v': sbx_log_level = LOG_DEBUG; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        if (optind < argc || stdio == (path != NULL)) {
                fprintf(stderr, "sbx serve: give exactly one of --stdio or --socket PATH\n\n");
                usage(stderr);
                return 2;
        }
        Server *s = NULL;
        /* Files and archives move as megabyte-sized lines: keep freed buffers for the next one
         * instead of handing them back to the kernel and faulting fresh pages in each time
         * (a few ms per MiB here). The daemon's memory then stays at its high-water mark. */
        (void)mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
        (void)mallopt(M_TRIM_THRESHOLD, 64 * 1024 * 1024);
        int r = server_new(&s);
        if (r >= 0)
                r = stdio ? server_add_stdio(s) : server_listen(s, path);
        if (r < 0) {
                fprintf(stderr, "sbx serve: %s%s%s\n", path ? path : "", path ? ": " : "", strerror(-r));
                server_free(s);
                return 1;
        }
        if (pool < 0)
                pool = path ? 2 : 0;
        server_set_pool(s, (unsigned)pool);
        if (path)
                log_info("listening on %s", path);
        r = server_run(s);
        server_free(s);
        return r;
}
