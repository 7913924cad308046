/* SPDX-License-Identifier: MIT */
/* fd, file and string helpers. */
#include <ctype.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include "base/limits.h"
#include "base/util.h"

uint64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

uint64_t wall_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int fd_set_nonblock(int fd, bool on) {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0)
                return negerrno();
        int nfl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
        if (nfl != fl && fcntl(fd, F_SETFL, nfl) < 0)
                return negerrno();
        return 0;
}

void pidfd_sigkill(int pidfd) {
        if (pidfd >= 0)
                (void)pidfd_send_signal(pidfd, SIGKILL, NULL, 0);
}

void pidfd_kill_reap(int pidfd) {
        if (pidfd < 0)
                return;
        pidfd_sigkill(pidfd);
        siginfo_t si;
        while (waitid(P_PIDFD, (id_t)pidfd, &si, WEXITED) < 0 && errno == EINTR)
                ;
}

bool pidfd_is_dead(int pidfd) {
        struct pollfd p = { .fd = pidfd, .events = POLLIN };
        return poll(&p, 1, 0) != 0;
}

int write_all(int fd, const void *buf, size_t len) {
        const char *p = buf;
        while (len > 0) {
                ssize_t n = write(fd, p, len);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return negerrno();
                }
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

int read_file_whole(const char *path, uint64_t max, uint8_t **ret, size_t *ret_len) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0)
                return negerrno();
        if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > max)
                return -EFBIG;
        size_t size = (size_t)st.st_size, n = 0;
        _cleanup_free_ uint8_t *d = malloc(size + 1);
        if (!d)
                return -ENOMEM;
        while (n < size) {
                ssize_t k = read(fd, d + n, size - n);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return k < 0 ? negerrno() : -EIO;
                n += (size_t)k;
        }
        *ret = TAKE_PTR(d);
        *ret_len = n;
        return 0;
}

int write_file_replace(const char *path, const void *data, size_t len) {
        char tmp[SBX_MAX_PATH_BYTES];
        if (snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid()) >= (int)sizeof tmp)
                return -ENAMETOOLONG;
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                return negerrno();
        int r = write_all(fd, data, len);
        if (r >= 0 && fsync(fd) < 0)
                r = negerrno();
        if (close(fd) < 0 && r >= 0)
                r = negerrno();
        if (r >= 0 && rename(tmp, path) < 0)
                r = negerrno();
        if (r < 0)
                (void)unlink(tmp);
        return r;
}

int write_file_at(int dirfd, const char *path, const char *s) {
        _cleanup_close_ int fd = openat(dirfd, path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return negerrno();
        size_t len = strlen(s);
        ssize_t n = write(fd, s, len);
        if (n < 0)
                return negerrno();
        return (size_t)n == len ? 0 : -EIO;
}

ssize_t read_file_at(int dirfd, const char *path, char *buf, size_t size) {
        _cleanup_close_ int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return negerrno();
        ssize_t n = read(fd, buf, size - 1);
        if (n < 0)
                return negerrno();
        buf[n] = 0;
        return n;
}

int random_hex(char *out, size_t nbytes) {
        unsigned char raw[64];
        if (nbytes > sizeof raw)
                return -EINVAL;
        if (getrandom(raw, nbytes, 0) != (ssize_t)nbytes)
                return -EIO;
        static const char hex[] = "0123456789abcdef";
        for (size_t i = 0; i < nbytes; i++) {
                out[2 * i] = hex[raw[i] >> 4];
                out[2 * i + 1] = hex[raw[i] & 15];
        }
        out[2 * nbytes] = 0;
        return 0;
}

bool env_name_valid(const char *s, size_t len) {
        if (len == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
                return false;
        for (size_t i = 1; i < len; i++)
                if (!(isalnum((unsigned char)s[i]) || s[i] == '_'))
                        return false;
        return true;
}

bool name_valid(const char *s, size_t max) {
        size_t n = strlen(s);
        if (n == 0 || n > max)
                return false;
        /* Ranges, not isalnum(): what a name may be must not depend on the locale. */
        for (; *s; s++)
                if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_' ||
                      *s == '.' || *s == '-'))
                        return false;
        return true;
}

int parse_u64(const char *s, uint64_t max, uint64_t *ret) {
        if (!s || !*s)
                return -EINVAL;
        uint64_t v = 0;
        for (const char *p = s; *p; p++) {
                if (*p < '0' || *p > '9')
                        return -EINVAL;
                uint64_t d = (uint64_t)(*p - '0');
                if (v > (UINT64_MAX - d) / 10)
                        return -ERANGE;
                v = v * 10 + d;
        }
        if (v > max)
                return -ERANGE;
        *ret = v;
        return 0;
}

