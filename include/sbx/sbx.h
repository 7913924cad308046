/* SPDX-License-Identifier: MIT */
/* libsbx: sandboxes, persistent sessions and killable commands.
 *
 * Conventions
 * - Fallible functions return int: >= 0 on success, -errno on failure. Constructors return
 *   the object through a `ret` out-parameter, which they set only on success.
 * - `*_free()` functions accept NULL and return NULL.
 * - Everything is driven by one SbxContext, whose event loop (a single epoll set) must be
 *   turned by the caller: sbx_context_run_once(), or embed sbx_context_fd() in your own loop.
 *   No function waits for a sandbox, a job or a child: sandbox creation returns at once and
 *   the sandbox's pid 1 builds its root meanwhile (sbx_sandbox_on_ready() tells when).
 * - A callback never runs before the call that registered it returns: it is called from
 *   sbx_context_run_once() (libuv's rule), except the done callbacks of runs that a cancel
 *   or a free ends (operations included: freeing a sandbox answers its operations), which
 *   fire inside that call. Run callbacks may start or cancel runs but must not free the
 *   sandbox or session of their run; ready and operation callbacks may free anything.
 * - Not thread-safe: use a context from one thread.
 *
 * Ownership
 * - A sandbox belongs to its context; sessions belong to their sandbox; runs belong to their
 *   session. Freeing a sandbox cancels its runs (their done callbacks fire with CANCELLED)
 *   and destroys its sessions, processes, mounts and cgroups.
 * - Buffers inside an SbxResult are valid only during the done callback. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SBX_API __attribute__((visibility("default")))

typedef struct SbxContext SbxContext;
typedef struct SbxSandbox SbxSandbox;
typedef struct SbxSession SbxSession;
typedef struct SbxRun SbxRun;

/* Limits of one sandbox. 0 means "the default" in options passed to sbx_sandbox_new. */
typedef struct SbxLimits {
        uint64_t stdout_bytes;  /* kept per command (default 1 MiB) */
        uint64_t stderr_bytes;  /* kept per command (default 1 MiB) */
        uint64_t command_bytes; /* longest command text (default 64 KiB) */
        uint64_t fs_bytes;      /* writable filesystem size (default 256 MiB) */
        uint64_t file_count;    /* writable filesystem inodes (default 10,000) */
        uint64_t memory_bytes;  /* memory of all processes (default 512 MiB) */
        uint32_t pids;          /* processes and threads (default 256) */
        uint32_t cpu_millis;    /* CPU time, in thousandths of a CPU (1500: 1.5 CPUs); at least
                                   10, at most every online CPU (default: half of them) */
} SbxLimits;

/* A sandbox's network. SBX_NETWORK_HOST is 1, so `network = true` still means it. */
typedef enum SbxNetwork {
        SBX_NETWORK_NONE = 0, /* its own network namespace with only loopback (the default) */
        SBX_NETWORK_HOST = 1, /* the host's network namespace, shared */
        SBX_NETWORK_ALLOWLIST = 2, /* loopback only, plus an HTTP proxy on 127.0.0.1:3128 that
                                      reaches the names of network_allow (sbx/egress.h) */
        SBX_NETWORK_POD = 3, /* loopback, plus eth0 on the context's pod network with an address
                                of its own (sbx_context_set_pod_network(), sbx_sandbox_address()):
                                reached there by the host and by the network's other sandboxes */
} SbxNetwork;

typedef struct SbxSandboxOptions {
        SbxLimits limits;
        uint64_t timeout_ms;  /* default per-run timeout (default 30 s) */
        SbxNetwork network;
        /* SBX_NETWORK_ALLOWLIST: NULL-terminated host patterns ("example.com", "*.example.com",
         * either with ":port" or ":*"; see sbx/egress.h), may be empty; NULL otherwise. */
        const char *const *network_allow;
        const char *rootfs;   /* a root filesystem tree to use instead of the host's dirs */
        const char *image;    /* an image of the context's store as the root (sbx/image.h: a name,
                                 an id or its first 12+ hex digits); not with rootfs */
        const char *const *env; /* extra NAME=VALUE entries, NULL-terminated, may be NULL */
        bool kill_leftovers;  /* what a command leaves running is killed when it ends (default:
                                 it keeps running as a background process of the sandbox) */
        /* Exec policy, enforced by the kernel (Landlock) for every process of the sandbox:
         * NULL-terminated lists of absolute paths or glob patterns in the sandbox (a directory, or
         * a last component "**": all beneath it), matched when the sandbox is created. With
         * policy_allow only those files (and /bin/bash) may be executed; with policy_deny
         * alone all but those. A denied file can be neither executed nor read. Both NULL:
         * no policy. sbx_sandbox_new() fails with -EINVAL for a bad list and -EOPNOTSUPP
         * where the kernel has no Landlock, never with a policy left unenforced. */
        const char *const *policy_allow;
        const char *const *policy_deny;
        /* Secrets, NAME=VALUE, NULL-terminated, may be NULL: set in the session shells'
         * environment like env (a NAME may not be in both), never reported back, and every
         * value of 8 bytes or more is replaced by [REDACTED:NAME] in all output (runs,
         * processes, the background log); see sbx_context_set_redaction(). At most 64, names
         * of at most 64 bytes, values of at most 16 KiB. */
        const char *const *secrets;
        /* Secrets the commands never see: n_proxy_secrets of them (sbx/egress.h,
         * SbxProxySecret), for SBX_NETWORK_ALLOWLIST only; their names may be in neither env
         * nor secrets. */
        const struct SbxProxySecret *proxy_secrets;
        size_t n_proxy_secrets;
} SbxSandboxOptions;

