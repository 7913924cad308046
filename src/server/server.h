/* SPDX-License-Identifier: MIT */
/* `sbx serve`: JSON-RPC 2.0 over newline-delimited JSON, on stdio or a Unix socket, in the
 * same single epoll loop as libsbx. This header is the server library's face to the CLI and
 * the fuzzer, and holds its limits; it includes no other header of src/server.
 *
 * The files of src/server, each calling only files below it:
 *   server.c    the Server: listening socket, stdio, signals, shutdown; wires the rest
 *   dispatch.c  request line -> method table row -> param checks -> sandbox -> handler
 *   m_*.c       the handlers, each file with its rows of the method table
 *   handler.c   what handler files share: Req, the Method row, common helpers
 *   pending.c   requests answered later      registry.c  sandboxes, who may use them
 *   conn.c      the transport                history.c   command history
 *   audit.c     the audit log, daemon side   audit_log.c its files: writer, chain, verify
 *
 * Ownership: the Server owns the connections and, through its Core (core.h), the sandbox
 * registry and the requests answered later. A sandbox belongs to the connection that made it
 * and is destroyed when that connection closes, unless made with persist (socket server
 * only); then the server owns it until sandbox.destroy or shutdown. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "rpc/jsonrpc.h"

typedef struct Server Server;

/* server.c */
int server_new(Server **ret);
Server *server_free(Server *s);
/* Listens on a Unix socket at path (mode 0600). Returns 0 or -errno (EADDRINUSE if a live
 * server holds it). */
int server_listen(Server *s, const char *path);
/* Serves clients on fd, a Unix stream socket already listening (socket activation: systemd
 * made it); path, if not NULL, must be its address. The socket file is left at shutdown.
 * Returns 0, -ENOTSOCK when fd is not a listening Unix stream socket, -EADDRNOTAVAIL when it
 * is not bound to path, or -errno. */
int server_listen_fd(Server *s, int fd, const char *path);
/* Listens on a second Unix socket whose connections are fixed to the system lane (the
 * operator's: health checks, clean-up). Returns 0 or -errno. */
int server_listen_system(Server *s, const char *path);
/* Serves one client on stdin/stdout; its end of input shuts the server down. */
int server_add_stdio(Server *s);
/* A client inside this process (a gateway such as the E2B door): a connection on one end of
 * a socketpair, as if uid had connected to the socket; *ret_fd is the other end (non-blocking,
 * the caller's to close, which ends the connection). Returns 0 or -errno. */
int server_connect(Server *s, uid_t uid, int *ret_fd);
/* The same as the operator console's: root's, and allowed every sandbox of the daemon (its
 * list, its processes, its actions) whoever made it. */
int server_connect_operator(Server *s, int *ret_fd);
/* The server's loop, for the rooms that live in it beside the server (borrowed). */
struct Loop *server_loop(Server *s);
/* Fixes the lane (0 interactive, 1 system; -1: each request says) of the connections of
 * --socket and stdio. Call before server_add_stdio. */
void server_set_lane(Server *s, int lane);
/* The lanes' defaults, derived from the machine (lane.c). */
void server_lane_defaults(unsigned *ret_interactive, unsigned *ret_system, unsigned *ret_queue);
/* A lane's slots and the requests it lets wait (0 interactive, 1 system). */
void server_set_slots(Server *s, int lane, unsigned slots, unsigned queue_max);
/* What every create and sandbox.create gets (`--config`'s [sandbox], [sandbox.enforced],
 * [secrets]); the server takes references. */
void server_set_create_config(Server *s, json_t *defaults, json_t *enforced, json_t *secrets);
/* `--expiry-export-dir`: where sandboxes made with onExpiry "export" leave their archive
 * when they expire. Returns 0 or -errno with err set. */
int server_set_expiry_dir(Server *s, const char *dir, char *err, size_t errlen);
/* How long an orderly shutdown waits for cancelled work before destroying everything. */
void server_set_shutdown_deadline(Server *s, uint64_t ms);
/* --mode: "namespaces" (the default); "process", sandboxes with no namespace (see
 * sbx_context_set_mode()); "disabled", every request but ping, health, sandbox.list and kill
 * refused with SANDBOX_DISABLED. Before any sandbox. Returns 0 or -EINVAL (unknown mode). */
int server_set_mode(Server *s, const char *mode);
/* Logs events to path (`--audit`; audit.h): starts the writer process and waits for it to
 * open the log. max_bytes and keep 0 take the defaults. Returns 0 or -errno with err set. */
int server_set_audit(Server *s, const char *path, uint64_t max_bytes, unsigned keep, bool fail_closed, char *err,
                     size_t errlen);
/* Sandboxes kept ready for `create` and `sandbox.create` with default options. */
void server_set_pool(Server *s, unsigned n);
/* The library context, for settings every sandbox takes (redaction, passed-through env). */
struct SbxContext *server_context(Server *s);
/* The allowlist proxies' options (sbx/egress.h): a hosts file (NULL: none) and the CIDRs they
 * may reach although private (NULL-terminated, may be NULL). Returns 0, or -errno with err
 * saying what is wrong. */
int server_set_egress(Server *s, const char *hosts_file, const char *const *allow_private, const char *ca_file,
                      char *err, size_t errlen);
/* The most sandboxes held at once: n, or for 0 a number derived from what the machine has
 * free (memory, pids, fds); the fd limit is raised to fit. Returns the cap in force. */
unsigned server_set_max_sandboxes(Server *s, unsigned n);
/* Sandboxes unused for ms are parked (session/internal.h; 0: never). Returns 0 or -errno
 * (errno set too). */
int server_set_park_after(Server *s, uint64_t ms);
/* Runs until shutdown; returns the process exit code. */
int server_run(Server *s);
void server_shutdown(Server *s);

/* dispatch.c */
typedef struct Method Method;
/* The method tables the dispatcher serves (a NULL-terminated list, in the order of
 * docs/PROTOCOL.md: methods/methods.h's server_method_tables), set once before any request
 * or check; kept, not copied. Until then every method is unknown. */
void dispatch_set_methods(const Method *const *tables);
/* Looks the method up and checks its params against the table (no side effects).
 * Returns 0 or -1 with e set. */
int method_check(const char *name, json_t *params, RpcError *e);
/* docs/PROTOCOL.md, from the method table. */
void dispatch_print_protocol(FILE *f);
