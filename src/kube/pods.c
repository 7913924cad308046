/* SPDX-License-Identifier: MIT */
/* Each pod bound to the node (kube_private.h): a sandbox on the pod network, one process per
 * container, restarts by the pod's restartPolicy, deletion within its grace period, and the
 * pod's status as the kubelet would write it. Everything here is a call of the daemon's
 * protocol or of the API server, answered later from the loop. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include "base/buf.h"
#include "base/list.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/util.h"
#include "kube/kube_private.h"

typedef enum CState { C_WAITING, C_RUNNING, C_TERMINATED } CState;

typedef struct KCont {
        KPod *pod;
        char name[64];
        char image[256];
        char *command; /* bash text: exec 'argv0' 'argv1' ... */
        json_t *env;   /* {NAME: value} */
        char *cwd;
        char process_id[32];
        char last_process[32], prev_process[32]; /* the latest process and the one before: logs */
        CState state;
        const char *reason; /* waiting or terminated: a static word */
        char message[256];
        int exit_code, signal;
        uint64_t started_ms, finished_ms;
        unsigned restarts;
        bool has_last;
        int last_exit;
        uint64_t last_started_ms, last_finished_ms;
        int timer; /* restart backoff */
        Watch tw;
        /* A gateway's sandbox (E2B): no process of its own, running as long as the sandbox. */
        bool is_sandbox;
        json_t *spec; /* its spec while its command waits for the image's (image.inspect) */
} KCont;

typedef enum PState { P_CREATING, P_STARTING, P_RUNNING, P_ENDED, P_DELETING, P_GONE } PState;

struct KPod {
        KPod *next, *prev;
        KubeNode *node;
        char ns[64], name[254], uid[64];
        char restart_policy[16];
        PState state;
        bool seen;           /* kpod_mark_all / kpod_seen */
        char sandbox_id[64], ip[16];
        const char *phase;   /* "Pending", "Running", "Succeeded", "Failed" */
        const char *reason;  /* a failed pod's word */
        char message[300];
        uint64_t start_ms;
        unsigned n;
        KCont c[SBX_KUBE_MAX_CONTAINERS];
        int grace_timer;
        Watch gw;
        char network[16];    /* annotation sbx.dev/network: "pod" (default), "none" or "allowlist" */
        json_t *network_allow; /* annotation sbx.dev/network-allow, split: allowlist's patterns */
        char e2b_token[40];  /* annotation sbx.dev/e2b-token: the gateway's sandbox, served by the door */
        char e2b_template[64];
        json_t *sandbox_env; /* the sandbox container's env: the sandbox's own */
        json_t *pending_limits; /* while image.inspect is out: the limits sandbox.create will get */
        bool adopted;        /* e2b_adopt'ed by the door */
        bool lost;           /* the cluster declared this node lost: the pod is Failed and not ours */
        bool deleted_lost;   /* ... and its deletion was confirmed */
        bool creating;       /* sandbox.create is in flight */
        bool destroying;
        bool status_inflight, status_dirty;
};

static void pod_status_send(KPod *p);
static void cont_start(KCont *c);
static void pod_check_ended(KPod *p);
static void pod_finish_delete(KPod *p);

/* ---------------------------------------------------------------- reading the pod's spec */

static void shell_quote(Buf *b, const char *s) {
        (void)buf_append(b, "'", 1);
        for (; *s; s++) {
                if (*s == '\'')
                        (void)buf_append(b, "'\\''", 4);
                else
                        (void)buf_append(b, s, 1);
        }
        (void)buf_append(b, "'", 1);
}

/* Kubernetes' resource quantities: "512Mi", "1G", "500m", "1.5", "2e3". Returns 0 or -EINVAL. */
static int quantity(const char *s, double *ret) {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (errno || end == s || !(v >= 0) || v > 1e15)
                return -EINVAL;
        static const struct {
                const char *suffix;
                double mul;
        } units[] = { { "", 1 }, { "m", 1e-3 }, { "k", 1e3 }, { "M", 1e6 }, { "G", 1e9 }, { "T", 1e12 },
                      { "Ki", 1024.0 }, { "Mi", 1048576.0 }, { "Gi", 1073741824.0 }, { "Ti", 1099511627776.0 } };
        for (size_t i = 0; i < ELEMENTSOF(units); i++)
                if (strcmp(end, units[i].suffix) == 0) {
                        *ret = v * units[i].mul;
                        return 0;
                }
        return -EINVAL;
}

static json_t *str_list(json_t *a) { return json_is_array(a) ? a : NULL; }

/* A container's command line: command (or the image's entrypoint) then args (or, with neither
 * command nor args, the image's cmd). Returns 0, or -EINVAL with msg. */
