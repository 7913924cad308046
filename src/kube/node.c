/* SPDX-License-Identifier: MIT */
/* The node itself (kube.h): its Node object and Lease, the heartbeat, the pod watch. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <sys/utsname.h>
#include <unistd.h>
#include "base/log.h"
#include "base/util.h"
#include "kube/kube_private.h"

#define LEASE_NS "kube-node-lease"
/* The status heartbeat (the Ready condition's lastHeartbeatTime) goes with every this many
 * renewals of the Lease, which is what the node lifecycle controller watches between them. */
#define STATUS_EVERY 6u

static void watch_start(KubeNode *n);
static void list_start(KubeNode *n);
static void register_node(KubeNode *n);

static void retry_in(KubeNode *n, uint64_t ms) { (void)timerfd_arm_ms(n->retry_timer, ms); }

static const char *api_message(unsigned status, json_t *body, const char *err) {
        const char *m = json_string_value(json_object_get(body, "message"));
        return status ? (m ? m : "(no message)") : err;
}

/* ---------------------------------------------------------------- the Node */

static json_t *ready_condition(KubeNode *n) {
        char t[40];
        kube_time(wall_ms(), false, t);
        return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "type", "Ready", "status", "True", "reason", "SbxReady",
                         "message", "the sbx daemon is serving", "lastHeartbeatTime", t, "lastTransitionTime", t);
}

static json_t *node_status(KubeNode *n) {
        char pods[16], cpus[16], mem[32];
        snprintf(pods, sizeof pods, "%u", n->pods);
        snprintf(cpus, sizeof cpus, "%u", n->cpus);
        snprintf(mem, sizeof mem, "%lluKi", (unsigned long long)(n->memory_bytes / 1024));
        struct utsname u;
        if (uname(&u) < 0)
                snprintf(u.release, sizeof u.release, "unknown");
        json_t *conds = json_array();
        json_array_append_new(conds, ready_condition(n));
        static const char *const pressure[] = { "MemoryPressure", "DiskPressure", "PIDPressure" };
        for (size_t i = 0; i < ELEMENTSOF(pressure); i++) {
                char t[40];
                kube_time(wall_ms(), false, t);
                json_array_append_new(conds, json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", pressure[i], "status",
                                                       "False", "reason", "SbxHasRoom", "lastHeartbeatTime", t,
                                                       "lastTransitionTime", t));
        }
        return json_pack("{s:{s:s, s:s, s:s}, s:{s:s, s:s, s:s}, s:o, s:[{s:s, s:s}, {s:s, s:s}], s:{s:{s:i}}, "
                         "s:{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s}}",
                         "capacity", "cpu", cpus, "memory", mem, "pods", pods,
                         "allocatable", "cpu", cpus, "memory", mem, "pods", pods,
                         "conditions", conds,
                         "addresses", "type", "InternalIP", "address", n->node_ip, "type", "Hostname", "address", n->name,
                         "daemonEndpoints", "kubeletEndpoint", "Port", (int)SBX_KUBELET_PORT,
                         "nodeInfo", "kubeletVersion", "v1.20.2-sbx", "kubeProxyVersion", "", "operatingSystem", "linux",
                         "architecture", "amd64", "containerRuntimeVersion", "sbx://" SBX_VERSION, "kernelVersion",
                         u.release, "osImage", "sbx", "machineID", "", "systemUUID", "", "bootID", "");
}

static json_t *node_object(KubeNode *n) {
        json_t *labels = json_pack("{s:s, s:s, s:s, s:s}", "kubernetes.io/hostname", n->name, "kubernetes.io/os", "linux",
                                   "kubernetes.io/arch", "amd64", "sbx.dev/node", "true");
        for (char **l = n->labels; l && *l; l++) {
                char *eq = strchr(*l, '=');
                if (eq) {
                        *eq = 0;
                        json_object_set_new(labels, *l, json_string(eq + 1));
                        *eq = '=';
                }
        }
        json_t *spec = json_pack("{s:[{s:s, s:s, s:s}]}", "taints", "key", "sbx.dev/sandbox", "value", "true", "effect",
                                 "NoSchedule");
        if (n->pod_cidr) {
                json_object_set_new(spec, "podCIDR", json_string(n->pod_cidr));
                json_object_set_new(spec, "podCIDRs", json_pack("[s]", n->pod_cidr));
        }
        json_t *annotations = json_object();
        if (n->door) {
                char url[128];
                snprintf(url, sizeof url, strchr(n->node_ip, ':') ? "http://[%s]:%u" : "http://%s:%u", n->node_ip,
                         e2b_port(n->door));
                json_object_set_new(annotations, "sbx.dev/e2b-url", json_string(url));
        }
        return json_pack("{s:s, s:s, s:{s:s, s:o, s:o}, s:o, s:o}", "apiVersion", "v1", "kind", "Node", "metadata",
                         "name", n->name, "labels", labels, "annotations", annotations, "spec", spec, "status",
                         node_status(n));
}

