/* SPDX-License-Identifier: MIT */
/* `sbx shell`: an interactive bash on a pty in a sandbox, wired to the user's terminal. */
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/queue.h"
#include "base/text.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/client.h"
#include "cli/procs.h"

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx shell [--socket PATH] [--session NAME] [ID]\n"
                "\n"
                "An interactive bash in sandbox ID of a running `sbx serve --socket PATH`, on a\n"
                "pseudo-terminal the size of yours (and resized with it): job control, Ctrl-C,\n"
                "line editing and full-screen programs work as in a local shell. Without ID, a\n"
                "sandbox is made for the session and destroyed when it ends. The shell is a\n"
                "process of the sandbox (sbx ps lists it); it ends when you leave it, or is\n"
                "killed if this command is (SIGTERM, SIGHUP, a closed terminal).\n"
                "\n"
                "Options:\n"
                "      --socket PATH    the daemon's socket (default: $SBX_SOCKET)\n"
                "      --session NAME   start from this session's cwd, variables and functions\n"
                "  -h, --help           show this help\n"
                "\n"
                "Exit status: the shell's (128+N when killed by signal N); 1 the daemon refused;\n"
                "2 bad arguments, or stdin is not a terminal; 3 no daemon at the socket, or it\n"
                "went away; 4 no such sandbox.\n");
}

enum { OPT_SOCKET = 256, OPT_SESSION };

/* The user's terminal as it was before raw mode, put back however we leave. */
typedef struct Tty {
        struct termios saved;
        bool raw;
} Tty;

static int tty_raw(Tty *t) {
        if (tcgetattr(STDIN_FILENO, &t->saved) < 0)
                return negerrno();
        struct termios raw = t->saved;
        /* Every key, Ctrl-C and Ctrl-Z included, goes to the sandbox's pty, whose line
         * discipline does what ours would have done. */
        cfmakeraw(&raw);
        /* TCSADRAIN, not TCSAFLUSH: keys typed while the shell was starting are kept for it. */
        if (tcsetattr(STDIN_FILENO, TCSADRAIN, &raw) < 0)
                return negerrno();
        t->raw = true;
        return 0;
}

static void tty_restore(Tty *t) {
        if (t->raw)
                (void)tcsetattr(STDIN_FILENO, TCSADRAIN, &t->saved);
        t->raw = false;
}

static void winsize(unsigned *ret_cols, unsigned *ret_rows) {
        struct winsize ws = { 0 };
        if ((ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) < 0 && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) < 0) || !ws.ws_col ||
            !ws.ws_row) {
                ws.ws_col = SBX_SHELL_DEFAULT_COLS;
                ws.ws_row = SBX_SHELL_DEFAULT_ROWS;
        }
        *ret_cols = ws.ws_col;
        *ret_rows = ws.ws_row;
}

/* Every signal that would end us (the terminal is raw: they come from outside, not from
 * keys) and SIGWINCH, as a signalfd; the loop handles them, so the terminal is always put
 * back. Returns the fd or -errno. */
static int block_signals(void) {
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGHUP);
        sigaddset(&mask, SIGQUIT);
        sigaddset(&mask, SIGWINCH);
        /* A daemon or terminal that went away is an error from write(), not our death. */
        signal(SIGPIPE, SIG_IGN);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
                return negerrno();
        int fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        return fd < 0 ? negerrno() : fd;
}

/* One interactive session. Invariant: at most one process.write is in flight (write_id
 * != 0); `in` holds the keys typed since, at most SBX_SHELL_INPUT_BYTES. */
typedef struct Shell {
        Client *cl;
        char process_id[64];
        int64_t stream_id, write_id;
        ByteQueue in;
        unsigned cols, rows;
        bool ended;         /* process.stream answered: the shell is gone, its output written */
        json_t *end;        /* that answer's result ({status, exitCode, signal}) */
        ClientError err;    /* process.stream's error, when it failed */
        bool failed;
        int leave_signal;   /* a signal that made us leave, 0 if none */
        bool stdin_gone;    /* the terminal hung up */
} Shell;

