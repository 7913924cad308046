/* SPDX-License-Identifier: MIT */
/* The spawner (see spawner.h): requests in, clones out, in order. */
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/log.h"
#include "base/util.h"
#include "sandbox/spawner.h"
#include "spawner_abi.h"

#define SPAWN_MAGIC 0x53505731u /* "SPW1" */
/* Room a request done in the caller needs in its socket for its two answers, with the
 * kernel's overhead on each and fds in flight (generous). */
#define SPAWN_INLINE_ROOM (16U * 1024)

enum {
        F_MOUNT_NETWORK = 1u << 0,
        F_NOEXEC_WRITABLE = 1u << 1,
        F_NS_ROOT = 1u << 2,
        F_NETWORK = 1u << 3,
        F_PLAIN = 1u << 4,
        F_PLAIN_OWN = 1u << 5,
        F_POLICY = 1u << 6,
        F_ROOTFS = 1u << 7,
        F_WORKDIR = 1u << 8,
        F_TRUST = 1u << 9,
        F_LAYERS = 1u << 10,
        F_ENV = 1u << 11,
        F_ALLOW = 1u << 12,
        F_DENY = 1u << 13,
        F_ROOTLESS = 1u << 14,
        F_MAPS = 1u << 15,
        F_LOWER = 1u << 16,
        F_KILL = 1u << 17,
        F_SNAP_LAZY = 1u << 18,
};

/* The fds a request carries, in this order, each present when its bit of fdmask is. */
enum { FD_CTL, FD_SESSION, FD_COUNT };
/* ... and an answer. */
enum { RFD_PIDFD, RFD_DIR, RFD_V1_MEMORY, RFD_V1_PIDS, RFD_V1_CPU, RFD_V1_PIDS_CMDS, RFD_COUNT };

typedef struct SpawnHead {
        uint32_t magic, flags;
        uint64_t seq;
        uint64_t fs_bytes, file_count, snap_bytes, snap_inodes, rlimit_as, rlimit_nproc;
        uint32_t mount_uid, mount_gid, uid, gid, plain_uid, plain_gid;
        uint32_t host_uid, host_gid, host_base, host_ids;
        int32_t connect_port;
        uint16_t proxy_port, fdmask;
        uint32_t n_layers, n_env, n_allow, n_deny;
        uint64_t memory_bytes;
        uint32_t pids, cpu_millis, pids_reserve;
        char cg_name[64];
        uint32_t strings; /* bytes of NUL-terminated strings after the head */
} SpawnHead;

/* Each request gets one or two answers: CLONED with pid 1's pid and pidfd the moment it
 * exists (so that a spawner dying right after the clone leaves no pid 1 the daemon does not
 * know), then DONE with the status and the cgroups' fds. */
enum { SPAWN_CLONED = 1, SPAWN_DONE = 2 };
/* ... and before any, the spawner's program says once that it took its setup. */
enum { SPAWN_READY = 3 };

typedef struct SpawnWire {
        uint64_t seq;
        int32_t pid, status;
        uint32_t stage, fdmask, cmds_pids;
        char cg_name[64];
        char text[256];
} SpawnWire;

/* ---------------------------------------------------------------- the daemon's side */

typedef struct Packer {
        char *buf;
        size_t len, cap;
        bool overflow;
} Packer;

static void put(Packer *p, const char *s) {
        size_t n = strlen(s) + 1;
        if (p->overflow || n > p->cap - p->len) {
                p->overflow = true;
                return;
        }
        memcpy(p->buf + p->len, s, n);
        p->len += n;
}

static uint32_t put_list(Packer *p, const char *const *v) {
        uint32_t n = 0;
        for (; v && v[n]; n++)
                put(p, v[n]);
        return n;
}

/* The shared skeleton the roots of the spawner's clones are built on (mount_skeleton_make()):
 * made at the first request it fits, checked against the host at most every
 * SBX_SKELETON_CHECK_MS and made anew once the host changed (a sandbox's pid 1 checks it too,
 * and builds a skeleton of its own when it no longer fits). A spawner that may not make a
 * tmpfs (a rootless daemon's) stops trying. */
typedef struct Skeleton {
        int fd; /* -1: none yet */
        unsigned uid, gid;
        bool unavailable;
        uint64_t checked_ms;
} Skeleton;

/* The next sandbox's network namespace, made by the spawner between requests (a root
 * spawner's only: it needs CAP_SYS_ADMIN over the host's user namespace) with loopback up.
 * Making one is the costliest step of a create here (0.8 ms of pid 1's time: loopback's
 * registration and the per-namespace sysctl tables); a pid 1 cloned into a spare starts
 * without it. The spare belongs to the host's user namespace, not the sandbox's: pid 1
 * could not join it (setns needs CAP_SYS_ADMIN over its owner), so the spawner enters it just
 * for the clone3 and goes back (host: its own namespace, where a sandbox with the host's
 * network is cloned). A sandbox's processes hold no capability either way; its kernel memory
 * is charged to the spawner's memory cgroup, not the sandbox's (its size is fixed; what the
 * sandbox's sockets and connections take is charged to the sandbox). */
typedef struct NetSpare {
        int host, spare; /* -1: none */
        bool unavailable; /* not host root, or not allowed to make one: tried no more */
} NetSpare;

typedef struct SpawnerEnv {
        int sock, builtin_fd;
        bool in_caller; /* spawner_start_inline(): the calling process clones, as the parent */
        SpawnShared *shared;
        const struct sock_fprog *seccomp;
        CgroupRoot *cg;
        Skeleton *skel; /* NULL: the roots are built on skeletons of their own (in the caller) */
        /* Cgroups made between requests for the next one (NULL: none, in the caller). */
        CgroupSpare *spare;
        NetSpare *net; /* NULL: none, in the caller */
} SpawnerEnv;

static void handle_request(const SpawnerEnv *env, char *buf, ssize_t n, int *got, size_t ngot, int msg_flags);
/* The spawner's requests arrive in this mapping of SBX_SPAWN_MSG_MAX bytes (spawner_main()),
 * its own and not malloc's: a session shell that goes on as the spawner's bash unmaps its copy
 * (InitConfig.request), where a free() would leave the bytes in the heap, or malloc's
 * thresholds raised for the shell's whole life. */
static char *request_map;

