/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/util.h"
#include "cli/client.h"

/* Reads one line (without its newline) into a malloc'd buffer. */
static int read_line(int fd, char **ret, size_t *ret_len) {
        size_t cap = 65536, len = 0;
        char *buf = malloc(cap);
        if (!buf)
                return -ENOMEM;
        for (;;) {
                if (len == cap) {
                        if (cap >= SBX_MAX_CLIENT_LINE_BYTES) {
                                free(buf);
                                return -EFBIG;
                        }
                        char *nb = realloc(buf, cap * 2);
                        if (!nb) {
                                free(buf);
                                return -ENOMEM;
                        }
                        buf = nb;
                        cap *= 2;
                }
                ssize_t k = read(fd, buf + len, cap - len);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0) {
                        free(buf);
                        return k < 0 ? negerrno() : -ECONNRESET;
                }
                char *nl = memchr(buf + len, '\n', (size_t)k);
                len += (size_t)k;
                if (nl) {
                        *ret = buf;
                        *ret_len = (size_t)(nl - buf);
                        return 0;
                }
        }
}

int client_call(const char *socket_path, const char *method, json_t *params, json_t **ret_result, char *err,
                size_t errlen) {
        json_t *req = json_pack("{s:s, s:i, s:s, s:o}", "jsonrpc", "2.0", "id", 1, "method", method, "params", params);
        char *line = req ? json_dumps(req, JSON_COMPACT) : NULL;
        json_decref(req);
        if (!line) {
                snprintf(err, errlen, "out of memory");
                return -1;
        }
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (strlen(socket_path) >= sizeof sa.sun_path) {
                free(line);
                snprintf(err, errlen, "%s: socket path too long", socket_path);
                return -1;
        }
        memcpy(sa.sun_path, socket_path, strlen(socket_path) + 1);
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
                free(line);
                snprintf(err, errlen, "%s: %s", socket_path, strerror(errno));
                return -1;
        }
        int r = write_all(fd, line, strlen(line));
        free(line);
        if (r >= 0)
                r = write_all(fd, "\n", 1);
        char *answer = NULL;
        size_t alen = 0;
        if (r >= 0)
                r = read_line(fd, &answer, &alen);
        if (r < 0) {
                snprintf(err, errlen, "%s: %s", socket_path, strerror(-r));
                return -1;
        }
        json_error_t jerr;
        json_t *msg = json_loadb(answer, alen, 0, &jerr);
        free(answer);
        json_t *result = msg ? json_object_get(msg, "result") : NULL;
        if (!result) {
                json_t *e = msg ? json_object_get(msg, "error") : NULL;
                const char *m = json_string_value(json_object_get(e, "message"));
                snprintf(err, errlen, "%s", m ? m : "the server's answer is not JSON-RPC");
                json_decref(msg);
                return -1;
        }
        *ret_result = json_incref(result);
        json_decref(msg);
        return 0;
}
