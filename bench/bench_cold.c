/* SPDX-License-Identifier: MIT */
/* sbx-bench-cold: a sandbox from nothing to its first result, and back to nothing, next to
 * what the kernel's own steps cost on the same machine in the same run.
 *
 * Benchmarks (select with --only, letters as in docs/BENCHMARKS.md, "Cold start"):
 *   k  the kernel's own costs: clone3 into the seven namespaces sbx uses (user, mount, pid,
 *      net, ipc, uts, cgroup) to the child's exit reaped; fork + exit + wait; posix_spawn of
 *      `bash -c true` + wait; mount of an overlayfs (tmpfs layers, in a mount namespace of a
 *      child); mkdir + rmdir of a cgroup v2 directory
 *   s  over the socket (`sbx serve --socket`): `create` and `run` `echo hi` written at once on a
 *      fresh connection -> the run's answer read, without a pool (back to back, and 60 ms
 *      apart) and with the default pool of 2 (60 ms apart, the pool refills in between); then,
 *      in one idle session, `run` `echo hi` interleaved with a bare `bash -c 'echo hi'` spawned
 *      by this client, and the same run alone 200 ms apart (an agent's pace)
 *   d  sbx_sandbox_free of a sandbox running 200 `sleep 1000` (C API) -> its pid 1 gone (which a
 *      pid namespace's pid 1 is only once every other process of it is) and its cgroup removed
 *
 * Progress goes to stderr, the Markdown report to stdout. Times are CLOCK_MONOTONIC;
 * percentiles interpolate linearly between ranks. Needs root (namespaces, cgroups). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "base/macro.h"
#include "client.h"
#include "common.h"
#include "sbx/sbx.h"

extern char **environ;

const char bench_prog[] = "sbx-bench-cold";

static struct {
        unsigned n;     /* iterations per row */
        const char *only;
        const char *sbx; /* the sbx binary for `serve` */
} cfg = { .n = 100, .only = "ksd" };

static bool want(char c) { return strchr(cfg.only, c) != NULL; }

/* ------------------------------------------------------------------ k: the kernel alone */

static void pause_ms(unsigned ms) {
        struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
}

static int wait_pid(pid_t pid) {
        int ws;
        while (waitpid(pid, &ws, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        return ws;
}

static double time_clone_ns(void) {
        struct clone_args ca = {
                .flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS |
                         CLONE_NEWCGROUP,
                .exit_signal = SIGCHLD,
        };
        uint64_t t0 = bench_now_ns();
        long pid = syscall(SYS_clone3, &ca, sizeof ca);
        if (pid == 0)
                _exit(0);
        if (pid < 0)
                return -1;
        return wait_pid((pid_t)pid) == 0 ? bench_ms_since(t0) : -1;
}

static double time_fork(void) {
        uint64_t t0 = bench_now_ns();
        pid_t pid = fork();
        if (pid == 0)
                _exit(0);
        if (pid < 0)
                return -1;
        return wait_pid(pid) == 0 ? bench_ms_since(t0) : -1;
}

static double time_spawn(char *const argv[]) {
        pid_t pid;
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        uint64_t t0 = bench_now_ns();
        int r = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        if (r != 0)
                return -1;
        return wait_pid(pid) == 0 ? bench_ms_since(t0) : -1;
}

/* A child in new user, mount, pid and net namespaces starts n `sleep 1000` (exec'd) and
 * says so; then SIGKILL to it -> reaped, which a pid namespace's pid 1 is only once every other
 * process of it is gone. Milliseconds, or -1. */
static double time_zap(unsigned n) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return -1;
        struct clone_args ca = { .flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET, .exit_signal = SIGCHLD };
        long pid = syscall(SYS_clone3, &ca, sizeof ca);
        if (pid == 0) {
                close(p[0]);
                for (unsigned i = 0; i < n; i++)
                        if (fork() == 0) {
                                execl("/bin/sleep", "sleep", "1000", (char *)NULL);
                                _exit(127);
                        }
                /* Every child has exec'd once its /proc/PID/exe is sleep's: simply wait. */
                pause_ms(300);
                (void)!write(p[1], "x", 1);
                for (;;)
                        pause();
        }
        close(p[1]);
        char b;
        bool ok = pid > 0 && read(p[0], &b, 1) == 1;
        close(p[0]);
        if (pid < 0)
                return -1;
        uint64_t t0 = bench_now_ns();
        kill((pid_t)pid, SIGKILL);
        (void)wait_pid((pid_t)pid);
        return ok ? bench_ms_since(t0) : -1;
}

/* In a child of its own mount namespace: n overlay mounts (each timed, then detached), the
 * milliseconds written to fd as doubles. */
static void overlay_child(unsigned n, int fd) {
        char dir[] = "/tmp/sbx-bench-cold.XXXXXX", opts[512], p[600];
        if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 || !mkdtemp(dir) ||
            mount("sbx-bench", dir, "tmpfs", 0, "size=16m") < 0)
                _exit(1);
        static const char *const sub[] = { "lower", "upper", "work", "merged" };
        for (size_t i = 0; i < 4; i++) {
                snprintf(p, sizeof p, "%s/%s", dir, sub[i]);
                if (mkdir(p, 0755) < 0)
                        _exit(1);
        }
        snprintf(opts, sizeof opts, "lowerdir=%s/lower,upperdir=%s/upper,workdir=%s/work", dir, dir, dir);
        snprintf(p, sizeof p, "%s/merged", dir);
        for (unsigned i = 0; i < n; i++) {
                uint64_t t0 = bench_now_ns();
                if (mount("overlay", p, "overlay", 0, opts) < 0)
                        _exit(2);
                double ms = bench_ms_since(t0);
                if (write(fd, &ms, sizeof ms) != sizeof ms || umount2(p, MNT_DETACH) < 0)
                        _exit(3);
        }
        (void)umount2(dir, MNT_DETACH);
        (void)rmdir(dir);
        _exit(0);
}

