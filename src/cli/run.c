/* SPDX-License-Identifier: MIT */
/* `sbx run`: an ephemeral sandbox, one session, each CMD in turn, output streamed. */
#include <getopt.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <dirent.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/log.h"
#include "base/queue.h"
#include "base/util.h"
#include "sbx/image.h"
#include "cli/cli.h"
#include "base/text.h"
#include "sbx/sbx.h"

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx run [OPTIONS] -- CMD [CMD ...]\n"
                "\n"
                "Creates a sandbox, runs each CMD in order in one session (state such as cwd,\n"
                "variables and functions carries from one to the next), streams their output,\n"
                "destroys the sandbox and exits with the last command's exit code\n"
                "(124 on timeout, 125 when interrupted). A command that fails does not stop\n"
                "the next ones (the session outlives it) unless --fail-fast is given; every\n"
                "command that does not end normally is named on stderr with what happened.\n"
                "\n"
                "Options:\n"
                "  -t, --timeout SECONDS    per-command timeout (default 30; fractions allowed)\n"
                "      --fail-fast          stop at the first command that fails and exit with\n"
                "                           its status\n"
                "      --kill-leftovers     kill what each command leaves running when it ends\n"
                "                           (default: it keeps running, e.g. a server for the\n"
                "                           next command; a backgrounded fork bomb too)\n"
                "  -C, --cwd DIR            working directory of each command (default /home/user)\n"
                "  -e, --env NAME=VALUE     set an environment variable (repeatable)\n"
                "  -n, --network            share the host's network (default: loopback only)\n"
                "      --memory SIZE        memory limit (default 512M)\n"
                "      --pids N             process limit (default 256)\n"
                "      --cpus N             CPUs, fractions allowed (default: half the host's)\n"
                "      --fs-size SIZE       size of /tmp + /home/user (default 256M)\n"
                "      --files N            inode limit of /tmp + /home/user (default 10000)\n"
                "      --stdout-limit SIZE  stdout kept per command (default 1M)\n"
                "      --stderr-limit SIZE  stderr kept per command (default 1M)\n"
                "      --image IMAGE        an image of the image store (sbx image) as the root\n"
                "      --image-store DIR    that store (default: the daemon's default one)\n"
                "      --rootfs DIR         use DIR as the root filesystem instead of the host's\n"
                "      --import FILE        start from an archive made by --export (files and\n"
                "                           session state; refused archives change nothing)\n"
                "      --export FILE        after the last command, save the sandbox's files and\n"
                "                           session state to FILE (a zstd-compressed tar)\n"
                "      --no-favordynmods    as root, leave the host's cgroup2 mount as it is (by\n"
                "                           default favordynmods is turned on for it, once: see\n"
                "                           sbx-run(1))\n"
                "      --raw                write the output to a terminal as it is; by default a\n"
                "                           terminal gets its control characters shown as text\n"
                "                           (\\x1b...), so no escape sequence of a command acts on it\n"
                "  -v, --verbose            debug logging on stderr\n"
                "  -h, --help               show this help\n"
                "\n"
                "The commands' stdin is /dev/null: sbx run never passes its own on.\n"
                "SIZE takes a K, M, G or T suffix (powers of 1024).\n");
}

/* Output waiting for our stdout or stderr. The loop never blocks on a slow consumer (the
 * timeout must keep ticking): bytes are queued and written only as much as the fd takes;
 * past SBX_OUTPUT_QUEUE_HIGH_BYTES queued the run's pipes are no longer read until we are
 * below SBX_OUTPUT_QUEUE_LOW_BYTES. */
typedef struct OutQueue {
        int fd;
        ByteQueue q;
        bool is_pipe, dead;
} OutQueue;

typedef struct RunState {
        bool done;
        bool show[2], carry[2]; /* a terminal gets control characters as text (--raw: not) */
        int exit_code;
        SbxErrorClass ec;
        bool truncated[2];
        uint64_t dropped[2];
        uint32_t killed;
        bool state_discarded, session_reset;
        SbxRun *run;
        bool paused;
        OutQueue q[2];
        /* --stdout-limit / --stderr-limit: what is printed of each command (libsbx streams every
         * byte; the limit is what the result keeps, so the same is shown). */
        uint64_t cap[2], shown[2];
} RunState;

static size_t queued(const RunState *rs) {
        return bq_pending(&rs->q[0].q) + bq_pending(&rs->q[1].q);
}

