/* SPDX-License-Identifier: MIT */
/* cgroup v2 containment and v1/v2 limits (memory, pids, cpu); see cgroup.h for the layout. */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include "base/limits.h"
#include "base/log.h"
#include "base/mountfd.h"
#include "base/util.h"
#include "cgroup/cgroup.h"

/* A line of /proc/self/mountinfo: its mount point, filesystem type and superblock options
 * (buffers of MOUNTINFO_FIELD bytes, fstype of 64). False for a line that is not one. */
#define MOUNTINFO_FIELD 1024
static bool mountinfo_line(const char *line, char *mnt, char *fstype, char *super) {
        const char *dash = strstr(line, " - ");
        return dash && sscanf(line, "%*s %*s %*s %*s %1023s", mnt) == 1 &&
               sscanf(dash + 3, "%63s %*s %1023s", fstype, super) == 2;
}

void cgroup_find_mounts(char *v2, char *mem, char *pids, char *cpu, size_t size) {
        v2[0] = mem[0] = pids[0] = cpu[0] = 0;
        FILE *f = fopen("/proc/self/mountinfo", "re");
        if (!f)
                return;
        char line[4096];
        while (fgets(line, sizeof line, f)) {
                char mnt[MOUNTINFO_FIELD], fstype[64], super[MOUNTINFO_FIELD];
                if (!mountinfo_line(line, mnt, fstype, super))
                        continue;
                if (strcmp(fstype, "cgroup2") == 0 && !v2[0])
                        snprintf(v2, size, "%s", mnt);
                else if (strcmp(fstype, "cgroup") == 0) {
                        char *save = NULL;
                        for (char *t = strtok_r(super, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                                if (strcmp(t, "memory") == 0 && !mem[0])
                                        snprintf(mem, size, "%s", mnt);
                                if (strcmp(t, "pids") == 0 && !pids[0])
                                        snprintf(pids, size, "%s", mnt);
                                if (strcmp(t, "cpu") == 0 && !cpu[0])
                                        snprintf(cpu, size, "%s", mnt);
                        }
                }
        }
        fclose(f);
}

/* The first cgroup2 mount of /proc/self/mountinfo: its mount point and superblock options. */
static int v2_mount(char *mnt, size_t mnt_size, char *super, size_t super_size) {
        FILE *f = fopen("/proc/self/mountinfo", "re");
        if (!f)
                return -errno;
        char line[4096];
        int r = -ENOENT;
        while (r < 0 && fgets(line, sizeof line, f)) {
                char m[MOUNTINFO_FIELD], fstype[64], opts[MOUNTINFO_FIELD];
                if (!mountinfo_line(line, m, fstype, opts) || strcmp(fstype, "cgroup2") != 0)
                        continue;
                snprintf(mnt, mnt_size, "%s", m);
                snprintf(super, super_size, "%s", opts);
                r = 0;
        }
        fclose(f);
        return r;
}

/* Whether word is one of list's words, separated by sep (a line's end ends the last): in
 * cgroup.controllers, "cpu" must not match "cpuset". */
static bool has_word(const char *list, const char *word, char sep) {
        size_t n = strlen(word);
        for (const char *p = list; (p = strstr(p, word)); p += n)
                if ((p == list || p[-1] == sep) && (p[n] == 0 || p[n] == sep || p[n] == '\n'))
                        return true;
        return false;
}

int cgroup_favor_dynmods(char *where, size_t size) {
        char super[MOUNTINFO_FIELD];
        int r = v2_mount(where, size, super, sizeof super);
        if (r < 0)
                return r;
        if (has_word(super, "favordynmods", ','))
                return 0;
        /* The very mount mountinfo named (a path with escapes in it is not found: nothing
         * changes), and a cgroup2 one. */
        _cleanup_close_ int dir = open(where, O_PATH | O_DIRECTORY | O_CLOEXEC);
        struct statfs st;
        if (dir < 0 || fstatfs(dir, &st) < 0)
                return -errno;
        if (st.f_type != CGROUP2_SUPER_MAGIC)
                return -ENOENT;
        _cleanup_close_ int fd = sys_fspick(dir, "", FSPICK_CLOEXEC | FSPICK_EMPTY_PATH);
        if (fd < 0)
                return -errno;
        /* A reconfigure sets exactly the flags it is given: every option the superblock has
         * now goes again, and one this code does not know makes fsconfig refuse before
         * anything changed. rw/ro and seclabel are not cgroup2's own. */
        char *save = NULL;
        for (char *t = strtok_r(super, ",", &save); t; t = strtok_r(NULL, ",", &save))
                if (strcmp(t, "rw") != 0 && strcmp(t, "ro") != 0 && strcmp(t, "seclabel") != 0 &&
                    sys_fsconfig(fd, FSCONFIG_SET_FLAG, t, NULL, 0) < 0)
                        return -errno;
        if (sys_fsconfig(fd, FSCONFIG_SET_FLAG, "favordynmods", NULL, 0) < 0 ||
            sys_fsconfig(fd, FSCONFIG_CMD_RECONFIGURE, NULL, NULL, 0) < 0)
                return errno == EINVAL ? -EOPNOTSUPP : -errno;
        /* Outside the initial cgroup namespace the kernel takes the reconfigure and ignores it. */
        char again[MOUNTINFO_FIELD], mnt[MOUNTINFO_FIELD];
        if (v2_mount(mnt, sizeof mnt, again, sizeof again) < 0 || !has_word(again, "favordynmods", ','))
                return -EOPNOTSUPP;
        return 1;
}

void cgroup_own_v1_path(const char *controller, char *out, size_t size) {
        snprintf(out, size, "/");
        FILE *f = fopen("/proc/self/cgroup", "re");
        if (!f)
                return;
        char line[2048];
        while (fgets(line, sizeof line, f)) {
                char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
                if (!c2)
                        continue;
                *c2 = 0;
                char *save = NULL;
                for (char *t = strtok_r(c1 + 1, ",", &save); t; t = strtok_r(NULL, ",", &save))
                        if (strcmp(t, controller) == 0) {
                                (c2 + 1)[strcspn(c2 + 1, "\n")] = 0;
                                snprintf(out, size, "%s", c2 + 1);
                        }
        }
        fclose(f);
}

/* Removes a cgroup directory tree bottom-up; only empty cgroups can go, so this never
 * touches a cgroup that still has processes. */
static void remove_tree(int parent, const char *name, int depth) {
        int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return;
        DIR *d = depth < 4 ? fdopendir(fd) : NULL;
        if (d) {
                struct dirent *de;
                while ((de = readdir(d)))
                        if (de->d_type == DT_DIR && de->d_name[0] != '.')
                                remove_tree(dirfd(d), de->d_name, depth + 1);
                closedir(d);
        } else {
                close(fd);
        }
        (void)unlinkat(parent, name, AT_REMOVEDIR);
}

/* This process's pid namespace, the one its pids and /proc are of: 0 for the host's (the
 * initial one, whose inode number the kernel fixes: PROC_PID_INIT_INO). */
static unsigned long long pid_ns(void) {
        struct stat st;
        if (stat("/proc/self/ns/pid", &st) < 0 || st.st_ino == 0xEFFFFFFCU)
                return 0;
        return (unsigned long long)st.st_ino;
}

/* A base's name: "sbx-PID", then "-nsINO" when PID is of a pid namespace other than the host's
 * (`unshare -p sbx serve`), then "-N" for a process's contexts after its first. */
static void base_name(char *buf, size_t size, unsigned nth) {
        unsigned long long ns = pid_ns();
        int n = snprintf(buf, size, "sbx-%d", (int)getpid());
        if (ns && n > 0 && (size_t)n < size)
                n += snprintf(buf + n, size - (size_t)n, "-ns%llu", ns);
        if (nth && n > 0 && (size_t)n < size)
                snprintf(buf + n, size - (size_t)n, "-%u", nth);
}

/* Whether name is a base of a daemon that is gone: one of this pid namespace (another's pids
 * cannot be looked up here: a daemon in its own would take every host daemon's base for
 * stale) whose process is not this one and does not exist. */
static bool base_stale(const char *name) {
        int pid, k = 0;
        if (sscanf(name, "sbx-%d%n", &pid, &k) != 1 || pid <= 0 || pid == getpid())
                return false;
        const char *rest = name + k;
        unsigned long long ns = 0;
        if (strncmp(rest, "-ns", 3) == 0) {
                char *end;
                errno = 0;
                ns = strtoull(rest + 3, &end, 10);
                if (errno || end == rest + 3 || ns == 0)
                        return false;
                rest = end;
        }
        if (ns != pid_ns())
                return false;
        if (*rest == '-')
                rest += 1 + strspn(rest + 1, "0123456789");
        if (*rest)
                return false; /* not a name base_name() makes */
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/%d", pid);
        return access(proc, F_OK) < 0 && errno == ENOENT;
}

/* A daemon killed with SIGKILL cannot remove its cgroups (its sandboxes died with it, through
 * their pid namespaces). The next daemon removes base directories whose daemon is gone. */
/* skip: a base not to touch (a context's own, swept from a child of its process whose pid
 * is not the base's), or NULL. */
static void sweep_stale_fd(int fd, const char *skip) {
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
                safe_close(fd);
                return;
        }
        struct dirent *de;
        while ((de = readdir(d)))
                if (de->d_type == DT_DIR && (!skip || strcmp(de->d_name, skip) != 0) && base_stale(de->d_name))
                        remove_tree(dirfd(d), de->d_name, 0);
        closedir(d);
}

