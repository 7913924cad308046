/* SPDX-License-Identifier: MIT */
/* Tests of the public session API against real sandboxes: what the CLI does not expose
 * (stdin, per-run cwd and env, named sessions, truncation flags, cancel, queueing,
 * LIMIT_EXCEEDED, streaming callbacks) and that destroy leaves nothing behind. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/util.h"
#include "sbx/sbx.h"
#include "session/context.h"
#include "session/internal.h"
#include "session/sandbox.h"
#include "tap.h"

static SbxContext *ctx;

static SbxResult run_opts(SbxSession *s, SbxRunOptions *o) {
        SbxResult r = { 0 };
        int rc = sbx_session_run_sync(s, o, NULL, NULL, &r);
        if (rc < 0) {
                r.exit_code = -1000 + rc;
                r.stdout_data = (const uint8_t *)strdup("");
                r.stderr_data = (const uint8_t *)strdup("");
        }
        return r;
}

static SbxResult run(SbxSession *s, const char *cmd) {
        SbxRunOptions o = { .command = cmd, .command_len = strlen(cmd) };
        return run_opts(s, &o);
}

static bool out_is(const SbxResult *r, const char *want) {
        return r->stdout_len == strlen(want) && memcmp(r->stdout_data, want, r->stdout_len) == 0;
}

static int count_dir(const char *path) {
        DIR *d = opendir(path);
        int n = 0;
        if (!d)
                return -1;
        for (struct dirent *de; (de = readdir(d));)
                if (de->d_name[0] != '.')
                        n++;
        closedir(d);
        return n;
}

static int count_subdirs(const char *path) {
        int n = 0;
        DIR *d = opendir(path);
        for (struct dirent *de; d && (de = readdir(d));)
                if (de->d_type == DT_DIR && de->d_name[0] != '.')
                        n++;
        if (d)
                closedir(d);
        return n;
}

static void spin_ms(int ms) {
        uint64_t end = now_ms() + (uint64_t)ms;
        while (now_ms() < end)
                sbx_context_run_once(ctx, 20);
}

/* Turns the loop until path has `want` subdirectories or 10 s passed (a loaded machine, or
 * one under strace, takes its time to make a sandbox); the count it ends with. */
static int wait_subdirs(const char *path, int want) {
        uint64_t end = now_ms() + 10000;
        int n;
        while ((n = count_subdirs(path)) != want && now_ms() < end)
                sbx_context_run_once(ctx, 20);
        return n;
}

/* This process's children: how many, how many of them zombies, the pid of one named `comm`
 * (0 if none) and how many are (ret_named, if not NULL). */
static int children(int *ret_zombies, const char *comm, pid_t *ret_pid, int *ret_named) {
        DIR *d = opendir("/proc");
        int n = 0;
        *ret_zombies = 0;
        if (ret_pid)
                *ret_pid = 0;
        if (ret_named)
                *ret_named = 0;
        for (struct dirent *e; d && (e = readdir(d));) {
                if (e->d_name[0] < '1' || e->d_name[0] > '9')
                        continue;
                char path[300], buf[512];
                snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
                int fd = open(path, O_RDONLY | O_CLOEXEC);
                ssize_t k = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
                if (fd >= 0)
                        close(fd);
                if (k <= 0)
                        continue;
                buf[k] = 0;
                /* pid (comm) state ppid ... */
                char *close_paren = strrchr(buf, ')'), *open_paren = strchr(buf, '(');
                char state;
                int ppid;
                if (!close_paren || !open_paren || sscanf(close_paren + 1, " %c %d", &state, &ppid) != 2 ||
                    ppid != (int)getpid())
                        continue;
                n++;
                *ret_zombies += state == 'Z';
                *close_paren = 0;
                if (comm && strcmp(open_paren + 1, comm) == 0) {
                        if (ret_pid)
                                *ret_pid = (pid_t)atoi(e->d_name);
                        if (ret_named)
                                (*ret_named)++;
                }
        }
        if (d)
                closedir(d);
        return n;
}

/* Sandboxes freed before the spawner's answer for them came: whatever it still makes for them
 * (cgroups, a pid 1) is killed, reaped and removed when its answer comes. */
static void test_freed_before_spawned(const char *cgdir) {
        int zombies;
        pid_t spawner;
        int before = children(&zombies, "sbx-spawner", &spawner, NULL);
        CHECK(spawner > 0, "the spawner is this process's child");
        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so);
        for (int i = 0; i < 20; i++) {
                SbxSandbox *sb = NULL;
                CHECK(sbx_sandbox_new(ctx, &so, &sb) == 0, "sandbox %d asked for", i);
                /* Half at once, half once the spawner may have made them. */
                if (i % 2)
                        usleep(2000);
                sbx_sandbox_free(sb);
        }
        uint64_t end = now_ms() + 10000;
        while ((count_subdirs(cgdir) > 0 || children(&zombies, NULL, NULL, NULL) > before) && now_ms() < end)
                sbx_context_run_once(ctx, 50);
        CHECK(count_subdirs(cgdir) == 0, "freed before spawned: no cgroup left (%d)", count_subdirs(cgdir));
        int now = children(&zombies, NULL, NULL, NULL);
        CHECK(now == before && zombies == 0, "freed before spawned: no pid 1 left (%d children, %d before, %d zombies)",
              now, before, zombies);
}

/* The spawner killed from outside: creates that waited for it fail with a reason, and the next
 * create starts another. */
