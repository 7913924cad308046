"""What an operator sees of a daemon without a browser: each sandbox's metrics over time
(sandbox.metrics), GET /metrics parsed by Prometheus' own parser (python3-prometheus-client),
the console's routes and their refusals over plain HTTP, what an operator connection may see and
do, the audit trail's recent events and chain check, session.list's running command and
sandbox.list's forkOf."""
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import HttpDaemon, wait_until

REPO = Path(__file__).resolve().parents[2]
SBX = os.environ.get("SBX_BIN", str(REPO / "build" / "src" / "cli" / "sbx"))
TOKEN = "console-token-0123456789"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes need root here"),
    pytest.mark.skipif(not os.path.exists(SBX), reason=f"{SBX} not built"),
]


class Daemon(HttpDaemon):
    def __init__(self, *flags):
        super().__init__(SBX, *flags, prefix="sbx-metrics-")


def http(d, path, method="GET", body=None, headers=None):
    req = urllib.request.Request(d.url + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def console_call(d, method, params=None, **extra):
    headers = {"Authorization": f"Bearer {TOKEN}", "X-Sbx-Console": "1", "Content-Type": "application/json", **extra}
    st, _, body = http(d, "/console/api/rpc", "POST", json.dumps({"method": method, "params": params or {}}).encode(),
                       headers)
    return st, json.loads(body) if body and st == 200 else None


@pytest.fixture(scope="module")
def daemon():
    d = Daemon("--console-token", TOKEN)
    yield d
    code, err = d.stop()
    assert code == 0, err


def test_sandbox_metrics_over_time(daemon):
    p = daemon.peer()
    sid = p.result("sandbox.create", {})["sandboxId"]
    p.result("run", {"sandboxId": sid, "command": "head -c 3000000 /dev/zero > /home/user/f; for i in $(seq 60000); do :; done"})
    # Idle from here: parked (after 5 s), its idle worker gone first (which takes a little CPU),
    # then two samples at least (every 5 s), nothing running.
    assert wait_until(lambda: p.result("health")["parked"] >= 1, 30, 0.2)
    time.sleep(11)
    m = p.result("sandbox.metrics", {"sandboxId": sid})
    assert m["intervalMs"] == 5000 and m["memoryLimitBytes"] == 512 << 20 and m["fsLimitBytes"] == 256 << 20
    s = m["samples"]
    assert len(s) >= 2, m
    ts = [x["timestamp"] for x in s]
    assert ts == sorted(ts) and all(4000 <= b - a <= 6000 for a, b in zip(ts, ts[1:])), ts
    last = s[-1]
    assert last["fsBytes"] >= 3000000 and last["fsFiles"] >= 1, last  # the file in its tmpfs
    assert last["cpuUsec"] > 0 and last["memoryBytes"] > 0 and last["pids"] >= 1 and last["runs"] == 1
    # Idle since: its samples are all the same figures, and its CPU share is nothing.
    assert s[-1]["cpuUsec"] == s[-2]["cpuUsec"] and s[-1]["cpuUsedPct"] == 0
    assert m["current"]["fsBytes"] == last["fsBytes"] and m["current"]["timestamp"] >= last["timestamp"]
    # A range: only the samples inside it; an empty one before it was made.
    mid = p.result("sandbox.metrics", {"sandboxId": sid, "start": ts[-1], "end": ts[-1]})
    assert [x["timestamp"] for x in mid["samples"]] == [ts[-1]]
    assert p.result("sandbox.metrics", {"sandboxId": sid, "end": ts[0] - 60000})["samples"] == []
    # Bad ranges are refused and change nothing.
    e = p.error("sandbox.metrics", {"sandboxId": sid, "start": 10, "end": 5})
    assert e["code"] == -32602 and "after" in e["message"]
    assert p.error("sandbox.metrics", {"sandboxId": sid, "start": "yesterday"})["code"] == -32602
    assert p.error("sandbox.metrics", {"sandboxId": "f" * 32})["code"] != 0
    assert p.result("run", {"sandboxId": sid, "command": "echo still"})["stdout"] == "still\n"
    p.result("sandbox.destroy", {"sandboxId": sid})


def test_prometheus_endpoint(daemon):
    from prometheus_client.parser import text_string_to_metric_families
    p = daemon.peer()
    sid = p.result("sandbox.create", {})["sandboxId"]
    p.result("run", {"sandboxId": sid, "command": "head -c 2000000 /dev/zero > /tmp/f"})
    assert wait_until(lambda: p.result("server.metrics")["sandboxes"][0]["sample"] is not None, 12, 0.5)
    st, headers, body = http(daemon, "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert st == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4"), (st, headers)
    fams = {f.name: f for f in text_string_to_metric_families(body.decode())}
    for name in ("sbx_sandboxes", "sbx_uptime_seconds", "sbx_runs", "sbx_lane_slots", "sbx_audit_dropped",
                 "sbx_sandbox_cpu_seconds", "sbx_sandbox_memory_bytes", "sbx_sandbox_fs_bytes", "sbx_sandbox_runs"):
        assert name in fams, (name, sorted(fams))
    assert fams["sbx_runs"].type == "counter" and fams["sbx_sandbox_memory_bytes"].type == "gauge"
    mine = {f.name: [x for x in f.samples if x.labels.get("sandbox") == sid] for f in fams.values()}
    assert mine["sbx_sandbox_fs_bytes"][0].value >= 2000000
    assert mine["sbx_sandbox_runs"][0].value == 1 and mine["sbx_sandbox_cpu_seconds"][0].value > 0
    assert [x.value for x in fams["sbx_sandboxes"].samples] == [1]
    assert [x.value for x in fams["sbx_pool_target"].samples] == [0]  # the test's daemon: --pool 0
    if shutil.which("promtool"):
        cp = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, timeout=30)
        assert cp.returncode == 0, cp.stdout.decode() + cp.stderr.decode()
    # The token is asked for: none, a wrong one, an E2B-style header alone.
    assert http(daemon, "/metrics")[0] == 401
    assert http(daemon, "/metrics", headers={"Authorization": "Bearer wrong-token-000000000"})[0] == 401
    assert http(daemon, "/metrics", headers={"X-API-KEY": TOKEN})[0] == 401
    p.result("sandbox.destroy", {"sandboxId": sid})


