"""E2B's own SDK against `sbx serve --http`: the npm package `e2b` (pinned in tests/e2b/
package.json, installed there by this test) runs tests/e2b/cases.mjs unchanged against the
daemon, and this file checks what it saw; the wire's edges (tokens, bad envelopes, unknown
methods, limits) are checked here with plain HTTP."""
import base64
import hashlib
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from http.client import HTTPConnection
from pathlib import Path

import pytest

from conftest import HttpDaemon, npm_packages, wait_until

REPO = Path(__file__).resolve().parents[2]
SBX = os.environ.get("SBX_BIN", str(REPO / "build" / "src" / "cli" / "sbx"))
NODE_DIR = REPO / "tests" / "e2b"
KEY = "e2b_0123456789abcdef"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes need root here"),
    pytest.mark.skipif(not os.path.exists(SBX), reason=f"{SBX} not built"),
]


class Daemon(HttpDaemon):
    """`sbx serve --socket ... --http 127.0.0.1:PORT`, in a directory of its own."""

    def __init__(self, *flags):
        super().__init__(SBX, *flags, prefix="sbx-e2b-")


@pytest.fixture(scope="module")
def node_sdk():
    npm_packages(NODE_DIR, "e2b", "@e2b/code-interpreter", needs="E2B's SDK (npm e2b)")
    return NODE_DIR


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    code, err = d.stop()
    assert code == 0, err


def run_case(d, name, **env):
    e = dict(os.environ, E2B_API_URL=d.url, E2B_SANDBOX_URL=d.url, E2B_API_KEY=KEY, **env)
    cp = subprocess.run(["node", str(NODE_DIR / "cases.mjs"), name], stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, timeout=240, env=e, cwd=NODE_DIR)
    assert cp.returncode == 0, cp.stderr.decode()
    out = json.loads(cp.stdout)
    assert not out.get("fatal"), out["fatal"]
    return out


# ---------------------------------------------------------------- the SDK


def test_commands(node_sdk, daemon):
    out = run_case(daemon, "commands")
    assert out["echo"] == {"exitCode": 0, "stdout": "hi\nuser\n/home/user\n", "stderr": "err\n"}
    assert out["exit3"]["name"] == "CommandExitError" and out["exit3"]["exitCode"] == 3
    assert out["env"] == "c1 bar\n"  # the sandbox's envVars and the command's envs
    assert out["cwd"] == "/tmp\n"
    assert out["streams"]["stdout"] == "line1\nline2\nline3\n"
    assert "out:line1\n" in out["streams"]["seen"] and "err:e\n" in out["streams"]["seen"]
    assert out["timeout"]["threw"] == "TimeoutError" and out["timeout"]["ms"] < 15000, out["timeout"]
    assert out["after_timeout"] == "still\n"
    assert out["concurrent"] == "".join(f"{i}\n" for i in range(40)), out["concurrent"]
    assert out["binary"] == 6  # a, U+FFFD (3 bytes), b, newline: bytes, not their base64


def test_background_stdin_connect_kill(node_sdk, daemon):
    out = run_case(daemon, "background")
    assert out["kill0"] == "alive\n"  # the pid the SDK got is the one kill -0 sees inside
    assert out["pid"] in out["list"]
    assert out["echoed"] == "hello stdin\n"
    assert out["closeStdin"] is True
    assert out["wait"] == {"exitCode": 0, "stdout": "hello stdin\ndone-0\n"}
    assert isinstance(out["connect"], int)
    assert out["kill"] is True and out["kill_again"] is False
    assert out["wait_killed"]["name"] == "CommandExitError"
    assert out["list_after"] == []


def test_pty(node_sdk, daemon):
    out = run_case(daemon, "pty")
    assert out["wait"] == 0
    assert "24 80\r\n" in out["text"] and "tty=/dev/pts" in out["text"]
    assert "30 100\r\n" in out["text"]  # after the resize


