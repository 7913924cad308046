/* SPDX-License-Identifier: MIT */
/* Every limit sbx enforces, in one place, each with why it exists. Plain constants only: the
 * bash builtin, compiled against bash's headers, may include this too. */
#pragma once

/* ---- what one command gets unless the client says otherwise */

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
/* And the fewest inodes: /tmp, /home/user and /dev/shm themselves take three. */
#define SBX_MIN_FILE_COUNT 16ULL
/* The least memory a sandbox may ask for: pid 1, a session's bash pair and a small command
 * fit; below it setup itself fails. */
#define SBX_MIN_MEMORY_BYTES (16ULL * 1024 * 1024)

/* Memory and process count of a whole sandbox, through cgroups (rlimits where none). The
 * pids limit is what contains a fork bomb. */
#define SBX_DEFAULT_MEMORY_BYTES (512ULL * 1024 * 1024)
#define SBX_DEFAULT_PIDS 256U
/* The fewest processes: pid 1, a holder and its worker, the shells' reserve and a few for
 * commands (a pipeline). Fewer and no command could ever start. */
#define SBX_MIN_PIDS 12U
/* Of a sandbox's process limit, the part commands can never use, kept for the session shells:
 * a holder must always be able to fork the next command's worker, whatever earlier commands
 * left running (a backgrounded fork bomb, 300 `sleep &`). An eighth, at least 4 (a holder, its
 * worker and the old holder of one session, and one more) and at most 32. */
#define SBX_PIDS_RESERVE(pids) ((pids) / 8 < 4U ? 4U : (pids) / 8 > 32U ? 32U : (pids) / 8)
/* The commands' share of a pids limit: all but the reserve; 0 (no share of their own) when the
 * limit is too small to keep one. */
#define SBX_PIDS_FOR_COMMANDS(pids) ((pids) > SBX_PIDS_RESERVE(pids) ? (pids) - SBX_PIDS_RESERVE(pids) : 0U)
/* How often a running command's pids limit is looked at: a refused fork ends the run with
 * PIDS_LIMIT within this long, instead of bash retrying until the timeout. */
#define SBX_PIDS_CHECK_MS 100U
/* A command is stopped at the pids limit when forks were refused at two looks at most this
 * far apart: once is a command meeting the limit (and maybe handling it). */
#define SBX_PIDS_AGAIN_MS 2000U

/* CPU time of a whole sandbox, in thousandths of a CPU (limits.cpus 1.5 = 1500), enforced by
 * the kernel's CFS bandwidth control: cgroup v2 cpu.max where the daemon can enable the cpu
 * controller, else the v1 cpu hierarchy (cpu.cfs_quota_us). Without a limit two busy loops
 * left in the background keep every core of a two-core host busy until the sandbox is
 * destroyed. The default is half the host's online CPUs (one of two, four of eight, half of
 * a single one): no one sandbox can take the whole machine, whatever its size, so the daemon,
 * other sandboxes and the host's own work always keep the other half, while a parallel build
 * on a large host still gets many cores without asking. A fixed 1 CPU would be the same
 * everywhere but would slow every `make -j` on a big host ten-fold and still hand a
 * single-CPU host over whole. Clients may ask for anything from the minimum to every online
 * CPU; more would only look like a limit. Under contention each sandbox's share (cpu.weight,
 * or cpu.shares in v1) is in proportion to its limit. */
#define SBX_DEFAULT_CPU_PERCENT_OF_HOST 50U
/* `sbx serve`'s weight of all sandboxes together against the processes beside the daemon's
 * cgroup base (the daemon itself, the host's own work), as cgroup v2 cpu.weight (a nice-0 task
 * is 100; cpu.shares 1024 in v1, scaled alike; --sandboxes-cpu-weight). Only under contention
 * does it count: an idle host still gives the sandboxes every CPU their limits allow. A
 * one-shot `sbx run`, whose process only waits, keeps the kernel's 100, so its command is not
 * niced against the user's other work. Why: at the default 100, a hundred
 * busy commands on a two-CPU host left the daemon's loop waiting for a CPU up to half a
 * second (`ping` p99 190 ms while 100 streams started; docs/BENCHMARKS.md); at an eighth,
 * the daemon, which spends little CPU but must answer at once, runs as soon as it wakes. */
#define SBX_SANDBOXES_CPU_WEIGHT 12U
/* The kernel's range of cgroup v2 cpu.weight, which --sandboxes-cpu-weight takes. */
#define SBX_MAX_CPU_WEIGHT 10000U
/* After a kill, a run ends when its cgroup is empty, which cgroup.events tells; but the kernel
 * tells a cgroup file's change at most once per 10 ms (CGROUP_FILE_NOTIFY_MIN_INTV), so a
 * command killed within 10 ms of its worker moving in (a cancel right after the send) heard
 * of its end up to 10 ms late: the file is read every SBX_KILL_LOOK_MS meanwhile, at most
 * SBX_KILL_LOOKS times (past that the notification has come). */
#define SBX_KILL_LOOK_MS 1U
#define SBX_KILL_LOOKS 25U
/* A Python cell's RUN may reach its worker before the worker has named the keeper of the state
 * the cell starts from (its fork, a millisecond or so): a kill of the cell waits for that
 * name, since killing the worker before it would lose the context. A worker that has not
 * named it this long after the kill (its fork refused over and over at a full process limit)
 * is killed anyway, and the context is told lost. */
#define SBX_KEPT_WAIT_MS 2000U
/* The smallest limit: the kernel refuses a quota under 1 ms per period, and 1 ms of a
 * 100 ms period is 0.01 CPU. */
#define SBX_MIN_CPU_MILLIS 10U
/* The CFS bandwidth period (the kernel's default). A sandbox over its limit is stopped until
 * the period ends: with 0.5 CPU and two busy threads it runs 25 ms and waits 75 ms. A shorter
 * period would make those stalls shorter at the cost of more throttling work in the kernel. */
#define SBX_CPU_PERIOD_US 100000U
/* Where no cpu controller is writable (rootless: the delegated v2 directory holds the daemon
 * itself, so it cannot enable controllers for its children, and the v1 hierarchy belongs to
 * root), nothing can cap a sandbox's CPU time; its pid 1 then starts at this nice value,
 * which every process of the sandbox inherits and none can lower (that takes CAP_SYS_NICE or
 * a raised RLIMIT_NICE): a runaway still takes idle cores, but yields them to the host's own
 * work. */
#define SBX_CPU_FALLBACK_NICE 10

/* Default per-command timeout; a timed-out command ends with exit code 124. */
#define SBX_DEFAULT_TIMEOUT_MS 30000ULL
#define SBX_EXIT_TIMEOUT 124
#define SBX_EXIT_CANCELLED 125

/* ---- the most a client may ask for, so a request cannot make the daemon allocate or promise
 * without bound */

/* Ceiling of the stdoutBytes and stderrBytes limits: a command's kept output is held in the
 * daemon's memory and sent as one JSON line, so this is what one command may cost it. */
#define SBX_MAX_OUTPUT_BYTES (4ULL * 1024 * 1024 * 1024)
/* Ceiling of the commandBytes limit. Command text travels whole in the session's RUN message
 * (WIRE_MAX_MSG), whose receive buffer each session's bash allocates in full up front. */
#define SBX_MAX_COMMAND_BYTES (1024ULL * 1024)
/* Longest timeout, a day: every command ends some time, so none holds a sandbox forever. */
#define SBX_MAX_TIMEOUT_MS (24ULL * 3600 * 1000)
/* The kernel's PID_MAX_LIMIT (64-bit): no sandbox can hold more processes than the kernel can
 * number, so a larger pids limit would only look like one. */
