/* SPDX-License-Identifier: MIT */
/* Creating and destroying sandboxes: clone3 into fresh namespaces and the sandbox's cgroup,
 * pid 1 builds the root, the daemon waits for its word. */
#include <dirent.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include "base/limits.h"
#include "base/log.h"
#include "base/util.h"
#include "sandbox/box.h"
#include "sandbox/init.h"
#include "sandbox/plain.h"

extern const unsigned char sbx_bashext[];
extern const size_t sbx_bashext_len;
extern const unsigned char sbx_pykernel[];
extern const size_t sbx_pykernel_len;

/* A sealed memfd holding data: what every sandbox's shells load, which nobody may change. */
static int sealed_memfd(const char *name, const unsigned char *data, size_t len) {
        _cleanup_close_ int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0)
                return negerrno();
        int r = write_all(fd, data, len);
        if (r < 0)
                return r;
        if (fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) < 0)
                return negerrno();
        return TAKE_FD(fd);
}

static int start_spawner(BoxShared *s) {
        return s->spawn_inline ? spawner_start_inline(&s->spawner, s->builtin_fd, &s->seccomp, &s->cg)
                               : spawner_start(&s->spawner, s->builtin_fd, &s->seccomp, &s->cg);
}

int box_shared_init(BoxShared *s, bool process, bool spawn_inline) {
        int r;
        *s = (BoxShared){ .builtin_fd = -1, .pykernel_fd = -1, .process = process, .process_lock = -1, .getfd_ok = -1,
                         .spawner = { .fd = -1, .inline_fd = -1, .pid = -1, .pidfd = -1 },
                         .spawn_inline = spawn_inline };
        s->rootless = geteuid() != 0;
        s->user_uid = geteuid();
        s->user_gid = getegid();
        if (!s->rootless) {
                s->slots = calloc(SBX_HOST_UID_SLOTS / 8, 1);
                if (!s->slots)
                        return -ENOMEM;
                /* Start where another daemon on this host is unlikely to be. */
                s->next_slot = (uint32_t)getpid() * 97 % SBX_HOST_UID_SLOTS;
        }
        if (s->rootless) {
                const char *rt = getenv("XDG_RUNTIME_DIR");
                if (rt && *rt)
                        snprintf(s->staging, sizeof s->staging, "%s/sbx", rt);
                else
                        snprintf(s->staging, sizeof s->staging, "/tmp/sbx-%u", (unsigned)geteuid());
        } else {
                snprintf(s->staging, sizeof s->staging, "/run/sbx");
        }
        /* Process mode builds no root: its sandboxes' directories go to a base of its own. */
        if (process && (r = plain_base_init(s->process_base, sizeof s->process_base, &s->process_lock)) < 0)
                goto fail;
        if (!process && mkdir(s->staging, 0700) < 0 && errno != EEXIST) {
                r = negerrno();
                goto fail;
        }
        /* A context of one sandbox (sbx run) sweeps stale bases on its way out instead, after
         * its answer (box_shared_done()). */
        if ((r = cgroup_root_open(&s->cg, !spawn_inline)) < 0)
                goto fail;
        s->cg_open = true;
        s->builtin_fd = sealed_memfd("sbx-session.so", sbx_bashext, sbx_bashext_len);
        if ((r = s->builtin_fd) < 0 || (r = seccomp_build(&s->seccomp)) < 0)
                goto fail;
        /* Last: the spawner is this process as it is now, before any sandbox. */
        if ((r = start_spawner(s)) < 0)
                goto fail;
        return 0;
fail:
        /* Whatever was made before the failure goes: a caller may try again later. */
        box_shared_done(s);
        return r;
}

int box_pykernel_fd(BoxShared *s) {
        if (s->pykernel_fd < 0)
                s->pykernel_fd = sealed_memfd("sbx-pykernel.py", sbx_pykernel, sbx_pykernel_len);
        return s->pykernel_fd;
}

void box_shared_done(BoxShared *s) {
        spawner_stop(&s->spawner);
        free(s->slots);
        s->slots = NULL;
        if (s->cg_open && s->spawn_inline)
                cgroup_root_sweep(&s->cg);
        if (s->cg_open)
                cgroup_root_close(&s->cg);
        s->cg_open = false;
        s->builtin_fd = safe_close(s->builtin_fd);
        s->pykernel_fd = safe_close(s->pykernel_fd);
        free(s->seccomp.filter);
        s->seccomp.filter = NULL;
        /* Process mode: this daemon's directory, if empty by now (directories still being
         * removed keep it: the next daemon's start sweeps it then, its pid gone). */
        if (s->process_lock >= 0)
                (void)rmdir(s->process_base);
        s->process_lock = safe_close(s->process_lock);
}

