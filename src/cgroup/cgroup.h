/* SPDX-License-Identifier: MIT */
/* cgroups: containment of each command (cgroup v2, cgroup.kill), and memory, pids and cpu
 * limits of each sandbox (v2 controllers where delegated, the v1 memory, pids and cpu
 * hierarchies otherwise; each controller is chosen on its own).
 *
 * Layout, below one base directory per daemon in each hierarchy used:
 *   v2:  <base>/<sandbox>           memory.max, pids.max, cpu.max, cpu.weight
 *        <base>/<sandbox>/init      the sandbox's pid 1 and its session shells
 *        <base>/<sandbox>/cmds      every command; pids.max leaves a reserve to the shells
 *        <base>/<sandbox>/cmds/c<N> the worker of command N and everything it starts
 *   v1:  <base>/<sandbox>           memory.limit_in_bytes, pids.max, cpu.cfs_quota_us and
 *                                   cpu.shares for the whole sandbox
 *        pids: <sandbox>/cmds       the running commands' workers and what they start (their
 *                                   pids.max leaves the reserve to the shells in <sandbox>)
 * A command's cgroup is created and its worker moved in while the worker is idle, before it
 * has received the command, so no process of the command ever runs outside it. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct CgroupRoot {
        int v2;            /* dir fd of the daemon's v2 base, -1 until opened */
        int v1_memory;     /* dir fd of the daemon's v1 memory base, or -1 */
        int v1_pids;       /* dir fd of the daemon's v1 pids base, or -1 */
        int v1_cpu;        /* dir fd of the daemon's v1 cpu base, or -1 */
        bool v2_memory, v2_pids, v2_cpu; /* limits set through v2 controllers */
        char v2_path[512];
} CgroupRoot;

typedef struct CgroupSandbox {
        int dir;     /* v2 <base>/<sandbox>; its children init (pid 1 and the shells, for
                      * CLONE_INTO_CGROUP) and cmds (every command's cgroup is below it) are
                      * opened when used: an idle sandbox holds no fd of theirs */
        int v1_memory, v1_pids, v1_cpu; /* v1 <base>/<sandbox>, or -1 */
        int v1_pids_cmds; /* v1 <base>/<sandbox>/cmds of pids, or -1 */
        bool cmds_pids;   /* cmds has a pids limit of its own (the shells' reserve) */
        /* Parked (cgroup_sandbox_park()): every fd above closed, the directories named by
         * `name` below root's bases; has_* say which of them exist. The readers of counters
         * work parked, opening what they read for the read. */
        bool parked;
        bool has_v1_memory, has_v1_pids, has_v1_cpu, has_v1_pids_cmds;
        const CgroupRoot *root;
        char name[64];
} CgroupSandbox;

/* Mount points of the cgroup2 fs and of the v1 hierarchies holding memory, pids and cpu, from
 * /proc/self/mountinfo ("" when absent); each buffer holds size bytes. */
void cgroup_find_mounts(char *v2, char *mem, char *pids, char *cpu, size_t size);
/* This process's cgroup path in the v1 hierarchy with `controller`, "/" if unknown. */
void cgroup_own_v1_path(const char *controller, char *out, size_t size);
/* Turns on favordynmods on the host's cgroup2 hierarchy (a reconfigure of its superblock that
 * keeps every other option). Why: moving a process between cgroups takes the kernel's
 * cgroup_threadgroup_rwsem for writing, and unless favordynmods is on, the first such write
 * after a quiet spell waits for an RCU grace period (~8 ms here; docs/BENCHMARKS.md): every
 * pid 1 joining its v1 cgroups and every command's worker moved into its cgroup pays it. The
 * lock is one for all hierarchies, so the v2 mount's option covers the v1 ones too; forks and
 * exits cost a little more (the rwsem's read side is no longer per-CPU). Needs root in the
 * initial cgroup namespace. Returns 1 when turned on now, 0 when it already was, -ENOENT
 * without a cgroup2 mount, -EOPNOTSUPP when the kernel does not keep it (older than 6.0, or
 * another cgroup namespace), or -errno; `where` gets the mount point. */
