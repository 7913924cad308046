/* SPDX-License-Identifier: MIT */
/* The daemon's side of the audit log (`sbx serve --audit PATH`): events made in the loop,
 * queued, and handed to a writer process that owns the files (audit_log.h).
 *
 * The loop never writes the file: a regular file cannot be polled, and a write to it may
 * wait for the disk. Each event becomes one line in a bounded queue (SBX_AUDIT_QUEUE_BYTES)
 * that drains into a non-blocking pipe to the writer when the pipe has room; the writer
 * numbers, chains and writes the lines and reports its counters on a second pipe. A full
 * queue or a dead writer drops the event and counts it; a failed write is counted by the
 * writer. health shows all of it; with fail_closed, `run` and `process.start` are refused
 * while the log is not keeping up.
 *
 * The Server owns the one Audit (Core.audit, NULL when auditing is off). Every function
 * here takes a NULL Audit and does nothing (freeing the fields it was given); the AUDIT()
 * macro also skips building the fields. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include "base/loop.h"
#include "rpc/jsonrpc.h"
#include "sbx/sbx.h"

typedef struct Audit Audit;
typedef struct Conn Conn;
typedef struct SrvSandbox SrvSandbox;

typedef struct AuditOptions {
        const char *path;
        uint64_t max_bytes; /* rotate past this; 0: SBX_AUDIT_DEFAULT_MAX_BYTES */
        unsigned keep;      /* files kept in all, PATH included; 0: SBX_AUDIT_DEFAULT_KEEP */
        bool fail_closed;   /* refuse runs while the log is not keeping up */
} AuditOptions;

/* Starts the writer (this binary, `sbx audit writer`) and waits, before the loop runs, up to
 * SBX_AUDIT_START_MS for it to open the log. Returns 0, or -errno with err saying why (the
 * log cannot be opened, does not end with an audit line, the writer did not start). */
int audit_new(Loop *loop, const AuditOptions *o, Audit **ret, char *err, size_t errlen);
/* How every string of an event about a sandbox is redacted before it is written: fn returns
 * the redacted copy (malloc'd, *ret_len set) as the output of the sandbox with that id is, or
 * NULL to keep the text (no such sandbox, or out of memory). */
typedef char *(*AuditRedactFn)(void *data, const char *sandbox_id, const char *s, size_t len, size_t *ret_len);
void audit_set_redact(Audit *a, AuditRedactFn fn, void *data);
/* At shutdown, after the last event: hands what is queued to the writer and waits for it to
 * write everything and exit, SBX_AUDIT_CLOSE_MS at most; what is left is counted dropped. */
void audit_close(Audit *a);
Audit *audit_free(Audit *a);

/* Logs an event: `type`, the sandbox (may be NULL), the client of connection c (may be NULL:
 * uid and pid null) and fields (stolen, may be NULL), one JSON object. */
void audit_event(Audit *a, const char *type, const SrvSandbox *sb, const Conn *c, json_t *fields);
/* The same with the client given as numbers (-1: unknown), for a connection that never
 * became one (connection.refused). */
void audit_event_peer(Audit *a, const char *type, const SrvSandbox *sb, long uid, long pid, json_t *fields);
/* An event a sandbox can cause at will (network.denied): written while the sandbox's share
 * allows (SBX_AUDIT_DENIED_BURST at once, then SBX_AUDIT_DENIED_PER_S a second), else counted;
 * the count goes out as one `network.denied.suppressed` event ({count}) before the sandbox's
 * next event written this way, or at audit_flush_suppressed(). sb may not be NULL. */
void audit_event_limited(Audit *a, const char *type, SrvSandbox *sb, json_t *fields);
/* sb is going: the events it had suppressed are said now. */
void audit_flush_suppressed(Audit *a, SrvSandbox *sb);
#define AUDIT(a, type, sb, c, fields)                                                                \
        do {                                                                                     \
                Audit *audit_a_ = (a);                                                           \
                if (audit_a_)                                                                    \
                        audit_event(audit_a_, type, sb, c, fields);                              \
        } while (0)

/* The last `limit` events made (at most SBX_AUDIT_RECENT_EVENTS), oldest first, as queued for
 * the writer (which numbers and chains them). An empty array when off. */
json_t *audit_recent_json(const Audit *a, size_t limit);
/* Checks the chain of the log's current file in a job; done(ud, lines or -errno (-EBADMSG:
 * broken), what it found in words, a) from the loop, or with -ECANCELED when the audit is
 * freed first. One check at a time: -EBUSY while one runs, -ENOTCONN when auditing is off. */
typedef void (*AuditVerifyFn)(void *ud, int result, const char *message, Audit *a);
int audit_verify_start(Audit *a, AuditVerifyFn done, void *ud);

/* An event whose outcome comes later (fork, restore, import, export, process.start): its
 * type, sandbox and client are taken now, while the connection is known. NULL when off. */
json_t *audit_begin(Audit *a, const char *type, const SrvSandbox *sb, const Conn *c);
/* Adds fields (stolen) to ev (stolen, NULL: nothing is logged) and logs it, stamped now. */
void audit_finish(Audit *a, json_t *ev, json_t *fields);
/* fields plus "error": the errno's name when rr < 0; returns fields. */
json_t *audit_outcome(int rr, json_t *fields);

/* run.end: begun when the run is queued (session and command, the text cut at
 * SBX_AUDIT_COMMAND_BYTES with its length and sha256), finished with its result. */
json_t *audit_run_begin(Audit *a, const SrvSandbox *sb, const Conn *c, const char *session, const char *command,
                        size_t len);
void audit_run_end(Audit *a, json_t *ev, const SbxResult *res);
/* process.start: begun when asked (the command as for runs), finished when the process
 * started (p) or could not (error); a started one gets its process.exit logged when it ends
 * (a watcher of its own, gone with the process). */
json_t *audit_process_begin(Audit *a, const SrvSandbox *sb, const Conn *c, const char *command, size_t len);
void audit_process_started(Audit *a, json_t *ev, SbxProcess *p, int error);
/* The outcome of an operation (fork, restore, import, export): error and message, or the
 * archive's size. */
json_t *audit_op_fields(const SbxOpResult *res);

/* With fail-closed, while the log is not keeping up (events dropped and not yet caught up,
 * the writer failing to write, or gone): fails with -32001 WORKER_UNAVAILABLE naming the
 * audit log. Returns 0 or -1 with e set. */
int audit_check_run(const Audit *a, RpcError *e);
/* health's `audit`: {enabled, ...} (enabled false when a is NULL). */
json_t *audit_health_json(const Audit *a);