static void lease_renew(KubeNode *n);

static void status_answer(void *ud, unsigned status, json_t *body, const char *err) {
        KubeNode *n = ud;
        if (status == 404) { /* deleted behind our back: register again */
                n->registered = false;
                register_node(n);
        } else if (status != 200)
                log_warn("kube: node %s: status not written (%u): %s", n->name, status, api_message(status, body, err));
}

static void status_send(KubeNode *n) {
        char path[300];
        snprintf(path, sizeof path, "/api/v1/nodes/%s/status", n->name);
        (void)kube_api_call(n->api, "PATCH", path, "application/merge-patch+json", json_pack("{s:o}", "status", node_status(n)),
                            status_answer, n);
}

static void update_answer(void *ud, unsigned status, json_t *body, const char *err) {
        KubeNode *n = ud;
        if (status != 200) {
                log_warn("kube: node %s: not updated (%u): %s", n->name, status, api_message(status, body, err));
                retry_in(n, SBX_KUBE_RETRY_MS);
                return;
        }
        n->registered = true;
        status_send(n);
        lease_renew(n);
        list_start(n);
}

static void create_answer(void *ud, unsigned status, json_t *body, const char *err) {
        KubeNode *n = ud;
        if (status == 409) {
                /* There from an earlier run: its labels and taint made ours, its status fresh. */
                json_t *o = node_object(n);
                json_object_del(o, "status");
                char path[300];
                snprintf(path, sizeof path, "/api/v1/nodes/%s", n->name);
                if (kube_api_call(n->api, "PATCH", path, "application/merge-patch+json", o, update_answer, n) < 0)
                        retry_in(n, SBX_KUBE_RETRY_MS);
                return;
        }
        if (status != 201 && status != 200) {
                log_warn("kube: node %s: not registered (%u): %s", n->name, status, api_message(status, body, err));
                retry_in(n, SBX_KUBE_RETRY_MS);
                return;
        }
        log_info("kube: registered node %s", n->name);
        n->registered = true;
        lease_renew(n);
        list_start(n);
}

static void register_node(KubeNode *n) {
        int r = kube_api_call(n->api, "POST", "/api/v1/nodes", NULL, node_object(n), create_answer, n);
        if (r < 0) {
                log_warn("kube: node %s: cannot call the API server: %s", n->name, strerror(-r));
                retry_in(n, SBX_KUBE_RETRY_MS);
        }
}

/* ---------------------------------------------------------------- the Lease */

static json_t *lease_object(KubeNode *n) {
        char t[40];
        kube_time(wall_ms(), true, t);
        return json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:i, s:s}}", "apiVersion", "coordination.k8s.io/v1", "kind",
                         "Lease", "metadata", "name", n->name, "namespace", LEASE_NS, "spec", "holderIdentity", n->name,
                         "leaseDurationSeconds", (int)n->lease_s, "renewTime", t);
}

static void lease_answer(void *ud, unsigned status, json_t *body, const char *err) {
        KubeNode *n = ud;
        if (status == 404 || status == 409) {
                if (status == 404)
                        (void)kube_api_call(n->api, "POST", "/apis/coordination.k8s.io/v1/namespaces/" LEASE_NS "/leases",
                                            NULL, lease_object(n), lease_answer, n);
                return;
        }
        if (status != 200 && status != 201)
                log_warn("kube: node %s: lease not renewed (%u): %s", n->name, status, api_message(status, body, err));
}

static void lease_renew(KubeNode *n) {
        char path[400];
        snprintf(path, sizeof path, "/apis/coordination.k8s.io/v1/namespaces/" LEASE_NS "/leases/%s", n->name);
        json_t *o = lease_object(n);
        json_object_del(o, "metadata");
        (void)kube_api_call(n->api, "PATCH", path, "application/merge-patch+json", o, lease_answer, n);
}

