"""Sandbox lifecycle over JSON-RPC: metadata given at creation, shown and filtered by
sandbox.list; sandbox.pause and sandbox.resume; expiry (lifetimeMs, idleTimeoutMs,
sandbox.setTimeout) and its sandbox.expired notification."""
import base64
import os
import socket
import subprocess
import time
import urllib.error

from conftest import CGROUP2, _v2_cgroup, sbx_processes, wait_until
from test_ports import get, start_http
from test_rpc import SBX, stdio  # noqa: F401 (the fixture: `sbx serve --stdio` and a Peer on it)

INVALID_PARAMS = -32602


def _ids(peer, params=None):
    return sorted(s["sandboxId"] for s in peer.result("sandbox.list", params)["sandboxes"])


def test_metadata_listed_and_filtered(stdio):
    a = stdio.result("sandbox.create", {"metadata": {"team": "red", "job.id": "42"}})["sandboxId"]
    b = stdio.result("sandbox.create", {"metadata": {"team": "blue", "job.id": "42"}})["sandboxId"]
    root = stdio.result("create")["sandboxId"]
    listed = {s["sandboxId"]: s for s in stdio.result("sandbox.list")["sandboxes"]}
    assert listed[a]["metadata"] == {"team": "red", "job.id": "42"}
    assert listed[b]["metadata"] == {"team": "blue", "job.id": "42"}
    assert listed[root]["metadata"] == {}
    assert _ids(stdio, {"metadata": {"team": "red"}}) == [a]
    assert _ids(stdio, {"metadata": {"job.id": "42"}}) == sorted([a, b])
    assert _ids(stdio, {"metadata": {"job.id": "42", "team": "blue"}}) == [b]
    assert _ids(stdio, {"metadata": {"team": "green"}}) == []
    assert _ids(stdio, {"metadata": {}}) == sorted([a, b, root])
    # A destroyed sandbox takes its metadata with it.
    stdio.result("sandbox.destroy", {"sandboxId": a})
    assert _ids(stdio, {"metadata": {"team": "red"}}) == []


def test_metadata_on_create(stdio):
    root = stdio.result("create", {"metadata": {"k": "v"}})["sandboxId"]
    assert _ids(stdio, {"metadata": {"k": "v"}}) == [root]


def test_metadata_bounds(stdio):
    def refused(metadata, method="sandbox.create"):
        err = stdio.error(method, {"metadata": metadata})
        assert err["code"] == INVALID_PARAMS, err
        return err["message"]

    assert refused({f"k{i}": "v" for i in range(33)}) == "metadata has more than 32 keys"
    assert refused({"k" * 65: "v"}) == "metadata key must be 1-64 bytes"
    assert refused({"": "v"}) == "metadata key must be 1-64 bytes"
    assert refused({"a b": "v"}) == "metadata key must be of [A-Za-z0-9_.-]"
    assert refused({"n": 1}) == "metadata.n must be a string"
    assert refused({"big": "x" * 1025}) == "metadata.big is longer than 1024 bytes"
    assert refused(["a"]).startswith("metadata")
    assert refused({"n": 1}, "sandbox.list") == "metadata.n must be a string"
    assert refused({"n": None}, "create") == "metadata.n must be a string"
    # Nothing was made by the refused requests; the largest allowed metadata is taken.
    assert stdio.result("sandbox.list")["sandboxes"] == []
    full = {f"k{i:02d}" + "x" * 61: "v" * 1024 for i in range(32)}
    sid = stdio.result("sandbox.create", {"metadata": full})["sandboxId"]
    assert stdio.result("sandbox.list", {"metadata": {"k00" + "x" * 61: "v" * 1024}})["sandboxes"][0] == {
        **stdio.result("sandbox.list")["sandboxes"][0], "sandboxId": sid, "metadata": full}


def _cpu_usec(pid):
    """usage_usec of pid's cgroup: every process of the command, whatever its state."""
    with open(f"{CGROUP2}{_v2_cgroup(pid)}/cpu.stat") as f:
        for line in f:
            k, v = line.split()
            if k == "usage_usec":
                return int(v)
    raise AssertionError("no usage_usec")


def _state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _timed(peer, method, params=None):
    t0 = time.monotonic()
    r = peer.result(method, params)
    return r, (time.monotonic() - t0) * 1000


