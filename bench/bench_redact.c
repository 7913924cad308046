/* SPDX-License-Identifier: MIT */
/* sbx-bench-redact: what redaction costs, through the public API (sbx/sbx.h) only.
 *
 *   mem   sbx_sandbox_redact() over 1 GiB of ordinary text (log lines) in 1 MiB calls, with
 *         the default key shapes and 4 secrets
 *   tp    1 GiB of the same text through a run (python3 writing a 64 KiB block over and over),
 *         every byte kept and streamed (cap 2 GiB), counted in on_output: redaction on (default
 *         shapes + 4 secrets) against off, interleaved; and the same with the default 1 MiB cap
 *         (the rest read and dropped, so only the first MiB is redacted)
 *   warm  warm `echo hi` request to result, on against off, interleaved
 *
 * Progress on stderr, a Markdown report on stdout. Options: -n N warm runs (default 400),
 * --tp-reps N runs per throughput variant (default 2), --tp-mib N (default 1024). */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "sbx/sbx.h"

const char bench_prog[] = "sbx-bench-redact";

#define MIB (1024ULL * 1024)

static const char *const secrets[] = {
        "OPENAI_API_KEY=sk-proj-0123456789abcdefghijklmnopqrstuvwxyzABCD",
        "DB_PASSWORD=correct-horse-battery-staple",
        "GITHUB_TOKEN=ghp_0123456789abcdefghijklmnopqrstuvwxyz",
        "WEBHOOK=https://hooks.example.com/T000/B000/XXXXXXXX",
        NULL,
};

/* Ordinary output: build and server log lines, tracebacks, listings, rulers. */
static const char *const lines[] = {
        "2026-11-24 12:00:01.123 INFO  server: listening on 0.0.0.0:8080 with 4 workers (pid 4242)\n",
        "GET /api/v1/users?id=42&sort=asc HTTP/1.1 200 OK - 1532 bytes in 3.2 ms - Mozilla/5.0\n",
        "  File \"/usr/lib/python3/dist-packages/requests/sessions.py\", line 589, in request\n",
        "drwxr-xr-x  2 user user 4096 Nov 24 12:00 some-directory-name-here\n",
        "----------------------------------------------------------------------\n",
        "[ 42%] Building C object src/session/CMakeFiles/session.dir/run.c.o -Wall -O2\n",
        "test_sessions.py::test_state_survives_a_killed_command PASSED               [ 17%]\n",
        "  warning: unused variable 'ret' [-Wunused-variable] in src/base/buf.c:42:9\n",
};

static double gbps(uint64_t bytes, double ms) { return ms > 0 ? (double)bytes / (ms * 1e6) : 0; }

typedef struct Run {
        bool done;
        int exit_code;
        uint64_t streamed, t0, t1;
        bool truncated;
} Run;

static void on_out(void *ud, SbxStream st, const uint8_t *d, size_t n) {
        Run *r = ud;
        if (st == SBX_STDOUT)
                r->streamed += n;
}

static void on_done(void *ud, const SbxResult *res) {
        Run *r = ud;
        r->done = true;
        r->exit_code = res->exit_code;
        r->truncated = res->stdout_truncated;
        r->t1 = bench_now_ns();
}

static Run run(SbxContext *ctx, SbxSession *s, const char *cmd, bool stream) {
        Run r = { .t0 = bench_now_ns() };
        SbxRunOptions o = { .command = cmd, .command_len = strlen(cmd), .timeout_ms = 300000 };
        if (sbx_session_run(s, &o, stream ? on_out : NULL, on_done, &r, NULL) < 0)
                bench_die("cannot queue a run");
        while (!r.done)
                if (sbx_context_run_once(ctx, -1) < 0)
                        bench_die("loop failed");
        return r;
}

