/* SPDX-License-Identifier: MIT */
/* From a request line to its handler: parsing, the method table, parameter checks, routing
 * to a sandbox. method_check and dispatch_print_protocol are declared in server.h. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include "server/conn.h"
#include "server/core.h"

/* Handles one line of connection c: answers it now, or registers it as pending. */
void dispatch_line(Core *core, Conn *c, const char *line, size_t len, bool too_large);
/* Starts a request that waited in a lane, holding the slot lent to it; answers it when the
 * handler does at once. Frees w. The Lanes' start callback (data: the Core). */
void dispatch_start_waiting(void *data, LaneId lane, LaneWait *w);
