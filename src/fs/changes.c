/* SPDX-License-Identifier: MIT */
/* Change tracking of a sandbox's trees for forks (see changes.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fanotify.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include "base/macro.h"
#include "base/util.h"
#include "fs/changes.h"

/* Every change the kernel reports, on directories too. Not FAN_ACCESS nor FAN_OPEN: reading
 * changes nothing. */
#define CHANGES_MASK                                                                                       \
        (FAN_MODIFY | FAN_ATTRIB | FAN_CLOSE_WRITE | FAN_CREATE | FAN_DELETE | FAN_MOVED_FROM | FAN_MOVED_TO | \
         FAN_DELETE_SELF | FAN_MOVE_SELF | FAN_ONDIR)

int changes_new(int *ret_fd) {
        int fd = fanotify_init(FAN_CLASS_NOTIF | FAN_REPORT_FID | FAN_CLOEXEC | FAN_NONBLOCK, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return negerrno();
        *ret_fd = fd;
        return 0;
}

int changes_mark(int fd, int root_fd, const char *const *dirs, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (fanotify_mark(fd, FAN_MARK_ADD | FAN_MARK_FILESYSTEM, CHANGES_MASK, root_fd, dirs[i]) < 0)
                        return negerrno();
        return 0;
}

int changes_unmark(int fd) {
        return fanotify_mark(fd, FAN_MARK_FLUSH | FAN_MARK_FILESYSTEM, 0, AT_FDCWD, NULL) < 0 ? negerrno() : 0;
}

int changes_drain(int fd) {
        /* Events with file ids are small: one read takes hundreds. */
        char buf[16384];
        int any = 0;
        for (;;) {
                ssize_t k = read(fd, buf, sizeof buf);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0 && errno == EAGAIN)
                        return any;
                if (k < 0)
                        return negerrno();
                if (k == 0)
                        return any;
                any = 1;
        }
}

typedef struct Mapped {
        ChangesFile *v;
        size_t n, cap;
} Mapped;

/* Whether a line of /proc/PID/maps is a shared, writable mapping of a file: which. */
static bool shared_writable(const char *line, ChangesFile *ret) {
        char perms[8];
        unsigned maj, min;
        unsigned long long inode;
        if (sscanf(line, "%*s %7s %*s %x:%x %llu", perms, &maj, &min, &inode) != 4)
                return false;
        *ret = (ChangesFile){ makedev(maj, min), (ino_t)inode };
        return perms[1] == 'w' && perms[3] == 's' && inode != 0;
}

static int maps_writable(pid_t pid, Mapped *m) {
        char path[64], line[4096];
        snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
        FILE *f = fopen(path, "re");
        if (!f)
                return errno == ENOENT || errno == ESRCH ? 0 : negerrno();
        int found = 0;
        ChangesFile cf;
        while (fgets(line, sizeof line, f)) {
                if (shared_writable(line, &cf)) {
                        found = 1;
                        if (m->n == m->cap) {
                                size_t cap = m->cap ? 2 * m->cap : 16;
                                ChangesFile *v = realloc(m->v, cap * sizeof *v);
                                if (!v) {
                                        fclose(f);
                                        return -ENOMEM;
                                }
                                m->v = v;
                                m->cap = cap;
                        }
                        m->v[m->n++] = cf;
                }
                /* The rest of an overlong line (a long path) is not a line of its own. */
                while (!strchr(line, '\n') && fgets(line, sizeof line, f))
                        ;
        }
        fclose(f);
        return found;
}

static int fd_writable(int fddir, int infodir, const char *name) {
        struct stat st;
        if (fstatat(fddir, name, &st, 0) < 0 || !S_ISREG(st.st_mode))
                return 0;
        char info[512];
        ssize_t k = read_file_at(infodir, name, info, sizeof info);
        if (k <= 0)
                return 0;
        const char *p = strstr(info, "flags:");
        if (!p)
                return 1; /* cannot tell: counted */
        unsigned long flags = strtoul(p + 6, NULL, 8);
        if ((flags & O_ACCMODE) == O_RDONLY)
                return 0;
        /* A memfd sealed against writes (pid 1's bash builtin) cannot change. */
        _cleanup_close_ int self = openat(fddir, name, O_RDONLY | O_CLOEXEC);
        int seals = self >= 0 ? fcntl(self, F_GET_SEALS) : -1;
        return !(seals > 0 && (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)));
}

static int fds_writable(pid_t pid) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
        _cleanup_close_ int fddir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        snprintf(path, sizeof path, "/proc/%d/fdinfo", (int)pid);
        _cleanup_close_ int infodir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fddir < 0 || infodir < 0)
                return errno == ENOENT || errno == ESRCH ? 0 : negerrno();
        int dup_fd = dup(fddir);
        DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
        if (!d) {
                safe_close(dup_fd);
                return negerrno();
        }
        int found = 0;
        struct dirent *de;
        while (!found && (de = readdir(d)))
                if (de->d_name[0] != '.')
                        found = fd_writable(fddir, infodir, de->d_name);
        closedir(d);
        return found;
}

int changes_writers(const pid_t *pids, size_t n, ChangesFile **ret_mapped, size_t *ret_n_mapped) {
        Mapped m = { 0 };
        int any = 0;
        for (size_t i = 0; i < n; i++) {
                /* Every process's maps (the list must be whole), fds until one is found. */
                int r = maps_writable(pids[i], &m);
                if (r == 0 && !any)
                        r = fds_writable(pids[i]);
                if (r < 0) {
                        free(m.v);
                        return r;
                }
                any |= r;
        }
        *ret_mapped = m.v;
        *ret_n_mapped = m.n;
        return any;
}
