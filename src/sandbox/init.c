/* SPDX-License-Identifier: MIT */
/* The sandbox's pid 1. */
#include <fcntl.h>
#include <grp.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/capability.h>
#include <linux/nsfs.h>
#include <linux/seccomp.h>
#include "base/limits.h"
#include "base/util.h"
#include "sandbox/init.h"

/* Says how setup went; on success hands over `root`, an O_PATH fd of the new root, through
 * which the daemon's files API reaches the sandbox's filesystem, the snapshot store's, its
 * network namespace and, when there is one, the egress proxy's listening socket (in that order;
 * no store when the daemon makes it itself, MountConfig.snap_lazy). With `keep`
 * pid 1 keeps its root, store and namespace open and says where, so that a daemon may give
 * its own copies back while the sandbox idles and take them again (the store, mounted
 * nowhere, lives only as long as an fd of it does); else they are closed here. */
static void send_ready(int fd, int status, const char *text, int root, int snap, int proxy, bool keep) {
        InitMsg m = { .type = INIT_READY, .status = status, .keep_root = -1, .keep_snap = -1, .keep_net = -1 };
        snprintf(m.text, sizeof m.text, "%s", text ? text : "");
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int) * 4)];
        } cm;
        struct iovec iov = { &m, sizeof m };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        /* Its network namespace, for the daemon's exposed ports: pid 1 is in it (made by the
         * spawner, the shell started early or pid 1 itself), and
         * being non-dumpable only it may open it without CAP_SYS_PTRACE over the daemon. */
        int net = status == 0 ? open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC) : -1;
        /* No store with snap_lazy: the daemon makes it when first used. */
        if (status == 0 && root >= 0 && net >= 0) {
                int fds[4];
                size_t n = 0;
                fds[n++] = root;
                if (snap >= 0)
                        fds[n++] = snap;
                fds[n++] = net;
                if (proxy >= 0)
                        fds[n++] = proxy;
                msg_attach_fds(&mh, cm.buf, fds, n);
        }
        if (keep && mh.msg_control) {
                m.keep_root = root;
                m.keep_snap = snap;
                m.keep_net = net;
        }
        (void)sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (!keep || !mh.msg_control) {
                safe_close(root);
                safe_close(net);
                safe_close(snap);
        }
}

int init_loopback_up(void) {
        _cleanup_close_ int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (s < 0)
                return negerrno();
        struct ifreq ifr = { 0 };
        snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
        if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
                return negerrno();
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        return ioctl(s, SIOCSIFFLAGS, &ifr) < 0 ? negerrno() : 0;
}

/* The egress proxy's listening socket on 127.0.0.1:port of the sandbox's own network
 * namespace, made here because a socket belongs to the namespace it was made in: the daemon
 * accepts on it and connects outward from its own namespace, with no process in between.
 * No SO_REUSEPORT, so no process of the sandbox can bind the port beside it. Returns the
 * fd or -errno. */
_Static_assert(SBX_EGRESS_PROXY_PORT >= 1024, "pid 1 may hold no capability over its network namespace");
static int proxy_listen(uint16_t port) {
        _cleanup_close_ int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) < 0 || listen(s, SOMAXCONN) < 0)
                return negerrno();
        return TAKE_FD(s);
}

/* Sets the permitted and effective sets to `keep` (a mask of CAP_* bits), inheritable to none. */
static int caps_set(uint64_t keep) {
        struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
        struct __user_cap_data_struct d[2] = {
                { .effective = (uint32_t)keep, .permitted = (uint32_t)keep },
                { .effective = (uint32_t)(keep >> 32), .permitted = (uint32_t)(keep >> 32) },
        };
        return syscall(SYS_capset, &h, d) < 0 ? negerrno() : 0;
}