static int shell_send_write(Shell *sh) {
        size_t n = MIN(bq_pending(&sh->in), (size_t)SBX_SHELL_INPUT_BYTES);
        _cleanup_free_ char *b64 = b64_encode(bq_head(&sh->in), n, NULL);
        if (!b64)
                return -ENOMEM;
        bq_consume(&sh->in, n);
        return client_send(sh->cl, "process.write", json_pack("{s:s, s:s}", "processId", sh->process_id, "data", b64),
                           &sh->write_id);
}

static int shell_resize(Shell *sh) {
        unsigned cols, rows;
        int64_t id;
        winsize(&cols, &rows);
        if (cols == sh->cols && rows == sh->rows)
                return 0;
        sh->cols = cols;
        sh->rows = rows;
        return client_send(sh->cl, "process.resize",
                           json_pack("{s:s, s:I, s:I}", "processId", sh->process_id, "cols", (json_int_t)cols, "rows",
                                     (json_int_t)rows),
                           &id);
}

/* Handles one message from the daemon. Returns 0 or -errno of a write to the terminal. */
static int shell_handle(Shell *sh, json_t *msg) {
        int64_t id;
        const char *m;
        json_t *p;
        if (client_is_answer(msg, &id)) {
                if (id == sh->stream_id) {
                        sh->ended = true;
                        sh->failed = client_answer_result(msg, &sh->end, &sh->err) < 0;
                } else if (id == sh->write_id) {
                        /* A refused write is keys the shell will not see: it is ending (stdin
                         * closed with it), and process.stream's answer says how. */
                        sh->write_id = 0;
                }
                /* process.resize answers: a failed resize leaves the old size, nothing more. */
                return 0;
        }
        if (!client_is_notification(msg, &m, &p) || strcmp(m, "process.output") != 0)
                return 0; /* process.exit: process.stream's answer follows with the same */
        const char *pid = json_string_value(json_object_get(p, "processId"));
        if (!pid || strcmp(pid, sh->process_id) != 0)
                return 0;
        const char *st = json_string_value(json_object_get(p, "stream"));
        return procs_write_bytes(st && strcmp(st, "stderr") == 0 ? STDERR_FILENO : STDOUT_FILENO, p, "data",
                                 "dataEncoding");
}

static void shell_signal(Shell *sh, int sfd) {
        struct signalfd_siginfo si;
        while (read(sfd, &si, sizeof si) == sizeof si) {
                if (si.ssi_signo == SIGWINCH)
                        (void)shell_resize(sh);
                else
                        sh->leave_signal = (int)si.ssi_signo;
        }
}

/* Reads what the terminal has, up to the room left in `in`. */
static int shell_stdin(Shell *sh) {
        uint8_t buf[4096];
        size_t room = SBX_SHELL_INPUT_BYTES - bq_pending(&sh->in);
        ssize_t k = read(STDIN_FILENO, buf, MIN(room, sizeof buf));
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
                return 0;
        /* EIO: the terminal is gone (its emulator closed), as much a hangup as EOF. */
        if (k < 0 && errno != EIO)
                return negerrno();
        if (k <= 0) {
                sh->stdin_gone = true;
                return 0;
        }
        return bq_push(&sh->in, buf, (size_t)k);
}

/* Connects the terminal and the shell until the shell ends, a signal or a hangup says we
 * leave, or the connection fails. Returns 0, or -errno (sh->err says a connection failure). */
