/* SPDX-License-Identifier: MIT */
/* Secrets the commands never see (sbx/egress.h, SbxProxySecret): a sandbox's own CA, the
 * trust the proxy puts in servers, and a CONNECT whose TLS the proxy ends to put secrets'
 * values where their placeholders are. egress.c owns the connections and calls in here once a
 * CONNECT's server is reached; nothing here waits. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "net/egress.h"

/* A proxy secret as the proxy uses it. The strings are the sandbox's (valid while it lives);
 * hosts is its own, parsed from the secret's patterns. */
typedef struct EgressSecret {
        const char *name, *value, *placeholder;
        size_t value_len, placeholder_len;
        EgressRules hosts;
} EgressSecret;

/* Whether any secret lists host:port (a CONNECT there is ended by the proxy). */
bool egress_secrets_want(const EgressSecret *s, size_t n, const char *host, int port);

/* Writes the head of the request the server gets: head (a complete request head, through its
 * blank line) with every placeholder of a secret that lists host:port replaced by its value,
 * and unless it asks for an Upgrade, its Connection, Keep-Alive and Proxy-Connection headers
 * dropped and `Connection: close` added (one request per connection). Returns the length,
 * -ENOBUFS when out is too small, or -EACCES when it holds such a placeholder but its Host
 * header or absolute target names another host or port than host:port (a value goes only where
 * the connection was made). */
ssize_t egress_tls_rewrite_head(const char *head, size_t len, const EgressSecret *s, size_t n, const char *host,
                                int port, char *out, size_t outlen);

/* Replaces, in place, each value (of SBX_REDACT_MIN_SECRET_BYTES or more) of the secrets
 * that occurs whole in buf by '*' of its length, and returns how many bytes at buf's start
 * may go: the rest, the last (longest value - 1) bytes whatever they are, wait for the next
 * bytes (which may finish a value) or a release, unless `end`, when all may go. The hold never
 * depends on what the bytes are, so what the sandbox receives tells it nothing of a value. */
size_t egress_tls_scrub(char *buf, size_t len, const EgressSecret *s, size_t n, bool end);

/* ---- a sandbox's CA, made at its creation: the key never leaves the daemon's memory. */

typedef struct EgressCa EgressCa;

/* Makes a CA (an ECDSA P-256 key and its self-signed certificate, named after id). Returns 0
 * or -errno (-EIO when GnuTLS fails). */
int egress_ca_new(const char *id, EgressCa **ret);
EgressCa *egress_ca_free(EgressCa *ca);
/* The CA's certificate in PEM (NUL-terminated, ca's), for the sandbox's trust store. */
const char *egress_ca_pem(const EgressCa *ca);

/* ---- the servers' trust: the host's trust store and the operator's extra CAs. */

typedef struct EgressTrust EgressTrust;

/* ca_file: a PEM file of extra CA certificates, or NULL. Returns 0, or -EINVAL / -errno with
 * err saying why. Reference-counted: each terminated CONNECT holds one, so the context may
 * replace it while connections made with it go on. */
int egress_trust_new(const char *ca_file, EgressTrust **ret, char *err, size_t errlen);
EgressTrust *egress_trust_unref(EgressTrust *t);

/* ---- a CONNECT the proxy ends: two TLS sessions and the bytes between them. */

typedef struct EgressTls EgressTls;

/* For a CONNECT to host:port, cfd the client's socket and sfd the server's (both connected
 * and non-blocking; they stay the caller's). pre/pre_len: what the client sent after its
 * CONNECT head (the start of its handshake), copied. Returns 0, -EBUSY when every leaf of ca
 * is in use, or -errno. */
int egress_tls_new(EgressCa *ca, EgressTrust *trust, const EgressSecret *s, size_t n, const char *host, int port,
                   int cfd, int sfd, const void *pre, size_t pre_len, EgressTls **ret);
EgressTls *egress_tls_free(EgressTls *t);

/* Does all it can without waiting: handshakes, then the request's head rewritten, then both
 * ways. ret_ev[i]: the epoll events fd i (0 the client's, 1 the server's) waits for. Returns
 * 1 while going on, 0 when finished (both sides closed cleanly), -1 when it must be cut off. */
int egress_tls_pump(EgressTls *t, uint32_t ret_ev[2]);
/* A failure the proxy answered in the client's TLS (a server that could not be trusted, a
 * head too large), said once: the one line, or NULL. status gets the HTTP status. */
const char *egress_tls_take_failure(EgressTls *t, int *status);
/* Whether bytes of the server's answer wait (egress_tls_scrub) on a connection still open. */
bool egress_tls_holding(const EgressTls *t);
/* Lets what waits go with the next pump: a value the server sends split across the release
 * is not masked (it would have to pause SBX_EGRESS_TLS_HOLD_MS inside the value). */
void egress_tls_release(EgressTls *t);
/* Whether the connection reached its server (handshakes and the request went on). */
bool egress_tls_relayed(const EgressTls *t);
