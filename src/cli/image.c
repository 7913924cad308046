/* SPDX-License-Identifier: MIT */
/* `sbx image`: the daemon's image store from the command line: import (a path, stdin, or an
 * image of the local docker or podman through their own `save`), ls, inspect, rm, and build
 * (handed to buildah or podman). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "base/macro.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/client.h"

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sbx image import [--socket PATH] [--name NAME:TAG] PATH|-\n"
                "       sbx image import [--socket PATH] [--name NAME:TAG] --from docker|podman IMAGE\n"
                "       sbx image build  [--socket PATH] -t NAME:TAG [-f DOCKERFILE] DIR\n"
                "       sbx image ls     [--socket PATH] [--json]\n"
                "       sbx image inspect [--socket PATH] IMAGE\n"
                "       sbx image rm     [--socket PATH] IMAGE...\n"
                "\n"
                "Images in a running `sbx serve`'s store (its --image-store), for sandboxes made\n"
                "with `sbx create --image IMAGE` (or create's `image`). import reads an OCI layout\n"
                "directory, an OCI archive, or a `docker save` / `podman save` tar (compressed or\n"
                "not; - for stdin), with your rights; --from takes an image of the local docker or\n"
                "podman through its own `save`. Each layer is unpacked once and shared by every\n"
                "image that has it. build hands the Dockerfile to buildah or podman and imports\n"
                "the result. IMAGE is a name (\"x\" is \"x:latest\"), an id, or 12+ hex digits of one.\n"
                "rm takes a name off its image, or removes the image (its id or last name); an\n"
                "image a sandbox uses is not removed.\n"
                "\n"
                "Options:\n"
                "  -s, --socket PATH    the daemon's socket (default: $SBX_SOCKET)\n"
                "  -n, --name NAME:TAG  import: the name the image gets (else the names it carries)\n"
                "      --from TOOL      import: IMAGE of the local docker or podman\n"
                "  -t, --tag NAME:TAG   build: the name of the image built\n"
                "  -f, --file FILE      build: the Dockerfile (default DIR/Dockerfile)\n"
                "      --json           ls: the daemon's answer as JSON\n"
                "  -h, --help           show this help\n"
                "\n"
                "Exit status: 0; 1 the daemon refused (it says why); 2 bad arguments; 3 no daemon\n"
                "at the socket.\n");
}

/* Runs argv (no shell), waiting for it. Returns its exit status, or -errno. */
static int run_tool(char *const *argv) {
        pid_t pid = fork();
        if (pid < 0)
                return negerrno();
        if (pid == 0) {
                execvp(argv[0], argv);
                fprintf(stderr, "sbx image: %s: %s\n", argv[0], strerror(errno));
                _exit(127);
        }
        int st;
        while (waitpid(pid, &st, 0) < 0)
                if (errno != EINTR)
                        return negerrno();
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static bool have_tool(const char *name) {
        const char *path = getenv("PATH");
        char buf[PATH_MAX];
        for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
                const char *end = strchrnul(p, ':');
                snprintf(buf, sizeof buf, "%.*s/%s", (int)(end - p), p, name);
                if (access(buf, X_OK) == 0)
                        return true;
                p = *end ? end + 1 : end;
        }
        return false;
}

/* A temporary file beside big files (/var/tmp, not a tmpfs /tmp): its path in buf. */
static int temp_file(char *buf, size_t size) {
        const char *dir = getenv("TMPDIR");
        snprintf(buf, size, "%s/sbx-image-XXXXXX", dir && dir[0] == '/' ? dir : "/var/tmp");
        int fd = mkstemp(buf);
        return fd < 0 ? negerrno() : fd;
}