static void test_spawner_lost(void) {
        int zombies;
        pid_t spawner;
        (void)children(&zombies, "sbx-spawner", &spawner, NULL);
        CHECK(spawner > 0, "spawner found");
        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so);
        SbxSandbox *a = NULL, *b = NULL;
        CHECK(sbx_sandbox_new(ctx, &so, &a) == 0, "a sandbox asked for before the spawner dies");
        (void)kill(spawner, SIGKILL);
        uint64_t end = now_ms() + 10000;
        while (a && !sbx_sandbox_ready(a) && sandbox_setup_state(a) == 0 && now_ms() < end)
                sbx_context_run_once(ctx, 50);
        /* It may have been made before the kill; if not, it failed and says why. */
        CHECK(a && (sandbox_setup_state(a) > 0 ||
                    strstr(sbx_sandbox_setup_error(a) ? sbx_sandbox_setup_error(a) : "", "spawner") != NULL),
              "made, or failed for the spawner (%s)", a && sbx_sandbox_setup_error(a) ? sbx_sandbox_setup_error(a) : "");
        /* Its death is heard from the loop: the next create after that starts another. One
         * before it is refused with -EAGAIN, "try again", and is tried again, as a client would. */
        int rc;
        end = now_ms() + 10000;
        while ((rc = sbx_sandbox_new(ctx, &so, &b)) == -EAGAIN && now_ms() < end)
                spin_ms(50);
        CHECK(rc == 0, "a sandbox asked for after (%s)", sbx_context_last_error(ctx));
        SbxSession *s = NULL;
        CHECK(b && sbx_session_get(b, NULL, &s) == 0, "its session");
        if (s) {
                SbxResult r = run(s, "echo again");
                CHECK(out_is(&r, "again\n"), "a new spawner made it: it runs commands");
                sbx_result_clear(&r);
        }
        pid_t next;
        (void)children(&zombies, "sbx-spawner", &next, NULL);
        CHECK(next > 0 && next != spawner, "another spawner (%d, was %d)", (int)next, (int)spawner);
        sbx_sandbox_free(b);
        sbx_sandbox_free(a);
}

/* How many of this process's children are named comm. */
static int children_named(const char *comm) {
        int zombies, named;
        (void)children(&zombies, comm, NULL, &named);
        return named;
}

/* A context whose own process clones its pid 1s (sbx run's): no spawner, the same sandboxes. */
/* sbx_context_new_local(): sandboxes as any other's, but a network allowlist (which needs the
 * egress proxy it leaves out) refused with why, never made without its proxy. */
static void test_context_local(void) {
        SbxContext *c2 = NULL;
        CHECK(sbx_context_new_local(&c2) == 0, "local: a context");
        if (!c2)
                return;
        CHECK(sbx_context_set_sandboxes_cpu_weight(c2, 0) == -EINVAL &&
                      sbx_context_set_sandboxes_cpu_weight(c2, SBX_MAX_CPU_WEIGHT + 1) == -EINVAL,
              "cpu weight: out of range refused");
        CHECK(sbx_context_set_sandboxes_cpu_weight(c2, 100) == 0, "cpu weight: taken before the first sandbox");
        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so);
        so.network = SBX_NETWORK_ALLOWLIST;
        SbxSandbox *sb = NULL;
        CHECK(sbx_sandbox_new(c2, &so, &sb) == -EINVAL && !sb &&
                      strstr(sbx_context_last_error(c2), "needs the egress proxy"),
              "local: allowlist refused (%s)", sbx_context_last_error(c2));
        so.network = SBX_NETWORK_NONE;
        SbxSession *s = NULL;
        CHECK(sbx_sandbox_new(c2, &so, &sb) == 0 && sbx_session_get(sb, NULL, &s) == 0, "local: a sandbox (%s)",
              sbx_context_last_error(c2));
        if (s) {
                SbxResult r = run(s, "echo local");
                CHECK(out_is(&r, "local\n"), "local: it runs commands");
                sbx_result_clear(&r);
                int w = sbx_context_set_sandboxes_cpu_weight(c2, 100);
                CHECK(w == 0 || w == -ENOTSUP, "cpu weight: set at once once made (%d)", w);
        }
        sbx_context_free(c2);
}

/* Two contexts in one process: each has its own cgroup base, so freeing one (which removes
 * its base) leaves the other's sandboxes a place to be made. */
static void test_context_bases(const char *cgdir) {
        SbxContext *c2 = NULL;
        CHECK(sbx_context_new(&c2) == 0, "bases: a second context");
        if (!c2)
                return;
        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so);
        SbxSandbox *sb = NULL;
        SbxSession *s = NULL;
        CHECK(sbx_sandbox_new(c2, &so, &sb) == 0 && sbx_session_get(sb, NULL, &s) == 0, "bases: its sandbox (%s)",
              sbx_context_last_error(c2));
        if (s) {
                SbxResult r = run(s, "echo two");
                CHECK(out_is(&r, "two\n"), "bases: it runs commands");
                sbx_result_clear(&r);
        }
        CHECK(count_subdirs(cgdir) == 0, "bases: its cgroups are not in the first context's base (%d)",
              count_subdirs(cgdir));
        sbx_sandbox_free(sb);
        sbx_context_free(c2);
        CHECK(access(cgdir, F_OK) == 0, "bases: the first context's base outlives the second");
        sb = NULL;
        s = NULL;
        CHECK(sbx_sandbox_new(ctx, &so, &sb) == 0 && sbx_session_get(sb, NULL, &s) == 0,
              "bases: the first context still makes sandboxes (%s)", sbx_context_last_error(ctx));
        if (s) {
                SbxResult r = run(s, "echo one");
                CHECK(out_is(&r, "one\n"), "bases: ... that run commands (exit %d, %.*s)", r.exit_code,
                      (int)r.stderr_len, (const char *)r.stderr_data);
                sbx_result_clear(&r);
        }
        sbx_sandbox_free(sb);
}

static void test_spawner_in_caller(void) {
        SbxContext *c2 = NULL;
        CHECK(sbx_context_new(&c2) == 0, "in caller: a second context");
        if (!c2)
                return;
        CHECK(sbx_context_set_spawner(c2, false) == 0, "in caller: chosen before any sandbox");
        CHECK(sbx_context_set_mover(c2, false) == 0, "in caller: its moves too");
        int spawners = children_named("sbx-spawner"), movers = children_named("sbx-mover");
        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so);
        SbxSandbox *sb = NULL;
        SbxSession *s = NULL;
        CHECK(sbx_sandbox_new(c2, &so, &sb) == 0 && sbx_session_get(sb, NULL, &s) == 0, "in caller: sandbox (%s)",
              sbx_context_last_error(c2));
        if (s) {
                SbxResult r = run(s, "echo inline");
                CHECK(out_is(&r, "inline\n"), "in caller: it runs commands");
                sbx_result_clear(&r);
        }
        pid_t init = sb ? (pid_t)sbx_sandbox_init_pid(sb) : -1;
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)init);
        int fd = init > 0 ? open(path, O_RDONLY | O_CLOEXEC) : -1;
        ssize_t k = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
        if (fd >= 0)
                close(fd);
        buf[k > 0 ? k : 0] = 0;
        char *c = strrchr(buf, ')');
        int ppid = 0;
        char state;
        CHECK(c && sscanf(c + 1, " %c %d", &state, &ppid) == 2 && ppid == (int)getpid(),
              "in caller: its pid 1 is this process's child (%d)", ppid);
        CHECK(children_named("sbx-spawner") == spawners, "in caller: no spawner of its own");
        CHECK(children_named("sbx-mover") == movers, "in caller: no mover of its own");
        CHECK(sbx_context_set_mover(c2, true) == -EBUSY && sbx_context_set_mover(c2, false) == 0,
              "in caller: the mover's choice is fixed too");
        CHECK(sbx_context_set_spawner(c2, true) == -EBUSY, "in caller: the choice is fixed after the first sandbox");
        CHECK(sbx_context_set_spawner(c2, false) == 0, "in caller: ... and may be said again");
        sbx_sandbox_free(sb);
        sbx_context_free(c2);
        CHECK(init > 0 && kill(init, 0) < 0 && errno == ESRCH, "in caller: its pid 1 reaped with the context");
}

