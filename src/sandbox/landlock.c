/* SPDX-License-Identifier: MIT */
/* The exec policy: the Landlock ruleset pid 1 builds from policy.allow and policy.deny over
 * its finished root and restricts itself to, and the seccomp rule on memfds that an allow
 * list needs beside it.
 *
 * Landlock only grants: a ruleset "handles" some rights, which are then denied everywhere
 * except beneath the inodes given rules. The rights handled are EXECUTE and READ_FILE (and
 * REFER, which any Landlock domain denies unless handled and granted, and without which a
 * rename between two directories would fail with EXDEV). READ_FILE is handled because
 * execve() is not the only way to run a file's code: the dynamic loader
 * (/lib64/ld-linux-x86-64.so.2 FILE) and any program that copies the bytes into a memfd or
 * an executable mapping run it having only read it. So a file the policy forbids to execute
 * is also made unreadable.
 *
 * deny alone: everything may be executed and read but the denied entries. A rule on a
 * directory covers all beneath it, so each directory on the way to a denied entry gets no
 * rule of its own; its other entries (siblings along the path) get one each.
 * allow: the allowed entries get EXECUTE and READ_FILE. Everything else may be read but not
 * executed, except the executables of the program directories (/usr/bin, ...), which may not
 * be read either: there the rules go on each non-executable entry. The writable tmpfs is
 * mounted noexec (mount.c), so what a command writes cannot be mapped executable by the
 * loader, and memfds must be created MFD_NOEXEC_SEAL: Landlock does not look at files that
 * have no path (memfds live on an internal mount), so an executable memfd filled with an
 * allowed file's bytes would run under any name. */
#include <dirent.h>
#include <elf.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdarg.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include "base/limits.h"
#include "base/macro.h"
#include "sandbox/landlock.h"

/* Debian 12's kernel headers are 6.1's: what came later (ABI 4's network rules) is spelled
 * out here, as the kernel's UAPI defines it. */
#ifndef LANDLOCK_ACCESS_NET_CONNECT_TCP
#define LANDLOCK_RULE_NET_PORT 2
#define LANDLOCK_ACCESS_NET_CONNECT_TCP (1ULL << 1)
struct landlock_net_port_attr {
        uint64_t allowed_access;
        uint64_t port;
} __attribute__((packed));
#endif
#ifndef LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON
#define LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON (1U << 1)
#endif
#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif

/* landlock_ruleset_attr as of ABI 4; the kernel takes a shorter or longer one as long as
 * what it does not know is zero. */
typedef struct RulesetAttr {
        uint64_t handled_access_fs;
        uint64_t handled_access_net;
} RulesetAttr;

#define RIGHTS_FILE (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE)

/* Directories whose executables an allow list makes unreadable too (those of the default
 * PATH, and the helpers' directory). Executables elsewhere (/usr/lib/git-core, ...) stay
 * readable: see the threat model. */
static const char *const program_dirs[] = {
        "/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin",
        "/usr/games", "/usr/local/games", "/usr/libexec",
};

/* Where commands write: a policy on a path in them would stop nothing (the file can be made
 * again under another name), and no deny may cover them. */
static const char *const writable_dirs[] = { "/tmp", "/var/tmp", "/home/user", "/dev/shm" };

int landlock_abi(void) {
        long v = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
        return v < 0 ? negerrno() : (int)v;
}

static bool list_empty(const char *const *l) { return !l || !l[0]; }

bool landlock_policy_active(const LandlockPolicy *p) {
        return p && (!list_empty(p->allow) || !list_empty(p->deny) || p->connect_port >= 0);
}

/* Whether path is dir or lies beneath it (both canonical). */
static bool path_covers(const char *dir, const char *path) {
        size_t n = strlen(dir);
        if (n == 1 && dir[0] == '/')
                return true;
        return strncmp(dir, path, n) == 0 && (path[n] == 0 || path[n] == '/');
}

/* Whether path lies strictly beneath dir. */
static bool path_below(const char *dir, const char *path) {
        return path_covers(dir, path) && strcmp(dir, path) != 0;
}