static void queue_push(OutQueue *q, const uint8_t *d, size_t n) {
        if (!q->dead && bq_push(&q->q, d, n) < 0)
                q->dead = true;
}

/* Writes what the fd can take now without blocking: all of it to a file, the free space of a
 * pipe, else PIPE_BUF-sized pieces (a poll()ed POLLOUT guarantees that much). */
static void queue_write(OutQueue *q) {
        while (bq_pending(&q->q) > 0 && !q->dead) {
                size_t n = bq_pending(&q->q), room = 4096;
                if (!q->is_pipe) {
                        struct stat st;
                        if (fstat(q->fd, &st) == 0 && S_ISREG(st.st_mode))
                                room = n;
                } else {
                        int size = fcntl(q->fd, F_GETPIPE_SZ), unread = 0;
                        if (size > 0 && ioctl(q->fd, FIONREAD, &unread) == 0)
                                room = (size_t)(size - unread);
                }
                if (room == 0)
                        return;
                ssize_t w = write(q->fd, bq_head(&q->q), MIN(n, room));
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0) {
                        /* EPIPE or worse: nobody will read it. */
                        if (w < 0 && errno == EAGAIN)
                                return;
                        q->dead = true;
                        bq_clear(&q->q);
                        return;
                }
                bq_consume(&q->q, (size_t)w);
                if (q->is_pipe || room == 4096)
                        return; /* wait for the next POLLOUT */
        }
}

static void update_pause(RunState *rs) {
        bool want = queued(rs) > SBX_OUTPUT_QUEUE_HIGH_BYTES || (rs->paused && queued(rs) > SBX_OUTPUT_QUEUE_LOW_BYTES);
        if (want != rs->paused && rs->run && !rs->done) {
                rs->paused = want;
                sbx_run_pause_output(rs->run, want);
        }
}

static void on_output(void *ud, SbxStream st, const uint8_t *d, size_t n) {
        RunState *rs = ud;
        int k = st == SBX_STDOUT ? 0 : 1;
        uint64_t room = rs->cap[k] > rs->shown[k] ? rs->cap[k] - rs->shown[k] : 0;
        if ((uint64_t)n > room)
                n = (size_t)room;
        rs->shown[k] += n;
        for (size_t i = 0; i < n && rs->show[k]; i += 2048) {
                char text[TEXT_SHOWN_MAX(2048)];
                size_t c = MIN(n - i, (size_t)2048);
                queue_push(&rs->q[k], (const uint8_t *)text, text_show_controls(d + i, c, &rs->carry[k], text));
        }
        if (n && !rs->show[k])
                queue_push(&rs->q[k], d, n);
        update_pause(rs);
}

static void on_done(void *ud, const SbxResult *r) {
        RunState *rs = ud;
        rs->done = true;
        rs->run = NULL;
        rs->exit_code = r->exit_code;
        rs->ec = r->error_class;
        rs->truncated[0] = r->stdout_truncated;
        rs->truncated[1] = r->stderr_truncated;
        rs->dropped[0] = r->stdout_dropped;
        rs->dropped[1] = r->stderr_dropped;
        rs->killed = r->killed;
        rs->state_discarded = r->state_discarded;
        rs->session_reset = r->session_reset;
}

