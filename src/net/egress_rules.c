/* SPDX-License-Identifier: MIT */
/* Egress by domain, the part that needs no loop: allowlist patterns, the address ranges the
 * proxy refuses, the operator's hosts file and CIDRs, and the proxy's parser of request heads.
 * Everything here reads untrusted text (a client's patterns, a sandbox's requests) and is
 * bounded by its caller's buffers. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "base/macro.h"
#include "net/egress.h"

/* ---------------------------------------------------------------- names */

static bool name_char(char c) { return isalnum((unsigned char)c) || c == '-' || c == '_'; }

int egress_host_normalize(const char *host, size_t len, char *out, size_t outlen) {
        if (len > 0 && host[len - 1] == '.')
                len--;
        if (len == 0 || len > 253 || outlen < len + 1)
                return -EINVAL;
        size_t label = 0;
        for (size_t i = 0; i < len; i++) {
                char c = host[i];
                if (c == '.') {
                        if (label == 0)
                                return -EINVAL;
                        label = 0;
                } else if (name_char(c) && ++label <= 63) {
                        out[i] = (char)tolower((unsigned char)c);
                        continue;
                } else {
                        return -EINVAL;
                }
                out[i] = '.';
        }
        if (label == 0)
                return -EINVAL;
        out[len] = 0;
        return 0;
}

/* ---------------------------------------------------------------- patterns */

void egress_rules_clear(EgressRules *r) {
        for (size_t i = 0; i < r->n; i++)
                free(r->v[i].name);
        free(r->v);
        *r = (EgressRules){ 0 };
}

static int parse_port(const char *s, size_t len, int *ret) {
        if (len == 1 && s[0] == '*') {
                *ret = -1;
                return 0;
        }
        unsigned v = 0;
        if (len == 0 || len > 5)
                return -EINVAL;
        for (size_t i = 0; i < len; i++) {
                if (!isdigit((unsigned char)s[i]))
                        return -EINVAL;
                v = v * 10 + (unsigned)(s[i] - '0');
        }
        if (v == 0 || v > 65535)
                return -EINVAL;
        *ret = (int)v;
        return 0;
}

static int parse_rule(const char *p, EgressRule *ret, char *err, size_t errlen) {
        size_t len = strlen(p);
        if (len == 0 || len > SBX_MAX_EGRESS_PATTERN_BYTES) {
                snprintf(err, errlen, "networkAllow pattern '%.64s' must be 1-%u bytes", p, SBX_MAX_EGRESS_PATTERN_BYTES);
                return -EINVAL;
        }
        const char *colon = strchr(p, ':');
        size_t name_len = colon ? (size_t)(colon - p) : len;
        int port = 0;
        if (colon && (strchr(colon + 1, ':') || parse_port(colon + 1, len - name_len - 1, &port) < 0)) {
                snprintf(err, errlen, "networkAllow pattern '%.64s': the port must be 1-65535 or * (IPv6 addresses "
                                      "are not patterns)", p);
                return -EINVAL;
        }
        bool wildcard = name_len >= 2 && p[0] == '*' && p[1] == '.';
        const char *name = wildcard ? p + 2 : p;
        size_t nlen = wildcard ? name_len - 2 : name_len;
        char norm[256];
        if (egress_host_normalize(name, nlen, norm, sizeof norm) < 0) {
                snprintf(err, errlen, "networkAllow pattern '%.64s' is not a host name, *.name or IPv4 address, with an "
                                      "optional :port", p);
                return -EINVAL;
        }
        /* "*.com" would open a whole top-level domain: a wildcard needs two labels below it. */
        if (wildcard && !strchr(norm, '.')) {
                snprintf(err, errlen, "networkAllow pattern '%.64s': a wildcard must name a domain of at least two "
                                      "labels (*.example.com)", p);
                return -EINVAL;
        }
        ret->name = strdup(norm);
        if (!ret->name)
                return -ENOMEM;
        ret->wildcard = wildcard;
        ret->port = port;
        return 0;
}