static void test_pool(const char *cgdir) {
        sbx_context_set_pool(ctx, 1);
        CHECK(wait_subdirs(cgdir, 1) == 1, "pool: one sandbox prepared");
        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so);
        SbxSandbox *a = NULL, *b = NULL;
        SbxSession *s = NULL;
        CHECK(sbx_sandbox_new(ctx, &so, &a) == 0 && sbx_session_get(a, NULL, &s) == 0, "pool: default sandbox taken");
        SbxResult r = run(s, "echo pooled; x=1");
        CHECK(out_is(&r, "pooled\n"), "pool: the taken sandbox runs commands (exit %d, %.*s)", r.exit_code,
              (int)r.stderr_len, (const char *)r.stderr_data);
        sbx_result_clear(&r);
        CHECK(wait_subdirs(cgdir, 2) == 2, "pool: refilled after a take");
        so.limits.pids = 99;
        CHECK(sbx_sandbox_new(ctx, &so, &b) == 0, "pool: non-default options create a fresh sandbox");
        CHECK(b && sbx_sandbox_limits(b)->pids == 99, "pool: ... with those options");
        /* Its cgroups come with the spawner's answer, from the loop; a pool that made one more
         * would show as a fourth. */
        wait_subdirs(cgdir, 3);
        spin_ms(100);
        CHECK(count_subdirs(cgdir) == 3, "pool: left untouched by a non-default create");
        sbx_sandbox_free(b);
        sbx_sandbox_free(a);
        sbx_context_set_pool(ctx, 0);
        CHECK(wait_subdirs(cgdir, 0) == 0, "pool: emptied when turned off");
}

/* A pooled sandbox whose pid 1 dies (OOM killer, a kill from outside) is freed, and the pool
 * is made whole again. */
static void test_pool_refill_after_death(const char *cgdir) {
        sbx_context_set_pool(ctx, 1);
        /* The sandbox's cgroup exists before its pid 1 is cloned into it: a kill before that
         * would kill nothing, so wait until the cgroup holds a process. */
        char first[256] = "", path[512];
        DIR *d;
        uint64_t end = now_ms() + 5000;
        for (bool populated = false; !populated && now_ms() < end;) {
                sbx_context_run_once(ctx, 50);
                first[0] = 0;
                d = opendir(cgdir);
                for (struct dirent *de; d && (de = readdir(d));)
                        if (de->d_type == DT_DIR && de->d_name[0] != '.')
                                snprintf(first, sizeof first, "%s", de->d_name);
                if (d)
                        closedir(d);
                snprintf(path, sizeof path, "%s/%s/cgroup.events", cgdir, first);
                char ev[256] = "";
                int fd = first[0] ? open(path, O_RDONLY | O_CLOEXEC) : -1;
                ssize_t k = fd >= 0 ? read(fd, ev, sizeof ev - 1) : -1;
                if (fd >= 0)
                        close(fd);
                ev[k > 0 ? k : 0] = 0;
                populated = strstr(ev, "populated 1") != NULL;
        }
        snprintf(path, sizeof path, "%s/%s/cgroup.kill", cgdir, first);
        FILE *f = first[0] ? fopen(path, "we") : NULL;
        bool killed = f && fputs("1", f) >= 0;
        if (f)
                killed = fclose(f) == 0 && killed;
        CHECK(killed, "pool refill: the pooled sandbox's processes killed (%s)", path);
        bool other = false;
        end = now_ms() + 10000;
        while (!other && now_ms() < end) {
                sbx_context_run_once(ctx, 50);
                d = opendir(cgdir);
                for (struct dirent *de; d && (de = readdir(d));)
                        other = other || (de->d_type == DT_DIR && de->d_name[0] != '.' && strcmp(de->d_name, first) != 0);
                if (d)
                        closedir(d);
        }
        CHECK(other, "pool refill: a new sandbox is pooled after the last one's pid 1 died");
        sbx_context_set_pool(ctx, 0);
        end = now_ms() + 5000;
        while (count_subdirs(cgdir) > 0 && now_ms() < end)
                sbx_context_run_once(ctx, 50);
}

/* A context's rooms: the library's own, then as many more as SBX_MAX_ROOMS allows, no more. */
static void test_room_table(void) {
        static const Room idle = { .name = "idle" };
        SbxContext *c = NULL;
        CHECK(sbx_context_new(&c) == 0, "rooms: a context");
        if (!c)
                return;
        unsigned had = context_host(c)->rooms.n, added = 0;
        while (added < 2 * SBX_MAX_ROOMS && context_add_room(c, &idle) == 0)
                added++;
        CHECK(had == 2 && had + added == SBX_MAX_ROOMS, "rooms: egress and process, then %u more up to the most",
              added);
        CHECK(context_add_room(c, &idle) == -ENOSPC, "rooms: one past the most is -ENOSPC");
        sbx_context_free(c);
}

static void test_basics(SbxSession *s) {
        SbxResult r = run(s, "echo hi");
        CHECK(r.exit_code == 0 && out_is(&r, "hi\n") && r.error_class == SBX_ERROR_NONE, "echo hi");
        sbx_result_clear(&r);
        r = run(s, "x=1; declare -A m=([k]=v); cd /tmp; f() { echo f$1; }");
        sbx_result_clear(&r);
        r = run(s, "echo $x ${m[k]}; pwd; f 2");
        CHECK(out_is(&r, "1 v\n/tmp\nf2\n"), "state carries to the next run");
        sbx_result_clear(&r);
        r = run(s, "printf 'a\\0b\\377'; echo err >&2");
        CHECK(r.stdout_len == 4 && memcmp(r.stdout_data, "a\0b\377", 4) == 0, "binary stdout exact");
        CHECK(r.stderr_len == 4 && memcmp(r.stderr_data, "err\n", 4) == 0, "stderr separate");
        sbx_result_clear(&r);
        r = run(s, "cat");
        CHECK(r.exit_code == 0 && r.stdout_len == 0, "stdin defaults to /dev/null");
        sbx_result_clear(&r);
}

