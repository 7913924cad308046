"""The operator console (`sbx serve --http ... --console-token`, console/): its pages driven by
Debian's chromium through playwright-core (tests/console/console.mjs, pinned in
tests/console/package.json, installed there by this test), each case printing what it saw as
JSON for the assertions here; its HTTP edges (the token as a bearer, no cookie, X-Sbx-Console, Origin, Host,
the method allowlist) are checked here with plain HTTP."""
import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
from http.client import HTTPConnection
from pathlib import Path

import pytest

from conftest import HttpDaemon, npm_packages, wait_until

REPO = Path(__file__).resolve().parents[2]
SBX = os.environ.get("SBX_BIN", str(REPO / "build" / "src" / "cli" / "sbx"))
NODE_DIR = REPO / "tests" / "console"
ASSETS_DIR = REPO / "console"
CHROMIUM = os.environ.get("SBX_CHROMIUM", "/usr/bin/chromium")
TOKEN = "console-test-token-0123456789abcdef"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes need root here"),
    pytest.mark.skipif(not os.path.exists(SBX), reason=f"{SBX} not built"),
]


class Daemon(HttpDaemon):
    """The daemon with --console-token TOKEN (none: it makes one and prints the console's
    address with it, which err() shows)."""

    def __init__(self, *flags, token=TOKEN):
        super().__init__(SBX, *(["--console-token", token] if token else []), *flags, prefix="sbx-console-")
        self.token = token

    def connect(self):
        return self.peer()


