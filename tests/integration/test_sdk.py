"""The Python SDK (sdk/python/sbx) against the real `sbx serve` binary.

The SDK is imported from the checkout (sdk/python is put first on sys.path), not from an
installation. Every spawned or socket server is registered with conftest's SPAWNED list, so
the autouse leftover check also covers the sandboxes these tests make.
"""
import hashlib
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sdk" / "python"))

from sbx import CommandResult, Sandbox, SbxError, find_binary  # noqa: E402
from sbx._client import Client  # noqa: E402

try:  # the shared leftover check; the tests still work without it
    from conftest import SPAWNED, remove_cgroup_tree, sbx_cgroup_dirs, sbx_processes, wait_until
except ImportError:  # pragma: no cover
    SPAWNED = []
    sbx_processes = sbx_cgroup_dirs = remove_cgroup_tree = wait_until = None

SBX_BIN = os.environ.get("SBX_BIN") or str(REPO / "build" / "src" / "cli" / "sbx")


def _skip_reason():
    if os.geteuid() != 0:
        return "the sbx SDK tests need root"
    if not (os.path.isfile(SBX_BIN) and os.access(SBX_BIN, os.X_OK)):
        return f"sbx binary not found at {SBX_BIN} (build it, or set SBX_BIN)"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")

INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603


def new_sandbox(**kw):
    """A Sandbox on a fresh `sbx serve --stdio`, registered for the leftover check."""
    kw.setdefault("binary", SBX_BIN)
    sb = Sandbox(**kw)
    SPAWNED.append(sb.client.pid)
    return sb


@pytest.fixture
def sb():
    s = new_sandbox(timeout=20)
    yield s
    s.kill()


@pytest.fixture
def socket_server(tmp_path):
    """`sbx serve --socket` in a temp dir: yields the socket path; SIGTERM at the end."""
    path = tmp_path / "sbx.sock"
    with open(tmp_path / "server.err", "wb") as errf:
        p = subprocess.Popen([SBX_BIN, "serve", "--socket", str(path)], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=errf)
    SPAWNED.append(p.pid)
    try:
        deadline = time.monotonic() + 10
        while not path.exists():
            assert p.poll() is None, (tmp_path / "server.err").read_text()
            assert time.monotonic() < deadline, "the socket server did not start"
            time.sleep(0.02)
        yield str(path)
    finally:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    assert p.returncode == 0, (tmp_path / "server.err").read_text()


def fake_server(tmp_path, body):
    """An executable shell script standing in for the sbx binary."""
    script = tmp_path / "fake-sbx"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


CREATE_OK = """read -r line
printf '%s\\n' '{"jsonrpc":"2.0","id":1,"result":{"ok":true,"sandboxId":"0123456789abcdef0123456789abcdef"}}'
"""


# ------------------------------------------------------------------ commands.run


def test_run_state_persists_across_runs(sb):
    assert len(sb.sandbox_id) == 32 and int(sb.sandbox_id, 16) >= 0
    r = sb.commands.run("cd /tmp && export GREETING=hello && greet() { echo \"$GREETING $1\"; }")
    assert isinstance(r, CommandResult)
    assert (r.exit_code, r.stdout, r.stderr, r.truncated, r.error_class) == (0, "", "", None, None)
    r = sb.commands.run("pwd; greet world; echo oops >&2")
    assert r.stdout == "/tmp\nhello world\n"
    assert r.stderr == "oops\n"
    assert r.stdout_bytes == b"/tmp\nhello world\n" and r.stderr_bytes == b"oops\n"
    assert isinstance(r.execution_time_ms, int) and r.execution_time_ms >= 0


def test_nonzero_exit_is_returned_not_raised(sb):
    r = sb.commands.run("echo partial; exit 3")
    assert r.exit_code == 3 and not r.ok
    assert r.stdout == "partial\n"
    assert r.error_class is None
    assert sb.commands.run("false").exit_code == 1
    assert sb.commands.run("true").ok


