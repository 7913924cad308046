/* SPDX-License-Identifier: MIT */
/* The dispatcher (src/server/dispatch.c) with no sandbox: the method table's rows, the param
 * checker (unknown params named with the closest listed name, types, required params), and
 * dispatch_line answering on a connection: parse errors, routing without a sandbox, lanes full
 * or fixed, shutdown and --mode disabled. */
#include <stdio.h>
#include <string.h>
#include "base/limits.h"
#include "methods/methods.h"
#include "server/dispatch.h"
#include "server/handler.h"
#include "server/server.h"
#include "server_peer.h"
#include "tap.h"

/* method_check on params given as JSON text: 0, or the error's code with its message in e. */
static int check(const char *method, const char *params, RpcError *e) {
        json_t *p = json_loads(params, 0, NULL);
        *e = (RpcError){ 0 };
        int r = method_check(method, p, e);
        json_decref(p);
        return r < 0 ? e->code : 0;
}

static void test_checker(void) {
        RpcError e;
        CHECK(check("nope", "{}", &e) == RPC_METHOD_NOT_FOUND && strcmp(e.message, "Method not found: nope") == 0,
              "an unknown method: -32601 naming it: %s", e.message);
        CHECK(check("run", "{\"command\": \"ls\"}", &e) == 0, "run with its required param passes");
        CHECK(check("run", "{}", &e) == RPC_INVALID_PARAMS && strcmp(e.message, "Missing required param: command") == 0,
              "a required param missing: %s", e.message);
        CHECK(check("run", "{\"command\": null}", &e) == RPC_INVALID_PARAMS && strstr(e.message, "Missing required"),
              "null counts as missing");
        CHECK(check("cancel", "{\"requestId\": null}", &e) == 0, "but is a value for a param of any type");
        CHECK(check("run", "{\"command\": 5}", &e) == RPC_INVALID_PARAMS &&
                      strcmp(e.message, "command must be a string") == 0,
              "a string param given a number: %s", e.message);
        CHECK(check("run", "{\"command\": \"x\", \"timeoutMs\": -1}", &e) == RPC_INVALID_PARAMS &&
                      strcmp(e.message, "timeoutMs must be a non-negative integer") == 0,
              "an integer param given a negative number: %s", e.message);
        CHECK(check("run", "{\"command\": \"x\", \"timeoutMs\": 1.5}", &e) == RPC_INVALID_PARAMS,
              "or a fraction: %s", e.message);
        CHECK(check("run", "{\"command\": \"x\", \"stream\": \"yes\"}", &e) == RPC_INVALID_PARAMS &&
                      strcmp(e.message, "stream must be a boolean") == 0,
              "a boolean param given a string: %s", e.message);
        CHECK(check("run", "{\"command\": \"x\", \"env\": []}", &e) == RPC_INVALID_PARAMS &&
                      strcmp(e.message, "env must be an object") == 0,
              "an object param given an array: %s", e.message);

        /* Unknown params: refused, named, with the closest listed name when one is close. */
        CHECK(check("run", "{\"command\": \"x\", \"timeout\": 5}", &e) == RPC_INVALID_PARAMS &&
                      strcmp(e.message, "unknown parameter \"timeout\" (did you mean \"timeoutMs\"?)") == 0,
              "a name missing its unit: %s", e.message);
        CHECK(check("run", "{\"command\": \"x\", \"while\": \"wait\"}", &e) == RPC_INVALID_PARAMS &&
                      strstr(e.message, "(did you mean \"whilePaused\"?)"),
              "a prefix of 4 letters or more is close however much is missing: %s", e.message);
        CHECK(check("run", "{\"comand\": \"x\"}", &e) == RPC_INVALID_PARAMS &&
                      strcmp(e.message, "unknown parameter \"comand\" (did you mean \"command\"?)") == 0,
              "a typo, even where the required param is missing (names are checked first): %s", e.message);
        CHECK(check("run", "{\"command\": \"x\", \"SandboxID\": \"a\"}", &e) == RPC_INVALID_PARAMS &&
                      strstr(e.message, "(did you mean \"sandboxId\"?)"),
              "another case: %s", e.message);
        CHECK(check("run", "{\"command\": \"x\", \"zzzzzzzz\": 1}", &e) == RPC_INVALID_PARAMS &&
                      strcmp(e.message, "unknown parameter \"zzzzzzzz\"") == 0,
              "nothing close: no hint: %s", e.message);
        CHECK(check("run", "{\"command\": \"x\", \"cdw\": \"/\"}", &e) == RPC_INVALID_PARAMS &&
                      !strstr(e.message, "did you mean"),
              "two edits in a short name are too many for a hint: %s", e.message);
        CHECK(check("run", "{\"command\": \"x\", \"cw\": \"/\"}", &e) == RPC_INVALID_PARAMS &&
                      strstr(e.message, "(did you mean \"cwd\"?)"),
              "one is not: %s", e.message);
        CHECK(check("run", "{\"command\": \"x\", \"lane\": \"system\"}", &e) == 0,
              "`lane` is a param of every lane method");
        CHECK(check("ping", "{\"lane\": \"system\"}", &e) == RPC_INVALID_PARAMS &&
                      strcmp(e.message, "unknown parameter \"lane\"") == 0,
              "and of no other: %s", e.message);
}

