/* SPDX-License-Identifier: MIT */
/* Logging: one line per message on stderr, never on stdout (stdout may carry protocol). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include "base/log.h"

int sbx_log_level = LOG_WARN;

void sbx_log(int level, const char *fmt, ...) {
        if (level > sbx_log_level)
                return;
        int saved = errno;
        char line[1024];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(line, sizeof line - 1, fmt, ap);
        va_end(ap);
        if (n < 0)
                return;
        if ((size_t)n > sizeof line - 2)
                n = sizeof line - 2;
        line[n++] = '\n';
        (void)!write(STDERR_FILENO, "sbx: ", 5);
        (void)!write(STDERR_FILENO, line, (size_t)n);
        errno = saved;
}
