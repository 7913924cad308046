/* SPDX-License-Identifier: MIT */
/* The CLI's connection to a running `sbx serve --socket`: framing, ids and error mapping. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/util.h"
#include "cli/client.h"
#include "rpc/jsonrpc.h"

/* Invariant: off <= scan <= len <= cap; buf[off, len) is read but not yet taken, and
 * buf[off, scan) holds no newline (so a line is searched for once, however it arrives). */
struct Client {
        int fd;
        char *buf;
        size_t off, scan, len, cap;
        int64_t next_id;
};

static void set_error(ClientError *err, int code, int errnum, const char *msg) {
        err->code = code;
        err->errnum = errnum;
        snprintf(err->message, sizeof err->message, "%s", msg);
}

int client_connect(const char *path, Client **ret, ClientError *err) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (strlen(path) >= sizeof sa.sun_path) {
                set_error(err, 0, ENAMETOOLONG, "socket path too long");
                return -ENAMETOOLONG;
        }
        memcpy(sa.sun_path, path, strlen(path) + 1);
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
                int r = negerrno();
                set_error(err, 0, -r, strerror(-r));
                return r;
        }
        Client *c = calloc(1, sizeof *c);
        if (!c) {
                set_error(err, 0, ENOMEM, strerror(ENOMEM));
                return -ENOMEM;
        }
        c->fd = TAKE_FD(fd);
        c->next_id = 1;
        *ret = c;
        return 0;
}

Client *client_free(Client *c) {
        if (!c)
                return NULL;
        safe_close(c->fd);
        free(c->buf);
        free(c);
        return NULL;
}

int client_fd(const Client *c) { return c->fd; }

int client_send(Client *c, const char *method, json_t *params, int64_t *ret_id) {
        int64_t id = c->next_id++;
        json_t *req = json_pack("{s:s, s:I, s:s}", "jsonrpc", "2.0", "id", (json_int_t)id, "method", method);
        if (req && params && json_object_set_new(req, "params", params) < 0) {
                json_decref(req);
                return -ENOMEM;
        }
        if (!req) {
                json_decref(params);
                return -ENOMEM;
        }
        _cleanup_free_ char *line = json_dumps(req, JSON_COMPACT);
        json_decref(req);
        if (!line)
                return -ENOMEM;
        /* One write of the line and its newline: the daemon never sees half a request from a
         * client that dies between two writes. */
        size_t n = strlen(line);
        line[n] = '\n';
        int r = write_all(c->fd, line, n + 1);
        line[n] = '\0';
        if (r < 0)
                return r;
        *ret_id = id;
        return 0;
}

int client_read(Client *c) {
        if (c->off > 0) {
                memmove(c->buf, c->buf + c->off, c->len - c->off);
                c->len -= c->off;
                c->scan -= c->off;
                c->off = 0;
        }
        if (c->len == c->cap) {
                if (c->cap >= SBX_MAX_CLIENT_LINE_BYTES)
                        return -EFBIG;
                size_t cap = c->cap ? c->cap * 2 : 65536;
                char *nb = realloc(c->buf, cap);
                if (!nb)
                        return -ENOMEM;
                c->buf = nb;
                c->cap = cap;
        }
        for (;;) {
                ssize_t k = read(c->fd, c->buf + c->len, c->cap - c->len);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return negerrno();
                if (k == 0)
                        return -ECONNRESET;
                c->len += (size_t)k;
                return 0;
        }
}

int client_next(Client *c, json_t **ret) {
        char *nl = c->len > c->scan ? memchr(c->buf + c->scan, '\n', c->len - c->scan) : NULL;
        if (!nl) {
                c->scan = c->len;
                return 0;
        }
        const char *line = c->buf + c->off;
        size_t n = (size_t)(nl - line);
        c->off = c->scan = (size_t)(nl - c->buf) + 1;
        json_t *msg = json_loadb(line, n, 0, NULL);
        if (!json_is_object(msg)) {
                json_decref(msg);
                return -EBADMSG;
        }
        *ret = msg;
        return 1;
}

bool client_is_answer(json_t *msg, int64_t *ret_id) {
        json_t *id = json_object_get(msg, "id");
        if (!json_is_integer(id) || (!json_object_get(msg, "result") && !json_object_get(msg, "error")))
                return false;
        *ret_id = json_integer_value(id);
        return true;
}

bool client_is_notification(json_t *msg, const char **ret_method, json_t **ret_params) {
        const char *m = json_string_value(json_object_get(msg, "method"));
        if (!m || json_object_get(msg, "id"))
                return false;
        *ret_method = m;
        *ret_params = json_object_get(msg, "params");
        return true;
}

