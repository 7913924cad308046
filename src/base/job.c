/* SPDX-License-Identifier: MIT */
#include <fcntl.h>
#include <grp.h>
#include <stdlib.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/pidfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "base/job.h"
#include "base/macro.h"
#include "base/util.h"

typedef struct JobResult {
        int r;
        char err[JOB_ERR_MAX];
} JobResult;

int job_start(Job *j, JobFn fn, void *arg, const int *keep, size_t n_keep) {
        int p[2];
        *j = (Job){ .pid = -1, .pidfd = -1, .result = -1 };
        if (pipe2(p, O_CLOEXEC) < 0)
                return negerrno();
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0) {
                int r = negerrno();
                close(p[0]);
                close(p[1]);
                return r;
        }
        if (pid == 0) {
                (void)prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
                if (getppid() != parent)
                        _exit(1);
                signal(SIGPIPE, SIG_IGN);
                int k[17];
                size_t n = 0;
                for (size_t i = 0; i < n_keep && n < 16; i++)
                        k[n++] = keep[i];
                k[n++] = p[1];
                close_all_but(k, n);
                JobResult res = { 0 };
                res.r = fn(arg, res.err, sizeof res.err);
                (void)!write(p[1], &res, sizeof res);
                _exit(0);
        }
        close(p[1]);
        /* Close-on-exec already: pidfd_open() sets it on every pidfd. */
        int fd = pidfd_open(pid, 0);
        if (fd < 0) {
                int r = negerrno();
                kill(pid, SIGKILL);
                (void)waitpid(pid, NULL, 0);
                close(p[0]);
                return r;
        }
        j->pid = pid;
        j->pidfd = fd;
        j->result = p[0];
        return 0;
}

int job_drop_privileges(void) {
        if (geteuid() == 0 && (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
                               setresuid(65534, 65534, 65534) < 0))
                return negerrno();
        struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
        struct __user_cap_data_struct d[2] = { 0 };
        if (syscall(SYS_capset, &h, d) < 0)
                return negerrno();
        return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ? negerrno() : 0;
}

int job_finish(Job *j, char *err, size_t errlen) {
        JobResult res = { .r = -EIO };
        snprintf(res.err, sizeof res.err, "the job died");
        if (j->pid > 0) {
                while (waitpid(j->pid, NULL, 0) < 0 && errno == EINTR)
                        ;
                if (read(j->result, &res, sizeof res) != (ssize_t)sizeof res) {
                        res.r = -EIO;
                        snprintf(res.err, sizeof res.err, "the job died");
                }
        }
        res.err[sizeof res.err - 1] = 0;
        if (err && errlen)
                snprintf(err, errlen, "%s", res.err);
        j->pid = -1;
        j->pidfd = safe_close(j->pidfd);
        j->result = safe_close(j->result);
        return res.r;
}

void job_kill(Job *j) {
        if (j->pid > 0) {
                pidfd_sigkill(j->pidfd);
                (void)job_finish(j, NULL, 0);
        }
}