#define SBX_MAX_PIDS (1U << 22)

/* Env overrides of one run: count and total bytes (they travel in the run message). */
#define SBX_MAX_RUN_ENV 256
#define SBX_MAX_RUN_ENV_BYTES (64U * 1024)

/* Secrets of one sandbox (sandbox.create's `secrets`): how many, the longest name and value.
 * The value is copied into every session shell's environment and looked for in all output,
 * and the stream redactor holds back up to a value's length (times four for its quoted
 * forms), so both are bounded: 16 KiB holds a PEM private key of 8192-bit RSA. */
#define SBX_MAX_SECRETS 64U
#define SBX_MAX_SECRET_NAME_BYTES 64U
#define SBX_MAX_SECRET_BYTES (16U * 1024)
/* A secret value shorter than this is set in the environment but not redacted: it would be
 * found all over ordinary output. */
#define SBX_REDACT_MIN_SECRET_BYTES 8U
/* Extra redaction patterns (`sbx serve --redact`): how many and how long each. Each is a
 * POSIX ERE tried only where its literal prefix occurs, on at most REGEX_WINDOW bytes, which
 * is also what a stream holds back while such a prefix waits for the bytes after it. */
#define SBX_MAX_REDACT_PATTERNS 32U
#define SBX_MAX_REDACT_PATTERN_BYTES 256U
#define SBX_REDACT_REGEX_WINDOW 256U
/* After `-----BEGIN ... PRIVATE KEY-----` the redactor swallows output up to the END line; with
 * no END after this many bytes (the largest RSA keys are about 13 KB) output is shown again. */
#define SBX_REDACT_PEM_MAX_BYTES (64U * 1024)
/* The redacted text of one stream of a run may exceed its cap (the cap counts the command's
 * raw bytes): a marker `[REDACTED:NAME]` is at most 11 + SBX_MAX_SECRET_NAME_BYTES bytes for
 * at least SBX_REDACT_MIN_SECRET_BYTES raw ones, so at most this many times the cap. */
#define SBX_REDACT_MAX_EXPANSION 10U
/* Variables of the daemon's environment passed into sandboxes (`sbx serve --env-passthrough`). */
#define SBX_MAX_ENV_PASSTHROUGH 64U
/* `sbx serve --config FILE`: entries (key = value lines) and the longest line it reads. */
#define SBX_MAX_CONFIG_ENTRIES 1024U
#define SBX_MAX_CONFIG_LINE_BYTES (64U * 1024)

/* ---- metrics (sbx_sandbox_metrics, sandbox.metrics, GET /metrics)
 * Every sandbox handed out is sampled every SBX_METRICS_INTERVAL_MS (E2B's getMetrics step) and
 * the last SBX_METRICS_SAMPLES are kept: an hour. Equal samples in a row are one record, so an
 * idle sandbox holds one; a busy one grows its records SBX_METRICS_MIN_RECORDS at a time up to
 * the whole hour (72 bytes each: 52 KiB). */
#define SBX_METRICS_INTERVAL_MS 5000U
#define SBX_METRICS_SAMPLES 720U
#define SBX_METRICS_MIN_RECORDS 4U
/* The most of a running command's text session.list shows. */
#define SBX_SESSION_LIST_COMMAND_BYTES 4096U
/* Audit events the daemon keeps in memory for audit.recent (the console's trail). */
#define SBX_AUDIT_RECENT_EVENTS 200U
/* The largest file of the console's page read at start (xterm.js is about 300 KiB). */
#define SBX_CONSOLE_FILE_BYTES (4U * 1024 * 1024)
/* Streams (process.stream as server-sent events) the console serves at once, and the largest
 * call it takes (a terminal's paste is one process.write). */
#define SBX_CONSOLE_MAX_STREAMS 32U
#define SBX_CONSOLE_RPC_BYTES (1024U * 1024)

/* ---- paths and names */

/* Longest path, with its NUL: the kernel's PATH_MAX, past which no system call takes a path
 * anyway. It bounds the cwd of a run, symlink targets and the host paths a sandbox's root is
 * built from. Positions inside a tree have no such limit (see SBX_MAX_TREE_DEPTH and
 * SBX_MAX_ARCHIVE_PATH_BYTES): the walks hold them on the heap. */
#define SBX_MAX_PATH_BYTES 4096U

/* A path a client names in the files API. Below SBX_MAX_PATH_BYTES so that a relative one
 * still fits it once "/home/user/" is put in front, with room to spare. */
#define SBX_MAX_FILES_PATH_BYTES 4000U

/* A session's name ([A-Za-z0-9_.-]): it appears in logs, errors and archive manifests. */
#define SBX_MAX_SESSION_NAME_BYTES 64U

/* A sandbox's metadata (sandbox.create, filtered by sandbox.list): every sandbox.list answer
 * carries all of it, so it stays small: keys of [A-Za-z0-9_.-], values any UTF-8 string. */
#define SBX_MAX_METADATA_KEYS 32U
#define SBX_MAX_METADATA_KEY_BYTES 64U
#define SBX_MAX_METADATA_VALUE_BYTES 1024U

/* A sandbox's lifetimeMs and idleTimeoutMs (sandbox.create, sandbox.setTimeout): a month, so
 * that deadlines stay far from overflow and a typo of units is refused. */
#define SBX_MAX_SANDBOX_LIFETIME_MS (31ULL * 24 * 3600 * 1000)

/* ---- whole trees (fork, snapshots, export, import, the files API) */

/* Directory depth the tree walks go to: the tree copier (fork, snapshots: "copy (too deep)"),
 * export ("export (too deep)") and import (deeper entries are refused). The walks are
 * iterative (fs/walk.h): a level costs heap (a few hundred bytes and its directory's listing),
 * not stack, and only SBX_TREE_OPEN_LEVELS of them hold an fd. What really bounds a tree's
 * depth is the sandbox's inode limit (fileCount: 10,000 by default, each level is an inode);
 * this ceiling is for sandboxes given millions, so that one walk's memory stays in the
 * megabytes. Export also stops at SBX_MAX_ARCHIVE_PATH_BYTES, which a tree of longer names
 * reaches first. Clearing a tree (restore, import) has no depth limit at all: a tree a
 * command made as deep as it liked must never stand in the way of a restore. */
#define SBX_MAX_TREE_DEPTH 16384U

/* Directory fds a tree walk (copy, export, extract, clear) keeps open on its way down, from
 * the top; deeper levels are opened again through ".." on the way back up, and only if they
 * are still the directory the walk came down from. Bounds the fds of a job walking a hostile
 * tree. */
#define SBX_TREE_OPEN_LEVELS 64U

/* Copy buffer of the tree copier (fork, snapshots). */
#define SBX_TREE_COPY_BUF (256U * 1024)

/* ---- the files API */

/* Largest read per call; bigger files are read in chunks with offset and length. The data
 * is held whole in the daemon and sent as one base64 JSON string. */
#define SBX_MAX_FILE_READ_BYTES (4U * 1024 * 1024)
/* files.write's `dataFd`: the most bytes one memfd sent with a request may hold (read whole
 * into the daemon, as a request line's data would be). */
#define SBX_MAX_FILE_FD_BYTES (8U * 1024 * 1024)
/* Entries one list returns at most (each is a JSON object in one answer). */
#define SBX_MAX_LIST_ENTRIES 20000U
/* Levels one list descends at most (a recursive list goes this deep). A list runs in the
 * daemon's own loop with an fd per level, and a deeper answer would be cut off by
 * SBX_MAX_LIST_ENTRIES anyway. */
