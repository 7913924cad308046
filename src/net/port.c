/* SPDX-License-Identifier: MIT */
/* Exposed ports (sbx/port.h): listeners on the host's 127.0.0.1 whose connections are forwarded
 * to 127.0.0.1:port in a sandbox's network namespace, all in the context's loop.
 *
 * A socket's network namespace is fixed when it is created, so the loop only needs sockets made
 * in the sandbox's namespace; it connects them itself, without waiting. It cannot make them
 * itself: switching the daemon into the namespace and back (setns) is possible as root but not
 * rootless, where the namespace belongs to the sandbox's user namespace, which a process can
 * join only while it has a single thread, and never back. So a small process, the socket maker
 * (maker_main), enters the namespace once, through the fd of it that box_create() opened, and
 * makes sockets on request; the loop keeps a few of them ready (SBX_PORT_SOCKET_POOL) so a
 * connection rarely waits for one.
 *
 * Everything belongs to the sandbox: a PortSet, kept on an observer of it, holds its ports, the
 * maker and the connections waiting for a socket; freeing the sandbox closes them all. */
#include <errno.h>
#include <fcntl.h>
#include <linux/nsfs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include "base/job.h"
#include "base/limits.h"
#include "base/list.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/util.h"
#include "sbx/port.h"
#include "net/port.h"
#include "net/pump.h"
#include "session/sandbox.h"
#include "session/internal.h"

typedef struct PortSet PortSet;
typedef struct Port Port;
typedef struct Fwd Fwd;

typedef enum FwdState {
        FWD_WAITING,    /* for a socket from the maker, on the set's queue */
        FWD_CONNECTING, /* to the sandbox's port: w[1] waits for EPOLLOUT */
        FWD_OPEN,       /* forwarding */
} FwdState;

/* A forwarded connection. fd[0] is the client's (accepted on the host), fd[1] the socket of the
 * sandbox's namespace (-1 while waiting); flow[0] goes from fd[0] to fd[1], flow[1] back. The
 * client's socket is not watched before the connection is open: what it sends waits in its
 * socket. */
struct Fwd {
        Fwd *next, *prev; /* its port's */
        Fwd *wait_next;   /* the set's queue, while FWD_WAITING */
        Port *port;
        FwdState state;
        int fd[2];
        Watch w[2];
        PumpFlow flow[2];
};

struct Port {
        Port *next, *prev;
        PortSet *set;
        uint16_t port, host_port;
        int fd; /* listening on 127.0.0.1:host_port */
        Watch w;
        bool paused; /* out of fds or memory: the retry timer listens again */
        uid_t owner;  /* only this uid (and root) may connect; (uid_t)-1: anyone (sbx_port_set_owner) */
        unsigned refused; /* connections refused for their uid */
        Fwd *fwds;
        unsigned n_fwds; /* at most SBX_MAX_PORT_CONNECTIONS */
};

/* The socket maker as the loop sees it: a job (pid -1 when none runs), its end of the request
 * socket, and the sockets it made that wait for a connection. One request is in flight at a
 * time (asked > 0), and every request gets one answer. */
typedef struct Maker {
        Job job;
        int sock;
        Watch sock_w, pid_w;
        unsigned asked;
        bool answered; /* this maker answered once: its death is not a failure to start */
        int failed;    /* -errno: a maker could not enter the namespaces, none is started again */
        int pool[SBX_PORT_SOCKET_POOL];
        unsigned n_pool;
} Maker;

/* A sandbox's exposed ports (at most SBX_MAX_PORTS) and what serves them. */
struct PortSet {
        SandboxObserver o;
        SbxSandbox *sb;
        Loop *loop;
        bool rootless; /* the daemon is: see SBX_PORT_PIPE_BYTES */
        Port *ports;
        unsigned n_ports;
        Maker maker;
        Fwd *wait_head, *wait_tail; /* oldest first */
        unsigned n_waiting;
        int retry_timer; /* made the first time a listener pauses */
        Watch retry_w;
};