/* Empties the bounding set but for `keep`: no exec can ever bring a capability back. */
static void bounding_drop(uint64_t keep) {
        for (int cap = 0; cap < 64; cap++)
                if (!(keep & (1ULL << cap)) && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno == EINVAL)
                        break;
        (void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
}

int identity_drop(unsigned uid, unsigned gid) {
        bounding_drop(0);
        if (setgroups(0, NULL) < 0 && errno != EPERM)
                return negerrno();
        if (setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0)
                return negerrno();
        /* A uid change from root clears the permitted and effective sets, but rootless pid 1
         * is not root of its namespace (only uid 1000 is mapped): clear them either way. */
        int r = caps_set(0);
        if (r < 0)
                return r;
        return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ? negerrno() : 0;
}

/* Where session shells start: the sandbox's /home/user, which in process mode is a host
 * directory (set once by setup_plain_or_exit()). */
static const char *session_home = "/home/user";

/* The CPUs pid 1 may run on, as it was cloned; the shell started early (prestart_session()),
 * a copy of pid 1's memory, goes back to them in join_early(). */
static cpu_set_t early_cpus;
static bool early_cpus_set;

/* This process's CPU mask as it was set (Cpus_allowed in /proc/self/status, hexadecimal words
 * of 32 bits, the highest first): sched_getaffinity() gives only its CPUs online now, and a
 * shell given that back would never run on a CPU that comes online later. */
static bool read_allowed_cpus(cpu_set_t *ret) {
        char buf[4096];
        _cleanup_close_ int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
        ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
        if (n <= 0)
                return false;
        buf[n] = 0;
        const char *p = strstr(buf, "\nCpus_allowed:");
        if (!p)
                return false;
        p += strlen("\nCpus_allowed:");
        p += strspn(p, " \t");
        size_t len = strcspn(p, "\n");
        CPU_ZERO(ret);
        int cpu = 0;
        /* From the last hexadecimal digit (CPUs 0-3) back to the first. */
        for (size_t i = len; i-- > 0;) {
                char c = p[i];
                if (c == ',')
                        continue;
                int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
                if (v < 0)
                        return false;
                for (int b = 0; b < 4; b++, cpu++)
                        if ((v >> b) & 1 && cpu < CPU_SETSIZE)
                                CPU_SET(cpu, ret);
        }
        return CPU_COUNT(ret) > 0;
}

/* A shell started before its sandbox's id maps exist (prestart_session()) waits on early for
 * one byte, sent once they are there and, unless the shell made the network namespace itself
 * (early_make_net()), pid 1 is in the sandbox's. It then makes a cgroup namespace of its own,
 * rooted where pid 1's is: it is in the same cgroups. Returns 0 or -errno; _exit()s when pid 1
 * closed its end without a word (its setup failed). */
static int join_early(int early) {
        char b;
        ssize_t n;
        while ((n = recv(early, &b, 1, 0)) < 0 && errno == EINTR)
                ;
        if (n != 1)
                _exit(1);
        close(early);
        /* pid 1 put it on the other CPUs (prestart_session()) before it spoke: back on all of
         * them before anything of the sandbox's runs (a failure leaves it on fewer, not broken). */
        if (early_cpus_set)
                (void)sched_setaffinity(0, sizeof early_cpus, &early_cpus);
        /* pid 1's priority: the spawner lowers it, by pid, without a cpu controller
         * (SBX_CPU_FALLBACK_NICE), before the word; this shell was forked before that. */
        errno = 0;
        int nice = getpriority(PRIO_PROCESS, (id_t)getppid());
        if (!errno && setpriority(PRIO_PROCESS, 0, nice) < 0)
                return negerrno();
        return unshare(CLONE_NEWCGROUP) < 0 ? negerrno() : 0;
}

/* Whether the shell started early makes the sandbox's network namespace (early_make_net()):
 * when the sandbox has one of its own that pid 1 was not cloned into. */
static bool early_makes_net(const InitConfig *c) { return !c->network && !c->net_born; }

/* In the shell started early, first thing: makes the sandbox's network namespace (with the
 * capabilities over the sandbox's user namespace it has from clone3 on, as pid 1), brings
 * loopback up, and sends pid 1 on early an int32, 0 or -errno, with an fd of it
 * (take_early_net()). Making one is 0.8 ms here, the costliest step of a sandbox: here it
 * runs beside pid 1's root, on another CPU, not before it. Returns 0 or -errno, and then the
 * shell must go no further: it is still in pid 1's namespace, the host's. */
static int early_make_net(int early) {
        int r = unshare(CLONE_NEWNET) < 0 ? negerrno() : init_loopback_up();
        int net = r < 0 ? -1 : open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        if (r >= 0 && net < 0)
                r = negerrno();
        int32_t word = r < 0 ? r : 0;
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int))];
        } cm;
        struct iovec iov = { &word, sizeof word };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        msg_attach_fds(&mh, cm.buf, &net, net >= 0 ? 1 : 0);
        if (sendmsg(early, &mh, MSG_NOSIGNAL) < 0 && r >= 0)
                r = negerrno();
        safe_close(net);
        return r;
}

/* pid 1, after its root: takes the network namespace the shell started early made
 * (early_make_net()) and enters it, before the proxy's socket, READY and any other session.
 * Checked, though nothing a client chose has run in that shell yet: a network namespace, owned
 * by pid 1's own user namespace, not the one pid 1 is in. Returns 0 or -errno. */