int spawner_request(Spawner *sp, const InitConfig *ic, const SpawnIds *ids, uint64_t *ret_seq) {
        if (sp->fd < 0)
                return -EPIPE;
        _cleanup_free_ char *buf = malloc(SBX_SPAWN_MSG_MAX);
        if (!buf)
                return -ENOMEM;
        SpawnHead *h = (SpawnHead *)buf;
        const MountConfig *m = &ic->mount;
        const LandlockPolicy *pol = ic->policy;
        *h = (SpawnHead){
                .magic = SPAWN_MAGIC, .seq = sp->next_seq,
                .fs_bytes = m->fs_bytes, .file_count = m->file_count, .snap_bytes = m->snap_bytes,
                .snap_inodes = m->snap_inodes, .rlimit_as = ic->rlimit_as, .rlimit_nproc = ic->rlimit_nproc,
                .mount_uid = m->uid, .mount_gid = m->gid, .uid = ic->uid, .gid = ic->gid,
                .host_uid = ids->host_uid, .host_gid = ids->host_gid, .host_base = ids->host_base,
                .host_ids = ids->host_ids, .connect_port = pol ? pol->connect_port : -1,
                .proxy_port = ic->proxy_port, .memory_bytes = ids->limits.memory_bytes, .pids = ids->limits.pids,
                .cpu_millis = ids->limits.cpu_millis, .pids_reserve = ids->limits.pids_reserve,
        };
        if (!ids->cg_name || strlen(ids->cg_name) >= sizeof h->cg_name)
                return -EINVAL;
        snprintf(h->cg_name, sizeof h->cg_name, "%s", ids->cg_name);
        h->flags = (m->network ? F_MOUNT_NETWORK : 0) | (m->noexec_writable ? F_NOEXEC_WRITABLE : 0) |
                   (ic->ns_root ? F_NS_ROOT : 0) | (ic->network ? F_NETWORK : 0) | (ic->plain ? F_PLAIN : 0) |
                   (ic->plain && ic->plain->own ? F_PLAIN_OWN : 0) | (pol ? F_POLICY : 0) |
                   (m->rootfs ? F_ROOTFS : 0) | (ic->workdir ? F_WORKDIR : 0) | (m->trust_pem ? F_TRUST : 0) |
                   (m->layers ? F_LAYERS : 0) | (ic->env ? F_ENV : 0) | (pol && pol->allow ? F_ALLOW : 0) |
                   (pol && pol->deny ? F_DENY : 0) | (ids->rootless ? F_ROOTLESS : 0) | (ids->maps ? F_MAPS : 0) |
                   (ids->lower_priority ? F_LOWER : 0) | (ids->kill_fd ? F_KILL : 0) |
                   (m->snap_lazy ? F_SNAP_LAZY : 0);
        if (ic->plain) {
                h->plain_uid = ic->plain->uid;
                h->plain_gid = ic->plain->gid;
        }
        Packer p = { .buf = buf, .len = sizeof *h, .cap = SBX_SPAWN_MSG_MAX };
        put(&p, m->staging ? m->staging : "");
        if (m->rootfs)
                put(&p, m->rootfs);
        if (ic->workdir)
                put(&p, ic->workdir);
        if (m->trust_pem)
                put(&p, m->trust_pem);
        if (ic->plain) {
                put(&p, ic->plain->dir);
                put(&p, ic->plain->snap);
        }
        h->n_layers = put_list(&p, m->layers);
        h->n_env = put_list(&p, (const char *const *)ic->env);
        h->n_allow = pol ? put_list(&p, pol->allow) : 0;
        h->n_deny = pol ? put_list(&p, pol->deny) : 0;
        if (p.overflow)
                return -EMSGSIZE;
        h->strings = (uint32_t)(p.len - sizeof *h);

        const int all[FD_COUNT] = { ic->ctl_fd, ic->session_fd };
        int fds[FD_COUNT];
        size_t nfds = 0;
        for (size_t i = 0; i < FD_COUNT; i++)
                if (all[i] >= 0) {
                        h->fdmask |= (uint16_t)(1u << i);
                        fds[nfds++] = all[i];
                }
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int) * FD_COUNT)];
        } cm;
        struct iovec iov = { buf, p.len };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        msg_attach_fds(&mh, cm.buf, fds, nfds);
        if (sp->inline_fd >= 0) {
                /* Done here and now: the answers wait on sp->fd as the spawner's would, so
                 * there must be room for them first (a caller that asks for hundreds of
                 * sandboxes before its loop takes any answer is refused, as by a spawner). The
                 * fds go as copies, as they would over the socket. */
                int sndbuf = 0, queued = 0;
                socklen_t sl = sizeof sndbuf;
                if (getsockopt(sp->inline_fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &sl) < 0 ||
                    ioctl(sp->inline_fd, SIOCOUTQ, &queued) < 0)
                        return negerrno();
                if (sndbuf - queued < (int)SPAWN_INLINE_ROOM)
                        return -EAGAIN;
                int got[FD_COUNT];
                for (size_t i = 0; i < nfds; i++)
                        if ((got[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 3)) < 0) {
                                int r = negerrno();
                                while (i-- > 0)
                                        close(got[i]);
                                return r;
                        }
                SpawnerEnv env = { .sock = sp->inline_fd, .builtin_fd = sp->builtin_fd, .in_caller = true,
                                   .shared = sp->shared, .seccomp = sp->seccomp, .cg = sp->root };
                handle_request(&env, buf, (ssize_t)p.len, got, nfds, 0);
                *ret_seq = sp->next_seq++;
                return 0;
        }
        if (sendmsg(sp->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
                /* ETOOMANYREFS: the fds in flight, counted against the user's limit. */
                int r = errno == EWOULDBLOCK || errno == ETOOMANYREFS || errno == ENOBUFS ? -EAGAIN : negerrno();
                return r;
        }
        *ret_seq = sp->next_seq++;
        return 0;
}

void spawn_reply_init(SpawnReply *r, uint64_t seq) {
        *r = (SpawnReply){ .seq = seq, .pid = 0, .pidfd = -1,
                           .cg = { .dir = -1, .v1_memory = -1, .v1_pids = -1, .v1_cpu = -1, .v1_pids_cmds = -1 } };
}

int spawner_reply(Spawner *sp, SpawnReply *ret) {
        if (sp->fd < 0)
                return -EPIPE;
        SpawnWire w;
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int) * RFD_COUNT)];
        } cm;
        struct iovec iov = { &w, sizeof w };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf };
        ssize_t n;
        /* A spawner that died with requests unread leaves ECONNRESET on this end, reported
         * once before the answers it had sent: those are still to be taken. */
        while ((n = recvmsg(sp->fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT)) < 0 &&
               (errno == EINTR || errno == ECONNRESET))
                ;
        if (n < 0 && errno == EAGAIN)
                return 0;
        /* Out of fds, the kernel gives only some (MSG_CTRUNC): the answer is taken without
         * any, its pid and name kept, for what it made to be found (box_spawn_recover()). */
        bool truncated = n > 0 && (mh.msg_flags & MSG_CTRUNC);
        int got[RFD_COUNT];
        size_t ngot = n > 0 ? msg_take_fds(&mh, got, RFD_COUNT) : 0;
        int fds[RFD_COUNT];
        size_t used = 0;
        if (truncated) {
                for (size_t i = 0; i < ngot; i++)
                        close(got[i]);
                ngot = 0;
                w.fdmask = 0;
        }
        for (size_t i = 0; i < RFD_COUNT; i++)
                fds[i] = n == (ssize_t)sizeof w && (w.fdmask & (1u << i)) && used < ngot ? got[used++] : -1;
        if (n != (ssize_t)sizeof w || used != ngot || (w.stage != SPAWN_CLONED && w.stage != SPAWN_DONE)) {
                for (size_t i = 0; i < ngot; i++)
                        close(got[i]);
                return -EPIPE;
        }
        spawn_reply_init(ret, w.seq);
        ret->cloned = w.stage == SPAWN_CLONED;
        ret->truncated = truncated;
        ret->pid = w.pid;
        ret->pidfd = fds[RFD_PIDFD];
        ret->status = truncated && w.status >= 0 ? -EMFILE : w.status;
        ret->cg.dir = fds[RFD_DIR];
        ret->cg.v1_memory = fds[RFD_V1_MEMORY];
        ret->cg.v1_pids = fds[RFD_V1_PIDS];
        ret->cg.v1_cpu = fds[RFD_V1_CPU];
        ret->cg.v1_pids_cmds = fds[RFD_V1_PIDS_CMDS];
        ret->cg.cmds_pids = w.cmds_pids;
        w.cg_name[sizeof w.cg_name - 1] = 0;
        snprintf(ret->cg.name, sizeof ret->cg.name, "%s", w.cg_name);
        ret->cg.has_v1_memory = ret->cg.v1_memory >= 0;
        ret->cg.has_v1_pids = ret->cg.v1_pids >= 0;
        ret->cg.has_v1_cpu = ret->cg.v1_cpu >= 0;
        ret->cg.has_v1_pids_cmds = ret->cg.v1_pids_cmds >= 0;
        if (ret->pid <= 0) {
                ret->pid = 0;
                ret->pidfd = safe_close(ret->pidfd);
        }
        w.text[sizeof w.text - 1] = 0;
        snprintf(ret->text, sizeof ret->text, "%s", w.text);
        return 1;
}

/* ---------------------------------------------------------------- the spawner's side */

typedef struct Unpacker {
        const char *p, *end;
        bool bad;
} Unpacker;

