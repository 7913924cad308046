/* SPDX-License-Identifier: MIT */
/* The pod network's netlink (podnet.h): each request acknowledged (NLM_F_ACK) and its error
 * read back before the next, on a socket of the namespace it was made in. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include "base/util.h"
#include "sandbox/podnet.h"

#define NL_BUF 1024

typedef struct NlMsg {
        union {
                struct nlmsghdr h;
                char buf[NL_BUF];
        };
        struct rtattr *nest[4];
        unsigned depth;
        bool overflow;
} NlMsg;

static void *nl_tail(NlMsg *m) { return m->buf + NLMSG_ALIGN(m->h.nlmsg_len); }

static void nl_init(NlMsg *m, uint16_t type, uint16_t flags, const void *body, size_t len) {
        memset(m, 0, sizeof *m);
        m->h.nlmsg_type = type;
        m->h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
        m->h.nlmsg_len = NLMSG_LENGTH(len);
        memcpy(NLMSG_DATA(&m->h), body, len);
}

static void nl_attr(NlMsg *m, uint16_t type, const void *data, size_t len) {
        size_t need = NLMSG_ALIGN(m->h.nlmsg_len) + RTA_SPACE(len);
        if (need > sizeof m->buf) {
                m->overflow = true;
                return;
        }
        struct rtattr *a = nl_tail(m);
        a->rta_type = type;
        a->rta_len = RTA_LENGTH(len);
        if (len)
                memcpy(RTA_DATA(a), data, len);
        m->h.nlmsg_len = need;
}

static void nl_str(NlMsg *m, uint16_t type, const char *s) { nl_attr(m, type, s, strlen(s) + 1); }
static void nl_u32(NlMsg *m, uint16_t type, uint32_t v) { nl_attr(m, type, &v, sizeof v); }

static void nl_begin(NlMsg *m, uint16_t type) {
        struct rtattr *a = nl_tail(m);
        nl_attr(m, type, NULL, 0);
        if (!m->overflow && m->depth < ELEMENTSOF(m->nest))
                m->nest[m->depth++] = a;
        else
                m->overflow = true;
}

/* A nested ifinfomsg (a veth's peer) is raw bytes inside its attribute. */
static void nl_raw(NlMsg *m, const void *data, size_t len) {
        size_t need = NLMSG_ALIGN(m->h.nlmsg_len) + NLMSG_ALIGN(len);
        if (need > sizeof m->buf) {
                m->overflow = true;
                return;
        }
        memcpy(nl_tail(m), data, len);
        m->h.nlmsg_len = need;
}

static void nl_end(NlMsg *m) {
        if (m->overflow || !m->depth)
                return;
        struct rtattr *a = m->nest[--m->depth];
        a->rta_len = (unsigned short)((char *)nl_tail(m) - (char *)a);
}

static int nl_open(void) {
        int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
        if (s < 0)
                return negerrno();
        struct sockaddr_nl a = { .nl_family = AF_NETLINK };
        if (bind(s, (struct sockaddr *)&a, sizeof a) < 0) {
                int r = negerrno();
                close(s);
                return r;
        }
        return s;
}

/* Sends m and returns the kernel's answer to it: 0 or -errno. */
static int nl_talk(int s, NlMsg *m) {
        static uint32_t seq;
        if (m->overflow || m->depth)
                return -EMSGSIZE;
        m->h.nlmsg_seq = ++seq;
        struct sockaddr_nl to = { .nl_family = AF_NETLINK };
        if (sendto(s, m->buf, m->h.nlmsg_len, 0, (struct sockaddr *)&to, sizeof to) < 0)
                return negerrno();
        char buf[8192];
        for (;;) {
                ssize_t n = recv(s, buf, sizeof buf, 0);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return negerrno();
                }
                for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
                        if (h->nlmsg_seq != m->h.nlmsg_seq)
                                continue;
                        if (h->nlmsg_type == NLMSG_ERROR) {
                                const struct nlmsgerr *e = NLMSG_DATA(h);
                                return e->error;
                        }
                        if (h->nlmsg_type == NLMSG_DONE)
                                return 0;
                }
        }
}

static int link_index(int s, const char *name) {
        (void)s;
        unsigned i = if_nametoindex(name);
        return i ? (int)i : negerrno();
}

static int link_up(int s, int index, int master) {
        struct ifinfomsg ifi = { .ifi_family = AF_UNSPEC, .ifi_index = index, .ifi_flags = IFF_UP, .ifi_change = IFF_UP };
        NlMsg m;
        nl_init(&m, RTM_NEWLINK, 0, &ifi, sizeof ifi);
        if (master > 0)
                nl_u32(&m, IFLA_MASTER, (uint32_t)master);
        return nl_talk(s, &m);
}

static int addr_add(int s, int index, uint32_t addr, unsigned prefix) {
        struct ifaddrmsg ifa = { .ifa_family = AF_INET, .ifa_prefixlen = (unsigned char)prefix, .ifa_index = (unsigned)index };
        NlMsg m;
        nl_init(&m, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, &ifa, sizeof ifa);
        uint32_t be = htonl(addr);
        nl_attr(&m, IFA_LOCAL, &be, sizeof be);
        nl_attr(&m, IFA_ADDRESS, &be, sizeof be);
        int r = nl_talk(s, &m);
        return r == -EEXIST ? 0 : r;
}

const char *podnet_ntoa(uint32_t addr, char buf[16]) {
        snprintf(buf, 16, "%u.%u.%u.%u", addr >> 24, (addr >> 16) & 255, (addr >> 8) & 255, addr & 255);
        return buf;
}

