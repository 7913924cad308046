/* SPDX-License-Identifier: MIT */
/* The benchmarks' JSON-RPC client of their own server (bench_srv, common.h): newline-delimited
 * JSON-RPC 2.0 over its Unix socket. A request is written as one line; answers and
 * notifications are read as lines into a buffer of at most CLIENT_LINE_MAX bytes and parsed
 * with jansson, an answer found by its id. The raw lines can be taken too, for a reader that
 * checks large notifications in place (sbx-bench-rpc's stream benchmark, where parsing every
 * piece would make the client the bottleneck it measures). */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The longest line read: a files.read answer carries up to 4 MiB as base64 (5.6 MB). */
#define CLIENT_LINE_MAX ((size_t)16 << 20)

typedef struct Client {
        int fd;
        char *buf;
        size_t start, len, cap; /* unread data is buf[start, len) */
        long next_id;
        /* When the line last handed out was complete (bench_now_ns), before it was parsed: an
         * answer's time is that of its line read, whatever parsing a large one costs. */
        uint64_t t_line;
} Client;

/* ------------------------------------------------------------------ the connection */

/* Connects to bench_srv: non-blocking, or blocking with a receive timeout of timeout_s (see
 * bench_server_connect). 0 or -errno. */
int client_open(Client *c, bool nonblock, unsigned timeout_s);
/* client_open, or bench_die. */
void client_open_or_die(Client *c, bool nonblock, unsigned timeout_s);
void client_close(Client *c);
/* Room for size bytes of unread data, so that a stream of large lines is read in big gulps.
 * 0 or -ENOMEM. */
int client_reserve(Client *c, size_t size);

/* ------------------------------------------------------------------ requests */

/* Writes all of d; on a non-blocking socket, waits for room with poll. 0 or -errno. */
int client_write(Client *c, const char *d, size_t n);
/* client_write, or bench_die. */
void client_write_or_die(Client *c, const char *d, size_t n);
/* Appends the line {"jsonrpc":"2.0","id":N,"method":M,"params":P}\n to out (size bytes, *len of
 * them used); params is JSON text, or NULL for none. Returns N, or -ENOBUFS when it does not
 * fit. A batch of them written at once is a pipelined burst. */
long client_format(Client *c, char *out, size_t size, size_t *len, const char *method, const char *params);
/* Sends one request; returns its id, or -errno. */
long client_send(Client *c, const char *method, const char *params);
/* The same with params as a jansson value (its reference taken; NULL for none). */
long client_send_json(Client *c, const char *method, json_t *params);
/* client_send, or bench_die. */
long client_send_or_die(Client *c, const char *method, const char *params);

/* ------------------------------------------------------------------ lines and messages */

/* One read(): >0 bytes read, 0 at EOF, -errno (-EAGAIN on an empty non-blocking socket,
 * -EMSGSIZE when a line does not fit CLIENT_LINE_MAX). */
ssize_t client_fill(Client *c);
/* The next complete line, NUL-terminated without its '\n' (its length in *len when len is not
 * NULL), or NULL. Valid until the next client_fill. */
char *client_take_line(Client *c, size_t *len);
/* Blocking: the next line, or NULL at EOF or error. */
char *client_read_line(Client *c);
/* A line as a message, or NULL when it is not JSON. */
json_t *client_parse(const char *line, size_t len);
/* Blocking: the next message, or NULL at EOF or error; bench_die()s on a line that is not JSON. */
json_t *client_read(Client *c);
/* Blocking: reads until the answer to id (what comes before it is dropped); NULL at EOF or error. */
json_t *client_wait(Client *c, long id);
/* Sends and waits for the answer; bench_die()s when the write fails or the connection closes. */
json_t *client_call(Client *c, const char *method, const char *params);
/* The same with params as a jansson value (its reference taken; NULL for none). */
json_t *client_call_json(Client *c, const char *method, json_t *params);

/* ------------------------------------------------------------------ reading a message */

/* The id of an answer, or -1 (a notification, or not an integer id). */
long answer_id(const json_t *msg);
/* An error answer, or no message at all (NULL). */
bool answer_is_error(const json_t *msg);
/* result.key of an answer (NULL when it has none). */
json_t *answer_get(const json_t *msg, const char *key);
/* result.key as an integer: true and *ret when it is one. */
bool answer_int(const json_t *msg, const char *key, long long *ret);
/* result.key as a string, or NULL. */
const char *answer_str(const json_t *msg, const char *key);
/* error.message, or "". */
const char *answer_error_message(const json_t *msg);
/* Whether msg is the notification `method`; then params.key of it through notification_get. */
bool notification_is(const json_t *msg, const char *method);
json_t *notification_get(const json_t *msg, const char *key);
/* A message as compact JSON for a note, cut at 240 bytes; "(connection closed)" for NULL. */
void answer_describe(char *dst, size_t size, const json_t *msg);