static const char *take(Unpacker *u) {
        const char *nul = u->bad ? NULL : memchr(u->p, 0, (size_t)(u->end - u->p));
        if (!nul) {
                u->bad = true;
                return "";
        }
        const char *s = u->p;
        u->p = nul + 1;
        return s;
}

/* A NULL-terminated list of n strings, malloc'd (the strings are the request's). */
static const char **take_list(Unpacker *u, uint32_t n) {
        if (n > SBX_SPAWN_MSG_MAX / 2) {
                u->bad = true;
                return NULL;
        }
        const char **v = calloc((size_t)n + 1, sizeof *v);
        if (!v) {
                u->bad = true;
                return NULL;
        }
        for (uint32_t i = 0; i < n; i++)
                v[i] = take(u);
        return v;
}

/* Rootless: uid 1000 inside is the caller, nothing else is mapped. Root: ids 0..65535 inside
 * (root, the user, nobody) are the sandbox's own block of host ids; host root is none of them. */
static int write_id_maps(const SpawnHead *h, pid_t pid) {
        char path[64], map[128];
        bool rootless = h->flags & F_ROOTLESS;
        if (rootless)
                snprintf(map, sizeof map, "%u %u 1\n", SBX_SANDBOX_UID, h->host_uid);
        else
                snprintf(map, sizeof map, "0 %u %u\n", h->host_base, h->host_ids);
        snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
        int r = write_file_at(AT_FDCWD, path, map);
        if (r < 0)
                return r;
        if (rootless) {
                snprintf(path, sizeof path, "/proc/%d/setgroups", (int)pid);
                (void)write_file_at(AT_FDCWD, path, "deny");
                snprintf(map, sizeof map, "%u %u 1\n", SBX_SANDBOX_GID, h->host_gid);
        } else {
                snprintf(map, sizeof map, "0 %u %u\n", h->host_base, h->host_ids);
        }
        snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
        return write_file_at(AT_FDCWD, path, map);
}

/* Without a cpu controller nothing caps the sandbox's CPU time: pid 1, still waiting for its
 * id maps, gets SBX_CPU_FALLBACK_NICE (never a better priority than the daemon's own), which
 * everything it starts inherits, so a runaway yields to the host's work. */
static void lower_priority(pid_t pid) {
        errno = 0;
        int own = getpriority(PRIO_PROCESS, 0);
        if (errno)
                own = 0;
        (void)setpriority(PRIO_PROCESS, (id_t)pid, MAX(own, SBX_CPU_FALLBACK_NICE));
}


/* Whether the daemon has closed its end of the sandbox's control socket (it destroyed the
 * sandbox before its turn came): then nothing is made for it. */
static bool ctl_closed(int ctl) {
        struct pollfd p = { .fd = ctl, .events = POLLIN | POLLRDHUP };
        return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR));
}

static void close_fds(int *fds, size_t n) {
        for (size_t i = 0; i < n; i++)
                fds[i] = safe_close(fds[i]);
}

/* pid 1's fds into its cgroups: the v1 ones' cgroup.procs (it joins them itself, first thing,
 * so that no one waits on the kernel's cgroup lock for it: see cgroup/mover.h), the v2 init
 * cgroup it is cloned into, and process mode's cgroup.kill. */
static int open_cgroup_fds(const CgroupSandbox *cg, bool kill, int v1_procs[3], int *init_cg, int *kill_fd) {
        const int v1[3] = { cg->v1_memory, cg->v1_pids, cg->v1_cpu };
        for (size_t i = 0; i < ELEMENTSOF(v1); i++)
                if (v1[i] >= 0 && (v1_procs[i] = openat(v1[i], "cgroup.procs", O_WRONLY | O_CLOEXEC)) < 0)
                        return negerrno();
        if (kill && (*kill_fd = openat(cg->dir, "cgroup.kill", O_WRONLY | O_CLOEXEC)) < 0)
                return negerrno();
        *init_cg = cgroup_sandbox_open_init(cg);
        return *init_cg < 0 ? *init_cg : 0;
}

static void send_wire(int sock, bool in_caller, SpawnWire *w, const int rfds[RFD_COUNT]) {
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int) * RFD_COUNT)];
        } cm;
        int fds[RFD_COUNT];
        size_t n = 0;
        for (size_t i = 0; i < RFD_COUNT; i++)
                if (rfds[i] >= 0) {
                        w->fdmask |= 1u << i;
                        fds[n++] = rfds[i];
                }
        struct iovec iov = { (void *)w, sizeof *w };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        msg_attach_fds(&mh, cm.buf, fds, n);
        while (sendmsg(sock, &mh, MSG_NOSIGNAL) < 0) {
                /* In the caller, the answer goes to its own other end, whose room was checked
                 * (spawner_request()): waiting would be for ever, and exiting the caller's. */
                if (in_caller)
                        return;
                if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN)
                        _exit(0); /* the daemon is gone: so is every pid 1's parent */
                /* Short of memory, or of fds in flight: the answer waits, it is not lost. */
                if (errno != EINTR)
                        usleep(10 * 1000);
        }
}

/* Points m at the shared skeleton, made or made anew first when needed. */
static void skeleton_for(Skeleton *k, MountConfig *m) {
        if (k->unavailable)
                return;
        uint64_t now = now_ms();
        if (k->fd >= 0 && now - k->checked_ms >= SBX_SKELETON_CHECK_MS) {
                k->checked_ms = now;
                if (mount_skeleton_check(m, k->fd) < 0)
                        k->fd = safe_close(k->fd); /* the sandboxes built on it keep theirs */
        }
        if (k->fd < 0) {
                char err[256];
                int fd = mount_skeleton_make(m, err, sizeof err);
                /* Above stdio, which pid 1 replaces with /dev/null before it builds. */
                if (fd >= 0 && fd <= 2) {
                        int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
                        if (moved < 0)
                                snprintf(err, sizeof err, "move its fd: %s", strerror(errno));
                        close(fd);
                        fd = moved >= 0 ? moved : -EMFILE;
                }
                if (fd < 0) {
                        log_debug("spawner: no shared skeleton: %s", err);
                        k->unavailable = fd == -EPERM || fd == -ENOSYS || fd == -ENODEV;
                        return;
                }
                *k = (Skeleton){ .fd = fd, .uid = m->uid, .gid = m->gid, .checked_ms = now };
        }
        m->skeleton_fd = k->fd;
        m->skeleton_uid = k->uid;
        m->skeleton_gid = k->gid;
}

/* Back in the spawner's own network namespace (NetSpare.host), or no more clones: a sandbox
 * with the host's network would be cloned into the one it is in (the daemon starts another
 * spawner). Tried twice: it can fail only for want of memory. */
static void net_spare_home(const NetSpare *n) {
        if (setns(n->host, CLONE_NEWNET) < 0 && setns(n->host, CLONE_NEWNET) < 0)
                _exit(1);
}

/* Makes the spare network namespace when there is none (NetSpare). Returns 1 when it made
 * one, 0 when there was nothing to make, or -errno (tried again after the next request, but
 * when it was not allowed). */
static int net_spare_fill(NetSpare *n) {
        if (!n || n->unavailable || n->spare >= 0)
                return 0;
        /* Only host root: the daemon's other parts (the socket maker of exposed ports, which
         * joins the owner of a rootless sandbox's network namespace) count on a namespace of
         * the host's user namespace being entered by root alone. */
        if (geteuid() != 0) {
                n->unavailable = true;
                return -EPERM;
        }
        int r = 0;
        if (n->host < 0 && (n->host = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) < 0)
                r = negerrno();
        else if (unshare(CLONE_NEWNET) < 0)
                r = negerrno();
        if (r < 0) {
                /* Short of memory, fds or namespaces (user.max_net_namespaces) passes; not
                 * being allowed does not. */
                if (r == -EPERM || r == -EACCES || r == -EINVAL || r == -ENOSYS)
                        n->unavailable = true;
                log_debug("spawner: no network namespace made ahead: %s", strerror(-r));
                return r;
        }
        r = init_loopback_up();
        int fd = r < 0 ? -1 : open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        if (r >= 0 && fd < 0)
                r = negerrno();
        net_spare_home(n);
        if (r < 0) {
                log_debug("spawner: the network namespace made ahead: %s", strerror(-r));
                return r;
        }
        n->spare = fd;
        return 1;
}

