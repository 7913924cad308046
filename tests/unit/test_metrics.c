/* SPDX-License-Identifier: MIT */
/* A sandbox's metrics ring (src/session/metrics.h): equal samples in a row are one record,
 * the ring keeps the last SBX_METRICS_SAMPLES whatever their records, queries expand records
 * back into samples at their times; and /metrics' text (src/console/prom.c) from a snapshot. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "base/limits.h"
#include "console/console.h"
#include "session/metrics.h"
#include "tap.h"

static SbxMetricsSample at(uint64_t t, uint64_t cpu) {
        return (SbxMetricsSample){ .time_ms = t, .cpu_usec = cpu, .memory_bytes = 1000 + cpu, .pids = 3, .fs_bytes = 4096 };
}

static void ring(void) {
        Metrics m = { 0 };
        SbxMetricsSample out[SBX_METRICS_SAMPLES + 8], last;
        CHECK(metrics_query(&m, 0, UINT64_MAX, out, 8) == 0, "an empty ring has no sample");
        CHECK(metrics_last(&m, &last) == -ENODATA, "and no last one");

        /* Ten equal samples, 5 s apart: one record. */
        for (uint64_t i = 0; i < 10; i++)
                metrics_push(&m, &(SbxMetricsSample){ .time_ms = 1000000 + i * 5000, .cpu_usec = 7, .memory_bytes = 1007,
                                                      .pids = 3, .fs_bytes = 4096 });
        CHECK(m.n == 1 && m.samples == 10, "ten equal samples are one record (%u records, %u samples)", m.n, m.samples);
        size_t k = metrics_query(&m, 0, UINT64_MAX, out, 20);
        bool times = k == 10;
        for (size_t i = 0; times && i < 10; i++)
                times = out[i].time_ms == 1000000 + i * 5000 && out[i].cpu_usec == 7 && out[i].memory_bytes == 1007;
        CHECK(times, "and come back as ten samples at their times (%zu)", k);
        CHECK(metrics_last(&m, &last) == 0 && last.time_ms == 1045000, "the last sample is the record's last time");

        /* A sample that differs in a cheap field starts a record; memory alone does not. */
        SbxMetricsSample s = at(1050000, 7);
        s.memory_bytes = 99999;
        CHECK(metrics_extends(&m, &s), "a change of memory alone extends the record (it is not read then)");
        s = at(1050000, 8);
        metrics_push(&m, &s);
        CHECK(m.n == 2 && m.samples == 11, "a CPU change is a record of its own");
        k = metrics_query(&m, 1040000, 1050000, out, 20);
        CHECK(k == 3 && out[0].time_ms == 1040000 && out[2].time_ms == 1050000 && out[2].cpu_usec == 8,
              "a range picks the samples inside it, across records (%zu)", k);
        k = metrics_query(&m, 0, UINT64_MAX, out, 2);
        CHECK(k == 11 && out[1].time_ms == 1005000, "max limits what is written, not what is counted");
        CHECK(metrics_query(&m, 2000000, 3000000, out, 20) == 0, "a range after the last sample is empty");

        /* Distinct samples past the ring's size: the oldest go, the newest are all kept. */
        metrics_done(&m);
        for (uint64_t i = 0; i < SBX_METRICS_SAMPLES + 80; i++) {
                s = at(i * 5000, i);
                metrics_push(&m, &s);
        }
        k = metrics_query(&m, 0, UINT64_MAX, out, SBX_METRICS_SAMPLES + 8);
        CHECK(k == SBX_METRICS_SAMPLES && out[0].cpu_usec == 80 && out[k - 1].cpu_usec == SBX_METRICS_SAMPLES + 79,
              "past %u samples the oldest are dropped (%zu kept, first %llu)", SBX_METRICS_SAMPLES, k,
              (unsigned long long)out[0].cpu_usec);
        CHECK(m.cap <= SBX_METRICS_SAMPLES, "the ring never holds more records than samples (%u)", m.cap);
        /* Then a long idle stretch: one record absorbs it and pushes the distinct ones out. */
        for (uint64_t i = 0; i < SBX_METRICS_SAMPLES - 1; i++) {
                s = at((SBX_METRICS_SAMPLES + 80 + i) * 5000, SBX_METRICS_SAMPLES + 79);
                metrics_push(&m, &s);
        }
        k = metrics_query(&m, 0, UINT64_MAX, out, SBX_METRICS_SAMPLES + 8);
        CHECK(k == SBX_METRICS_SAMPLES && m.n == 1, "an idle hour is one record of %zu samples (%u records)", k, m.n);
        bool steady = true;
        for (size_t i = 1; i < k; i++)
                steady = steady && out[i].time_ms - out[i - 1].time_ms == 5000;
        CHECK(steady, "its samples are still 5 s apart after the oldest were dropped from it");
        metrics_done(&m);
        CHECK(m.rec == NULL && m.n == 0, "done frees the ring");

        /* The wall clock set back a minute while nothing changed: a record of its own, and no
         * sample comes back with a time from an unsigned subtraction gone below zero. */
        for (uint64_t i = 0; i < 3; i++) {
                s = at(2000000 + i * 5000, 9);
                metrics_push(&m, &s);
        }
        s = at(2000000 + 10000 - 60000, 9);
        CHECK(!metrics_extends(&m, &s), "a sample from before the last one does not extend its record");
        metrics_push(&m, &s);
        s = at(2000000 + 15000 - 60000, 9);
        metrics_push(&m, &s);
        k = metrics_query(&m, 0, UINT64_MAX, out, 20);
        bool sane = k == 5;
        for (size_t i = 0; sane && i < k; i++)
                sane = out[i].time_ms >= 1900000 && out[i].time_ms <= 2010000;
        CHECK(sane && m.n == 2, "after the step back: %zu samples in %u records, all at times that were", k, m.n);
        metrics_done(&m);
}