def test_timeout_gives_124_and_session_survives(sb):
    t0 = time.monotonic()
    r = sb.commands.run("echo before; sleep 120", timeout=0.5)
    elapsed = time.monotonic() - t0
    assert (r.exit_code, r.error_class) == (124, "TIMEOUT")
    assert r.stdout == "before\n"
    assert 0.4 <= elapsed < 60
    assert sb.commands.run("echo after").stdout == "after\n"


def test_cancel_from_another_thread(sb):
    handle = sb.commands.start("sleep 30")
    results = []
    waiter = threading.Thread(target=lambda: results.append(handle.wait()))
    t0 = time.monotonic()
    waiter.start()
    time.sleep(0.3)
    assert not handle.done()
    assert handle.cancel() is True
    waiter.join(10)
    assert not waiter.is_alive()
    elapsed = time.monotonic() - t0
    (r,) = results
    assert (r.exit_code, r.error_class) == (125, "CANCELLED")
    assert elapsed < 25  # the sleep: 30 s
    assert handle.cancel() is False  # already finished
    assert sb.commands.run("echo alive").stdout == "alive\n"


def test_cancel_from_inside_an_output_callback(sb):
    holder = {}

    def on_out(text):
        if "ready" in text:
            holder["accepted"] = holder["h"].cancel()  # must not deadlock the reader thread

    holder["h"] = h = sb.commands.start("echo ready; sleep 30", on_stdout=on_out)
    r = h.wait(10)
    assert (r.exit_code, r.error_class) == (125, "CANCELLED")
    assert holder["accepted"] is True


def test_streaming_callbacks_in_order_with_full_result(sb):
    events = []
    lock = threading.Lock()

    def rec(stream):
        def cb(text):
            with lock:
                events.append((stream, text, time.monotonic()))
        return cb

    t0 = time.monotonic()
    h = sb.commands.start("for i in 1 2 3; do echo line$i; done; echo err1 >&2; sleep 1; "
                          "echo line4; echo err2 >&2",
                          on_stdout=rec("stdout"), on_stderr=rec("stderr"))
    r = h.wait(10)
    done = time.monotonic()
    out = "".join(t for s, t, _ in events if s == "stdout")
    err = "".join(t for s, t, _ in events if s == "stderr")
    assert out == r.stdout == "line1\nline2\nline3\nline4\n"
    assert err == r.stderr == "err1\nerr2\n"
    # The first output arrived while the command still ran (before its 1 s sleep ended).
    assert events and events[0][2] - t0 < 0.9 and done - events[0][2] > 0.5, events


def test_streaming_binary_and_split_utf8(sb):
    chunks = []
    r = sb.commands.run("printf 'a\\xc3'; sleep 0.3; printf '\\xa9b\\xff\\n'", on_stdout=chunks.append)
    assert r.stdout_bytes == b"a\xc3\xa9b\xff\n"
    assert r.stdout == "a\u00e9b\ufffd\n"
    assert "".join(chunks) == r.stdout  # the split é reached the callback whole


def test_callback_exception_is_raised_by_wait(sb):
    def boom(text):
        raise ValueError("callback failed")

    with pytest.raises(ValueError, match="callback failed"):
        sb.commands.run("echo x", on_stdout=boom)
    assert sb.commands.run("echo still-fine").stdout == "still-fine\n"


def test_binary_stdout_and_stderr_bytes_exact(sb):
    r = sb.commands.run(r"printf '\x00\xff'; printf 'e\xfe' >&2")
    assert r.stdout_bytes == b"\x00\xff"
    assert r.stdout == "\x00\ufffd"
    assert r.stderr_bytes == b"e\xfe"
    assert r.stderr == "e\ufffd"


def test_large_outputs_over_8mib_lines(sb):
    big = new_sandbox(limits={"stdout_bytes": 16 << 20})
    try:
        r = big.commands.run("head -c 10000000 /dev/zero | tr '\\0' a")
        assert r.exit_code == 0 and r.truncated is None
        assert r.stdout == "a" * 10_000_000
        # Random bytes come base64-encoded: a ~12 MiB JSON line.
        r = big.commands.run("head -c 9000000 /dev/urandom | tee /tmp/rnd; sha256sum /tmp/rnd >&2")
        assert len(r.stdout_bytes) == 9_000_000
        assert r.stderr.split()[0] == hashlib.sha256(r.stdout_bytes).hexdigest()
    finally:
        big.kill()


