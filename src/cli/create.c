/* SPDX-License-Identifier: MIT */
/* `sbx create`: a persistent sandbox in a running `sbx serve --socket`, its id printed. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/util.h"
#include "cli/cli.h"
#include "cli/client.h"
#include "rpc/jsonrpc.h"

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx create [--socket PATH] [OPTIONS]\n"
                "\n"
                "Makes a persistent sandbox in a running `sbx serve --socket PATH` and prints its\n"
                "id: the one `sbx exec`, `shell`, `ps`, `logs`, `kill`, `export` and `import`\n"
                "take. It lives until `sbx rm ID`, its lifetime or idle time, or the daemon's end.\n"
                "\n"
                "Options:\n"
                "  -s, --socket PATH    the daemon's socket (default: $SBX_SOCKET)\n"
                "  -t, --timeout SECS   default per-command timeout (default 30)\n"
                "  -e, --env NAME=VALUE an extra environment variable (repeatable)\n"
                "  -n, --network        the host's network (default: its own loopback only)\n"
                "      --memory SIZE    memory of the whole sandbox (K, M, G)\n"
                "      --pids N         processes and threads at once\n"
                "      --cpus N         CPUs (fractions allowed)\n"
                "      --fs-size SIZE   /tmp + /home/user (default 256M)\n"
                "      --files N        files and directories there\n"
                "      --lifetime SECS  destroy it this long after its creation\n"
                "      --idle SECS      destroy it after this long without a request naming it\n"
                "      --label TEXT     free text, shown by `sbx ls`\n"
                "      --image IMAGE    an image of the daemon's store as its root (sbx image)\n"
                "  -h, --help           show this help\n"
                "\n"
                "Exit status: 0; 1 the daemon refused (it says why); 2 bad arguments; 3 no daemon\n"
                "at the socket.\n");
}

enum { OPT_MEMORY = 256, OPT_PIDS, OPT_CPUS, OPT_FS, OPT_FILES, OPT_LIFETIME, OPT_IDLE, OPT_LABEL, OPT_IMAGE };

/* SECS (fractions allowed) as whole ms. Returns 0, or -EINVAL once stderr says why. */
static int seconds_arg(const char *opt, const char *arg, json_int_t *ret) {
        char *end;
        errno = 0;
        double s = strtod(arg, &end);
        if (!*arg || *end || errno || !(s > 0) || s > 31.0 * 86400) {
                fprintf(stderr, "sbx create: %s takes a number of seconds above 0 (fractions allowed); got '%s'\n",
                        opt, arg);
                return -EINVAL;
        }
        *ret = (json_int_t)(s * 1000 + 0.5);
        return 0;
}

static int size_arg(const char *opt, const char *arg, json_int_t *ret) {
        uint64_t v;
        if (parse_size(arg, &v) < 0 || v > INT64_MAX) {
                fprintf(stderr, "sbx create: %s takes a size (a number, with K, M, G or T); got '%s'\n", opt, arg);
                return -EINVAL;
        }
        *ret = (json_int_t)v;
        return 0;
}

static int count_arg(const char *opt, const char *arg, json_int_t *ret) {
        uint64_t v;
        if (parse_u64(arg, INT64_MAX, &v) < 0) {
                fprintf(stderr, "sbx create: %s takes a whole number; got '%s'\n", opt, arg);
                return -EINVAL;
        }
        *ret = (json_int_t)v;
        return 0;
}

/* Reads one option into params (its limits in limits, its env in env). Returns 0, 1 after
 * --help, -EINVAL once stderr says why. */
