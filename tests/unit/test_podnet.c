/* SPDX-License-Identifier: MIT */
/* Unit tests of the pod network's netlink (sandbox/podnet.c): ranges parsed and refused, and,
 * as root, a bridge and a veth made for real in network namespaces of the test's own. */
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include "sandbox/podnet.h"
#include "tap.h"

static void test_parse(void) {
        PodNetConfig c = { 0 };
        char err[256], b[16];
        CHECK(podnet_parse("10.88.1.0/24", &c, err, sizeof err) == 0 && c.network == 0x0a580100 && c.prefix == 24 &&
                      c.gateway == 0x0a580101, "a /24 is its network, prefix and gateway");
        CHECK(podnet_capacity(&c) == 253, "a /24 holds 253 sandboxes");
        CHECK(!strcmp(podnet_ntoa(c.gateway, b), "10.88.1.1"), "an address as text");
        CHECK(podnet_parse("10.88.1.1/24", &c, err, sizeof err) == -EINVAL && strstr(err, "host bits") &&
                      strstr(err, "10.88.1.0/24"), "host bits refused, the range said");
        CHECK(podnet_parse("10.88.1.0/31", &c, err, sizeof err) == -EINVAL && strstr(err, "8 to 30"), "a /31 refused");
        CHECK(podnet_parse("10.88.1.0", &c, err, sizeof err) == -EINVAL, "no prefix refused");
        CHECK(podnet_parse("10.88.1.0/24x", &c, err, sizeof err) == -EINVAL, "trailing bytes refused");
        CHECK(podnet_parse("300.1.1.0/24", &c, err, sizeof err) == -EINVAL, "a bad address refused");
        CHECK(podnet_parse(NULL, &c, err, sizeof err) == -EINVAL, "NULL refused");
        CHECK(podnet_parse("10.0.0.0/30", &c, err, sizeof err) == 0 && podnet_capacity(&c) == 1,
              "a /30 holds one sandbox");
}

/* A child in a new network namespace, paused until killed. */
static pid_t netns_child(void) {
        int p[2];
        if (pipe(p) < 0)
                return -1;
        pid_t pid = fork();
        if (pid == 0) {
                char x = unshare(CLONE_NEWNET) == 0 ? 1 : 0;
                (void)!write(p[1], &x, 1);
                pause();
                _exit(0);
        }
        char x = 0;
        (void)!read(p[0], &x, 1);
        close(p[0]);
        close(p[1]);
        return x ? pid : -1;
}

static void test_attach(void) {
        if (geteuid() != 0 || unshare(CLONE_NEWNET) < 0) {
                CHECK(true, "# SKIP not root: no bridge and veth made");
                return;
        }
        PodNetConfig c = { 0 };
        char err[256] = "";
        snprintf(c.bridge, sizeof c.bridge, "sbxunit0");
        (void)podnet_parse("10.99.0.0/24", &c, err, sizeof err);
        int r = podnet_bridge_up(&c, err, sizeof err);
        CHECK(r == 0 && if_nametoindex("sbxunit0") > 0, "the bridge is made%s%s", err[0] ? ": " : "", err);
        CHECK(podnet_bridge_up(&c, err, sizeof err) == 0, "and taken as it is the second time");
        pid_t child = netns_child();
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/ns/net", (int)child);
        int ns = child > 0 ? open(path, O_RDONLY | O_CLOEXEC) : -1;
        CHECK(ns >= 0, "a sandbox-like namespace");
        /* In a process of its own: podnet_attach enters the namespace, as the job does. */
        pid_t job = fork();
        if (job == 0)
                _exit(podnet_attach(&c, ns, "sbxunitv0", 0x0a630005, err, sizeof err) == 0 ? 0 : 1);
        int ws = 0;
        waitpid(job, &ws, 0);
        CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the veth is made and configured");
        CHECK(if_nametoindex("sbxunitv0") > 0, "its host end is on the host's side");
        snprintf(path, sizeof path, "/proc/%d/net/route", (int)child);
        FILE *f = fopen(path, "r");
        char line[256];
        bool route = false;
        while (f && fgets(line, sizeof line, f))
                route = route || (strncmp(line, "eth0\t00000000\t0100630A", 22) == 0);
        if (f)
                fclose(f);
        CHECK(route, "inside: eth0 with the default route via the bridge's address");
        job = fork();
        if (job == 0)
                _exit(podnet_attach(&c, ns, "sbxunitv0", 0x0a630006, err, sizeof err) == 0 ? 0 : 1);
        waitpid(job, &ws, 0);
        CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 1, "a second veth of the same name is refused");
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        close(ns);
}

int main(void) {
        test_parse();
        test_attach();
        return tap_done();
}
