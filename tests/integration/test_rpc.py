"""The JSON-RPC protocol over raw lines: stdio and Unix socket, every method and error."""
import base64
import os
import signal
import socket
import stat
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import SPAWNED, Peer, memory_bound
from conftest import connect_peer as connect

REPO = Path(__file__).resolve().parents[2]
SBX = os.environ.get("SBX_BIN", str(REPO / "build" / "src" / "cli" / "sbx"))

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes need root here"),
    pytest.mark.skipif(not os.path.exists(SBX), reason=f"{SBX} not built"),
]


def spawn_stdio(*args):
    proc = subprocess.Popen([SBX, "serve", "--stdio", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    SPAWNED.append(proc.pid)  # for the leftover checks
    peer = Peer(proc.stdout, proc.stdin)
    peer.proc = proc
    return peer


@pytest.fixture
def stdio():
    peer = spawn_stdio()
    proc = peer.proc
    yield peer
    if proc.poll() is None:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def server():
    # A directory anyone may traverse, so the foreign-uid test reaches the socket itself.
    d = tempfile.mkdtemp(prefix="sbx-rpc-")
    os.chmod(d, 0o755)
    path = os.path.join(d, "sbx.sock")
    proc = subprocess.Popen([SBX, "serve", "--socket", path, "--pool", "0"], stderr=subprocess.PIPE)
    SPAWNED.append(proc.pid)  # for the leftover checks
    for _ in range(200):
        if os.path.exists(path):
            break
        time.sleep(0.01)
    proc.path = path
    yield proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        # SIGTERM is a clean shutdown (non-zero under the sanitizers when the daemon leaked).
        assert proc.returncode == 0, proc.stderr.read()
    shutil.rmtree(d, ignore_errors=True)


def cgroup_dirs(pid):
    return [p for p in Path("/sys/fs/cgroup/unified").glob(f"sbx-{pid}")]


# ---------------------------------------------------------------- basics and errors

def test_ping_create_run(stdio):
    assert stdio.result("ping") == {"pong": True}
    assert stdio.error("run", {"command": "true"})["code"] == -32600
    r = stdio.result("create")
    assert r["ok"] is True and len(r["sandboxId"]) == 32 and int(r["sandboxId"], 16) >= 0
    assert stdio.error("create")["message"] == "Sandbox already created"
    out = stdio.result("run", {"command": "x=5; echo hi; echo err >&2; exit 3"})
    assert out["exitCode"] == 3 and out["stdout"] == "hi\n" and out["stderr"] == "err\n"
    assert isinstance(out["executionTimeMs"], int) and "errorClass" not in out and "truncated" not in out
    assert stdio.result("run", {"command": "echo $x"})["stdout"] == "5\n"


def test_protocol_errors_keep_connection(stdio):
    stdio.result("create")
    stdio.send_raw(b"this is not json\n")
    stdio.send_raw(b'{"jsonrpc":"2.0","id":77,"method":"run","params":[1]}\n')
    assert stdio.wait(77)["error"]["code"] == -32602
    assert stdio.error("no.such.method")["message"] == "Method not found: no.such.method"
    assert stdio.error("run", {"command": 5}) == {"code": -32602, "message": "command must be a string"}
    assert stdio.error("run", {})["message"] == "Missing required param: command"
    assert stdio.error("run", {"command": "true", "timeoutMs": "x"})["code"] == -32602
    assert "env" in stdio.error("run", {"command": "true", "env": {"1BAD": "x"}})["message"]
    assert stdio.error("run", {"command": "true", "stdin": "!!!"})["message"] == "stdin must be base64"
    assert stdio.error("run", {"command": "true", "sandboxId": 5})["message"] == "sandboxId must be a string"
    assert stdio.error("run", {"command": "true", "sandboxId": "nope"})["message"] == "Unknown sandboxId: nope"
    stdio.send_raw(b'{"jsonrpc":"1.0","id":78,"method":"ping"}\n')
    assert stdio.wait(78)["error"]["code"] == -32600
    # The parse error came back with id null, and the connection still works.
    assert stdio.result("ping") == {"pong": True}
    assert stdio.result("run", {"command": "echo ok"})["stdout"] == "ok\n"


@memory_bound
def test_huge_line_skipped(stdio):
    stdio.result("create")
    big = b'{"jsonrpc":"2.0","id":5,"method":"run","params":{"command":"' + b"x" * (64 * 1024 * 1024) + b'"}}\n'
    stdio.send_raw(big)
    assert stdio.result("ping") == {"pong": True}
    # Refused, and answered to its own id (found in what was kept of the line's start).
    e = stdio.wait(5)["error"]
    assert e["code"] == -32700 and "Request too large" in e["message"], e
    # It holds at most the 8 MiB limit of the line, never the whole 64 MiB.
    rss = int([l for l in open(f"/proc/{stdio.proc.pid}/status") if l.startswith("VmHWM")][0].split()[1])
    assert rss < 24 * 1024, f"the server buffered the huge line (peak RSS {rss} kB)"


def test_connection_configure_sets_this_connections_line(stdio):
    line = b'{"jsonrpc":"2.0","id":%d,"method":"ping","params":{"pad":"' + b"y" * 4096 + b'"}}\n'
    assert stdio.result("connection.configure", {"rpcBytes": 2048}) == {"ok": True}
    stdio.send_raw(line % 1)
    assert stdio.wait(1)["error"]["code"] == -32700
    assert stdio.result("connection.configure", {"rpcBytes": 8192}) == {"ok": True}
    stdio.send_raw(line % 2)
    assert stdio.wait(2)["error"]["code"] == -32602  # read whole: ping takes no pad
    for params, words in [({}, "rpcBytes"), ({"rpcBytes": 10}, "at least 1024"), ({"rpcBytes": "x"}, "rpcBytes"),
                          ({"rpcBytes": 1 << 40}, "rpcBytes")]:
        e = stdio.error("connection.configure", params)
        assert e["code"] == -32602 and words in e["message"], (params, e)
    assert stdio.result("ping") == {"pong": True}


def test_rpc_bytes_limit(stdio):
    stdio.result("create", {"limits": {"rpcBytes": 2048}})
    stdio.send_raw(b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"pad":"' + b"y" * 4096 + b'"}}\n')
    assert stdio.result("ping") == {"pong": True}
    assert stdio.wait(9)["error"]["code"] == -32700
    # The id last, as JavaScript clients put it: found at the line's end.
    stdio.send_raw(b'{"method":"ping","params":{"pad":"' + b"y" * 4096 + b'"},"jsonrpc":"2.0","id":"last"}\n')
    assert "Request too large" in stdio.wait("last")["error"]["message"]
    # An "id" inside the params is not the request's: answered with id null.
    stdio.send_raw(b'{"method":"ping","params":{"id":77,"pad":"' + b"y" * 4096 + b'"}}\n')
    assert stdio.result("ping") == {"pong": True}
    with stdio.cond:
        assert "77" not in stdio.answers


def test_run_results(stdio):
    stdio.result("create", {"limits": {"stdoutBytes": 100, "commandBytes": 50}})
    r = stdio.result("run", {"command": "printf 'a\\0b\\377'"})
    assert r["stdoutEncoding"] == "base64" and base64.b64decode(r["stdout"]) == b"a\0b\xff"
    r = stdio.result("run", {"command": "head -c 1000 /dev/zero | tr '\\0' z"})
    assert r["stdout"] == "z" * 100 and r["truncated"] == {"stdout": True, "stderr": False}
    r = stdio.result("run", {"command": "echo " + "x" * 60})
    assert r["exitCode"] == 1 and r["errorClass"] == "LIMIT_EXCEEDED"
    r = stdio.result("run", {"command": "cat", "stdin": base64.b64encode(b"in\0put").decode()})
    assert r["stdoutEncoding"] == "base64" and base64.b64decode(r["stdout"]) == b"in\0put"
    r = stdio.result("run", {"command": "pwd; echo $V", "cwd": "/tmp", "env": {"V": "v1"}})
    assert r["stdout"] == "/tmp\nv1\n"
    assert stdio.result("run", {"command": "pwd; echo ${V-unset}"})["stdout"] == "/home/user\nunset\n"
    t0 = time.time()
    r = stdio.result("run", {"command": "sleep 30", "timeoutMs": 300})
    assert r["exitCode"] == 124 and r["errorClass"] == "TIMEOUT" and time.time() - t0 < 3


def test_stream_notifications(stdio):
    stdio.result("create")
    id = stdio.send("run", {"command": "for i in 1 2 3; do echo line$i; sleep 0.05; done; echo e >&2",
                            "stream": True})
    r = stdio.wait(id)["result"]
    assert r["stdout"] == "line1\nline2\nline3\n"
    notes = [n["params"] for n in stdio.notes if n["method"] == "output" and n["params"]["requestId"] == id]
    assert [n["seq"] for n in notes] == list(range(len(notes)))
    assert "".join(n["data"] for n in notes if n["stream"] == "stdout") == r["stdout"]
    assert "".join(n["data"] for n in notes if n["stream"] == "stderr") == "e\n"
    # Without stream: no notifications.
    before = len(stdio.notes)
    stdio.result("run", {"command": "echo quiet"})
    assert len(stdio.notes) == before


def test_cancel(stdio):
    stdio.result("create")
    rid = stdio.send("run", {"command": "c=1; sleep 30"}, id="long-one")
    time.sleep(0.3)
    assert stdio.result("cancel", {"requestId": "long-one"}) == {"ok": True}
    r = stdio.wait(rid)["result"]
    assert r["exitCode"] == 125 and r["errorClass"] == "CANCELLED"
    assert stdio.result("run", {"command": "echo ${c-unset}"})["stdout"] == "unset\n"
    assert stdio.error("cancel", {"requestId": "long-one"})["code"] == -32602
    assert stdio.error("cancel", {"requestId": 12345})["code"] == -32602
    assert stdio.error("cancel", {})["message"] == "Missing required param: requestId"


def test_concurrency(stdio):
    stdio.result("create")
    slow = stdio.send("run", {"command": "sleep 1.5; echo slow"})
    time.sleep(0.2)
    t0 = time.time()
    assert stdio.result("ping") == {"pong": True}
    assert time.time() - t0 < 0.5, "a long run delayed a ping"
    # Another session runs at the same time; the same session queues.
    t0 = time.time()
    other = stdio.send("run", {"command": "sleep 1; echo other", "session": "b"})
    assert stdio.wait(other)["result"]["stdout"] == "other\n"
    assert time.time() - t0 < 1.4
    assert stdio.wait(slow)["result"]["stdout"] == "slow\n"


def test_session_queue_cap():
    # More lane slots than a session holds runs: the session's own cap (16 running or queued)
    # is what refuses the 17th.
    peer = spawn_stdio("--slots", "64")
    try:
        peer.result("create")
        ids = [peer.send("run", {"command": "sleep 0.2"}) for _ in range(17)]
        answers = [peer.wait(i, timeout=60) for i in ids]
        busy = [a for a in answers if "error" in a]
        assert len(busy) == 1 and busy[0]["error"]["code"] == -32001
        assert busy[0]["error"]["message"].startswith("WORKER_UNAVAILABLE")
        assert "session" in busy[0]["error"]["message"]
    finally:
        peer.proc.stdin.close()
        peer.proc.wait(10)


def test_sessions_env_history_health(stdio):
    stdio.result("create")
    assert stdio.result("session.create", {"name": "s1"}) == {"ok": True, "name": "s1"}
    assert stdio.error("session.create", {"name": "s1"})["code"] == -32602
    assert stdio.error("session.create", {"name": "bad name"})["code"] == -32602
    stdio.result("run", {"command": "only=1", "session": "s1"})
    assert stdio.result("run", {"command": "echo ${only-none}"})["stdout"] == "none\n"
    names = {s["name"] for s in stdio.result("session.list")["sessions"]}
    assert names == {"default", "s1"}
    assert stdio.result("session.delete", {"name": "s1"}) == {"ok": True}
    assert stdio.error("session.delete", {"name": "s1"})["code"] == -32602
    assert stdio.error("run", {"command": "true", "session": 7})["code"] == -32602

    assert stdio.result("env.set", {"name": "GREETING", "value": "hello 'world' $x"}) == {"ok": True}
    assert stdio.result("env.get", {"name": "GREETING"}) == {"value": "hello 'world' $x"}
    assert stdio.result("run", {"command": "printenv GREETING"})["stdout"] == "hello 'world' $x\n"
    assert stdio.result("env.get", {"name": "NOT_SET_ANYWHERE"}) == {"value": None}
    assert stdio.error("env.set", {"name": "1x", "value": "v"})["code"] == -32602
    assert stdio.error("env.get", {"name": "a-b"})["code"] == -32602

    stdio.result("shell.history.clear")
    stdio.result("run", {"command": "echo first"})
    stdio.result("run", {"command": "echo second"})
    entries = stdio.result("shell.history.list")["entries"]
    assert [(e["index"], e["command"]) for e in entries] == [(1, "echo first"), (2, "echo second")]
    assert entries[0]["timestamp"].endswith("Z")
    assert stdio.result("shell.history.clear") == {"ok": True}
    assert stdio.result("shell.history.list") == {"entries": []}

    h = stdio.result("health")
    assert h["sandboxes"] == 1 and h["sessions"] >= 1 and h["running"] == 0 and h["queued"] == 0
    assert set(h["totals"]) == {"completed", "failed", "timedOut", "cancelled", "avgExecMs"}
    assert h["totals"]["completed"] >= 2 and h["uptimeMs"] >= 0


def test_sandbox_routing(stdio):
    root = stdio.result("create")["sandboxId"]
    a = stdio.result("sandbox.create", {"label": "a"})["sandboxId"]
    b = stdio.result("sandbox.create")["sandboxId"]
    assert len({root, a, b}) == 3
    stdio.result("run", {"command": "echo in-a > /tmp/f", "sandboxId": a})
    assert stdio.result("run", {"command": "cat /tmp/f", "sandboxId": a})["stdout"] == "in-a\n"
    assert stdio.result("run", {"command": "cat /tmp/f 2>&1 || echo missing", "sandboxId": b})["stdout"].endswith("missing\n")
    assert stdio.result("run", {"command": "test -e /tmp/f || echo none", "sandboxId": None})["stdout"] == "none\n"
    listed = {s["sandboxId"]: s for s in stdio.result("sandbox.list")["sandboxes"]}
    assert set(listed) == {root, a, b} and listed[a]["label"] == "a" and listed[root]["root"] is True
    assert stdio.result("sandbox.destroy", {"sandboxId": a}) == {"ok": True}
    assert stdio.error("run", {"command": "true", "sandboxId": a})["message"] == f"Unknown sandboxId: {a}"
    assert stdio.error("sandbox.destroy", {})["message"] == "Missing required param: sandboxId"
    assert stdio.error("sandbox.create", {"persist": True})["code"] == -32602  # stdio: no persist


def test_stdin_eof_shuts_down(stdio):
    stdio.result("create")
    rid = stdio.send("run", {"command": "sleep 30"})
    time.sleep(0.3)
    stdio.proc.stdin.close()
    t0 = time.time()
    assert stdio.proc.wait(5) == 0
    assert time.time() - t0 < 2.5
    assert stdio.wait(rid)["result"]["exitCode"] == 125
    assert not cgroup_dirs(stdio.proc.pid)


def test_stdout_closed_shuts_down():
    # The client goes away while the daemon still has to answer (its create is not done yet):
    # the failed write closes the only connection, which ends the daemon as stdin's EOF would.
    a, b = socket.socketpair()
    proc = subprocess.Popen([SBX, "serve", "--stdio"], stdin=b.fileno(), stdout=b.fileno(),
                            stderr=subprocess.PIPE)
    SPAWNED.append(proc.pid)
    b.close()
    a.sendall(b'{"jsonrpc":"2.0","id":1,"method":"create"}\n')
    a.close()
    assert proc.wait(10) == 0
    assert not cgroup_dirs(proc.pid)


# ---------------------------------------------------------------- socket server

def test_socket_permissions_and_peers(server):
    assert stat.S_IMODE(os.stat(server.path).st_mode) == 0o600
    a, b = connect(server.path), connect(server.path)
    ida = a.result("create")["sandboxId"]
    b.result("create")
    # b may not use a's sandbox: it does not exist for b.
    assert b.error("run", {"command": "true", "sandboxId": ida})["message"] == f"Unknown sandboxId: {ida}"
    assert ida not in {s["sandboxId"] for s in b.result("sandbox.list")["sandboxes"]}
    # A client of another uid is refused by SO_PEERCRED even if it can reach the socket.
    os.chmod(server.path, 0o666)
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(65534)
            os.setuid(65534)
            s = socket.socket(socket.AF_UNIX)
            s.connect(server.path)
        except Exception:
            os._exit(3)  # could not even reach the socket: the test proves nothing
        try:
            s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
            s.settimeout(5)
            os._exit(0 if s.recv(100) == b"" else 1)
        except OSError:
            os._exit(0)  # reset by the server: refused
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, "a foreign uid was served"


def test_disconnect_mid_run_cleans_up(server):
    a = connect(server.path)
    a.result("create")
    a.send("run", {"command": "sleep 300 & sleep 30"})
    time.sleep(0.3)
    a.sock.shutdown(socket.SHUT_RDWR)
    a.sock.close()
    b = connect(server.path)
    for _ in range(100):
        if b.result("health")["sandboxes"] == 0:
            break
        time.sleep(0.05)
    h = b.result("health")
    assert h["sandboxes"] == 0 and h["running"] == 0
    base = Path(f"/sys/fs/cgroup/unified/sbx-{server.pid}")
    # Destroy kills at once; the loop removes the cgroups as soon as the processes are gone.
    for _ in range(100):
        if not [d for d in base.iterdir() if d.is_dir()]:
            break
        time.sleep(0.02)
    assert not [d for d in base.iterdir() if d.is_dir()], "cgroups left after disconnect"


def test_persistent_sandbox(server):
    a = connect(server.path)
    sid = a.result("sandbox.create", {"persist": True, "label": "keep"})["sandboxId"]
    a.result("run", {"command": "echo kept > /tmp/k", "sandboxId": sid})
    a.sock.shutdown(socket.SHUT_RDWR)
    a.sock.close()
    time.sleep(0.2)
    b = connect(server.path)
    assert sid in {s["sandboxId"] for s in b.result("sandbox.list")["sandboxes"]}
    assert b.result("run", {"command": "cat /tmp/k", "sandboxId": sid})["stdout"] == "kept\n"
    assert b.result("sandbox.destroy", {"sandboxId": sid}) == {"ok": True}


def test_kill_method(server):
    a = connect(server.path)
    a.result("create")
    assert a.result("kill") == {"ok": True}
    assert server.wait(5) == 0
    assert not os.path.exists(server.path)
    assert not cgroup_dirs(server.pid)


def test_sigterm_answers_and_cleans(server):
    a = connect(server.path)
    a.result("create")
    rid = a.send("run", {"command": "setsid sleep 300 & sleep 30"})
    time.sleep(0.3)
    t0 = time.time()
    server.send_signal(signal.SIGTERM)
    assert server.wait(5) == 0 and time.time() - t0 < 2.5
    assert a.wait(rid)["result"]["exitCode"] == 125
    assert not os.path.exists(server.path)
    assert not cgroup_dirs(server.pid)
    leftovers = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if b"sbx_session" in (p / "cmdline").read_bytes():
                    leftovers.append(p.name)
            except OSError:
                pass
    # Other tests may run sandboxes concurrently only in other processes; none of ours remain.
    assert not [p for p in leftovers if Path(f"/proc/{p}/status").exists() and
                f"sbx-{server.pid}" in (Path(f"/proc/{p}/cgroup").read_text())]


@memory_bound
def test_backpressure_bounded(server):
    a = connect(server.path)
    a.result("create", {"limits": {"stdoutBytes": 64 * 1024 * 1024}})
    # Stop reading: the reader thread blocks on a lock we hold.
    with a.cond:
        rid = a.send("run", {"command": "head -c 40000000 /dev/zero | tr '\\0' a", "stream": True})
        time.sleep(2.0)
        rss = int([l for l in open(f"/proc/{server.pid}/status") if l.startswith("VmRSS")][0].split()[1])
    # What the run kept so far and what the connection queued before it stopped reading: 35 to
    # 50 MiB here depending on how far the pipeline got before the stall showed (a loaded
    # machine lets it get further). Without backpressure the daemon would hold the whole
    # output twice, kept and queued as notifications: past 90 MiB.
    assert rss < 64 * 1024, f"server RSS {rss} kB while its client stalled"
    r = a.wait(rid, timeout=120)["result"]
    assert r["exitCode"] == 0 and len(r["stdout"]) == 40000000
    streamed = sum(len(n["params"]["data"]) for n in a.notes if n.get("method") == "output")
    assert streamed == 40000000


def test_pool_serves_default_creates(tmp_path):
    path = str(tmp_path / "pool.sock")
    proc = subprocess.Popen([SBX, "serve", "--socket", path, "--pool", "2"], stderr=subprocess.PIPE)
    try:
        for _ in range(200):
            if os.path.exists(path):
                break
            time.sleep(0.01)
        base = Path(f"/sys/fs/cgroup/unified/sbx-{proc.pid}")
        for _ in range(100):
            if base.exists() and len([d for d in base.iterdir() if d.is_dir()]) == 2:
                break
            time.sleep(0.05)
        assert len([d for d in base.iterdir() if d.is_dir()]) == 2, "pool not prepared"
        a = connect(path)
        ids = {a.result("create")["sandboxId"], a.result("sandbox.create")["sandboxId"],
               a.result("sandbox.create", {"limits": {"pids": 50}})["sandboxId"]}
        assert len(ids) == 3
        assert a.result("health")["sandboxes"] == 3  # prepared ones are not counted
        assert a.result("run", {"command": "echo ok; x=1"})["stdout"] == "ok\n"
        assert a.result("run", {"command": "echo $x"})["stdout"] == "1\n"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    assert not cgroup_dirs(proc.pid)


def test_non_utf8_safe_answers(stdio):
    stdio.result("create")
    # Error messages quote client text cut at a byte limit: never mid-character, never lost.
    e = stdio.error("run", {"command": "true", "sandboxId": "a" + "é" * 40})
    assert e["code"] == -32602 and e["message"].startswith("Unknown sandboxId: a")
    assert stdio.error("x" + "é" * 100)["code"] == -32601
    # File names are bytes: a name that is not UTF-8 is listed lossily, not dropped.
    stdio.result("run", {"command": "touch $'bad\\xff' good"})
    entries = {e["name"]: e for e in stdio.result("files.list", {"path": "."})["entries"]}
    assert "good" in entries and "bad?" in entries and entries["bad?"]["lossy"] is True
    assert stdio.result("ping") == {"pong": True}


@memory_bound
def test_client_that_never_reads_is_bounded(server):
    a = connect(server.path)
    a.result("create")
    a.result("files.write", {"path": "big", "data": base64.b64encode(os.urandom(4 * 1024 * 1024)).decode()})
    with a.cond:  # the reader thread cannot take answers: the client stops reading
        ids = [a.send("files.read", {"path": "big"}) for _ in range(100)]
        time.sleep(2)
        rss = int([l for l in open(f"/proc/{server.pid}/status") if l.startswith("VmRSS")][0].split()[1])
    assert rss < 64 * 1024, f"server RSS {rss} kB for a client that does not read"
    answers = [a.wait(i, timeout=120) for i in ids]
    assert all(len(base64.b64decode(x["result"]["data"])) == 4 * 1024 * 1024 for x in answers)


def test_env_get_cannot_be_forged(stdio):
    stdio.result("create")
    stdio.result("env.set", {"name": "REAL", "value": "value\nwith newline\n"})
    stdio.result("run", {"command": "function /usr/bin/printenv { echo fake; }; printenv() { echo fake; }; "
                                    "declare() { echo fake; }; NOTEXPORTED=1"})
    assert stdio.result("env.get", {"name": "REAL"}) == {"value": "value\nwith newline\n"}
    assert stdio.result("env.get", {"name": "NOTEXPORTED"}) == {"value": None}


def test_each_sandbox_user_is_its_own_host_uid(stdio):
    a = stdio.result("create")["sandboxId"]
    b = stdio.result("sandbox.create")["sandboxId"]
    for sid in (a, b):
        stdio.result("run", {"command": "sleep 60 &", "sandboxId": sid})
    uids = {}
    # The backgrounded sleep may still be a forked shell for a moment: look until both show.
    for _ in range(100):
        for p in Path("/proc").iterdir():
            if not p.name.isdigit():
                continue
            try:
                if (p / "comm").read_text().strip() != "sleep":
                    continue
                cg = (p / "cgroup").read_text()
                uid = int([l for l in (p / "status").read_text().splitlines() if l.startswith("Uid:")][0].split()[1])
            except OSError:
                continue
            for sid in (a, b):
                if sid in cg:
                    uids[sid] = uid
        if len(uids) == 2:
            break
        time.sleep(0.02)
    assert set(uids) == {a, b}
    assert uids[a] != uids[b], "two sandboxes share a host uid"
    assert min(uids.values()) >= 1600000000, "a sandbox runs as an ordinary host uid"


def test_the_socket_file_appears_only_once_it_accepts(tmp_path):
    """A client that waits for the socket file and connects at once is never refused: the file is
    bound under a temporary name and renamed into place once it listens."""
    for i in range(20):
        path = str(tmp_path / f"s{i}.sock")
        proc = subprocess.Popen([SBX, "serve", "--socket", path, "--pool", "0"], stderr=subprocess.PIPE)
        SPAWNED.append(proc.pid)
        try:
            deadline = time.monotonic() + 10
            while not os.path.exists(path):  # busy: to meet the file as early as it can be met
                assert time.monotonic() < deadline and proc.poll() is None
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            s.close()
            assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)