int egress_rules_parse(const char *const *patterns, EgressRules *ret, char *err, size_t errlen) {
        size_t n = 0;
        *ret = (EgressRules){ 0 };
        while (patterns && patterns[n])
                n++;
        if (n > SBX_MAX_EGRESS_ALLOW) {
                snprintf(err, errlen, "networkAllow has more than %u patterns", SBX_MAX_EGRESS_ALLOW);
                return -EINVAL;
        }
        if (n == 0)
                return 0;
        EgressRules r = { .v = calloc(n, sizeof(EgressRule)) };
        if (!r.v)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                int e = parse_rule(patterns[i], &r.v[i], err, errlen);
                if (e < 0) {
                        egress_rules_clear(&r);
                        return e;
                }
                r.n++;
        }
        *ret = r;
        return 0;
}

static bool port_ok(int rule, int port) {
        return rule == -1 || port == -1 ? true : rule == 0 ? port == 80 || port == 443 : port == rule;
}

bool egress_rules_match(const EgressRules *r, const char *host, int port) {
        size_t hl = strlen(host);
        for (size_t i = 0; i < r->n; i++) {
                const EgressRule *ru = &r->v[i];
                if (!port_ok(ru->port, port))
                        continue;
                if (!ru->wildcard) {
                        if (strcmp(ru->name, host) == 0)
                                return true;
                        continue;
                }
                /* Strictly below: "x.example.com" ends in ".example.com". */
                size_t nl = strlen(ru->name);
                if (hl > nl + 1 && host[hl - nl - 1] == '.' && strcmp(host + hl - nl, ru->name) == 0)
                        return true;
        }
        return false;
}

/* ---------------------------------------------------------------- addresses */

int egress_addr_parse(const char *s, EgressAddr *ret) {
        *ret = (EgressAddr){ 0 };
        if (inet_pton(AF_INET, s, ret->a) == 1) {
                ret->family = AF_INET;
                return 0;
        }
        if (inet_pton(AF_INET6, s, ret->a) == 1) {
                ret->family = AF_INET6;
                return 0;
        }
        return -EINVAL;
}

void egress_addr_format(const EgressAddr *a, char *buf, size_t len) {
        if (!inet_ntop(a->family, a->a, buf, (socklen_t)len))
                snprintf(buf, len, "?");
}

void egress_addr_canon(EgressAddr *a) {
        static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
        if (a->family == AF_INET6 && memcmp(a->a, mapped, 12) == 0) {
                memmove(a->a, a->a + 12, 4);
                memset(a->a + 4, 0, 12);
                a->family = AF_INET;
        }
}

int egress_cidr_parse(const char *s, EgressCidr *ret) {
        char buf[64];
        const char *slash = strchr(s, '/');
        size_t alen = slash ? (size_t)(slash - s) : strlen(s);
        if (alen == 0 || alen >= sizeof buf)
                return -EINVAL;
        memcpy(buf, s, alen);
        buf[alen] = 0;
        if (egress_addr_parse(buf, &ret->addr) < 0)
                return -EINVAL;
        unsigned max = ret->addr.family == AF_INET ? 32 : 128, bits = max;
        if (slash) {
                const char *b = slash + 1;
                if (!*b || strlen(b) > 3 || strspn(b, "0123456789") != strlen(b))
                        return -EINVAL;
                bits = (unsigned)atoi(b);
                if (bits > max)
                        return -EINVAL;
        }
        ret->bits = bits;
        return 0;
}

static bool prefix_eq(const uint8_t *a, const uint8_t *b, unsigned bits) {
        unsigned full = bits / 8, rest = bits % 8;
        if (memcmp(a, b, full) != 0)
                return false;
        if (!rest)
                return true;
        uint8_t mask = (uint8_t)(0xff << (8 - rest));
        return (a[full] & mask) == (b[full] & mask);
}

bool egress_cidr_contains(const EgressCidr *c, const EgressAddr *a) {
        return c->addr.family == a->family && prefix_eq(c->addr.a, a->a, c->bits);
}