static int take_early_net(int early) {
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int))];
        } cm;
        int32_t word = 0;
        struct iovec iov = { &word, sizeof word };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf };
        ssize_t n;
        bool reset = false;
        /* A shell that ended with pid 1's byte unread leaves ECONNRESET, said once, before
         * what it sent (as box_ready() knows). */
        while ((n = recvmsg(early, &mh, MSG_CMSG_CLOEXEC)) < 0 &&
               (errno == EINTR || (errno == ECONNRESET && !reset && (reset = true))))
                ;
        _cleanup_close_ int net = -1;
        if (n > 0)
                (void)msg_take_fds(&mh, &net, 1);
        if (n != (ssize_t)sizeof word)
                return n < 0 ? negerrno() : -EPIPE;
        if (word < 0)
                return word;
        struct stat own_user, own_net, want, owner;
        _cleanup_close_ int user = net < 0 ? -1 : ioctl(net, NS_GET_USERNS);
        if (net < 0 || ioctl(net, NS_GET_NSTYPE) != CLONE_NEWNET || user < 0 || fstat(user, &owner) < 0 ||
            fstat(net, &want) < 0 || stat("/proc/self/ns/user", &own_user) < 0 ||
            stat("/proc/self/ns/net", &own_net) < 0 || owner.st_ino != own_user.st_ino ||
            owner.st_dev != own_user.st_dev || (want.st_ino == own_net.st_ino && want.st_dev == own_net.st_dev))
                return -EBADF;
        return setns(net, CLONE_NEWNET) < 0 ? negerrno() : 0;
}

/* Tells the shell started early that its id maps are there (join_early()). Returns 0 or
 * -errno. */
static int tell_early(int early) {
        return send(early, "x", 1, MSG_NOSIGNAL) == 1 ? 0 : negerrno();
}

static InitZygote *zygote;

void init_use_zygote(InitZygote *z) { zygote = z; }

/* A shell of this sandbox may go on as the spawner's bash (InitZygote): the host's bash is the
 * one its root has, and is still the file (with its libraries) that the spawner's bash was
 * exec'd from; no exec policy would have had a say in the exec; and no RLIMIT_NPROC stands in
 * for a pids cgroup (the kernel checks it after the change of ids at the next exec only). */
static bool zygote_fits(const InitConfig *c) {
        if (!zygote || c->plain || c->mount.rootfs || c->mount.layers || c->policy || c->rlimit_nproc ||
            !zygote->nfiles)
                return false;
        /* What the loader and libc read at a program's start, which a bash already started
         * never would. */
        for (char **e = c->env; e && *e; e++)
                if (strncmp(*e, "LD_", 3) == 0 || strncmp(*e, "GLIBC_TUNABLES=", 15) == 0 || strncmp(*e, "MALLOC_", 7) == 0)
                        return false;
        for (size_t i = 0; i < zygote->nfiles; i++) {
                struct stat st;
                if (stat(zygote->files[i].path, &st) < 0 || st.st_dev != zygote->files[i].dev ||
                    st.st_ino != zygote->files[i].ino)
                        return false;
        }
        return true;
}

/* A copy of env in memory of its own (its strings point into the spawner's request). NULL
 * when out of memory. */
static char **copy_env(char **env) {
        size_t n = 0, bytes = 0;
        for (; env && env[n]; n++)
                bytes += strlen(env[n]) + 1;
        char **out = malloc((n + 1) * sizeof *out + bytes);
        if (!out)
                return NULL;
        char *p = (char *)(out + n + 1);
        for (size_t i = 0; i < n; i++) {
                size_t len = strlen(env[i]) + 1;
                out[i] = memcpy(p, env[i], len);
                p += len;
        }
        out[n] = NULL;
        return out;
}

/* exec_shell()'s exec of the host's bash, without one: this process, a copy of pid 1 and so of
 * the spawner's bash not yet started, goes on into that bash's main with argv and env, as the
 * exec would have started it. What an exec does besides is done by exec_shell() (signals'
 * dispositions and mask, fds; the name and dumpability, before the seccomp filter) and here:
 * /proc/PID/cmdline shows these arguments, environ nothing (the spawner's would name the
 * library). Its memory is pid 1's and the spawner's before it: neither holds anything of
 * another sandbox (spawner.c, handle_request() and scrub_stack()). */
_noreturn_ static void go_on_as_bash(const InitConfig *c, char *const argv[INIT_ZYGOTE_ARGC]) {
        InitZygote *z = zygote;
        /* The request held this sandbox's config: its host paths, its id, its cgroups' names. */
        char **env = copy_env(c->env);
        if (!env)
                _exit(126);
        if (c->request)
                munmap(c->request, c->request_len);
        char *p = z->args;
        for (int i = 0; i < INIT_ZYGOTE_ARGC; i++) {
                z->argv[i] = argv[i];
                size_t n = MIN(strlen(argv[i]) + 1, (size_t)(z->args_end - p));
                memcpy(p, argv[i], n);
                p += n;
        }
        memset(p, 0, (size_t)(z->args_end - p));
        z->args_end[-1] = 0;
        memset(z->env, 0, (size_t)(z->env_end - z->env));
        environ = env;
        siglongjmp(z->back, 1);
}

/* In a forked child: becomes a session shell, bash running the sbx_session builtin on sock,
 * or, when script >= 0 (a sealed memfd of sandbox/pykernel.py), the host's python3 running
 * that script, which speaks the same protocol on sock. go >= 0: a shell started during setup
 * (prestart_session(), bash only), whose cwd is still the host's root; it takes its own
 * seccomp filter (pid 1 has none yet) and the builtin waits on go before it moves to
 * session_home and speaks; early >= 0: see join_early(). Never returns. */