static void test_stdin(SbxSession *s) {
        SbxRunOptions o = { .command = "cat", .command_len = 3, .stdin_data = "ab\0cd", .stdin_len = 5 };
        SbxResult r = run_opts(s, &o);
        CHECK(r.stdout_len == 5 && memcmp(r.stdout_data, "ab\0cd", 5) == 0, "stdin bytes reach the command");
        sbx_result_clear(&r);
        size_t big = 3 * 1024 * 1024 + 7;
        char *data = malloc(big);
        memset(data, 'z', big);
        o = (SbxRunOptions){ .command = "wc -c", .command_len = 5, .stdin_data = data, .stdin_len = big };
        r = run_opts(s, &o);
        CHECK(r.exit_code == 0 && atol((const char *)r.stdout_data) == (long)big, "3 MiB of stdin arrives whole");
        sbx_result_clear(&r);
        o = (SbxRunOptions){ .command = "true", .command_len = 4, .stdin_data = data, .stdin_len = big };
        r = run_opts(s, &o);
        CHECK(r.exit_code == 0, "stdin the command never reads does not block");
        sbx_result_clear(&r);
        free(data);
}

static void test_overrides(SbxSession *s) {
        SbxResult r = run(s, "cd /home/user");
        sbx_result_clear(&r);
        SbxRunOptions o = { .command = "pwd", .command_len = 3, .cwd = "/tmp" };
        r = run_opts(s, &o);
        CHECK(out_is(&r, "/tmp\n"), "cwd override applies");
        sbx_result_clear(&r);
        r = run(s, "pwd");
        CHECK(out_is(&r, "/home/user\n"), "cwd override does not persist");
        sbx_result_clear(&r);
        o = (SbxRunOptions){ .command = "echo ran", .command_len = 8, .cwd = "/nonexistent" };
        r = run_opts(s, &o);
        CHECK(r.exit_code == 1 && r.stdout_len == 0 && r.stderr_len > 0 &&
              strstr((const char *)r.stderr_data, "No such file"), "missing cwd: exit 1, says why, nothing ran");
        sbx_result_clear(&r);
        r = run(s, "pwd");
        CHECK(out_is(&r, "/home/user\n"), "session fine after a bad cwd");
        sbx_result_clear(&r);

        const char *env[] = { "FOO=bar", "HOME=/tmp", NULL };
        o = (SbxRunOptions){ .command = "echo $FOO $HOME; env | grep -c '^FOO=bar$'", .command_len = 0, .env = env };
        o.command_len = strlen(o.command);
        r = run_opts(s, &o);
        CHECK(out_is(&r, "bar /tmp\n1\n"), "env override applies and is exported");
        sbx_result_clear(&r);
        r = run(s, "echo ${FOO-unset} $HOME");
        CHECK(out_is(&r, "unset /home/user\n"), "env override does not persist");
        sbx_result_clear(&r);
        const char *env2[] = { "FOO=bar", NULL };
        o = (SbxRunOptions){ .command = "FOO=mine", .command_len = 8, .env = env2 };
        r = run_opts(s, &o);
        sbx_result_clear(&r);
        r = run(s, "echo $FOO");
        CHECK(out_is(&r, "mine\n"), "a change the command made to an overridden name persists");
        sbx_result_clear(&r);
        const char *env3[] = { "KEPT=yes it is", NULL };
        o = (SbxRunOptions){ .command = "", .command_len = 0, .env = env3, .persist_env = true };
        r = run_opts(s, &o);
        sbx_result_clear(&r);
        r = run(s, "echo \"$KEPT\"; /usr/bin/printenv KEPT");
        CHECK(out_is(&r, "yes it is\nyes it is\n"), "persist_env leaves the variable set and exported");
        sbx_result_clear(&r);
        const char *bad[] = { "1BAD=x", NULL };
        o = (SbxRunOptions){ .command = "true", .command_len = 4, .env = bad };
        CHECK(sbx_session_run(s, &o, NULL, NULL, NULL, NULL) == -EINVAL, "bad env name refused");
        o = (SbxRunOptions){ .command = "true", .command_len = 4, .cwd = "" };
        CHECK(sbx_session_run(s, &o, NULL, NULL, NULL, NULL) == -EINVAL, "empty cwd refused");
}

static void test_exit_paths(SbxSession *s) {
        SbxResult r = run(s, "y=1; exit 7");
        CHECK(r.exit_code == 7, "exit N gives N");
        sbx_result_clear(&r);
        r = run(s, "set -e; y=2; false; y=3");
        CHECK(r.exit_code == 1, "set -e failure gives its status");
        sbx_result_clear(&r);
        r = run(s, "set +e; echo $y");
        CHECK(out_is(&r, "2\n"), "changes before exit / set -e persist");
        sbx_result_clear(&r);
        r = run(s, "if true; then echo x");
        CHECK(r.exit_code == 2 && r.stderr_len > 0 && strstr((const char *)r.stderr_data, "syntax error"),
              "syntax error: exit 2 with bash's message");
        sbx_result_clear(&r);
        r = run(s, "nosuchcommand_xyz");
        CHECK(r.exit_code == 127, "unknown command: 127");
        sbx_result_clear(&r);
        r = run(s, "kill -9 $BASHPID");
        CHECK(r.exit_code == 137, "worker killed by a signal: 128+N");
        sbx_result_clear(&r);
        r = run(s, "echo $y");
        CHECK(out_is(&r, "2\n"), "session survives its worker's death");
        sbx_result_clear(&r);
        r = run(s, "kill -9 $(ps -o ppid= -p $BASHPID)");
        sbx_result_clear(&r);
        r = run(s, "echo alive");
        CHECK(r.exit_code == 0 && out_is(&r, "alive\n"), "killing the session's holder gives a fresh shell");
        sbx_result_clear(&r);
}

