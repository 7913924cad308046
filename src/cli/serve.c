/* SPDX-License-Identifier: MIT */
/* `sbx serve`: the JSON-RPC daemon on stdio or a Unix socket. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/log.h"
#include "base/redact.h"
#include "base/util.h"
#include "sbx/image.h"
#include "sbx/sbx.h"
#include "cli/cli.h"
#include "cli/serve_config.h"
#include "console/console.h"
#include "e2b/e2b.h"
#include "http/http.h"
#include "kube/gateway.h"
#include "kube/kube.h"
#include "methods/methods.h"
#include "server/server.h"

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx serve (--stdio | --socket PATH) [OPTIONS]\n"
                "\n"
                "Serves newline-delimited JSON-RPC 2.0 (see docs/PROTOCOL.md).\n"
                "\n"
                "Options:\n"
                "      --stdio          one client on stdin/stdout; exits when stdin closes\n"
                "      --socket PATH    many clients on a Unix socket (mode 0600, same uid or root)\n"
                "                       or, under socket activation, the socket systemd passed\n"
                "      --pool N         sandboxes kept ready for `create` with default options\n"
                "                       (default 2 with --socket, 0 with --stdio; at most 8)\n"
                "      --pool IMAGE=N   N sandboxes of IMAGE (of the image store) kept ready for a\n"
                "                       create with that image and default options; repeatable,\n"
                "                       at most 8 images (one not imported yet is waited for)\n"
                "      --slots N        interactive lane: requests that set a worker going held at\n"
                "                       once (runs, process starts, forks, snapshots, exports,\n"
                "                       imports; default: one per 128 MiB of memory, at least 8\n"
                "                       per CPU)\n"
                "      --system-slots N system lane: slots interactive work never takes (default 2)\n"
                "      --queue N        requests each lane lets wait before WORKER_UNAVAILABLE with\n"
                "                       retryAfterMs (default 10)\n"
                "      --lane LANE      fixes the lane of --socket's (or stdio's) clients:\n"
                "                       interactive or system (default: each request says)\n"
                "      --system-socket PATH  a second socket whose clients are in the system lane\n"
                "                       (then --socket's clients are fixed to interactive unless\n"
                "                       --lane says otherwise)\n"
                "      --shutdown-deadline-ms N  on SIGTERM, how long cancelled work may take to be\n"
                "                       answered before everything is destroyed (default 10000;\n"
                "                       a second SIGTERM does not wait)\n"
                "      --mode MODE      namespaces (default); process: no namespace, plain processes\n"
                "                       in cgroups, files in a host directory (for hosts without\n"
                "                       user namespaces; NOT a security boundary); or disabled:\n"
                "                       every request but ping, health, sandbox.list and kill\n"
                "                       answers SANDBOX_DISABLED\n"
                "      --audit PATH     log events to PATH (JSON lines, hash-chained; see\n"
                "                       `sbx audit verify`), written by a process of its own\n"
                "      --audit-max-bytes N\n"
                "                       rotate the log past N bytes (default 64M; 10k, 64M, 1G)\n"
                "      --audit-keep N   log files kept in all, PATH.1 ... the older (default 5)\n"
                "      --audit-fail-closed\n"
                "                       refuse run and process.start while the log is not\n"
                "                       keeping up (events dropped, writes failing)\n"
                "      --env-passthrough NAME[,NAME...]\n"
                "                       these variables of this process's environment are set in\n"
                "                       every sandbox's commands (nothing else of it ever is)\n"
                "      --redact PATTERN also redact matches of this POSIX extended regex (it must\n"
                "                       start with 3 literal characters); may be repeated\n"
                "      --no-default-redactions\n"
                "                       do not redact the known key shapes (secrets' values are\n"
                "                       always redacted)\n"
                "      --config FILE    read options and sandbox settings from FILE (INI: [serve]\n"
                "                       keys are these long options; [sandbox] defaults and\n"
                "                       [sandbox.enforced] fixed params of every create;\n"
                "                       [secrets] NAME = value for every sandbox); flags win\n"
                "      --check-config   check --config FILE (and the flags) and exit: 0 when good,\n"
                "                       2 naming the file's line that is not\n"
                "      --egress-hosts FILE  a hosts file (/etc/hosts format) whose names the proxies\n"
                "                       of network \"allowlist\" sandboxes resolve from it, not DNS\n"
                "      --egress-allow-private CIDR  an address range those proxies may reach although\n"
                "                       loopback, private or link-local (127.0.0.1/32); repeatable\n"
                "      --egress-ca FILE  PEM CA certificates those proxies trust, besides the host's\n"
                "                       store, for the servers of secrets with hosts (mode proxy)\n"
                "      --max-sandboxes N\n"
                "                       sandboxes held at once, forks included; past it a create\n"
                "                       fails with WORKER_UNAVAILABLE (1 to 65536). Default: derived\n"
                "                       at start from what the machine has free, each divided by a\n"
                "                       sandbox's share: 75%% of MemAvailable / 4 MiB, free pids\n"
                "                       (pid_max, pids cgroup) / 8, fds (RLIMIT_NOFILE, raised as\n"
                "                       needed) / 15 (as root, with parking: / 3, less room for 64\n"
                "                       in use), and as root 8192 host id blocks. `health` shows it\n"
                "                       (limits.maxSandboxes)\n"
                "      --park-after MS  a sandbox nothing used for MS gives back its fds but 3\n"
                "                       (and 2 per other session), taken again at its next use\n"
                "                       (as root only; 0: never). Default: 5000\n"
                "      --no-favordynmods  as root, leave the host's cgroup2 mount as it is; by\n"
                "                       default favordynmods is turned on for it (once, host-wide),\n"
                "                       or each move of a process between cgroups after a quiet\n"
                "                       spell waits ~8 ms for the kernel (sbx-serve(1))\n"
                "      --sandboxes-cpu-weight N\n"
                "                       the weight of all sandboxes together against what runs\n"
                "                       beside them, this daemon included, as cgroup v2 cpu.weight\n"
                "                       (1 to 10000; 100 weighs as one process; default 12: under\n"
                "                       contention the daemon answers first)\n"
                "      --expiry-export-dir DIR  where sandboxes made with onExpiry \"export\" leave\n"
                "                       their archive (DIR/<id>-<ms>.tar.zst) when they expire\n"
                "      --image-store DIR  where imported images live (sbx image import; create's\n"
                "                       image); default /var/lib/sbx/images as root, else\n"
                "                       $XDG_DATA_HOME/sbx/images or ~/.local/share/sbx/images\n"
                "      --image-store-max SIZE  bytes its unpacked layers may take (default 32G)\n"
                "      --pod-cidr CIDR  a pod network: sandboxes made with network \"pod\" get an\n"
                "                       eth0 on a bridge of the host (--pod-bridge, default sbx0,\n"
                "                       made unless there) with an address of CIDR (10.88.1.0/24;\n"
                "                       the bridge takes the first). Root only\n"
                "      --pod-bridge NAME  that bridge's name\n"
                "      --kube-node NAME  be a Kubernetes node: register Node NAME (tainted\n"
                "                       sbx.dev/sandbox:NoSchedule), renew its Lease, and run each\n"
                "                       pod bound to it as a sandbox on the pod network (needs\n"
                "                       --pod-cidr and --kube-node-ip)\n"
                "      --kubeconfig FILE  the API server and credentials, as JSON (what kubectl config\n"
                "                       view prints with --raw --flatten -o json); default: the\n"
                "                       pod's service account\n"
                "      --kube-node-ip IP  the node's address in the cluster (its InternalIP)\n"
                "      --kube-lease-seconds N  the node Lease's duration (default 40), renewed\n"
                "                       every quarter of it\n"
                "      --kube-label NAME=VALUE  a label of the Node; repeatable\n"
                "      --kube-kubelet-cert FILE, --kube-kubelet-key FILE, --kube-kubelet-client-ca FILE\n"
                "                       serve the kubelet's endpoints (kubectl logs) on the node's\n"
                "                       address, port 10250, over HTTPS, to clients that the CA\n"
                "                       signed (the API server's --kubelet-client-certificate)\n"
                "      --kube-gateway ADDR  serve E2B's API for a cluster of sbx nodes on ADDR: a\n"
                "                       sandbox is a Pod that kube-scheduler places, its envd calls\n"
                "                       forwarded to its node's --http door (--api-key as --http's)\n"
                "      --kube-namespace NS  the gateway's pods' namespace (default \"default\")\n"
                "      --http ADDR      also serve E2B's API (its control plane and envd) over HTTP\n"
                "                       on ADDR (PORT, HOST:PORT or [V6]:PORT; the host defaults\n"
                "                       to 127.0.0.1), so E2B's own SDKs run against sbx: set\n"
                "                       E2B_API_URL and E2B_SANDBOX_URL to http://ADDR\n"
                "      --api-key KEY    an E2B API key (X-API-KEY) the HTTP API accepts; may be\n"
                "                       repeated. None given: any key, from loopback only\n"
                "      --console-token TOKEN  what the operator console (http://ADDR/console/) and\n"
                "                       GET /metrics ask for (default: one made at start and\n"
                "                       printed with the console's address)\n"
                "      --console-dir DIR  the console page's files (default: those installed)\n"
                "      --metrics-no-sandboxes  GET /metrics without a series per sandbox\n"
                "      --protocol       print the protocol reference (Markdown) and exit\n"
                "  -v, --verbose        debug logging on stderr\n"
                "  -h, --help           show this help\n"
                "\n"
                "Socket activation: started with a listening Unix socket as fd 3, LISTEN_FDS=1\n"
                "and LISTEN_PID set to its pid (systemd's sbx.socket does that), it serves that\n"
                "socket and leaves its file when it exits; --socket may then be left out, and\n"
                "if given must name that socket.\n");
}

/* systemd's socket activation protocol (sd_listen_fds(3)), read here without libsystemd:
 * when LISTEN_PID is this process, LISTEN_FDS sockets were passed from fd 3 on. The variables
 * go either way, as sd_listen_fds(1) does, so no process started later takes them for its
 * own. Returns the fd, -1 when none was passed to this process, -2 when more than one was
 * (said on stderr). */
