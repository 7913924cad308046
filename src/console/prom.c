/* SPDX-License-Identifier: MIT */
/* GET /metrics: server.metrics' answer as Prometheus' text exposition format (0.0.4), names
 * and units as Prometheus' conventions have them (base units, counters ending in _total). */
#include <stdio.h>
#include <stdlib.h>
#include "console/console.h"

static double num(json_t *o, const char *key) { return json_number_value(json_object_get(o, key)); }

static void head(FILE *f, const char *name, const char *type, const char *help) {
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void one(FILE *f, const char *name, const char *type, const char *help, double v) {
        head(f, name, type, help);
        fprintf(f, "%s %.16g\n", name, v);
}

static const char *const lanes[] = { "interactive", "system" };

/* A lane's figure, one series per lane. */
static void per_lane(FILE *f, json_t *health, const char *name, const char *type, const char *help, const char *key) {
        head(f, name, type, help);
        for (size_t i = 0; i < 2; i++)
                fprintf(f, "%s{lane=\"%s\"} %.16g\n", name, lanes[i],
                        num(json_object_get(json_object_get(health, "lanes"), lanes[i]), key));
}

/* Each sandbox's figure from its last sample (or its limits: `limits` true), scaled. */
static void per_sandbox(FILE *f, json_t *list, const char *name, const char *type, const char *help, const char *key,
                        bool limits, double scale) {
        size_t i;
        json_t *sb;
        head(f, name, type, help);
        json_array_foreach(list, i, sb) {
                json_t *from = limits ? sb : json_object_get(sb, "sample");
                if (!json_is_object(from))
                        continue;
                /* Ids are 32 hex digits: nothing in them needs escaping. */
                fprintf(f, "%s{sandbox=\"%s\"} %.16g\n", name, json_string_value(json_object_get(sb, "sandboxId")),
                        num(from, key) * scale);
        }
}

char *console_metrics_text(json_t *snapshot, bool with_sandboxes, size_t *ret_len) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (!f)
                return NULL;
        json_t *h = json_object_get(snapshot, "health"), *totals = json_object_get(h, "totals");
        json_t *audit = json_object_get(h, "audit"), *limits = json_object_get(h, "limits");
        one(f, "sbx_uptime_seconds", "gauge", "Time since the daemon started.", num(h, "uptimeMs") / 1000.0);
        one(f, "sbx_sandboxes", "gauge", "Sandboxes alive.", num(h, "sandboxes"));
        one(f, "sbx_sandboxes_max", "gauge", "The most sandboxes the daemon holds (--max-sandboxes, or derived).",
            num(limits, "maxSandboxes"));
        one(f, "sbx_sessions", "gauge", "Sessions of every sandbox.", num(h, "sessions"));
        one(f, "sbx_processes", "gauge", "Processes (process.start, and runs' leftovers) alive.", num(h, "processes"));
        one(f, "sbx_runs_running", "gauge", "Runs in progress.", num(h, "running"));
        one(f, "sbx_runs_queued", "gauge", "Runs waiting behind others of their session.", num(h, "queued"));
        head(f, "sbx_runs_total", "counter", "Runs ended, by outcome.");
        static const char *const outcomes[][2] = {
                { "completed", "completed" }, { "failed", "failed" }, { "timed_out", "timedOut" }, { "cancelled", "cancelled" }
        };
        for (size_t i = 0; i < 4; i++)
                fprintf(f, "sbx_runs_total{outcome=\"%s\"} %.16g\n", outcomes[i][0], num(totals, outcomes[i][1]));
        per_lane(f, h, "sbx_lane_slots", "gauge", "Requests a lane runs at once.", "slots");
        per_lane(f, h, "sbx_lane_active", "gauge", "Requests holding a lane's slot.", "active");
        per_lane(f, h, "sbx_lane_queued", "gauge", "Requests waiting for a lane's slot.", "queued");
        per_lane(f, h, "sbx_lane_refused_total", "counter", "Requests a lane refused (its queue full).", "refused");
        per_lane(f, h, "sbx_lane_completed_total", "counter", "Requests a lane completed.", "completed");
        one(f, "sbx_daemon_resident_memory_bytes", "gauge", "The daemon's resident memory.",
            num(json_object_get(h, "memory"), "daemonRssBytes"));
        one(f, "sbx_audit_enabled", "gauge", "1 when the daemon writes an audit log (--audit).",
            json_is_true(json_object_get(audit, "enabled")));
        one(f, "sbx_audit_writer_up", "gauge", "1 while the audit log's writer process lives.",
            json_is_true(json_object_get(audit, "writerAlive")));
        one(f, "sbx_audit_events_total", "counter", "Audit events made.", num(audit, "events"));
        one(f, "sbx_audit_written_total", "counter", "Audit lines written.", num(audit, "written"));
        one(f, "sbx_audit_dropped_total", "counter", "Audit events dropped (the queue full, the writer gone).",
            num(audit, "dropped"));
        one(f, "sbx_audit_failed_total", "counter", "Audit lines the writer could not write.", num(audit, "failed"));
        json_t *pool = json_object_get(snapshot, "pool");
        one(f, "sbx_pool_target", "gauge", "Default sandboxes the pool keeps made ahead.", num(pool, "target"));
        one(f, "sbx_pool_sandboxes", "gauge", "Sandboxes the pool holds now.", num(pool, "held"));
        one(f, "sbx_pool_ready", "gauge", "Of those, the ones ready to hand out.", num(pool, "ready"));
        json_t *list = json_object_get(snapshot, "sandboxes");
        if (with_sandboxes) {
                per_sandbox(f, list, "sbx_sandbox_cpu_seconds_total", "counter", "CPU time of a sandbox's processes.",
                            "cpuUsec", false, 1e-6);
                per_sandbox(f, list, "sbx_sandbox_memory_bytes", "gauge",
                            "A sandbox's memory cgroup (processes, page cache, its tmpfs).", "memoryBytes", false, 1);
                per_sandbox(f, list, "sbx_sandbox_memory_limit_bytes", "gauge", "A sandbox's memory limit.",
                            "memoryLimitBytes", true, 1);
                per_sandbox(f, list, "sbx_sandbox_tasks", "gauge", "A sandbox's tasks, its session shells included.",
                            "pids", false, 1);
                per_sandbox(f, list, "sbx_sandbox_fs_bytes", "gauge", "Bytes used of a sandbox's writable filesystem.",
                            "fsBytes", false, 1);
                per_sandbox(f, list, "sbx_sandbox_fs_limit_bytes", "gauge", "The size of a sandbox's writable filesystem.",
                            "fsLimitBytes", true, 1);
                per_sandbox(f, list, "sbx_sandbox_fs_files", "gauge", "Inodes used of a sandbox's writable filesystem.",
                            "fsFiles", false, 1);
                per_sandbox(f, list, "sbx_sandbox_network_bytes_total", "counter",
                            "Bytes its egress proxy and exposed ports relayed, both ways.", "netBytes", false, 1);
                per_sandbox(f, list, "sbx_sandbox_runs_total", "counter", "Runs and processes started in a sandbox.",
                            "runs", false, 1);
        }
        if (fclose(f) != 0) {
                free(text);
                return NULL;
        }
        *ret_len = len;
        return text;
}
