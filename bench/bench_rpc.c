/* SPDX-License-Identifier: MIT */
/* sbx-bench-rpc: what the daemon (`sbx serve --socket`, newline-delimited JSON-RPC 2.0 over a
 * Unix socket) adds on top of the library, and how it holds up under load.
 *
 * Benchmarks (select with --only, letters as in docs/BENCHMARKS.md), one family a file:
 *   r  rpc_run.c      `run` of `echo hi` over the socket, request written -> response line
 *                     read, idle session, interleaved with the same run through the C API
 *                     (bench.c's "a") and with `ping`
 *   f  rpc_files.c    `files.write` + `files.read` of 1 MiB of random bytes, checked, and the
 *                     same through the C API
 *   p  rpc_load.c     `ping` round trips while N sandboxes each run a CPU-bound loop, against
 *                     an idle server
 *   c  rpc_clients.c  N clients at once (one poll loop, one socket each): `create`, then M
 *                     `echo $i` runs each, every output checked
 *   l  rpc_create.c   `ping` on a connection of its own while another sends 20
 *                     `sandbox.create` at once and forks 16 of them as their answers come
 *   s  rpc_process.c  `process.start` of `echo hi` -> its first `process.output` through
 *                     `process.stream`, interleaved with `run` of it
 *   o  rpc_stream.c   a process's 1 GiB of output (and 256 MiB as base64) through
 *                     `process.stream`: MB/s, every piece checked, the server's RSS
 *   k  rpc_process.c  `process.kill` (graceMs 0) of a tree of 200 TERM-ignoring sleeps, and of
 *                     one
 *   z  rpc_pause.c    `sandbox.pause` then `sandbox.resume` of a sandbox running
 *                     `yes > /dev/null`
 *
 * The benchmark starts its own server (`sbx serve --socket` in a fresh directory under /tmp)
 * and shuts it down with `kill` at the end; the client is client.c's. Progress goes to stderr,
 * the Markdown report to stdout. Times are CLOCK_MONOTONIC; percentiles interpolate linearly
 * between ranks. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/macro.h"
#include "rpc_benches.h"
#include "rpc_common.h"

const char bench_prog[] = "sbx-bench-rpc";

/* The benchmarks in the order they run and report. A section is printed after the latency
 * rows, then every family's lines of the targets table ("not measured" when it did not run). */
static const struct Bench {
        char letter;
        void (*run)(Client *ctl);
        void (*section)(void);
        void (*targets)(void);
} benches[] = {
        { 'r', bench_roundtrip, NULL, roundtrip_targets },
        { 'f', bench_files, NULL, files_targets },
        { 'p', bench_ping_load, NULL, ping_load_targets },
        { 'c', bench_clients, clients_report, clients_targets },
        { 'l', bench_create_fork, NULL, NULL },
        { 's', bench_proc_start, NULL, proc_start_targets },
        { 'o', bench_stream, stream_report, stream_targets },
        { 'k', bench_kill, NULL, kill_targets },
        { 'z', bench_pause, NULL, NULL },
};

/* ------------------------------------------------------------------ the command line */

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx-bench-rpc [OPTIONS]\n"
                "  --sbx PATH         the sbx binary (default: ../src/cli/sbx next to this program)\n"
                "  --only LETTERS     r (run round trip vs C API), f (files.write + files.read of 1 MiB),\n"
                "                     p (ping under load), c (clients), l (ping during creates and forks),\n"
                "                     s (process.start -> first output), o (a process's output through\n"
                "                     process.stream), k (process.kill of a tree), z (sandbox.pause +\n"
                "                     sandbox.resume); default rfpclsokz\n"
                "  -n, --iterations N r: interleaved iterations (default %u)\n"
                "  --warmup N         r: warm-up iterations (default %u)\n"
                "  --quiet-ms MS      r: pause after each run so the next worker is ready (default %u)\n"
                "  --pings N          p: pings idle and under load (default %u)\n"
                "  --ping-gap-us US   p: pause between pings (default %u)\n"
                "  --busy N           p: sandboxes running the CPU-bound command (default %u)\n"
                "  --busy-cmd CMD     p: the command (default `%s`)\n"
                "  --settle-ms MS     p: wait after the busy runs have started (default %u)\n"
                "  --clients N        c: concurrent clients, one sandbox each (default %u)\n"
                "  --cmds N           c: commands per client (default %u)\n"
                "  --load-reps N      p: series under load, each with fresh sandboxes (default %u)\n"
                "  --no-host-busy     p: skip the comparison with busy loops outside any sandbox\n"
                "  --files-n N        f: write + read round trips (default %u)\n"
                "  --files-bytes N    f: bytes per file (default %zu; the server reads at most 4 MiB at once)\n"
                "  --proc-n N         s: interleaved iterations (default %u)\n"
                "  --proc-warmup N    s: warm-up iterations (default %u)\n"
                "  --stream-mib N     o: MiB the ASCII process writes (default %" PRIu64 "; 0 skips it)\n"
                "  --stream-bin-mib N o: MiB the binary (base64) process writes (default %" PRIu64 "; 0 skips it)\n"
                "  --stream-cmd CMD   o: writes the ASCII MiB, all 'x', instead of head -c N /dev/zero | tr '\\0' x\n"
                "  --kill-n N         k: timed kills of the tree (default %u, after 1 warm-up)\n"
                "  --kill-tree N      k: TERM-ignoring sleeps in the tree (default %u)\n"
                "  --pause-n N        z: pause + resume cycles (default %u)\n"
                "  --pool N           start the server with --pool N (default: the server's default)\n"
                "  --audit PATH       start the server with --audit PATH (its audit log on: compare r_rpc\n"
                "                     with a run without it)\n"
                "  --server-autogroup-nice N  start the server in a session (autogroup) of its own\n"
                "                     with this nice value (-20..19); default: the caller's session\n"
                "  --quick            small N everywhere (a smoke test)\n",
                cfg.warm_n, cfg.warmup, cfg.quiet_ms, cfg.pings, cfg.ping_gap_us, cfg.busy, cfg.busy_cmd,
                cfg.settle_ms, cfg.clients, cfg.cmds, cfg.load_reps, cfg.files_n, cfg.file_bytes, cfg.proc_n,
                cfg.proc_warmup, cfg.stream_bytes >> 20, cfg.stream_bin_bytes >> 20, cfg.kill_n, cfg.kill_tree, cfg.pause_n);
}