static int cont_command(KCont *c, json_t *spec, json_t *image_cfg, char *msg, size_t msglen) {
        json_t *cmd = str_list(json_object_get(spec, "command")), *args = str_list(json_object_get(spec, "args"));
        json_t *ep = str_list(json_object_get(image_cfg, "entrypoint")), *icmd = str_list(json_object_get(image_cfg, "cmd"));
        json_t *first = json_array_size(cmd) ? cmd : ep;
        json_t *rest = json_array_size(cmd) || args ? args : icmd;
        if (!json_array_size(first) && !json_array_size(rest)) {
                snprintf(msg, msglen, "container %s has no command, and its image none either", c->name);
                return -EINVAL;
        }
        Buf b;
        buf_init(&b, 64 * 1024);
        (void)buf_append(&b, "exec", 4);
        json_t *parts[2] = { first, rest };
        for (int k = 0; k < 2; k++) {
                size_t i;
                json_t *v;
                json_array_foreach(parts[k], i, v) {
                        if (!json_is_string(v)) {
                                buf_done(&b);
                                snprintf(msg, msglen, "container %s: a command word that is not a string", c->name);
                                return -EINVAL;
                        }
                        (void)buf_append(&b, " ", 1);
                        shell_quote(&b, json_string_value(v));
                }
        }
        (void)buf_append(&b, "", 1);
        if (b.truncated) {
                buf_done(&b);
                snprintf(msg, msglen, "container %s: its command is longer than 64 KiB", c->name);
                return -EINVAL;
        }
        size_t len;
        c->command = (char *)buf_steal(&b, &len);
        return 0;
}

/* ---------------------------------------------------------------- lookup and life */

static KPod *pod_find(KubeNode *n, const char *uid) {
        for (KPod *p = n->pods_head; p; p = p->next)
                if (strcmp(p->uid, uid) == 0)
                        return p;
        return NULL;
}

static void cont_done(KCont *c) {
        if (c->tw.active)
                loop_del(c->pod->node->loop, &c->tw);
        c->timer = safe_close(c->timer);
        rpc_client_forget(c->pod->node->rpc, c);
        free(c->command);
        free(c->cwd);
        json_decref(c->env);
        json_decref(c->spec);
}

static void pod_free(KPod *p) {
        KubeNode *n = p->node;
        for (unsigned i = 0; i < p->n; i++)
                cont_done(&p->c[i]);
        if (p->gw.active)
                loop_del(n->loop, &p->gw);
        safe_close(p->grace_timer);
        rpc_client_forget(n->rpc, p);
        kube_api_forget(n->api, p);
        loop_cancel_defer(n->loop, p);
        if (p->adopted && n->door)
                e2b_release(n->door, p->sandbox_id);
        json_decref(p->sandbox_env);
        json_decref(p->network_allow);
        json_decref(p->pending_limits);
        LIST_UNLINK(n->pods_head, p);
        free(p);
}

static void pod_fail(KPod *p, const char *reason, const char *fmt, ...) _printf_(3, 4);
static void pod_fail(KPod *p, const char *reason, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->message, sizeof p->message, fmt, ap);
        va_end(ap);
        p->reason = reason;
        p->phase = "Failed";
        p->state = P_ENDED;
        log_warn("kube: pod %s/%s: %s: %s", p->ns, p->name, reason, p->message);
        for (unsigned i = 0; i < p->n; i++)
                if (p->c[i].state == C_WAITING && !p->c[i].reason)
                        p->c[i].reason = "CreateContainerError";
        pod_status_send(p);
}

/* ---------------------------------------------------------------- the status */

static json_t *time_json(uint64_t ms) {
        char t[40];
        kube_time(ms, false, t);
        return json_string(t);
}

static json_t *cont_state_json(CState st, const KCont *c, bool last) {
        if (last)
                return json_pack("{s:{s:i, s:s, s:o, s:o}}", "terminated", "exitCode", c->last_exit, "reason",
                                 c->last_exit ? "Error" : "Completed", "startedAt", time_json(c->last_started_ms),
                                 "finishedAt", time_json(c->last_finished_ms));
        if (st == C_RUNNING)
                return json_pack("{s:{s:o}}", "running", "startedAt", time_json(c->started_ms));
        if (st == C_TERMINATED) {
                json_t *t = json_pack("{s:i, s:s, s:o, s:o}", "exitCode", c->exit_code, "reason",
                                      c->reason ? c->reason : c->exit_code ? "Error" : "Completed", "startedAt",
                                      time_json(c->started_ms), "finishedAt", time_json(c->finished_ms));
                if (c->signal)
                        json_object_set_new(t, "signal", json_integer(c->signal));
                if (c->message[0])
                        json_object_set_new(t, "message", json_string(c->message));
                return json_pack("{s:o}", "terminated", t);
        }
        json_t *w = json_pack("{s:s}", "reason", c->reason ? c->reason : "ContainerCreating");
        if (c->message[0])
                json_object_set_new(w, "message", json_string(c->message));
        return json_pack("{s:o}", "waiting", w);
}

static json_t *condition(const char *type, bool ok, uint64_t ms) {
        return json_pack("{s:s, s:s, s:n, s:o}", "type", type, "status", ok ? "True" : "False", "lastProbeTime",
                         "lastTransitionTime", time_json(ms));
}