def _paused(peer, sid):
    return {s["sandboxId"]: s["paused"] for s in peer.result("sandbox.list")["sandboxes"]}[sid]


def test_pause_stops_cpu_resume_goes_on(stdio):
    sid = stdio.result("create")["sandboxId"]
    stdio.result("process.start", {"command": "yes > /dev/null"})
    found = []
    assert wait_until(lambda: found.extend(p for p, cmd in sbx_processes([stdio.proc.pid]) if cmd == b"yes") or found)
    pid = found[0]
    a = _cpu_usec(pid)
    time.sleep(0.3)
    assert _cpu_usec(pid) - a > 50_000  # it runs

    paused, pause_ms = _timed(stdio, "sandbox.pause")
    assert paused["ok"] is True and paused["tookUs"] >= 0
    assert _paused(stdio, sid) is True
    a = _cpu_usec(pid)
    time.sleep(0.5)
    used = _cpu_usec(pid) - a
    assert used == 0, f"a paused sandbox used {used} us of CPU"
    assert _state(pid) in "SD"  # frozen in the kernel's freezer, not stopped nor gone

    r, resume_ms = _timed(stdio, "sandbox.resume", {"sandboxId": sid})
    assert r["ok"] is True
    assert _paused(stdio, sid) is False
    a = _cpu_usec(pid)
    time.sleep(0.3)
    assert _cpu_usec(pid) - a > 50_000  # the same process, going on
    # Numbers for the reader, no bound asserted (a busy CI machine would make it flaky).
    print(f"\npause: {pause_ms:.2f} ms round trip ({paused['tookUs']} us in the daemon); "
          f"resume: {resume_ms:.2f} ms round trip ({r['tookUs']} us in the daemon)")


def test_paused_http_server_answers_after_resume(stdio):
    stdio.result("create")
    start_http(stdio)
    hp = stdio.result("port.expose", {"port": 8000})["port"]
    assert b"Directory listing" in get(hp, "/")
    times = []
    for _ in range(5):
        r, pause_ms = _timed(stdio, "sandbox.pause")
        try:
            get(hp, "/", timeout=0.5)
            answered = True
        except (socket.timeout, TimeoutError, urllib.error.URLError):
            answered = False
        assert not answered, "a paused http.server answered"
        _, resume_ms = _timed(stdio, "sandbox.resume")
        assert b"Directory listing" in get(hp, "/")
        times.append((pause_ms, r["tookUs"] / 1000, resume_ms))
    print("\npause round trip / in daemon / resume round trip (ms): " +
          ", ".join(f"{a:.2f}/{b:.2f}/{c:.2f}" for a, b, c in times))


def test_runs_wait_while_paused_or_are_refused(stdio):
    stdio.result("create")
    stdio.result("run", {"command": "x=1"})
    stdio.result("sandbox.pause")
    waiting = stdio.send("run", {"command": "echo $x; x=2"})
    started = stdio.send("process.start", {"command": "echo started"})
    err = stdio.error("run", {"command": "echo no", "whilePaused": "refuse"})
    assert err == {"code": 1, "message": 'the sandbox is paused (whilePaused: "refuse")'}
    err = stdio.error("process.start", {"command": "echo no", "whilePaused": "refuse"})
    assert err["code"] == 1
    err = stdio.error("run", {"command": "echo no", "whilePaused": "later"})
    assert err == {"code": INVALID_PARAMS, "message": 'whilePaused must be "wait" or "refuse", not "later"'}
    time.sleep(0.5)
    with stdio.cond:
        assert not stdio.answers, "a request was answered while its sandbox was paused"
    stdio.result("sandbox.resume")
    assert stdio.wait(waiting)["result"]["stdout"] == "1\n"
    assert "processId" in stdio.wait(started)["result"]
    assert stdio.result("run", {"command": "echo $x", "whilePaused": "refuse"})["stdout"] == "2\n"


def test_pause_errors(stdio):
    stdio.result("create")
    assert stdio.error("sandbox.resume") == {"code": INVALID_PARAMS, "message": "the sandbox is not paused"}
    stdio.result("sandbox.pause")
    assert stdio.error("sandbox.pause") == {"code": INVALID_PARAMS, "message": "the sandbox is paused already"}
    stdio.result("sandbox.resume")
    assert stdio.error("sandbox.resume")["message"] == "the sandbox is not paused"
    # A paused sandbox can be destroyed.
    sid = stdio.result("sandbox.create")["sandboxId"]
    stdio.result("sandbox.pause", {"sandboxId": sid})
    stdio.result("sandbox.destroy", {"sandboxId": sid})
    assert [s["sandboxId"] for s in stdio.result("sandbox.list")["sandboxes"]] != [sid]


