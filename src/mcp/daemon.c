/* SPDX-License-Identifier: MIT */
/* The daemon end of `sbx mcp`: its own `sbx serve --stdio` child or a running daemon's
 * socket, and the end of either. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include "base/log.h"
#include "base/util.h"
#include "mcp/daemon.h"

int mcp_daemon_spawn(Mcp *m, bool verbose) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                return negerrno();
        _cleanup_close_ int ours = sv[0], theirs = sv[1];
        posix_spawn_file_actions_t fa;
        posix_spawnattr_t at;
        sigset_t none, pipe;
        sigemptyset(&none);
        sigemptyset(&pipe);
        sigaddset(&pipe, SIGPIPE);
        int r = posix_spawn_file_actions_init(&fa);
        if (r)
                return -r;
        r = posix_spawnattr_init(&at);
        if (r) {
                posix_spawn_file_actions_destroy(&fa);
                return -r;
        }
        /* The daemon reads and writes the socket as its stdin and stdout; stderr stays ours,
         * which is where MCP clients collect a server's log. Our blocked signals and ignored
         * SIGPIPE are not its. */
        if (!(r = posix_spawn_file_actions_adddup2(&fa, theirs, STDIN_FILENO)) &&
            !(r = posix_spawn_file_actions_adddup2(&fa, theirs, STDOUT_FILENO)) &&
            !(r = posix_spawnattr_setsigmask(&at, &none)) && !(r = posix_spawnattr_setsigdefault(&at, &pipe)) &&
            !(r = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))) {
                char *argv[] = { "sbx", "serve", "--stdio", verbose ? "--verbose" : NULL, NULL };
                extern char **environ;
                r = posix_spawn(&m->child, "/proc/self/exe", &fa, &at, argv, environ);
        }
        posix_spawn_file_actions_destroy(&fa);
        posix_spawnattr_destroy(&at);
        if (r)
                return -r;
        m->child_pidfd = pidfd_open(m->child, 0);
        m->d_fd = TAKE_FD(ours);
        return 0;
}

int mcp_daemon_connect(Mcp *m, const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (strlen(path) >= sizeof sa.sun_path)
                return -ENAMETOOLONG;
        memcpy(sa.sun_path, path, strlen(path) + 1);
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
                return negerrno();
        m->d_fd = TAKE_FD(fd);
        return 0;
}

/* The end of the connection is what tells the daemon to destroy this connection's sandboxes
 * (our own child: everything, then it exits), and the child is given the time that takes. Our
 * side is shut for writing first and left open, so the daemon sees a plain EOF and still
 * writes its last answers somewhere instead of failing on a closed socket. */
void mcp_daemon_close(Mcp *m) {
        if (m->child > 0 && m->d_fd >= 0)
                (void)shutdown(m->d_fd, SHUT_WR);
        else
                m->d_fd = safe_close(m->d_fd);
        if (m->child <= 0)
                return;
        if (m->child_pidfd >= 0) {
                struct pollfd p = { .fd = m->child_pidfd, .events = POLLIN };
                uint64_t end = now_ms() + SBX_MCP_CHILD_EXIT_MS;
                for (uint64_t now = now_ms(); now < end; now = now_ms()) {
                        int r = poll(&p, 1, (int)(end - now));
                        if (r > 0 || (r < 0 && errno != EINTR))
                                break;
                }
                if (!pidfd_is_dead(m->child_pidfd)) {
                        log_warn("mcp: the daemon did not exit within %u ms: killing it", SBX_MCP_CHILD_EXIT_MS);
                        pidfd_sigkill(m->child_pidfd);
                }
        }
        while (waitpid(m->child, NULL, 0) < 0 && errno == EINTR)
                ;
        m->d_fd = safe_close(m->d_fd);
        m->child_pidfd = safe_close(m->child_pidfd);
        m->child = 0;
}
