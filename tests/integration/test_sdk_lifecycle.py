"""A sandbox's life through the Python SDK, threaded and asyncio, against the real daemon:
metadata and secrets at creation, sandboxes.list(metadata=...), get_info, pause and resume
with while_paused, expiry (lifetime, idle_timeout, set_timeout) and its on_expired hook, lanes,
and the server's refusals (-32001 with retry_after_ms, -32002, -32003)."""
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sdk" / "python"))

from sbx import (POOL_SHUTTING_DOWN, SANDBOX_DISABLED, SANDBOX_ERROR, WORKER_UNAVAILABLE,  # noqa: E402
                 AsyncSandbox, Sandbox, SbxError)

from conftest import SBX_BIN, SPAWNED, wait_until  # noqa: E402

INVALID_PARAMS = -32602


def new_sandbox(**kw):
    """A Sandbox on a fresh `sbx serve --stdio`, registered for the leftover check."""
    sb = Sandbox(binary=SBX_BIN, **kw)
    SPAWNED.append(sb.client.pid)
    return sb


class Daemon:
    """`sbx serve --socket PATH ARGS`, for the server flags a spawned one does not take."""

    def __init__(self, *args):
        self.path = os.path.join(tempfile.mkdtemp(prefix="sbx-sdk-life-"), "sbx.sock")
        self.proc = subprocess.Popen([SBX_BIN, "serve", "--socket", self.path, "--pool", "0", *args],
                                     stderr=subprocess.PIPE)
        SPAWNED.append(self.proc.pid)
        assert wait_until(lambda: os.path.exists(self.path) or self.proc.poll() is not None, timeout=10)
        assert self.proc.poll() is None, self.proc.stderr.read().decode()

    def children(self):
        pid = self.proc.pid
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(k) for k in f.read().split()]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def daemon():
    made = []

    def make(*args):
        d = Daemon(*args)
        made.append(d)
        return d

    yield make
    for d in made:
        d.stop()


def refused(fn, code):
    """The SbxError fn raises, checked to carry code."""
    with pytest.raises(SbxError) as ei:
        fn()
    assert ei.value.code == code, ei.value
    return ei.value


# ------------------------------------------------------------------ threaded


def test_metadata_secrets_and_info():
    with new_sandbox(metadata={"team": "red", "job.id": "42"}, secrets={"API_TOKEN": "s3cr3t-t0ken-value"}) as sb:
        blue = sb.sandboxes.create(label="b", metadata={"team": "blue", "job.id": "42"})
        info = sb.get_info()
        assert info["metadata"] == {"team": "red", "job.id": "42"}
        assert info["paused"] is False and info["root"] is True

        def ids(metadata):
            return sorted(s["sandboxId"] for s in sb.sandboxes.list(metadata=metadata))

        assert ids({"team": "red"}) == [sb.sandbox_id]
        assert ids({"job.id": "42"}) == sorted([sb.sandbox_id, blue.sandbox_id])
        assert ids({"team": "green"}) == []
        assert len(sb.sandboxes.list()) == 2
        assert blue.get_info()["label"] == "b"
        r = sb.commands.run('echo "$API_TOKEN"; test "$API_TOKEN" = s3cr3t-t0ken-value && echo same')
        assert r.stdout == "[REDACTED:API_TOKEN]\nsame\n"
        # A bad key is refused, naming it; nothing was made and the connection goes on.
        err = refused(lambda: sb.sandboxes.create(metadata={"a b": "x"}), INVALID_PARAMS)
        assert "metadata key" in err.message
        assert len(sb.sandboxes.list()) == 2
        blue.destroy()
        refused(blue.get_info, INVALID_PARAMS)
        assert sb.commands.run("echo ok").stdout == "ok\n"


def test_pause_while_paused_refuse_and_wait():
    with new_sandbox() as sb:
        sb.pause()
        try:
            assert sb.get_info()["paused"] is True
            err = refused(lambda: sb.commands.run("true", while_paused="refuse"), SANDBOX_ERROR)
            assert "paused" in err.message
            refused(lambda: sb.commands.run("true", background=True, while_paused="refuse"), SANDBOX_ERROR)
            refused(lambda: sb.sessions.get("s").run("true", while_paused="refuse"), SANDBOX_ERROR)
            waiting = sb.commands.start("echo after", while_paused="wait")
            time.sleep(0.3)
            assert not waiting.done()  # a paused sandbox cannot have run it
        finally:
            sb.resume()
        assert waiting.wait(timeout=10).stdout == "after\n"
        assert sb.get_info()["paused"] is False
        refused(sb.resume, INVALID_PARAMS)