#define SBX_MAX_LIST_DEPTH 64U
/* Uploads (files written in parts, all or nothing) open at once in one sandbox. Each holds
 * two daemon fds (its temp file and the target's directory) and its temp file's space until
 * it is committed or aborted, or its connection closes. */
#define SBX_MAX_UPLOADS 16U
/* Why a files API call failed, in words: a message naming up to two client paths. */
#define SBX_FILE_ERROR_BYTES 512U

/* ---- file change events (files.watch) */

/* Watches open at once on one sandbox. They share one inotify instance per sandbox (the
 * kernel allows a user 128 instances by default, and the daemon's user holds them all). */
#define SBX_MAX_WATCHES 16U
/* Directories one sandbox's watches cover, all of them together (a recursive watch takes one
 * per directory below it). Each is a kernel inotify watch (up to 1 KiB of kernel memory,
 * counted against the daemon user's fs.inotify.max_user_watches) and its path in the daemon
 * (under SBX_MAX_FILES_PATH_BYTES: 16 MiB for a sandbox at the very worst, a few hundred KiB
 * for real trees). A recursive watch over more is refused; directories made later past it are
 * not watched, which the watch's client hears as an overflow. */
#define SBX_MAX_WATCH_DIRS 4096U
/* Entries one walk of a watched tree reads (at the start of a recursive watch, and for a
 * directory made or moved in later): it runs in the loop, so it must be short. Past it, as
 * past SBX_MAX_WATCH_DIRS. */
#define SBX_MAX_WATCH_WALK_ENTRIES 65536U
/* inotify events read per wakeup of the loop (one read). A sandbox that makes events faster
 * than the loop reads them fills the kernel's queue (fs.inotify.max_queued_events), which
 * then says so once: an overflow. */
#define SBX_WATCH_READ_BYTES (16U * 1024)
/* Buckets of a sandbox's table from inotify watch descriptors to directories: a few
 * directories per bucket at SBX_MAX_WATCH_DIRS. */
#define SBX_WATCH_BUCKETS 1024U

/* ---- snapshots, session states, forks */

/* Snapshots: each sandbox has a store of its own, FACTOR times its filesystem limits (bytes
 * and inodes; the kernel enforces them), holding at most MAX snapshots. */
#define SBX_SNAPSHOT_BUDGET_FACTOR 4U
#define SBX_MAX_SNAPSHOTS 32U
/* Session states move between shells (fork, snapshots, export) up to this size each. */
#define SBX_MAX_STATE_BYTES (16U * 1024 * 1024)
/* stderr kept of an internal run (a state dump or restore): enough to say why it failed. */
#define SBX_INTERNAL_STDERR_BYTES (64U * 1024)
/* A sandbox whose processes will not all stop for a copy (one stuck in the kernel) is copied
 * anyway after this long: a live copy beats no copy. */
#define SBX_FREEZE_WAIT_MS 2000
/* How long taking or applying one session's state may take. */
#define SBX_STATE_TIMEOUT_MS 10000U
/* Forked sandboxes alive at once per server. */
#define SBX_MAX_FORKS 16U
/* Layers under one layered fork (docs/ARCHITECTURE.md, "Forks in layers"): each fork with
 * changes adds one, and each costs every lookup that reaches it a step, so past this many
 * the next fork copies the whole tree into one fresh layer instead. The kernel's own bound
 * is 500 lower layers; this one keeps the fork's job within the 16 fds a job may keep
 * (base/job.c): the layers, the two roots, the new layer, the upper and two indexes. */
#define SBX_MAX_FORK_LAYERS 8U
/* Forks in layers: how many files closed after writing since a sandbox's last fork are
 * named for the next walk to copy (fs/changes.h); past it, every regular file is. */
#define SBX_FORK_CLOSED_MAX 4096U
/* Directory depth a layer's diff walks to: it holds two fds per level and recurses. A deeper
 * tree forks by a plain copy (SBX_MAX_TREE_DEPTH). */
#define SBX_LAYER_MAX_DEPTH 128U

/* ---- archives (export, import) */

/* Largest export archive (compressed) and import archive. */
#define SBX_MAX_ARCHIVE_BYTES (512ULL * 1024 * 1024)
/* The manifest is the one entry read whole into memory; session states make up most of it. */
#define SBX_MAX_MANIFEST_BYTES (64U * 1024 * 1024)
/* JSON values a manifest may hold: a handful per session and limit. Counted before jansson
 * builds them, so that a few KB of zstd ({"a":[{},{},...]}) cannot make it allocate
 * gigabytes. */
#define SBX_MAX_MANIFEST_NODES 4096U
/* Longest entry path (and hard link target) in an archive, with its NUL. Paths of a deep tree
 * pass PATH_MAX (5,000 levels of one-letter names make 10 KB): export writes them as pax
 * headers and both export and import only ever use them one component at a time relative to
 * a directory fd, never as a whole path in a system call. It bounds what one header may make
 * import hold and hash, and with SBX_MAX_TREE_DEPTH the depth an export reaches (16,384
 * levels of names up to three bytes). */
#define SBX_MAX_ARCHIVE_PATH_BYTES (64U * 1024)
/* Tar overhead allowed per entry on top of the data (header, pax header, padding) when
 * bounding how much a hostile archive may decompress to; an entry's path and link target are
 * allowed on top, for their length (up to SBX_MAX_ARCHIVE_PATH_BYTES each). */
#define SBX_ARCHIVE_ENTRY_SLACK (16U * 1024)
/* Directories an import's extraction may enter and leave, on top of four per entry. It walks
 * to each entry's directory from the previous one (and for a hard link on to its target's),
 * then to each directory again to set its mode and time: an archive in export's order needs
 * about four per directory, but one made to send it up and down the whole depth for every
 * entry would need entries times depth (10,000 x 16,384 x 2), minutes of opening directories.
 * The check refuses such an archive; this much more (about ten seconds of it at worst) is left
 * for hard links far from their targets. */
#define SBX_ARCHIVE_WALK_SLACK (4U * 1024 * 1024)
/* Read and write buffer of export and import. */
#define SBX_ARCHIVE_IO_BUF (64U * 1024)

/* ---- OCI images (oci/) */
/* Layers of one image: overlay takes 500 lower layers; the sandbox's skeleton is one more. */
#define SBX_IMAGE_MAX_LAYERS 128U
/* Images a store lists (names and untagged ones); an import past it is refused. */
#define SBX_IMAGE_MAX_IMAGES 1024U
/* Names one image may carry. */
#define SBX_IMAGE_MAX_NAMES 32U
/* An image name: [registry/]repository[:tag]. */
#define SBX_IMAGE_NAME_BYTES 256U
/* index.json, manifest.json, a manifest or a config: bigger is no image, it is an attack. */
#define SBX_IMAGE_JSON_BYTES (4U * 1024 * 1024)
/* Indexes that may lead to indexes before a manifest is reached (and no digest twice). */
#define SBX_IMAGE_INDEX_DEPTH 4U
/* Entries of one layer (files, directories, links, whiteouts). */
#define SBX_IMAGE_LAYER_ENTRIES (1024U * 1024)
/* Default size of the store: the bytes of every unpacked layer and of an archive being read
 * (an import that would pass it is refused as it unpacks). `sbx serve --image-store-max`. */