/* Enters the spare network namespace for a clone that wants one of its own (a sandbox with
 * the host's network, or in process mode, is cloned in the spawner's). Returns true when
 * entered: net_spare_leave() then, right after the clone3. */
static bool net_spare_enter(NetSpare *n, uint32_t flags) {
        if (!n || n->spare < 0 || (flags & (F_PLAIN | F_NETWORK | F_ROOTLESS)))
                return false;
        if (setns(n->spare, CLONE_NEWNET) < 0) {
                n->spare = safe_close(n->spare);
                return false;
        }
        return true;
}

/* Back in the spawner's own network namespace after a clone3 in the spare's, which is then
 * the clone's alone (a failed clone3's too: it may have been half set up). */
static void net_spare_leave(NetSpare *n) {
        net_spare_home(n);
        n->spare = safe_close(n->spare);
}

/* One request: the cgroups, the clone, its id maps, its go. w gets the answer, rfds the fds
 * that go with it (the pidfd and the cgroups'). */
static void spawn_one(const SpawnerEnv *env, const SpawnHead *h, const int fds[FD_COUNT], SpawnWire *w,
                      int rfds[RFD_COUNT]) {
        Unpacker u = { .p = (const char *)(h + 1), .end = (const char *)(h + 1) + h->strings };
        PlainConfig pc = { 0 };
        LandlockPolicy pol = { .connect_port = h->connect_port };
        InitConfig ic = {
                .mount = { .skeleton_fd = -1, .fs_bytes = h->fs_bytes, .file_count = h->file_count, .snap_bytes = h->snap_bytes,
                           .snap_inodes = h->snap_inodes, .uid = h->mount_uid, .gid = h->mount_gid,
                           .network = h->flags & F_MOUNT_NETWORK, .noexec_writable = h->flags & F_NOEXEC_WRITABLE,
                           .snap_lazy = h->flags & F_SNAP_LAZY },
                .ctl_fd = fds[FD_CTL], .builtin_fd = env->builtin_fd, .ns_root = h->flags & F_NS_ROOT,
                .uid = h->uid, .gid = h->gid, .network = h->flags & F_NETWORK, .proxy_port = h->proxy_port,
                .seccomp = env->seccomp, .rlimit_as = h->rlimit_as, .rlimit_nproc = h->rlimit_nproc,
                .kill_fd = -1, .v1_procs = { -1, -1, -1 }, .session_fd = fds[FD_SESSION],
                .request = (const char *)h == request_map ? request_map : NULL,
                .request_len = SBX_SPAWN_MSG_MAX,
        };
        ic.mount.staging = take(&u);
        if (h->flags & F_ROOTFS)
                ic.mount.rootfs = take(&u);
        if (h->flags & F_WORKDIR)
                ic.workdir = take(&u);
        if (h->flags & F_TRUST)
                ic.mount.trust_pem = take(&u);
        if (h->flags & F_PLAIN) {
                pc = (PlainConfig){ .uid = h->plain_uid, .gid = h->plain_gid, .own = h->flags & F_PLAIN_OWN };
                pc.dir = take(&u);
                pc.snap = take(&u);
                ic.plain = &pc;
        }
        _cleanup_free_ const char **layers = take_list(&u, h->n_layers);
        _cleanup_free_ const char **envv = take_list(&u, h->n_env);
        _cleanup_free_ const char **allow = take_list(&u, h->n_allow);
        _cleanup_free_ const char **deny = take_list(&u, h->n_deny);
        if (h->flags & F_LAYERS)
                ic.mount.layers = layers;
        if (h->flags & F_ENV)
                ic.env = (char **)envv;
        if (h->flags & F_POLICY) {
                pol.allow = h->flags & F_ALLOW ? allow : NULL;
                pol.deny = h->flags & F_DENY ? deny : NULL;
                ic.policy = &pol;
        }
        if (u.bad || fds[FD_CTL] < 0 || !memchr(h->cg_name, 0, sizeof h->cg_name) || !h->cg_name[0] ||
            strchr(h->cg_name, '/') || h->cg_name[0] == '.') {
                w->status = -EINVAL;
                snprintf(w->text, sizeof w->text, "spawner: malformed request");
                return;
        }
        if (env->skel && !(h->flags & (F_PLAIN | F_ROOTFS | F_LAYERS | F_TRUST)))
                skeleton_for(env->skel, &ic.mount);
        if (ctl_closed(fds[FD_CTL])) {
                w->status = -ECANCELED;
                snprintf(w->text, sizeof w->text, "the sandbox was destroyed before its pid 1 was made");
                return;
        }
        CgroupLimits cl = { .memory_bytes = h->memory_bytes, .pids = h->pids, .cpu_millis = h->cpu_millis,
                            .pids_reserve = h->pids_reserve };
        CgroupSandbox cg;
        int r = cgroup_sandbox_create(env->cg, h->cg_name, &cl, env->spare, &cg);
        if (r < 0) {
                w->status = r;
                snprintf(w->text, sizeof w->text, "cgroup: %s", strerror(-r));
                return;
        }
        int init_cg = -1, sync[2] = { -1, -1 };
        r = open_cgroup_fds(&cg, h->flags & F_KILL, ic.v1_procs, &init_cg, &ic.kill_fd);
        if (r < 0) {
                snprintf(w->text, sizeof w->text, "cgroup: pid 1's: %s", strerror(-r));
        } else if (pipe2(sync, O_CLOEXEC) < 0) {
                r = negerrno();
                snprintf(w->text, sizeof w->text, "pipe: %s", strerror(-r));
        }
        if (r < 0) {
                w->status = r;
                close_fds(ic.v1_procs, ELEMENTSOF(ic.v1_procs));
                safe_close(ic.kill_fd);
                safe_close(init_cg);
                (void)cgroup_sandbox_destroy(env->cg, &cg, 0);
                return;
        }
        ic.userns_sync_fd = sync[0];
        int pidfd = -1;
        __atomic_store_n(&env->shared->pid, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&env->shared->seq, h->seq, __ATOMIC_SEQ_CST);
        uint64_t ns = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWUSER;
        ic.net_born = net_spare_enter(env->net, h->flags);
        struct clone_args ca = {
                /* CLONE_PARENT: the daemon is pid 1's parent, as if it had cloned it.
                 * No CLONE_NEWNET: pid 1 is born in the spare (net_spare_enter()) or
                 * unshares one itself (namespaces mode). */
                .flags = (env->in_caller ? 0 : CLONE_PARENT) | CLONE_PIDFD | CLONE_INTO_CGROUP |
                         CLONE_PARENT_SETTID | (h->flags & F_PLAIN ? 0 : ns),
                .pidfd = (uint64_t)(uintptr_t)&pidfd,
                .parent_tid = (uint64_t)(uintptr_t)&env->shared->pid,
                /* 0, as CLONE_PARENT needs: the kernel gives pid 1 the spawner's own exit
                 * signal, SIGCHLD (spawner_start()), which is what the daemon expects. */
                .exit_signal = env->in_caller ? SIGCHLD : 0,
                .cgroup = (uint64_t)init_cg,
        };
        long pid = syscall(SYS_clone3, &ca, sizeof ca);
        if (pid == 0) {
                close(env->sock);
                if (env->net) {
                        safe_close(env->net->host);
                        safe_close(env->net->spare);
                }
                close(sync[1]);
                munmap(env->shared, sizeof *env->shared);
                /* A copy of the caller, not of a spawner holding nothing: only pid 1's own
                 * fds go on (its other sandboxes' control sockets, its clients' connections
                 * and its stdout are not this sandbox's). */
                if (env->in_caller) {
                        const int keep[] = { ic.ctl_fd, ic.session_fd, ic.builtin_fd, ic.kill_fd, ic.v1_procs[0],
                                             ic.v1_procs[1], ic.v1_procs[2], ic.userns_sync_fd };
                        close_all_but(keep, ELEMENTSOF(keep));
                }
                init_main(&ic);
        }
        if (ic.net_born)
                net_spare_leave(env->net);
        close(sync[0]);
        close_fds(ic.v1_procs, ELEMENTSOF(ic.v1_procs));
        safe_close(ic.kill_fd);
        safe_close(init_cg);
        if (pid < 0) {
                w->status = negerrno();
                snprintf(w->text, sizeof w->text, "clone3: %s%s", strerror(-w->status),
                         w->status == -EPERM || w->status == -ENOSPC ? " (are user namespaces allowed?)" : "");
                close(sync[1]);
                (void)cgroup_sandbox_destroy(env->cg, &cg, 0);
                return;
        }
        w->pid = (int32_t)pid;
        SpawnWire cloned = { .seq = w->seq, .pid = (int32_t)pid, .stage = SPAWN_CLONED };
        int cloned_fds[RFD_COUNT] = { pidfd, -1, -1, -1, -1, -1 };
        send_wire(env->sock, env->in_caller, &cloned, cloned_fds);
        if (h->flags & F_LOWER)
                lower_priority((pid_t)pid);
        r = h->flags & F_MAPS ? write_id_maps(h, (pid_t)pid) : 0;
        if (r < 0) {
                w->status = r;
                snprintf(w->text, sizeof w->text, "uid/gid map: %s", strerror(-r));
                pidfd_sigkill(pidfd);
        } else if (write(sync[1], "x", 1) != 1) {
                w->status = negerrno();
                snprintf(w->text, sizeof w->text, "sandbox init: %s", strerror(-w->status));
                pidfd_sigkill(pidfd);
        }
        close(sync[1]);
        /* The cgroups go with the answer even when pid 1 failed: the daemon removes them once
         * it is gone. Its pidfd went with CLONED. */
        close(pidfd);
        rfds[RFD_DIR] = cg.dir;
        rfds[RFD_V1_MEMORY] = cg.v1_memory;
        rfds[RFD_V1_PIDS] = cg.v1_pids;
        rfds[RFD_V1_CPU] = cg.v1_cpu;
        rfds[RFD_V1_PIDS_CMDS] = cg.v1_pids_cmds;
        w->cmds_pids = cg.cmds_pids;
        snprintf(w->cg_name, sizeof w->cg_name, "%s", h->cg_name);
}