def test_files(node_sdk, daemon):
    out = run_case(daemon, "files")
    assert out["write"] == "/home/user/dir/a.txt"
    assert out["read"] == "hello file"
    assert out["relative"] == "relative"
    assert out["list"] == [["a.txt", "file", "/home/user/dir/a.txt"]]
    assert out["exists"] == [True, False]
    assert out["makeDir"] == [True, False]
    assert out["rename"] == "b.txt" and out["after_rename"] == "b.txt\n"
    assert out["remove"] is False
    assert out["read_missing"]["name"] == "FileNotFoundError"
    assert out["info"] == {"name": "new", "type": "dir", "mode": 0o755, "permissions": "drwxr-xr-x"}
    assert out["many"] == [["/tmp/m/one", "/tmp/m/two"], "122"]
    assert out["big"] == {"same": True, "inside": True, "len": 9 * 1024 * 1024 + 17}
    assert out["octet"][:3] == ["/tmp/o/streamed.txt", "/tmp/o/asked.txt", "streamed body\noctet"], out["octet"]
    assert out["octet"][3] != "written"  # gzip uploads are refused, not written garbled
    assert out["signed"] == {"put": 200, "down": 200, "body": "via a signed url", "forged": 401}


def test_watch_dir(node_sdk, daemon):
    out = run_case(daemon, "watch")
    evs = [tuple(e) for e in out["events"]]
    for e in [("create", "a"), ("write", "a"), ("create", "sub/b"), ("rename", "a"), ("create", "c"),
              ("chmod", "c"), ("remove", "sub/b"), ("create", "api.txt"), ("write", "api.txt")]:
        assert e in evs, (e, evs)
    assert evs.index(("create", "a")) < evs.index(("rename", "a")) < evs.index(("remove", "sub/b"))
    assert not [n for _, n in evs if n.startswith(".sbx-") or n.startswith("#")]  # the files API's own
    assert out["missing"]["name"] == "FileNotFoundError"


def test_get_host_forwards_to_the_sandbox_port(node_sdk, daemon):
    out = run_case(daemon, "host", E2B_DOMAIN=f"localhost:{daemon.port}")
    assert out["host"].startswith("8000-") and out["host"].endswith(f".localhost:{daemon.port}")
    assert out["first"]["status"] == 200
    assert out["index"] == {"status": 200, "type": "text/html", "body": "served-from-sandbox\n"}
    assert out["missing"]["status"] == 404  # the sandbox's server's own answer, passed on
    assert out["post"]["status"] == 501 and "Unsupported method ('POST')" in out["post"]["body"]
    assert out["after_kill"]["status"] == 502 and "nothing listens on it" in out["after_kill"]["body"]
    assert out["after_sandbox"]["status"] == 502 and "not found" in out["after_sandbox"]["body"]


def test_lifecycle(node_sdk, daemon):
    out = run_case(daemon, "lifecycle")
    a, b = out["a"], out["b"]
    assert out["list_suite"] == sorted([a, b])
    assert out["list_who"] == [b]
    assert sorted(sum(out["list_paged"], [])) == sorted([a, b]) and all(len(p) == 1 for p in out["list_paged"])
    assert out["info"] == {"id": b, "state": "running", "metadata": {"suite": "life", "who": "b"}, "span": 120000}
    assert 590 <= out["setTimeout"] <= 600
    assert out["pause"] == "paused" and out["list_paused"] == [b]
    assert out["resume"] == ["running", "kept\n"]
    assert out["kill_a"] is True and out["kill_a_again"] is False and out["a_running"] is False
    assert out["a_run"]["name"] in ("SandboxNotFoundError", "TimeoutError"), out["a_run"]
    assert out["connect_gone"]["name"] == "SandboxNotFoundError"
    assert out["kill_b"] is True


def test_metrics(node_sdk, daemon):
    """getMetrics: the daemon's samples of the sandbox, every 5 s, as E2B's SandboxMetric."""
    out = run_case(daemon, "metrics")
    m = out["all"]
    assert isinstance(m, list) and len(m) >= 2, m
    assert all(s["ts"] >= out["t0"] - 1000 for s in m), (m, out["t0"])  # timestamps are the sample's, in ms
    assert [s["ts"] for s in m] == sorted(s["ts"] for s in m)
    last = m[-1]
    assert last["memTotal"] == 512 << 20 and last["diskTotal"] == 256 << 20 and last["cpuCount"] >= 1
    assert last["diskUsed"] >= 3000000, last  # the file the command wrote to its tmpfs
    assert 0 < last["memUsed"] < last["memTotal"]
    assert all(0 <= s["cpuUsedPct"] <= 100 for s in m)
    assert out["before"] == 0


