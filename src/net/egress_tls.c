/* SPDX-License-Identifier: MIT */
/* Secrets the commands never see: a sandbox's CA, the servers' trust, and the CONNECTs whose
 * TLS the proxy ends (GnuTLS, non-blocking, in the daemon's loop).
 *
 * A terminated CONNECT holds two sessions: `srv` is the proxy as the server of the sandbox's
 * client (on the client's socket, with a leaf certificate for the CONNECT's host signed by the
 * sandbox's CA), `cli` the proxy as the client of the real server (its certificate checked
 * against the host's trust store and the operator's CAs, for that host name). Both handshakes
 * run at once. Then the client's first request head is read whole (at most
 * SBX_EGRESS_HEAD_BYTES), its placeholders become values (egress_tls_rewrite_head) and it goes
 * to the server; everything after it goes as it is. What the server answers goes back with
 * every secret's value masked (egress_tls_scrub), across records: the tail that could begin a
 * value waits for the next bytes, or for the proxy's release (at most SBX_EGRESS_TLS_HOLD_MS
 * later), whatever it holds.
 *
 * GnuTLS with a non-blocking transport: an operation that cannot go on returns
 * GNUTLS_E_AGAIN and gnutls_record_get_direction() says whether it waits to read or to write;
 * it is then called again with the same arguments (a send with the same bytes). Each buffer
 * is bounded (SBX_EGRESS_TLS_BUF_BYTES), and a side is read only while its buffer has room. */
#include <errno.h>
#include <stdarg.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include "base/limits.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/util.h"
#include "net/egress_tls.h"

/* ---------------------------------------------------------------- secrets */

bool egress_secrets_want(const EgressSecret *s, size_t n, const char *host, int port) {
        for (size_t i = 0; i < n; i++)
                if (egress_rules_match(&s[i].hosts, host, port))
                        return true;
        return false;
}

typedef struct Out {
        char *p;
        size_t len, cap;
        bool over;
} Out;

static void put(Out *o, const char *s, size_t n) {
        if (o->over || o->cap - o->len < n) {
                o->over = true;
                return;
        }
        memcpy(o->p + o->len, s, n);
        o->len += n;
}

/* Puts line with every placeholder of the secrets that list host:port replaced. */
static void put_replaced(Out *o, const char *line, size_t len, const EgressSecret *s, size_t n, const char *host,
                         int port) {
        size_t i = 0, from = 0;
        while (i < len) {
                const EgressSecret *hit = NULL;
                /* Every placeholder starts "SBX_SECRET_": only there can one begin. */
                if (line[i] == 'S' && len - i >= 11 && memcmp(line + i, "SBX_SECRET_", 11) == 0)
                        for (size_t k = 0; k < n && !hit; k++)
                                if (s[k].placeholder_len <= len - i &&
                                    memcmp(line + i, s[k].placeholder, s[k].placeholder_len) == 0 &&
                                    egress_rules_match(&s[k].hosts, host, port))
                                        hit = &s[k];
                if (!hit) {
                        i++;
                        continue;
                }
                put(o, line + from, i - from);
                put(o, hit->value, hit->value_len);
                i += hit->placeholder_len;
                from = i;
        }
        put(o, line + from, len - from);
}

static bool header_is(const char *line, size_t len, const char *name) {
        size_t nl = strlen(name);
        return len > nl && line[nl] == ':' && strncasecmp(line, name, nl) == 0;
}

/* Whether an authority ("name", "name:port", "[v6]:port") names host on port (no port: any). */
static bool names_host(const char *a, size_t len, const char *host, int port) {
        while (len && (a[0] == ' ' || a[0] == '\t'))
                a++, len--;
        while (len && (a[len - 1] == ' ' || a[len - 1] == '\t'))
                len--;
        const char *at = memchr(a, '@', len); /* userinfo in an absolute target */
        if (at) {
                len -= (size_t)(at + 1 - a);
                a = at + 1;
        }
        size_t name_len = len;
        const char *colon = NULL;
        if (len && a[0] == '[') {
                const char *close = memchr(a, ']', len);
                if (!close)
                        return false;
                name_len = (size_t)(close - a) + 1;
                colon = name_len < len && a[name_len] == ':' ? a + name_len : NULL;
                if (!colon && name_len != len)
                        return false;
        } else if ((colon = memchr(a, ':', len))) {
                name_len = (size_t)(colon - a);
        }
        if (colon) {
                char *end;
                char num[8];
                size_t pl = len - (size_t)(colon + 1 - a);
                if (pl == 0 || pl >= sizeof num)
                        return false;
                memcpy(num, colon + 1, pl);
                num[pl] = 0;
                long p = strtol(num, &end, 10);
                if (*end || p != port)
                        return false;
        }
        char norm[256];
        if (name_len && a[0] == '[') /* an address in brackets: compared as written */
                return name_len - 2 == strlen(host) && strncasecmp(a + 1, host, name_len - 2) == 0;
        return egress_host_normalize(a, name_len, norm, sizeof norm) == 0 && strcmp(norm, host) == 0;
}

