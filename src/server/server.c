/* SPDX-License-Identifier: MIT */
/* The server: listening socket, stdio connection, signals and orderly shutdown; it connects
 * the transport (conn.c) to the dispatcher, the pending requests and the registry. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include "base/limits.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/util.h"
#include "server/conn.h"
#include "server/core.h"
#include "server/dispatch.h"
#include "server/expiry.h"
#include "server/server.h"
#include "files/fileapi.h"
#include "session/internal.h"

/* A listening socket: the clients' (--socket, or systemd's) or the operator's
 * (--system-socket, whose connections are fixed to the system lane). */
typedef struct Listener {
        Server *server;
        int fd;
        Watch w;
        char *path; /* unlinked at shutdown; NULL for a socket systemd made */
        int lane;   /* the lane of its connections, -1 when each request says */
        bool paused; /* out of fds: not watched until a connection closes (resume_listeners) */
} Listener;

enum { LISTEN_MAIN, LISTEN_SYSTEM, LISTEN_COUNT };

struct Server {
        Core core;
        Loop *loop;
        ConnList conns;
        Listener listeners[LISTEN_COUNT];
        int stdio_lane; /* the --lane the operator fixed for the main socket and stdio, or -1 */
        int sig_fd;
        Watch sw;
        int deadline_fd; /* the orderly shutdown's deadline */
        Watch dw;
        uint64_t deadline_ms;
        bool draining; /* shutting down: waiting for cancelled work to be answered */
        bool stop;
};

static void on_line(void *data, Conn *c, const char *line, size_t len, bool too_large) {
        Server *s = data;
        dispatch_line(&s->core, c, line, len, too_large);
}

static void on_paused(void *data, Conn *c, bool paused) {
        Server *s = data;
        pending_pause(&s->core.pending, c, paused);
}

static void on_eof(void *data, Conn *c) {
        /* On stdio the end of input is the signal to shut down, after answering. */
        if (conn_is_stdio(c))
                server_shutdown(data);
        else
                conn_close(c);
}

static void accept_event(Watch *w, uint32_t events);

/* A connection closed: its fds are free again, so listeners paused for want of them listen
 * again (no timer: that would take an fd too). */
static void resume_listeners(Server *s) {
        for (int i = 0; i < LISTEN_COUNT; i++) {
                Listener *l = &s->listeners[i];
                if (l->paused && l->fd >= 0 && loop_add(s->loop, &l->w, l->fd, EPOLLIN, accept_event, l) == 0)
                        l->paused = false;
        }
}

static void on_closed(void *data, Conn *c) {
        Server *s = data;
        resume_listeners(s);
        lanes_drop_conn(&s->core.lanes, c);
        pending_detach(&s->core.pending, c);
        /* Its uploads go with it, in persistent sandboxes too: their temp files hold space.
         * Found among the open uploads, and its sandboxes through its owner record: a close
         * visits no other sandbox. */
        sbx_context_upload_free_owned(s->core.ctx, c);
        /* Its sandboxes go with it, persistent ones excepted. */
        registry_destroy_owned(&s->core.registry, c);
        /* The stdio client is the only one there will ever be: once its connection is closed
         * (it stopped reading: an answer could not be written) there is nobody left to serve. */
        if (conn_is_stdio(c))
                server_shutdown(s);
}

static const ConnOps conn_ops = { .line = on_line, .paused = on_paused, .eof = on_eof, .closed = on_closed };

static void shutdown_requested(void *data) { server_shutdown(data); }

static void signal_event(Watch *w, uint32_t events) {
        Server *s = w->data;
        struct signalfd_siginfo si;
        bool again = s->core.shutting_down;
        while (read(s->sig_fd, &si, sizeof si) > 0)
                ;
        /* A second signal does not wait for the deadline. */
        if (again)
                s->stop = true;
        else
                server_shutdown(s);
}

static void deadline_event(Watch *w, uint32_t events) {
        Server *s = w->data;
        log_warn("shutdown: the deadline passed with work still under way; destroying everything");
        s->stop = true;
}

static void egress_refused(void *ud, SbxSandbox *sb, const SbxEgressEvent *ev);