static void test_timeout(SbxSession *s) {
        SbxResult r = run(s, "t=1");
        sbx_result_clear(&r);
        SbxRunOptions o = { .command = "t=2; echo partial; sleep 100 & setsid sleep 100 & while :; do :; done",
                            .timeout_ms = 300 };
        o.command_len = strlen(o.command);
        uint64_t t0 = now_ms();
        r = run_opts(s, &o);
        uint64_t took = now_ms() - t0;
        CHECK(r.exit_code == 124 && r.error_class == SBX_ERROR_TIMEOUT, "timeout: 124 TIMEOUT");
        CHECK(out_is(&r, "partial\n"), "timeout keeps the output so far");
        CHECK(took < 2000, "timeout answered promptly (%llu ms)", (unsigned long long)took);
        sbx_result_clear(&r);
        r = run(s, "echo $t; ps -eo comm | grep -c '^sleep$'");
        CHECK(out_is(&r, "1\n0\n"), "after a timeout: state as before, no process left");
        sbx_result_clear(&r);
}

typedef struct Async {
        SbxRun *run;
        bool done, cancel_on_output;
        SbxResult res;
        char out[256];
        size_t out_len;
        int order;
} Async;

static int done_counter;

static void async_output(void *ud, SbxStream st, const uint8_t *d, size_t n) {
        Async *a = ud;
        if (st == SBX_STDOUT && a->out_len + n < sizeof a->out) {
                memcpy(a->out + a->out_len, d, n);
                a->out_len += n;
        }
        if (a->cancel_on_output && a->run) {
                CHECK(sbx_run_cancel(a->run) == 0, "cancel from the output callback");
                a->cancel_on_output = false;
        }
}

static void async_done(void *ud, const SbxResult *r) {
        Async *a = ud;
        a->done = true;
        a->res = *r;
        a->res.stdout_data = NULL;
        a->res.stderr_data = NULL;
        a->order = ++done_counter;
        a->run = NULL;
}

static void spin_until(bool *flag, int ms) {
        uint64_t end = now_ms() + (uint64_t)ms;
        while (!*flag && now_ms() < end)
                sbx_context_run_once(ctx, 50);
}

static void test_cancel_and_queue(SbxSession *s) {
        Async a = { .cancel_on_output = true };
        SbxRunOptions o = { .command = "c=9; echo started; sleep 30" };
        o.command_len = strlen(o.command);
        CHECK(sbx_session_run(s, &o, async_output, async_done, &a, &a.run) == 0, "async run submitted");
        spin_until(&a.done, 5000);
        CHECK(a.done && a.res.exit_code == 125 && a.res.error_class == SBX_ERROR_CANCELLED, "cancel: 125 CANCELLED");
        CHECK(a.out_len == 8 && memcmp(a.out, "started\n", 8) == 0, "streamed output before the cancel");
        SbxResult r = run(s, "echo ${c-unset}");
        CHECK(out_is(&r, "unset\n"), "cancelled run left no state");
        sbx_result_clear(&r);

        Async q[3] = { 0 };
        const char *cmds[3] = { "q=1", "q=$((q+1))", "echo $q" };
        for (int i = 0; i < 3; i++) {
                o = (SbxRunOptions){ .command = cmds[i], .command_len = strlen(cmds[i]) };
                CHECK(sbx_session_run(s, &o, async_output, async_done, &q[i], &q[i].run) == 0, "queued run %d", i);
        }
        spin_until(&q[2].done, 5000);
        CHECK(q[0].order < q[1].order && q[1].order < q[2].order, "queued runs finish in order");
        CHECK(q[2].out_len == 2 && memcmp(q[2].out, "2\n", 2) == 0, "each queued run sees the previous one's state");

        Async many[17] = { 0 };
        int accepted = 0, busy = 0;
        for (int i = 0; i < 17; i++) {
                o = (SbxRunOptions){ .command = "true", .command_len = 4 };
                int rc = sbx_session_run(s, &o, NULL, async_done, &many[i], &many[i].run);
                accepted += rc == 0;
                busy += rc == -EBUSY;
        }
        CHECK(accepted == 16 && busy == 1, "queue holds 16 runs, the 17th gets EBUSY");
        /* Cancel a queued (not yet running) run: answered at once, others unaffected. */
        CHECK(sbx_run_cancel(many[15].run) == 0 && many[15].done && many[15].res.exit_code == 125,
              "cancelling a queued run answers it CANCELLED");
        spin_until(&many[14].done, 10000);
        CHECK(many[14].done && many[14].res.exit_code == 0, "the rest of the queue still runs");
}

/* A done callback that runs the next command itself (sbx_session_run_sync() turns the loop
 * from inside it): the session must not wait for what the daemon does after the answer (the
 * old holder's kill, the move out of the command's cgroup), or the nested run would never be
 * sent and would end in its timeout. */
typedef struct Nested {
        SbxSession *s;
        bool done;
        int rc;
        SbxResult inner;
} Nested;

static void nested_done(void *ud, const SbxResult *r) {
        Nested *n = ud;
        (void)r;
        SbxRunOptions o = { .command = "echo $((nested+1))", .timeout_ms = 5000 };
        o.command_len = strlen(o.command);
        n->rc = sbx_session_run_sync(n->s, &o, NULL, NULL, &n->inner);
        n->done = true;
}

static void test_run_from_done(SbxSession *s) {
        Nested n = { .s = s };
        SbxRunOptions o = { .command = "nested=1", .command_len = 8 };
        CHECK(sbx_session_run(s, &o, NULL, nested_done, &n, NULL) == 0, "run whose done callback runs another");
        spin_until(&n.done, 10000);
        CHECK(n.done && n.rc == 0, "the nested run returned (%d)", n.rc);
        CHECK(n.inner.exit_code == 0 && n.inner.error_class == SBX_ERROR_NONE && out_is(&n.inner, "2\n"),
              "a run made from a done callback runs at once, after the state of the run that ended (exit %d, class %d)",
              n.inner.exit_code, (int)n.inner.error_class);
        if (n.rc == 0)
                sbx_result_clear(&n.inner);
}