static json_t *pod_status_json(KPod *p) {
        bool all_running = p->n > 0;
        json_t *cs = json_array();
        for (unsigned i = 0; i < p->n; i++) {
                KCont *c = &p->c[i];
                all_running = all_running && c->state == C_RUNNING;
                char cid[160] = "";
                if (c->process_id[0])
                        snprintf(cid, sizeof cid, "sbx://%s/%s", p->sandbox_id, c->process_id);
                json_t *o = json_pack("{s:s, s:s, s:s, s:b, s:b, s:i, s:o}", "name", c->name, "image", c->image,
                                      "imageID", "", "ready", c->state == C_RUNNING, "started", c->state == C_RUNNING,
                                      "restartCount", (int)c->restarts, "state", cont_state_json(c->state, c, false));
                if (cid[0])
                        json_object_set_new(o, "containerID", json_string(cid));
                json_object_set_new(o, "lastState", c->has_last ? cont_state_json(C_TERMINATED, c, true) : json_object());
                json_array_append_new(cs, o);
        }
        uint64_t now = wall_ms();
        json_t *conds = json_array();
        json_array_append_new(conds, condition("Initialized", true, p->start_ms));
        json_array_append_new(conds, condition("Ready", all_running, now));
        json_array_append_new(conds, condition("ContainersReady", all_running, now));
        json_array_append_new(conds, condition("PodScheduled", true, p->start_ms));
        json_t *st = json_pack("{s:s, s:s, s:o, s:o, s:o}", "phase", p->phase, "hostIP", p->node->node_ip, "startTime",
                               time_json(p->start_ms), "conditions", conds, "containerStatuses", cs);
        if (p->ip[0]) {
                json_object_set_new(st, "podIP", json_string(p->ip));
                json_object_set_new(st, "podIPs", json_pack("[{s:s}]", "ip", p->ip));
        }
        if (p->reason) {
                json_object_set_new(st, "reason", json_string(p->reason));
                json_object_set_new(st, "message", json_string(p->message));
        }
        /* The pod's uid: a patch must not land on a new pod of the same name. */
        return json_pack("{s:{s:s}, s:o}", "metadata", "uid", p->uid, "status", st);
}

static void status_answer(void *ud, unsigned status, json_t *body, const char *err) {
        KPod *p = ud;
        log_debug("kube: pod %s/%s: status written (%u)", p->ns, p->name, status);
        p->status_inflight = false;
        if (status == 404) /* gone meanwhile: its DELETED event follows */
                return;
        if (status < 200 || status > 299)
                log_warn("kube: pod %s/%s: status not written (%u): %s", p->ns, p->name, status,
                         status ? json_string_value(json_object_get(body, "message")) ?: "(no message)" : err);
        if (p->status_dirty) {
                p->status_dirty = false;
                pod_status_send(p);
        }
}

/* The status as a merge patch of pods/NAME/status: one at a time, the newest state last. */
static void pod_status_send(KPod *p) {
        if (p->state == P_GONE || p->lost)
                return;
        if (p->status_inflight) {
                p->status_dirty = true;
                return;
        }
        char path[512];
        snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s/status", p->ns, p->name);
        int r = kube_api_call(p->node->api, "PATCH", path, "application/merge-patch+json", pod_status_json(p),
                              status_answer, p);
        if (r == 0)
                p->status_inflight = true;
        else
                log_warn("kube: pod %s/%s: status not sent: %s", p->ns, p->name, strerror(-r));
}

/* ---------------------------------------------------------------- containers */

static void phase_from_containers(KPod *p) {
        bool any_running = false;
        for (unsigned i = 0; i < p->n; i++)
                any_running = any_running || p->c[i].state == C_RUNNING;
        if (any_running && p->state == P_STARTING)
                p->state = P_RUNNING;
        if (p->state == P_RUNNING || p->state == P_STARTING)
                p->phase = any_running ? "Running" : p->phase;
}

static bool will_restart(const KPod *p, const KCont *c) {
        if (p->state == P_DELETING || p->destroying)
                return false;
        if (strcmp(p->restart_policy, "Never") == 0)
                return false;
        if (strcmp(p->restart_policy, "OnFailure") == 0)
                return c->exit_code != 0;
        return true;
}

static void restart_event(Watch *w, uint32_t events) {
        KCont *c = w->data;
        uint64_t x;
        (void)!read(c->timer, &x, sizeof x);
        if (c->pod->state == P_RUNNING || c->pod->state == P_STARTING)
                cont_start(c);
}

static void cont_ended(KCont *c, int exit_code, int signal, const char *reason) {
        KPod *p = c->pod;
        c->state = C_TERMINATED;
        c->exit_code = exit_code;
        c->signal = signal;
        c->reason = reason;
        c->finished_ms = wall_ms();
        c->process_id[0] = 0;
        if (p->state == P_DELETING) {
                pod_finish_delete(p);
                return;
        }
        if (will_restart(p, c)) {
                /* Backoff as the kubelet's: doubling from 1 s up to its cap, counted in restarts. */
                uint64_t wait = SBX_KUBE_BACKOFF_MS;
                for (unsigned i = 0; i < c->restarts && wait < SBX_KUBE_BACKOFF_MAX_MS; i++)
                        wait *= 2;
                wait = wait > SBX_KUBE_BACKOFF_MAX_MS ? SBX_KUBE_BACKOFF_MAX_MS : wait;
                c->has_last = true;
                c->last_exit = exit_code;
                c->last_started_ms = c->started_ms;
                c->last_finished_ms = c->finished_ms;
                c->restarts++;
                c->state = C_WAITING;
                c->reason = c->restarts > 1 ? "CrashLoopBackOff" : "ContainerCreating";
                if (c->timer < 0 && (c->timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK)) >= 0 &&
                    loop_add(p->node->loop, &c->tw, c->timer, EPOLLIN, restart_event, c) < 0)
                        c->timer = safe_close(c->timer);
                if (c->timer >= 0)
                        (void)timerfd_arm_ms(c->timer, wait);
        }
        pod_check_ended(p);
        phase_from_containers(p);
        pod_status_send(p);
}

