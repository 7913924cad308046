/* SPDX-License-Identifier: MIT */
/* Change tracking of a sandbox's trees for forks (see changes.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fanotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <linux/mount.h>
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

static int sys_fspick(int dfd, const char *path, unsigned flags) { return (int)syscall(SYS_fspick, dfd, path, flags); }
static int sys_fsconfig(int fd, unsigned cmd, const char *key, const void *value, int aux) {
        return (int)syscall(SYS_fsconfig, fd, cmd, key, value, aux);
}

/* Sets the filesystem's read-only flag (ro) or clears it. */
static int reconfigure(int root_fd, const char *dir, bool ro) {
        _cleanup_close_ int fc = sys_fspick(root_fd, dir, FSPICK_CLOEXEC | FSPICK_SYMLINK_NOFOLLOW | FSPICK_NO_AUTOMOUNT);
        if (fc < 0)
                return negerrno();
        if (sys_fsconfig(fc, FSCONFIG_SET_FLAG, ro ? "ro" : "rw", NULL, 0) < 0 ||
            sys_fsconfig(fc, FSCONFIG_CMD_RECONFIGURE, NULL, NULL, 0) < 0)
                return negerrno();
        return 0;
}

int changes_fs_writers(int root_fd, const char *dir) {
        int r = reconfigure(root_fd, dir, true);
        if (r == -EBUSY)
                return 1;
        if (r < 0)
                return r;
        /* Writable again: a failure here would leave the sandbox's tree read-only. */
        for (int i = 0; i < 5; i++)
                if ((r = reconfigure(root_fd, dir, false)) == 0)
                        return 0;
        return r;
}

int changes_file_writers(int dir, const char *name) {
        /* Non-blocking: a lease the sandbox holds on its file must not hold the open up. */
        _cleanup_close_ int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0)
                return errno == EWOULDBLOCK ? 1 : negerrno();
        if (fcntl(fd, F_SETLEASE, F_RDLCK) < 0)
                return errno == EAGAIN ? 1 : negerrno();
        (void)fcntl(fd, F_SETLEASE, F_UNLCK);
        return 0;
}