static int activation_fd(void) {
        const char *pid_s = getenv("LISTEN_PID"), *fds_s = getenv("LISTEN_FDS");
        uint64_t pid, n;
        int r = -1;
        if (pid_s && fds_s && parse_u64(pid_s, INT_MAX, &pid) == 0 && pid == (uint64_t)getpid()) {
                if (parse_u64(fds_s, INT_MAX, &n) < 0 || n > 1) {
                        fprintf(stderr, "sbx serve: LISTEN_FDS=%s: sbx serves one socket (one "
                                "ListenStream= in its socket unit)\n", fds_s);
                        r = -2;
                } else if (n == 1) {
                        r = 3; /* SD_LISTEN_FDS_START */
                }
        }
        (void)unsetenv("LISTEN_PID");
        (void)unsetenv("LISTEN_FDS");
        (void)unsetenv("LISTEN_FDNAMES");
        return r;
}

/* A number flag within [min, max]: 0, or -EINVAL after saying what is wrong. */
static int serve_number(const char *flag, const char *arg, long min, long max, long *ret) {
        char *end;
        errno = 0;
        long v = strtol(arg, &end, 10);
        if (!*arg || *end || errno || v < min || v > max) {
                fprintf(stderr, "sbx serve: %s takes %ld to %ld\n", flag, min, max);
                return -EINVAL;
        }
        *ret = v;
        return 0;
}

enum { OPT_AUDIT = 256, OPT_AUDIT_MAX_BYTES, OPT_AUDIT_KEEP, OPT_AUDIT_FAIL_CLOSED };

/* ---- secrets and redaction: --env-passthrough, --redact, --no-default-redactions */
typedef struct RedactArgs {
        const char *env[SBX_MAX_ENV_PASSTHROUGH + 1];
        char *env_kv[SBX_MAX_ENV_PASSTHROUGH];
        size_t n_env;
        const char *patterns[SBX_MAX_REDACT_PATTERNS + 1];
        size_t n_patterns;
        bool no_defaults;
} RedactArgs;

/* --env-passthrough NAME[,NAME...]: each NAME set here becomes NAME=value for every sandbox;
 * one not set is left out. Returns 0, or -EINVAL after saying why on stderr (-ENOMEM: not
 * said). */
static int passthrough_add(RedactArgs *a, const char *list) {
        _cleanup_free_ char *copy = strdup(list);
        char *save = NULL;
        for (char *n = copy ? strtok_r(copy, ",", &save) : NULL; n; n = strtok_r(NULL, ",", &save)) {
                if (!env_name_valid(n, strlen(n))) {
                        fprintf(stderr, "sbx serve: --env-passthrough: '%s' is not a variable name\n", n);
                        return -EINVAL;
                }
                if (a->n_env >= SBX_MAX_ENV_PASSTHROUGH) {
                        fprintf(stderr, "sbx serve: --env-passthrough: at most %u names\n", SBX_MAX_ENV_PASSTHROUGH);
                        return -EINVAL;
                }
                const char *v = getenv(n);
                if (!v)
                        continue;
                if (asprintf(&a->env_kv[a->n_env], "%s=%s", n, v) < 0)
                        return -ENOMEM;
                a->env[a->n_env] = a->env_kv[a->n_env];
                a->n_env++;
        }
        return copy ? 0 : -ENOMEM;
}

/* --redact PATTERN. Returns 0, or -EINVAL after saying why. */
static int redact_add(RedactArgs *a, const char *pattern) {
        char err[512];
        if (a->n_patterns >= SBX_MAX_REDACT_PATTERNS || redact_pattern_check(pattern, err, sizeof err) < 0) {
                fprintf(stderr, "sbx serve: --redact: %s\n",
                        a->n_patterns >= SBX_MAX_REDACT_PATTERNS ? "too many patterns" : err);
                return -EINVAL;
        }
        a->patterns[a->n_patterns++] = pattern;
        return 0;
}

static int redact_args_apply(const RedactArgs *a, Server *s) {
        char err[512];
        SbxContext *ctx = server_context(s);
        if (sbx_context_set_redaction(ctx, a->patterns, !a->no_defaults, err, sizeof err) < 0) {
                fprintf(stderr, "sbx serve: --redact: %s\n", err);
                return -EINVAL;
        }
        return sbx_context_set_env(ctx, a->env) < 0 ? -ENOMEM : 0;
}

static void redact_args_done(RedactArgs *a) {
        for (size_t i = 0; i < a->n_env; i++)
                free(a->env_kv[i]);
}

