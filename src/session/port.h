/* SPDX-License-Identifier: MIT */
/* What port.c (exposed ports, sbx/port.h) shares with its unit test, the reader of the kernel's
 * TCP tables, and with the egress proxy (egress.c), the pump of a forwarded connection. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* One direction of a forwarded connection: bytes are spliced from one socket into the pipe
 * and from the pipe into the other socket, never through the daemon's memory. The pipe is the
 * only buffer; `held` is what it holds, at most `cap`. */
typedef struct PortFlow {
        int pipe[2];
        size_t held, cap;
        bool eof;  /* the source said EOF: the destination is shut for writing once held is 0 */
        bool done; /* ... and it was */
} PortFlow;

/* Moves the bytes of one direction until the source has none, the destination takes none, or
 * budget bytes went; a source's EOF is passed on as a half-close once the pipe is empty.
 * Returns the bytes that went, or -errno when a socket failed. */
ssize_t port_flow_pump(PortFlow *fl, int from, int to, size_t budget);

/* Reads a /proc/<pid>/net/tcp or tcp6 table from fd to its end and says whether a socket of it
 * listens (state 0A) on port. Returns 1, 0, or -errno when reading fails. fd stays the
 * caller's. */
int port_scan_tcp(int fd, uint16_t port);