/* One request (its n bytes in buf, its fds in got, which are closed here): answered on
 * env->sock. */
static void handle_request(const SpawnerEnv *env, char *buf, ssize_t n, int *got, size_t ngot, int msg_flags) {
        const SpawnHead *h = (const SpawnHead *)buf;
        SpawnWire w = { .stage = SPAWN_DONE };
        int fds[FD_COUNT], rfds[RFD_COUNT];
        for (size_t i = 0; i < RFD_COUNT; i++)
                rfds[i] = -1;
        size_t used = 0;
        for (size_t i = 0; i < FD_COUNT; i++)
                fds[i] = (size_t)n >= sizeof *h && (h->fdmask & (1u << i)) && used < ngot ? got[used++] : -1;
        /* Even a malformed one is answered under its number when it has one: the
         * daemon's queue of requests stays in step. */
        if ((size_t)n >= sizeof *h)
                w.seq = h->seq;
        if ((size_t)n < sizeof *h || h->magic != SPAWN_MAGIC || h->strings != (size_t)n - sizeof *h ||
            (msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || used != ngot) {
                w.status = -EINVAL;
                snprintf(w.text, sizeof w.text, "spawner: malformed request");
        } else {
                spawn_one(env, h, fds, &w, rfds);
        }
        /* The request held the shells' environment, secrets included: the next pid
         * 1, a copy of this process, must not find it. */
        explicit_bzero(buf, (size_t)n);
        close_fds(got, ngot);
        send_wire(env->sock, env->in_caller, &w, rfds);
        close_fds(rfds, RFD_COUNT);
}

/* Zeroes the stack below its caller's frame as deep as a request's frames went: each pid 1 is
 * a copy of this process and, with the spawner preloaded into bash, so is each session shell's
 * memory (init.c, go_on_as_bash()), which its user can read: what an earlier request's frames
 * left there (another sandbox's cgroup name, its paths, its answer) must not be in it. */
__attribute__((noinline)) static void scrub_stack(void) {
        char pad[SBX_SPAWNER_SCRUB_BYTES];
        explicit_bzero(pad, sizeof pad);
        __asm__ volatile("" : : "r"(pad) : "memory");
}

_noreturn_ static void spawner_main(const SpawnerEnv *env) {
        (void)prctl(PR_SET_NAME, "sbx-spawner", 0, 0, 0);
        char *buf = mmap(NULL, SBX_SPAWN_MSG_MAX, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (buf == MAP_FAILED)
                _exit(1);
        request_map = buf;
        for (;;) {
                union {
                        struct cmsghdr align;
                        char buf[CMSG_SPACE(sizeof(int) * FD_COUNT)];
                } cm;
                struct iovec iov = { buf, SBX_SPAWN_MSG_MAX };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
                                     .msg_controllen = sizeof cm.buf };
                ssize_t n = recvmsg(env->sock, &mh, MSG_CMSG_CLOEXEC);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        /* The daemon closed its end: nothing more to make, and its bases
                         * must be empty when it removes them. */
                        if (env->spare)
                                cgroup_spare_drop(env->cg, env->spare);
                        _exit(0);
                }
                int got[FD_COUNT];
                size_t ngot = msg_take_fds(&mh, got, FD_COUNT);
                handle_request(env, buf, n, got, ngot, mh.msg_flags);
                scrub_stack();
                /* Once no request came for SBX_SPARE_QUIET_MS (the sandbox just made is
                 * through its setup: on few CPUs a mkdir now would slow it), one directory
                 * at a time while none comes, so one that comes waits for one mkdir at most;
                 * the network namespace, 1 ms of work, only after SBX_SPARE_NET_QUIET_MS:
                 * not between the creates of a burst, where the next one would wait for it. */
                struct pollfd p = { .fd = env->sock, .events = POLLIN };
                uint64_t since = now_ms();
                for (int wait = SBX_SPARE_QUIET_MS; poll(&p, 1, wait) == 0;) {
                        if (env->spare && cgroup_spare_fill(env->cg, env->spare) > 0) {
                                wait = 0;
                                continue;
                        }
                        if (!env->net || env->net->unavailable || env->net->spare >= 0)
                                break;
                        uint64_t quiet = now_ms() - since;
                        if (quiet < SBX_SPARE_NET_QUIET_MS) {
                                wait = (int)(SBX_SPARE_NET_QUIET_MS - quiet);
                                continue;
                        }
                        (void)net_spare_fill(env->net);
                        break;
                }
        }
}

/* ---------------------------------------------------------------- its own program */

/* What the daemon sends the spawner's own program first, before any request: what a fork of
 * the daemon would have had in memory. Its fds come with it (SCM_RIGHTS), in the order of
 * SFD_*, each present when its bit of fdmask is; then filter_len instructions of the seccomp
 * filter. */
enum { SFD_BUILTIN, SFD_SHARED, SFD_V2, SFD_V1_MEMORY, SFD_V1_PIDS, SFD_V1_CPU, SFD_COUNT };

typedef struct SpawnSetup {
        uint32_t magic, fdmask;
        int32_t log_level;
        uint32_t filter_len;
        CgroupRoot cg; /* its fds are those that come with the message */
} SpawnSetup;

/* The fd the spawner's program finds its socket at. */
#define SPAWNER_SOCK_FD 3

