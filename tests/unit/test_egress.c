/* SPDX-License-Identifier: MIT */
/* Unit tests of egress by domain's parsers and checks (session/egress_rules.c): allowlist
 * patterns and their matching, the refused address ranges, CIDRs, the hosts file, and the
 * proxy's request heads and their rewriting. */
#include <errno.h>
#include <sys/socket.h>
#include "base/macro.h"
#include "net/egress.h"
#include "tap.h"

static int parse(const char *const *l, EgressRules *r, char *err, size_t errlen) {
        err[0] = 0;
        return egress_rules_parse(l, r, err, errlen);
}

static void test_patterns(void) {
        char err[512];
        EgressRules r;
        const char *good[] = { "Example.COM.", "*.pypi.org", "api.test:8080", "any.test:*", "10.0.0.1", NULL };
        CHECK(parse(good, &r, err, sizeof err) == 0 && r.n == 5, "good patterns parse: %s", err);
        CHECK(egress_rules_match(&r, "example.com", 443) && egress_rules_match(&r, "example.com", 80),
              "a name without a port: 80 and 443");
        CHECK(!egress_rules_match(&r, "example.com", 22), "... and not 22");
        CHECK(!egress_rules_match(&r, "www.example.com", 443), "a name does not cover its subdomains");
        CHECK(egress_rules_match(&r, "files.pypi.org", 443) && egress_rules_match(&r, "a.b.pypi.org", 443),
              "a wildcard covers names below, at any depth");
        CHECK(!egress_rules_match(&r, "pypi.org", 443), "a wildcard does not cover its apex");
        CHECK(!egress_rules_match(&r, "evilpypi.org", 443), "nor a name merely ending like it");
        CHECK(egress_rules_match(&r, "api.test", 8080) && !egress_rules_match(&r, "api.test", 443),
              "a port: that one only");
        CHECK(egress_rules_match(&r, "any.test", 1) && egress_rules_match(&r, "any.test", 65535), ":* any port");
        CHECK(egress_rules_match(&r, "10.0.0.1", 443), "an IPv4 address is a pattern");
        CHECK(egress_rules_match(&r, "api.test", -1), "any port asked: the name alone");
        egress_rules_clear(&r);

        const struct {
                const char *p, *words;
        } bad[] = {
                { "", "1-260" },         { "*.com", "two labels" },   { "*", "not a host name" },
                { "a..b", "not a host" }, { "a b.test", "not a host" }, { "a.test:0", "port must be" },
                { "a.test:65536", "port must be" }, { "a.test:", "port must be" }, { "[::1]:443", "port must be" },
                { "a.test:8080:1", "port must be" }, { "-.test/x", "not a host" },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                const char *l[] = { bad[i].p, NULL };
                int e = parse(l, &r, err, sizeof err);
                CHECK(e == -EINVAL && strstr(err, bad[i].words), "'%s' refused: %s", bad[i].p, err);
        }
        char label[70];
        memset(label, 'a', 64);
        strcpy(label + 64, ".test");
        const char *longlabel[] = { label, NULL };
        CHECK(parse(longlabel, &r, err, sizeof err) == -EINVAL, "a label of 64 refused");
        static const char *many[SBX_MAX_EGRESS_ALLOW + 2];
        for (size_t i = 0; i <= SBX_MAX_EGRESS_ALLOW; i++)
                many[i] = "a.test";
        CHECK(parse(many, &r, err, sizeof err) == -EINVAL && strstr(err, "more than"), "too many refused");
        CHECK(parse(NULL, &r, err, sizeof err) == 0 && r.n == 0 && !egress_rules_match(&r, "a.test", 443),
              "an empty list matches nothing");
}

static const char *cls(const char *addr) {
        EgressAddr a;
        if (egress_addr_parse(addr, &a) < 0)
                return "unparsable";
        return egress_addr_class(&a);
}

