/* SPDX-License-Identifier: MIT */
/* What requests act on: the library context, the sandbox registry, the requests answered
 * later and the run totals. The Server owns the one Core and outlives every request. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "sbx/sbx.h"
#include "server/lane.h"
#include "server/audit.h"
#include "server/pending.h"
#include "server/registry.h"

typedef struct Totals {
        uint64_t completed, failed, timed_out, cancelled, exec_ms_sum;
} Totals;

typedef enum ServerMode { MODE_NAMESPACES, MODE_DISABLED, MODE_PROCESS } ServerMode;

struct Core {
        SbxContext *ctx;
        Registry registry;
        PendingSet pending;
        Lanes lanes;
        ServerMode mode;
        /* `sbx serve --config`: what every create gets (handler_create_config); never NULL. */
        json_t *create_defaults, *create_enforced, *create_secrets;
        /* `--expiry-export-dir`: where onExpiry "export" writes archives (expiry.c); NULL: none. */
        char *expiry_dir;
        Totals totals;      /* of `run`s, for health */
        uint64_t start_ms;  /* monotonic, for health's uptime */
        uint64_t watches;   /* files.watch ids given so far */
        Audit *audit;       /* the audit log (sbx serve --audit), NULL when off; the server's */
        bool shutting_down; /* no new work but ping and health; forks that end are dropped */
        /* Starts the orderly shutdown (the `kill` method); set by the server. */
        void (*shutdown)(void *data);
        void *shutdown_data;
};