def test_snapshot_leaves_paused_sandbox_paused(stdio):
    stdio.result("create")
    stdio.result("process.start", {"command": "yes > /dev/null"})
    found = []
    assert wait_until(lambda: found.extend(p for p, cmd in sbx_processes([stdio.proc.pid]) if cmd == b"yes") or found)
    pid = found[0]
    # A snapshot before the pause: its own freeze and thaw leave no hold behind.
    stdio.result("snapshot.create")
    stdio.result("sandbox.pause")
    for method in ("snapshot.create", "sandbox.fork", "persistence.export"):
        err = stdio.error(method)
        assert err == {"code": INVALID_PARAMS, "message": "the sandbox is paused: resume it first"}, method
    assert _paused(stdio, stdio.result("sandbox.list")["sandboxes"][0]["sandboxId"]) is True
    a = _cpu_usec(pid)
    time.sleep(0.3)
    # Frozen: not a slice of the 0.3 s running (300,000 us); a loaded machine may still let
    # a few microseconds of the freeze itself land after the first reading.
    assert _cpu_usec(pid) - a < 5_000
    stdio.result("sandbox.resume")
    stdio.result("snapshot.create")
    a = _cpu_usec(pid)
    time.sleep(0.3)
    assert _cpu_usec(pid) - a > 50_000


def _expired(peer, timeout=10):
    with peer.cond:
        assert peer.cond.wait_for(lambda: any(n.get("method") == "sandbox.expired" for n in peer.notes), timeout)
        return [n["params"] for n in peer.notes if n.get("method") == "sandbox.expired"]


def test_lifetime_expires_and_tells_the_owner(stdio):
    keep = stdio.result("sandbox.create")["sandboxId"]
    t0 = time.monotonic()
    sid = stdio.result("sandbox.create", {"lifetimeMs": 600})["sandboxId"]
    stdio.result("process.start", {"sandboxId": sid, "command": "sleep 1000"})
    # Requests do not extend a lifetime.
    stdio.result("run", {"sandboxId": sid, "command": "true"})
    assert _expired(stdio) == [{"sandboxId": sid, "reason": "lifetime"}]
    took = time.monotonic() - t0
    assert took >= 0.55
    print(f"\nexpired after {took * 1000:.0f} ms (lifetimeMs 600)")
    assert [s["sandboxId"] for s in stdio.result("sandbox.list")["sandboxes"]] == [keep]
    err = stdio.error("run", {"sandboxId": sid, "command": "true"})
    assert err["code"] == INVALID_PARAMS
    assert wait_until(lambda: not [p for p, cmd in sbx_processes([stdio.proc.pid]) if cmd == b"sleep 1000"], 10)


def test_idle_timeout_counts_from_the_last_request(stdio):
    sid = stdio.result("sandbox.create", {"idleTimeoutMs": 700})["sandboxId"]
    for _ in range(4):  # 1.2 s of requests 0.3 s apart keep it
        time.sleep(0.3)
        stdio.result("run", {"sandboxId": sid, "command": "true"})
    with stdio.cond:
        assert not stdio.notes
    assert _expired(stdio) == [{"sandboxId": sid, "reason": "idle"}]
    assert stdio.result("sandbox.list")["sandboxes"] == []


def test_set_timeout(stdio):
    sid = stdio.result("sandbox.create", {"lifetimeMs": 500})["sandboxId"]
    assert stdio.result("sandbox.setTimeout", {"sandboxId": sid, "lifetimeMs": 0}) == {"ok": True}
    time.sleep(0.8)
    with stdio.cond:
        assert not stdio.notes
    root = stdio.result("create")["sandboxId"]
    stdio.result("sandbox.setTimeout", {"lifetimeMs": 300})  # the root sandbox
    assert _expired(stdio) == [{"sandboxId": root, "reason": "lifetime"}]
    assert [s["sandboxId"] for s in stdio.result("sandbox.list")["sandboxes"]] == [sid]
    err = stdio.error("sandbox.setTimeout", {"sandboxId": sid, "lifetimeMs": 31 * 24 * 3600 * 1000 + 1})
    assert err["code"] == INVALID_PARAMS
    assert stdio.error("sandbox.setTimeout", {"sandboxId": sid})["code"] == INVALID_PARAMS
    assert stdio.error("sandbox.create", {"idleTimeoutMs": -1})["code"] == INVALID_PARAMS