def test_metrics_without_sandbox_series():
    d = Daemon("--console-token", TOKEN, "--metrics-no-sandboxes")
    try:
        p = d.peer()
        p.result("sandbox.create", {})
        st, _, body = http(d, "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert st == 200 and b"sbx_sandboxes 1\n" in body and b"sbx_sandbox_" not in body, body
    finally:
        code, err = d.stop()
    assert code == 0, err


def test_console_routes_refuse_and_serve(daemon):
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    # The page's files are public and strict; what they call is not.
    st, headers, body = http(daemon, "/console/")
    assert st == 200 and b"<script" in body and "script-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Frame-Options"] == "DENY" and "Set-Cookie" not in headers
    assert http(daemon, "/console/console.js")[0] == 200
    assert http(daemon, "/console/nothing-here")[0] == 404
    st, _, body = http(daemon, "/console/api/rpc", "POST", b'{"method":"health"}',
                       {"Content-Type": "application/json", "X-Sbx-Console": "1"})
    assert st == 401  # from the request's head: its body is never read
    assert console_call(daemon, "health", Authorization="Bearer not-the-token-0000000")[0] == 401
    # No cookie is set, and none is taken: a browser would send it to every port of the host.
    st, headers, _ = http(daemon, f"/console/?token={TOKEN}")
    assert st == 200 and "Set-Cookie" not in headers
    st, _, _ = http(daemon, "/console/api/rpc", "POST", b'{"method":"health"}',
                    {"Cookie": f"sbx_console={TOKEN}", "X-Sbx-Console": "1", "Content-Type": "application/json"})
    assert st == 401
    # Another name for this address (DNS rebinding) is not the console's, token or not.
    for host in ("rebind.example:%d" % daemon.port, "127.0.0.1:1", "localhost"):
        st, _, _ = http(daemon, "/console/api/rpc", "POST", b'{"method":"health"}',
                        {**bearer, "Host": host, "X-Sbx-Console": "1", "Content-Type": "application/json"})
        assert st == 421, host
    assert http(daemon, "/metrics", headers={**bearer, "Host": "rebind.example"})[0] == 421
    assert http(daemon, "/console/", headers={"Host": "rebind.example"})[0] == 421
    for host in (f"localhost:{daemon.port}", f"127.0.0.1:{daemon.port}"):
        assert http(daemon, "/metrics", headers={**bearer, "Host": host})[0] == 200, host
    # Calls: a foreign origin, a cross-site fetch, no marker header are refused before anything runs.
    assert console_call(daemon, "health", Origin="http://evil.example")[0] == 403
    assert console_call(daemon, "health", **{"Sec-Fetch-Site": "cross-site"})[0] == 403
    st, _, _ = http(daemon, "/console/api/rpc", "POST", b"method=health",
                    {**bearer, "Content-Type": "application/x-www-form-urlencoded"})
    assert st == 403
    st, _, _ = http(daemon, "/console/api/rpc", "POST", b"method=health",
                    {**bearer, "X-Sbx-Console": "1", "Content-Type": "application/x-www-form-urlencoded"})
    assert st == 415
    st, _, _ = http(daemon, "/console/api/rpc", "POST", b"x" * (1024 * 1024 + 1),
                    {**bearer, "X-Sbx-Console": "1", "Content-Type": "application/json"})
    assert st == 413
    st, ans = console_call(daemon, "health", Origin=daemon.url)
    assert st == 200 and ans["result"]["mode"] == "namespaces"
    # Methods outside the console's table: not called.
    st, ans = console_call(daemon, "run", {"command": "touch /tmp/should-not"})
    assert st == 200 and ans["error"]["code"] == -32601
    st, ans = console_call(daemon, "kill")
    assert ans["error"]["code"] == -32601 and daemon.proc.poll() is None
    st, _, body = http(daemon, "/console/api/rpc", "POST", b"[1,2", {**bearer, "X-Sbx-Console": "1",
                                                                      "Content-Type": "application/json"})
    assert st == 400
    assert console_call(daemon, "health")[0] == 200  # and the console still answers