static int print_image(json_t *img) {
        char *s = json_dumps(img, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (s)
                printf("%s\n", s);
        free(s);
        return 0;
}

static int do_import(const char *sock, const char *path, const char *name) {
        json_t *params = json_pack("{s:s}", "path", path), *res = NULL;
        if (name)
                json_object_set_new(params, "name", json_string(name));
        int code = client_call_cli("image", sock, "image.import", params, &res);
        if (code == 0) {
                json_t *img = json_object_get(res, "image"), *names = json_object_get(img, "names");
                printf("%s", json_string_value(json_object_get(img, "id")) ?: "");
                size_t i;
                json_t *n;
                json_array_foreach(names, i, n) printf(" %s", json_string_value(n));
                printf("\n");
        }
        json_decref(res);
        return code;
}

/* Copies stdin into a file of ours, for the daemon to read. */
static int import_stdin(const char *sock, const char *name) {
        char tmp[PATH_MAX], buf[65536];
        int fd = temp_file(tmp, sizeof tmp);
        if (fd < 0) {
                fprintf(stderr, "sbx image: a temporary file for stdin: %s\n", strerror(-fd));
                return 1;
        }
        ssize_t n;
        int r = 0;
        while ((n = read(STDIN_FILENO, buf, sizeof buf)) != 0) {
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 || write_all(fd, buf, (size_t)n) < 0) {
                        r = -1;
                        break;
                }
        }
        close(fd);
        int code = r < 0 ? (fprintf(stderr, "sbx image: reading stdin into %s: %s\n", tmp, strerror(errno)), 1)
                         : do_import(sock, tmp, name);
        unlink(tmp);
        return code;
}

/* docker save / podman save IMAGE into a file of ours, then the import. */
static int import_from(const char *sock, const char *tool, const char *image, const char *name) {
        if (strcmp(tool, "docker") != 0 && strcmp(tool, "podman") != 0) {
                fprintf(stderr, "sbx image: --from takes docker or podman; got '%s'\n", tool);
                return CLIENT_EXIT_USAGE;
        }
        if (!have_tool(tool)) {
                fprintf(stderr, "sbx image: --from %s: no %s here (apt-get install %s)\n", tool, tool,
                        strcmp(tool, "docker") == 0 ? "docker.io" : "podman");
                return 1;
        }
        char tmp[PATH_MAX];
        int fd = temp_file(tmp, sizeof tmp);
        if (fd < 0) {
                fprintf(stderr, "sbx image: a temporary file: %s\n", strerror(-fd));
                return 1;
        }
        close(fd);
        char *argv[] = { (char *)tool, "save", "-o", tmp, (char *)image, NULL };
        int st = run_tool(argv);
        int code = st != 0 ? (fprintf(stderr, "sbx image: %s save %s failed (%d)\n", tool, image, st), 1)
                           : do_import(sock, tmp, name ? name : image);
        unlink(tmp);
        return code;
}

static int do_build(const char *sock, const char *tag, const char *file, const char *dir) {
        const char *tool = have_tool("buildah") ? "buildah" : have_tool("podman") ? "podman" : NULL;
        if (!tool) {
                fprintf(stderr, "sbx image build: it hands the build to buildah or podman, and neither is here "
                        "(apt-get install buildah)\n");
                return 1;
        }
        char tmp[PATH_MAX], archive[PATH_MAX + 16];
        int fd = temp_file(tmp, sizeof tmp);
        if (fd < 0) {
                fprintf(stderr, "sbx image build: a temporary file: %s\n", strerror(-fd));
                return 1;
        }
        close(fd);
        snprintf(archive, sizeof archive, "oci-archive:%s", tmp);
        bool buildah = strcmp(tool, "buildah") == 0;
        char *build[8] = { (char *)tool, buildah ? "bud" : "build", "-t", (char *)tag };
        size_t n = 4;
        if (file) {
                build[n++] = "-f";
                build[n++] = (char *)file;
        }
        build[n++] = (char *)dir;
        build[n] = NULL;
        char *push[8] = { (char *)tool, buildah ? "push" : "save" };
        if (buildah) {
                push[2] = (char *)tag;
                push[3] = archive;
        } else {
                push[2] = "--format";
                push[3] = "oci-archive";
                push[4] = "-o";
                push[5] = tmp;
                push[6] = (char *)tag;
        }
        int code;
        if (run_tool(build) != 0 || run_tool(push) != 0) {
                fprintf(stderr, "sbx image build: %s failed (its words above)\n", tool);
                code = 1;
        } else {
                code = do_import(sock, tmp, tag);
        }
        unlink(tmp);
        return code;
}

