/* SPDX-License-Identifier: MIT */
/* The CLI's side of a running `sbx serve --socket`: one-shot calls, and a long-lived
 * connection on which requests, answers and notifications interleave. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Exit statuses of the subcommands that talk to a daemon, when the status is not a command's
 * own (sbx exec, sbx logs -f and sbx shell pass that through). */
enum {
        CLIENT_EXIT_FAILURE = 1,     /* the daemon refused or failed; its message says why */
        CLIENT_EXIT_USAGE = 2,       /* bad arguments */
        CLIENT_EXIT_UNREACHABLE = 3, /* no daemon at the socket, or it went away */
        CLIENT_EXIT_NO_SANDBOX = 4,  /* the daemon has no such sandbox (for us) */
        CLIENT_EXIT_NO_PROCESS = 5,  /* the sandbox has no such process */
};

/* Why a request failed: code is the daemon's JSON-RPC error code, or 0 when the connection
 * itself failed (errnum then holds the positive errno). */
typedef struct ClientError {
        int code;
        int errnum;
        char message[1024];
} ClientError;

/* Sends method(params) (params is taken over) on a connection of its own and waits for the
 * answer. Returns 0 with *ret_result set (the caller's to json_decref), or -1 with err saying
 * why: the connection, or the server's error message. */
int client_call(const char *socket_path, const char *method, json_t *params, json_t **ret_result, char *err,
                size_t errlen);

/* The socket to use: the --socket option if given, else $SBX_SOCKET; NULL (said on stderr
 * as `sbx CMD: ...`) when neither is set. */
const char *client_socket_path(const char *cmd, const char *opt);

/* Says err on stderr as `sbx CMD: ...` and returns the exit status it maps to
 * (CLIENT_EXIT_*): an unreachable daemon names the socket. */
int client_fail(const char *cmd, const char *socket_path, const ClientError *err);

/* One request on a connection of its own, as a subcommand makes it: 0 with *ret_result
 * (the caller's), or the exit status (CLIENT_EXIT_*) once client_fail has said why. params
 * is taken over. */
int client_call_cli(const char *cmd, const char *socket_path, const char *method, json_t *params, json_t **ret_result);

/* A connection. Messages are read into a buffer (client_read) and taken from it one line
 * at a time (client_next), so a caller can poll client_fd() together with its own fds. */
typedef struct Client Client;

/* Connects to the daemon at path. Returns 0, or -errno with err set (code 0). */
int client_connect(const char *path, Client **ret, ClientError *err);
/* Closes the connection; accepts NULL, returns NULL. */
Client *client_free(Client *c);
int client_fd(const Client *c);

/* Sends a request (params taken over; NULL: none) and stores its id in *ret_id.
 * Returns 0 or -errno. */
int client_send(Client *c, const char *method, json_t *params, int64_t *ret_id);
/* One read() of whatever the socket holds. Returns 0, -ECONNRESET when the daemon closed
 * the connection, -EFBIG for a line over SBX_MAX_CLIENT_LINE_BYTES, or -errno. */
int client_read(Client *c);
/* Takes the next whole message read so far. Returns 1 with *ret (the caller's), 0 when no
 * whole line is buffered, -EBADMSG for a line that is not a JSON object. */
int client_next(Client *c, json_t **ret);

/* What a message is, for a loop that reads them. An answer has an integer id (ours); a
 * notification a method (borrowed from msg; its params likewise, NULL when absent). */
bool client_is_answer(json_t *msg, int64_t *ret_id);
bool client_is_notification(json_t *msg, const char **ret_method, json_t **ret_params);
/* An answer's result: 0 with *ret_result (a new reference), or -1 with err set. */
int client_answer_result(json_t *msg, json_t **ret_result, ClientError *err);

/* Called for each notification that arrives while client_request() waits. */
typedef void (*ClientNoteFn)(void *userdata, const char *method, json_t *params);

/* Sends a request and waits for its answer, handing notifications that arrive meanwhile to
 * on_note (NULL: dropped) and dropping answers to other requests. Returns 0 with
 * *ret_result set (the caller's; may be NULL when the caller does not want it), or -1 with
 * err set. */
int client_request(Client *c, const char *method, json_t *params, ClientNoteFn on_note, void *userdata,
                   json_t **ret_result, ClientError *err);