int cgroup_favor_dynmods(char *where, size_t size);
/* Finds the hierarchies and creates the daemon's base directories, after removing those of
 * daemons that are gone when sweep (else cgroup_root_sweep() does, later). Returns 0, -ENOTSUP
 * when there is no usable cgroup v2 hierarchy (sbx cannot contain commands then), or -errno. */
int cgroup_root_open(CgroupRoot *r, bool sweep);
/* Removes the base directories of daemons that are gone beside r's, in each hierarchy r uses. */
void cgroup_root_sweep(const CgroupRoot *r);
/* The weight of the base's sandboxes together against what runs beside the base, as cgroup v2
 * cpu.weight (1 to SBX_MAX_CPU_WEIGHT, checked by the caller; v1 cpu.shares scaled alike).
 * Returns 0, -ENOTSUP without a cpu controller, or -errno. */
int cgroup_root_set_weight(const CgroupRoot *r, unsigned weight);
/* Removes the base directories (they must be empty). */
void cgroup_root_close(CgroupRoot *r);

/* What cgroup_sandbox_create() sets on the whole sandbox; 0: no limit. */
typedef struct CgroupLimits {
        uint64_t memory_bytes;
        uint32_t pids;
        uint32_t cpu_millis; /* thousandths of a CPU per SBX_CPU_PERIOD_US */
        uint32_t pids_reserve; /* of `pids`, kept from commands for the session shells */
} CgroupLimits;

/* A sandbox's v1 memory, pids and cpu cgroups made ahead of its request under a name of their
 * own (a spawner's, between requests), renamed to the sandbox's when one takes them: mkdir of
 * a memory cgroup is the slow part of a create's cgroups (the kernel sizes each one's
 * shrinker map by the superblocks the host ever held at once: 135-250 us here after 5,000
 * sandboxes, against 14 us for a rename). Each fd -1 while none of that kind is made. */
typedef struct CgroupSpare {
        int v1_memory, v1_pids, v1_cpu;
} CgroupSpare;
#define CGROUP_SPARE_NAME "spare" /* no sandbox's: their names are 32 hex digits */

/* Makes one missing directory of sp in the hierarchies r's limits use: 1 when it made one, 0
 * when none is missing, -errno. */
int cgroup_spare_fill(const CgroupRoot *r, CgroupSpare *sp);
/* Removes what sp holds. */
void cgroup_spare_drop(const CgroupRoot *r, CgroupSpare *sp);

/* Creates a sandbox's cgroups and sets its limits, with spare's directories where it has them
 * (NULL: none). Returns 0 or -errno. */
int cgroup_sandbox_create(CgroupRoot *r, const char *name, const CgroupLimits *l, CgroupSpare *spare,
                          CgroupSandbox *ret);
/* Opens what exists of the cgroups named `name` (their maker gone before it said): 1 when
 * any does, 0 when none (every fd -1). */
int cgroup_sandbox_find(CgroupRoot *r, const char *name, CgroupSandbox *ret);
/* Whether a cpu controller (v2 or v1) caps the sandboxes' CPU time. */
bool cgroup_has_cpu(const CgroupRoot *r);
/* A command's worker enters (leaves) the commands' share of the pids limit: in v1, where a
 * process's pids cgroup is not its v2 one, it is moved there (back); v2 needs nothing. */
int cgroup_sandbox_command_enter(CgroupSandbox *s, pid_t pid);
int cgroup_sandbox_command_leave(CgroupSandbox *s, pid_t pid);
/* How many forks the commands' pids limit has refused so far (pids.events "max"): -ENOENT
 * where there is no such limit. */
int cgroup_sandbox_pids_refused(const CgroupSandbox *s, uint64_t *ret);
/* How many processes the kernel's OOM killer has killed in the sandbox so far (v2
 * memory.events or v1 memory.oom_control "oom_kill"): -ENOENT without a memory cgroup. */
int cgroup_sandbox_oom_kills(const CgroupSandbox *s, uint64_t *ret);
/* The CPU time its processes used so far, in microseconds (cpu.stat's usage_usec, which every
 * v2 cgroup has with or without the cpu controller). Returns 0 or -errno. */
