/* SPDX-License-Identifier: MIT */
#include <fcntl.h>
#include <stdio.h>
#include "base/macro.h"
#include "base/mountfd.h"

int tmpfs_detached(const char *source, const char *mode, uint64_t bytes, uint64_t inodes, bool inode32,
                   unsigned attrs) {
        char size[32], nr[32];
        _cleanup_close_ int fs = sys_fsopen("tmpfs", FSOPEN_CLOEXEC);
        if (fs < 0)
                return negerrno();
        snprintf(size, sizeof size, "%llu", (unsigned long long)bytes);
        snprintf(nr, sizeof nr, "%llu", (unsigned long long)inodes);
        if (sys_fsconfig(fs, FSCONFIG_SET_STRING, "source", source, 0) < 0 ||
            sys_fsconfig(fs, FSCONFIG_SET_STRING, "size", size, 0) < 0 ||
            sys_fsconfig(fs, FSCONFIG_SET_STRING, "nr_inodes", nr, 0) < 0 ||
            sys_fsconfig(fs, FSCONFIG_SET_STRING, "mode", mode, 0) < 0 ||
            (inode32 && sys_fsconfig(fs, FSCONFIG_SET_FLAG, "inode32", NULL, 0) < 0) ||
            sys_fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
                return negerrno();
        int m = sys_fsmount(fs, FSMOUNT_CLOEXEC, attrs);
        return m < 0 ? negerrno() : m;
}