static void beat_event(Watch *w, uint32_t events) {
        KubeNode *n = w->data;
        uint64_t x;
        (void)!read(n->timer, &x, sizeof x);
        if (!n->registered)
                return;
        lease_renew(n);
        if (++n->beats >= STATUS_EVERY) {
                n->beats = 0;
                status_send(n);
        }
}

/* ---------------------------------------------------------------- the pods */

static void pods_path(KubeNode *n, bool watch, char *out, size_t size) {
        int len = snprintf(out, size, "/api/v1/pods?fieldSelector=spec.nodeName%%3D%s", n->name);
        if (watch && len > 0 && (size_t)len < size)
                snprintf(out + len, size - (size_t)len, "&watch=1&allowWatchBookmarks=true&timeoutSeconds=%u&resourceVersion=%s",
                         SBX_KUBE_WATCH_S, n->rv);
}

static void keep_rv(KubeNode *n, json_t *obj) {
        const char *rv = json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
        if (rv)
                snprintf(n->rv, sizeof n->rv, "%s", rv);
}

static void on_event(void *ud, const char *type, json_t *obj) {
        KubeNode *n = ud;
        log_debug("kube: node %s: %s pod %s", n->name, type,
                  json_string_value(json_object_get(json_object_get(obj, "metadata"), "name")));
        if (strcmp(type, "ERROR") == 0) {
                /* 410 Gone: the resourceVersion is too old; the list starts over. */
                log_debug("kube: watch error: %s", json_string_value(json_object_get(obj, "message")));
                n->rv[0] = 0;
                return;
        }
        keep_rv(n, obj);
        if (strcmp(type, "ADDED") == 0 || strcmp(type, "MODIFIED") == 0)
                kpod_seen(n, obj);
        else if (strcmp(type, "DELETED") == 0)
                kpod_gone(n, obj);
}

static void on_end(void *ud, unsigned status, const char *err) {
        KubeNode *n = ud;
        n->watch = NULL;
        log_debug("kube: node %s: the pod watch ended (%u): %s", n->name, status, err);
        if (status != 200)
                log_warn("kube: node %s: the pod watch ended (%u): %s", n->name, status, err);
        if (!n->rv[0] || status == 410) {
                n->rv[0] = 0;
                retry_in(n, status == 200 ? 1 : SBX_KUBE_RETRY_MS);
                return;
        }
        if (status == 200)
                watch_start(n);
        else
                retry_in(n, SBX_KUBE_RETRY_MS);
}

static void watch_start(KubeNode *n) {
        char path[600];
        pods_path(n, true, path, sizeof path);
        if (kube_api_watch(n->api, path, on_event, on_end, n, &n->watch) < 0)
                retry_in(n, SBX_KUBE_RETRY_MS);
}

static void list_answer(void *ud, unsigned status, json_t *body, const char *err) {
        KubeNode *n = ud;
        n->listing = false;
        if (status != 200 || !json_is_array(json_object_get(body, "items"))) {
                /* A 200 whose body is not a list (cut, or a proxy's page) must not read as "no
                 * pods": that would destroy every sandbox of the node. */
                log_warn("kube: node %s: pods not listed (%u): %s", n->name, status,
                         status == 200 ? "the answer is not a list" : api_message(status, body, err));
                retry_in(n, SBX_KUBE_RETRY_MS);
                return;
        }
        log_debug("kube: node %s: %zu pods listed", n->name, json_array_size(json_object_get(body, "items")));
        kpod_mark_all(n);
        size_t i;
        json_t *pod;
        json_array_foreach(json_object_get(body, "items"), i, pod)
                kpod_seen(n, pod);
        kpod_sweep_unseen(n);
        keep_rv(n, body);
        watch_start(n);
}

static void list_start(KubeNode *n) {
        if (n->listing || n->watch)
                return;
        char path[600];
        pods_path(n, false, path, sizeof path);
        if (kube_api_call(n->api, "GET", path, NULL, NULL, list_answer, n) == 0)
                n->listing = true;
        else
                retry_in(n, SBX_KUBE_RETRY_MS);
}

static void retry_event(Watch *w, uint32_t events) {
        KubeNode *n = w->data;
        uint64_t x;
        (void)!read(n->retry_timer, &x, sizeof x);
        if (!n->registered)
                register_node(n);
        else if (!n->watch && !n->listing && n->rv[0])
                watch_start(n);
        else
                list_start(n);
}