typedef enum SbxErrorClass {
        SBX_ERROR_NONE = 0,
        SBX_ERROR_TIMEOUT,        /* exit code 124 */
        SBX_ERROR_CANCELLED,      /* exit code 125 */
        SBX_ERROR_LIMIT_EXCEEDED, /* exit code 1, nothing ran */
        SBX_ERROR_PIDS_LIMIT,     /* exit code 1: a fork was refused at the sandbox's process
                                     limit, and the run was stopped at once (stderr says how
                                     many processes earlier commands left running) */
        SBX_ERROR_OOM,            /* the command failed and the kernel killed a process of the
                                     sandbox at its memory limit meanwhile (cgroup events) */
        SBX_ERROR_FS_FULL,        /* the command failed and the sandbox's filesystem was left
                                     without free bytes or inodes */
        SBX_ERROR_UNAVAILABLE,    /* exit code 1, nothing ran: the daemon could not start it (out
                                     of file descriptors or memory); stderr says which. Retry
                                     later */
} SbxErrorClass;

/* SBX_EVENTS: a code cell's events (sbx_session_run_code()), one whole line per call. */
typedef enum SbxStream { SBX_STDOUT = 1, SBX_STDERR = 2, SBX_EVENTS = 3 } SbxStream;

/* What a session's shell is: bash (every session made by sbx_session_get()), or a code
 * interpreter holding a context (sbx_session_new_shell()). */
typedef enum SbxShell { SBX_SHELL_BASH = 0, SBX_SHELL_PYTHON = 1, SBX_SHELL_JAVASCRIPT = 2 } SbxShell;

/* What becomes of the processes a command leaves running when it ends. */
typedef enum SbxLeftovers {
        SBX_LEFTOVERS_DEFAULT = 0, /* the sandbox's kill_leftovers */
        SBX_LEFTOVERS_KEEP,        /* they keep running, their output goes to the background log */
        SBX_LEFTOVERS_KILL,        /* they are killed (the command's cgroup) when it ends */
} SbxLeftovers;

typedef struct SbxRunOptions {
        const char *command;   /* the shell text; command_len bytes (NUL not needed) */
        size_t command_len;
        const char *cwd;       /* this run only; NULL: the session's cwd */
        const char *const *env; /* NAME=VALUE for this run only, NULL-terminated */
        const void *stdin_data; /* bytes on stdin; NULL: /dev/null */
        size_t stdin_len;
        uint64_t timeout_ms;   /* 0: the sandbox's default */
        bool persist_env;      /* env entries stay set (exported) in the session afterwards */
        bool get_env;          /* no command: `command` is a variable name; stdout gets its
                                  value, exit 0 if set and exported, else 1 (no shell code runs) */
        SbxLeftovers leftovers;
} SbxRunOptions;

typedef struct SbxResult {
        int exit_code;
        SbxErrorClass error_class;
        const uint8_t *stdout_data;
        size_t stdout_len;
        const uint8_t *stderr_data;
        size_t stderr_len;
        bool stdout_truncated, stderr_truncated;
        uint64_t stdout_dropped, stderr_dropped; /* bytes past the caps, read and thrown away */
        uint32_t killed;       /* processes of the command killed at a timeout, cancel or
                                  process limit (0 otherwise) */
        uint64_t exec_time_us; /* from the run's start (first in its queue) to its result */
        /* A bash session's: the command did not end on its own (a timeout, a cancel, a stop at
         * the process limit, or its shell killed by a signal: `kill -9 $$`, the OOM killer), so
         * what it changed in the session (cwd, variables, functions, options) was not kept: the
         * session is as it was before the command. */
        bool state_discarded;
        /* A bash session's: its shell, which holds its state, died (killed from inside the
         * sandbox) while this command ran or since the last result, so this command ran in, or
         * the next one runs in, a session started over: cwd, variables and functions as a new
         * session has them. */
        bool session_reset;
} SbxResult;

/* Output as it arrives: every byte the command writes, past the caps too (the caps bound only
 * what the result keeps), redacted when redaction is on. */
typedef void (*SbxOutputFn)(void *userdata, SbxStream stream, const uint8_t *data, size_t len);
/* The run's end. The SbxRun is freed right after this returns. */
typedef void (*SbxDoneFn)(void *userdata, const SbxResult *result);

/* The limits a sandbox or a run can be given. One rule each, the same for the CLI, the
 * protocol and this API. */
typedef enum SbxLimitId {
        SBX_LIMIT_STDOUT, SBX_LIMIT_STDERR, SBX_LIMIT_COMMAND, SBX_LIMIT_FS, SBX_LIMIT_FILES,
        SBX_LIMIT_MEMORY, SBX_LIMIT_PIDS, SBX_LIMIT_CPU, SBX_LIMIT_TIMEOUT,
} SbxLimitId;

/* Checks a limit that was given (0 is a value here, refused where it makes no sense, not "the
 * default"). Values: bytes, counts, thousandths of a CPU, milliseconds. Returns 0, or -EINVAL
 * with err saying in one line the bound, the unit and the value, under the name the caller's
 * user knows ("--memory must be at least 16M; got 1K"). */
SBX_API int sbx_limit_check(SbxLimitId id, uint64_t value, const char *name, char *err, size_t errlen);

SBX_API const char *sbx_version(void);
SBX_API const char *sbx_error_class_name(SbxErrorClass c);

/* The context: event loop, cgroup base, shared resources. Returns 0 or -errno. */
SBX_API int sbx_context_new(SbxContext **ret);
/* The same without the egress proxy: its sandboxes may not have network SBX_NETWORK_ALLOWLIST
 * (refused with -EINVAL, the context's last error saying why), and a program that calls no
 * sbx_context_new() links neither GnuTLS nor c-ares (with a static libsbx and --as-needed):
 * what a one-shot tool such as `sbx run` starts faster without. */
SBX_API int sbx_context_new_local(SbxContext **ret);
/* Destroys every sandbox left, then the context. */
SBX_API SbxContext *sbx_context_free(SbxContext *ctx);
/* The epoll fd to wait on when embedding; call sbx_context_run_once(ctx, 0) when readable. */
SBX_API int sbx_context_fd(SbxContext *ctx);
/* Waits up to timeout_ms (-1: forever) and handles one event. Returns 1, 0 on timeout, -errno. */
SBX_API int sbx_context_run_once(SbxContext *ctx, int timeout_ms);

