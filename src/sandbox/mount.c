/* SPDX-License-Identifier: MIT */
/* The sandbox root: a read-only skeleton tmpfs holding read-only binds of the host's system
 * directories, a generated /etc, a minimal /dev, a fresh /proc, and one size- and
 * inode-limited tmpfs that backs both /tmp and /home/user. Nothing else of the host is
 * reachable: the old root is detached after pivot_root. */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/mountfd.h"
#include "sandbox/mount.h"

/* System directories taken from the host (or the given rootfs), read-only. A symlink on the
 * host (merged /usr) is recreated as the same symlink. */
static const char *const system_dirs[] = {
        "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32",
};

/* Files and directories of the host's /etc that programs need to work and that hold nothing
 * about the host's users or secrets. passwd, group, hosts, hostname and nsswitch.conf are
 * generated instead. */
static const char *const etc_binds[] = {
        "alternatives", "bash.bashrc", "ca-certificates", "ca-certificates.conf",
        "debian_version", "gai.conf", "inputrc", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
        "localtime", "magic", "magic.mime", "mime.types", "os-release", "profile",
        "protocols", "python3", "python3.11", "services", "ssl", "terminfo", "timezone",
        "perl", "gitconfig", "vim", "xdg", "mailcap", "matplotlibrc",
};

/* Device nodes bound from the host's /dev. */
static const char *const dev_nodes[] = { "null", "zero", "full", "random", "urandom", "tty" };