static void bench_kernel(void) {
        Samples cl = { 0 }, fk = { 0 }, bt = { 0 }, ov = { 0 }, cg = { 0 };
        char *bash_true[] = { "/bin/bash", "-c", "true", NULL };
        unsigned bad = 0;
        bench_progress("k: the kernel's own costs, %u times each, interleaved", cfg.n);
        /* A cgroup v2 directory of this process's own cgroup's parent level: the unified
         * hierarchy's root, where root may make one. */
        const char *cgroot = access("/sys/fs/cgroup/unified/cgroup.procs", F_OK) == 0 ? "/sys/fs/cgroup/unified"
                                                                                      : "/sys/fs/cgroup";
        char cgdir[PATH_MAX];
        snprintf(cgdir, sizeof cgdir, "%s/sbx-bench-cold-%d", cgroot, (int)getpid());
        for (unsigned i = 0; i < cfg.n + 3; i++) {
                double a = time_clone_ns(), b = time_fork(), c = time_spawn(bash_true);
                uint64_t t0 = bench_now_ns();
                double d = mkdir(cgdir, 0755) == 0 && rmdir(cgdir) == 0 ? bench_ms_since(t0) : -1;
                if (a < 0 || b < 0 || c < 0 || d < 0) {
                        bad++;
                        continue;
                }
                if (i < 3)
                        continue;
                samples_add(&cl, a);
                samples_add(&fk, b);
                samples_add(&bt, c);
                samples_add(&cg, d);
        }
        int p[2];
        if (pipe2(p, O_CLOEXEC) == 0) {
                pid_t pid = fork();
                if (pid == 0) {
                        close(p[0]);
                        overlay_child(cfg.n + 3, p[1]);
                }
                close(p[1]);
                double ms;
                for (unsigned i = 0; read(p[0], &ms, sizeof ms) == sizeof ms; i++)
                        if (i >= 3)
                                samples_add(&ov, ms);
                close(p[0]);
                if (pid > 0 && wait_pid(pid) != 0)
                        bench_note("k: the overlay mounts failed (no overlayfs?)");
        }
        Samples zap = { 0 };
        for (unsigned i = 0; i < cfg.n / 5 + 1; i++) {
                double ms = time_zap(200);
                if (ms < 0)
                        bad++;
                else if (i >= 1)
                        samples_add(&zap, ms);
        }
        Summary s;
        row_add("k_zap", "kernel: SIGKILL to pid 1 of a pid namespace running 200 `sleep` → reaped", (s = summarize(&zap), &s),
                "user, mount, pid and net namespaces; the floor under d_gone");
        samples_free(&zap);
        row_add("k_clone", "kernel: clone3 into 7 new namespaces → child's exit reaped", (s = summarize(&cl), &s),
                "user, mount, pid, net, ipc, uts, cgroup; %u failed", bad);
        row_add("k_fork", "kernel: fork + _exit + waitpid (of this small process)", (s = summarize(&fk), &s), "%s", "");
        row_add("k_bash", "kernel: posix_spawn `bash -c true` + waitpid", (s = summarize(&bt), &s), "%s", "");
        row_add("k_overlay", "kernel: mount of an overlayfs (tmpfs layers)", (s = summarize(&ov), &s),
                "in a child's own mount namespace; each detached after");
        row_add("k_cgroup", "kernel: mkdir + rmdir of a cgroup v2 directory", (s = summarize(&cg), &s), "%s", cgroot);
        samples_free(&cl);
        samples_free(&fk);
        samples_free(&bt);
        samples_free(&ov);
        samples_free(&cg);
}

