/* SPDX-License-Identifier: MIT */
/* E2B's API for a cluster of sbx nodes (`sbx serve --kube-gateway ADDR`): Sandbox.create makes
 * a Pod (the sbx toleration, a node selector for sbx nodes, the sandbox's token in an
 * annotation) that kube-scheduler places; envd's calls (and a sandbox's ports) are forwarded to
 * the E2B door of the node the pod is bound to, found from the API server (pods and nodes
 * watched, never polled). Stateless: everything it knows is the API server's, so several
 * replicas behind a Service agree. A sandbox whose node is lost is answered 502 at once, and
 * its pod marked Failed (NodeLost), which no node may write of another's pods. */
#pragma once
#include <stdint.h>
#include "base/loop.h"

typedef struct KubeGateway KubeGateway;

typedef struct KubeGatewayOptions {
        const char *addr;             /* where E2B's clients reach it: "HOST:PORT" */
        const char *kubeconfig;       /* JSON kubeconfig; NULL: in-cluster */
        const char *ns;               /* the namespace of its pods (default "default") */
        const char *const *api_keys;  /* NULL-terminated; none: any key, from loopback only */
} KubeGatewayOptions;

int kube_gateway_new(Loop *loop, const KubeGatewayOptions *o, KubeGateway **ret, char *err, size_t errlen);
KubeGateway *kube_gateway_free(KubeGateway *g);
uint16_t kube_gateway_port(const KubeGateway *g);
