/* SPDX-License-Identifier: MIT */
/* What node.c and pods.c share: the node, and each pod it runs. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include "base/limits.h"
#include "base/loop.h"
#include "kube/api.h"
#include "kube/kube.h"
#include "rpc/client.h"

typedef struct KPod KPod;

struct KubeNode {
        Loop *loop;
        KubeApi *api;
        RpcClient *rpc;
        char *name, *node_ip, *pod_cidr;
        char **labels;
        unsigned pods, cpus, lease_s;
        uint64_t memory_bytes;
        E2b *door;
        bool registered;
        unsigned beats;        /* lease renewals since the last status heartbeat */
        int timer;             /* the heartbeat: every lease_s / 4 */
        Watch tw;
        int retry_timer;       /* a watch to resume, or registration to retry */
        Watch rw;
        KubeWatch *watch;
        char rv[64];           /* the pods' resourceVersion to resume the watch from */
        bool listing;
        KPod *pods_head;
        struct HttpServer *kubelet; /* the kubelet's endpoints (logs), or NULL */
        KubeConnectFn connect;      /* a connection of its own per followed log */
        void *connect_data;
};

/* kubelet.c: the kubelet's endpoints on the node's address (none when no certificate was
 * given). Returns 0 or -errno with err. */
int kubelet_start(KubeNode *n, const KubeNodeOptions *o, char *err, size_t errlen);
void kubelet_stop(KubeNode *n);

/* node.c asks pods.c */
/* A pod of the node as the API server has it now (ADDED, MODIFIED, or listed). */
void kpod_seen(KubeNode *n, json_t *pod);
/* The pod is gone from the API server. */
void kpod_gone(KubeNode *n, json_t *pod);
/* After a relist: pods not seen in it (marked by kpod_mark_all) are gone. */
void kpod_mark_all(KubeNode *n);
void kpod_sweep_unseen(KubeNode *n);
void kpod_free_all(KubeNode *n);
/* The sandbox and process of a container of a pod of the node (its latest, or the one before
 * with previous), for its logs. Returns 0, -ESRCH (no such pod), -ENOENT (no such container)
 * or -ENODATA (no process of it yet). */
int kpod_logs_target(KubeNode *n, const char *ns, const char *name, const char *container, bool previous,
                     char sandbox[64], char process[32]);
