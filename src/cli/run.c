/* SPDX-License-Identifier: MIT */
/* `sbx run`: an ephemeral sandbox, one session, each CMD in turn, output streamed. */
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include "base/limits.h"
#include "base/log.h"
#include "base/queue.h"
#include "base/util.h"
#include "cli/cli.h"
#include "sbx/sbx.h"

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx run [OPTIONS] -- CMD [CMD ...]\n"
                "\n"
                "Creates a sandbox, runs each CMD in order in one session (state such as cwd,\n"
                "variables and functions carries from one to the next), streams their output,\n"
                "destroys the sandbox and exits with the last command's exit code\n"
                "(124 on timeout, 125 when interrupted).\n"
                "\n"
                "Options:\n"
                "  -t, --timeout SECONDS    per-command timeout (default 30; fractions allowed)\n"
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
                "      --rootfs DIR         use DIR as the root filesystem instead of the host's\n"
                "      --import FILE        start from an archive made by --export (files and\n"
                "                           session state; refused archives change nothing)\n"
                "      --export FILE        after the last command, save the sandbox's files and\n"
                "                           session state to FILE (a zstd-compressed tar)\n"
                "  -v, --verbose            debug logging on stderr\n"
                "  -h, --help               show this help\n"
                "\n"
                "SIZE takes a k, M or G suffix (powers of 1024).\n");
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
        int exit_code;
        SbxErrorClass ec;
        SbxRun *run;
        bool paused;
        OutQueue q[2];
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
        queue_push(&rs->q[st == SBX_STDOUT ? 0 : 1], d, n);
        update_pause(rs);
}

static void on_done(void *ud, const SbxResult *r) {
        RunState *rs = ud;
        rs->done = true;
        rs->run = NULL;
        rs->exit_code = r->exit_code;
        rs->ec = r->error_class;
}

static void queue_init(OutQueue *q, int fd) {
        struct stat st;
        *q = (OutQueue){ .fd = fd };
        q->is_pipe = fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

static int parse_seconds(const char *s, uint64_t *ret_ms) {
        char *end;
        double v = strtod(s, &end);
        if (end == s || *end || v <= 0 || v * 1000 > (double)SBX_MAX_TIMEOUT_MS)
                return -EINVAL;
        *ret_ms = (uint64_t)(v * 1000 + 0.5);
        return 0;
}

/* CPUs, fractions allowed, into thousandths: from 0.01 to the host's online CPUs (the
 * library's range, checked here too so that a bad value is a usage error). */
static int parse_cpus(const char *s, uint32_t *ret_millis) {
        char *end;
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        double millis = strtod(s, &end) * 1000 + 0.5; /* rounded: 0.0004 is refused, not 0 */
        if (end == s || *end || !(millis >= SBX_MIN_CPU_MILLIS && millis < (n > 0 ? n : 1) * 1000.0 + 1))
                return -EINVAL;
        *ret_millis = (uint32_t)millis;
        return 0;
}

enum { OPT_MEMORY = 256, OPT_PIDS, OPT_CPUS, OPT_FS, OPT_FILES, OPT_STDOUT, OPT_STDERR, OPT_ROOTFS, OPT_IMPORT, OPT_EXPORT };

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
        { "import", required_argument, NULL, OPT_IMPORT },
        { "export", required_argument, NULL, OPT_EXPORT },
        { "verbose", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },
        {},
};

typedef struct RunArgs {
        SbxSandboxOptions so;
        const char *cwd, *import_path, *export_path;
        const char **env; /* the caller's, room for one per argument; so.env points here */
        size_t n_env;
} RunArgs;

/* Parses the options into a, leaving optind at the first command. False when cmd_run is to
 * return *ret_exit at once: 0 after --help, 2 after a usage error (said on stderr). */
