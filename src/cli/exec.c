/* SPDX-License-Identifier: MIT */
/* `sbx exec`: commands in a session of a sandbox of a running `sbx serve --socket`, their
 * output streamed through. */
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/client.h"
#include "cli/procs.h"

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx exec [OPTIONS] ID -- CMD [CMD ...]\n"
                "\n"
                "Runs each CMD (a bash command line) in order in a session of sandbox ID of a\n"
                "running `sbx serve --socket PATH`, as `sbx run` does in a fresh sandbox: state\n"
                "such as cwd, variables and functions carries from one to the next and stays\n"
                "in the session for later commands. Their stdout and stderr are passed through\n"
                "as they arrive. Ctrl-C cancels the running command (exit 125).\n"
                "\n"
                "Options:\n"
                "      --socket PATH       the daemon's socket (default: $SBX_SOCKET)\n"
                "      --session NAME      the session (default: \"default\")\n"
                "  -C, --cwd DIR           working directory of each command\n"
                "  -e, --env NAME=VALUE    an environment variable for these commands (repeatable)\n"
                "  -t, --timeout SECONDS   per-command timeout (default: the sandbox's)\n"
                "      --raw               write the output to a terminal as it is; by default a\n"
                "                          terminal gets its control characters shown as text\n"
                "                          (\\x1b...), so no escape sequence of a command acts on it\n"
                "  -h, --help              show this help\n"
                "\n"
                "Exit status: the last command's (124 timed out, 125 interrupted); when none\n"
                "could run: 1 the daemon refused; 2 bad arguments; 3 no daemon at the socket;\n"
                "4 no such sandbox.\n");
}

enum { OPT_SOCKET = 256, OPT_SESSION, OPT_RAW };

typedef struct ExecArgs {
        const char *socket, *sandbox, *session, *cwd;
        json_t *env; /* owned, NULL when no -e */
        uint64_t timeout_ms;
} ExecArgs;

/* Reads the options into a, leaving optind at the sandbox id. Returns -1 to go on, else the
 * exit status to return at once (said on stderr or, for --help, stdout). */
static int parse_args(int argc, char **argv, ExecArgs *a) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, OPT_SOCKET }, { "session", required_argument, NULL, OPT_SESSION },
                { "cwd", required_argument, NULL, 'C' },           { "env", required_argument, NULL, 'e' },
                { "timeout", required_argument, NULL, 't' },       { "help", no_argument, NULL, 'h' },
                { "raw", no_argument, NULL, OPT_RAW },
                {},
        };
        int c;
        char *end;
        double secs;
        optind = 1;
        while ((c = getopt_long(argc, argv, "C:e:t:h", opts, NULL)) != -1) {
                switch (c) {
                case OPT_SOCKET: a->socket = optarg; break;
                case OPT_SESSION: a->session = optarg; break;
                case 'C': a->cwd = optarg; break;
                case 'e': {
                        const char *eq = strchr(optarg, '=');
                        if (!eq || !env_name_valid(optarg, (size_t)(eq - optarg))) {
                                fprintf(stderr, "sbx exec: --env takes NAME=VALUE, NAME of letters, digits and _ (not "
                                                "starting with a digit); got '%s'\n", optarg);
                                return CLIENT_EXIT_USAGE;
                        }
                        _cleanup_free_ char *name = strndup(optarg, (size_t)(eq - optarg));
                        if (!a->env)
                                a->env = json_object();
                        if (!name || !a->env || json_object_set_new(a->env, name, json_string(eq + 1)) < 0) {
                                fprintf(stderr, "sbx exec: --env: the value is not text (UTF-8)\n");
                                return CLIENT_EXIT_USAGE;
                        }
                        break;
                }
                case 't':
                        secs = strtod(optarg, &end);
                        if (end == optarg || *end || !(secs > 0 && secs * 1000 <= (double)SBX_MAX_TIMEOUT_MS)) {
                                fprintf(stderr, "sbx exec: --timeout takes seconds (fractions allowed, at most %llu); "
                                                "got '%s'\n", SBX_MAX_TIMEOUT_MS / 1000, optarg);
                                return CLIENT_EXIT_USAGE;
                        }
                        a->timeout_ms = (uint64_t)(secs * 1000 + 0.5);
                        break;
                case OPT_RAW: procs_set_raw(true); break;
                case 'h': usage(stdout); return 0;
                default: fprintf(stderr, "Try 'sbx exec --help'.\n"); return CLIENT_EXIT_USAGE;
                }
        }
        if (argc - optind < 2) {
                fprintf(stderr, "sbx exec: %s\n\n", optind == argc ? "no sandbox given" : "no command given");
                usage(stderr);
                return CLIENT_EXIT_USAGE;
        }
        if (!(a->socket = client_socket_path("exec", a->socket)))
                return CLIENT_EXIT_USAGE;
        a->sandbox = argv[optind++];
        return -1;
}

