/* SPDX-License-Identifier: MIT */
/* What the benchmarks of sbx-bench-rpc share; see rpc_common.h. */
#include "rpc_common.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "base/macro.h"

Config cfg = {
        .sbx = NULL, .only = "rfpclsokz", .warm_n = 400, .warmup = 20, .quiet_ms = 10, .pings = 1000,
        .ping_gap_us = 1000, .busy = 8, .settle_ms = 1000, .busy_cmd = "while :; do :; done",
        .clients = 64, .cmds = 100, .host_busy = true, .load_reps = 5,
        .pool = -1, .loop_rounds = 10, .files_n = 50, .files_warmup = 3, .file_bytes = 1024 * 1024,
        .proc_n = 300, .proc_warmup = 20, .stream_bytes = 1ULL << 30, .stream_bin_bytes = 256ULL << 20,
        .kill_n = 30, .kill_tree = 200, .pause_n = 200,
};

void sleep_us(unsigned us) {
        struct timespec ts = { .tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000 };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

/* ------------------------------------------------------------------ /proc */

void cpu_jiffies(uint64_t *busy, uint64_t *total) {
        unsigned long long v[10] = { 0 };
        FILE *f = fopen("/proc/stat", "re");
        *busy = *total = 0;
        if (!f)
                return;
        if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                   &v[5], &v[6], &v[7], &v[8], &v[9]) >= 8) {
                for (int i = 0; i < 8; i++)
                        *total += v[i];
                *busy = *total - v[3] - v[4];
        }
        fclose(f);
}

