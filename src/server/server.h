/* SPDX-License-Identifier: MIT */
/* `sbx serve`: JSON-RPC 2.0 over newline-delimited JSON, on stdio or a Unix socket, in the
 * same single epoll loop as libsbx.
 *
 * Ownership: the Server owns connections and the sandbox registry. A sandbox belongs to the
 * connection that created it and is destroyed when that connection closes, unless it was
 * created with persist (socket server only); then the server owns it until sandbox.destroy or
 * shutdown. A Pending (one `run` awaiting its result) is owned by its connection; when the
 * connection goes first, the pending's conn pointer is cleared and the run's done callback
 * frees it. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include "base/loop.h"
#include "base/queue.h"
#include "rpc/framer.h"
#include "rpc/jsonrpc.h"
#include "sbx/sbx.h"

typedef struct Server Server;
typedef struct Conn Conn;

/* Sandboxes per server, forks per server; beyond them WORKER_UNAVAILABLE / -32602. */
#define SERVER_MAX_SANDBOXES 64U
/* Outgoing bytes queued for one client before its streaming runs are paused and its input is
 * no longer read; reading resumes below the low mark. */
#define SERVER_OUT_HIGH (4U * 1024 * 1024)
#define SERVER_OUT_LOW (1U * 1024 * 1024)
/* Commands remembered per session for shell.history.list. */
#define SERVER_HISTORY_MAX 1000U
/* Longest time shutdown waits for clients to take their last answers. */
#define SERVER_FLUSH_MS 1000

typedef struct HistoryEntry {
        char *command;
        uint64_t timestamp_ms;
} HistoryEntry;

typedef struct History {
        struct History *next;
        char *session;
        HistoryEntry *entries;
        size_t n, start; /* ring of SERVER_HISTORY_MAX */
        uint64_t total;
} History;

typedef struct SrvSandbox {
        struct SrvSandbox *next, *prev;
        Server *srv;
        SbxSandbox *sb;
        Conn *owner;     /* NULL when persistent */
        uid_t uid;       /* who may use it */
        bool persist;
        char *label;
        uint64_t created_ms; /* wall clock */
        History *history;
        bool is_fork;    /* counts against SBX_MAX_FORKS */
} SrvSandbox;

typedef struct Pending {
        struct Pending *next, *prev;
        Conn *conn;
        Server *srv;
        json_t *id;
        char *key;      /* id serialised, for cancel */
        SbxRun *run;
        bool stream, replied, record;
        uint64_t seq;
        int kind;       /* PENDING_RUN, PENDING_ENV_SET, PENDING_ENV_GET, PENDING_OP */
        bool persist;   /* PENDING_OP of a fork: the new sandbox outlives its client */
        json_t *answer; /* PENDING_OP of a create: the result, sent once the sandbox is ready */
        uid_t uid;
} Pending;

enum { PENDING_RUN, PENDING_ENV_SET, PENDING_ENV_GET, PENDING_OP };

struct Conn {
        struct Conn *next, *prev;
        Server *srv;
        int rfd, wfd;
        Watch rw, ww;
        bool is_stdio, closing, paused, read_off;
        uid_t uid;
        Framer framer;
        ByteQueue out;
        ByteQueue in;   /* read but not yet framed: held while the client is paused */
        SrvSandbox *root;
        Pending *pending;
};

typedef struct Totals {
        uint64_t completed, failed, timed_out, cancelled, exec_ms_sum;
} Totals;

struct Server {
        SbxContext *ctx;
        Loop *loop;
        int listen_fd;
        Watch lw;
        char *socket_path;
        int sig_fd;
        Watch sw;
        Conn *conns;
        SrvSandbox *sandboxes;
        unsigned n_sandboxes;
        unsigned n_forks; /* forks alive or being made */
        bool shutting_down, stop;
        uint64_t start_ms;
        Totals totals;
};

/* server.c */
int server_new(Server **ret);
Server *server_free(Server *s);
int server_listen(Server *s, const char *path);
int server_add_stdio(Server *s);
/* Sandboxes kept ready for `create` and `sandbox.create` with default options. */
void server_set_pool(Server *s, unsigned n);
/* Runs until shutdown; returns the process exit code. */
int server_run(Server *s);
void server_shutdown(Server *s);

/* conn.c */
int conn_new(Server *s, int rfd, int wfd, bool is_stdio, uid_t uid, Conn **ret);
void conn_close(Conn *c);
/* Queues a line (takes ownership of the malloc'd buffer). */
void conn_send(Conn *c, char *line, size_t len);
void conn_reply(Conn *c, json_t *id, json_t *result);
void conn_reply_error(Conn *c, json_t *id, const RpcError *e);
void conn_notify(Conn *c, const char *method, json_t *params);

/* methods.c */
void dispatch_line(Conn *c, const char *line, size_t len, bool too_large);
/* Looks the method up and checks its params against the table (no side effects).
 * Returns 0 or -1 with e set. */
int method_check(const char *name, json_t *params, RpcError *e);
void srv_sandbox_destroy(SrvSandbox *sb);
void pending_detach_all(Conn *c);
void print_protocol(FILE *f);
