/* SPDX-License-Identifier: MIT */
/* `sbx logs`: a process's output, as far as it goes or followed to its end. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "cli/cli.h"
#include "cli/client.h"
#include "cli/procs.h"

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx logs [--socket PATH] [-f] ID PROC\n"
                "\n"
                "Writes the output of process PROC (a process id such as p3, or a pid, as sbx ps\n"
                "shows them) of sandbox ID of a running `sbx serve --socket PATH`: its stdout to\n"
                "stdout and its stderr to stderr, from the oldest byte the daemon still holds\n"
                "(the newest 1 MiB of each process) to the newest. With -f, keeps following the\n"
                "output as it comes until the process ends, and exits with its exit status.\n"
                "\n"
                "Options:\n"
                "      --socket PATH   the daemon's socket (default: $SBX_SOCKET)\n"
                "  -f, --follow        follow until the process ends\n"
                "      --raw           write the output to a terminal as it is; by default a\n"
                "                      terminal gets its control characters shown as text\n"
                "                      (\\x1b...), so no escape sequence of a command acts on it\n"
                "  -h, --help          show this help\n"
                "\n"
                "Exit status: 0 (with -f: the process's exit status, 128+N when killed by signal\n"
                "N); 1 the daemon refused; 2 bad arguments; 3 no daemon at the socket; 4 no such\n"
                "sandbox; 5 no such process.\n");
}

enum { OPT_SOCKET = 256, OPT_RAW };

typedef struct Follow {
        const char *process_id;
        int error; /* the first write that failed, -errno */
} Follow;

static void say_dropped(json_t *obj) {
        json_int_t dropped = json_integer_value(json_object_get(obj, "dropped"));
        if (dropped > 0)
                fprintf(stderr, "sbx logs: %" JSON_INTEGER_FORMAT " bytes of output are gone before this (the daemon keeps "
                                "the newest 1 MiB of a process)\n", dropped);
}

static void on_note(void *ud, const char *method, json_t *params) {
        Follow *f = ud;
        const char *pid = json_string_value(json_object_get(params, "processId"));
        if (strcmp(method, "process.output") != 0 || !pid || strcmp(pid, f->process_id) != 0 || f->error)
                return;
        say_dropped(params);
        const char *stream = json_string_value(json_object_get(params, "stream"));
        int fd = stream && strcmp(stream, "stderr") == 0 ? STDERR_FILENO : STDOUT_FILENO;
        f->error = procs_write_bytes(fd, params, "data", "dataEncoding");
}

/* Everything logged so far, a process.logs answer at a time. Returns 0, -1 with err set, or
 * -errno of a write to stdout or stderr with *ret_werr set too. */
static int dump(Client *cl, const char *process_id, ClientError *err, int *ret_werr) {
        json_int_t cursor = 0;
        for (;;) {
                json_t *res = NULL;
                if (client_request(cl, "process.logs", json_pack("{s:s, s:I}", "processId", process_id, "cursor", cursor),
                                   NULL, NULL, &res, err) < 0)
                        return -1;
                say_dropped(res);
                int r = procs_write_bytes(STDOUT_FILENO, res, "stdout", "stdoutEncoding");
                if (r >= 0)
                        r = procs_write_bytes(STDERR_FILENO, res, "stderr", "stderrEncoding");
                json_int_t next = json_integer_value(json_object_get(res, "cursor"));
                bool eof = json_is_true(json_object_get(res, "eof"));
                json_decref(res);
                if (r < 0)
                        return *ret_werr = r;
                /* A cursor that did not move: we have what the log holds now. */
                if (eof || next <= cursor)
                        return 0;
                cursor = next;
        }
}

int cmd_logs(int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, OPT_SOCKET },
                { "follow", no_argument, NULL, 'f' },
                { "help", no_argument, NULL, 'h' },
                { "raw", no_argument, NULL, OPT_RAW },
                {},
        };
        const char *sock = NULL;
        bool follow = false;
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "fh", opts, NULL)) != -1) {
                switch (c) {
                case OPT_SOCKET: sock = optarg; break;
                case 'f': follow = true; break;
                case OPT_RAW: procs_set_raw(true); break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return CLIENT_EXIT_USAGE;
                }
        }
        if (argc - optind != 2) {
                fprintf(stderr, "sbx logs: %s\n\n", argc - optind < 2 ? "give a sandbox and a process" : "too many arguments");
                usage(stderr);
                return CLIENT_EXIT_USAGE;
        }
        const char *id = argv[optind], *proc = argv[optind + 1];
        if (!(sock = client_socket_path("logs", sock)))
                return CLIENT_EXIT_USAGE;
        ClientError err;
        Client *cl = NULL;
        json_t *entry = NULL, *res = NULL;
        int r = client_connect(sock, &cl, &err), status = 0, werr = 0;
        if (r >= 0)
                r = procs_find(cl, id, proc, &entry, &err);
        if (r >= 0 && !follow) {
                r = dump(cl, json_string_value(json_object_get(entry, "processId")), &err, &werr);
        } else if (r >= 0) {
                Follow f = { .process_id = json_string_value(json_object_get(entry, "processId")) };
                r = client_request(cl, "process.stream", json_pack("{s:s, s:I}", "processId", f.process_id, "cursor", 0),
                                   on_note, &f, &res, &err);
                if (r >= 0 && f.error < 0)
                        r = werr = f.error;
                if (r >= 0)
                        status = procs_exit_status(res);
        }
        json_decref(res);
        json_decref(entry);
        client_free(cl);
        if (werr < 0) {
                fprintf(stderr, "sbx logs: writing the output: %s\n", strerror(-werr));
                return CLIENT_EXIT_FAILURE;
        }
        if (r < 0)
                return client_fail("logs", sock, &err);
        return status;
}
