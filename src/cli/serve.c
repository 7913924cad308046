/* SPDX-License-Identifier: MIT */
/* `sbx serve`: the JSON-RPC daemon on stdio or a Unix socket. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/log.h"
#include "base/redact.h"
#include "base/util.h"
#include "sbx/sbx.h"
#include "cli/cli.h"
#include "cli/serve_config.h"
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
                "                       or, under socket activation, the socket systemd passed\n"
                "      --pool N         sandboxes kept ready for `create` with default options\n"
                "                       (default 2 with --socket, 0 with --stdio; at most 8)\n"
                "      --slots N        interactive lane: requests that set a worker going held at\n"
                "                       once (runs, process starts, forks, snapshots, exports,\n"
                "                       imports; default: one per 128 MiB of memory, at least 8\n"
                "                       per CPU)\n"
                "      --system-slots N system lane: slots interactive work never takes (default 2)\n"
                "      --queue N        requests each lane lets wait before WORKER_UNAVAILABLE with\n"
                "                       retryAfterMs (default 10)\n"
                "      --lane LANE      fixes the lane of --socket's (or stdio's) clients:\n"
                "                       interactive or system (default: each request says)\n"
                "      --system-socket PATH  a second socket whose clients are in the system lane\n"
                "                       (then --socket's clients are fixed to interactive unless\n"
                "                       --lane says otherwise)\n"
                "      --shutdown-deadline-ms N  on SIGTERM, how long cancelled work may take to be\n"
                "                       answered before everything is destroyed (default 10000;\n"
                "                       a second SIGTERM does not wait)\n"
                "      --mode MODE      namespaces (default); process: no namespace, plain processes\n"
                "                       in cgroups, files in a host directory (for hosts without\n"
                "                       user namespaces; NOT a security boundary); or disabled:\n"
                "                       every request but ping, health, sandbox.list and kill\n"
                "                       answers SANDBOX_DISABLED\n"
                "      --audit PATH     log events to PATH (JSON lines, hash-chained; see\n"
                "                       `sbx audit verify`), written by a process of its own\n"
                "      --audit-max-bytes N\n"
                "                       rotate the log past N bytes (default 64M; 10k, 64M, 1G)\n"
                "      --audit-keep N   log files kept in all, PATH.1 ... the older (default 5)\n"
                "      --audit-fail-closed\n"
                "                       refuse run and process.start while the log is not\n"
                "                       keeping up (events dropped, writes failing)\n"
                "      --env-passthrough NAME[,NAME...]\n"
                "                       these variables of this process's environment are set in\n"
                "                       every sandbox's commands (nothing else of it ever is)\n"
                "      --redact PATTERN also redact matches of this POSIX extended regex (it must\n"
                "                       start with 3 literal characters); may be repeated\n"
                "      --no-default-redactions\n"
                "                       do not redact the known key shapes (secrets' values are\n"
                "                       always redacted)\n"
                "      --config FILE    read options and sandbox settings from FILE (INI: [serve]\n"
                "                       keys are these long options; [sandbox] defaults and\n"
                "                       [sandbox.enforced] fixed params of every create;\n"
                "                       [secrets] NAME = value for every sandbox); flags win\n"
                "      --check-config   check --config FILE (and the flags) and exit: 0 when good,\n"
                "                       2 naming the file's line that is not\n"
                "      --egress-hosts FILE  a hosts file (/etc/hosts format) whose names the proxies\n"
                "                       of network \"allowlist\" sandboxes resolve from it, not DNS\n"
                "      --egress-allow-private CIDR  an address range those proxies may reach although\n"
                "                       loopback, private or link-local (127.0.0.1/32); repeatable\n"
                "      --egress-ca FILE  PEM CA certificates those proxies trust, besides the host's\n"
                "                       store, for the servers of secrets with hosts (mode proxy)\n"
                "      --max-sandboxes N\n"
                "                       sandboxes held at once, forks included; past it a create\n"
                "                       fails with WORKER_UNAVAILABLE (1 to 65536). Default: derived\n"
                "                       at start from what the machine has free, each divided by a\n"
                "                       sandbox's share: 75%% of MemAvailable / 4 MiB, free pids\n"
                "                       (pid_max, pids cgroup) / 8, fds (RLIMIT_NOFILE, raised as\n"
                "                       needed) / 18, and as root 8192 host id blocks. `health`\n"
                "                       shows it (limits.maxSandboxes)\n"
                "      --expiry-export-dir DIR  where sandboxes made with onExpiry \"export\" leave\n"
                "                       their archive (DIR/<id>-<ms>.tar.zst) when they expire\n"
                "      --protocol       print the protocol reference (Markdown) and exit\n"
                "  -v, --verbose        debug logging on stderr\n"
                "  -h, --help           show this help\n"
                "\n"
                "Socket activation: started with a listening Unix socket as fd 3, LISTEN_FDS=1\n"
                "and LISTEN_PID set to its pid (systemd's sbx.socket does that), it serves that\n"
                "socket and leaves its file when it exits; --socket may then be left out, and\n"
                "if given must name that socket.\n");
}

/* systemd's socket activation protocol (sd_listen_fds(3)), read here without libsystemd:
 * when LISTEN_PID is this process, LISTEN_FDS sockets were passed from fd 3 on. The variables
 * go either way, as sd_listen_fds(1) does, so no process started later takes them for its
 * own. Returns the fd, -1 when none was passed to this process, -2 when more than one was
 * (said on stderr). */