/* Every container terminated with none to restart: the pod's phase is final. */
static void pod_check_ended(KPod *p) {
        bool failed = false;
        for (unsigned i = 0; i < p->n; i++) {
                if (p->c[i].state != C_TERMINATED)
                        return;
                failed = failed || p->c[i].exit_code != 0;
        }
        p->phase = failed ? "Failed" : "Succeeded";
        p->state = P_ENDED;
}

static void wait_answer(void *ud, json_t *result, json_t *error);

static void cont_wait(KCont *c) {
        json_t *params = json_pack("{s:s, s:s, s:s, s:I}", "sandboxId", c->pod->sandbox_id, "processId", c->process_id,
                                   "until", "exit", "timeoutMs", (json_int_t)SBX_MAX_TIMEOUT_MS);
        if (rpc_client_call(c->pod->node->rpc, "process.wait", params, wait_answer, c) < 0)
                cont_ended(c, 1, 0, "Error");
}

static void logs_answer(void *ud, json_t *result, json_t *error) {
        KCont *c = ud;
        const char *err = json_string_value(json_object_get(result, "stderr"));
        const char *out = json_string_value(json_object_get(result, "stdout"));
        const char *text = err && *err ? err : out;
        if (text && *text && !c->message[0]) {
                size_t n = strlen(text), keep = sizeof c->message - 1;
                while (n && (text[n - 1] == '\n' || text[n - 1] == '\r'))
                        n--;
                size_t from = n > keep ? n - keep : 0;
                snprintf(c->message, sizeof c->message, "%.*s", (int)(n - from), text + from);
        }
        cont_ended(c, c->exit_code, 0, NULL);
}

static void wait_answer(void *ud, json_t *result, json_t *error) {
        KCont *c = ud;
        if (!c->process_id[0])
                return;
        if (error && json_integer_value(json_object_get(error, "code")) == -32011) {
                cont_wait(c); /* WAIT_TIMEOUT: still running, a day later */
                return;
        }
        if (error) {
                snprintf(c->message, sizeof c->message, "%s",
                         json_string_value(json_object_get(error, "message")) ?: "the process is gone");
                cont_ended(c, 137, 0, "Error");
                return;
        }
        json_t *code = json_object_get(result, "exitCode");
        const char *status = json_string_value(json_object_get(result, "status"));
        int exit_code = json_is_integer(code) ? (int)json_integer_value(code) : 1;
        c->message[0] = 0;
        if (!json_is_integer(code))
                snprintf(c->message, sizeof c->message, "sbx knows no exit status of it (%s)", status ? status : "?");
        if (exit_code == 0) {
                cont_ended(c, 0, 0, NULL);
                return;
        }
        /* As terminationMessagePolicy FallbackToLogsOnError: a failed container's message is the
         * end of what it wrote (stderr, else stdout), read before its record goes. */
        c->exit_code = exit_code;
        if (rpc_client_call(c->pod->node->rpc, "process.logs",
                            json_pack("{s:s, s:s}", "sandboxId", c->pod->sandbox_id, "processId", c->process_id),
                            logs_answer, c) < 0)
                cont_ended(c, exit_code, 0, NULL);
}

static void start_answer(void *ud, json_t *result, json_t *error) {
        KCont *c = ud;
        KPod *p = c->pod;
        const char *id = json_string_value(json_object_get(result, "processId"));
        if (error || !id) {
                snprintf(c->message, sizeof c->message, "%s",
                         json_string_value(json_object_get(error, "message")) ?: "no process");
                c->state = C_WAITING;
                c->reason = "RunContainerError";
                cont_ended(c, 128, 0, "StartError");
                return;
        }
        snprintf(c->process_id, sizeof c->process_id, "%s", id);
        if (p->state == P_DELETING) /* started while the pod was being deleted: it ends too */
                (void)rpc_client_call(p->node->rpc, "process.kill",
                                      json_pack("{s:s, s:s, s:s}", "sandboxId", p->sandbox_id, "processId", id, "signal",
                                                "TERM"),
                                      NULL, NULL);
        memcpy(c->prev_process, c->last_process, sizeof c->prev_process);
        snprintf(c->last_process, sizeof c->last_process, "%s", id);
        c->state = C_RUNNING;
        c->reason = NULL;
        c->message[0] = 0;
        c->started_ms = wall_ms();
        cont_wait(c);
        phase_from_containers(p);
        pod_status_send(p);
}

static void cont_start(KCont *c) {
        KPod *p = c->pod;
        json_t *params = json_pack("{s:s, s:s, s:s}", "sandboxId", p->sandbox_id, "command", c->command, "label", c->name);
        if (c->env && json_object_size(c->env))
                json_object_set(params, "env", c->env);
        if (c->cwd)
                json_object_set_new(params, "cwd", json_string(c->cwd));
        if (rpc_client_call(p->node->rpc, "process.start", params, start_answer, c) < 0)
                cont_ended(c, 128, 0, "StartError");
}

/* ---------------------------------------------------------------- the sandbox */