enum { OPT_CONFIG = 300, OPT_CHECK_CONFIG, OPT_MAX_SANDBOXES, OPT_EXPIRY_DIR, OPT_EGRESS_CA, OPT_HTTP, OPT_API_KEY,
       OPT_IMAGE_STORE, OPT_IMAGE_STORE_MAX, OPT_POD_CIDR, OPT_POD_BRIDGE, OPT_KUBE_NODE, OPT_KUBECONFIG,
       OPT_KUBE_NODE_IP, OPT_KUBE_LEASE, OPT_KUBE_LABEL, OPT_KUBE_GATEWAY, OPT_KUBE_NAMESPACE,
       OPT_KUBELET_CERT, OPT_KUBELET_KEY, OPT_KUBELET_CA, OPT_CONSOLE_TOKEN, OPT_CONSOLE_DIR,
       OPT_METRICS_NO_SANDBOXES, OPT_PARK_AFTER, OPT_NO_FAVORDYNMODS, OPT_CPU_WEIGHT };

/* A console token is sent in a cookie and a header: nothing that needs quoting there. */
#define CONSOLE_TOKEN_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._~-"

static const struct option serve_opts[] = {
        { "stdio", no_argument, NULL, 's' },
        { "socket", required_argument, NULL, 'S' },
        { "protocol", no_argument, NULL, 'P' },
        { "pool", required_argument, NULL, 'p' },
        { "slots", required_argument, NULL, 'L' },
        { "system-slots", required_argument, NULL, 'Y' },
        { "queue", required_argument, NULL, 'Q' },
        { "lane", required_argument, NULL, 'l' },
        { "system-socket", required_argument, NULL, 'T' },
        { "shutdown-deadline-ms", required_argument, NULL, 'D' },
        { "mode", required_argument, NULL, 'M' },
        { "audit", required_argument, NULL, OPT_AUDIT },
        { "audit-max-bytes", required_argument, NULL, OPT_AUDIT_MAX_BYTES },
        { "audit-keep", required_argument, NULL, OPT_AUDIT_KEEP },
        { "audit-fail-closed", no_argument, NULL, OPT_AUDIT_FAIL_CLOSED },
        { "env-passthrough", required_argument, NULL, 'E' },
        { "redact", required_argument, NULL, 'R' },
        { "no-default-redactions", no_argument, NULL, 'N' },
        { "expiry-export-dir", required_argument, NULL, OPT_EXPIRY_DIR },
        { "config", required_argument, NULL, OPT_CONFIG },
        { "check-config", no_argument, NULL, OPT_CHECK_CONFIG },
        { "egress-hosts", required_argument, NULL, 'H' },
        { "egress-allow-private", required_argument, NULL, 'A' },
        { "egress-ca", required_argument, NULL, OPT_EGRESS_CA },
        { "http", required_argument, NULL, OPT_HTTP },
        { "api-key", required_argument, NULL, OPT_API_KEY },
        { "console-token", required_argument, NULL, OPT_CONSOLE_TOKEN },
        { "console-dir", required_argument, NULL, OPT_CONSOLE_DIR },
        { "metrics-no-sandboxes", no_argument, NULL, OPT_METRICS_NO_SANDBOXES },
        { "max-sandboxes", required_argument, NULL, OPT_MAX_SANDBOXES },
        { "park-after", required_argument, NULL, OPT_PARK_AFTER },
        { "no-favordynmods", no_argument, NULL, OPT_NO_FAVORDYNMODS },
        { "sandboxes-cpu-weight", required_argument, NULL, OPT_CPU_WEIGHT },
        { "image-store", required_argument, NULL, OPT_IMAGE_STORE },
        { "image-store-max", required_argument, NULL, OPT_IMAGE_STORE_MAX },
        { "pod-cidr", required_argument, NULL, OPT_POD_CIDR },
        { "pod-bridge", required_argument, NULL, OPT_POD_BRIDGE },
        { "kube-node", required_argument, NULL, OPT_KUBE_NODE },
        { "kubeconfig", required_argument, NULL, OPT_KUBECONFIG },
        { "kube-node-ip", required_argument, NULL, OPT_KUBE_NODE_IP },
        { "kube-lease-seconds", required_argument, NULL, OPT_KUBE_LEASE },
        { "kube-label", required_argument, NULL, OPT_KUBE_LABEL },
        { "kube-gateway", required_argument, NULL, OPT_KUBE_GATEWAY },
        { "kube-namespace", required_argument, NULL, OPT_KUBE_NAMESPACE },
        { "kube-kubelet-cert", required_argument, NULL, OPT_KUBELET_CERT },
        { "kube-kubelet-key", required_argument, NULL, OPT_KUBELET_KEY },
        { "kube-kubelet-client-ca", required_argument, NULL, OPT_KUBELET_CA },
        { "verbose", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },
        {},
};

/* What the command line and the config file say, made by serve_parse and read by serve_start.
 * Owns cfg and ra; its strings point into argv or cfg. Numbers are -1 when not given. */
typedef struct ServeOptions {
        ServeConfig cfg;
        const char *config_path; /* NULL: no --config */
        bool check_config, stdio;
        const char *mode;
        const char *path, *system_path;
        long pool, slots, system_slots, queue, deadline, lane;
        const char *audit;
        uint64_t audit_max, audit_keep;
        bool audit_fail_closed;
        RedactArgs ra;
        const char *egress_hosts, *egress_ca;
        const char *egress_private[SBX_MAX_EGRESS_PRIVATE_CIDRS + 1];
        unsigned n_egress_private;
        unsigned long max_sandboxes; /* 0: derived by the server */
        long park_after;             /* ms; -1: SBX_PARK_AFTER_MS, 0: never */
        bool no_favordynmods;
        long cpu_weight;             /* -1: SBX_SANDBOXES_CPU_WEIGHT */
        const char *expiry_dir;
        const char *image_store; /* NULL: the default one, if it can be had */
        const char *image_pools[SBX_MAX_IMAGE_POOLS]; /* --pool IMAGE=N: "IMAGE" */
        long image_pool_n[SBX_MAX_IMAGE_POOLS];
        unsigned n_image_pools;
        uint64_t image_store_max;
        const char *pod_cidr, *pod_bridge;
        const char *kube_node, *kubeconfig, *kube_node_ip, *kube_gateway, *kube_namespace;
        const char *kubelet_cert, *kubelet_key, *kubelet_ca;
        long kube_lease;
        const char *kube_labels[SBX_MAX_KUBE_LABELS + 1];
        unsigned n_kube_labels;
        const char *http;
        const char *console_token, *console_dir;
        bool metrics_no_sandboxes;
        const char *api_keys[SBX_MAX_API_KEYS + 1];
        unsigned n_api_keys;
        int afd; /* the socket passed by socket activation; -1: none */
} ServeOptions;

static void serve_options_done(ServeOptions *o) {
        serve_config_done(&o->cfg);
        redact_args_done(&o->ra);
}

/* ---- parsing */

/* --config FILE and --check-config, found before getopt runs. */
static void config_find(ServeOptions *o, int argc, char **argv) {
        for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
                if (strcmp(argv[i], "--check-config") == 0)
                        o->check_config = true;
                else if (strncmp(argv[i], "--config=", 9) == 0)
                        o->config_path = argv[i] + 9;
                else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
                        o->config_path = argv[++i];
        }
}