/* An abortive close: the peer sees a reset, which it cannot take for a complete answer. */
/* ---------------------------------------------------------------- the socket maker */

typedef struct MakerArgs {
        int sock, netns;
        bool rootless;
        pid_t daemon;
} MakerArgs;

/* What the maker answers a request with: an errno when it made fewer sockets than asked (the
 * sockets themselves come as SCM_RIGHTS). */
typedef struct MakerAnswer {
        int32_t error;
} MakerAnswer;

/* Enters the network namespace `netns` (an fd of it). Rootless, the user namespace that owns
 * it first: the daemon's user owns that one, so the maker gets there the capability that
 * entering the network namespace asks for. Nothing to do for the daemon's own namespace (a
 * sandbox with `network: true`). Returns 0 or -errno, with err saying which step failed. */
static int maker_enter(int netns, bool rootless, char *err, size_t errlen) {
        struct stat want, own;
        if (fstat(netns, &want) < 0 || stat("/proc/self/ns/net", &own) < 0) {
                snprintf(err, errlen, "cannot look at the sandbox's network namespace: %m");
                return negerrno();
        }
        if (want.st_dev == own.st_dev && want.st_ino == own.st_ino)
                return 0;
        if (rootless) {
                _cleanup_close_ int userns = ioctl(netns, NS_GET_USERNS);
                if (userns < 0 || setns(userns, CLONE_NEWUSER) < 0) {
                        snprintf(err, errlen, "cannot enter the sandbox's user namespace: %m");
                        return negerrno();
                }
        }
        if (setns(netns, CLONE_NEWNET) < 0) {
                snprintf(err, errlen, "cannot enter the sandbox's network namespace: %m");
                return negerrno();
        }
        return 0;
}

/* The socket maker, a forked process (a job: it keeps only its socket and the fd of the
 * sandbox's network namespace, and dies with the daemon). It enters the namespace, drops every
 * privilege (making a socket needs none) and answers each request, one byte saying how many
 * sockets, with that many fresh non-blocking ones, until the daemon closes its end. It never
 * connects nor listens itself, and no process of the sandbox can see it (it is not in the
 * sandbox's pid namespace) nor reach it. */
static int maker_main(void *arg, char *err, size_t errlen) {
        const MakerArgs *a = arg;
        (void)prctl(PR_SET_NAME, "sbx-sockets", 0, 0, 0);
        /* Its memory is a copy of the daemon's. */
        (void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        int r = maker_enter(a->netns, a->rootless, err, errlen);
        if (r < 0)
                return r;
        close(a->netns);
        r = job_drop_privileges();
        if (r < 0) {
                snprintf(err, errlen, "cannot drop privileges: %s", strerror(-r));
                return r;
        }
        /* A change of uid clears the parent-death signal: it is set again, and a daemon that
         * died meanwhile is noticed here. */
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        if (getppid() != a->daemon)
                return -ESRCH;
        for (;;) {
                uint8_t want;
                ssize_t n = recv(a->sock, &want, 1, 0);
                if (n == 0)
                        return 0;
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return negerrno();
                }
                int fds[SBX_PORT_SOCKET_BATCH];
                unsigned k = 0;
                MakerAnswer ans = { 0 };
                while (k < want && k < SBX_PORT_SOCKET_BATCH) {
                        int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                        if (s < 0) {
                                ans.error = errno;
                                break;
                        }
                        fds[k++] = s;
                }
                union {
                        char buf[CMSG_SPACE(sizeof fds)];
                        struct cmsghdr align;
                } c;
                memset(&c, 0, sizeof c);
                struct iovec iov = { .iov_base = &ans, .iov_len = sizeof ans };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
                if (k > 0) {
                        mh.msg_control = c.buf;
                        mh.msg_controllen = CMSG_SPACE(k * sizeof(int));
                        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
                        cm->cmsg_level = SOL_SOCKET;
                        cm->cmsg_type = SCM_RIGHTS;
                        cm->cmsg_len = CMSG_LEN(k * sizeof(int));
                        memcpy(CMSG_DATA(cm), fds, k * sizeof(int));
                }
                n = sendmsg(a->sock, &mh, MSG_NOSIGNAL);
                for (unsigned i = 0; i < k; i++)
                        close(fds[i]);
                if (n < 0)
                        return negerrno();
        }
}

