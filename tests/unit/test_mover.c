/* SPDX-License-Identifier: MIT */
/* The cgroup mover (src/cgroup/mover.h): moves are answered from the loop, in order, with
 * the kernel's result; a cancelled request is never answered; without the process, moves are
 * done in the daemon and still answered from the loop. Needs root and cgroup v2. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>
#include "base/loop.h"
#include "base/macro.h"
#include "base/util.h"
#include "cgroup/cgroup.h"
#include "cgroup/mover.h"
#include "tap.h"

typedef struct Answer {
        int calls, r, order;
} Answer;

static int answers;

static void on_moved(void *ud, int r) {
        Answer *a = ud;
        a->calls++;
        a->r = r;
        a->order = ++answers;
}

static void spin(Loop *l, const Answer *a, int ms) {
        for (int i = 0; i < ms / 10 && (!a || a->calls == 0); i++)
                (void)loop_run_once(l, 10);
}

/* Whether pid's v2 cgroup path ends in name. */
static bool in_cgroup(pid_t pid, const char *name) {
        char path[64], line[512];
        snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
        FILE *f = fopen(path, "re");
        bool yes = false;
        while (f && fgets(line, sizeof line, f))
                if (strncmp(line, "0::", 3) == 0) {
                        line[strcspn(line, "\n")] = 0;
                        size_t n = strlen(line), k = strlen(name);
                        yes = n > k && line[n - k - 1] == '/' && strcmp(line + n - k, name) == 0;
                }
        if (f)
                fclose(f);
        return yes;
}

int main(void) {
        char v2[512], mem[512], pids[512], cpu[512];
        cgroup_find_mounts(v2, mem, pids, cpu, sizeof v2);
        if (geteuid() != 0 || !v2[0]) {
                printf("1..0 # SKIP needs root and cgroup v2\n");
                return 0;
        }
        char base[600], a_path[640], b_path[640];
        snprintf(base, sizeof base, "%s/sbx-unit-mover-%d", v2, (int)getpid());
        snprintf(a_path, sizeof a_path, "%s/a", base);
        snprintf(b_path, sizeof b_path, "%s/b", base);
        CHECK(mkdir(base, 0755) == 0 && mkdir(a_path, 0755) == 0 && mkdir(b_path, 0755) == 0, "cgroups made");
        int a = open(a_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), b = open(b_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        pid_t child = fork();
        if (child == 0) {
                pause();
                _exit(0);
        }
        Loop *l = NULL;
        Mover *m = NULL;
        CHECK(loop_new(&l) == 0 && mover_new(l, true, &m) == 0, "loop and mover");
        CHECK(mover_running(m) && mover_pid(m) > 0, "the mover process runs (pid %d)", (int)mover_pid(m));

        Answer x = { 0 };
        int64_t id = mover_move(m, child, &a, 1, on_moved, &x);
        CHECK(id > 0 && x.calls == 0, "a move is answered later, never from mover_move() itself");
        spin(l, &x, 3000);
        CHECK(x.calls == 1 && x.r == 0 && in_cgroup(child, "a"), "moved into a (r %d)", x.r);

        /* In order: into b then back into a; the last answer is the child's place. */
        Answer y = { 0 }, z = { 0 };
        CHECK(mover_move(m, child, &b, 1, on_moved, &y) > 0 && mover_move(m, child, &a, 1, on_moved, &z) > 0,
              "two moves sent");
        spin(l, &z, 3000);
        CHECK(y.calls == 1 && z.calls == 1 && y.order < z.order && in_cgroup(child, "a"),
              "answered in order, the later move last");

        Answer bad = { 0 };
        CHECK(mover_move(m, 0x3ffffffe, &a, 1, on_moved, &bad) > 0, "a move of a pid that does not exist");
        spin(l, &bad, 3000);
        CHECK(bad.calls == 1 && bad.r == -ESRCH, "is answered with the kernel's error (%s)", strerror(-bad.r));
        CHECK(mover_move(m, child, &a, 0, on_moved, &bad) == -EINVAL, "no cgroup: -EINVAL at once");

        Answer gone = { 0 };
        id = mover_move(m, child, &b, 1, on_moved, &gone);
        mover_cancel(m, id);
        for (int i = 0; i < 100 && mover_pending(m) > 0; i++)
                (void)loop_run_once(l, 10);
        CHECK(gone.calls == 0 && mover_pending(m) == 0, "a cancelled move is never answered");
        CHECK(in_cgroup(child, "b"), "(the move itself may happen: it did)");

        /* Without the process the daemon moves, answered from the loop all the same. */
        kill(mover_pid(m), SIGKILL);
        for (int i = 0; i < 300 && mover_running(m); i++)
                (void)loop_run_once(l, 10);
        CHECK(!mover_running(m), "the mover's death is seen");
        Answer late = { 0 };
        CHECK(mover_move(m, child, &a, 1, on_moved, &late) > 0 && late.calls == 0, "a move after it");
        spin(l, &late, 3000);
        CHECK(late.calls == 1 && late.r == 0 && in_cgroup(child, "a"), "is done in the daemon");

        /* A caller that asks for no process (sbx run) moves in itself from the start. */
        Mover *inl = NULL;
        CHECK(mover_new(l, false, &inl) == 0 && !mover_running(inl) && mover_pid(inl) == -1, "no mover process asked");
        Answer own = { 0 };
        CHECK(mover_move(inl, child, &b, 1, on_moved, &own) > 0 && own.calls == 0, "a move without it");
        spin(l, &own, 3000);
        CHECK(own.calls == 1 && own.r == 0 && in_cgroup(child, "b"), "is done here, answered from the loop");
        Answer back = { 0 };
        CHECK(mover_move(inl, child, &a, 1, on_moved, &back) > 0, "and back");
        spin(l, &back, 3000);
        CHECK(back.calls == 1 && back.r == 0 && in_cgroup(child, "a"), "into a again");
        mover_free(inl);

        CHECK(cgroup_only_pid(a, child) == 1 && cgroup_only_pid(a, child + 1) == 0 && cgroup_only_pid(b, child) == 0,
              "cgroup_only_pid: yes for the one process there, no for another pid or an empty cgroup");
        pid_t second = fork();
        if (second == 0) {
                pause();
                _exit(0);
        }
        CHECK(second > 0 && cgroup_move(a, second) == 0 && cgroup_only_pid(a, child) == 0 && cgroup_only_pid(a, second) == 0,
              "and no for either of two");
        if (second > 0) {
                kill(second, SIGKILL);
                waitpid(second, NULL, 0);
        }

        mover_free(m);
        loop_free(l);
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        close(a);
        close(b);
        CHECK(rmdir(a_path) == 0 && rmdir(b_path) == 0 && rmdir(base) == 0, "cgroups removed");
        return tap_done();
}