/* ------------------------------------------------------------------ s: over the socket */

static void server_start(unsigned pool) {
        char n[16];
        snprintf(n, sizeof n, "%u", pool);
        bench_server_start(cfg.sbx, "sbx-bench-cold", (const char *const[]){ "--pool", n, NULL }, false, NULL);
}

static void conn_open(Client *c) { client_open_or_die(c, false, 60); }

/* The answer to id: true when it is no error and, for a run, says exit 0 and "hi\n". */
static bool answer_ok(Client *c, long id) {
        _cleanup_(json_decrefp) json_t *a = client_wait(c, id);
        long long ec;
        const char *out = answer_str(a, "stdout");
        return !answer_is_error(a) &&
               (!answer_get(a, "exitCode") || (answer_int(a, "exitCode", &ec) && ec == 0 && out && strstr(out, "hi\n")));
}

/* n times: a fresh connection, `create` and `run` written at once, the run's answer read;
 * the connection closed (its root sandbox destroyed) and gap_ms waited. */
static void socket_creates(Samples *out, unsigned gap_ms, unsigned *bad) {
        for (unsigned i = 0; i < cfg.n + 3; i++) {
                Client c;
                char req[512];
                size_t len = 0;
                conn_open(&c);
                long create = client_format(&c, req, sizeof req, &len, "create", "{}");
                long run = client_format(&c, req, sizeof req, &len, "run", "{\"command\":\"echo hi\"}");
                uint64_t t0 = bench_now_ns();
                bool ok = client_write(&c, req, len) >= 0 && answer_ok(&c, create) && answer_ok(&c, run);
                double ms = bench_ms_between(t0, c.t_line);
                client_close(&c);
                if (!ok)
                        (*bad)++;
                else if (i >= 3)
                        samples_add(out, ms);
                pause_ms(gap_ms);
        }
}

/* A fresh connection whose root sandbox is made (`create` answered); dies on failure. */
static void connect_with_sandbox(Client *c) {
        conn_open(c);
        long id = client_send(c, "create", "{}");
        if (id < 0 || !answer_ok(c, id))
                bench_die("create over the socket failed");
}

/* In one idle session: `run` `echo hi` over the socket, gap_ms apart, after `warmup` untimed
 * runs; with bash, each run is followed by a bare `bash -c 'echo hi'` spawned by this client
 * (timed into bash). A gap of 5 ms leaves the session's next worker ready and idle; a gap of
 * 200 ms is an agent's pace, its model's time between commands: moves between cgroups then
 * come after a quiet spell, when the kernel's cgroup lock waits for an RCU grace period (see
 * src/cgroup/mover.h). */
static void socket_warm(Samples *run, Samples *bash, unsigned gap_ms, unsigned warmup, unsigned *bad) {
        char *bash_hi[] = { "/bin/bash", "-c", "echo hi", NULL };
        Client c;
        connect_with_sandbox(&c);
        for (unsigned i = 0; i < cfg.n + warmup; i++) {
                char req[256];
                size_t len = 0;
                long id = client_format(&c, req, sizeof req, &len, "run", "{\"command\":\"echo hi\"}");
                pause_ms(gap_ms);
                uint64_t t0 = bench_now_ns();
                bool ok = client_write(&c, req, len) >= 0 && answer_ok(&c, id);
                double ms = bench_ms_between(t0, c.t_line);
                double b = bash ? time_spawn(bash_hi) : 0;
                if (!ok || b < 0)
                        (*bad)++;
                else if (i >= warmup) {
                        samples_add(run, ms);
                        if (bash)
                                samples_add(bash, b);
                }
        }
        client_close(&c);
}