static int activation_fd(void) {
        const char *pid_s = getenv("LISTEN_PID"), *fds_s = getenv("LISTEN_FDS");
        uint64_t pid, n;
        int r = -1;
        if (pid_s && fds_s && parse_u64(pid_s, INT_MAX, &pid) == 0 && pid == (uint64_t)getpid()) {
                if (parse_u64(fds_s, INT_MAX, &n) < 0 || n > 1) {
                        fprintf(stderr, "sbx serve: LISTEN_FDS=%s: sbx serves one socket (one "
                                "ListenStream= in its socket unit)\n", fds_s);
                        r = -2;
                } else if (n == 1) {
                        r = 3; /* SD_LISTEN_FDS_START */
                }
        }
        (void)unsetenv("LISTEN_PID");
        (void)unsetenv("LISTEN_FDS");
        (void)unsetenv("LISTEN_FDNAMES");
        return r;
}

/* A number flag within [min, max]: 0, or -1 after saying what is wrong. */
static int serve_number(const char *flag, const char *arg, long min, long max, long *ret) {
        char *end;
        errno = 0;
        long v = strtol(arg, &end, 10);
        if (!*arg || *end || errno || v < min || v > max) {
                fprintf(stderr, "sbx serve: %s takes %ld to %ld\n", flag, min, max);
                return -1;
        }
        *ret = v;
        return 0;
}

enum { OPT_AUDIT = 256, OPT_AUDIT_MAX_BYTES, OPT_AUDIT_KEEP, OPT_AUDIT_FAIL_CLOSED };

/* ---- secrets and redaction: --env-passthrough, --redact, --no-default-redactions */
typedef struct RedactArgs {
        const char *env[SBX_MAX_ENV_PASSTHROUGH + 1];
        char *env_kv[SBX_MAX_ENV_PASSTHROUGH];
        size_t n_env;
        const char *patterns[SBX_MAX_REDACT_PATTERNS + 1];
        size_t n_patterns;
        bool no_defaults;
} RedactArgs;

/* --env-passthrough NAME[,NAME...]: each NAME set here becomes NAME=value for every sandbox;
 * one not set is left out. Returns 0, or -1 after saying why on stderr. */