def test_expiry_tells_on_expired():
    with new_sandbox() as sb:
        told = []
        seen = threading.Event()

        def hook(reason):
            told.append(reason)
            seen.set()

        child = sb.sandboxes.create(lifetime=600, on_expired=hook)
        child.set_timeout(0.2)
        assert seen.wait(10), "no sandbox.expired"
        assert told == ["lifetime"] and child.expired == "lifetime"
        assert "expired: lifetime" in refused(child.get_info, INVALID_PARAMS).message
        refused(lambda: child.commands.run("true"), INVALID_PARAMS)
        # A hook registered later is called at once; one unsubscribed is never called.
        late = []
        child.on_expired(late.append)
        assert late == ["lifetime"]
        idle = sb.sandboxes.create(idle_timeout=0.4)
        dropped = []
        off = idle.on_expired(dropped.append)
        off()
        gone = threading.Event()
        idle.on_expired(lambda reason: gone.set())
        assert idle.commands.run("echo busy").stdout == "busy\n"
        assert gone.wait(10) and idle.expired == "idle"
        assert dropped == []
        assert [s["sandboxId"] for s in sb.sandboxes.list()] == [sb.sandbox_id]
        with pytest.raises(ValueError):
            sb.set_timeout(-1)
        assert sb.expired is None and sb.commands.run("echo root").stdout == "root\n"


def test_root_sandbox_lifetime_on_create():
    seen = threading.Event()
    with new_sandbox(lifetime=0.3, idle_timeout=60, on_expired=lambda reason: seen.set()) as sb:
        assert seen.wait(10) and sb.expired == "lifetime"
        refused(lambda: sb.commands.run("true"), INVALID_PARAMS)


# ------------------------------------------------------------------ lanes and refusals


def test_lanes_retry_after_and_system_lane(daemon):
    d = daemon("--slots", "1", "--system-slots", "1", "--queue", "0")
    with Sandbox.connect(d.path, metadata={"k": "v"}) as sb:
        assert sb.sandboxes.list(metadata={"k": "v"})[0]["sandboxId"] == sb.sandbox_id
        busy = sb.commands.start("sleep 1; echo busy")
        assert wait_until(lambda: sb.health()["lanes"]["interactive"]["active"] == 1, timeout=10)
        err = refused(lambda: sb.commands.run("true", session="b"), WORKER_UNAVAILABLE)
        assert err.message.startswith("WORKER_UNAVAILABLE: the interactive lane is full")
        assert isinstance(err.retry_after_ms, int) and err.retry_after_ms > 0
        assert sb.commands.run("echo ops", session="ops", lane="system").stdout == "ops\n"
        bg = sb.commands.run("echo bg", background=True, lane="system")
        assert bg.wait(timeout=10).stdout == "bg\n"
        copy = sb.fork(lane="system")
        assert copy.commands.run("echo copy", lane="system").stdout == "copy\n"
        copy.destroy()
        snap = sb.snapshot(lane="system")
        sb.restore(snap, lane="system")
        sb.import_state(sb.export_state(lane="system"), lane="system")
        refused(lambda: sb.commands.run("true", lane="fast"), INVALID_PARAMS)
        assert busy.wait(timeout=10).stdout == "busy\n"
        assert SbxError(WORKER_UNAVAILABLE, "x").retry_after_ms is None


def test_secrets_export_imports_back():
    # The export's session state has the secret's value redacted record by record: it imports
    # back (its framing intact), keeps the rest of the state, and carries no value.
    with new_sandbox(secrets={"TOK": "abcdefgh1234"}) as sb:
        sb.commands.run("x=1; copy=$TOK")
        blob = sb.export_state()
        assert b"abcdefgh1234" not in blob
        sb.commands.run("x=2")
        sb.import_state(blob)
        assert sb.commands.run("echo $x").stdout == "1\n"
        # The importing sandbox's own secret is still in its environment.
        assert sb.commands.run('echo "${#TOK}"').stdout == "12\n"


def test_disabled_server_refuses_with_32002(daemon):
    d = daemon("--mode", "disabled")
    err = refused(lambda: Sandbox.connect(d.path), SANDBOX_DISABLED)
    assert err.message.startswith("SANDBOX_DISABLED")


def test_shutting_down_refuses_with_32003(daemon):
    d = daemon("--shutdown-deadline-ms", "2000")
    sb = Sandbox.connect(d.path, secrets={"TOK": "abcdefgh1234"})
    assert sb.commands.run("echo $TOK").stdout == "[REDACTED:TOK]\n"
    # The sandbox's pid 1 stopped: a run sent now waits, so the shutdown has work under way.
    kids = d.children()
    for k in kids:
        os.kill(k, signal.SIGSTOP)
    try:
        stuck = sb.commands.start("sleep 30", session="stuck")
        assert wait_until(lambda: sb.health()["queued"] == 1, timeout=10)
        d.proc.send_signal(signal.SIGTERM)
        err = refused(lambda: sb.commands.run("true", session="other"), POOL_SHUTTING_DOWN)
        assert err.message.startswith("POOL_SHUTTING_DOWN")
        assert sb.ping() is True
    finally:
        for k in kids:
            try:
                os.kill(k, signal.SIGCONT)
            except ProcessLookupError:
                pass
    # Queued, it is refused; if it got to run before the signal, it is cancelled.
    try:
        assert stuck.wait(timeout=20).exit_code == 125
    except SbxError as e:
        assert e.code == POOL_SHUTTING_DOWN, e
    assert d.proc.wait(20) == 0
    sb.kill()