def test_stdin_bytes_and_text(sb):
    data = bytes(range(256)) * 3
    r = sb.commands.run("cat", stdin=data)
    assert r.stdout_bytes == data
    r = sb.commands.run("wc -l", stdin="h\u00e9llo\nworld\n")
    assert r.stdout.strip() == "2"
    big = os.urandom(4 << 20)
    r = sb.commands.run("sha256sum", stdin=big)
    assert r.stdout.split()[0] == hashlib.sha256(big).hexdigest()
    assert sb.commands.run("cat").stdout == ""  # default stdin: /dev/null


def test_request_over_the_rpc_limit_raises(sb):
    assert sb.client.rpc_limit == 8 << 20
    with pytest.raises(SbxError) as ei:
        sb.commands.run("cat", stdin=b"x" * (7 << 20))  # ~9.3 MiB of base64
    assert ei.value.code == -32700 and "Request too large" in ei.value.message
    assert sb.commands.run("echo fine").stdout == "fine\n"
    roomy = new_sandbox(limits={"rpc_bytes": 32 << 20})
    try:
        assert roomy.client.rpc_limit == 32 << 20
        data = os.urandom(12 << 20)
        r = roomy.commands.run("sha256sum", stdin=data)
        assert r.stdout.split()[0] == hashlib.sha256(data).hexdigest()
    finally:
        roomy.kill()


def test_too_large_answer_reaches_the_caller_and_teaches_the_limit():
    """Should the SDK's idea of limits.rpcBytes be wrong, the server's answer to the oversized
    line (to its id, found in what the server kept of the line) fails that request instead of
    leaving it waiting forever, and the SDK learns the limit from it."""
    c = Client.spawn(SBX_BIN)
    SPAWNED.append(c.pid)
    try:
        c._rpc_limit = 1 << 30  # pretend: out of sync with the server's 8 MiB
        small = c.send("ping")
        with pytest.raises(SbxError) as ei:
            c.request("ping", {"pad": "x" * (9 << 20)}, timeout=10)
        assert ei.value.code == -32700
        assert small.wait(10) == {"pong": True}
        assert c.rpc_limit == 8 << 20  # learnt from the answer
        assert c.request("ping", timeout=10) == {"pong": True}
    finally:
        c.close()


def test_refused_create_does_not_change_the_rpc_limit():
    c = Client.spawn(SBX_BIN)
    SPAWNED.append(c.pid)
    try:
        with pytest.raises(SbxError) as ei:
            c.request("create", {"limits": {"rpcBytes": 1024}, "env": {"1X": "y"}}, timeout=10)
        assert ei.value.code == INVALID_PARAMS
        assert c.rpc_limit == 8 << 20  # neither side adopted the refused limit
        # A 2 KB request is far below the default 8 MiB limit that should still apply.
        # (The padding goes in a param the method takes: unknown ones are refused.)
        assert "sandboxId" in c.request("sandbox.create", {"metadata": {"a": "x" * 1000, "b": "y" * 1000}},
                                        timeout=10)
    finally:
        c.close()


def test_cwd_and_env_overrides_do_not_persist(sb):
    sb.commands.run("cd /home/user 2>/dev/null || cd /; export KEEP=kept")
    home = sb.commands.run("pwd").stdout
    r = sb.commands.run("pwd; echo $FOO $KEEP", cwd="/tmp", envs={"FOO": "per-run"})
    assert r.stdout == "/tmp\nper-run kept\n"
    r = sb.commands.run("pwd; echo \"[$FOO]\" $KEEP")
    assert r.stdout == home + "[] kept\n"


def test_run_in_named_session_via_param(sb):
    sb.commands.run("export WHO=s1", session="s1")
    assert sb.commands.run("echo $WHO", session="s1").stdout == "s1\n"
    assert sb.commands.run("echo \"[$WHO]\"").stdout == "[]\n"


