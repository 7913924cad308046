/* SPDX-License-Identifier: MIT */
/* Unit tests of proxy secrets' byte work (session/egress_tls.c): the request head with its
 * placeholders made values, the masking of values in answers read piece by piece, and the
 * sandbox CA's certificate. */
#include <errno.h>
#include <gnutls/x509.h>
#include <string.h>
#include "base/macro.h"
#include "net/egress_tls.h"
#include "tap.h"

#define PH "SBX_SECRET_TOKEN_0123456789abcdef01234567"
#define VAL "sk-the-real-value-1234"
#define PH2 "SBX_SECRET_OTHER_aaaaaaaaaaaaaaaaaaaaaaaa"
#define VAL2 "other-secret-value"

static EgressSecret secrets[2];

static void setup(void) {
        const char *h1[] = { "api.test:*", NULL }, *h2[] = { "other.test", NULL };
        char err[256];
        secrets[0] = (EgressSecret){ .name = "TOKEN", .value = VAL, .placeholder = PH, .value_len = strlen(VAL),
                                     .placeholder_len = strlen(PH) };
        secrets[1] = (EgressSecret){ .name = "OTHER", .value = VAL2, .placeholder = PH2, .value_len = strlen(VAL2),
                                     .placeholder_len = strlen(PH2) };
        (void)egress_rules_parse(h1, &secrets[0].hosts, err, sizeof err);
        (void)egress_rules_parse(h2, &secrets[1].hosts, err, sizeof err);
}

static void test_rewrite(void) {
        char out[2048];
        const char head[] = "GET /x?k=" PH " HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer " PH "\r\n"
                            "X-Two: " PH PH "\r\nX-Other: " PH2 "\r\nConnection: keep-alive\r\n"
                            "Keep-Alive: timeout=5\r\n\r\n";
        ssize_t n = egress_tls_rewrite_head(head, sizeof head - 1, secrets, 2, "api.test", 443, out, sizeof out);
        CHECK(n > 0, "a head is rewritten");
        out[n > 0 ? n : 0] = 0;
        CHECK(strstr(out, "GET /x?k=" VAL " HTTP/1.1\r\n") == out, "the request line's placeholder");
        CHECK(strstr(out, "\r\nAuthorization: Bearer " VAL "\r\n") != NULL, "a header's");
        CHECK(strstr(out, "\r\nX-Two: " VAL VAL "\r\n") != NULL, "two in a row");
        CHECK(strstr(out, "\r\nX-Other: " PH2 "\r\n") != NULL, "a secret for another host stays a placeholder");
        CHECK(!strstr(out, "keep-alive") && !strstr(out, "Keep-Alive"), "hop-by-hop headers go");
        CHECK(n > 0 && strcmp(out + n - 21, "Connection: close\r\n\r\n") == 0, "one request per connection");

        const char ohead[] = "GET /x HTTP/1.1\r\nHost: other.test\r\nAuthorization: Bearer " PH "\r\n"
                             "X-Other: " PH2 "\r\n\r\n";
        n = egress_tls_rewrite_head(ohead, sizeof ohead - 1, secrets, 2, "other.test", 443, out, sizeof out);
        out[n > 0 ? n : 0] = 0;
        CHECK(n > 0 && strstr(out, "X-Other: " VAL2 "\r\n") && strstr(out, "Bearer " PH "\r\n"),
              "for other.test: only OTHER's value");
        n = egress_tls_rewrite_head(head, sizeof head - 1, secrets, 2, "other.test", 443, out, sizeof out);
        CHECK(n == -EACCES, "a request for api.test sent through a connection to other.test gets no value");
        n = egress_tls_rewrite_head(ohead, sizeof ohead - 1, secrets, 2, "other.test", 8443, out, sizeof out);
        out[n > 0 ? n : 0] = 0;
        CHECK(n > 0 && strstr(out, "X-Other: " PH2 "\r\n"), "a port the secret does not list: nothing");

        const char ws[] = "GET /ws HTTP/1.1\nHost: api.test\nUpgrade: websocket\nConnection: Upgrade\n\n";
        n = egress_tls_rewrite_head(ws, sizeof ws - 1, secrets, 2, "api.test", 443, out, sizeof out);
        out[n > 0 ? n : 0] = 0;
        CHECK(n > 0 && strstr(out, "Connection: Upgrade\r\n") && !strstr(out, "close"), "an Upgrade keeps its Connection");

        /* A value goes only to the host the connection was made to: not to another Host header
         * or absolute target (a front that routes by Host would hand it to another tenant). */
        const char vhost[] = "GET / HTTP/1.1\r\nHost: attacker.example\r\nAuthorization: Bearer " PH "\r\n\r\n";
        CHECK(egress_tls_rewrite_head(vhost, sizeof vhost - 1, secrets, 2, "api.test", 443, out, sizeof out) == -EACCES,
              "a placeholder in a request whose Host names another host: -EACCES");
        const char abs[] = "GET https://attacker.example/x HTTP/1.1\r\nHost: api.test\r\nX: " PH "\r\n\r\n";
        CHECK(egress_tls_rewrite_head(abs, sizeof abs - 1, secrets, 2, "api.test", 443, out, sizeof out) == -EACCES,
              "... or whose absolute target does");
        const char port[] = "GET / HTTP/1.1\r\nHost: api.test:8443\r\nX: " PH "\r\n\r\n";
        CHECK(egress_tls_rewrite_head(port, sizeof port - 1, secrets, 2, "api.test", 443, out, sizeof out) == -EACCES,
              "... or another port");
        const char same[] = "GET https://API.test:443/x HTTP/1.1\r\nHost: Api.Test.\r\nX: " PH "\r\n\r\n";
        n = egress_tls_rewrite_head(same, sizeof same - 1, secrets, 2, "api.test", 443, out, sizeof out);
        out[n > 0 ? n : 0] = 0;
        CHECK(n > 0 && strstr(out, "X: " VAL "\r\n"), "the same host however written gets the value");
        const char noph[] = "GET / HTTP/1.1\r\nHost: elsewhere.example\r\n\r\n";
        CHECK(egress_tls_rewrite_head(noph, sizeof noph - 1, secrets, 2, "api.test", 443, out, sizeof out) > 0,
              "another Host without a placeholder goes on as it is");

        const char partial[] = "GET / HTTP/1.1\r\nX: SBX_SECRET_TOKEN_0123\r\nY: SBX_SECRET_\r\n\r\n";
        n = egress_tls_rewrite_head(partial, sizeof partial - 1, secrets, 2, "api.test", 443, out, sizeof out);
        out[n > 0 ? n : 0] = 0;
        CHECK(n > 0 && !strstr(out, VAL), "a placeholder cut short is no placeholder");
        CHECK(egress_tls_rewrite_head(head, sizeof head - 1, secrets, 2, "api.test", 443, out, 40) == -ENOBUFS,
              "too small an output: -ENOBUFS");
}