def run_interp(d):
    e = dict(os.environ, E2B_API_URL=d.url, E2B_SANDBOX_URL=d.url, E2B_API_KEY=KEY)
    cp = subprocess.run(["node", str(NODE_DIR / "interp.mjs")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        timeout=240, env=e, cwd=NODE_DIR)
    assert cp.returncode == 0, cp.stderr.decode()
    out = json.loads(cp.stdout)
    assert not out.get("fatal"), out["fatal"]
    return out


@pytest.mark.skipif(not os.path.exists("/usr/lib/python3/dist-packages/matplotlib"),
                    reason="python3-matplotlib is not installed (build.sh installs it)")
def test_code_interpreter_sdk(node_sdk, daemon):
    """@e2b/code-interpreter's runCode and contexts, unchanged, over sbx's code contexts: state
    kept, callbacks in order, errors, a cell the SDK's timeoutMs abandons is cancelled with the
    request (x stays 41), charts as PNG, DataFrames as HTML, contexts apart, bash."""
    out = run_interp(daemon)
    assert out["first"] == {"text": "42", "results": [{"main": True, "formats": [], "text": "42"}],
                            "stdout": "hello\n", "stderr": "", "error": None, "count": 1}
    assert out["kept"]["text"] == "41" and out["kept"]["count"] == 2
    assert out["streamed"] == {"seen": ["out:a\n", "res:2", "out:b\n", "res:3"], "count": 3}
    err = out["error"]["error"]
    assert err["name"] == "ValueError" and err["value"] == "bad" and "raise ValueError" in err["traceback"]
    assert out["killed"]["name"] == "TimeoutError", out["killed"]
    assert out["after_kill"]["text"] == "41", out["after_kill"]
    assert out["chart"] == {"formats": [["png"]], "pngMagic": "89504e47"}
    assert out["frame"] == {"html": True, "text": "   a\n0  1\n1  2"}
    assert out["context"] == {"language": "python", "cwd": "/tmp", "a": "'/tmp'", "b": "False", "listed": True,
                              "c": "False", "gone": True}
    assert out["bash"]["stdout"] == "42\n" and out["bash"]["error"] is None
    assert out["unknown_context"]["name"] == "NotFoundError"
    assert "no context nope" in out["unknown_context"]["threw"]
    assert out["both"]["name"] == "InvalidArgumentError"


def test_a_client_gone_mid_stream_cancels_what_fed_it(daemon):
    """A client that hangs up on a stream that has nothing to send yet (a cell in an endless
    loop) ends it at once: the cell is cancelled, the next one runs and sees the state of
    before."""
    box = create(daemon)
    hdrs = {"E2b-Sandbox-Id": box["sandboxID"], "E2b-Sandbox-Port": "49999",
            "X-Access-Token": box["envdAccessToken"], "Content-Type": "application/json"}

    def execute(code, timeout=30):
        c = HTTPConnection("127.0.0.1", daemon.port, timeout=timeout)
        c.request("POST", "/execute", json.dumps({"code": code}), hdrs)
        return c, c.getresponse()

    c, r = execute("x = 41")
    assert r.status == 200 and b"end_of_execution" in r.read()
    c.close()
    c, r = execute("while True: x += 1")
    assert r.status == 200
    time.sleep(0.5)
    c.close()  # the client goes; the cell would run for minutes
    t0 = time.monotonic()
    c, r = execute("x", timeout=20)
    lines = [json.loads(x) for x in r.read().splitlines()]
    c.close()
    assert time.monotonic() - t0 < 10
    assert {"type": "result", "is_main_result": True, "text": "41"} in lines, lines
    # The interpreter's own errors: no sandbox, a bad token, an unknown route.
    for extra, status in [({"E2b-Sandbox-Id": "nope"}, 502), ({"X-Access-Token": "bad"}, 401)]:
        c = HTTPConnection("127.0.0.1", daemon.port, timeout=10)
        c.request("POST", "/execute", json.dumps({"code": "1"}), dict(hdrs, **extra))
        assert c.getresponse().status == status
        c.close()
    assert http(daemon, "DELETE", f"/sandboxes/{box['sandboxID']}", None, {"X-API-KEY": KEY})[0] == 204


def test_unknown_template(node_sdk, daemon):
    out = run_case(daemon, "errors")
    assert "template 'no-such-template' not found" in out["template"]["threw"]


def test_template_is_an_image_of_the_store():
    """E2B's templateID names an image of the daemon's store; one it has not is E2B's 404."""
    import ocitool
    store = tempfile.mkdtemp(prefix="sbx-e2b-store-", dir="/var/tmp")
    os.chmod(store, 0o755)
    d = Daemon("--image-store", os.path.join(store, "s"))
    try:
        root = ocitool.host_root(os.path.join(d.dir, "root"))
        ocitool.write_oci_layout(os.path.join(d.dir, "layout"), [ocitool.tar_of_dir(root)], name="e2bimg:1")
        peer = d.peer()
        peer.result("image.import", {"path": os.path.join(d.dir, "layout")}, timeout=60)
        st, _, body = http(d, "POST", "/v2/sandboxes", json.dumps({"templateID": "e2bimg:1", "timeout": 60}).encode(),
                           {"Content-Type": "application/json", "X-API-KEY": KEY})
        assert st == 201, body
        box = json.loads(body)
        assert box["templateID"] == "e2bimg:1"
        r = peer.result("run", {"sandboxId": box["sandboxID"], "command": "cat /opt/app/hello.txt"})
        assert r["stdout"] == "hello from the image\n", r
        st, _, body = http(d, "POST", "/v2/sandboxes", json.dumps({"templateID": "e2bimg:2"}).encode(),
                           {"Content-Type": "application/json", "X-API-KEY": KEY})
        assert st == 404 and b"template 'e2bimg:2' not found" in body, body
        assert http(d, "DELETE", f"/sandboxes/{box['sandboxID']}", None, {"X-API-KEY": KEY})[0] == 204
    finally:
        code, err = d.stop()
        shutil.rmtree(store, ignore_errors=True)
    assert code == 0, err


def test_api_keys(node_sdk):
    d = Daemon("--api-key", "e2b_right", "--api-key", "e2b_other")
    try:
        out = run_case(d, "bad_key")
        assert out["create"]["name"] == "AuthenticationError", out
        out = run_case(d, "good_key", E2B_GOOD_KEY="e2b_other")
        assert out["create"] == "ok"
    finally:
        code, err = d.stop()
    assert code == 0, err


# ---------------------------------------------------------------- the wire's edges


def http(d, method, path, body=None, headers=None, timeout=30):
    req = urllib.request.Request(d.url + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def create(d):
    st, _, body = http(d, "POST", "/v2/sandboxes", json.dumps({"templateID": "base", "timeout": 120}).encode(),
                       {"Content-Type": "application/json", "X-API-KEY": KEY})
    assert st == 201, body
    return json.loads(body)


def envelope(msg, flags=0):
    raw = json.dumps(msg).encode() if not isinstance(msg, bytes) else msg
    return struct.pack(">BI", flags, len(raw)) + raw


def envelopes(data):
    out = []
    while data:
        flags, n = struct.unpack(">BI", data[:5])
        out.append((flags, json.loads(data[5:5 + n])))
        data = data[5 + n:]
    return out


def rpc(d, sb, method, msg, token=None, stream=False, raw=None, timeout=30):
    h = {"E2b-Sandbox-Id": sb["sandboxID"], "X-Access-Token": token or sb["envdAccessToken"],
         "Connect-Protocol-Version": "1",
         "Content-Type": "application/connect+json" if stream else "application/json"}
    body = raw if raw is not None else envelope(msg) if stream else json.dumps(msg).encode()
    return http(d, "POST", method, body, h, timeout)


def test_tokens_open_only_their_own_sandbox(daemon):
    a, b = create(daemon), create(daemon)
    try:
        st, _, body = rpc(daemon, a, "/filesystem.Filesystem/Stat", {"path": "/tmp"})
        assert st == 200 and json.loads(body)["entry"]["name"] == "tmp"
        st, _, body = rpc(daemon, a, "/filesystem.Filesystem/Stat", {"path": "/tmp"}, token=b["envdAccessToken"])
        assert st == 401 and json.loads(body)["code"] == "unauthenticated", body
        st, _, body = rpc(daemon, a, "/process.Process/Start",
                          {"process": {"cmd": "/bin/true"}}, token="nope", stream=True)
        assert st == 200 and envelopes(body) == [(2, {"error": {"code": "unauthenticated", "message":
                                                                 "X-Access-Token is not this sandbox's envdAccessToken"}})]
        st, _, _ = http(daemon, "GET", "/files?path=/etc/hostname",
                        headers={"E2b-Sandbox-Id": a["sandboxID"], "X-Access-Token": b["envdAccessToken"]})
        assert st == 401
        st, h, body = http(daemon, "GET", "/files?path=/etc/hostname",
                           headers={"E2b-Sandbox-Id": a["sandboxID"], "X-Access-Token": a["envdAccessToken"]})
        assert st == 200 and body == b"sandbox\n"
        # A sandbox's bytes on the origin the operator console shares: a download, never a page.
        assert h["X-Content-Type-Options"] == "nosniff" and h["Content-Disposition"] == "attachment"
        assert h["Content-Security-Policy"] == "sandbox"
    finally:
        for s in (a, b):
            http(daemon, "DELETE", f"/sandboxes/{s['sandboxID']}", headers={"X-API-KEY": KEY})


def test_polled_watcher(daemon):
    """E2B's synchronous Python SDK watches by polling: CreateWatcher, GetWatcherEvents (what
    came since the last poll), RemoveWatcher; a watcher is its sandbox's alone."""
    sb, other = create(daemon), create(daemon)
    try:
        st, _, body = rpc(daemon, sb, "/filesystem.Filesystem/CreateWatcher", {"path": "/tmp", "recursive": True})
        assert st == 200, body
        wid = json.loads(body)["watcherId"]
        st, _, body = rpc(daemon, sb, "/process.Process/Start",
                          {"process": {"cmd": "/bin/bash", "args": ["-c", "mkdir /tmp/d; echo x > /tmp/d/f; rm /tmp/d/f"]}},
                          stream=True)
        assert envelopes(body)[-1] == (2, {}), body
        evs = []
        for _ in range(50):
            st, _, body = rpc(daemon, sb, "/filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
            assert st == 200, body
            evs += [(e["type"], e["name"]) for e in json.loads(body)["events"]]
            if ("EVENT_TYPE_REMOVE", "d/f") in evs:
                break
            time.sleep(0.05)
        assert evs[:3] == [("EVENT_TYPE_CREATE", "d"), ("EVENT_TYPE_CREATE", "d/f"), ("EVENT_TYPE_WRITE", "d/f")], evs
        assert evs[-1] == ("EVENT_TYPE_REMOVE", "d/f"), evs
        st, _, body = rpc(daemon, sb, "/filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
        assert json.loads(body) == {"events": []}  # taken by the last poll
        st, _, body = rpc(daemon, other, "/filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
        assert st == 404 and json.loads(body)["code"] == "not_found"  # another sandbox's
        st, _, body = rpc(daemon, sb, "/filesystem.Filesystem/RemoveWatcher", {"watcherId": wid})
        assert (st, json.loads(body)) == (200, {})
        st, _, body = rpc(daemon, sb, "/filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
        assert st == 404
    finally:
        for s in (sb, other):
            http(daemon, "DELETE", f"/sandboxes/{s['sandboxID']}", headers={"X-API-KEY": KEY})


def test_signed_file_urls_and_envd_by_host(daemon):
    """/files without the token: a signature made with it (E2B's formula), and the sandbox named
    by a Host of 49983-ID.<domain> as E2B's own envd address is."""
    sb = create(daemon)
    try:
        def sig(path, op, exp=None):
            raw = f"{path}:{op}::{sb['envdAccessToken']}" + (f":{exp}" if exp else "")
            return "v1_" + base64.b64encode(hashlib.sha256(raw.encode()).digest()).decode().rstrip("=")
        host = {"Host": f"49983-{sb['sandboxID']}.localhost:{daemon.port}"}
        st, _, body = http(daemon, "GET", f"/files?path=/etc/hostname&signature={urllib.parse.quote(sig('/etc/hostname', 'read'))}",
                           headers=host)
        assert (st, body) == (200, b"sandbox\n")
        exp = int(time.time()) + 60
        st, _, _ = http(daemon, "GET", f"/files?path=/etc/hostname&signature_expiration={exp}&signature="
                        + urllib.parse.quote(sig("/etc/hostname", "read", exp)), headers=host)
        assert st == 200
        past = int(time.time()) - 5
        st, _, _ = http(daemon, "GET", f"/files?path=/etc/hostname&signature_expiration={past}&signature="
                        + urllib.parse.quote(sig("/etc/hostname", "read", past)), headers=host)
        assert st == 401  # expired
        st, _, _ = http(daemon, "GET", f"/files?path=/etc/hostname&signature={urllib.parse.quote(sig('/etc/hostname', 'write'))}",
                        headers=host)
        assert st == 401  # a write's signature does not read
        st, _, _ = http(daemon, "GET", f"/files?path=/etc/passwd&signature={urllib.parse.quote(sig('/etc/hostname', 'read'))}",
                        headers=host)
        assert st == 401  # another path's
    finally:
        http(daemon, "DELETE", f"/sandboxes/{sb['sandboxID']}", headers={"X-API-KEY": KEY})


def test_bad_input_gets_connect_errors_and_harms_nothing(daemon):
    sb = create(daemon)
    try:
        cases = [
            # a stream whose body is not one envelope
            dict(method="/process.Process/Start", msg=None, stream=True, raw=b"\x00\x00"),
            # an envelope that says more bytes than it has
            dict(method="/process.Process/Start", msg=None, stream=True, raw=struct.pack(">BI", 0, 99) + b"{}"),
            # compressed
            dict(method="/process.Process/Start", msg=None, stream=True, raw=envelope({}, flags=1)),
            # not JSON
            dict(method="/process.Process/Start", msg=None, stream=True, raw=envelope(b"{nope")),
            # no command
            dict(method="/process.Process/Start", msg={"process": {}}, stream=True),
        ]
        for c in cases:
            st, _, body = rpc(daemon, sb, c["method"], c["msg"], stream=c["stream"], raw=c.get("raw"))
            assert st == 200, body
            (flags, end), = envelopes(body)
            assert flags == 2 and end["error"]["code"] == "invalid_argument", (c, end)
        st, _, body = rpc(daemon, sb, "/process.Process/Nope", {})
        assert st == 501 and json.loads(body)["code"] == "unimplemented"
        st, _, body = rpc(daemon, sb, "/filesystem.Filesystem/Nope", {})
        assert st == 501 and json.loads(body)["code"] == "unimplemented"
        st, _, body = http(daemon, "POST", "/filesystem.Filesystem/Stat", b"\x0a\x02/a",
                           {"E2b-Sandbox-Id": sb["sandboxID"], "X-Access-Token": sb["envdAccessToken"],
                            "Content-Type": "application/proto"})
        assert st == 501 and "JSON codec" in json.loads(body)["message"]
        st, _, body = rpc(daemon, sb, "/filesystem.Filesystem/Stat", {"path": "/no/such"})
        assert st == 404 and json.loads(body)["code"] == "not_found"
        st, _, body = rpc(daemon, sb, "/process.Process/SendInput", {"process": {"pid": 99999}, "input": {"stdin": ""}})
        assert st == 404 and json.loads(body)["code"] == "not_found"
        # A body past the limit: refused, the connection and the daemon fine.
        st, _, _ = rpc(daemon, sb, "/filesystem.Filesystem/Stat", None, raw=b"{" + b" " * (9 << 20) + b"}")
        assert st == 413
        # An unknown sandbox: 502, which the SDK reads as "gone".
        st, _, _ = http(daemon, "GET", "/health", headers={"E2b-Sandbox-Id": "0" * 32})
        assert st == 502
        st, _, _ = http(daemon, "GET", "/health", headers={"E2b-Sandbox-Id": sb["sandboxID"]})
        assert st == 204
        # Bad REST bodies.
        st, _, body = http(daemon, "POST", "/v2/sandboxes", b"[1]", {"X-API-KEY": KEY})
        assert st == 400 and json.loads(body)["code"] == 400
        st, _, body = http(daemon, "GET", "/v3/what", headers={"X-API-KEY": KEY})
        assert st == 404 and json.loads(body)["code"] == 404
        # Still fine.
        st, _, body = rpc(daemon, sb, "/process.Process/Start",
                          {"process": {"cmd": "/bin/bash", "args": ["-c", "echo fine"]}}, stream=True)
        evs = envelopes(body)
        assert evs[0][1]["event"]["start"]["pid"] > 0
        assert any(e[1].get("event", {}).get("data", {}).get("stdout") == "ZmluZQo=" for e in evs), evs
        assert evs[-1] == (2, {})
    finally:
        http(daemon, "DELETE", f"/sandboxes/{sb['sandboxID']}", headers={"X-API-KEY": KEY})


def test_a_sandbox_killed_mid_stream_ends_the_stream(daemon):
    sb = create(daemon)
    s = socket.create_connection(("127.0.0.1", daemon.port), timeout=30)
    body = envelope({"process": {"cmd": "/bin/bash", "args": ["-c", "echo go; sleep 100"]}})
    s.sendall(b"POST /process.Process/Start HTTP/1.1\r\nHost: x\r\nContent-Type: application/connect+json\r\n"
              + f"E2b-Sandbox-Id: {sb['sandboxID']}\r\nX-Access-Token: {sb['envdAccessToken']}\r\n".encode()
              + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    got = b""
    while b"Z28K" not in got:  # "go\n"
        chunk = s.recv(65536)
        assert chunk, got
        got += chunk
    st, _, _ = http(daemon, "DELETE", f"/sandboxes/{sb['sandboxID']}", headers={"X-API-KEY": KEY})
    assert st == 204
    while not got.endswith(b"0\r\n\r\n"):  # the chunked answer ends
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    s.close()
    assert b"\x02\x00\x00\x00" in got  # an end-of-stream envelope came
    st, _, _ = http(daemon, "GET", "/health", headers={"E2b-Sandbox-Id": sb["sandboxID"]})
    assert st == 502


@pytest.mark.parametrize("args, words", [
    (["--http", "127.0.0.1:nope"], "not PORT, HOST:PORT or [IPV6]:PORT"),
    (["--http", "example.com:3000"], "not PORT, HOST:PORT or [IPV6]:PORT"),
    (["--api-key", "k"], "--api-key goes with --http ADDR"),
    (["--http", "127.0.0.1:0", "--api-key", ""], "--api-key: at most 64 keys of 1 to 256 bytes"),
    (["--http", "127.0.0.1:0", "--api-key", "k" * 257], "--api-key: at most 64 keys of 1 to 256 bytes"),
])
def test_bad_http_flags_are_refused(tmp_path, args, words):
    cp = subprocess.run([SBX, "serve", "--socket", str(tmp_path / "s.sock"), "--pool", "0", *args],
                        capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    assert cp.returncode in (1, 2) and words in cp.stderr, cp
    assert not (tmp_path / "s.sock").exists()


def test_a_port_in_use_is_said(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        port = taken.getsockname()[1]
        cp = subprocess.run([SBX, "serve", "--socket", str(tmp_path / "s.sock"), "--pool", "0", "--http",
                             f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=20,
                            stdin=subprocess.DEVNULL)
        assert cp.returncode == 1 and f"--http 127.0.0.1:{port}: Address already in use" in cp.stderr, cp
    finally:
        taken.close()


def test_a_polled_watcher_keeps_at_most_its_bound(daemon):
    """A watcher nobody polls keeps SBX_E2B_WATCHER_EVENTS (4096) events, not all of them."""
    sb = create(daemon)
    try:
        st, _, body = rpc(daemon, sb, "/filesystem.Filesystem/CreateWatcher", {"path": "/tmp"})
        wid = json.loads(body)["watcherId"]
        st, _, body = rpc(daemon, sb, "/process.Process/Start",
                          {"process": {"cmd": "/bin/bash", "args": ["-c", "mkdir /tmp/d && cd /tmp && "
                                                                    "for i in $(seq 2500); do mkdir d$i; rmdir d$i; done"]}},
                          stream=True, timeout=300)  # 5,000 processes: minutes on a loaded machine
        assert envelopes(body)[-1] == (2, {}), body
        total = []

        def settled():
            st, _, body = rpc(daemon, sb, "/filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
            got = json.loads(body)["events"]
            total.extend(got)
            return not got and total
        assert wait_until(settled, 10)
        assert len(total) == 4096, len(total)  # 5001 happened
    finally:
        http(daemon, "DELETE", f"/sandboxes/{sb['sandboxID']}", headers={"X-API-KEY": KEY})


def multipart(files):
    """A multipart/form-data body of (name, bytes) file parts, and its Content-Type."""
    boundary = "sbx-test-boundary-7d1f"
    out = b""
    for name, data in files:
        out += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
                "Content-Type: application/octet-stream\r\n\r\n").encode() + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


@pytest.mark.parametrize("sizes", [
    pytest.param([(4 << 20) + 100 * 1024, 1000], id="first-just-past-a-part"),
    pytest.param([(4 << 20) + 3, 7, 5, (4 << 20) + 9, 0, 11], id="several-ending-within-one-read"),
    pytest.param([9 << 20, 3 << 20], id="several-parts-each"),
])
def test_files_form_of_several_files_writes_every_byte(daemon, sizes):
    # A file of a form that ends while the part before it is still being written keeps its last
    # bytes apart until that write is answered: each file gets exactly its own bytes.
    sb = create(daemon)
    files = [(f"/tmp/f{i}.bin", os.urandom(n)) for i, n in enumerate(sizes)]
    body, ct = multipart(files)
    auth = {"E2b-Sandbox-Id": sb["sandboxID"], "X-Access-Token": sb["envdAccessToken"]}
    st, _, out = http(daemon, "POST", "/files", body, {**auth, "Content-Type": ct}, timeout=120)
    assert st == 200, out
    assert [e["path"] for e in json.loads(out)] == [p for p, _ in files]
    for path, data in files:
        st, _, got = http(daemon, "GET", f"/files?path={path}", headers=auth, timeout=120)
        assert st == 200 and len(got) == len(data) and got == data, (path, st, len(got), len(data))
    st, _, _ = http(daemon, "DELETE", f"/sandboxes/{sb['sandboxID']}", headers={"X-API-KEY": KEY})
    assert st in (200, 204)


def test_files_uploads_left_unfinished_end_with_their_request(daemon):
    # A client that goes away in the middle of a large file leaves an upload begun: it ends
    # with the request, so that more of them than a sandbox may hold open (16) leave room for
    # the next one.
    sb = create(daemon)
    auth = {"E2b-Sandbox-Id": sb["sandboxID"], "X-Access-Token": sb["envdAccessToken"]}
    head = (f"POST /files?path=/tmp/cut.bin HTTP/1.1\r\nHost: 127.0.0.1\r\nE2b-Sandbox-Id: {sb['sandboxID']}\r\n"
            f"X-Access-Token: {sb['envdAccessToken']}\r\nContent-Type: application/octet-stream\r\n"
            f"Content-Length: {12 << 20}\r\n\r\n").encode()
    chunk = os.urandom(1 << 20)
    for _ in range(17):
        s = socket.create_connection(("127.0.0.1", daemon.port))
        s.sendall(head)
        for _ in range(6):
            s.sendall(chunk)
        time.sleep(0.05)  # the first part's files.write goes out
        s.close()
    data = os.urandom((4 << 20) + 5)
    st, _, out = http(daemon, "POST", "/files?path=/tmp/after.bin", data,
                      {**auth, "Content-Type": "application/octet-stream"}, timeout=120)
    assert st == 200, out
    st, _, got = http(daemon, "GET", "/files?path=/tmp/after.bin", headers=auth, timeout=120)
    assert st == 200 and got == data
    # None of the cut ones was put in place.
    st, _, _ = http(daemon, "GET", "/files?path=/tmp/cut.bin", headers=auth)
    assert st == 404
