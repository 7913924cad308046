/* SPDX-License-Identifier: MIT */
/* sbx-bench-ports: what forwarding a sandbox's port to the host's loopback (sbx_port_expose)
 * costs, against the targets of the issue (at most 0.2 ms added to an HTTP GET at p50; at
 * least 1 GB/s through one connection).
 *
 * The same minimal HTTP/1.0 server (Python, no keep-alive: one connection per request, closed
 * after the answer) runs twice: in a sandbox, on its port 8000, exposed on the host, and on the
 * host itself. A client process (forked, so that this process only turns the library's loop, as
 * the daemon does) then measures:
 *   l  GET of the same 1 KiB body, connect to last byte (EOF), directly and through the port,
 *      alternating one each (so both meet the same machine), after a warm-up
 *   t  GET of 1 GiB (zeros the server sends from a buffer of 1 MiB), directly and through the
 *      port, alternating, several times each: MB/s from the request to the last byte
 * Every answer is checked (its length, and the 1 KiB body's bytes).
 *
 * Only the public API (sbx/sbx.h) is used. Progress goes to stderr, the Markdown report to
 * stdout. Times are CLOCK_MONOTONIC; percentiles interpolate linearly between ranks. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include "common.h"
#include "sbx/sbx.h"

const char bench_prog[] = "sbx-bench-ports";

typedef struct Config {
        unsigned n;        /* l: requests each way */
        unsigned warmup;   /* l: untimed requests each way first */
        unsigned tp_reps;  /* t: transfers each way */
        uint64_t tp_bytes; /* t: bytes per transfer */
        const char *only;
} Config;

static Config cfg = { .n = 2000, .warmup = 100, .tp_reps = 3, .tp_bytes = 1ULL << 30, .only = "lt" };

static bool want(char letter) { return strchr(cfg.only, letter) != NULL; }

#define SMALL_BYTES 1024U
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define SANDBOX_PORT 8000

/* The server: HTTP/1.0, one request per connection. GET /small answers SMALL_BYTES bytes of
 * "0123456789..."; GET /bytes/N answers N zero bytes. argv[1] is the port (0: any; the port is
 * printed on stdout either way). */
static const char server_py[] =
        "import socket, sys\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(512)\n"
        "print(s.getsockname()[1], flush=True)\n"
        "small = bytes(b'0123456789'[i % 10] for i in range(1024))\n"
        "zeros = memoryview(bytes(1 << 20))\n"
        "while True:\n"
        "    c, _ = s.accept()\n"
        "    req = b''\n"
        "    while b'\\r\\n\\r\\n' not in req:\n"
        "        d = c.recv(4096)\n"
        "        if not d: break\n"
        "        req += d\n"
        "    path = req.split(b' ')[1] if req.count(b' ') >= 2 else b'/'\n"
        "    if path.startswith(b'/bytes/'):\n"
        "        n = int(path[7:])\n"
        "        c.sendall(b'HTTP/1.0 200 OK\\r\\nContent-Length: %d\\r\\n\\r\\n' % n)\n"
        "        while n > 0:\n"
        "            k = min(n, len(zeros)); c.sendall(zeros[:k]); n -= k\n"
        "    else:\n"
        "        c.sendall(b'HTTP/1.0 200 OK\\r\\nContent-Length: %d\\r\\n\\r\\n' % len(small) + small)\n"
        "    c.close()\n";

static SbxContext *g_ctx;
static pid_t host_server = -1, client = -1;

static void on_die(void) {
        if (client > 0)
                kill(client, SIGKILL);
        if (host_server > 0)
                kill(host_server, SIGKILL);
        sbx_context_free(g_ctx);
}

/* ------------------------------------------------------------------ the client (a child) */

/* One GET: connect, send, read to EOF. Returns the seconds it took, or a negative number when
 * the answer was not the one expected (want bytes of body; check_small: the body's bytes). */
