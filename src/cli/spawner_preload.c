/* SPDX-License-Identifier: MIT */
/* sbx-spawner.so: the spawner's program (src/sandbox/spawner.h) as a library that sbx-engine
 * preloads into the host's bash. Its constructor runs before bash's main and never returns in
 * the spawner: every pid 1 is a copy of a bash not yet started, and a session shell that pid 1
 * forks returns from here into that bash's main, started by nothing but a fork (InitZygote in
 * src/sandbox/init.h). Without SPAWNER_ABI_ENV in its environment it does nothing. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "sandbox/spawner.h"

static InitZygote zygote;

/* How far below the constructor's frame the spawner's, pid 1's and the shell's own frames may
 * have gone: within the stack's guard gap (1 MiB), so nothing else is mapped there. */
#define FORGET_BYTES (512U * 1024)
/* ... and the part of it next to the frame, zeroed in place (a call's frame is in it). */
#define NEAR_BYTES (12U * 1024)

__attribute__((noinline)) static void forget_near(void) {
        char pad[NEAR_BYTES];
        explicit_bzero(pad, sizeof pad);
        __asm__ volatile("" : : "r"(pad) : "memory");
}

/* Everything below the constructor's frame was the spawner's, pid 1's and the shell's setup:
 * the request, host paths, the cgroups' names, the seccomp filter. Pages below the part next
 * to the frame are dropped (fresh zero pages when touched again: no copy of pid 1's page),
 * that part is zeroed. Bash then starts on a clean stack. */
static void forget_below(uintptr_t frame) {
        uintptr_t near = (frame - NEAR_BYTES / 2) & ~(uintptr_t)4095;
        (void)madvise((void *)(near - FORGET_BYTES), FORGET_BYTES, MADV_DONTNEED);
        forget_near();
}

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
        forget_below((uintptr_t)__builtin_frame_address(0));
}