# ------------------------------------------------------------------ sessions, env, history


def test_sessions_are_isolated(sb):
    a = sb.sessions.create("alpha")
    b = sb.sessions.create("beta")
    assert a.name == "alpha"
    a.run("cd /tmp; export V=a")
    b.run("export V=b")
    assert a.run("pwd; echo $V").stdout == "/tmp\na\n"
    assert b.run("echo $V").stdout == "b\n"
    assert sb.commands.run("echo \"[$V]\"").stdout == "[]\n"
    assert sb.commands.run("echo $V", session="alpha").stdout == "a\n"
    assert {"alpha", "beta"} <= set(sb.sessions.list())
    with pytest.raises(SbxError) as ei:
        sb.sessions.create("alpha")
    assert ei.value.code == INVALID_PARAMS
    with pytest.raises(SbxError) as ei:
        sb.sessions.create("bad name!")
    assert ei.value.code == INVALID_PARAMS
    # A session's run can be cancelled like any other.
    h = b.start("sleep 30")
    time.sleep(0.2)
    assert h.cancel()
    assert h.wait(10).exit_code == 125
    sb.sessions.delete("alpha")
    assert "alpha" not in sb.sessions.list()
    b.delete()
    assert "beta" not in sb.sessions.list()
    with pytest.raises(SbxError) as ei:
        sb.sessions.delete("alpha")
    assert ei.value.code == INVALID_PARAMS
    # Recreated: a fresh shell.
    assert sb.sessions.create("alpha").run("echo \"[$V]\"").stdout == "[]\n"


def test_env_set_get(sb):
    assert sb.env.get("SBX_SDK_UNSET") is None
    value = "a b 'c' \"d\" $e `f`"
    sb.env.set("SDKVAR", value)
    assert sb.env.get("SDKVAR") == value
    assert sb.commands.run("printf '%s' \"$SDKVAR\"").stdout == value
    sb.commands.run("unset SDKVAR")
    assert sb.env.get("SDKVAR") is None
    sb.env.set("ONLY_S", "x", session="s")
    assert sb.env.get("ONLY_S", session="s") == "x"
    assert sb.env.get("ONLY_S") is None
    sb.env.set("EMPTY", "")
    assert sb.env.get("EMPTY") == ""


def test_history_and_clear(sb):
    sb.clear_history()
    sb.commands.run("echo one")
    sb.commands.run("echo two; exit 2")
    sb.commands.run("echo other", session="h2")
    hist = sb.history()
    assert [e["command"] for e in hist] == ["echo one", "echo two; exit 2"]
    assert [e["index"] for e in hist] == [1, 2]
    assert all(isinstance(e["timestamp"], str) and e["timestamp"].endswith("Z") for e in hist)
    assert [e["command"] for e in sb.history(session="h2")] == ["echo other"]
    sb.clear_history()
    assert sb.history() == []
    assert [e["command"] for e in sb.history("h2")] == ["echo other"]
    sb.clear_history(session="h2")
    assert sb.history("h2") == []


def test_health_and_ping(sb):
    sb.commands.run("true")
    h = sb.health()
    for key in ("uptimeMs", "sandboxes", "sessions", "running", "queued"):
        assert isinstance(h[key], int), (key, h)
    assert h["sandboxes"] == 1 and h["sessions"] >= 1
    totals = h["totals"]
    for key in ("completed", "failed", "timedOut", "cancelled"):
        assert isinstance(totals[key], int), (key, h)
    assert totals["completed"] >= 1
    assert isinstance(totals["avgExecMs"], (int, float))
    assert sb.ping() is True