/* The documented lane methods (ARCHITECTURE, Lanes). */
static const char *const lane_methods[] = { "run", "process.start", "sandbox.fork", "snapshot.create",
                                            "snapshot.restore", "persistence.export", "persistence.import",
                                            "code.run", "context.create", "context.restart" };

static void test_tables(void) {
        unsigned rows = 0, lanes = 0, bad = 0;
        char why[256] = "";
        for (const Method *const *t = server_method_tables; *t; t++)
                for (const Method *m = *t; m->name; m++) {
                        rows++;
                        if (!m->fn || !m->params || !m->doc || !*m->doc || !m->result) {
                                bad++;
                                snprintf(why, sizeof why, "%s has no handler, params or doc", m->name);
                        }
                        for (const Param *p = m->params; p && p->name; p++) {
                                if (strcmp(p->name, "lane") == 0) {
                                        bad++;
                                        snprintf(why, sizeof why, "%s lists lane itself", m->name);
                                }
                                for (const Param *q = p + 1; q->name; q++)
                                        if (strcmp(p->name, q->name) == 0) {
                                                bad++;
                                                snprintf(why, sizeof why, "%s lists %s twice", m->name, p->name);
                                        }
                                if (!p->doc || !*p->doc) {
                                        bad++;
                                        snprintf(why, sizeof why, "%s.%s has no doc", m->name, p->name);
                                }
                        }
                        RpcError e = { 0 };
                        json_t *none = json_object();
                        int r = method_check(m->name, none, &e);
                        json_decref(none);
                        if (r < 0 && e.code != RPC_INVALID_PARAMS) {
                                bad++;
                                snprintf(why, sizeof why, "%s is not found by its name", m->name);
                        }
                        bool doc_lane = false;
                        for (size_t i = 0; i < sizeof lane_methods / sizeof *lane_methods; i++)
                                doc_lane |= strcmp(lane_methods[i], m->name) == 0;
                        if (doc_lane != !!(m->flags & M_LANE)) {
                                bad++;
                                snprintf(why, sizeof why, "%s: M_LANE is not as documented", m->name);
                        }
                        lanes += !!(m->flags & M_LANE);
                }
        CHECK(rows > 40 && bad == 0, "%u rows, each named, documented, found by name, no param twice %s", rows, why);
        CHECK(lanes == sizeof lane_methods / sizeof *lane_methods, "exactly the %u documented methods hold a lane slot",
              lanes);
}

/* ------------------------------------------------------------ dispatch_line on a connection */

static void on_closed(void *data, Conn *c) {
        Core *core = data;
        lanes_drop_conn(&core->lanes, c);
}
static const ConnOps ops = { peer_line_ignored, peer_paused_ignored, peer_eof_ignored, on_closed };

static Core core;
static Peer peer;

/* Sends a line through dispatch_line and returns the one answer it got at once, or NULL
 * (then *n says how many lines came instead). */
static json_t *ask(const char *line, size_t *n) {
        dispatch_line(&core, peer.conn, line, strlen(line), false);
        json_t *got = peer_read(&peer);
        *n = json_array_size(got);
        json_t *one = *n == 1 ? json_incref(json_array_get(got, 0)) : NULL;
        json_decref(got);
        return one;
}

static int error_code(json_t *a) {
        return (int)json_integer_value(json_object_get(json_object_get(a, "error"), "code"));
}
static const char *error_message(json_t *a) {
        const char *m = json_string_value(json_object_get(json_object_get(a, "error"), "message"));
        return m ? m : "";
}
static json_int_t answer_id(json_t *a) { return json_integer_value(json_object_get(a, "id")); }