static void sweep_stale(const char *dir) {
        sweep_stale_fd(open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), NULL);
}

void cgroup_root_sweep(const CgroupRoot *r) {
        const int bases[] = { r->v2, r->v1_memory, r->v1_pids, r->v1_cpu };
        /* Every base of r has the same name, the v2 one's last component. */
        const char *own = strrchr(r->v2_path, '/');
        for (size_t i = 0; i < ELEMENTSOF(bases); i++)
                if (bases[i] >= 0)
                        sweep_stale_fd(openat(bases[i], "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC), own ? own + 1 : NULL);
}

static int open_dir_mkdir(const char *path) {
        if (mkdir(path, 0755) < 0 && errno != EEXIST)
                return negerrno();
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        return fd < 0 ? negerrno() : fd;
}

static int open_v1_base(const char *mnt, const char *controller, const char *leaf, bool sweep) {
        char own[1024], path[2048];
        if (!mnt[0])
                return -ENOENT;
        cgroup_own_v1_path(controller, own, sizeof own);
        snprintf(path, sizeof path, "%s%s", mnt, strcmp(own, "/") == 0 ? "" : own);
        if (sweep)
                sweep_stale(path);
        snprintf(path, sizeof path, "%s%s/%s", mnt, strcmp(own, "/") == 0 ? "" : own, leaf);
        return open_dir_mkdir(path);
}

/* Enables a controller for the sandboxes below the v2 base. */
static bool enable_v2(int fd, const char *ctl, const char *name) {
        char add[32];
        snprintf(add, sizeof add, "+%s", name);
        return has_word(ctl, name, ' ') && write_file_at(fd, "cgroup.subtree_control", add) == 0;
}

/* This process's cgroup v2 path ("0::/path" in /proc/self/cgroup), "" if unknown or
 * longer than size. */
static void own_v2_path(char *out, size_t size) {
        out[0] = 0;
        FILE *f = fopen("/proc/self/cgroup", "re");
        if (!f)
                return;
        char line[2048];
        while (fgets(line, sizeof line, f))
                if (strncmp(line, "0::", 3) == 0) {
                        size_t n = strcspn(line + 3, "\n");
                        /* A path cut short would name another cgroup: none then. */
                        if (n < size) {
                                memcpy(out, line + 3, n);
                                out[n] = 0;
                        }
                        break;
                }
        fclose(f);
}

/* SBX_CGROUP_PARENT=self: the cgroup this process was started in is its own to manage
 * (systemd's Delegate=), and the sandboxes go below it, so stopping the service ends them
 * all. A cgroup that holds processes cannot enable controllers for its children, so the
 * process first moves itself into a leaf of it named "supervisor" (the name systemd's
 * DelegateSubgroup= gives that leaf: a process started in one counts its parent as the
 * delegated cgroup), then enables memory, pids and cpu there. Fills dir (size bytes) with
 * the delegated cgroup's directory; returns 0 or -errno. */
static int delegated_own(const char *mnt, char *dir, size_t size) {
        char own[1024], ctl[256], pid[32];
        own_v2_path(own, sizeof own);
        if (own[0] != '/')
                return -ENOENT;
        size_t n = strlen(own);
        bool in_leaf = n >= 11 && strcmp(own + n - 11, "/supervisor") == 0;
        if (in_leaf)
                own[n - 11] = 0;
        if ((size_t)snprintf(dir, size, "%s%s", mnt, strcmp(own, "/") == 0 ? "" : own) >= size)
                return -ENAMETOOLONG;
        _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return negerrno();
        if (!in_leaf) {
                if (mkdirat(fd, "supervisor", 0755) < 0 && errno != EEXIST)
                        return negerrno();
                snprintf(pid, sizeof pid, "%d", (int)getpid());
                int r = write_file_at(fd, "supervisor/cgroup.procs", pid);
                if (r < 0)
                        return r;
        }
        if (read_file_at(fd, "cgroup.controllers", ctl, sizeof ctl) >= 0) {
                (void)enable_v2(fd, ctl, "memory");
                (void)enable_v2(fd, ctl, "pids");
                (void)enable_v2(fd, ctl, "cpu");
        }
        return 0;
}

int cgroup_root_set_weight(const CgroupRoot *r, unsigned weight) {
        char num[32];
        if (r->v2_cpu) {
                snprintf(num, sizeof num, "%u", weight);
                return write_file_at(r->v2, "cpu.weight", num);
        }
        if (r->v1_cpu < 0)
                return -ENOTSUP;
        /* v1: a nice-0 task is 1024 shares where v2 says 100; the kernel's floor is 2. */
        snprintf(num, sizeof num, "%u", MAX(weight * 1024U / 100U, 2U));
        return write_file_at(r->v1_cpu, "cpu.shares", num);
}

int cgroup_root_open(CgroupRoot *r, bool sweep) {
        char v2[1024], mem[1024], pids[1024], cpu[1024], leaf[64];
        *r = (CgroupRoot){ .v2 = -1, .v1_memory = -1, .v1_pids = -1, .v1_cpu = -1 };
        cgroup_find_mounts(v2, mem, pids, cpu, sizeof v2);
        if (!v2[0])
                return -ENOTSUP;
        /* One base per context: a process may hold several, and one freed removes its base. */
        static unsigned opened;
        base_name(leaf, sizeof leaf, __atomic_fetch_add(&opened, 1, __ATOMIC_RELAXED));
        /* The v2 base sits at the hierarchy's root (a cgroup that holds processes, such as
         * ours under systemd, may not enable controllers for its children), or below a
         * delegated directory the caller names: what an unprivileged user needs. */
        const char *parent = getenv("SBX_CGROUP_PARENT");
        if (parent && strcmp(parent, "self") == 0) {
                char own[1024];
                int rr = delegated_own(v2, own, sizeof own);
                if (rr < 0) {
                        log_error("SBX_CGROUP_PARENT=self: cannot take over this process's cgroup: %s", strerror(-rr));
                        return rr;
                }
                snprintf(v2, sizeof v2, "%s", own);
        } else if (parent && *parent) {
                snprintf(v2, sizeof v2, "%s", parent);
        }
        if (sweep)
                sweep_stale(v2);
        if (strlen(v2) + 1 + strlen(leaf) >= sizeof r->v2_path)
                return -ENAMETOOLONG;
        snprintf(r->v2_path, sizeof r->v2_path, "%.*s/%s", (int)(sizeof r->v2_path - sizeof leaf - 1), v2, leaf);
        int fd = open_dir_mkdir(r->v2_path);
        if (fd < 0)
                return fd;
        r->v2 = fd;
        char ctl[256];
        if (read_file_at(fd, "cgroup.controllers", ctl, sizeof ctl) >= 0) {
                r->v2_memory = enable_v2(fd, ctl, "memory");
                r->v2_pids = enable_v2(fd, ctl, "pids");
                /* The v2 cpu controller is missing where a v1 hierarchy holds it (it is then
                 * absent from cgroup.controllers), and cannot be enabled while a realtime
                 * process sits outside the root cgroup (EINVAL): the v1 one serves then. */
                r->v2_cpu = enable_v2(fd, ctl, "cpu");
        }
        if (!r->v2_memory) {
                int m = open_v1_base(mem, "memory", leaf, sweep);
                r->v1_memory = m >= 0 ? m : -1;
                if (m >= 0)
                        (void)write_file_at(m, "memory.use_hierarchy", "1");
        }
        if (!r->v2_pids) {
                int p = open_v1_base(pids, "pids", leaf, sweep);
                r->v1_pids = p >= 0 ? p : -1;
        }
        if (!r->v2_cpu) {
                int c = open_v1_base(cpu, "cpu", leaf, sweep);
                r->v1_cpu = c >= 0 ? c : -1;
        }
        log_debug("cgroup: v2 %s memory=%s pids=%s cpu=%s", r->v2_path,
                  r->v2_memory ? "v2" : r->v1_memory >= 0 ? "v1" : "none",
                  r->v2_pids ? "v2" : r->v1_pids >= 0 ? "v1" : "none",
                  r->v2_cpu ? "v2" : r->v1_cpu >= 0 ? "v1" : "none");
        return 0;
}

bool cgroup_has_cpu(const CgroupRoot *r) {
        return r->v2_cpu || r->v1_cpu >= 0;
}

static void rmdir_base(int fd) {
        char path[64], target[1024];
        if (fd < 0)
                return;
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(path, target, sizeof target - 1);
        close(fd);
        if (n > 0) {
                target[n] = 0;
                (void)rmdir(target);
        }
}

void cgroup_root_close(CgroupRoot *r) {
        /* A spawner killed before it removed its spares (cgroup_spare_drop()) left them. */
        const int v1[] = { r->v1_memory, r->v1_pids, r->v1_cpu };
        for (size_t i = 0; i < ELEMENTSOF(v1); i++)
                if (v1[i] >= 0)
                        (void)unlinkat(v1[i], CGROUP_SPARE_NAME, AT_REMOVEDIR);
        rmdir_base(r->v2);
        rmdir_base(r->v1_memory);
        rmdir_base(r->v1_pids);
        rmdir_base(r->v1_cpu);
        r->v2 = r->v1_memory = r->v1_pids = r->v1_cpu = -1;
}

/* Makes and opens a cgroup directory; one it made and could not open (out of fds) is removed
 * again, so no failure leaves a directory behind. */
static int mkdirat_open(int dirfd, const char *name) {
        bool made = mkdirat(dirfd, name, 0755) == 0;
        if (!made && errno != EEXIST)
                return negerrno();
        int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) {
                int r = negerrno();
                if (made)
                        (void)unlinkat(dirfd, name, AT_REMOVEDIR);
                return r;
        }
        return fd;
}

/* The spare's directory of a kind renamed to name in base, else a new one. Opened again by
 * its new name: where two controllers share a hierarchy the spare's fds of both kinds are one
 * directory, which the other kind's rename may have given a sandbox already. */
static int take_or_make(int base, int *spare_fd, const char *name) {
        if (spare_fd && *spare_fd >= 0) {
                *spare_fd = safe_close(*spare_fd);
                if (renameat(base, CGROUP_SPARE_NAME, base, name) < 0)
                        (void)unlinkat(base, CGROUP_SPARE_NAME, AT_REMOVEDIR);
        }
        return mkdirat_open(base, name);
}

/* The v1 bases a spare has directories in: those of the limits not set through v2. */
static void spare_bases(const CgroupRoot *r, CgroupSpare *sp, int bases[3], int *fds[3]) {
        bases[0] = r->v2_memory ? -1 : r->v1_memory;
        bases[1] = r->v2_pids ? -1 : r->v1_pids;
        bases[2] = r->v2_cpu ? -1 : r->v1_cpu;
        fds[0] = &sp->v1_memory;
        fds[1] = &sp->v1_pids;
        fds[2] = &sp->v1_cpu;
}

int cgroup_spare_fill(const CgroupRoot *r, CgroupSpare *sp) {
        int bases[3], *fds[3];
        spare_bases(r, sp, bases, fds);
        for (size_t i = 0; i < 3; i++)
                if (bases[i] >= 0 && *fds[i] < 0) {
                        int fd = mkdirat_open(bases[i], CGROUP_SPARE_NAME);
                        if (fd < 0)
                                return fd;
                        *fds[i] = fd;
                        return 1;
                }
        return 0;
}

void cgroup_spare_drop(const CgroupRoot *r, CgroupSpare *sp) {
        int bases[3], *fds[3];
        spare_bases(r, sp, bases, fds);
        for (size_t i = 0; i < 3; i++)
                if (*fds[i] >= 0) {
                        *fds[i] = safe_close(*fds[i]);
                        if (bases[i] >= 0)
                                (void)unlinkat(bases[i], CGROUP_SPARE_NAME, AT_REMOVEDIR);
                }
}

/* cpu.max (v2) or cpu.cfs_quota_us (v1): `millis` thousandths of a CPU in every
 * SBX_CPU_PERIOD_US, and a share of contended CPU in proportion to it (1 CPU: the default
 * weight, 100 in v2, 1024 shares in v1). */
static int set_cpu(const CgroupRoot *r, CgroupSandbox *s, uint32_t millis, CgroupSpare *spare) {
        char num[64];
        uint64_t quota = (uint64_t)millis * SBX_CPU_PERIOD_US / 1000;
        int rr;
        if (r->v2_cpu) {
                snprintf(num, sizeof num, "%llu %u", (unsigned long long)quota, SBX_CPU_PERIOD_US);
                if ((rr = write_file_at(s->dir, "cpu.max", num)) < 0)
                        return rr;
                snprintf(num, sizeof num, "%u", MIN(MAX(millis / 10, 1U), 10000U));
                return write_file_at(s->dir, "cpu.weight", num);
        }
        if (r->v1_cpu < 0)
                return 0;
        s->v1_cpu = take_or_make(r->v1_cpu, spare ? &spare->v1_cpu : NULL, s->name);
        if (s->v1_cpu < 0)
                return s->v1_cpu;
        snprintf(num, sizeof num, "%u", SBX_CPU_PERIOD_US);
        if ((rr = write_file_at(s->v1_cpu, "cpu.cfs_period_us", num)) < 0)
                return rr;
        snprintf(num, sizeof num, "%llu", (unsigned long long)quota);
        rr = write_file_at(s->v1_cpu, "cpu.cfs_quota_us", num);
        /* v1 refuses a quota above an ancestor's (v2 takes the smaller one): the daemon's
         * own cgroup is capped below what was asked, and that cap binds the sandbox. */
        if (rr == -EINVAL)
                log_debug("cgroup: v1 cpu quota %llu us above the daemon's own, which binds",
                          (unsigned long long)quota);
        else if (rr < 0)
                return rr;
        snprintf(num, sizeof num, "%llu", (unsigned long long)MAX(millis * 1024ULL / 1000, 2ULL));
        return write_file_at(s->v1_cpu, "cpu.shares", num);
}

/* The commands' cgroup, whose pids limit leaves pids_reserve of the sandbox's to the session
 * shells: what commands leave running can never take the pids a holder needs to fork the
 * next worker. */
static int make_cmds(const CgroupRoot *r, CgroupSandbox *s, const CgroupLimits *l) {
        char num[32];
        _cleanup_close_ int cmds = mkdirat_open(s->dir, "cmds");
        if (cmds < 0)
                return cmds;
        if (l->pids == 0 || l->pids_reserve == 0 || l->pids_reserve >= l->pids)
                return 0;
        snprintf(num, sizeof num, "%u", l->pids - l->pids_reserve);
        int rr;
        if (r->v2_pids) {
                if ((rr = write_file_at(s->dir, "cgroup.subtree_control", "+pids")) < 0 ||
                    (rr = write_file_at(cmds, "pids.max", num)) < 0)
                        return rr;
        } else if (s->v1_pids >= 0) {
                s->v1_pids_cmds = mkdirat_open(s->v1_pids, "cmds");
                if (s->v1_pids_cmds < 0)
                        return s->v1_pids_cmds;
                if ((rr = write_file_at(s->v1_pids_cmds, "pids.max", num)) < 0)
                        return rr;
        } else {
                return 0;
        }
        s->cmds_pids = true;
        return 0;
}

int cgroup_sandbox_create(CgroupRoot *r, const char *name, const CgroupLimits *l, CgroupSpare *spare,
                          CgroupSandbox *s) {
        char num[32];
        int rr;
        *s = (CgroupSandbox){ .dir = -1, .v1_memory = -1, .v1_pids = -1, .v1_cpu = -1, .v1_pids_cmds = -1, .root = r };
        snprintf(s->name, sizeof s->name, "%s", name);
        s->dir = mkdirat_open(r->v2, name);
        if (s->dir < 0)
                return s->dir;
        if (l->memory_bytes > 0) {
                snprintf(num, sizeof num, "%llu", (unsigned long long)l->memory_bytes);
                if (r->v2_memory) {
                        if ((rr = write_file_at(s->dir, "memory.max", num)) < 0)
                                goto fail;
                        (void)write_file_at(s->dir, "memory.swap.max", "0");
                } else if (r->v1_memory >= 0) {
                        s->v1_memory = take_or_make(r->v1_memory, spare ? &spare->v1_memory : NULL, name);
                        if (s->v1_memory < 0) {
                                rr = s->v1_memory;
                                goto fail;
                        }
                        if ((rr = write_file_at(s->v1_memory, "memory.limit_in_bytes", num)) < 0)
                                goto fail;
                        /* Where swap accounting exists, memory+swap gets the same cap. */
                        (void)write_file_at(s->v1_memory, "memory.memsw.limit_in_bytes", num);
                }
        }
        if (l->pids > 0) {
                snprintf(num, sizeof num, "%u", l->pids);
                if (r->v2_pids) {
                        if ((rr = write_file_at(s->dir, "pids.max", num)) < 0)
                                goto fail;
                } else if (r->v1_pids >= 0) {
                        s->v1_pids = take_or_make(r->v1_pids, spare ? &spare->v1_pids : NULL, name);
                        if (s->v1_pids < 0) {
                                rr = s->v1_pids;
                                goto fail;
                        }
                        if ((rr = write_file_at(s->v1_pids, "pids.max", num)) < 0)
                                goto fail;
                }
        }
        if (l->cpu_millis > 0 && (rr = set_cpu(r, s, l->cpu_millis, spare)) < 0)
                goto fail;
        rr = mkdirat_open(s->dir, "init");
        if (rr < 0)
                goto fail;
        close(rr);
        if ((rr = make_cmds(r, s, l)) < 0)
                goto fail;
        s->has_v1_memory = s->v1_memory >= 0;
        s->has_v1_pids = s->v1_pids >= 0;
        s->has_v1_cpu = s->v1_cpu >= 0;
        s->has_v1_pids_cmds = s->v1_pids_cmds >= 0;
        return 0;
fail:
        (void)cgroup_sandbox_destroy(r, s, 0);
        return rr;
}

int cgroup_sandbox_command_enter(CgroupSandbox *s, pid_t pid) {
        return s->v1_pids_cmds >= 0 ? cgroup_move(s->v1_pids_cmds, pid) : 0;
}

int cgroup_sandbox_command_leave(CgroupSandbox *s, pid_t pid) {
        return s->v1_pids_cmds >= 0 ? cgroup_move(s->v1_pids, pid) : 0;
}

/* The number after "<key> " in a cgroup file of flat keyed counters (pids.events,
 * memory.events, memory.oom_control). -ENOENT where the file or the key is missing. */
static int read_counter(int dir, const char *file, const char *key, uint64_t *ret) {
        char buf[512];
        ssize_t n = dir >= 0 ? read_file_at(dir, file, buf, sizeof buf) : -ENOENT;
        if (n < 0)
                return (int)n;
        size_t klen = strlen(key);
        unsigned long long v;
        for (const char *p = buf; (p = strstr(p, key)); p += klen)
                if ((p == buf || p[-1] == '\n') && p[klen] == ' ' && sscanf(p + klen + 1, "%llu", &v) == 1) {
                        *ret = v;
                        return 0;
                }
        return -ENOENT;
}

/* Where a reader of s reads: the held fd, or, parked, the directory opened for the read into
 * *tmp (the caller's to close). `base` is the root's base of that hierarchy, `sub` a path below
 * the sandbox's directory or NULL; -ENOENT where the directory does not exist. */
static int dir_for_read(const CgroupSandbox *s, int held, bool has, int base, const char *sub, int *tmp) {
        if (!s->parked)
                return held;
        if (!has || base < 0)
                return -ENOENT;
        char path[128];
        if ((size_t)snprintf(path, sizeof path, "%s%s%s", s->name, sub ? "/" : "", sub ? sub : "") >= sizeof path)
                return -ENAMETOOLONG;
        *tmp = openat(base, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        return *tmp < 0 ? negerrno() : *tmp;
}

static int v2_for_read(const CgroupSandbox *s, int *tmp) {
        return dir_for_read(s, s->dir, true, s->root ? s->root->v2 : -1, NULL, tmp);
}

int cgroup_sandbox_pids_refused(const CgroupSandbox *s, uint64_t *ret) {
        _cleanup_close_ int tmp = -1;
        if (s->has_v1_pids_cmds)
                return read_counter(dir_for_read(s, s->v1_pids_cmds, true, s->root ? s->root->v1_pids : -1, "cmds", &tmp),
                                    "pids.events", "max", ret);
        _cleanup_close_ int cmds = cgroup_sandbox_open_cmds(s);
        return cmds < 0 ? cmds : read_counter(cmds, "pids.events", "max", ret);
}

int cgroup_sandbox_oom_kills(const CgroupSandbox *s, uint64_t *ret) {
        _cleanup_close_ int tmp = -1;
        bool v1 = s->has_v1_memory;
        int dir = v1 ? dir_for_read(s, s->v1_memory, true, s->root ? s->root->v1_memory : -1, NULL, &tmp)
                     : v2_for_read(s, &tmp);
        return read_counter(dir, v1 ? "memory.oom_control" : "memory.events", "oom_kill", ret);
}

int cgroup_sandbox_cpu_usec(const CgroupSandbox *s, uint64_t *ret) {
        _cleanup_close_ int tmp = -1;
        return read_counter(v2_for_read(s, &tmp), "cpu.stat", "usage_usec", ret);
}

/* A file holding one number. */
static int read_number(int dir, const char *file, uint64_t *ret) {
        char buf[64];
        ssize_t n = dir >= 0 ? read_file_at(dir, file, buf, sizeof buf) : -ENOENT;
        unsigned long long v;
        if (n < 0)
                return (int)n;
        if (sscanf(buf, "%llu", &v) != 1)
                return -EINVAL;
        *ret = v;
        return 0;
}

int cgroup_sandbox_memory(const CgroupSandbox *s, uint64_t *ret) {
        _cleanup_close_ int tmp = -1;
        return s->has_v1_memory
                       ? read_number(dir_for_read(s, s->v1_memory, true, s->root ? s->root->v1_memory : -1, NULL, &tmp),
                                     "memory.usage_in_bytes", ret)
                       : read_number(v2_for_read(s, &tmp), "memory.current", ret);
}

int cgroup_sandbox_pids(const CgroupSandbox *s, uint64_t *ret) {
        _cleanup_close_ int tmp = -1;
        return s->has_v1_pids
                       ? read_number(dir_for_read(s, s->v1_pids, true, s->root ? s->root->v1_pids : -1, NULL, &tmp),
                                     "pids.current", ret)
                       : read_number(v2_for_read(s, &tmp), "pids.current", ret);
}

void cgroup_sandbox_park(CgroupSandbox *s) {
        if (s->parked)
                return;
        s->dir = safe_close(s->dir);
        s->v1_memory = safe_close(s->v1_memory);
        s->v1_pids = safe_close(s->v1_pids);
        s->v1_cpu = safe_close(s->v1_cpu);
        s->v1_pids_cmds = safe_close(s->v1_pids_cmds);
        s->parked = true;
}

/* Reopens one of a parked sandbox's directories into *fd; 0 or -errno. */
static int reopen(int base, const char *name, const char *sub, int *fd) {
        if (base < 0)
                return -ENOENT;
        char path[128];
        if ((size_t)snprintf(path, sizeof path, "%s%s%s", name, sub ? "/" : "", sub ? sub : "") >= sizeof path)
                return -ENAMETOOLONG;
        *fd = openat(base, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        return *fd < 0 ? negerrno() : 0;
}

int cgroup_sandbox_find(CgroupRoot *r, const char *name, CgroupSandbox *ret) {
        *ret = (CgroupSandbox){ .dir = -1, .v1_memory = -1, .v1_pids = -1, .v1_cpu = -1, .v1_pids_cmds = -1, .root = r };
        snprintf(ret->name, sizeof ret->name, "%s", name);
        (void)reopen(r->v2, name, NULL, &ret->dir);
        (void)reopen(r->v1_memory, name, NULL, &ret->v1_memory);
        (void)reopen(r->v1_pids, name, NULL, &ret->v1_pids);
        (void)reopen(r->v1_cpu, name, NULL, &ret->v1_cpu);
        (void)reopen(r->v1_pids, name, "cmds", &ret->v1_pids_cmds);
        ret->has_v1_memory = ret->v1_memory >= 0;
        ret->has_v1_pids = ret->v1_pids >= 0;
        ret->has_v1_cpu = ret->v1_cpu >= 0;
        ret->has_v1_pids_cmds = ret->v1_pids_cmds >= 0;
        return ret->dir >= 0 || ret->v1_memory >= 0 || ret->v1_pids >= 0 || ret->v1_cpu >= 0;
}

int cgroup_sandbox_unpark(CgroupSandbox *s) {
        if (!s->parked)
                return 0;
        const CgroupRoot *r = s->root;
        /* All or nothing: out of fds, it stays parked. */
        int fd[5] = { -1, -1, -1, -1, -1 }, k = reopen(r->v2, s->name, NULL, &fd[0]);
        if (k == 0 && s->has_v1_memory)
                k = reopen(r->v1_memory, s->name, NULL, &fd[1]);
        if (k == 0 && s->has_v1_pids)
                k = reopen(r->v1_pids, s->name, NULL, &fd[2]);
        if (k == 0 && s->has_v1_cpu)
                k = reopen(r->v1_cpu, s->name, NULL, &fd[3]);
        if (k == 0 && s->has_v1_pids_cmds)
                k = reopen(r->v1_pids, s->name, "cmds", &fd[4]);
        if (k < 0) {
                for (size_t i = 0; i < ELEMENTSOF(fd); i++)
                        safe_close(fd[i]);
                return k;
        }
        s->dir = fd[0], s->v1_memory = fd[1], s->v1_pids = fd[2], s->v1_cpu = fd[3], s->v1_pids_cmds = fd[4];
        s->parked = false;
        return 0;
}

int cgroup_count_procs(int dir) {
        char buf[4096];
        _cleanup_close_ int fd = openat(dir, "cgroup.procs", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return negerrno();
        int n = 0;
        for (ssize_t k; (k = read(fd, buf, sizeof buf)) > 0;)
                for (ssize_t i = 0; i < k; i++)
                        n += buf[i] == '\n';
        return n;
}

/* Calls fn with each pid listed in the cgroup until it returns false; -errno if unreadable. */
static int each_pid(int dir, bool (*fn)(pid_t pid, void *ud), void *ud) {
        char buf[4096];
        _cleanup_close_ int fd = openat(dir, "cgroup.procs", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return negerrno();
        size_t have = 0;
        for (ssize_t k; (k = read(fd, buf + have, sizeof buf - 1 - have)) > 0;) {
                have += (size_t)k;
                buf[have] = 0;
                char *line = buf, *nl;
                while ((nl = strchr(line, '\n'))) {
                        *nl = 0;
                        int pid = atoi(line);
                        if (pid > 0 && !fn((pid_t)pid, ud))
                                return 0;
                        line = nl + 1;
                }
                have = strlen(line);
                memmove(buf, line, have);
        }
        return 0;
}

typedef struct SignalAll {
        int sig, n;
} SignalAll;

static bool signal_one(pid_t pid, void *ud) {
        SignalAll *s = ud;
        if (kill(pid, s->sig) == 0)
                s->n++;
        return true;
}

int cgroup_signal(int dirfd, int sig) {
        SignalAll s = { sig, 0 };
        int r = each_pid(dirfd, signal_one, &s);
        return r < 0 ? r : s.n;
}

static bool first_one(pid_t pid, void *ud) {
        *(pid_t *)ud = pid;
        return false;
}

pid_t cgroup_first_pid(int dirfd) {
        pid_t first = 0;
        int r = each_pid(dirfd, first_one, &first);
        return r < 0 ? r : first;
}

int cgroup_only_pid(int dirfd, pid_t pid) {
        /* Every line counts, "0" too: a process of a pid namespace this one cannot see. */
        char buf[64], want[32];
        _cleanup_close_ int fd = openat(dirfd, "cgroup.procs", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return negerrno();
        int w = snprintf(want, sizeof want, "%d\n", (int)pid);
        size_t have = 0;
        for (ssize_t k; (k = read(fd, buf + have, sizeof buf - have)) > 0;) {
                have += (size_t)k;
                if (have > (size_t)w)
                        return 0; /* more than pid's one line */
        }
        return have == (size_t)w && memcmp(buf, want, (size_t)w) == 0;
}

int cgroup_only_pids(int dirfd, pid_t pid, pid_t also) {
        if (also <= 0)
                return cgroup_only_pid(dirfd, pid);
        char buf[96];
        _cleanup_close_ int fd = openat(dirfd, "cgroup.procs", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return negerrno();
        size_t have = 0;
        for (ssize_t k; (k = read(fd, buf + have, sizeof buf - 1 - have)) > 0;)
                if ((have += (size_t)k) == sizeof buf - 1)
                        return 0; /* more than two pids' lines */
        buf[have] = 0;
        bool seen = false;
        char *save = NULL;
        for (char *t = strtok_r(buf, "\n", &save); t; t = strtok_r(NULL, "\n", &save)) {
                long v = strtol(t, NULL, 10);
                if (v == pid)
                        seen = true;
                else if (v != also)
                        return 0;
        }
        return seen;
}

static int open_dir_at(int dirfd, const char *name) {
        int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        return fd < 0 ? negerrno() : fd;
}

/* The sandbox's v2 directory, or parked, opened into *tmp; -EBADF when it has none. */
static int v2_dir(const CgroupSandbox *s, int *tmp) {
        if (!s->parked)
                return s->dir < 0 ? -EBADF : s->dir;
        return v2_for_read(s, tmp);
}

static int open_below(const CgroupSandbox *s, const char *path) {
        _cleanup_close_ int tmp = -1;
        int dir = v2_dir(s, &tmp);
        return dir < 0 ? dir : open_dir_at(dir, path);
}

int cgroup_sandbox_open_init(const CgroupSandbox *s) { return open_below(s, "init"); }
int cgroup_sandbox_open_dir(const CgroupSandbox *s) { return open_below(s, "."); }
int cgroup_sandbox_open_cmds(const CgroupSandbox *s) { return open_below(s, "cmds"); }

/* "cmds/<name>" into buf, or -ENAMETOOLONG. */
static int child_path(const char *name, char *buf, size_t size) {
        int n = snprintf(buf, size, "cmds/%s", name);
        return n < 0 || (size_t)n >= size || strchr(name, '/') ? -ENAMETOOLONG : 0;
}

int cgroup_child_create(CgroupSandbox *s, const char *name) {
        char path[96];
        int r = child_path(name, path, sizeof path);
        _cleanup_close_ int tmp = -1;
        int dir = r < 0 ? r : v2_dir(s, &tmp);
        return dir < 0 ? dir : mkdirat_open(dir, path);
}

int cgroup_child_open(const CgroupSandbox *s, const char *name) {
        char path[96];
        int r = child_path(name, path, sizeof path);
        return r < 0 ? r : open_below(s, path);
}

int cgroup_child_remove(CgroupSandbox *s, const char *name) {
        char path[96];
        int r = child_path(name, path, sizeof path);
        _cleanup_close_ int tmp = -1;
        int dir = r < 0 ? r : v2_dir(s, &tmp);
        if (dir < 0)
                return dir;
        if (unlinkat(dir, path, AT_REMOVEDIR) < 0)
                return negerrno();
        return 0;
}

int cgroup_move(int dirfd, pid_t pid) {
        char num[32];
        snprintf(num, sizeof num, "%d", (int)pid);
        return write_file_at(dirfd, "cgroup.procs", num);
}

int cgroup_kill(int dirfd) {
        return write_file_at(dirfd, "cgroup.kill", "1");
}

int cgroup_populated(int dirfd) {
        char buf[256];
        ssize_t n = read_file_at(dirfd, "cgroup.events", buf, sizeof buf);
        if (n < 0)
                return (int)n;
        return strstr(buf, "populated 1") ? 1 : 0;
}

int cgroup_freeze(int dirfd, bool frozen) {
        return write_file_at(dirfd, "cgroup.freeze", frozen ? "1" : "0");
}

int cgroup_frozen(int dirfd) {
        char buf[256];
        ssize_t n = read_file_at(dirfd, "cgroup.events", buf, sizeof buf);
        if (n < 0)
                return (int)n;
        return strstr(buf, "frozen 1") ? 1 : 0;
}

int cgroup_events_open(int dirfd) {
        int fd = openat(dirfd, "cgroup.events", O_RDONLY | O_CLOEXEC);
        return fd < 0 ? negerrno() : fd;
}

/* Reads an open cgroup.events from its start; 1 if it has `key` 1, 0 if not, -errno. */
static int events_flag(int fd, const char *key) {
        char buf[256], want[64];
        ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        if (n < 0)
                return negerrno();
        buf[n] = 0;
        snprintf(want, sizeof want, "%s 1", key);
        return strstr(buf, want) ? 1 : 0;
}

int cgroup_events_populated(int events_fd) { return events_flag(events_fd, "populated"); }
int cgroup_events_frozen(int events_fd) { return events_flag(events_fd, "frozen"); }

/* Waits for a cgroup to be empty, up to timeout_ms, watching cgroup.events. */
static int wait_empty(int dirfd, int timeout_ms) {
        _cleanup_close_ int ev = cgroup_events_open(dirfd);
        uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
        for (;;) {
                int p = cgroup_populated(dirfd);
                if (p <= 0)
                        return p;
                uint64_t now = now_ms();
                if (ev < 0 || now >= deadline)
                        return -EBUSY;
                struct pollfd pfd = { .fd = ev, .events = POLLPRI };
                (void)poll(&pfd, 1, (int)(deadline - now));
        }
}

/* Removes every child cgroup of dirfd, then nothing else. */
static void remove_children(int dirfd) {
        int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return;
        DIR *d = fdopendir(fd);
        if (!d) {
                close(fd);
                return;
        }
        struct dirent *de;
        while ((de = readdir(d)))
                if (de->d_type == DT_DIR && de->d_name[0] != '.')
                        (void)unlinkat(dirfd, de->d_name, AT_REMOVEDIR);
        closedir(d);
}

int cgroup_sandbox_try_remove(CgroupRoot *r, CgroupSandbox *s) {
        (void)cgroup_sandbox_unpark(s);
        if (s->dir >= 0 && cgroup_populated(s->dir) > 0)
                return -EBUSY;
        return cgroup_sandbox_destroy(r, s, 0);
}

int cgroup_sandbox_destroy(CgroupRoot *r, CgroupSandbox *s, int timeout_ms) {
        int ret = 0;
        (void)cgroup_sandbox_unpark(s);
        if (s->dir >= 0) {
                (void)cgroup_kill(s->dir);
                if (wait_empty(s->dir, timeout_ms) != 0)
                        ret = -EBUSY;
                int cmds = open_dir_at(s->dir, "cmds");
                if (cmds >= 0)
                        remove_children(cmds);
                safe_close(cmds);
                remove_children(s->dir);
                s->dir = safe_close(s->dir);
                if (unlinkat(r->v2, s->name, AT_REMOVEDIR) < 0 && errno != ENOENT)
                        ret = negerrno();
        }
        if (s->v1_memory >= 0) {
                s->v1_memory = safe_close(s->v1_memory);
                (void)unlinkat(r->v1_memory, s->name, AT_REMOVEDIR);
        }
        if (s->v1_pids_cmds >= 0) {
                s->v1_pids_cmds = safe_close(s->v1_pids_cmds);
                (void)unlinkat(s->v1_pids, "cmds", AT_REMOVEDIR);
        }
        if (s->v1_pids >= 0) {
                s->v1_pids = safe_close(s->v1_pids);
                (void)unlinkat(r->v1_pids, s->name, AT_REMOVEDIR);
        }
        if (s->v1_cpu >= 0) {
                s->v1_cpu = safe_close(s->v1_cpu);
                (void)unlinkat(r->v1_cpu, s->name, AT_REMOVEDIR);
        }
        return ret;
}