double proc_cpu_s(pid_t pid) {
        char path[64], buf[1024];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        FILE *f = fopen(path, "re");
        if (!f)
                return 0;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        const char *p = strrchr(buf, ')');
        unsigned long long ut = 0, st = 0;
        /* After the comm: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
        if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
                return 0;
        return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

void proc_schedstat(pid_t pid, double *run_s, double *wait_s) {
        char path[64];
        unsigned long long run = 0, wait = 0;
        snprintf(path, sizeof path, "/proc/%d/schedstat", (int)pid);
        FILE *f = fopen(path, "re");
        if (f) {
                if (fscanf(f, "%llu %llu", &run, &wait) != 2)
                        run = wait = 0;
                fclose(f);
        }
        *run_s = (double)run / 1e9;
        *wait_s = (double)wait / 1e9;
}

/* ------------------------------------------------------------------ the server */

/* bench_die's hook: the server's log, then the server and its directory go. */
static void on_die(void) {
        if (bench_srv.pid > 0)
                bench_server_log_dump();
        bench_server_stop();
}

/* In the server's child before exec: a session of its own is an autogroup of its own
 * (sched(7)); its nice value weighs the server against the sandboxes, which are each their
 * own autogroup (sbx-init calls setsid) and start at nice 0. */
static void server_nice(void) {
        if (!cfg.srv_nice_set)
                return;
        char v[16];
        int fd;
        setsid();
        snprintf(v, sizeof v, "%d", cfg.srv_nice);
        if ((fd = open("/proc/self/autogroup", O_WRONLY | O_CLOEXEC)) < 0 || write(fd, v, strlen(v)) < 0)
                fprintf(stderr, "sbx-bench-rpc: /proc/self/autogroup: %s\n", strerror(errno));
        if (fd >= 0)
                close(fd);
}

void rpc_server_start(void) {
        char pool[16];
        const char *args[8];
        int n = 0;
        snprintf(pool, sizeof pool, "%d", cfg.pool);
        if (cfg.pool >= 0) {
                args[n++] = "--pool";
                args[n++] = pool;
        }
        if (cfg.audit) {
                args[n++] = "--audit";
                args[n++] = cfg.audit;
        }
        args[n] = NULL;
        bench_die_hook = on_die;
        bench_server_start(cfg.sbx, "sbx-bench-rpc", args, true, server_nice);
        bench_progress("server %s (pid %d) listening on %s", cfg.sbx, (int)bench_srv.pid, bench_srv.sock);
}

void rpc_server_shutdown(Client *ctl) {
        json_t *a = client_call(ctl, "kill", NULL);
        if (answer_is_error(a)) {
                char d[260];
                answer_describe(d, sizeof d, a);
                bench_note("kill: %.200s", d);
        }
        json_decref(a);
        client_close(ctl);
        int st = 0;
        pid_t w = 0;
        uint64_t tk = bench_now_ns();
        while ((w = waitpid(bench_srv.pid, &st, WNOHANG)) == 0 && bench_ms_between(tk, bench_now_ns()) < 10000)
                sleep_us(5000);
        if (w == bench_srv.pid) {
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                        bench_note("the server ended with status 0x%x", st);
                bench_srv.pid = -1;
        } else {
                bench_note("the server did not exit within 10 s of `kill`");
        }
        bench_server_stop();
}

/* ------------------------------------------------------------------ requests */

void rpc_open(Client *c, bool nonblock) { client_open_or_die(c, nonblock, 120); }

void rpc_open_with_sandbox(Client *c) {
        rpc_open(c, false);
        _cleanup_(json_decrefp) json_t *a = client_call(c, "create", NULL);
        if (answer_is_error(a) || !answer_str(a, "sandboxId")) {
                char d[260];
                answer_describe(d, sizeof d, a);
                bench_die("create: %.200s", d);
        }
}

long health_field(Client *c, const char *key) {
        _cleanup_(json_decrefp) json_t *a = client_call(c, "health", NULL);
        long long v;
        if (!answer_int(a, key, &v)) {
                char d[260];
                answer_describe(d, sizeof d, a);
                bench_die("health without %s: %.200s", key, d);
        }
        return (long)v;
}

double wait_no_sandboxes(Client *c, unsigned timeout_ms) {
        uint64_t t0 = bench_now_ns();
        while (health_field(c, "sandboxes") != 0) {
                if (bench_ms_between(t0, bench_now_ns()) > timeout_ms) {
                        bench_note("the server still had sandboxes %u ms after their connections closed", timeout_ms);
                        break;
                }
                sleep_us(1000);
        }
        return bench_ms_between(t0, bench_now_ns());
}

bool run_ok(const json_t *msg, const char *want) {
        long long ec;
        const char *out = answer_str(msg, "stdout"), *err = answer_str(msg, "stderr");
        return !answer_is_error(msg) && answer_int(msg, "exitCode", &ec) && ec == 0 && !answer_get(msg, "errorClass") &&
               out && strcmp(out, want) == 0 && err && !*err;
}

double rpc_run_hi(Client *c) {
        uint64_t t0 = bench_now_ns();
        long id = client_send_or_die(c, "run", "{\"command\":\"echo hi\"}");
        _cleanup_(json_decrefp) json_t *a = client_wait(c, id);
        return a && run_ok(a, "hi\n") ? bench_ms_between(t0, c->t_line) : -1;
}

double rpc_ping(Client *c) {
        uint64_t t0 = bench_now_ns();
        long id = client_send_or_die(c, "ping", NULL);
        _cleanup_(json_decrefp) json_t *a = client_wait(c, id);
        return a && json_is_true(answer_get(a, "pong")) ? bench_ms_between(t0, c->t_line) : -1;
}

bool proc_start(Client *c, json_t *params, char *id, size_t idsz, char *err, size_t errsz) {
        _cleanup_(json_decrefp) json_t *a = client_call_json(c, "process.start", params);
        const char *pid = answer_str(a, "processId");
        if (answer_is_error(a) || !pid) {
                answer_describe(err, errsz, a);
                return false;
        }
        snprintf(id, idsz, "%s", pid);
        return true;
}

/* ------------------------------------------------------------------ the C API */

void capi_sandbox_new(SbxContext **ctx, SbxSandbox **sb) {
        int k = sbx_context_new(ctx);
        if (k < 0)
                bench_die("sbx_context_new: %s", strerror(-k));
        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so);
        if (sbx_sandbox_new(*ctx, &so, sb) < 0)
                bench_die("sbx_sandbox_new: %s", sbx_context_last_error(*ctx));
}

/* ------------------------------------------------------------------ a pinger */

static void *pinger_main(void *arg) {
        Pinger *p = arg;
        for (;;) {
                int b = atomic_load(&p->bucket);
                if (b == PINGER_STOP)
                        break;
                double ms = rpc_ping(&p->c);
                /* Attributed to the bucket it was sent in. */
                if (ms < 0)
                        p->bad++;
                else if (b >= 0)
                        samples_add(&p->lat[b], ms);
                sleep_us(p->gap_us);
        }
        return NULL;
}

void pinger_start(Pinger *p, int bucket, unsigned gap_us) {
        *p = (Pinger){ .gap_us = gap_us };
        rpc_open(&p->c, false);
        atomic_store(&p->bucket, bucket);
        if (pthread_create(&p->thread, NULL, pinger_main, p) != 0)
                bench_die("pthread_create failed");
}

void pinger_stop(Pinger *p) {
        atomic_store(&p->bucket, PINGER_STOP);
        pthread_join(p->thread, NULL);
        client_close(&p->c);
}
