/* SPDX-License-Identifier: MIT */
/* The mover process and its requests (see mover.h). One SOCK_SEQPACKET pair: a request is a
 * MoverMsg with the cgroup dir fds attached, the answer a MoverMsg with the same id and the
 * result. The process answers in order, so the pending list is a FIFO. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "base/job.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/util.h"
#include "cgroup/mover.h"

typedef struct MoverMsg {
        int64_t id;
        int32_t pid; /* request: the pid (0: kill the one cgroup given); answer: the result */
        uint32_t n;
} MoverMsg;

typedef struct MoveReq {
        struct MoveReq *next;
        int64_t id;
        pid_t pid;
        int fds[MOVER_MAX_DIRS];
        size_t n;
        int r;
        bool answered;
        MoveDoneFn done; /* NULL once cancelled */
        void *ud;
} MoveReq;

struct Mover {
        Loop *loop;
        Job job;
        int sock;
        Watch sock_w, job_w;
        MoveReq *head, *tail;
        unsigned pending;
        int64_t next_id;
        bool deliver_queued;
};

static int move_all(pid_t pid, const int *fds, size_t n) {
        if (pid == 0)
                return n == 1 ? write_file_at(fds[0], "cgroup.kill", "1") : -EINVAL;
        char num[32];
        snprintf(num, sizeof num, "%d", (int)pid);
        for (size_t i = 0; i < n; i++) {
                int r = write_file_at(fds[i], "cgroup.procs", num);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* The process: answers each request until the daemon closes its end. */
static int serve(void *arg, char *err, size_t errlen) {
        int sock = *(int *)arg;
        (void)err;
        (void)errlen;
        (void)prctl(PR_SET_NAME, "sbx-mover", 0, 0, 0);
        /* For tests only: a pause after each answer, which holds the mover between two moves
         * (test_code.py's keeper tests); at most 10 s. */
        const char *gap = getenv("SBX_MOVER_ANSWER_GAP_MS");
        unsigned long gap_ms = gap ? MIN(strtoul(gap, NULL, 10), 10000UL) : 0;
        for (;;) {
                MoverMsg m;
                union {
                        struct cmsghdr align;
                        char buf[CMSG_SPACE(sizeof(int) * MOVER_MAX_DIRS)];
                } cm;
                struct iovec iov = { &m, sizeof m };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf };
                ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return 0;
                int fds[MOVER_MAX_DIRS];
                size_t k = msg_take_fds(&mh, fds, MOVER_MAX_DIRS);
                int r = n == (ssize_t)sizeof m && k == m.n ? move_all(m.pid, fds, k) : -EBADMSG;
                for (size_t j = 0; j < k; j++)
                        close(fds[j]);
                MoverMsg a = { .id = m.id, .pid = r };
                if (send(sock, &a, sizeof a, MSG_NOSIGNAL) < 0)
                        return 0;
                if (gap_ms) {
                        struct timespec ts = { .tv_sec = (time_t)(gap_ms / 1000), .tv_nsec = (long)(gap_ms % 1000) * 1000000 };
                        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                                ;
                }
        }
}

static void req_free(MoveReq *q) {
        for (size_t i = 0; i < q->n; i++)
                safe_close(q->fds[i]);
        free(q);
}

/* Calls back every answered request at the head of the list, in order. */
static void deliver(void *data) {
        Mover *m = data;
        m->deliver_queued = false;
        while (m->head && m->head->answered) {
                MoveReq *q = m->head;
                m->head = q->next;
                if (!m->head)
                        m->tail = NULL;
                m->pending--;
                MoveDoneFn done = q->done;
                void *ud = q->ud;
                int r = q->r;
                req_free(q);
                if (done)
                        done(ud, r);
        }
}

static void deliver_later(Mover *m) {
        if (!m->deliver_queued && loop_defer(m->loop, deliver, m) == 0)
                m->deliver_queued = true;
}

/* Without the process: every request not answered yet is done here. */
static void stop_process(Mover *m) {
        loop_del(m->loop, &m->sock_w);
        loop_del(m->loop, &m->job_w);
        m->sock = safe_close(m->sock);
        job_kill(&m->job);
        for (MoveReq *q = m->head; q; q = q->next)
                if (!q->answered) {
                        q->r = move_all(q->pid, q->fds, q->n);
                        q->answered = true;
                }
        deliver_later(m);
}

static void sock_event(Watch *w, uint32_t events) {
        Mover *m = w->data;
        for (;;) {
                MoverMsg a;
                ssize_t n = recv(m->sock, &a, sizeof a, MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        break;
                if (n != (ssize_t)sizeof a) {
                        log_warn("cgroup mover: gone (%s); moving in the daemon from now on",
                                 n < 0 ? strerror(errno) : "closed");
                        stop_process(m);
                        return;
                }
                MoveReq *q = m->head;
                while (q && (q->answered || q->id != a.id))
                        q = q->next;
                if (q) {
                        q->r = a.pid;
                        q->answered = true;
                }
        }
        deliver_later(m);
        (void)events;
}

static void job_event(Watch *w, uint32_t events) {
        Mover *m = w->data;
        log_warn("cgroup mover: exited; moving in the daemon from now on");
        stop_process(m);
        (void)events;
}

int mover_new(Loop *l, bool process, Mover **ret) {
        Mover *m = calloc(1, sizeof *m);
        if (!m)
                return -ENOMEM;
        m->loop = l;
        m->sock = -1;
        m->job = (Job){ .pid = -1, .pidfd = -1, .result = -1 };
        int sv[2];
        if (process && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0) {
                int r = job_start(&m->job, serve, &sv[1], &sv[1], 1);
                close(sv[1]);
                m->sock = sv[0];
                if (r < 0 || loop_add(l, &m->sock_w, m->sock, EPOLLIN, sock_event, m) < 0 ||
                    loop_add(l, &m->job_w, m->job.pidfd, EPOLLIN, job_event, m) < 0) {
                        log_warn("cgroup mover: cannot start (%s); moving in the daemon", strerror(r < 0 ? -r : errno));
                        stop_process(m);
                }
        }
        *ret = m;
        return 0;
}

void mover_free(Mover *m) {
        if (!m)
                return;
        loop_del(m->loop, &m->sock_w);
        loop_del(m->loop, &m->job_w);
        loop_cancel_defer(m->loop, m);
        safe_close(m->sock);
        job_kill(&m->job);
        while (m->head) {
                MoveReq *q = m->head;
                m->head = q->next;
                req_free(q);
        }
        free(m);
}

static int64_t request(Mover *m, pid_t pid, const int *dirs, size_t n, MoveDoneFn done, void *ud) {
        MoveReq *q = calloc(1, sizeof *q);
        if (!q)
                return -ENOMEM;
        q->id = ++m->next_id;
        q->pid = pid;
        q->done = done;
        q->ud = ud;
        for (size_t i = 0; i < n; i++) {
                q->fds[i] = fcntl(dirs[i], F_DUPFD_CLOEXEC, 3);
                if (q->fds[i] < 0) {
                        int r = negerrno();
                        q->n = i;
                        req_free(q);
                        return r;
                }
                q->n = i + 1;
        }
        bool sent = false;
        if (m->sock >= 0) {
                MoverMsg msg = { .id = q->id, .pid = pid, .n = (uint32_t)n };
                union {
                        struct cmsghdr align;
                        char buf[CMSG_SPACE(sizeof(int) * MOVER_MAX_DIRS)];
                } cm;
                memset(&cm, 0, sizeof cm);
                struct iovec iov = { &msg, sizeof msg };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
                                     .msg_controllen = CMSG_SPACE(sizeof(int) * n) };
                struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * n);
                memcpy(CMSG_DATA(c), q->fds, sizeof(int) * n);
                sent = sendmsg(m->sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof msg;
        }
        if (!sent) {
                /* No process, or its queue is full: the move is done here, answered from
                 * the loop like any other. */
                q->r = move_all(pid, q->fds, q->n);
                q->answered = true;
                deliver_later(m);
        }
        if (m->tail)
                m->tail->next = q;
        else
                m->head = q;
        m->tail = q;
        m->pending++;
        return q->id;
}

void mover_cancel(Mover *m, int64_t id) {
        if (!m || id <= 0)
                return;
        for (MoveReq *q = m->head; q; q = q->next)
                if (q->id == id) {
                        q->done = NULL;
                        return;
                }
}

unsigned mover_pending(const Mover *m) { return m ? m->pending : 0; }

bool mover_running(const Mover *m) { return m && m->sock >= 0; }

pid_t mover_pid(const Mover *m) { return mover_running(m) ? m->job.pid : -1; }

int64_t mover_move(Mover *m, pid_t pid, const int *dirs, size_t n, MoveDoneFn done, void *ud) {
        if (n == 0 || n > MOVER_MAX_DIRS || pid <= 0)
                return -EINVAL;
        return request(m, pid, dirs, n, done, ud);
}

int64_t mover_kill(Mover *m, int dir, MoveDoneFn done, void *ud) {
        return dir < 0 ? -EINVAL : request(m, 0, &dir, 1, done, ud);
}