static void create_answer(void *ud, json_t *result, json_t *error) {
        KPod *p = ud;
        p->creating = false;
        const char *id = json_string_value(json_object_get(result, "sandboxId"));
        const char *ip = json_string_value(json_object_get(result, "ip"));
        if (id)
                snprintf(p->sandbox_id, sizeof p->sandbox_id, "%s", id);
        if (p->state == P_DELETING || p->state == P_GONE) {
                pod_finish_delete(p);
                return;
        }
        if (error || !id) {
                pod_fail(p, "SandboxCreateFailed", "%s",
                         json_string_value(json_object_get(error, "message")) ?: "no sandbox");
                return;
        }
        snprintf(p->ip, sizeof p->ip, "%s", ip ? ip : "");
        if (p->e2b_token[0] && p->node->door) {
                int r = e2b_adopt(p->node->door, p->sandbox_id, p->e2b_token, p->e2b_template[0] ? p->e2b_template : NULL);
                if (r < 0)
                        log_warn("kube: pod %s/%s: the E2B door did not take its sandbox: %s", p->ns, p->name, strerror(-r));
                p->adopted = r == 0;
        }
        p->state = P_STARTING;
        for (unsigned i = 0; i < p->n; i++) {
                KCont *c = &p->c[i];
                if (!c->is_sandbox) {
                        cont_start(c);
                        continue;
                }
                snprintf(c->process_id, sizeof c->process_id, "sandbox");
                c->state = C_RUNNING;
                c->reason = NULL;
                c->started_ms = wall_ms();
        }
        phase_from_containers(p);
        pod_status_send(p);
}

/* Limits the pod's containers set, summed (a sandbox is the pod's one cgroup); a quantity sbx
 * cannot read fails the pod. Returns 0 or -EINVAL with msg. */
static int pod_limits(json_t *containers, json_t **ret, char *msg, size_t msglen) {
        double mem = 0, cpu = 0;
        bool all_mem = true, all_cpu = true;
        size_t i;
        json_t *c;
        json_array_foreach(containers, i, c) {
                json_t *lim = json_object_get(json_object_get(c, "resources"), "limits");
                const char *m = json_string_value(json_object_get(lim, "memory"));
                const char *u = json_string_value(json_object_get(lim, "cpu"));
                double v;
                if (m && quantity(m, &v) < 0) {
                        snprintf(msg, msglen, "memory limit %s is not a quantity", m);
                        return -EINVAL;
                }
                mem += m ? v : 0;
                all_mem = all_mem && m;
                if (u && quantity(u, &v) < 0) {
                        snprintf(msg, msglen, "cpu limit %s is not a quantity", u);
                        return -EINVAL;
                }
                cpu += u ? v : 0;
                all_cpu = all_cpu && u;
        }
        json_t *l = json_object();
        if (all_mem && mem > 0)
                json_object_set_new(l, "memoryBytes", json_integer((json_int_t)mem));
        if (all_cpu && cpu > 0)
                json_object_set_new(l, "cpus", json_real(cpu < 0.01 ? 0.01 : cpu));
        *ret = l;
        return 0;
}

/* The image all containers share ("" for the host's root: "sbx.dev/host" or an image name
 * the daemon's store lacks is refused by sandbox.create with its reason). */
static const char *host_root_image(const char *image) {
        return strcmp(image, "sbx.dev/host") == 0 || strncmp(image, "sbx.dev/host:", 13) == 0 ? "" : image;
}

static void sandbox_create(KPod *p, json_t *limits);

static void inspected(void *ud, json_t *result, json_t *error) {
        KPod *p = ud;
        json_t *limits = p->pending_limits;
        p->pending_limits = NULL;
        if (p->state == P_DELETING || p->state == P_GONE) {
                json_decref(limits);
                p->creating = false;
                pod_finish_delete(p);
                return;
        }
        if (!result) {
                json_decref(limits);
                p->creating = false;
                pod_fail(p, "SandboxCreateFailed", "%s",
                         json_string_value(json_object_get(error, "message")) ?: "the image is not in the node's store");
                return;
        }
        json_t *cfg = json_object_get(result, "config"); /* image.inspect answers the image itself */
        char msg[300];
        for (unsigned i = 0; i < p->n; i++) {
                KCont *c = &p->c[i];
                if (!c->spec)
                        continue;
                int r = cont_command(c, c->spec, cfg, msg, sizeof msg);
                c->spec = (json_decref(c->spec), NULL);
                if (r < 0) {
                        json_decref(limits);
                        p->creating = false;
                        pod_fail(p, "UnsupportedPodSpec", "%s", msg);
                        return;
                }
        }
        p->creating = false;
        sandbox_create(p, limits);
}

