/* SPDX-License-Identifier: MIT */
/* How sbx becomes sbx-engine (main.c for serve and audit, run.c for a run that needs
 * libarchive): execv, same pid and argv. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "base/macro.h"
#include "cli/cli.h"

/* Becomes sbx-engine with the same argv: beside this binary (a build tree), in ../libexec/sbx
 * from it (an install moved as a whole: a package unpacked elsewhere), else where the install
 * put it. Returns only on failure, said on stderr. */
int cli_exec_engine(char **argv) {
        static const char prog[] = "sbx-engine";
        char self[PATH_MAX], path[PATH_MAX + 32];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n > 0) {
                self[n] = 0;
                char *slash = strrchr(self, '/');
                static const char *const near[] = { "", "../libexec/sbx/" };
                for (size_t i = 0; slash && i < ELEMENTSOF(near); i++) {
                        snprintf(path, sizeof path, "%.*s/%s%s", (int)(slash - self), self, near[i], prog);
                        if (access(path, X_OK) == 0)
                                execv(path, argv);
                }
        }
        snprintf(path, sizeof path, "%s/%s", SBX_LIBEXECDIR, prog);
        execv(path, argv);
        fprintf(stderr, "sbx: cannot start %s (serve, audit, and run with --import, --export or --image): %s\n", path,
                strerror(errno));
        return 127;
}