typedef struct Range {
        uint8_t a[16];
        unsigned bits;
        const char *what;
} Range;

/* Most specific first: the metadata address lies inside link-local. */
static const Range ranges4[] = {
        { { 169, 254, 169, 254 }, 32, "cloud metadata" },
        { { 0 }, 8, "unspecified (0.0.0.0/8)" },
        { { 10 }, 8, "private (RFC 1918)" },
        { { 100, 64 }, 10, "carrier-grade NAT (100.64.0.0/10)" },
        { { 127 }, 8, "loopback" },
        { { 169, 254 }, 16, "link-local" },
        { { 172, 16 }, 12, "private (RFC 1918)" },
        { { 192, 0, 0 }, 24, "reserved (IETF protocol assignments)" },
        { { 192, 0, 2 }, 24, "reserved (documentation)" },
        { { 192, 168 }, 16, "private (RFC 1918)" },
        { { 198, 18 }, 15, "reserved (benchmarking)" },
        { { 198, 51, 100 }, 24, "reserved (documentation)" },
        { { 203, 0, 113 }, 24, "reserved (documentation)" },
        { { 224 }, 4, "multicast" },
        { { 240 }, 4, "reserved (240.0.0.0/4, broadcast)" },
};

static const Range ranges6[] = {
        { { 0 }, 128, "unspecified (::)" },
        { { [15] = 1 }, 128, "loopback" },
        { { 0 }, 96, "reserved (IPv4-compatible)" },
        /* SIIT's IPv4-translated form and the local-use NAT64 prefix (RFC 8215, where the IPv4
         * address sits wherever the operator's prefix length puts it): whatever they reach is
         * someone's translator's choice, so neither is judged by an IPv4 address inside. */
        { { [8] = 0xff, [9] = 0xff }, 96, "reserved (IPv4-translated)" },
        { { 0x00, 0x64, 0xff, 0x9b, 0x00, 0x01 }, 48, "reserved (local-use NAT64)" },
        { { 0x01 }, 64, "reserved (discard-only)" },
        { { 0x20, 0x01, 0x0d, 0xb8 }, 32, "reserved (documentation)" },
        { { 0xfc }, 7, "unique local (fc00::/7)" },
        { { 0xfe, 0x80 }, 10, "link-local" },
        { { 0xfe, 0xc0 }, 10, "reserved (site-local)" },
        { { 0xff }, 8, "multicast" },
};

static const char *range_find(const Range *r, size_t n, const uint8_t *a) {
        for (size_t i = 0; i < n; i++)
                if (prefix_eq(r[i].a, a, r[i].bits))
                        return r[i].what;
        return NULL;
}

const char *egress_addr_class(const EgressAddr *addr) {
        EgressAddr a = *addr;
        egress_addr_canon(&a);
        if (a.family == AF_INET)
                return range_find(ranges4, ELEMENTSOF(ranges4), a.a);
        if (a.family != AF_INET6)
                return "not an IP address";
        /* Addresses that carry an IPv4 one reach it: NAT64 (64:ff9b::/96, its last 32 bits)
         * and 6to4 (2002::/16, bits 16-47). */
        static const uint8_t nat64[12] = { 0, 0x64, 0xff, 0x9b };
        EgressAddr v4 = { .family = AF_INET };
        if (memcmp(a.a, nat64, 12) == 0)
                memcpy(v4.a, a.a + 12, 4);
        else if (a.a[0] == 0x20 && a.a[1] == 0x02)
                memcpy(v4.a, a.a + 2, 4);
        if (v4.a[0] || v4.a[1] || v4.a[2] || v4.a[3]) {
                const char *w = range_find(ranges4, ELEMENTSOF(ranges4), v4.a);
                if (w)
                        return w;
        }
        return range_find(ranges6, ELEMENTSOF(ranges6), a.a);
}

/* ---------------------------------------------------------------- the hosts file */

