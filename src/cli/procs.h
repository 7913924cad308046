/* SPDX-License-Identifier: MIT */
/* What the CLI's process subcommands (ps, logs, kill, exec, shell) share: finding a process
 * of a sandbox, its exit status, and bytes out of the daemon's answers. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include "cli/client.h"

/* The process.list entry of sandbox's process proc: a processId ("p3") or a pid inside the
 * sandbox (the running one, else the newest, when pids were reused). Asking process.list
 * also proves the sandbox exists and the process is this sandbox's. Returns 0 with *ret
 * (the caller's), or -1 with err set: the daemon's error, or -32602 `Unknown processId: ...`
 * (which client_fail maps to CLIENT_EXIT_NO_PROCESS). */
int procs_find(Client *c, const char *sandbox, const char *proc, json_t **ret, ClientError *err);

/* The exit status of an ended process as E2B gives it ({status, exitCode, signal} of
 * process.exit, process.stream, process.kill and process.wait): exitCode, else 128 + the
 * signal's number. A leftover (what a command left running) has neither, not being the
 * daemon's child: then 0 when its status is "exited", else 1. */
int procs_exit_status(json_t *obj);
/* Whether obj says an exit code or a signal (a leftover's says neither). */
bool procs_exit_known(json_t *obj);

/* Writes the bytes of obj's member key to fd: a string, base64 when obj's member enc_key is
 * "base64". A missing member writes nothing. To a terminal (stdout or stderr), a terminal's
 * control characters are shown as text (\x1b...) unless procs_set_raw(true); elsewhere (a
 * pipe, a file) the bytes go as they are. Returns 0, or -errno (-EBADMSG: bad base64). */
int procs_write_bytes(int fd, json_t *obj, const char *key, const char *enc_key);
/* --raw: a sandbox's bytes go to the terminal as they are (its escape sequences act on it). */
void procs_set_raw(bool raw);

/* Prints s for one cell of a table: control characters (a command's newlines) as C escapes,
 * so each row stays one line. */
void procs_print_text(FILE *f, const char *s);