static void queue_init(OutQueue *q, int fd) {
        struct stat st;
        *q = (OutQueue){ .fd = fd };
        q->is_pipe = fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

/* A decimal number (fractions allowed) into thousandths, rounded (0.0004 is 0, which the
 * rules then refuse); the range is the limit's rule's. */
static int parse_thousandths(const char *s, uint64_t *ret) {
        char *end;
        double v = strtod(s, &end);
        if (end == s || *end || !(v >= 0 && v < 1e12))
                return -EINVAL;
        *ret = (uint64_t)(v * 1000 + 0.5);
        return 0;
}

enum { OPT_MEMORY = 256, OPT_PIDS, OPT_CPUS, OPT_FS, OPT_FILES, OPT_STDOUT, OPT_STDERR, OPT_ROOTFS, OPT_IMPORT, OPT_EXPORT,
       OPT_FAIL_FAST, OPT_KILL_LEFTOVERS, OPT_IMAGE, OPT_IMAGE_STORE, OPT_RAW,
       OPT_NO_FAVORDYNMODS };

#ifndef SBX_RUN_LIGHT
typedef struct OpWait {
        bool done;
        int error;
        char msg[512];
        const char *export_path;
} OpWait;

static void op_done(void *ud, const SbxOpResult *res) {
        OpWait *w = ud;
        w->done = true;
        w->error = res->error;
        if (res->error) {
                snprintf(w->msg, sizeof w->msg, "%s", res->message ? res->message : strerror(-res->error));
                return;
        }
        if (w->export_path && res->data) {
                /* An old archive is never half replaced. */
                int r = write_file_replace(w->export_path, res->data, res->len);
                if (r < 0) {
                        w->error = r;
                        snprintf(w->msg, sizeof w->msg, "%s: %s", w->export_path, strerror(-r));
                }
        }
}

/* Runs one fork/snapshot/export operation to its end. */
static int op_wait(SbxContext *ctx, OpWait *w) {
        while (!w->done)
                if (sbx_context_run_once(ctx, -1) < 0)
                        return -EIO;
        return w->error;
}
#endif

static const struct option run_opts[] = {
        { "timeout", required_argument, NULL, 't' },
        { "cwd", required_argument, NULL, 'C' },
        { "env", required_argument, NULL, 'e' },
        { "network", no_argument, NULL, 'n' },
        { "memory", required_argument, NULL, OPT_MEMORY },
        { "pids", required_argument, NULL, OPT_PIDS },
        { "cpus", required_argument, NULL, OPT_CPUS },
        { "fs-size", required_argument, NULL, OPT_FS },
        { "files", required_argument, NULL, OPT_FILES },
        { "stdout-limit", required_argument, NULL, OPT_STDOUT },
        { "stderr-limit", required_argument, NULL, OPT_STDERR },
        { "rootfs", required_argument, NULL, OPT_ROOTFS },
        { "image", required_argument, NULL, OPT_IMAGE },
        { "image-store", required_argument, NULL, OPT_IMAGE_STORE },
        { "import", required_argument, NULL, OPT_IMPORT },
        { "export", required_argument, NULL, OPT_EXPORT },
        { "fail-fast", no_argument, NULL, OPT_FAIL_FAST },
        { "kill-leftovers", no_argument, NULL, OPT_KILL_LEFTOVERS },
        { "raw", no_argument, NULL, OPT_RAW },
        { "no-favordynmods", no_argument, NULL, OPT_NO_FAVORDYNMODS },
        { "verbose", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },
        {},
};

typedef struct RunArgs {
        SbxSandboxOptions so;
        const char *cwd, *import_path, *export_path;
        const char *image_store; /* with so.image: the store (NULL: the default one) */
        const char **env; /* the caller's, room for one per argument; so.env points here */
        size_t n_env;
        bool fail_fast, raw, no_favordynmods;
} RunArgs;

typedef enum ArgKind { A_SIZE, A_COUNT, A_THOUSANDTHS } ArgKind;

/* A limit given on the command line: its syntax here, its range by the library's rule (the
 * same as the protocol's). Returns 0, or -EINVAL once stderr says why in one line. */
static int limit_arg(SbxLimitId id, ArgKind kind, const char *opt, const char *arg, uint64_t *ret) {
        static const char *const what[] = { "a size (a number, with K, M, G or T for powers of 1024)",
                                            "a whole number", "a number (fractions allowed)" };
        char msg[256];
        int r = kind == A_SIZE ? parse_size(arg, ret) : kind == A_COUNT ? parse_u64(arg, UINT64_MAX, ret)
                                                                          : parse_thousandths(arg, ret);
        if (r < 0 && arg[0] == '-') {
                fprintf(stderr, "sbx run: %s must be above 0; got '%s'\n", opt, arg);
                return -EINVAL;
        }
        if (r < 0) {
                fprintf(stderr, "sbx run: %s takes %s; got '%s'\n", opt, what[kind], arg);
                return -EINVAL;
        }
        if (sbx_limit_check(id, *ret, opt, msg, sizeof msg) < 0) {
                fprintf(stderr, "sbx run: %s\n", msg);
                return -EINVAL;
        }
        return 0;
}

/* Reads one option into a. Returns 0, 1 after --help, -EINVAL once stderr says why. */
static int parse_one(int c, const char *opt, RunArgs *a) {
        SbxLimits *l = &a->so.limits;
        uint64_t v = 0;
        int r = 0;
        switch (c) {
        case 't': r = limit_arg(SBX_LIMIT_TIMEOUT, A_THOUSANDTHS, "--timeout", optarg, &a->so.timeout_ms); break;
        case 'C': a->cwd = optarg; break;
        case 'e':
                if (!strchr(optarg, '=') || !env_name_valid(optarg, (size_t)(strchr(optarg, '=') - optarg))) {
                        fprintf(stderr, "sbx run: --env takes NAME=VALUE, NAME of letters, digits and _ (not starting "
                                        "with a digit); got '%s'\n", optarg);
                        return -EINVAL;
                }
                a->env[a->n_env++] = optarg;
                break;
        case 'n': a->so.network = true; break;
        case OPT_MEMORY: r = limit_arg(SBX_LIMIT_MEMORY, A_SIZE, opt, optarg, &l->memory_bytes); break;
        case OPT_PIDS:
                r = limit_arg(SBX_LIMIT_PIDS, A_COUNT, opt, optarg, &v);
                l->pids = (uint32_t)v;
                break;
        case OPT_CPUS:
                r = limit_arg(SBX_LIMIT_CPU, A_THOUSANDTHS, opt, optarg, &v);
                l->cpu_millis = (uint32_t)v;
                break;
        case OPT_FS: r = limit_arg(SBX_LIMIT_FS, A_SIZE, opt, optarg, &l->fs_bytes); break;
        case OPT_FILES: r = limit_arg(SBX_LIMIT_FILES, A_COUNT, opt, optarg, &l->file_count); break;
        case OPT_STDOUT: r = limit_arg(SBX_LIMIT_STDOUT, A_SIZE, opt, optarg, &l->stdout_bytes); break;
        case OPT_STDERR: r = limit_arg(SBX_LIMIT_STDERR, A_SIZE, opt, optarg, &l->stderr_bytes); break;
        case OPT_ROOTFS: a->so.rootfs = optarg; break;
        case OPT_IMAGE: a->so.image = optarg; break;
        case OPT_IMAGE_STORE: a->image_store = optarg; break;
        case OPT_IMPORT: a->import_path = optarg; break;
        case OPT_EXPORT: a->export_path = optarg; break;
        case OPT_FAIL_FAST: a->fail_fast = true; break;
        case OPT_RAW: a->raw = true; break;
        case OPT_KILL_LEFTOVERS: a->so.kill_leftovers = true; break;
        case OPT_NO_FAVORDYNMODS: a->no_favordynmods = true; break;
        case 'v': sbx_log_level = LOG_DEBUG; break;
        case 'h': usage(stdout); return 1;
        default: return -EINVAL; /* getopt said which option; parse_args says where help is */
        }
        return r;
}

/* --export's file must be one sbx can write once the commands have run: said before any of
 * them runs, not after. */
static bool export_path_ok(const char *path) {
        _cleanup_free_ char *copy = strdup(path);
        const char *dir = copy ? dirname(copy) : ".";
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
                fprintf(stderr, "sbx run: --export %s: is a directory (give a file's path)\n", path);
                return false;
        }
        if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
                fprintf(stderr, "sbx run: --export %s: no directory %s to write it in\n", path, dir);
                return false;
        }
        if (access(dir, W_OK) < 0) {
                fprintf(stderr, "sbx run: --export %s: the directory %s is not writable: %s\n", path, dir,
                        strerror(errno));
                return false;
        }
        return true;
}