static void pod_create(KPod *p, json_t *pod) {
        json_t *spec = json_object_get(pod, "spec");
        json_t *containers = json_object_get(spec, "containers");
        const char *image = p->n ? host_root_image(p->c[0].image) : "";
        for (unsigned i = 1; i < p->n; i++)
                if (strcmp(host_root_image(p->c[i].image), image) != 0) {
                        pod_fail(p, "UnsupportedPodSpec", "sbx runs a pod's containers in one sandbox: they must "
                                 "share one image (%s, %s)", p->c[0].image, p->c[i].image);
                        return;
                }
        json_t *limits;
        char msg[256];
        if (pod_limits(containers, &limits, msg, sizeof msg) < 0) {
                pod_fail(p, "UnsupportedPodSpec", "%s", msg);
                return;
        }
        for (unsigned i = 0; i < p->n; i++)
                if (p->c[i].spec) {
                        p->pending_limits = limits;
                        if (rpc_client_call(p->node->rpc, "image.inspect", json_pack("{s:s}", "image", image), inspected,
                                            p) < 0) {
                                p->pending_limits = (json_decref(limits), NULL);
                                pod_fail(p, "SandboxCreateFailed", "the daemon's connection failed");
                        } else {
                                p->creating = true;
                        }
                        return;
                }
        sandbox_create(p, limits);
}

static void sandbox_create(KPod *p, json_t *limits) {
        const char *image = p->n ? host_root_image(p->c[0].image) : "";
        char label[330];
        snprintf(label, sizeof label, "pod %s/%s", p->ns, p->name);
        json_t *params = json_pack("{s:s, s:s, s:b, s:o, s:{s:s, s:s, s:s}}", "network", p->network, "label", label,
                                   "persist", 1, "limits", limits, "metadata", "k8sNamespace", p->ns, "k8sPod",
                                   p->name, "k8sUid", p->uid);
        if (image[0])
                json_object_set_new(params, "image", json_string(image));
        if (json_object_size(p->sandbox_env))
                json_object_set(params, "env", p->sandbox_env);
        if (p->network_allow)
                json_object_set(params, "networkAllow", p->network_allow);
        if (rpc_client_call(p->node->rpc, "sandbox.create", params, create_answer, p) < 0)
                pod_fail(p, "SandboxCreateFailed", "the daemon's connection failed");
        else
                p->creating = true;
}

/* ---------------------------------------------------------------- deletion */

static void delete_answer(void *ud, unsigned status, json_t *body, const char *err) {
        KPod *p = ud;
        if (status != 200 && status != 404 && status != 409)
                log_warn("kube: pod %s/%s: not deleted (%u): %s", p->ns, p->name, status,
                         status ? json_string_value(json_object_get(body, "message")) ?: "(no message)" : err);
        /* The DELETED event frees the record. */
}

static void destroy_answer(void *ud, json_t *result, json_t *error) {
        KPod *p = ud;
        if (p->adopted && p->node->door)
                e2b_release(p->node->door, p->sandbox_id);
        p->adopted = false;
        p->sandbox_id[0] = 0;
        char path[512];
        snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s", p->ns, p->name);
        if (p->state == P_GONE || p->lost) {
                if (p->state == P_GONE)
                        pod_free(p);
                return;
        }
        json_t *body = json_pack("{s:s, s:s, s:i, s:{s:s}}", "kind", "DeleteOptions", "apiVersion", "v1",
                                 "gracePeriodSeconds", 0, "preconditions", "uid", p->uid);
        (void)kube_api_call(p->node->api, "DELETE", path, NULL, body, delete_answer, p);
}

/* What the grace period was for is over (every container ended, or it ran out): the sandbox
 * goes, then the pod object (the kubelet's last word on it). */
static void pod_finish_delete(KPod *p) {
        if (p->destroying)
                return;
        bool waiting = false;
        for (unsigned i = 0; i < p->n; i++)
                waiting = waiting || (p->c[i].state == C_RUNNING && !p->c[i].is_sandbox);
        if (waiting && p->grace_timer >= 0)
                return;
        p->destroying = true;
        for (unsigned i = 0; i < p->n; i++)
                rpc_client_forget(p->node->rpc, &p->c[i]);
        if (!p->sandbox_id[0]) {
                destroy_answer(p, NULL, NULL);
                return;
        }
        if (rpc_client_call(p->node->rpc, "sandbox.destroy", json_pack("{s:s}", "sandboxId", p->sandbox_id),
                            destroy_answer, p) < 0)
                destroy_answer(p, NULL, NULL);
}

static void grace_event(Watch *w, uint32_t events) {
        KPod *p = w->data;
        loop_del(p->node->loop, &p->gw);
        p->grace_timer = safe_close(p->grace_timer);
        pod_finish_delete(p);
}

static void pod_delete(KPod *p, json_t *pod) {
        if (p->lost && !p->sandbox_id[0] && !p->deleted_lost) {
                /* Its sandbox went when it was declared lost: the pod's last word, at once. */
                char path[512];
                p->deleted_lost = true;
                snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s", p->ns, p->name);
                (void)kube_api_call(p->node->api, "DELETE", path, NULL,
                                    json_pack("{s:s, s:s, s:i, s:{s:s}}", "kind", "DeleteOptions", "apiVersion", "v1",
                                              "gracePeriodSeconds", 0, "preconditions", "uid", p->uid),
                                    delete_answer, p);
                return;
        }
        if (p->state == P_DELETING || p->destroying)
                return;
        p->state = P_DELETING;
        if (p->creating)
                return; /* create_answer goes on from here */
        json_int_t grace = json_integer_value(json_object_get(json_object_get(pod, "metadata"), "deletionGracePeriodSeconds"));
        bool running = false;
        for (unsigned i = 0; i < p->n; i++) {
                KCont *c = &p->c[i];
                if (c->state != C_RUNNING || c->is_sandbox)
                        continue;
                running = true;
                (void)rpc_client_call(p->node->rpc, "process.kill",
                                      json_pack("{s:s, s:s, s:s}", "sandboxId", p->sandbox_id, "processId",
                                                c->process_id, "signal", "TERM"),
                                      NULL, NULL);
        }
        if (running && grace > 0 && (p->grace_timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK)) >= 0 &&
            (loop_add(p->node->loop, &p->gw, p->grace_timer, EPOLLIN, grace_event, p) < 0 ||
             timerfd_arm_ms(p->grace_timer, (uint64_t)grace * 1000) < 0)) {
                loop_del(p->node->loop, &p->gw);
                p->grace_timer = safe_close(p->grace_timer);
        }
        pod_finish_delete(p);
}