/* Redaction in the output of every sandbox made from now on (those made before keep theirs;
 * pooled ones are remade). The known key shapes (AWS key ids, GitHub tokens, sk- keys,
 * Bearer tokens, PEM private key blocks) are redacted unless `defaults` is false, plus each
 * of `patterns` (POSIX EREs starting with 3 literal characters, NULL-terminated, may be
 * NULL); secrets' values always are. Output is redacted as it is read: a result, its
 * streamed chunks, process logs and the background log never hold what was replaced. The
 * caps count the command's raw bytes (stdout_truncated and _dropped are as without
 * redaction); the redacted text of the raw bytes under the cap may be longer than the cap,
 * at most 10 times (a marker is longer than the shortest secret). Default: the key shapes
 * on, no patterns. Returns 0, or -EINVAL with err saying which pattern and why. */
/* The pod network (SBX_NETWORK_POD): bridge (made unless it exists, in the caller's network
 * namespace) with the first address of cidr ("10.88.1.0/24"), each such sandbox a veth on it
 * and an address of the range. Root only (not rootless, not process mode). Blocking (a few
 * netlink messages): call it before the loop runs. Returns 0 or -errno with err. */
SBX_API int sbx_context_set_pod_network(SbxContext *ctx, const char *cidr, const char *bridge, char *err,
                                        size_t errlen);
SBX_API int sbx_context_set_redaction(SbxContext *ctx, const char *const *patterns, bool defaults, char *err,
                                      size_t errlen);
/* NAME=VALUE entries every sandbox made from now on gets in its environment, before its own
 * env (which may override them); pooled ones are remade. The daemon's own environment never
 * reaches a sandbox otherwise. NULL clears. Returns 0, -EINVAL for an entry that is not
 * NAME=VALUE, -ENOMEM. */
SBX_API int sbx_context_set_env(SbxContext *ctx, const char *const *env);
/* data redacted as the sandbox's output is (its secrets and the context's rules when it was
 * made), for text that leaves through another way: a history entry, an audit line. Returns
 * a malloc'd NUL-terminated copy (*ret_len its length, may be NULL), or NULL out of memory. */
SBX_API char *sbx_sandbox_redact(const SbxSandbox *sb, const void *data, size_t len, size_t *ret_len);

/* Why the last sbx_sandbox_new() failed, in words ("" after a success). */
SBX_API const char *sbx_context_last_error(const SbxContext *ctx);

/* Keeps n sandboxes (at most 8) with default options and a started default session ready
 * ahead of time: sbx_sandbox_new() with default options then takes one at once and the
 * loop prepares the next. 0 (the default) turns it off. */
SBX_API void sbx_context_set_pool(SbxContext *ctx, unsigned n);
/* The pool of default sandboxes: how many it keeps, holds now, and of those are ready. */
SBX_API void sbx_context_pool_stats(const SbxContext *ctx, unsigned *ret_target, unsigned *ret_held,
                                    unsigned *ret_ready);

/* How a context's sandboxes are made. */
typedef enum SbxMode {
        SBX_MODE_NAMESPACES = 0, /* user, mount, pid, net, ipc, uts and cgroup namespaces around a
                                    private root (the default) */
        SBX_MODE_PROCESS = 1,    /* no namespace: plain processes in the sandbox's cgroups, its
                                    files a private directory of the host (HOME and TMPDIR name
                                    it; the files API still says /home/user and /tmp), the
                                    host's network. For hosts without user namespaces. NOT a
                                    security boundary: commands can read and change whatever
                                    the daemon's user (as root: their own uid) may on the host.
                                    Refused there: rootfs, an exec policy, fs_bytes and
                                    file_count (no tmpfs enforces them): -EINVAL; and
                                    sbx_sandbox_import(): -ENOTSUP */
} SbxMode;
/* Sets the mode of the sandboxes made from now on; before the first one (the pool's
 * included). Returns 0, -EINVAL for an unknown mode, -EBUSY once a sandbox was made. */
SBX_API int sbx_context_set_mode(SbxContext *ctx, SbxMode mode);
/* Who clones the sandboxes' pid 1s: a spawner, a small process forked when the context makes
 * its first sandbox (separate, the default: the calling process never clones, and its pid 1s
 * are copies of that small process, not of a caller grown large), or the calling process
 * itself, within sbx_sandbox_new() (for a short-lived process with one sandbox, which the
 * spawner's fork would only slow). Either way the caller is every pid 1's parent. Before the
 * first sandbox: 0, or -EBUSY once one was made with the other choice. */
SBX_API int sbx_context_set_spawner(SbxContext *ctx, bool separate);
/* Who writes the sandboxes' processes into their cgroups (each command's worker, in and out):
 * the mover, a small process forked with the first sandbox (separate, the default: a move that
 * waits for the kernel's RCU grace period, 4-16 ms on some hosts, never holds the caller's
 * loop), or the calling process itself, as blocking writes (for a short-lived process whose
 * moves do not wait: favordynmods on, sbx_host_favor_cgroup_moves(); sbx run). Before the
 * first sandbox: 0, or -EBUSY once one was made with the other choice. */
SBX_API int sbx_context_set_mover(SbxContext *ctx, bool separate);
SBX_API SbxMode sbx_context_mode(const SbxContext *ctx);
/* Makes moves of processes between cgroups cheap on this host: turns favordynmods on for the
 * host's cgroup2 hierarchy, keeping its other options. Without it the kernel makes the first
 * move after a quiet spell wait for an RCU grace period (~8 ms on the machines measured),
 * paid by each pid 1 joining its v1 cgroups and by each command's worker moved into its
 * cgroup, so an agent creating or running now and then waits for it each time; with it forks
 * and exits cost a little more. A host-wide setting, kept until the next remount or boot:
 * `sbx serve` and `sbx run` call this unless given --no-favordynmods. Needs root in the
 * initial cgroup namespace. where (size bytes) gets the mount point. Returns 1 when turned on
 * now, 0 when it already was, -ENOENT without cgroup2, -EOPNOTSUPP when the kernel does not
 * keep it (older than 6.0), -EPERM, or -errno. */