def test_protocol_errors_raise_sbx_error(sb):
    with pytest.raises(SbxError) as ei:
        sb.env.set("1BAD", "x")
    assert ei.value.code == INVALID_PARAMS and "name" in ei.value.message
    with pytest.raises(SbxError) as ei:
        sb.env.get("BAD-NAME")
    assert ei.value.code == INVALID_PARAMS
    with pytest.raises(SbxError) as ei:
        sb.commands.run("true", envs={"NOT VALID": "x"})
    assert ei.value.code == INVALID_PARAMS
    with pytest.raises(SbxError) as ei:
        sb.commands.run("true", cwd="")
    assert ei.value.code == INVALID_PARAMS
    with pytest.raises(SbxError) as ei:
        sb.client.request("no.such.method")
    assert ei.value.code == -32601
    with pytest.raises(SbxError) as ei:
        sb.client.request("create")
    assert ei.value.code == -32600  # Sandbox already created
    assert "code -32600" in str(ei.value)
    with pytest.raises(ValueError):
        sb.commands.run("true", timeout=-1)
    assert sb.commands.run("echo ok").stdout == "ok\n"


# ------------------------------------------------------------------ sandbox options


def test_sandbox_options(tmp_path):
    s = new_sandbox(timeout=0.5, envs={"GREETING": "hi"}, limits={"stdoutBytes": 1000, "pids": 64},
                    fs_limit_bytes=8 << 20)
    try:
        assert s.commands.run("echo $GREETING").stdout == "hi\n"
        r = s.commands.run("head -c 5000 /dev/zero | tr '\\0' x")
        assert r.truncated == {"stdout": True, "stderr": False}
        assert r.stdout == "x" * 1000
        r = s.commands.run("sleep 10")  # the sandbox's default timeout
        assert (r.exit_code, r.error_class) == (124, "TIMEOUT")
        assert s.commands.run("sleep 1; echo late", timeout=3).stdout == "late\n"
        assert s.commands.run("df -B1 --output=size /tmp | tail -1").stdout.strip() == str(8 << 20)
    finally:
        s.kill()


def test_invalid_create_options_raise_and_leave_no_server(monkeypatch):
    spawned = []
    real_spawn = Client.spawn.__func__

    def spawn(cls, *a, **kw):
        c = real_spawn(cls, *a, **kw)
        spawned.append(c)
        SPAWNED.append(c.pid)
        return c

    monkeypatch.setattr(Client, "spawn", classmethod(spawn))
    with pytest.raises(SbxError) as ei:
        Sandbox(binary=SBX_BIN, limits={"rpcBytes": 10})
    assert ei.value.code == INVALID_PARAMS
    with pytest.raises(SbxError) as ei:
        Sandbox(binary=SBX_BIN, envs={"1X": "y"})
    assert ei.value.code == INVALID_PARAMS
    assert len(spawned) == 2
    assert all(c.closed and c.process.returncode is not None for c in spawned)


def test_binary_from_sbx_bin_env(monkeypatch):
    monkeypatch.setenv("SBX_BIN", SBX_BIN)
    assert find_binary() == SBX_BIN
    assert find_binary("/explicit/sbx") == "/explicit/sbx"
    s = Sandbox()
    SPAWNED.append(s.client.pid)
    try:
        assert s.commands.run("echo env-bin").stdout == "env-bin\n"
    finally:
        s.kill()
    monkeypatch.setenv("SBX_BIN", "/nonexistent/sbx")
    with pytest.raises(FileNotFoundError):
        Sandbox()


# ------------------------------------------------------------------ more sandboxes on a connection