static int slot_take(BoxShared *s) {
        for (uint32_t i = 0; i < SBX_HOST_UID_SLOTS; i++) {
                uint32_t k = (s->next_slot + i) % SBX_HOST_UID_SLOTS;
                if (!(s->slots[k / 8] & (1u << (k % 8)))) {
                        s->slots[k / 8] |= (uint8_t)(1u << (k % 8));
                        s->next_slot = k + 1;
                        return (int)k;
                }
        }
        return -EUSERS;
}

static void slot_release(BoxShared *s, Box *b) {
        if (b->slot >= 0 && s->slots)
                s->slots[b->slot / 8] &= (uint8_t) ~(1u << (b->slot % 8));
        b->slot = -1;
}

_Static_assert((uint64_t)SBX_HOST_UID_BASE + (uint64_t)SBX_HOST_UID_SLOTS * SBX_HOST_ID_BLOCK <= 0x7FFE0000ULL,
               "host id blocks end below 2^31 and systemd's foreign range");
_Static_assert(SBX_SANDBOX_UID < SBX_HOST_ID_BLOCK && SBX_SANDBOX_GID < SBX_HOST_ID_BLOCK, "the user is in the block");

/* The host ids the sandbox's user maps to: the caller's rootless, a block of its own as root. */
static int take_host_ids(BoxShared *s, Box *b, char *err, size_t errlen) {
        if (s->rootless) {
                b->host_uid = s->user_uid;
                b->host_gid = s->user_gid;
                return 0;
        }
        int slot = slot_take(s);
        if (slot < 0) {
                snprintf(err, errlen, "no free host uid for the sandbox's user");
                return slot;
        }
        b->slot = slot;
        b->host_base = SBX_HOST_UID_BASE + (unsigned)slot * SBX_HOST_ID_BLOCK;
        b->host_ids = SBX_HOST_ID_BLOCK;
        b->host_uid = b->host_base + SBX_SANDBOX_UID;
        b->host_gid = b->host_base + SBX_SANDBOX_GID;
        return 0;
}

/* What pid 1 gets: ctl_fd is its end of the control socket; plain is process mode's (NULL
 * otherwise). The spawner adds the fds it opens in the cgroups it makes (process mode's
 * cgroup.kill, the v1 cgroup.procs) and the pipe on which pid 1 waits for its id maps. */
static InitConfig init_config(const BoxShared *s, const BoxConfig *c, int ctl_fd, const PlainConfig *plain) {
        return (InitConfig){
                .mount = { .skeleton_fd = -1, .staging = s->staging, .rootfs = c->rootfs, .layers = c->layers, .network = c->network,
                           .fs_bytes = c->fs_bytes, .file_count = c->file_count,
                           .snap_bytes = c->fs_bytes * SBX_SNAPSHOT_BUDGET_FACTOR,
                           .snap_inodes = (c->file_count + 16) * SBX_SNAPSHOT_BUDGET_FACTOR,
                           .snap_lazy = !s->rootless && !plain,
                           .uid = SBX_SANDBOX_UID, .gid = SBX_SANDBOX_GID,
                           .noexec_writable = c->policy && c->policy->allow && c->policy->allow[0],
                           .trust_pem = c->trust_pem },
                .ctl_fd = ctl_fd, .builtin_fd = s->builtin_fd, .userns_sync_fd = -1, .ns_root = !s->rootless,
                .env = c->env, .workdir = c->workdir, .network = c->network, .proxy_port = c->proxy_port,
                /* With no user namespace the host's ids are the ones commands run as. */
                .uid = plain ? plain->uid : SBX_SANDBOX_UID, .gid = plain ? plain->gid : SBX_SANDBOX_GID,
                .seccomp = &s->seccomp,
                .rlimit_as = s->cg.v2_memory || s->cg.v1_memory >= 0 ? 0 : c->memory_bytes,
                /* Rootless in process mode, RLIMIT_NPROC would count every process of the
                 * caller's, the daemon's and other sandboxes' included. */
                .rlimit_nproc = s->cg.v2_pids || s->cg.v1_pids >= 0 || (plain && s->rootless) ? 0 : c->pids,
                .policy = c->policy,
                .plain = plain, .kill_fd = -1, .v1_procs = { -1, -1, -1 },
                .session_fd = plain || c->rootfs || c->layers || c->policy ? -1 : c->session_fd,
        };
}