SBX_API int sbx_host_favor_cgroup_moves(char *where, size_t size);
/* The weight of all the context's sandboxes together against what runs beside them (the
 * calling process included), as cgroup v2 cpu.weight: 1 to 10000, 100 weighing as one nice-0
 * process (the kernel's default, kept until this is called). It counts only under contention:
 * `sbx serve` sets 12 (SBX_SANDBOXES_CPU_WEIGHT), so that a hundred busy commands cannot keep
 * its loop from a CPU. Returns 0, -EINVAL out of range, -ENOTSUP without a cpu controller the
 * context can use, or -errno. */
SBX_API int sbx_context_set_sandboxes_cpu_weight(SbxContext *ctx, unsigned weight);

SBX_API void sbx_sandbox_options_init(SbxSandboxOptions *o);
/* Creates a sandbox and returns at once; its pid 1 builds the root meanwhile. Runs may be
 * queued right away (they start when it is ready); the files API answers -EAGAIN until
 * then. Returns 0, -EINVAL for bad options, -ENOTSUP without cgroup v2, -EPERM without the
 * privileges needed, or -errno. */
SBX_API int sbx_sandbox_new(SbxContext *ctx, const SbxSandboxOptions *o, SbxSandbox **ret);
/* Whether the sandbox's root is built. */
SBX_API bool sbx_sandbox_ready(const SbxSandbox *sb);
/* fn(userdata, sb, error) is called once from the loop when the root is built (error 0),
 * when setup failed (-errno), or with -ECANCELED inside sbx_sandbox_free() if it comes
 * first; also for a sandbox already ready (never before this returns). Returns 0 or -errno. */
typedef void (*SbxReadyFn)(void *userdata, SbxSandbox *sb, int error);
SBX_API int sbx_sandbox_on_ready(SbxSandbox *sb, SbxReadyFn fn, void *userdata);
/* Freezes every process of the sandbox where it is (cgroup v2 freezer): its memory stays, it
 * gets no CPU, and caller runs and processes wait until sbx_sandbox_resume(). Returns 1 when
 * frozen at once, 0 when fn(userdata, sb, error) follows from the loop: 0 once cgroup.events
 * says frozen, -ETIMEDOUT if not within SBX_FREEZE_WAIT_MS (then it is running again), or
 * -ECANCELED inside sbx_sandbox_free(). Fails with -EALREADY when paused, -EAGAIN before the
 * root is built, -ENOTSUP without a v2 freezer. Fork and snapshots never thaw a paused sandbox. */
typedef void (*SbxPauseFn)(void *userdata, SbxSandbox *sb, int error);
SBX_API int sbx_sandbox_pause(SbxSandbox *sb, SbxPauseFn fn, void *userdata);
/* Lets a paused sandbox run on exactly where it was. Returns 0, -EALREADY when not paused,
 * -EBUSY while its pause is not confirmed yet. */
SBX_API int sbx_sandbox_resume(SbxSandbox *sb);
SBX_API bool sbx_sandbox_paused(const SbxSandbox *sb);
/* Kills every process of the sandbox and removes everything it had. */
SBX_API SbxSandbox *sbx_sandbox_free(SbxSandbox *sb);
/* The sandbox's unguessable id (32 hex digits). */
SBX_API const char *sbx_sandbox_id(const SbxSandbox *sb);
/* SBX_NETWORK_POD: its address on the pod network ("10.88.1.7"); else NULL. */
SBX_API const char *sbx_sandbox_address(const SbxSandbox *sb);
SBX_API const SbxLimits *sbx_sandbox_limits(const SbxSandbox *sb);
/* Copies up to size bytes of the background log (newest kept) into buf; returns the length. */
SBX_API size_t sbx_sandbox_background_log(const SbxSandbox *sb, uint8_t *buf, size_t size);
/* Kills every process that earlier commands of the sandbox left running (background jobs,
 * daemons) and every process of sbx_process_start(); running commands and session shells are
 * untouched. Also done when a snapshot is restored. Returns how many command cgroups were
 * killed. The same as sbx_sandbox_kill_processes(). */
SBX_API unsigned sbx_sandbox_kill_background(SbxSandbox *sb);
/* The sandbox's pid 1 as the host sees it (for tests and tools). */
SBX_API int sbx_sandbox_init_pid(const SbxSandbox *sb);
/* Whether the sandbox is gone (its pid 1 exited, or it is being freed): nothing runs in it
 * any more, and what was queued was answered with that. */
SBX_API bool sbx_sandbox_gone(const SbxSandbox *sb);

/* What a sandbox uses, as its metrics record it. A figure the host cannot tell is 0. */
typedef struct SbxMetricsSample {
        uint64_t time_ms;      /* wall clock, ms since the epoch */
        uint64_t cpu_usec;     /* CPU time of its processes since it was made */
        uint64_t memory_bytes; /* its memory cgroup: processes, page cache, its tmpfs's pages */
        uint64_t pids;         /* tasks in it, session shells included */
        uint64_t fs_bytes;     /* used of its writable tmpfs (/tmp, /home/user, /dev/shm) */
        uint64_t fs_files;     /* ... inodes used there */
        uint64_t net_bytes;    /* relayed by its egress proxy and its exposed ports, both ways, so far */
        uint64_t runs;         /* runs and processes started in it so far */
} SbxMetricsSample;
/* Reads what the sandbox uses now. Returns 0, or -EAGAIN before it is ready. */
SBX_API int sbx_sandbox_sample(SbxSandbox *sb, SbxMetricsSample *ret);
/* The samples the context took of the sandbox (every SBX_METRICS_INTERVAL_MS of
 * base/limits.h, the last SBX_METRICS_SAMPLES of them) whose time is in [start_ms, end_ms],
 * oldest first: up to max of them into out. Returns how many there are in the range. A
 * sandbox that did nothing between two samples costs the context one read, and its memory
 * one record for the whole stretch. */