int server_new(Server **ret) {
        Server *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->sig_fd = s->deadline_fd = -1;
        s->stdio_lane = -1;
        s->deadline_ms = SBX_DEFAULT_SHUTDOWN_DEADLINE_MS;
        for (unsigned i = 0; i < LISTEN_COUNT; i++)
                s->listeners[i] = (Listener){ .server = s, .fd = -1, .lane = i == LISTEN_SYSTEM ? LANE_SYSTEM : -1 };
        int r = sbx_context_new(&s->core.ctx);
        if (r < 0) {
                free(s);
                return r;
        }
        s->loop = sbx_context_loop(s->core.ctx);
        sbx_context_on_egress(s->core.ctx, egress_refused, s);
        s->core.start_ms = now_ms();
        s->core.shutdown = shutdown_requested;
        s->core.shutdown_data = s;
        lanes_init(&s->core.lanes, s->loop, dispatch_start_waiting, &s->core);
        conn_list_init(&s->conns, s->loop, &conn_ops, s);
        s->core.create_defaults = json_object();
        s->core.create_enforced = json_object();
        s->core.create_secrets = json_object();
        if (!s->core.create_defaults || !s->core.create_enforced || !s->core.create_secrets) {
                server_free(s);
                return -ENOMEM;
        }
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        s->sig_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        if (s->sig_fd < 0 || loop_add(s->loop, &s->sw, s->sig_fd, EPOLLIN, signal_event, s) < 0) {
                r = negerrno();
                server_free(s);
                return r;
        }
        *ret = s;
        return 0;
}

static void accept_event(Watch *w, uint32_t events) {
        Listener *l = w->data;
        Server *s = l->server;
        for (;;) {
                int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
                        /* The connection still waits in the backlog and would wake the loop at
                         * once, again and again: not watched until an fd comes back. */
                        log_warn("out of file descriptors: not accepting connections until one closes");
                        loop_del(s->loop, &l->w);
                        l->paused = true;
                        return;
                }
                if (fd < 0)
                        return;
                struct ucred uc;
                socklen_t len = sizeof uc;
                /* Only our own uid (or root) may drive sandboxes: the socket's mode says the
                 * same, this holds even if the mode was loosened. */
                if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0 ||
                    (uc.uid != geteuid() && uc.uid != 0)) {
                        log_warn("refused a connection from uid %u", (unsigned)uc.uid);
                        audit_event_peer(s->core.audit, "connection.refused", NULL, len == sizeof uc ? (long)uc.uid : -1,
                                         len == sizeof uc ? (long)uc.pid : -1, NULL);
                        close(fd);
                        continue;
                }
                /* Reading and writing are separate epoll registrations, which need separate
                 * fd numbers. */
                int wfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
                Conn *c;
                if (wfd < 0 || conn_new(&s->conns, fd, wfd, false, uc.uid, &c) < 0) {
                        close(fd);
                        safe_close(wfd);
                        if (wfd < 0) {
                                /* One fd short: the same as none (see above), without taking
                                 * and dropping every client waiting in the backlog. */
                                loop_del(s->loop, &l->w);
                                l->paused = true;
                                return;
                        }
                        continue;
                }
                conn_set_pid(c, uc.pid);
                conn_set_lane(c, l->lane);
        }
}

static int listen_at(Listener *l, const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (strlen(path) >= sizeof sa.sun_path)
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, path);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return negerrno();
        /* A socket file left by a dead server is replaced; a live one is not, and nothing
         * that is not a socket ever is (a file given by mistake stays as it was). */
        struct stat st;
        if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode)) {
                close(fd);
                return -EEXIST;
        }
        if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) {
                int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                bool live = probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof sa) == 0;
                safe_close(probe);
                if (live) {
                        close(fd);
                        return -EADDRINUSE;
                }
                (void)unlink(path);
        }
        /* Bound under a temporary name and renamed once listening: a client that waits for
         * the file to appear must never find it refusing connections. */
        char tmp[sizeof sa.sun_path];
        bool renamed = snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid()) < (int)sizeof tmp;
        struct sockaddr_un ta = sa;
        if (renamed) {
                strcpy(ta.sun_path, tmp);
                if (lstat(tmp, &st) == 0 && S_ISSOCK(st.st_mode))
                        (void)unlink(tmp); /* our own name, left by a server of this pid that died */
        }
        mode_t old = umask(0177);
        int r = bind(fd, (struct sockaddr *)&ta, sizeof ta);
        umask(old);
        const char *bound = renamed ? tmp : path;
        /* RENAME_NOREPLACE: whatever appeared at path since the check above stays. */
        if (r < 0 || chmod(bound, 0600) < 0 || listen(fd, 128) < 0 ||
            (renamed && renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) < 0)) {
                r = negerrno();
                if (renamed)
                        (void)unlink(tmp);
                close(fd);
                return r;
        }
        l->fd = fd;
        l->path = strdup(path);
        return loop_add(l->server->loop, &l->w, fd, EPOLLIN, accept_event, l);
}