/* The part of a pattern before its first glob character, cut back to a whole component. */
static void literal_prefix(const char *pattern, char *out, size_t size) {
        size_t n = strcspn(pattern, "*?[\\");
        snprintf(out, size, "%.*s", (int)MIN(n, size - 1), pattern);
        if (pattern[n]) {
                char *slash = strrchr(out, '/');
                if (slash)
                        slash[slash == out ? 1 : 0] = 0;
        }
}

static int check_pattern(const char *which, const char *pat, char *err, size_t errlen) {
        size_t len = strlen(pat);
        if (pat[0] != '/') {
                snprintf(err, errlen, "policy.%s: '%.200s' is not an absolute path (patterns are paths in the sandbox, "
                         "like /usr/bin/git or /usr/bin/*)", which, pat);
                return -EINVAL;
        }
        if (len >= SBX_MAX_PATH_BYTES) {
                snprintf(err, errlen, "policy.%s: a pattern is longer than %u bytes", which, SBX_MAX_PATH_BYTES - 1);
                return -EINVAL;
        }
        for (const char *c = pat + 1; *c;) {
                size_t n = strcspn(c, "/");
                bool last = c[n] == 0;
                if ((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.')) {
                        snprintf(err, errlen, "policy.%s: '%.200s' has a '.' or '..' component", which, pat);
                        return -EINVAL;
                }
                if (memmem(c, n, "**", 2) && !(last && n == 2)) {
                        snprintf(err, errlen, "policy.%s: '%.200s': '**' may only be the last component (dir/**)", which,
                                 pat);
                        return -EINVAL;
                }
                c += n + (last ? 0 : 1);
        }
        char prefix[SBX_MAX_PATH_BYTES];
        literal_prefix(pat, prefix, sizeof prefix);
        for (size_t i = 0; i < ELEMENTSOF(writable_dirs); i++)
                if (path_covers(writable_dirs[i], prefix)) {
                        snprintf(err, errlen, "policy.%s: '%.200s' is in %s, where commands write: a file there can be "
                                 "made again under any name, so a policy on it would stop nothing%s", which, pat,
                                 writable_dirs[i], *which == 'a' ? " (and nothing there may run under an allow list)" : "");
                        return -EINVAL;
                }
        return 0;
}

static int check_list(const char *which, const char *const *l, char *err, size_t errlen) {
        size_t n = 0;
        for (; l && l[n]; n++) {
                if (n >= SBX_MAX_POLICY_PATTERNS) {
                        snprintf(err, errlen, "policy.%s has more than %u patterns", which, SBX_MAX_POLICY_PATTERNS);
                        return -EINVAL;
                }
                int r = check_pattern(which, l[n], err, errlen);
                if (r < 0)
                        return r;
        }
        return 0;
}

int landlock_policy_check(const LandlockPolicy *p, char *err, size_t errlen) {
        if (!landlock_policy_active(p))
                return 0;
        int r = check_list("allow", p->allow, err, errlen);
        if (r < 0 || (r = check_list("deny", p->deny, err, errlen)) < 0)
                return r;
        if (p->connect_port > 65535) {
                snprintf(err, errlen, "policy: port %d is not a TCP port", p->connect_port);
                return -EINVAL;
        }
        int abi = landlock_abi();
        if (abi < 0) {
                snprintf(err, errlen, "policy: this kernel does not enforce Landlock (%s), which exec policies need: "
                         "Linux 5.19 or later with landlock in its lsm= list", abi == -EOPNOTSUPP ? "disabled at boot"
                                                                                                : "not built in");
                return -EOPNOTSUPP;
        }
        /* ABI 1 cannot grant REFER, so every rename between two directories would fail. */
        if (abi < 2 && (!list_empty(p->allow) || !list_empty(p->deny))) {
                snprintf(err, errlen, "policy: this kernel's Landlock is ABI %d; exec policies need ABI 2 (Linux 5.19)", abi);
                return -EOPNOTSUPP;
        }
        if (abi < 4 && p->connect_port >= 0) {
                snprintf(err, errlen, "policy: this kernel's Landlock is ABI %d; network rules need ABI 4 (Linux 6.7)", abi);
                return -EOPNOTSUPP;
        }
        return 0;
}

/* ---------------------------------------------------------------- building, in pid 1 */

/* Canonical paths (realpath), each once. */
typedef struct PathSet {
        char **v;
        size_t n, cap;
} PathSet;

typedef struct FileId {
        dev_t dev;
        ino_t ino;
        nlink_t nlink;
        size_t found; /* names of it in the denied set */
} FileId;

typedef struct Build {
        int ruleset;
        uint64_t full; /* rights of a directory rule that grants everything handled */
        unsigned rules, matches;
        PathSet denied, allowed, programs;
        FileId *denied_files; /* the denied regular files, by inode: other names of them */
        size_t n_denied_files;
        unsigned walked;
        unsigned depth; /* of each_entry() calls in progress */
        char *err;
        size_t errlen;
} Build;

static void set_free(PathSet *s) {
        for (size_t i = 0; i < s->n; i++)
                free(s->v[i]);
        free(s->v);
        *s = (PathSet){ 0 };
}

static bool set_has(const PathSet *s, const char *path) {
        for (size_t i = 0; i < s->n; i++)
                if (strcmp(s->v[i], path) == 0)
                        return true;
        return false;
}

/* Takes path (malloc'd). */
static int set_take(PathSet *s, char *path) {
        if (set_has(s, path)) {
                free(path);
                return 0;
        }
        if (s->n == s->cap) {
                size_t cap = s->cap ? s->cap * 2 : 16;
                char **v = realloc(s->v, cap * sizeof *v);
                if (!v) {
                        free(path);
                        return -ENOMEM;
                }
                s->v = v;
                s->cap = cap;
        }
        s->v[s->n++] = path;
        return 0;
}

/* Whether some entry of s is path or holds it. */
static bool set_covers(const PathSet *s, const char *path) {
        for (size_t i = 0; s && i < s->n; i++)
                if (path_covers(s->v[i], path))
                        return true;
        return false;
}

/* Whether some entry of s lies strictly beneath path. */
static bool set_below(const PathSet *s, const char *path) {
        for (size_t i = 0; s && i < s->n; i++)
                if (path_below(path, s->v[i]))
                        return true;
        return false;
}

static _printf_(3, 4) int fail(Build *b, int r, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->err, b->errlen, fmt, ap);
        va_end(ap);
        return r;
}

