/* SPDX-License-Identifier: MIT */
/* sbx-bench-rpc r: `run` of `echo hi` over the socket (request written -> answer line read)
 * in an idle session, interleaved with the same run through the C API (bench.c's "a") and with
 * `ping`; then the socket's runs back to back. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "rpc_benches.h"
#include "rpc_common.h"
#include "sbx/sbx.h"

/* ------------------------------------------------------------------ the C API side */

typedef struct Run {
        bool done, said_hi;
        int exit_code;
        uint64_t t_done;
} Run;

static void capi_done(void *ud, const SbxResult *res) {
        Run *r = ud;
        r->t_done = bench_now_ns();
        r->done = true;
        r->exit_code = res->exit_code;
        r->said_hi = res->exit_code == 0 && res->error_class == SBX_ERROR_NONE && res->stdout_len == 3 &&
                     memcmp(res->stdout_data, "hi\n", 3) == 0 && res->stderr_len == 0;
}

/* As bench.c: submit -> done callback, in ms; < 0 on failure. */
static double capi_run(SbxContext *ctx, SbxSession *s) {
        Run r = { 0 };
        SbxRunOptions o = { .command = "echo hi", .command_len = 7 };
        uint64_t t0 = bench_now_ns();
        if (sbx_session_run(s, &o, NULL, capi_done, &r, NULL) < 0)
                return -1;
        while (!r.done)
                if (sbx_context_run_once(ctx, -1) < 0)
                        return -1;
        return r.said_hi ? bench_ms_between(t0, r.t_done) : -1;
}

/* ------------------------------------------------------------------ r */

void bench_roundtrip(Client *ctl) {
        SbxContext *ctx = NULL;
        SbxSandbox *sb = NULL;
        SbxSession *s = NULL;
        int k;
        capi_sandbox_new(&ctx, &sb);
        if ((k = sbx_session_get(sb, NULL, &s)) < 0)
                bench_die("sbx_session_get: %s", strerror(-k));

        Client c;
        rpc_open_with_sandbox(&c);

        bench_progress("r: %u warm-up iterations", cfg.warmup);
        for (unsigned i = 0; i < cfg.warmup; i++) {
                (void)rpc_run_hi(&c);
                sleep_us(cfg.quiet_ms * 1000);
                (void)capi_run(ctx, s);
                loop_quiet(ctx, (int)cfg.quiet_ms);
                (void)rpc_ping(&c);
        }

        Samples srpc = { 0 }, scapi = { 0 }, sping = { 0 }, sb2b = { 0 };
        unsigned bad_rpc = 0, bad_capi = 0, bad_ping = 0, bad_b2b = 0;
        bench_progress("r: %u interleaved iterations (rpc run, C API run, rpc ping)", cfg.warm_n);
        double cpu_rpc = 0, cpu_capi = 0;
        for (unsigned i = 0; i < cfg.warm_n; i++) {
                for (unsigned j = 0; j < 3; j++) {
                        double ms;
                        double r0, w0, r1, w1;
                        switch ((i + j) % 3) {
                        case 0:
                                proc_schedstat(bench_srv.pid, &r0, &w0);
                                ms = rpc_run_hi(&c);
                                if (ms < 0)
                                        bad_rpc++;
                                else
                                        samples_add(&srpc, ms);
                                /* The server turns its own loop: the next worker gets ready while we sleep. */
                                sleep_us(cfg.quiet_ms * 1000);
                                proc_schedstat(bench_srv.pid, &r1, &w1);
                                cpu_rpc += r1 - r0;
                                break;
                        case 1:
                                proc_schedstat(getpid(), &r0, &w0);
                                ms = capi_run(ctx, s);
                                if (ms < 0)
                                        bad_capi++;
                                else
                                        samples_add(&scapi, ms);
                                loop_quiet(ctx, (int)cfg.quiet_ms);
                                proc_schedstat(getpid(), &r1, &w1);
                                cpu_capi += r1 - r0;
                                break;
                        default:
                                ms = rpc_ping(&c);
                                if (ms < 0)
                                        bad_ping++;
                                else
                                        samples_add(&sping, ms);
                                break;
                        }
                }
        }
        bench_progress("r: %u back-to-back rpc runs", cfg.warm_n);
        for (unsigned i = 0; i < cfg.warm_n; i++) {
                double ms = rpc_run_hi(&c);
                if (ms < 0)
                        bad_b2b++;
                else
                        samples_add(&sb2b, ms);
        }
        Summary xr = summarize(&srpc), xc = summarize(&scapi), xp = summarize(&sping), xb = summarize(&sb2b);
        row_add("r_rpc", "`run` `echo hi` over the socket, idle session (request written → response line read)", &xr,
                "interleaved with r_capi and r_ping; the server process on a CPU %.0f µs per run, next worker "
                "included (/proc/PID/schedstat); %u failed%s",
                cfg.warm_n ? 1e6 * cpu_rpc / cfg.warm_n : 0, bad_rpc, cfg.audit ? "; audit log on (--audit)" : "");
        row_add("r_capi", "the same through the C API (bench.c's a: submit → done callback)", &xc,
                "interleaved; this process on a CPU %.0f µs per run, next worker included; %u failed",
                cfg.warm_n ? 1e6 * cpu_capi / cfg.warm_n : 0, bad_capi);
        row_add("r_ping", "`ping` over the socket, idle server", &xp, "interleaved; %u failed", bad_ping);
        row_add("r_b2b", "`run` `echo hi` over the socket, back-to-back", &xb,
                "next request sent as soon as the answer is in (waits for the next worker); %u failed", bad_b2b);
        samples_free(&srpc);
        samples_free(&scapi);
        samples_free(&sping);
        samples_free(&sb2b);
        client_close(&c);
        sbx_sandbox_free(sb);
        sbx_context_free(ctx);
        (void)wait_no_sandboxes(ctl, 10000);
}

void roundtrip_targets(void) {
        const Row *rr = row_find("r_rpc"), *rc = row_find("r_capi");
        if (rr && rc)
                printf("| `run` `echo hi` over the socket p50 ≤ 1.2× the C API | %.3f ms / %.3f ms = %.2f× | %s |\n",
                       rr->s.p50, rc->s.p50, rr->s.p50 / rc->s.p50, bench_verdict(true, rr->s.p50 <= 1.2 * rc->s.p50));
        else
                printf("| `run` `echo hi` over the socket p50 ≤ 1.2× the C API | – | not measured |\n");
}