int server_listen(Server *s, const char *path) { return listen_at(&s->listeners[LISTEN_MAIN], path); }

int server_listen_system(Server *s, const char *path) { return listen_at(&s->listeners[LISTEN_SYSTEM], path); }

int server_listen_fd(Server *s, int fd, const char *path) {
        struct stat st;
        int domain = 0, type = 0, listening = 0;
        socklen_t len = sizeof domain;
        /* What systemd's sd_is_socket_unix(fd, SOCK_STREAM, 1, path, 0) checks: a wrong unit
         * file (a datagram or TCP socket, one not yet listening) is refused here, at start,
         * not found out at the first client. */
        if (fstat(fd, &st) < 0)
                return negerrno();
        if (!S_ISSOCK(st.st_mode) || getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0 ||
            domain != AF_UNIX || (len = sizeof type, getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len)) < 0 ||
            type != SOCK_STREAM ||
            (len = sizeof listening, getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len)) < 0 ||
            !listening)
                return -ENOTSOCK;
        if (path) {
                struct sockaddr_un sa = { 0 };
                len = sizeof sa;
                if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
                        return negerrno();
                size_t n = len > offsetof(struct sockaddr_un, sun_path) ? len - offsetof(struct sockaddr_un, sun_path) : 0;
                if (strnlen(sa.sun_path, n) != strlen(path) || memcmp(sa.sun_path, path, strlen(path)) != 0)
                        return -EADDRNOTAVAIL;
        }
        int r = fcntl(fd, F_SETFD, FD_CLOEXEC) < 0 ? negerrno() : fd_set_nonblock(fd, true);
        if (r < 0)
                return r;
        /* socket_path stays NULL: the socket file is its maker's (systemd keeps listening on
         * it after this server exits, to start the next one), so shutdown leaves it. */
        Listener *l = &s->listeners[LISTEN_MAIN];
        l->fd = fd;
        return loop_add(s->loop, &l->w, fd, EPOLLIN, accept_event, l);
}

void server_set_pool(Server *s, unsigned n) {
        sbx_context_set_pool(s->core.ctx, n);
}

struct SbxContext *server_context(Server *s) { return s->core.ctx; }
/* Every request an allowlist proxy refused (or could not serve): a `network.denied` audit
 * event (within the sandbox's share: audit_event_limited()), and a line on stderr. */
static void egress_refused(void *ud, SbxSandbox *sb, const SbxEgressEvent *ev) {
        Server *s = ud;
        log_info("sandbox %s: egress %d: %s", sbx_sandbox_id(sb), ev->status, ev->reason);
        SrvSandbox *srv = registry_find_id(&s->core.registry, sbx_sandbox_id(sb));
        json_t *f = json_pack("{s:s, s:i, s:i, s:s}", "host", ev->host ? ev->host : "", "port", (int)ev->port, "status",
                              ev->status, "reason", ev->reason ? ev->reason : "");
        /* Limited per sandbox: it makes refused requests at will. */
        if (srv)
                audit_event_limited(s->core.audit, "network.denied", srv, f);
        else
                audit_event(s->core.audit, "network.denied", NULL, NULL, f);
}

int server_set_egress(Server *s, const char *hosts_file, const char *const *allow_private, const char *ca_file,
                      char *err, size_t errlen) {
        SbxEgressOptions o = { .hosts_file = hosts_file, .allow_private = allow_private, .ca_file = ca_file };
        return sbx_context_set_egress(s->core.ctx, &o, err, errlen);
}
unsigned server_set_max_sandboxes(Server *s, unsigned n) { return registry_set_max(&s->core.registry, n); }