_noreturn_ static void exec_shell(const InitConfig *c, int sock, int go, int early, int script, bool javascript) {
        sigset_t all;
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        /* Every process of the sandbox descends from this shell: it starts with the default
         * dispositions, whatever the daemon inherited. A daemon started with & from a script
         * ignores SIGINT and SIGQUIT, an ignored signal survives execve, and bash never resets
         * one ignored at its start: Ctrl-C in `sbx shell` would do nothing. */
        for (int sig = 1; sig < NSIG; sig++)
                if (sig != SIGKILL && sig != SIGSTOP)
                        (void)signal(sig, SIG_DFL);
        setsid();
        int s = fcntl(sock, F_DUPFD, 10);
        int b = fcntl(script >= 0 ? script : c->builtin_fd, F_DUPFD, 10);
        int g = go >= 0 ? fcntl(go, F_DUPFD, 10) : -1;
        int e = early >= 0 ? fcntl(early, F_DUPFD, 10) : -1;
        int nul = open("/dev/null", O_RDWR);
        if (s < 0 || b < 0 || nul < 0 || (go >= 0 && g < 0) || (early >= 0 && e < 0) || dup2(nul, 0) < 0 ||
            dup2(nul, 1) < 0 || dup2(nul, 2) < 0 || dup2(s, INIT_SESSION_FD) < 0 || dup2(b, INIT_BUILTIN_FD) < 0 ||
            (g >= 0 && dup2(g, INIT_GO_FD) < 0) || (e >= 0 && dup2(e, INIT_EARLY_FD) < 0))
                _exit(126);
        /* The early pipe's end is above the go pipe's: an early shell has both. */
        close_range(e >= 0 ? INIT_EARLY_FD + 1 : g >= 0 ? INIT_GO_FD + 1 : INIT_BUILTIN_FD + 1, ~0U, 0);
        if (e >= 0 && join_early(INIT_EARLY_FD) < 0)
                _exit(126);
        /* Started during setup it stays in "/", the host's: pid 1's pivot_root moves every
         * process whose root or cwd is the old root into the new one. */
        if (chdir(g >= 0 ? "/" : session_home) < 0)
                _exit(126);
        umask(022);
        /* Without cgroup controllers (rootless, no delegation of memory or pids), rlimits
         * are the fallback. RLIMIT_NPROC counts per user namespace, so per sandbox. */
        if (c->rlimit_nproc) {
                struct rlimit rl = { c->rlimit_nproc, c->rlimit_nproc };
                (void)setrlimit(RLIMIT_NPROC, &rl);
        }
        if (c->rlimit_as) {
                struct rlimit rl = { c->rlimit_as, c->rlimit_as };
                (void)setrlimit(RLIMIT_AS, &rl);
        }
        bool zyg = script < 0 && zygote_fits(c);
        if (identity_drop(c->uid, c->gid) < 0)
                _exit(126);
        /* As after an exec by the sandbox's user: dumpable (the change of ids made it not, and
         * pid 1's copy was not), and named bash. */
        if (zyg && (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0 || prctl(PR_SET_NAME, "bash", 0, 0, 0) < 0))
                _exit(126);
        if (g >= 0 && c->seccomp && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, c->seccomp, 0, 0) < 0)
                _exit(126);
        if (script >= 0) {
                /* -I: no PYTHON* variable, user site or script directory decides what it imports. */
                char *argv[] = { (char *)"python3", (char *)"-I", (char *)"/proc/self/fd/4", (char *)"3",
                                 javascript ? (char *)"javascript" : (char *)"python", NULL };
                execve("/usr/bin/python3", argv, c->env);
                _exit(127);
        }
        static char boot[] =
                "shopt -s expand_aliases; "
                "enable -f /proc/self/fd/4 sbx_session && exec 4<&- && sbx_session 3";
        static char boot_go[SBX_MAX_PATH_BYTES + 128];
        snprintf(boot_go, sizeof boot_go, "%s 5 %s", boot, session_home);
        char *argv[] = { (char *)"bash", (char *)"--norc", (char *)"--noprofile", (char *)"-c", g >= 0 ? boot_go : boot,
                         NULL };
        if (zyg)
                go_on_as_bash(c, argv);
        execve("/bin/bash", argv, c->env);
        _exit(127);
}

/* Starts a session shell on sock (closed here, and script: see exec_shell()). */
static void spawn_session(const InitConfig *c, int sock, int script, bool javascript) {
        pid_t p = fork();
        if (p == 0)
                exec_shell(c, sock, -1, -1, script, javascript);
        close(sock);
        if (script >= 0)
                close(script);
}

