/* SPDX-License-Identifier: MIT */
/* Client connections, the transport: framed request lines in, a bounded answer queue out.
 *
 * A connection knows nothing of what its lines mean. Its owner (the server) hands it a set of
 * callbacks, ConnOps, and answers through conn_reply and friends. A connection reads no more
 * requests while more than SBX_OUTPUT_QUEUE_HIGH_BYTES bytes of answers wait for its client, and reads
 * again below SBX_OUTPUT_QUEUE_LOW_BYTES; the owner hears of both through ConnOps.paused. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "base/limits.h"
#include "base/loop.h"
#include "rpc/jsonrpc.h"

typedef struct Conn Conn;

typedef struct ConnOps {
        /* One request line, without its newline. too_large: a line over the connection's
         * limit, skipped without being buffered (line is then not the request). */
        void (*line)(void *data, Conn *c, const char *line, size_t len, bool too_large);
        /* The client stopped (paused) or resumed reading its answers. */
        void (*paused)(void *data, Conn *c, bool paused);
        /* The client closed its end; nothing more will be read from it. */
        void (*eof)(void *data, Conn *c);
        /* c is about to be freed: drop every reference to it. */
        void (*closed)(void *data, Conn *c);
} ConnOps;

/* The open connections of one owner. Only conn.c touches head. */
typedef struct ConnList {
        Loop *loop;
        const ConnOps *ops;
        void *data; /* passed to every ops callback */
        Conn *head;
} ConnList;

void conn_list_init(ConnList *l, Loop *loop, const ConnOps *ops, void *data);
/* Opens a connection on rfd/wfd (made non-blocking; closed by conn_close unless is_stdio).
 * uid is the peer's. Returns 0 or -errno. */
int conn_new(ConnList *l, int rfd, int wfd, bool is_stdio, uid_t uid, Conn **ret);
/* Calls ops->closed, then frees c. */
void conn_close(Conn *c);
void conn_close_all(ConnList *l);
/* Writes what every connection still has queued, waiting until deadline_ms (monotonic) at
 * most: for shutdown, after the loop has stopped. */
void conn_flush_all(ConnList *l, uint64_t deadline_ms);

uid_t conn_uid(const Conn *c);
/* The operator console's connections (server_connect_operator) may use every sandbox, as an
 * operator who reads the daemon's own state may. */
bool conn_operator(const Conn *c);
void conn_set_operator(Conn *c);
/* The lane the operator fixed for this connection's requests (a LaneId), or -1: each request
 * says. */
int conn_lane(const Conn *c);
/* The head of the connection's list of requests answered later (pending.c's; NULL when none),
 * so its close, pause and cancel walk only its own. */
void **conn_pendings(Conn *c);
void conn_set_lane(Conn *c, int lane);
/* The client's pid as the kernel said at accept (SO_PEERCRED), or for stdio as the server
 * found it at start; -1 when unknown. For the audit log. */
pid_t conn_pid(const Conn *c);
void conn_set_pid(Conn *c, pid_t pid);
/* Whether c's answers wait past SBX_OUTPUT_QUEUE_HIGH_BYTES (ops->paused said so). */
bool conn_paused(const Conn *c);
bool conn_is_stdio(const Conn *c);
/* The longest request line accepted; longer ones reach ops->line as too_large. */
size_t conn_line_max(const Conn *c);
void conn_set_line_max(Conn *c, size_t max);

/* A memfd the client sent (SCM_RIGHTS, on a Unix socket) with the request being handled, the
 * caller's to close; -ENOENT when it sent none, -EINVAL when what it sent was not a memfd (a
 * file of shmem; anything else is closed as it arrives). Only from ops->line: the fds a request
 * did not take are closed once it returns. */
int conn_take_fd(Conn *c);

/* Queues a line (takes ownership of the malloc'd buffer; NULL is ignored). */
void conn_send(Conn *c, char *line, size_t len);
/* Handles no more of c's requests until as many releases (hold false) as holds: for a
 * request whose answer the next ones depend on (create, before files.* can work). */
void conn_hold_input(Conn *c, bool hold);
/* The answer to request id (steals result; NULL answers an encoding error). */
void conn_reply(Conn *c, json_t *id, json_t *result);
void conn_reply_error(Conn *c, json_t *id, const RpcError *e);
/* A notification (steals params). */
void conn_notify(Conn *c, const char *method, json_t *params);