/* Parses the options into a, leaving optind at the first command. False when cmd_run is to
 * return *ret_exit at once: 0 after --help, 2 after a usage error (said on stderr). */
static bool parse_args(int argc, char **argv, RunArgs *a, int *ret_exit) {
        char opt[64];
        int c, li = -1;
        sbx_sandbox_options_init(&a->so);
        optind = 1;
        while ((c = getopt_long(argc, argv, "+t:C:e:nvh", run_opts, &li)) != -1) {
                if (li >= 0)
                        snprintf(opt, sizeof opt, "--%s", run_opts[li].name);
                else
                        snprintf(opt, sizeof opt, "-%c", c);
                int r = parse_one(c, opt, a);
                li = -1;
                if (r == 0)
                        continue;
                if (r < 0)
                        fprintf(stderr, "Try 'sbx run --help'.\n");
                *ret_exit = r > 0 ? 0 : 2;
                return false;
        }
        if (optind >= argc) {
                fprintf(stderr, "sbx run: no command given\n\n");
                usage(stderr);
                *ret_exit = 2;
                return false;
        }
        /* `sbx run echo hi` would run `echo` and then `hi`: each CMD is a whole command line. */
        if (argc - optind >= 2 && strcmp(argv[optind - 1], "--") != 0) {
                fprintf(stderr, "sbx run: each CMD is a whole bash command line, run in turn: give them after "
                                "`--`, quoted (sbx run -- '%s %s')\n",
                        argv[optind], argv[optind + 1]);
                *ret_exit = 2;
                return false;
        }
        a->so.env = a->n_env ? a->env : NULL;
        if (a->export_path && !export_path_ok(a->export_path)) {
                *ret_exit = 2;
                return false;
        }
        return true;
}

