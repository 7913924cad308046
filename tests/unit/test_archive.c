/* SPDX-License-Identifier: MIT */
/* Unit tests of fs/archive and base/sha256: a round trip through export, check and extract
 * between two fake sandbox roots, the refusal of hostile archives built here with libarchive,
 * and SHA-256 against the FIPS 180 examples. */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/sha256.h"
#include "fs/archive.h"
#include "tap.h"

static void skip(const char *what, const char *why) {
        printf("ok %d - %s # SKIP %s\n", ++tap_n, what, why);
        fflush(stdout);
}

static void hex_of(const void *data, size_t len, char out[SHA256_HEX_SIZE]) {
        struct sha256_ctx s;
        sha256_init(&s);
        sha256_feed(&s, data, len);
        sha256_digest_hex(&s, out);
}

static void test_sha256(void) {
        char hex[SHA256_HEX_SIZE];
        hex_of("", 0, hex);
        CHECK(strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") == 0, "sha256 of \"\"");
        hex_of("abc", 3, hex);
        CHECK(strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0, "sha256 of \"abc\"");
        const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        hex_of(two, strlen(two), hex);
        CHECK(strcmp(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1") == 0,
              "sha256 of the two-block example");
        /* A million 'a' in uneven pieces, so block boundaries fall everywhere. */
        static char a[1000];
        memset(a, 'a', sizeof a);
        struct sha256_ctx s;
        sha256_init(&s);
        size_t done = 0;
        for (size_t step = 1; done < 1000000; step = step % 997 + 1) {
                size_t n = MIN(step, 1000000 - done);
                sha256_feed(&s, a, n);
                done += n;
        }
        sha256_digest_hex(&s, hex);
        CHECK(strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0,
              "sha256 of a million 'a' fed in pieces");
}

/* ---- a fake sandbox root ---------------------------------------------------------------- */

static char base_dir[64];

_printf_(1, 2) static char *at(const char *fmt, ...) {
        static char bufs[4][4096];
        static int i;
        char *b = bufs[i++ % 4];
        int n = snprintf(b, sizeof bufs[0], "%s/", base_dir);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b + n, sizeof bufs[0] - (size_t)n, fmt, ap);
        va_end(ap);
        return b;
}

static bool put_file(const char *path, const void *data, size_t len, mode_t mode) {
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0)
                return false;
        bool ok = write(fd, data, len) == (ssize_t)len && fchmod(fd, mode) == 0;
        close(fd);
        return ok;
}

static bool set_mtime(const char *path, time_t t) {
        struct timespec ts[2] = { { t, 0 }, { t, 0 } };
        return utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW) == 0;
}

static bool make_root(const char *r) {
        char p[4096];
        const char *dirs[] = { "", "tmp", "home", "home/user", "dev", "dev/shm" };
        for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
                snprintf(p, sizeof p, "%s/%s", r, dirs[i]);
                if (mkdir(p, 0755) < 0 && errno != EEXIST)
                        return false;
        }
        return true;
}

static uint8_t big[1024 * 1024];

/* The tree the round trip carries: every kind of entry an export keeps, and a socket it
 * must leave out. Times last, since creating entries moves their directory's mtime. */
static bool fill_tree(void) {
        static const char nul[] = "a\0b\0\0c\n\0";
        uint32_t x = 12345;
        for (size_t i = 0; i < sizeof big; i++) {
                x = x * 1103515245 + 12345;
                big[i] = (uint8_t)(x >> 16);
        }
        bool ok = make_root(at("a")) && chmod(at("a/tmp"), 01777) == 0 && chmod(at("a/dev/shm"), 01777) == 0;
        ok = ok && put_file(at("a/tmp/nul.bin"), nul, sizeof nul, 0600);
        ok = ok && put_file(at("a/tmp/empty"), "", 0, 0644);
        ok = ok && put_file(at("a/tmp/suid"), "#!/bin/sh\n", 10, 0755) && chmod(at("a/tmp/suid"), 04755) == 0;
        ok = ok && mkfifo(at("a/tmp/fifo"), 0600) == 0 && chmod(at("a/tmp/fifo"), 0640) == 0;
        ok = ok && mkdir(at("a/tmp/shared"), 0700) == 0 && chmod(at("a/tmp/shared"), 01777) == 0;
        int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", at("a/tmp/sock"));
        ok = ok && sock >= 0 && bind(sock, (struct sockaddr *)&sa, sizeof sa) == 0;
        safe_close(sock);
        ok = ok && put_file(at("a/home/user/big"), big, sizeof big, 0755);
        ok = ok && mkdir(at("a/home/user/d1"), 0750) == 0 && mkdir(at("a/home/user/d1/d2"), 0700) == 0;
        ok = ok && put_file(at("a/home/user/d1/d2/deep.txt"), "deep\n", 5, 0644);
        ok = ok && mkdir(at("a/home/user/ro"), 0755) == 0 && put_file(at("a/home/user/ro/f"), "ro", 2, 0444) &&
             chmod(at("a/home/user/ro"), 0555) == 0;
        ok = ok && mkdir(at("a/home/user/emptydir"), 0711) == 0;
        ok = ok && symlink("d1/d2/deep.txt", at("a/home/user/link")) == 0;
        ok = ok && symlink("/tmp/nul.bin", at("a/home/user/abs")) == 0;
        ok = ok && link(at("a/tmp/nul.bin"), at("a/home/user/hl")) == 0;
        ok = ok && link(at("a/home/user/big"), at("a/home/user/d1/big2")) == 0;
        ok = ok && put_file(at("a/home/user/caf\xc3\xa9.txt"), "utf8", 4, 0644);
        ok = ok && put_file(at("a/dev/shm/seg"), "shm", 3, 0600);
        /* Names past ustar's 100 bytes and not valid UTF-8 go through pax headers. */
        ok = ok && put_file(at("a/tmp/raw\xff\xfe"), "raw", 3, 0600);
        char longname[200];
        memset(longname, 'n', sizeof longname - 1);
        longname[sizeof longname - 1] = 0;
        ok = ok && mkdir(at("a/home/user/%s", longname), 0755) == 0 &&
             put_file(at("a/home/user/%s/%s", longname, longname), "long", 4, 0644) &&
             symlink(at("%s/%s", longname, longname), at("a/home/user/longlink")) == 0;
        const char *paths[] = { "tmp/nul.bin", "tmp/empty", "tmp/suid", "tmp/fifo", "home/user/big",
                                "home/user/d1/d2/deep.txt", "home/user/ro/f", "home/user/link", "home/user/abs",
                                "home/user/caf\xc3\xa9.txt", "dev/shm/seg", "tmp/shared", "home/user/emptydir",
                                "home/user/d1/d2", "home/user/d1", "home/user/ro", "tmp", "home/user", "dev/shm" };
        for (size_t i = 0; ok && i < ELEMENTSOF(paths); i++)
                ok = set_mtime(at("a/%s", paths[i]), 1600000000 + (time_t)i * 1000);
        return ok;
}