/* --quick: small N everywhere. */
static void quick(void) {
        cfg.warm_n = 30;
        cfg.warmup = 3;
        cfg.pings = 200;
        cfg.settle_ms = 300;
        cfg.load_reps = 2;
        cfg.cmds = 10;
        cfg.files_n = 10;
        cfg.proc_n = 30;
        cfg.proc_warmup = 3;
        cfg.stream_bytes = 128ULL << 20;
        cfg.stream_bin_bytes = 32ULL << 20;
        cfg.kill_n = 3;
        cfg.pause_n = 20;
}

/* The options that set one unsigned of cfg, each one's name also what a bad value is called. */
static const struct UintOption {
        const char *name;
        unsigned *dst;
} uint_options[] = {
        { "iterations", &cfg.warm_n }, { "warmup", &cfg.warmup },       { "quiet-ms", &cfg.quiet_ms },
        { "pings", &cfg.pings },       { "ping-gap-us", &cfg.ping_gap_us }, { "busy", &cfg.busy },
        { "settle-ms", &cfg.settle_ms }, { "clients", &cfg.clients },   { "cmds", &cfg.cmds },
        { "load-reps", &cfg.load_reps }, { "files-n", &cfg.files_n },   { "proc-n", &cfg.proc_n },
        { "proc-warmup", &cfg.proc_warmup }, { "kill-n", &cfg.kill_n }, { "kill-tree", &cfg.kill_tree },
        { "pause-n", &cfg.pause_n },
};

/* getopt values of the other options; uint_options[i] has O_UINT + i ("iterations" is -n too). */
enum { O_SBX = 256, O_ONLY, O_BUSYCMD, O_QUICK, O_NICE, O_NOHOST, O_POOL, O_AUDIT, O_FILES_BYTES, O_STREAM_MIB,
       O_STREAM_BIN_MIB, O_STREAM_CMD, O_UINT = 512 };

static const struct option other_options[] = {
        { "sbx", required_argument, NULL, O_SBX },
        { "only", required_argument, NULL, O_ONLY },
        { "busy-cmd", required_argument, NULL, O_BUSYCMD },
        { "quick", no_argument, NULL, O_QUICK },
        { "server-autogroup-nice", required_argument, NULL, O_NICE },
        { "no-host-busy", no_argument, NULL, O_NOHOST },
        { "pool", required_argument, NULL, O_POOL },
        { "audit", required_argument, NULL, O_AUDIT },
        { "files-bytes", required_argument, NULL, O_FILES_BYTES },
        { "stream-mib", required_argument, NULL, O_STREAM_MIB },
        { "stream-bin-mib", required_argument, NULL, O_STREAM_BIN_MIB },
        { "stream-cmd", required_argument, NULL, O_STREAM_CMD },
        { "help", no_argument, NULL, 'h' },
};