/* Adds what pattern matches now to s, each resolved to its real path ("/usr/bin/python3" is
 * the file it links to: that is what execve() opens). */
static int expand(Build *b, const char *which, const char *pattern, PathSet *s) {
        char pat[SBX_MAX_PATH_BYTES];
        size_t len = strlen(pattern);
        snprintf(pat, sizeof pat, "%s", pattern);
        /* A last component "**" names the directory: its rule covers everything beneath. */
        if (len >= 3 && strcmp(pat + len - 3, "/**") == 0)
                pat[len == 3 ? 1 : len - 3] = 0;
        glob_t g;
        int gr = glob(pat, GLOB_NOSORT, NULL, &g);
        if (gr == GLOB_NOMATCH)
                return fail(b, -ENOENT, "policy.%s: '%.200s' matches no file in the sandbox", which, pattern);
        if (gr != 0)
                return fail(b, gr == GLOB_NOSPACE ? -ENOMEM : -EIO, "policy.%s: cannot match '%.200s'", which, pattern);
        int r = 0;
        for (size_t i = 0; i < g.gl_pathc && r >= 0; i++) {
                if (++b->matches > SBX_MAX_POLICY_MATCHES) {
                        r = fail(b, -E2BIG, "policy: the patterns match more than %u files (name directories with dir/**)",
                                 SBX_MAX_POLICY_MATCHES);
                        break;
                }
                char *real = realpath(g.gl_pathv[i], NULL);
                if (!real)
                        r = fail(b, negerrno(), "policy.%s: '%.200s' (from '%.200s'): %s", which, g.gl_pathv[i], pattern,
                                 strerror(errno));
                else
                        r = set_take(s, real);
        }
        globfree(&g);
        return r;
}

static int expand_list(Build *b, const char *which, const char *const *l, PathSet *s) {
        for (size_t i = 0; l && l[i]; i++) {
                int r = expand(b, which, l[i], s);
                if (r < 0)
                        return r;
        }
        return 0;
}

static bool file_denied(const Build *b, const struct stat *st) {
        for (size_t i = 0; i < b->n_denied_files; i++)
                if (b->denied_files[i].dev == st->st_dev && b->denied_files[i].ino == st->st_ino)
                        return true;
        return false;
}

