/* SPDX-License-Identifier: MIT */
/* sbx-spawner.so: the spawner's program (src/sandbox/spawner.h) as a library that sbx-engine
 * preloads into the host's bash. Its constructor runs before bash's main and never returns in
 * the spawner: every pid 1 is a copy of a bash not yet started, and a session shell that pid 1
 * forks returns from here into that bash's main, started by nothing but a fork (InitZygote in
 * src/sandbox/init.h). Without SPAWNER_ABI_ENV in its environment it does nothing. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "sandbox/spawner.h"

static InitZygote zygote;

__attribute__((constructor)) static void spawner_preload(int argc, char **argv, char **envp) {
        const char *abi = getenv(SPAWNER_ABI_ENV);
        if (!abi)
                return;
        if (argc != INIT_ZYGOTE_ARGC || !envp || !envp[0])
                _exit(2);
        /* The areas the kernel shows as /proc/PID/cmdline and environ: the strings execve()
         * put there, one after another. */
        size_t nenv = 0;
        while (envp[nenv])
                nenv++;
        zygote.argv = argv;
        zygote.args = argv[0];
        zygote.args_end = argv[argc - 1] + strlen(argv[argc - 1]) + 1;
        zygote.env = envp[0];
        zygote.env_end = envp[nenv - 1] + strlen(envp[nenv - 1]) + 1;
        if (sigsetjmp(zygote.back, 0) == 0)
                _exit(spawner_preload_main(abi, &zygote));
        /* A session shell (init.c, go_on_as_bash()): on into bash. */
}