def test_sandboxes_create_list_destroy(sb):
    sb.commands.run("export WHERE=root")
    child = sb.sandboxes.create(label="child-1", envs={"CHILD": "yes"})
    assert child.sandbox_id != sb.sandbox_id and not child.is_root and sb.is_root
    assert child.commands.run("echo \"[$WHERE] $CHILD\"").stdout == "[] yes\n"
    assert sb.commands.run("echo $WHERE \"[$CHILD]\"").stdout == "root []\n"
    # Every per-sandbox call goes to the child.
    child.sessions.create("cs")
    assert "cs" in child.sessions.list() and "cs" not in sb.sessions.list()
    child.env.set("CV", "1")
    assert child.env.get("CV") == "1" and sb.env.get("CV") is None
    assert [e["command"] for e in child.history()] == ["echo \"[$WHERE] $CHILD\""]
    h = child.commands.start("sleep 30")
    time.sleep(0.2)
    assert h.cancel() and h.wait(10).error_class == "CANCELLED"

    listed = {e["sandboxId"]: e for e in sb.sandboxes.list()}
    assert set(listed) == {sb.sandbox_id, child.sandbox_id}
    assert listed[sb.sandbox_id]["root"] is True
    assert listed[child.sandbox_id]["root"] is False
    assert listed[child.sandbox_id]["label"] == "child-1"
    assert listed[child.sandbox_id]["persist"] is False
    assert sb.health()["sandboxes"] == 2

    child.destroy()
    assert [e["sandboxId"] for e in sb.sandboxes.list()] == [sb.sandbox_id]
    with pytest.raises(SbxError) as ei:
        child.commands.run("true")
    assert ei.value.code == INVALID_PARAMS and "Unknown sandboxId" in ei.value.message
    child.destroy()  # idempotent
    with pytest.raises(SbxError) as ei:
        sb.sandboxes.get("0" * 32).commands.run("true")
    assert ei.value.code == INVALID_PARAMS
    with pytest.raises(SbxError) as ei:
        sb.sandboxes.create(persist=True)  # stdio: no persistent sandboxes
    assert ei.value.code == INVALID_PARAMS
    assert sb.commands.run("echo $WHERE").stdout == "root\n"


def test_child_sandbox_context_manager_destroys_only_it(sb):
    with sb.sandboxes.create() as child:
        assert child.commands.run("echo c").stdout == "c\n"
    assert [e["sandboxId"] for e in sb.sandboxes.list()] == [sb.sandbox_id]
    assert sb.ping()


# ------------------------------------------------------------------ socket server


def test_connect_to_socket_server(socket_server):
    a = Sandbox.connect(socket_server, envs={"CONN": "a"})
    b = Sandbox.connect(socket_server, timeout=0.5)
    try:
        assert a.client.pid is None
        assert a.sandbox_id != b.sandbox_id
        a.commands.run("export X=from-a")
        assert a.commands.run("echo $X $CONN").stdout == "from-a a\n"
        assert b.commands.run("echo \"[$X] [$CONN]\"").stdout == "[] []\n"
        assert b.commands.run("sleep 5").error_class == "TIMEOUT"
        # A connection cannot use another connection's sandboxes.
        with pytest.raises(SbxError) as ei:
            b.sandboxes.get(a.sandbox_id).commands.run("true")
        assert ei.value.code == INVALID_PARAMS

        child = a.sandboxes.create(label="a-child")
        kept = a.sandboxes.create(label="kept", persist=True)
        kept.commands.run("export P=persisted")
        assert b.health()["sandboxes"] == 4
        labels = sorted(e.get("label", "") for e in b.sandboxes.list())
        assert labels == ["", "kept"]  # b's root and the persistent one

        a.kill()  # closes the connection: a's root and child go, the persistent one stays
        assert a.client.closed and not a.ping()
        with pytest.raises(SbxError) as ei:
            child.commands.run("true")
        assert ei.value.code == INTERNAL_ERROR
        assert wait_until(lambda: b.health()["sandboxes"] == 2, timeout=5), b.health()
        assert b.ping()
        again = b.sandboxes.get(kept.sandbox_id)
        assert again.commands.run("echo $P").stdout == "persisted\n"
        again.destroy()
        assert b.health()["sandboxes"] == 1
    finally:
        a.kill()
        b.kill()