void egress_hosts_clear(EgressHosts *h) {
        for (size_t i = 0; i < h->n; i++)
                free(h->v[i].name);
        free(h->v);
        *h = (EgressHosts){ 0 };
}

const EgressHostsEntry *egress_hosts_find(const EgressHosts *h, const char *name) {
        for (size_t i = 0; i < h->n; i++)
                if (strcmp(h->v[i].name, name) == 0)
                        return &h->v[i];
        return NULL;
}

static int hosts_add(EgressHosts *h, const char *name, const EgressAddr *a) {
        EgressHostsEntry *e = (EgressHostsEntry *)egress_hosts_find(h, name);
        if (!e) {
                if (h->n >= SBX_MAX_EGRESS_HOSTS)
                        return -E2BIG;
                EgressHostsEntry *v = realloc(h->v, (h->n + 1) * sizeof *v);
                if (!v)
                        return -ENOMEM;
                h->v = v;
                e = &h->v[h->n];
                *e = (EgressHostsEntry){ .name = strdup(name) };
                if (!e->name)
                        return -ENOMEM;
                h->n++;
        }
        if (e->n < SBX_EGRESS_MAX_ADDRS)
                e->addrs[e->n++] = *a;
        return 0;
}

int egress_hosts_parse(const char *text, size_t len, EgressHosts *ret, char *err, size_t errlen) {
        EgressHosts h = { 0 };
        size_t lineno = 0;
        for (size_t pos = 0; pos < len;) {
                const char *nl = memchr(text + pos, '\n', len - pos);
                size_t end = nl ? (size_t)(nl - text) : len;
                char line[1024];
                size_t ll = end - pos;
                lineno++;
                if (ll >= sizeof line) {
                        snprintf(err, errlen, "line %zu is longer than %zu bytes", lineno, sizeof line - 1);
                        egress_hosts_clear(&h);
                        return -EINVAL;
                }
                memcpy(line, text + pos, ll);
                line[ll] = 0;
                pos = end + 1;
                char *hash = strchr(line, '#');
                if (hash)
                        *hash = 0;
                char *save = NULL, *tok = strtok_r(line, " \t\r", &save);
                if (!tok)
                        continue;
                EgressAddr a;
                if (egress_addr_parse(tok, &a) < 0) {
                        snprintf(err, errlen, "line %zu: '%.64s' is not an IP address", lineno, tok);
                        egress_hosts_clear(&h);
                        return -EINVAL;
                }
                egress_addr_canon(&a);
                bool any = false;
                while ((tok = strtok_r(NULL, " \t\r", &save))) {
                        char norm[256];
                        if (egress_host_normalize(tok, strlen(tok), norm, sizeof norm) < 0) {
                                snprintf(err, errlen, "line %zu: '%.64s' is not a host name", lineno, tok);
                                egress_hosts_clear(&h);
                                return -EINVAL;
                        }
                        int r = hosts_add(&h, norm, &a);
                        if (r < 0) {
                                snprintf(err, errlen, "line %zu: %s", lineno,
                                         r == -E2BIG ? "more names than the proxy keeps" : strerror(-r));
                                egress_hosts_clear(&h);
                                return r == -E2BIG ? -EINVAL : r;
                        }
                        any = true;
                }
                if (!any) {
                        snprintf(err, errlen, "line %zu: an address with no name", lineno);
                        egress_hosts_clear(&h);
                        return -EINVAL;
                }
        }
        *ret = h;
        return 0;
}

/* ---------------------------------------------------------------- request heads */

size_t egress_head_end(const char *buf, size_t len, size_t *scan) {
        for (size_t i = *scan; i < len; i++) {
                if (buf[i] != '\n')
                        continue;
                if (i >= 1 && buf[i - 1] == '\n')
                        return i + 1;
                if (i >= 3 && buf[i - 1] == '\r' && buf[i - 2] == '\n')
                        return i + 1;
        }
        *scan = len;
        return 0;
}

static _printf_(4, 5) int bad(int status, char *err, size_t errlen, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        return status;
}

