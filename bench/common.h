/* SPDX-License-Identifier: MIT */
/* What the benchmark programs share: the clock, messages on stderr, sample statistics, the
 * Markdown table of latency rows, the list of notes and a server of their own.
 * Only the public API (sbx/sbx.h) is used. Names that would be too generic (and could meet a
 * symbol of the libraries linked in) carry the prefix bench_. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "sbx/sbx.h"

/* The program's name, in front of every message on stderr; each program defines it. */
extern const char bench_prog[];

/* ------------------------------------------------------------------ time (CLOCK_MONOTONIC) */

uint64_t bench_now_ns(void);
double bench_ms_between(uint64_t t0, uint64_t t1);
double bench_ms_since(uint64_t t0);

/* ------------------------------------------------------------------ messages */

/* "PROG: message" on stderr. */
void bench_progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Runs before bench_die exits (NULL: nothing); set by a program that has something to undo. */
extern void (*bench_die_hook)(void);
/* "PROG: message" on stderr, then bench_die_hook, then exit(1). */
void bench_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Keeps a note for the report's Notes section (at most 24) and shows it on stderr now. */
void bench_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The Notes section of the report, when there are notes. */
void bench_notes_print(void);
/* A command-line number up to 10^8; exits 2 with a message if s is not one. */
unsigned bench_parse_uint(const char *s, const char *what);
/* The Verdict column of a target. */
const char *bench_verdict(bool have, bool ok);

/* ------------------------------------------------------------------ statistics */

typedef struct Samples {
        double *v;
        size_t n, cap;
} Samples;

typedef struct Summary {
        size_t n;
        double p50, p90, p99, mean, min, max;
} Summary;

void samples_add(Samples *s, double x);
void samples_free(Samples *s);
/* Percentiles interpolate linearly between ranks. */
Summary summarize(const Samples *s);

/* ------------------------------------------------------------------ latency rows */

typedef struct Row {
        char key[16];
        char name[200];
        Summary s;
        bool have; /* s holds samples (s was given and not empty) */
        char note[300];
} Row;

/* Adds a row (at most 40; more are dropped); name and note are escaped for a table cell. */
void row_add(const char *key, const char *name, const Summary *s, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
/* Prints every row as a Markdown table (p50, p90, p99, max, mean) with `decimals` digits. */
void rows_print(int decimals);
/* The row with this key that has samples, or NULL. */
const Row *row_find(const char *key);
size_t row_count(void);
const Row *row_at(size_t i);

/* ------------------------------------------------------------------ the library's loop */

/* Turns the loop until nothing has happened for quiet_ms: after a result, the session's next
 * worker is forked, reports READY and is moved into its cgroup; once the loop is quiet, the
 * session is idle and the next command goes straight to a waiting worker. */
void loop_quiet(SbxContext *ctx, int quiet_ms);

/* ------------------------------------------------------------------ a server of its own */

/* `sbx serve --socket` that a benchmark starts in a fresh directory under /tmp (its socket
 * `sock` and, when asked, its stderr in `log` there). One per process at a time: the signal
 * handlers and bench_die's hook reach it here. pid is -1 when none runs. */
typedef struct BenchServer {
        pid_t pid;
        char dir[64], sock[96], log[96];
} BenchServer;
extern BenchServer bench_srv;

/* Starts `sbx serve --socket <dir>/sock` followed by args (NULL-terminated; may be NULL) in a
 * directory /tmp/<name>.XXXXXX, its stdin and stdout /dev/null, its stderr <dir>/server.log
 * when with_log (else this process's), SIGTERM'd when this process dies; setup (may be NULL)
 * runs in the child before exec. Returns once it accepts a connection; bench_die()s (with its
 * log) if it exits or does not listen within 10 s. */
void bench_server_start(const char *sbx, const char *name, const char *const *args, bool with_log,
                        void (*setup)(void));
/* SIGTERM, SIGKILL after 30 s, reaped; its directory removed. Nothing when none runs. */
void bench_server_stop(void);
/* Its log on stderr, when it has one. */
void bench_server_log_dump(void);
/* A connection to it: non-blocking, or blocking with SO_RCVTIMEO of timeout_s (a safety net:
 * no answer that long means the server is stuck). Returns the fd or -errno. */
int bench_server_connect(bool nonblock, unsigned timeout_s);
/* SIGINT, SIGTERM and SIGHUP SIGTERM the server first, then end this process as they would. */
void bench_server_signals(void);