/* Ctrl-C and SIGTERM cancel the running command (exit 125) instead of killing us, so the
 * sandbox is always torn down. Returns a signalfd of them. */
static int block_signals(void) {
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGHUP);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        return signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
}

#ifndef SBX_RUN_LIGHT
/* Loads the archive at path into sb, before its session starts. Returns 0, or -errno once
 * stderr says why. */
static int import_archive(SbxContext *ctx, SbxSandbox *sb, const char *path) {
        _cleanup_free_ uint8_t *data = NULL;
        size_t len = 0;
        OpWait w = { 0 };
        int r = read_file_whole(path, SBX_MAX_ARCHIVE_BYTES, &data, &len);
        if (r < 0)
                snprintf(w.msg, sizeof w.msg, "%s: %s", path, strerror(-r));
        else if ((r = sbx_sandbox_import(sb, data, len, op_done, &w)) >= 0)
                r = op_wait(ctx, &w);
        if (r < 0)
                fprintf(stderr, "sbx run: import: %s\n", w.msg[0] ? w.msg : strerror(-r));
        return r;
}

/* Saves sb's files and session state to path. Returns 0, or -errno once stderr says why. */
static int export_archive(SbxContext *ctx, SbxSandbox *sb, const char *path) {
        OpWait w = { .export_path = path };
        int r = sbx_sandbox_export(sb, op_done, &w);
        if (r >= 0)
                r = op_wait(ctx, &w);
        if (r < 0)
                fprintf(stderr, "sbx run: export: %s\n", w.msg[0] ? w.msg : strerror(-r));
        return r;
}
#endif

/* Serves the context, the signals and our stdout and stderr until the run ended and
 * everything it said is written. A signal cancels the run and sets *interrupted. */
static void run_wait(SbxContext *ctx, RunState *rs, int sfd, bool *interrupted) {
        while (!rs->done || queued(rs) > 0) {
                struct pollfd p[4] = {
                        { sbx_context_fd(ctx), POLLIN, 0 }, { sfd, POLLIN, 0 },
                        { STDOUT_FILENO, bq_pending(&rs->q[0].q) ? POLLOUT : 0, 0 },
                        { STDERR_FILENO, bq_pending(&rs->q[1].q) ? POLLOUT : 0, 0 },
                };
                if (poll(p, 4, -1) < 0 && errno != EINTR)
                        break;
                if (p[1].revents) {
                        struct signalfd_siginfo si;
                        while (read(sfd, &si, sizeof si) > 0)
                                ;
                        *interrupted = true;
                        if (rs->run)
                                (void)sbx_run_cancel(rs->run);
                        /* Whoever interrupted us may not read any more. */
                        rs->q[0].dead = rs->q[1].dead = true;
                        bq_clear(&rs->q[0].q);
                        bq_clear(&rs->q[1].q);
                }
                if (p[2].revents)
                        queue_write(&rs->q[0]);
                if (p[3].revents)
                        queue_write(&rs->q[1]);
                if (p[0].revents)
                        (void)sbx_context_run_once(ctx, 0);
                update_pause(rs);
        }
}

static const char *plural(uint64_t n) { return n == 1 ? "" : "es"; }

/* One line on stderr for a command that did not end normally: what happened, in the units
 * it was given in. Cut output is said for commands that otherwise ended well too. */