/* ---------------------------------------------------------------- what the watch says */

static int pod_read(KPod *p, json_t *pod, char *msg, size_t msglen) {
        json_t *spec = json_object_get(pod, "spec");
        json_t *ann = json_object_get(json_object_get(pod, "metadata"), "annotations");
        const char *token = json_string_value(json_object_get(ann, "sbx.dev/e2b-token"));
        const char *tpl = json_string_value(json_object_get(ann, "sbx.dev/e2b-template"));
        snprintf(p->e2b_token, sizeof p->e2b_token, "%s", token ? token : "");
        /* sbx's egress controls, for a pod that asks: its own network namespace with loopback
         * only, or that and the allowlist proxy (sbx/egress.h). Such a pod has no pod IP. */
        const char *net = json_string_value(json_object_get(ann, "sbx.dev/network"));
        const char *allow = json_string_value(json_object_get(ann, "sbx.dev/network-allow"));
        snprintf(p->network, sizeof p->network, "%s", net ? net : "pod");
        if (strcmp(p->network, "pod") && strcmp(p->network, "none") && strcmp(p->network, "allowlist")) {
                snprintf(msg, msglen, "annotation sbx.dev/network is \"pod\", \"none\" or \"allowlist\", not \"%.32s\"",
                         p->network);
                return -EINVAL;
        }
        if (allow && strcmp(p->network, "allowlist")) {
                snprintf(msg, msglen, "annotation sbx.dev/network-allow goes with sbx.dev/network: allowlist");
                return -EINVAL;
        }
        if (!strcmp(p->network, "allowlist")) {
                p->network_allow = json_array();
                char *copy = strdup(allow ? allow : ""), *save = NULL;
                for (char *t = copy ? strtok_r(copy, ", ", &save) : NULL; t; t = strtok_r(NULL, ", ", &save))
                        json_array_append_new(p->network_allow, json_string(t));
                free(copy);
        }
        snprintf(p->e2b_template, sizeof p->e2b_template, "%s", tpl ? tpl : "");
        json_t *containers = json_object_get(spec, "containers");
        const char *rp = json_string_value(json_object_get(spec, "restartPolicy"));
        snprintf(p->restart_policy, sizeof p->restart_policy, "%s", rp ? rp : "Always");
        if (json_array_size(json_object_get(spec, "initContainers"))) {
                snprintf(msg, msglen, "init containers are not supported by sbx nodes");
                return -EINVAL;
        }
        if (!json_array_size(containers) || json_array_size(containers) > SBX_KUBE_MAX_CONTAINERS) {
                snprintf(msg, msglen, "a pod has 1 to %u containers here", SBX_KUBE_MAX_CONTAINERS);
                return -EINVAL;
        }
        size_t i;
        json_t *c;
        json_array_foreach(containers, i, c) {
                KCont *k = &p->c[p->n++];
                k->pod = p;
                k->timer = -1;
                snprintf(k->name, sizeof k->name, "%s", json_string_value(json_object_get(c, "name")) ?: "");
                snprintf(k->image, sizeof k->image, "%s", json_string_value(json_object_get(c, "image")) ?: "");
                const char *wd = json_string_value(json_object_get(c, "workingDir"));
                k->cwd = wd ? strdup(wd) : NULL;
                k->env = json_object();
                size_t j;
                json_t *e;
                json_array_foreach(json_object_get(c, "env"), j, e) {
                        const char *name = json_string_value(json_object_get(e, "name"));
                        const char *value = json_string_value(json_object_get(e, "value"));
                        if (name && json_object_get(e, "valueFrom")) {
                                snprintf(msg, msglen, "container %s: env %s: valueFrom is not supported by sbx nodes",
                                         k->name, name);
                                return -EINVAL;
                        }
                        if (name)
                                json_object_set_new(k->env, name, json_string(value ? value : ""));
                }
                json_t *cmd = json_object_get(c, "command"), *args = json_object_get(c, "args");
                if (p->e2b_token[0] && !json_array_size(cmd) && !json_array_size(args)) {
                        /* The gateway's sandbox: the container is the sandbox itself. */
                        k->is_sandbox = true;
                        if (!p->sandbox_env)
                                p->sandbox_env = json_incref(k->env);
                        continue;
                }
                /* No command: the image's Entrypoint (and its Cmd unless args are given), read
                 * before the sandbox is made. */
                if (!json_array_size(cmd) && strcmp(host_root_image(k->image), "")) {
                        k->spec = json_incref(c);
                        continue;
                }
                if (cont_command(k, c, NULL, msg, msglen) < 0)
                        return -EINVAL;
        }
        return 0;
}

