/* SPDX-License-Identifier: MIT */
/* The benchmarks' JSON-RPC client; see client.h. */
#include "client.h"
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/macro.h"
#include "common.h"

/* ------------------------------------------------------------------ the connection */

int client_open(Client *c, bool nonblock, unsigned timeout_s) {
        *c = (Client){ .fd = -1, .next_id = 1 };
        int fd = bench_server_connect(nonblock, timeout_s);
        if (fd < 0)
                return fd;
        c->fd = fd;
        return 0;
}

void client_open_or_die(Client *c, bool nonblock, unsigned timeout_s) {
        int r = client_open(c, nonblock, timeout_s);
        if (r < 0)
                bench_die("connect %s: %s", bench_srv.sock, strerror(-r));
}

void client_close(Client *c) {
        c->fd = safe_close(c->fd);
        free(c->buf);
        *c = (Client){ .fd = -1 };
}

int client_reserve(Client *c, size_t size) {
        if (size > CLIENT_LINE_MAX)
                size = CLIENT_LINE_MAX;
        if (c->cap >= size)
                return 0;
        char *nb = realloc(c->buf, size);
        if (!nb)
                return -ENOMEM;
        c->buf = nb;
        c->cap = size;
        return 0;
}

/* ------------------------------------------------------------------ requests */

int client_write(Client *c, const char *d, size_t n) {
        while (n > 0) {
                ssize_t k = write(c->fd, d, n);
                if (k > 0) {
                        d += k;
                        n -= (size_t)k;
                        continue;
                }
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0 && errno == EAGAIN) {
                        struct pollfd p = { .fd = c->fd, .events = POLLOUT };
                        (void)poll(&p, 1, 1000);
                        continue;
                }
                return k < 0 ? -errno : -EPIPE;
        }
        return 0;
}

void client_write_or_die(Client *c, const char *d, size_t n) {
        int r = client_write(c, d, n);
        if (r < 0)
                bench_die("write to the server: %s", strerror(-r));
}

long client_format(Client *c, char *out, size_t size, size_t *len, const char *method, const char *params) {
        if (*len >= size)
                return -ENOBUFS;
        long id = c->next_id++;
        int n = snprintf(out + *len, size - *len, "{\"jsonrpc\":\"2.0\",\"id\":%ld,\"method\":\"%s\"%s%s}\n", id, method,
                         params ? ",\"params\":" : "", params ? params : "");
        if (n < 0 || (size_t)n >= size - *len)
                return -ENOBUFS;
        *len += (size_t)n;
        return id;
}

long client_send(Client *c, const char *method, const char *params) {
        char small[4096];
        _cleanup_free_ char *big = NULL;
        char *line = small;
        size_t size = sizeof small, len = 0;
        /* A request past the stack buffer (a file's bytes in its params) gets one of its size. */
        size_t need = strlen(method) + (params ? strlen(params) : 0) + 80;
        if (need > size) {
                if (!(big = malloc(need)))
                        return -ENOMEM;
                line = big;
                size = need;
        }
        long id = client_format(c, line, size, &len, method, params);
        if (id < 0)
                return id;
        int r = client_write(c, line, len);
        return r < 0 ? r : id;
}

long client_send_json(Client *c, const char *method, json_t *params) {
        _cleanup_free_ char *text = NULL;
        if (params) {
                text = json_dumps(params, JSON_COMPACT);
                json_decref(params);
                if (!text)
                        return -ENOMEM;
        }
        return client_send(c, method, text);
}

long client_send_or_die(Client *c, const char *method, const char *params) {
        long id = client_send(c, method, params);
        if (id < 0)
                bench_die("write to the server: %s", strerror((int)-id));
        return id;
}

/* ------------------------------------------------------------------ lines and messages */