static SbxSession *session_of(SbxContext *ctx, const SbxSandboxOptions *o, SbxSandbox **ret) {
        SbxSession *s;
        if (sbx_sandbox_new(ctx, o, ret) < 0 || sbx_session_get(*ret, NULL, &s) < 0)
                bench_die("cannot create a sandbox: %s", sbx_context_last_error(ctx));
        Run w = run(ctx, s, "echo warm", false);
        (void)w;
        loop_quiet(ctx, 10);
        return s;
}

int main(int argc, char **argv) {
        unsigned warm_n = 400, tp_reps = 2, tp_mib = 1024;
        static const struct option opts[] = { { "tp-reps", required_argument, NULL, 'r' },
                                              { "tp-mib", required_argument, NULL, 'm' }, {} };
        int c;
        while ((c = getopt_long(argc, argv, "n:", opts, NULL)) != -1) {
                if (c == 'n')
                        warm_n = bench_parse_uint(optarg, "-n");
                else if (c == 'r')
                        tp_reps = bench_parse_uint(optarg, "--tp-reps");
                else if (c == 'm')
                        tp_mib = bench_parse_uint(optarg, "--tp-mib");
                else
                        return 2;
        }
        uint64_t total = (uint64_t)tp_mib * MIB;
        SbxContext *ctx;
        if (sbx_context_new(&ctx) < 0)
                bench_die("no context");

        /* One 64 KiB block of ordinary text, and 1 MiB of it for the memory row. */
        size_t blk = 64 * 1024, k = 0;
        char *block = malloc(MIB);
        for (size_t i = 0; k < MIB; i++) {
                const char *l = lines[i % (sizeof lines / sizeof *lines)];
                size_t n = strlen(l) < MIB - k ? strlen(l) : MIB - k;
                memcpy(block + k, l, n);
                k += n;
        }

        /* The "on" sandbox: defaults and 4 secrets; then redaction off for the next one. */
        SbxSandboxOptions on_o, off_o;
        sbx_sandbox_options_init(&on_o);
        sbx_sandbox_options_init(&off_o);
        on_o.secrets = secrets;
        on_o.limits.stdout_bytes = off_o.limits.stdout_bytes = 2048 * MIB;
        SbxSandbox *on_sb, *off_sb, *on_cap_sb, *off_cap_sb;
        SbxSession *on = session_of(ctx, &on_o, &on_sb);
        SbxSandboxOptions cap_o = on_o;
        cap_o.limits.stdout_bytes = 0;
        SbxSession *on_cap = session_of(ctx, &cap_o, &on_cap_sb);
        char err[256];
        if (sbx_context_set_redaction(ctx, NULL, false, err, sizeof err) < 0)
                bench_die("%s", err);
        SbxSession *off = session_of(ctx, &off_o, &off_sb);
        off_o.limits.stdout_bytes = 0;
        SbxSession *off_cap = session_of(ctx, &off_o, &off_cap_sb);

        printf("# sbx redaction benchmarks\n\n");
        printf("| Path | Redaction | GB/s (median) | runs | check |\n|---|---|---|---|---|\n");

        /* mem: the redactor alone, through the public call. */
        {
                bench_progress("mem: sbx_sandbox_redact over %u MiB", tp_mib);
                uint64_t t0 = bench_now_ns(), out = 0;
                for (uint64_t done = 0; done < total; done += MIB) {
                        size_t n;
                        char *red = sbx_sandbox_redact(on_sb, block, MIB, &n);
                        if (!red)
                                bench_die("out of memory");
                        out += n;
                        free(red);
                }
                double ms = bench_ms_since(t0);
                printf("| `sbx_sandbox_redact()`, %u x 1 MiB of log text from memory | on (shapes + 4 secrets) | **%.2f** | 1 | "
                       "%s |\n", tp_mib, gbps(total, ms), out == total ? "nothing replaced: same length" : "LENGTH CHANGED");
        }

        /* tp: 1 GiB through runs, on and off interleaved. */
        char cmd[512];
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 -c 'import sys; b=open(\"/tmp/blk\",\"rb\").read(); w=sys.stdout.buffer.write; "
                 "[w(b) for _ in range(%" PRIu64 ")]'",
                 total / blk);
        char setup[] = "/usr/bin/python3 -c 'import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())' > /tmp/blk";
        SbxSession *all[] = { on, off, on_cap, off_cap };
        for (size_t i = 0; i < 4; i++) {
                Run r = { .t0 = bench_now_ns() };
                SbxRunOptions o = { .command = setup, .command_len = strlen(setup), .stdin_data = block,
                                    .stdin_len = blk, .timeout_ms = 30000 };
                if (sbx_session_run(all[i], &o, NULL, on_done, &r, NULL) < 0)
                        bench_die("setup");
                while (!r.done)
                        (void)sbx_context_run_once(ctx, -1);
                if (r.exit_code != 0)
                        bench_die("cannot write the block in the sandbox");
        }
        const char *names[] = { "run, cap 2 GiB: every byte kept and streamed (counting on_output)",
                                "run, default 1 MiB cap: the rest read and dropped" };
        for (int capped = 0; capped < 2; capped++) {
                Samples s_on = { 0 }, s_off = { 0 };
                bool ok = true;
                for (unsigned rep = 0; rep < tp_reps; rep++) {
                        for (int which = 0; which < 2; which++) {
                                SbxSession *s = capped ? (which ? off_cap : on_cap) : (which ? off : on);
                                bench_progress("tp: %s, %s, %u/%u", capped ? "1 MiB cap" : "2 GiB cap",
                                               which ? "off" : "on", rep + 1, tp_reps);
                                Run r = run(ctx, s, cmd, true);
                                loop_quiet(ctx, 10);
                                ok &= r.exit_code == 0 && (capped ? r.truncated : r.streamed == total);
                                samples_add(which ? &s_off : &s_on, gbps(total, bench_ms_between(r.t0, r.t1)));
                        }
                }
                Summary a = summarize(&s_on), b = summarize(&s_off);
                printf("| %s | on (shapes + 4 secrets) | **%.2f** | %zu | %s |\n", names[capped], a.p50, a.n,
                       ok ? (capped ? "truncated as expected" : "all bytes streamed, none replaced") : "FAILED");
                printf("| %s | off | %.2f | %zu | ratio on/off %.2f |\n", names[capped], b.p50, b.n,
                       b.p50 > 0 ? a.p50 / b.p50 : 0);
                samples_free(&s_on);
                samples_free(&s_off);
        }

        /* warm: echo hi, on and off interleaved. */
        Samples w_on = { 0 }, w_off = { 0 };
        bench_progress("warm: %u x echo hi, on and off interleaved", warm_n);
        for (unsigned i = 0; i < warm_n + 20; i++)
                for (int which = 0; which < 2; which++) {
                        Run r = run(ctx, which ? off : on, "echo hi", true);
                        loop_quiet(ctx, 2);
                        if (i >= 20)
                                samples_add(which ? &w_off : &w_on, bench_ms_between(r.t0, r.t1));
                }
        Summary a = summarize(&w_on), b = summarize(&w_off);
        printf("\n| warm `echo hi` (ms) | p50 | p90 | p99 | n |\n|---|---|---|---|---|\n");
        printf("| redaction on (shapes + 4 secrets) | %.3f | %.3f | %.3f | %zu |\n", a.p50, a.p90, a.p99, a.n);
        printf("| redaction off | %.3f | %.3f | %.3f | %zu |\n", b.p50, b.p90, b.p99, b.n);
        printf("| ratio on/off (p50) | %.2f | | | |\n", b.p50 > 0 ? a.p50 / b.p50 : 0);
        samples_free(&w_on);
        samples_free(&w_off);
        free(block);
        sbx_context_free(ctx);
        return 0;
}