/* Reads --config's file: its [serve] options go before the command line's in the argv that
 * *argc and *argv are then set to, so a flag given there wins. False when cmd_serve is to
 * return *ret_exit at once (said on stderr). */
static bool config_read(ServeOptions *o, int *argc, char ***argv, int *ret_exit) {
        config_find(o, *argc, *argv);
        if (!o->config_path)
                return true;
        char cerr[768];
        int r;
        if ((r = serve_config_load(&o->cfg, o->config_path, serve_opts, cerr, sizeof cerr)) < 0 ||
            (!o->check_config && (r = serve_config_check_sandbox(&o->cfg, cerr, sizeof cerr)) < 0)) {
                fprintf(stderr, "sbx serve: --config %s\n", cerr);
                /* A file that is missing or unreadable is a bad argument as much as a bad line. */
                *ret_exit = r == -ENOMEM ? 1 : 2;
                return false;
        }
        if (serve_config_argv(&o->cfg, *argc, *argv) < 0) {
                *ret_exit = 1;
                return false;
        }
        *argc = o->cfg.argc;
        *argv = o->cfg.argv;
        return true;
}

static int pool_arg(const char *arg, long *ret) {
        char *end;
        *ret = strtol(arg, &end, 10);
        if (*end || *ret < 0 || *ret > 8) {
                fprintf(stderr, "sbx serve: --pool takes 0 to 8\n");
                return -EINVAL;
        }
        return 0;
}

static int lane_arg(const char *arg, long *ret) {
        if (strcmp(arg, "interactive") != 0 && strcmp(arg, "system") != 0) {
                fprintf(stderr, "sbx serve: --lane takes interactive or system\n");
                return -EINVAL;
        }
        *ret = strcmp(arg, "system") == 0;
        return 0;
}

static int mode_arg(const char *arg, const char **ret) {
        if (strcmp(arg, "namespaces") != 0 && strcmp(arg, "process") != 0 && strcmp(arg, "disabled") != 0) {
                fprintf(stderr, "sbx serve: --mode takes namespaces, process or disabled\n");
                return -EINVAL;
        }
        *ret = arg;
        return 0;
}

static int audit_max_arg(const char *arg, uint64_t *ret) {
        if (parse_size(arg, ret) < 0 || *ret < SBX_AUDIT_MIN_MAX_BYTES) {
                fprintf(stderr, "sbx serve: --audit-max-bytes takes a size of at least %llu bytes "
                        "(10k, 64M, 1G); got '%s'\n",
                        (unsigned long long)SBX_AUDIT_MIN_MAX_BYTES, arg);
                return -EINVAL;
        }
        return 0;
}

static int audit_keep_arg(const char *arg, uint64_t *ret) {
        if (parse_u64(arg, SBX_AUDIT_MAX_KEEP, ret) < 0 || *ret < 1) {
                fprintf(stderr, "sbx serve: --audit-keep takes 1 to %u; got '%s'\n", SBX_AUDIT_MAX_KEEP, arg);
                return -EINVAL;
        }
        return 0;
}

static int egress_private_add(ServeOptions *o, const char *cidr) {
        if (o->n_egress_private >= SBX_MAX_EGRESS_PRIVATE_CIDRS) {
                fprintf(stderr, "sbx serve: --egress-allow-private: at most %u\n", SBX_MAX_EGRESS_PRIVATE_CIDRS);
                return -EINVAL;
        }
        o->egress_private[o->n_egress_private++] = cidr;
        return 0;
}

static int max_sandboxes_arg(const char *arg, unsigned long *ret) {
        char *end;
        errno = 0;
        *ret = strtoul(arg, &end, 10);
        if (errno || end == arg || *end || arg[0] == '-' || *ret < 1 || *ret > SBX_MAX_SERVER_SANDBOXES) {
                fprintf(stderr, "sbx serve: --max-sandboxes takes 1 to %u\n", SBX_MAX_SERVER_SANDBOXES);
                return -EINVAL;
        }
        return 0;
}

static int park_after_arg(const char *arg, long *ret) {
        char *end;
        errno = 0;
        long v = strtol(arg, &end, 10);
        if (errno || end == arg || *end || v < 0 || v > 86400000L) {
                fprintf(stderr, "sbx serve: --park-after takes 0 (never) to 86400000 ms\n");
                return -EINVAL;
        }
        *ret = v;
        return 0;
}

static int api_key_add(ServeOptions *o, const char *key) {
        if (o->n_api_keys >= SBX_MAX_API_KEYS || !*key || strlen(key) > SBX_MAX_API_KEY_BYTES) {
                fprintf(stderr, "sbx serve: --api-key: at most %u keys of 1 to %u bytes\n", SBX_MAX_API_KEYS,
                        SBX_MAX_API_KEY_BYTES);
                return -EINVAL;
        }
        o->api_keys[o->n_api_keys++] = key;
        return 0;
}

/* Reads option c (its value in optarg) into o. Returns 0; 1 when sbx serve is done (--help,
 * --protocol: exit 0); -EINVAL once stderr says why (exit 2). */
