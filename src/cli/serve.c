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
#include "base/util.h"
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
                "      --shutdown-deadline-ms N  on SIGTERM, how long cancelled work may take to be\n"
                "                       answered before everything is destroyed (default 10000;\n"
                "                       a second SIGTERM does not wait)\n"
                "      --mode MODE      namespaces (default); process: no namespace, plain processes\n"
                "                       in cgroups, files in a host directory (for hosts without\n"
                "                       user namespaces; NOT a security boundary); or disabled:\n"
                "                       every request but ping, health, sandbox.list and kill\n"
                "                       answers SANDBOX_DISABLED\n"
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
                { "verbose", no_argument, NULL, 'v' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        bool stdio = false;
        const char *mode = "namespaces";
        const char *path = NULL, *system_path = NULL;
        long pool = -1, slots = -1, system_slots = -1, queue = -1, deadline = -1, lane = -1;
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
                case 'v': sbx_log_level = LOG_DEBUG; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        int afd = activation_fd();
        if (afd == -2)
                return 1;
        if (stdio && afd >= 0) {
                fprintf(stderr, "sbx serve: --stdio, but a listening socket was passed (LISTEN_FDS)\n");
                return 2;
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
                server_set_lane(s, (int)lane);
                r = server_set_mode(s, mode);
                if (deadline >= 0)
                        server_set_shutdown_deadline(s, (uint64_t)deadline);
        }
        if (r >= 0 && system_path && (r = server_listen_system(s, system_path)) < 0) {
                fprintf(stderr, "sbx serve: --system-socket %s: %s\n", system_path, strerror(-r));
                server_free(s);
                return 1;
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
        if (afd >= 0)
                log_info("serving the socket passed as fd 3%s%s", path ? ": " : "", path ? path : "");
        else if (path)
                log_info("listening on %s", path);
        r = server_run(s);
        server_free(s);
        return r;
}