static int shell_loop(Shell *sh, int sfd) {
        int r = 0;
        while (!sh->ended && !sh->leave_signal && !sh->stdin_gone) {
                bool want_in = bq_pending(&sh->in) < SBX_SHELL_INPUT_BYTES;
                struct pollfd p[3] = {
                        { client_fd(sh->cl), POLLIN, 0 },
                        { sfd, POLLIN, 0 },
                        { want_in ? STDIN_FILENO : -1, POLLIN, 0 },
                };
                if (poll(p, 3, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        return negerrno();
                }
                if (p[1].revents)
                        shell_signal(sh, sfd);
                if (p[2].revents && (r = shell_stdin(sh)) < 0)
                        return r;
                if (p[0].revents && (r = client_read(sh->cl)) < 0)
                        return r;
                json_t *msg;
                int k;
                while ((k = client_next(sh->cl, &msg)) > 0) {
                        r = shell_handle(sh, msg);
                        json_decref(msg);
                        if (r < 0)
                                return r;
                }
                if (k < 0)
                        return k;
                if (!sh->write_id && bq_pending(&sh->in) && (r = shell_send_write(sh)) < 0)
                        return r;
        }
        return 0;
}

/* We leave before the shell did: it has nobody to talk to, so it goes (SIGHUP, as a closed
 * terminal would say; the daemon KILLs what outlives the grace time). Returns its exit
 * status. */
static int shell_hangup(Shell *sh) {
        json_t *res = NULL;
        ClientError err;
        if (client_request(sh->cl, "process.kill", json_pack("{s:s, s:s}", "processId", sh->process_id, "signal", "HUP"),
                           NULL, NULL, &res, &err) < 0)
                return 128 + SIGHUP;
        int status = procs_exit_status(res);
        json_decref(res);
        return status;
}

typedef struct ShellArgs {
        const char *socket, *session, *sandbox;
} ShellArgs;

/* Returns -1 to go on, else the exit status to return at once. */
static int parse_args(int argc, char **argv, ShellArgs *a) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, OPT_SOCKET },
                { "session", required_argument, NULL, OPT_SESSION },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                switch (c) {
                case OPT_SOCKET: a->socket = optarg; break;
                case OPT_SESSION: a->session = optarg; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return CLIENT_EXIT_USAGE;
                }
        }
        if (argc - optind > 1) {
                fprintf(stderr, "sbx shell: one sandbox at a time\n\n");
                usage(stderr);
                return CLIENT_EXIT_USAGE;
        }
        a->sandbox = optind < argc ? argv[optind] : NULL;
        if (!(a->socket = client_socket_path("shell", a->socket)))
                return CLIENT_EXIT_USAGE;
        if (!isatty(STDIN_FILENO)) {
                fprintf(stderr, "sbx shell: stdin is not a terminal (for commands without one: sbx exec)\n");
                return CLIENT_EXIT_USAGE;
        }
        return -1;
}

/* The interactive bash, started by the session's own bash (process.start, which carries the
 * session's cwd, variables, functions, aliases, options and umask): an exec'd bash would keep
 * only the cwd, umask and exported variables, so its rc file is first the system's and the
 * user's, then the session's state as bash prints it (variables but bash's own and the
 * read-only ones, functions, aliases, and the options that are on). */
#define SHELL_COMMAND                                                                                              \
        "exec bash --rcfile <(echo '[ -r /etc/bash.bashrc ] && . /etc/bash.bashrc; [ -r ~/.bashrc ] && . ~/.bashrc'; " \
        "declare -p | grep -Ev '^declare -[a-zA-Z]*r|^declare -[^ ]* (BASH[A-Z_0-9]*|FUNCNAME|GROUPS|PIPESTATUS|"  \
        "DIRSTACK|SHLVL|COLUMNS|LINES|HISTCMD|RANDOM|SRANDOM|SECONDS|LINENO|EPOCH[A-Z]*|OPTIND|_)(=|$)'; "           \
        "declare -f; alias -p; shopt -p | grep '^shopt -s'; set +o | grep '^set -o') -i"

