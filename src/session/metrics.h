/* SPDX-License-Identifier: MIT */
/* A sandbox's metrics over time (sbx_sandbox_metrics): samples of what it uses, taken by the
 * context every SBX_METRICS_INTERVAL_MS, kept in a ring of records in which equal samples in a
 * row are one. Owned by the sandbox's core (core.h); knows nothing of who asks. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "sbx/sbx.h"

typedef struct MetricsRecord {
        SbxMetricsSample v; /* v.time_ms: its first sample's time */
        uint64_t last_ms;   /* its last sample's time */
        uint32_t n;         /* samples it stands for, all equal to v */
} MetricsRecord;

typedef struct Metrics {
        MetricsRecord *rec; /* ring of cap records, n in use from head; NULL before the first */
        uint32_t cap, head, n;
        uint32_t samples;   /* what the records stand for in all, at most SBX_METRICS_SAMPLES */
} Metrics;

struct SandboxCore;

/* What the sandbox uses now. cheap: only its CPU time, its filesystem and its counters
 * (what tells whether anything changed since the last sample). Returns 0 or -EAGAIN before
 * it is ready. */
int metrics_read(struct SandboxCore *core, bool cheap, SbxMetricsSample *ret);
/* Whether s (its cheap fields) is the last record's sample again. */
bool metrics_extends(const Metrics *m, const SbxMetricsSample *s);
/* Adds s (taken at s->time_ms): one more of the last record when it extends it (memory and
 * tasks as that record has them), else a record of its own. */
void metrics_push(Metrics *m, const SbxMetricsSample *s);
/* Takes a sample at wall time now_ms: one more for the last record when nothing changed (a
 * cheap read), else a full read as a record of its own. */
void metrics_sample(struct SandboxCore *core, uint64_t now_ms);
/* The samples in [start_ms, end_ms], oldest first, up to max into out; returns the count. */
size_t metrics_query(const Metrics *m, uint64_t start_ms, uint64_t end_ms, SbxMetricsSample *out, size_t max);
/* The last sample taken: 0, or -ENODATA before the first. */
int metrics_last(const Metrics *m, SbxMetricsSample *ret);
void metrics_done(Metrics *m);