/* The authority of an absolute-form target ("https://name:port/path"), or NULL for any other
 * form; its length in *len. */
static const char *target_authority(const char *line, size_t len, size_t *alen) {
        const char *sp = memchr(line, ' ', len);
        if (!sp)
                return NULL;
        const char *t = sp + 1;
        size_t left = len - (size_t)(t - line);
        size_t skip = left >= 7 && strncasecmp(t, "http://", 7) == 0     ? 7
                      : left >= 8 && strncasecmp(t, "https://", 8) == 0 ? 8
                                                                          : 0;
        if (!skip)
                return NULL;
        t += skip;
        left -= skip;
        /* The head is not NUL-terminated: the scan stops at its end too. */
        size_t n = 0;
        while (n < left && !memchr("/?# \r\n", t[n], 6))
                n++;
        *alen = n;
        return t;
}

/* Whether a line of the head holds the placeholder of a secret for host:port. */
static bool has_placeholder(const char *line, size_t len, const EgressSecret *s, size_t n, const char *host, int port) {
        for (size_t k = 0; k < n; k++)
                if (s[k].placeholder_len && memmem(line, len, s[k].placeholder, s[k].placeholder_len) &&
                    egress_rules_match(&s[k].hosts, host, port))
                        return true;
        return false;
}

ssize_t egress_tls_rewrite_head(const char *head, size_t len, const EgressSecret *s, size_t n, const char *host,
                                int port, char *out, size_t outlen) {
        Out o = { .p = out, .cap = outlen };
        bool upgrade = false, elsewhere = false, placeholder = false;
        /* First pass: a request that asks for an Upgrade (a WebSocket) keeps its Connection
         * header, which names it; a request whose Host or absolute target names another host
         * than the one the connection was made to gets no value (a front that routes by Host
         * would hand it to another tenant). */
        for (size_t i = 0; i < len;) {
                const char *nl = memchr(head + i, '\n', len - i);
                size_t e = nl ? (size_t)(nl - head) + 1 : len;
                size_t body = e - i;
                while (body > 0 && (head[i + body - 1] == '\n' || head[i + body - 1] == '\r'))
                        body--;
                size_t alen;
                const char *auth = i == 0 ? target_authority(head, body, &alen) : NULL;
                if (auth && !names_host(auth, alen, host, port))
                        elsewhere = true;
                if (i > 0 && header_is(head + i, body, "Host") && !names_host(head + i + 5, body - 5, host, port))
                        elsewhere = true;
                if (header_is(head + i, body, "Upgrade"))
                        upgrade = true;
                placeholder = placeholder || has_placeholder(head + i, body, s, n, host, port);
                i = e;
        }
        if (elsewhere && placeholder)
                return -EACCES;
        bool first = true;
        for (size_t i = 0; i < len;) {
                const char *nl = memchr(head + i, '\n', len - i);
                size_t e = nl ? (size_t)(nl - head) + 1 : len;
                const char *line = head + i;
                size_t ll = e - i, body = ll;
                while (body > 0 && (line[body - 1] == '\n' || line[body - 1] == '\r'))
                        body--;
                i = e;
                if (body == 0) { /* the blank line that ends the head */
                        if (!upgrade)
                                put(&o, "Connection: close\r\n", 19);
                        put(&o, "\r\n", 2);
                        break;
                }
                if (!first && !upgrade &&
                    (header_is(line, body, "Connection") || header_is(line, body, "Keep-Alive") ||
                     header_is(line, body, "Proxy-Connection")))
                        continue;
                first = false;
                put_replaced(&o, line, body, s, n, host, port);
                put(&o, "\r\n", 2);
        }
        return o.over ? -ENOBUFS : (ssize_t)o.len;
}

size_t egress_tls_scrub(char *buf, size_t len, const EgressSecret *s, size_t n, bool end) {
        size_t longest = 0;
        for (size_t k = 0; k < n; k++) {
                size_t vl = s[k].value_len;
                if (vl < SBX_REDACT_MIN_SECRET_BYTES)
                        continue;
                longest = MAX(longest, vl);
                for (char *p = buf; (size_t)(p - buf) + vl <= len;) {
                        char *m = memmem(p, len - (size_t)(p - buf), s[k].value, vl);
                        if (!m)
                                break;
                        memset(m, '*', vl);
                        p = m + vl;
                }
        }
        /* The tail that could hide the start of a value is held whatever it holds: holding only
         * a tail that is a value's start would tell the sandbox, by what it receives and when,
         * whether the bytes it got the server to send back begin the value. */
        return end || !longest ? len : len - MIN(len, longest - 1);
}