static void test_background_pipe_cap(void) {
        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so);
        so.limits.pids = 1000;
        SbxSandbox *sb = NULL;
        SbxSession *s = NULL;
        if (sbx_sandbox_new(ctx, &so, &sb) < 0 || sbx_session_get(sb, NULL, &s) < 0) {
                CHECK(false, "sandbox for the background pipe cap");
                return;
        }
        SbxResult r = run(s, "true");
        sbx_result_clear(&r);
        int before = count_dir("/proc/self/fd");
        /* Each run leaves a sleeper holding its stdout and stderr: 2 pipes a run. */
        for (int i = 0; i < 130; i++) {
                r = run(s, "sleep 60 &");
                sbx_result_clear(&r);
        }
        int held = count_dir("/proc/self/fd") - before;
        /* The first SBX_MAX_PROCESSES become leftover processes (two pipes, the cgroup and its
         * events each), the rest go to the background log (one fd a pipe, capped). */
        int cap = SBX_MAX_BACKGROUND_PIPES + SBX_MAX_PROCESSES * 4;
        CHECK(held <= cap + 8, "260 held pipes cost the daemon at most the caps in fds (%d of %d)", held, cap);
        r = run(s, "echo alive");
        CHECK(out_is(&r, "alive\n"), "session fine past the cap");
        sbx_result_clear(&r);
        sbx_sandbox_free(sb);
}

static void test_limits(void) {
        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so);
        so.limits.stdout_bytes = 100;
        so.limits.command_bytes = 1000;
        SbxSandbox *sb = NULL;
        SbxSession *s = NULL;
        CHECK(sbx_sandbox_new(ctx, &so, &sb) == 0 && sbx_session_get(sb, NULL, &s) == 0, "sandbox with small caps");
        if (!s)
                return;
        SbxResult r = run(s, "head -c 1000 /dev/zero; echo e >&2");
        CHECK(r.stdout_len == 100 && r.stdout_truncated && !r.stderr_truncated && r.stderr_len == 2,
              "stdout capped and flagged, stderr not");
        sbx_result_clear(&r);
        char cmd[1100];
        memset(cmd, ' ', sizeof cmd);
        memcpy(cmd, "touch /tmp/ran", 14);
        cmd[sizeof cmd - 1] = 0;
        r = run(s, cmd);
        CHECK(r.exit_code == 1 && r.error_class == SBX_ERROR_LIMIT_EXCEEDED, "over-long command: LIMIT_EXCEEDED");
        sbx_result_clear(&r);
        r = run(s, "test -e /tmp/ran && echo ran || echo no");
        CHECK(out_is(&r, "no\n"), "over-long command did not run");
        sbx_result_clear(&r);
        sbx_sandbox_free(sb);

        so.limits.stdout_bytes = UINT64_MAX;
        CHECK(sbx_sandbox_new(ctx, &so, &sb) == -EINVAL, "absurd stdout cap refused");
        sbx_sandbox_options_init(&so);
        so.rootfs = "relative/path";
        CHECK(sbx_sandbox_new(ctx, &so, &sb) == -EINVAL, "relative rootfs refused");
        sbx_sandbox_options_init(&so);
        const char *env[] = { "OK=1", "bad name=2", NULL };
        so.env = env;
        CHECK(sbx_sandbox_new(ctx, &so, &sb) == -EINVAL, "bad env name refused at create");
}

/* limits.cpu_millis: the default is half the host's online CPUs; 10 to all of them are taken,
 * the rest refused with a reason. */
static void test_cpu_limits(void) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        SbxSandboxOptions so;
        SbxSandbox *sb = NULL;
        sbx_sandbox_options_init(&so);
        so.limits.pids = 77; /* not the pool's */
        CHECK(sbx_sandbox_new(ctx, &so, &sb) == 0 && sbx_sandbox_limits(sb)->cpu_millis == (uint32_t)(cpus * 500),
              "cpu: default is half the host's CPUs (%ld)", cpus);
        sb = sbx_sandbox_free(sb);
        so.limits.cpu_millis = 250;
        CHECK(sbx_sandbox_new(ctx, &so, &sb) == 0 && sbx_sandbox_limits(sb)->cpu_millis == 250, "cpu: 0.25 CPU taken");
        sb = sbx_sandbox_free(sb);
        uint32_t bad[] = { 9, (uint32_t)cpus * 1000 + 1, UINT32_MAX };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                so.limits.cpu_millis = bad[i];
                CHECK(sbx_sandbox_new(ctx, &so, &sb) == -EINVAL && strstr(sbx_context_last_error(ctx), "cpu_millis must be"),
                      "cpu: %u refused (%s)", bad[i], sbx_context_last_error(ctx));
        }
}

static void test_sessions(SbxSandbox *sb) {
        SbxSession *a = NULL, *b = NULL, *again = NULL;
        CHECK(sbx_session_get(sb, "a", &a) == 0 && sbx_session_get(sb, "b", &b) == 0, "named sessions");
        CHECK(sbx_session_get(sb, "a", &again) == 0 && again == a, "same name, same session");
        CHECK(sbx_session_get(sb, "bad name", &again) == -EINVAL, "bad session name refused");
        SbxResult r = run(a, "only_a=1; echo shared > /tmp/shared");
        sbx_result_clear(&r);
        r = run(b, "echo ${only_a-none}; cat /tmp/shared");
        CHECK(out_is(&r, "none\nshared\n"), "sessions have their own state, share files");
        sbx_result_clear(&r);
        int n = 0;
        for (SbxSession *it = sbx_session_next(sb, NULL); it; it = sbx_session_next(sb, it))
                n++;
        CHECK(n == 3, "three sessions listed (default, a, b)");
        Async x = { 0 };
        SbxRunOptions o = { .command = "sleep 30", .command_len = 8 };
        CHECK(sbx_session_run(b, &o, NULL, async_done, &x, &x.run) == 0, "run in session b");
        spin_until(&x.done, 300);
        sbx_session_free(b);
        CHECK(x.done && x.res.exit_code == 125, "freeing a session cancels its run");
        CHECK(sbx_session_find(sb, "b") == NULL && sbx_session_find(sb, "a") == a, "session b gone, a stays");
}

typedef struct Collected {
        uint8_t buf[4096];
        size_t len;
} Collected;

static void collect_log(void *ud, SbxStream st, const uint8_t *d, size_t n, uint64_t cursor) {
        Collected *c = ud;
        size_t k = n < sizeof c->buf - c->len ? n : sizeof c->buf - c->len;
        memcpy(c->buf + c->len, d, k);
        c->len += k;
}

