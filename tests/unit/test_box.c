/* SPDX-License-Identifier: MIT */
/* Unit tests of what the daemon reads from pid 1's control socket (sandbox/box.c): a pid 1
 * that failed and exited with a message of the daemon's unread leaves ECONNRESET on the
 * daemon's end, which the kernel reports once before pid 1's last words; those are still read,
 * not taken for a pid 1 that said nothing. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include "sandbox/box.h"
#include "sandbox/init.h"
#include "tap.h"

/* A control socket pair whose pid 1 end said msg and closed, leaving something unread. */
static int dead_init(const InitMsg *msg) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return -1;
        /* The daemon's word pid 1 never read (a WATCH, say). */
        InitMsg unread = { .type = INIT_EXITED };
        if (send(sv[0], &unread, sizeof unread, 0) < 0 || send(sv[1], msg, sizeof *msg, 0) < 0)
                return -1;
        close(sv[1]);
        return sv[0];
}

static void test_reason_after_reset(void) {
        InitMsg m = { .type = INIT_READY, .status = -EACCES };
        snprintf(m.text, sizeof m.text, "rootfs /x is out of the sandbox's reach");
        Box b;
        memset(&b, 0, sizeof b);
        b.ctl_fd = dead_init(&m);
        b.root_fd = b.snap_fd = b.netns_fd = b.proxy_fd = -1;
        char err[512] = "";
        int r = box_ready(&b, err, sizeof err);
        CHECK(r == -EACCES, "pid 1's status, not -EIO: %d", r);
        CHECK(strcmp(err, m.text) == 0, "pid 1's reason: %s", err);
        close(b.ctl_fd);
}

static void test_exit_report_after_reset(void) {
        InitMsg m = { .type = INIT_EXITED, .pid = 42, .status = W_EXITCODE(3, 0) };
        Box b;
        memset(&b, 0, sizeof b);
        b.ctl_fd = dead_init(&m);
        pid_t pid = 0;
        int ws = 0;
        int r = box_read_exit(&b, &pid, &ws);
        CHECK(r == 1 && pid == 42 && WEXITSTATUS(ws) == 3, "the last exit report is read: %d pid %d", r, (int)pid);
        r = box_read_exit(&b, &pid, &ws);
        CHECK(r < 0, "then the end: %d", r);
        close(b.ctl_fd);
}

int main(void) {
        test_reason_after_reset();
        test_exit_report_after_reset();
        return tap_done();
}
