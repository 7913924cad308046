/* SPDX-License-Identifier: MIT */
/* Small pidfd helpers over glibc's <sys/pidfd.h> (pidfds are O_CLOEXEC from the kernel). */
#pragma once
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/pidfd.h>

/* Whether the process is gone (its pidfd is readable); never waits. */
static inline bool pidfd_exited(int pidfd) {
        struct pollfd p = { .fd = pidfd, .events = POLLIN };
        return poll(&p, 1, 0) != 0;
}

/* SIGKILLs the process; a no-op for -1 or a process already gone. */
static inline void pidfd_kill(int pidfd) {
        if (pidfd >= 0)
                (void)pidfd_send_signal(pidfd, SIGKILL, NULL, 0);
}
