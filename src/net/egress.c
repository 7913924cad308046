/* SPDX-License-Identifier: MIT */
/* Egress by domain (sbx/egress.h): the HTTP proxy of each allowlist sandbox and the context's
 * resolver, all in the context's loop.
 *
 * The proxy's listening socket lives in the sandbox's own network namespace (its pid 1 made it
 * on 127.0.0.1:SBX_EGRESS_PROXY_PORT and handed it over with its root), so the sandbox reaches
 * it on its loopback while the daemon accepts on it here; the connections the proxy opens are
 * the daemon's own, made in the daemon's namespace. No process sits in between.
 *
 * A connection goes: HEAD (its request head is read, bounded) -> the target is checked
 * against the allowlist -> RESOLVING (the operator's hosts file, else c-ares, whose sockets
 * and timer are watched by the loop) -> every address is checked against the refused ranges
 * -> CONNECTING (non-blocking, one address after another) -> FLUSH (the "200" to the client,
 * or the rewritten request to the server) -> RELAY (both ways, spliced through pipes: the
 * exposed ports' pump). A refusal goes REFUSING (its answer written) -> DRAIN (what the client
 * still sends is read and dropped until it closes). Nothing waits.
 *
 * Ownership: a sandbox's Proxy is an observer of it and holds its connections; freeing the
 * sandbox frees them. The context's Egress (SandboxHost.egress) holds the resolver, the
 * operator's options and the hook; a lookup in flight whose connection went is dropped when
 * c-ares answers it. */
#include <ares.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/list.h"
#include "base/log.h"
#include "base/util.h"
#include "net/egress.h"
#include "net/egress_tls.h"
#include "net/pump.h"
#include "session/context.h"
#include "session/sandbox.h"

typedef struct Proxy Proxy;
typedef struct PConn PConn;

/* ---------------------------------------------------------------- the context's part */

/* A socket of c-ares's, watched for what c-ares asked. */
typedef struct AresSock {
        struct AresSock *next, *prev;
        struct Egress *eg;
        int fd;
        Watch w;
} AresSock;

struct Egress {
        Loop *loop;
        ares_channel ch;
        int ch_state; /* 0 not made yet, 1 made, -1 could not be made */
        int timer;    /* c-ares's next timeout */
        Watch timer_w;
        AresSock *socks;
        EgressHosts hosts;
        EgressCidr *allow;
        size_t n_allow;
        SbxEgressFn hook;
        void *hook_ud;
        EgressTrust *trust; /* the servers' trust, for proxy secrets: made on first use */
        char *ca_file;      /* the operator's extra CAs (sbx serve --egress-ca), or NULL */
};

/* A lookup in flight: c-ares calls back with it; conn is NULL once the connection went. */
typedef struct Lookup {
        PConn *conn;
} Lookup;

/* ---------------------------------------------------------------- a sandbox's proxy */

typedef enum PState {
        PC_HEAD,       /* reading the request head */
        PC_RESOLVING,  /* waiting for c-ares */
        PC_CONNECTING, /* fd[1] connecting, EPOLLOUT */
        PC_FLUSH,      /* writing out[] before the relay */
        PC_RELAY,      /* both ways */
        PC_REFUSING,   /* writing the refusal to the client */
        PC_DRAIN,      /* reading what the client still sends, until it closes */
        PC_TLS,        /* a CONNECT to a host of proxy secrets: TLS ended here (egress_tls.c) */
} PState;

/* A connection of the sandbox's to its proxy. fd[0] is the client's (accepted), fd[1] the
 * server's (-1 until made). buf holds the head read so far (freed once relaying); out[i] the
 * bytes to write to fd[i] before the relay (or the refusal, out[0]). */
struct PConn {
        PConn *next, *prev;
        Proxy *px;
        PState st;
        int fd[2];
        Watch w[2];
        char *buf;
        size_t len, scan, head_len;
        EgressRequest req;
        Lookup *lookup;
        EgressAddr addrs[SBX_EGRESS_MAX_ADDRS];
        unsigned n_addrs, next_addr;
        int last_errno;
        char *out[2];
        size_t out_len[2], out_off[2];
        PumpFlow flow[2];
        size_t drained;
        bool in_lookup; /* inside ares_getaddrinfo(): its caller arms c */
        EgressTls *tls; /* PC_TLS's two sessions (made at connect, before the "200") */
        uint32_t tls_ev[2];
        bool tls_counted; /* its request went on: counted as allowed */
};

struct Proxy {
        SandboxObserver o;
        SbxSandbox *sb;
        Egress *eg;
        EgressRules rules;
        bool rootless; /* see SBX_PORT_PIPE_BYTES */
        Watch w;       /* on the box's proxy_fd (the box owns the fd) */
        int retry_timer; /* made the first time accepting fails: listening again later */
        Watch retry_w;
        /* Releases what terminated connections hold of their answers (egress_tls_release),
         * every SBX_EGRESS_TLS_HOLD_MS while one holds; made on first use. */
        int hold_timer;
        Watch hold_w;
        bool hold_armed;
        PConn *conns;
        SbxEgressStats stats;
        EgressSecret *secrets; /* the sandbox's proxy secrets (their strings are sb's) */
        size_t n_secrets;
        EgressCa *ca; /* the sandbox's CA, when it has proxy secrets */
};

static void pc_free(PConn *c);
static void pc_arm_or_free(PConn *c);
static int pc_tls_pump(PConn *c);
static void pc_resolved(PConn *c);
static void arm_timer(Egress *eg);

/* ---------------------------------------------------------------- answers */

static const char *status_text(int status) {
        switch (status) {
        case 400: return "Bad Request";
        case 403: return "Forbidden";
        case 431: return "Request Header Fields Too Large";
        case 502: return "Bad Gateway";
        default: return "Error";
        }
}