/* host[:port] or [v6][:port] into r->host and r->port (def when absent, 0: required). */
static int parse_authority(const char *s, size_t len, uint16_t def, EgressRequest *r, char *err, size_t errlen) {
        const char *host = s, *port = NULL;
        size_t hlen, plen = 0;
        if (memchr(s, '@', len))
                return bad(400, err, errlen, "a user name in the target is not supported");
        if (len > 0 && s[0] == '[') {
                const char *close = memchr(s, ']', len);
                if (!close)
                        return bad(400, err, errlen, "the target's IPv6 address has no ']'");
                host = s + 1;
                hlen = (size_t)(close - host);
                if (close + 1 < s + len) {
                        if (close[1] != ':')
                                return bad(400, err, errlen, "bad target after its IPv6 address");
                        port = close + 2;
                        plen = len - (size_t)(port - s);
                }
                char v6[64];
                EgressAddr a;
                if (hlen == 0 || hlen >= sizeof v6)
                        return bad(400, err, errlen, "bad IPv6 address in the target");
                memcpy(v6, host, hlen);
                v6[hlen] = 0;
                if (egress_addr_parse(v6, &a) < 0 || a.family != AF_INET6)
                        return bad(400, err, errlen, "bad IPv6 address in the target");
                memcpy(r->host, v6, hlen + 1);
        } else {
                const char *colon = memchr(s, ':', len);
                hlen = colon ? (size_t)(colon - s) : len;
                if (colon) {
                        port = colon + 1;
                        plen = len - hlen - 1;
                }
                if (egress_host_normalize(host, hlen, r->host, sizeof r->host) < 0)
                        return bad(400, err, errlen, "'%.*s' is not a host name", (int)MIN(hlen, 64), host);
        }
        int p = 0;
        if (port) {
                if (parse_port(port, plen, &p) < 0 || p < 0)
                        return bad(400, err, errlen, "bad port in the target");
        } else if (def) {
                p = def;
        } else {
                return bad(400, err, errlen, "CONNECT needs host:port");
        }
        r->port = (uint16_t)p;
        return 0;
}