static _printf_(3, 4) int fail(char *err, size_t errlen, const char *fmt, ...) {
        int r = negerrno();
        char what[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
        snprintf(err, errlen, "%s: %s", what, strerror(-r));
        return r;
}

static int write_text_at(int dir, const char *path, const char *text, mode_t mode) {
        _cleanup_close_ int fd = openat(dir, path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
        if (fd < 0)
                return negerrno();
        size_t len = strlen(text);
        return write(fd, text, len) == (ssize_t)len ? 0 : -EIO;
}

static int write_text(const char *path, const char *text, mode_t mode) {
        return write_text_at(AT_FDCWD, path, text, mode);
}

/* Bind-mounts src onto dst (created as a file or directory to match) read-only. Missing
 * sources are skipped: returns 0, or -errno on a real failure (one the sandbox's ids may not
 * reach, too). */
static int bind_ro(const char *src, const char *dst, unsigned long extra) {
        struct stat st;
        if (lstat(src, &st) < 0)
                return errno == ENOENT || errno == ENOTDIR ? 0 : negerrno();
        if (S_ISLNK(st.st_mode)) {
                char target[SBX_MAX_PATH_BYTES];
                ssize_t n = readlink(src, target, sizeof target - 1);
                if (n < 0)
                        return negerrno();
                target[n] = 0;
                return symlink(target, dst) < 0 ? negerrno() : 0;
        }
        if (S_ISDIR(st.st_mode)) {
                if (mkdir(dst, 0755) < 0 && errno != EEXIST)
                        return negerrno();
        } else {
                int fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
                if (fd < 0)
                        return negerrno();
                close(fd);
        }
        if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
                return negerrno();
        /* Read-only, nosuid, nodev for the whole tree, submounts included (a remount covers
         * only the top mount); the remount remains for kernels without mount_setattr. */
        struct mount_attr attr = { .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV };
        if (mount_setattr(AT_FDCWD, dst, AT_RECURSIVE, &attr, sizeof attr) == 0)
                return 0;
        if (mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | extra, NULL) < 0)
                return negerrno();
        return 0;
}

/* The trust store of a sandbox with proxy secrets: the host's (or rootfs's) bundle with the
 * sandbox's CA after it, written into the skeleton (read-only once it is finished) and bound
 * over the bundle's usual path, so clients that read no variable trust it too. The CA's key
 * is not here: only its certificate. */
/* in: the root's bundle (read, -1 when none); target: where it is, to bind the new one over
 * (NULL: nowhere, the variables suffice). */
static int make_trust_store(const MountConfig *c, int in, const char *target, char *err, size_t errlen) {
        char buf[16384];
        if ((mkdir("etc/sbx", 0755) < 0 && errno != EEXIST) || write_text(&SBX_TRUST_CA[1], c->trust_pem, 0644) < 0)
                return fail(err, errlen, "write %s", SBX_TRUST_CA);
        _cleanup_close_ int out = open(&SBX_TRUST_BUNDLE[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (out < 0)
                return fail(err, errlen, "write %s", SBX_TRUST_BUNDLE);
        for (ssize_t n; in >= 0 && (n = read(in, buf, sizeof buf)) != 0;)
                if (n < 0 || write(out, buf, (size_t)n) != n)
                        return fail(err, errlen, "copy the root's CA bundle");
        size_t len = strlen(c->trust_pem);
        if (write(out, "\n", 1) != 1 || write(out, c->trust_pem, len) != (ssize_t)len)
                return fail(err, errlen, "write %s", SBX_TRUST_BUNDLE);
        if (in >= 0 && target &&
            (mount(&SBX_TRUST_BUNDLE[1], target, NULL, MS_BIND, NULL) < 0 ||
             mount(NULL, target, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0))
                return fail(err, errlen, "bind the trust store");
        return 0;
}

/* The host's (or rootfs's) bundle: lstat, as an absolute symlink would be followed in the
 * host's root, not the sandbox's (the root is not pivoted yet); such a bundle is left alone. */
static int host_trust_store(const MountConfig *c, const char *src, char *err, size_t errlen) {
        struct stat st;
        _cleanup_close_ int in = open(src, O_RDONLY | O_CLOEXEC);
        bool bind = in >= 0 && lstat("etc/ssl/certs/ca-certificates.crt", &st) == 0 && S_ISREG(st.st_mode);
        return make_trust_store(c, in, bind ? "etc/ssl/certs/ca-certificates.crt" : NULL, err, errlen);
}

/* An image's bundle: untrusted, so opened beneath the root being built (its symlinks resolve in
 * it), a regular file only (a FIFO would hold pid 1), bound over through that very file. */
static int image_trust_store(const MountConfig *c, char *err, size_t errlen) {
        struct open_how how = { .flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY,
                                .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV };
        _cleanup_close_ int root = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
        long fd = root < 0 ? -1 : syscall(SYS_openat2, root, "etc/ssl/certs/ca-certificates.crt", &how, sizeof how);
        _cleanup_close_ int in = (int)fd;
        struct stat st;
        char target[64];
        if (in >= 0 && (fstat(in, &st) < 0 || !S_ISREG(st.st_mode)))
                in = safe_close(in);
        snprintf(target, sizeof target, "/proc/self/fd/%d", in);
        return make_trust_store(c, in, in >= 0 ? target : NULL, err, errlen);
}

static int make_etc(const MountConfig *c, char *err, size_t errlen) {
        char src[SBX_MAX_PATH_BYTES], dst[SBX_MAX_PATH_BYTES];
        const char *base = c->rootfs ? c->rootfs : "";
        if (mkdir("etc", 0755) < 0)
                return fail(err, errlen, "mkdir /etc");
        for (size_t i = 0; i < ELEMENTSOF(etc_binds); i++) {
                snprintf(src, sizeof src, "%s/etc/%s", base, etc_binds[i]);
                snprintf(dst, sizeof dst, "etc/%s", etc_binds[i]);
                if (bind_ro(src, dst, 0) < 0)
                        return fail(err, errlen, "bind %s", src);
        }
        char passwd[512], group[512];
        snprintf(passwd, sizeof passwd,
                 "root:x:0:0:root:/root:/usr/sbin/nologin\n"
                 "user:x:%u:%u:user:/home/user:/bin/bash\n"
                 "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", c->uid, c->gid);
        snprintf(group, sizeof group, "root:x:0:\nuser:x:%u:\nnogroup:x:65534:\n", c->gid);
        if (write_text("etc/passwd", passwd, 0644) < 0 || write_text("etc/group", group, 0644) < 0 ||
            write_text("etc/hostname", "sandbox\n", 0644) < 0 ||
            write_text("etc/hosts", "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n", 0644) < 0 ||
            write_text("etc/nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n", 0644) < 0)
                return fail(err, errlen, "write /etc");
        if (c->network) {
                snprintf(src, sizeof src, "%s/etc/resolv.conf", base);
                if (bind_ro(src, "etc/resolv.conf", 0) < 0)
                        return fail(err, errlen, "bind resolv.conf");
        } else if (write_text("etc/resolv.conf", "", 0644) < 0) {
                return fail(err, errlen, "write resolv.conf");
        }
        snprintf(src, sizeof src, "%s/etc/ssl/certs/ca-certificates.crt", base);
        return c->trust_pem ? host_trust_store(c, src, err, errlen) : 0;
}

/* Bind-mounts the host's file src over the file dst, read-only. */
static int bind_file(const char *src, const char *dst) {
        if (mount(src, dst, NULL, MS_BIND, NULL) < 0 ||
            mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
                return negerrno();
        return 0;
}

/* mkdir_dev: make /dev itself (else it is there, a tmpfs of its own). */
static int make_dev(bool mkdir_dev, char *err, size_t errlen) {
        char src[64], dst[64];
        if ((mkdir_dev && mkdir("dev", 0755) < 0) || mkdir("dev/pts", 0755) < 0 || mkdir("dev/shm", 01777) < 0)
                return fail(err, errlen, "mkdir /dev");
        for (size_t i = 0; i < ELEMENTSOF(dev_nodes); i++) {
                snprintf(src, sizeof src, "/dev/%s", dev_nodes[i]);
                snprintf(dst, sizeof dst, "dev/%s", dev_nodes[i]);
                int fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
                if (fd < 0)
                        return fail(err, errlen, "create %s", dst);
                close(fd);
                if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
                        return fail(err, errlen, "bind %s", src);
                /* nosuid/noexec on a device node bind; the node stays usable. */
                (void)mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NOEXEC, NULL);
        }
        static const char *const links[][2] = {
                { "/proc/self/fd", "dev/fd" }, { "/proc/self/fd/0", "dev/stdin" },
                { "/proc/self/fd/1", "dev/stdout" }, { "/proc/self/fd/2", "dev/stderr" },
                { "pts/ptmx", "dev/ptmx" },
        };
        for (size_t i = 0; i < ELEMENTSOF(links); i++)
                if (symlink(links[i][0], links[i][1]) < 0)
                        return fail(err, errlen, "symlink %s", links[i][1]);
        if (mount("devpts", "dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
                  "newinstance,ptmxmode=0666,mode=0620") < 0)
                return fail(err, errlen, "mount devpts");
        return 0;
}

/* One tmpfs backs /tmp, /home/user and /dev/shm, so the byte and inode limits hold for the
 * sandbox as a whole; it and the snapshot store are mounted nowhere, their parts grafted on
 * those directories of the root being built (the current directory), so nothing of them stays
 * in the root. *snap_fd gets the store's fd (see mount.h). */
/* Puts a clone of from's subtree sub onto to (relative to the current directory). */
static int graft(int from, const char *sub, const char *to) {
        _cleanup_close_ int t = sys_open_tree(from, sub, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        if (t < 0 || sys_move_mount(t, "", AT_FDCWD, to, MOVE_MOUNT_F_EMPTY_PATH) < 0)
                return negerrno();
        return 0;
}

static int mount_writable(const MountConfig *c, int *snap_fd, char *err, size_t errlen) {
        _cleanup_close_ int w = tmpfs_detached("sbx-fs", "0755", c->fs_bytes, c->file_count + 4, false,
                                               MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                                       (c->noexec_writable ? MOUNT_ATTR_NOEXEC : 0));
        if (w < 0) {
                errno = -w;
                return fail(err, errlen, "writable tmpfs");
        }
        if (mkdirat(w, "tmp", 01777) < 0 || fchmodat(w, "tmp", 01777, 0) < 0 || mkdirat(w, "home", 0755) < 0 ||
            fchownat(w, "home", c->uid, c->gid, 0) < 0 || mkdirat(w, "shm", 01777) < 0 || fchmodat(w, "shm", 01777, 0) < 0)
                return fail(err, errlen, "prepare writable tmpfs");
        if (graft(w, "tmp", "tmp") < 0 || graft(w, "home", "home/user") < 0 || graft(w, "shm", "dev/shm") < 0)
                return fail(err, errlen, "bind writable dirs");
        int s = tmpfs_detached("sbx-snap", "0700", c->snap_bytes, c->snap_inodes, false,
                               MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
        if (s < 0) {
                errno = -s;
                return fail(err, errlen, "snapshot store");
        }
        *snap_fd = s;
        return 0;
}

/* A fresh /proc (pid 1 of the new pid namespace: it shows only the sandbox), then the root
 * being built (the current directory) becomes "/" and the old one is detached. */
static int pivot_here(char *err, size_t errlen) {
        if (mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
                return fail(err, errlen, "mount /proc");
        if (syscall(SYS_pivot_root, ".", ".") < 0)
                return fail(err, errlen, "pivot_root");
        if (umount2(".", MNT_DETACH) < 0)
                return fail(err, errlen, "detach old root");
        if (chdir("/") < 0)
                return fail(err, errlen, "chdir /");
        return 0;
}


/* An image's root: an overlay of its layers, read-only, under a skeleton of the sandbox's own
 * (the top lower layer: the generated files of /etc and the directories the mounts below go
 * on), mounted on the staging directory and pivoted into. The skeleton, the writable tmpfs and
 * the snapshot store are tmpfs mounted nowhere until their parts are put in place, so nothing
 * of the build is left in the root. Layers are read with pid 1's credentials (no host user):
 * the store's directories are 0755; whiteouts and opaque directories are overlay's, opaque as
 * user.overlay.opaque (userxattr: trusted.* is out of this user namespace's reach). */
static int build_image_root(const MountConfig *c, int *snap_fd, char *err, size_t errlen) {
        char v[SBX_MAX_PATH_BYTES];
        _cleanup_close_ int skel = tmpfs_detached("sbx-root", "0755", SBX_SKELETON_BYTES, SBX_SKELETON_INODES, false,
                                                  MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
        if (skel < 0) {
                errno = -skel;
                return fail(err, errlen, "skeleton tmpfs");
        }
        char passwd[512], group[512];
        snprintf(passwd, sizeof passwd,
                 "root:x:0:0:root:/root:/usr/sbin/nologin\n"
                 "user:x:%u:%u:user:/home/user:/bin/bash\n"
                 "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", c->uid, c->gid);
        snprintf(group, sizeof group, "root:x:0:\nuser:x:%u:\nnogroup:x:65534:\n", c->gid);
        static const char *const dirs[] = { "etc", "etc/sbx", "dev", "proc", "tmp", "home", "home/user", "root", "run" };
        for (size_t i = 0; i < ELEMENTSOF(dirs); i++)
                if (mkdirat(skel, dirs[i], strcmp(dirs[i], "root") == 0 ? 0700 : 0755) < 0)
                        return fail(err, errlen, "mkdir %s in the skeleton", dirs[i]);
        const char *files[][2] = {
                { "etc/passwd", passwd }, { "etc/group", group }, { "etc/hostname", "sandbox\n" },
                { "etc/hosts", "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n" },
                { "etc/nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n"
                                       "protocols: files\nservices: files\n" },
                { "etc/resolv.conf", "" },
        };
        for (size_t i = 0; i < ELEMENTSOF(files); i++)
                if (write_text_at(skel, files[i][0], files[i][1], 0644) < 0)
                        return fail(err, errlen, "write %s", files[i][0]);

        _cleanup_close_ int fs = sys_fsopen("overlay", FSOPEN_CLOEXEC);
        if (fs < 0)
                return fail(err, errlen, "overlay");
        snprintf(v, sizeof v, "/proc/self/fd/%d", skel);
        int r = sys_fsconfig(fs, FSCONFIG_SET_STRING, "lowerdir+", v, 0);
        for (size_t i = 0; r >= 0 && c->layers[i]; i++) {
                r = sys_fsconfig(fs, FSCONFIG_SET_STRING, "lowerdir+", c->layers[i], 0);
                if (r < 0) {
                        return fail(err, errlen, "image layer %s (the store's directories must be o+x)", c->layers[i]);
                }
        }
        if (r < 0 || sys_fsconfig(fs, FSCONFIG_SET_FLAG, "userxattr", NULL, 0) < 0 ||
            sys_fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
                return fail(err, errlen, "mount the image's overlay");
        _cleanup_close_ int ovl = sys_fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
        if (ovl < 0 || sys_move_mount(ovl, "", AT_FDCWD, c->staging, MOVE_MOUNT_F_EMPTY_PATH) < 0)
                return fail(err, errlen, "mount the image's overlay on %s", c->staging);
        if (chdir(c->staging) < 0)
                return fail(err, errlen, "chdir %s", c->staging);

        if (mount("sbx-dev", "dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64") < 0)
                return fail(err, errlen, "mount /dev");
        if (make_dev(false, err, errlen) < 0)
                return negerrno();
        if ((r = mount_writable(c, snap_fd, err, errlen)) < 0)
                return r;
        if (c->network && (bind_file("/etc/resolv.conf", "etc/resolv.conf") < 0))
                return fail(err, errlen, "bind resolv.conf");
        if (c->trust_pem) {
                if (mount("sbx-etc", "etc/sbx", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=1m,nr_inodes=16") < 0)
                        return fail(err, errlen, "mount /etc/sbx");
                if ((r = image_trust_store(c, err, errlen)) < 0)
                        return r;
                (void)mount(NULL, "etc/sbx", NULL, MS_REMOUNT | MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, NULL);
        }
        return pivot_here(err, errlen);
}

int mount_build_root(const MountConfig *c, int *snap_fd, char *err, size_t errlen) {
        char src[SBX_MAX_PATH_BYTES], opts[128];
        /* Nothing mounted here may propagate back to the host. */
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                return fail(err, errlen, "make / private");
        if (c->layers)
                return build_image_root(c, snap_fd, err, errlen);
        snprintf(opts, sizeof opts, "mode=0755,size=%u,nr_inodes=%u", SBX_SKELETON_BYTES, SBX_SKELETON_INODES);
        /* noatime: a read on the root (the early default shell reads /etc while pid 1 still
         * builds) must not take the mount's write count for an atime update, or the
         * read-only remount below fails with EBUSY. */
        if (mount("sbx-root", c->staging, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOATIME, opts) < 0)
                return fail(err, errlen, "mount tmpfs on %s", c->staging);
        if (chdir(c->staging) < 0)
                return fail(err, errlen, "chdir %s", c->staging);

        /* pid 1 is no host user (see init.c): a tree only its owner may enter is out of reach. */
        if (c->rootfs && access(c->rootfs, X_OK) < 0)
                return fail(err, errlen, "rootfs %s is out of the sandbox's reach (its ids are host ids of its "
                                         "own: the directory and its parents need o+x)", c->rootfs);
        const char *base = c->rootfs ? c->rootfs : "";
        for (size_t i = 0; i < ELEMENTSOF(system_dirs); i++) {
                snprintf(src, sizeof src, "%s/%s", base, system_dirs[i]);
                if (bind_ro(src, system_dirs[i], 0) < 0)
                        return fail(err, errlen, "bind %s", src);
        }
        int r = make_etc(c, err, errlen);
        if (r < 0)
                return r;
        if (make_dev(true, err, errlen) < 0)
                return negerrno();
        if (mkdir("proc", 0555) < 0 || mkdir("tmp", 01777) < 0 || mkdir("home", 0755) < 0 ||
            mkdir("home/user", 0755) < 0 || mkdir("root", 0700) < 0 || mkdir("run", 0755) < 0 ||
            mkdir("var", 0755) < 0 || symlink("../tmp", "var/tmp") < 0)
                return fail(err, errlen, "mkdir skeleton");
        if ((r = mount_writable(c, snap_fd, err, errlen)) < 0 || (r = pivot_here(err, errlen)) < 0)
                return r;
        if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOATIME, NULL) < 0)
                return fail(err, errlen, "remount / read-only");
        return 0;
}
