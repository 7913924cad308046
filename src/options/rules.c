/* SPDX-License-Identifier: MIT */
/* The accepted range of every limit, said in the user's units. */
#include <stdio.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/util.h"
#include "sbx/sbx.h"

typedef enum Unit { U_BYTES, U_COUNT, U_MILLICPU, U_MS } Unit;

typedef struct Rule {
        uint64_t min, max; /* max 0: the host's online CPUs */
        Unit unit;
} Rule;

static const Rule rules[] = {
        [SBX_LIMIT_STDOUT] = { 1, SBX_MAX_OUTPUT_BYTES, U_BYTES },
        [SBX_LIMIT_STDERR] = { 1, SBX_MAX_OUTPUT_BYTES, U_BYTES },
        [SBX_LIMIT_COMMAND] = { 1, SBX_MAX_COMMAND_BYTES, U_BYTES },
        [SBX_LIMIT_FS] = { SBX_MIN_FS_BYTES, SBX_MAX_FS_BYTES, U_BYTES },
        [SBX_LIMIT_FILES] = { SBX_MIN_FILE_COUNT, UINT32_MAX, U_COUNT },
        [SBX_LIMIT_MEMORY] = { SBX_MIN_MEMORY_BYTES, SBX_MAX_MEMORY_BYTES, U_BYTES },
        [SBX_LIMIT_PIDS] = { SBX_MIN_PIDS, SBX_MAX_PIDS, U_COUNT },
        [SBX_LIMIT_CPU] = { SBX_MIN_CPU_MILLIS, 0, U_MILLICPU },
        [SBX_LIMIT_TIMEOUT] = { 1, SBX_MAX_TIMEOUT_MS, U_MS },
};

/* A value as the user would write it: sizes with the largest K/M/G/T suffix that divides
 * them (what --memory accepts), CPUs and seconds with their fraction. */
static void format_value(Unit u, uint64_t v, char *out, size_t size) {
        switch (u) {
        case U_BYTES: format_size(v, out, size); break;
        case U_MILLICPU: snprintf(out, size, "%.10g CPU%s", (double)v / 1000, v == 1000 ? "" : "s"); break;
        case U_MS: snprintf(out, size, "%.10g s", (double)v / 1000); break;
        case U_COUNT:
        default: snprintf(out, size, "%llu", (unsigned long long)v); break;
        }
}

int sbx_limit_check(SbxLimitId id, uint64_t value, const char *name, char *err, size_t errlen) {
        if ((unsigned)id >= ELEMENTSOF(rules))
                return -EINVAL;
        const Rule *r = &rules[id];
        uint64_t max = r->max;
        if (!max) {
                long n = sysconf(_SC_NPROCESSORS_ONLN);
                max = (uint64_t)(n > 0 ? n : 1) * 1000;
        }
        if (value >= r->min && value <= max)
                return 0;
        char bound[48], got[48];
        format_value(r->unit, value < r->min ? r->min : max, bound, sizeof bound);
        format_value(r->unit, value, got, sizeof got);
        snprintf(err, errlen, "%s must be at %s %s%s; got %s", name, value < r->min ? "least" : "most", bound,
                 r->unit == U_MILLICPU && value > max ? " (the host's online CPUs)" : "", got);
        return -EINVAL;
}
