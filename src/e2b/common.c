/* SPDX-License-Identifier: MIT */
/* What both halves of the E2B door use (e2b_private.h): the answers they send, the Connect
 * code an sbx error means, the door's table of sandboxes. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "e2b/e2b_private.h"

/* ---------------------------------------------------------------- answers */

void e2b_reply_json(E2bReq *q, unsigned status, json_t *body) {
        char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
        json_decref(body);
        if (!s) {
                (void)http_reply(q->r, 500, NULL, NULL, 0, NULL);
                return;
        }
        (void)http_reply(q->r, status, "application/json", s, strlen(s), NULL);
}

void e2b_reply_rest_error(E2bReq *q, unsigned status, const char *fmt, ...) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        e2b_reply_json(q, status, json_pack("{s:i, s:s}", "code", (int)status, "message", msg));
}

void e2b_reply_empty(E2bReq *q, unsigned status) { (void)http_reply(q->r, status, NULL, NULL, 0, NULL); }

const char *e2b_connect_code(json_t *error) {
        json_int_t code = json_integer_value(json_object_get(error, "code"));
        const char *m = json_string_value(json_object_get(error, "message"));
        m = m ? m : "";
        if (code == -32602)
                return strstr(m, "Unknown sandboxId") || strstr(m, "Unknown processId") || strstr(m, "unknown process")
                               ? "not_found"
                               : "invalid_argument";
        if (code == -32001)
                return "resource_exhausted";
        if (code == -32003)
                return "unavailable";
        if (code == 1 || code == -32011) {
                if (!strncmp(m, "ENOENT", 6) || !strncmp(m, "ESRCH", 5))
                        return "not_found";
                if (!strncmp(m, "EEXIST", 6))
                        return "already_exists";
                if (!strncmp(m, "EACCES", 6) || !strncmp(m, "EPERM", 5) || !strncmp(m, "EROFS", 5))
                        return "permission_denied";
                if (!strncmp(m, "ENOSPC", 6) || !strncmp(m, "EDQUOT", 6) || !strncmp(m, "EMFILE", 6))
                        return "resource_exhausted";
                if (!strncmp(m, "EBUSY", 5))
                        return "unavailable";
                return "invalid_argument";
        }
        return "internal";
}

unsigned e2b_connect_status(const char *code) {
        static const struct {
                const char *code;
                unsigned status;
        } map[] = { { "canceled", 499 },          { "invalid_argument", 400 }, { "deadline_exceeded", 504 },
                    { "not_found", 404 },         { "already_exists", 409 },   { "permission_denied", 403 },
                    { "resource_exhausted", 429 }, { "failed_precondition", 400 }, { "unimplemented", 501 },
                    { "unavailable", 503 },       { "unauthenticated", 401 } };
        for (size_t i = 0; i < sizeof map / sizeof *map; i++)
                if (strcmp(map[i].code, code) == 0)
                        return map[i].status;
        return 500;
}

/* ---------------------------------------------------------------- sandboxes */

E2bBox *e2b_box_find(E2b *g, const char *id) {
        for (E2bBox *b = id ? g->boxes : NULL; b; b = b->next)
                if (strcmp(b->id, id) == 0)
                        return b;
        return NULL;
}

void e2b_box_drop(E2b *g, const char *id) {
        for (E2bBox **p = &g->boxes; *p; p = &(*p)->next)
                if (strcmp((*p)->id, id) == 0) {
                        E2bBox *b = *p;
                        *p = b->next;
                        free(b);
                        return;
                }
}


bool e2b_host_target(const char *host, unsigned *ret_port, char id[64]) {
        if (!host)
                return false;
        char *end;
        unsigned long port = strtoul(host, &end, 10);
        if (end == host || *end != '-' || port == 0 || port > 65535)
                return false;
        const char *s = end + 1;
        size_t n = strspn(s, "0123456789abcdef");
        if (n != 32 || s[n] != '.')
                return false;
        memcpy(id, s, n);
        id[n] = 0;
        *ret_port = (unsigned)port;
        return true;
}

const char *e2b_sandbox_of(E2bReq *q, char buf[64]) {
        const char *id = http_header(q->r, "E2b-Sandbox-Id");
        unsigned port;
        if (id)
                return id;
        if (e2b_host_target(http_header(q->r, "Host"), &port, buf) && port == E2B_ENVD_PORT)
                return buf;
        return NULL;
}