int server_set_park_after(Server *s, uint64_t ms) {
        /* Process mode has no pid 1 to keep a sandbox's fds: nothing is parked. */
        int r = registry_set_parking(&s->core.registry, s->loop, s->core.ctx, s->core.mode == MODE_PROCESS ? 0 : ms);
        if (r < 0)
                errno = -r;
        return r;
}

int server_add_stdio(Server *s) {
        Conn *c;
        int r = conn_new(&s->conns, STDIN_FILENO, STDOUT_FILENO, true, geteuid(), &c);
        if (r < 0)
                return r;
        conn_set_lane(c, s->stdio_lane);
        /* The client is whoever holds the other end of stdin: the kernel says who when it is
         * a socket (sbx mcp's socketpair), else it is taken to be the parent that started us
         * (the SDKs spawn `sbx serve --stdio`). */
        struct ucred uc;
        socklen_t len = sizeof uc;
        conn_set_pid(c, getsockopt(STDIN_FILENO, SOL_SOCKET, SO_PEERCRED, &uc, &len) == 0 ? uc.pid : getppid());
        return 0;
}

static int connect_as(Server *s, uid_t uid, bool operator, int *ret_fd);

int server_connect(Server *s, uid_t uid, int *ret_fd) { return connect_as(s, uid, false, ret_fd); }
int server_connect_operator(Server *s, int *ret_fd) { return connect_as(s, 0, true, ret_fd); }

static int connect_as(Server *s, uid_t uid, bool operator, int *ret_fd) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0)
                return negerrno();
        int wfd = fcntl(sv[0], F_DUPFD_CLOEXEC, 3);
        Conn *c;
        int r = wfd < 0 ? negerrno() : conn_new(&s->conns, sv[0], wfd, false, uid, &c);
        if (r < 0) {
                close(sv[0]);
                safe_close(wfd);
                close(sv[1]);
                return r;
        }
        conn_set_pid(c, getpid());
        conn_set_lane(c, s->stdio_lane);
        if (operator)
                conn_set_operator(c);
        *ret_fd = sv[1];
        return 0;
}

Loop *server_loop(Server *s) { return s->loop; }

/* Audit lines are redacted as the output of their sandbox is. */
static char *audit_redact(void *data, const char *sandbox_id, const char *text, size_t len, size_t *ret_len) {
        Server *s = data;
        SrvSandbox *sb = registry_find_id(&s->core.registry, sandbox_id);
        return sb ? sbx_sandbox_redact(sb->sb, text, len, ret_len) : NULL;
}

int server_set_audit(Server *s, const char *path, uint64_t max_bytes, unsigned keep, bool fail_closed, char *err,
                     size_t errlen) {
        AuditOptions o = { .path = path, .max_bytes = max_bytes, .keep = keep, .fail_closed = fail_closed };
        int r = audit_new(s->loop, &o, &s->core.audit, err, errlen);
        s->core.registry.audit = s->core.audit;
        audit_set_redact(s->core.audit, audit_redact, s);
        return r;
}

void server_set_lane(Server *s, int lane) {
        s->stdio_lane = s->listeners[LISTEN_MAIN].lane = lane;
}

void server_set_slots(Server *s, int lane, unsigned slots, unsigned queue_max) {
        lanes_configure(&s->core.lanes, (LaneId)lane, slots, queue_max);
}

void server_lane_defaults(unsigned *ret_interactive, unsigned *ret_system, unsigned *ret_queue) {
        lanes_defaults(ret_interactive, ret_system, ret_queue);
}

void server_set_shutdown_deadline(Server *s, uint64_t ms) { s->deadline_ms = ms; }

int server_set_expiry_dir(Server *s, const char *dir, char *err, size_t errlen) {
        return expiry_set_dir(&s->core, dir, err, errlen);
}