/* An error class in words, with the bound it hit when the result says. */
static const char *class_words(const char *ec, json_t *result) {
        static char buf[160];
        if (!strcmp(ec, "LIMIT_EXCEEDED"))
                return "was not run: it is longer than the sandbox's command limit (limits.commandBytes, 64K by default)";
        if (!strcmp(ec, "PIDS_LIMIT"))
                return "was stopped: the sandbox's process limit was reached";
        if (!strcmp(ec, "OOM"))
                return "was killed: the sandbox ran out of memory (its memory limit)";
        if (!strcmp(ec, "FS_FULL"))
                return "ran out of space: the sandbox's filesystem is full (its fsLimitBytes or file count)";
        if (!strcmp(ec, "UNAVAILABLE"))
                return "could not start: the daemon is out of a resource (fds, memory); try again";
        snprintf(buf, sizeof buf, "ended with %s", ec);
        (void)result;
        return buf;
}

/* Ctrl-C, SIGTERM and SIGHUP cancel the running command rather than leaving it to run on
 * without us. Returns a signalfd of them, or -errno. */
static int block_signals(void) {
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGHUP);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
                return negerrno();
        int fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        return fd < 0 ? negerrno() : fd;
}

typedef struct RunWait {
        int64_t id;
        json_t *result; /* the answer's result, once it came */
        bool answered, cancelled;
        ClientError err;
        int werr; /* a failed write of the output, -errno */
} RunWait;

static void handle(RunWait *w, json_t *msg) {
        int64_t aid;
        const char *m;
        json_t *p;
        if (client_is_answer(msg, &aid) && aid == w->id) {
                w->answered = true;
                (void)client_answer_result(msg, &w->result, &w->err);
        } else if (client_is_notification(msg, &m, &p) && strcmp(m, "output") == 0 &&
                   json_integer_value(json_object_get(p, "requestId")) == w->id && w->werr == 0) {
                const char *st = json_string_value(json_object_get(p, "stream"));
                int fd = st && strcmp(st, "stderr") == 0 ? STDERR_FILENO : STDOUT_FILENO;
                w->werr = procs_write_bytes(fd, p, "data", "encoding");
        }
        /* Anything else is the answer to our cancel, which says nothing we need. */
}

/* Runs one command to its end. Returns 0 with w->result set, or -1 with w->err set. */
static int run_one(Client *cl, const ExecArgs *a, const char *command, int sfd, RunWait *w) {
        json_t *params = json_pack("{s:s, s:s, s:b}", "command", command, "sandboxId", a->sandbox, "stream", 1);
        if (params && a->session)
                json_object_set_new(params, "session", json_string(a->session));
        if (params && a->cwd)
                json_object_set_new(params, "cwd", json_string(a->cwd));
        if (params && a->env)
                json_object_set(params, "env", a->env);
        if (params && a->timeout_ms)
                json_object_set_new(params, "timeoutMs", json_integer((json_int_t)a->timeout_ms));
        int r = params ? client_send(cl, "run", params, &w->id) : -ENOMEM;
        while (r >= 0 && !w->answered) {
                struct pollfd p[2] = { { client_fd(cl), POLLIN, 0 }, { sfd, POLLIN, 0 } };
                if (poll(p, 2, -1) < 0 && errno != EINTR) {
                        r = negerrno();
                        break;
                }
                if (p[1].revents) {
                        struct signalfd_siginfo si;
                        while (read(sfd, &si, sizeof si) > 0)
                                ;
                        int64_t cid;
                        if (!w->cancelled)
                                r = client_send(cl, "cancel", json_pack("{s:I}", "requestId", (json_int_t)w->id), &cid);
                        w->cancelled = true;
                }
                if (r >= 0 && p[0].revents)
                        r = client_read(cl);
                json_t *msg;
                int k;
                while (r >= 0 && (k = client_next(cl, &msg)) != 0) {
                        if (k < 0) {
                                r = k;
                                break;
                        }
                        handle(w, msg);
                        json_decref(msg);
                }
        }
        if (r < 0) {
                w->err = (ClientError){ .code = 0, .errnum = -r };
                snprintf(w->err.message, sizeof w->err.message, "%s",
                         r == -ECONNRESET ? "the daemon closed the connection" : strerror(-r));
                return -1;
        }
        return w->result ? 0 : -1;
}

