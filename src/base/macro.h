/* SPDX-License-Identifier: MIT */
/* Small language helpers used everywhere: cleanup attributes, ownership transfer, sizes. */
#pragma once

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _noreturn_ __attribute__((noreturn))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))

static inline void freep(void *p) { free(*(void **)p); }
static inline void closep(int *fd) {
        if (*fd >= 0) {
                int saved = errno;
                close(*fd);
                errno = saved;
        }
}
#define _cleanup_free_ _cleanup_(freep)
#define _cleanup_close_ _cleanup_(closep)

/* Hand an owned pointer or fd to someone else; the local variable no longer owns it. */
#define TAKE_PTR(p) ({ __typeof__(p) _t = (p); (p) = NULL; _t; })
#define TAKE_FD(fd) ({ int _t = (fd); (fd) = -1; _t; })

static inline int safe_close(int fd) {
        if (fd >= 0) {
                int saved = errno;
                close(fd);
                errno = saved;
        }
        return -1;
}

/* Negative errno of the last failed libc call, never 0. */
static inline int negerrno(void) { return errno > 0 ? -errno : -EIO; }

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
