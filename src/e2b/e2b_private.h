/* SPDX-License-Identifier: MIT */
/* What e2b.c (the listener, routes, control plane) and envd.c (the sandbox's own API) share:
 * the door, its sandboxes, one HTTP request's state, the answers both send. Private to
 * src/e2b. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include "base/limits.h"
#include "base/loop.h"
#include "rpc/client.h"
#include "e2b/e2b.h"
#include "http/fetch.h"
#include "http/forward.h"
#include "http/http.h"

#define E2B_TEMPLATE "base"
#define E2B_TEMPLATE_CODE "code-interpreter-v1"

/* A sandbox made through the door: what E2B says of it that sbx does not keep. */
typedef struct E2bBox {
        struct E2bBox *next;
        char id[64];
        char token[E2B_TOKEN_HEX + 1];
        char template_id[64];
        uint64_t started_ms, end_ms; /* wall clock; end_ms 0: no timeout */
        /* Ports forwarded so far: the sandbox's port and the host's end of it. */
        uint16_t port_in[SBX_E2B_MAX_PORTS], port_host[SBX_E2B_MAX_PORTS];
        unsigned n_ports;
} E2bBox;

struct E2b {
        Loop *loop;
        HttpServer *http;
        RpcClient *rpc; /* the door's own connection: it owns the sandboxes it makes */
        HttpClient *fetch; /* for forwarded ports */
        E2bConnectFn connect;
        void *connect_data;
        char **keys;
        size_t n_keys;
        E2bBox *boxes;
        struct E2bWatcher *watchers; /* envd.c's: CreateWatcher's, polled */
        E2bExtraRoutes extra;        /* route NULL: none */
};

/* One HTTP request while the door works on it (http_user of its HttpReq). */
/* An ended part's last bytes, waiting for the files.write before them (envd.c). */
typedef struct E2bHeld {
        size_t part; /* its index in E2bReq.parts */
        uint8_t *data;
        size_t len;
} E2bHeld;

typedef struct E2bReq {
        E2b *g;
        HttpReq *r;
        E2bBox *box;
        json_t *in;       /* the request's JSON (Connect message or REST body) */
        json_t *scratch;  /* what a step keeps for the next: a start's params, connect's "was paused" */
        RpcClient *own;   /* a stream's connection of its own */
        HttpForward fwd;  /* a forwarded request (ports.c) */
        unsigned port;
        bool streaming, pty;
        bool told_error;   /* /execute: the cell's error line was written */
        bool watch;        /* a WatchDir stream: its events and keepalives are top-level */
        char *watch_root;  /* the watched directory, absolute: names are told relative to it */
        char process_id[32];
        long pid;
        RpcAnswerFn step;  /* what follows the lookup of a process by pid */
        int keepalive_fd;  /* the keepalive's timer; before a start, its retry's */
        Watch kw;
        uint64_t deadline_ms; /* a start is tried again until then */
        /* POST /files: the files as they arrive, each written on in parts */
        json_t *parts;    /* [{path, name, bytes, uploadId?, ended?, committed?, error?}] */
        uint8_t *part;    /* what came of the current file since its last part went */
        size_t part_len, part_cap;
        size_t busy_part;  /* 1 + the index of the part whose files.write is out; 0: none */
        E2bHeld *held;     /* ended parts' last bytes, in order, sent before the current part's */
        size_t n_held;
        bool request_in;   /* the request is whole: answer once the last part is committed */
        bool reading;      /* GET /files: a files.read is out */
        uint64_t read_off; /* GET /files: where the next files.read starts */
        int data_fd;       /* /files: the memfd the bytes go through to and from the server */
        int body_error;
} E2bReq;

E2bBox *e2b_box_find(E2b *g, const char *id);
void e2b_box_drop(E2b *g, const char *id);

/* Answers: JSON bodies (taken), E2B's REST errors {code, message}, Connect errors. */
void e2b_reply_json(E2bReq *q, unsigned status, json_t *body);
void e2b_reply_rest_error(E2bReq *q, unsigned status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void e2b_reply_empty(E2bReq *q, unsigned status);
/* The Connect code (not_found, ...) that an sbx error means. */
const char *e2b_connect_code(json_t *error);
unsigned e2b_connect_status(const char *code);

/* "8000-<32 hex>.anything" (a Host header): the port and the sandbox's id. */
bool e2b_host_target(const char *host, unsigned *ret_port, char id[64]);
/* The sandbox an envd call is for: its E2b-Sandbox-Id header, or a Host of 49983-ID.domain
 * (envd's own address in E2B, which a signed /files URL may carry); NULL when neither. */
const char *e2b_sandbox_of(E2bReq *q, char buf[64]);

/* ports.c: requests to PORT-ID.<domain>, forwarded to the sandbox's port. */
bool ports_route(E2bReq *q);
void ports_request(E2bReq *q);
void ports_drained(E2bReq *q);
void ports_finished(E2bReq *q);

/* interp.c: E2B's code interpreter (port 49999) over sbx's code contexts. */
bool interp_route(E2bReq *q);
void interp_request(E2bReq *q);

/* envd.c: the sandbox's own API. route says whether the path is one of it. */
bool envd_route(E2bReq *q);
int envd_head(E2bReq *q);
int envd_body(E2bReq *q, const uint8_t *chunk, size_t len);
void envd_request(E2bReq *q);
/* The door's connection heard a files.event: a polled watcher's, kept for its next poll. */
void envd_watcher_event(E2b *g, json_t *params);
/* A sandbox's polled watchers go (NULL: every one). */
void envd_watchers_drop(E2b *g, const char *sandbox);
void envd_drained(E2bReq *q);
void envd_finished(E2bReq *q);