/* Feeds text to the scrubber in pieces of `step` bytes, as the proxy does (what is held goes
 * first next time), and returns what the client would get. */
static char *scrub_in_pieces(const char *text, size_t step) {
        static char got[4096];
        char buf[4096];
        size_t len = 0, glen = 0, total = strlen(text), at = 0;
        while (at < total || len) {
                size_t k = MIN(step, total - at);
                memcpy(buf + len, text + at, k);
                len += k;
                at += k;
                bool end = at == total;
                size_t ready = egress_tls_scrub(buf, len, secrets, 2, end);
                memcpy(got + glen, buf, ready);
                glen += ready;
                memmove(buf, buf + ready, len - ready);
                len -= ready;
                if (end && len) {
                        memcpy(got + glen, buf, len);
                        glen += len;
                        len = 0;
                }
        }
        got[glen] = 0;
        return got;
}

static void test_scrub(void) {
        const char *text = "echo: Bearer " VAL " and " VAL2 " and sk-the-real partial, end sk-the";
        const char *want = "echo: Bearer ********************** and ****************** and sk-the-real partial, end sk-the";
        bool all = true;
        for (size_t step = 1; step <= strlen(text); step++)
                all = all && strcmp(scrub_in_pieces(text, step), want) == 0;
        CHECK(all, "values are masked whatever the pieces, and the rest is kept: %s", scrub_in_pieces(text, 5));
        /* The tail held is the longest value's length less one, whatever it holds: a tail that
         * starts a value and one that does not go the same way (a prefix oracle otherwise). */
        char pre[] = "answer: abcdefghijklmnopqrstuvwxyz sk-the-real-v";
        char non[] = "answer: abcdefghijklmnopqrstuvwxyz xx-the-real-v";
        size_t keep = strlen(pre) - (strlen(VAL) - 1);
        CHECK(egress_tls_scrub(pre, strlen(pre), secrets, 2, false) == keep, "a tail that may start a value waits");
        CHECK(egress_tls_scrub(non, strlen(non), secrets, 2, false) == keep,
              "a tail that cannot start one waits as long: no difference to learn from");
        CHECK(egress_tls_scrub(pre, strlen(pre), secrets, 2, true) == strlen(pre), "... unless it is the end");
        char b[] = "abc sk-the-real-v";
        CHECK(egress_tls_scrub(b, strlen(b), secrets, 2, false) == 0, "a short answer waits whole");
        EgressSecret shortv = { .value = "abc", .value_len = 3 };
        char c[] = "abc abc";
        CHECK(egress_tls_scrub(c, 7, &shortv, 1, false) == 7 && strcmp(c, "abc abc") == 0,
              "values under 8 bytes are not looked for");
}

static void test_ca(void) {
        EgressCa *ca = NULL;
        CHECK(egress_ca_new("x", &ca) == 0 && ca, "a CA is made");
        const char *pem = ca ? egress_ca_pem(ca) : "";
        CHECK(strncmp(pem, "-----BEGIN CERTIFICATE-----", 27) == 0 && !strstr(pem, "PRIVATE KEY"),
              "its PEM is the certificate alone");
        gnutls_x509_crt_t crt;
        gnutls_datum_t d = { .data = (unsigned char *)pem, .size = (unsigned)strlen(pem) };
        unsigned critical = 0, ca_flag = 0;
        int ok = gnutls_x509_crt_init(&crt) == 0 && gnutls_x509_crt_import(crt, &d, GNUTLS_X509_FMT_PEM) == 0;
        CHECK(ok && gnutls_x509_crt_get_basic_constraints(crt, &critical, &ca_flag, NULL) >= 0 && ca_flag,
              "it is a CA certificate");
        if (ok)
                gnutls_x509_crt_deinit(crt);
        EgressCa *ca2 = NULL;
        CHECK(egress_ca_new("x", &ca2) == 0 && strcmp(egress_ca_pem(ca2), pem) != 0, "each CA is its own");
        egress_ca_free(ca2);
        egress_ca_free(ca);
}

int main(void) {
        setup();
        test_rewrite();
        test_scrub();
        test_ca();
        egress_rules_clear(&secrets[0].hosts);
        egress_rules_clear(&secrets[1].hosts);
        return tap_done();
}
