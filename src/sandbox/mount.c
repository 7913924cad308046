/* SPDX-License-Identifier: MIT */
/* The sandbox root: a read-only skeleton tmpfs (a clone of the shared one, or the sandbox's
 * own) holding read-only binds of the host's system directories, a generated /etc, a minimal
 * /dev, a fresh /proc, and one size- and inode-limited tmpfs that backs both /tmp and
 * /home/user. Nothing else of the host is reachable: the old root is detached after
 * pivot_root. */
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

/* What the root holds at dst (beneath at) for the host's src: the same symlink, a directory
 * or an empty file to bind src on, nothing for a missing src. shape_like() makes it; like()
 * checks it: 1 when src is to be bound there, 0 when nothing is (a symlink, a missing src),
 * -ESTALE when dst no longer matches (a shared skeleton made before the host changed), or
 * -errno. */
static int shape_like(int at, const char *src, const char *dst) {
        struct stat st;
        if (lstat(src, &st) < 0)
                return errno == ENOENT || errno == ENOTDIR ? 0 : negerrno();
        if (S_ISLNK(st.st_mode)) {
                char target[SBX_MAX_PATH_BYTES];
                ssize_t n = readlink(src, target, sizeof target - 1);
                if (n < 0)
                        return negerrno();
                target[n] = 0;
                return symlinkat(target, at, dst) < 0 ? negerrno() : 0;
        }
        if (S_ISDIR(st.st_mode))
                return mkdirat(at, dst, 0755) < 0 && errno != EEXIST ? negerrno() : 0;
        int fd = openat(at, dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
                return negerrno();
        close(fd);
        return 0;
}

static int like(int at, const char *src, const char *dst) {
        struct stat s, d;
        bool have = fstatat(at, dst, &d, AT_SYMLINK_NOFOLLOW) == 0;
        if (!have && errno != ENOENT)
                return negerrno();
        if (lstat(src, &s) < 0) {
                if (errno != ENOENT && errno != ENOTDIR)
                        return negerrno();
                return have ? -ESTALE : 0;
        }
        if (!have)
                return -ESTALE;
        if (S_ISLNK(s.st_mode)) {
                char a[SBX_MAX_PATH_BYTES], b[SBX_MAX_PATH_BYTES];
                ssize_t n = readlink(src, a, sizeof a), m = S_ISLNK(d.st_mode) ? readlinkat(at, dst, b, sizeof b) : -1;
                return n >= 0 && n == m && memcmp(a, b, (size_t)n) == 0 ? 0 : -ESTALE;
        }
        if (S_ISDIR(s.st_mode))
                return S_ISDIR(d.st_mode) ? 1 : -ESTALE;
        return S_ISREG(d.st_mode) ? 1 : -ESTALE;
}

/* Bind-mounts src onto dst read-only, nosuid, nodev, its submounts included. */
static int bind_tree(const char *src, const char *dst) {
        if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
                return negerrno();
        /* For the whole tree, submounts included (a remount covers only the top mount); the
         * remount remains for kernels without mount_setattr. */
        struct mount_attr attr = { .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV };
        if (mount_setattr(AT_FDCWD, dst, AT_RECURSIVE, &attr, sizeof attr) == 0)
                return 0;
        if (mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
                return negerrno();
        return 0;
}

/* Binds src onto dst (relative to the root being built, the current directory) when like()
 * says so. Returns 0 or -errno, -ESTALE as like(). */
static int attach_like(const char *src, const char *dst) {
        int r = like(AT_FDCWD, src, dst);
        return r > 0 ? bind_tree(src, dst) : r;
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

/* The host's (or rootfs's) entries the root binds: i-th of system_dirs, then of etc_binds. */
#define N_HOST_ENTRIES (ELEMENTSOF(system_dirs) + ELEMENTSOF(etc_binds))
static void host_entry(const MountConfig *c, size_t i, char src[static SBX_MAX_PATH_BYTES],
                       char dst[static SBX_MAX_PATH_BYTES]) {
        const char *base = c->rootfs ? c->rootfs : "";
        bool sys = i < ELEMENTSOF(system_dirs);
        const char *name = sys ? system_dirs[i] : etc_binds[i - ELEMENTSOF(system_dirs)];
        snprintf(src, SBX_MAX_PATH_BYTES, "%s/%s%s", base, sys ? "" : "etc/", name);
        snprintf(dst, SBX_MAX_PATH_BYTES, "%s%s", sys ? "" : "etc/", name);
}

/* The skeleton of a host-based root beneath at, all of it but what is mounted on it: the
 * system directories' and /etc's mount points (or symlinks), the generated files of /etc (an
 * empty resolv.conf, which a sandbox with network has the host's bound over), /dev's mount
 * points and links, and the directories the rest goes on. */
static int shape_dev(int at, bool mkdir_dev);
static int shape_skeleton(const MountConfig *c, int at, char *err, size_t errlen) {
        char src[SBX_MAX_PATH_BYTES], dst[SBX_MAX_PATH_BYTES];
        if (mkdirat(at, "etc", 0755) < 0)
                return fail(err, errlen, "mkdir /etc");
        for (size_t i = 0; i < N_HOST_ENTRIES; i++) {
                host_entry(c, i, src, dst);
                if (shape_like(at, src, dst) < 0)
                        return fail(err, errlen, "make %s for %s", dst, src);
        }
        char passwd[512], group[512];
        snprintf(passwd, sizeof passwd,
                 "root:x:0:0:root:/root:/usr/sbin/nologin\n"
                 "user:x:%u:%u:user:/home/user:/bin/bash\n"
                 "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", c->uid, c->gid);
        snprintf(group, sizeof group, "root:x:0:\nuser:x:%u:\nnogroup:x:65534:\n", c->gid);
        if (write_text_at(at, "etc/passwd", passwd, 0644) < 0 || write_text_at(at, "etc/group", group, 0644) < 0 ||
            write_text_at(at, "etc/hostname", "sandbox\n", 0644) < 0 ||
            write_text_at(at, "etc/hosts", "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n", 0644) < 0 ||
            write_text_at(at, "etc/nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n", 0644) < 0 ||
            write_text_at(at, "etc/resolv.conf", "", 0644) < 0)
                return fail(err, errlen, "write /etc");
        if (shape_dev(at, true) < 0)
                return fail(err, errlen, "make /dev");
        if (mkdirat(at, "proc", 0555) < 0 || mkdirat(at, "tmp", 01777) < 0 || mkdirat(at, "home", 0755) < 0 ||
            mkdirat(at, "home/user", 0755) < 0 || mkdirat(at, "root", 0700) < 0 || mkdirat(at, "run", 0755) < 0 ||
            mkdirat(at, "var", 0755) < 0 || symlinkat("../tmp", at, "var/tmp") < 0)
                return fail(err, errlen, "mkdir skeleton");
        return 0;
}

/* The resolv.conf of the host (whatever its symlink points to there) or of the rootfs (opened
 * beneath it, its symlinks resolved in it, not in the host's root: pid 1 is still there),
 * bound over the skeleton's empty one when it is a regular file. */
static int attach_resolv(const MountConfig *c) {
        struct stat st;
        if (!c->rootfs)
                return stat("/etc/resolv.conf", &st) == 0 && S_ISREG(st.st_mode)
                               ? bind_tree("/etc/resolv.conf", "etc/resolv.conf")
                               : 0;
        struct open_how how = { .flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };
        _cleanup_close_ int root = open(c->rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
        long fd = root < 0 ? -1 : syscall(SYS_openat2, root, "etc/resolv.conf", &how, sizeof how);
        _cleanup_close_ int in = (int)fd;
        char path[64];
        if (in < 0 || fstat(in, &st) < 0 || !S_ISREG(st.st_mode))
                return 0;
        snprintf(path, sizeof path, "/proc/self/fd/%d", in);
        return bind_tree(path, "etc/resolv.conf");
}

/* Binds the host's (or rootfs's) parts onto the skeleton of the root being built (the current
 * directory), and resolv.conf where the sandbox has the host's network. strict: -ESTALE (err
 * not written) when the skeleton no longer matches the host (a shared one); else an entry that
 * changed since this sandbox's own skeleton was shaped a moment ago is left as shaped. */
static int attach_host(const MountConfig *c, bool strict, char *err, size_t errlen) {
        char src[SBX_MAX_PATH_BYTES], dst[SBX_MAX_PATH_BYTES];
        for (size_t i = 0; i < N_HOST_ENTRIES; i++) {
                host_entry(c, i, src, dst);
                int r = attach_like(src, dst);
                if (r == -ESTALE && strict)
                        return r;
                if (r < 0 && r != -ESTALE) {
                        errno = -r;
                        return fail(err, errlen, "bind %s", src);
                }
        }
        if (c->network && attach_resolv(c) < 0)
                return fail(err, errlen, "bind resolv.conf");
        return 0;
}

/* Bind-mounts the host's file src over the file dst, read-only. */
static int bind_file(const char *src, const char *dst) {
        if (mount(src, dst, NULL, MS_BIND, NULL) < 0 ||
            mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
                return negerrno();
        return 0;
}

/* /dev's mount points and links beneath at; mkdir_dev: make /dev itself (else it is there, a
 * tmpfs of its own). */
static int shape_dev(int at, bool mkdir_dev) {
        char dst[64];
        if ((mkdir_dev && mkdirat(at, "dev", 0755) < 0) || mkdirat(at, "dev/pts", 0755) < 0 ||
            mkdirat(at, "dev/shm", 01777) < 0)
                return negerrno();
        for (size_t i = 0; i < ELEMENTSOF(dev_nodes); i++) {
                snprintf(dst, sizeof dst, "dev/%s", dev_nodes[i]);
                int fd = openat(at, dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
                if (fd < 0)
                        return negerrno();
                close(fd);
        }
        static const char *const links[][2] = {
                { "/proc/self/fd", "dev/fd" }, { "/proc/self/fd/0", "dev/stdin" },
                { "/proc/self/fd/1", "dev/stdout" }, { "/proc/self/fd/2", "dev/stderr" },
                { "pts/ptmx", "dev/ptmx" },
        };
        for (size_t i = 0; i < ELEMENTSOF(links); i++)
                if (symlinkat(links[i][0], at, links[i][1]) < 0)
                        return negerrno();
        return 0;
}

/* The host's device nodes bound on /dev's (of the root being built, the current directory),
 * and a devpts of the sandbox's own. */
static int attach_dev(char *err, size_t errlen) {
        char src[64], dst[64];
        for (size_t i = 0; i < ELEMENTSOF(dev_nodes); i++) {
                snprintf(src, sizeof src, "/dev/%s", dev_nodes[i]);
                snprintf(dst, sizeof dst, "dev/%s", dev_nodes[i]);
                if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
                        return fail(err, errlen, "bind %s", src);
                /* nosuid/noexec on a device node bind; the node stays usable. */
                (void)mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NOEXEC, NULL);
        }
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

/* The writable tmpfs's own mount, detached, kept open by pid 1 for its life: closing its last
 * fd dissolves it, and that waits for an RCU grace period (namespace_unlock()), 0.06 ms on an
 * idle host and up to 0.5 ms on a busy one, on the create's path. Its parts grafted on the
 * root hold the same superblock either way; pid 1's exit closes it, after the sandbox. Session
 * shells never get it (exec_shell() closes what they do not need). */
static int kept_writable = -1;

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
        safe_close(kept_writable);
        kept_writable = TAKE_FD(w);
        if (c->snap_lazy) {
                *snap_fd = -1;
                return 0;
        }
        int s = mount_snap_store(c->snap_bytes, c->snap_inodes);
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
        if ((r = shape_dev(AT_FDCWD, false)) < 0) {
                errno = -r;
                return fail(err, errlen, "make /dev");
        }
        if ((r = attach_dev(err, errlen)) < 0)
                return r;
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

int mount_snap_store(uint64_t bytes, uint64_t inodes) {
        return tmpfs_detached("sbx-snap", "0700", bytes, inodes, false,
                              MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
}

/* A clone of the shared skeleton (see mount.h), read-only, on the staging directory. */
static int take_skeleton(const MountConfig *c) {
        _cleanup_close_ int t = sys_open_tree(c->skeleton_fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
        struct mount_attr attr = { .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                               MOUNT_ATTR_NOATIME,
                                   .attr_clr = MOUNT_ATTR__ATIME };
        if (t < 0 || sys_mount_setattr(t, "", AT_EMPTY_PATH, &attr) < 0 ||
            sys_move_mount(t, "", AT_FDCWD, c->staging, MOVE_MOUNT_F_EMPTY_PATH) < 0)
                return negerrno();
        return 0;
}

/* The root on a clone of the shared skeleton: only mounts, nothing written. -ESTALE (with
 * nothing left mounted) when the host no longer matches it or no clone of it could be had. */
static int build_on_skeleton(const MountConfig *c, int *snap_fd, char *err, size_t errlen) {
        int r = take_skeleton(c);
        if (r < 0)
                return -ESTALE; /* nothing is mounted: the root gets a skeleton of its own */
        if (chdir(c->staging) < 0)
                return fail(err, errlen, "chdir %s", c->staging);
        if ((r = attach_host(c, true, err, errlen)) == -ESTALE) {
                if (chdir("/") < 0 || umount2(c->staging, MNT_DETACH) < 0)
                        return fail(err, errlen, "take the stale skeleton off %s", c->staging);
                return r;
        }
        if (r < 0 || (r = attach_dev(err, errlen)) < 0 || (r = mount_writable(c, snap_fd, err, errlen)) < 0)
                return r;
        return pivot_here(err, errlen);
}

bool mount_skeleton_fits(const MountConfig *c) {
        return c->skeleton_fd >= 0 && !c->rootfs && !c->layers && !c->trust_pem && c->uid == c->skeleton_uid &&
               c->gid == c->skeleton_gid;
}

int mount_skeleton_make(const MountConfig *c, char *err, size_t errlen) {
        _cleanup_close_ int skel = tmpfs_detached("sbx-root", "0755", SBX_SKELETON_BYTES, SBX_SKELETON_INODES, false,
                                                  MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOATIME);
        if (skel < 0) {
                errno = -skel;
                return fail(err, errlen, "skeleton tmpfs");
        }
        int r = shape_skeleton(c, skel, err, errlen);
        if (r < 0)
                return r;
        /* Read-only for every mount of it, not only for the sandboxes' clones. */
        _cleanup_close_ int fc = sys_fspick(skel, "", FSPICK_EMPTY_PATH | FSPICK_CLOEXEC);
        if (fc < 0 || sys_fsconfig(fc, FSCONFIG_SET_FLAG, "ro", NULL, 0) < 0 ||
            sys_fsconfig(fc, FSCONFIG_CMD_RECONFIGURE, NULL, NULL, 0) < 0)
                return fail(err, errlen, "make the skeleton read-only");
        return TAKE_FD(skel);
}

int mount_skeleton_check(const MountConfig *c, int skel) {
        char src[SBX_MAX_PATH_BYTES], dst[SBX_MAX_PATH_BYTES];
        for (size_t i = 0; i < N_HOST_ENTRIES; i++) {
                host_entry(c, i, src, dst);
                int r = like(skel, src, dst);
                if (r < 0)
                        return r;
        }
        return 0;
}

int mount_build_root(const MountConfig *c, int *snap_fd, char *err, size_t errlen) {
        char opts[128];
        /* Nothing mounted here may propagate back to the host. */
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                return fail(err, errlen, "make / private");
        if (c->layers)
                return build_image_root(c, snap_fd, err, errlen);
        int r;
        if (mount_skeleton_fits(c) && (r = build_on_skeleton(c, snap_fd, err, errlen)) != -ESTALE)
                return r;
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
        if ((r = shape_skeleton(c, AT_FDCWD, err, errlen)) < 0)
                return r;
        if ((r = attach_host(c, false, err, errlen)) < 0)
                return r;
        if (c->trust_pem) {
                char src[SBX_MAX_PATH_BYTES];
                snprintf(src, sizeof src, "%s/etc/ssl/certs/ca-certificates.crt", c->rootfs ? c->rootfs : "");
                if ((r = host_trust_store(c, src, err, errlen)) < 0)
                        return r;
        }
        if ((r = attach_dev(err, errlen)) < 0 || (r = mount_writable(c, snap_fd, err, errlen)) < 0 ||
            (r = pivot_here(err, errlen)) < 0)
                return r;
        if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOATIME, NULL) < 0)
                return fail(err, errlen, "remount / read-only");
        return 0;
}
