/* SPDX-License-Identifier: MIT */
/* The context's room (context.c): sandboxes made fresh or taken from the pool. */
#pragma once
#include <stddef.h>
#include "sbx/sbx.h"

/* A new sandbox with the same options as sb (limits, timeout, environment, network, root):
 * from the pool when they are the defaults. err says what failed. Returns 0 or -errno. */
int sandbox_new_like(SbxSandbox *sb, SbxSandbox **ret, char *err, size_t errlen);