static void bench_socket(void) {
        Samples b2b = { 0 }, spaced = { 0 }, pooled = { 0 }, warm = { 0 }, bash = { 0 }, warm_gap = { 0 };
        unsigned bad = 0;
        bench_progress("s: create + first result over the socket, no pool, %u back to back and %u 60 ms apart", cfg.n,
                       cfg.n);
        server_start(0);
        socket_creates(&b2b, 0, &bad);
        socket_creates(&spaced, 60, &bad);
        bench_server_stop();
        bench_progress("s: the same with the pool of 2, 60 ms apart; then warm runs against bash -c");
        server_start(2);
        pause_ms(500);
        socket_creates(&pooled, 60, &bad);
        socket_warm(&warm, &bash, 5, 10, &bad);
        bench_progress("s: warm runs 200 ms apart");
        socket_warm(&warm_gap, NULL, 200, 2, &bad);
        bench_server_stop();
        Summary s, w = summarize(&warm), b = summarize(&bash);
        row_add("s_nopool", "socket: `create` + `run` `echo hi` → result, no pool, back to back", (s = summarize(&b2b), &s),
                "a fresh connection each; %u failed in all s rows", bad);
        row_add("s_nopool_gap", "  the same, 60 ms apart", (s = summarize(&spaced), &s), "%s", "");
        row_add("s_pool", "socket: the same with the pool of 2 (sbx serve's default), 60 ms apart",
                (s = summarize(&pooled), &s), "%s", "");
        row_add("s_warm", "socket: warm `run` `echo hi`, idle session", &w, "%.2f× bash -c (p50s, interleaved)",
                b.p50 > 0 ? w.p50 / b.p50 : 0);
        row_add("s_bash", "  `bash -c 'echo hi'` spawned by the same client", &b, "%s", "");
        row_add("s_warm_gap", "socket: warm `run` `echo hi`, 200 ms apart (an agent's pace)",
                (s = summarize(&warm_gap), &s), "%s", "");
        samples_free(&b2b);
        samples_free(&spaced);
        samples_free(&pooled);
        samples_free(&warm);
        samples_free(&bash);
        samples_free(&warm_gap);
}

/* ------------------------------------------------------------------ d: destroy */

static bool run_done_flag;
static int run_exit;

static void on_done(void *ud, const SbxResult *r) {
        (void)ud;
        run_done_flag = true;
        run_exit = r->exit_code;
}

static int run_sync(SbxContext *ctx, SbxSession *s, const char *cmd) {
        SbxRunOptions o = { .command = cmd, .command_len = strlen(cmd), .timeout_ms = 30000 };
        run_done_flag = false;
        int r = sbx_session_run(s, &o, NULL, on_done, NULL, NULL);
        while (r >= 0 && !run_done_flag)
                r = sbx_context_run_once(ctx, -1);
        return r < 0 ? r : run_exit;
}

/* The v2 cgroup of pid, as a path under the unified hierarchy (pid 1's "init" leaf's parent,
 * the sandbox's own directory). */
static bool sandbox_cgroup(pid_t pid, char *path, size_t size) {
        char f[64], line[512];
        snprintf(f, sizeof f, "/proc/%d/cgroup", (int)pid);
        FILE *fp = fopen(f, "re");
        bool found = false;
        while (fp && !found && fgets(line, sizeof line, fp))
                if (strncmp(line, "0::", 3) == 0) {
                        line[strcspn(line, "\n")] = 0;
                        char *slash = strrchr(line + 3, '/');
                        if (slash)
                                *slash = 0; /* .../<sandbox>/init -> .../<sandbox> */
                        const char *root = access("/sys/fs/cgroup/unified/cgroup.procs", F_OK) == 0
                                                   ? "/sys/fs/cgroup/unified" : "/sys/fs/cgroup";
                        snprintf(path, size, "%s%s", root, line + 3);
                        found = true;
                }
        if (fp)
                fclose(fp);
        return found;
}

