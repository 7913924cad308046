/* SPDX-License-Identifier: MIT */
/* Processes of a sandbox (see process.c): started on their own from a session's state
 * (sbx_process_start, through run.c's detached runs), or left running by a run (leftovers).
 * Each owns its command cgroup, its output pipes (or terminal) and a bounded log. The list
 * lives in SandboxCore; sandbox.c feeds it pid 1's reports of ended processes and frees it
 * with the sandbox, run.c hands it what a run leaves running. */
#pragma once
#include <stdbool.h>
#include <sys/types.h>
#include "sbx/sbx.h"
#include "session/core.h"

/* pid 1 reaped process pid (of the sandbox) with wait status ws. */
void process_exited(SandboxCore *core, pid_t pid, int ws);
/* pid 1 is gone: every process of the sandbox went with it. */
void process_all_lost(SandboxCore *core);
/* Frees every process of the sandbox (it is being freed); kill callbacks and watchers are
 * told first. */
void process_free_all(SandboxCore *core);
/* Kills what runs left running (leftover processes) and the background log's cgroups;
 * returns how many. For a session that cannot fork its next worker. */
unsigned process_kill_leftovers(SandboxCore *core);
/* Processes alive in the cgroups of the sandbox's processes. */
unsigned process_count_alive(const SandboxCore *core);
/* What an ended run left running: its cgroup (dir fd, name) still has processes. Takes the
 * fds (out_fd, err_fd may be -1) and returns 0, or -errno when the sandbox tracks no more
 * processes (the caller keeps the fds then). */
int process_adopt_leftover(SandboxCore *core, const char *command, size_t command_len, int out_fd, int err_fd, int cg,
                           const char *cg_name);

struct SandboxHost;
/* The started process with this id among every sandbox of host, or NULL; O(1). */
SbxProcess *process_by_id(struct SandboxHost *host, uint64_t id);