/* Starts the default session's shell first thing, before pid 1 builds the root. The shell
 * makes the sandbox's network namespace (early_make_net(): 0.8 ms here, then beside the root
 * on another CPU) unless pid 1 was cloned into one, and sends it to pid 1 on *ret_early; then
 * bash's start (going on as the spawner's bash, or exec'd: its linking, locale and builtin
 * load) overlaps the root too.
 * It takes its ids once pid 1 writes to *ret_early (join_early()).
 * Until pid 1 writes to the returned pipe, the shell's root is the host's tree (pid 1's
 * pivot_root moves it to the sandbox's), so what runs before must be nothing a client chose:
 * the shell's environment is the fixed default one (sandbox.c decides, before anything is
 * made), its argv is fixed, it is already the sandbox user with no capability under the
 * commands' seccomp filter before bash starts (the namespace, made before, is its only
 * step with capabilities), and it reads no command and says nothing to the daemon until the
 * byte comes.
 * Until its exec, or its ids' change where it goes on as the spawner's bash, it is as
 * undumpable as pid 1 (a copy of the same memory). Returns the go
 * pipe's write end, or -errno. */
static int prestart_session(const InitConfig *c, int *ret_early) {
        int go[2], early[2];
        if (pipe2(go, O_CLOEXEC) < 0)
                return negerrno();
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, early) < 0) {
                int r = negerrno();
                close(go[0]);
                close(go[1]);
                return r;
        }
        early_cpus_set = read_allowed_cpus(&early_cpus);
        pid_t p = fork();
        if (p == 0) {
                (void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
                close(go[1]);
                close(early[1]);
                if (early_makes_net(c) && early_make_net(early[0]) < 0)
                        _exit(126);
                exec_shell(c, c->session_fd, go[0], early[0], -1, false);
        }
        close(go[0]);
        close(early[0]);
        close(c->session_fd); /* the shell's, not pid 1's */
        /* The shell on another CPU than pid 1's, which is about to spend 1 ms on the root
         * without a pause, while the shell makes the network namespace. A new process starts
         * on its parent's CPU when the others are busy (the daemon and the spawner were, a
         * moment before), and the kernel moves no task that ran less than 0.5 ms ago
         * (sched_migration_cost) to a CPU that went idle since: the shell once waited behind
         * pid 1 for 1.2 ms here, and its bash then took the same CPU as pid 1's root. The
         * shell goes back to every CPU of pid 1's once pid 1 spoke (join_early()). Alone on
         * one CPU, pid 1 yields to it instead. */
        cpu_set_t other;
        int cpu = sched_getcpu();
        if (!early_cpus_set || sched_getaffinity(0, sizeof other, &other) < 0)
                CPU_ZERO(&other);
        if (cpu >= 0 && cpu < CPU_SETSIZE)
                CPU_CLR(cpu, &other);
        if (p > 0 && (CPU_COUNT(&other) == 0 || sched_setaffinity(p, sizeof other, &other) < 0))
                (void)sched_yield();
        if (p < 0) {
                int r = negerrno();
                close(go[1]);
                close(early[1]);
                return r;
        }
        *ret_early = early[1];
        return go[1];
}

/* Overwrites this process's argument area (inherited from the spawner, or the daemon) with
 * "sbx-init", so /proc/1/cmdline, which everyone in the sandbox can read, says nothing of them.
 * PR_SET_MM would be cleaner but needs CONFIG_CHECKPOINT_RESTORE. */
static void hide_cmdline(void) {
        char stat[4096];
        ssize_t n = read_file_at(AT_FDCWD, "/proc/self/stat", stat, sizeof stat);
        char *p = n > 0 ? strrchr(stat, ')') : NULL;
        unsigned long start = 0, end = 0;
        if (!p)
                return;
        /* After "pid (comm)": field 3 onwards; arg_start and arg_end are fields 48, 49. */
        p += 2;
        for (int field = 3; field < 48 && p; field++) {
                p = strchr(p, ' ');
                if (p)
                        p++;
        }
        if (!p || sscanf(p, "%lu %lu", &start, &end) != 2 || end <= start + 9)
                return;
        memset((void *)start, 0, end - start);
        memcpy((void *)start, "sbx-init", 8);
}

/* Processes the daemon asked about (detached commands: their own parents exited at once, so
 * pid 1 is the only one that can learn their status), and the last exits of orphans nobody
 * asked about yet. */
static pid_t watched[INIT_MAX_WATCHED];
static struct {
        pid_t pid;
        int status;
} recent[INIT_RECENT_EXITS];
static unsigned recent_next;

static void send_exited(int ctl, pid_t pid, int status) {
        InitMsg m = { .type = INIT_EXITED, .status = status, .pid = pid };
        while (send(ctl, &m, sizeof m, MSG_NOSIGNAL) < 0 && errno == EINTR)
                ;
}

static void reap(int ctl) {
        int ws;
        for (pid_t p; (p = waitpid(-1, &ws, WNOHANG | __WALL)) > 0;) {
                bool told = false;
                for (size_t i = 0; i < ELEMENTSOF(watched); i++)
                        if (watched[i] == p) {
                                watched[i] = 0;
                                send_exited(ctl, p, ws);
                                told = true;
                                break;
                        }
                if (!told) {
                        recent[recent_next].pid = p;
                        recent[recent_next].status = ws;
                        recent_next = (recent_next + 1) % INIT_RECENT_EXITS;
                }
        }
}