def test_two_threads_share_one_socket_connection(socket_server):
    with Sandbox.connect(socket_server) as s:
        results = {}

        def work(name):
            sess = s.sessions.get(name)
            sess.run(f"export ME={name}")
            results[name] = [sess.run("echo $ME; sleep 0.05").stdout for _ in range(5)]

        threads = [threading.Thread(target=work, args=(f"t{i}",)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert results == {f"t{i}": [f"t{i}\n"] * 5 for i in range(6)}


# ------------------------------------------------------------------ concurrency, lifetime


def test_answers_out_of_order_are_routed(sb):
    slow = sb.commands.start("sleep 0.5; echo slow", session="slow")
    fast = sb.commands.start("echo fast", session="fast")
    assert fast.wait(10).stdout == "fast\n"
    assert not slow.done()
    assert slow.wait(10).stdout == "slow\n"
    # Runs in one session are queued in order.
    hs = [sb.commands.start(f"echo {i}") for i in range(5)]
    assert [h.wait(10).stdout for h in hs] == [f"{i}\n" for i in range(5)]


def test_context_manager_leaves_no_server_process():
    with Sandbox(binary=SBX_BIN) as s:
        proc = s.client.process
        pid = proc.pid
        SPAWNED.append(pid)
        s.commands.run("sleep 300 >/dev/null 2>&1 &")
        assert s.ping()
    assert proc.returncode is not None
    assert not os.path.exists(f"/proc/{pid}")
    assert pid not in _sbx_server_pids()
    assert wait_until(lambda: not sbx_processes([pid]), timeout=3), sbx_processes([pid])
    # Killed twice is fine; afterwards calls fail cleanly.
    s.kill()
    s.close()
    assert s.ping() is False
    with pytest.raises(SbxError) as ei:
        s.commands.run("true")
    assert ei.value.code == INTERNAL_ERROR


def test_context_manager_kills_on_exception():
    with pytest.raises(RuntimeError):
        with Sandbox(binary=SBX_BIN) as s:
            SPAWNED.append(s.client.pid)
            proc = s.client.process
            raise RuntimeError("inside")
    assert proc.returncode is not None


def test_kill_while_a_run_is_pending():
    s = new_sandbox()
    h = s.commands.start("sleep 30")
    time.sleep(0.2)
    t0 = time.monotonic()
    s.kill()
    assert time.monotonic() - t0 < 25  # the sleep: 30 s
    # `kill` answers the running command 125 before the server goes; the reader keeps
    # routing answers until the server's stdout ends.
    r = h.wait(5)
    assert (r.exit_code, r.error_class) == (125, "CANCELLED")
    assert s.client.process.returncode == 0


def test_server_death_fails_waiters_with_stderr_tail(tmp_path):
    binary = fake_server(tmp_path, CREATE_OK + """read -r line
sleep 0.3
echo "fake-sbx: worker crashed (injected)" >&2
exit 3
""")
    s = Sandbox(binary=binary)
    assert s.sandbox_id == "0123456789abcdef0123456789abcdef"
    h = s.commands.start("sleep 30")
    with pytest.raises(SbxError) as ei:
        h.wait(10)
    assert ei.value.code == INTERNAL_ERROR
    assert ei.value.message.startswith("server exited: ")
    assert "worker crashed (injected)" in ei.value.message
    with pytest.raises(SbxError) as ei:
        s.commands.run("true")
    assert ei.value.code == INTERNAL_ERROR and "worker crashed" in ei.value.message
    assert s.ping() is False
    t0 = time.monotonic()
    s.kill()
    assert time.monotonic() - t0 < 4.5  # not the 5 s a live server gets before it is terminated


def test_server_failing_at_start_raises(tmp_path):
    binary = fake_server(tmp_path, 'echo "fake-sbx: cannot set up cgroups (injected)" >&2\nexit 1\n')
    with pytest.raises(SbxError) as ei:
        Sandbox(binary=binary)
    assert ei.value.code == INTERNAL_ERROR
    assert "server exited: " in ei.value.message and "cannot set up cgroups" in ei.value.message


def test_stuck_server_is_terminated_by_kill(tmp_path):
    # Answers create, then ignores everything (also EOF on stdin) until SIGTERM.
    binary = fake_server(tmp_path, CREATE_OK + "trap 'exit 0' TERM\nwhile :; do sleep 0.1; done\n")
    s = Sandbox(binary=binary)
    proc = s.client.process
    t0 = time.monotonic()
    s.kill()
    elapsed = time.monotonic() - t0
    assert proc.returncode is not None
    assert 4 < elapsed < 30  # 5 s for the process to exit on its own, then SIGTERM (else never)


def test_real_server_killed_mid_run(sb):
    pid = sb.client.pid
    SPAWNED.remove(pid)  # killed with SIGKILL: cleaned up here, not by the shared check
    h = sb.commands.start("sleep 30")
    time.sleep(0.3)
    os.kill(pid, signal.SIGKILL)
    try:
        with pytest.raises(SbxError) as ei:
            h.wait(10)
        assert ei.value.code == INTERNAL_ERROR
        assert ei.value.message.startswith("server exited: ")
    finally:
        sb.kill()
        if wait_until is not None:
            wait_until(lambda: not sbx_processes([pid]), timeout=5)
            for d in sbx_cgroup_dirs([pid]):
                remove_cgroup_tree(d)


def test_client_rejects_blocking_calls_from_callbacks(sb):
    seen = []

    def cb(text):
        try:
            sb.ping()
        except RuntimeError as e:
            seen.append(str(e))

    sb.commands.run("echo x", on_stdout=cb)
    assert seen and "callback" in seen[0]


def test_raw_client_spawn_and_request():
    c = Client.spawn(SBX_BIN)
    SPAWNED.append(c.pid)
    try:
        assert c.request("ping") == {"pong": True}
        sid = c.request("create")["sandboxId"]
        r = c.request("run", {"command": "echo raw", "sandboxId": sid})
        assert r["stdout"] == "raw\n" and r["exitCode"] == 0
    finally:
        c.close()
    assert c.closed and c.process.returncode is not None


def _sbx_server_pids():
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0] == SBX_BIN.encode() and b"--stdio" in argv:
            pids.append(int(d))
    return pids


def test_files(sb):
    import hashlib as _h
    from sbx import EntryInfo
    sb.files.write("notes/a.txt", "hello\n", mode=0o640)
    assert sb.files.read("notes/a.txt") == "hello\n"
    assert sb.commands.run("cat notes/a.txt; stat -c %a notes/a.txt").stdout == "hello\n640\n"
    blob = bytes(range(256)) * 40000  # ~10 MiB: chunked both ways
    sb.files.write("/tmp/blob", blob)
    assert sb.files.read("/tmp/blob", format="bytes") == blob
    assert sb.commands.run("sha256sum < /tmp/blob").stdout.split()[0] == _h.sha256(blob).hexdigest()
    info = sb.files.get_info("notes/a.txt")
    assert isinstance(info, EntryInfo) and info.type == "file" and info.size == 6 and info.path == "/home/user/notes/a.txt"
    assert [e.name for e in sb.files.list("notes")] == ["a.txt"]
    assert sb.files.exists("notes") and not sb.files.exists("nope")
    sb.files.make_dir("x/y/z")
    sb.files.rename("notes/a.txt", "x/y/z/b.txt")
    assert sb.files.read("x/y/z/b.txt") == "hello\n"
    sb.files.remove("x")
    assert not sb.files.exists("x")
    with pytest.raises(SbxError) as ei:
        sb.files.write("/usr/evil", "x")
    assert ei.value.code == 1 and "EROFS" in str(ei.value)


def test_pause_resume_and_set_timeout():
    sb = new_sandbox(timeout=20)
    try:
        h = sb.commands.run("i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.01; done", background=True)

        def counter():
            try:
                return sb.files.read("/tmp/n").strip()
            except SbxError:  # not written yet
                return ""

        assert wait_until(lambda: counter() != "", timeout=5)
        sb.pause()
        a = sb.files.read("/tmp/n")
        time.sleep(0.3)
        assert sb.files.read("/tmp/n") == a  # frozen: the counter stands still
        with pytest.raises(SbxError) as e:
            sb.pause()
        assert e.value.code == -32602
        sb.resume()
        assert wait_until(lambda: sb.files.read("/tmp/n") != a, timeout=5)
        h.kill()
        sb.set_timeout(0.3)  # E2B's set_timeout: the sandbox goes 0.3 s from now
        assert wait_until(lambda: sb.sandbox_id not in [s["sandboxId"] for s in sb.sandboxes.list()], timeout=5)
    finally:
        sb.close()