#define SBX_IMAGE_STORE_DEFAULT_BYTES (32ULL * 1024 * 1024 * 1024)
/* Bytes counted for each entry besides its data: what a directory, an inode and a name cost. */
#define SBX_IMAGE_ENTRY_BYTES 512U
/* What a tar may decompress to beyond the bytes it is counted for: its end blocks and padding. */
#define SBX_IMAGE_TAR_SLACK (1024U * 1024)
/* An import or removal that runs this long is killed (a store job holds the store's lock). */
#define SBX_IMAGE_JOB_TIMEOUT_MS (60U * 60 * 1000)
/* An import says where it is at most once per this many bytes of a layer (image.progress). */
#define SBX_IMAGE_PROGRESS_BYTES (16U * 1024 * 1024)
/* Read buffer of an import. */
#define SBX_IMAGE_IO_BUF (256U * 1024)
/* Store operations (imports, removals) waiting behind the one running. */
#define SBX_IMAGE_MAX_QUEUED 16U

/* ---- the JSON-RPC protocol */

/* Nesting the fast scan of a request line follows (it finds params.data without jansson);
 * deeper lines are left to jansson whole, which has its own depth limit. Bounds the scan's
 * recursion, and no real request comes near it. */
#define SBX_MAX_JSON_SCAN_DEPTH 64U

/* A connection's line buffer larger than this is freed once its line is handled: one huge
 * request must not pin its memory for the connection's lifetime. */
#define SBX_FRAMER_KEEP_BYTES (64U * 1024)
/* Of a line over the limit, the bytes kept of each end: where a request's id is found, so the
 * refusal is answered to it. */
#define SBX_FRAMER_PEEK_BYTES 256U

/* Longest answer line the CLI's client reads: an export archive of SBX_MAX_ARCHIVE_BYTES in
 * base64, with room for the rest of the answer. */
#define SBX_MAX_CLIENT_LINE_BYTES (SBX_MAX_ARCHIVE_BYTES / 3 * 4 + 1024 * 1024)

/* sbx shell: keystrokes (or a paste) read from the user's terminal and not yet sent. One
 * process.write is in flight at a time, so they reach the pty in the order typed; what
 * arrives meanwhile is sent as one write of at most this many bytes, and the terminal is not
 * read while that many wait (a huge paste then waits in the terminal, not in our memory). */
#define SBX_SHELL_INPUT_BYTES (64U * 1024)
/* The pty's size when the user's terminal does not say its own. */
#define SBX_SHELL_DEFAULT_COLS 80U
#define SBX_SHELL_DEFAULT_ROWS 24U

/* Output queued for a consumer that reads slowly (a client's socket, the CLI's stdout): above
 * HIGH the producer (a command's pipes) is no longer read until the queue is below LOW, so a
 * slow reader costs at most this much memory and never blocks the loop. */
#define SBX_OUTPUT_QUEUE_HIGH_BYTES (4U * 1024 * 1024)
#define SBX_OUTPUT_QUEUE_LOW_BYTES (1U * 1024 * 1024)

/* Longest request line a connection accepts unless the client raises it (limits.rpcBytes):
 * a request is framed whole in memory. Inherited from codepod. */
#define SBX_DEFAULT_RPC_BYTES (8U * 1024 * 1024)
/* fds a client sent (SCM_RIGHTS) that a connection holds until the request they came with is
 * handled; more are closed at once. Each request takes at most one. */
#define SBX_CONN_FDS 8U
/* Sandboxes one server holds at once (forks included) is a setting, `sbx serve
 * --max-sandboxes N`; past it, WORKER_UNAVAILABLE. This is the most the flag takes: the
 * server's tables stay small and ids stay far from any overflow. As root each sandbox also
 * needs a block of host ids (SBX_HOST_UID_SLOTS of them). */
#define SBX_MAX_SERVER_SANDBOXES 65536U
/* Without the flag the cap is derived at start from what the machine has free, each resource
 * divided by one sandbox's share of it. An idle sandbox with a warm default session is three
 * processes (pid 1, the session's bash and its waiting worker), 10 to 14 daemon fds (three
 * pidfds, the control and session sockets, two root fds, the network namespace and its
 * cgroup directories: its own and its next command's on a cgroup v2 host, and four of the v1
 * hierarchies on a hybrid v1 + v2 one; its init and cmds cgroups are opened when used, the
 * timer that sweeps commands' cgroups is there only while one waits to be removed) and
 * about 0.6 MiB of memory, kernel included (page tables, slab, kernel stacks;
 * docs/BENCHMARKS.md). The memory and pids shares leave room above that for each to run a
 * small command (a pipeline's processes, its memory): a cap that only idle sandboxes reach
 * would be no protection. The fds share is the idle cost on the hybrid host, with the fds of
 * runs in flight (about five each: pipes, a timer, a cgroup) and of clients taken from
 * SBX_DAEMON_RESERVE_FDS: fds are the daemon's alone and RLIMIT_NOFILE's hard limit (20,000 on
 * some hosts) cannot be raised without CAP_SYS_RESOURCE, so a larger share would cap such a
 * host below a thousand idle sandboxes it holds well. MEMORY_PERCENT is the part of
 * MemAvailable sandboxes may take, the rest kept for the host and the daemon;
 * SBX_HOST_RESERVE_PIDS is left to the host's own processes. */
#define SBX_SANDBOX_COST_MEMORY_BYTES (4ULL * 1024 * 1024)
#define SBX_SANDBOX_COST_PIDS 8U
#define SBX_SANDBOX_COST_FDS 15U
#define SBX_SANDBOX_MEMORY_PERCENT 75U
#define SBX_DAEMON_RESERVE_FDS 1024U
/* Parking (session/internal.h): a sandbox idle for SBX_PARK_AFTER_MS (`sbx serve
 * --park-after`) gives back every fd it can have again when used, keeping
 * SBX_SANDBOX_PARKED_FDS (pid 1's control socket, its default session's socket and holder's
 * pidfd; 2 more per other session); a sweep every SBX_PARK_SWEEP_MS at most finds them. When
 * fewer fds than SBX_PARK_HEADROOM sandboxes' idle cost are free, idle sandboxes are parked at
 * once, least recently used first, so that the one asked for can be unparked and a create
 * can go on. The fds share of the cap then counts parked sandboxes with that headroom kept. */
#define SBX_PARK_AFTER_MS 5000U
#define SBX_PARK_SWEEP_MS 1000U
#define SBX_PARK_SWEEP_MAX 1024U /* sandboxes one sweep looks at, at most */
#define SBX_SANDBOX_PARKED_FDS 3U
#define SBX_PARK_HEADROOM 64U
/* Destroyed sandboxes finished at once (corpse.h): each holds pid 1's pidfd and its cgroups'
 * fds until pid 1 is reaped and the cgroups removed; parked ones past this many are killed at
 * once and finished as others end, so that tearing down thousands never runs out of fds. */
#define SBX_CORPSES_ACTIVE 64U
/* fds the daemon holds for one sandbox beyond its idle cost, taken and given back as they come
 * (sandbox_fds_take()): a forwarded connection or a proxy relay (SBX_CONNECTION_FDS: both
 * sockets and a pipe each way), an open upload (2). At most SBX_MAX_SANDBOX_HELD_FDS for one
 * sandbox (256 connections across its ports and its proxy), and never so many in all that the
 * daemon keeps fewer than SBX_DAEMON_RESERVE_FDS plus SBX_SANDBOX_COST_FDS per sandbox free:
 * a sandbox's connections cannot take the fds other clients' runs need. */