SBX_API size_t sbx_sandbox_metrics(const SbxSandbox *sb, uint64_t start_ms, uint64_t end_ms, SbxMetricsSample *out,
                                   size_t max);
/* The last sample the context took of it (no file is read). Returns 0, or -ENODATA before the
 * first. */
SBX_API int sbx_sandbox_last_sample(const SbxSandbox *sb, SbxMetricsSample *ret);

/* The session named `name` (NULL or "default": the default session), created on first use.
 * Returns 0, -EINVAL for a bad name, -EMFILE past SBX_MAX_SESSIONS, or -errno. */
SBX_API int sbx_session_get(SbxSandbox *sb, const char *name, SbxSession **ret);
/* Looks a session up without creating it; NULL if absent. */
SBX_API SbxSession *sbx_session_find(SbxSandbox *sb, const char *name);
/* Ends a session: its running command is cancelled, its shell killed. */
SBX_API SbxSession *sbx_session_free(SbxSession *s);
SBX_API const char *sbx_session_name(const SbxSession *s);
/* Iterates sessions: pass NULL first; returns NULL at the end. */
SBX_API SbxSession *sbx_session_next(SbxSandbox *sb, SbxSession *prev);
/* Runs the session holds now, running or queued: a run submitted now starts after them. */
SBX_API unsigned sbx_session_runs(const SbxSession *s);
/* The command of the caller's run the session is running now (its text, valid until the run
 * ends; NUL-terminated, maybe with NULs inside) and in *ret_ms for how long; NULL when it runs
 * none of the caller's. */
SBX_API const char *sbx_session_current(const SbxSession *s, uint64_t *ret_ms);
/* The caller's runs waiting behind what the session runs now (sbx's own, such as a fork's
 * state capture, not counted). */
SBX_API unsigned sbx_session_queued(const SbxSession *s);

/* A session whose shell is a code interpreter: SBX_SHELL_PYTHON is the host's python3 with
 * IPython when installed (plain Python otherwise), its state (variables, imports, cwd, env)
 * kept like a bash session's: each cell runs in a fork of the state and becomes the state only
 * when it ends, so a cell killed by a timeout or a cancel leaves the context as it was before
 * it. SBX_SHELL_JAVASCRIPT is the host's node, its context held by one node process that the
 * same Python kernel drives: Node cannot fork, so a cell that does not end (killed, or its
 * worker dead) takes the context with it, and a fresh node takes over. Its runs are cells (sbx_session_run_code()). Such sessions have their own names:
 * sbx_session_find(), sbx_session_get() and sbx_session_next() never see them, and fork,
 * snapshots and export do not carry them. Freed with sbx_session_free(). Returns 0, -EEXIST
 * when the sandbox has one by that name, -EINVAL for a bad name or shell, -EMFILE at
 * SBX_MAX_SESSIONS, or -errno. */
SBX_API int sbx_session_new_shell(SbxSandbox *sb, const char *name, SbxShell shell, SbxSession **ret);
/* The session of that shell and name made by sbx_session_new_shell(), or NULL. */
SBX_API SbxSession *sbx_session_find_shell(SbxSandbox *sb, const char *name, SbxShell shell);
SBX_API SbxShell sbx_session_shell(const SbxSession *s);
/* How many times the session's state was lost: its holder died (killed from inside, or by
 * the sandbox's OOM killer), its running command was answered, and a fresh shell took over.
 * Counted before that answer, so its done callback can tell. */
SBX_API uint64_t sbx_session_losses(const SbxSession *s);
/* Queues a cell on a code interpreter's session: as sbx_session_run(), with `command` the
 * code (o->stdin_data must be NULL, get_env false), and with persist_env the cwd and env are
 * set in the context for good (empty code: nothing else runs). on_output gets what the cell's
 * processes write to fds 1 and 2, and its events as SBX_EVENTS: one JSON object per call
 * (untrusted text from inside the sandbox: check it), or data NULL with len the bytes of
 * events left out (over SBX_CODE_EVENT_LINE_BYTES a line, SBX_CODE_EVENTS_BYTES a cell).
 * -EPROTOTYPE on a bash session. */
SBX_API int sbx_session_run_code(SbxSession *s, const SbxRunOptions *o, SbxOutputFn on_output, SbxDoneFn on_done,
                                 void *ud, SbxRun **ret);

/* Queues a command on the session (runs execute one at a time, in order). done fires exactly
 * once, from the loop, never before this returns (a command refused at once, such as one
 * over the command limit, is answered LIMIT_EXCEEDED on the next turn of the loop).
 * ret (may be NULL) gets a handle valid until done fires. Returns 0, -EBUSY when the
 * session already holds SBX_MAX_QUEUED_RUNS runs, running or queued, -EINVAL for bad options, or -errno. */
SBX_API int sbx_session_run(SbxSession *s, const SbxRunOptions *o, SbxOutputFn on_output,
                            SbxDoneFn on_done, void *userdata, SbxRun **ret);
/* Cancels a queued or running command: everything it started is killed, the session's state
 * stays as before it, done fires with exit 125 / CANCELLED. Returns 0 or -ESRCH if done. */
SBX_API int sbx_run_cancel(SbxRun *r);
/* True once the run has been handed to a worker (it is running, not queued). */
SBX_API bool sbx_run_started(const SbxRun *r);
/* Stops (or resumes) reading the run's output pipes: backpressure for slow consumers. */
SBX_API void sbx_run_pause_output(SbxRun *r, bool paused);

/* ---- Processes: commands that run on their own, beside the session's runs. Each has its own
 * command cgroup (kill and timeout end its whole tree; the sandbox's limits hold for all of
 * them together), its own bounded log, optional stdin or terminal, and a status kept after it
 * ends. A sandbox tracks at most SBX_MAX_PROCESSES; ended ones are forgotten oldest first. A
 * process is freed with its sandbox, or when forgotten: its watchers hear `freeing` first. */