static double get(uint16_t port, const char *path, uint64_t want_body, bool check_small) {
        static char buf[1 << 20];
        uint64_t t0 = bench_now_ns();
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
                if (fd >= 0)
                        close(fd);
                return -1;
        }
        char req[128];
        int len = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
        if (send(fd, req, (size_t)len, MSG_NOSIGNAL) != len) {
                close(fd);
                return -2;
        }
        /* The stream's first bytes are kept: the head, and all of a small answer. */
        char head[2048];
        size_t head_n = 0;
        uint64_t total = 0;
        bool ok = true;
        for (;;) {
                ssize_t k = recv(fd, buf, sizeof buf, 0);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0) {
                        ok = k == 0;
                        break;
                }
                size_t take = MIN((size_t)k, sizeof head - 1 - head_n);
                memcpy(head + head_n, buf, take);
                head_n += take;
                total += (uint64_t)k;
        }
        head[head_n] = 0;
        char *end = strstr(head, "\r\n\r\n");
        uint64_t body_at = end ? (uint64_t)(end + 4 - head) : 0;
        ok = ok && end && strncmp(head, "HTTP/1.0 200 ", 13) == 0 && total - body_at == want_body;
        for (uint64_t i = body_at; ok && check_small && i < total; i++)
                ok = i < head_n && head[i] == (char)('0' + (i - body_at) % 10);
        close(fd);
        double s = (double)(bench_now_ns() - t0) / 1e9;
        return ok ? s : -3;
}

static void write_doubles(int fd, const double *v, size_t n) {
        const char *p = (const char *)v;
        size_t len = n * sizeof *v;
        while (len > 0) {
                ssize_t k = write(fd, p, len);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        _exit(3);
                p += k;
                len -= (size_t)k;
        }
}

/* The client's work, in a child: results go to fd as doubles, direct and forwarded alternating
 * (the latency samples, then the transfers' seconds). Exits 0, or 1 when an answer was wrong. */
static _Noreturn void client_main(int fd, uint16_t direct, uint16_t forwarded) {
        uint16_t port[2] = { direct, forwarded };
        if (want('l')) {
                for (unsigned i = 0; i < cfg.warmup + cfg.n; i++) {
                        double v[2];
                        /* Alternate which goes first, so neither always follows the other. */
                        for (int k = 0; k < 2; k++) {
                                int w = (int)(i % 2) ^ k;
                                v[w] = get(port[w], "/small", SMALL_BYTES, true);
                                if (v[w] < 0) {
                                        fprintf(stderr, "%s: GET /small %s failed (%g)\n", bench_prog,
                                                w ? "forwarded" : "direct", v[w]);
                                        _exit(1);
                                }
                        }
                        if (i >= cfg.warmup)
                                write_doubles(fd, v, 2);
                }
        }
        if (want('t')) {
                char path[64];
                snprintf(path, sizeof path, "/bytes/%" PRIu64, cfg.tp_bytes);
                for (unsigned i = 0; i < cfg.tp_reps; i++) {
                        double v[2];
                        for (int w = 0; w < 2; w++) {
                                v[w] = get(port[w], path, cfg.tp_bytes, false);
                                if (v[w] < 0) {
                                        fprintf(stderr, "%s: GET %s %s failed (%g)\n", bench_prog, path,
                                                w ? "forwarded" : "direct", v[w]);
                                        _exit(1);
                                }
                        }
                        write_doubles(fd, v, 2);
                }
        }
        _exit(0);
}

/* ------------------------------------------------------------------ setup */

static void run_or_die(SbxSession *s, const char *cmd) {
        SbxRunOptions o = { .command = cmd, .command_len = strlen(cmd) };
        SbxResult r = { 0 };
        int rc = sbx_session_run_sync(s, &o, NULL, NULL, &r);
        if (rc < 0 || r.exit_code != 0)
                bench_die("`%s` failed: %d %.*s", cmd, rc < 0 ? rc : r.exit_code, (int)r.stderr_len,
                          r.stderr_data ? (const char *)r.stderr_data : "");
        sbx_result_clear(&r);
}

/* Starts the server on the host; returns its port. */
static uint16_t host_server_start(void) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                bench_die("pipe: %m");
        host_server = fork();
        if (host_server < 0)
                bench_die("fork: %m");
        if (host_server == 0) {
                dup2(p[1], 1);
                execlp("python3", "python3", "-c", server_py, "0", (char *)NULL);
                _exit(127);
        }
        close(p[1]);
        char line[32] = { 0 };
        ssize_t k = read(p[0], line, sizeof line - 1);
        /* p[0] stays open (until the end): the server may still be writing its line. */
        unsigned port = k > 0 ? (unsigned)strtoul(line, NULL, 10) : 0;
        if (port == 0 || port > 65535)
                bench_die("the host's server did not start");
        return (uint16_t)port;
}