/* The program's argument: a build of sbx-engine talks only to the sbx-spawner built from the
 * same sources of the layers the spawner and pid 1 run (SBX_SPAWNER_SOURCES, a hash of them:
 * src/sandbox/meson.build), so that neither misreads the other's messages and pid 1 is the
 * code the daemon was built with. */
static void spawner_abi(char *out, size_t size) {
        snprintf(out, size, "sbx-spawner-abi:%s:%s", SBX_VERSION, SBX_SPAWNER_SOURCES);
}

int spawner_program(char *out, size_t size) {
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0)
                return -ENOENT;
        self[n] = 0;
        char *slash = strrchr(self, '/');
        if (!slash || (size_t)snprintf(out, size, "%.*s/sbx-spawner", (int)(slash - self), self) >= size)
                return -ENAMETOOLONG;
        return access(out, X_OK) < 0 ? negerrno() : 0;
}

static int send_setup(int sock, int builtin_fd, int shared_fd, const struct sock_fprog *seccomp, const CgroupRoot *cg) {
        SpawnSetup su = { .magic = SPAWN_MAGIC, .log_level = sbx_log_level, .filter_len = seccomp->len, .cg = *cg };
        const int all[SFD_COUNT] = { builtin_fd, shared_fd, cg->v2, cg->v1_memory, cg->v1_pids, cg->v1_cpu };
        int fds[SFD_COUNT];
        size_t n = 0;
        for (size_t i = 0; i < SFD_COUNT; i++)
                if (all[i] >= 0) {
                        su.fdmask |= 1u << i;
                        fds[n++] = all[i];
                }
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int) * SFD_COUNT)];
        } cm;
        struct iovec iov[2] = { { &su, sizeof su }, { seccomp->filter, seccomp->len * sizeof *seccomp->filter } };
        struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };
        msg_attach_fds(&mh, cm.buf, fds, n);
        return sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 ? negerrno() : 0;
}

/* The spawner as a program of its own (sbx-spawner, exec'd by spawner_start()): each pid 1 is
 * a copy of a small static process instead of the daemon with every library it loaded (265
 * mappings, 1.7 MiB of heap that pid 1 shares copy-on-write and faults on), which made the
 * clone and everything pid 1 then wrote slower. */
static int program_run(void);

/* This process is the host's bash, the library preloaded (spawner_preload_main()): every
 * session shell a host-rooted sandbox starts is a fork of it that goes on into bash's main. */
static bool is_zygote;

/* The sbx_session builtin, which every such shell would otherwise load itself before it
 * answers, loaded once: a shell's `enable -f` of the same memfd finds it loaded (glibc knows a
 * file by its device and inode), no mapping, no relocation. It holds nothing of a sandbox and
 * runs nothing when loaded. Not the locale of the default environment, though a shell loads
 * it too: glibc keeps what it read of the locale archive and the alias file for the process's
 * life, which a shell would then inherit as the host saw them when the spawner started, not
 * as its sandbox sees them (its /etc has no locale.alias). Best effort: a shell loads the
 * builtin itself as before when this failed. */
static void zygote_preload(int builtin_fd) {
        if (builtin_fd < 0)
                return;
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", builtin_fd);
        if (!dlopen(path, RTLD_LAZY))
                log_debug("sbx-spawner.so: the session builtin is loaded by each shell: %s", dlerror());
}

int spawner_program_main(int argc, char **argv) {
        char abi[256];
        spawner_abi(abi, sizeof abi);
        if (argc != 2 || strcmp(argv[1], abi) != 0) {
                fprintf(stderr, "sbx-spawner: a part of sbx-engine, started only by the sbx-engine of its own build (%s)\n",
                        abi);
                return 2;
        }
        return program_run();
}

/* The files mapped into this process but sbx-spawner.so itself, by path and identity as mapped
 * (/proc/self/maps), into z->files; none (nfiles 0: its shells exec) when one is gone or there
 * are more than INIT_ZYGOTE_FILES. */
static void zygote_files(InitZygote *z) {
        z->nfiles = 0;
        /* On the stack, which a shell drops before bash starts (spawner_preload.c); a FILE's
         * buffer would stay in the heap it inherits. */
        char maps[32768];
        size_t n = 0;
        int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return;
        /* Each read() of it gives at most a page of whole lines: to its end, or not at all. */
        ssize_t k = 0;
        while (n < sizeof maps - 1 && (k = read(fd, maps + n, sizeof maps - 1 - n)) > 0)
                n += (size_t)k;
        close(fd);
        if (k != 0 || n == 0)
                return;
        maps[n] = 0;
        bool ok = true;
        for (char *line = maps, *next; ok && *line; line = next) {
                next = line + strcspn(line, "\n");
                if (*next)
                        *next++ = 0;
                unsigned long long ino;
                int at = 0;
                if (sscanf(line, "%*s %*s %*s %*s %llu %n", &ino, &at) != 1 || !at || line[at] != '/')
                        continue;
                char *path = line + at;
                size_t len = strlen(path);
                const char *self = "/sbx-spawner.so";
                if ((len >= strlen(self) && strcmp(path + len - strlen(self), self) == 0) ||
                    strncmp(path, "/memfd:", 7) == 0)
                        continue;
                bool seen = false;
                for (size_t i = 0; i < z->nfiles && !seen; i++)
                        seen = strcmp(z->files[i].path, path) == 0;
                if (seen)
                        continue;
                if (z->nfiles == INIT_ZYGOTE_FILES || len >= sizeof z->files[0].path || strstr(path, " (deleted)")) {
                        ok = false;
                        break;
                }
                /* Compared later with what stat() says of the path, so kept as stat() gives it
                 * (btrfs and overlayfs show another device than the mapping's), taken now while
                 * the path names the mapped file: same inode (a mapped file's cannot be reused). */
                struct stat st;
                if (stat(path, &st) < 0 || st.st_ino != (ino_t)ino) {
                        log_warn("sbx-spawner.so: %s is not the file this bash mapped: session shells are exec'd", path);
                        ok = false;
                        break;
                }
                memcpy(z->files[z->nfiles].path, path, len + 1);
                z->files[z->nfiles].dev = st.st_dev;
                z->files[z->nfiles].ino = st.st_ino;
                z->nfiles++;
        }
        explicit_bzero(maps, sizeof maps);
        if (!ok)
                z->nfiles = 0;
}

int spawner_preload_main(const char *abi, InitZygote *z) {
        char want[256];
        spawner_abi(want, sizeof want);
        if (strcmp(abi, want) != 0) {
                fprintf(stderr, "sbx-spawner.so: a part of sbx-engine, started only by the sbx-engine of its own build (%s)\n",
                        want);
                return 2;
        }
        /* ps on the host shows sbx-spawner, not the bash command line it was exec'd with; its
         * environment (the library's path, abi, which points into it) is nobody's to read. */
        static char *none[] = { NULL };
        memset(z->args, 0, (size_t)(z->args_end - z->args));
        memcpy(z->args, "sbx-spawner", MIN(sizeof "sbx-spawner", (size_t)(z->args_end - z->args) - 1));
        memset(z->env, 0, (size_t)(z->env_end - z->env));
        environ = none;
        zygote_files(z);
        if (!z->nfiles)
                log_warn("sbx-spawner.so: cannot tell which files this bash was started from: session shells are exec'd");
        init_use_zygote(z);
        is_zygote = z->nfiles > 0;
        return program_run();
}

