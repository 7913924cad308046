/* SPDX-License-Identifier: MIT */
/* Exposed ports through the C API (sbx/port.h): the reader of the kernel's TCP tables on
 * made-up tables, then, as root, sbx_port_listening() and a forwarded connection against a real
 * sandbox, and that freeing the sandbox closes the host port and leaves no fd behind. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include "base/util.h"
#include "sbx/sbx.h"
#include "net/port.h"
#include "tap.h"

static const char header[] =
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";
static const char line4_listen[] =
        "   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 5729723 1 "
        "0000000072ecd3d6 100 0 0 10 0\n";
static const char line4_established[] =
        "   1: 0100007F:1F41 0100007F:A2C4 01 00000000:00000000 00:00000000 00000000  1000        0 5729724 1 "
        "0000000072ecd3d6 20 4 30 10 -1\n";
static const char line6_listen[] =
        "   0: 00000000000000000000000001000000:1F42 00000000000000000000000000000000:0000 0A "
        "00000000:00000000 00:00000000 00000000  1000        0 5729725 1 0000000072ecd3d6 100 0 0 10 0\n";

/* port_scan_tcp() over `text` in a memfd. */
static int scan(const char *text, size_t len, uint16_t port) {
        int fd = memfd_create("tcp", MFD_CLOEXEC);
        if (fd < 0 || write_all(fd, text, len) < 0 || lseek(fd, 0, SEEK_SET) < 0)
                return -999;
        int r = port_scan_tcp(fd, port);
        close(fd);
        return r;
}

static int scan_s(const char *text, uint16_t port) { return scan(text, strlen(text), port); }

static void test_scan(void) {
        char buf[16384];
        snprintf(buf, sizeof buf, "%s%s%s", header, line4_listen, line4_established);
        CHECK(scan_s(buf, 0x1F40) == 1, "scan: a listening IPv4 socket is found");
        CHECK(scan_s(buf, 0x1F41) == 0, "scan: a connected socket on the port is not listening");
        CHECK(scan_s(buf, 80) == 0, "scan: another port is not");
        CHECK(scan_s(header, 0x1F40) == 0, "scan: a table of no socket");
        CHECK(scan_s("", 0x1F40) == 0, "scan: an empty file");
        snprintf(buf, sizeof buf, "%s%s", header, line6_listen);
        CHECK(scan_s(buf, 0x1F42) == 1, "scan: a listening IPv6 socket is found");
        /* The last line without its newline. */
        size_t n = strlen(buf);
        CHECK(scan(buf, n - 1, 0x1F42) == 1, "scan: a last line without a newline");
        /* A socket line across the reader's 4 KiB buffer, after many others. */
        n = snprintf(buf, sizeof buf, "%s", header);
        while (n < 4096 - 40)
                n += snprintf(buf + n, sizeof buf - n, "%s", line4_established);
        n += snprintf(buf + n, sizeof buf - n, "%s", line4_listen);
        CHECK(scan(buf, n, 0x1F40) == 1 && scan(buf, n, 0x1F43) == 0, "scan: a line across the read buffer");
        /* A line longer than the buffer is skipped whole, even where its tail looks like a
         * socket; the next line counts again. */
        n = snprintf(buf, sizeof buf, "%s", header);
        memset(buf + n, 'x', 5000);
        n += 5000;
        n += snprintf(buf + n, sizeof buf - n, "%s", line4_listen);
        CHECK(scan(buf, n, 0x1F40) == 0, "scan: the tail of an overlong line is not a socket");
        n += snprintf(buf + n, sizeof buf - n, "%s", line6_listen);
        CHECK(scan(buf, n, 0x1F42) == 1, "scan: the line after an overlong one counts");
        CHECK(port_scan_tcp(-1, 1) == -EBADF, "scan: a read error is returned");
}

/* ------------------------------------------------------------------ against a sandbox */

static SbxContext *ctx;