def test_pause_during_snapshot_stays_paused(stdio):
    """A pause that lands while a snapshot is under way: whatever step the snapshot is at, its
    thaw must not thaw the paused sandbox; it completes (at the latest once resumed)."""
    stdio.result("create")
    stdio.result("process.start", {"command": "yes > /dev/null"})
    found = []
    assert wait_until(lambda: found.extend(p for p, cmd in sbx_processes([stdio.proc.pid]) if cmd == b"yes") or found)
    pid = found[0]
    before = 0
    for _ in range(5):
        snap = stdio.send("snapshot.create")
        pause = stdio.send("sandbox.pause")
        assert "result" in stdio.wait(pause)
        time.sleep(0.2)  # the snapshot may end meanwhile: it must leave the freeze in place
        a = _cpu_usec(pid)
        time.sleep(0.3)
        assert _cpu_usec(pid) == a, "a snapshot thawed a paused sandbox"
        with stdio.cond:
            before += str(snap) in stdio.answers
        stdio.result("sandbox.resume")
        assert "result" in stdio.wait(snap)
        a = _cpu_usec(pid)
        time.sleep(0.2)
        assert _cpu_usec(pid) > a
    print(f"\n{before} of 5 snapshots ended while paused, the others once resumed")


def test_on_expiry_export_writes_the_archive_first(tmp_path):
    from test_rpc import spawn_stdio
    d = tmp_path / "expired"
    peer = spawn_stdio("--expiry-export-dir", str(d))
    try:
        sid = peer.result("sandbox.create", {"lifetimeMs": 800, "onExpiry": "export"})["sandboxId"]
        peer.result("run", {"sandboxId": sid, "command": "echo kept > /home/user/note; cd /tmp; X=41"})
        [n] = _expired(peer)
        assert n["sandboxId"] == sid and n["reason"] == "lifetime" and "exportError" not in n, n
        path = n["export"]
        assert path.startswith(str(d) + f"/{sid}-") and path.endswith(".tar.zst")
        assert os.stat(path).st_mode & 0o777 == 0o600 and os.stat(d).st_mode & 0o777 == 0o700
        assert peer.result("sandbox.list")["sandboxes"] == []
        # The archive is a whole export: another sandbox imports it, files and session state.
        other = peer.result("sandbox.create")["sandboxId"]
        data = base64.b64encode(open(path, "rb").read()).decode()
        peer.result("persistence.import", {"sandboxId": other, "data": data})
        r = peer.result("run", {"sandboxId": other, "command": "cat /home/user/note; pwd; echo $X"})
        assert r["stdout"] == "kept\n/tmp\n41\n"
        assert not [f for f in os.listdir(d) if f.endswith(".part")]
    finally:
        peer.proc.stdin.close()
        peer.proc.wait(10)


def test_on_expiry_bad_values(tmp_path):
    from test_rpc import spawn_stdio
    peer = spawn_stdio()
    try:
        err = peer.error("sandbox.create", {"lifetimeMs": 800, "onExpiry": "export"})
        assert err["code"] == INVALID_PARAMS and "--expiry-export-dir" in err["message"]
        err = peer.error("sandbox.create", {"onExpiry": "archive"})
        assert err["code"] == INVALID_PARAMS and err["message"] == 'onExpiry must be "destroy" or "export"'
        # "destroy" is the default, said or not.
        sid = peer.result("sandbox.create", {"lifetimeMs": 300, "onExpiry": "destroy"})["sandboxId"]
        assert _expired(peer) == [{"sandboxId": sid, "reason": "lifetime"}]
    finally:
        peer.proc.stdin.close()
        peer.proc.wait(10)
    cp = subprocess.run([SBX, "serve", "--stdio", "--expiry-export-dir", "/proc/nope"], capture_output=True, text=True,
                        stdin=subprocess.DEVNULL, timeout=20)
    assert cp.returncode == 1 and "--expiry-export-dir /proc/nope" in cp.stderr