void server_set_create_config(Server *s, json_t *defaults, json_t *enforced, json_t *secrets) {
        json_decref(s->core.create_defaults);
        json_decref(s->core.create_enforced);
        json_decref(s->core.create_secrets);
        s->core.create_defaults = json_incref(defaults);
        s->core.create_enforced = json_incref(enforced);
        s->core.create_secrets = json_incref(secrets);
}

int server_set_mode(Server *s, const char *mode) {
        if (strcmp(mode, "namespaces") == 0)
                s->core.mode = MODE_NAMESPACES;
        else if (strcmp(mode, "disabled") == 0)
                s->core.mode = MODE_DISABLED;
        else if (strcmp(mode, "process") == 0)
                s->core.mode = MODE_PROCESS;
        else
                return -EINVAL;
        return sbx_context_set_mode(s->core.ctx, s->core.mode == MODE_PROCESS ? SBX_MODE_PROCESS : SBX_MODE_NAMESPACES);
}

static void close_listeners(Server *s) {
        for (unsigned i = 0; i < LISTEN_COUNT; i++) {
                Listener *l = &s->listeners[i];
                if (l->fd < 0)
                        continue;
                loop_del(s->loop, &l->w);
                l->fd = safe_close(l->fd);
                if (l->path)
                        (void)unlink(l->path);
        }
}

/* The orderly shutdown (seed 004): no new work, waiting requests answered POOL_SHUTTING_DOWN,
 * running ones cancelled (answered 125); once nothing is under way, or at the deadline,
 * everything is destroyed. */
void server_shutdown(Server *s) {
        if (s->core.shutting_down)
                return;
        s->core.shutting_down = true;
        close_listeners(s);
        RpcError e;
        rpc_fail(&e, RPC_SHUTTING_DOWN, "POOL_SHUTTING_DOWN: the server is shutting down");
        lanes_fail_all(&s->core.lanes, &e);
        pending_fail_queued(&s->core.pending, &e);
        pending_cancel_running(&s->core.pending);
        s->draining = true;
        s->deadline_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (s->deadline_fd < 0 || loop_add(s->loop, &s->dw, s->deadline_fd, EPOLLIN, deadline_event, s) < 0 ||
            timerfd_arm_ms(s->deadline_fd, s->deadline_ms ? s->deadline_ms : 1) < 0)
                s->stop = true;
}

/* Whatever is still queued or running is failed or cancelled, then every sandbox goes. What
 * is left to say is flushed to clients for a bounded time. */
static void finish(Server *s) {
        RpcError e;
        rpc_fail(&e, RPC_SHUTTING_DOWN, "POOL_SHUTTING_DOWN: the server is shutting down");
        lanes_fail_all(&s->core.lanes, &e);
        pending_fail_queued(&s->core.pending, &e);
        /* Past the deadline, work still under way is answered now: nothing will answer it. */
        pending_fail_all(&s->core.pending, &e);
        registry_destroy_all(&s->core.registry);
        audit_close(s->core.audit);
        conn_flush_all(&s->conns, now_ms() + SBX_SHUTDOWN_FLUSH_MS);
        conn_close_all(&s->conns);
}

int server_run(Server *s) {
        while (!s->stop) {
                if (s->draining && pending_busy(&s->core.pending) == 0)
                        break;
                int r = sbx_context_run_once(s->core.ctx, -1);
                if (r < 0 && r != -EINTR) {
                        log_error("event loop: %s", strerror(-r));
                        break;
                }
        }
        finish(s);
        return 0;
}

Server *server_free(Server *s) {
        if (!s)
                return NULL;
        registry_stop_parking(&s->core.registry);
        registry_destroy_all(&s->core.registry);
        conn_close_all(&s->conns);
        s->core.audit = audit_free(s->core.audit);
        if (s->sw.active)
                loop_del(s->loop, &s->sw);
        safe_close(s->sig_fd);
        if (s->dw.active)
                loop_del(s->loop, &s->dw);
        safe_close(s->deadline_fd);
        close_listeners(s);
        for (unsigned i = 0; i < LISTEN_COUNT; i++)
                free(s->listeners[i].path);
        sbx_context_free(s->core.ctx);
        json_decref(s->core.create_defaults);
        json_decref(s->core.create_enforced);
        json_decref(s->core.create_secrets);
        free(s->core.expiry_dir);
        free(s);
        return NULL;
}