/* The daemon wants to hear of pid's end: at once if it has been reaped already. A full table
 * drops the request; the daemon then learns the end from the process's pidfd alone. */
static void watch(int ctl, pid_t pid) {
        if (pid <= 1)
                return;
        for (size_t i = 0; i < ELEMENTSOF(recent); i++)
                if (recent[i].pid == pid) {
                        recent[i].pid = 0;
                        send_exited(ctl, pid, recent[i].status);
                        return;
                }
        for (size_t i = 0; i < ELEMENTSOF(watched); i++)
                if (watched[i] == 0) {
                        watched[i] = pid;
                        return;
                }
}

/* Joins the sandbox's v1 cgroups (InitConfig.v1_procs), before anything of the sandbox is
 * allocated. Returns 0 or -errno with err. */
static int join_v1(const InitConfig *c, char *err, size_t errlen) {
        int r = 0;
        for (size_t i = 0; i < ELEMENTSOF(c->v1_procs); i++) {
                if (c->v1_procs[i] < 0)
                        continue;
                if (r == 0 && write(c->v1_procs[i], "0", 1) != 1) {
                        r = negerrno();
                        snprintf(err, errlen, "cgroup v1 attach: %s", strerror(-r));
                }
                close(c->v1_procs[i]);
        }
        return r;
}

/* The daemon writes this process's id maps after clone3: until it says so, no id of this
 * process means anything inside its user namespace. */
static void wait_for_id_maps(int sync_fd) {
        if (sync_fd < 0)
                return;
        char b;
        if (read(sync_fd, &b, 1) != 1)
                _exit(1);
        close(sync_fd);
}

/* Keeps only the control socket (returned, as a new CLOEXEC fd), the builtin, the shared
 * skeleton (until the root is built), the default session's socket or its early shell's go
 * pipe and socket when there are and, in process mode, the cgroup.kill fd; everything else the
 * daemon had open (other sandboxes' sockets, client connections) must not survive here. stdin,
 * stdout and stderr become /dev/null. */
static int keep_only_ctl(const InitConfig *c, int go, int early) {
        int ctl = fcntl(c->ctl_fd, F_DUPFD_CLOEXEC, 3);
        int keep[7] = { ctl, c->builtin_fd, c->kill_fd, c->session_fd, go, early,
                        c->plain ? -1 : c->mount.skeleton_fd };
        close_all_but(keep, ELEMENTSOF(keep));
        int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (nul >= 0) {
                dup2(nul, 0);
                dup2(nul, 1);
                dup2(nul, 2);
                if (nul > 2)
                        close(nul);
        }
        return ctl;
}

/* As root, the daemon maps the sandbox's ids 0..65535 to a host block, and host root, which
 * pid 1 still is, to nothing: files it made on the sandbox's tmpfs could have no owner.
 * It becomes its namespace's root, a host uid of that block; the capabilities it holds over
 * its own namespaces stay. A change of ids clears the parent-death signal: set again. */
static int become_ns_root(void) {
        if (setgroups(0, NULL) < 0 || setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
                return negerrno();
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        return 0;
}

/* After setup pid 1 only starts session shells: it keeps INIT_KEPT_CAPS, and takes the
 * commands' seccomp filter, which everything it starts then inherits. A process-mode pid 1
 * of a daemon that is not root has no capability to keep. */
static int confine(const InitConfig *c) {
        uint64_t keep = c->plain && geteuid() != 0 ? 0 : INIT_KEPT_CAPS;
        bounding_drop(keep);
        int r = caps_set(keep);
        if (r < 0)
                return r;
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return negerrno();
        if (c->seccomp && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, c->seccomp, 0, 0) < 0)
                return negerrno();
        return 0;
}

/* What pid 1 can do before the daemon has written its id maps, overlapping the daemon's
 * work: it has every capability over its new user, uts and mount namespaces from clone3 on.
 * It names the host and, when the sandbox has a network namespace of its own that nobody else
 * makes (not one the spawner made ahead, InitConfig.net_born, nor the shell started early,
 * early_make_net(): shell_net), makes it and brings loopback up (not the daemon's clone3:
 * making one, loopback and its sysctl tables, is the costliest part of a clone). Such a
 * namespace is owned by the sandbox's user namespace; a spare belongs to the host's instead,
 * where pid 1 holds no capability: nothing in pid 1 may need one over its network namespace
 * (the egress proxy's port is above the privileged ones, asserted below). Returns 0 or -errno
 * with err. */