/* The program's body, once it knows it was started by its own build's sbx-engine. */
static int program_run(void) {
        (void)fcntl(SPAWNER_SOCK_FD, F_SETFD, FD_CLOEXEC);
        SpawnSetup su;
        struct sock_filter filter[SBX_SECCOMP_MAX_INSNS];
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int) * SFD_COUNT)];
        } cm;
        struct iovec iov[2] = { { &su, sizeof su }, { filter, sizeof filter } };
        struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf };
        ssize_t n;
        while ((n = recvmsg(SPAWNER_SOCK_FD, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
                ;
        int got[SFD_COUNT], fds[SFD_COUNT];
        size_t ngot = n > 0 ? msg_take_fds(&mh, got, SFD_COUNT) : 0, used = 0;
        for (size_t i = 0; i < SFD_COUNT; i++)
                fds[i] = n >= (ssize_t)sizeof su && (su.fdmask & (1u << i)) && used < ngot ? got[used++] : -1;
        if (n < (ssize_t)sizeof su || su.magic != SPAWN_MAGIC || used != ngot || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
            su.filter_len > SBX_SECCOMP_MAX_INSNS || (size_t)n != sizeof su + su.filter_len * sizeof *filter ||
            fds[SFD_SHARED] < 0 || fds[SFD_V2] < 0) {
                fprintf(stderr, "sbx-spawner: no setup from sbx-engine\n");
                return 2;
        }
        SpawnShared *shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED, fds[SFD_SHARED], 0);
        if (shared == MAP_FAILED) {
                fprintf(stderr, "sbx-spawner: mmap: %m\n");
                return 1;
        }
        close(fds[SFD_SHARED]);
        sbx_log_level = su.log_level;
        CgroupRoot root = su.cg;
        root.v2 = fds[SFD_V2];
        root.v1_memory = fds[SFD_V1_MEMORY];
        root.v1_pids = fds[SFD_V1_PIDS];
        root.v1_cpu = fds[SFD_V1_CPU];
        root.v2_path[sizeof root.v2_path - 1] = 0;
        struct sock_fprog prog = { .len = (unsigned short)su.filter_len, .filter = filter };
        if (is_zygote)
                zygote_preload(fds[SFD_BUILTIN]);
        Skeleton skel = { .fd = -1 };
        CgroupSpare spare = { .v1_memory = -1, .v1_pids = -1, .v1_cpu = -1 };
        NetSpare net = { .host = -1, .spare = -1 };
        SpawnerEnv env = { .sock = SPAWNER_SOCK_FD, .builtin_fd = fds[SFD_BUILTIN], .seccomp = &prog, .cg = &root,
                           .shared = shared, .skel = &skel, .spare = &spare, .net = &net };
        SpawnWire ready = { .stage = SPAWN_READY };
        if (send(SPAWNER_SOCK_FD, &ready, sizeof ready, MSG_NOSIGNAL) != (ssize_t)sizeof ready)
                return 1;
        spawner_main(&env);
}

/* The requests' socketpair (flags besides SOCK_SEQPACKET | SOCK_CLOEXEC), its end sv[sender]
 * able to queue SBX_SPAWN_QUEUE_BYTES of them (past the ordinary limit only as root). Returns
 * 0 or -errno. */
static int request_socketpair(int sv[2], int flags, int sender) {
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | flags, 0, sv) < 0)
                return negerrno();
        int q = (int)SBX_SPAWN_QUEUE_BYTES;
        if (setsockopt(sv[sender], SOL_SOCKET, SO_SNDBUFFORCE, &q, sizeof q) < 0)
                (void)setsockopt(sv[sender], SOL_SOCKET, SO_SNDBUF, &q, sizeof q);
        return 0;
}

/* The sanitizers' options of the daemon, for the spawner's otherwise empty environment: an
 * ASan build's spawner and pid 1s report as the daemon does. */
static void sanitizer_env(char **envp, size_t max) {
        static const char *const names[] = { "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS" };
        size_t n = 0;
        for (size_t i = 0; i < ELEMENTSOF(names) && n + 1 < max; i++) {
                char *v = getenv(names[i]);
                if (v)
                        envp[n++] = v - strlen(names[i]) - 1; /* NAME=value, as environ holds it */
        }
        envp[n] = NULL;
}

/* Waits (bounded: SBX_SPAWNER_START_MS) for the program's word that it took its setup. */
static int await_ready(int sock) {
        struct pollfd p = { .fd = sock, .events = POLLIN };
        int k;
        while ((k = poll(&p, 1, SBX_SPAWNER_START_MS)) < 0 && errno == EINTR)
                ;
        if (k <= 0)
                return k < 0 ? negerrno() : -ETIMEDOUT;
        SpawnWire w;
        ssize_t n = recv(sock, &w, sizeof w, MSG_DONTWAIT);
        /* An end (or a reset: it exited with the setup unread) instead of the word. */
        if (n < 0 && errno != ECONNRESET)
                return negerrno();
        return n == (ssize_t)sizeof w && w.stage == SPAWN_READY ? 0 : -EPROTO;
}

/* Starts sbx-spawner at exe: its socket, the page the kernel writes each pid 1's pid to, and
 * the setup message, then the program itself, which the caller waits for until it has taken
 * its setup (CLONE_VFORK until its exec, then its word): a program that cannot run, or is not
 * of this build (it exits), is found out here, and the caller forks instead. */
static int start_program(Spawner *sp, const char *exe, bool preload, int builtin_fd, const struct sock_fprog *seccomp,
                         CgroupRoot *cg) {
        char abi[256];
        spawner_abi(abi, sizeof abi);
        /* Preloaded: bash --norc --noprofile -c CMD (INIT_ZYGOTE_ARGC), as a session shell
         * is exec'd, with room in CMD for what a shell going on as this bash shows as its
         * command line; CMD only runs when the library could not be loaded, and then exits. */
        static char cmd[SBX_SPAWNER_CMDLINE_BYTES];
        memset(cmd, ' ', sizeof cmd - 1);
        memcpy(cmd, "exit 97;", 8);
        char pre[PATH_MAX + 16], abi_env[sizeof abi + 32];
        snprintf(pre, sizeof pre, "LD_PRELOAD=%s", exe);
        snprintf(abi_env, sizeof abi_env, "%s=%s", SPAWNER_ABI_ENV, abi);
        char *const bash_args[INIT_ZYGOTE_ARGC + 1] = { (char *)"bash", (char *)"--norc", (char *)"--noprofile",
                                                        (char *)"-c", cmd, NULL };
        char *const bash_env[] = { pre, abi_env, NULL };
        if (seccomp->len > SBX_SECCOMP_MAX_INSNS)
                return -E2BIG;
        _cleanup_close_ int mfd = memfd_create("sbx-spawn-shared", MFD_CLOEXEC);
        if (mfd < 0 || ftruncate(mfd, sizeof(SpawnShared)) < 0)
                return negerrno();
        SpawnShared *shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
        if (shared == MAP_FAILED)
                return negerrno();
        int sv[2] = { -1, -1 }, r;
        if ((r = request_socketpair(sv, 0, 0)) < 0)
                goto fail;
        /* Queued before the program runs: it reads it first. */
        if ((r = send_setup(sv[0], builtin_fd, mfd, seccomp, cg)) < 0)
                goto fail;
        pid_t parent = getpid();
        int pidfd = -1;
        char *envp[4];
        sanitizer_env(envp, ELEMENTSOF(envp));
        shared->pid = 0;
        struct clone_args ca = { .flags = CLONE_PIDFD | CLONE_VFORK, .pidfd = (uint64_t)(uintptr_t)&pidfd,
                                 .exit_signal = SIGCHLD };
        long pid = syscall(SYS_clone3, &ca, sizeof ca);
        if (pid < 0) {
                r = negerrno();
                goto fail;
        }
        if (pid == 0) {
                (void)prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
                if (getppid() != parent)
                        _exit(0);
                /* Its socket at a known number and nothing else of the daemon's (fds it
                 * inherited without O_CLOEXEC included: this is the child's own table); stdin
                 * and stdout, which may be the daemon's RPC channel (serve --stdio), are
                 * /dev/null to it; stderr stays the daemon's. */
                int sock = fcntl(sv[1], F_DUPFD, SPAWNER_SOCK_FD + 1);
                int null = open("/dev/null", O_RDWR);
                if (sock < 0 || null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(sock, SPAWNER_SOCK_FD) < 0) {
                        shared->pid = -errno;
                        _exit(127);
                }
                close_range(SPAWNER_SOCK_FD + 1, ~0U, 0);
                char *const args[] = { (char *)"sbx-spawner", abi, NULL };
                if (preload)
                        execve("/bin/bash", bash_args, bash_env);
                else
                        execve(exe, args, envp);
                shared->pid = -errno;
                _exit(127);
        }
        close(sv[1]);
        sv[1] = -1;
        /* The child has exec'd or exited by now (CLONE_VFORK). */
        r = shared->pid < 0 ? shared->pid : await_ready(sv[0]);
        if (r < 0) {
                pidfd_kill_reap(pidfd);
                close(pidfd);
                goto fail;
        }
        sp->fd = sv[0];
        sp->pid = (pid_t)pid;
        sp->pidfd = pidfd;
        sp->shared = shared;
        return 0;
fail:
        safe_close(sv[0]);
        safe_close(sv[1]);
        munmap(shared, sizeof *shared);
        return r;
}