static void fwd_connect(Fwd *f, int s);
static void fwd_free(Fwd *f, bool reset);

static Fwd *wait_pop(PortSet *set) {
        Fwd *f = set->wait_head;
        if (f) {
                set->wait_head = f->wait_next;
                if (!set->wait_head)
                        set->wait_tail = NULL;
                f->wait_next = NULL;
                set->n_waiting--;
        }
        return f;
}

static void wait_remove(PortSet *set, Fwd *f) {
        Fwd **pp = &set->wait_head, *prev = NULL;
        while (*pp && *pp != f) {
                prev = *pp;
                pp = &(*pp)->wait_next;
        }
        if (!*pp)
                return;
        *pp = f->wait_next;
        if (set->wait_tail == f)
                set->wait_tail = prev;
        f->wait_next = NULL;
        set->n_waiting--;
}

/* Connections waiting for a socket that will not come are reset. */
static void wait_fail_all(PortSet *set) {
        Fwd *f;
        while ((f = wait_pop(set)))
                fwd_free(f, true);
}

/* Stops the maker (if it runs) and reaps it. A SIGKILLed maker blocked in recv() is gone at
 * once, so the reaping waits for nothing. Returns its result, with err saying why it failed. */
static int maker_stop(PortSet *set, char *err, size_t errlen) {
        Maker *m = &set->maker;
        if (m->job.pid <= 0)
                return 0;
        loop_del(set->loop, &m->sock_w);
        loop_del(set->loop, &m->pid_w);
        m->sock = safe_close(m->sock);
        m->asked = 0;
        pidfd_sigkill(m->job.pidfd);
        return job_finish(&m->job, err, errlen);
}

static void maker_close_pool(Maker *m) {
        while (m->n_pool > 0)
                close(m->pool[--m->n_pool]);
}

static void maker_event(Watch *w, uint32_t events);

/* The maker died on its own: it could not enter the namespaces (then no other is started: it
 * would fail the same way), or something killed it (the next connection starts another). */
static void maker_died_event(Watch *w, uint32_t events) {
        PortSet *set = w->data;
        Maker *m = &set->maker;
        char err[JOB_ERR_MAX];
        bool answered = m->answered;
        int r = maker_stop(set, err, sizeof err);
        if (!answered) {
                m->failed = r < 0 ? r : -EIO;
                log_warn("sandbox %s: exposed ports cannot reach it: %s", sbx_sandbox_id(set->sb), err);
        }
        wait_fail_all(set);
}

static int maker_start(PortSet *set) {
        Maker *m = &set->maker;
        if (m->failed < 0)
                return m->failed;
        if (sandbox_dying(set->sb))
                return -ESRCH;
        const Box *b = sandbox_box(set->sb);
        if (b->netns_fd < 0)
                return -ENOTSUP;
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return negerrno();
        MakerArgs a = { .sock = sv[1], .netns = b->netns_fd, .rootless = set->rootless,
                        .daemon = getpid() };
        int keep[] = { sv[1], b->netns_fd };
        int r = job_start(&m->job, maker_main, &a, keep, ELEMENTSOF(keep));
        close(sv[1]);
        if (r < 0) {
                close(sv[0]);
                return r;
        }
        m->sock = sv[0];
        m->answered = false;
        m->asked = 0;
        if ((r = fd_set_nonblock(m->sock, true)) < 0 ||
            (r = loop_add(set->loop, &m->sock_w, m->sock, EPOLLIN, maker_event, set)) < 0 ||
            (r = loop_add(set->loop, &m->pid_w, m->job.pidfd, EPOLLIN, maker_died_event, set)) < 0) {
                (void)maker_stop(set, NULL, 0);
                return r;
        }
        return 0;
}