static void drop_upstream(PConn *c) {
        Loop *l = c->px->eg->loop;
        loop_del(l, &c->w[1]);
        c->fd[1] = safe_close(c->fd[1]);
        free(c->out[1]);
        c->out[1] = NULL;
        c->out_len[1] = c->out_off[1] = 0;
}

/* Answers the client with status and `sbx: why`, counts it, tells the hook, and goes on to
 * write it (never frees c: it may be called from c-ares's callback, inside a call of c's). */
static void refuse(PConn *c, SbxEgressVerdict verdict, int status, const char *why) {
        Proxy *px = c->px;
        switch (verdict) {
        case SBX_EGRESS_DENIED: px->stats.denied++; break;
        case SBX_EGRESS_FAILED: px->stats.failed++; break;
        case SBX_EGRESS_BAD:
        default: px->stats.bad++; break;
        }
        log_debug("sandbox %s: egress %d: %s", sbx_sandbox_id(px->sb), status, why);
        drop_upstream(c);
        free(c->buf);
        c->buf = NULL;
        char body[600];
        int bl = snprintf(body, sizeof body, "sbx: %s\n", why);
        if (bl < 0 || (size_t)bl >= sizeof body)
                bl = (int)sizeof body - 1;
        char *o = malloc(1024);
        int n = o ? snprintf(o, 1024,
                             "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n"
                             "Connection: close\r\nX-Sbx-Egress: refused\r\n\r\n%.*s",
                             status, status_text(status), bl, bl, body)
                  : -1;
        c->st = PC_REFUSING;
        free(c->out[0]);
        c->out[0] = o;
        c->out_len[0] = n > 0 ? MIN((size_t)n, 1023) : 0;
        c->out_off[0] = 0;
        if (px->eg->hook) {
                SbxEgressEvent ev = { .verdict = verdict, .status = status, .host = c->req.host, .port = c->req.port,
                                      .reason = why };
                px->eg->hook(px->eg->hook_ud, px->sb, &ev);
        }
}

/* ---------------------------------------------------------------- connecting */

static int pc_start_relay(PConn *c) {
        c->st = PC_RELAY;
        return pump_open(c->flow, !c->px->rootless);
}

/* Connected to the server: what goes first is queued (the "200" for a tunnel, the request's
 * head for a plain request, and whatever the client sent after its head). */