ssize_t client_fill(Client *c) {
        if (c->start > 0) {
                memmove(c->buf, c->buf + c->start, c->len - c->start);
                c->len -= c->start;
                c->start = 0;
        }
        if (c->cap - c->len < 4096) {
                /* What is here is one line without its end: it may grow to the bound, not past. */
                if (c->cap >= CLIENT_LINE_MAX)
                        return -EMSGSIZE;
                size_t ncap = c->cap ? MIN(c->cap * 2, CLIENT_LINE_MAX) : 65536;
                char *nb = realloc(c->buf, ncap);
                if (!nb)
                        return -ENOMEM;
                c->buf = nb;
                c->cap = ncap;
        }
        for (;;) {
                ssize_t k = read(c->fd, c->buf + c->len, c->cap - c->len - 1);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return -errno;
                c->len += (size_t)k;
                return k;
        }
}

char *client_take_line(Client *c, size_t *len) {
        if (c->start >= c->len)
                return NULL;
        char *s = c->buf + c->start;
        char *nl = memchr(s, '\n', c->len - c->start);
        if (!nl)
                return NULL;
        *nl = 0;
        c->start = (size_t)(nl - c->buf) + 1;
        c->t_line = bench_now_ns();
        if (len)
                *len = (size_t)(nl - s);
        return s;
}

/* Blocking: the next line and its length, or NULL at EOF or error. */
static char *read_line(Client *c, size_t *len) {
        for (;;) {
                char *l = client_take_line(c, len);
                if (l)
                        return l;
                if (client_fill(c) <= 0)
                        return NULL;
        }
}

char *client_read_line(Client *c) { return read_line(c, NULL); }

json_t *client_parse(const char *line, size_t len) { return json_loadb(line, len, 0, NULL); }

json_t *client_read(Client *c) {
        size_t len;
        char *l = read_line(c, &len);
        if (!l)
                return NULL;
        json_t *msg = client_parse(l, len);
        if (!msg)
                bench_die("the server wrote a line that is not JSON: %.200s", l);
        return msg;
}

json_t *client_wait(Client *c, long id) {
        for (;;) {
                json_t *msg = client_read(c);
                if (!msg || answer_id(msg) == id)
                        return msg;
                json_decref(msg);
        }
}

json_t *client_call(Client *c, const char *method, const char *params) {
        json_t *msg = client_wait(c, client_send_or_die(c, method, params));
        if (!msg)
                bench_die("no answer to %s: the connection closed", method);
        return msg;
}

json_t *client_call_json(Client *c, const char *method, json_t *params) {
        long id = client_send_json(c, method, params);
        if (id < 0)
                bench_die("write to the server: %s", strerror((int)-id));
        json_t *msg = client_wait(c, id);
        if (!msg)
                bench_die("no answer to %s: the connection closed", method);
        return msg;
}

/* ------------------------------------------------------------------ reading a message */

long answer_id(const json_t *msg) {
        json_t *id = json_object_get(msg, "id");
        return json_is_integer(id) ? (long)json_integer_value(id) : -1;
}

bool answer_is_error(const json_t *msg) { return !msg || json_is_object(json_object_get(msg, "error")); }

json_t *answer_get(const json_t *msg, const char *key) {
        return json_object_get(json_object_get(msg, "result"), key);
}

bool answer_int(const json_t *msg, const char *key, long long *ret) {
        json_t *v = answer_get(msg, key);
        if (!json_is_integer(v))
                return false;
        *ret = json_integer_value(v);
        return true;
}

const char *answer_str(const json_t *msg, const char *key) { return json_string_value(answer_get(msg, key)); }

const char *answer_error_message(const json_t *msg) {
        const char *m = json_string_value(json_object_get(json_object_get(msg, "error"), "message"));
        return m ? m : "";
}

bool notification_is(const json_t *msg, const char *method) {
        const char *m = json_string_value(json_object_get(msg, "method"));
        return m && strcmp(m, method) == 0 && !json_object_get(msg, "id");
}

json_t *notification_get(const json_t *msg, const char *key) {
        return json_object_get(json_object_get(msg, "params"), key);
}

void answer_describe(char *dst, size_t size, const json_t *msg) {
        _cleanup_free_ char *text = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
        snprintf(dst, size, "%.240s", !msg ? "(connection closed)" : text ? text : "(not printable)");
}