typedef struct SbxProcess SbxProcess;

typedef enum SbxProcessStatus {
        SBX_PROCESS_RUNNING, SBX_PROCESS_EXITED, SBX_PROCESS_KILLED, SBX_PROCESS_TIMEOUT,
} SbxProcessStatus;

typedef struct SbxProcessOptions {
        const char *command;    /* shell text, command_len bytes */
        size_t command_len;
        const char *cwd;        /* NULL: the session's */
        const char *const *env; /* NAME=VALUE, NULL-terminated, this process only */
        bool stdin_pipe;        /* a stdin to write to (sbx_process_write); else /dev/null */
        bool pty;               /* a terminal of the sandbox's own devpts for stdin, stdout and
                                   stderr, cols x rows; its output is all stdout */
        uint16_t cols, rows;
        uint64_t timeout_ms;    /* 0: none; then its cgroup is killed, status TIMEOUT */
        const char *label;      /* free text, may be NULL */
} SbxProcessOptions;

typedef struct SbxProcessInfo {
        uint64_t id;            /* unique in the process (the daemon): "p<id>" on the wire */
        int pid;                /* inside the sandbox; 0 for a leftover not yet seen */
        const char *command, *label; /* valid while the process lives; label may be NULL */
        SbxProcessStatus status;
        int exit_code;          /* exit status or 128+signal; -1 while running or unknown */
        int signal;             /* that killed it, 0 if none */
        uint64_t started_ms, ended_ms; /* wall clock, ms since the epoch; ended 0 while running */
        bool leftover;          /* left running by a run, not started by sbx_process_start */
        bool pty, stdin_open;
        bool alive;             /* something of it still runs (its cgroup is not empty) */
        uint64_t log_end;       /* cursor after the newest byte of its log */
} SbxProcessInfo;

/* done gets the process (valid until its sandbox frees or forgets it), or NULL and -errno:
 * -ETIMEDOUT no worker in time, -ECANCELED, -ECHILD it could not start. Called from the loop. */
typedef void (*SbxProcessStartFn)(void *userdata, SbxProcess *p, int error);
/* Starts a process from session s's state (cwd, env, functions, aliases), queued behind the
 * session's runs; the session's state never changes. Returns 0, -EUSERS when the sandbox
 * tracks SBX_MAX_PROCESSES live ones, -EBUSY when the session's queue is full, -EINVAL bad
 * options, -E2BIG command over the limit, or -errno. */
SBX_API int sbx_process_start(SbxSession *s, const SbxProcessOptions *o, SbxProcessStartFn done, void *userdata);
/* The sandbox's process with that id, or NULL. */
SBX_API SbxProcess *sbx_sandbox_process(SbxSandbox *sb, uint64_t id);
/* The sandbox's processes, oldest first: NULL gives the first, a process the next one. */
SBX_API SbxProcess *sbx_sandbox_next_process(SbxSandbox *sb, SbxProcess *after);
SBX_API SbxSandbox *sbx_process_sandbox(const SbxProcess *p);
SBX_API void sbx_process_info(const SbxProcess *p, SbxProcessInfo *ret);

/* Its log: one stream of bytes, stdout and stderr interleaved as they came, the newest
 * SBX_PROCESS_LOG_BYTES kept. A cursor is an offset into that stream. fn gets the pieces
 * from `cursor` on, at most max bytes, each with the cursor after it; *ret_dropped the bytes
 * before the oldest one kept that `cursor` asked for. Returns the cursor after the last
 * piece given. */
typedef void (*SbxLogFn)(void *userdata, SbxStream stream, const uint8_t *data, size_t len, uint64_t cursor);
SBX_API uint64_t sbx_process_read_log(const SbxProcess *p, uint64_t cursor, size_t max, SbxLogFn fn, void *userdata,
                                      uint64_t *ret_dropped);

/* Hears a process's new output and its end. Registered with sbx_process_watch(); the
 * callbacks may unwatch any watcher. `ended` fires once the status is final; `freeing` when
 * the process goes (the watcher is dropped before). Both may be NULL. */
typedef struct SbxProcessWatcher SbxProcessWatcher;
struct SbxProcessWatcher {
        void (*output)(SbxProcessWatcher *w, SbxStream stream, const uint8_t *data, size_t len, uint64_t cursor);
        void (*ended)(SbxProcessWatcher *w);
        void (*freeing)(SbxProcessWatcher *w);
        /* libsbx's */
        SbxProcessWatcher *next;
        SbxProcess *process;
};
SBX_API void sbx_process_watch(SbxProcess *p, SbxProcessWatcher *w);
SBX_API void sbx_process_unwatch(SbxProcessWatcher *w);

/* Queues bytes for its stdin (or terminal); -EPIPE when closed or never opened, -EAGAIN past
 * SBX_PROCESS_STDIN_BYTES not yet taken. */
SBX_API int sbx_process_write(SbxProcess *p, const void *data, size_t len);
/* Closes stdin once what is queued is written; -EPIPE if not open, -ENOTTY for a terminal. */
SBX_API int sbx_process_close_stdin(SbxProcess *p);
/* A terminal's new size; -ENOTTY when it has none, -ESRCH when it ended. */
SBX_API int sbx_process_resize(SbxProcess *p, uint16_t cols, uint16_t rows);

/* done fires once every process of it is gone (its cgroup empty), with the final status. */
typedef void (*SbxKillDoneFn)(void *userdata, SbxProcess *p);
/* Sends sig to every process of it, then SIGKILL (cgroup.kill) after grace_ms (0: at once).
 * Returns 0, or -ESRCH when it ended and nothing of it is left. done is called from the loop,
 * never before this returns; if the process is freed first (its sandbox freed, or it was
 * forgotten past SBX_MAX_PROCESSES), done is called as it is freed, before the watchers'
 * `freeing`: p may be read then, not kept. */