static void pc_connected(PConn *c) {
        int one = 1;
        for (int i = 0; i < 2; i++)
                (void)setsockopt(c->fd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        Proxy *px = c->px;
        size_t rest = c->len - c->head_len;
        if (c->req.kind == EGRESS_CONNECT && egress_secrets_want(px->secrets, px->n_secrets, c->req.host, c->req.port)) {
                /* The client's first bytes after its CONNECT (its handshake's start, if it did
                 * not wait for the "200") go to the proxy's own TLS session. */
                char why[256];
                /* Made at the sandbox's creation; the options set again since may have let it go. */
                int r = px->eg->trust ? 0 : egress_trust_new(px->eg->ca_file, &px->eg->trust, why, sizeof why);
                if (r == 0)
                        r = egress_tls_new(px->ca, px->eg->trust, px->secrets, px->n_secrets, c->req.host, c->req.port,
                                           c->fd[0], c->fd[1], c->buf + c->head_len, rest, &c->tls);
                static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
                if (r == 0 && !(c->out[0] = strdup(ok)))
                        r = -ENOMEM;
                if (r < 0) {
                        c->tls = egress_tls_free(c->tls);
                        refuse(c, SBX_EGRESS_FAILED, 502,
                               r == -EBUSY ? "too many hosts with proxy secrets in use at once" : "cannot set up TLS");
                        return;
                }
                c->out_len[0] = sizeof ok - 1;
                c->st = PC_FLUSH;
                free(c->buf);
                c->buf = NULL;
                return;
        }
        px->stats.allowed++;
        if (c->req.kind == EGRESS_CONNECT) {
                static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
                c->out[0] = strdup(ok);
                c->out_len[0] = sizeof ok - 1;
                c->out[1] = rest ? malloc(rest) : NULL;
                if (rest && c->out[1])
                        memcpy(c->out[1], c->buf + c->head_len, rest);
                c->out_len[1] = rest;
                if (!c->out[0] || (rest && !c->out[1])) {
                        refuse(c, SBX_EGRESS_FAILED, 502, "out of memory");
                        return;
                }
        } else {
                size_t cap = 2 * c->head_len + 1024 + rest;
                char *o = malloc(cap);
                ssize_t n = o ? egress_request_rewrite(&c->req, o, cap - rest) : -ENOMEM;
                if (n < 0) {
                        free(o);
                        refuse(c, SBX_EGRESS_BAD, 431, "the request's head is too large");
                        return;
                }
                memcpy(o + n, c->buf + c->head_len, rest);
                c->out[1] = o;
                c->out_len[1] = (size_t)n + rest;
        }
        free(c->buf);
        c->buf = NULL;
        c->st = PC_FLUSH;
}

/* Tries the next address; when none is left, 502 with the last error. */
static void pc_connect_next(PConn *c) {
        while (c->next_addr < c->n_addrs) {
                const EgressAddr *a = &c->addrs[c->next_addr++];
                struct sockaddr_storage ss = { 0 };
                socklen_t sl;
                if (a->family == AF_INET) {
                        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
                        s4->sin_family = AF_INET;
                        s4->sin_port = htons(c->req.port);
                        memcpy(&s4->sin_addr, a->a, 4);
                        sl = sizeof *s4;
                } else {
                        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
                        s6->sin6_family = AF_INET6;
                        s6->sin6_port = htons(c->req.port);
                        memcpy(&s6->sin6_addr, a->a, 16);
                        sl = sizeof *s6;
                }
                drop_upstream(c);
                c->fd[1] = socket(a->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                if (c->fd[1] < 0) {
                        c->last_errno = errno;
                        continue;
                }
                int syns = SBX_EGRESS_CONNECT_SYNS;
                (void)setsockopt(c->fd[1], IPPROTO_TCP, TCP_SYNCNT, &syns, sizeof syns);
                if (connect(c->fd[1], (struct sockaddr *)&ss, sl) == 0) {
                        pc_connected(c);
                        return;
                }
                if (errno == EINPROGRESS) {
                        c->st = PC_CONNECTING;
                        return;
                }
                c->last_errno = errno;
        }
        drop_upstream(c);
        char why[512], addr[64] = "";
        if (c->n_addrs > 0)
                egress_addr_format(&c->addrs[c->n_addrs - 1], addr, sizeof addr);
        snprintf(why, sizeof why, "cannot connect to %s port %u (%s): %s", c->req.host, c->req.port, addr,
                 strerror(c->last_errno ? c->last_errno : EIO));
        refuse(c, SBX_EGRESS_FAILED, 502, why);
}

static bool operator_allows(const Egress *eg, const EgressAddr *a) {
        for (size_t i = 0; i < eg->n_allow; i++)
                if (egress_cidr_contains(&eg->allow[i], a))
                        return true;
        return false;
}

/* The addresses are in c->addrs: those of refused ranges go (unless the operator allows
 * them), the rest are tried. A name all of whose addresses are refused is refused, naming
 * the first one and its range. */
static void pc_resolved(PConn *c) {
        Egress *eg = c->px->eg;
        unsigned kept = 0;
        const char *cls = NULL;
        EgressAddr first_refused = { 0 };
        for (unsigned i = 0; i < c->n_addrs; i++) {
                EgressAddr a = c->addrs[i];
                egress_addr_canon(&a);
                const char *k = egress_addr_class(&a);
                if (k && !operator_allows(eg, &a)) {
                        if (!cls) {
                                cls = k;
                                first_refused = a;
                        }
                        continue;
                }
                c->addrs[kept++] = a;
        }
        c->n_addrs = kept;
        if (kept == 0) {
                char why[512], addr[64];
                if (!cls) {
                        snprintf(why, sizeof why, "%s has no address", c->req.host);
                        refuse(c, SBX_EGRESS_FAILED, 502, why);
                        return;
                }
                egress_addr_format(&first_refused, addr, sizeof addr);
                /* Who can change that, and how: a test server on the host's loopback is a common
                 * reason to want it. */
                static const char how[] = " (the daemon's operator may allow a range: sbx serve --egress-allow-private)";
                if (strcmp(addr, c->req.host) == 0)
                        snprintf(why, sizeof why, "%s is a %s address, which this sandbox may not reach%s", addr, cls,
                                 how);
                else
                        snprintf(why, sizeof why, "%s resolves to %s, a %s address, which this sandbox may not reach%s",
                                 c->req.host, addr, cls, how);
                refuse(c, SBX_EGRESS_DENIED, 403, why);
                return;
        }
        c->next_addr = 0;
        pc_connect_next(c);
}

/* ---------------------------------------------------------------- resolving */

static void aresock_event(Watch *w, uint32_t events) {
        AresSock *as = w->data;
        Egress *eg = as->eg;
        int fd = as->fd;
        /* c-ares may close this socket (and free as) in there. */
        ares_process_fd(eg->ch, events & (EPOLLIN | EPOLLERR | EPOLLHUP) ? fd : ARES_SOCKET_BAD,
                        events & EPOLLOUT ? fd : ARES_SOCKET_BAD);
        arm_timer(eg);
}

static void sock_state(void *data, ares_socket_t fd, int readable, int writable) {
        Egress *eg = data;
        AresSock *as = eg->socks;
        while (as && as->fd != fd)
                as = as->next;
        uint32_t ev = (readable ? EPOLLIN : 0) | (writable ? EPOLLOUT : 0);
        if (!ev) {
                if (as) {
                        loop_del(eg->loop, &as->w);
                        LIST_UNLINK(eg->socks, as);
                        free(as);
                }
                return;
        }
        if (as) {
                (void)loop_mod(eg->loop, &as->w, ev);
                return;
        }
        as = calloc(1, sizeof *as);
        if (!as)
                return; /* its lookups end at their timeout */
        as->eg = eg;
        as->fd = fd;
        if (loop_add(eg->loop, &as->w, fd, ev, aresock_event, as) < 0) {
                free(as);
                return;
        }
        LIST_LINK(eg->socks, as);
}

static int cloexec_socket(ares_socket_t fd, int type, void *data) {
        return fcntl(fd, F_SETFD, FD_CLOEXEC) < 0 ? -1 : 0;
}

static void arm_timer(Egress *eg) {
        struct timeval tv, *t = eg->ch_state > 0 ? ares_timeout(eg->ch, NULL, &tv) : NULL;
        uint64_t ms = t ? (uint64_t)t->tv_sec * 1000 + (uint64_t)t->tv_usec / 1000 + 1 : 0;
        (void)timerfd_arm_ms(eg->timer, ms);
}

static void timer_event(Watch *w, uint32_t events) {
        Egress *eg = w->data;
        uint64_t x;
        (void)!read(eg->timer, &x, sizeof x);
        ares_process_fd(eg->ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
        arm_timer(eg);
}

/* Makes the channel on first use: it reads /etc/resolv.conf once (a small local file). */
static int channel_open(Egress *eg) {
        if (eg->ch_state)
                return eg->ch_state > 0 ? 0 : -EIO;
        eg->ch_state = -1;
        if (ares_library_init(ARES_LIB_INIT_ALL) != ARES_SUCCESS)
                return -EIO;
        struct ares_options o = { .sock_state_cb = sock_state, .sock_state_cb_data = eg,
                                  .timeout = (int)SBX_EGRESS_DNS_TIMEOUT_MS, .tries = (int)SBX_EGRESS_DNS_TRIES,
                                  .lookups = (char *)"b" };
        int mask = ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_LOOKUPS;
        if (ares_init_options(&eg->ch, &o, mask) != ARES_SUCCESS) {
                ares_library_cleanup();
                return -EIO;
        }
        ares_set_socket_configure_callback(eg->ch, cloexec_socket, NULL);
        eg->ch_state = 1;
        return 0;
}

static void lookup_done(void *arg, int status, int timeouts, struct ares_addrinfo *res) {
        Lookup *lk = arg;
        PConn *c = lk->conn;
        free(lk);
        if (!c) {
                if (res)
                        ares_freeaddrinfo(res);
                return;
        }
        c->lookup = NULL;
        c->n_addrs = 0;
        for (struct ares_addrinfo_node *n = res ? res->nodes : NULL; n && c->n_addrs < SBX_EGRESS_MAX_ADDRS;
             n = n->ai_next) {
                EgressAddr *a = &c->addrs[c->n_addrs];
                *a = (EgressAddr){ .family = n->ai_family };
                if (n->ai_family == AF_INET)
                        memcpy(a->a, &((struct sockaddr_in *)n->ai_addr)->sin_addr, 4);
                else if (n->ai_family == AF_INET6)
                        memcpy(a->a, &((struct sockaddr_in6 *)n->ai_addr)->sin6_addr, 16);
                else
                        continue;
                c->n_addrs++;
        }
        if (res)
                ares_freeaddrinfo(res);
        if (status == ARES_EDESTRUCTION)
                return; /* the context is going: nothing is left to answer */
        if (status != ARES_SUCCESS || c->n_addrs == 0) {
                char why[512];
                snprintf(why, sizeof why, "cannot resolve %s: %s", c->req.host,
                         status != ARES_SUCCESS ? ares_strerror(status) : "no address");
                refuse(c, SBX_EGRESS_FAILED, 502, why);
        } else {
                pc_resolved(c);
        }
        /* From the loop (an event of c-ares's), c is armed here; from inside pc_resolve(), by
         * the event that led there. */
        if (!c->in_lookup)
                pc_arm_or_free(c);
}

/* The host's addresses: an address as it is, the operator's hosts file, else DNS. */
static void pc_resolve(PConn *c) {
        Egress *eg = c->px->eg;
        EgressAddr a;
        c->n_addrs = 0;
        if (egress_addr_parse(c->req.host, &a) == 0) {
                c->addrs[c->n_addrs++] = a;
                pc_resolved(c);
                return;
        }
        const EgressHostsEntry *h = egress_hosts_find(&eg->hosts, c->req.host);
        if (h) {
                memcpy(c->addrs, h->addrs, h->n * sizeof *h->addrs);
                c->n_addrs = h->n;
                pc_resolved(c);
                return;
        }
        Lookup *lk = channel_open(eg) == 0 ? calloc(1, sizeof *lk) : NULL;
        if (!lk) {
                refuse(c, SBX_EGRESS_FAILED, 502, "the proxy has no resolver");
                return;
        }
        lk->conn = c;
        c->lookup = lk;
        c->st = PC_RESOLVING;
        struct ares_addrinfo_hints hints = { .ai_flags = ARES_AI_NOSORT, .ai_family = AF_UNSPEC,
                                             .ai_socktype = SOCK_STREAM };
        /* c-ares may answer at once: lookup_done() runs in here. */
        c->in_lookup = true;
        ares_getaddrinfo(eg->ch, c->req.host, NULL, &hints, lookup_done, lk);
        c->in_lookup = false;
        arm_timer(eg);
}

/* ---------------------------------------------------------------- the request */

static void pc_decide(PConn *c) {
        char why[512];
        int st = egress_request_parse(c->buf, c->head_len, &c->req, why, sizeof why);
        if (st) {
                refuse(c, SBX_EGRESS_BAD, st, why);
                return;
        }
        if (!egress_rules_match(&c->px->rules, c->req.host, c->req.port)) {
                if (egress_rules_match(&c->px->rules, c->req.host, -1))
                        snprintf(why, sizeof why, "port %u of %s is not in this sandbox's allowlist", c->req.port,
                                 c->req.host);
                else
                        snprintf(why, sizeof why, "%s is not in this sandbox's allowlist", c->req.host);
                refuse(c, SBX_EGRESS_DENIED, 403, why);
                return;
        }
        pc_resolve(c);
}

/* Reads the head; once whole, decides. Returns -1 when the client went (free c). */
static int pc_read_head(PConn *c) {
        for (;;) {
                if (c->len == SBX_EGRESS_HEAD_BYTES) {
                        refuse(c, SBX_EGRESS_BAD, 431, "the request's head is too large");
                        return 0;
                }
                ssize_t n = recv(c->fd[0], c->buf + c->len, SBX_EGRESS_HEAD_BYTES - c->len, MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return 0;
                if (n <= 0)
                        return -1;
                c->len += (size_t)n;
                c->head_len = egress_head_end(c->buf, c->len, &c->scan);
                if (c->head_len) {
                        pc_decide(c);
                        return 0;
                }
        }
}

/* ---------------------------------------------------------------- the connection's fds */

/* What fd[i] waits for in c's state. */
static uint32_t pc_wants(const PConn *c, int i) {
        switch (c->st) {
        case PC_HEAD: return i == 0 ? EPOLLIN : 0;
        case PC_CONNECTING: return i == 1 ? EPOLLOUT : 0;
        case PC_FLUSH: return c->out_off[i] < c->out_len[i] ? EPOLLOUT : 0;
        case PC_REFUSING: return i == 0 ? EPOLLOUT : 0;
        case PC_DRAIN: return i == 0 ? EPOLLIN : 0;
        case PC_RELAY: return pump_wants(c->flow, i);
        case PC_TLS: return c->tls_ev[i];
        case PC_RESOLVING:
        default: return 0;
        }
}

static void pc_event(Watch *w, uint32_t events);

/* Moves what a terminated CONNECT can; its failure (answered in the client's TLS) is counted
 * and told like a refusal. Returns -1 when c was freed. */
static void hold_event(Watch *w, uint32_t events) {
        Proxy *px = w->data;
        uint64_t x;
        (void)!read(px->hold_timer, &x, sizeof x);
        px->hold_armed = false;
        for (PConn *c = px->conns, *next; c; c = next) {
                next = c->next;
                if (c->st == PC_TLS && egress_tls_holding(c->tls)) {
                        egress_tls_release(c->tls);
                        if (pc_tls_pump(c) == 0)
                                pc_arm_or_free(c);
                }
        }
}

/* c holds the tail of an answer: the proxy's timer lets it go within SBX_EGRESS_TLS_HOLD_MS.
 * Without a timer it goes at once (no wait beats a tail held until the next bytes). */
static void hold_arm(PConn *c) {
        Proxy *px = c->px;
        if (px->hold_armed)
                return;
        if (px->hold_timer < 0) {
                px->hold_timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
                if (px->hold_timer >= 0 &&
                    loop_add(px->eg->loop, &px->hold_w, px->hold_timer, EPOLLIN, hold_event, px) < 0)
                        px->hold_timer = safe_close(px->hold_timer);
        }
        if (px->hold_timer >= 0 && timerfd_arm_ms(px->hold_timer, SBX_EGRESS_TLS_HOLD_MS) == 0) {
                px->hold_armed = true;
                return;
        }
        egress_tls_release(c->tls);
}

static int pc_tls_pump(PConn *c) {
        Proxy *px = c->px;
        int r = egress_tls_pump(c->tls, c->tls_ev);
        if (r > 0 && egress_tls_holding(c->tls)) {
                hold_arm(c);
                if (!px->hold_armed)
                        r = egress_tls_pump(c->tls, c->tls_ev);
        }
        int status = 0;
        const char *why = egress_tls_take_failure(c->tls, &status);
        if (why) {
                if (status == 431)
                        px->stats.bad++;
                else if (status == 403)
                        px->stats.denied++;
                else
                        px->stats.failed++;
                log_debug("sandbox %s: egress %d: %s", sbx_sandbox_id(px->sb), status, why);
                if (px->eg->hook) {
                        SbxEgressEvent ev = { .verdict = status == 431   ? SBX_EGRESS_BAD
                                                         : status == 403 ? SBX_EGRESS_DENIED
                                                                         : SBX_EGRESS_FAILED,
                                              .status = status, .host = c->req.host, .port = c->req.port,
                                              .reason = why };
                        px->eg->hook(px->eg->hook_ud, px->sb, &ev);
                }
                /* The server's side has nothing more to do. */
                loop_del(px->eg->loop, &c->w[1]);
                c->fd[1] = safe_close(c->fd[1]);
        }
        if (!c->tls_counted && egress_tls_relayed(c->tls)) {
                c->tls_counted = true;
                px->stats.allowed++;
        }
        if (r <= 0) {
                if (r == 0)
                        c->st = PC_DRAIN; /* finished cleanly: pc_free() closes, no reset */
                pc_free(c);
                return -1;
        }
        return 0;
}

/* Brings the watches in line with c's state; a connection with nothing left to do, or whose
 * watches cannot be set, is freed. */
static void pc_arm_or_free(PConn *c) {
        Loop *l = c->px->eg->loop;
        if (c->st == PC_FLUSH && c->tls && c->out_off[0] == c->out_len[0]) {
                c->st = PC_TLS;
                if (pc_tls_pump(c) < 0)
                        return;
        }
        if (c->st == PC_FLUSH && c->out_off[0] == c->out_len[0] && c->out_off[1] == c->out_len[1] &&
            pc_start_relay(c) < 0) {
                pc_free(c);
                return;
        }
        if ((c->st == PC_DRAIN && c->drained > SBX_EGRESS_DRAIN_BYTES) ||
            (c->st == PC_RELAY && pump_done(c->flow))) {
                pc_free(c);
                return;
        }
        for (int i = 0; i < 2; i++) {
                uint32_t ev = pc_wants(c, i);
                Watch *wt = &c->w[i];
                int r = 0;
                if (!ev || c->fd[i] < 0)
                        loop_del(l, wt);
                else if (!wt->active)
                        r = loop_add(l, wt, c->fd[i], ev, pc_event, c);
                else if (wt->events != ev)
                        r = loop_mod(l, wt, ev);
                if (r < 0) {
                        pc_free(c);
                        return;
                }
        }
}

/* Writes what is queued for fd[i]. Returns -1 when the peer is gone. */
static int pc_flush(PConn *c, int i) {
        while (c->out_off[i] < c->out_len[i]) {
                ssize_t n = send(c->fd[i], c->out[i] + c->out_off[i], c->out_len[i] - c->out_off[i],
                                 MSG_DONTWAIT | MSG_NOSIGNAL);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return 0;
                if (n < 0)
                        return -1;
                c->out_off[i] += (size_t)n;
        }
        free(c->out[i]);
        c->out[i] = NULL;
        c->out_len[i] = c->out_off[i] = 0;
        return 0;
}

static void pc_event(Watch *w, uint32_t events) {
        PConn *c = w->data;
        int i = w == &c->w[1];
        switch (c->st) {
        case PC_HEAD:
                if (pc_read_head(c) < 0) {
                        pc_free(c);
                        return;
                }
                break;
        case PC_CONNECTING: {
                int err = 0;
                socklen_t len = sizeof err;
                if (getsockopt(c->fd[1], SOL_SOCKET, SO_ERROR, &err, &len) < 0)
                        err = errno;
                if (err == 0) {
                        pc_connected(c);
                } else {
                        c->last_errno = err;
                        pc_connect_next(c);
                }
                break;
        }
        case PC_FLUSH:
                if (pc_flush(c, i) < 0) {
                        pc_free(c);
                        return;
                }
                break;
        case PC_REFUSING:
                if (pc_flush(c, 0) < 0) {
                        pc_free(c);
                        return;
                }
                if (!c->out[0]) {
                        /* Answered: the client reads it, then closes; until then what it
                         * sends is dropped, so that no reset overtakes the answer. */
                        (void)shutdown(c->fd[0], SHUT_WR);
                        c->st = PC_DRAIN;
                }
                break;
        case PC_DRAIN: {
                char sink[4096];
                ssize_t n = recv(c->fd[0], sink, sizeof sink, MSG_DONTWAIT);
                if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                        pc_free(c);
                        return;
                }
                if (n > 0)
                        c->drained += (size_t)n;
                break;
        }
        case PC_RELAY: {
                ssize_t n = pump_event(c->flow, c->fd, i, events);
                if (n < 0) {
                        pc_free(c);
                        return;
                }
                sandbox_core(c->px->sb)->net_bytes += (uint64_t)n;
                break;
        }
        case PC_TLS:
                if (pc_tls_pump(c) < 0)
                        return;
                break;
        case PC_RESOLVING:
        default:
                break;
        }
        pc_arm_or_free(c);
}

static void pc_free(PConn *c) {
        Proxy *px = c->px;
        Loop *l = px->eg->loop;
        if (c->lookup)
                c->lookup->conn = NULL;
        for (int i = 0; i < 2; i++) {
                loop_del(l, &c->w[i]);
                /* A relay cut short is reset, so neither side takes it for a complete one. */
                if (c->fd[i] >= 0) {
                        if ((c->st == PC_RELAY && !pump_done(c->flow)) || c->st == PC_TLS)
                                pump_reset_close(c->fd[i]);
                        else
                                close(c->fd[i]);
                }
                free(c->out[i]);
        }
        pump_close(c->flow);
        free(c->buf);
        egress_tls_free(c->tls);
        LIST_UNLINK(px->conns, c);
        px->stats.open--;
        sandbox_fds_give(px->sb, SBX_CONNECTION_FDS);
        free(c);
}

/* ---------------------------------------------------------------- the listener */

static void listen_event(Watch *w, uint32_t events);

static void retry_event(Watch *w, uint32_t events) {
        Proxy *px = w->data;
        uint64_t x;
        (void)!read(px->retry_timer, &x, sizeof x);
        int fd = sandbox_box(px->sb)->proxy_fd;
        if (!px->w.active && fd >= 0)
                (void)loop_add(px->eg->loop, &px->w, fd, EPOLLIN, listen_event, px);
}

/* Out of fds or memory: the connection that could not be taken still waits in the backlog and
 * would wake the loop at once, so the proxy stops listening for SBX_PORT_ACCEPT_RETRY_MS. */
static void listen_pause(Proxy *px) {
        Loop *l = px->eg->loop;
        if (px->retry_timer < 0) {
                px->retry_timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
                if (px->retry_timer >= 0 && loop_add(l, &px->retry_w, px->retry_timer, EPOLLIN, retry_event, px) < 0)
                        px->retry_timer = safe_close(px->retry_timer);
                if (px->retry_timer < 0)
                        return; /* no timer either: better a busy listener than a deaf one */
        }
        loop_del(l, &px->w);
        (void)timerfd_arm_ms(px->retry_timer, SBX_PORT_ACCEPT_RETRY_MS);
}

static void listen_event(Watch *w, uint32_t events) {
        Proxy *px = w->data;
        for (unsigned k = 0; k < SBX_EGRESS_ACCEPT_BATCH; k++) {
                int fd = accept4(w->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0) {
                        if (errno == EINTR || errno == ECONNABORTED)
                                continue;
                        if (errno != EAGAIN)
                                listen_pause(px);
                        return;
                }
                /* Its fds are the sandbox's share of the daemon's: past it, it is reset. */
                PConn *c = px->stats.open < SBX_MAX_EGRESS_CONNECTIONS ? calloc(1, sizeof *c) : NULL;
                char *buf = c ? malloc(SBX_EGRESS_HEAD_BYTES) : NULL;
                if (buf && sandbox_fds_take(px->sb, SBX_CONNECTION_FDS) < 0) {
                        free(buf);
                        buf = NULL;
                }
                if (!buf) {
                        free(c);
                        pump_reset_close(fd);
                        continue;
                }
                c->px = px;
                c->buf = buf;
                c->fd[0] = fd;
                c->fd[1] = -1;
                pump_init(c->flow);
                c->st = PC_HEAD;
                LIST_LINK(px->conns, c);
                px->stats.open++;
                pc_arm_or_free(c);
        }
}

static void proxy_ready(SandboxObserver *o, SbxSandbox *sb, int error) {
        Proxy *px = container_of(o, Proxy, o);
        int fd = sandbox_box(sb)->proxy_fd;
        if (error < 0)
                return;
        if (fd < 0 || loop_add(px->eg->loop, &px->w, fd, EPOLLIN, listen_event, px) < 0)
                log_warn("sandbox %s: its egress proxy cannot listen", sbx_sandbox_id(sb));
}

static void secrets_free(EgressSecret *v, size_t n) {
        for (size_t i = 0; v && i < n; i++)
                egress_rules_clear(&v[i].hosts);
        free(v);
}

static void proxy_freeing(SandboxObserver *o, SbxSandbox *sb) {
        Proxy *px = container_of(o, Proxy, o);
        while (px->conns)
                pc_free(px->conns);
        loop_del(px->eg->loop, &px->w);
        loop_del(px->eg->loop, &px->retry_w);
        safe_close(px->retry_timer);
        loop_del(px->eg->loop, &px->hold_w);
        safe_close(px->hold_timer);
        egress_rules_clear(&px->rules);
        secrets_free(px->secrets, px->n_secrets);
        egress_ca_free(px->ca);
        free(px);
}

static const SandboxObserverOps proxy_ops = { .ready = proxy_ready, .freeing = proxy_freeing };

/* ---------------------------------------------------------------- the context's Egress */

static Egress *egress_get(SandboxHost *host) {
        if (host->egress)
                return host->egress;
        Egress *eg = calloc(1, sizeof *eg);
        if (!eg)
                return NULL;
        eg->loop = host->loop;
        eg->timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (eg->timer < 0 || loop_add(eg->loop, &eg->timer_w, eg->timer, EPOLLIN, timer_event, eg) < 0) {
                safe_close(eg->timer);
                free(eg);
                return NULL;
        }
        host->egress = eg;
        return eg;
}

static void egress_free(SandboxHost *host) {
        Egress *eg = host->egress;
        if (!eg)
                return;
        if (eg->ch_state > 0) {
                /* Calls back every lookup left (ARES_EDESTRUCTION) and closes its sockets. */
                ares_destroy(eg->ch);
                ares_library_cleanup();
        }
        while (eg->socks) {
                AresSock *as = eg->socks;
                loop_del(eg->loop, &as->w);
                LIST_UNLINK(eg->socks, as);
                free(as);
        }
        loop_del(eg->loop, &eg->timer_w);
        safe_close(eg->timer);
        egress_hosts_clear(&eg->hosts);
        free(eg->allow);
        egress_trust_unref(eg->trust);
        free(eg->ca_file);
        free(eg);
        host->egress = NULL;
}

/* Starts sb's proxy: once its pid 1 hands over the listening socket (Box.proxy_fd), the
 * loop serves it. The rules are parsed from allow and the secrets' hosts (checked already:
 * a secret's hosts are allowed with it). secrets (n of them, with their placeholders) are
 * sb's and live as long as it; ca (sb's CA, made when n > 0) becomes the proxy's. Returns 0
 * or -errno (ca is freed then too). */
static int egress_attach(SbxSandbox *sb, const char *const *allow, const SbxProxySecret *secrets, size_t n,
                         EgressCa *ca) {
        char err[256];
        SandboxHost *host = sandbox_host(sb);
        Egress *eg = egress_get(host);
        Proxy *px = eg ? calloc(1, sizeof *px) : NULL;
        size_t n_allow = 0, n_hosts = 0;
        while (allow && allow[n_allow])
                n_allow++;
        for (size_t i = 0; i < n; i++)
                for (const char *const *h = secrets[i].hosts; h && *h; h++)
                        n_hosts++;
        /* A secret's hosts are reached with it: they join the allowlist. */
        _cleanup_free_ const char **all = calloc(n_allow + n_hosts + 1, sizeof *all);
        EgressSecret *es = n ? calloc(n, sizeof *es) : NULL;
        int r = !px || !all || (n && !es) ? -ENOMEM : 0;
        if (r == 0 && n && !eg->trust)
                r = egress_trust_new(eg->ca_file, &eg->trust, err, sizeof err);
        size_t k = 0;
        for (size_t i = 0; r == 0 && i < n_allow; i++)
                all[k++] = allow[i];
        for (size_t i = 0; r == 0 && i < n; i++) {
                for (const char *const *h = secrets[i].hosts; h && *h; h++)
                        all[k++] = *h;
                es[i] = (EgressSecret){ .name = secrets[i].name, .value = secrets[i].value,
                                        .placeholder = secrets[i].placeholder,
                                        .value_len = strlen(secrets[i].value),
                                        .placeholder_len = strlen(secrets[i].placeholder) };
                r = egress_rules_parse(secrets[i].hosts, &es[i].hosts, err, sizeof err);
        }
        if (r == 0)
                r = egress_rules_parse(all, &px->rules, err, sizeof err);
        if (r < 0) {
                secrets_free(es, n);
                egress_ca_free(ca);
                free(px);
                return r;
        }
        px->secrets = es;
        px->n_secrets = n;
        px->ca = ca;
        px->sb = sb;
        px->eg = eg;
        px->retry_timer = px->hold_timer = -1;
        px->rootless = host->shared.rootless;
        sandbox_observe(sb, &px->o, &proxy_ops);
        return 0;
}

static int egress_configure(SandboxHost *host, const SbxEgressOptions *o, char *err, size_t errlen) {
        EgressHosts hosts = { 0 };
        size_t n = 0;
        err[0] = 0;
        while (o->allow_private && o->allow_private[n])
                n++;
        if (n > SBX_MAX_EGRESS_PRIVATE_CIDRS) {
                snprintf(err, errlen, "more than %u CIDRs allowed", SBX_MAX_EGRESS_PRIVATE_CIDRS);
                return -EINVAL;
        }
        _cleanup_free_ EgressCidr *allow = n ? calloc(n, sizeof *allow) : NULL;
        if (n && !allow)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                if (egress_cidr_parse(o->allow_private[i], &allow[i]) < 0) {
                        snprintf(err, errlen, "'%.64s' is not an address or CIDR (127.0.0.1/32, 10.0.0.0/8, fd00::/8)",
                                 o->allow_private[i]);
                        return -EINVAL;
                } else {
                        egress_addr_canon(&allow[i].addr);
                }
        if (o->hosts_file) {
                _cleanup_free_ uint8_t *text = NULL;
                size_t len;
                int r = read_file_whole(o->hosts_file, SBX_MAX_EGRESS_HOSTS_FILE_BYTES, &text, &len);
                if (r < 0) {
                        snprintf(err, errlen, "%s: %s", o->hosts_file,
                                 r == -EFBIG ? "not a regular file of at most 1 MiB" : strerror(-r));
                        return r == -EFBIG ? -EINVAL : r;
                }
                char why[256];
                r = egress_hosts_parse((const char *)text, len, &hosts, why, sizeof why);
                if (r < 0) {
                        snprintf(err, errlen, "%s: %s", o->hosts_file, why);
                        return r;
                }
        }
        /* The operator's CAs are read (and checked) now: a bad file stops the daemon at start,
         * not a sandbox's first request. */
        EgressTrust *trust = NULL;
        _cleanup_free_ char *ca_file = o->ca_file ? strdup(o->ca_file) : NULL;
        int tr = o->ca_file && !ca_file ? -ENOMEM : o->ca_file ? egress_trust_new(o->ca_file, &trust, err, errlen) : 0;
        if (tr < 0) {
                egress_hosts_clear(&hosts);
                return tr;
        }
        Egress *eg = egress_get(host);
        if (!eg) {
                egress_trust_unref(trust);
                egress_hosts_clear(&hosts);
                return -ENOMEM;
        }
        /* Connections under way hold a reference to the trust they were made with. Without a
         * file the next sandbox with proxy secrets makes one of the host's store alone. */
        egress_trust_unref(eg->trust);
        eg->trust = trust;
        free(eg->ca_file);
        eg->ca_file = TAKE_PTR(ca_file);
        egress_hosts_clear(&eg->hosts);
        eg->hosts = hosts;
        free(eg->allow);
        eg->allow = TAKE_PTR(allow);
        eg->n_allow = n;
        return 0;
}

static void egress_set_hook(SandboxHost *host, SbxEgressFn fn, void *userdata) {
        Egress *eg = egress_get(host);
        if (eg) {
                eg->hook = fn;
                eg->hook_ud = userdata;
        }
}

int sbx_sandbox_egress_stats(SbxSandbox *sb, SbxEgressStats *ret) {
        SandboxObserver *o = sandbox_observer_find(sb, &proxy_ops);
        if (!o)
                return -ENOTSUP;
        *ret = container_of(o, Proxy, o)->stats;
        return 0;
}

int sbx_context_set_egress(SbxContext *ctx, const SbxEgressOptions *o, char *err, size_t errlen) {
        return egress_configure(context_host(ctx), o, err, errlen);
}

void sbx_context_on_egress(SbxContext *ctx, SbxEgressFn fn, void *userdata) {
        egress_set_hook(context_host(ctx), fn, userdata);
}

/* ---------------------------------------------------------------- the room (session/room.h) */

/* An allowlist sandbox's patterns and its proxy secrets' hosts are rules the proxy can read. */
static int net_check(const SbxSandboxOptions *o, char *err, size_t errlen) {
        if (o->network != SBX_NETWORK_ALLOWLIST)
                return 0;
        EgressRules rules;
        int r = egress_rules_parse(o->network_allow, &rules, err, errlen);
        if (r < 0)
                return r;
        egress_rules_clear(&rules);
        for (size_t i = 0; i < o->n_proxy_secrets; i++) {
                char why[256];
                if (egress_rules_parse(o->proxy_secrets[i].hosts, &rules, why, sizeof why) < 0) {
                        snprintf(err, errlen, "secret %s: hosts: %s", o->proxy_secrets[i].name, why);
                        return -EINVAL;
                }
                egress_rules_clear(&rules);
        }
        return 0;
}

/* A sandbox with proxy secrets gets its CA before pid 1, so that the certificate is in the
 * root pid 1 builds; the key stays in the daemon's memory (the proxy's, once attached). */
static int net_prepare(SbxSandbox *sb, BoxConfig *bc, void **state, char *err, size_t errlen) {
        SbxSandboxOptions o;
        sandbox_options(sb, &o);
        if (!o.n_proxy_secrets)
                return 0;
        EgressCa *ca = NULL;
        int r = egress_ca_new("", &ca);
        if (r < 0) {
                snprintf(err, errlen, "cannot make the sandbox's CA for its proxy secrets");
                return r;
        }
        bc->trust_pem = egress_ca_pem(ca);
        *state = ca;
        return 0;
}

static int net_attach(SbxSandbox *sb, void *state) {
        SbxSandboxOptions o;
        sandbox_options(sb, &o);
        if (o.network != SBX_NETWORK_ALLOWLIST) {
                egress_ca_free(state);
                return 0;
        }
        return egress_attach(sb, o.network_allow, o.proxy_secrets, o.n_proxy_secrets, state);
}

static void net_abandon(void *state) { egress_ca_free(state); }

const Room egress_room = {
        .name = "egress",
        .check = net_check,
        .prepare = net_prepare,
        .attach = net_attach,
        .abandon = net_abandon,
        .host_free = egress_free,
};