static int do_ls(const char *sock, bool as_json) {
        json_t *res = NULL;
        int code = client_call_cli("image", sock, "image.list", json_object(), &res);
        if (code != 0)
                return code;
        if (as_json) {
                print_image(res);
                json_decref(res);
                return 0;
        }
        printf("%-40s %-12s %6s %10s %9s\n", "NAME", "ID", "LAYERS", "SIZE", "SANDBOXES");
        size_t i, k;
        json_t *img, *n;
        json_array_foreach(json_object_get(res, "images"), i, img) {
                char size[32];
                const char *id = json_string_value(json_object_get(img, "id"));
                format_size((uint64_t)json_integer_value(json_object_get(img, "bytes")), size, sizeof size);
                json_t *names = json_object_get(img, "names");
                for (k = 0; k < MAX(json_array_size(names), (size_t)1); k++) {
                        n = json_array_get(names, k);
                        printf("%-40s %-12.12s %6zu %10s %9lld\n", n ? json_string_value(n) : "<none>",
                               id && strlen(id) > 7 ? id + 7 : "", json_array_size(json_object_get(img, "layers")), size,
                               (long long)json_integer_value(json_object_get(img, "sandboxes")));
                }
        }
        json_decref(res);
        return 0;
}

int cmd_image(int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, 's' }, { "name", required_argument, NULL, 'n' },
                { "from", required_argument, NULL, 'F' },   { "tag", required_argument, NULL, 't' },
                { "file", required_argument, NULL, 'f' },   { "json", no_argument, NULL, 'j' },
                { "help", no_argument, NULL, 'h' },         {},
        };
        if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
                usage(argc < 2 ? stderr : stdout);
                return argc < 2 ? CLIENT_EXIT_USAGE : 0;
        }
        const char *verb = argv[1], *sock = NULL, *name = NULL, *from = NULL, *tag = NULL, *file = NULL;
        bool as_json = false;
        int c;
        optind = 2;
        while ((c = getopt_long(argc, argv, "s:n:t:f:h", opts, NULL)) != -1) {
                switch (c) {
                case 's': sock = optarg; break;
                case 'n': name = optarg; break;
                case 'F': from = optarg; break;
                case 't': tag = optarg; break;
                case 'f': file = optarg; break;
                case 'j': as_json = true; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return CLIENT_EXIT_USAGE;
                }
        }
        int nargs = argc - optind;
        bool ok = strcmp(verb, "import") == 0 ? nargs == 1
                  : strcmp(verb, "build") == 0 ? nargs == 1 && tag
                  : strcmp(verb, "ls") == 0 || strcmp(verb, "list") == 0 ? nargs == 0
                  : strcmp(verb, "inspect") == 0 ? nargs == 1
                  : strcmp(verb, "rm") == 0 ? nargs >= 1 : false;
        if (!ok) {
                fprintf(stderr, "sbx image: %s\n", strcmp(verb, "build") == 0 && !tag ? "build needs -t NAME:TAG and a DIR"
                                                   : "bad arguments; see sbx image --help");
                return CLIENT_EXIT_USAGE;
        }
        if (!(sock = client_socket_path("image", sock)))
                return CLIENT_EXIT_USAGE;
        const char *arg = nargs ? argv[optind] : NULL;
        if (strcmp(verb, "import") == 0) {
                if (from)
                        return import_from(sock, from, arg, name);
                if (strcmp(arg, "-") == 0)
                        return import_stdin(sock, name);
                char abs[PATH_MAX];
                if (!realpath(arg, abs)) {
                        fprintf(stderr, "sbx image: %s: %s\n", arg, strerror(errno));
                        return 1;
                }
                return do_import(sock, abs, name);
        }
        if (strcmp(verb, "build") == 0)
                return do_build(sock, tag, file, arg);
        if (strcmp(verb, "inspect") == 0) {
                json_t *res = NULL;
                int code = client_call_cli("image", sock, "image.inspect", json_pack("{s:s}", "image", arg), &res);
                if (code == 0)
                        print_image(res);
                json_decref(res);
                return code;
        }
        if (strcmp(verb, "rm") == 0) {
                int code = 0;
                for (int i = optind; i < argc; i++) {
                        json_t *res = NULL;
                        int c2 = client_call_cli("image", sock, "image.remove", json_pack("{s:s}", "image", argv[i]), &res);
                        if (c2 == 0)
                                printf("%s\n", argv[i]);
                        else
                                code = c2;
                        json_decref(res);
                }
                return code;
        }
        return do_ls(sock, as_json);
}
