/* SPDX-License-Identifier: MIT */
/* A sandbox's metrics: its cgroup's CPU time, memory and tasks, its tmpfs's use, its
 * counters; sampled by the context's timer, kept as runs of equal samples. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include "base/limits.h"
#include "base/util.h"
#include "cgroup/cgroup.h"
#include "session/core.h"
#include "session/metrics.h"

/* Its writable tmpfs's use. Process mode has none of its own (its directory is the host's). */
static void read_fs(const SandboxCore *core, SbxMetricsSample *s) {
        const Box *b = &core->box;
        struct statfs st;
        if (core->parked) {
                s->fs_bytes = core->park_fs_bytes;
                s->fs_files = core->park_fs_files;
                return;
        }
        if (b->process || b->root_fd < 0)
                return;
        _cleanup_close_ int fd = openat(b->root_fd, "tmp", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || fstatfs(fd, &st) < 0)
                return;
        s->fs_bytes = (uint64_t)(st.f_blocks - st.f_bfree) * (uint64_t)st.f_bsize;
        s->fs_files = st.f_files >= st.f_ffree ? (uint64_t)(st.f_files - st.f_ffree) : 0;
}

int metrics_read(SandboxCore *core, bool cheap, SbxMetricsSample *ret) {
        *ret = (SbxMetricsSample){ .time_ms = wall_ms(), .net_bytes = core->net_bytes, .runs = core->runs_started };
        if (!core->box.ready)
                return -EAGAIN;
        (void)cgroup_sandbox_cpu_usec(&core->box.cg, &ret->cpu_usec);
        read_fs(core, ret);
        if (!cheap) {
                (void)cgroup_sandbox_memory(&core->box.cg, &ret->memory_bytes);
                (void)cgroup_sandbox_pids(&core->box.cg, &ret->pids);
        }
        return 0;
}

static MetricsRecord *record_at(const Metrics *m, uint32_t i) { return &m->rec[(m->head + i) % m->cap]; }

/* The oldest sample goes: its record's first one, or the record when it was its last. */
static void drop_oldest(Metrics *m) {
        MetricsRecord *r = record_at(m, 0);
        if (r->n > 1) {
                r->v.time_ms += (r->last_ms - r->v.time_ms) / (r->n - 1);
                r->n--;
        } else {
                m->head = (m->head + 1) % m->cap;
                m->n--;
        }
        m->samples--;
}

/* Room for one more record: the ring grows (doubling, up to a record per sample) or, full at
 * its largest, loses its oldest record. Returns 0 or -ENOMEM (the sample is then lost). */
static int make_room(Metrics *m) {
        if (m->n < m->cap)
                return 0;
        if (m->cap < SBX_METRICS_SAMPLES) {
                uint32_t cap = m->cap ? MIN(m->cap * 2, SBX_METRICS_SAMPLES) : SBX_METRICS_MIN_RECORDS;
                MetricsRecord *rec = calloc(cap, sizeof *rec);
                if (!rec)
                        return -ENOMEM;
                for (uint32_t i = 0; i < m->n; i++)
                        rec[i] = *record_at(m, i);
                free(m->rec);
                m->rec = rec;
                m->cap = cap;
                m->head = 0;
                return 0;
        }
        while (m->n == m->cap)
                drop_oldest(m);
        return 0;
}

static bool same_cheap(const SbxMetricsSample *a, const SbxMetricsSample *b) {
        return a->cpu_usec == b->cpu_usec && a->fs_bytes == b->fs_bytes && a->fs_files == b->fs_files &&
               a->net_bytes == b->net_bytes && a->runs == b->runs;
}

bool metrics_extends(const Metrics *m, const SbxMetricsSample *s) {
        if (!m->n)
                return false;
        const MetricsRecord *last = record_at(m, m->n - 1);
        /* A wall clock set back starts a record: a record's times only go forward. */
        return s->time_ms >= last->last_ms && same_cheap(&last->v, s);
}

void metrics_push(Metrics *m, const SbxMetricsSample *s) {
        if (metrics_extends(m, s)) {
                MetricsRecord *last = record_at(m, m->n - 1);
                last->last_ms = s->time_ms;
                last->n++;
        } else {
                if (make_room(m) < 0)
                        return;
                *record_at(m, m->n) = (MetricsRecord){ .v = *s, .last_ms = s->time_ms, .n = 1 };
                m->n++;
        }
        m->samples++;
        while (m->samples > SBX_METRICS_SAMPLES)
                drop_oldest(m);
}

void metrics_sample(SandboxCore *core, uint64_t now_ms) {
        SbxMetricsSample s;
        if (metrics_read(core, true, &s) < 0)
                return;
        s.time_ms = now_ms;
        /* Nothing ran and nothing was written: its memory and tasks are what they were. */
        if (!metrics_extends(&core->metrics, &s)) {
                (void)cgroup_sandbox_memory(&core->box.cg, &s.memory_bytes);
                (void)cgroup_sandbox_pids(&core->box.cg, &s.pids);
        }
        metrics_push(&core->metrics, &s);
}

size_t metrics_query(const Metrics *m, uint64_t start_ms, uint64_t end_ms, SbxMetricsSample *out, size_t max) {
        size_t k = 0;
        for (uint32_t i = 0; i < m->n; i++) {
                const MetricsRecord *r = record_at(m, i);
                if (r->last_ms < start_ms || r->v.time_ms > end_ms)
                        continue;
                for (uint32_t j = 0; j < r->n; j++) {
                        uint64_t t = r->n > 1 ? r->v.time_ms + (r->last_ms - r->v.time_ms) * j / (r->n - 1) : r->v.time_ms;
                        if (t < start_ms || t > end_ms)
                                continue;
                        if (k < max) {
                                out[k] = r->v;
                                out[k].time_ms = t;
                        }
                        k++;
                }
        }
        return k;
}

int metrics_last(const Metrics *m, SbxMetricsSample *ret) {
        if (!m->n)
                return -ENODATA;
        const MetricsRecord *r = record_at(m, m->n - 1);
        *ret = r->v;
        ret->time_ms = r->last_ms;
        return 0;
}

void metrics_done(Metrics *m) {
        free(m->rec);
        *m = (Metrics){ 0 };
}