static void test_addresses(void) {
        const struct {
                const char *addr, *words; /* words NULL: public */
        } cases[] = {
                { "127.0.0.1", "loopback" },           { "127.9.9.9", "loopback" },
                { "10.1.2.3", "RFC 1918" },            { "172.16.0.1", "RFC 1918" },
                { "172.31.255.255", "RFC 1918" },      { "192.168.1.1", "RFC 1918" },
                { "100.64.0.1", "carrier-grade" },     { "100.127.255.255", "carrier-grade" },
                { "169.254.169.254", "cloud metadata" }, { "169.254.1.1", "link-local" },
                { "0.0.0.0", "unspecified" },          { "224.0.0.1", "multicast" },
                { "255.255.255.255", "reserved" },     { "198.18.0.1", "reserved" },
                { "::1", "loopback" },                 { "::", "unspecified" },
                { "fd00::1", "unique local" },         { "fc00::1", "unique local" },
                { "fe80::1", "link-local" },           { "ff02::1", "multicast" },
                { "::ffff:127.0.0.1", "loopback" },    { "::ffff:10.0.0.1", "RFC 1918" },
                { "64:ff9b::a9fe:a9fe", "cloud metadata" },
                { "64:ff9b:1::808:808", "reserved (local-use NAT64)" }, { "64:ff9b:1:ffff::1", "reserved (local-use NAT64)" },
                { "::ffff:0:808:808", "reserved (IPv4-translated)" }, { "::ffff:0:7f00:1", "reserved (IPv4-translated)" }, { "2002:7f00:1::1", "loopback" },
                { "8.8.8.8", NULL },                   { "172.32.0.1", NULL },
                { "100.128.0.1", NULL },               { "2606:4700::1111", NULL },
                { "::ffff:1.1.1.1", NULL },            { "2002:0808:0808::1", NULL },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const char *c = cls(cases[i].addr);
                bool ok = cases[i].words ? c && strstr(c, cases[i].words) : c == NULL;
                CHECK(ok, "%s: %s", cases[i].addr, c ? c : "public");
        }
        EgressCidr cidr;
        EgressAddr a;
        CHECK(egress_cidr_parse("127.0.0.1/32", &cidr) == 0 && egress_addr_parse("127.0.0.1", &a) == 0 &&
                      egress_cidr_contains(&cidr, &a),
              "127.0.0.1/32 holds 127.0.0.1");
        CHECK(egress_addr_parse("127.0.0.2", &a) == 0 && !egress_cidr_contains(&cidr, &a), "... not 127.0.0.2");
        CHECK(egress_cidr_parse("10.0.0.0/8", &cidr) == 0 && egress_addr_parse("10.200.1.1", &a) == 0 &&
                      egress_cidr_contains(&cidr, &a),
              "10/8 holds 10.200.1.1");
        CHECK(egress_cidr_parse("fd00::/8", &cidr) == 0 && egress_addr_parse("fd12::1", &a) == 0 &&
                      egress_cidr_contains(&cidr, &a) && egress_addr_parse("10.0.0.1", &a) == 0 &&
                      !egress_cidr_contains(&cidr, &a),
              "fd00::/8 holds fd12::1, not an IPv4 address");
        CHECK(egress_cidr_parse("10.0.0.0/12", &cidr) == 0 && egress_addr_parse("10.15.0.1", &a) == 0 &&
                      egress_cidr_contains(&cidr, &a) && egress_addr_parse("10.16.0.1", &a) == 0 &&
                      !egress_cidr_contains(&cidr, &a),
              "a prefix that is not a whole byte");
        CHECK(egress_cidr_parse("::1", &cidr) == 0 && cidr.bits == 128, "a bare address is one host");
        const char *badc[] = { "", "nonsense", "10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/x", "1.2.3/8" };
        for (size_t i = 0; i < ELEMENTSOF(badc); i++)
                CHECK(egress_cidr_parse(badc[i], &cidr) == -EINVAL, "CIDR '%s' refused", badc[i]);
}

static void test_hosts(void) {
        char err[256];
        EgressHosts h;
        const char text[] = "# comment\n127.0.0.1 Allowed.Test other.test\n\n10.0.0.1\tallowed.test # two\n::1 six.test";
        CHECK(egress_hosts_parse(text, strlen(text), &h, err, sizeof err) == 0 && h.n == 3, "hosts file parses: %s", err);
        const EgressHostsEntry *e = egress_hosts_find(&h, "allowed.test");
        CHECK(e && e->n == 2 && e->addrs[1].a[0] == 10, "a name listed twice gets both addresses");
        e = egress_hosts_find(&h, "six.test");
        CHECK(e && e->n == 1 && e->addrs[0].family == AF_INET6, "an IPv6 line without a final newline");
        CHECK(!egress_hosts_find(&h, "nothere.test"), "an absent name");
        egress_hosts_clear(&h);
        const char bad1[] = "127.0.0.1 ok.test\nnope x.test\n", bad2[] = "127.0.0.1\n", bad3[] = "127.0.0.1 bad_name!\n";
        CHECK(egress_hosts_parse(bad1, strlen(bad1), &h, err, sizeof err) == -EINVAL && strstr(err, "line 2"),
              "a bad address: %s", err);
        CHECK(egress_hosts_parse(bad2, strlen(bad2), &h, err, sizeof err) == -EINVAL && strstr(err, "no name"),
              "an address alone: %s", err);
        CHECK(egress_hosts_parse(bad3, strlen(bad3), &h, err, sizeof err) == -EINVAL && strstr(err, "not a host"),
              "a bad name: %s", err);
}