int cgroup_sandbox_cpu_usec(const CgroupSandbox *s, uint64_t *ret);
/* Its memory (v2 memory.current, or the v1 memory cgroup's usage_in_bytes) and its tasks
 * (pids.current of v2 or v1). -ENOENT for one the host has no controller to tell. */
int cgroup_sandbox_memory(const CgroupSandbox *s, uint64_t *ret);
int cgroup_sandbox_pids(const CgroupSandbox *s, uint64_t *ret);
/* Processes in the cgroup dir (its cgroup.procs, not its children's), or -errno. */
int cgroup_count_procs(int dir);
/* Kills everything in the sandbox, waits up to timeout_ms for it to be empty, removes its
 * directories. Returns 0, or -EBUSY if something was still alive at the deadline. */
int cgroup_sandbox_destroy(CgroupRoot *r, CgroupSandbox *s, int timeout_ms);

/* Removes the sandbox's cgroups if nothing is left in them: 0, -EBUSY while processes
 * remain (call again later), or -errno. */
int cgroup_sandbox_try_remove(CgroupRoot *r, CgroupSandbox *s);

/* An idle sandbox's cgroups give their fds back: the directories stay, named. Unparking
 * reopens them: 0 or -errno (what could not be opened stays -1). */
void cgroup_sandbox_park(CgroupSandbox *s);
int cgroup_sandbox_unpark(CgroupSandbox *s);

/* The sandbox's init and cmds cgroups (v2): a new dir fd (the caller's), or -errno. */
int cgroup_sandbox_open_init(const CgroupSandbox *s);
/* Its v2 directory itself, parked or not: a new dir fd (the caller's), or -errno. */
int cgroup_sandbox_open_dir(const CgroupSandbox *s);
int cgroup_sandbox_open_cmds(const CgroupSandbox *s);
/* Creates the child cgroup `name` (of cmds) of a sandbox; returns its dir fd or -errno. */
int cgroup_child_create(CgroupSandbox *s, const char *name);
/* Opens it: its dir fd or -errno. */
int cgroup_child_open(const CgroupSandbox *s, const char *name);
/* Removes it if empty: 0, -EBUSY while it has processes, or -errno. */
int cgroup_child_remove(CgroupSandbox *s, const char *name);
/* Moves a process (host pid) into the cgroup whose dir fd is given. Returns 0 or -errno. */
int cgroup_move(int dirfd, pid_t pid);
/* Sends sig to every process listed in the cgroup (forks racing it may be missed: the kill
 * that follows is cgroup_kill). Returns how many were signalled, or -errno. */
int cgroup_signal(int dirfd, int sig);
/* The first process listed in the cgroup (host pid), 0 if none, or -errno. */
pid_t cgroup_first_pid(int dirfd);
/* 1 when pid is the one process listed in the cgroup, 0 when not, or -errno (one read of
 * cgroup.procs). */
int cgroup_only_pid(int dirfd, pid_t pid);
/* 1 when pid is listed in the cgroup and nothing else is but maybe also (0: nothing else at
 * all), 0 when not, or -errno. */
int cgroup_only_pids(int dirfd, pid_t pid, pid_t also);
/* SIGKILLs every process in the cgroup and its descendants, forks racing it included. */
int cgroup_kill(int dirfd);
/* 1 if the cgroup has processes, 0 if empty, -errno on failure. */
int cgroup_populated(int dirfd);
/* An fd of cgroup.events for epoll (EPOLLPRI fires on every change), or -errno. */
int cgroup_events_open(int dirfd);
/* The same as cgroup_populated() and cgroup_frozen(), read through the fd being watched:
 * kernfs keeps reporting a change (EPOLLPRI) to each open file until that very file is read
 * again, so a watcher that read another fd would be woken forever. */
int cgroup_events_populated(int events_fd);
int cgroup_events_frozen(int events_fd);
/* cgroup v2 freezer of a cgroup and all below it. Freezing is asynchronous: cgroup_frozen()
 * says 1 once every process is stopped (cgroup.events signals the change). */
int cgroup_freeze(int dirfd, bool frozen);
int cgroup_frozen(int dirfd);