static void report(int n, const RunArgs *a, const RunState *rs) {
        char lim[32], t[32];
        const SbxLimits *l = &a->so.limits;
        uint64_t timeout = a->so.timeout_ms ? a->so.timeout_ms : SBX_DEFAULT_TIMEOUT_MS;
        snprintf(t, sizeof t, "%g s", (double)timeout / 1000);
        switch (rs->ec) {
        case SBX_ERROR_TIMEOUT:
                fprintf(stderr, "sbx: command %d timed out after %s; killed %u process%s\n", n, t, rs->killed,
                        plural(rs->killed));
                break;
        case SBX_ERROR_CANCELLED:
                fprintf(stderr, "sbx: command %d was interrupted; killed %u process%s\n", n, rs->killed, plural(rs->killed));
                break;
        case SBX_ERROR_PIDS_LIMIT:
                fprintf(stderr, "sbx: command %d was stopped: the sandbox's process limit (%u) was reached; "
                                "killed %u process%s (--pids raises it)\n",
                        n, l->pids ? l->pids : SBX_DEFAULT_PIDS, rs->killed, plural(rs->killed));
                break;
        case SBX_ERROR_OOM:
                format_size(l->memory_bytes ? l->memory_bytes : SBX_DEFAULT_MEMORY_BYTES, lim, sizeof lim);
                fprintf(stderr, "sbx: command %d failed (exit %d): the sandbox ran out of memory (%s); the kernel killed "
                                "a process (--memory raises it)\n", n, rs->exit_code, lim);
                break;
        case SBX_ERROR_FS_FULL:
                format_size(l->fs_bytes ? l->fs_bytes : SBX_DEFAULT_FS_BYTES, lim, sizeof lim);
                fprintf(stderr, "sbx: command %d failed (exit %d): the sandbox's filesystem is full (%s, %llu files; "
                                "--fs-size and --files raise them)\n",
                        n, rs->exit_code, lim, (unsigned long long)(l->file_count ? l->file_count : SBX_DEFAULT_FILE_COUNT));
                break;
        case SBX_ERROR_UNAVAILABLE:
                fprintf(stderr, "sbx: command %d was not run: the command could not be started (see its stderr)\n", n);
                break;
        case SBX_ERROR_LIMIT_EXCEEDED:
                /* Its stderr said it already ("the command was not run: ..."): once is enough. */
                break;
        case SBX_ERROR_NONE:
        default:
                break;
        }
        /* A timeout, cancel or stop says the session is as it was in the man page; a shell killed
         * by a signal from inside is said here, or the next command finds its cd undone. */
        if (rs->session_reset)
                fprintf(stderr, "sbx: command %d: the session's shell was killed from inside the sandbox: the session "
                                "started over (cwd, variables and functions of a new session)\n", n);
        else if (rs->state_discarded && (rs->ec == SBX_ERROR_NONE || rs->ec == SBX_ERROR_OOM))
                fprintf(stderr, "sbx: command %d was killed (exit %d) before it ended: what it changed in the session "
                                "(cwd, variables, functions) was not kept\n", n, rs->exit_code);
        static const char *const names[] = { "stdout", "stderr" };
        for (int i = 0; i < 2; i++) {
                uint64_t cap = i == 0 ? l->stdout_bytes : l->stderr_bytes;
                char dropped[32];
                if (!rs->truncated[i])
                        continue;
                format_size(cap ? cap : i == 0 ? SBX_DEFAULT_STDOUT_BYTES : SBX_DEFAULT_STDERR_BYTES, lim, sizeof lim);
                format_size(rs->dropped[i], dropped, sizeof dropped);
                fprintf(stderr, "sbx: command %d: %s was cut at %s; %s more were dropped (--%s-limit raises it)\n", n,
                        names[i], lim, dropped, names[i]);
        }
}

/* Runs the commands in s in turn; returns the exit status of the last one run, or -errno
 * when one could not be started (said on stderr). */