def test_stream_goes_on_past_the_cap(stdio):
    # The cap bounds what the result keeps, not what a streaming client sees: every byte,
    # in order, while the result holds the first 4 KiB and says it was truncated.
    stdio.result("create", {"limits": {"stdoutBytes": 4096}})
    cmd = "for i in $(seq 1 20000); do echo line-$i; done; echo err >&2"
    r = stdio.call("run", {"command": cmd, "stream": True}, timeout=60)["result"]
    want = "".join(f"line-{i}\n" for i in range(1, 20001))
    notes = [n["params"] for n in stdio.notes if n.get("method") == "output"]
    assert "".join(n["data"] for n in notes if n["stream"] == "stdout") == want
    assert "".join(n["data"] for n in notes if n["stream"] == "stderr") == "err\n"
    assert r["stdout"] == want[:4096] and r["truncated"]["stdout"] is True
    assert r["droppedBytes"]["stdout"] == len(want) - 4096
    # Without stream, past the cap is dropped as before.
    r = stdio.result("run", {"command": cmd})
    assert r["stdout"] == want[:4096] and r["truncated"]["stdout"] is True


def test_stream_past_the_cap_is_redacted_across_it(stdio):
    # A secret that straddles the cap is cut in the result and whole-redacted in the stream.
    secret = "S3CRET-value-abcdef0123"
    stdio.result("create", {"limits": {"stdoutBytes": 4096}, "secrets": {"TOKEN": secret}})
    cmd = f"head -c 4090 /dev/zero | tr '\\0' x; printf '%s\\n' \"$TOKEN\"; for i in 1 2 3; do echo \"$TOKEN $i\"; done"
    r = stdio.call("run", {"command": cmd, "stream": True}, timeout=60)["result"]
    streamed = "".join(n["params"]["data"] for n in stdio.notes if n.get("method") == "output"
                       and n["params"]["stream"] == "stdout")
    assert secret not in streamed and secret[:6] not in streamed and secret[-6:] not in streamed
    assert streamed == "x" * 4090 + "[REDACTED:TOKEN]\n" + "".join(f"[REDACTED:TOKEN] {i}\n" for i in (1, 2, 3))
    assert secret[:6] not in r["stdout"] and r["stdout"].startswith("x" * 4090) and r["truncated"]["stdout"]


def test_long_names_are_refused_without_being_echoed_whole(stdio):
    # A 100 KB session name came back whole in the error; a 100 KB label was kept and made
    # `sbx ls` print a line of that length (a new-user pass).
    stdio.result("create")
    e = stdio.error("run", {"command": "true", "session": "s" * 100_000})
    assert e["code"] == -32602 and e["message"].startswith("Invalid session name: " + "s" * 64 + "... (cut)"), e
    assert len(e["message"]) < 200, len(e["message"])
    e = stdio.error("sandbox.create", {"label": "x" * 257})
    assert e == {"code": -32602, "message": "label must be at most 256 bytes; got 257"}, e
    sid = stdio.result("sandbox.create", {"label": "x" * 256})["sandboxId"]
    assert stdio.result("sandbox.destroy", {"sandboxId": sid}) == {"ok": True}