/* Asks the maker (started if need be) for what the waiting connections and the pool lack, once
 * someone waits or the pool is half empty (a request per connection would cost the maker a
 * wakeup each), unless a request is in flight: its answer asks again. */
static void maker_ask(PortSet *set) {
        Maker *m = &set->maker;
        if (m->asked > 0 || !set->ports || (set->n_waiting == 0 && m->n_pool > SBX_PORT_SOCKET_POOL / 2))
                return;
        unsigned want = MIN(set->n_waiting + SBX_PORT_SOCKET_POOL - m->n_pool, SBX_PORT_SOCKET_BATCH);
        if (want == 0)
                return;
        if (m->job.pid <= 0 && maker_start(set) < 0) {
                wait_fail_all(set);
                return;
        }
        uint8_t b = (uint8_t)want;
        if (send(m->sock, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1) {
                /* Only a maker that is gone refuses one byte: its pidfd tells the rest. */
                return;
        }
        m->asked = want;
}

/* Takes a socket of the pool for f, or queues f for the next answer. */
static void fwd_get_socket(PortSet *set, Fwd *f) {
        Maker *m = &set->maker;
        if (m->n_pool > 0 && !set->wait_head) {
                fwd_connect(f, m->pool[--m->n_pool]);
                maker_ask(set);
                return;
        }
        f->state = FWD_WAITING;
        if (set->wait_tail)
                set->wait_tail->wait_next = f;
        else
                set->wait_head = f;
        set->wait_tail = f;
        set->n_waiting++;
        maker_ask(set);
}

static void maker_event(Watch *w, uint32_t events) {
        PortSet *set = w->data;
        Maker *m = &set->maker;
        union {
                char buf[CMSG_SPACE(sizeof(int) * SBX_PORT_SOCKET_BATCH)];
                struct cmsghdr align;
        } c;
        MakerAnswer ans = { 0 };
        struct iovec iov = { .iov_base = &ans, .iov_len = sizeof ans };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf, .msg_controllen = sizeof c.buf };
        ssize_t n = recvmsg(m->sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return;
        int fds[SBX_PORT_SOCKET_BATCH];
        size_t k = 0;
        for (struct cmsghdr *cm = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL; cm; cm = CMSG_NXTHDR(&mh, cm)) {
                if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                        continue;
                size_t nf = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < nf; i++) {
                        int fd;
                        memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
                        if (k < ELEMENTSOF(fds))
                                fds[k++] = fd;
                        else
                                close(fd);
                }
        }
        if (n <= 0 || (mh.msg_flags & MSG_CTRUNC)) {
                /* EOF: the maker is gone (its pidfd says so next). */
                while (k > 0)
                        close(fds[--k]);
                loop_del(set->loop, &m->sock_w);
                return;
        }
        m->asked = 0;
        m->answered = true;
        for (size_t i = 0; i < k; i++) {
                Fwd *f = wait_pop(set);
                if (f)
                        fwd_connect(f, fds[i]);
                else if (m->n_pool < SBX_PORT_SOCKET_POOL)
                        m->pool[m->n_pool++] = fds[i];
                else
                        close(fds[i]);
        }
        if (k == 0) {
                /* Not one socket: the namespace is out of them (or memory); those who wait
                 * would only wait longer. */
                log_warn("sandbox %s: cannot make a socket for an exposed port: %s", sbx_sandbox_id(set->sb),
                         strerror(ans.error ? ans.error : EIO));
                wait_fail_all(set);
                return;
        }
        maker_ask(set);
}

/* ---------------------------------------------------------------- forwarding */

static void fwd_event(Watch *w, uint32_t events);