SBX_API int sbx_process_kill(SbxProcess *p, int sig, uint64_t grace_ms, SbxKillDoneFn done, void *userdata);
/* Kills every process of the sandbox and what runs left running; returns how many. */
SBX_API unsigned sbx_sandbox_kill_processes(SbxSandbox *sb);
/* Kills only what runs left running past SBX_MAX_PROCESSES tracked (the background log's
 * command cgroups); returns how many. */
SBX_API unsigned sbx_sandbox_kill_background_log(SbxSandbox *sb);

/* ---- Files, as the sandbox sees them (relative paths start at /home/user). Jailed in the
 * sandbox's root by the kernel (openat2 RESOLVE_IN_ROOT), done with the sandbox user's
 * identity, so permissions, read-only mounts and the filesystem limits apply as to a
 * command. Each call is synchronous and bounded (at most 4 MiB read per call). All return
 * 0 or -errno. */
typedef enum SbxFileType { SBX_FILE_REGULAR, SBX_FILE_DIR, SBX_FILE_SYMLINK, SBX_FILE_OTHER } SbxFileType;

typedef struct SbxFileInfo {
        char *name;      /* basename */
        char *path;      /* absolute, as the sandbox sees it */
        SbxFileType type;
        uint64_t size;
        uint32_t mode;   /* permission bits */
        int64_t mtime_ms; /* since the epoch */
        char *target;    /* symlinks: where they point */
} SbxFileInfo;

/* Reads up to `length` bytes from `offset` (length 0: the rest, which must fit in 4 MiB, else
 * -EFBIG). *ret_data is malloc'd; *ret_size is the file's size. -EISDIR, -EINVAL for
 * non-regular files (a fifo would block). */
SBX_API int sbx_file_read(SbxSandbox *sb, const char *path, uint64_t offset, uint64_t length,
                          uint8_t **ret_data, size_t *ret_len, uint64_t *ret_size);
/* Writes atomically (temp file + rename; no reader ever sees half a file), or appends (a
 * failed append leaves the file as it was). Missing parent directories are created.
 * mode < 0: 0644. */
SBX_API int sbx_file_write(SbxSandbox *sb, const char *path, const void *data, size_t len, int mode,
                           bool append);
SBX_API int sbx_file_stat(SbxSandbox *sb, const char *path, SbxFileInfo *ret);
/* Entries below a directory, `depth` levels (1: its own entries). Free with
 * sbx_file_list_free(). */
SBX_API int sbx_file_list(SbxSandbox *sb, const char *path, unsigned depth, SbxFileInfo **ret,
                          size_t *ret_n);
SBX_API int sbx_file_mkdir(SbxSandbox *sb, const char *path, bool parents);
SBX_API int sbx_file_remove(SbxSandbox *sb, const char *path, bool recursive);
SBX_API int sbx_file_rename(SbxSandbox *sb, const char *from, const char *to);
SBX_API void sbx_file_info_clear(SbxFileInfo *i);
SBX_API void sbx_file_list_free(SbxFileInfo *v, size_t n);
/* Why the last failed sbx_file_* or sbx_upload_* call of this thread failed, in words naming
 * the path as it was given, where the errno alone would mislead or say too little (a full
 * filesystem and its limit, a mount point, which of a rename's paths); "" otherwise. */
SBX_API const char *sbx_file_error(void);

/* Files written in parts, all or nothing: the parts go to a hidden temp file next to the
 * target (".sbx-<random>.tmp"), which sbx_upload_commit renames over it. A failed write or
 * commit, sbx_upload_free(_owned) and freeing the sandbox all remove the temp file, so the
 * sandbox's filesystem is left as it was. An upload belongs to its sandbox; at most 16
 * (SBX_MAX_UPLOADS) are open in one at once. */
typedef struct SbxUpload SbxUpload;
/* Starts an upload of path: missing parents are made now, and what the commit would refuse
 * (a directory or mount point at path, a read-only place) is refused now. mode < 0: 0644.
 * owner is any tag of the caller's (a client connection, say) for sbx_upload_free_owned.
 * Returns 0, -EMFILE when 16 are open, or -errno. */
SBX_API int sbx_upload_begin(SbxSandbox *sb, const char *path, int mode, const void *owner,
                             SbxUpload **ret);
/* The open upload of sb with this id, or NULL. */
SBX_API SbxUpload *sbx_upload_find(SbxSandbox *sb, const char *id);
/* Its unguessable id (32 hex digits), its path as given to begin, its owner. */
SBX_API const char *sbx_upload_id(const SbxUpload *u);
SBX_API const char *sbx_upload_path(const SbxUpload *u);
SBX_API const void *sbx_upload_owner(const SbxUpload *u);
/* Appends data. On failure u is freed (its temp file removed), but for -EBUSY (the sandbox's
 * files are being copied or replaced) and -EAGAIN, which wrote nothing and leave u as it was,
 * to be written again. Returns 0 or -errno. */
SBX_API int sbx_upload_write(SbxUpload *u, const void *data, size_t len);
/* Renames the temp file over the path. Frees u whatever the result, but for -EBUSY and -EAGAIN
 * (as sbx_upload_write()). Returns 0 or -errno. */
SBX_API int sbx_upload_commit(SbxUpload *u);
/* Abandons the upload: its temp file is removed. */
SBX_API SbxUpload *sbx_upload_free(SbxUpload *u);
/* Frees every upload of sb with this owner. */
SBX_API void sbx_upload_free_owned(SbxSandbox *sb, const void *owner);

/* File change events: a watch tells what changes in a directory of the sandbox's writable
 * tree (/tmp, /home/user, /dev/shm) and, recursive, below it, directories made or moved in
 * later included (what they already hold when they are added is told as created). The
 * kernel's inotify reports them, read in the context's loop; paths are absolute, as the
 * sandbox sees them, under the watched path as it was given. A watch never follows a
 * symlink below its directory, nor leaves the writable tree. Bounded: at most SBX_MAX_WATCHES
 * per sandbox, SBX_MAX_WATCH_DIRS directories for all of them; what is lost (the kernel's
 * queue full, directories past the bound, events while paused) is told as one overflow. A
 * watch whose directory is removed or moved away says so (remove, rename) and tells nothing
 * more. The files API's own temp files (".sbx-<16 hex>.tmp") are not told: a write through
 * it is a create and a write of its target. */
