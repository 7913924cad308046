/* SPDX-License-Identifier: MIT */
/* onExpiry "export" (expiry.c): what an expired sandbox's export becomes. */
#pragma once
#include <stddef.h>
#include "server/core.h"

/* `--expiry-export-dir DIR`: made (0700) if missing, must be writable; from then on sandboxes
 * made with onExpiry "export" are exported there when they expire, then destroyed. Returns 0
 * or -errno with err set. */
int expiry_set_dir(Core *core, const char *dir, char *err, size_t errlen);
