/* SPDX-License-Identifier: MIT */
/* libsbx: ports of a sandbox exposed on the host's loopback.
 *
 * Exposing a port makes the context's loop listen on a free port of the host's 127.0.0.1 (never
 * any other address) and forward each connection it accepts to 127.0.0.1:port inside the
 * sandbox's network namespace, both ways, until either side closes (a half-close is passed
 * on). Everything happens in the context's loop; no call waits.
 *
 * Ownership: exposed ports belong to their sandbox. Unexposing a port, or freeing its sandbox,
 * closes its listening socket and every connection forwarded through it. Included by sbx/sbx.h;
 * the same conventions hold (int results: >= 0 success, -errno failure). */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "sbx/sbx.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct SbxPort {
        uint16_t port;        /* inside the sandbox */
        uint16_t host_port;   /* on the host's 127.0.0.1 */
        unsigned connections; /* forwarded now */
        uid_t owner;          /* who may connect besides root; (uid_t)-1: anyone */
        unsigned refused;     /* connections refused for their uid */
} SbxPort;

/* Starts forwarding host 127.0.0.1:*ret_host_port (a free port the kernel picks) to port in the
 * sandbox. Nothing needs to listen on port yet: a connection that finds nothing there is reset.
 * Returns 0, -EINVAL for port 0, -EEXIST when port is already exposed, -EMFILE when the sandbox
 * already exposes SBX_MAX_PORTS ports (32), -ESRCH when the sandbox is dying, or -errno. */
SBX_API int sbx_port_expose(SbxSandbox *sb, uint16_t port, uint16_t *ret_host_port);
/* Stops forwarding port: closes its listening socket and its connections. Returns 0, or
 * -ENOENT when port is not exposed. */
SBX_API int sbx_port_unexpose(SbxSandbox *sb, uint16_t port);
/* Who may connect to an exposed port: only clients whose socket belongs to uid `owner` (and
 * root's), the others reset at accept (the kernel says whose each socket is, through
 * NETLINK_SOCK_DIAG); (uid_t)-1, the default after sbx_port_expose(): any process of the host,
 * a `network: host` sandbox's included. Returns 0 or -ENOENT (not exposed). */
SBX_API int sbx_port_set_owner(SbxSandbox *sb, uint16_t port, uid_t owner);
/* Fills up to max entries, in order of port; returns how many ports are exposed. */
SBX_API size_t sbx_port_list(SbxSandbox *sb, SbxPort *out, size_t max);
/* Whether a TCP socket of the sandbox's network namespace listens on port (any address, IPv4
 * or IPv6), read from the kernel's tables (/proc/<pid 1>/net/tcp and tcp6) without waiting.
 * Returns 1, 0, -EAGAIN before the sandbox is ready (sbx_sandbox_on_ready(): until then pid 1
 * may still see the host's tables), -ESRCH when the sandbox's pid 1 is gone, or -errno. */
SBX_API int sbx_port_listening(SbxSandbox *sb, uint16_t port);

#ifdef __cplusplus
}
#endif