static int serve_option(ServeOptions *o, int c) {
        switch (c) {
        case OPT_CONFIG:
        case OPT_CHECK_CONFIG: return 0; /* read before (config_read) */
        case OPT_EXPIRY_DIR: o->expiry_dir = optarg; return 0;
        case OPT_IMAGE_STORE: o->image_store = optarg; return 0;
        case OPT_IMAGE_STORE_MAX:
                if (parse_size(optarg, &o->image_store_max) < 0 || o->image_store_max < 1024 * 1024) {
                        fprintf(stderr, "sbx serve: --image-store-max must be a size of at least 1M; got '%s'\n", optarg);
                        return -EINVAL;
                }
                return 0;
        case 's': o->stdio = true; return 0;
        case 'S': o->path = optarg; return 0;
        case 'P': dispatch_print_protocol(stdout); return 1;
        case 'p': {
                char *eq = strrchr(optarg, '=');
                if (!eq)
                        return pool_arg(optarg, &o->pool);
                if (eq == optarg || o->n_image_pools >= SBX_MAX_IMAGE_POOLS) {
                        fprintf(stderr, "sbx serve: --pool IMAGE=N takes an image name and 0 to 8, for at most %u "
                                "images\n", SBX_MAX_IMAGE_POOLS);
                        return -EINVAL;
                }
                *eq = 0;
                o->image_pools[o->n_image_pools] = optarg;
                return pool_arg(eq + 1, &o->image_pool_n[o->n_image_pools++]);
        }
        case 'L': return serve_number("--slots", optarg, 1, SBX_MAX_LANE_SLOTS, &o->slots);
        case 'Y': return serve_number("--system-slots", optarg, 1, SBX_MAX_LANE_SLOTS, &o->system_slots);
        case 'Q': return serve_number("--queue", optarg, 0, SBX_MAX_LANE_QUEUE, &o->queue);
        case 'D': return serve_number("--shutdown-deadline-ms", optarg, 0, SBX_MAX_SHUTDOWN_DEADLINE_MS, &o->deadline);
        case 'l': return lane_arg(optarg, &o->lane);
        case 'T': o->system_path = optarg; return 0;
        case 'M': return mode_arg(optarg, &o->mode);
        case OPT_AUDIT: o->audit = optarg; return 0;
        case OPT_AUDIT_MAX_BYTES: return audit_max_arg(optarg, &o->audit_max);
        case OPT_AUDIT_KEEP: return audit_keep_arg(optarg, &o->audit_keep);
        case OPT_AUDIT_FAIL_CLOSED: o->audit_fail_closed = true; return 0;
        case 'E': return passthrough_add(&o->ra, optarg);
        case 'R': return redact_add(&o->ra, optarg);
        case 'N': o->ra.no_defaults = true; return 0;
        case 'H': o->egress_hosts = optarg; return 0;
        case OPT_EGRESS_CA: o->egress_ca = optarg; return 0;
        case OPT_HTTP: o->http = optarg; return 0;
        case OPT_CONSOLE_TOKEN: o->console_token = optarg; return 0;
        case OPT_CONSOLE_DIR: o->console_dir = optarg; return 0;
        case OPT_METRICS_NO_SANDBOXES: o->metrics_no_sandboxes = true; return 0;
        case OPT_API_KEY: return api_key_add(o, optarg);
        case OPT_POD_CIDR: o->pod_cidr = optarg; return 0;
        case OPT_POD_BRIDGE: o->pod_bridge = optarg; return 0;
        case OPT_KUBE_NODE: o->kube_node = optarg; return 0;
        case OPT_KUBECONFIG: o->kubeconfig = optarg; return 0;
        case OPT_KUBE_NODE_IP: o->kube_node_ip = optarg; return 0;
        case OPT_KUBE_GATEWAY: o->kube_gateway = optarg; return 0;
        case OPT_KUBE_NAMESPACE: o->kube_namespace = optarg; return 0;
        case OPT_KUBELET_CERT: o->kubelet_cert = optarg; return 0;
        case OPT_KUBELET_KEY: o->kubelet_key = optarg; return 0;
        case OPT_KUBELET_CA: o->kubelet_ca = optarg; return 0;
        case OPT_KUBE_LEASE: return serve_number("--kube-lease-seconds", optarg, 4, 3600, &o->kube_lease);
        case OPT_KUBE_LABEL:
                if (!strchr(optarg, '=') || optarg[0] == '=' || o->n_kube_labels >= SBX_MAX_KUBE_LABELS) {
                        fprintf(stderr, "sbx serve: --kube-label NAME=VALUE, at most %u; got '%s'\n",
                                SBX_MAX_KUBE_LABELS, optarg);
                        return -EINVAL;
                }
                o->kube_labels[o->n_kube_labels++] = optarg;
                return 0;
        case 'A': return egress_private_add(o, optarg);
        case OPT_MAX_SANDBOXES: return max_sandboxes_arg(optarg, &o->max_sandboxes);
        case OPT_PARK_AFTER: return park_after_arg(optarg, &o->park_after);
        case OPT_NO_FAVORDYNMODS: o->no_favordynmods = true; return 0;
        case OPT_CPU_WEIGHT: return serve_number("--sandboxes-cpu-weight", optarg, 1, SBX_MAX_CPU_WEIGHT, &o->cpu_weight);
        case 'v': sbx_log_level = LOG_DEBUG; return 0;
        case 'h': usage(stdout); return 1;
        default: usage(stderr); return -EINVAL;
        }
}

/* Reads every option into o. An option that ends sbx serve and came from the config file is
 * named by its line there, after what was said of it. False when cmd_serve is to return
 * *ret_exit at once. */
static bool options_read(ServeOptions *o, int argc, char **argv, int *ret_exit) {
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "vh", serve_opts, NULL)) != -1) {
                int index = optind - 1;
                int r = serve_option(o, c);
                if (r == 0)
                        continue;
                char where[PATH_MAX + 32];
                if (serve_config_where(&o->cfg, index, where, sizeof where))
                        fprintf(stderr, "sbx serve: (that is --config %s)\n", where);
                *ret_exit = r > 0 ? 0 : 2;
                return false;
        }
        return true;
}

/* The parent directory of path exists (what --check-config can say of a file the start makes). */
static bool parent_dir_exists(const char *path) {
        _cleanup_free_ char *copy = strdup(path);
        const char *slash = copy ? strrchr(copy, '/') : NULL;
        if (!copy)
                return false;
        if (!slash)
                return true;
        if (slash == copy)
                return true;
        copy[slash - copy] = '\0';
        struct stat st;
        return stat(copy, &st) == 0 && S_ISDIR(st.st_mode);
}

/* What --check-config can say of the files the start reads or makes, without making them:
 * one it reads as the start would refuse it, one it makes with a warning when its directory
 * is missing. False after saying why on stderr. */