static KPod *pod_new(KubeNode *n, json_t *pod, const char *uid) {
        json_t *meta = json_object_get(pod, "metadata");
        KPod *p = calloc(1, sizeof *p);
        if (!p)
                return NULL;
        p->node = n;
        p->grace_timer = -1;
        snprintf(p->ns, sizeof p->ns, "%s", json_string_value(json_object_get(meta, "namespace")) ?: "default");
        snprintf(p->name, sizeof p->name, "%s", json_string_value(json_object_get(meta, "name")) ?: "");
        snprintf(p->uid, sizeof p->uid, "%s", uid);
        p->phase = "Pending";
        p->start_ms = wall_ms();
        p->state = P_CREATING;
        LIST_LINK(n->pods_head, p);
        return p;
}

void kpod_seen(KubeNode *n, json_t *pod) {
        json_t *meta = json_object_get(pod, "metadata");
        const char *uid = json_string_value(json_object_get(meta, "uid"));
        if (!uid)
                return;
        KPod *p = pod_find(n, uid);
        bool deleting = json_object_get(meta, "deletionTimestamp") && !json_is_null(json_object_get(meta, "deletionTimestamp"));
        if (!p) {
                const char *phase = json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
                /* Finished before this daemon knew it (a restart): nothing to run again. */
                bool final = phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed"));
                if (final && !deleting)
                        return;
                if (!(p = pod_new(n, pod, uid)))
                        return;
                p->seen = true;
                char msg[300];
                if (final || deleting) {
                        p->state = P_DELETING;
                        pod_finish_delete(p);
                        return;
                }
                if (pod_read(p, pod, msg, sizeof msg) < 0) {
                        pod_fail(p, "UnsupportedPodSpec", "%s", msg);
                        return;
                }
                pod_create(p, pod);
                pod_status_send(p);
                return;
        }
        p->seen = true;
        /* The gateway marked it Failed (NodeLost) while this node could not renew its lease: the
         * cluster has replaced it, so its sandbox goes and its status is the cluster's now. */
        json_t *st = json_object_get(pod, "status");
        const char *phase = json_string_value(json_object_get(st, "phase"));
        const char *reason = json_string_value(json_object_get(st, "reason"));
        if (!p->lost && phase && reason && !strcmp(phase, "Failed") && !strcmp(reason, "NodeLost") &&
            strcmp(p->phase, "Failed")) {
                log_warn("kube: pod %s/%s was declared lost with this node: its sandbox goes", p->ns, p->name);
                p->lost = true;
                p->state = P_ENDED;
                for (unsigned i = 0; i < p->n; i++)
                        rpc_client_forget(n->rpc, &p->c[i]);
                p->destroying = false;
                pod_finish_delete(p);
                return;
        }
        if (deleting)
                pod_delete(p, pod);
}

void kpod_gone(KubeNode *n, json_t *pod) {
        const char *uid = json_string_value(json_object_get(json_object_get(pod, "metadata"), "uid"));
        KPod *p = uid ? pod_find(n, uid) : NULL;
        if (!p)
                return;
        p->state = P_GONE;
        kube_api_forget(n->api, p);
        if (p->creating || (p->destroying && p->sandbox_id[0]))
                return; /* create_answer or destroy_answer goes on */
        if (p->sandbox_id[0]) {
                p->destroying = true;
                for (unsigned i = 0; i < p->n; i++)
                        rpc_client_forget(n->rpc, &p->c[i]);
                rpc_client_forget(n->rpc, p);
                if (rpc_client_call(n->rpc, "sandbox.destroy", json_pack("{s:s}", "sandboxId", p->sandbox_id),
                                    destroy_answer, p) == 0)
                        return;
        }
        pod_free(p);
}

void kpod_mark_all(KubeNode *n) {
        for (KPod *p = n->pods_head; p; p = p->next)
                p->seen = false;
}

void kpod_sweep_unseen(KubeNode *n) {
        KPod *next;
        for (KPod *p = n->pods_head; p; p = next) {
                next = p->next;
                if (!p->seen) {
                        json_t *fake = json_pack("{s:{s:s}}", "metadata", "uid", p->uid);
                        kpod_gone(n, fake);
                        json_decref(fake);
                }
        }
}

void kpod_free_all(KubeNode *n) {
        while (n->pods_head)
                pod_free(n->pods_head);
}

int kpod_logs_target(KubeNode *n, const char *ns, const char *name, const char *container, bool previous,
                     char sandbox[64], char process[32]) {
        for (KPod *p = n->pods_head; p; p = p->next) {
                if (strcmp(p->ns, ns) || strcmp(p->name, name) || p->state == P_GONE)
                        continue;
                for (unsigned i = 0; i < p->n; i++) {
                        KCont *c = &p->c[i];
                        if (strcmp(c->name, container))
                                continue;
                        const char *id = previous ? c->prev_process : c->last_process;
                        if (c->is_sandbox || !id[0] || !p->sandbox_id[0])
                                return -ENODATA;
                        snprintf(sandbox, 64, "%s", p->sandbox_id);
                        snprintf(process, 32, "%s", id);
                        return 0;
                }
                return -ENOENT;
        }
        return -ESRCH;
}
