/* SPDX-License-Identifier: MIT */
/* Unit tests of the CLI's daemon connection (src/cli/client.c) and process helpers
 * (src/cli/procs.c): lines split across reads and several in one, answers told from
 * notifications, error mapping, exit statuses and bytes in base64. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "base/macro.h"
#include "base/util.h"
#include "cli/client.h"
#include "cli/procs.h"
#include "tap.h"

static char sock_path[108];

/* A listening socket at sock_path, and a client connected to it; *ret_peer is the daemon's
 * end. */
static Client *pair(int *ret_peer) {
        static int n;
        snprintf(sock_path, sizeof sock_path, "/tmp/sbx-test-client-%d-%d.sock", (int)getpid(), n++);
        unlink(sock_path);
        int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock_path);
        if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(l, 1) < 0)
                return NULL;
        Client *c = NULL;
        ClientError err;
        if (client_connect(sock_path, &c, &err) < 0)
                return NULL;
        *ret_peer = accept4(l, NULL, NULL, SOCK_CLOEXEC);
        close(l);
        unlink(sock_path);
        return c;
}

static void say(int fd, const char *s) { (void)write_all(fd, s, strlen(s)); }

/* Reads until a whole message is there; returns it or NULL. */
static json_t *next_msg(Client *c) {
        json_t *m = NULL;
        int r;
        while ((r = client_next(c, &m)) == 0)
                if (client_read(c) < 0)
                        return NULL;
        return r > 0 ? m : NULL;
}

static void test_framing(void) {
        int peer = -1;
        Client *c = pair(&peer);
        CHECK(c && peer >= 0, "connected");
        if (!c)
                return;
        /* Byte by byte: the message only once its newline is there. */
        const char *line = "{\"jsonrpc\":\"2.0\",\"method\":\"output\",\"params\":{\"n\":1}}\n";
        json_t *m = NULL;
        int early = 0, got = 0;
        for (size_t i = 0; line[i]; i++) {
                say(peer, (char[]){ line[i], 0 });
                if (client_read(c) < 0)
                        break;
                int r = client_next(c, &m);
                if (line[i + 1])
                        early += r != 0;
                else
                        got = r;
        }
        CHECK(early == 0, "no message before the newline");
        CHECK(got == 1 && m, "a line split into single bytes is one message, at its newline");
        const char *method;
        json_t *params;
        int64_t id;
        CHECK(m && client_is_notification(m, &method, &params) && strcmp(method, "output") == 0 &&
                      json_integer_value(json_object_get(params, "n")) == 1 && !client_is_answer(m, &id),
              "a notification is told from an answer");
        json_decref(m);

        /* Two messages and half of a third in one write. */
        say(peer, "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"a\":1}}\n{\"jsonrpc\":\"2.0\",\"id\":8,\"error\":"
                  "{\"code\":-32602,\"message\":\"Unknown processId: p9\"}}\n{\"jsonrpc\":");
        json_t *a = next_msg(c), *b = next_msg(c), *res = NULL;
        ClientError err = { 0 };
        CHECK(a && client_is_answer(a, &id) && id == 7 && client_answer_result(a, &res, &err) == 0 &&
                      json_integer_value(json_object_get(res, "a")) == 1,
              "an answer's result");
        json_decref(res);
        CHECK(b && client_is_answer(b, &id) && id == 8 && client_answer_result(b, &res, &err) == -1 &&
                      err.code == -32602 && strcmp(err.message, "Unknown processId: p9") == 0,
              "an error answer's code and message");
        CHECK(client_next(c, &m) == 0, "half a line is no message yet");
        json_decref(a);
        json_decref(b);
        say(peer, "\"2.0\",\"id\":9,\"result\":{}}\nnot json\n");
        a = next_msg(c);
        CHECK(a && client_is_answer(a, &id) && id == 9, "the rest of the line completes it");
        json_decref(a);
        CHECK(client_next(c, &m) == -EBADMSG, "a line that is not JSON: -EBADMSG");
        close(peer);
        CHECK(client_next(c, &m) == 0 && client_read(c) == -ECONNRESET, "the daemon closing: -ECONNRESET");
        client_free(c);
}

typedef struct Notes {
        int n;
        char last[64];
} Notes;

static void on_note(void *ud, const char *method, json_t *params) {
        Notes *n = ud;
        n->n++;
        snprintf(n->last, sizeof n->last, "%s", method);
}