static bool files_check(const ServeOptions *o) {
        static const char pem[] = "-----BEGIN CERTIFICATE-----";
        const struct {
                const char *flag, *path;
                bool read; /* read at start (else made there: its directory must exist) */
        } files[] = { { "--egress-hosts", o->egress_hosts, true }, { "--egress-ca", o->egress_ca, true },
                      { "--audit", o->audit, false },             { "--socket", o->path, false },
                      { "--system-socket", o->system_path, false } };
        for (size_t i = 0; i < ELEMENTSOF(files); i++) {
                const char *path = files[i].path;
                if (!path)
                        continue;
                /* A directory a service manager makes at start (systemd's LogsDirectory=,
                 * RuntimeDirectory=) may not be there yet: said, not refused. */
                if (!files[i].read && !parent_dir_exists(path))
                        fprintf(stderr, "sbx serve: warning: %s %s: its directory is not there yet (the start needs "
                                        "it, made beforehand or by the service manager)\n",
                                files[i].flag, path);
                if (!files[i].read)
                        continue;
                char buf[65536];
                ssize_t n = read_file_at(AT_FDCWD, path, buf, sizeof buf - 1);
                if (n < 0) {
                        fprintf(stderr, "sbx serve: %s %s: %s\n", files[i].flag, path, strerror((int)-n));
                        return false;
                }
                buf[n] = '\0';
                if (path == o->egress_ca && !strstr(buf, pem)) {
                        fprintf(stderr, "sbx serve: %s %s: no PEM certificate in it\n", files[i].flag, path);
                        return false;
                }
        }
        if (o->expiry_dir) {
                struct stat st;
                if (stat(o->expiry_dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
                        fprintf(stderr, "sbx serve: --expiry-export-dir %s: not a directory\n", o->expiry_dir);
                        return false;
                }
        }
        return true;
}

/* What the options say together, and --check-config's verdict. False when cmd_serve is to
 * return *ret_exit at once. */
static bool options_check(ServeOptions *o, int argc, char **argv, int *ret_exit) {
        char cerr[768];
        o->afd = activation_fd();
        *ret_exit = 2;
        if (o->afd == -2)
                *ret_exit = 1;
        else if (o->stdio && o->afd >= 0)
                fprintf(stderr, "sbx serve: --stdio, but a listening socket was passed (LISTEN_FDS)\n");
        else if (!o->audit && (o->audit_max || o->audit_keep || o->audit_fail_closed))
                fprintf(stderr, "sbx serve: --audit-max-bytes, --audit-keep and --audit-fail-closed go with "
                        "--audit PATH\n");
        else if (o->n_api_keys && !o->http && !o->kube_gateway)
                fprintf(stderr, "sbx serve: --api-key goes with --http ADDR or --kube-gateway ADDR\n");
        else if ((o->console_token || o->console_dir || o->metrics_no_sandboxes) && !o->http)
                fprintf(stderr, "sbx serve: --console-token, --console-dir and --metrics-no-sandboxes go with --http "
                                "ADDR (the console and /metrics are on its listener)\n");
        else if (o->console_token && (strlen(o->console_token) < 16 || strlen(o->console_token) > SBX_MAX_API_KEY_BYTES ||
                                      o->console_token[strspn(o->console_token, CONSOLE_TOKEN_CHARS)]))
                fprintf(stderr, "sbx serve: --console-token: 16 to %u of [A-Za-z0-9._~-]\n", SBX_MAX_API_KEY_BYTES);
        else if (o->audit && (!*o->audit || strlen(o->audit) > PATH_MAX - 16))
                fprintf(stderr, "sbx serve: --audit takes a file's path (at most %d bytes)\n", PATH_MAX - 16);
        else if (o->http && http_addr_check(o->http) < 0)
                fprintf(stderr, "sbx serve: --http %s: not PORT, HOST:PORT or [IPV6]:PORT with a numeric host\n",
                        o->http);
        else if (o->kube_gateway && http_addr_check(o->kube_gateway) < 0)
                fprintf(stderr, "sbx serve: --kube-gateway %s: not PORT, HOST:PORT or [IPV6]:PORT with a numeric "
                                "host\n", o->kube_gateway);
        else if (o->kube_node && !o->pod_cidr)
                fprintf(stderr, "sbx serve: --kube-node needs --pod-cidr (a pod is a sandbox on the pod network)\n");
        else if (o->pod_bridge && !o->pod_cidr)
                fprintf(stderr, "sbx serve: --pod-bridge needs --pod-cidr\n");
        else if (!o->kube_node && (o->kube_node_ip || o->n_kube_labels || o->kube_lease >= 0 ||
                                   (o->kubeconfig && !o->kube_gateway) || o->kubelet_cert || o->kubelet_key ||
                                   o->kubelet_ca))
                fprintf(stderr, "sbx serve: --kubeconfig, --kube-node-ip, --kube-label, --kube-lease-seconds "
                                "and --kube-kubelet-* need --kube-node\n");
        else if (o->check_config && optind < argc)
                fprintf(stderr, "sbx serve: unexpected argument '%s'\n", argv[optind]);
        else if (o->check_config && o->config_path && serve_config_check_sandbox(&o->cfg, cerr, sizeof cerr) < 0)
                fprintf(stderr, "sbx serve: --config %s\n", cerr);
        else if (o->check_config && o->stdio == (o->path != NULL) && o->afd < 0 && o->config_path)
                fprintf(stderr, "sbx serve: --config %s: give exactly one of socket = PATH or stdio = true under "
                        "[serve] (or --socket PATH or --stdio)\n", o->config_path);
        else if (o->check_config && o->stdio == (o->path != NULL) && o->afd < 0)
                fprintf(stderr, "sbx serve: give exactly one of --stdio or --socket PATH\n");
        else if (o->check_config && !files_check(o))
                ;
        else if (o->check_config) {
                printf("%s: ok\n", o->config_path ? o->config_path : "the flags");
                *ret_exit = 0;
        } else if (optind < argc || (o->stdio == (o->path != NULL) && o->afd < 0)) {
                fprintf(stderr, "sbx serve: give exactly one of --stdio or --socket PATH%s\n",
                        o->config_path ? " (or socket = PATH or stdio = true under [serve])" : "");
                fprintf(stderr, "Try 'sbx serve --help'.\n");
        } else
                return true;
        return false;
}

/* Fills o from argv and the config file it names. False when cmd_serve is to return *ret_exit
 * at once: 0 after --help, --protocol or --check-config, else 1 or 2 after saying why. */
static bool serve_parse(ServeOptions *o, int argc, char **argv, int *ret_exit) {
        return config_read(o, &argc, &argv, ret_exit) && options_read(o, argc, argv, ret_exit) &&
               options_check(o, argc, argv, ret_exit);
}

/* ---- starting */

/* Says a failure that no option is blamed for; returns the exit status. */
static int serve_failed(const ServeOptions *o, int r) {
        fprintf(stderr, "sbx serve: %s%s%s\n", o->path ? o->path : "", o->path ? ": " : "", strerror(-r));
        return 1;
}

/* Lanes, mode, create params, shutdown deadline. Returns 0 or -errno (the mode's). */
static int serve_configure(Server *s, const ServeOptions *o) {
        unsigned d_slots, d_system, d_queue;
        server_lane_defaults(&d_slots, &d_system, &d_queue);
        unsigned queue = o->queue >= 0 ? (unsigned)o->queue : d_queue;
        server_set_slots(s, 0, o->slots >= 0 ? (unsigned)o->slots : d_slots, queue);
        server_set_slots(s, 1, o->system_slots >= 0 ? (unsigned)o->system_slots : d_system, queue);
        /* With an operator's socket, the system lane is the operator's: clients of the main
         * socket may not ask for it unless --lane says so. */
        server_set_lane(s, o->lane < 0 && o->system_path ? 0 : (int)o->lane);
        int r = server_set_mode(s, o->mode);
        if (o->config_path)
                server_set_create_config(s, o->cfg.defaults, o->cfg.enforced, o->cfg.secrets);
        if (o->deadline >= 0)
                server_set_shutdown_deadline(s, (uint64_t)o->deadline);
        return r;
}

/* The image store: --image-store DIR, else the default one (root: /var/lib/sbx/images; a user:
 * $XDG_DATA_HOME/sbx/images or ~/.local/share/sbx/images), which the daemon goes without, said
 * once, when it cannot be had. Returns 0, or the exit status. */
static int serve_images(Server *s, const ServeOptions *o) {
        char dir[SBX_MAX_PATH_BYTES], err[512];
        if (o->image_store)
                snprintf(dir, sizeof dir, "%s", o->image_store);
        else if (sbx_image_store_default(dir, sizeof dir) < 0)
                return 0;
        if (sbx_context_set_image_store(server_context(s), dir, o->image_store_max, err, sizeof err) < 0) {
                if (o->image_store) {
                        fprintf(stderr, "sbx serve: --image-store %s\n", err);
                        return 1;
                }
                log_warn("no image store (give one with --image-store DIR): %s", err);
        }
        return 0;
}

/* The audit log, egress, expiry exports, the system socket and redaction, each said on stderr
 * when refused. Returns 0, or the exit status. */
static int serve_attach(Server *s, const ServeOptions *o) {
        char err[256], eerr[512] = "";
        int r;
        /* Before any client: no event may happen unlogged, and a log that cannot be opened
         * stops the server here, saying why. */
        if (o->audit && server_set_audit(s, o->audit, o->audit_max, (unsigned)o->audit_keep, o->audit_fail_closed,
                                         err, sizeof err) < 0) {
                fprintf(stderr, "sbx serve: --audit %s: %s\n", o->audit, err);
                return 1;
        }
        if ((o->egress_hosts || o->n_egress_private || o->egress_ca) &&
            (r = server_set_egress(s, o->egress_hosts, o->egress_private, o->egress_ca, eerr, sizeof eerr)) < 0) {
                /* The flag whose value it is: its file is named first in the words. */
                const char *flag = o->egress_hosts && !strncmp(eerr, o->egress_hosts, strlen(o->egress_hosts))
                                           ? "--egress-hosts"
                                   : o->egress_ca && !strncmp(eerr, o->egress_ca, strlen(o->egress_ca)) ? "--egress-ca"
                                   : o->n_egress_private && !o->egress_hosts && !o->egress_ca
                                           ? "--egress-allow-private"
                                           : "--egress-hosts, --egress-allow-private or --egress-ca";
                fprintf(stderr, "sbx serve: %s: %s\n", flag, eerr[0] ? eerr : strerror(-r));
                return 2;
        }
        if (o->expiry_dir && server_set_expiry_dir(s, o->expiry_dir, err, sizeof err) < 0) {
                fprintf(stderr, "sbx serve: --expiry-export-dir %s\n", err);
                return 1;
        }
        if ((r = serve_images(s, o)) != 0)
                return r;
        if (o->pod_cidr && sbx_context_set_pod_network(server_context(s), o->pod_cidr,
                                                       o->pod_bridge ? o->pod_bridge : "sbx0", eerr, sizeof eerr) < 0) {
                fprintf(stderr, "sbx serve: --pod-cidr %s\n", eerr);
                return 1;
        }
        if (o->pod_bridge && !o->pod_cidr) {
                fprintf(stderr, "sbx serve: --pod-bridge needs --pod-cidr\n");
                return 2;
        }
        if (o->system_path && (r = server_listen_system(s, o->system_path)) < 0) {
                fprintf(stderr, "sbx serve: --system-socket %s: %s\n", o->system_path, strerror(-r));
                return 1;
        }
        return redact_args_apply(&o->ra, s) < 0 ? 2 : 0;
}

/* The clients' way in: the socket passed by activation, stdio, or --socket PATH. Returns 0, or
 * the exit status after saying why. */
static int serve_listen(Server *s, const ServeOptions *o) {
        int r;
        if (o->afd < 0) {
                r = o->stdio ? server_add_stdio(s) : server_listen(s, o->path);
                if (r == -EEXIST) {
                        fprintf(stderr, "sbx serve: --socket %s: something that is not a socket is there; sbx "
                                "replaces only a socket a server left, never anything else (give another path)\n",
                                o->path);
                        return 1;
                }
                /* epoll takes no regular file and no /dev/null (EPERM): say what stdin must be. */
                if (o->stdio && r == -EPERM) {
                        fprintf(stderr, "sbx serve --stdio: stdin must be a pipe, a socket or a terminal (the "
                                "client's end), not a file or /dev/null\n");
                        return 1;
                }
                return r < 0 ? serve_failed(o, r) : 0;
        }
        if ((r = server_listen_fd(s, o->afd, o->path)) < 0) {
                fprintf(stderr, "sbx serve: the socket passed as fd 3 (LISTEN_FDS): %s\n",
                        r == -ENOTSOCK ? "not a listening Unix stream socket"
                        : r == -EADDRNOTAVAIL ? "not bound to the --socket path" : strerror(-r));
                return 1;
        }
        return 0;
}

static int connect_e2b(void *data, int *ret_fd) { return server_connect(data, geteuid(), ret_fd); }
static int connect_console(void *data, int *ret_fd) { return server_connect_operator(data, ret_fd); }

/* The console page's files: --console-dir; this source tree's when the daemon runs from its
 * build tree; those installed beside it (an install moved whole: libexec/sbx/../../share);
 * where meson installed them. */
static void console_dir(const ServeOptions *o, char *out, size_t size) {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (o->console_dir) {
                snprintf(out, size, "%s", o->console_dir);
                return;
        }
        if (n > 0) {
                exe[n] = 0;
                size_t bl = strlen(SBX_BUILD_ROOT);
                if (!strncmp(exe, SBX_BUILD_ROOT, bl) && exe[bl] == '/') {
                        snprintf(out, size, "%s", SBX_CONSOLE_SRCDIR);
                        return;
                }
                char *slash = strrchr(exe, '/');
                if (slash) {
                        *slash = 0;
                        if ((size_t)snprintf(out, size, "%.3900s/../../share/sbx/console", exe) < size &&
                            access(out, R_OK) == 0)
                                return;
                }
        }
        snprintf(out, size, "%s", SBX_CONSOLE_DATADIR);
}

/* --http: the E2B door on the server's loop, the console and /metrics on its listener.
 * Returns 0, or the exit status after saying why. */
static int serve_http(Server *s, const ServeOptions *o, E2b **ret, Console **ret_console) {
        char err[512], dir[PATH_MAX], made[2 * 16 + 1] = "";
        /* Never an E2B key: those open the E2B API, this one every sandbox of the daemon. */
        const char *token = o->console_token;
        if (!token) {
                if (random_hex(made, 16) < 0) {
                        fprintf(stderr, "sbx serve: --http: no randomness for the console's token\n");
                        return 1;
                }
                token = made;
        }
        console_dir(o, dir, sizeof dir);
        ConsoleOptions co = { .token = token, .dir = dir, .metrics_no_sandboxes = o->metrics_no_sandboxes };
        if (console_new(server_loop(s), &co, connect_console, s, ret_console, err, sizeof err) < 0) {
                fprintf(stderr, "sbx serve: --http %s\n", err);
                return 1;
        }
        E2bExtraRoutes extra = { .route = console_route, .ops = &console_http_ops, .data = *ret_console };
        E2bOptions eo = { .addr = o->http, .api_keys = o->api_keys, .extra = &extra };
        if (e2b_new(server_loop(s), &eo, connect_e2b, s, ret, err, sizeof err) < 0) {
                fprintf(stderr, "sbx serve: --http %s\n", err);
                *ret_console = console_free(*ret_console);
                return 1;
        }
        console_set_listener(*ret_console, e2b_port(*ret), e2b_loopback(*ret));
        /* The address to open, with the token only when this daemon made it (one given is
         * the operator's already, and stays out of logs). */
        char host[300] = "127.0.0.1";
        const char *colon = strrchr(o->http, ':');
        if (colon && colon > o->http)
                snprintf(host, sizeof host, "%.*s", (int)(colon - o->http), o->http);
        fprintf(stderr, "sbx serve: console: http://%s:%u/console/%s%s\n", host, e2b_port(*ret), made[0] ? "#token=" : "",
                made[0] ? made : " (open it with #token= and --console-token's value)");
        explicit_bzero(made, sizeof made);
        if (!e2b_loopback(*ret))
                log_warn("--http %s: the E2B API listens beyond loopback; %s", o->http,
                         o->n_api_keys ? "only its --api-key keys are let in" : "with no --api-key, only loopback "
                         "clients are let in");
        return 0;
}

/* --kube-node: the node on the server's loop, its capacity the daemon's. Returns 0, or the exit
 * status after saying why. */
static int serve_kube(Server *s, const ServeOptions *o, unsigned max, E2b *door, KubeNode **ret) {
        if (!o->kube_node) {
                if (o->kube_node_ip || o->n_kube_labels || o->kube_lease >= 0 || (o->kubeconfig && !o->kube_gateway) ||
                    o->kubelet_cert || o->kubelet_key || o->kubelet_ca) {
                        fprintf(stderr, "sbx serve: --kubeconfig, --kube-node-ip, --kube-label, --kube-lease-seconds "
                                        "and --kube-kubelet-* need --kube-node\n");
                        return 2;
                }
                return 0;
        }
        if (!o->pod_cidr) {
                fprintf(stderr, "sbx serve: --kube-node needs --pod-cidr (a pod is a sandbox on the pod network)\n");
                return 2;
        }
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE), cpus = sysconf(_SC_NPROCESSORS_ONLN);
        /* Pods, not idle sandboxes: each has a process too (SBX_KUBE_POD_PROCESS_FDS). */
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur > SBX_DAEMON_RESERVE_FDS) {
                uint64_t by_fds = (rl.rlim_cur - SBX_DAEMON_RESERVE_FDS) / (SBX_SANDBOX_COST_FDS + SBX_KUBE_POD_PROCESS_FDS);
                max = (unsigned)MIN((uint64_t)max, by_fds);
        }
        KubeNodeOptions ko = {
                .name = o->kube_node, .kubeconfig = o->kubeconfig, .node_ip = o->kube_node_ip,
                .pod_cidr = o->pod_cidr, .pods = max, .cpus = cpus > 0 ? (unsigned)cpus : 1,
                .memory_bytes = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0,
                .lease_s = o->kube_lease > 0 ? (unsigned)o->kube_lease : 0, .labels = o->kube_labels,
                .door = door, .kubelet_cert = o->kubelet_cert, .kubelet_key = o->kubelet_key,
                .kubelet_client_ca = o->kubelet_ca,
        };
        char err[512];
        if (kube_node_new(server_loop(s), &ko, connect_e2b, s, ret, err, sizeof err) < 0) {
                fprintf(stderr, "sbx serve: --kube-node %s\n", err);
                return 2;
        }
        return 0;
}

