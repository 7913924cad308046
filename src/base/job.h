/* SPDX-License-Identifier: MIT */
/* A job: blocking work (copying a tree, writing an archive) done in a forked process so that
 * the daemon's loop never waits for it. The loop watches job.pidfd (readable when the job
 * has ended) and then calls job_finish() for its result. */
#pragma once
#include <stddef.h>
#include <sys/types.h>

#define JOB_ERR_MAX 480

typedef struct Job {
        pid_t pid;
        int pidfd;  /* readable once the job has exited; -1 when there is no job */
        int result; /* pipe the job writes its result and message to */
} Job;

/* Returns 0 or -errno (what fn returned) and fills err with its message. */
typedef int (*JobFn)(void *arg, char *err, size_t errlen);

/* Forks a process that runs fn(arg) and exits. The job keeps only the fds in keep[] (and
 * stdin, stdout, stderr): a copy of any other fd of the daemon (the write end of another
 * run's stdin, a client's socket) would keep it open for as long as the job runs. The job
 * dies with the daemon. Returns 0 or -errno. */
int job_start(Job *j, JobFn fn, void *arg, const int *keep, size_t n_keep);
/* For a job that only reads memory it was given and writes fds it already has (checking a
 * hostile archive): becomes nobody with no capabilities. Returns 0 or -errno. */
int job_drop_privileges(void);
/* Reaps an ended job. Returns fn's result (-EIO if the job died without one). */
int job_finish(Job *j, char *err, size_t errlen);
/* Kills and reaps a job that is still running (when its purpose is gone). */
void job_kill(Job *j);