static void test_lines(Loop *loop) {
        size_t n;
        json_t *a = ask("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}", &n);
        CHECK(a && answer_id(a) == 1 && json_is_true(json_object_get(json_object_get(a, "result"), "pong")),
              "ping is answered at once with its id");
        json_decref(a);
        a = ask("this is not json", &n);
        CHECK(a && error_code(a) == RPC_PARSE_ERROR && json_is_null(json_object_get(a, "id")),
              "a line that is not JSON: -32700 with id null");
        json_decref(a);
        dispatch_line(&core, peer.conn, NULL, 0, true);
        json_t *got = peer_read(&peer);
        a = json_array_get(got, 0);
        CHECK(json_array_size(got) == 1 && error_code(a) == RPC_PARSE_ERROR &&
                      strstr(error_message(a), "Request too large (limit"),
              "a line over the limit: -32700 Request too large: %s", error_message(a));
        json_decref(got);
        a = ask("  \r\t", &n);
        CHECK(!a && n == 0, "a blank line is a keep-alive: no answer");
        a = ask("{\"jsonrpc\":\"2.0\",\"method\":\"nope\"}", &n);
        CHECK(!a && n == 0, "a notification of an unknown method: no answer");
        a = ask("{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"method\":\"nope\"}", &n);
        CHECK(a && error_code(a) == RPC_METHOD_NOT_FOUND && json_is_string(json_object_get(a, "id")) &&
                      strcmp(json_string_value(json_object_get(a, "id")), "x") == 0,
              "a request of an unknown method: -32601, its id echoed");
        json_decref(a);
        a = ask("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\",\"params\":{\"pnig\":1}}", &n);
        CHECK(a && error_code(a) == RPC_INVALID_PARAMS && strcmp(error_message(a), "unknown parameter \"pnig\"") == 0,
              "an unknown param through the wire: %s", error_message(a));
        json_decref(a);
        a = ask("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"process.list\"}", &n);
        CHECK(a && error_code(a) == RPC_INVALID_REQUEST && strstr(error_message(a), "Sandbox not created"),
              "a sandbox method on a connection without one: -32600 %s", error_message(a));
        json_decref(a);
        a = ask("{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"process.list\",\"params\":{\"sandboxId\":\"abc\"}}", &n);
        CHECK(a && error_code(a) == RPC_INVALID_PARAMS && strcmp(error_message(a), "Unknown sandboxId: abc") == 0,
              "an id that names no sandbox: %s", error_message(a));
        json_decref(a);

        /* Lanes: a bad lane, a lane the connection may not choose, a full queue. */
        a = ask("{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"run\",\"params\":{\"command\":\"x\",\"lane\":\"fast\"}}",
                &n);
        CHECK(a && error_code(a) == RPC_INVALID_PARAMS && strstr(error_message(a), "lane must be"),
              "an unknown lane: %s", error_message(a));
        json_decref(a);
        conn_set_lane(peer.conn, LANE_INTERACTIVE);
        a = ask("{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"run\",\"params\":{\"command\":\"x\",\"lane\":\"system\"}}",
                &n);
        CHECK(a && error_code(a) == RPC_INVALID_PARAMS && strstr(error_message(a), "fixed to interactive"),
              "another lane than the connection's fixed one: %s", error_message(a));
        json_decref(a);
        conn_set_lane(peer.conn, -1);
        lanes_configure(&core.lanes, LANE_INTERACTIVE, 1, 0);
        int held = lanes_try_take(&core.lanes, LANE_INTERACTIVE) == 0 ? lanes_take_lent(&core.lanes) : 0;
        a = ask("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"run\",\"params\":{\"command\":\"x\"}}", &n);
        json_t *retry = json_object_get(json_object_get(json_object_get(a, "error"), "data"), "retryAfterMs");
        CHECK(held && a && error_code(a) == RPC_WORKER_UNAVAILABLE &&
                      json_integer_value(retry) >= SBX_LANE_RETRY_MIN_MS,
              "its lane full with no room to wait: -32001 with error.data.retryAfterMs %lld",
              (long long)json_integer_value(retry));
        json_decref(a);

        /* Requests that wait for a slot are answered when they get one. */
        lanes_configure(&core.lanes, LANE_INTERACTIVE, 1, 10);
        a = ask("{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"run\",\"params\":{\"command\":\"x\"}}", &n);
        json_t *b = ask("{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"run\",\"params\":{\"command\":\"x\"}}", &n);
        CHECK(!a && !b && core.lanes.lane[LANE_INTERACTIVE].queued == 2, "with a queue, two runs wait unanswered");
        lanes_release(&core.lanes, held, 0);
        loop_drain(loop, 20);
        got = peer_read(&peer);
        a = json_array_get(got, 0);
        b = json_array_get(got, 1);
        CHECK(json_array_size(got) == 2 && answer_id(a) == 8 && error_code(a) == RPC_INVALID_REQUEST &&
                      answer_id(b) == 9 &&
                      core.lanes.lane[LANE_INTERACTIVE].active == 0,
              "a freed slot starts them in order; each is handled (no sandbox here) and gives its slot back");
        json_decref(got);
        held = lanes_try_take(&core.lanes, LANE_INTERACTIVE) == 0 ? lanes_take_lent(&core.lanes) : 0;
        a = ask("{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"run\",\"params\":{\"command\":\"x\"}}", &n);
        CHECK(!a && n == 0, "another waits");

        /* Shutdown: nothing but ping and health; what waited is refused when it would start. */
        core.shutting_down = true;
        a = ask("{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"run\",\"params\":{\"command\":\"x\"}}", &n);
        CHECK(a && error_code(a) == RPC_SHUTTING_DOWN && strstr(error_message(a), "POOL_SHUTTING_DOWN"),
              "shutting down: a new run is refused -32003");
        json_decref(a);
        a = ask("{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"sandbox.list\"}", &n);
        CHECK(a && error_code(a) == RPC_SHUTTING_DOWN, "and so is a list");
        json_decref(a);
        a = ask("{\"jsonrpc\":\"2.0\",\"id\":13,\"method\":\"ping\",\"params\":{\"x\":1}}", &n);
        CHECK(a && error_code(a) == RPC_INVALID_PARAMS, "a bad request is still told what is wrong with it");
        json_decref(a);
        a = ask("{\"jsonrpc\":\"2.0\",\"id\":14,\"method\":\"ping\"}", &n);
        CHECK(a && json_object_get(a, "result"), "ping still answers");
        json_decref(a);
        lanes_release(&core.lanes, held, 0);
        loop_drain(loop, 20);
        got = peer_read(&peer);
        a = json_array_get(got, 0);
        CHECK(json_array_size(got) == 1 && answer_id(a) == 10 && error_code(a) == RPC_SHUTTING_DOWN,
              "the run that waited is answered -32003 when its slot comes, not started");
        json_decref(got);
        core.shutting_down = false;

        core.mode = MODE_DISABLED;
        a = ask("{\"jsonrpc\":\"2.0\",\"id\":15,\"method\":\"run\",\"params\":{\"command\":\"x\"}}", &n);
        CHECK(a && error_code(a) == RPC_SANDBOX_DISABLED, "--mode disabled: a run is refused -32002");
        json_decref(a);
        a = ask("{\"jsonrpc\":\"2.0\",\"id\":16,\"method\":\"ping\"}", &n);
        CHECK(a && json_object_get(a, "result"), "ping answers");
        json_decref(a);
        core.mode = MODE_NAMESPACES;
}