/* Asks the spawner for b's cgroups and pid 1, with its end sv[1] of the control socket: the
 * answer comes later (box_spawned()). */
static int request_init(BoxShared *s, const BoxConfig *c, Box *b, const int sv[2], char *err, size_t errlen) {
        char snap[BOX_DIR_BYTES + 8];
        snprintf(snap, sizeof snap, "%s.snap", b->dir);
        PlainConfig pc = { .dir = b->dir, .snap = snap, .uid = b->host_uid, .gid = b->host_gid, .own = !s->rootless };
        InitConfig ic = init_config(s, c, sv[1], s->process ? &pc : NULL);
        SpawnIds ids = { .rootless = s->rootless, .maps = !s->process, .lower_priority = !cgroup_has_cpu(&s->cg),
                         .kill_fd = s->process, .host_uid = b->host_uid, .host_gid = b->host_gid,
                         .host_base = b->host_base, .host_ids = b->host_ids, .cg_name = b->id,
                         .limits = { .memory_bytes = c->memory_bytes, .pids = c->pids, .cpu_millis = c->cpu_millis,
                                     .pids_reserve = SBX_PIDS_RESERVE(c->pids) } };
        /* A spawner lost earlier (box_spawner_lost()) is started again for this one. */
        int r = s->spawner.fd >= 0 ? 0 : start_spawner(s);
        if (r == 0)
                r = spawner_request(&s->spawner, &ic, &ids, &b->spawn_seq);
        if (r < 0) {
                /* A spawner that died and is not yet heard to have (spawn_event()): the next
                 * create, once it is, starts another. */
                if (r == -EPIPE || r == -ECONNRESET) {
                        /* Asked nothing yet, it has no answer anyone waits for, and the loop
                         * does not watch it (it watches from the first request on): stopped
                         * here, the next create starts another. */
                        if (s->spawner.next_seq == 1)
                                spawner_stop(&s->spawner);
                        r = -EAGAIN;
                        snprintf(err, errlen, "the sandbox spawner exited and is being replaced; try again");
                } else if (r == -EAGAIN)
                        snprintf(err, errlen, "too many sandboxes are being created at once; try again");
                else if (r == -EMSGSIZE)
                        snprintf(err, errlen, "the sandbox's configuration (environment, layers, policy) is too large");
                else
                        snprintf(err, errlen, "cannot ask for the sandbox's init: %s", strerror(-r));
                return r;
        }
        b->nproc_limit = (uint32_t)ic.rlimit_nproc;
        return 0;
}

int box_create(BoxShared *s, const BoxConfig *c, Box *b, char *err, size_t errlen) {
        int sv[2] = { -1, -1 };
        int r;

        box_blank(b);
        b->spawning = true;
        b->process = s->process;
        /* Root: the store is made when the first snapshot needs it (box_snap_store()), one
         * superblock fewer for each sandbox that never takes one. Rootless, the daemon may
         * make no tmpfs: pid 1 makes it at setup. */
        b->snap_lazy = !s->process && !s->rootless;
        b->snap_bytes = c->fs_bytes * SBX_SNAPSHOT_BUDGET_FACTOR;
        b->snap_inodes = (c->file_count + 16) * SBX_SNAPSHOT_BUDGET_FACTOR;
        r = take_host_ids(s, b, err, errlen);
        if (r < 0)
                return r;
        err[0] = 0;
        r = random_hex(b->id, 16);
        if (r < 0)
                goto fail;
        /* Its cgroups come with the spawner's answer; until then they are known by name. */
        snprintf(b->cg.name, sizeof b->cg.name, "%s", b->id);
        b->cg.root = &s->cg;
        if (s->process) {
                snprintf(b->dir, sizeof b->dir, "%s/%s", s->process_base, b->id);
                /* Another context of this process that ended may have removed it, empty. */
                (void)mkdir(s->process_base, geteuid() == 0 ? 0711 : 0700);
        }
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
                r = negerrno();
                goto fail;
        }
        r = request_init(s, c, b, sv, err, errlen);
        if (r < 0)
                goto fail;
        b->ctl_fd = TAKE_FD(sv[0]);
        sv[1] = safe_close(sv[1]);
        return 0;