static int fwd_arm(Fwd *f) {
        Loop *l = f->port->set->loop;
        for (int i = 0; i < 2; i++) {
                uint32_t ev = pump_wants(f->flow, i);
                Watch *w = &f->w[i];
                int r = 0;
                if (!ev)
                        loop_del(l, w);
                else if (!w->active)
                        r = loop_add(l, w, f->fd[i], ev, fwd_event, f);
                else if (w->events != ev)
                        r = loop_mod(l, w, ev);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int fwd_open(Fwd *f) {
        f->state = FWD_OPEN;
        int r = pump_open(f->flow, !f->port->set->rootless);
        if (r < 0)
                return r;
        /* Bytes go on as they come: the sender's own stack already merged its small writes, and
         * holding a second small segment until the first is acknowledged would stall
         * request-answer exchanges on delayed acks. */
        for (int i = 0; i < 2; i++) {
                int one = 1;
                (void)setsockopt(f->fd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        return fwd_arm(f);
}

static void fwd_event(Watch *w, uint32_t events) {
        Fwd *f = w->data;
        int i = w == &f->w[1];
        if (f->state == FWD_CONNECTING) {
                int err = 0;
                socklen_t len = sizeof err;
                if (getsockopt(f->fd[1], SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0 || fwd_open(f) < 0)
                        /* Nothing listens there (ECONNREFUSED): the client sees a reset. */
                        fwd_free(f, true);
                return;
        }
        ssize_t n = pump_event(f->flow, f->fd, i, events);
        if (n < 0) {
                fwd_free(f, true);
                return;
        }
        sandbox_core(f->port->set->sb)->net_bytes += (uint64_t)n;
        if (pump_done(f->flow))
                fwd_free(f, false);
        else if (fwd_arm(f) < 0)
                fwd_free(f, true);
}

static void fwd_connect(Fwd *f, int s) {
        f->fd[1] = s;
        f->state = FWD_CONNECTING;
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(f->port->port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        if (connect(s, (struct sockaddr *)&a, sizeof a) == 0) {
                if (fwd_open(f) < 0)
                        fwd_free(f, true);
                return;
        }
        if (errno != EINPROGRESS || loop_add(f->port->set->loop, &f->w[1], s, EPOLLOUT, fwd_event, f) < 0)
                fwd_free(f, true);
}

/* reset: an abortive close of both sockets (the connection was cut, refused or failed); else
 * both directions ended. */
static void fwd_free(Fwd *f, bool reset) {
        Port *p = f->port;
        PortSet *set = p->set;
        if (f->state == FWD_WAITING)
                wait_remove(set, f);
        for (int i = 0; i < 2; i++) {
                loop_del(set->loop, &f->w[i]);
                if (f->fd[i] >= 0) {
                        if (reset)
                                pump_reset_close(f->fd[i]);
                        else
                                close(f->fd[i]);
                }
        }
        pump_close(f->flow);
        LIST_UNLINK(p->fwds, f);
        p->n_fwds--;
        sandbox_fds_give(set->sb, SBX_CONNECTION_FDS);
        free(f);
}

/* ---------------------------------------------------------------- who may connect */

int port_socket_uid(int fd, uid_t *ret) {
        struct sockaddr_in local, peer;
        socklen_t ll = sizeof local, pl = sizeof peer;
        if (getsockname(fd, (struct sockaddr *)&local, &ll) < 0 || getpeername(fd, (struct sockaddr *)&peer, &pl) < 0)
                return negerrno();
        if (local.sin_family != AF_INET || peer.sin_family != AF_INET)
                return -EAFNOSUPPORT;
        _cleanup_close_ int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
        if (nl < 0)
                return negerrno();
        /* The peer's own socket, looked up by its four numbers: from its side, it is the
         * source and this end the destination. */
        struct {
                struct nlmsghdr nlh;
                struct inet_diag_req_v2 r;
        } req = {
                .nlh = { .nlmsg_len = sizeof req, .nlmsg_type = SOCK_DIAG_BY_FAMILY, .nlmsg_flags = NLM_F_REQUEST },
                .r = { .sdiag_family = AF_INET, .sdiag_protocol = IPPROTO_TCP, .idiag_states = ~0U,
                       .id = { .idiag_sport = peer.sin_port, .idiag_dport = local.sin_port,
                               .idiag_src = { peer.sin_addr.s_addr }, .idiag_dst = { local.sin_addr.s_addr },
                               .idiag_cookie = { INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE } } },
        };
        struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
        if (sendto(nl, &req, sizeof req, 0, (struct sockaddr *)&kernel, sizeof kernel) < 0)
                return negerrno();
        union {
                struct nlmsghdr h;
                char b[1024];
        } ans;
        ssize_t n = recv(nl, &ans, sizeof ans, 0);
        if (n < 0)
                return negerrno();
        struct nlmsghdr *h = &ans.h;
        if (!NLMSG_OK(h, (size_t)n))
                return -EBADMSG;
        if (h->nlmsg_type == NLMSG_ERROR) {
                const struct nlmsgerr *e = NLMSG_DATA(h);
                return e->error < 0 ? e->error : -ENOENT;
        }
        if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
                return -EBADMSG;
        *ret = ((const struct inet_diag_msg *)NLMSG_DATA(h))->idiag_uid;
        return 0;
}

/* Whether the client of an accepted connection is the owner or root. A client whose socket
 * cannot be found (gone already, or not on this host's loopback) is not. */
static bool peer_allowed(int fd, uid_t owner) {
        uid_t uid;
        return port_socket_uid(fd, &uid) == 0 && (uid == owner || uid == 0);
}

/* ---------------------------------------------------------------- listeners */

static void listener_event(Watch *w, uint32_t events);

static void retry_event(Watch *w, uint32_t events) {
        PortSet *set = w->data;
        uint64_t v;
        (void)!read(set->retry_timer, &v, sizeof v);
        for (Port *p = set->ports; p; p = p->next)
                if (p->paused && loop_add(set->loop, &p->w, p->fd, EPOLLIN, listener_event, p) == 0)
                        p->paused = false;
}

/* Stops accepting for SBX_PORT_ACCEPT_RETRY_MS: the connection that could not be taken still
 * waits in the backlog and would wake the loop at once. */
static void listener_pause(Port *p) {
        PortSet *set = p->set;
        if (set->retry_timer < 0) {
                set->retry_timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
                if (set->retry_timer >= 0 &&
                    loop_add(set->loop, &set->retry_w, set->retry_timer, EPOLLIN, retry_event, set) < 0)
                        set->retry_timer = safe_close(set->retry_timer);
                if (set->retry_timer < 0)
                        return; /* no timer either: better a busy listener than a deaf one */
        }
        loop_del(set->loop, &p->w);
        p->paused = true;
        (void)timerfd_arm_ms(set->retry_timer, SBX_PORT_ACCEPT_RETRY_MS);
}

static void listener_event(Watch *w, uint32_t events) {
        Port *p = w->data;
        for (unsigned n = 0; n < SBX_PORT_ACCEPT_BATCH; n++) {
                int fd = accept4(p->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0) {
                        if (errno == EAGAIN)
                                return;
                        if (errno == EINTR || errno == ECONNABORTED)
                                continue;
                        log_warn("sandbox %s: port %u: accept: %m", sbx_sandbox_id(p->set->sb), p->port);
                        listener_pause(p);
                        return;
                }
                if (p->owner != (uid_t)-1 && !peer_allowed(fd, p->owner)) {
                        p->refused++;
                        pump_reset_close(fd);
                        continue;
                }
                /* Its fds are the sandbox's share of the daemon's: past it, it is reset. */
                Fwd *f = p->n_fwds < SBX_MAX_PORT_CONNECTIONS ? calloc(1, sizeof *f) : NULL;
                if (f && sandbox_fds_take(p->set->sb, SBX_CONNECTION_FDS) < 0) {
                        free(f);
                        f = NULL;
                }
                if (!f) {
                        pump_reset_close(fd);
                        continue;
                }
                f->port = p;
                f->fd[0] = fd;
                f->fd[1] = -1;
                pump_init(f->flow);
                LIST_LINK(p->fwds, f);
                p->n_fwds++;
                fwd_get_socket(p->set, f);
        }
}

static void port_free(Port *p) {
        PortSet *set = p->set;
        while (p->fwds)
                fwd_free(p->fwds, true);
        loop_del(set->loop, &p->w);
        close(p->fd);
        LIST_UNLINK(set->ports, p);
        set->n_ports--;
        free(p);
}

/* ---------------------------------------------------------------- the set */

/* No port left: the maker and its sockets go too. */
static void set_idle(PortSet *set) {
        (void)maker_stop(set, NULL, 0);
        maker_close_pool(&set->maker);
}

static void ports_freeing(SandboxObserver *o, SbxSandbox *sb) {
        PortSet *set = container_of(o, PortSet, o);
        while (set->ports)
                port_free(set->ports);
        set_idle(set);
        loop_del(set->loop, &set->retry_w);
        safe_close(set->retry_timer);
        free(set);
}

static const SandboxObserverOps port_ops = { .freeing = ports_freeing };

static PortSet *port_set(SbxSandbox *sb, bool create) {
        SandboxObserver *o = sandbox_observer_state(sb, &port_ops, sizeof(PortSet), offsetof(PortSet, o), create);
        PortSet *set = o ? container_of(o, PortSet, o) : NULL;
        if (set && !set->loop) {
                set->sb = sb;
                set->loop = sandbox_loop(sb);
                set->rootless = sandbox_host(sb)->shared.rootless;
                set->maker.job = (Job){ .pid = -1, .pidfd = -1, .result = -1 };
                set->maker.sock = -1;
                set->retry_timer = -1;
        }
        return set;
}

static Port *port_find(PortSet *set, uint16_t port) {
        for (Port *p = set ? set->ports : NULL; p; p = p->next)
                if (p->port == port)
                        return p;
        return NULL;
}

int sbx_port_expose(SbxSandbox *sb, uint16_t port, uint16_t *ret_host_port) {
        if (port == 0)
                return -EINVAL;
        if (sandbox_dying(sb))
                return -ESRCH;
        PortSet *set = port_set(sb, true);
        if (!set)
                return -ENOMEM;
        if (port_find(set, port))
                return -EEXIST;
        if (set->n_ports >= SBX_MAX_PORTS)
                return -EMFILE;
        if (set->maker.failed < 0)
                return set->maker.failed;
        /* The host's loopback only: whoever can reach the host's 127.0.0.1 could reach the
         * sandbox's port as well, and nobody else. */
        _cleanup_close_ int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t alen = sizeof a;
        if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, SOMAXCONN) < 0 ||
            getsockname(fd, (struct sockaddr *)&a, &alen) < 0)
                return negerrno();
        Port *p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        p->set = set;
        p->port = port;
        p->owner = (uid_t)-1;
        p->host_port = ntohs(a.sin_port);
        int r = loop_add(set->loop, &p->w, fd, EPOLLIN, listener_event, p);
        if (r < 0) {
                free(p);
                return r;
        }
        p->fd = TAKE_FD(fd);
        LIST_LINK(set->ports, p);
        set->n_ports++;
        /* The maker starts now, so the first connection finds sockets ready, and a maker that
         * cannot start fails the call rather than every connection. */
        if (set->maker.job.pid <= 0 && (r = maker_start(set)) < 0) {
                port_free(p);
                if (!set->ports)
                        set_idle(set);
                return r;
        }
        maker_ask(set);
        *ret_host_port = p->host_port;
        return 0;
}

int sbx_port_unexpose(SbxSandbox *sb, uint16_t port) {
        PortSet *set = port_set(sb, false);
        Port *p = port_find(set, port);
        if (!p)
                return -ENOENT;
        port_free(p);
        if (!set->ports)
                set_idle(set);
        return 0;
}

int sbx_port_set_owner(SbxSandbox *sb, uint16_t port, uid_t owner) {
        PortSet *set = port_set(sb, false);
        Port *p = set ? port_find(set, port) : NULL;
        if (!p)
                return -ENOENT;
        p->owner = owner;
        return 0;
}

size_t sbx_port_list(SbxSandbox *sb, SbxPort *out, size_t max) {
        PortSet *set = port_set(sb, false);
        if (!set)
                return 0;
        /* In order of port: at most SBX_MAX_PORTS, so picking the next one each time is enough. */
        unsigned last = 0;
        for (size_t k = 0; k < MIN(max, (size_t)set->n_ports); k++) {
                const Port *next = NULL;
                for (const Port *p = set->ports; p; p = p->next)
                        if (p->port > last && (!next || p->port < next->port))
                                next = p;
                out[k] = (SbxPort){ .port = next->port, .host_port = next->host_port, .connections = next->n_fwds,
                                    .owner = next->owner, .refused = next->refused };
                last = next->port;
        }
        return set->n_ports;
}

/* ---------------------------------------------------------------- listening ports */

/* Whether one line of a TCP table is a listening socket on port:
 *   "  12: 0100007F:1F40 00000000:0000 0A 00000000:00000000 ..." (tcp6: 32 hex digits of address). */
static bool tcp_line_listens(const char *line, uint16_t port) {
        unsigned lport, st;
        if (sscanf(line, " %*u: %*[0-9A-Fa-f]:%4x %*[0-9A-Fa-f]:%*4x %2x", &lport, &st) != 2)
                return false; /* the header, or not a socket */
        return st == 0x0A && lport == port;
}

int port_scan_tcp(int fd, uint16_t port) {
        /* Lines are about 150 bytes (tcp6: 180); one longer than the buffer is no socket's and
         * is skipped to its end. */
        char buf[4096];
        size_t have = 0;
        bool skipping = false;
        for (;;) {
                ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return negerrno();
                have += (size_t)n;
                if (n == 0 && have > 0 && buf[have - 1] != '\n')
                        buf[have++] = '\n'; /* a last line without its newline */
                char *line = buf, *nl;
                while ((nl = memchr(line, '\n', have - (size_t)(line - buf)))) {
                        *nl = 0;
                        if (!skipping && tcp_line_listens(line, port))
                                return 1;
                        skipping = false;
                        line = nl + 1;
                }
                if (n == 0)
                        return 0;
                have -= (size_t)(line - buf);
                memmove(buf, line, have);
                if (have == sizeof buf - 1) {
                        skipping = true;
                        have = 0;
                }
        }
}

int sbx_port_listening(SbxSandbox *sb, uint16_t port) {
        /* Before its root is built, pid 1 may still be in the host's network namespace: its
         * tables would tell of the host's sockets. */
        int state = sandbox_setup_state(sb);
        if (state == 0)
                return -EAGAIN;
        /* Asked by a process's waiter, not a request naming the sandbox: parked, pid 1's pidfd
         * must be had again. */
        int rw = sbx_sandbox_unpark(sb);
        if (rw < 0)
                return rw;
        const Box *b = sandbox_box(sb);
        if (state < 0 || b->init_pid <= 0 || b->init_pidfd < 0 || pidfd_is_dead(b->init_pidfd))
                return -ESRCH;
        static const char *const tables[] = { "tcp", "tcp6" };
        int found = 0;
        for (size_t i = 0; i < ELEMENTSOF(tables) && found == 0; i++) {
                char path[64];
                snprintf(path, sizeof path, "/proc/%d/net/%s", (int)b->init_pid, tables[i]);
                _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0) {
                        /* No IPv6 in this kernel: tcp6 is absent. */
                        if (errno == ENOENT && i > 0)
                                continue;
                        return errno == ENOENT ? -ESRCH : negerrno();
                }
                found = port_scan_tcp(fd, port);
        }
        /* pid 1 still alive: the pid was not another process's while it was read. */
        if (pidfd_is_dead(b->init_pidfd))
                return -ESRCH;
        return found;
}