/* --kube-gateway: E2B's API for the cluster, on the server's loop. Returns 0, or the exit
 * status after saying why. */
static int serve_gateway(Server *s, const ServeOptions *o, KubeGateway **ret) {
        if (!o->kube_gateway) {
                if (o->kube_namespace) {
                        fprintf(stderr, "sbx serve: --kube-namespace needs --kube-gateway\n");
                        return 2;
                }
                return 0;
        }
        KubeGatewayOptions go = { .addr = o->kube_gateway, .kubeconfig = o->kubeconfig, .ns = o->kube_namespace,
                                  .api_keys = o->api_keys };
        char err[512];
        if (kube_gateway_new(server_loop(s), &go, ret, err, sizeof err) < 0) {
                fprintf(stderr, "sbx serve: --kube-gateway %s\n", err);
                return 2;
        }
        return 0;
}

/* Makes the server o describes and runs it until it stops. Returns the exit status. */
static int serve_start(const ServeOptions *o) {
        Server *s = NULL;
        /* Files and archives move as megabyte-sized lines: keep freed buffers for the next one
         * instead of handing them back to the kernel and faulting fresh pages in each time
         * (a few ms per MiB here). The daemon's memory then stays at its high-water mark. */
        (void)mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
        (void)mallopt(M_TRIM_THRESHOLD, 64 * 1024 * 1024);
        int r = server_new(&s);
        if (r >= 0)
                r = serve_configure(s, o);
        int code = r < 0 ? serve_failed(o, r) : serve_attach(s, o);
        if (code == 0)
                code = serve_listen(s, o);
        if (code != 0) {
                server_free(s);
                return code;
        }
        /* Before the pool's first create; said after "ready", which is the first line a
         * supervisor or a script waits for. */
        bool disabled = o->mode && strcmp(o->mode, "disabled") == 0;
        char dynmods_where[1024] = "";
        int dynmods = !o->no_favordynmods && !disabled && geteuid() == 0
                              ? sbx_host_favor_cgroup_moves(dynmods_where, sizeof dynmods_where)
                              : 0;
        int wr = sbx_context_set_sandboxes_cpu_weight(server_context(s), o->cpu_weight < 0 ? SBX_SANDBOXES_CPU_WEIGHT
                                                                                           : (unsigned)o->cpu_weight);
        if (wr < 0 && wr != -ENOTSUP)
                fprintf(stderr, "sbx serve: the sandboxes' cpu weight stays the kernel's default: %s\n", strerror(-wr));
        server_set_pool(s, o->pool >= 0 ? (unsigned)o->pool : o->stdio ? 0 : 2);
        for (unsigned i = 0; i < o->n_image_pools; i++)
                if (sbx_context_set_image_pool(server_context(s), o->image_pools[i], (unsigned)o->image_pool_n[i]) < 0) {
                        fprintf(stderr, "sbx serve: --pool %s=%ld: not an image name\n", o->image_pools[i],
                                o->image_pool_n[i]);
                        server_free(s);
                        return 2;
                }
        /* Parking first: the cap derived counts parked sandboxes' fds. */
        if (server_set_park_after(s, o->park_after < 0 ? SBX_PARK_AFTER_MS : (uint64_t)o->park_after) < 0)
                fprintf(stderr, "sbx serve: sandboxes will not be parked: %s\n", strerror(errno));
        unsigned max = server_set_max_sandboxes(s, (unsigned)o->max_sandboxes);
        E2b *e2b = NULL;
        Console *console = NULL;
        KubeNode *kube = NULL;
        KubeGateway *gw = NULL;
        if ((o->http && (code = serve_http(s, o, &e2b, &console)) != 0) ||
            (code = serve_kube(s, o, max, e2b, &kube)) != 0 || (code = serve_gateway(s, o, &gw)) != 0) {
                kube_node_free(kube);
                e2b_free(e2b);
                console_free(console);
                server_free(s);
                return code;
        }
        /* A daemon says once that it is ready, and where (a client of stdio needs no word). */
        if (!o->stdio) {
                char http[64] = "";
                if (e2b)
                        snprintf(http, sizeof http, "; E2B's API on port %u", e2b_port(e2b));
                if (gw)
                        snprintf(http, sizeof http, "; the cluster's E2B API on port %u", kube_gateway_port(gw));
                fprintf(stderr, "sbx serve: ready: %s %s (at most %u sandboxes%s)\n",
                        o->afd >= 0 ? "serving the socket passed as fd 3," : "listening on", o->path ? o->path : "",
                        max, http);
        }
        if (dynmods > 0)
                fprintf(stderr, "sbx serve: turned favordynmods on for the cgroup2 hierarchy at %s: a move between "
                        "cgroups no longer waits for an RCU grace period (--no-favordynmods leaves the mount "
                        "alone)\n", dynmods_where);
        else if (dynmods < 0 && sbx_log_level >= LOG_DEBUG)
                fprintf(stderr, "sbx serve: favordynmods stays off for the cgroup2 hierarchy%s%s: %s\n",
                        dynmods_where[0] ? " at " : "", dynmods_where, strerror(-dynmods));
        r = server_run(s);
        kube_gateway_free(gw);
        kube_node_free(kube);
        /* The door's listener first: ending its requests tells the console's routes. */
        e2b_free(e2b);
        console_free(console);
        server_free(s);
        return r;
}

int cmd_serve(int argc, char **argv) {
        _cleanup_(serve_options_done) ServeOptions o = {
                .mode = "namespaces",
                .pool = -1, .park_after = -1, .cpu_weight = -1, .slots = -1, .system_slots = -1, .queue = -1, .deadline = -1, .lane = -1,
                .kube_lease = -1,
                .afd = -1,
        };
        int code;
        /* What this server serves: the protocol's methods (also what --protocol prints and what
         * the config file's [sandbox] params are checked against). */
        dispatch_set_methods(server_method_tables);
        if (!serve_parse(&o, argc, argv, &code))
                return code;
        return serve_start(&o);
}