/* One rule: access beneath path (a file gets only the rights a file can have). */
static int add_rule(Build *b, const char *path, uint64_t access) {
        _cleanup_close_ int fd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0)
                return fail(b, negerrno(), "policy: open %.300s: %s", path, strerror(errno));
        if (S_ISLNK(st.st_mode) || (!S_ISDIR(st.st_mode) && file_denied(b, &st)))
                return 0;
        if (!S_ISDIR(st.st_mode))
                access &= RIGHTS_FILE;
        if (!access)
                return 0;
        if (++b->rules > SBX_MAX_POLICY_RULES)
                return fail(b, -E2BIG, "policy: more than %u Landlock rules needed (use fewer, wider patterns)",
                            SBX_MAX_POLICY_RULES);
        struct landlock_path_beneath_attr pb = { .allowed_access = access, .parent_fd = fd };
        if (syscall(SYS_landlock_add_rule, b->ruleset, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) < 0)
                return fail(b, negerrno(), "policy: Landlock rule on %.300s: %s", path, strerror(errno));
        return 0;
}

/* Calls fn(b, child, arg) for each entry of directory path but symlinks (the file a symlink
 * names has a path of its own, which is what the kernel checks). */
typedef int (*EntryFn)(Build *b, const char *child, const struct stat *st, void *arg);
static int each_entry(Build *b, const char *path, EntryFn fn, void *arg) {
        /* Each level holds a path buffer on the stack: a tree deeper than any system
         * directory is refused rather than followed down. */
        if (b->depth >= SBX_MAX_POLICY_DEPTH)
                return fail(b, -ELOOP, "policy: %.300s is more than %u levels deep", path, SBX_MAX_POLICY_DEPTH);
        DIR *d = opendir(path);
        if (!d)
                return fail(b, negerrno(), "policy: list %.300s: %s", path, strerror(errno));
        int r = 0;
        char child[SBX_MAX_PATH_BYTES];
        b->depth++;
        for (struct dirent *e; r >= 0 && (e = readdir(d));) {
                struct stat st;
                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                        continue;
                int n = snprintf(child, sizeof child, "%s/%s", strcmp(path, "/") == 0 ? "" : path, e->d_name);
                if (n < 0 || (size_t)n >= sizeof child) {
                        r = fail(b, -ENAMETOOLONG, "policy: a path under %.300s is too long", path);
                        break;
                }
                if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                        r = fail(b, negerrno(), "policy: stat %.300s: %s", child, strerror(errno));
                        break;
                }
                if (!S_ISLNK(st.st_mode))
                        r = fn(b, child, &st, arg);
        }
        b->depth--;
        closedir(d);
        return r;
}

typedef struct Grant {
        uint64_t access;
        const PathSet *except, *except2;
} Grant;

static int grant(Build *b, const char *path, const Grant *g);

static int grant_entry(Build *b, const char *child, const struct stat *st, void *arg) {
        return grant(b, child, arg);
}

/* access beneath path, except beneath the entries of g's sets: a path holding one of them
 * gets no rule itself, its entries get theirs. */
static int grant(Build *b, const char *path, const Grant *g) {
        if (set_covers(&b->denied, path) || set_covers(g->except, path) || set_covers(g->except2, path))
                return 0;
        if (!set_below(&b->denied, path) && !set_below(g->except, path) && !set_below(g->except2, path))
                return add_rule(b, path, g->access);
        return each_entry(b, path, grant_entry, (void *)g);
}

/* A program directory under an allow list: its executables get no rule, the rest may be read. */
static int programs_entry(Build *b, const char *child, const struct stat *st, void *arg) {
        if (S_ISDIR(st->st_mode))
                return set_covers(&b->denied, child) ? 0 : each_entry(b, child, programs_entry, arg);
        if (S_ISREG(st->st_mode) && (st->st_mode & 0111))
                return 0;
        return grant(b, child, arg);
}

/* ---- other names of denied files */

static FileId *denied_file(Build *b, const struct stat *st) {
        for (size_t i = 0; i < b->n_denied_files; i++)
                if (b->denied_files[i].dev == st->st_dev && b->denied_files[i].ino == st->st_ino)
                        return &b->denied_files[i];
        return NULL;
}