int podnet_parse(const char *cidr, PodNetConfig *c, char *err, size_t errlen) {
        char ip[32];
        unsigned prefix;
        char tail;
        struct in_addr a;
        if (!cidr || strlen(cidr) >= sizeof ip || sscanf(cidr, "%31[0-9.]/%u%c", ip, &prefix, &tail) != 2 ||
            inet_pton(AF_INET, ip, &a) != 1) {
                snprintf(err, errlen, "pod network %s: not an IPv4 range A.B.C.D/N", cidr ? cidr : "(none)");
                return -EINVAL;
        }
        if (prefix < 8 || prefix > 30) {
                snprintf(err, errlen, "pod network %s: the prefix must be 8 to 30", cidr);
                return -EINVAL;
        }
        uint32_t net = ntohl(a.s_addr), mask = prefix ? ~0u << (32 - prefix) : 0;
        if (net & ~mask) {
                char b[16];
                snprintf(err, errlen, "pod network %s: host bits are set (the range is %s/%u)", cidr,
                         podnet_ntoa(net & mask, b), prefix);
                return -EINVAL;
        }
        c->network = net;
        c->prefix = prefix;
        c->gateway = net + 1;
        return 0;
}

uint32_t podnet_capacity(const PodNetConfig *c) {
        uint32_t size = 1u << (32 - c->prefix);
        return size > 3 ? size - 3 : 0;
}

int podnet_bridge_up(const PodNetConfig *c, char *err, size_t errlen) {
        _cleanup_close_ int s = nl_open();
        if (s < 0) {
                snprintf(err, errlen, "netlink: %s", strerror(-s));
                return s;
        }
        int index = link_index(s, c->bridge), r = 0;
        if (index < 0) {
                struct ifinfomsg ifi = { .ifi_family = AF_UNSPEC };
                NlMsg m;
                nl_init(&m, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &ifi, sizeof ifi);
                nl_str(&m, IFLA_IFNAME, c->bridge);
                nl_begin(&m, IFLA_LINKINFO);
                nl_str(&m, IFLA_INFO_KIND, "bridge");
                nl_end(&m);
                r = nl_talk(s, &m);
                if (r < 0 && r != -EEXIST) {
                        snprintf(err, errlen, "bridge %s: %s", c->bridge, strerror(-r));
                        return r;
                }
                index = link_index(s, c->bridge);
        }
        if (index < 0) {
                snprintf(err, errlen, "bridge %s: %s", c->bridge, strerror(-index));
                return index;
        }
        if ((r = addr_add(s, index, c->gateway, c->prefix)) < 0 || (r = link_up(s, index, 0)) < 0) {
                snprintf(err, errlen, "bridge %s: %s", c->bridge, strerror(-r));
                return r;
        }
        return 0;
}

static int route_default(int s, int index, uint32_t gw) {
        struct rtmsg rt = { .rtm_family = AF_INET, .rtm_table = RT_TABLE_MAIN, .rtm_protocol = RTPROT_BOOT,
                            .rtm_scope = RT_SCOPE_UNIVERSE, .rtm_type = RTN_UNICAST };
        NlMsg m;
        nl_init(&m, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, &rt, sizeof rt);
        uint32_t be = htonl(gw);
        nl_attr(&m, RTA_GATEWAY, &be, sizeof be);
        nl_u32(&m, RTA_OIF, (uint32_t)index);
        return nl_talk(s, &m);
}

int podnet_attach(const PodNetConfig *c, int netns_fd, const char *host_if, uint32_t addr, char *err,
                  size_t errlen) {
        _cleanup_close_ int host = nl_open();
        int r = host, bridge = host < 0 ? host : link_index(host, c->bridge);
        const char *step = "netlink";
        if (r >= 0 && (r = bridge) < 0)
                step = "the bridge";
        if (r >= 0) {
                /* The pair is made here with its peer already in the sandbox's namespace, so
                 * eth0 never exists on the host's side. */
                struct ifinfomsg ifi = { .ifi_family = AF_UNSPEC };
                NlMsg m;
                nl_init(&m, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &ifi, sizeof ifi);
                nl_str(&m, IFLA_IFNAME, host_if);
                nl_begin(&m, IFLA_LINKINFO);
                nl_str(&m, IFLA_INFO_KIND, "veth");
                nl_begin(&m, IFLA_INFO_DATA);
                nl_begin(&m, VETH_INFO_PEER);
                nl_raw(&m, &ifi, sizeof ifi);
                nl_str(&m, IFLA_IFNAME, "eth0");
                nl_u32(&m, IFLA_NET_NS_FD, (uint32_t)netns_fd);
                nl_end(&m);
                nl_end(&m);
                nl_end(&m);
                step = "the veth";
                r = nl_talk(host, &m);
        }
        int hidx = r < 0 ? r : link_index(host, host_if);
        if (r >= 0 && (r = hidx) >= 0) {
                step = "the veth's host end";
                r = link_up(host, hidx, bridge);
        }
        if (r >= 0 && setns(netns_fd, CLONE_NEWNET) < 0) {
                r = negerrno();
                step = "the sandbox's network namespace";
        }
        _cleanup_close_ int in = r < 0 ? -1 : nl_open();
        if (r >= 0 && (r = in) < 0)
                step = "netlink in the sandbox";
        int eth = r < 0 ? r : link_index(in, "eth0");
        if (r >= 0 && (r = eth) >= 0) {
                step = "eth0";
                if ((r = addr_add(in, eth, addr, c->prefix)) >= 0 && (r = link_up(in, eth, 0)) >= 0) {
                        step = "the default route";
                        r = route_default(in, eth, c->gateway);
                }
        }
        if (r < 0)
                snprintf(err, errlen, "pod network: %s: %s", step, strerror(-r));
        return r < 0 ? r : 0;
}