def test_operator_sees_and_acts_on_every_sandbox(daemon):
    a = daemon.peer()
    sid = a.result("sandbox.create", {"label": "<b>x</b>"})["sandboxId"]  # owned by a's connection, not persistent
    b = daemon.peer()
    assert sid not in [x["sandboxId"] for x in b.result("sandbox.list")["sandboxes"]]  # another client does not see it
    st, ans = console_call(daemon, "sandbox.list")
    mine = [x for x in ans["result"]["sandboxes"] if x["sandboxId"] == sid]
    assert mine and mine[0]["label"] == "<b>x</b>" and mine[0]["forkOf"] is None
    # An operator's fork: its parent named.
    st, ans = console_call(daemon, "sandbox.fork", {"sandboxId": sid})
    fork = ans["result"]["sandboxId"]
    forks = [x for x in console_call(daemon, "sandbox.list")[1]["result"]["sandboxes"] if x["sandboxId"] == fork]
    assert forks and forks[0]["forkOf"] == sid
    # Process output through the stream route, as server-sent events.
    p = console_call(daemon, "process.start", {"sandboxId": sid, "command": "for i in 1 2 3; do echo tick $i; done"})[1]
    pid = p["result"]["processId"]
    q = urllib.parse.quote(json.dumps({"sandboxId": sid, "processId": pid}))
    st, headers, body = http(daemon, f"/console/api/stream?method=process.stream&params={q}",
                             headers={"Authorization": f"Bearer {TOKEN}"})
    assert st == 200 and headers["Content-Type"] == "text/event-stream"
    events = [blk.split("\n") for blk in body.decode().strip().split("\n\n")]
    kinds = [e[0] for e in events]
    assert kinds[-1] == "event: result" and "event: process.exit" in kinds, kinds
    out = "".join(json.loads(e[1][len("data: "):]).get("data", "") for e in events if e[0] == "event: process.output")
    assert out == "tick 1\ntick 2\ntick 3\n"
    assert http(daemon, "/console/api/stream?method=files.watch", headers={"Authorization": f"Bearer {TOKEN}"})[0] == 400
    assert http(daemon, f"/console/api/stream?method=process.stream&params={q}")[0] == 401
    # A run in flight shows in session.list, with what waits behind it.
    run = a.send("run", {"sandboxId": sid, "command": "sleep 30 # the-long-one"})
    queued = a.send("run", {"sandboxId": sid, "command": "echo after"})
    def running():
        s = console_call(daemon, "session.list", {"sandboxId": sid})[1]["result"]["sessions"]
        return s[0]["running"] and s[0]["running"]["command"] == "sleep 30 # the-long-one" and s[0]["queued"] == 1
    assert wait_until(running, 10)
    # The operator destroys it: its owner sees it gone.
    assert console_call(daemon, "sandbox.destroy", {"sandboxId": sid})[1]["result"]["ok"] is True
    assert a.wait(run) and a.wait(queued)  # both answered (the sandbox went under them)
    assert sid not in [x["sandboxId"] for x in a.result("sandbox.list")["sandboxes"]]
    console_call(daemon, "sandbox.destroy", {"sandboxId": fork})


