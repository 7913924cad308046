/* SPDX-License-Identifier: MIT */
/* The daemon end of `sbx mcp` (daemon.c): the socket of a running `sbx serve --socket`, or
 * a `sbx serve --stdio` child of our own. Sets and clears an Mcp's d_fd, child and
 * child_pidfd, which it owns. */
#pragma once
#include <stdbool.h>
#include "mcp/call.h"

/* Starts `sbx serve --stdio` (this binary) on one end of a socketpair. Returns 0 or -errno. */
int mcp_daemon_spawn(Mcp *m, bool verbose);
/* Connects to the daemon's socket at path. Returns 0 or -errno. */
int mcp_daemon_connect(Mcp *m, const char *path);
/* Ends the connection, and waits for a child daemon to exit (killing it after
 * SBX_MCP_CHILD_EXIT_MS). */
void mcp_daemon_close(Mcp *m);