fail:
        safe_close(sv[0]);
        safe_close(sv[1]);
        b->spawning = false; /* nothing was asked */
        box_destroy(s, b);
        return r < 0 ? r : -EIO;
}

void box_blank(Box *b) {
        *b = (Box){ .init_pid = -1, .init_pidfd = -1, .ctl_fd = -1, .root_fd = -1, .snap_fd = -1, .netns_fd = -1,
                    .keep_root = -1, .keep_snap = -1, .keep_net = -1, .proxy_fd = -1, .slot = -1,
                    .cg = { .dir = -1, .v1_memory = -1, .v1_pids = -1, .v1_cpu = -1, .v1_pids_cmds = -1 } };
}

int box_spawner_fd(const BoxShared *s) { return s->spawner.fd; }

int box_spawn_reply(BoxShared *s, SpawnReply *ret) { return spawner_reply(&s->spawner, ret); }

pid_t box_spawner_lost(BoxShared *s, uint64_t *ret_seq) {
        pid_t pid = spawner_last_clone(&s->spawner, ret_seq);
        spawner_stop(&s->spawner);
        return pid;
}

/* Whether pid is the daemon's child, not reaped yet (so its pid is no other process's). */
static bool is_our_child(pid_t pid) {
        pid_t ppid, nspid;
        proc_status_ids(pid, &ppid, &nspid);
        return ppid == getpid();
}

static bool is_our_init(pid_t pid);

static int our_child_pidfd(pid_t pid) {
        if (pid <= 0 || !is_our_child(pid))
                return -1;
        return (int)syscall(SYS_pidfd_open, pid, 0);
}

void box_spawn_recover(BoxShared *s, const char *name, SpawnReply *rep) {
        if (rep->cg.dir < 0 && rep->cg.v1_memory < 0 && rep->cg.v1_pids < 0 && rep->cg.v1_cpu < 0)
                (void)cgroup_sandbox_find(&s->cg, name, &rep->cg);
        if (rep->pidfd < 0)
                rep->pidfd = our_child_pidfd(rep->pid);
        if (rep->pidfd < 0 && rep->cg.dir >= 0) {
                /* Its pid 1, if it was cloned and still lives, is the process of <name>/init
                 * that is the daemon's child (the others are pid 1's). */
                _cleanup_close_ int init = cgroup_sandbox_open_init(&rep->cg);
                char buf[4096];
                ssize_t n = init >= 0 ? read_file_at(init, "cgroup.procs", buf, sizeof buf) : -1;
                /* Whole lines only (a pid cut at the buffer's end could be another's), and in
                 * namespaces mode a pid namespace's init (its orphans may be the daemon's
                 * children too where the daemon is a namespace's init). */
                for (char *p = n > 0 ? buf : NULL, *end; p && *p && rep->pidfd < 0; p = end + 1) {
                        long pid = strtol(p, &end, 10);
                        if (end == p || *end != '\n')
                                break;
                        if (!s->process && !is_our_init((pid_t)pid))
                                continue;
                        rep->pid = (pid_t)pid;
                        rep->pidfd = our_child_pidfd((pid_t)pid);
                }
        }
        if (rep->pidfd < 0)
                rep->pid = 0;
        pidfd_sigkill(rep->pidfd);
}

void box_spawned(Box *b, SpawnReply *rep) {
        b->spawning = false;
        b->init_pid = rep->pid > 0 ? rep->pid : -1;
        b->init_pidfd = TAKE_FD(rep->pidfd);
        const CgroupRoot *root = b->cg.root;
        b->cg = rep->cg;
        b->cg.root = root;
        rep->cg.dir = rep->cg.v1_memory = rep->cg.v1_pids = rep->cg.v1_cpu = rep->cg.v1_pids_cmds = -1;
}