/* A name of a denied file: denied too. */
static int link_entry(Build *b, const char *child, const struct stat *st, void *arg) {
        FileId *f = S_ISREG(st->st_mode) ? denied_file(b, st) : NULL;
        if (f && !set_has(&b->denied, child)) {
                char *c = strdup(child);
                if (!c || set_take(&b->denied, c) < 0)
                        return -ENOMEM;
                f->found++;
        }
        return 0;
}

static int link_walk(Build *b, const char *child, const struct stat *st, void *arg) {
        const dev_t *dev = arg;
        if (++b->walked > SBX_MAX_POLICY_LINK_WALK)
                return fail(b, -E2BIG, "policy: a denied file has other names (hard links) that %u entries did not "
                            "all show", SBX_MAX_POLICY_LINK_WALK);
        if (st->st_dev != *dev)
                return 0;
        if (S_ISDIR(st->st_mode))
                return each_entry(b, child, link_walk, arg);
        return link_entry(b, child, st, NULL);
}

static bool links_missing(const Build *b) {
        for (size_t i = 0; i < b->n_denied_files; i++)
                if (b->denied_files[i].found < b->denied_files[i].nlink)
                        return true;
        return false;
}

/* A hard link is the same inode under another name: a rule on a directory holding it would
 * let it run. So every name of a denied file is denied: first those in its own directory (a
 * Debian /usr/bin has perl and perl5.36.0), then, if names are still missing, a walk of its
 * filesystem from the top of its mount. */
static int deny_links(Build *b) {
        size_t n = b->denied.n;
        b->denied_files = calloc(n ? n : 1, sizeof *b->denied_files);
        if (!b->denied_files)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                struct stat st;
                if (stat(b->denied.v[i], &st) < 0)
                        return fail(b, negerrno(), "policy: stat %.300s: %s", b->denied.v[i], strerror(errno));
                if (S_ISREG(st.st_mode) && !denied_file(b, &st))
                        b->denied_files[b->n_denied_files++] =
                                (FileId){ .dev = st.st_dev, .ino = st.st_ino, .nlink = st.st_nlink };
        }
        for (size_t i = 0; i < b->n_denied_files; i++)
                b->denied_files[i].found = 0;
        /* Count each denied name once (the walks add the others). */
        for (size_t i = 0; i < n; i++) {
                struct stat st;
                FileId *f = stat(b->denied.v[i], &st) == 0 && S_ISREG(st.st_mode) ? denied_file(b, &st) : NULL;
                if (f)
                        f->found++;
        }
        for (size_t i = 0; i < n && links_missing(b); i++) {
                char dir[SBX_MAX_PATH_BYTES];
                snprintf(dir, sizeof dir, "%s", b->denied.v[i]);
                char *slash = strrchr(dir, '/');
                if (!slash)
                        continue;
                slash[slash == dir ? 1 : 0] = 0;
                int r = each_entry(b, dir, link_entry, NULL);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < b->n_denied_files && links_missing(b); i++) {
                FileId *f = &b->denied_files[i];
                if (f->found >= f->nlink)
                        continue;
                /* The top of its mount: climb while the parent is on the same device. */
                char top[SBX_MAX_PATH_BYTES] = "/";
                for (size_t k = 0; k < b->denied.n; k++) {
                        struct stat st;
                        if (stat(b->denied.v[k], &st) == 0 && st.st_dev == f->dev && st.st_ino == f->ino) {
                                snprintf(top, sizeof top, "%s", b->denied.v[k]);
                                break;
                        }
                }
                for (;;) {
                        char up[SBX_MAX_PATH_BYTES];
                        snprintf(up, sizeof up, "%s", top);
                        char *slash = strrchr(up, '/');
                        struct stat st;
                        if (!slash || strcmp(top, "/") == 0)
                                break;
                        slash[slash == up ? 1 : 0] = 0;
                        if (stat(up, &st) < 0 || st.st_dev != f->dev)
                                break;
                        snprintf(top, sizeof top, "%s", up);
                }
                dev_t dev = f->dev;
                int r = each_entry(b, top, link_walk, &dev);
                if (r < 0)
                        return r;
                if (f->found < f->nlink)
                        return fail(b, -ENOENT, "policy: a denied file has %lu names, and only %zu were found under %s",
                                    (unsigned long)f->nlink, f->found, top);
        }
        return 0;
}