/* What the framer keeps of a line too long: head, NUL, tail. */
static json_t *cut_id(const char *head, const char *tail) {
        char buf[1024];
        size_t h = strlen(head), t = strlen(tail);
        memcpy(buf, head, h);
        buf[h] = 0;
        memcpy(buf + h + 1, tail, t);
        return rpc_cut_line_id(buf, h + 1 + t);
}

static void test_cut_line_ids(void) {
        json_t *id = cut_id("{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"run\",\"params\":{\"command\":\"xxxx", "xxxx\"}}");
        CHECK(json_integer_value(id) == 5, "the id among the first members");
        json_decref(id);
        id = cut_id("{\"method\":\"tools/call\",\"params\":{\"arguments\":{\"content\":\"xx", "xx\"}},\"jsonrpc\":\"2.0\",\"id\": \"k-1\" }");
        CHECK(json_is_string(id) && strcmp(json_string_value(id), "k-1") == 0, "the id that ends the object");
        json_decref(id);
        id = cut_id("{\"method\":\"m\",\"params\":{\"id\":77,\"pad\":\"yy", "yy\"}}");
        CHECK(!id, "an id inside params is not the request's");
        json_decref(id);
        id = cut_id("{\"method\":\"m\",\"params\":{\"pad\":\"yy", "yy \\\"id\\\":3}\"}}");
        CHECK(!id, "an id inside a string's text is not the request's");
        json_decref(id);
        id = cut_id("{\"method\":\"m\",\"params\":{\"pad\":\"yy", "yyyy\"},\"id\":12");
        CHECK(!id, "an id whose object is not seen to end is not taken (it may go on)");
        json_decref(id);
        id = cut_id("not json at all", "nor this");
        CHECK(!id, "nothing that looks like a request: no id");
        json_decref(id);
        id = rpc_cut_line_id("no nul here", 11);
        CHECK(!id, "a peek without its NUL: no id");
}

int main(void) {
        Loop *loop;
        ConnList list;
        dispatch_set_methods(server_method_tables);
        test_checker();
        test_tables();
        if (loop_new(&loop) < 0) {
                CHECK(false, "loop");
                return tap_done();
        }
        lanes_init(&core.lanes, loop, dispatch_start_waiting, &core);
        conn_list_init(&list, loop, &ops, &core);
        if (peer_open(&list, &peer) < 0) {
                CHECK(false, "a connection");
                return tap_done();
        }
        test_lines(loop);
        test_cut_line_ids();
        conn_close_all(&list);
        close(peer.fd);
        loop_drain(loop, 10);
        loop_free(loop);
        return tap_done();
}