static uint8_t *slurp(const char *path, size_t *ret_len) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0) {
                safe_close(fd);
                return NULL;
        }
        uint8_t *b = malloc((size_t)st.st_size + 1);
        ssize_t n = b ? read(fd, b, (size_t)st.st_size) : -1;
        close(fd);
        if (n != st.st_size) {
                free(b);
                return NULL;
        }
        *ret_len = (size_t)n;
        return b;
}

static int mismatches;

_printf_(1, 2) static void mismatch(const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        printf("# mismatch: ");
        vprintf(fmt, ap);
        printf("\n");
        va_end(ap);
        mismatches++;
}

/* Compares the entry rel of root a with root b: type, mode (set-id bits dropped), mtime,
 * contents or target; directories recursively, both ways. */
static void compare(const char *rel) {
        char pa[4096], pb[4096];
        snprintf(pa, sizeof pa, "%s", at("a/%s", rel));
        snprintf(pb, sizeof pb, "%s", at("b/%s", rel));
        struct stat sa, sb;
        if (lstat(pa, &sa) < 0) {
                mismatch("%s: missing in the source", rel);
                return;
        }
        if (S_ISSOCK(sa.st_mode)) {
                if (lstat(pb, &sb) == 0)
                        mismatch("%s: socket was extracted", rel);
                return;
        }
        if (lstat(pb, &sb) < 0) {
                mismatch("%s: not extracted", rel);
                return;
        }
        if ((sa.st_mode & S_IFMT) != (sb.st_mode & S_IFMT))
                mismatch("%s: type %o, extracted %o", rel, sa.st_mode & S_IFMT, sb.st_mode & S_IFMT);
        if (!S_ISLNK(sa.st_mode) && (sa.st_mode & 07777 & ~(unsigned)06000) != (sb.st_mode & 07777))
                mismatch("%s: mode %o, extracted %o", rel, sa.st_mode & 07777, sb.st_mode & 07777);
        if (sa.st_mtim.tv_sec != sb.st_mtim.tv_sec)
                mismatch("%s: mtime %lld, extracted %lld", rel, (long long)sa.st_mtim.tv_sec, (long long)sb.st_mtim.tv_sec);
        if (S_ISREG(sa.st_mode)) {
                size_t la = 0, lb = 0;
                _cleanup_free_ uint8_t *da = slurp(pa, &la);
                _cleanup_free_ uint8_t *db = slurp(pb, &lb);
                if (!da || !db || la != lb || memcmp(da, db, la) != 0)
                        mismatch("%s: contents differ", rel);
        } else if (S_ISLNK(sa.st_mode)) {
                char ta[4096] = "", tb[4096] = "";
                if (readlink(pa, ta, sizeof ta - 1) < 0 || readlink(pb, tb, sizeof tb - 1) < 0 || strcmp(ta, tb) != 0)
                        mismatch("%s: link target %s, extracted %s", rel, ta, tb);
        } else if (S_ISDIR(sa.st_mode)) {
                for (int side = 0; side < 2; side++) {
                        DIR *d = opendir(side ? pb : pa);
                        struct dirent *de;
                        while (d && (de = readdir(d))) {
                                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                                        continue;
                                char sub[4096];
                                snprintf(sub, sizeof sub, "%s/%s", rel, de->d_name);
                                if (side == 0)
                                        compare(sub);
                                else if (lstat(at("a/%s", sub), &sa) < 0)
                                        mismatch("%s: extracted but not in the source", sub);
                        }
                        if (d)
                                closedir(d);
                }
        }
}

static ino_t ino_of(const char *path) {
        struct stat st;
        return lstat(path, &st) == 0 ? st.st_ino : 0;
}