/* ---------------------------------------------------------------- certificates */

struct EgressCa {
        gnutls_x509_privkey_t key;      /* the CA's */
        gnutls_x509_crt_t crt;
        gnutls_x509_privkey_t leaf_key; /* one key for all its leaves */
        char *pem;
        unsigned char ski[64];
        size_t ski_len;
        /* Leaf credentials by host; refs: connections using one (it is not dropped then). */
        struct Leaf {
                char *host;
                gnutls_certificate_credentials_t cred;
                unsigned refs;
                uint64_t used;
        } leaves[SBX_EGRESS_TLS_LEAF_CACHE];
        uint64_t clock;
};

static int set_serial(gnutls_x509_crt_t crt) {
        unsigned char serial[16];
        if (getrandom(serial, sizeof serial, 0) != (ssize_t)sizeof serial)
                return -EIO;
        serial[0] &= 0x7f; /* a positive number */
        serial[0] |= 0x01; /* ... of 16 bytes */
        return gnutls_x509_crt_set_serial(crt, serial, sizeof serial) < 0 ? -EIO : 0;
}

static int new_key(gnutls_x509_privkey_t *ret) {
        if (gnutls_x509_privkey_init(ret) < 0)
                return -ENOMEM;
        if (gnutls_x509_privkey_generate(*ret, GNUTLS_PK_ECDSA, GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0) <
            0) {
                gnutls_x509_privkey_deinit(*ret);
                *ret = NULL;
                return -EIO;
        }
        return 0;
}

EgressCa *egress_ca_free(EgressCa *ca) {
        if (!ca)
                return NULL;
        for (size_t i = 0; i < SBX_EGRESS_TLS_LEAF_CACHE; i++)
                if (ca->leaves[i].host) {
                        free(ca->leaves[i].host);
                        gnutls_certificate_free_credentials(ca->leaves[i].cred);
                }
        if (ca->crt)
                gnutls_x509_crt_deinit(ca->crt);
        /* deinit wipes the keys' numbers. */
        if (ca->key)
                gnutls_x509_privkey_deinit(ca->key);
        if (ca->leaf_key)
                gnutls_x509_privkey_deinit(ca->leaf_key);
        free(ca->pem);
        free(ca);
        return NULL;
}

int egress_ca_new(const char *id, EgressCa **ret) {
        EgressCa *ca = calloc(1, sizeof *ca);
        if (!ca)
                return -ENOMEM;
        int r = new_key(&ca->key);
        if (r >= 0)
                r = new_key(&ca->leaf_key);
        if (r >= 0 && gnutls_x509_crt_init(&ca->crt) < 0)
                r = -ENOMEM;
        if (r < 0) {
                egress_ca_free(ca);
                return r;
        }
        char cn[128];
        snprintf(cn, sizeof cn, "sbx sandbox %.40s CA", id);
        time_t now = time(NULL);
        gnutls_datum_t pem = { 0 };
        ca->ski_len = sizeof ca->ski;
        if (gnutls_x509_crt_set_version(ca->crt, 3) < 0 || set_serial(ca->crt) < 0 ||
            gnutls_x509_crt_set_activation_time(ca->crt, now - 3600) < 0 ||
            gnutls_x509_crt_set_expiration_time(ca->crt, now + (time_t)SBX_EGRESS_TLS_CA_DAYS * 86400) < 0 ||
            gnutls_x509_crt_set_dn_by_oid(ca->crt, GNUTLS_OID_X520_ORGANIZATION_NAME, 0, "sbx", 3) < 0 ||
            gnutls_x509_crt_set_dn_by_oid(ca->crt, GNUTLS_OID_X520_COMMON_NAME, 0, cn, (unsigned)strlen(cn)) < 0 ||
            gnutls_x509_crt_set_key(ca->crt, ca->key) < 0 || gnutls_x509_crt_set_basic_constraints(ca->crt, 1, 0) < 0 ||
            gnutls_x509_crt_set_key_usage(ca->crt, GNUTLS_KEY_KEY_CERT_SIGN | GNUTLS_KEY_CRL_SIGN) < 0 ||
            gnutls_x509_privkey_get_key_id(ca->key, GNUTLS_KEYID_USE_SHA1, ca->ski, &ca->ski_len) < 0 ||
            gnutls_x509_crt_set_subject_key_id(ca->crt, ca->ski, ca->ski_len) < 0 ||
            gnutls_x509_crt_sign2(ca->crt, ca->crt, ca->key, GNUTLS_DIG_SHA256, 0) < 0 ||
            gnutls_x509_crt_export2(ca->crt, GNUTLS_X509_FMT_PEM, &pem) < 0) {
                egress_ca_free(ca);
                return -EIO;
        }
        ca->pem = strndup((const char *)pem.data, pem.size);
        gnutls_free(pem.data);
        if (!ca->pem) {
                egress_ca_free(ca);
                return -ENOMEM;
        }
        *ret = ca;
        return 0;
}