static void prom(void) {
        json_t *snap = json_pack(
                "{s:{s:I, s:i, s:i, s:i, s:i, s:i, s:{s:i, s:i, s:i, s:i}, s:{s:{s:i, s:i, s:i, s:i, s:i}, "
                "s:{s:i, s:i, s:i, s:i, s:i}}, s:{s:I}, s:{s:b, s:b, s:i, s:i, s:i, s:i}, s:{s:i}}, "
                "s:o, s:[{s:s, s:I, s:I, s:o}, {s:s, s:I, s:I, s:o}]}",
                "health", "uptimeMs", (json_int_t)2500, "sandboxes", 2, "sessions", 2, "processes", 1, "running", 1,
                "queued", 0, "totals", "completed", 5, "failed", 1, "timedOut", 2, "cancelled", 0, "lanes", "interactive",
                "slots", 8, "active", 1, "queued", 0, "refused", 3, "completed", 5, "system", "slots", 2, "active", 0,
                "queued", 0, "refused", 0, "completed", 0, "memory", "daemonRssBytes", (json_int_t)12345678, "audit",
                "enabled", 1, "writerAlive", 1, "events", 9, "written", 8, "dropped", 1, "failed", 0, "limits",
                "maxSandboxes", 100, "pool", json_pack("{s:i, s:i, s:i}", "target", 2, "held", 2, "ready", 1), "sandboxes", "sandboxId", "0123456789abcdef0123456789abcdef", "memoryLimitBytes",
                (json_int_t)536870912, "fsLimitBytes", (json_int_t)268435456, "sample",
                json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "cpuUsec", (json_int_t)2500000, "memoryBytes",
                          (json_int_t)8192, "pids", (json_int_t)3, "fsBytes", (json_int_t)4096, "fsFiles", (json_int_t)5,
                          "netBytes", (json_int_t)77, "runs", (json_int_t)4),
                "sandboxId", "fedcba9876543210fedcba9876543210", "memoryLimitBytes", (json_int_t)1, "fsLimitBytes",
                (json_int_t)1, "sample", json_null());
        size_t len;
        char *t = console_metrics_text(snap, true, &len);
        CHECK(t && strlen(t) == len, "the text is made");
        CHECK(t && strstr(t, "# TYPE sbx_runs_total counter\nsbx_runs_total{outcome=\"completed\"} 5\n"),
              "counters by label under one TYPE line");
        CHECK(t && strstr(t, "sbx_uptime_seconds 2.5\n"), "ms become seconds");
        CHECK(t && strstr(t, "sbx_pool_ready 1\n"), "the pool's ready sandboxes");
        CHECK(t && strstr(t, "sbx_sandbox_cpu_seconds_total{sandbox=\"0123456789abcdef0123456789abcdef\"} 2.5\n"),
              "a sandbox's CPU in seconds, labelled with its id");
        CHECK(t && strstr(t, "sbx_lane_refused_total{lane=\"interactive\"} 3\n"), "lanes are labelled");
        CHECK(t && !strstr(t, "sbx_sandbox_memory_bytes{sandbox=\"fedcba9876543210fedcba9876543210\"}") &&
                      strstr(t, "sbx_sandbox_memory_limit_bytes{sandbox=\"fedcba9876543210fedcba9876543210\"} 1\n"),
              "a sandbox with no sample yet has its limits and no usage");
        /* Each family once, its HELP then its TYPE, before its samples. */
        unsigned helps = 0, types = 0;
        bool paired = true;
        for (char *p = t; p && (p = strstr(p, "# HELP ")); p++) {
                helps++;
                char name[96];
                if (sscanf(p, "# HELP %95s", name) != 1)
                        paired = false;
                char want[128];
                snprintf(want, sizeof want, "\n# TYPE %s ", name);
                char *type = strstr(p, want);
                paired = paired && type && type == strchr(p, '\n');
        }
        for (char *p = t; p && (p = strstr(p, "# TYPE ")); p++)
                types++;
        CHECK(paired && helps == types && helps >= 25, "every family has its HELP and TYPE lines (%u, %u)", helps, types);
        free(t);
        t = console_metrics_text(snap, false, &len);
        CHECK(t && !strstr(t, "sbx_sandbox_") && strstr(t, "sbx_sandboxes 2\n"),
              "without per-sandbox series: the daemon's figures only");
        free(t);
        json_decref(snap);
}

int main(void) {
        ring();
        prom();
        return tap_done();
}