#define SBX_CONNECTION_FDS 6U
#define SBX_UPLOAD_FDS 2U
#define SBX_MAX_SANDBOX_HELD_FDS (256U * SBX_CONNECTION_FDS)
#define SBX_HOST_RESERVE_PIDS 1024U
/* The longest the loop runs calls held back with loop_yield (a connection's next request,
 * a slice of a long job) in one turn before every other ready fd gets its turn again: a
 * sandbox.create costs the loop about 1 ms (clone3, cgroup directories), so fifty clients'
 * creates in one turn would hold a ping for fifty. At least one call runs per turn. */
#define SBX_LOOP_YIELD_SLICE_US 1000U
/* Commands remembered per session for shell.history.list (a ring: the oldest go). */
#define SBX_HISTORY_ENTRIES 1000U
/* Longest time shutdown waits for clients to take their last answers. */
#define SBX_SHUTDOWN_FLUSH_MS 1000
/* Longest time an orderly shutdown (SIGTERM, `kill`) waits for cancelled runs to end and be
 * answered before it destroys everything; `sbx serve --shutdown-deadline-ms`. From seed 004. */
#define SBX_DEFAULT_SHUTDOWN_DEADLINE_MS 10000U
#define SBX_MAX_SHUTDOWN_DEADLINE_MS (10U * 60 * 1000)

/* Lanes (src/server/lane.h). The interactive lane's default slots: one per this much of the
 * machine's memory (a command of a modest size), and at least this many per CPU. */
#define SBX_LANE_SLOT_MEMORY (128ULL * 1024 * 1024)
#define SBX_LANE_SLOTS_PER_CPU 8U
#define SBX_MAX_LANE_SLOTS 4096U
/* The system lane's reserved slots: an operator's health check or clean-up, not a fleet. */
#define SBX_DEFAULT_SYSTEM_SLOTS 2U
/* Requests waiting per lane before WORKER_UNAVAILABLE; seed 004's default. */
#define SBX_DEFAULT_LANE_QUEUE 10U
#define SBX_MAX_LANE_QUEUE 100000U
/* The bounds of retryAfterMs: seed 004's client backoff starts at 100 ms and stops at 5 s. */
#define SBX_LANE_RETRY_MIN_MS 100U
#define SBX_LANE_RETRY_MAX_MS 5000U
/* Ceilings a client may ask for, per sandbox: memory and filesystem bytes. */
#define SBX_MAX_MEMORY_BYTES (1ULL << 44)
#define SBX_MAX_FS_BYTES (1ULL << 40)

/* ---- the audit log (sbx serve --audit) */

/* Event lines the daemon holds while its writer process is behind (the pipe to it is full):
 * the loop never waits for the disk, so past this an event is dropped and counted (health's
 * audit.dropped, and an `audit.dropped` line once there is room again). At about 300 bytes an
 * event, a few thousand events: seconds of a slow disk at any plausible rate of requests. */
#define SBX_AUDIT_QUEUE_BYTES (1U * 1024 * 1024)
/* Capacity asked for the pipe to the writer (the kernel's default is 64 KiB): more events in
 * flight before the daemon's own queue starts to fill. Rootless the kernel may refuse it,
 * which only leaves the default. */
#define SBX_AUDIT_PIPE_BYTES (1U * 1024 * 1024)
/* Longest event line. Every field is bounded (paths by SBX_MAX_PATH_BYTES, a command by
 * SBX_AUDIT_COMMAND_BYTES), so only a bug reaches it; such an event is dropped and counted.
 * The writer and `sbx audit verify` read lines of at most twice this (seq and prev added). */
#define SBX_AUDIT_LINE_BYTES (64U * 1024)
/* Bytes of a command's text kept in its event; a longer one keeps its length and sha256, which
 * still tell which command it was. */
#define SBX_AUDIT_COMMAND_BYTES 4096U
/* Rotation: the log file is rotated once the next line would take it past --audit-max-bytes,
 * and --audit-keep files are kept in all (PATH, PATH.1, ... the oldest removed). */
#define SBX_AUDIT_DEFAULT_MAX_BYTES (64ULL * 1024 * 1024)
#define SBX_AUDIT_MIN_MAX_BYTES 4096ULL
#define SBX_AUDIT_DEFAULT_KEEP 5U
#define SBX_AUDIT_MAX_KEEP 1000U
/* What a rotation carries into the new file, so no rotation leaves an end without its begin:
 * the newest `server.start` always, and the begins whose end is still to come (a sandbox's
 * create or fork, a process's start), each as an `audit.carried` line, up to this many bytes
 * of them and at most a quarter of --audit-max-bytes (so the carried lines never fill the new
 * file). Begins past it are counted in the rotation's `audit.rotated` line. */
#define SBX_AUDIT_CARRY_BYTES (1U * 1024 * 1024)
/* `network.denied` events of one sandbox: up to the burst at once, then so many a second; past
 * that they are counted, and one `network.denied.suppressed` event says how many before the
 * sandbox's next one that is written, or its end. A sandbox's refused requests (it makes them
 * at will) cannot then push other sandboxes' events out of the rotated files. */
#define SBX_AUDIT_DENIED_BURST 100U
#define SBX_AUDIT_DENIED_PER_S 10U
/* After a failed write (a full disk), the writer tries again this often on its own, so the
 * log recovers (and fail-closed lets runs in again) without waiting for the next event. */
#define SBX_AUDIT_RETRY_MS 1000U
/* The writer tells the daemon its counters (health's audit.written, .failed) at most this
 * often, so a busy log costs the daemon no wakeup per event; a change between writing and
 * failing is told at once (fail-closed acts on it). */
#define SBX_AUDIT_REPORT_MS 100U
/* How long `sbx serve` waits for its writer to open the log and say so before it gives up:
 * the log's directory may be on a slow or hung filesystem. */
#define SBX_AUDIT_START_MS 5000U
/* At shutdown, how long the daemon spends handing its last events to the writer and waiting
 * for it to write them. */
#define SBX_AUDIT_CLOSE_MS 2000U

/* ---- the HTTP listener (sbx serve --http) */

/* Connections open at once (past it new ones wait in the backlog), the backlog, and how long
 * an idle keep-alive connection stays open (a streamed answer parked for data is not idle). */
#define SBX_HTTP_MAX_CONNECTIONS 1024U
#define SBX_HTTP_BACKLOG 128
#define SBX_HTTP_IDLE_S 120U
/* A request body held whole (a JSON request, a Connect message): past it, 413. File uploads
 * are not held: they go to the sandbox as they come. */
#define SBX_HTTP_BODY_BYTES (8U * 1024 * 1024)
/* What MHD asks of a streamed answer at a time. */
#define SBX_HTTP_STREAM_BLOCK (256U * 1024)
/* The door's forwarding of a sandbox's port (an HTTP client): headers of an answer passed on,
 * the longest header line sent, and how long a connect may take. */
#define SBX_HTTP_FETCH_MAX_HEADERS 100U
#define SBX_HTTP_FETCH_HEADER_BYTES 8192U
#define SBX_HTTP_FETCH_CONNECT_MS 10000U
/* A Kubernetes node (sbx serve --kube-node): the largest answer of the API server held whole
 * (a list of a thousand pods is a few MiB), the longest line of a watch (one object), the
 * Lease's duration unless given (renewed every quarter of it), how long a watch is asked to
 * last before it is resumed, the wait before a failed call or watch is tried again, the most
 * containers a pod may have, and the restart backoff's first and longest wait. */
