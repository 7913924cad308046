/* SPDX-License-Identifier: MIT */
/* Unit tests of the exec policy's checks and of its Landlock ruleset, applied in forked
 * children of the test over the host's own root (no sandbox): denied execs and reads fail
 * with EACCES, others work, and the network rule lets connect(2) reach only its one port. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include "base/limits.h"
#include "sandbox/landlock.h"
#include "tap.h"

#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif

static int check(const char *const *allow, const char *const *deny, int port, char *err, size_t errlen) {
        LandlockPolicy p = { .allow = allow, .deny = deny, .connect_port = port };
        err[0] = 0;
        return landlock_policy_check(&p, err, errlen);
}

static void test_check(void) {
        char err[512];
        const char *rel[] = { "usr/bin/ls", NULL };
        const char *dots[] = { "/usr/bin/../bin/ls", NULL };
        const char *stars[] = { "/usr/**/ls", NULL };
        const char *tmp[] = { "/tmp/x", NULL };
        const char *home[] = { "/home/user/*/x", NULL };
        const char *good[] = { "/usr/bin/ls", "/usr/bin/py*", "/usr/lib/**", "/**", NULL };
        CHECK(check(rel, NULL, -1, err, sizeof err) == -EINVAL && strstr(err, "not an absolute path"), "relative refused: %s", err);
        CHECK(check(NULL, dots, -1, err, sizeof err) == -EINVAL && strstr(err, "'..'"), "'..' refused: %s", err);
        CHECK(check(stars, NULL, -1, err, sizeof err) == -EINVAL && strstr(err, "last component"), "inner ** refused: %s", err);
        CHECK(check(NULL, tmp, -1, err, sizeof err) == -EINVAL && strstr(err, "in /tmp"), "deny in /tmp refused: %s", err);
        CHECK(check(home, NULL, -1, err, sizeof err) == -EINVAL && strstr(err, "in /home/user"), "allow in home refused: %s", err);
        CHECK(check(NULL, NULL, 70000, err, sizeof err) == -EINVAL, "port past 65535 refused");
        const char *many[SBX_MAX_POLICY_PATTERNS + 2];
        for (size_t i = 0; i <= SBX_MAX_POLICY_PATTERNS; i++)
                many[i] = "/usr/bin/ls";
        many[SBX_MAX_POLICY_PATTERNS + 1] = NULL;
        CHECK(check(NULL, many, -1, err, sizeof err) == -EINVAL && strstr(err, "more than"), "too many refused: %s", err);
        many[SBX_MAX_POLICY_PATTERNS] = NULL;
        int r = check(good, many, -1, err, sizeof err);
        CHECK(r == 0 || r == -EOPNOTSUPP, "good patterns pass (or the kernel lacks Landlock): %s", err);
        CHECK(check(NULL, NULL, -1, err, sizeof err) == 0 && !landlock_policy_active(NULL), "no policy is no policy");
}

/* Runs fn in a child under the policy; its exit status (0: every expectation held) or 100+
 * for a failure to apply. */
static int in_child(const LandlockPolicy *p, int (*fn)(void *), void *arg) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
                char err[512];
                if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                        _exit(100);
                if (landlock_policy_apply(p, err, sizeof err) < 0) {
                        fprintf(stderr, "apply: %s\n", err);
                        _exit(101);
                }
                _exit(fn(arg));
        }
        int ws;
        if (pid < 0 || waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws))
                return -1;
        return WEXITSTATUS(ws);
}

/* exec of path in a grandchild: 0 if it ran (and exited 0), else its exec's errno. */
static int try_exec(const char *path) {
        int pipefd[2];
        if (pipe2(pipefd, O_CLOEXEC) < 0)
                return -1;
        pid_t pid = fork();
        if (pid == 0) {
                char *argv[] = { (char *)path, NULL };
                int null = open("/dev/null", O_RDONLY);
                dup2(null, 0);
                execv(path, argv);
                int e = errno;
                (void)!write(pipefd[1], &e, sizeof e);
                _exit(127);
        }
        close(pipefd[1]);
        int e = 0, ws;
        if (read(pipefd[0], &e, sizeof e) != sizeof e)
                e = 0;
        close(pipefd[0]);
        waitpid(pid, &ws, 0);
        return e ? e : (WIFEXITED(ws) && WEXITSTATUS(ws) == 0 ? 0 : -1);
}