/* ---- what must stay allowed */

/* The ELF interpreter the file at path names (PT_INTERP), or an empty string: the kernel
 * opens it for execution with the same EXECUTE check as the program. */
static void elf_interp(const char *path, char *out, size_t size) {
        out[0] = 0;
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        Elf64_Ehdr eh;
        if (fd < 0 || pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
            eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum > 256)
                return;
        for (unsigned i = 0; i < eh.e_phnum; i++) {
                Elf64_Phdr ph;
                if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + i * sizeof ph)) != (ssize_t)sizeof ph)
                        return;
                if (ph.p_type != PT_INTERP)
                        continue;
                if (ph.p_filesz == 0 || ph.p_filesz >= size ||
                    pread(fd, out, ph.p_filesz, (off_t)ph.p_offset) != (ssize_t)ph.p_filesz) {
                        out[0] = 0;
                        return;
                }
                out[ph.p_filesz] = 0;
                return;
        }
}

/* The session shell and its loader: a policy that denies them could start no session. */
static int check_shell(Build *b) {
        char interp[SBX_MAX_PATH_BYTES];
        _cleanup_free_ char *bash = realpath("/bin/bash", NULL);
        if (!bash)
                return fail(b, negerrno(), "policy: /bin/bash: %s", strerror(errno));
        elf_interp(bash, interp, sizeof interp);
        _cleanup_free_ char *ld = interp[0] ? realpath(interp, NULL) : NULL;
        if (set_covers(&b->denied, bash) || (ld && set_covers(&b->denied, ld)))
                return fail(b, -EINVAL, "policy.deny covers %s, which runs every session", set_covers(&b->denied, bash) ? bash : ld);
        return 0;
}

/* Adds /bin/bash and the interpreters of the allowed ELF files. */
static int allow_needed(Build *b) {
        char *bash = realpath("/bin/bash", NULL);
        int r = bash ? set_take(&b->allowed, bash) : fail(b, negerrno(), "policy: /bin/bash: %s", strerror(errno));
        for (size_t i = 0, n = b->allowed.n; i < n && r >= 0; i++) {
                char interp[SBX_MAX_PATH_BYTES];
                struct stat st;
                if (stat(b->allowed.v[i], &st) < 0 || !S_ISREG(st.st_mode))
                        continue;
                elf_interp(b->allowed.v[i], interp, sizeof interp);
                char *ld = interp[0] ? realpath(interp, NULL) : NULL;
                if (ld)
                        r = set_take(&b->allowed, ld);
        }
        return r;
}

/* What a pattern resolved to, checked again now that symlinks are followed. */
static int check_resolved(Build *b) {
        for (size_t w = 0; w < ELEMENTSOF(writable_dirs); w++) {
                char *real = realpath(writable_dirs[w], NULL);
                if (!real)
                        continue;
                for (size_t i = 0; i < b->denied.n; i++)
                        if (path_covers(b->denied.v[i], real) || path_covers(real, b->denied.v[i])) {
                                fail(b, -EINVAL, "policy.deny: %.300s %s %s, where commands write", b->denied.v[i],
                                     path_covers(real, b->denied.v[i]) ? "is in" : "covers", real);
                                free(real);
                                return -EINVAL;
                        }
                for (size_t i = 0; i < b->allowed.n; i++)
                        if (path_covers(real, b->allowed.v[i])) {
                                fail(b, -EINVAL, "policy.allow: %.300s is in %s, where nothing may run under an allow list",
                                     b->allowed.v[i], real);
                                free(real);
                                return -EINVAL;
                        }
                free(real);
        }
        return 0;
}

/* ---- the memfd rule */

/* memfd_create() only with MFD_NOEXEC_SEAL: a memfd that can never be executed. Others fail
 * with EACCES. Other architectures' calls are left to the commands' main filter, which kills
 * them. */
static int memfd_noexec(void) {
#if defined(__x86_64__)
        const uint32_t arch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
        const uint32_t arch = AUDIT_ARCH_AARCH64;
#else
        return -EOPNOTSUPP;
#endif
        struct sock_filter f[] = {
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, arch, 1, 0),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
                /* x32 numbers are the same with bit 30 set. */
                BPF_STMT(BPF_ALU | BPF_AND | BPF_K, ~0x40000000U),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_memfd_create, 1, 0),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
                /* flags, the second argument: its low 32 bits (little-endian). */
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
                BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, MFD_NOEXEC_SEAL, 0, 1),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EACCES),
        };
        struct sock_fprog prog = { .len = ELEMENTSOF(f), .filter = f };
        return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0 ? negerrno() : 0;
}