static void spin_until(bool (*pred)(void *), void *arg, int ms) {
        uint64_t end = now_ms() + (uint64_t)ms;
        while (!pred(arg) && now_ms() < end)
                sbx_context_run_once(ctx, 10);
}

typedef struct Listening {
        SbxSandbox *sb;
        uint16_t port;
} Listening;

static bool is_listening(void *arg) {
        Listening *l = arg;
        return sbx_port_listening(l->sb, l->port) == 1;
}

static int run(SbxSandbox *sb, const char *cmd) {
        SbxSession *s;
        SbxResult r = { 0 };
        SbxRunOptions o = { .command = cmd, .command_len = strlen(cmd) };
        if (sbx_session_get(sb, NULL, &s) < 0 || sbx_session_run_sync(s, &o, NULL, NULL, &r) < 0)
                return -1;
        int code = r.exit_code;
        sbx_result_clear(&r);
        return code;
}

static int connect_host(uint16_t port) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

typedef struct Reader {
        int fd;
        char buf[64];
        size_t n;
        bool eof;
} Reader;

static bool read_some(void *arg) {
        Reader *r = arg;
        ssize_t k = recv(r->fd, r->buf + r->n, sizeof r->buf - 1 - r->n, MSG_DONTWAIT);
        if (k > 0)
                r->n += (size_t)k;
        if (k == 0 || (k < 0 && errno != EAGAIN))
                r->eof = true;
        r->buf[r->n] = 0;
        return r->eof;
}

static int count_fds(void) {
        DIR *d = opendir("/proc/self/fd");
        int n = 0;
        for (struct dirent *de; d && (de = readdir(d));)
                n += de->d_name[0] != '.';
        if (d)
                closedir(d);
        return n;
}

/* Children of this process named sbx-sockets: the socket makers. */
static int count_makers(void) {
        DIR *d = opendir("/proc");
        int n = 0;
        for (struct dirent *de; d && (de = readdir(d));) {
                char path[300], stat[512];
                snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
                FILE *f = de->d_name[0] >= '1' && de->d_name[0] <= '9' ? fopen(path, "re") : NULL;
                if (!f)
                        continue;
                size_t k = fread(stat, 1, sizeof stat - 1, f);
                fclose(f);
                stat[k] = 0;
                char state;
                int ppid;
                const char *end = strrchr(stat, ')');
                if (strstr(stat, "(sbx-sockets)") && end && sscanf(end + 1, " %c %d", &state, &ppid) == 2 &&
                    ppid == getpid())
                        n++;
        }
        if (d)
                closedir(d);
        return n;
}