static int create_option(int c, json_t *params, json_t *limits, json_t *env, const char **sock) {
        json_int_t v = 0;
        int r = 0;
        switch (c) {
        case 's': *sock = optarg; return 0;
        case 't':
                if ((r = seconds_arg("--timeout", optarg, &v)) == 0)
                        json_object_set_new(params, "timeoutMs", json_integer(v));
                return r;
        case 'e': {
                const char *eq = strchr(optarg, '=');
                if (!eq || !env_name_valid(optarg, (size_t)(eq - optarg))) {
                        fprintf(stderr, "sbx create: --env takes NAME=VALUE; got '%s'\n", optarg);
                        return -EINVAL;
                }
                json_object_set_new(env, eq > optarg ? strndupa(optarg, (size_t)(eq - optarg)) : "", json_string(eq + 1));
                return 0;
        }
        case 'n': json_object_set_new(params, "network", json_true()); return 0;
        case OPT_MEMORY:
                if ((r = size_arg("--memory", optarg, &v)) == 0)
                        json_object_set_new(limits, "memoryBytes", json_integer(v));
                return r;
        case OPT_PIDS:
                if ((r = count_arg("--pids", optarg, &v)) == 0)
                        json_object_set_new(limits, "pids", json_integer(v));
                return r;
        case OPT_CPUS: {
                char *end;
                double cpus = strtod(optarg, &end);
                if (!*optarg || *end || !(cpus > 0)) {
                        fprintf(stderr, "sbx create: --cpus takes a number of CPUs (fractions allowed); got '%s'\n",
                                optarg);
                        return -EINVAL;
                }
                json_object_set_new(limits, "cpus", json_real(cpus));
                return 0;
        }
        case OPT_FS:
                if ((r = size_arg("--fs-size", optarg, &v)) == 0)
                        json_object_set_new(params, "fsLimitBytes", json_integer(v));
                return r;
        case OPT_FILES:
                if ((r = count_arg("--files", optarg, &v)) == 0)
                        json_object_set_new(limits, "fileCount", json_integer(v));
                return r;
        case OPT_LIFETIME:
                if ((r = seconds_arg("--lifetime", optarg, &v)) == 0)
                        json_object_set_new(params, "lifetimeMs", json_integer(v));
                return r;
        case OPT_IDLE:
                if ((r = seconds_arg("--idle", optarg, &v)) == 0)
                        json_object_set_new(params, "idleTimeoutMs", json_integer(v));
                return r;
        case OPT_LABEL: json_object_set_new(params, "label", json_string(optarg)); return 0;
        case OPT_IMAGE: json_object_set_new(params, "image", json_string(optarg)); return 0;
        case 'h': usage(stdout); return 1;
        default: usage(stderr); return -EINVAL;
        }
}

int cmd_create(int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, 's' },    { "timeout", required_argument, NULL, 't' },
                { "env", required_argument, NULL, 'e' },       { "network", no_argument, NULL, 'n' },
                { "memory", required_argument, NULL, OPT_MEMORY }, { "pids", required_argument, NULL, OPT_PIDS },
                { "cpus", required_argument, NULL, OPT_CPUS }, { "fs-size", required_argument, NULL, OPT_FS },
                { "files", required_argument, NULL, OPT_FILES }, { "lifetime", required_argument, NULL, OPT_LIFETIME },
                { "idle", required_argument, NULL, OPT_IDLE }, { "label", required_argument, NULL, OPT_LABEL },
                { "image", required_argument, NULL, OPT_IMAGE },
                { "help", no_argument, NULL, 'h' },            {},
        };
        json_t *params = json_pack("{s:b}", "persist", 1), *limits = json_object(), *env = json_object();
        const char *sock = NULL;
        int c, r = 0;
        optind = 1;
        while (r == 0 && (c = getopt_long(argc, argv, "s:t:e:nh", opts, NULL)) != -1)
                r = create_option(c, params, limits, env, &sock);
        if (r == 0 && optind < argc) {
                fprintf(stderr, "sbx create: unexpected argument '%s' (it takes options only)\n", argv[optind]);
                r = -EINVAL;
        }
        if (r == 0 && !(sock = client_socket_path("create", sock)))
                r = -EINVAL;
        if (r != 0) {
                json_decref(params);
                json_decref(limits);
                json_decref(env);
                return r > 0 ? 0 : CLIENT_EXIT_USAGE;
        }
        if (json_object_size(limits))
                json_object_set(params, "limits", limits);
        if (json_object_size(env))
                json_object_set(params, "env", env);
        json_decref(limits);
        json_decref(env);
        json_t *res = NULL;
        Client *cl = NULL;
        ClientError err = { 0 };
        r = client_connect(sock, &cl, &err);
        if (r == 0)
                r = client_request(cl, "sandbox.create", TAKE_PTR(params), NULL, NULL, &res, &err);
        json_decref(params);
        client_free(cl);
        if (r == 0) {
                printf("%s\n", json_string_value(json_object_get(res, "sandboxId")) ?: "");
                json_decref(res);
                return 0;
        }
        /* A limit the daemon's rule refuses is a bad argument, said with its flag, as sbx run
         * says it (the same rule): "--memory must be at least 16M; got 1K". */
        static const struct {
                const char *param, *flag;
        } flags[] = { { "limits.memoryBytes", "--memory" }, { "limits.pids", "--pids" }, { "limits.cpus", "--cpus" },
                      { "limits.fileCount", "--files" },    { "fsLimitBytes", "--fs-size" } };
        for (size_t i = 0; err.code == RPC_INVALID_PARAMS && i < ELEMENTSOF(flags); i++) {
                size_t n = strlen(flags[i].param);
                if (strncmp(err.message, flags[i].param, n) == 0 && err.message[n] == ' ') {
                        fprintf(stderr, "sbx create: %s%s\n", flags[i].flag, err.message + n);
                        return CLIENT_EXIT_USAGE;
                }
        }
        return client_fail("create", sock, &err);
}