static void test_request(void) {
        int peer = -1;
        Client *c = pair(&peer);
        if (!c)
                return;
        /* Ids go 1, 2, ...: the answer to request 1 comes after a notification and an answer
         * to another request, which are handed on and dropped. */
        say(peer, "{\"jsonrpc\":\"2.0\",\"method\":\"process.output\",\"params\":{}}\n"
                  "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"other\":true}}\n"
                  "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"mine\":true}}\n");
        Notes notes = { 0 };
        json_t *res = NULL;
        ClientError err;
        int r = client_request(c, "ping", json_pack("{s:i}", "x", 1), on_note, &notes, &res, &err);
        CHECK(r == 0 && json_is_true(json_object_get(res, "mine")), "client_request returns its own answer");
        CHECK(notes.n == 1 && strcmp(notes.last, "process.output") == 0, "notifications meanwhile go to on_note");
        json_decref(res);
        char buf[256] = "";
        ssize_t k = read(peer, buf, sizeof buf - 1);
        CHECK(k > 0 && buf[k - 1] == '\n' && strstr(buf, "\"method\":\"ping\"") && strstr(buf, "\"id\":1") &&
                      strstr(buf, "\"params\":{\"x\":1}"),
              "the request is one line with its id, method and params");
        close(peer);
        r = client_request(c, "ping", NULL, NULL, NULL, &res, &err);
        CHECK(r == -1 && err.code == 0 && (err.errnum == ECONNRESET || err.errnum == EPIPE),
              "a closed connection is code 0 with its errno");
        client_free(c);
}

static void test_fail_mapping(void) {
        ClientError e = { .code = 0, .errnum = ENOENT };
        FILE *saved = stderr;
        stderr = fopen("/dev/null", "w");
        int unreachable = client_fail("x", "/nowhere", &e);
        e = (ClientError){ .code = -32602, .message = "Unknown sandboxId: abc" };
        int no_sandbox = client_fail("x", "/s", &e);
        e = (ClientError){ .code = -32602, .message = "Unknown processId: p3" };
        int no_process = client_fail("x", "/s", &e);
        e = (ClientError){ .code = -32602, .message = "process p3 has already ended" };
        int other = client_fail("x", "/s", &e);
        fclose(stderr);
        stderr = saved;
        CHECK(unreachable == CLIENT_EXIT_UNREACHABLE && no_sandbox == CLIENT_EXIT_NO_SANDBOX &&
                      no_process == CLIENT_EXIT_NO_PROCESS && other == CLIENT_EXIT_FAILURE,
              "errors map to distinct exit statuses");
}

static void test_procs(void) {
        json_t *o = json_pack("{s:i, s:s}", "exitCode", 7, "signal", "KILL");
        CHECK(procs_exit_status(o) == 7, "exitCode wins");
        json_object_set_new(o, "exitCode", json_null());
        CHECK(procs_exit_status(o) == 128 + SIGKILL, "no exitCode: 128 + the signal");
        json_object_set_new(o, "signal", json_string("SIGTERM"));
        CHECK(procs_exit_status(o) == 128 + SIGTERM, "a signal named with SIG");
        json_object_set_new(o, "signal", json_null());
        json_object_set_new(o, "status", json_string("killed"));
        CHECK(procs_exit_status(o) == 128 + SIGKILL && !procs_exit_known(o), "neither, killed (a leftover): 137");
        json_object_set_new(o, "status", json_string("timeout"));
        CHECK(procs_exit_status(o) == 128 + SIGKILL, "neither, timed out: 137");
        json_object_set_new(o, "status", json_string("exited"));
        CHECK(procs_exit_status(o) == 0, "neither, exited: 0");
        json_object_set_new(o, "status", json_string("running"));
        CHECK(procs_exit_status(o) == 1, "neither, running: 1");
        json_decref(o);

        int p[2];
        CHECK(pipe2(p, O_CLOEXEC) == 0, "pipe");
        o = json_pack("{s:s, s:s, s:s}", "data", "YQBi/w==", "dataEncoding", "base64", "text", "h\xc3\xa9");
        char buf[16];
        CHECK(procs_write_bytes(p[1], o, "data", "dataEncoding") == 0 && read(p[0], buf, sizeof buf) == 4 &&
                      memcmp(buf, "a\0b\xff", 4) == 0,
              "base64 bytes are decoded");
        CHECK(procs_write_bytes(p[1], o, "text", "textEncoding") == 0 && read(p[0], buf, sizeof buf) == 3 &&
                      memcmp(buf, "h\xc3\xa9", 3) == 0,
              "a string is written as it is");
        CHECK(procs_write_bytes(p[1], o, "missing", "missingEncoding") == 0, "a missing member writes nothing");
        json_object_set_new(o, "data", json_string("!!!"));
        CHECK(procs_write_bytes(p[1], o, "data", "dataEncoding") == -EBADMSG, "bad base64: -EBADMSG");
        json_decref(o);
        close(p[0]);
        close(p[1]);
}

int main(void) {
        signal(SIGPIPE, SIG_IGN);
        test_framing();
        test_request();
        test_fail_mapping();
        test_procs();
        return tap_done();
}