def test_audit_recent_and_verify(tmp_path):
    log = tmp_path / "audit.log"
    d = Daemon("--console-token", TOKEN, "--audit", str(log))
    try:
        p = d.peer()
        sid = p.result("sandbox.create", {"persist": True})["sandboxId"]
        p.result("run", {"sandboxId": sid, "command": "echo audited"})
        # The trail names every client's sandboxes and commands: the operator's alone.
        assert p.error("audit.recent")["code"] == -32601
        assert p.error("audit.verify")["code"] == -32601
        console_call(d, "process.start", {"sandboxId": sid, "command": "true"})
        st, ans = console_call(d, "audit.recent", {"limit": 50})
        r = ans["result"]
        types = [e["type"] for e in r["events"]]
        assert r["enabled"] and "run.end" in types and r["health"]["writerAlive"], r
        assert all("seq" not in e for e in r["events"])  # as made: the writer numbers them
        # What the console did is said to be the console's; what the client did is not.
        starts = [e for e in r["events"] if e["type"] == "process.start"]
        assert starts and all(e.get("via") == "console" for e in starts), starts
        assert all("via" not in e for e in r["events"] if e["type"] == "run.end")
        assert len(console_call(d, "audit.recent", {"limit": 1})[1]["result"]["events"]) == 1
        assert console_call(d, "audit.recent", {"limit": 201})[1]["error"]["code"] == -32602
        assert wait_until(lambda: log.exists() and len(log.read_text().splitlines()) >= len(types), 10)
        v = console_call(d, "audit.verify")[1]["result"]
        assert v["ok"] is True and v["lines"] >= len(types) and v["message"].startswith("intact"), v
        # A line changed in the file: the check says which.
        lines = log.read_text().splitlines()
        lines[1] = lines[1].replace('"run', '"xun', 1) if '"run' in lines[1] else lines[1][:-1] + ',"x":1}'
        log.write_text("\n".join(lines) + "\n")
        v = console_call(d, "audit.verify")[1]["result"]
        assert v["ok"] is False and ":2" in v["message"], v
    finally:
        code, err = d.stop()
    assert code == 0, err


def test_audit_off(daemon):
    assert console_call(daemon, "audit.recent")[1]["result"] == {"enabled": False, "events": [],
                                                                  "health": {"enabled": False}}
    assert console_call(daemon, "audit.verify")[1]["result"] == {"enabled": False}


def test_console_options_refused():
    for flags, words in ((["--console-token", TOKEN], "go with --http"),
                         (["--http", "127.0.0.1:0", "--console-token", "short"], "16 to"),
                         (["--http", "127.0.0.1:0", "--console-token", "has space in it 0123"], "16 to"),
                         (["--http", "127.0.0.1:0", "--console-dir", "/nonexistent"], "missing")):
        cp = subprocess.run([SBX, "serve", "--socket", "/tmp/sbx-never.sock", *flags], capture_output=True, timeout=30)
        assert cp.returncode != 0 and words in cp.stderr.decode(), (flags, cp.stderr.decode())


def test_token_printed_when_made():
    d = Daemon()
    code, err = d.stop()
    assert code == 0, err
    words = [l for l in err.splitlines() if "console: http://127.0.0.1:" in l]
    assert words and "/console/#token=" in words[0], err
    token = words[0].rsplit("token=", 1)[1]
    assert len(token) == 32 and int(token, 16) >= 0


def test_session_list_cuts_on_a_character_and_counts_only_callers_runs(daemon):
    p = daemon.peer()
    sid = p.result("sandbox.create", {})["sandboxId"]
    cmd = "sleep 4 #" + "a" * (4096 - 10) + "é tail"  # the cut at 4096 bytes falls inside é
    run = p.send("run", {"sandboxId": sid, "command": cmd})

    def listed():
        s = p.result("session.list", {"sandboxId": sid})["sessions"][0]
        return s if s["running"] else None
    s = wait_until(listed, 10) and listed()
    assert s["running"]["command"] == cmd[:4095], s["running"]["command"][-20:]  # cut back before é, still text
    # A fork asked meanwhile queues sbx's own state capture behind the run: not a caller's run.
    fork = p.send("sandbox.fork", {"sandboxId": sid})
    time.sleep(0.5)
    assert p.result("session.list", {"sandboxId": sid})["sessions"][0]["queued"] == 0
    queued = p.send("run", {"sandboxId": sid, "command": "echo after"})
    assert wait_until(lambda: p.result("session.list", {"sandboxId": sid})["sessions"][0]["queued"] == 1, 5)
    assert p.wait(run, 30)["result"]["exitCode"] == 0
    assert "sandboxId" in p.wait(fork, 30)["result"] and p.wait(queued, 30)["result"]["stdout"] == "after\n"