static int run_all(SbxContext *ctx, SbxSession *s, const RunArgs *a, int argc, char **argv, int sfd, bool *interrupted) {
        RunState rs = { .exit_code = 1 };
        char failed[512] = "";
        size_t flen = 0;
        int r = 0, last = 0;
        queue_init(&rs.q[0], STDOUT_FILENO);
        queue_init(&rs.q[1], STDERR_FILENO);
        rs.show[0] = !a->raw && isatty(STDOUT_FILENO);
        rs.show[1] = !a->raw && isatty(STDERR_FILENO);
        for (int i = optind; i < argc && !*interrupted; i++) {
                SbxRunOptions ro = { .command = argv[i], .command_len = strlen(argv[i]), .cwd = a->cwd };
                rs.done = false;
                rs.paused = false;
                rs.shown[0] = rs.shown[1] = 0;
                rs.cap[0] = a->so.limits.stdout_bytes ? a->so.limits.stdout_bytes : SBX_DEFAULT_STDOUT_BYTES;
                rs.cap[1] = a->so.limits.stderr_bytes ? a->so.limits.stderr_bytes : SBX_DEFAULT_STDERR_BYTES;
                if ((r = sbx_session_run(s, &ro, on_output, on_done, &rs, &rs.run)) < 0)
                        break;
                run_wait(ctx, &rs, sfd, interrupted);
                int n = i - optind + 1;
                report(n, a, &rs);
                last = rs.exit_code;
                if (rs.exit_code != 0 && i + 1 < argc && flen < sizeof failed - 64)
                        flen += (size_t)snprintf(failed + flen, sizeof failed - flen, "%s%d (exit %d)", flen ? ", " : "",
                                                 n, rs.exit_code);
                if (rs.exit_code != 0 && a->fail_fast) {
                        if (i + 1 < argc)
                                fprintf(stderr, "sbx: --fail-fast: the %d command%s after it did not run\n", argc - i - 1,
                                        argc - i - 1 == 1 ? "" : "s");
                        flen = 0;
                        break;
                }
        }
        bq_done(&rs.q[0].q);
        bq_done(&rs.q[1].q);
        if (r < 0) {
                fprintf(stderr, "sbx run: %s\n", strerror(-r));
                return r;
        }
        /* The exit status is the last command's: say which earlier ones failed. */
        if (flen && !*interrupted)
                fprintf(stderr, "sbx: earlier commands failed: %s\n", failed);
        return last;
}

/* A run removes its sandbox after its exit (free_after_exit()) when it is sbx (sbx-engine's
 * runs, with --image, --import or --export, hold the image store's lock or an archive's memory
 * until then) and not under AddressSanitizer, whose leak check at exit would not be heard from
 * a detached child (test.sh runs the suite under it to check that the removal frees
 * everything). */
#if defined(__SANITIZE_ADDRESS__)
#define RUN_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RUN_ASAN 1
#endif
#endif
#if defined(SBX_RUN_LIGHT) && !defined(RUN_ASAN)
#define RUN_DETACHED 1
#endif

#ifdef RUN_DETACHED
/* The detached child: nothing of the caller's (stdio on /dev/null, a session of its own, the
 * fds the caller passed closed: sbx's own are all close-on-exec, what came through an exec is
 * not) and the signals the run blocked for its cancel unblocked. */
static int free_detached(void *arg) {
        (void)setsid();
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        for (int fd = 0; fd <= 2; fd++)
                if (null < 0 || dup2(null, fd) < 0)
                        (void)close(fd);
        DIR *d = opendir("/proc/self/fd");
        struct dirent *de;
        while (d && (de = readdir(d))) {
                int fd = atoi(de->d_name), flags;
                if (fd > 2 && fd != dirfd(d) && (flags = fcntl(fd, F_GETFD)) >= 0 && !(flags & FD_CLOEXEC))
                        (void)close(fd);
        }
        if (d)
                closedir(d);
        sigset_t none;
        sigemptyset(&none);
        (void)sigprocmask(SIG_SETMASK, &none, NULL);
        sbx_context_free(arg);
        return 0;
}
#endif

/* The answer is out (every byte of output written, the exit code known): the sandbox's
 * removal (its processes' end, its cgroups' and mounts' removal: 1.2 ms here, a fifth of a
 * one-shot run) is not on the caller's way. A child does it, detached (free_detached()).
 * pid 1 dies as this process exits (PR_SET_PDEATHSIG), and the child, not its parent, waits
 * for its cgroups to empty and removes them, its sandboxes' and the base sbx-PID named after
 * this process, within SBX_DESTROY_TIMEOUT_MS. This process then ends at once with code
 * (_exit: what it still holds is the child's to free, not a leak).
 *
 * The child shares this process's memory (CLONE_VM, a stack of its own with a guard page): a
 * fork's copy of the page tables, and this process's exit tearing its own down, were most of
 * what was left between the answer and the exit (0.4 ms of 0.5 here). This process does
 * nothing after the clone but the exit_group system call; the child runs on its thread area,
 * as the only thread left using it, whose tid word (the parent's) the kernel zeroes as the
 * parent exits: nothing the removal calls reads it (no threads, no recursive or robust mutex).
 *
 * Done here instead, and code returned: without RUN_DETACHED, without a clone, and when this
 * process is pid 1 of its pid namespace (`unshare -fp sbx run`), whose exit kills every
 * process of the namespace, the child too. */