/* Starts the shell process in the sandbox. Returns 0, or -1 with err set. */
static int shell_start(Shell *sh, const ShellArgs *a, const char *sandbox, ClientError *err) {
        winsize(&sh->cols, &sh->rows);
        json_t *params = json_pack("{s:s, s:s, s:b, s:{s:I, s:I}, s:s}", "command", SHELL_COMMAND, "sandboxId", sandbox,
                                   "stdin", 1, "pty", "cols", (json_int_t)sh->cols, "rows", (json_int_t)sh->rows, "label",
                                   "sbx shell");
        /* The sandbox says TERM=dumb to commands without a terminal; this one has the user's. */
        const char *term = getenv("TERM");
        if (params && term && *term)
                json_object_set_new(params, "env", json_pack("{s:s}", "TERM", term));
        if (params && a->session)
                json_object_set_new(params, "session", json_string(a->session));
        json_t *res = NULL;
        if (client_request(sh->cl, "process.start", params, NULL, NULL, &res, err) < 0)
                return -1;
        const char *pid = json_string_value(json_object_get(res, "processId"));
        snprintf(sh->process_id, sizeof sh->process_id, "%s", pid ? pid : "");
        json_decref(res);
        return 0;
}

int cmd_shell(int argc, char **argv) {
        /* A terminal of the sandbox's: its programs' escape sequences are for yours (sbx-shell(1)). */
        procs_set_raw(true);
        ShellArgs a = { 0 };
        int code = parse_args(argc, argv, &a);
        if (code >= 0)
                return code;
        _cleanup_close_ int sfd = block_signals();
        if (sfd < 0) {
                fprintf(stderr, "sbx shell: signalfd: %s\n", strerror(-sfd));
                return CLIENT_EXIT_FAILURE;
        }
        Shell sh = { 0 };
        ClientError err;
        json_t *made = NULL;
        const char *sandbox = a.sandbox;
        int r = client_connect(a.socket, &sh.cl, &err);
        /* Not persistent: should we die without destroying it, it goes with our connection. */
        if (r >= 0 && !sandbox &&
            (r = client_request(sh.cl, "sandbox.create", json_pack("{s:s}", "label", "sbx shell"), NULL, NULL, &made,
                                &err)) >= 0)
                sandbox = json_string_value(json_object_get(made, "sandboxId"));
        if (r >= 0)
                r = shell_start(&sh, &a, sandbox ? sandbox : "", &err);
        if (r < 0) {
                code = client_fail("shell", a.socket, &err);
                json_decref(made);
                client_free(sh.cl);
                return code;
        }

        Tty tty = { 0 };
        if ((r = tty_raw(&tty)) >= 0 &&
            (r = client_send(sh.cl, "process.stream", json_pack("{s:s, s:I}", "processId", sh.process_id, "cursor", 0),
                             &sh.stream_id)) >= 0)
                r = shell_loop(&sh, sfd);
        tty_restore(&tty);

        bool broken = r == -ECONNRESET || r == -EBADMSG || r == -EPIPE || r == -EFBIG;
        if (broken) {
                err = (ClientError){ .code = 0, .errnum = -r };
                snprintf(err.message, sizeof err.message, "%s",
                         r == -ECONNRESET || r == -EPIPE ? "the daemon closed the connection" : "the daemon's answer is not JSON-RPC");
                code = client_fail("shell", a.socket, &err);
        } else if (r < 0) {
                fprintf(stderr, "sbx shell: %s\n", strerror(-r));
                code = CLIENT_EXIT_FAILURE;
        } else if (sh.failed) {
                code = client_fail("shell", a.socket, &sh.err);
        } else if (sh.ended) {
                code = procs_exit_status(sh.end);
        }
        if (!broken && !sh.ended) {
                int status = shell_hangup(&sh);
                if (r >= 0)
                        code = sh.leave_signal ? 128 + sh.leave_signal : status;
        }
        if (made && !broken)
                (void)client_request(sh.cl, "sandbox.destroy", json_pack("{s:s}", "sandboxId", sandbox), NULL, NULL, NULL,
                                     &err);
        json_decref(sh.end);
        json_decref(made);
        bq_done(&sh.in);
        client_free(sh.cl);
        return code;
}
