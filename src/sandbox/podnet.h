/* SPDX-License-Identifier: MIT */
/* A pod network: sandboxes with an eth0 on a bridge of the host, each with its own address of
 * the bridge's IPv4 range, the bridge's own address their gateway. For sbx nodes of a cluster
 * (a pod's IP), and for any sandbox that must be reached at an address of its own.
 *
 * Plain rtnetlink (RTM_NEWLINK, RTM_NEWADDR, RTM_NEWROUTE): no library of the allowed set
 * speaks it, and the messages are the kernel's own API. Root only: a veth's host end goes into
 * the host's namespace, where an unprivileged user may not add links. */
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct PodNetConfig {
        char bridge[16];  /* IFNAMSIZ */
        uint32_t network; /* host order, the range's first address */
        unsigned prefix;  /* 8..30 */
        uint32_t gateway; /* host order: the bridge's own address (network + 1) */
} PodNetConfig;

/* Parses "A.B.C.D/N" into c (network, prefix, gateway = network + 1); bridge is left as it
 * is. The range must be its network address (no host bits) and hold at least 2 sandboxes.
 * Returns 0 or -EINVAL with err. */
int podnet_parse(const char *cidr, PodNetConfig *c, char *err, size_t errlen);
/* How many sandbox addresses the range holds (network, gateway and broadcast excluded). */
uint32_t podnet_capacity(const PodNetConfig *c);
/* Makes the bridge in the caller's network namespace unless it is there, gives it the
 * gateway's address and brings it up. Returns 0 or -errno with err. Blocking (netlink to the
 * kernel, a few messages): for a daemon's start, before its loop runs. */
int podnet_bridge_up(const PodNetConfig *c, char *err, size_t errlen);
/* Inside a job (it enters netns_fd): a veth whose host end host_if goes into c's bridge and
 * whose other end is eth0 of the namespace netns_fd, address addr/prefix, default route via
 * the gateway, both up. Returns 0 or -errno with err. */
int podnet_attach(const PodNetConfig *c, int netns_fd, const char *host_if, uint32_t addr, char *err,
                  size_t errlen);
/* "A.B.C.D" of a host-order address into buf (16 bytes). */
const char *podnet_ntoa(uint32_t addr, char buf[16]);