/* CPU time (user and system) of this process so far, in seconds. */
static double self_cpu_s(void) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
               (double)ru.ru_stime.tv_usec / 1e6;
}

/* Turns the loop until the client has ended, taking its results meanwhile. */
static void client_run(uint16_t direct, uint16_t forwarded, Samples *lat, Samples *tp) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                bench_die("pipe: %m");
        client = fork();
        if (client < 0)
                bench_die("fork: %m");
        if (client == 0) {
                close(p[0]);
                client_main(p[1], direct, forwarded);
        }
        close(p[1]);
        (void)fcntl(p[0], F_SETFL, O_NONBLOCK);
        double v[2];
        size_t have = 0, got = 0;
        bool eof = false;
        while (!eof) {
                sbx_context_run_once(g_ctx, 2);
                for (;;) {
                        ssize_t k = read(p[0], (char *)v + have, sizeof v - have);
                        if (k == 0)
                                eof = true;
                        if (k <= 0)
                                break;
                        have += (size_t)k;
                        if (have == sizeof v) {
                                Samples *s = want('l') && got < cfg.n ? lat : tp;
                                samples_add(&s[0], v[0]);
                                samples_add(&s[1], v[1]);
                                got++;
                                have = 0;
                        }
                }
        }
        close(p[0]);
        int st;
        while (waitpid(client, &st, 0) < 0 && errno == EINTR)
                ;
        client = -1;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                bench_die("the client failed");
}

static void usage(FILE *f) {
        fprintf(f, "usage: %s [-n REQUESTS] [--warmup N] [--tp-reps N] [--tp-mib N] [--only lt] [--quick]\n"
                   "  l: GET of 1 KiB, direct vs through an exposed port (p50, p99); t: 1 GiB through both (MB/s)\n",
                bench_prog);
}