int array_grow(void **array, size_t n, size_t *cap, size_t size, size_t first) {
        if (n < *cap)
                return 0;
        size_t want = *cap ? *cap * 2 : first;
        void *p = reallocarray(*array, want, size);
        if (!p)
                return -ENOMEM;
        *array = p;
        *cap = want;
        return 0;
}

void format_size(uint64_t v, char *out, size_t size) {
        static const char suffix[] = "KMGT";
        int k = -1;
        while (k < 3 && v && v % (1ULL << (10 * (k + 2))) == 0)
                k++;
        if (k < 0)
                snprintf(out, size, "%llu byte%s", (unsigned long long)v, v == 1 ? "" : "s");
        else
                snprintf(out, size, "%llu%c", (unsigned long long)(v >> (10 * (k + 1))), suffix[k]);
}

int parse_size(const char *s, uint64_t *ret) {
        char num[32];
        size_t len = s ? strlen(s) : 0;
        if (len == 0 || len >= sizeof num)
                return -EINVAL;
        memcpy(num, s, len + 1);
        uint64_t mult = 1;
        switch (num[len - 1]) {
        case 'k': case 'K': mult = 1ULL << 10; break;
        case 'm': case 'M': mult = 1ULL << 20; break;
        case 'g': case 'G': mult = 1ULL << 30; break;
        case 't': case 'T': mult = 1ULL << 40; break;
        default: break;
        }
        if (mult != 1)
                num[--len] = 0;
        uint64_t v;
        int r = parse_u64(num, UINT64_MAX / mult, &v);
        if (r < 0)
                return r;
        *ret = v * mult;
        return 0;
}

ssize_t read_ready(int fd, void *buf, size_t len) {
        for (;;) {
                ssize_t n = read(fd, buf, len);
                if (n >= 0)
                        return n;
                if (errno != EINTR)
                        return negerrno();
        }
}

static int cmp_int(const void *a, const void *b) {
        int x = *(const int *)a, y = *(const int *)b;
        return (x > y) - (x < y);
}

void close_all_but(const int *keep, size_t n) {
        int k[17];
        size_t m = 0;
        for (size_t i = 0; i < n && m < 16; i++)
                if (keep[i] > 2)
                        k[m++] = keep[i];
        qsort(k, m, sizeof *k, cmp_int);
        unsigned lo = 3;
        for (size_t i = 0; i < m; i++) {
                if ((unsigned)k[i] > lo)
                        (void)close_range(lo, (unsigned)k[i] - 1, 0);
                lo = (unsigned)k[i] + 1;
        }
        (void)close_range(lo, ~0U, 0);
}

void msg_attach_fds(struct msghdr *mh, char *buf, const int *fds, size_t n) {
        if (!n)
                return;
        memset(buf, 0, CMSG_SPACE(sizeof(int) * n));
        mh->msg_control = buf;
        mh->msg_controllen = CMSG_SPACE(sizeof(int) * n);
        struct cmsghdr *c = CMSG_FIRSTHDR(mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * n);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
}

size_t msg_take_fds(struct msghdr *mh, int *fds, size_t max) {
        size_t k = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                for (size_t j = 0; j < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); j++) {
                        int fd;
                        memcpy(&fd, CMSG_DATA(c) + j * sizeof(int), sizeof(int));
                        if (k < max)
                                fds[k++] = fd;
                        else
                                close(fd);
                }
        }
        return k;
}

pid_t pidfd_pid(int fd) {
        char path[64], info[512];
        snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
        if (read_file_at(AT_FDCWD, path, info, sizeof info) <= 0)
                return 0;
        const char *p = strstr(info, "\nPid:");
        int pid;
        return p && sscanf(p + 5, "%d", &pid) == 1 && pid > 0 ? (pid_t)pid : 0;
}

/* The last number of a status line ("PPid:", "NSpid:"), 0 if there is none. */
static pid_t status_field(const char *text, const char *key) {
        const char *p = strstr(text, key);
        if (!p)
                return 0;
        p += strlen(key);
        const char *end = strchr(p, '\n');
        long v = 0;
        for (const char *q = p; *q && q != end;) {
                char *next;
                long x = strtol(q, &next, 10);
                if (next == q)
                        break;
                v = x;
                q = next;
        }
        return v > 0 ? (pid_t)v : 0;
}

void proc_status_ids(pid_t pid, pid_t *ret_ppid, pid_t *ret_nspid) {
        char path[64], text[2048];
        snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
        ssize_t n = read_file_at(AT_FDCWD, path, text, sizeof text);
        *ret_ppid = n > 0 ? status_field(text, "\nPPid:") : 0;
        *ret_nspid = n > 0 ? status_field(text, "\nNSpid:") : 0;
}