static int req(const char *head, EgressRequest *r, char *err, size_t errlen) {
        size_t scan = 0, len = egress_head_end(head, strlen(head), &scan);
        err[0] = 0;
        if (!len)
                return -1;
        return egress_request_parse(head, len, r, err, errlen);
}

static void test_requests(void) {
        char err[256], out[1024];
        EgressRequest r;
        size_t scan = 0;
        const char part[] = "GET http://a.test/ HTTP/1.1\r\nHost: a";
        CHECK(egress_head_end(part, strlen(part), &scan) == 0 && scan == strlen(part), "an incomplete head");
        const char lf[] = "GET http://a.test/ HTTP/1.0\n\nbody";
        scan = 0;
        CHECK(egress_head_end(lf, strlen(lf), &scan) == strlen(lf) - 4, "bare LF heads end too");

        CHECK(req("CONNECT Pypi.org.:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n", &r, err, sizeof err) == 0 &&
                      r.kind == EGRESS_CONNECT && strcmp(r.host, "pypi.org") == 0 && r.port == 443,
              "CONNECT host:port: %s", err);
        CHECK(req("CONNECT [2606:4700::1111]:443 HTTP/1.1\r\n\r\n", &r, err, sizeof err) == 0 &&
                      strcmp(r.host, "2606:4700::1111") == 0,
              "CONNECT [v6]:port: %s", err);
        CHECK(req("GET http://a.test:8080/p/q?x=1#frag HTTP/1.1\r\nHost: evil.test\r\nProxy-Connection: keep-alive\r\n"
                  "Accept: */*\r\nConnection: keep-alive\r\nProxy-Authorization: Basic eA==\r\n\r\n",
                  &r, err, sizeof err) == 0 &&
                      r.kind == EGRESS_PLAIN && strcmp(r.host, "a.test") == 0 && r.port == 8080,
              "a plain request: %s", err);
        ssize_t n = egress_request_rewrite(&r, out, sizeof out);
        CHECK(n > 0 && (size_t)n == strlen("GET /p/q?x=1 HTTP/1.1\r\nHost: a.test:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n") &&
                      memcmp(out, "GET /p/q?x=1 HTTP/1.1\r\nHost: a.test:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n", (size_t)n) == 0,
              "rewritten in origin-form, Host from the URL, proxy and hop headers dropped");
        CHECK(req("GET http://a.test HTTP/1.0\n\n", &r, err, sizeof err) == 0 && r.port == 80, "no path, port 80");
        n = egress_request_rewrite(&r, out, sizeof out);
        CHECK(n > 0 && strncmp(out, "GET / HTTP/1.0\r\nHost: a.test\r\n", 30) == 0, "an empty path becomes /");
        CHECK(egress_request_rewrite(&r, out, 10) == -ENOBUFS, "a small buffer: ENOBUFS");

        const struct {
                const char *head, *words;
        } bad[] = {
                { "GET /x HTTP/1.1\r\n\r\n", "this is a proxy" },
                { "GET https://a.test/ HTTP/1.1\r\n\r\n", "CONNECT" },
                { "GET http://u:p@a.test/ HTTP/1.1\r\n\r\n", "user name" },
                { "CONNECT a.test HTTP/1.1\r\n\r\n", "host:port" },
                { "CONNECT a.test:0 HTTP/1.1\r\n\r\n", "bad port" },
                { "CONNECT a.test:99999 HTTP/1.1\r\n\r\n", "bad port" },
                { "CONNECT [zz]:443 HTTP/1.1\r\n\r\n", "IPv6" },
                { "GET http://a.test/ HTTP/2\r\n\r\n", "HTTP/1.0" },
                { "GET http://a.test/ HTTP/1.1 x\r\n\r\n", "HTTP/1.0" },
                { "G(T http://a.test/ HTTP/1.1\r\n\r\n", "bad method" },
                { "NONSENSE\r\n\r\n", "request line" },
                { "GET http://a.test/ HTTP/1.1\r\nX: 1\r\n folded\r\n\r\n", "folded" },
                { "GET http://a.test/ HTTP/1.1\r\nno colon\r\n\r\n", "Name: value" },
                { "GET http://bad_host!/ HTTP/1.1\r\n\r\n", "not a host name" },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                int st = req(bad[i].head, &r, err, sizeof err);
                CHECK(st == 400 && strstr(err, bad[i].words), "refused (%d): %s", st, err);
        }
}

int main(void) {
        test_patterns();
        test_addresses();
        test_hosts();
        test_requests();
        return tap_done();
}
