/* SPDX-License-Identifier: MIT */
/* The byte pump of a relayed connection, shared by exposed ports (port.c) and the egress
 * proxy (egress.c), owned by neither: two sockets, and for each direction a pipe that bytes are
 * spliced into from one socket and out of into the other, never through the daemon's memory.
 * The caller owns the sockets and the PumpFlow pair (pump_close() closes the pipes). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* One direction. The pipe is the only buffer; `held` is what it holds, at most `cap`. */
typedef struct PumpFlow {
        int pipe[2];
        size_t held, cap;
        bool eof;  /* the source said EOF: the destination is shut for writing once held is 0 */
        bool done; /* ... and it was */
} PumpFlow;

/* Both pipes -1: nothing to close yet. */
void pump_init(PumpFlow flow[2]);
/* Makes both directions' pipes, grown to SBX_PORT_PIPE_BYTES when `grow` (a rootless daemon
 * may not). Returns 0 or -errno. */
int pump_open(PumpFlow flow[2], bool grow);
void pump_close(PumpFlow flow[2]);
/* Moves the bytes of one direction until the source has none, the destination takes none, or
 * budget bytes went; a source's EOF is passed on as a half-close once the pipe is empty.
 * Returns the bytes that went, or -errno when a socket failed. */
ssize_t pump_flow(PumpFlow *fl, int from, int to, size_t budget);
/* What fd[i] must be watched for: readable while its flow's pipe is empty (a full one waits
 * for the other side to take it), writable while the other flow holds bytes for it. Watching
 * nothing, it should leave the epoll set: a socket that hung up or failed is reported to epoll
 * whatever it asks for, and would wake the loop again and again while its bytes wait. */
uint32_t pump_wants(const PumpFlow flow[2], int i);
/* fd[i] woke with `events`: readable moves its own flow, writable the flow into it, a hang-up
 * or an error both (whose system calls then say what happened), SBX_PORT_TURN_BYTES each at
 * most. flow[0] goes from fd[0] to fd[1], flow[1] back. Returns the bytes delivered (both
 * directions), or -errno. */
ssize_t pump_event(PumpFlow flow[2], const int fd[2], int i, uint32_t events);
/* Both directions ended. */
bool pump_done(const PumpFlow flow[2]);
/* Closes a socket with a reset (SO_LINGER 0), so that its peer does not take a connection cut
 * short, refused or failed for a complete one. */
void pump_reset_close(int fd);