const char *egress_ca_pem(const EgressCa *ca) { return ca->pem; }

/* A leaf for host: its SubjectAltName is the name (or the IPv4 address), signed by ca. */
static int leaf_make(EgressCa *ca, const char *host, gnutls_certificate_credentials_t *ret) {
        gnutls_x509_crt_t crt;
        if (gnutls_x509_crt_init(&crt) < 0)
                return -ENOMEM;
        EgressAddr a;
        bool ip = egress_addr_parse(host, &a) == 0;
        time_t now = time(NULL);
        int r = 0;
        if (gnutls_x509_crt_set_version(crt, 3) < 0 || set_serial(crt) < 0 ||
            gnutls_x509_crt_set_activation_time(crt, now - 3600) < 0 ||
            gnutls_x509_crt_set_expiration_time(crt, now + (time_t)SBX_EGRESS_TLS_LEAF_DAYS * 86400) < 0 ||
            gnutls_x509_crt_set_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, host, (unsigned)strlen(host)) < 0 ||
            (ip ? gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_IPADDRESS, a.a, a.family == AF_INET ? 4 : 16,
                                                       GNUTLS_FSAN_SET)
                : gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_DNSNAME, host, (unsigned)strlen(host),
                                                       GNUTLS_FSAN_SET)) < 0 ||
            gnutls_x509_crt_set_key(crt, ca->leaf_key) < 0 || gnutls_x509_crt_set_basic_constraints(crt, 0, -1) < 0 ||
            gnutls_x509_crt_set_key_usage(crt, GNUTLS_KEY_DIGITAL_SIGNATURE) < 0 ||
            gnutls_x509_crt_set_key_purpose_oid(crt, GNUTLS_KP_TLS_WWW_SERVER, 0) < 0 ||
            gnutls_x509_crt_set_authority_key_id(crt, ca->ski, ca->ski_len) < 0 ||
            gnutls_x509_crt_sign2(crt, ca->crt, ca->key, GNUTLS_DIG_SHA256, 0) < 0)
                r = -EIO;
        gnutls_certificate_credentials_t cred = NULL;
        if (r == 0 && gnutls_certificate_allocate_credentials(&cred) < 0)
                r = -ENOMEM;
        /* The chain the client gets: the leaf, then the CA (which it has already). */
        gnutls_x509_crt_t chain[2] = { crt, ca->crt };
        if (r == 0 && gnutls_certificate_set_x509_key(cred, chain, 2, ca->leaf_key) < 0)
                r = -EIO;
        gnutls_x509_crt_deinit(crt);
        if (r < 0) {
                if (cred)
                        gnutls_certificate_free_credentials(cred);
                return r;
        }
        *ret = cred;
        return 0;
}

/* The cached leaf for host, made when absent (replacing the least recently used one that no
 * connection uses). Takes a reference: leaf_put() gives it back. */
static struct Leaf *leaf_get(EgressCa *ca, const char *host, int *ret_err) {
        struct Leaf *free_slot = NULL, *old = NULL;
        for (size_t i = 0; i < SBX_EGRESS_TLS_LEAF_CACHE; i++) {
                struct Leaf *l = &ca->leaves[i];
                if (l->host && strcmp(l->host, host) == 0) {
                        l->refs++;
                        l->used = ++ca->clock;
                        return l;
                }
                if (!l->host && !free_slot)
                        free_slot = l;
                else if (l->host && !l->refs && (!old || l->used < old->used))
                        old = l;
        }
        struct Leaf *l = free_slot ? free_slot : old;
        if (!l) {
                *ret_err = -EBUSY;
                return NULL;
        }
        gnutls_certificate_credentials_t cred;
        char *h = strdup(host);
        int r = h ? leaf_make(ca, host, &cred) : -ENOMEM;
        if (r < 0) {
                free(h);
                *ret_err = r;
                return NULL;
        }
        if (l->host) {
                free(l->host);
                gnutls_certificate_free_credentials(l->cred);
        }
        *l = (struct Leaf){ .host = h, .cred = cred, .refs = 1, .used = ++ca->clock };
        return l;
}

/* ---------------------------------------------------------------- the servers' trust */

struct EgressTrust {
        gnutls_certificate_credentials_t cred;
        unsigned refs;
};

EgressTrust *egress_trust_unref(EgressTrust *t) {
        if (t && --t->refs == 0) {
                gnutls_certificate_free_credentials(t->cred);
                free(t);
        }
        return NULL;
}

