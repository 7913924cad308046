/* SPDX-License-Identifier: MIT */
/* The benchmark families of sbx-bench-rpc, one file each, as bench_rpc.c's table runs them:
 * each takes the control connection (its own sandboxes gone again when it returns), adds its
 * latency rows, and may print a section of its own after them and lines of the targets table. */
#pragma once
#include "client.h"

/* r (rpc_run.c): warm `run` over the socket against the C API, and `ping`. */
void bench_roundtrip(Client *ctl);
void roundtrip_targets(void);

/* f (rpc_files.c): files.write + files.read of 1 MiB, and the same through the C API. */
void bench_files(Client *ctl);
void files_targets(void);

/* p (rpc_load.c): `ping` while sandboxes run CPU-bound loops. */
void bench_ping_load(Client *ctl);
void ping_load_targets(void);

/* c (rpc_clients.c): many clients at once, each creating and running. */
void bench_clients(Client *ctl);
void clients_report(void);
void clients_targets(void);

/* l (rpc_create.c): `ping` while creates and forks are under way. */
void bench_create_fork(Client *ctl);

/* s and k (rpc_process.c): process.start to its first output; process.kill of a tree. */
void bench_proc_start(Client *ctl);
void proc_start_targets(void);
void bench_kill(Client *ctl);
void kill_targets(void);

/* o (rpc_stream.c): a process's output through process.stream, 1 GiB. */
void bench_stream(Client *ctl);
void stream_report(void);
void stream_targets(void);

/* z (rpc_pause.c): sandbox.pause and sandbox.resume of a busy sandbox. */
void bench_pause(Client *ctl);