static int open_errno(const char *path) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return errno;
        close(fd);
        return 0;
}

static int deny_expectations(void *arg) {
        int bad = 0;
        if (try_exec("/usr/bin/tac") != EACCES)
                bad |= 1;
        if (open_errno("/usr/bin/tac") != EACCES)
                bad |= 2;
        if (try_exec("/usr/bin/true") != 0)
                bad |= 4;
        if (open_errno("/etc/hostname") != 0 && open_errno("/etc/passwd") != 0)
                bad |= 8;
        return bad;
}

static int allow_expectations(void *arg) {
        int bad = 0;
        if (try_exec("/usr/bin/true") != 0)
                bad |= 1;
        if (try_exec("/usr/bin/false") != EACCES)
                bad |= 2;
        if (open_errno("/usr/bin/false") != EACCES)
                bad |= 4;
        int m = memfd_create("x", MFD_CLOEXEC);
        if (m >= 0 || errno != EACCES)
                bad |= 8;
        m = memfd_create("x", MFD_CLOEXEC | MFD_NOEXEC_SEAL);
        if (m < 0)
                bad |= 16;
        return bad;
}

static int listener(struct sockaddr_in *ret) {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        socklen_t len = sizeof *ret;
        *ret = (struct sockaddr_in){ .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        if (s < 0 || bind(s, (struct sockaddr *)ret, sizeof *ret) < 0 || listen(s, 4) < 0 ||
            getsockname(s, (struct sockaddr *)ret, &len) < 0)
                return -1;
        return s;
}

static int connect_errno(const struct sockaddr_in *a) {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int r = connect(s, (const struct sockaddr *)a, sizeof *a) < 0 ? errno : 0;
        close(s);
        return r;
}

static int net_expectations(void *arg) {
        struct sockaddr_in *a = arg;
        return (connect_errno(&a[0]) == 0 ? 0 : 1) | (connect_errno(&a[1]) == EACCES ? 0 : 2);
}

int main(void) {
        test_check();
        int abi = landlock_abi();
        if (abi < 2) {
                printf("ok %d # SKIP no Landlock ABI 2 here (%d)\n", ++tap_n, abi);
                return tap_done();
        }
        CHECK(access("/usr/bin/tac", X_OK) == 0 && access("/usr/bin/true", X_OK) == 0 &&
              access("/usr/bin/false", X_OK) == 0, "the host has tac, true and false");
        CHECK(try_exec("/usr/bin/true") == 0 && try_exec("/usr/bin/false") == -1 && open_errno("/usr/bin/tac") == 0,
              "without a policy they run and read");

        const char *deny[] = { "/usr/bin/tac", NULL };
        LandlockPolicy pd = { .deny = deny, .connect_port = -1 };
        int r = in_child(&pd, deny_expectations, NULL);
        CHECK(r == 0, "deny: tac neither runs nor reads (EACCES), true runs, /etc reads (%d)", r);

        const char *allow[] = { "/usr/bin/true", NULL };
        LandlockPolicy pa = { .allow = allow, .connect_port = -1 };
        r = in_child(&pa, allow_expectations, NULL);
        CHECK(r == 0, "allow: true runs, false neither runs nor reads, memfds only sealed non-executable (%d)", r);

        const char *nomatch[] = { "/usr/bin/no-such-program-*", NULL };
        LandlockPolicy pn = { .deny = nomatch, .connect_port = -1 };
        char err[512] = "";
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0)
                _exit(landlock_policy_apply(&pn, err, sizeof err) == -ENOENT && strstr(err, "matches no file") ? 0 : 1);
        int ws;
        CHECK(waitpid(pid, &ws, 0) == pid && WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "a pattern matching nothing fails");

        if (abi >= 4) {
                struct sockaddr_in a[2];
                int s0 = listener(&a[0]), s1 = listener(&a[1]);
                LandlockPolicy pp = { .connect_port = ntohs(a[0].sin_port) };
                r = s0 >= 0 && s1 >= 0 ? in_child(&pp, net_expectations, a) : -1;
                CHECK(r == 0, "connect_port: its port connects, another is EACCES (%d)", r);
                close(s0);
                close(s1);
        } else {
                printf("ok %d # SKIP Landlock ABI %d has no network rules\n", ++tap_n, abi);
        }
        return tap_done();
}