static void test_sandbox(SbxSandbox *sb) {
        Listening l = { sb, 8000 };
        /* Right after the create, pid 1 may not have its own network namespace yet: its
         * tables would be the host's (a host listener on the port taken for the sandbox's). */
        int early = sbx_port_listening(sb, 8000);
        CHECK(early == -EAGAIN, "listening before the sandbox is ready: -EAGAIN, never the host's table (%d)", early);
        CHECK(run(sb, "true") == 0, "the sandbox is ready");
        CHECK(sbx_port_listening(sb, 8000) == 0, "listening: nothing yet");
        /* An echo server that answers one line per connection and closes; and an IPv6 one. */
        CHECK(run(sb, "python3 -c '\n"
                      "import socket\n"
                      "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                      "s.bind((\"127.0.0.1\", 8000)); s.listen(16)\n"
                      "while True:\n"
                      "    c, _ = s.accept(); d = c.recv(100); c.sendall(b\"echo:\" + d); c.close()\n"
                      "' >/dev/null 2>&1 &\n"
                      "python3 -c 'import socket, time; s = socket.socket(socket.AF_INET6); "
                      "s.bind((\"::1\", 8002)); s.listen(1); time.sleep(600)' >/dev/null 2>&1 &") == 0,
              "listening: servers started");
        spin_until(is_listening, &l, 10000);
        CHECK(sbx_port_listening(sb, 8000) == 1, "listening: the IPv4 server is seen");
        l.port = 8002;
        spin_until(is_listening, &l, 10000);
        CHECK(sbx_port_listening(sb, 8002) == 1, "listening: the IPv6 server is seen");
        CHECK(sbx_port_listening(sb, 8001) == 0, "listening: a port nobody listens on is not");

        uint16_t hp = 0, hp2 = 0;
        CHECK(sbx_port_expose(sb, 8000, &hp) == 0 && hp > 0, "expose: 8000 on host port %u", hp);
        CHECK(sbx_port_expose(sb, 8000, &hp2) == -EEXIST, "expose: twice is -EEXIST");
        CHECK(sbx_port_expose(sb, 0, &hp2) == -EINVAL, "expose: port 0 is -EINVAL");
        CHECK(sbx_port_expose(sb, 9, &hp2) == 0 && hp2 != hp, "expose: a port nobody listens on");
        SbxPort v[4];
        size_t n = sbx_port_list(sb, v, 4);
        CHECK(n == 2 && v[0].port == 9 && v[0].host_port == hp2 && v[1].port == 8000 && v[1].host_port == hp,
              "list: both, in order of port");
        CHECK(sbx_port_list(sb, v, 1) == 2 && v[0].port == 9, "list: a short array gets the first");

        int c = connect_host(hp);
        CHECK(c >= 0 && write_all(c, "hello", 5) == 0, "forward: connected and sent");
        Reader rd = { .fd = c };
        spin_until(read_some, &rd, 10000);
        CHECK(rd.eof && strcmp(rd.buf, "echo:hello") == 0, "forward: the answer came back, then EOF (%s)", rd.buf);
        close(c);

        c = connect_host(hp2);
        rd = (Reader){ .fd = c };
        spin_until(read_some, &rd, 10000);
        CHECK(c >= 0 && rd.eof && rd.n == 0, "forward: a port nobody listens on is reset");
        close(c);

        CHECK(count_makers() == 1, "maker: one for the sandbox");
        CHECK(sbx_port_unexpose(sb, 9) == 0 && sbx_port_unexpose(sb, 9) == -ENOENT, "unexpose: once");
        CHECK(connect_host(hp2) < 0 && errno == ECONNREFUSED, "unexpose: the host port is closed");
        CHECK(sbx_port_list(sb, v, 4) == 1, "list: one left");

        /* A connection held open when the sandbox goes. */
        c = connect_host(hp);
        for (int i = 0; i < 20; i++)
                sbx_context_run_once(ctx, 10);
        sbx_sandbox_free(sb);
        rd = (Reader){ .fd = c };
        spin_until(read_some, &rd, 5000);
        CHECK(rd.eof, "free: an open connection is closed");
        close(c);
        CHECK(connect_host(hp) < 0 && errno == ECONNREFUSED, "free: the host port is closed");
        CHECK(count_makers() == 0, "free: the maker is gone, reaped");
}

int main(void) {
        signal(SIGPIPE, SIG_IGN);
        test_scan();
        if (geteuid() != 0) {
                printf("# SKIP the sandbox part needs root\n");
                return tap_done();
        }
        int fds_before = count_fds();
        CHECK(sbx_context_new(&ctx) == 0, "context");
        SbxSandboxOptions so;
        sbx_sandbox_options_init(&so);
        SbxSandbox *sb = NULL;
        int rc = sbx_sandbox_new(ctx, &so, &sb);
        if (rc == -ENOTSUP) {
                printf("# SKIP no cgroup v2\n");
                sbx_context_free(ctx);
                return tap_done();
        }
        CHECK(rc == 0, "sandbox created (%s)", sbx_context_last_error(ctx));
        if (sb)
                test_sandbox(sb);
        sbx_context_free(ctx);
        CHECK(count_fds() == fds_before, "no fd left (%d, was %d)", count_fds(), fds_before);
        return tap_done();
}