static int free_after_exit(SbxContext *ctx, int code) {
        fflush(stdout);
        fflush(stderr);
#ifdef RUN_DETACHED
        const size_t guard = 4096, size = (1 << 20) + guard;
        void *stack = getpid() == 1 ? MAP_FAILED
                                    : mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (stack != MAP_FAILED && mprotect(stack, guard, PROT_NONE) == 0 &&
            clone(free_detached, (char *)stack + size, CLONE_VM | SIGCHLD, ctx) > 0)
                _exit(code);
#endif
        sbx_context_free(ctx);
        return code;
}

int cmd_run(int argc, char **argv) {
        _cleanup_free_ const char **env = calloc((size_t)argc + 1, sizeof *env);
        if (!env)
                return 1;
#ifdef SBX_RUN_LIGHT
        /* sbx-engine's argv (getopt permutes this one): "sbx", "run", the options. */
        _cleanup_free_ char **whole = calloc((size_t)argc + 2, sizeof *whole);
        if (!whole)
                return 1;
        whole[0] = (char *)"sbx";
        whole[1] = (char *)"run";
        for (int i = 1; i < argc; i++)
                whole[i + 1] = argv[i];
#endif
        RunArgs a = { .env = env };
        int code;
        if (!parse_args(argc, argv, &a, &code))
                return code;
#ifdef SBX_RUN_LIGHT
        /* sbx is linked without libarchive (1.2 ms of every start here, with the libraries it
         * brings: libxml2, ICU, libstdc++): what needs it is sbx-engine's. */
        if (a.import_path || a.export_path || a.so.image)
                return cli_exec_engine(whole);
#endif
        _cleanup_close_ int sfd = block_signals();

        SbxContext *ctx = NULL;
        SbxSandbox *sb = NULL;
        SbxSession *s = NULL;
        /* No egress proxy (sbx run has no network allowlist): neither GnuTLS nor c-ares loads. */
        int r = sbx_context_new_local(&ctx);
        /* One sandbox, then gone: a spawner's fork would only add to its time. */
        if (r >= 0)
                (void)sbx_context_set_spawner(ctx, false);
        /* Its pid 1's join and its first command's move would each wait for a grace period.
         * Once they do not, its moves are written here, not by a mover process it would fork. */
        if (r >= 0 && geteuid() == 0 && !a.no_favordynmods) {
                char where[1024];
                if (sbx_host_favor_cgroup_moves(where, sizeof where) >= 0)
                        (void)sbx_context_set_mover(ctx, false);
        }
#ifndef SBX_RUN_LIGHT
        if (r >= 0 && a.so.image) {
                char dir[4096], err[512];
                if (!a.image_store && sbx_image_store_default(dir, sizeof dir) == 0)
                        a.image_store = dir;
                if (!a.image_store || sbx_context_set_image_store(ctx, a.image_store, 0, err, sizeof err) < 0) {
                        fprintf(stderr, "sbx run: --image: %s\n", a.image_store ? err : "no image store: give --image-store DIR");
                        sbx_context_free(ctx);
                        return 1;
                }
        }
#endif
        if (r >= 0)
                r = sbx_sandbox_new(ctx, &a.so, &sb);
        if (r < 0) {
                fprintf(stderr, "sbx run: cannot create sandbox: %s\n",
                        ctx && *sbx_context_last_error(ctx) ? sbx_context_last_error(ctx) : strerror(-r));
                sbx_context_free(ctx);
                return 1;
        }
#ifndef SBX_RUN_LIGHT
        if (a.import_path && import_archive(ctx, sb, a.import_path) < 0) {
                sbx_context_free(ctx);
                return 1;
        }
#endif
        bool interrupted = false;
        r = sbx_session_get(sb, NULL, &s);
        if (r < 0)
                fprintf(stderr, "sbx run: %s\n", strerror(-r));
        else
                r = code = run_all(ctx, s, &a, argc, argv, sfd, &interrupted);
#ifndef SBX_RUN_LIGHT
        if (r >= 0 && a.export_path && !interrupted) {
                int e = export_archive(ctx, sb, a.export_path);
                if (e < 0)
                        r = e;
        }
#endif
        return free_after_exit(ctx, r < 0 ? 1 : code);
}