static bool token_char(char c) {
        return isalnum((unsigned char)c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

int egress_request_parse(const char *head, size_t len, EgressRequest *r, char *err, size_t errlen) {
        *r = (EgressRequest){ 0 };
        const char *eol = memchr(head, '\n', len);
        if (!eol)
                return bad(400, err, errlen, "no request line");
        size_t ll = (size_t)(eol - head);
        if (ll > 0 && head[ll - 1] == '\r')
                ll--;
        /* METHOD SP TARGET SP HTTP/1.x */
        const char *sp1 = memchr(head, ' ', ll);
        const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', ll - (size_t)(sp1 + 1 - head)) : NULL;
        if (!sp1 || !sp2 || sp1 == head || sp2 == sp1 + 1)
                return bad(400, err, errlen, "the request line is not METHOD TARGET HTTP/1.x");
        r->method = head;
        r->method_len = (size_t)(sp1 - head);
        for (size_t i = 0; i < r->method_len; i++)
                if (!token_char(head[i]))
                        return bad(400, err, errlen, "bad method");
        const char *target = sp1 + 1;
        size_t tlen = (size_t)(sp2 - target);
        r->version = sp2 + 1;
        r->version_len = ll - (size_t)(r->version - head);
        if (!((r->version_len == 8 && (memcmp(r->version, "HTTP/1.1", 8) == 0 || memcmp(r->version, "HTTP/1.0", 8) == 0))))
                return bad(400, err, errlen, "only HTTP/1.0 and HTTP/1.1 are served");
        r->headers = eol + 1;
        r->headers_len = len - (size_t)(r->headers - head);
        /* Without the blank line that ends the head. */
        if (r->headers_len >= 2 && r->headers[r->headers_len - 2] == '\r')
                r->headers_len -= 2;
        else if (r->headers_len >= 1)
                r->headers_len -= 1;
        if (r->method_len == 7 && memcmp(r->method, "CONNECT", 7) == 0) {
                r->kind = EGRESS_CONNECT;
                return parse_authority(target, tlen, 0, r, err, errlen);
        }
        r->kind = EGRESS_PLAIN;
        if (tlen >= 8 && strncasecmp(target, "https://", 8) == 0)
                return bad(400, err, errlen, "ask for https:// URLs with CONNECT (set HTTPS_PROXY)");
        if (tlen < 7 || strncasecmp(target, "http://", 7) != 0)
                return bad(400, err, errlen, "this is a proxy: ask for http://host/path, or CONNECT host:port");
        const char *auth = target + 7, *end = target + tlen;
        const char *path = auth;
        while (path < end && *path != '/' && *path != '?' && *path != '#')
                path++;
        r->authority = auth;
        r->authority_len = (size_t)(path - auth);
        int st = parse_authority(auth, r->authority_len, 80, r, err, errlen);
        if (st)
                return st;
        r->target = path;
        r->target_len = (size_t)(end - path);
        const char *hash = memchr(path, '#', r->target_len);
        if (hash)
                r->target_len = (size_t)(hash - path);
        /* The header lines: each "Name: value"; a folded line (obsolete, and read differently by
         * different servers) is refused. */
        for (const char *p = r->headers, *hend = r->headers + r->headers_len; p < hend;) {
                const char *nl = memchr(p, '\n', (size_t)(hend - p));
                const char *le = nl ? nl : hend;
                if (*p == ' ' || *p == '\t')
                        return bad(400, err, errlen, "folded header lines are not served");
                const char *c = p;
                while (c < le && token_char(*c))
                        c++;
                if (c == p || c >= le || *c != ':')
                        return bad(400, err, errlen, "a header line is not Name: value");
                p = le + 1;
        }
        return 0;
}

/* Headers the proxy answers for itself or sets anew: never passed on. */
static bool header_dropped(const char *name, size_t len) {
        static const char *const dropped[] = { "host", "connection", "proxy-connection", "proxy-authorization",
                                               "keep-alive" };
        for (size_t i = 0; i < ELEMENTSOF(dropped); i++)
                if (strlen(dropped[i]) == len && strncasecmp(dropped[i], name, len) == 0)
                        return true;
        return false;
}

typedef struct Out {
        char *p;
        size_t len, cap;
        bool full;
} Out;

static void put(Out *o, const char *s, size_t n) {
        if (o->full || o->len + n > o->cap) {
                o->full = true;
                return;
        }
        memcpy(o->p + o->len, s, n);
        o->len += n;
}

static void puts_(Out *o, const char *s) { put(o, s, strlen(s)); }

ssize_t egress_request_rewrite(const EgressRequest *r, char *out, size_t outlen) {
        Out o = { .p = out, .cap = outlen };
        put(&o, r->method, r->method_len);
        puts_(&o, " ");
        if (r->target_len == 0 || r->target[0] == '?')
                puts_(&o, "/");
        put(&o, r->target, r->target_len);
        puts_(&o, " ");
        put(&o, r->version, r->version_len);
        puts_(&o, "\r\nHost: ");
        put(&o, r->authority, r->authority_len);
        puts_(&o, "\r\n");
        for (const char *p = r->headers, *hend = r->headers + r->headers_len; p < hend;) {
                const char *nl = memchr(p, '\n', (size_t)(hend - p));
                const char *le = nl ? nl : hend;
                const char *colon = memchr(p, ':', (size_t)(le - p));
                size_t l = (size_t)(le - p);
                if (l > 0 && p[l - 1] == '\r')
                        l--;
                if (colon && !header_dropped(p, (size_t)(colon - p))) {
                        put(&o, p, l);
                        puts_(&o, "\r\n");
                }
                p = le + 1;
        }
        puts_(&o, "Connection: close\r\n\r\n");
        return o.full ? -ENOBUFS : (ssize_t)o.len;
}