static void test_background(SbxSandbox *sb, SbxSession *s) {
        SbxResult r = run(s, "(sleep 0.2; echo late-output) & sleep 300 & echo started");
        CHECK(out_is(&r, "started\n"), "run returns while background processes live");
        sbx_result_clear(&r);
        bool never = false;
        spin_until(&never, 600);
        SbxProcess *left = sbx_sandbox_next_process(sb, NULL);
        SbxProcessInfo info = { 0 };
        if (left)
                sbx_process_info(left, &info);
        CHECK(left && info.leftover && info.status == SBX_PROCESS_RUNNING && sbx_sandbox_next_process(sb, left) == NULL,
              "what the run left running is one leftover process");
        Collected got = { 0 };
        if (left)
                (void)sbx_process_read_log(left, 0, sizeof got.buf, collect_log, &got, NULL);
        CHECK(got.len == 12 && memcmp(got.buf, "late-output\n", 12) == 0, "its output lands in its own log");
        r = run(s, "ps -eo comm | grep -c '^sleep$'");
        CHECK(out_is(&r, "1\n"), "background process still running");
        sbx_result_clear(&r);
        CHECK(sbx_sandbox_kill_background(sb) >= 1, "kill_background reports the command cgroup it killed");
        spin_until(&never, 200);
        r = run(s, "ps -eo comm | grep -c '^sleep$'; echo $?");
        CHECK(out_is(&r, "0\n1\n"), "background processes gone, the session fine");
        sbx_result_clear(&r);
}

/* The contract of include/sbx/sbx.h: no callback before the call that registered it
 * returns, and nothing waits for a sandbox's root. */
typedef struct Seen {
        bool returned;  /* set right after the registering call returns */
        bool early;     /* a callback came before that */
        bool settled;   /* called at least once */
        int calls, error;
} Seen;

static void seen_done(void *ud, const SbxResult *r) {
        Seen *s = ud;
        s->early |= !s->returned;
        s->calls++;
        s->settled = true;
        s->error = r->error_class;
}

static void seen_ready(void *ud, SbxSandbox *sb, int error) {
        Seen *s = ud;
        s->early |= !s->returned;
        s->calls++;
        s->settled = true;
        s->error = error;
}

static void test_contract(void) {
        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so);
        so.limits.command_bytes = 16;
        SbxSandbox *sb = NULL;
        SbxSession *s = NULL;
        uint64_t t0 = now_ns();
        CHECK(sbx_sandbox_new(ctx, &so, &sb) == 0, "contract: sandbox created");
        uint64_t took_ms = (now_ns() - t0) / 1000000;
        if (!sb)
                return;
        /* Creation returns before pid 1 has built the root; the files API does not wait. */
        bool ready_at_once = sbx_sandbox_ready(sb);
        uint8_t *data = NULL;
        size_t len = 0;
        uint64_t size = 0;
        int fr = sbx_file_read(sb, ".profile", 0, 0, &data, &len, &size);
        free(data);
        CHECK(ready_at_once || fr == -EAGAIN, "contract: files API before the root is built: -EAGAIN, not a wait (%d)", fr);
        printf("# create returned in %llu ms, ready at once: %d\n", (unsigned long long)took_ms, ready_at_once);

        Seen ready = { 0 };
        CHECK(sbx_sandbox_on_ready(sb, seen_ready, &ready) == 0, "contract: on_ready registered");
        ready.returned = true;
        spin_until(&ready.settled, 10000);
        CHECK(ready.calls == 1 && ready.error == 0 && !ready.early, "contract: ready told once, from the loop (calls %d, error %d)",
              ready.calls, ready.error);
        CHECK(sbx_sandbox_ready(sb), "contract: ready after the hook");

        Seen again = { 0 };
        CHECK(sbx_sandbox_on_ready(sb, seen_ready, &again) == 0, "contract: on_ready on a ready sandbox");
        CHECK(again.calls == 0, "contract: ...not called inside the registering call");
        again.returned = true;
        spin_until(&again.settled, 1000);
        CHECK(again.calls == 1 && again.error == 0, "contract: ...but from the loop right after");

        CHECK(sbx_session_get(sb, NULL, &s) == 0, "contract: session");
        const char *big = "echo this command is longer than sixteen bytes";
        SbxRunOptions o = { .command = big, .command_len = strlen(big) };
        Seen refused = { 0 };
        SbxRun *handle = NULL;
        CHECK(sbx_session_run(s, &o, NULL, seen_done, &refused, &handle) == 0, "contract: an over-limit run is accepted");
        CHECK(refused.calls == 0, "contract: its done callback has not run inside sbx_session_run");
        refused.returned = true;
        spin_until(&refused.settled, 1000);
        CHECK(refused.calls == 1 && refused.error == SBX_ERROR_LIMIT_EXCEEDED && !refused.early,
              "contract: ...it comes from the loop, LIMIT_EXCEEDED (calls %d)", refused.calls);

        Seen cancelled = { 0 };
        SbxSandbox *sb2 = NULL;
        CHECK(sbx_sandbox_new(ctx, &so, &sb2) == 0 && sbx_sandbox_on_ready(sb2, seen_ready, &cancelled) == 0,
              "contract: a second sandbox with a ready hook");
        cancelled.returned = true;
        if (!sbx_sandbox_ready(sb2)) {
                sbx_sandbox_free(sb2);
                CHECK(cancelled.calls == 1 && cancelled.error == -ECANCELED,
                      "contract: freed before ready: the hook hears -ECANCELED (calls %d, error %d)", cancelled.calls,
                      cancelled.error);
        } else {
                sbx_sandbox_free(sb2);
                CHECK(true, "contract: freed before ready # SKIP the sandbox was ready at once");
        }
        sbx_sandbox_free(sb);
}

/* One rule per limit: the message says the bound, the unit and the value; the C API takes 0
 * as the default and refuses the rest outside the rule with the same words. */