/* fds of a pod's container process beyond its sandbox's idle cost (its stdout and stderr
 * pipes, its cgroup and that cgroup's events, its timer, a spare): a node offers as many pods
 * as RLIMIT_NOFILE holds at SBX_SANDBOX_COST_FDS plus this each (measured: 24 fds per
 * one-process pod in all), so kube-scheduler never binds a pod the daemon has no fds for. */
#define SBX_KUBE_POD_PROCESS_FDS 6U
/* Where a node's kubelet endpoints listen (the kubelet's own port: the API server asks there). */
#define SBX_KUBELET_PORT 10250U
/* --kube-label flags of one daemon. */
#define SBX_MAX_KUBE_LABELS 32U
#define SBX_KUBE_BODY_BYTES (64U * 1024 * 1024)
#define SBX_KUBE_WATCH_LINE_BYTES (4U * 1024 * 1024)
#define SBX_KUBE_LEASE_S 40U
#define SBX_KUBE_WATCH_S 300U
#define SBX_KUBE_RETRY_MS 1000U
/* An API call not answered in this long is given up (and, for a status, tried again later). */
#define SBX_KUBE_CALL_MS 30000U
#define SBX_KUBE_MAX_CONTAINERS 16U
#define SBX_KUBE_BACKOFF_MS 1000U
#define SBX_KUBE_BACKOFF_MAX_MS 60000U
/* The buffer of MHD's form parser (multipart uploads): a part's pieces come at most this big. */
#define SBX_HTTP_FORM_BUFFER (256U * 1024)

/* ---- the E2B door (sbx serve --http) */

/* --api-key: keys accepted at once, and their length. */
#define SBX_MAX_API_KEYS 64U
#define SBX_MAX_API_KEY_BYTES 256U
/* A process start refused because its session already queues SBX_MAX_QUEUED_RUNS is sent
 * again this often, until its Connect deadline or, without one, this long. */
#define SBX_E2B_START_RETRY_MS 5U
#define SBX_E2B_START_WAIT_MS 30000U
/* A polled watcher (E2B's CreateWatcher) keeps at most this many events for its next
 * GetWatcherEvents; the ones past it are dropped. */
#define SBX_E2B_WATCHER_EVENTS 4096U
/* Ports of one sandbox the door forwards (PORT-ID.domain), each exposed once and kept. */
#define SBX_E2B_MAX_PORTS 32U

/* A line of the server's answers to the door: files.read answers 4 MiB as base64 in one line. */
#define SBX_E2B_RPC_LINE_BYTES (16U * 1024 * 1024)
/* A sandbox's timeout when create gives none (E2B's default), and the most it may be (sbx's
 * lifetimeMs bound, 31 days). */
#define SBX_E2B_DEFAULT_TIMEOUT_S 300U
#define SBX_E2B_MAX_TIMEOUT_S (31U * 86400)
/* GET /files reads the file this much at a time (files.read's most). */
#define SBX_E2B_READ_BYTES (4U * 1024 * 1024)
/* POST /files sends a file on into its sandbox in parts of this size (the door holds at most
 * one, plus a piece of the form, per upload). */
#define SBX_E2B_UPLOAD_PART_BYTES (4U * 1024 * 1024)

/* ---- exposed ports (port.expose) */

/* Ports one sandbox exposes at once. Each is a listening socket of the daemon on the host's
 * 127.0.0.1 and a port of the host's loopback range taken; past it port.expose is refused with
 * LIMIT_EXCEEDED. */
#define SBX_MAX_PORTS 32U
/* Connections forwarded at once through one exposed port. Each holds six fds of the daemon (its
 * two sockets and a pipe per direction) and up to twice SBX_PORT_PIPE_BYTES of kernel memory in
 * transit; past it a new connection is accepted and reset at once, so a client that opens
 * connections without end exhausts neither. */
#define SBX_MAX_PORT_CONNECTIONS 256U
/* Capacity asked for each direction's pipe of a forwarded connection, as root: the most the
 * daemon holds in transit per direction (nothing else is buffered: a side that does not read
 * stops the other side's reads, and TCP's flow control does the rest). Larger pipes move more
 * per system call. Rootless the pipes keep the kernel's default (64 KiB): the kernel counts
 * every pipe's size against its user's budget (fs.pipe-user-pages-soft, 64 MiB by default),
 * past which each new pipe of that user gets two pages, and rootless that user is also the
 * sandboxes' own, so 256 connections of large pipes would shrink the pipes of every command. */
#define SBX_PORT_PIPE_BYTES (256U * 1024)
/* Bytes one forwarded connection moves in one turn of the loop before it lets other fds have
 * theirs (it is called again while its sockets stay ready). */
#define SBX_PORT_TURN_BYTES (4U * 1024 * 1024)
/* Unconnected sockets of the sandbox's network namespace kept ready per sandbox with exposed
 * ports, so that a new connection needs no round trip to the process that makes them; asked
 * for in batches of at most SBX_PORT_SOCKET_BATCH (one SCM_RIGHTS message each). */
#define SBX_PORT_SOCKET_POOL 8U
#define SBX_PORT_SOCKET_BATCH 32U
/* Connections one listener accepts per turn of the loop. */
#define SBX_PORT_ACCEPT_BATCH 16U
/* A listener that cannot accept (the daemon is out of fds or memory) stops listening for this
 * long, instead of being woken again at once by the connection still waiting. */
#define SBX_PORT_ACCEPT_RETRY_MS 100U

/* ---- sandboxes */

/* Output left by background processes of a sandbox after their command ended: the newest
 * bytes are kept in a ring of this size, the rest dropped. */
#define SBX_BACKGROUND_LOG_BYTES (64U * 1024)

/* Pipes of ended commands still held open by their background processes, per sandbox. Each
 * is a daemon fd; past this many the oldest is closed (its writers then get EPIPE). */
#define SBX_MAX_BACKGROUND_PIPES 128U

/* Pipe capacity asked for command output; bigger pipes mean fewer wakeups at high volume. */
#define SBX_PIPE_BYTES (1024U * 1024)

/* Rooms above the session core a context can hold (session/room.h): net and process today. */
#define SBX_MAX_ROOMS 8u
/* Processes (process.start and what runs leave running) a sandbox tracks; past it the oldest
 * ended one is forgotten, and with none ended a start is refused. */
#define SBX_MAX_PROCESSES 64U
/* Each process's log: the newest bytes kept (in chunks of at least SBX_PROCESS_LOG_CHUNK),
 * what it may have queued for stdin, and how much is read from its output per call. */
#define SBX_PROCESS_LOG_BYTES (1024U * 1024)
#define SBX_PROCESS_LOG_CHUNK 4096U
#define SBX_PROCESS_STDIN_BYTES (1024U * 1024)
#define SBX_PROCESS_READ_BYTES (64U * 1024)
/* What a process's listing shows of its command and label. */
#define SBX_PROCESS_COMMAND_SHOWN 4096U
#define SBX_PROCESS_LABEL_BYTES 256U
/* A sandbox's label (sandbox.create), shown by sandbox.list and sbx ls on one line. */
#define SBX_SANDBOX_LABEL_BYTES 256U
/* process.wait until log: lines are matched up to this long (longer ones in pieces), and
 * until port: how often the sandbox's listening sockets are looked at. */
#define SBX_WAIT_LINE_BYTES (64U * 1024)
#define SBX_WAIT_PORT_POLL_MS 10U
/* process.kill: how long the signal has before SIGKILL, by default. */
#define SBX_PROCESS_KILL_GRACE_MS 2000U

/* Named sessions per sandbox, and runs one session holds at once: the running one and those
 * waiting behind it (counting the running one keeps the cap independent of timing). */