int egress_trust_new(const char *ca_file, EgressTrust **ret, char *err, size_t errlen) {
        EgressTrust *t = calloc(1, sizeof *t);
        if (!t || gnutls_certificate_allocate_credentials(&t->cred) < 0) {
                free(t);
                return -ENOMEM;
        }
        t->refs = 1;
        /* The host's store may be empty (a minimal image): then only the operator's CAs. */
        (void)gnutls_certificate_set_x509_system_trust(t->cred);
        if (ca_file) {
                _cleanup_free_ uint8_t *text = NULL;
                size_t len;
                int r = read_file_whole(ca_file, SBX_MAX_EGRESS_CA_FILE_BYTES, &text, &len);
                if (r < 0) {
                        snprintf(err, errlen, "%s: %s", ca_file,
                                 r == -EFBIG ? "not a regular file of at most 1 MiB" : strerror(-r));
                        egress_trust_unref(t);
                        return r == -EFBIG ? -EINVAL : r;
                }
                gnutls_datum_t d = { .data = text, .size = (unsigned)len };
                int n = gnutls_certificate_set_x509_trust_mem(t->cred, &d, GNUTLS_X509_FMT_PEM);
                if (n <= 0) {
                        snprintf(err, errlen, "%s: no PEM certificate in it%s%s", ca_file, n < 0 ? ": " : "",
                                 n < 0 ? gnutls_strerror(n) : "");
                        egress_trust_unref(t);
                        return -EINVAL;
                }
        }
        *ret = t;
        return 0;
}

/* ---------------------------------------------------------------- a terminated CONNECT */

/* Bytes on their way from one side to the other: [off, len) to send; a send that returned
 * GNUTLS_E_AGAIN is repeated with the same `sending` bytes. */
typedef struct Buf {
        char *p;
        size_t len, off, cap, sending;
} Buf;

/* A socket as GnuTLS's transport: pre holds what the proxy read before the handshake. */
typedef struct Side {
        struct EgressTls *t;
        int fd;
        char *pre;
        size_t pre_len, pre_off;
} Side;

typedef enum Phase {
        TP_HEAD,  /* reading the client's request head */
        TP_BODY,  /* relaying as it comes */
        TP_FAILED /* answering the client with an error, then closing */
} Phase;

struct EgressTls {
        gnutls_session_t srv, cli; /* the client's side, the server's */
        Side side[2];
        struct Leaf *leaf;
        EgressCa *ca;
        EgressTrust *trust; /* a reference */
        const EgressSecret *s;
        size_t n;
        char host[256];
        int port;
        bool hs_done[2];
        Phase phase;
        Buf up, down;            /* client to server, server to client */
        size_t down_ready;       /* down: [off, ready) may go, [ready, len) waits (egress_tls_scrub) */
        bool up_eof, down_eof;   /* a side said it sends no more */
        int bye[2];              /* the close sent to side i: 0 not yet, 1 under way, 2 sent */
        uint32_t want[2];        /* what each side's last GNUTLS_E_AGAIN waits for */
        char failure[400];
        int failure_status;
        bool failure_told, relayed;
        uint64_t moved; /* reads and writes done: a round that adds none moved nothing */
};

static ssize_t side_pull(gnutls_transport_ptr_t p, void *buf, size_t len) {
        Side *sd = p;
        if (sd->pre_off < sd->pre_len) {
                size_t k = MIN(len, sd->pre_len - sd->pre_off);
                memcpy(buf, sd->pre + sd->pre_off, k);
                sd->pre_off += k;
                return (ssize_t)k;
        }
        ssize_t n;
        do
                n = recv(sd->fd, buf, len, MSG_DONTWAIT);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                gnutls_transport_set_errno(sd->t->side == sd ? sd->t->srv : sd->t->cli, errno);
        return n;
}

