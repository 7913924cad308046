/* SPDX-License-Identifier: MIT */
/* Every limit sbx enforces, in one place, each with why it exists. */
#pragma once

/* Bytes of stdout (and, separately, stderr) kept per command. Past it, output is still read
 * from the pipe and thrown away, so the command never blocks and the daemon's memory stays
 * flat; the result says `truncated`. Inherited from codepod. */
#define SBX_DEFAULT_STDOUT_BYTES (1024ULL * 1024)
#define SBX_DEFAULT_STDERR_BYTES (1024ULL * 1024)

/* Largest command text accepted. A longer one is refused with LIMIT_EXCEEDED before anything
 * runs: it bounds the message sent to the session and bash's parse time. */
#define SBX_DEFAULT_COMMAND_BYTES (64ULL * 1024)

/* Size of the writable filesystem (/tmp and /home/user share one tmpfs) and its inode count.
 * The kernel enforces both; commands see ENOSPC. */
#define SBX_DEFAULT_FS_BYTES (256ULL * 1024 * 1024)
#define SBX_DEFAULT_FILE_COUNT 10000ULL
/* Smallest filesystem a sandbox may ask for: below it not even a shell's dotfiles fit. */
#define SBX_MIN_FS_BYTES (64ULL * 1024)

/* Memory and process count of a whole sandbox, through cgroups (rlimits where none). The
 * pids limit is what contains a fork bomb. */
#define SBX_DEFAULT_MEMORY_BYTES (512ULL * 1024 * 1024)
#define SBX_DEFAULT_PIDS 256U

/* Default per-command timeout; a timed-out command ends with exit code 124. */
#define SBX_DEFAULT_TIMEOUT_MS 30000ULL
#define SBX_EXIT_TIMEOUT 124
#define SBX_EXIT_CANCELLED 125

/* Upper bounds on what a client may ask for, so a request cannot make the daemon allocate
 * or promise without bound. */
/* Snapshots: each sandbox has a store of its own, FACTOR times its filesystem limits (bytes
 * and inodes; the kernel enforces them), holding at most MAX snapshots. */
#define SBX_SNAPSHOT_BUDGET_FACTOR 4U
#define SBX_MAX_SNAPSHOTS 32U
/* Session states move between shells (fork, snapshots, export) up to this size each. */
#define SBX_MAX_STATE_BYTES (16U * 1024 * 1024)
/* Largest export archive (compressed) and import archive. */
#define SBX_MAX_ARCHIVE_BYTES (512ULL * 1024 * 1024)
/* How long taking or applying one session's state may take. */
#define SBX_STATE_TIMEOUT_MS 10000U
/* Forked sandboxes alive at once per server. */
#define SBX_MAX_FORKS 16U

/* Copy buffer of the tree copier (fork, snapshots). */
#define SBX_TREE_COPY_BUF (256U * 1024)

#define SBX_MAX_OUTPUT_BYTES (4ULL * 1024 * 1024 * 1024)
#define SBX_MAX_COMMAND_BYTES (1024ULL * 1024)
#define SBX_MAX_TIMEOUT_MS (24ULL * 3600 * 1000)

/* Env overrides of one run: count and total bytes (they travel in the run message). */
#define SBX_MAX_RUN_ENV 256
#define SBX_MAX_RUN_ENV_BYTES (64U * 1024)
#define SBX_MAX_PATH_BYTES 4096U

/* Output left by background processes of a sandbox after their command ended: the newest
 * bytes are kept in a ring of this size, the rest dropped. */
#define SBX_BACKGROUND_LOG_BYTES (64U * 1024)

/* Pipes of ended commands still held open by their background processes, per sandbox. Each
 * is a daemon fd; past this many the oldest is closed (its writers then get EPIPE). */
#define SBX_MAX_BACKGROUND_PIPES 128U

/* Pipe capacity asked for command output; bigger pipes mean fewer wakeups at high volume. */
#define SBX_PIPE_BYTES (1024U * 1024)

/* Named sessions per sandbox, and runs one session holds at once: the running one and those
 * waiting behind it (counting the running one keeps the cap independent of timing). */
#define SBX_MAX_SESSIONS 64U
/* Longest session name ([A-Za-z0-9_.-]). */
#define SBX_MAX_SESSION_NAME 64U
#define SBX_MAX_QUEUED_RUNS 16U

/* As root, each sandbox's user (uid 1000 inside) is a host uid of its own, from this range,
 * so sandboxes share no per-user kernel limit (processes, inotify, pipes, signals) with each
 * other or with a real account, and no host user owns their processes. */
#define SBX_HOST_UID_BASE 1600000000U
#define SBX_HOST_UID_SLOTS 65536U
/* The sandbox user's ids as commands see them (inside the user namespace). */
#define SBX_SANDBOX_UID 1000U
#define SBX_SANDBOX_GID 1000U

/* Sandboxes a context keeps ready ahead of time, at most (each holds a pid 1, a bash and
 * its worker, and its tmpfs). */
#define SBX_MAX_POOL 8U

/* Time a sandbox's init gets to build the root before creation fails. */
#define SBX_CREATE_TIMEOUT_MS 10000