static bool parse_args(int argc, char **argv, RunArgs *a, int *ret_exit) {
        uint64_t timeout_ms = 0, v;
        int c;

        sbx_sandbox_options_init(&a->so);
        optind = 1;
        int li = -1;
        while ((c = getopt_long(argc, argv, "+t:C:e:nvh", run_opts, &li)) != -1) {
                int r = 0;
                switch (c) {
                case 't': r = parse_seconds(optarg, &timeout_ms); break;
                case 'C': a->cwd = optarg; break;
                case 'e':
                        if (!strchr(optarg, '=') || !env_name_valid(optarg, (size_t)(strchr(optarg, '=') - optarg)))
                                r = -EINVAL;
                        a->env[a->n_env++] = optarg;
                        break;
                case 'n': a->so.network = true; break;
                case OPT_MEMORY: r = parse_size(optarg, &a->so.limits.memory_bytes); break;
                case OPT_PIDS: r = parse_u64(optarg, SBX_MAX_PIDS, &v); a->so.limits.pids = (uint32_t)v; break;
                case OPT_CPUS: r = parse_cpus(optarg, &a->so.limits.cpu_millis); break;
                case OPT_FS: r = parse_size(optarg, &a->so.limits.fs_bytes); break;
                case OPT_FILES: r = parse_u64(optarg, UINT32_MAX, &a->so.limits.file_count); break;
                case OPT_STDOUT: r = parse_size(optarg, &a->so.limits.stdout_bytes); break;
                case OPT_STDERR: r = parse_size(optarg, &a->so.limits.stderr_bytes); break;
                case OPT_ROOTFS: a->so.rootfs = optarg; break;
                case OPT_IMPORT: a->import_path = optarg; break;
                case OPT_EXPORT: a->export_path = optarg; break;
                case 'v': sbx_log_level = LOG_DEBUG; break;
                case 'h': usage(stdout); *ret_exit = 0; return false;
                default: usage(stderr); *ret_exit = 2; return false;
                }
                if (r < 0) {
                        if (li >= 0)
                                fprintf(stderr, "sbx run: invalid value for --%s: '%s'\n\n", run_opts[li].name, optarg);
                        else
                                fprintf(stderr, "sbx run: invalid value for -%c: '%s'\n\n", c, optarg);
                        usage(stderr);
                        *ret_exit = 2;
                        return false;
                }
                li = -1;
        }
        if (optind >= argc) {
                fprintf(stderr, "sbx run: no command given\n\n");
                usage(stderr);
                *ret_exit = 2;
                return false;
        }
        a->so.env = a->n_env ? a->env : NULL;
        a->so.timeout_ms = timeout_ms;
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

int cmd_run(int argc, char **argv) {
        _cleanup_free_ const char **env = calloc((size_t)argc + 1, sizeof *env);
        if (!env)
                return 1;
        RunArgs a = { .env = env };
        int code;
        if (!parse_args(argc, argv, &a, &code))
                return code;
        _cleanup_close_ int sfd = block_signals();

        SbxContext *ctx = NULL;
        SbxSandbox *sb = NULL;
        SbxSession *s = NULL;
        int r = sbx_context_new(&ctx);
        if (r >= 0)
                r = sbx_sandbox_new(ctx, &a.so, &sb);
        if (r < 0) {
                fprintf(stderr, "sbx run: cannot create sandbox: %s\n",
                        ctx && *sbx_context_last_error(ctx) ? sbx_context_last_error(ctx) : strerror(-r));
                sbx_context_free(ctx);
                return 1;
        }
        if (a.import_path && import_archive(ctx, sb, a.import_path) < 0) {
                sbx_context_free(ctx);
                return 1;
        }
        r = sbx_session_get(sb, NULL, &s);
        RunState rs = { .exit_code = 1 };
        queue_init(&rs.q[0], STDOUT_FILENO);
        queue_init(&rs.q[1], STDERR_FILENO);
        bool interrupted = false;
        for (int i = optind; r >= 0 && i < argc && !interrupted; i++) {
                SbxRunOptions ro = { .command = argv[i], .command_len = strlen(argv[i]), .cwd = a.cwd };
                rs.done = false;
                rs.paused = false;
                r = sbx_session_run(s, &ro, on_output, on_done, &rs, &rs.run);
                if (r < 0)
                        break;
                run_wait(ctx, &rs, sfd, &interrupted);
        }
        bq_done(&rs.q[0].q);
        bq_done(&rs.q[1].q);
        if (r < 0)
                fprintf(stderr, "sbx run: %s\n", strerror(-r));
        if (r >= 0 && a.export_path && !interrupted) {
                int e = export_archive(ctx, sb, a.export_path);
                if (e < 0)
                        r = e;
        }
        sbx_context_free(ctx);
        return r < 0 ? 1 : rs.exit_code;
}