/* ---------------------------------------------------------------- life */

static void rpc_notify(void *ud, const char *method, json_t *params) {
        (void)ud;
        (void)method;
        (void)params;
}

int kube_node_new(Loop *loop, const KubeNodeOptions *o, KubeConnectFn connect, void *data, KubeNode **ret, char *err,
                  size_t errlen) {
        err[0] = 0;
        if (!o->name || !name_valid(o->name, 253) || strchr(o->name, '_')) {
                snprintf(err, errlen, "--kube-node %s: a node's name is a DNS name (lowercase letters, digits, - and .)",
                         o->name ? o->name : "");
                return -EINVAL;
        }
        if (!o->node_ip) {
                snprintf(err, errlen, "--kube-node needs --kube-node-ip (the node's address in the cluster)");
                return -EINVAL;
        }
        KubeNode *n = calloc(1, sizeof *n);
        if (!n)
                return -ENOMEM;
        n->loop = loop;
        n->timer = n->retry_timer = -1;
        n->pods = o->pods ? o->pods : 110;
        n->cpus = o->cpus ? o->cpus : 1;
        n->memory_bytes = o->memory_bytes;
        n->lease_s = o->lease_s ? o->lease_s : SBX_KUBE_LEASE_S;
        n->door = o->door;
        n->connect = connect;
        n->connect_data = data;
        KubeCreds creds;
        int r = kube_creds_load(o->kubeconfig, &creds, err, errlen);
        if (r == 0) {
                r = kube_api_new(loop, &creds, &n->api, err, errlen);
                kube_creds_done(&creds);
        }
        n->name = strdup(o->name);
        n->node_ip = strdup(o->node_ip);
        n->pod_cidr = o->pod_cidr ? strdup(o->pod_cidr) : NULL;
        size_t nl = 0;
        while (o->labels && o->labels[nl])
                nl++;
        n->labels = calloc(nl + 1, sizeof *n->labels);
        for (size_t i = 0; n->labels && i < nl; i++)
                n->labels[i] = strdup(o->labels[i]);
        if (r == 0 && (!n->name || !n->node_ip || (o->pod_cidr && !n->pod_cidr) || !n->labels))
                r = -ENOMEM;
        int fd = -1;
        if (r == 0 && (r = connect(data, &fd)) < 0)
                snprintf(err, errlen, "cannot connect to the daemon: %s", strerror(-r));
        if (r == 0 && (r = rpc_client_new(loop, fd, rpc_notify, n, &n->rpc)) < 0)
                safe_close(fd);
        if (r == 0) {
                n->timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
                n->retry_timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
                r = n->timer < 0 || n->retry_timer < 0 ? negerrno() : 0;
        }
        if (r == 0)
                r = loop_add(loop, &n->tw, n->timer, EPOLLIN, beat_event, n);
        if (r == 0)
                r = loop_add(loop, &n->rw, n->retry_timer, EPOLLIN, retry_event, n);
        if (r == 0) {
                struct itimerspec its = { .it_interval = { .tv_sec = n->lease_s / 4 ? n->lease_s / 4 : 1 } };
                its.it_value = its.it_interval;
                r = timerfd_settime(n->timer, 0, &its, NULL) < 0 ? negerrno() : 0;
        }
        if (r == 0)
                r = kubelet_start(n, o, err, errlen);
        if (r < 0) {
                if (!err[0])
                        snprintf(err, errlen, "%s", strerror(-r));
                kube_node_free(n);
                return r;
        }
        register_node(n);
        *ret = n;
        return 0;
}

KubeNode *kube_node_free(KubeNode *n) {
        if (!n)
                return NULL;
        kubelet_stop(n);
        kpod_free_all(n);
        if (n->watch)
                kube_watch_cancel(n->watch);
        if (n->tw.active)
                loop_del(n->loop, &n->tw);
        if (n->rw.active)
                loop_del(n->loop, &n->rw);
        safe_close(n->timer);
        safe_close(n->retry_timer);
        kube_api_free(n->api);
        rpc_client_free(n->rpc);
        free(n->name);
        free(n->node_ip);
        free(n->pod_cidr);
        for (char **l = n->labels; l && *l; l++)
                free(*l);
        free(n->labels);
        free(n);
        return NULL;
}