int box_ready(Box *b, char *err, size_t errlen) {
        if (b->ready)
                return 1;
        InitMsg m;
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int) * 4)];
        } cm;
        struct iovec iov = { &m, sizeof m };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf };
        ssize_t n = recvmsg(b->ctl_fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        /* pid 1 that failed and exited with something of ours unread leaves ECONNRESET on this
         * end, which the kernel reports (once) before the message pid 1 sent first: its reason. */
        if (n < 0 && errno == ECONNRESET)
                n = recvmsg(b->ctl_fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return 0;
        int got[4] = { -1, -1, -1, -1 };
        if (n > 0)
                (void)msg_take_fds(&mh, got, ELEMENTSOF(got));
        int fd = got[0], snap = b->snap_lazy ? -1 : got[1], net = got[b->snap_lazy ? 1 : 2],
            proxy = got[b->snap_lazy ? 2 : 3];
        if (b->snap_lazy)
                safe_close(got[3]); /* never sent */
        struct stat wst;
        if (n != (ssize_t)sizeof m || m.type != INIT_READY) {
                snprintf(err, errlen, "sandbox init exited during setup");
        } else if (m.status < 0) {
                m.text[sizeof m.text - 1] = 0;
                snprintf(err, errlen, "%s", m.text);
        } else if (fd < 0 || (snap < 0 && !b->snap_lazy) || fstatat(fd, "tmp", &wst, 0) < 0) {
                snprintf(err, errlen, "sandbox init sent no root");
        } else {
                b->netns_fd = net;
                b->root_fd = fd;
                b->snap_fd = snap;
                b->proxy_fd = proxy;
                b->keep_root = m.keep_root;
                b->keep_snap = m.keep_snap;
                b->keep_net = m.keep_net;
                b->writable_dev = wst.st_dev;
                b->ready = true;
                return 1;
        }
        safe_close(fd);
        safe_close(snap);
        safe_close(net);
        safe_close(proxy);
        return n == (ssize_t)sizeof m && m.status < 0 ? m.status : -EIO;
}

int box_count_processes(const Box *b) {
        if (b->process)
                return -ENOTSUP; /* its root is no root: there is no /proc of its own */
        if (b->root_fd < 0)
                return -EAGAIN;
        int fd = openat(b->root_fd, "proc", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return negerrno();
        DIR *d = fdopendir(fd);
        if (!d) {
                close(fd);
                return -ENOMEM;
        }
        int n = 0;
        for (struct dirent *e; (e = readdir(d));)
                if (e->d_name[0] >= '1' && e->d_name[0] <= '9')
                        n++;
        closedir(d);
        return n;
}

int box_spawn_session(Box *b, int sock, int script, bool javascript) {
        InitMsg m = { .type = INIT_SPAWN, .status = javascript };
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int) * 2)];
        } cm;
        int fds[2] = { sock, script };
        size_t n = script >= 0 ? 2 : 1;
        struct iovec iov = { &m, sizeof m };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                             .msg_control = cm.buf, .msg_controllen = CMSG_SPACE(sizeof(int) * n) };
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * n);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
        if (sendmsg(b->ctl_fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
                return negerrno();
        return 0;
}

int box_watch_pid(Box *b, pid_t pid) {
        InitMsg m = { .type = INIT_WATCH, .pid = pid };
        if (b->ctl_fd < 0)
                return -ESRCH;
        return send(b->ctl_fd, &m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 ? negerrno() : 0;
}

int box_read_exit(Box *b, pid_t *ret_pid, int *ret_status) {
        InitMsg m;
        unsigned reset_seen = 0;
        for (;;) {
                ssize_t n = recv(b->ctl_fd, &m, sizeof m, MSG_DONTWAIT);
                /* ECONNRESET comes once, before what pid 1 sent before it exited (box_ready). */
                if (n < 0 && (errno == EINTR || (errno == ECONNRESET && !reset_seen++)))
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return 0;
                if (n <= 0)
                        return n < 0 ? negerrno() : -ESRCH;
                if (n == (ssize_t)sizeof m && m.type == INIT_EXITED) {
                        *ret_pid = m.pid;
                        *ret_status = m.status;
                        return 1;
                }
        }
}

int box_park(BoxShared *s, Box *b) {
        if (b->parked)
                return 0;
        if (!b->ready || b->process || b->keep_root < 0 || (b->keep_snap < 0 && !b->snap_lazy) || b->keep_net < 0 ||
            b->init_pidfd < 0 || s->getfd_ok == 0)
                return -EPERM;
        /* A store the daemon made lives only in its fd: such a sandbox stays unparked. */
        if (b->snap_lazy && b->snap_fd >= 0)
                return -EBUSY;
        if (s->getfd_ok < 0) {
                /* Tried once: as root the daemon may; rootless, pid 1 is not dumpable and is
                 * in a user namespace of its own, and it may not. Only a refusal counts. */
                int fd = (int)syscall(SYS_pidfd_getfd, b->init_pidfd, b->keep_root, 0);
                if (fd < 0 && (errno == EPERM || errno == EACCES || errno == ENOSYS)) {
                        s->getfd_ok = 0;
                        log_debug("sandboxes are not parked: pidfd_getfd: %s", strerror(errno));
                        return -EPERM;
                }
                if (fd < 0)
                        return -EBUSY;
                s->getfd_ok = 1;
                close(fd);
        }
        b->root_fd = safe_close(b->root_fd);
        b->snap_fd = safe_close(b->snap_fd);
        b->netns_fd = safe_close(b->netns_fd);
        b->init_pidfd = safe_close(b->init_pidfd);
        cgroup_sandbox_park(&b->cg);
        b->parked = true;
        return 0;
}

static int take_fd(int pidfd, int num, int *ret) {
        int fd = (int)syscall(SYS_pidfd_getfd, pidfd, num, 0);
        if (fd < 0)
                return negerrno();
        /* pidfd_getfd() gives every fd O_CLOEXEC. */
        *ret = fd;
        return 0;
}

/* Whether pid is still the daemon's child that is pid 1 of a pid namespace: the pid of a pid 1
 * the daemon has not reaped cannot be another process's, unless something reaped it behind the
 * daemon's back (SIGCHLD ignored: the kernel does then). */
static bool is_our_init(pid_t pid) {
        pid_t ppid, nspid;
        proc_status_ids(pid, &ppid, &nspid);
        return ppid == getpid() && nspid == 1;
}

int box_unpark(Box *b) {
        if (!b->parked)
                return 0;
        /* All or nothing: what could not be had (out of fds) leaves it parked, whole. */
        int pidfd = pidfd_open(b->init_pid, 0);
        if (pidfd < 0)
                return negerrno();
        if (!is_our_init(b->init_pid)) {
                close(pidfd);
                log_warn("sandbox %s: its pid 1 (%d) is gone, reaped elsewhere", b->id, (int)b->init_pid);
                return -ESRCH;
        }
        int root = -1, snap = -1, net = -1;
        int r = take_fd(pidfd, b->keep_root, &root);
        if (r == 0 && b->keep_snap >= 0)
                r = take_fd(pidfd, b->keep_snap, &snap);
        if (r == 0)
                r = take_fd(pidfd, b->keep_net, &net);
        /* A pid 1 that died has no fds left to take: unparked without them, it is dying. */
        if ((r < 0 && r != -ESRCH && !pidfd_is_dead(pidfd)) || (r = cgroup_sandbox_unpark(&b->cg)) < 0) {
                safe_close(root);
                safe_close(snap);
                safe_close(net);
                close(pidfd);
                return r;
        }
        b->init_pidfd = pidfd;
        b->root_fd = root;
        b->snap_fd = snap;
        b->netns_fd = net;
        b->parked = false;
        return 0;
}

void box_kill_parked(Box *b) {
        b->ctl_fd = safe_close(b->ctl_fd);
        b->proxy_fd = safe_close(b->proxy_fd);
        if (b->init_pid > 0 && is_our_init(b->init_pid))
                (void)kill(b->init_pid, SIGKILL);
}

void box_kill(Box *b, bool kill_cgroup) {
        if (box_unpark(b) < 0 && b->parked)
                box_kill_parked(b); /* out of fds: by its pid, while it is surely ours */
        b->ctl_fd = safe_close(b->ctl_fd);
        b->root_fd = safe_close(b->root_fd);
        b->snap_fd = safe_close(b->snap_fd);
        b->netns_fd = safe_close(b->netns_fd);
        b->proxy_fd = safe_close(b->proxy_fd);
        pidfd_sigkill(b->init_pidfd);
        if (kill_cgroup && b->cg.dir >= 0)
                (void)cgroup_kill(b->cg.dir);
}

/* Process mode: removes the sandbox's directory and snapshot store. */
static void remove_dirs(const Box *b) {
        char snap[BOX_DIR_BYTES + 8];
        snprintf(snap, sizeof snap, "%s.snap", b->dir);
        int r = plain_remove_tree(AT_FDCWD, b->dir), rs = plain_remove_tree(AT_FDCWD, snap);
        if (r < 0 || rs < 0)
                log_warn("sandbox %s: cannot remove %s: %s", b->id, r < 0 ? b->dir : snap, strerror(-(r < 0 ? r : rs)));
}

/* Process mode, once nothing of the sandbox runs: a forked process removes its directory,
 * which may be large (its size is not bounded by a tmpfs). It keeps no fd of the daemon's,
 * so a client waiting for the daemon's stdout to close does not wait for it, and no death
 * signal: a daemon that exits meanwhile leaves it to finish. Returns 0 or -errno. */
static int remover_start(Box *b) {
        int pidfd = -1;
        struct clone_args ca = { .flags = CLONE_PIDFD, .pidfd = (uint64_t)(uintptr_t)&pidfd, .exit_signal = SIGCHLD };
        long pid = syscall(SYS_clone3, &ca, sizeof ca);
        if (pid < 0)
                return negerrno();
        if (pid == 0) {
                int nul = open("/dev/null", O_RDWR);
                for (int fd = 0; nul >= 0 && fd < 3; fd++)
                        dup2(nul, fd);
                close_range(3, ~0U, 0);
                (void)prctl(PR_SET_NAME, "sbx-rm", 0, 0, 0);
                remove_dirs(b);
                _exit(0);
        }
        b->init_pid = (pid_t)pid;
        b->init_pidfd = pidfd;
        b->dir_state = BOX_DIR_REMOVING;
        return 0;
}

int box_try_finish(BoxShared *s, Box *b) {
        (void)box_unpark(b);
        if (b->init_pidfd >= 0) {
                siginfo_t si = { 0 };
                int w = waitid(P_PIDFD, (id_t)b->init_pidfd, &si, WEXITED | WNOHANG);
                if ((w < 0 && errno != ECHILD) || (w == 0 && si.si_pid == 0))
                        return 0; /* still exiting */
                b->init_pidfd = safe_close(b->init_pidfd);
                if (b->dir_state == BOX_DIR_REMOVING)
                        b->dir_state = BOX_DIR_GONE;
        }
        if (cgroup_sandbox_try_remove(&s->cg, &b->cg) == -EBUSY)
                return 0;
        /* Still spawning, its directory is for the pid 1 that may yet come to make and for
         * that one's orphan to remove (see spawn_orphan()). */
        if (b->process && b->dir_state == BOX_DIR_PRESENT && !b->spawning) {
                int r = remover_start(b);
                if (r == 0)
                        return 0;
                b->dir_state = BOX_DIR_GONE;
                log_warn("sandbox %s: cannot start removing %s: %s", b->id, b->dir, strerror(-r));
        }
        /* Still spawning, its ids go with the spawner's answer (a pid 1 may yet come). */
        if (!b->spawning)
                slot_release(s, b);
        return 1;
}

void box_destroy(BoxShared *s, Box *b) {
        (void)box_unpark(b);
        b->ctl_fd = safe_close(b->ctl_fd);
        b->root_fd = safe_close(b->root_fd);
        b->snap_fd = safe_close(b->snap_fd);
        b->netns_fd = safe_close(b->netns_fd);
        b->proxy_fd = safe_close(b->proxy_fd);
        pidfd_kill_reap(b->init_pidfd);
        b->init_pidfd = safe_close(b->init_pidfd);
        if (cgroup_sandbox_destroy(&s->cg, &b->cg, SBX_DESTROY_TIMEOUT_MS) < 0)
                log_warn("sandbox %s: cgroup not empty after kill", b->id);
        /* Only on the way out (a context freed, a create that failed): here it may block. */
        if (b->process && b->dir_state != BOX_DIR_GONE) {
                remove_dirs(b);
                b->dir_state = BOX_DIR_GONE;
        }
        /* Its uid may be reused only once none of its processes is left. */
        if (!b->spawning)
                slot_release(s, b);
}

int box_snap_store(Box *b) {
        if (b->snap_fd >= 0)
                return b->snap_fd;
        if (!b->snap_lazy || !b->ready || b->parked)
                return -ENOENT;
        int fd = mount_snap_store(b->snap_bytes, b->snap_inodes);
        if (fd < 0)
                return fd;
        /* The jobs that fill it act as the sandbox's user (tree_become()) with the file
         * capabilities they keep; its root is the sandbox's root's, as pid 1's store was. */
        if (fchownat(fd, "", b->host_base, b->host_base, AT_EMPTY_PATH) < 0) {
                int r = negerrno();
                close(fd);
                return r;
        }
        return b->snap_fd = fd;
}