static ssize_t side_push(gnutls_transport_ptr_t p, const void *buf, size_t len) {
        Side *sd = p;
        ssize_t n;
        do
                n = send(sd->fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                gnutls_transport_set_errno(sd->t->side == sd ? sd->t->srv : sd->t->cli, errno);
        return n;
}

static const gnutls_datum_t http11 = { (unsigned char *)"http/1.1", 8 };

EgressTls *egress_tls_free(EgressTls *t) {
        if (!t)
                return NULL;
        if (t->srv)
                gnutls_deinit(t->srv);
        if (t->cli)
                gnutls_deinit(t->cli);
        if (t->leaf)
                t->leaf->refs--;
        egress_trust_unref(t->trust);
        free(t->side[0].pre);
        /* The head held the values once rewritten, and an answer may have held one before it
         * was masked: both wiped, not just freed. */
        if (t->up.p)
                explicit_bzero(t->up.p, t->up.cap);
        if (t->down.p)
                explicit_bzero(t->down.p, t->down.cap);
        free(t->up.p);
        free(t->down.p);
        free(t);
        return NULL;
}

int egress_tls_new(EgressCa *ca, EgressTrust *trust, const EgressSecret *s, size_t n, const char *host, int port,
                   int cfd, int sfd, const void *pre, size_t pre_len, EgressTls **ret) {
        EgressTls *t = calloc(1, sizeof *t);
        if (!t)
                return -ENOMEM;
        int err = 0;
        t->ca = ca;
        t->trust = trust;
        trust->refs++;
        t->s = s;
        t->n = n;
        t->port = port;
        snprintf(t->host, sizeof t->host, "%s", host);
        size_t maxv = 0;
        for (size_t i = 0; i < n; i++)
                maxv = MAX(maxv, s[i].value_len);
        t->up.cap = SBX_EGRESS_HEAD_BYTES;
        t->down.cap = SBX_EGRESS_TLS_BUF_BYTES + maxv;
        t->up.p = malloc(t->up.cap);
        t->down.p = malloc(t->down.cap);
        for (int i = 0; i < 2; i++)
                t->side[i] = (Side){ .t = t, .fd = i ? sfd : cfd };
        if (pre_len && (t->side[0].pre = malloc(pre_len)))
                memcpy(t->side[0].pre, pre, pre_len);
        t->side[0].pre_len = t->side[0].pre ? pre_len : 0;
        if (!t->up.p || !t->down.p || (pre_len && !t->side[0].pre)) {
                egress_tls_free(t);
                return -ENOMEM;
        }
        t->leaf = leaf_get(ca, host, &err);
        if (!t->leaf) {
                egress_tls_free(t);
                return err;
        }
        EgressAddr a;
        bool ip = egress_addr_parse(host, &a) == 0;
        if (gnutls_init(&t->srv, GNUTLS_SERVER | GNUTLS_NONBLOCK | GNUTLS_NO_SIGNAL) < 0 ||
            gnutls_init(&t->cli, GNUTLS_CLIENT | GNUTLS_NONBLOCK | GNUTLS_NO_SIGNAL) < 0) {
                egress_tls_free(t);
                return -ENOMEM;
        }
        /* Both speak HTTP/1.1 only (ALPN): the proxy reads request heads, not HTTP/2 frames. */
        if (gnutls_set_default_priority(t->srv) < 0 ||
            gnutls_credentials_set(t->srv, GNUTLS_CRD_CERTIFICATE, t->leaf->cred) < 0 ||
            gnutls_alpn_set_protocols(t->srv, &http11, 1, 0) < 0 || gnutls_set_default_priority(t->cli) < 0 ||
            gnutls_credentials_set(t->cli, GNUTLS_CRD_CERTIFICATE, trust->cred) < 0 ||
            gnutls_alpn_set_protocols(t->cli, &http11, 1, 0) < 0 ||
            (!ip && gnutls_server_name_set(t->cli, GNUTLS_NAME_DNS, t->host, strlen(t->host)) < 0)) {
                egress_tls_free(t);
                return -EIO;
        }
        gnutls_certificate_server_set_request(t->srv, GNUTLS_CERT_IGNORE);
        /* The server's certificate must be valid for the host the CONNECT named. */
        gnutls_session_set_verify_cert(t->cli, t->host, 0);
        gnutls_session_t ss[2] = { t->srv, t->cli };
        for (int i = 0; i < 2; i++) {
                gnutls_transport_set_ptr(ss[i], &t->side[i]);
                gnutls_transport_set_pull_function(ss[i], side_pull);
                gnutls_transport_set_push_function(ss[i], side_push);
        }
        *ret = t;
        return 0;
}

static _printf_(3, 4) void fail(EgressTls *t, int status, const char *fmt, ...) {
        if (t->failure[0])
                return;
        t->failure_status = status;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(t->failure, sizeof t->failure, fmt, ap);
        va_end(ap);
}

const char *egress_tls_take_failure(EgressTls *t, int *status) {
        if (!t->failure[0] || t->failure_told)
                return NULL;
        t->failure_told = true;
        *status = t->failure_status;
        return t->failure;
}

bool egress_tls_relayed(const EgressTls *t) { return t->relayed; }

/* Notes what side i's session waits for after GNUTLS_E_AGAIN. */
static void wait_on(EgressTls *t, int i) {
        gnutls_session_t s = i ? t->cli : t->srv;
        t->want[i] |= gnutls_record_get_direction(s) ? EPOLLOUT : EPOLLIN;
}

/* Queues the error the client gets in its TLS: the proxy's answer, then the close. */
static void answer_failure(EgressTls *t) {
        const char *text = t->failure_status == 431   ? "Request Header Fields Too Large"
                           : t->failure_status == 403 ? "Forbidden"
                                                      : "Bad Gateway";
        t->phase = TP_FAILED;
        int n = snprintf(t->down.p, t->down.cap,
                         "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %zu\r\n"
                         "Connection: close\r\nX-Sbx-Egress: refused\r\n\r\nsbx: %s\n",
                         t->failure_status, text, strlen(t->failure) + 6, t->failure);
        t->down.len = n > 0 ? MIN((size_t)n, t->down.cap) : 0;
        t->down.off = 0;
        t->down_ready = t->down.len;
        t->down_eof = true;
}

/* Side i's handshake. Returns 1 done, 0 waiting, -1 failed (the client's: cut off). */
static int handshake(EgressTls *t, int i) {
        if (t->hs_done[i])
                return 1;
        gnutls_session_t s = i ? t->cli : t->srv;
        int r = gnutls_handshake(s);
        if (r == GNUTLS_E_SUCCESS) {
                t->hs_done[i] = true;
                return 1;
        }
        if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED || !gnutls_error_is_fatal(r)) {
                wait_on(t, i);
                return 0;
        }
        if (i == 0) {
                log_debug("egress TLS to %s: the sandbox's client: %s", t->host, gnutls_strerror(r));
                return -1;
        }
        /* The server's side: the client is told, in its own TLS, why. */
        char why[256];
        snprintf(why, sizeof why, "%s", gnutls_strerror(r));
        if (r == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR || r == GNUTLS_E_CERTIFICATE_ERROR) {
                gnutls_datum_t d = { 0 };
                unsigned st = gnutls_session_get_verify_cert_status(s);
                if (gnutls_certificate_verification_status_print(st, GNUTLS_CRT_X509, &d, 0) == 0) {
                        snprintf(why, sizeof why, "%.*s", (int)MIN(d.size, 200U), d.data);
                        gnutls_free(d.data);
                }
                fail(t, 502, "the certificate of %s is not trusted: %s", t->host, why);
        } else {
                fail(t, 502, "TLS with %s failed: %s", t->host, why);
        }
        return 0;
}