static int passthrough_add(RedactArgs *a, const char *list) {
        _cleanup_free_ char *copy = strdup(list);
        char *save = NULL;
        for (char *n = copy ? strtok_r(copy, ",", &save) : NULL; n; n = strtok_r(NULL, ",", &save)) {
                if (!env_name_valid(n, strlen(n))) {
                        fprintf(stderr, "sbx serve: --env-passthrough: '%s' is not a variable name\n", n);
                        return -1;
                }
                if (a->n_env >= SBX_MAX_ENV_PASSTHROUGH) {
                        fprintf(stderr, "sbx serve: --env-passthrough: at most %u names\n", SBX_MAX_ENV_PASSTHROUGH);
                        return -1;
                }
                const char *v = getenv(n);
                if (!v)
                        continue;
                if (asprintf(&a->env_kv[a->n_env], "%s=%s", n, v) < 0)
                        return -1;
                a->env[a->n_env] = a->env_kv[a->n_env];
                a->n_env++;
        }
        return copy ? 0 : -1;
}

static int redact_args_apply(RedactArgs *a, Server *s) {
        char err[512];
        SbxContext *ctx = server_context(s);
        if (sbx_context_set_redaction(ctx, a->patterns, !a->no_defaults, err, sizeof err) < 0) {
                fprintf(stderr, "sbx serve: --redact: %s\n", err);
                return -1;
        }
        return sbx_context_set_env(ctx, a->env) < 0 ? -1 : 0;
}

static void redact_args_done(RedactArgs *a) {
        for (size_t i = 0; i < a->n_env; i++)
                free(a->env_kv[i]);
}

enum { OPT_CONFIG = 300, OPT_CHECK_CONFIG, OPT_MAX_SANDBOXES, OPT_EXPIRY_DIR, OPT_EGRESS_CA };

/* Names the config file's line of an option the parser refused (see the loop in cmd_serve). */
typedef struct Blame {
        const ServeConfig *cfg;
        int index;
        bool ok;
} Blame;

static void config_blame(Blame *b) {
        char where[PATH_MAX + 32];
        if (!b->ok && serve_config_where(b->cfg, b->index, where, sizeof where))
                fprintf(stderr, "sbx serve: (that is --config %s)\n", where);
}