int cmd_exec(int argc, char **argv) {
        ExecArgs a = { 0 };
        int code = parse_args(argc, argv, &a);
        if (code >= 0) {
                json_decref(a.env);
                return code;
        }
        _cleanup_close_ int sfd = block_signals();
        ClientError err;
        Client *cl = NULL;
        if (sfd < 0 || client_connect(a.socket, &cl, &err) < 0) {
                json_decref(a.env);
                if (sfd < 0) {
                        fprintf(stderr, "sbx exec: signalfd: %s\n", strerror(-sfd));
                        return CLIENT_EXIT_FAILURE;
                }
                return client_fail("exec", a.socket, &err);
        }
        code = 0;
        for (int i = optind; i < argc; i++) {
                RunWait w = { 0 };
                if (run_one(cl, &a, argv[i], sfd, &w) < 0) {
                        code = client_fail("exec", a.socket, &w.err);
                        break;
                }
                if (w.werr < 0)
                        fprintf(stderr, "sbx exec: writing the output: %s\n", strerror(-w.werr));
                code = (int)json_integer_value(json_object_get(w.result, "exitCode"));
                const char *ec = json_string_value(json_object_get(w.result, "errorClass"));
                long long killed = (long long)json_integer_value(json_object_get(w.result, "killedProcesses"));
                const char *procs = killed == 1 ? "process" : "processes";
                if (ec && strcmp(ec, "TIMEOUT") == 0 && a.timeout_ms)
                        fprintf(stderr, "sbx exec: command %d timed out after %g s; killed %lld %s\n", i - optind + 1,
                                (double)a.timeout_ms / 1000, killed, procs);
                else if (ec && strcmp(ec, "TIMEOUT") == 0)
                        fprintf(stderr, "sbx exec: command %d timed out (the sandbox's timeout); killed %lld %s\n",
                                i - optind + 1, killed, procs);
                else if (ec && strcmp(ec, "CANCELLED") == 0 && w.cancelled)
                        fprintf(stderr, "sbx exec: command %d was interrupted; killed %lld %s%s\n", i - optind + 1,
                                killed, procs, i + 1 < argc ? "; the commands after it did not run" : "");
                else if (ec && strcmp(ec, "CANCELLED") == 0) {
                        /* Not our Ctrl-C: the sandbox was destroyed or the daemon is stopping. */
                        fprintf(stderr, "sbx exec: command %d was cancelled by the daemon (its sandbox was destroyed, or "
                                        "the daemon is stopping); killed %lld %s\n",
                                i - optind + 1, killed, procs);
                        json_decref(w.result);
                        break;
                }
                else if (ec)
                        fprintf(stderr, "sbx exec: command %d: %s\n", i - optind + 1, class_words(ec, w.result));
                if (json_is_true(json_object_get(w.result, "sessionReset")))
                        fprintf(stderr, "sbx exec: command %d: the session's shell was killed from inside the sandbox: "
                                        "the session started over (cwd, variables and functions of a new session)\n",
                                i - optind + 1);
                else if (json_is_true(json_object_get(w.result, "stateDiscarded")) && (!ec || strcmp(ec, "OOM") == 0))
                        fprintf(stderr, "sbx exec: command %d was killed (exit %d) before it ended: what it changed in "
                                        "the session (cwd, variables, functions) was not kept\n",
                                i - optind + 1, code);
                json_decref(w.result);
                if (w.cancelled || w.werr < 0) {
                        if (w.werr < 0)
                                code = CLIENT_EXIT_FAILURE;
                        break;
                }
        }
        client_free(cl);
        json_decref(a.env);
        return code;
}