/* Reads from side i into b (at most room bytes at b->p + b->len). Returns bytes read, 0 when
 * there are none now, -1 at the side's end (close, or a connection cut). */
static ssize_t tls_read(EgressTls *t, int i, Buf *b, size_t room) {
        gnutls_session_t s = i ? t->cli : t->srv;
        ssize_t r = gnutls_record_recv(s, b->p + b->len, room);
        if (r > 0) {
                b->len += (size_t)r;
                t->moved++;
                return r;
        }
        if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED) {
                wait_on(t, i);
                return 0;
        }
        if (r < 0 && !gnutls_error_is_fatal((int)r)) {
                wait_on(t, i); /* an alert or a renegotiation asked for: the side speaks again */
                return 0;
        }
        /* 0 is a close_notify; a TCP close without one (GNUTLS_E_PREMATURE_TERMINATION) ends
         * what that side sends too: HTTP's own framing says whether it was complete. */
        return -1;
}

/* Writes [off, limit) of b to side i. Returns 0, or -1 when the side is gone. */
static int tls_write(EgressTls *t, int i, Buf *b, size_t limit) {
        gnutls_session_t s = i ? t->cli : t->srv;
        while (b->off < limit) {
                size_t k = b->sending ? b->sending : MIN(limit - b->off, (size_t)16384);
                ssize_t r = gnutls_record_send(s, b->p + b->off, k);
                if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED) {
                        b->sending = k;
                        wait_on(t, i);
                        return 0;
                }
                b->sending = 0;
                if (r < 0)
                        return -1;
                b->off += (size_t)r;
                t->moved++;
        }
        return 0;
}

/* Sends side i the TLS close once what goes to it went. */
static void send_bye(EgressTls *t, int i) {
        if (t->bye[i] == 2)
                return;
        int r = gnutls_bye(i ? t->cli : t->srv, GNUTLS_SHUT_WR);
        if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED) {
                t->bye[i] = 1;
                wait_on(t, i);
                return;
        }
        t->bye[i] = 2;
        (void)shutdown(t->side[i].fd, SHUT_WR);
}

/* The client's request head, once whole: rewritten into up's buffer (or failed). */
static void head_complete(EgressTls *t, size_t head_len) {
        size_t rest = t->up.len - head_len;
        char *out = malloc(SBX_EGRESS_TLS_HEAD_OUT_BYTES + rest);
        ssize_t n = out ? egress_tls_rewrite_head(t->up.p, head_len, t->s, t->n, t->host, t->port, out,
                                                  SBX_EGRESS_TLS_HEAD_OUT_BYTES)
                        : -ENOMEM;
        if (n == -EACCES) {
                free(out);
                fail(t, 403, "a secret goes only to the host this connection was made to (%s): this request's "
                             "Host or target names another", t->host);
                answer_failure(t);
                return;
        }
        if (n < 0) {
                free(out);
                fail(t, 431, "the request's head to %s is too large", t->host);
                answer_failure(t);
                return;
        }
        memcpy(out + n, t->up.p + head_len, rest);
        explicit_bzero(t->up.p, t->up.cap);
        free(t->up.p);
        t->up = (Buf){ .p = out, .len = (size_t)n + rest, .cap = SBX_EGRESS_TLS_HEAD_OUT_BYTES + rest };
        t->phase = TP_BODY;
        t->relayed = true;
}

