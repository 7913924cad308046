/* SPDX-License-Identifier: MIT */
/* Egress by domain (sbx/egress.h), as libsbx's rooms see it. egress_rules.c holds what needs
 * no loop and is unit-tested alone: allowlist patterns, address ranges, the operator's hosts
 * file and CIDRs, the proxy's request parser. egress.c holds the proxy of each allowlist
 * sandbox and the context's resolver (c-ares in the loop). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "base/limits.h"
#include "sbx/sbx.h"
#include "session/room.h"

/* ---------------------------------------------------------------- egress_rules.c */

/* One allowlist pattern. name is lower case without a final dot; a wildcard's is what follows
 * "*." and matches names strictly below it. port: 0 for 80 and 443, -1 for any, else that one. */
typedef struct EgressRule {
        char *name;
        bool wildcard;
        int port;
} EgressRule;

typedef struct EgressRules {
        EgressRule *v;
        size_t n;
} EgressRules;

/* Parses a NULL-terminated list (NULL: empty) into ret (owned: egress_rules_clear). Returns 0,
 * -EINVAL with err naming the pattern and what is wrong, or -ENOMEM. */
int egress_rules_parse(const char *const *patterns, EgressRules *ret, char *err, size_t errlen);
void egress_rules_clear(EgressRules *r);
/* Whether host (normalized: egress_host_normalize) on port (-1: any) matches a rule. */
bool egress_rules_match(const EgressRules *r, const char *host, int port);

/* Checks a host name (letters, digits, '-', '_' and dots; labels of 1-63, at most 253 in all)
 * or IPv4 address, and writes it lower case without a final dot into out (at least 254
 * bytes). Returns 0 or -EINVAL. */
int egress_host_normalize(const char *host, size_t len, char *out, size_t outlen);

/* An address: AF_INET (4 bytes of a) or AF_INET6 (16). */
typedef struct EgressAddr {
        int family;
        uint8_t a[16];
} EgressAddr;

typedef struct EgressCidr {
        EgressAddr addr;
        unsigned bits;
} EgressCidr;

/* "a.b.c.d[/n]" or "v6[/n]" (a bare address: one host). Returns 0 or -EINVAL. */
int egress_cidr_parse(const char *s, EgressCidr *ret);
bool egress_cidr_contains(const EgressCidr *c, const EgressAddr *a);
/* An IPv4-mapped IPv6 address (::ffff:a.b.c.d) becomes the IPv4 one it reaches. */
void egress_addr_canon(EgressAddr *a);
/* The refused range an address lies in, in words ("loopback", "private (RFC 1918)", "cloud
 * metadata", ...), or NULL for a public one. Addresses that embed an IPv4 address (mapped,
 * NAT64, 6to4) are judged by it. */
const char *egress_addr_class(const EgressAddr *a);
/* inet_pton of either family. Returns 0 or -EINVAL. */
int egress_addr_parse(const char *s, EgressAddr *ret);
void egress_addr_format(const EgressAddr *a, char *buf, size_t len);

/* The operator's hosts file: each name (normalized) with its addresses, in file order. */
typedef struct EgressHostsEntry {
        char *name;
        EgressAddr addrs[SBX_EGRESS_MAX_ADDRS];
        unsigned n;
} EgressHostsEntry;

typedef struct EgressHosts {
        EgressHostsEntry *v;
        size_t n;
} EgressHosts;

/* Parses /etc/hosts text: "ADDRESS NAME [NAME...]" lines, '#' to the end of a line a comment.
 * A name listed again gets the further addresses (at most SBX_EGRESS_MAX_ADDRS). Returns 0,
 * -EINVAL with err naming the line, or -ENOMEM. */
int egress_hosts_parse(const char *text, size_t len, EgressHosts *ret, char *err, size_t errlen);
const EgressHostsEntry *egress_hosts_find(const EgressHosts *h, const char *name);
void egress_hosts_clear(EgressHosts *h);

typedef enum EgressKind { EGRESS_CONNECT, EGRESS_PLAIN } EgressKind;

/* A request head the proxy serves. The pointers point into the head it was parsed from. */
typedef struct EgressRequest {
        EgressKind kind;
        char host[256];     /* normalized; an IPv6 literal without its brackets */
        uint16_t port;
        /* EGRESS_PLAIN: the parts of the request line, the target in origin-form (path and
         * query; NULL target_len 0 stands for "/"), the authority as the URL gave it, and the
         * header lines that follow the request line (without the blank line). */
        const char *method, *target, *version, *authority, *headers;
        size_t method_len, target_len, version_len, authority_len, headers_len;
} EgressRequest;

/* The length of the head at the start of buf (through its blank line: CRLF CRLF or LF LF),
 * or 0 while it is incomplete. *scan is where the search goes on next time (start at 0). */
size_t egress_head_end(const char *buf, size_t len, size_t *scan);
/* Parses a complete head. Returns 0, or the HTTP status to answer (400, 405) with err saying
 * why in one line. */
int egress_request_parse(const char *head, size_t len, EgressRequest *ret, char *err, size_t errlen);
/* Writes a plain request's head as the origin server gets it: origin-form, Host from the URL,
 * the proxy's and hop-by-hop headers dropped, `Connection: close`. Returns its length, or
 * -ENOBUFS when out is too small. */
ssize_t egress_request_rewrite(const EgressRequest *r, char *out, size_t outlen);

/* ---------------------------------------------------------------- egress.c */

typedef struct Egress Egress;
typedef struct SandboxHost SandboxHost;

typedef struct EgressCa EgressCa;

/* The egress room (session/room.h): checks an allowlist sandbox's rules, makes the CA of one
 * with proxy secrets before its pid 1, starts its proxy once pid 1 exists, and frees the
 * context's part (resolver, options, hook: made on first use) with the context. */
extern const Room egress_room;