int main(int argc, char **argv) {
        enum { O_ONLY = 256, O_WARMUP, O_TP_REPS, O_TP_MIB, O_QUICK };
        static const struct option opts[] = {
                { "only", required_argument, NULL, O_ONLY },
                { "requests", required_argument, NULL, 'n' },
                { "warmup", required_argument, NULL, O_WARMUP },
                { "tp-reps", required_argument, NULL, O_TP_REPS },
                { "tp-mib", required_argument, NULL, O_TP_MIB },
                { "quick", no_argument, NULL, O_QUICK },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        int c;
        while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
                switch (c) {
                case O_ONLY: cfg.only = optarg; break;
                case 'n': cfg.n = bench_parse_uint(optarg, "requests"); break;
                case O_WARMUP: cfg.warmup = bench_parse_uint(optarg, "warmup"); break;
                case O_TP_REPS: cfg.tp_reps = bench_parse_uint(optarg, "tp-reps"); break;
                case O_TP_MIB: cfg.tp_bytes = (uint64_t)bench_parse_uint(optarg, "tp-mib") << 20; break;
                case O_QUICK: cfg.n = 300; cfg.warmup = 20; cfg.tp_reps = 1; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        if (optind < argc || cfg.n == 0 || cfg.tp_reps == 0 || cfg.tp_bytes == 0) {
                usage(stderr);
                return 2;
        }
        signal(SIGPIPE, SIG_IGN);
        int r = sbx_context_new(&g_ctx);
        if (r < 0)
                bench_die("sbx_context_new: %s", strerror(-r));
        bench_die_hook = on_die;
        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so);
        SbxSandbox *sb;
        SbxSession *s;
        if ((r = sbx_sandbox_new(g_ctx, &so, &sb)) < 0 || (r = sbx_session_get(sb, NULL, &s)) < 0)
                bench_die("sandbox: %s (%s)", strerror(-r), sbx_context_last_error(g_ctx));

        bench_progress("starting the server in the sandbox and on the host");
        char cmd[sizeof server_py + 256];
        snprintf(cmd, sizeof cmd, "cat > /tmp/server.py <<'EOF'\n%sEOF\npython3 /tmp/server.py %d >/dev/null 2>&1 &",
                 server_py, SANDBOX_PORT);
        run_or_die(s, cmd);
        uint64_t t0 = bench_now_ns();
        while (sbx_port_listening(sb, SANDBOX_PORT) != 1) {
                if (bench_ms_since(t0) > 10000)
                        bench_die("the sandbox's server does not listen");
                sbx_context_run_once(g_ctx, 10);
        }
        uint16_t forwarded, direct = host_server_start();
        if ((r = sbx_port_expose(sb, SANDBOX_PORT, &forwarded)) < 0)
                bench_die("sbx_port_expose: %s", strerror(-r));
        loop_quiet(g_ctx, 20);

        bench_progress("%s%s", want('l') ? "GET of 1 KiB, direct and forwarded, alternating; " : "",
                       want('t') ? "then 1 GiB transfers" : "");
        Samples lat[2] = { 0 }, tp[2] = { 0 };
        double cpu0 = self_cpu_s();
        client_run(direct, forwarded, lat, tp);
        /* This process only forwards (the direct requests never reach it): its CPU time is what
         * the forwarding cost, whatever else the machine was doing. */
        double fwd_cpu = self_cpu_s() - cpu0;

        printf("# Exposed ports\n\n");
        printf("The same minimal Python HTTP/1.0 server (a connection per request, closed after the answer) in a "
               "sandbox, reached through `sbx_port_expose` on the host's 127.0.0.1, and on the host itself; "
               "the client is a separate process, this one only turns the library's loop (as the daemon does).\n\n");
        if (want('l')) {
                for (int w = 0; w < 2; w++)
                        for (size_t i = 0; i < lat[w].n; i++)
                                lat[w].v[i] *= 1000;
                Summary d = summarize(&lat[0]), f = summarize(&lat[1]);
                row_add("l_direct", "GET 1 KiB, directly on the host's loopback", &d, "connect to EOF");
                row_add("l_fwd", "GET 1 KiB, through the exposed port", &f, "connect to EOF");
                printf("## Latency (ms), %u requests each, after %u\n\n", cfg.n, cfg.warmup);
                rows_print(3);
                double added50 = f.p50 - d.p50, added99 = f.p99 - d.p99;
                printf("\nAdded by the forward: p50 %.3f ms, p99 %.3f ms (target: at most 0.2 ms at p50): %s\n\n",
                       added50, added99, bench_verdict(true, added50 <= 0.2));
        }
        if (want('t')) {
                printf("## Throughput, GET of %" PRIu64 " MiB, %u times each\n\n| | best MB/s | median MB/s |\n|---|---|---|\n",
                       cfg.tp_bytes >> 20, cfg.tp_reps);
                double best_fwd = 0;
                for (int w = 0; w < 2; w++) {
                        Summary t = summarize(&tp[w]);
                        double mb = (double)cfg.tp_bytes / 1e6;
                        printf("| %s | %.0f | %.0f |\n", w ? "through the exposed port" : "directly", mb / t.min,
                               mb / t.p50);
                        if (w)
                                best_fwd = mb / t.p50;
                }
                printf("\nThrough the port, median (target: at least 1,000 MB/s): %s\n\n",
                       bench_verdict(true, best_fwd >= 1000));
        }
        double fwd_bytes = (want('l') ? (double)(cfg.n + cfg.warmup) * SMALL_BYTES : 0) +
                           (want('t') ? (double)cfg.tp_reps * (double)cfg.tp_bytes : 0);
        printf("CPU time of the loop (this process), all of it forwarding: %.2f s", fwd_cpu);
        if (want('t'))
                printf(", %.2f s per GiB forwarded", fwd_cpu / (fwd_bytes / (double)(1ULL << 30)));
        if (want('l') && !want('t'))
                printf(", %.1f us per request", fwd_cpu * 1e6 / (double)(cfg.n + cfg.warmup));
        printf(".\n");
        kill(host_server, SIGKILL);
        waitpid(host_server, NULL, 0);
        host_server = -1;
        sbx_context_free(g_ctx);
        samples_free(&lat[0]);
        samples_free(&lat[1]);
        samples_free(&tp[0]);
        samples_free(&tp[1]);
        return 0;
}