/* Forks the spawner from the caller: where its program is not found beside the caller's own
 * (a program of the C API, not sbx-engine), or did not start. */
static int start_fork(Spawner *sp, int builtin_fd, const struct sock_fprog *seccomp, CgroupRoot *cg) {
        SpawnShared *shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (shared == MAP_FAILED)
                return negerrno();
        int sv[2];
        int r = request_socketpair(sv, 0, 0);
        if (r < 0) {
                munmap(shared, sizeof *shared);
                return r;
        }
        pid_t parent = getpid();
        int pidfd = -1;
        struct clone_args ca = { .flags = CLONE_PIDFD, .pidfd = (uint64_t)(uintptr_t)&pidfd, .exit_signal = SIGCHLD };
        long pid = syscall(SYS_clone3, &ca, sizeof ca);
        if (pid < 0) {
                r = negerrno();
                close(sv[0]);
                close(sv[1]);
                munmap(shared, sizeof *shared);
                return r;
        }
        if (pid == 0) {
                (void)prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
                if (getppid() != parent)
                        _exit(0);
                /* Only what it needs: its socket, the builtin's memfd, the cgroup bases (and
                 * stdio, which pid 1 replaces with /dev/null). The daemon's sockets and its
                 * clients' connections are not the spawner's to hold. */
                int keep[6] = { sv[1], builtin_fd, cg->v2, cg->v1_memory, cg->v1_pids, cg->v1_cpu };
                close_all_but(keep, ELEMENTSOF(keep));
                CgroupRoot root = *cg;
                Skeleton skel = { .fd = -1 };
                CgroupSpare spare = { .v1_memory = -1, .v1_pids = -1, .v1_cpu = -1 };
                NetSpare net = { .host = -1, .spare = -1 };
                SpawnerEnv env = { .sock = sv[1], .builtin_fd = builtin_fd, .seccomp = seccomp, .cg = &root,
                                   .shared = shared, .skel = &skel, .spare = &spare, .net = &net };
                spawner_main(&env);
        }
        close(sv[1]);
        sp->fd = sv[0];
        sp->pid = (pid_t)pid;
        sp->pidfd = pidfd;
        sp->shared = shared;
        return 0;
}

/* sbx-spawner.so beside the calling program, when bash can preload it (no space or colon in
 * its path) and SBX_SPAWNER_PRELOAD is not 0; as spawner_program(). */
static int spawner_library(char *out, size_t size) {
        const char *want = getenv("SBX_SPAWNER_PRELOAD");
        if (want && strcmp(want, "0") == 0)
                return -ENOENT;
        int r = spawner_program(out, size);
        if (r < 0)
                return r;
        if (strlen(out) + 3 >= size)
                return -ENAMETOOLONG;
        strcat(out, ".so");
        /* What LD_PRELOAD splits on, and its $ORIGIN-like tokens. */
        if (strpbrk(out, " :\t\n$"))
                return -EINVAL;
        return access(out, R_OK) < 0 || access("/bin/bash", X_OK) < 0 ? negerrno() : 0;
}

int spawner_start(Spawner *sp, int builtin_fd, const struct sock_fprog *seccomp, CgroupRoot *cg) {
        *sp = (Spawner){ .fd = -1, .inline_fd = -1, .pid = -1, .pidfd = -1, .next_seq = 1, .root = cg };
        char exe[PATH_MAX];
        int r = spawner_library(exe, sizeof exe);
        if (r == 0) {
                r = start_program(sp, exe, true, builtin_fd, seccomp, cg);
                if (r == 0)
                        return 0;
                log_debug("cannot start the spawner preloaded into bash (%s): its program instead",
                          r == -EPROTO ? "it exited without taking its setup" : strerror(-r));
        }
        r = spawner_program(exe, sizeof exe);
        if (r == 0) {
                r = start_program(sp, exe, false, builtin_fd, seccomp, cg);
                if (r == 0)
                        return 0;
                log_warn("cannot start %s (%s): the sandboxes' pid 1 are cloned from a fork of this process", exe,
                         r == -EPROTO      ? "it exited without taking its setup: not of this build?"
                         : r == -ETIMEDOUT ? "it did not take its setup in time"
                                           : strerror(-r));
        }
        return start_fork(sp, builtin_fd, seccomp, cg);
}

int spawner_start_inline(Spawner *sp, int builtin_fd, const struct sock_fprog *seccomp, CgroupRoot *cg) {
        *sp = (Spawner){ .fd = -1, .inline_fd = -1, .pid = -1, .pidfd = -1, .next_seq = 1, .root = cg,
                         .builtin_fd = builtin_fd, .seccomp = seccomp };
        sp->shared = mmap(NULL, sizeof *sp->shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (sp->shared == MAP_FAILED) {
                sp->shared = NULL;
                return negerrno();
        }
        int sv[2];
        int r = request_socketpair(sv, SOCK_NONBLOCK, 1);
        if (r < 0) {
                munmap(sp->shared, sizeof *sp->shared);
                sp->shared = NULL;
                return r;
        }
        sp->fd = sv[0];
        sp->inline_fd = sv[1];
        return 0;
}

pid_t spawner_last_clone(const Spawner *sp, uint64_t *ret_seq) {
        if (!sp->shared) {
                *ret_seq = 0;
                return 0;
        }
        *ret_seq = __atomic_load_n(&sp->shared->seq, __ATOMIC_SEQ_CST);
        return __atomic_load_n(&sp->shared->pid, __ATOMIC_SEQ_CST);
}

void spawner_stop(Spawner *sp) {
        /* In the caller: its end closed, what the answers still waiting bring is taken below
         * as from a spawner that exited. */
        sp->inline_fd = safe_close(sp->inline_fd);
        if (sp->pid <= 0 && !sp->shared) {
                sp->fd = safe_close(sp->fd);
                return;
        }
        /* No more requests: the spawner answers those queued (each with its control socket
         * closed by now, so without a clone) and exits at the end of them. */
        if (sp->fd >= 0)
                (void)shutdown(sp->fd, SHUT_WR);
        for (int waited = 0; sp->fd >= 0;) {
                SpawnReply r;
                int k = spawner_reply(sp, &r);
                if (k > 0) {
                        pidfd_kill_reap(r.pidfd);
                        safe_close(r.pidfd);
                        if (r.cg.dir >= 0 && r.cg.name[0] && sp->root)
                                (void)cgroup_sandbox_destroy(sp->root, &r.cg, SBX_DESTROY_TIMEOUT_MS);
                        continue;
                }
                if (k < 0)
                        break;
                struct pollfd p = { .fd = sp->fd, .events = POLLIN };
                if (waited >= SBX_DESTROY_TIMEOUT_MS || poll(&p, 1, 100) < 0)
                        break;
                waited += 100;
        }
        sp->fd = safe_close(sp->fd);
        pidfd_kill_reap(sp->pidfd);
        sp->pidfd = safe_close(sp->pidfd);
        sp->pid = -1;
        if (sp->shared)
                munmap(sp->shared, sizeof *sp->shared);
        sp->shared = NULL;
}