/* One option other than the plain numbers; exits 2 on a bad value. */
static void set_option(int c, const char *arg) {
        switch (c) {
        case O_SBX: cfg.sbx = arg; break;
        case O_ONLY: cfg.only = arg; break;
        case O_BUSYCMD: cfg.busy_cmd = arg; break;
        case O_QUICK: quick(); break;
        case O_NOHOST: cfg.host_busy = false; break;
        case O_POOL: cfg.pool = (int)bench_parse_uint(arg, "pool"); break;
        case O_AUDIT: cfg.audit = arg; break;
        case O_STREAM_MIB: cfg.stream_bytes = (uint64_t)bench_parse_uint(arg, "stream-mib") << 20; break;
        case O_STREAM_BIN_MIB: cfg.stream_bin_bytes = (uint64_t)bench_parse_uint(arg, "stream-bin-mib") << 20; break;
        case O_STREAM_CMD: cfg.stream_cmd = arg; break;
        case O_FILES_BYTES:
                cfg.file_bytes = bench_parse_uint(arg, "files-bytes");
                if (cfg.file_bytes == 0 || cfg.file_bytes > 4 * 1024 * 1024) {
                        fprintf(stderr, "sbx-bench-rpc: bad files-bytes: %s (1 to 4194304)\n", arg);
                        exit(2);
                }
                break;
        case O_NICE: {
                char *end;
                long v = strtol(arg, &end, 10);
                if (*end || end == arg || v < -20 || v > 19) {
                        fprintf(stderr, "sbx-bench-rpc: bad server-autogroup-nice: %s\n", arg);
                        exit(2);
                }
                cfg.srv_nice = (int)v;
                cfg.srv_nice_set = true;
                break;
        }
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); exit(2);
        }
}

/* The directory of this executable + rel, when that file exists. */
static char *next_to_self(const char *rel) {
        static char buf[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
        if (n <= 0)
                return NULL;
        buf[n] = 0;
        char *slash = strrchr(buf, '/');
        if (!slash || (size_t)(slash - buf) + 1 + strlen(rel) + 1 > sizeof buf)
                return NULL;
        strcpy(slash + 1, rel);
        return access(buf, X_OK) == 0 ? buf : NULL;
}

/* cfg from the command line; exits with the usage on --help (0) or anything wrong (2), and 1
 * when there is no sbx binary to start. */
static void parse_args(int argc, char **argv) {
        struct option opts[ELEMENTSOF(other_options) + ELEMENTSOF(uint_options) + 1] = {};
        size_t n = 0;
        for (size_t i = 0; i < ELEMENTSOF(other_options); i++)
                opts[n++] = other_options[i];
        for (size_t i = 0; i < ELEMENTSOF(uint_options); i++)
                opts[n++] = (struct option){ uint_options[i].name, required_argument, NULL, O_UINT + (int)i };
        int c;
        while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
                if (c == 'n')
                        c = O_UINT;
                if (c >= O_UINT && (size_t)(c - O_UINT) < ELEMENTSOF(uint_options)) {
                        const struct UintOption *o = &uint_options[c - O_UINT];
                        *o->dst = bench_parse_uint(optarg, o->name);
                } else {
                        set_option(c, optarg);
                }
        }
        if (optind < argc || cfg.clients == 0 || cfg.cmds == 0) {
                usage(stderr);
                exit(2);
        }
        if (!cfg.sbx)
                cfg.sbx = next_to_self("../src/cli/sbx");
        if (!cfg.sbx)
                cfg.sbx = "build/src/cli/sbx";
        if (access(cfg.sbx, X_OK) < 0) {
                fprintf(stderr, "sbx-bench-rpc: %s: %s (give --sbx PATH)\n", cfg.sbx, strerror(errno));
                exit(1);
        }
        static char sbx_real[PATH_MAX];
        if (realpath(cfg.sbx, sbx_real))
                cfg.sbx = sbx_real;
}

/* ------------------------------------------------------------------ report */

static void report(void) {
        char pool[16];
        snprintf(pool, sizeof pool, "%d", cfg.pool);
        printf("Server: `%s serve --socket PATH%s%s%s%s`%s.\n\n", cfg.sbx, cfg.pool >= 0 ? " --pool " : "",
               cfg.pool >= 0 ? pool : "", cfg.audit ? " --audit " : "", cfg.audit ? cfg.audit : "",
               cfg.srv_nice_set ? ", in a session of its own (autogroup nice set)" : "");
        printf("## The daemon: latency (ms)\n\n");
        rows_print(3);
        for (size_t i = 0; i < ELEMENTSOF(benches); i++)
                if (benches[i].section)
                        benches[i].section();
        printf("\n## The daemon: targets\n\n| Target | Measured | Verdict |\n|---|---|---|\n");
        for (size_t i = 0; i < ELEMENTSOF(benches); i++)
                if (benches[i].targets)
                        benches[i].targets();
        bench_notes_print();
}

int main(int argc, char **argv) {
        parse_args(argc, argv);
        signal(SIGPIPE, SIG_IGN);
        bench_server_signals();

        uint64_t t0 = bench_now_ns();
        rpc_server_start();
        Client ctl;
        rpc_open(&ctl, false);
        for (size_t i = 0; i < ELEMENTSOF(benches); i++)
                if (strchr(cfg.only, benches[i].letter))
                        benches[i].run(&ctl);
        rpc_server_shutdown(&ctl);
        bench_progress("done in %.1f s", bench_ms_between(t0, bench_now_ns()) / 1000);
        report();
        return 0;
}