/* ---- applying */

static int build_fs(Build *b, const LandlockPolicy *p) {
        int r = expand_list(b, "deny", p->deny, &b->denied);
        if (r < 0 || (r = check_shell(b)) < 0 || (r = deny_links(b)) < 0)
                return r;
        if (list_empty(p->allow)) {
                Grant all = { .access = b->full };
                if ((r = check_resolved(b)) < 0)
                        return r;
                return b->denied.n ? grant(b, "/", &all) : 0;
        }
        if ((r = expand_list(b, "allow", p->allow, &b->allowed)) < 0 || (r = allow_needed(b)) < 0 ||
            (r = check_resolved(b)) < 0)
                return r;
        for (size_t i = 0; i < ELEMENTSOF(program_dirs); i++) {
                char *real = realpath(program_dirs[i], NULL);
                if (real && (r = set_take(&b->programs, real)) < 0)
                        return r;
        }
        Grant run = { .access = b->full };
        for (size_t i = 0; i < b->allowed.n; i++)
                if ((r = grant(b, b->allowed.v[i], &run)) < 0)
                        return r;
        Grant read = { .access = b->full & ~(uint64_t)LANDLOCK_ACCESS_FS_EXECUTE, .except = &b->programs };
        if ((r = grant(b, "/", &read)) < 0)
                return r;
        Grant read_file = { .access = read.access };
        for (size_t i = 0; i < b->programs.n; i++)
                if (!set_covers(&b->denied, b->programs.v[i]) &&
                    (r = each_entry(b, b->programs.v[i], programs_entry, &read_file)) < 0)
                        return r;
        return 0;
}

int landlock_policy_apply(const LandlockPolicy *p, char *err, size_t errlen) {
        if (!landlock_policy_active(p))
                return 0;
        int abi = landlock_abi();
        if (abi < 0) {
                snprintf(err, errlen, "policy: Landlock: %s", strerror(-abi));
                return abi;
        }
        bool fs = !list_empty(p->allow) || !list_empty(p->deny);
        Build b = { .ruleset = -1, .err = err, .errlen = errlen,
                    .full = RIGHTS_FILE | (abi >= 2 ? LANDLOCK_ACCESS_FS_REFER : 0) };
        RulesetAttr attr = { .handled_access_fs = fs ? b.full : 0,
                             .handled_access_net = p->connect_port >= 0 ? LANDLOCK_ACCESS_NET_CONNECT_TCP : 0 };
        int r = 0;
        b.ruleset = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
        if (b.ruleset < 0)
                r = fail(&b, negerrno(), "policy: Landlock ruleset: %s", strerror(errno));
        if (r >= 0 && fs)
                r = build_fs(&b, p);
        if (r >= 0 && p->connect_port >= 0) {
                struct landlock_net_port_attr np = { .allowed_access = LANDLOCK_ACCESS_NET_CONNECT_TCP,
                                                     .port = (uint64_t)p->connect_port };
                if (syscall(SYS_landlock_add_rule, b.ruleset, LANDLOCK_RULE_NET_PORT, &np, 0) < 0)
                        r = fail(&b, negerrno(), "policy: Landlock port rule: %s", strerror(errno));
        }
        /* Every command runs after an exec (bash's, at least): without this flag (ABI 7) the
         * kernel's audit log would keep the denials of pid 1 alone. */
        unsigned flags = abi >= 7 ? LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON : 0;
        if (r >= 0 && syscall(SYS_landlock_restrict_self, b.ruleset, flags) < 0)
                r = fail(&b, negerrno(), "policy: Landlock restrict: %s", strerror(errno));
        if (r >= 0 && !list_empty(p->allow) && (r = memfd_noexec()) < 0)
                fail(&b, r, "policy: memfd rule: %s", strerror(-r));
        safe_close(b.ruleset);
        set_free(&b.denied);
        set_free(&b.allowed);
        set_free(&b.programs);
        free(b.denied_files);
        return r;
}
