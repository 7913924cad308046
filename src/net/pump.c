/* SPDX-License-Identifier: MIT */
/* The byte pump of a relayed connection (pump.h). */
#include <errno.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/util.h"
#include "net/pump.h"

void pump_init(PumpFlow flow[2]) {
        for (int i = 0; i < 2; i++)
                flow[i] = (PumpFlow){ .pipe = { -1, -1 } };
}

int pump_open(PumpFlow flow[2], bool grow) {
        for (int i = 0; i < 2; i++) {
                PumpFlow *fl = &flow[i];
                if (pipe2(fl->pipe, O_NONBLOCK | O_CLOEXEC) < 0)
                        return negerrno();
                if (grow)
                        (void)fcntl(fl->pipe[1], F_SETPIPE_SZ, (int)SBX_PORT_PIPE_BYTES);
                int sz = fcntl(fl->pipe[1], F_GETPIPE_SZ);
                fl->cap = sz > 0 ? (size_t)sz : 4096;
        }
        return 0;
}

void pump_close(PumpFlow flow[2]) {
        for (int i = 0; i < 2; i++) {
                flow[i].pipe[0] = safe_close(flow[i].pipe[0]);
                flow[i].pipe[1] = safe_close(flow[i].pipe[1]);
        }
}

ssize_t pump_flow(PumpFlow *fl, int from, int to, size_t budget) {
        size_t moved = 0;
        bool progress = true;
        while (progress && moved < budget && !fl->done) {
                progress = false;
                if (!fl->eof && fl->held < fl->cap) {
                        /* EAGAIN here means the source is empty or the pipe has no free slot
                         * (a slot per socket buffer, whatever its size): the write below empties
                         * it, and the loop comes back. */
                        ssize_t n = splice(from, NULL, fl->pipe[1], NULL, fl->cap - fl->held,
                                           SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
                        if (n > 0)
                                fl->held += (size_t)n;
                        else if (n == 0)
                                fl->eof = true;
                        else if (errno != EAGAIN && errno != EINTR)
                                return negerrno();
                        progress = n >= 0;
                }
                if (fl->held > 0) {
                        ssize_t n = splice(fl->pipe[0], NULL, to, NULL, fl->held, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
                        if (n > 0) {
                                fl->held -= (size_t)n;
                                moved += (size_t)n;
                                progress = true;
                        } else if (n < 0 && errno != EAGAIN && errno != EINTR)
                                return negerrno();
                }
                if (fl->eof && fl->held == 0) {
                        /* A half-close is passed on: the other direction goes on. ENOTCONN (the
                         * peer is gone) is for that direction to find out. */
                        (void)shutdown(to, SHUT_WR);
                        fl->done = true;
                }
        }
        return (ssize_t)moved;
}

uint32_t pump_wants(const PumpFlow flow[2], int i) {
        uint32_t ev = 0;
        if (!flow[i].eof && flow[i].held == 0)
                ev |= EPOLLIN;
        if (flow[1 - i].held > 0)
                ev |= EPOLLOUT;
        return ev;
}

ssize_t pump_event(PumpFlow flow[2], const int fd[2], int i, uint32_t events) {
        bool in = events & (EPOLLIN | EPOLLHUP | EPOLLERR), out = events & (EPOLLOUT | EPOLLHUP | EPOLLERR);
        ssize_t r = 0, moved = 0;
        if (in && (r = pump_flow(&flow[i], fd[i], fd[1 - i], SBX_PORT_TURN_BYTES)) > 0)
                moved += r;
        if (r >= 0 && out && (r = pump_flow(&flow[1 - i], fd[1 - i], fd[i], SBX_PORT_TURN_BYTES)) > 0)
                moved += r;
        return r < 0 ? r : moved;
}

bool pump_done(const PumpFlow flow[2]) { return flow[0].done && flow[1].done; }

void pump_reset_close(int fd) {
        struct linger l = { .l_onoff = 1, .l_linger = 0 };
        (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
        close(fd);
}