static int setup_early(const InitConfig *c, bool shell_net, char *err, size_t errlen) {
        int r = 0;
        bool make = early_makes_net(c) && !shell_net;
        if (make && unshare(CLONE_NEWNET) < 0) {
                r = negerrno();
                snprintf(err, errlen, "network namespace: %s", strerror(-r));
        }
        if (r >= 0 && make && (r = init_loopback_up()) < 0)
                snprintf(err, errlen, "loopback up: %s", strerror(-r));
        if (r >= 0 && sethostname("sandbox", 7) < 0) {
                r = negerrno();
                snprintf(err, errlen, "sethostname: %s", strerror(-r));
        }
        return r;
}

/* Takes its identity, builds the root, enters the network namespace the shell started early
 * made (net_from >= 0: its socket, closed here), makes the proxy's socket and confines itself,
 * after setup_early() (whose result is early, its words err); on failure tells the daemon why
 * on ctl and exits (the default session's shell, started before, reads the end of go).
 * Returns the snapshot store's fd, or -1, and the proxy's socket in *ret_proxy (-1 when
 * none). */
static int setup_or_exit(const InitConfig *c, int ctl, int early, int net_from, char err[static 400],
                         int *ret_proxy) {
        int snap = -1, proxy = -1;
        int r = early;
        if (r >= 0 && c->ns_root && (r = become_ns_root()) < 0)
                snprintf(err, 400, "take the namespace's root: %s", strerror(-r));
        /* The cgroup namespace starts here, once pid 1 is in all of the sandbox's cgroups,
         * v1 ones included (clone3 put it in the v2 one, join_v1() in the others): every
         * hierarchy then shows the sandbox's own cgroup as /, and nothing of the host's paths
         * or the sandbox's id. */
        if (r >= 0 && unshare(CLONE_NEWCGROUP) < 0) {
                r = negerrno();
                snprintf(err, 400, "cgroup namespace: %s", strerror(-r));
        }
        if (r >= 0)
                r = mount_build_root(&c->mount, &snap, err, 400);
        /* The shared skeleton's fd reaches no process of the sandbox: sessions start after
         * this, and the default one's shell, forked before, closes it before its bash starts
         * (exec_shell()). */
        if (c->mount.skeleton_fd >= 0)
                close(c->mount.skeleton_fd);
        struct stat wst;
        if (r >= 0 && c->workdir && c->workdir[0] == '/' && stat(c->workdir, &wst) == 0 && S_ISDIR(wst.st_mode))
                session_home = c->workdir;
        /* Only now: the config's strings (the rootfs path) may point into that memory. */
        hide_cmdline();
        if (net_from >= 0) {
                int n = r >= 0 ? take_early_net(net_from) : 0;
                if (n < 0) {
                        r = n;
                        snprintf(err, 400, "network namespace (made by the default session's shell): %s",
                                 n == -EPIPE ? "the shell ended first" : strerror(-n));
                }
                close(net_from);
        }
        if (r >= 0 && c->proxy_port && (r = proxy = proxy_listen(c->proxy_port)) < 0)
                snprintf(err, 400, "egress proxy socket on 127.0.0.1:%u: %s", c->proxy_port, strerror(-r));
        if (r >= 0 && (r = confine(c)) < 0)
                snprintf(err, 400, "confine pid 1: %s", strerror(-r));
        /* Last, over the finished root and before any session exists: everything pid 1
         * starts inherits the Landlock domain, and the daemon is not in it. */
        if (r >= 0)
                r = landlock_policy_apply(c->policy, err, 400);
        if (r < 0) {
                send_ready(ctl, r, err, -1, -1, -1, false);
                _exit(1); /* the shell started early reads the end of its pipe */
        }
        *ret_proxy = proxy;
        return snap;
}

/* Process mode's setup: no namespace to enter, no root to build; the sandbox's directory is
 * made, session shells get its paths, and pid 1 becomes a child subreaper, so what commands
 * leave behind is re-parented to it (and reaped, and reported) as in a pid namespace. On
 * failure tells the daemon why on ctl and exits. Returns the snapshot store's fd; *ret_root
 * gets the directory's, *ic its environment. */
static int setup_plain_or_exit(InitConfig *ic, int ctl, int *ret_root) {
        static char home[SBX_MAX_PATH_BYTES];
        char err[400] = "";
        int snap = -1;
        int r = prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0 ? negerrno() : 0;
        if (r < 0)
                snprintf(err, sizeof err, "become a child subreaper: %s", strerror(-r));
        if (r >= 0)
                r = plain_build_dir(ic->plain, ret_root, &snap, err, sizeof err);
        if (r >= 0 && !(ic->env = plain_env(ic->env, ic->plain->dir))) {
                r = -ENOMEM;
                snprintf(err, sizeof err, "out of memory");
        }
        snprintf(home, sizeof home, "%s/home/user", ic->plain->dir);
        session_home = home;
        hide_cmdline();
        if (r >= 0 && (r = confine(ic)) < 0)
                snprintf(err, sizeof err, "confine pid 1: %s", strerror(-r));
        if (r < 0) {
                send_ready(ctl, r, err, -1, -1, -1, false);
                _exit(1);
        }
        return snap;
}