@pytest.fixture(scope="module")
def browser():
    """node, npm and chromium, playwright-core in tests/console and xterm in console/."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"no chromium at {CHROMIUM} (apt-get install chromium, or set SBX_CHROMIUM)")
    npm_packages(NODE_DIR, "playwright-core", needs="the console's browser tests")
    npm_packages(ASSETS_DIR, "@xterm/xterm", needs="the console's browser tests")
    shots = os.environ.get("SBX_CONSOLE_SHOTS") or tempfile.mkdtemp(prefix="sbx-console-shots-")
    os.makedirs(shots, exist_ok=True)
    return shots


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    code, err = d.stop()
    assert code == 0, err


@pytest.fixture(scope="module")
def peer(daemon):
    return daemon.connect()


def make_sandbox(peer, label, **extra):
    """A sandbox that outlives the connection that made it (the browser case's own socket
    connection comes and goes)."""
    return peer.result("sandbox.create", {"persist": True, "label": label, **extra}, timeout=60)["sandboxId"]


def write_file(peer, sid, path, data):
    peer.result("files.write", {"sandboxId": sid, "path": path, "data": base64.b64encode(data).decode()})


def listed(peer):
    return {s["sandboxId"]: s for s in peer.result("sandbox.list")["sandboxes"]}


def run_case(d, shots, name, **env):
    e = dict(os.environ, SBX_CONSOLE_URL=d.url, SBX_CONSOLE_TOKEN=d.token, SBX_SOCKET=d.sock,
             SBX_CONSOLE_SHOTS=shots, SBX_CHROMIUM=CHROMIUM, **env)
    cp = subprocess.run(["node", str(NODE_DIR / "console.mjs"), name], stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, timeout=240, env=e, cwd=NODE_DIR)
    assert cp.returncode == 0, cp.stderr.decode()
    out = json.loads(cp.stdout)
    assert not out.get("fatal"), f"{out['fatal']}\n{json.dumps(out, indent=1)[:4000]}\n{d.err()[-2000:]}"
    # A dialog is what injected script would show; the page itself never opens one.
    assert out["dialogs"] == [], out["dialogs"]
    assert out["pageErrors"] == [], out["pageErrors"]
    csp = [m for m in out["consoleErrors"] if "Content Security Policy" in m]
    assert csp == [], csp
    assert out["failedRequests"] == [], out["failedRequests"]
    with open(out["shot"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", out["shot"]
    return out


def http(d, method, path, body=None, headers=None):
    """(status, headers, body) without following redirects."""
    c = HTTPConnection("127.0.0.1", d.port, timeout=30)
    try:
        c.request(method, path, body, headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def api(d, method, params=None, headers=None):
    h = {"Content-Type": "application/json", "X-Sbx-Console": "1", "Authorization": f"Bearer {d.token}"}
    h.update(headers or {})
    return http(d, "POST", "/console/api/rpc", json.dumps({"method": method, "params": params or {}}).encode(),
                {k: v for k, v in h.items() if v is not None})


# ---------------------------------------------------------------- the pages


def test_a_new_sandbox_shows_in_the_list_within_2s(browser, daemon, peer):
    out = run_case(daemon, browser, "list")
    sid = out["sandboxId"]
    assert out["url"] == f"{daemon.url}/console/#/", out["url"]  # the token is gone from the address
    assert out["documentCookie"] == "" and out["cookies"] == []  # no cookie: none for a sandbox's port to get
    assert out["kept"] == daemon.token  # the tab's own storage
    print(f"new sandbox listed after {out['appearedMs']} ms")
    assert out["appearedMs"] <= 2000, out["appearedMs"]
    assert out["label"] == "console-list"
    assert out["sparkPoints"]["cpu"] >= 1 and out["sparkPoints"]["mem"] >= 1, out["sparkPoints"]
    assert re.search(r"sandboxes\s*\d+", out["health"]), out["health"]
    assert out["hashAfterClick"] == f"#/sandbox/{sid}"
    assert sid in listed(peer)
    peer.result("sandbox.destroy", {"sandboxId": sid})


def test_a_log_grows_while_its_process_runs(browser, daemon, peer):
    sid = make_sandbox(peer, "console-output")
    out = run_case(daemon, browser, "output", SBX_CONSOLE_SANDBOX=sid)
    seen = out["seen"]
    assert sorted(seen) == [f"tick {i}" for i in range(1, 6)], out
    assert out["atTick2"] == {"status": "running", "alive": True}, out  # seen before the process ended
    assert seen["tick 5"] - seen["tick 2"] >= 1500, seen  # each shown as it came, not at the end
    assert out["logText"] == "".join(f"tick {i}\n" for i in range(1, 6)), out["logText"]
    assert "exited" in out["logState"] and "exit 0" in out["logState"], out["logState"]
    peer.result("sandbox.destroy", {"sandboxId": sid})


def test_terminal(browser, daemon, peer):
    sid = make_sandbox(peer, "console-terminal")
    out = run_case(daemon, browser, "terminal", SBX_CONSOLE_SANDBOX=sid)
    assert out["prompt"], out  # bash -i said something before we typed
    assert out["hiLine"] is True, out["rowsAtHi"]
    assert any(r.rstrip().endswith("echo hi") for r in out["rowsAtHi"]), out["rowsAtHi"]  # the echo of what was typed
    assert out["titleBefore"] == "sbx console"
    assert out["titleAfter"] == out["titleBefore"] == out["titleEnd"], out  # OSC 0 did not reach the page
    assert out["process"] == {"command": "exec bash -i", "pty": True, "alive": True, "status": "running"}, out
    assert None not in out["stty"], out["stty"]
    first, second = ([int(x) for x in s.split()] for s in out["stty"])
    assert first[0] >= 5 and first[1] >= 20, out["stty"]
    assert second[1] < first[1], out["stty"]  # a narrower page: fewer columns, told with process.resize
    assert out["aliveAfterClose"] is False  # closing the panel killed the shell
    procs = {p["processId"]: p for p in peer.result("process.list", {"sandboxId": sid})["processes"]}
    assert procs[out["processId"]]["alive"] is False and procs[out["processId"]]["status"] in ("killed", "exited")
    peer.result("sandbox.destroy", {"sandboxId": sid})


def test_sandbox_text_is_never_markup(browser, daemon, peer):
    sid = make_sandbox(peer, "<b>x</b>", metadata={"k": "<b>x</b>"})
    out = run_case(daemon, browser, "xss", SBX_CONSOLE_SANDBOX=sid)
    assert out["rowLabel"] == "<b>x</b>", out
    assert out["rowMetadata"] == "k=<b>x</b>", out
    assert out["elementsInRow"] == 0
    assert out["detailLabel"] == "<b>x</b>"
    assert out["logText"] == "<img src=x onerror=alert(1)>\n<script>alert(2)</script>\n", out["logText"]
    assert out["elementsInLog"] == 0
    assert out["commandCell"] == "echo '<img src=x onerror=alert(1)>'; echo '<script>alert(2)</script>'"
    assert out["labelCell"].startswith("<i>lbl</i>"), out["labelCell"]
    assert out["fileEntry"] == "<img src=x onerror=alert(3)>.txt", out["fileEntry"]
    assert out["fileView"] == "<script>alert(4)</script>\n", out["fileView"]
    assert out["elementsInFiles"] == 0 and out["imgInPage"] == 0
    assert out["scripts"] == ["vendor/xterm.js", "console.js"], out["scripts"]  # none added
    peer.result("sandbox.destroy", {"sandboxId": sid})


def test_actions(browser, daemon, peer):
    sid = make_sandbox(peer, "console-actions")
    out = run_case(daemon, browser, "actions", SBX_CONSOLE_SANDBOX=sid)
    assert out["statusBefore"].startswith("running"), out
    assert out["statusAfterKill"].startswith("killed"), out
    assert out["killed"] == {"status": "killed", "alive": False}, out
    assert out["pausedSocket"] is True and out["pausedInList"] is True
    assert out["resumedSocket"] is True
    child = out["child"]
    assert re.fullmatch(r"[0-9a-f]{32}", child) and child != sid, child
    assert out["childForkOfSocket"] == sid and out["childForkOfList"] == sid and out["childParentLink"] == sid, out
    assert out["afterNo"] is True  # "no" kept it
    assert out["hashAfterDestroy"] == "#/" and out["rowGone"] is True and out["parentRow"] is True, out
    assert out["childInSocketList"] is False
    now = listed(peer)
    assert child not in now and sid in now and now[sid]["paused"] is False
    peer.result("sandbox.destroy", {"sandboxId": sid})


def test_files(browser, daemon, peer):
    sid = make_sandbox(peer, "console-files")
    write_file(peer, sid, "/home/user/console-file.txt", b"hello from the files panel\n<i>not markup</i>\n")
    write_file(peer, sid, "/home/user/sub/inner.txt", b"inner\n")
    write_file(peer, sid, "/home/user/big.txt", b"x" * (100 * 1024))
    out = run_case(daemon, browser, "files", SBX_CONSOLE_SANDBOX=sid)
    entries = [tuple(e) for e in out["entries"]]
    for e in [("console-file.txt", "file"), ("sub", "dir"), ("big.txt", "file")]:
        assert e in entries, entries
    assert entries.index(("sub", "dir")) < entries.index(("big.txt", "file"))  # directories first
    assert out["breadcrumb"].replace(" ", "") == "/home/user", out["breadcrumb"]
    assert out["fileView"] == "hello from the files panel\n<i>not markup</i>\n"
    assert "/home/user/console-file.txt" in out["fileHead"]
    assert out["bigShown"] == 64 * 1024  # at most 64 KiB as text
    assert "100 KiB" in out["bigHead"], out["bigHead"]
    assert [tuple(e) for e in out["subEntries"]] == [("inner.txt", "file")]
    assert out["subBreadcrumb"].replace(" ", "") == "/home/user/sub"
    assert [tuple(e) for e in out["backEntries"]] == entries  # the breadcrumb led back
    assert out["backBreadcrumb"] == out["breadcrumb"]
    peer.result("sandbox.destroy", {"sandboxId": sid})


def test_audit_page(browser):
    d = tempfile.mkdtemp(prefix="sbx-console-audit-")
    daemon = Daemon("--audit", os.path.join(d, "audit.log"))
    try:
        p = daemon.connect()
        sid = make_sandbox(p, "console-audit")
        write_file(p, sid, "/home/user/audited.txt", b"x")
        out = run_case(daemon, browser, "audit", SBX_CONSOLE_AUDIT_TYPE="files.write")
        events = [json.loads(t) for t in out["events"]]  # each row is one event's JSON, as text
        assert all("type" in e and "ts" in e for e in events), events
        assert any(e["type"] == "sandbox.create" and e.get("sandboxId") == sid for e in events), events
        assert any(e["type"] == "files.write" and e.get("sandboxId") == sid for e in events), events
        assert out["health"] and "audit log is off" not in out["health"], out["health"]
        st, _, body = api(daemon, "audit.verify")
        verified = json.loads(body)["result"]
        assert st == 200 and verified["enabled"] is True and verified["ok"] is True, verified
        assert out["chainOk"] is True and out["chain"].startswith("chain ok: "), out["chain"]
        lines = int(re.match(r"chain ok: (\d+) lines", out["chain"]).group(1))
        assert 0 < lines <= verified["lines"], (out["chain"], verified)
        assert out["chainBefore"] == "not verified yet"
        p.result("sandbox.destroy", {"sandboxId": sid})
    finally:
        code, err = daemon.stop()
        shutil.rmtree(d, ignore_errors=True)
    assert code == 0, err


# ---------------------------------------------------------------- the HTTP edges


def test_sign_in_asks_for_the_token(browser, daemon):
    out = run_case(daemon, browser, "signin")
    assert out["listWithout"] is False and out["askedAgain"] is True and out["listWith"] is True, out


def test_the_page_is_public_and_strict(daemon):
    st, h, body = http(daemon, "GET", "/console/")
    assert st == 200 and h["content-type"].startswith("text/html") and b'data-testid="health"' in body
    assert "set-cookie" not in h
    csp = h["content-security-policy"]
    for part in ("default-src 'self'", "object-src 'none'", "frame-ancestors 'none'"):
        assert part in csp, csp
    assert "unsafe-inline" not in csp.split("script-src")[-1].split(";")[0] and "unsafe-eval" not in csp, csp
    for path, ctype in [("/console/console.js", "javascript"), ("/console/console.css", "text/css"),
                        ("/console/vendor/xterm.js", "javascript"), ("/console/vendor/xterm.css", "text/css")]:
        st, h, body = http(daemon, "GET", path)
        assert st == 200 and ctype in h["content-type"] and body, (path, st, h)
    st, _, body = http(daemon, "GET", "/console/vendor/xterm.js")
    assert st == 200 and body.startswith(b"!function")


def test_the_api_needs_the_bearer(daemon):
    st, h, _ = http(daemon, "GET", f"/console/?token={daemon.token}")
    assert st == 200 and "set-cookie" not in h, (st, h)  # a token in a query sets nothing
    st, _, _ = api(daemon, "health", headers={"Authorization": None})
    assert st == 401
    st, _, _ = api(daemon, "health", headers={"Authorization": None, "Cookie": f"sbx_console={daemon.token}"})
    assert st == 401  # a cookie is not the token's way in
    st, _, _ = api(daemon, "health", headers={"Authorization": "Bearer wrong-token"})
    assert st == 401
    st, _, _ = http(daemon, "GET", "/console/api/stream?method=process.stream&params=%7B%7D")
    assert st == 401
    st, _, _ = api(daemon, "health", headers={"Host": f"attacker.example:{daemon.port}"})
    assert st == 421  # DNS rebinding: another name for this address


def test_rpc_needs_its_header_and_its_origin(daemon):
    st, _, body = api(daemon, "health")
    assert st == 200 and "uptimeMs" in json.loads(body)["result"], body
    st, _, _ = api(daemon, "health", headers={"X-Sbx-Console": None})
    assert st == 403
    st, _, _ = api(daemon, "health", headers={"Origin": "http://evil.example"})
    assert st == 403
    st, _, _ = api(daemon, "health", headers={"Origin": f"http://127.0.0.1:{daemon.port + 1}"})
    assert st == 403
    st, _, _ = api(daemon, "health", headers={"Origin": f"http://127.0.0.1:{daemon.port}"})
    assert st == 200
    st, _, body = api(daemon, "health", headers={"Authorization": f"Bearer {daemon.token}"})
    assert st == 200, body


def test_rpc_allows_only_the_console_methods(daemon, peer):
    sid = make_sandbox(peer, "console-allowlist")
    for method in ("sandbox.create", "run", "files.write", "kill", "persistence.export", "no.such"):
        st, _, body = api(daemon, method, {"sandboxId": sid, "command": "true"})
        assert st == 200 and json.loads(body)["error"]["code"] == -32601, (method, body)
    st, _, body = api(daemon, "sandbox.list")
    assert sid in [s["sandboxId"] for s in json.loads(body)["result"]["sandboxes"]]  # every sandbox, not the caller's
    st, _, body = api(daemon, "sandbox.metrics", {"sandboxId": sid})
    m = json.loads(body)["result"]
    assert m["sandboxId"] == sid and m["intervalMs"] == 5000 and "current" in m, m
    st, _, body = api(daemon, "files.read", {"sandboxId": sid, "path": "/home/user/nope"})
    assert "error" in json.loads(body), body
    peer.result("sandbox.destroy", {"sandboxId": sid})


def test_without_a_token_the_daemon_prints_the_console_url():
    d = Daemon(token=None)
    try:
        assert wait_until(lambda: "console: http" in d.err(), 10), d.err()
        m = re.search(r"console: (http://127\.0\.0\.1:(\d+)/console/#token=(\S+))", d.err())
        assert m and int(m.group(2)) == d.port, d.err()
        d.token = m.group(3)
        st, _, _ = api(d, "health")
        assert st == 200
    finally:
        code, err = d.stop()
    assert code == 0, err
