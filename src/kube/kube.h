/* SPDX-License-Identifier: MIT */
/* The daemon as a Kubernetes node (`sbx serve --kube-node NAME`): a virtual kubelet. It
 * registers a Node (tainted sbx.dev/sandbox:NoSchedule, its capacity the daemon's), renews its
 * Lease, watches the pods kube-scheduler binds to it and makes each one a sandbox on the pod
 * network (SBX_NETWORK_POD) whose containers are processes, their state reported in the pod's
 * status. It is a client of the daemon's own server, like the E2B door, and of the API server
 * over HTTPS (api.h), both in the daemon's loop. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "base/loop.h"
#include "e2b/e2b.h"

typedef struct KubeNode KubeNode;

typedef int (*KubeConnectFn)(void *data, int *ret_fd);

typedef struct KubeNodeOptions {
        const char *name;       /* the Node's name */
        const char *kubeconfig; /* a JSON kubeconfig; NULL: in-cluster credentials */
        const char *node_ip;    /* the Node's InternalIP (pods' hostIP) */
        const char *pod_cidr;   /* the pod network's range (spec.podCIDR) */
        unsigned pods;          /* capacity: how many pods it takes */
        unsigned cpus;          /* capacity: CPUs */
        uint64_t memory_bytes;  /* capacity: memory */
        unsigned lease_s;       /* the Lease's duration (0: SBX_KUBE_LEASE_S) */
        const char *const *labels; /* extra NAME=VALUE labels, NULL-terminated, may be NULL */
        /* The daemon's E2B door on the node's address, or NULL: pods made by the gateway
         * (annotated sbx.dev/e2b-token) are served by it, and the Node says where it is
         * (annotation sbx.dev/e2b-url) for the gateway to forward their envd calls. */
        E2b *door;
        /* The kubelet's endpoints (`kubectl logs`) on node_ip:10250 over HTTPS: the node's
         * certificate and key, and the CA that signed the API server's client certificate (the
         * only client answered). All three or none (then there are none). PEM files. */
        const char *kubelet_cert, *kubelet_key, *kubelet_client_ca;
} KubeNodeOptions;

/* Starts registering (the API server answers later: failures are logged and retried).
 * Returns 0, or -errno with err (bad credentials, no connection to the daemon). */
int kube_node_new(Loop *loop, const KubeNodeOptions *o, KubeConnectFn connect, void *data, KubeNode **ret, char *err,
                  size_t errlen);
/* Stops: its sandboxes stay the daemon's until it ends (the node's Lease lapses and the
 * cluster sees it NotReady). */
KubeNode *kube_node_free(KubeNode *n);