static void test_limit_rules(void) {
        char err[256];
        CHECK(sbx_limit_check(SBX_LIMIT_MEMORY, 1024, "--memory", err, sizeof err) == -EINVAL &&
              strcmp(err, "--memory must be at least 16M; got 1K") == 0, "memory floor said (%s)", err);
        CHECK(sbx_limit_check(SBX_LIMIT_MEMORY, 16ULL << 20, "--memory", err, sizeof err) == 0, "16M accepted");
        CHECK(sbx_limit_check(SBX_LIMIT_PIDS, 0, "limits.pids", err, sizeof err) == -EINVAL &&
              strcmp(err, "limits.pids must be at least 12; got 0") == 0, "zero pids refused (%s)", err);
        CHECK(sbx_limit_check(SBX_LIMIT_FS, 3ULL << 40, "fs", err, sizeof err) == -EINVAL &&
              strcmp(err, "fs must be at most 1T; got 3T") == 0, "fs ceiling said (%s)", err);
        CHECK(sbx_limit_check(SBX_LIMIT_TIMEOUT, 1500, "t", err, sizeof err) == 0, "1.5 s accepted");
        CHECK(sbx_limit_check(SBX_LIMIT_STDOUT, 1536, "o", err, sizeof err) == 0, "1536 bytes accepted");
        CHECK(sbx_limit_check((SbxLimitId)99, 1, "x", err, sizeof err) == -EINVAL, "an unknown limit refused");
        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so);
        so.limits.file_count = 3;
        SbxSandbox *sb = NULL;
        CHECK(sbx_sandbox_new(ctx, &so, &sb) == -EINVAL && !sb &&
              strcmp(sbx_context_last_error(ctx), "limits.file_count must be at least 16; got 3") == 0,
              "the C API says the same (%s)", sbx_context_last_error(ctx));
        static const char *const bad_env[] = { "1BAD=x", NULL };
        sbx_sandbox_options_init(&so);
        so.env = bad_env;
        CHECK(sbx_sandbox_new(ctx, &so, &sb) == -EINVAL && !sb &&
              strcmp(sbx_context_last_error(ctx), "env entry '1BAD=x' is not NAME=VALUE with NAME of letters, digits "
                                                  "and _ (not starting with a digit)") == 0,
              "a bad env entry is named (%s)", sbx_context_last_error(ctx));
}

/* A sandbox whose pid 1 fails its setup and is gone before the first session is asked for
 * (the caller did not turn the loop meanwhile): the session is still given, and its run is
 * answered with the setup's reason, not a broken pipe. */
static void test_setup_failed_before_session(void) {
        char dir[] = "/tmp/sbx-unit-rootfs-XXXXXX", path[128];
        CHECK(mkdtemp(dir) != NULL, "rootfs dir");
        snprintf(path, sizeof path, "%s/bin", dir);
        CHECK(mkdir(path, 0755) == 0, "rootfs bin");
        snprintf(path, sizeof path, "%s/bin/bash", dir);
        CHECK(symlink("/bin/bash", path) == 0, "rootfs bin/bash");
        /* Only root may enter it: the sandbox's ids are a host block of their own. */
        CHECK(chmod(dir, 0700) == 0, "rootfs 0700");
        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so);
        so.rootfs = dir;
        SbxSandbox *sb = NULL;
        CHECK(sbx_sandbox_new(ctx, &so, &sb) == 0, "sandbox with an unreachable rootfs created (%s)",
              sbx_context_last_error(ctx));
        /* pid 1 fails and exits while nobody turns the loop. */
        usleep(300 * 1000);
        SbxSession *s = NULL;
        int rc = sbx_session_get(sb, NULL, &s);
        CHECK(rc == 0, "its session is given all the same (%s)", strerror(-rc));
        if (s) {
                SbxResult r = run(s, "echo ran");
                CHECK(r.exit_code == 1 && r.stdout_len == 0, "the run fails (exit %d)", r.exit_code);
                CHECK(memmem(r.stderr_data, r.stderr_len, "out of the sandbox's reach", 26) != NULL,
                      "with the setup's reason: %.*s", (int)r.stderr_len, (const char *)r.stderr_data);
                sbx_result_clear(&r);
        }
        sbx_sandbox_free(sb);
        snprintf(path, sizeof path, "%s/bin/bash", dir);
        (void)unlink(path);
        snprintf(path, sizeof path, "%s/bin", dir);
        (void)rmdir(path);
        (void)rmdir(dir);
}

int main(void) {
        if (geteuid() != 0) {
                printf("1..0 # SKIP needs root\n");
                return 0;
        }
        int fds_before = count_dir("/proc/self/fd");
        CHECK(sbx_context_new(&ctx) == 0, "context");
        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so);
        SbxSandbox *sb = NULL;
        int rc = sbx_sandbox_new(ctx, &so, &sb);
        if (rc == -ENOTSUP) {
                printf("1..0 # SKIP no cgroup v2\n");
                return 0;
        }
        CHECK(rc == 0, "sandbox created (%s)", sbx_context_last_error(ctx));
        SbxSession *s = NULL;
        CHECK(sbx_session_get(sb, NULL, &s) == 0, "default session");
        if (!s)
                return tap_done();
        test_basics(s);
        test_stdin(s);
        test_overrides(s);
        test_exit_paths(s);
        test_timeout(s);
        test_cancel_and_queue(s);
        test_run_from_done(s);
        test_sessions(sb);
        test_background(sb, s);
        test_limits();
        test_limit_rules();
        test_cpu_limits();
        test_background_pipe_cap();
        test_contract();
        test_setup_failed_before_session();

        char cgdir[256];
        snprintf(cgdir, sizeof cgdir, "/sys/fs/cgroup/unified/sbx-%d", (int)getpid());
        sbx_sandbox_free(sb);
        /* Destroy kills at once; the loop reaps and removes the cgroups. */
        uint64_t end = now_ms() + 3000;
        while (count_subdirs(cgdir) > 0 && now_ms() < end)
                sbx_context_run_once(ctx, 50);
        CHECK(count_subdirs(cgdir) == 0, "no sandbox cgroup left after destroy");
        test_freed_before_spawned(cgdir);
        test_spawner_lost();
        test_spawner_in_caller();
        test_context_local();
        end = now_ms() + 3000;
        while (count_subdirs(cgdir) > 0 && now_ms() < end)
                sbx_context_run_once(ctx, 50);
        test_context_bases(cgdir);
        end = now_ms() + 3000;
        while (count_subdirs(cgdir) > 0 && now_ms() < end)
                sbx_context_run_once(ctx, 50);
        test_pool(cgdir);
        test_pool_refill_after_death(cgdir);
        test_room_table();
        sbx_context_free(ctx);
        struct stat st;
        CHECK(stat(cgdir, &st) < 0, "cgroup base removed with the context");
        CHECK(count_dir("/proc/self/fd") == fds_before, "no fd leaked (%d before, %d after)", fds_before,
              count_dir("/proc/self/fd"));
        return tap_done();
}