/* The daemon is gone (or pid 1 was told to stop): with no pid namespace to end, the
 * sandbox's cgroup is killed, pid 1 with it; in namespaces mode pid 1's exit does that. */
_noreturn_ static void init_exit(const InitConfig *c) {
        if (c->kill_fd >= 0)
                (void)!write(c->kill_fd, "1", 1);
        _exit(0);
}

/* Reads one message from the daemon: a spawn request starts a session shell on the socket
 * it carries (and the script of a code interpreter's, when a second fd comes), any other fd
 * is closed. Exits once the daemon is gone. */
static void handle_ctl(const InitConfig *c, int ctl) {
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int) * 2)];
        } cm;
        InitMsg m;
        struct iovec iov = { &m, sizeof m };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                             .msg_control = cm.buf, .msg_controllen = sizeof cm.buf };
        ssize_t n = recvmsg(ctl, &mh, MSG_CMSG_CLOEXEC);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
                init_exit(c); /* daemon gone or sandbox destroyed: take everything down */
        if (n < 0)
                return;
        int got[2] = { -1, -1 };
        (void)msg_take_fds(&mh, got, ELEMENTSOF(got));
        int fd = got[0], script = got[1];
        if (fd >= 0 && (size_t)n >= sizeof m.type && m.type == INIT_SPAWN) {
                spawn_session(c, fd, script, m.status == 1);
                return;
        }
        if (script >= 0)
                close(script);
        if (fd >= 0)
                close(fd);
        else if ((size_t)n == sizeof m && m.type == INIT_WATCH)
                watch(ctl, m.pid);
}

void init_main(const InitConfig *config) {
        InitConfig ic = *config;
        const InitConfig *c = &ic;
        /* In process mode SIGKILL would leave the sandbox's processes behind: SIGTERM comes
         * to the loop below, which kills them (init_exit()). */
        (void)prctl(PR_SET_PDEATHSIG, c->plain ? SIGTERM : SIGKILL, 0, 0, 0);
        (void)prctl(PR_SET_NAME, "sbx-init", 0, 0, 0);
        /* Blocked before the first fork: the end of a shell started during setup stays pending
         * for the signalfd below, not dropped (SIGCHLD's default) with its zombie unreaped. */
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        if (c->plain)
                sigaddset(&mask, SIGTERM);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        char err[400] = "";
        int early = join_v1(c, err, sizeof err);
        /* In all of the sandbox's cgroups (clone3 and join_v1()), and before anything else. */
        int go = -1, early_go = -1;
        if (early >= 0 && !c->plain && c->session_fd >= 0) {
                if ((early = go = prestart_session(c, &early_go)) < 0)
                        snprintf(err, sizeof err, "start the default session's shell: %s", strerror(-early));
                ic.session_fd = -1;
        }
        /* The shell started early makes the network namespace meanwhile (early_make_net()). */
        bool shell_net = early_go >= 0 && early_makes_net(c);
        if (early >= 0 && !c->plain)
                early = setup_early(c, shell_net, err, sizeof err);
        wait_for_id_maps(c->userns_sync_fd);
        if (early_go >= 0) {
                if (early >= 0 && (early = tell_early(early_go)) < 0)
                        snprintf(err, sizeof err, "tell the default session's shell its id maps are there: %s",
                                 strerror(-early));
                if (!shell_net)
                        early_go = safe_close(early_go);
        }
        /* pid 1 is a copy of the spawner (or of the daemon, which cloned it itself): its
         * memory is theirs. Nothing in the sandbox may read it (ptrace, /proc/1/mem), nor its
         * command line. Only after the id maps are written: a non-dumpable process's /proc
         * files belong to root, and an unprivileged parent could no longer write them. */
        (void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        int ctl = keep_only_ctl(c, go, early_go);
        int root = -1, proxy = -1;
        int snap = c->plain ? setup_plain_or_exit(&ic, ctl, &root) : setup_or_exit(c, ctl, early, early_go, err, &proxy);
        if (!c->plain)
                root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);

        signal(SIGPIPE, SIG_IGN);
        int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        send_ready(ctl, 0, NULL, root, snap, proxy, !c->plain);
        /* The daemon holds the proxy's socket now; pid 1 has no use for it. */
        safe_close(proxy);
        /* The root is the sandbox's for every process now: the default session's shell may go. */
        if (go >= 0) {
                (void)!write(go, "x", 1);
                close(go);
        }

        for (;;) {
                struct pollfd p[2] = { { .fd = ctl, .events = POLLIN }, { .fd = sfd, .events = POLLIN } };
                if (poll(p, 2, -1) < 0)
                        continue;
                if (p[1].revents) {
                        struct signalfd_siginfo si;
                        bool term = false;
                        while (read(sfd, &si, sizeof si) > 0)
                                term |= si.ssi_signo == SIGTERM;
                        if (term)
                                init_exit(c);
                        reap(ctl);
                }
                if (p[0].revents)
                        handle_ctl(c, ctl);
        }
}