static bool can_read_up(const EgressTls *t) {
        return t->phase == TP_BODY && t->up.off == t->up.len && !t->up_eof;
}

static bool can_read_down(const EgressTls *t) {
        return t->phase == TP_BODY && !t->down_eof && t->down.off == t->down_ready;
}

/* One round over both directions. Returns 1 when something moved, 0 when nothing could, -1
 * when the connection must be cut. */
static int round_once(EgressTls *t) {
        uint64_t before = t->moved;
        int h0 = handshake(t, 0);
        if (h0 < 0)
                return -1;
        int h1 = t->failure[0] ? 1 : handshake(t, 1);
        if (h0 == 0)
                return 0;
        if (h1 == 0 && !t->failure[0])
                return 0; /* the head waits for the server's handshake, to know where it goes */

        /* client -> server */
        if (t->phase == TP_HEAD && !t->up_eof) {
                size_t scan = 0, head_len = 0;
                while (!head_len && t->up.len < t->up.cap) {
                        ssize_t r = tls_read(t, 0, &t->up, t->up.cap - t->up.len);
                        if (r < 0)
                                t->up_eof = true;
                        if (r <= 0)
                                break;
                        head_len = egress_head_end(t->up.p, t->up.len, &scan);
                }
                if (t->failure[0] && (head_len || t->up_eof || t->up.len == t->up.cap)) {
                        answer_failure(t);
                } else if (head_len) {
                        head_complete(t, head_len);
                } else if (t->up.len == t->up.cap) {
                        fail(t, 431, "the request's head to %s is too large", t->host);
                        answer_failure(t);
                } else if (t->up_eof) {
                        return -1; /* the client went before its request was whole */
                }
        }
        if (t->phase == TP_BODY) {
                if (can_read_up(t)) {
                        t->up.off = t->up.len = 0;
                        if (tls_read(t, 0, &t->up, MIN(t->up.cap, (size_t)SBX_EGRESS_TLS_BUF_BYTES)) < 0)
                                t->up_eof = true;
                }
                if (tls_write(t, 1, &t->up, t->up.len) < 0)
                        return -1;
                if (t->up_eof && t->up.off == t->up.len)
                        send_bye(t, 1);
        } else if (t->phase == TP_FAILED && !t->up_eof) {
                /* What the client still sends is dropped: it reads the answer, then closes. */
                t->up.len = 0;
                if (tls_read(t, 0, &t->up, t->up.cap) < 0)
                        t->up_eof = true;
        }

        /* server -> client */
        if (can_read_down(t)) {
                size_t held = t->down.len - t->down_ready;
                memmove(t->down.p, t->down.p + t->down_ready, held);
                t->down.len = held;
                t->down.off = t->down_ready = 0;
                ssize_t r = tls_read(t, 1, &t->down, t->down.cap - t->down.len);
                if (r < 0)
                        t->down_eof = true;
                if (r != 0)
                        t->down_ready = egress_tls_scrub(t->down.p, t->down.len, t->s, t->n, t->down_eof);
        }
        if (tls_write(t, 0, &t->down, t->down_ready) < 0)
                return -1;
        if (t->down_eof && t->down.off == t->down.len)
                send_bye(t, 0);

        return t->moved != before;
}

bool egress_tls_holding(const EgressTls *t) {
        return t->phase == TP_BODY && !t->down_eof && t->down_ready < t->down.len;
}

void egress_tls_release(EgressTls *t) {
        if (t->phase == TP_BODY)
                t->down_ready = t->down.len;
}

int egress_tls_pump(EgressTls *t, uint32_t ret_ev[2]) {
        for (unsigned k = 0; k < 64; k++) {
                t->want[0] = t->want[1] = 0;
                int r = round_once(t);
                if (r < 0)
                        return -1;
                /* GnuTLS may hold decrypted bytes the socket no longer signals. */
                bool pending = (t->hs_done[0] && gnutls_record_check_pending(t->srv) &&
                                (can_read_up(t) || (t->phase == TP_HEAD && t->up.len < t->up.cap))) ||
                               (t->hs_done[1] && gnutls_record_check_pending(t->cli) && can_read_down(t));
                if (!r && !pending)
                        break;
        }
        /* Finished once the server's side ended and all it sent reached the client with the
         * TLS close; what the client still sends has no one to go to. */
        if (t->down_eof && t->down.off == t->down.len && t->bye[0] == 2)
                return 0;
        ret_ev[0] = t->want[0];
        ret_ev[1] = t->phase == TP_FAILED ? 0 : t->want[1];
        if (!ret_ev[0] && !ret_ev[1])
                ret_ev[0] = EPOLLIN; /* nothing asked (cannot be): a close still wakes it */
        return 1;
}