#define SBX_MAX_SESSIONS 64U
#define SBX_MAX_QUEUED_RUNS 16U
/* A code cell's events (sbx_session_run_code()): one line at most, and all of a cell's, which
 * its answer keeps (below the RPC line limit, with room for the rest of the answer). */
#define SBX_CODE_EVENT_LINE_BYTES (4U * 1024 * 1024)
#define SBX_CODE_EVENTS_BYTES (6U * 1024 * 1024)
/* Values (objects, arrays, members, elements) one event line may make when parsed: a
 * DataFrame's HTML is one string, a plot's PNG another; a line of a million tiny values would
 * take a hundred times its bytes in the daemon and its loop's time. */
#define SBX_CODE_EVENT_VALUES 65536U
/* A cell run through E2B's code interpreter (POST /execute): its SDK's own default; the SDK's
 * timeoutMs ends it sooner by ending the request. */
#define SBX_E2B_CELL_TIMEOUT_MS (300U * 1000)
/* Code contexts a sandbox holds at once (each a session: SBX_MAX_SESSIONS bounds them all). */
#define SBX_MAX_CODE_CONTEXTS 16U

/* As root, each sandbox's ids 0..SBX_HOST_ID_BLOCK-1 (root, its user 1000, nobody 65534) are
 * a block of host ids of its own, from this range, so sandboxes share no per-user kernel limit
 * (processes, inotify, pipes, signals) with each other or with a real account, no host user
 * owns their processes, and no process of a sandbox, its pid 1 included, is host root. The
 * range stays below 2^31 and below systemd's "foreign" range (0x7FFE0000). */
#define SBX_HOST_UID_BASE 1600000000U
#define SBX_HOST_ID_BLOCK 65536U
#define SBX_HOST_UID_SLOTS 8192U
/* The sandbox user's ids as commands see them (inside the user namespace). */
#define SBX_SANDBOX_UID 1000U
#define SBX_SANDBOX_GID 1000U

/* Sandboxes a context keeps ready ahead of time, at most (each holds a pid 1, a bash and
 * its worker, and its tmpfs). */
#define SBX_MAX_POOL 8U
/* Images with a pool of their own (sbx serve --pool IMAGE=N), each of at most SBX_MAX_POOL. */
#define SBX_MAX_IMAGE_POOLS 8U

/* Time a sandbox's pid 1 gets to build the root: then its setup fails (the ready hook hears
 * -ETIMEDOUT) and it is killed. Nothing waits for it meanwhile. */
#define SBX_CREATE_TIMEOUT_MS 10000

/* The spawner (sandbox/spawner.h): the largest request it takes (a sandbox's config: its
 * shells' environment, an image's layers, a policy's patterns, a CA certificate), and the
 * bytes of requests that may wait for it at once, which bounds a burst of creates: past them a
 * create is refused (WORKER_UNAVAILABLE) rather than queued in the daemon. */
#define SBX_SPAWN_MSG_MAX (4U * 1024 * 1024)
#define SBX_SPAWN_QUEUE_BYTES (16U * 1024 * 1024)
/* ... the retry a refused create is told (error.data.retryAfterMs): hundreds of creates are
 * made in it. */
#define SBX_SPAWN_RETRY_MS 1000U
/* ... and how long a create waits for the spawner to take it before its setup's own
 * SBX_CREATE_TIMEOUT_MS starts: a spawner that took none in that long is stuck. */
#define SBX_SPAWN_WAIT_MS 60000
/* The longest seccomp filter the daemon hands its spawner's program: the kernel's own bound
 * (BPF_MAXINSNS); sbx's filter is far shorter. */
#define SBX_SECCOMP_MAX_INSNS 4096U
/* How long a daemon waits for its spawner's program to take its setup (a static program's
 * exec, a few ms at worst here); past it, or when the program exits, the spawner is a fork of
 * the daemon instead. */
#define SBX_SPAWNER_START_MS 2000

/* Time destroying a sandbox waits for its processes to die after cgroup.kill. Past it the
 * daemon goes on (it must not hang on a process stuck in the kernel) and warns that the
 * cgroup is left behind. */
#define SBX_DESTROY_TIMEOUT_MS 2000

/* The read-only skeleton tmpfs that holds the sandbox's root (mount points, a generated
 * /etc, symlinks): a few KB are used; the bound only keeps a bug from growing it. */
#define SBX_SKELETON_BYTES (4U * 1024 * 1024)
#define SBX_SKELETON_INODES 4096U
/* How often the spawner checks its shared skeleton against the host's /etc and system
 * directories (between checks a sandbox's pid 1 finds a change itself). */
#define SBX_SKELETON_CHECK_MS 1000U
/* How long the spawner waits for no request before it makes the next sandbox's cgroups
 * (CgroupSpare): past a create's setup, which such work would slow on a host of few CPUs. */
#define SBX_SPARE_QUIET_MS 5
/* How long without a request before it makes the next sandbox's network namespace (NetSpare
 * in sandbox/spawner.c), about 1 ms of work that a create arriving meanwhile would wait for:
 * longer than the gap between the creates of a burst. */
#define SBX_SPARE_NET_QUIET_MS 15U
/* How much of its stack the spawner zeroes below its loop after each request (scrub_stack() in
 * sandbox/spawner.c), so that nothing a request left there is in the next pid 1 or session
 * shell: more than the deepest a request's frames go. */
#define SBX_SPAWNER_SCRUB_BYTES (64U * 1024)
/* The room in the command line of a spawner preloaded into bash for what a session shell that
 * goes on as that bash shows as its own (the builtin's boot line and the session's home): a
 * longer one is cut in /proc/PID/cmdline, not in the shell. */
#define SBX_SPAWNER_CMDLINE_BYTES 256U

/* ---- exec policy (policy.allow, policy.deny; see sandbox/landlock.c) */

/* Patterns in each of a policy's lists. Every sandbox made with the policy keeps a copy and its
 * pid 1 matches each against the root before the first command, so the list stays short;
 * a pattern naming a directory covers any number of files with one. */
#define SBX_MAX_POLICY_PATTERNS 256U
/* Files and directories all of a policy's patterns may match together (every entry of
 * /usr/bin is about 1,400 on a Debian host): each becomes a Landlock rule or a path pid 1 keeps. */
#define SBX_MAX_POLICY_MATCHES 8192U
/* Landlock rules one ruleset may hold. Around each denied path pid 1 adds one rule per
 * sibling, and an allow list one per non-program file of the program directories, a few
 * thousand on a full host; each rule is kernel memory of the sandbox's pid 1. */
#define SBX_MAX_POLICY_RULES 65536U
/* Entries pid 1 may look through to find the other names (hard links) of a denied file that
 * are not in its own directory: they would run the same inode with another directory's
 * rights. A Debian /usr holds about 160,000. Past it the policy is refused. */
#define SBX_MAX_POLICY_LINK_WALK 1000000U
/* Directory levels pid 1 descends while building a ruleset (around denied paths, through the
 * program directories, looking for hard links), each holding a path on its stack: system
 * trees are a dozen deep; a deeper one (a rootfs) is refused. */
#define SBX_MAX_POLICY_DEPTH 64U

/* ---- sbx mcp (the Model Context Protocol front over the daemon) */

/* Longest MCP message line read from the client: a write_file of SBX_MCP_FILE_BYTES whose
 * content is mostly escapes (\n, \t, \") still fits; longer lines are refused (-32700) and
 * skipped without being held whole. */