typedef enum SbxFileEventType {
        SBX_FILE_EVENT_CREATE,   /* made, or moved in (the new path of a rename) */
        SBX_FILE_EVENT_WRITE,    /* written to; one per file per read of the kernel's queue at most */
        SBX_FILE_EVENT_REMOVE,
        SBX_FILE_EVENT_RENAME,   /* moved away: the old path */
        SBX_FILE_EVENT_CHMOD,    /* mode, owner, times or link count changed */
        SBX_FILE_EVENT_OVERFLOW, /* events were lost; path is NULL */
} SbxFileEventType;
typedef struct SbxFileWatch SbxFileWatch;
typedef struct SbxFileWatchOps {
        /* One event, from the loop; path is valid during the call. It must not free the watch
         * or its sandbox. */
        void (*event)(void *userdata, SbxFileEventType type, const char *path, bool is_dir);
        /* The sandbox is being freed: the watch is freed once this returns (not by the
         * callee). May be NULL. */
        void (*freeing)(void *userdata);
} SbxFileWatchOps;
/* Starts watching path (relative: from /home/user; a symlink there is followed, within the
 * sandbox). No event is told before this returns. Returns 0, -ENOTDIR, -EROFS (not on the
 * writable tree), -EUSERS (SBX_MAX_WATCHES open), -E2BIG (a recursive watch over more than
 * the bounds allow), -EAGAIN / -ESRCH (root not built / never will be), or -errno; the words
 * are in sbx_file_error(). ops must outlive the watch. */
SBX_API int sbx_file_watch(SbxSandbox *sb, const char *path, bool recursive, const SbxFileWatchOps *ops,
                           void *userdata, SbxFileWatch **ret);
/* While paused, events are dropped; on resume, one overflow is told (from the loop) if any
 * were. For a consumer that cannot take more now (a client's full output queue). */
SBX_API void sbx_file_watch_pause(SbxFileWatch *w, bool paused);
SBX_API SbxFileWatch *sbx_file_watch_free(SbxFileWatch *w);

/* ---------------------------------------------------------------- fork, snapshots, export
 *
 * These take a point-in-time image of a sandbox: its writable filesystem (/tmp, /home/user,
 * /dev/shm) and the state of every session. Each is a barrier: it waits for the runs already
 * queued in the sandbox's sessions, and runs queued after it wait for it. While the
 * filesystem is copied the sandbox's processes are frozen (cgroup v2 freezer). Background
 * processes are not part of an image. Operations on one sandbox run one at a time, in order.
 * Each calls done exactly once, from the loop (or with an error if the sandbox is freed
 * first); `res` and what it points to are valid only during the call. */
typedef struct SbxOpResult {
        int error;               /* 0 or -errno */
        const char *message;     /* on error: what failed */
        SbxSandbox *sandbox;     /* fork: the new sandbox, the caller's to free */
        const char *snapshot_id; /* snapshot create */
        const uint8_t *data;     /* export: the archive */
        size_t len;
} SbxOpResult;
typedef void (*SbxOpDoneFn)(void *userdata, const SbxOpResult *res);

/* A new sandbox with a copy of sb's filesystem and sessions, and its options and limits.
 * Returns 0 (done follows) or -errno. */
SBX_API int sbx_sandbox_fork(SbxSandbox *sb, SbxOpDoneFn done, void *userdata);

/* Snapshots live in a store of the sandbox's own, whose size and inode limits are
 * SBX_SNAPSHOT_BUDGET_FACTOR times the sandbox's filesystem limits, at most SBX_MAX_SNAPSHOTS
 * of them; a snapshot beyond the budget fails with -ENOSPC and nothing kept. */
SBX_API int sbx_snapshot_create(SbxSandbox *sb, SbxOpDoneFn done, void *userdata);
/* Brings back the files and session states of a snapshot (as often as wanted). Sessions made
 * since get a fresh shell; background processes are killed. -ENOENT for an unknown id. */
SBX_API int sbx_snapshot_restore(SbxSandbox *sb, const char *id, SbxOpDoneFn done, void *userdata);
SBX_API int sbx_snapshot_delete(SbxSandbox *sb, const char *id);
typedef struct SbxSnapshotInfo {
        const char *id;      /* valid until the snapshot is deleted */
        uint64_t created_ms; /* wall clock, ms since the epoch */
        uint64_t bytes;      /* file bytes it holds */
} SbxSnapshotInfo;
/* Fills up to max entries, oldest first; returns how many snapshots there are. */
SBX_API size_t sbx_snapshot_list(SbxSandbox *sb, SbxSnapshotInfo *out, size_t max);

/* A zstd-compressed tar of the writable tree plus a manifest (sessions, limits, digest);
 * see docs/ARCHITECTURE.md. At most SBX_MAX_ARCHIVE_BYTES. */
SBX_API int sbx_sandbox_export(SbxSandbox *sb, SbxOpDoneFn done, void *userdata);
/* Replaces sb's writable tree and session states with an archive's, after checking all of
 * it: a refused archive (-EINVAL, message says why) leaves sb untouched. */
SBX_API int sbx_sandbox_import(SbxSandbox *sb, const uint8_t *data, size_t len, SbxOpDoneFn done,
                               void *userdata);

/* Convenience: run one command and turn the loop until it ends. Output chunks go to
 * on_output (may be NULL). The result's buffers are malloc'd copies owned by the caller:
 * release them with sbx_result_clear(). Returns 0 or -errno (from sbx_session_run). */
SBX_API int sbx_session_run_sync(SbxSession *s, const SbxRunOptions *o, SbxOutputFn on_output,
                                 void *userdata, SbxResult *ret);
SBX_API void sbx_result_clear(SbxResult *r);

#ifdef __cplusplus
}
#endif

#include "sbx/port.h"
#include "sbx/egress.h"
