/* SPDX-License-Identifier: MIT */
/* `sbx kill`: signals a process of a sandbox and waits until all of it is dead. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/util.h"
#include "cli/cli.h"
#include "cli/client.h"
#include "cli/procs.h"

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx kill [--socket PATH] [-s SIGNAL] [--grace SECONDS] ID PROC\n"
                "\n"
                "Sends SIGNAL (default TERM) to process PROC (a process id such as p3, or a pid,\n"
                "as sbx ps shows them) of sandbox ID of a running `sbx serve --socket PATH` and\n"
                "to everything it started; what is still alive after the grace time is killed\n"
                "with KILL. Returns once all of it is dead, saying how it ended.\n"
                "\n"
                "Options:\n"
                "      --socket PATH     the daemon's socket (default: $SBX_SOCKET)\n"
                "  -s, --signal SIGNAL   a name (TERM, SIGINT, KILL ...) or a number\n"
                "      --grace SECONDS   before KILL (default 2; fractions allowed)\n"
                "  -h, --help            show this help\n"
                "\n"
                "Exit status: 0; 1 the daemon refused (the process has already ended, a bad\n"
                "signal); 2 bad arguments; 3 no daemon at the socket; 4 no such sandbox; 5 no\n"
                "such process.\n");
}

enum { OPT_SOCKET = 256, OPT_GRACE };

int cmd_kill(int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, OPT_SOCKET }, { "signal", required_argument, NULL, 's' },
                { "grace", required_argument, NULL, OPT_GRACE },   { "help", no_argument, NULL, 'h' },
                {},
        };
        const char *sock = NULL, *sig = NULL;
        double grace = -1;
        char *end;
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "s:h", opts, NULL)) != -1) {
                switch (c) {
                case OPT_SOCKET: sock = optarg; break;
                case 's': sig = optarg; break;
                case OPT_GRACE:
                        grace = strtod(optarg, &end);
                        if (end == optarg || *end || !(grace >= 0 && grace <= 3600)) {
                                fprintf(stderr, "sbx kill: --grace takes seconds from 0 to 3600; got '%s'\n", optarg);
                                return CLIENT_EXIT_USAGE;
                        }
                        break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return CLIENT_EXIT_USAGE;
                }
        }
        if (argc - optind != 2) {
                fprintf(stderr, "sbx kill: %s\n\n", argc - optind < 2 ? "give a sandbox and a process" : "too many arguments");
                usage(stderr);
                return CLIENT_EXIT_USAGE;
        }
        const char *id = argv[optind], *proc = argv[optind + 1];
        if (!(sock = client_socket_path("kill", sock)))
                return CLIENT_EXIT_USAGE;
        json_t *params = json_object();
        uint64_t signum;
        if (!params)
                return CLIENT_EXIT_FAILURE;
        if (sig && parse_u64(sig, 64, &signum) == 0)
                json_object_set_new(params, "signal", json_integer((json_int_t)signum));
        else if (sig)
                json_object_set_new(params, "signal", json_string(sig));
        if (grace >= 0)
                json_object_set_new(params, "graceMs", json_integer((json_int_t)(grace * 1000 + 0.5)));

        ClientError err;
        Client *cl = NULL;
        json_t *entry = NULL, *res = NULL;
        int r = client_connect(sock, &cl, &err);
        if (r >= 0)
                r = procs_find(cl, id, proc, &entry, &err);
        const char *process_id = json_string_value(json_object_get(entry, "processId"));
        if (r >= 0) {
                json_object_set_new(params, "processId", json_string(process_id));
                r = client_request(cl, "process.kill", TAKE_PTR(params), NULL, NULL, &res, &err);
        }
        json_decref(params);
        client_free(cl);
        if (r < 0) {
                json_decref(entry);
                return client_fail("kill", sock, &err);
        }
        const char *status = json_string_value(json_object_get(res, "status"));
        const char *how = json_string_value(json_object_get(res, "signal"));
        printf("%s (pid %lld): %s", process_id, (long long)json_integer_value(json_object_get(entry, "pid")),
               status ? status : "ended");
        if (how)
                printf(" by %s", how);
        if (procs_exit_known(res))
                printf(", exit %d\n", procs_exit_status(res));
        else
                printf(" (a leftover: its exit status is not known)\n");
        json_decref(res);
        json_decref(entry);
        return fflush(stdout) == 0 ? 0 : CLIENT_EXIT_FAILURE;
}