int cmd_serve(int argc, char **argv) {
        static const struct option opts[] = {
                { "stdio", no_argument, NULL, 's' },
                { "socket", required_argument, NULL, 'S' },
                { "protocol", no_argument, NULL, 'P' },
                { "pool", required_argument, NULL, 'p' },
                { "slots", required_argument, NULL, 'L' },
                { "system-slots", required_argument, NULL, 'Y' },
                { "queue", required_argument, NULL, 'Q' },
                { "lane", required_argument, NULL, 'l' },
                { "system-socket", required_argument, NULL, 'T' },
                { "shutdown-deadline-ms", required_argument, NULL, 'D' },
                { "mode", required_argument, NULL, 'M' },
                { "audit", required_argument, NULL, OPT_AUDIT },
                { "audit-max-bytes", required_argument, NULL, OPT_AUDIT_MAX_BYTES },
                { "audit-keep", required_argument, NULL, OPT_AUDIT_KEEP },
                { "audit-fail-closed", no_argument, NULL, OPT_AUDIT_FAIL_CLOSED },
                { "env-passthrough", required_argument, NULL, 'E' },
                { "redact", required_argument, NULL, 'R' },
                { "no-default-redactions", no_argument, NULL, 'N' },
                { "expiry-export-dir", required_argument, NULL, OPT_EXPIRY_DIR },
                { "config", required_argument, NULL, OPT_CONFIG },
                { "check-config", no_argument, NULL, OPT_CHECK_CONFIG },
                { "egress-hosts", required_argument, NULL, 'H' },
                { "egress-allow-private", required_argument, NULL, 'A' },
                { "egress-ca", required_argument, NULL, OPT_EGRESS_CA },
                { "max-sandboxes", required_argument, NULL, OPT_MAX_SANDBOXES },
                { "verbose", no_argument, NULL, 'v' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        /* The file's [serve] options go before the command line's, so a flag given there wins. */
        _cleanup_(serve_config_done) ServeConfig cfg = { 0 };
        bool check_config = false;
        const char *config_path = NULL;
        for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
                if (strcmp(argv[i], "--check-config") == 0)
                        check_config = true;
                else if (strncmp(argv[i], "--config=", 9) == 0)
                        config_path = argv[i] + 9;
                else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
                        config_path = argv[++i];
        }
        if (config_path) {
                char cerr[768];
                int cr = serve_config_load(&cfg, config_path, opts, cerr, sizeof cerr);
                if (cr < 0) {
                        fprintf(stderr, "sbx serve: --config %s\n", cerr);
                        return cr == -EINVAL ? 2 : 1;
                }
                if (!check_config && serve_config_check_sandbox(&cfg, cerr, sizeof cerr) < 0) {
                        fprintf(stderr, "sbx serve: --config %s\n", cerr);
                        return 2;
                }
                if (serve_config_argv(&cfg, argc, argv) < 0)
                        return 1;
                argc = cfg.argc;
                argv = cfg.argv;
        } else if (check_config) {
                fprintf(stderr, "sbx serve: --check-config checks the file given with --config FILE\n");
                return 2;
        }
        bool stdio = false;
        const char *mode = "namespaces";
        const char *path = NULL, *system_path = NULL;
        long pool = -1, slots = -1, system_slots = -1, queue = -1, deadline = -1, lane = -1;
        const char *audit = NULL;
        uint64_t audit_max = 0, audit_keep = 0;
        bool audit_fail_closed = false;
        _cleanup_(redact_args_done) RedactArgs ra = { 0 };
        const char *egress_hosts = NULL, *egress_ca = NULL;
        const char *egress_private[SBX_MAX_EGRESS_PRIVATE_CIDRS + 1] = { NULL };
        unsigned n_egress_private = 0;
        unsigned long max_sandboxes = 0;
        const char *expiry_dir = NULL;
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
                /* A value from the file that the switch refuses (it says why, then returns):
                 * say which line it came from, as the switch leaves. */
                _cleanup_(config_blame) Blame blame = { .cfg = &cfg, .index = optind - 1 };
                switch (c) {
                case OPT_CONFIG:
                case OPT_CHECK_CONFIG: break; /* read before */
                case OPT_EXPIRY_DIR: expiry_dir = optarg; break;
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
                case 'L':
                        if (serve_number("--slots", optarg, 1, SBX_MAX_LANE_SLOTS, &slots) < 0)
                                return 2;
                        break;
                case 'Y':
                        if (serve_number("--system-slots", optarg, 1, SBX_MAX_LANE_SLOTS, &system_slots) < 0)
                                return 2;
                        break;
                case 'Q':
                        if (serve_number("--queue", optarg, 0, SBX_MAX_LANE_QUEUE, &queue) < 0)
                                return 2;
                        break;
                case 'D':
                        if (serve_number("--shutdown-deadline-ms", optarg, 0, SBX_MAX_SHUTDOWN_DEADLINE_MS, &deadline) < 0)
                                return 2;
                        break;
                case 'l':
                        if (strcmp(optarg, "interactive") != 0 && strcmp(optarg, "system") != 0) {
                                fprintf(stderr, "sbx serve: --lane takes interactive or system\n");
                                return 2;
                        }
                        lane = strcmp(optarg, "system") == 0;
                        break;
                case 'T': system_path = optarg; break;
                case 'M':
                        if (strcmp(optarg, "namespaces") != 0 && strcmp(optarg, "process") != 0 &&
                            strcmp(optarg, "disabled") != 0) {
                                fprintf(stderr, "sbx serve: --mode takes namespaces, process or disabled\n");
                                return 2;
                        }
                        mode = optarg;
                        break;
                case OPT_AUDIT: audit = optarg; break;
                case OPT_AUDIT_MAX_BYTES:
                        if (parse_size(optarg, &audit_max) < 0 || audit_max < SBX_AUDIT_MIN_MAX_BYTES) {
                                fprintf(stderr, "sbx serve: --audit-max-bytes takes a size of at least %llu bytes "
                                        "(10k, 64M, 1G); got '%s'\n",
                                        (unsigned long long)SBX_AUDIT_MIN_MAX_BYTES, optarg);
                                return 2;
                        }
                        break;
                case OPT_AUDIT_KEEP:
                        if (parse_u64(optarg, SBX_AUDIT_MAX_KEEP, &audit_keep) < 0 || audit_keep < 1) {
                                fprintf(stderr, "sbx serve: --audit-keep takes 1 to %u; got '%s'\n", SBX_AUDIT_MAX_KEEP,
                                        optarg);
                                return 2;
                        }
                        break;
                case OPT_AUDIT_FAIL_CLOSED: audit_fail_closed = true; break;
                case 'E':
                        if (passthrough_add(&ra, optarg) < 0)
                                return 2;
                        break;
                case 'R': {
                        char err[512];
                        if (ra.n_patterns >= SBX_MAX_REDACT_PATTERNS || redact_pattern_check(optarg, err, sizeof err) < 0) {
                                fprintf(stderr, "sbx serve: --redact: %s\n",
                                        ra.n_patterns >= SBX_MAX_REDACT_PATTERNS ? "too many patterns" : err);
                                return 2;
                        }
                        ra.patterns[ra.n_patterns++] = optarg;
                        break;
                }
                case 'N': ra.no_defaults = true; break;
                case 'H': egress_hosts = optarg; break;
                case OPT_EGRESS_CA: egress_ca = optarg; break;
                case 'A':
                        if (n_egress_private >= SBX_MAX_EGRESS_PRIVATE_CIDRS) {
                                fprintf(stderr, "sbx serve: --egress-allow-private: at most %u\n",
                                        SBX_MAX_EGRESS_PRIVATE_CIDRS);
                                return 2;
                        }
                        egress_private[n_egress_private++] = optarg;
                        break;
                case OPT_MAX_SANDBOXES: {
                        char *end;
                        errno = 0;
                        max_sandboxes = strtoul(optarg, &end, 10);
                        if (errno || end == optarg || *end || optarg[0] == '-' || max_sandboxes < 1 ||
                            max_sandboxes > SBX_MAX_SERVER_SANDBOXES) {
                                fprintf(stderr, "sbx serve: --max-sandboxes takes 1 to %u\n", SBX_MAX_SERVER_SANDBOXES);
                                return 2;
                        }
                        break;
                }
                case 'v': sbx_log_level = LOG_DEBUG; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
                blame.ok = true;
        }
        int afd = activation_fd();
        if (afd == -2)
                return 1;
        if (stdio && afd >= 0) {
                fprintf(stderr, "sbx serve: --stdio, but a listening socket was passed (LISTEN_FDS)\n");
                return 2;
        }
        if (!audit && (audit_max || audit_keep || audit_fail_closed)) {
                fprintf(stderr, "sbx serve: --audit-max-bytes, --audit-keep and --audit-fail-closed go with "
                        "--audit PATH\n");
                return 2;
        }
        if (audit && (!*audit || strlen(audit) > PATH_MAX - 16)) {
                fprintf(stderr, "sbx serve: --audit takes a file's path (at most %d bytes)\n", PATH_MAX - 16);
                return 2;
        }
        if (check_config) {
                char cerr[768];
                if (optind < argc) {
                        fprintf(stderr, "sbx serve: unexpected argument '%s'\n", argv[optind]);
                        return 2;
                }
                if (serve_config_check_sandbox(&cfg, cerr, sizeof cerr) < 0) {
                        fprintf(stderr, "sbx serve: --config %s\n", cerr);
                        return 2;
                }
                printf("%s: ok\n", config_path);
                return 0;
        }
        if (optind < argc || (stdio == (path != NULL) && afd < 0)) {
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
        if (r >= 0) {
                unsigned d_slots, d_system, d_queue;
                server_lane_defaults(&d_slots, &d_system, &d_queue);
                server_set_slots(s, 0, slots >= 0 ? (unsigned)slots : d_slots, queue >= 0 ? (unsigned)queue : d_queue);
                server_set_slots(s, 1, system_slots >= 0 ? (unsigned)system_slots : d_system,
                                 queue >= 0 ? (unsigned)queue : d_queue);
                /* With an operator's socket, the system lane is the operator's: clients of the
                 * main socket may not ask for it unless --lane says so. */
                server_set_lane(s, lane < 0 && system_path ? 0 : (int)lane);
                r = server_set_mode(s, mode);
                if (config_path)
                        server_set_create_config(s, cfg.defaults, cfg.enforced, cfg.secrets);
                if (deadline >= 0)
                        server_set_shutdown_deadline(s, (uint64_t)deadline);
        }
        char err[256];
        /* Before any client: no event may happen unlogged, and a log that cannot be opened
         * stops the server here, saying why. */
        if (r >= 0 && audit &&
            server_set_audit(s, audit, audit_max, (unsigned)audit_keep, audit_fail_closed, err, sizeof err) < 0) {
                fprintf(stderr, "sbx serve: --audit %s: %s\n", audit, err);
                server_free(s);
                return 1;
        }
        if (r >= 0 && (egress_hosts || n_egress_private || egress_ca)) {
                char eerr[512] = "";
                if ((r = server_set_egress(s, egress_hosts, egress_private, egress_ca, eerr, sizeof eerr)) < 0) {
                        fprintf(stderr, "sbx serve: --egress-hosts / --egress-allow-private / --egress-ca: %s\n",
                                eerr[0] ? eerr : strerror(-r));
                        server_free(s);
                        return 2;
                }
        }
        if (r >= 0 && expiry_dir && server_set_expiry_dir(s, expiry_dir, err, sizeof err) < 0) {
                fprintf(stderr, "sbx serve: --expiry-export-dir %s\n", err);
                server_free(s);
                return 1;
        }
        if (r >= 0 && system_path && (r = server_listen_system(s, system_path)) < 0) {
                fprintf(stderr, "sbx serve: --system-socket %s: %s\n", system_path, strerror(-r));
                server_free(s);
                return 1;
        }
        if (r >= 0 && redact_args_apply(&ra, s) < 0) {
                server_free(s);
                return 2;
        }
        if (r >= 0 && afd >= 0 && (r = server_listen_fd(s, afd, path)) < 0) {
                fprintf(stderr, "sbx serve: the socket passed as fd 3 (LISTEN_FDS): %s\n",
                        r == -ENOTSOCK ? "not a listening Unix stream socket"
                        : r == -EADDRNOTAVAIL ? "not bound to the --socket path" : strerror(-r));
                server_free(s);
                return 1;
        }
        if (r >= 0 && afd < 0)
                r = stdio ? server_add_stdio(s) : server_listen(s, path);
        if (r < 0) {
                fprintf(stderr, "sbx serve: %s%s%s\n", path ? path : "", path ? ": " : "", strerror(-r));
                server_free(s);
                return 1;
        }
        if (pool < 0)
                pool = stdio ? 0 : 2;
        server_set_pool(s, (unsigned)pool);
        log_info("at most %u sandboxes", server_set_max_sandboxes(s, (unsigned)max_sandboxes));
        if (afd >= 0)
                log_info("serving the socket passed as fd 3%s%s", path ? ": " : "", path ? path : "");
        else if (path)
                log_info("listening on %s", path);
        r = server_run(s);
        server_free(s);
        return r;
}
