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

int changes_mark(int fd, int root_fd, const char *const *dirs, size_t n, bool all) {
        (void)fanotify_mark(fd, FAN_MARK_FLUSH | FAN_MARK_FILESYSTEM, 0, AT_FDCWD, NULL);
        for (size_t i = 0; i < n; i++)
                if (fanotify_mark(fd, FAN_MARK_ADD | FAN_MARK_FILESYSTEM, all ? CHANGES_MASK : FAN_CLOSE_WRITE, root_fd,
                                  dirs[i]) < 0)
                        return negerrno();
        return 0;
}

static void add_closed(ChangesSeen *seen, ino_t ino) {
        for (size_t i = 0; i < seen->n_closed; i++)
                if (seen->closed[i] == ino)
                        return;
        if (seen->n_closed >= SBX_FORK_CLOSED_MAX) {
                seen->closed_lost = true;
                return;
        }
        ino_t *v = realloc(seen->closed, (seen->n_closed + 1) * sizeof *v);
        if (!v) {
                seen->closed_lost = true;
                return;
        }
        seen->closed = v;
        seen->closed[seen->n_closed++] = ino;
}

/* The inode a FAN_CLOSE_WRITE event names, through its file handle. */
static void closed_event(ChangesSeen *seen, int mount_fd, const struct fanotify_event_metadata *md) {
        for (size_t off = md->metadata_len; off + sizeof(struct fanotify_event_info_header) <= md->event_len;) {
                const struct fanotify_event_info_header *h = (const void *)((const char *)md + off);
                if (h->len == 0 || off + h->len > md->event_len)
                        break;
                if (h->info_type == FAN_EVENT_INFO_TYPE_FID &&
                    h->len >= sizeof(struct fanotify_event_info_fid) + sizeof(struct file_handle)) {
                        const struct fanotify_event_info_fid *fid = (const void *)h;
                        struct file_handle *fh = (struct file_handle *)fid->handle;
                        int f = open_by_handle_at(mount_fd, fh, O_PATH | O_CLOEXEC);
                        struct stat st;
                        if (f >= 0 && fstat(f, &st) == 0)
                                add_closed(seen, st.st_ino);
                        else if (errno != ESTALE)
                                seen->closed_lost = true; /* (ESTALE: the file is gone) */
                        safe_close(f);
                        return;
                }
                off += h->len;
        }
        seen->closed_lost = true;
}

int changes_read(int fd, int mount_fd, ChangesSeen *seen) {
        char buf[16384] __attribute__((aligned(8)));
        for (;;) {
                ssize_t k = read(fd, buf, sizeof buf);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0 && errno == EAGAIN)
                        return 0;
                if (k < 0)
                        return negerrno();
                if (k == 0)
                        return 0;
                seen->any = true;
                const struct fanotify_event_metadata *md = (const void *)buf;
                for (size_t len = (size_t)k; FAN_EVENT_OK(md, len); md = FAN_EVENT_NEXT(md, len)) {
                        if (md->mask & FAN_Q_OVERFLOW)
                                seen->closed_lost = true;
                        else if (md->mask & FAN_CLOSE_WRITE)
                                closed_event(seen, mount_fd, md);
                }
        }
}

void changes_seen_done(ChangesSeen *seen) {
        free(seen->closed);
        *seen = (ChangesSeen){ 0 };
}

static int cmp_ino(const void *a, const void *b) {
        ino_t x = *(const ino_t *)a, y = *(const ino_t *)b;
        return (x > y) - (x < y);
}

void changes_seen_sort(ChangesSeen *seen) {
        if (seen->n_closed > 1)
                qsort(seen->closed, seen->n_closed, sizeof *seen->closed, cmp_ino);
}

bool changes_closed_has(const ino_t *closed, size_t n, ino_t ino) {
        return n > 0 && bsearch(&ino, closed, n, sizeof *closed, cmp_ino) != NULL;
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