#define SBX_MCP_LINE_BYTES (16U * 1024 * 1024)
/* Largest file write_file writes and edit_file rewrites: one files.write of it in base64 stays
 * under the daemon's default request line (SBX_DEFAULT_RPC_BYTES), so no upload is needed. */
#define SBX_MCP_FILE_BYTES (4U * 1024 * 1024)
/* Of each output stream of a run or a process's log, the bytes a tool result shows: the start
 * and the end, with what lies between counted. A model's context is the scarce resource here:
 * agent tools keep about this much (30,000 characters) and the rest only costs tokens. */
#define SBX_MCP_SHOWN_BYTES 30000U
/* read_file: lines shown when the call gives no limit, bytes shown of one line, and the bytes
 * of one answer in all (about 25,000 tokens), after which it says where to go on. */
#define SBX_MCP_READ_LINES 2000U
#define SBX_MCP_READ_LINE_BYTES 2000U
#define SBX_MCP_READ_SHOWN_BYTES (100U * 1024)
/* read_file reads a file in pieces of this size (files.read), so a few lines of a large file
 * cost one piece, not the whole file. */
#define SBX_MCP_READ_CHUNK_BYTES (1024U * 1024)
/* list_directory: entries shown; the rest are counted. */
#define SBX_MCP_LIST_SHOWN 1000U
/* The run and run_code tools' timeout when the call gives none. MCP clients give up on a request
 * after 60 s (the TypeScript SDK's default) unless they asked for progress and reset their clock
 * on it, so a call without a progressToken is killed before its client stops waiting, and its
 * answer says so; one with a token gets room for builds and test suites, with a notification at
 * least every SBX_MCP_PROGRESS_MS. A call can ask for up to SBX_MAX_TIMEOUT_MS either way. */
#define SBX_MCP_DEFAULT_TIMEOUT_MS 50000ULL
#define SBX_MCP_PROGRESS_TIMEOUT_MS 120000ULL
/* Progress of a run whose caller asked for it (a progressToken): at most one notification per
 * MIN_MS however fast output comes (a flood of output is one notification per interval, not
 * one per chunk), and one every MS while it is silent, so a client that resets its timeout on
 * progress keeps waiting for a long quiet build. The last line of output shown in it is cut at
 * LINE_BYTES. */
#define SBX_MCP_PROGRESS_MIN_MS 200U
#define SBX_MCP_PROGRESS_MS 1000U
#define SBX_MCP_PROGRESS_LINE_BYTES 160U
/* Tool calls in flight at once: each holds its arguments and, while it waits, a daemon answer
 * of up to a few MiB; past it a call is answered with a tool error at once. */
#define SBX_MCP_MAX_CALLS 256U
/* At exit, how long sbx mcp waits for its own daemon to destroy the sandboxes and exit before
 * it kills it: destroying waits up to SBX_DESTROY_TIMEOUT_MS per sandbox, a few at once. */
#define SBX_MCP_CHILD_EXIT_MS 10000U

/* ---- egress by domain (network "allowlist"; see session/egress.c) */

/* The port of the sandbox's 127.0.0.1 where the proxy listens (HTTP_PROXY inside), Squid's
 * customary one: pid 1 makes the listening socket there, in the sandbox's own network
 * namespace, and hands it to the daemon. */
#define SBX_EGRESS_PROXY_PORT 3128U
/* Patterns of one sandbox's allowlist, and the longest: a DNS name (253) with ":65535". Every
 * request a sandbox makes is matched against all of them, one by one. */
#define SBX_MAX_EGRESS_ALLOW 256U
#define SBX_MAX_EGRESS_PATTERN_BYTES 260U
/* A request's head (request line and headers) as the proxy reads it before deciding: a
 * longer one is answered 431 and closed. Real clients send a few hundred bytes. */
#define SBX_EGRESS_HEAD_BYTES (16U * 1024)
/* Connections one sandbox has through its proxy at once. Each holds up to six daemon fds (two
 * sockets, a pipe per direction) and its head buffer; past it a new one is reset at once. */
#define SBX_MAX_EGRESS_CONNECTIONS 128U
/* Connections the proxy accepts per turn of the loop. */
#define SBX_EGRESS_ACCEPT_BATCH 16U
/* Addresses of one name the proxy keeps and tries in turn (the first that connects wins). */
#define SBX_EGRESS_MAX_ADDRS 8U
/* Name resolution (c-ares): each try waits this long for an answer, at most this many tries
 * per server, so a lookup ends within seconds whatever the network does. */
#define SBX_EGRESS_DNS_TIMEOUT_MS 2000U
#define SBX_EGRESS_DNS_TRIES 2U
/* SYN retries of the proxy's outward connects (TCP_SYNCNT): 3 gives up after about 15 s
 * instead of the kernel's two minutes, so an unreachable address frees its slot soon. */
#define SBX_EGRESS_CONNECT_SYNS 3
/* After a refusal has been written, what the client still sends is read and dropped, up to
 * this much, so that closing does not reset the connection before the client read the
 * answer; past it the connection is closed anyway. */
#define SBX_EGRESS_DRAIN_BYTES (64U * 1024)
/* The operator's options (sbx serve --egress-hosts, --egress-allow-private): entries of the
 * hosts file kept (names, each with its addresses), its size read, and CIDRs given. */
#define SBX_MAX_EGRESS_HOSTS 4096U
#define SBX_MAX_EGRESS_HOSTS_FILE_BYTES (1024U * 1024)
#define SBX_MAX_EGRESS_PRIVATE_CIDRS 64U

/* ---- secrets the commands never see (proxy secrets; see session/egress_tls.c) */

/* Hosts patterns of one proxy secret (networkAllow's form), like an allowlist of its own. */
#define SBX_MAX_SECRET_HOSTS 64U
/* The random part of a placeholder (SBX_SECRET_<NAME>_<hex>), in bytes: 96 bits, so a
 * command cannot guess another sandbox's placeholder, nor two sandboxes' collide. */
#define SBX_SECRET_PLACEHOLDER_RANDOM_BYTES 12U
/* A request head after its placeholders became values: a head of SBX_EGRESS_HEAD_BYTES may
 * name secrets of up to SBX_MAX_SECRET_BYTES many times; past this it is answered 431. */
#define SBX_EGRESS_TLS_HEAD_OUT_BYTES (64U * 1024)
/* Plaintext a terminated TLS connection holds per direction between its two sessions: what
 * was read from one side and not yet written to the other. Reading stops while it is full. */
#define SBX_EGRESS_TLS_BUF_BYTES (32U * 1024)
/* How long the tail of an answer that could hide the start of a secret's value waits for the
 * next bytes on an open connection before it goes as it is (egress_tls_scrub): one timer per
 * sandbox's proxy, the same wait whatever the tail holds. */
#define SBX_EGRESS_TLS_HOLD_MS 20U
/* Leaf certificates one sandbox's CA keeps (one per host name it terminated TLS for); past
 * it one not in use by a connection is dropped, and when all are, the CONNECT fails (502). */
#define SBX_EGRESS_TLS_LEAF_CACHE 64U
/* The sandbox CA's and its leaves' validity, from an hour before their making (clocks
 * disagree a little): a CA lives as long as its sandbox, which may be kept for days. */
#define SBX_EGRESS_TLS_CA_DAYS 3650U
#define SBX_EGRESS_TLS_LEAF_DAYS 825U
/* Extra CA certificates the operator trusts for the servers (sbx serve --egress-ca FILE). */
#define SBX_MAX_EGRESS_CA_FILE_BYTES (1024U * 1024)