int client_answer_result(json_t *msg, json_t **ret_result, ClientError *err) {
        json_t *result = json_object_get(msg, "result");
        if (result) {
                *ret_result = json_incref(result);
                return 0;
        }
        json_t *e = json_object_get(msg, "error");
        const char *m = json_string_value(json_object_get(e, "message"));
        set_error(err, json_is_integer(json_object_get(e, "code")) ? (int)json_integer_value(json_object_get(e, "code"))
                                                                     : RPC_INTERNAL_ERROR,
                  0, m ? m : "the daemon's answer is not JSON-RPC");
        return -1;
}

/* A broken connection as a ClientError: code 0, the errno, and words for it. */
static int conn_error(ClientError *err, int r) {
        if (r == -ECONNRESET)
                set_error(err, 0, ECONNRESET, "the daemon closed the connection");
        else if (r == -EBADMSG)
                set_error(err, 0, EBADMSG, "the daemon sent a line that is not JSON-RPC");
        else
                set_error(err, 0, -r, strerror(-r));
        return -1;
}

int client_request(Client *c, const char *method, json_t *params, ClientNoteFn on_note, void *userdata,
                   json_t **ret_result, ClientError *err) {
        int64_t id;
        int r = client_send(c, method, params, &id);
        if (r < 0)
                return conn_error(err, r);
        for (;;) {
                json_t *msg;
                while ((r = client_next(c, &msg)) > 0) {
                        int64_t aid;
                        const char *m;
                        json_t *p;
                        if (client_is_answer(msg, &aid) && aid == id) {
                                json_t *result = NULL;
                                r = client_answer_result(msg, &result, err);
                                json_decref(msg);
                                if (ret_result)
                                        *ret_result = result;
                                else
                                        json_decref(result);
                                return r;
                        }
                        if (on_note && client_is_notification(msg, &m, &p))
                                on_note(userdata, m, p);
                        json_decref(msg);
                }
                if (r < 0 || (r = client_read(c)) < 0)
                        return conn_error(err, r);
        }
}

int client_call(const char *socket_path, const char *method, json_t *params, json_t **ret_result, char *err,
                size_t errlen) {
        ClientError e;
        Client *c = NULL;
        int r = client_connect(socket_path, &c, &e);
        if (r >= 0)
                r = client_request(c, method, params, NULL, NULL, ret_result, &e);
        else
                json_decref(params);
        client_free(c);
        if (r < 0) {
                if (e.code == 0)
                        snprintf(err, errlen, "%s: %s", socket_path, e.message);
                else
                        snprintf(err, errlen, "%s", e.message);
                return -1;
        }
        return 0;
}

const char *client_socket_path(const char *cmd, const char *opt) {
        const char *p = opt ? opt : getenv("SBX_SOCKET");
        if (!p || !*p) {
                fprintf(stderr, "sbx %s: no daemon named: give --socket PATH or set SBX_SOCKET\n", cmd);
                return NULL;
        }
        return p;
}

static bool starts_with(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

int client_fail(const char *cmd, const char *socket_path, const ClientError *err) {
        if (err->code == 0) {
                struct stat st;
                if (err->errnum == ECONNREFUSED && lstat(socket_path, &st) == 0 && !S_ISSOCK(st.st_mode))
                        fprintf(stderr, "sbx %s: %s is not a socket: no daemon can be there (give the path of "
                                "a daemon's --socket)\n", cmd, socket_path);
                else if (err->errnum == ENOENT || err->errnum == ECONNREFUSED)
                        fprintf(stderr, "sbx %s: no daemon is listening at %s (%s); start one with `sbx serve --socket %s`\n",
                                cmd, socket_path, strerror(err->errnum), socket_path);
                else
                        fprintf(stderr, "sbx %s: the daemon at %s: %s\n", cmd, socket_path, err->message);
                return CLIENT_EXIT_UNREACHABLE;
        }
        fprintf(stderr, "sbx %s: %s\n", cmd, err->message);
        if (err->code == RPC_METHOD_NOT_FOUND)
                fprintf(stderr, "sbx %s: the daemon at %s is an sbx without this method: restart it from this build\n", cmd,
                        socket_path);
        if (err->code == RPC_INVALID_PARAMS && starts_with(err->message, "Unknown sandboxId"))
                return CLIENT_EXIT_NO_SANDBOX;
        if (err->code == RPC_INVALID_PARAMS && starts_with(err->message, "Unknown processId"))
                return CLIENT_EXIT_NO_PROCESS;
        return CLIENT_EXIT_FAILURE;
}

int client_call_cli(const char *cmd, const char *socket_path, const char *method, json_t *params, json_t **ret_result) {
        Client *cl = NULL;
        ClientError err = { 0 };
        int r = client_connect(socket_path, &cl, &err);
        if (r == 0)
                r = client_request(cl, method, params, NULL, NULL, ret_result, &err);
        else
                json_decref(params);
        client_free(cl);
        return r < 0 ? client_fail(cmd, socket_path, &err) : 0;
}
