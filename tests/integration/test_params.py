"""Unknown parameters: every method checks its params against the method table, and a name the
table does not list is refused with -32602 naming it (a misspelt optional param would
otherwise be ignored and the request run with the default)."""
import base64

from test_rpc import stdio  # noqa: F401 (the fixture: `sbx serve --stdio` and a Peer on it)

INVALID_PARAMS = -32602


def test_run_with_timeout_instead_of_timeout_ms(stdio):
    stdio.result("create")
    err = stdio.error("run", {"command": "echo should-not-run > /tmp/ran", "timeout": 5})
    assert err["code"] == INVALID_PARAMS
    assert '"timeout"' in err["message"]
    assert err["message"] == 'unknown parameter "timeout" (did you mean "timeoutMs"?)'
    # The refused request did nothing, and the connection still serves.
    res = stdio.result("run", {"command": "cat /tmp/ran 2>/dev/null || echo none", "timeoutMs": 5000})
    assert res["exitCode"] == 0 and res["stdout"] == "none\n"
    entries = stdio.result("shell.history.list")["entries"]
    assert [x["command"] for x in entries] == ["cat /tmp/ran 2>/dev/null || echo none"]


def test_unknown_param_on_create(stdio):
    err = stdio.error("create", {"timeoutMS": 1000})
    assert err == {"code": INVALID_PARAMS, "message": 'unknown parameter "timeoutMS" (did you mean "timeoutMs"?)'}
    # Nothing was created: create still works, and only once.
    assert stdio.result("create", {"timeoutMs": 1000})["ok"] is True
    assert stdio.error("create")["message"] == "Sandbox already created"
    # persist belongs to sandbox.create only.
    assert stdio.error("create", {"persist": True})["message"] == 'unknown parameter "persist"'


def test_unknown_param_on_files_methods(stdio):
    stdio.result("create")
    data = base64.b64encode(b"hello").decode()
    err = stdio.error("files.write", {"path": "f.txt", "data": data, "overwrite": True})
    assert err == {"code": INVALID_PARAMS, "message": 'unknown parameter "overwrite"'}
    assert stdio.result("files.exists", {"path": "f.txt"}) == {"exists": False}
    err = stdio.error("files.read", {"path": "f.txt", "encoding": "utf-8"})
    assert err["code"] == INVALID_PARAMS and '"encoding"' in err["message"]
    err = stdio.error("files.mkdir", {"path": "d", "parent": True})
    assert err["message"] == 'unknown parameter "parent" (did you mean "parents"?)'
    stdio.result("files.write", {"path": "f.txt", "data": data})
    assert base64.b64decode(stdio.result("files.read", {"path": "f.txt"})["data"]) == b"hello"


def test_unknown_param_where_none_are_taken(stdio):
    assert stdio.error("ping", {"x": 1}) == {"code": INVALID_PARAMS, "message": 'unknown parameter "x"'}
    err = stdio.error("health", {"sandboxId": "abc"})
    assert err["message"] == 'unknown parameter "sandboxId"'
    assert stdio.result("ping") == {"pong": True}


def test_params_absent_null_or_not_an_object(stdio):
    # Absent and null params are an empty object; anything else is refused before the table.
    assert stdio.result("ping") == {"pong": True}
    stdio.send_raw(b'{"jsonrpc":"2.0","id":"n","method":"ping","params":null}\n')
    assert stdio.wait("n")["result"] == {"pong": True}
    stdio.send_raw(b'{"jsonrpc":"2.0","id":"a","method":"ping","params":[1]}\n')
    assert stdio.wait("a")["error"] == {"code": INVALID_PARAMS, "message": "params must be an object"}
    # A known param set to null counts as absent, as before.
    stdio.result("create")
    assert stdio.result("run", {"command": "echo ok", "timeoutMs": None, "sandboxId": None})["stdout"] == "ok\n"


def test_unknown_param_in_a_notification_is_not_answered(stdio):
    stdio.result("create")
    stdio.send_raw(b'{"jsonrpc":"2.0","method":"run","params":{"command":"true","timeout":1}}\n')
    assert stdio.result("ping") == {"pong": True}
    assert not stdio.answers