# ------------------------------------------------------------------ asyncio


def test_async_lifecycle(daemon):
    d = daemon("--slots", "1", "--system-slots", "1", "--queue", "0")

    async def main():
        async with await AsyncSandbox.create(binary=SBX_BIN, metadata={"team": "red"}, lifetime=3600,
                                             idle_timeout=3600, secrets={"TOK": "abcdefgh1234"}) as sb:
            SPAWNED.append(sb.client.pid)
            assert (await sb.get_info())["metadata"] == {"team": "red"}
            assert (await sb.commands.run("echo $TOK")).stdout == "[REDACTED:TOK]\n"
            told = asyncio.Event()
            reasons = []

            async def hook(reason):  # a coroutine function: run as a task
                reasons.append(reason)
                told.set()

            child = await sb.sandboxes.create(metadata={"team": "blue"}, lifetime=0.3, on_expired=hook)
            assert [s["sandboxId"] for s in await sb.sandboxes.list(metadata={"team": "blue"})] == [child.sandbox_id]
            await asyncio.wait_for(told.wait(), 10)
            assert reasons == ["lifetime"] and child.expired == "lifetime"
            assert await sb.sandboxes.list(metadata={"team": "blue"}) == []
            await sb.pause()
            try:
                with pytest.raises(SbxError) as ei:
                    await sb.commands.run("true", while_paused="refuse")
                assert ei.value.code == SANDBOX_ERROR
            finally:
                await sb.resume()
            assert (await sb.commands.run("echo sys", lane="system")).stdout == "sys\n"
            with pytest.raises(ValueError):
                await sb.set_timeout(-1)

        async with await AsyncSandbox.connect(d.path) as sb:
            busy = asyncio.ensure_future(sb.commands.run("sleep 1; echo busy"))
            for _ in range(500):
                if (await sb.health())["lanes"]["interactive"]["active"] == 1:
                    break
                await asyncio.sleep(0.02)
            with pytest.raises(SbxError) as ei:
                await sb.commands.run("true", session="b")
            assert ei.value.code == WORKER_UNAVAILABLE and ei.value.retry_after_ms > 0
            h = await sb.commands.run("echo bg", background=True, lane="system")
            assert (await h.wait()).stdout == "bg\n"
            fork = await sb.fork(lane="system")
            await fork.destroy()
            assert (await busy).stdout == "busy\n"

    asyncio.run(asyncio.wait_for(main(), 120))


def test_get_metrics_threaded_and_async():
    """get_metrics: the server's samples of the sandbox, every 5 s, as SandboxMetric (E2B's
    names), a range kept to, bad ones refused."""
    import datetime
    with new_sandbox() as sb:
        t0 = time.time()
        sb.commands.run("head -c 2000000 /dev/zero > /tmp/f")
        assert wait_until(lambda: len(sb.get_metrics()) >= 1, 12, 0.5)
        m = sb.get_metrics()[-1]
        assert m.timestamp.tzinfo is not None and abs(m.timestamp.timestamp() - t0) < 30
        assert m.disk_used >= 2000000 and m.disk_total == 256 << 20 and m.mem_total == 512 << 20
        assert 0 < m.mem_used < m.mem_total and m.runs == 1 and 0 <= m.cpu_used_pct <= 100 and m.cpu_count > 0
        assert sb.get_metrics(end=t0 - 3600) == []
        assert sb.get_metrics(start=datetime.datetime.fromtimestamp(t0 + 3600, datetime.timezone.utc)) == []
        with pytest.raises(ValueError):
            sb.get_metrics(start=datetime.datetime.now())  # a naive datetime: which zone?
        with pytest.raises(SbxError) as ei:
            sb.get_metrics(start=t0 + 10, end=t0)
        assert ei.value.code == INVALID_PARAMS

    async def main():
        async with await AsyncSandbox.create(binary=SBX_BIN) as sb:
            SPAWNED.append(sb.client.pid)
            await sb.commands.run("true")
            for _ in range(120):
                got = await sb.get_metrics()
                if got:
                    break
                await asyncio.sleep(0.1)
            assert got and got[-1].runs == 1 and got[-1].pids >= 1
    asyncio.run(asyncio.wait_for(main(), 60))
