/* SPDX-License-Identifier: MIT */
/* `sbx ps`: the processes of a sandbox of a running `sbx serve --socket`. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "base/util.h"
#include "cli/cli.h"
#include "cli/client.h"
#include "cli/procs.h"

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx ps [--socket PATH] [--json] ID\n"
                "\n"
                "Lists the processes of sandbox ID of a running `sbx serve --socket PATH`, oldest\n"
                "first: those started with process.start and those a command left running\n"
                "(origin leftover), running or ended. PROCESS or PID names one for sbx logs and\n"
                "sbx kill.\n"
                "\n"
                "Options:\n"
                "      --socket PATH   the daemon's socket (default: $SBX_SOCKET)\n"
                "      --json          the daemon's answer as JSON\n"
                "  -h, --help          show this help\n"
                "\n"
                "Exit status: 0; 1 the daemon refused; 2 bad arguments; 3 no daemon at the socket;\n"
                "4 no such sandbox.\n");
}

enum { OPT_SOCKET = 256, OPT_JSON };

/* When a process started, in local time: the time of day, with the date unless today. */
static void format_started(json_t *v, char *out, size_t size) {
        if (json_is_string(v)) {
                snprintf(out, size, "%s", json_string_value(v));
                return;
        }
        if (!json_is_integer(v)) {
                snprintf(out, size, "-");
                return;
        }
        time_t t = (time_t)(json_integer_value(v) / 1000), now = time(NULL);
        struct tm tm, today;
        localtime_r(&t, &tm);
        localtime_r(&now, &today);
        bool same_day = tm.tm_year == today.tm_year && tm.tm_yday == today.tm_yday;
        strftime(out, size, same_day ? "%H:%M:%S" : "%Y-%m-%d %H:%M", &tm);
}

static void print_row(json_t *p) {
        char exit_code[48] = "-", started[48], pid[24] = "-";
        json_t *code = json_object_get(p, "exitCode");
        const char *sig = json_string_value(json_object_get(p, "signal"));
        if (json_is_integer(code) && sig)
                snprintf(exit_code, sizeof exit_code, "%lld (%s)", (long long)json_integer_value(code), sig);
        else if (json_is_integer(code))
                snprintf(exit_code, sizeof exit_code, "%lld", (long long)json_integer_value(code));
        if (json_is_integer(json_object_get(p, "pid")))
                snprintf(pid, sizeof pid, "%lld", (long long)json_integer_value(json_object_get(p, "pid")));
        format_started(json_object_get(p, "startedAt"), started, sizeof started);
        const char *id = json_string_value(json_object_get(p, "processId"));
        const char *status = json_string_value(json_object_get(p, "status"));
        const char *origin = json_string_value(json_object_get(p, "origin"));
        printf("%-8s %7s  %-8s %-10s %-9s %-9s ", id ? id : "?", pid, status ? status : "?", exit_code, origin ? origin : "-",
               started);
        procs_print_text(stdout, json_string_value(json_object_get(p, "command")));
        putchar('\n');
}

int cmd_ps(int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, OPT_SOCKET },
                { "json", no_argument, NULL, OPT_JSON },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        const char *sock = NULL;
        bool as_json = false;
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                switch (c) {
                case OPT_SOCKET: sock = optarg; break;
                case OPT_JSON: as_json = true; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return CLIENT_EXIT_USAGE;
                }
        }
        if (argc - optind != 1) {
                fprintf(stderr, "sbx ps: %s\n\n", optind == argc ? "no sandbox given" : "one sandbox at a time");
                usage(stderr);
                return CLIENT_EXIT_USAGE;
        }
        const char *id = argv[optind];
        if (!(sock = client_socket_path("ps", sock)))
                return CLIENT_EXIT_USAGE;
        ClientError err;
        Client *cl = NULL;
        json_t *res = NULL;
        int r = client_connect(sock, &cl, &err);
        if (r >= 0)
                r = client_request(cl, "process.list", json_pack("{s:s}", "sandboxId", id), NULL, NULL, &res, &err);
        client_free(cl);
        if (r < 0)
                return client_fail("ps", sock, &err);
        if (as_json) {
                json_dumpf(res, stdout, JSON_INDENT(2));
                putchar('\n');
        } else {
                json_t *p;
                size_t i;
                printf("%-8s %7s  %-8s %-10s %-9s %-9s %s\n", "PROCESS", "PID", "STATUS", "EXIT", "ORIGIN", "STARTED",
                       "COMMAND");
                json_array_foreach(json_object_get(res, "processes"), i, p)
                        print_row(p);
        }
        json_decref(res);
        return fflush(stdout) == 0 ? 0 : CLIENT_EXIT_FAILURE;
}