static void bench_destroy(void) {
        Samples gone = { 0 }, call = { 0 }, init = { 0 };
        unsigned bad = 0, n = cfg.n / 5 > 3 ? cfg.n / 5 : 3;
        bench_progress("d: sbx_sandbox_free of a sandbox with 200 processes → all gone, %u times", n);
        SbxContext *ctx = NULL;
        if (sbx_context_new(&ctx) < 0)
                bench_die("sbx_context_new failed");
        for (unsigned i = 0; i < n + 1; i++) {
                SbxSandboxOptions o;
                sbx_sandbox_options_init(&o);
                o.limits.pids = 1024;
                SbxSandbox *sb = NULL;
                SbxSession *s = NULL;
                char cg[PATH_MAX];
                if (sbx_sandbox_new(ctx, &o, &sb) < 0 || sbx_session_get(sb, NULL, &s) < 0 ||
                    run_sync(ctx, s, "for i in $(seq 200); do sleep 1000 & done; "
                                     "until [ $(pgrep -c -x sleep) -ge 200 ]; do sleep 0.01; done") != 0 ||
                    !sandbox_cgroup(sbx_sandbox_init_pid(sb), cg, sizeof cg)) {
                        bad++;
                        if (sb)
                                sbx_sandbox_free(sb);
                        continue;
                }
                int pidfd = (int)syscall(SYS_pidfd_open, sbx_sandbox_init_pid(sb), 0);
                uint64_t t0 = bench_now_ns();
                sbx_sandbox_free(sb);
                double c = bench_ms_since(t0);
                bool init_gone = false, cg_gone = false;
                double t_init = 0;
                while (!(init_gone && cg_gone) && bench_ms_since(t0) < 10000) {
                        (void)sbx_context_run_once(ctx, 1);
                        struct pollfd p = { .fd = pidfd, .events = POLLIN };
                        if (!init_gone && (pidfd < 0 || poll(&p, 1, 0) == 1)) {
                                init_gone = true;
                                t_init = bench_ms_since(t0);
                        }
                        cg_gone = cg_gone || access(cg, F_OK) < 0;
                }
                double all = bench_ms_since(t0);
                if (pidfd >= 0)
                        close(pidfd);
                if (!init_gone || !cg_gone)
                        bad++;
                else if (i >= 1) {
                        samples_add(&gone, all);
                        samples_add(&call, c);
                        samples_add(&init, t_init);
                }
        }
        sbx_context_free(ctx);
        Summary s;
        row_add("d_gone", "destroy a sandbox running 200 processes → pid 1 gone and its cgroup removed",
                (s = summarize(&gone), &s), "C API, sbx_sandbox_free then the loop turned; %u failed", bad);
        row_add("d_call", "  of which the sbx_sandbox_free call", (s = summarize(&call), &s), "%s", "");
        row_add("d_init", "  pid 1 gone (every process of its pid namespace with it)", (s = summarize(&init), &s), "%s", "");
        samples_free(&gone);
        samples_free(&call);
        samples_free(&init);
}

/* ------------------------------------------------------------------ main */

static const char *default_sbx(void) {
        static char buf[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
        if (n > 0) {
                buf[n] = 0;
                char *slash = strrchr(buf, '/');
                if (slash && (size_t)(slash - buf) + sizeof "/../src/cli/sbx" < sizeof buf) {
                        strcpy(slash, "/../src/cli/sbx");
                        if (access(buf, X_OK) == 0)
                                return buf;
                }
        }
        return "sbx";
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "only", required_argument, NULL, 'o' },
                { "iterations", required_argument, NULL, 'n' },
                { "sbx", required_argument, NULL, 's' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        cfg.sbx = default_sbx();
        int c;
        while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
                switch (c) {
                case 'o': cfg.only = optarg; break;
                case 'n': cfg.n = bench_parse_uint(optarg, "iterations"); break;
                case 's': cfg.sbx = optarg; break;
                case 'h':
                        printf("Usage: sbx-bench-cold [--only ksd] [-n N] [--sbx PATH]\n");
                        return 0;
                default: return 2;
                }
        }
        bench_die_hook = bench_server_stop;
        uint64_t t0 = bench_now_ns();
        if (want('k'))
                bench_kernel();
        if (want('s'))
                bench_socket();
        if (want('d'))
                bench_destroy();
        bench_progress("done in %.1f s", bench_ms_since(t0) / 1000);
        rows_print(3);
        bench_notes_print();
        return 0;
}
