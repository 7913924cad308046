/* SPDX-License-Identifier: MIT */
/* libsbx: egress by domain, the proxy of sandboxes made with SBX_NETWORK_ALLOWLIST.
 *
 * Such a sandbox has its own network namespace with only loopback, so nothing it sends can
 * leave by itself. On its 127.0.0.1:3128 an HTTP proxy listens (HTTP_PROXY, HTTPS_PROXY and
 * their lower-case forms point there, NO_PROXY names loopback), served by the context's loop:
 * `CONNECT host:port` tunnels and plain `GET http://host/...` requests (one request per
 * connection, sent on with `Connection: close`). Each target must match a pattern of the
 * sandbox's allowlist; its name is then resolved (the operator's hosts file first, else DNS
 * through c-ares, never waiting) and addresses of the loopback, private, link-local, metadata,
 * carrier-grade NAT, unique-local, multicast and reserved ranges are refused unless the
 * operator allows them (sbx_context_set_egress). A refusal is answered `403 Forbidden` with
 * one line saying why, a failure to resolve or connect `502 Bad Gateway`; both are told to
 * the context's egress hook.
 *
 * Patterns: "example.com" (that name only), "*.example.com" (any name below it, at any depth,
 * not example.com itself), an IPv4 address; without a port they allow ports 80 and 443, with
 * ":port" that port only, with ":*" any port. Case is ignored, as is a final dot.
 *
 * Included by sbx/sbx.h; the same conventions hold. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include "sbx/sbx.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The operator's options for every allowlist sandbox of a context. */
typedef struct SbxEgressOptions {
        /* A file in /etc/hosts format ("ADDRESS NAME [NAME...]", # comments) whose names the
         * proxy resolves from it alone, before and instead of DNS; NULL: none. Read once, by
         * sbx_context_set_egress(). */
        const char *hosts_file;
        /* NULL-terminated CIDRs ("127.0.0.1/32", "10.0.0.0/8", "fd00::/8"; a bare address is
         * one host) that the proxy may reach although their range is refused by default. */
        const char *const *allow_private;
        /* A PEM file of CA certificates the proxy trusts, besides the host's trust store, for
         * the servers it reaches with TLS of its own (proxy secrets, below); NULL: none. Read
         * once, by sbx_context_set_egress(). */
        const char *ca_file;
} SbxEgressOptions;

/* A secret the commands never see (SbxSandboxOptions.proxy_secrets; the sandbox must be
 * SBX_NETWORK_ALLOWLIST). Its session shells get NAME=placeholder, never the value; the
 * placeholder is "SBX_SECRET_<NAME>_<24 hex digits>", random per sandbox unless given (a fork
 * gives its parent's, so that the state it copies names the same one). The sandbox trusts a
 * CA of its own, made with it and held in the daemon's memory only (its certificate is added
 * to /etc/ssl/certs/ca-certificates.crt inside and named by SSL_CERT_FILE, REQUESTS_CA_BUNDLE,
 * CURL_CA_BUNDLE, PIP_CERT, GIT_SSL_CAINFO and NODE_EXTRA_CA_CERTS). A CONNECT to a host that
 * matches the hosts of one of its proxy secrets is not tunnelled: the proxy ends the
 * command's TLS with a certificate of that CA, opens TLS of its own to the server (checked
 * against the host's trust store and SbxEgressOptions.ca_file), and in the head of the one
 * request it relays (request line and header values; bodies pass unchanged) puts each
 * placeholder's value where the secret lists that host. In what the server answers, heads
 * and bodies, each such value (of 8 bytes or more) is replaced by a mask of '*' of its
 * length, so a server that echoes the request does not hand it back. The hosts join the
 * sandbox's allowlist (network_allow may then be empty). Plain http requests never get a
 * value; request bodies are relayed unchanged. */
typedef struct SbxProxySecret {
        const char *name;          /* an environment name, at most 64 bytes */
        const char *value;         /* 1 byte to 16 KiB, no CR or LF, never shown */
        const char *const *hosts;  /* NULL-terminated patterns (network_allow's form), at least one */
        const char *placeholder;   /* NULL: made at random (see above) */
} SbxProxySecret;

/* Sets the options (replacing earlier ones; sandboxes made before keep their proxy but use
 * the new options for their next request). Returns 0, -EINVAL with err saying what is wrong
 * (a bad CIDR, a bad line of the hosts file, too many entries), or -errno reading the file. */
SBX_API int sbx_context_set_egress(SbxContext *ctx, const SbxEgressOptions *o, char *err, size_t errlen);

/* One decision of a proxy that did not let a request through. */
typedef enum SbxEgressVerdict {
        SBX_EGRESS_DENIED = 1, /* 403: not in the allowlist, or a refused address */
        SBX_EGRESS_FAILED = 2, /* 502: the name did not resolve, or no address connected */
        SBX_EGRESS_BAD = 3,    /* 400 / 405 / 431: not a request the proxy serves */
} SbxEgressVerdict;

typedef struct SbxEgressEvent {
        SbxEgressVerdict verdict;
        int status;          /* the HTTP status answered */
        const char *host;    /* as the request named it ("" when it named none) */
        uint16_t port;
        const char *reason;  /* the one line answered, without "sbx: " */
} SbxEgressEvent;

/* fn(userdata, sb, event) is called from the loop for every request refused or failed; the
 * event lives during the call. It must not free sb. NULL turns it off. */
typedef void (*SbxEgressFn)(void *userdata, SbxSandbox *sb, const SbxEgressEvent *event);
SBX_API void sbx_context_on_egress(SbxContext *ctx, SbxEgressFn fn, void *userdata);

typedef struct SbxEgressStats {
        uint64_t allowed;  /* requests let through (tunnels and plain requests) */
        uint64_t denied;   /* SBX_EGRESS_DENIED */
        uint64_t failed;   /* SBX_EGRESS_FAILED */
        uint64_t bad;      /* SBX_EGRESS_BAD */
        unsigned open;     /* connections through the proxy now */
} SbxEgressStats;

/* The counters of sb's proxy. Returns 0, or -ENOTSUP when sb is not an allowlist sandbox. */
SBX_API int sbx_sandbox_egress_stats(SbxSandbox *sb, SbxEgressStats *ret);

#ifdef __cplusplus
}
#endif
