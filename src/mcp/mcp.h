/* SPDX-License-Identifier: MIT */
/* `sbx mcp`: a Model Context Protocol server on stdio over the sbx daemon (its own
 * `sbx serve --stdio` child, or a running `sbx serve --socket`), for the CLI's entry. */
#pragma once
#include <stdbool.h>

typedef struct McpOptions {
        const char *socket_path; /* NULL: start a daemon of our own */
        const char *sandbox;     /* with socket_path: a persistent sandbox to work in, kept at exit */
        bool verbose;            /* the child daemon logs at debug level too */
} McpOptions;

/* Serves the client on stdin and stdout until it leaves or SIGTERM, SIGINT or SIGHUP comes,
 * then ends the daemon's sandbox (the child daemon with it). Returns 0, or -errno: the daemon
 * could not be reached or started (said on stderr), or it went away. */
int mcp_serve(const McpOptions *o);
