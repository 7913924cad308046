/* SPDX-License-Identifier: MIT */
/* sbx-bench-rpc z: `sandbox.pause` then `sandbox.resume` of a sandbox running `yes > /dev/null`
 * (process.start): request written -> answer read, each (a pause is answered once
 * cgroup.events says frozen). */
#include <stdio.h>
#include "base/macro.h"
#include "rpc_benches.h"
#include "rpc_common.h"

/* A request with params: request written -> answer read, in *ms. False on an error answer,
 * counted in *bad, the first of them kept in first_bad (what names the request there). */
static bool timed_call(Client *c, const char *method, const char *params, const char *what, double *ms,
                       unsigned *bad, char *first_bad, size_t size) {
        uint64_t t0 = bench_now_ns();
        _cleanup_(json_decrefp) json_t *a = client_call(c, method, params);
        *ms = bench_ms_between(t0, c->t_line);
        if (!answer_is_error(a))
                return true;
        if ((*bad)++ == 0) {
                char d[260];
                answer_describe(d, sizeof d, a);
                snprintf(first_bad, size, "%s: %.250s", what, d);
        }
        return false;
}

/* A sandbox of its own on c, running `yes > /dev/null`; its id into sbid. */
static void busy_sandbox(Client *c, char *sbid, size_t size) {
        char params[200], d[260];
        _cleanup_(json_decrefp) json_t *a = client_call(c, "sandbox.create", NULL);
        const char *id = answer_str(a, "sandboxId");
        if (answer_is_error(a) || !id) {
                answer_describe(d, sizeof d, a);
                bench_die("sandbox.create: %.200s", d);
        }
        snprintf(sbid, size, "%s", id);
        snprintf(params, sizeof params, "{\"sandboxId\":\"%s\",\"command\":\"yes > /dev/null\"}", sbid);
        _cleanup_(json_decrefp) json_t *s = client_call(c, "process.start", params);
        if (answer_is_error(s)) {
                answer_describe(d, sizeof d, s);
                bench_die("process.start: %.200s", d);
        }
}

void bench_pause(Client *ctl) {
        Client c;
        rpc_open(&c, false);
        char sbid[64], params[200], first_bad[300] = "";
        busy_sandbox(&c, sbid, sizeof sbid);
        snprintf(params, sizeof params, "{\"sandboxId\":\"%s\"}", sbid);
        Samples sp = { 0 }, sr = { 0 };
        unsigned bad = 0;
        bench_progress("z: %u × sandbox.pause + sandbox.resume of a sandbox running `yes > /dev/null`", cfg.pause_n);
        for (unsigned i = 0; i < cfg.pause_n; i++) {
                /* Let it run between cycles, so every pause meets a busy process. */
                sleep_us(2000);
                double pause_ms, resume_ms;
                (void)timed_call(&c, "sandbox.pause", params, "pause", &pause_ms, &bad, first_bad, sizeof first_bad);
                if (!timed_call(&c, "sandbox.resume", params, "resume", &resume_ms, &bad, first_bad, sizeof first_bad))
                        continue;
                samples_add(&sp, pause_ms);
                samples_add(&sr, resume_ms);
        }
        client_close(&c);
        (void)wait_no_sandboxes(ctl, 10000);
        if (first_bad[0])
                bench_note("z: first failure: %s", first_bad);
        Summary xp = summarize(&sp), xr = summarize(&sr);
        row_add("z_pause", "`sandbox.pause` of a sandbox running `yes > /dev/null` (request written → answer read)", &xp,
                "answered once cgroup.events says frozen; %u failed", bad);
        row_add("z_resume", "  then `sandbox.resume` of it", &xr, "%s", "");
        samples_free(&sp);
        samples_free(&sr);
}