static void test_round_trip(void) {
        CHECK(fill_tree(), "source tree built");
        /* A state as the builtin writes it, with binary bytes in a section. */
        uint8_t state[] = { 'S', 'B', 'X', 'S', 'T', 'A', 'T', 'E', ' ', '1', '\n', 'V', ':', '4', '\n', 0, 1, 0xff, 'd', '\n' };
        uint8_t empty_state[] = "SBXSTATE 1\n";
        ArchiveSession sessions[] = { { "default", state, sizeof state }, { "build.2", empty_state, sizeof empty_state - 1 } };
        ArchiveMeta out = { .limits = { 4 << 20, 500, 2 << 20, 3, 4, 5, 6, 7 },
                            .sessions = sessions,
                            .n_sessions = 2,
                            .created_ms = 1700000000123ULL };
        TreeIds ids = { .src_uid = getuid(), .dst_uid = 1000, .src_gid = getgid(), .dst_gid = 1000 };
        int root = open(at("a"), O_PATH | O_DIRECTORY | O_CLOEXEC);
        int fd = open(at("out.tar.zst"), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        char err[512] = "";
        int r = archive_export(root, &ids, &out, fd, err, sizeof err);
        CHECK(r == 0, "export succeeds (%d %s)", r, err);
        safe_close(fd);
        safe_close(root);
        /* 3 tops + nul.bin empty suid fifo shared raw + big d1 d2 deep ro f emptydir link abs hl big2 café
         * long/ long/long longlink + seg */
        /* home/user/hl, a hard link of tmp/nul.bin, is a file of its own: link() does not cross
         * the sandbox's bind mounts. */
        CHECK(out.entries == 25 && out.bytes == 9 + 10 + 3 + sizeof big + 5 + 2 + 4 + 4 + 3 + 9,
              "export counts entries and bytes (%llu, %llu)", (unsigned long long)out.entries,
              (unsigned long long)out.bytes);

        size_t len = 0;
        _cleanup_free_ uint8_t *data = slurp(at("out.tar.zst"), &len);
        CHECK(data && len > 0 && len < sizeof big + 64 * 1024, "archive is read back (%zu bytes)", len);
        if (!data)
                return;

        ArchiveLimits limits = { .fs_bytes = 64 << 20, .file_count = 1000 };
        ArchiveMeta in = { 0 };
        err[0] = 0;
        r = archive_check(data, len, &limits, &in, err, sizeof err);
        CHECK(r == 0, "check accepts the export (%d %s)", r, err);
        CHECK(in.entries == out.entries && in.bytes == out.bytes && in.created_ms == out.created_ms,
              "check reports the same counts and creation time");
        CHECK(memcmp(&in.limits, &out.limits, sizeof in.limits) == 0, "limits survive the round trip");
        CHECK(in.n_sessions == 2 && strcmp(in.sessions[0].name, "default") == 0 &&
                      in.sessions[0].state_len == sizeof state && memcmp(in.sessions[0].state, state, sizeof state) == 0 &&
                      strcmp(in.sessions[1].name, "build.2") == 0 && in.sessions[1].state_len == sizeof empty_state - 1,
              "sessions and their binary states survive the round trip");
        archive_meta_clear(&in);
        CHECK(in.sessions == NULL && in.n_sessions == 0, "meta clear frees the sessions");

        CHECK(make_root(at("b")), "destination root built");
        root = open(at("b"), O_PATH | O_DIRECTORY | O_CLOEXEC);
        err[0] = 0;
        r = archive_extract(data, len, root, err, sizeof err);
        CHECK(r == 0, "extract succeeds (%d %s)", r, err);
        safe_close(root);
        mismatches = 0;
        compare("tmp");
        compare("home/user");
        compare("dev/shm");
        CHECK(mismatches == 0, "extracted tree equals the source: contents, modes, mtimes, link targets");
        struct stat st;
        CHECK(stat(at("b/tmp/suid"), &st) == 0 && (st.st_mode & 07777) == 0755, "setuid bit dropped on export");
        CHECK(lstat(at("b/tmp/sock"), &st) < 0 && errno == ENOENT, "socket left out");
        CHECK(stat(at("b/home/user/ro"), &st) == 0 && (st.st_mode & 07777) == 0555 &&
                      stat(at("b/home/user/ro/f"), &st) == 0,
              "read-only directory extracted with its content");
        CHECK(ino_of(at("b/tmp/nul.bin")) != ino_of(at("b/home/user/hl")) && ino_of(at("b/home/user/hl")) != 0,
              "hard link across tmp and home/user exported as a file of its own");
        CHECK(ino_of(at("b/home/user/big")) == ino_of(at("b/home/user/d1/big2")) && ino_of(at("b/home/user/big")) != 0,
              "hard link within home/user kept as one inode");
        CHECK(stat(at("b/tmp/fifo"), &st) == 0 && S_ISFIFO(st.st_mode), "fifo extracted as a fifo");

        if (access("/usr/bin/zstd", X_OK) != 0 || (access("/usr/bin/tar", X_OK) != 0 && access("/bin/tar", X_OK) != 0)) {
                skip("plain tar lists the archive", "tar or zstd missing");
        } else {
                char cmd[512];
                snprintf(cmd, sizeof cmd, "tar --zstd -tf '%s' > '%s' 2>&1", at("out.tar.zst"), at("list"));
                int rc = system(cmd);
                size_t ll = 0;
                _cleanup_free_ uint8_t *list = slurp(at("list"), &ll);
                if (list)
                        list[ll] = 0;
                CHECK(rc == 0 && list && strstr((char *)list, "home/user/d1/d2/deep.txt\n") &&
                              strstr((char *)list, "sbx-manifest.json\n"),
                      "plain tar lists the archive (%d)", rc);
        }
}

/* ---- hostile archives -------------------------------------------------------------------- */

typedef struct TEnt {
        const char *path;
        char type; /* f d l h p c, as in the digest; c a character device */
        unsigned mode;
        const char *data;
        const char *target;
} TEnt;

typedef struct TOpts {
        const char *format;   /* default sbx-export */
        int version;          /* default 1 */
        const char *session;  /* default "default" */
        const char *manifest; /* this text as the manifest instead */
        bool flip;            /* changes a data byte after the digest is taken */
        bool no_manifest, gzip, no_filter;
        const TEnt *after; /* an entry after the manifest */
} TOpts;

static size_t t_size(const TEnt *e) { return e->type == 'f' && e->data ? strlen(e->data) : 0; }

/* The payload digest as archive.h defines it, written again here from the text. */
static void t_digest(struct sha256_ctx *s, const TEnt *e) {
        char num[64];
        size_t size = t_size(e);
        sha256_feed(s, e->path, strlen(e->path) + 1);
        sha256_feed(s, (char[]){ e->type, 0 }, 2);
        sha256_feed(s, num, (size_t)snprintf(num, sizeof num, "%o", e->mode) + 1);
        sha256_feed(s, num, (size_t)snprintf(num, sizeof num, "%zu", size) + 1);
        if (e->type == 'l' || e->type == 'h')
                sha256_feed(s, e->target, strlen(e->target));
        sha256_feed(s, "", 1);
        sha256_feed(s, e->data ? e->data : "", size);
}

static void t_write(struct archive *a, const TEnt *e) {
        struct archive_entry *ae = archive_entry_new();
        size_t size = t_size(e);
        archive_entry_set_pathname(ae, e->path);
        archive_entry_set_filetype(ae, e->type == 'd'   ? AE_IFDIR
                                       : e->type == 'l' ? AE_IFLNK
                                       : e->type == 'p' ? AE_IFIFO
                                       : e->type == 'c' ? AE_IFCHR
                                                        : AE_IFREG);
        archive_entry_set_perm(ae, e->mode);
        archive_entry_set_size(ae, (la_int64_t)size);
        archive_entry_set_mtime(ae, 1600000000, 0);
        if (e->type == 'l')
                archive_entry_set_symlink(ae, e->target);
        if (e->type == 'h')
                archive_entry_set_hardlink(ae, e->target);
        if (e->type == 'c')
                archive_entry_set_rdev(ae, makedev(1, 3));
        archive_write_header(a, ae);
        archive_entry_free(ae);
        if (size)
                archive_write_data(a, e->data, size);
}

static uint8_t *build(const TEnt *es, size_t n, const TOpts *o, size_t *ret_len) {
        size_t cap = 32 << 20, used = 0;
        uint8_t *buf = malloc(cap);
        struct archive *a = archive_write_new();
        archive_write_set_format_pax_restricted(a);
        if (o->gzip)
                archive_write_add_filter_gzip(a);
        else if (!o->no_filter)
                archive_write_add_filter_zstd(a);
        archive_write_set_bytes_in_last_block(a, 1);
        archive_write_open_memory(a, buf, cap, &used);
        struct sha256_ctx s;
        sha256_init(&s);
        size_t bytes = 0;
        for (size_t i = 0; i < n; i++) {
                TEnt e = es[i];
                t_digest(&s, &e);
                _cleanup_free_ char *bad = NULL;
                if (o->flip && e.type == 'f' && e.data && e.data[0] && (bad = strdup(e.data))) {
                        /* After the digest took the original: exactly one byte differs. */
                        bad[0] ^= 1;
                        e.data = bad;
                }
                t_write(a, &e);
                if (e.type == 'f' && e.data)
                        bytes += strlen(e.data);
        }
        char hex[SHA256_HEX_SIZE], manifest[1024];
        sha256_digest_hex(&s, hex);
        snprintf(manifest, sizeof manifest,
                 "{\"format\":\"%s\",\"version\":%d,\"createdAt\":1,\"limits\":{\"fsBytes\":1,\"fileCount\":2,"
                 "\"memoryBytes\":3,\"pids\":4,\"stdoutBytes\":5,\"stderrBytes\":6,\"commandBytes\":7,\"timeoutMs\":8},"
                 "\"sessions\":[{\"name\":\"%s\",\"state\":\"U0JYU1RBVEUgMQpWOjIKaGkK\"}],"
                 "\"payload\":{\"sha256\":\"%s\",\"entries\":%zu,\"bytes\":%zu}}",
                 o->format ? o->format : "sbx-export", o->version ? o->version : 1, o->session ? o->session : "default",
                 hex, n, bytes);
        if (!o->no_manifest) {
                const char *m = o->manifest ? o->manifest : manifest;
                struct archive_entry *ae = archive_entry_new();
                archive_entry_set_pathname(ae, "sbx-manifest.json");
                archive_entry_set_filetype(ae, AE_IFREG);
                archive_entry_set_perm(ae, 0644);
                archive_entry_set_size(ae, (la_int64_t)strlen(m));
                archive_write_header(a, ae);
                archive_write_data(a, m, strlen(m));
                archive_entry_free(ae);
        }
        if (o->after)
                t_write(a, o->after);
        archive_write_close(a);
        archive_write_free(a);
        *ret_len = used;
        return buf;
}

static const ArchiveLimits roomy = { .fs_bytes = 1 << 20, .file_count = 100 };

/* Builds the archive and checks it; expect NULL means it must pass. */
static void expect(const char *name, const TEnt *es, size_t n, const TOpts *o, const ArchiveLimits *l,
                   const char *expect_msg) {
        size_t len;
        _cleanup_free_ uint8_t *data = build(es, n, o, &len);
        char err[512] = "";
        ArchiveMeta m = { 0 };
        int r = archive_check(data, len, l ? l : &roomy, &m, err, sizeof err);
        if (!expect_msg)
                CHECK(r == 0, "%s: accepted (%d %s)", name, r, err);
        else
                CHECK(r == -EINVAL && strstr(err, expect_msg), "%s: refused with \"%s\"", name, err);
        archive_meta_clear(&m);
}

#define EXPECT(name, opts, limits, msg, ...)                                                   \
        do {                                                                                   \
                const TEnt es_[] = { __VA_ARGS__ };                                            \
                expect(name, es_, ELEMENTSOF(es_), &(const TOpts)opts, limits, msg);          \
        } while (0)

#define TOP { "tmp", 'd', 0755, NULL, NULL }
#define FILE_A { "tmp/a", 'f', 0644, "hello", NULL }

/* An archive from another writer: directories after their content, parents left implicit. */
static void test_foreign_order(void) {
        const TEnt es[] = { TOP, FILE_A, { "tmp/l", 'l', 0777, NULL, "../home/user/x" },
                            { "tmp/dot", 'l', 0777, NULL, "." },
                            { "tmp/py", 'l', 0777, NULL, "/usr/bin/python3" }, { "tmp/h", 'h', 0644, NULL, "tmp/a" },
                            { "dev/shm/p", 'p', 0600, NULL, NULL }, { "home/user/sub/deep", 'f', 0600, "x", NULL },
                            { "home/user/sub", 'd', 0500, NULL, NULL }, { "home/user/i1/i2/f", 'f', 0640, "y", NULL } };
        expect("well-formed archive built by the test", es, ELEMENTSOF(es), &(const TOpts){ 0 }, NULL, NULL);
        size_t len;
        _cleanup_free_ uint8_t *data = build(es, ELEMENTSOF(es), &(const TOpts){ 0 }, &len);
        char err[512] = "";
        int root = make_root(at("c")) ? open(at("c"), O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
        int r = archive_extract(data, len, root, err, sizeof err);
        safe_close(root);
        CHECK(r == 0, "extract of the well-formed archive (%d %s)", r, err);
        struct stat st, sa;
        char target[64] = "";
        CHECK(stat(at("c/home/user/sub"), &st) == 0 && (st.st_mode & 07777) == 0500 && st.st_mtim.tv_sec == 1600000000 &&
                      stat(at("c/home/user/sub/deep"), &sa) == 0 && (sa.st_mode & 07777) == 0600,
              "directory listed after its content gets its mode and time at the end");
        CHECK(stat(at("c/home/user/i1/i2"), &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0700,
              "implicit parents are made 0700");
        CHECK(stat(at("c/tmp/a"), &st) == 0 && stat(at("c/tmp/h"), &sa) == 0 && st.st_ino == sa.st_ino && st.st_nlink == 2,
              "hard link entry becomes a link");
        CHECK(readlink(at("c/tmp/l"), target, sizeof target - 1) > 0 && strcmp(target, "../home/user/x") == 0,
              "symlink kept as written");
        CHECK(stat(at("c/dev/shm/p"), &st) == 0 && S_ISFIFO(st.st_mode) && (st.st_mode & 07777) == 0600, "fifo made");
}

static void test_hostile(void) {

        uint8_t junk[4096];
        uint32_t x = 7;
        for (size_t i = 0; i < sizeof junk; i++)
                junk[i] = (uint8_t)((x = x * 1103515245 + 12345) >> 16);
        char err[512] = "";
        int r = archive_check(junk, sizeof junk, &roomy, NULL, err, sizeof err);
        CHECK(r == -EINVAL && strstr(err, "not a zstd-compressed tar"), "random bytes: refused with \"%s\"", err);
        err[0] = 0;
        r = archive_check(junk, 0, &roomy, NULL, err, sizeof err);
        CHECK(r == -EINVAL && strstr(err, "not a zstd-compressed tar"), "empty input: refused with \"%s\"", err);
        EXPECT("gzip-compressed tar", { .gzip = true }, NULL, "not a zstd-compressed tar", TOP, FILE_A);
        EXPECT("uncompressed tar", { .no_filter = true }, NULL, "not a zstd-compressed tar", TOP, FILE_A);
        EXPECT("wrong format name", { .format = "other" }, NULL, "format is \"other\"", TOP, FILE_A);
        EXPECT("version 2", { .version = 2 }, NULL, "unsupported version 2", TOP, FILE_A);
        EXPECT("one data byte changed", { .flip = true }, NULL, "checksum mismatch", TOP, FILE_A);
        EXPECT("manifest missing", { .no_manifest = true }, NULL, "no sbx-manifest.json", TOP, FILE_A);
        EXPECT("manifest not JSON", { .manifest = "{nope" }, NULL, "not valid JSON", TOP, FILE_A);
        EXPECT("manifest without payload", { .manifest = "{\"format\":\"sbx-export\",\"version\":1,\"createdAt\":1,"
                                                         "\"limits\":{}}" },
               NULL, "missing or invalid payload", TOP, FILE_A);
        EXPECT("bad session name", { .session = "no spaces" }, NULL, "invalid session name", TOP, FILE_A);
        EXPECT("session state not a state", { .manifest = "{\"format\":\"sbx-export\",\"version\":1,\"createdAt\":1,"
                                                       "\"limits\":{\"fsBytes\":1,\"fileCount\":2,\"memoryBytes\":3,"
                                                       "\"pids\":4,\"stdoutBytes\":5,\"stderrBytes\":6,\"commandBytes\":7,"
                                                       "\"timeoutMs\":8},\"sessions\":[{\"name\":\"a\",\"state\":\"aGk=\"}],"
                                                       "\"payload\":{\"sha256\":\"x\",\"entries\":0,\"bytes\":0}}" },
               NULL, "not a session state", TOP);
        {
                /* {"a":[{},{},...]}: a few bytes compressed, gigabytes once built by jansson. */
                static char bomb[200000];
                size_t k = (size_t)snprintf(bomb, sizeof bomb, "{\"a\":[");
                while (k + 4 < sizeof bomb) {
                        memcpy(bomb + k, "{},", 3);
                        k += 3;
                }
                memcpy(bomb + k - 1, "]}", 3);
                EXPECT("manifest with 66,000 objects", { .manifest = bomb }, NULL, "more than 4096 objects and arrays", TOP);
        }
        EXPECT("entry after the manifest", { .after = &(const TEnt)FILE_A }, NULL, "after the manifest", TOP);
        EXPECT("absolute path", {}, NULL, "/etc/passwd: absolute path", TOP, { "/etc/passwd", 'f', 0644, "x", NULL });
        EXPECT("'..' path", {}, NULL, "tmp/../x: '..' component", TOP, { "tmp/../x", 'f', 0644, "x", NULL });
        EXPECT("path outside the writable directories", {}, NULL, "etc/passwd: outside tmp, home/user and dev/shm", TOP,
               { "etc/passwd", 'f', 0644, "x", NULL });
        EXPECT("home itself", {}, NULL, "home: outside", TOP, { "home", 'd', 0755, NULL, NULL });
        EXPECT("symlink to /etc/shadow", {}, NULL, "tmp/l: link target outside the sandbox",
               TOP, { "tmp/l", 'l', 0777, NULL, "/etc/shadow" });
        EXPECT("symlink to ../../etc", {}, NULL, "home/user/l: link target outside", TOP,
               { "home/user/l", 'l', 0777, NULL, "../../etc" });
        EXPECT("symlink above the root", {}, NULL, "link target outside", TOP,
               { "tmp/l", 'l', 0777, NULL, "../../../../tmp" });
        EXPECT("hard link to an unknown entry", {}, NULL, "tmp/h: hard link target tmp/nope", TOP, FILE_A,
               { "tmp/h", 'h', 0644, NULL, "tmp/nope" });
        EXPECT("hard link to a later entry", {}, NULL, "hard link target tmp/a", TOP,
               { "tmp/h", 'h', 0644, NULL, "tmp/a" }, FILE_A);
        EXPECT("hard link between dev/shm and tmp", {}, NULL, "hard link between", TOP, FILE_A,
               { "dev/shm/h", 'h', 0644, NULL, "tmp/a" });
        EXPECT("character device", {}, NULL, "tmp/dev: device node", TOP, { "tmp/dev", 'c', 0666, NULL, NULL });
        EXPECT("setuid bit", {}, NULL, "tmp/s: setuid/setgid bit", TOP, { "tmp/s", 'f', 04755, "x", NULL });
        EXPECT("setgid directory", {}, NULL, "setuid/setgid bit", TOP, { "tmp/g", 'd', 02755, NULL, NULL });
        EXPECT("duplicate entry", {}, NULL, "tmp/a: duplicate entry", TOP, FILE_A, FILE_A);
        EXPECT("entry under a file", {}, NULL, "parent tmp/a is not a directory", TOP, FILE_A,
               { "tmp/a/b", 'f', 0644, "x", NULL });
        EXPECT("top directory as a file", {}, NULL, "tmp: not a directory", { "tmp", 'f', 0644, "x", NULL });
        ArchiveLimits small = { .fs_bytes = 8, .file_count = 100 };
        EXPECT("more bytes than fs_bytes", {}, &small, "archive too large: 4096 bytes on the sandbox's filesystem, the limit is 8", TOP, FILE_A,
               { "tmp/b", 'f', 0644, "hello", NULL });
        ArchiveLimits few = { .fs_bytes = 1 << 20, .file_count = 2 };
        EXPECT("more entries than file_count", {}, &few, "too many entries: more than 2", TOP, FILE_A,
               { "tmp/b", 'f', 0644, "x", NULL }, { "tmp/c", 'f', 0644, "x", NULL });
        EXPECT("implicit parents count as entries", {}, &few, "too many entries", TOP,
               { "tmp/d1/d2/d3/f", 'f', 0644, "x", NULL });
}

/* A sparse file bigger than the sandbox's limit: its archive could never be imported, so the
 * export refuses it instead of writing out all its holes. */
static void test_sparse_refused(void) {
        CHECK(make_root(at("sparse")), "sparse root built");
        int fd = open(at("sparse/tmp/holes"), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        CHECK(fd >= 0 && ftruncate(fd, 64 << 20) == 0, "64 MiB sparse file made");
        safe_close(fd);
        ArchiveMeta m = { .limits = { .fs_bytes = 1 << 20, .file_count = 100 } };
        TreeIds ids = { getuid(), 1000, getgid(), 1000 };
        int root = open(at("sparse"), O_PATH | O_DIRECTORY | O_CLOEXEC);
        int out = open(at("sparse.tar.zst"), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        char err[512] = "";
        int r = archive_export(root, &ids, &m, out, err, sizeof err);
        CHECK(r == -EFBIG && strstr(err, "tmp/holes") && strstr(err, "limit"), "sparse file over the limit refused (%d %s)",
              r, err);
        safe_close(out);
        safe_close(root);
}

/* ---- deep trees ------------------------------------------------------------------------- */

static char deep_dir[128];

/* An fd of the directory `levels` "d" below dir, made where missing if create. */
static int chain(int dir, size_t levels, bool create) {
        int fd = fcntl(dir, F_DUPFD_CLOEXEC, 3);
        for (size_t i = 0; fd >= 0 && i < levels; i++) {
                if (create && mkdirat(fd, "d", 0755) < 0) {
                        fd = safe_close(fd);
                        break;
                }
                int next = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                close(fd);
                fd = next;
        }
        return fd;
}

static int deep_open(const char *rel, int flags) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", deep_dir, rel);
        return open(p, flags | O_CLOEXEC, 0600);
}

static double seconds(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* 5,000 levels (paths of 10 KB) through export, check and extract: a file, a symlink and a
 * hard link between levels 4,000 and 5,000 at the bottom. */
static void test_deep_round_trip(void) {
        char src_root[256], dst_root[256];
        snprintf(src_root, sizeof src_root, "%s/src", deep_dir);
        snprintf(dst_root, sizeof dst_root, "%s/dst", deep_dir);
        CHECK(make_root(src_root) && make_root(dst_root), "deep roots built");
        _cleanup_close_ int home = deep_open("src/home/user", O_RDONLY | O_DIRECTORY);
        int bottom = chain(home, 5000, true), at4000 = chain(home, 4000, false);
        bool ok = bottom >= 0 && at4000 >= 0;
        int fd = ok ? openat(bottom, "f", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640) : -1;
        ok = fd >= 0 && write(fd, "bottom\n", 7) == 7;
        safe_close(fd);
        ok = ok && symlinkat("f", bottom, "l") == 0 && mkdirat(at4000, "x", 0755) == 0;
        int x = ok ? openat(at4000, "x", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        ok = ok && x >= 0 && linkat(bottom, "f", x, "hl", 0) == 0;
        struct timespec ts[2] = { { 1600000000, 0 }, { 1600000000, 0 } };
        ok = ok && futimens(bottom, ts) == 0;
        safe_close(x);
        safe_close(at4000);
        safe_close(bottom);
        CHECK(ok, "a 5,000-level tree built");

        ArchiveMeta m = { .limits = { .fs_bytes = 1 << 20, .file_count = 20000 } };
        TreeIds ids = { getuid(), 1000, getgid(), 1000 };
        int root = deep_open("src", O_PATH | O_DIRECTORY);
        int out = deep_open("deep.tar.zst", O_WRONLY | O_CREAT | O_EXCL);
        char err[512] = "";
        double t0 = seconds();
        int r = archive_export(root, &ids, &m, out, err, sizeof err);
        double t1 = seconds();
        safe_close(out);
        safe_close(root);
        /* 3 tops, 5,000 directories, f l x hl */
        CHECK(r == 0 && m.entries == 5007, "export of 5,000 levels (%d %s, %llu entries)", r, err,
              (unsigned long long)m.entries);
        char path[512];
        snprintf(path, sizeof path, "%s/deep.tar.zst", deep_dir);
        size_t len = 0;
        _cleanup_free_ uint8_t *data = slurp(path, &len);
        ArchiveLimits limits = { .fs_bytes = 1 << 20, .file_count = 20000 };
        double t2 = seconds();
        r = data ? archive_check(data, len, &limits, NULL, err, sizeof err) : -EIO;
        double t3 = seconds();
        CHECK(r == 0, "check accepts it (%d %s)", r, err);
        ArchiveLimits tight = { .fs_bytes = 1 << 20, .file_count = 5003 };
        r = data ? archive_check(data, len, &tight, NULL, err, sizeof err) : -EIO;
        CHECK(r == -EINVAL && strstr(err, "too many entries"), "the inode limit is what bounds the depth (%s)", err);
        err[0] = 0;
        root = deep_open("dst", O_PATH | O_DIRECTORY);
        double t4 = seconds();
        r = data ? archive_extract(data, len, root, err, sizeof err) : -EIO;
        double t5 = seconds();
        safe_close(root);
        CHECK(r == 0, "extract of 5,000 levels (%d %s)", r, err);
        printf("# export %.3f s, check %.3f s, extract %.3f s, %zu bytes\n", t1 - t0, t3 - t2, t5 - t4, len);
        _cleanup_close_ int dhome = deep_open("dst/home/user", O_RDONLY | O_DIRECTORY);
        bottom = chain(dhome, 5000, false);
        at4000 = chain(dhome, 4000, false);
        char buf[16] = "", target[8] = "";
        struct stat sf, sh, sd;
        fd = bottom >= 0 ? openat(bottom, "f", O_RDONLY | O_CLOEXEC) : -1;
        CHECK(fd >= 0 && read(fd, buf, sizeof buf) == 7 && memcmp(buf, "bottom\n", 7) == 0 && fstat(fd, &sf) == 0 &&
                      (sf.st_mode & 07777) == 0640,
              "the bottom file is extracted with its mode");
        safe_close(fd);
        CHECK(bottom >= 0 && readlinkat(bottom, "l", target, sizeof target - 1) == 1 && fstat(bottom, &sd) == 0 &&
                      sd.st_mtim.tv_sec == 1600000000,
              "the symlink and the bottom directory's time");
        CHECK(at4000 >= 0 && fstatat(at4000, "x/hl", &sh, 0) == 0 && sh.st_ino == sf.st_ino,
              "the hard link 1,000 levels up is the same inode");
        safe_close(bottom);
        safe_close(at4000);
}

/* "head" + n times "unit" + "tail", malloc'd. */
static char *repeat(const char *head, const char *unit, size_t n, const char *tail) {
        size_t hl = strlen(head), ul = strlen(unit), tl = strlen(tail);
        char *p = malloc(hl + n * ul + tl + 1);
        memcpy(p, head, hl);
        for (size_t i = 0; i < n; i++)
                memcpy(p + hl + i * ul, unit, ul);
        memcpy(p + hl + n * ul, tail, tl + 1);
        return p;
}

static void test_deep_hostile(void) {
        ArchiveLimits deep = { .fs_bytes = 1 << 20, .file_count = 20000 };
        _cleanup_free_ char *too_long = repeat("tmp/", "d/", 33000, "f");
        EXPECT("path of 66 KB", {}, &deep, "path longer than 65535 bytes", TOP, { too_long, 'f', 0644, "x", NULL });
        _cleanup_free_ char *wide = repeat("tmp/", "x", 300, "");
        EXPECT("component of 300 bytes", {}, NULL, "a component longer than 255 bytes", TOP, { wide, 'f', 0644, "x", NULL });
        _cleanup_free_ char *deepest = repeat("tmp/", "d/", SBX_MAX_TREE_DEPTH, "f");
        EXPECT("16,384 directories and a file", {}, &deep, NULL, TOP, { deepest, 'f', 0644, "x", NULL });
        _cleanup_free_ char *deeper = repeat("tmp/", "d/", SBX_MAX_TREE_DEPTH + 1, "f");
        EXPECT("16,385 directories and a file", {}, &deep, "more than 16384 levels deep", TOP,
               { deeper, 'f', 0644, "x", NULL });
        _cleanup_free_ char *symlink_deep = repeat("home/user/", "d/", 3000, "l");
        EXPECT("symlink at 6 KB resolved from its directory", {}, &deep, NULL, TOP,
               { symlink_deep, 'l', 0777, NULL, "../../../x" });

        /* Files of two 1,500-level branches, in turns: extraction would climb the whole depth
         * and down again for each. The same entries branch by branch are fine. */
        enum { N = 2200 };
        TEnt *turns = calloc(N + 1, sizeof *turns), *grouped = calloc(N + 1, sizeof *grouped);
        char **names = calloc(N, sizeof *names);
        ArchiveLimits room = { .fs_bytes = 16 << 20, .file_count = 10000 };
        turns[0] = grouped[0] = (TEnt)TOP;
        for (size_t i = 0; i < N; i++) {
                char tail[16];
                snprintf(tail, sizeof tail, "f%zu", i);
                names[i] = repeat(i % 2 ? "tmp/b/" : "tmp/a/", "d/", 1500, tail);
                turns[i + 1] = (TEnt){ names[i], 'f', 0644, "x", NULL };
                grouped[i / 2 + (i % 2 ? N / 2 : 0) + 1] = turns[i + 1];
        }
        double t = seconds();
        expect("files of two deep branches in turns", turns, N + 1, &(const TOpts){ 0 }, &room,
               "archive entries out of order: extracting them would enter and leave more than");
        expect("the same files branch by branch", grouped, N + 1, &(const TOpts){ 0 }, &room, NULL);
        printf("# two walk checks of %d entries at 1,500 levels: %.3f s\n", N, seconds() - t);
        for (size_t i = 0; i < N; i++)
                free(names[i]);
        free(names);
        free(turns);
        free(grouped);
}

int main(void) {
        test_sha256();
        snprintf(base_dir, sizeof base_dir, "/tmp/sbx-test-archive-XXXXXX");
        if (!mkdtemp(base_dir)) {
                CHECK(false, "mkdtemp");
                return tap_done();
        }
        test_round_trip();
        test_foreign_order();
        test_hostile();
        test_sparse_refused();
        /* tmpfs, as a sandbox's tree is: a disk filesystem takes far longer on deep trees. */
        snprintf(deep_dir, sizeof deep_dir, "/dev/shm/sbx-test-deep-XXXXXX");
        if (!mkdtemp(deep_dir))
                snprintf(deep_dir, sizeof deep_dir, "%s/deep", base_dir);
        if (deep_dir[1] == 'd' || mkdir(deep_dir, 0755) == 0) {
                test_deep_round_trip();
                test_deep_hostile();
                char rm[512];
                snprintf(rm, sizeof rm, "rm -rf '%s'", deep_dir);
                if (deep_dir[1] == 'd' && system(rm) != 0)
                        printf("# could not remove %s\n", deep_dir);
        }
        char cmd[256];
        snprintf(cmd, sizeof cmd, "chmod -R u+rwx '%s' 2>/dev/null; rm -rf '%s'", base_dir, base_dir);
        if (system(cmd) != 0)
                printf("# could not remove %s\n", base_dir);
        return tap_done();
}
