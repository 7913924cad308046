"""files.watch_dir of the Python SDK (Sandbox and AsyncSandbox) against the real daemon's
files.watch / files.unwatch / files.event.

A daemon without files.watch (answering -32601) skips these tests, naming the method.
"""
import asyncio
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sdk" / "python"))

from sbx import (AsyncSandbox, AsyncWatchHandle, FilesystemEvent, FilesystemEventType, Sandbox, SbxError,  # noqa: E402
                 WatchHandle)
from test_sdk import SBX_BIN, _skip_reason  # noqa: E402

from conftest import SPAWNED  # noqa: E402

pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")

INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
LIMIT_EXCEEDED = -32001
C, W, RM, MV, CH, OVERFLOW = (FilesystemEventType.CREATE, FilesystemEventType.WRITE, FilesystemEventType.REMOVE,
                              FilesystemEventType.RENAME, FilesystemEventType.CHMOD, FilesystemEventType.OVERFLOW)


def skip_without_watch(client_request):
    """Skips the test when the daemon has no files.watch (answers -32601)."""
    try:
        wid = client_request("files.watch", {"path": "/tmp"})["watchId"]
    except SbxError as e:
        if e.code == METHOD_NOT_FOUND:
            return f"the daemon has no files.watch method yet ({e.message})"
        raise
    client_request("files.unwatch", {"watchId": wid})
    return None


@pytest.fixture
def sb():
    s = Sandbox(timeout=30, binary=SBX_BIN)
    SPAWNED.append(s.client.pid)
    reason = skip_without_watch(s.client.request)
    if reason:
        s.kill()
        pytest.skip(reason)
    yield s
    s.kill()


class Events:
    """Collects events from the reader thread; waits for ones."""

    def __init__(self):
        self.list = []
        self.cond = threading.Condition()

    def __call__(self, event):
        with self.cond:
            self.list.append(event)
            self.cond.notify_all()

    def pairs(self):
        with self.cond:
            return [(e.type, e.name) for e in self.list]

    def wait_for(self, *wanted, timeout=10):
        with self.cond:
            ok = self.cond.wait_for(lambda: all(w in [(e.type, e.name) for e in self.list] for w in wanted),
                                    timeout)
            assert ok, f"waited for {wanted}, got {[(e.type, e.name) for e in self.list]}"


def test_watch_dir_reports_each_kind_of_change_then_stops(sb):
    sb.files.make_dir("w")
    ev = Events()
    h = sb.files.watch_dir("w", ev)
    assert isinstance(h, WatchHandle) and h.watch_id
    sb.commands.run("cd w && echo a > a.txt && echo more >> a.txt && chmod 600 a.txt && mv a.txt b.txt "
                    "&& mkdir d && rm b.txt")
    ev.wait_for((C, "a.txt"), (W, "a.txt"), (CH, "a.txt"), (MV, "a.txt"), (C, "b.txt"), (C, "d"), (RM, "b.txt"))
    pairs = ev.pairs()
    assert pairs.index((C, "a.txt")) < pairs.index((W, "a.txt")) < pairs.index((RM, "b.txt"))
    for e in ev.list:
        assert isinstance(e, FilesystemEvent) and isinstance(e.type, FilesystemEventType)
        assert e.path == "/home/user/w/" + e.name
        assert e.is_dir == (e.name == "d")
    assert (C, "a.txt") in [(e.type.value, e.name) for e in ev.list]  # also plain strings
    sb.files.write("w/c.txt", "through files.write")  # a create and a write of its target
    ev.wait_for((C, "c.txt"), (W, "c.txt"))
    # Not recursive: below d is not reported.
    sb.commands.run("echo x > w/d/inner")
    h.stop()
    n = len(ev.list)
    sb.commands.run("echo y > w/after; rm w/c.txt")
    time.sleep(0.3)
    assert len(ev.list) == n and not any(e.name.startswith("d/") for e in ev.list), ev.pairs()
    h.stop()  # idempotent


def test_recursive_and_flat_watches_side_by_side(sb):
    sb.commands.run("mkdir -p /tmp/r/old")
    deep, flat = Events(), Events()
    hd = sb.files.watch_dir("/tmp/r", deep, recursive=True)
    hf = sb.files.watch_dir("/tmp/r", flat)
    assert hd.watch_id != hf.watch_id
    sb.commands.run("mkdir /tmp/r/new && echo 1 > /tmp/r/new/f && echo 2 > /tmp/r/old/g && echo 3 > /tmp/r/top")
    deep.wait_for((C, "new"), (C, "new/f"), (W, "new/f"), (C, "old/g"), (C, "top"))
    flat.wait_for((C, "new"), (C, "top"))
    assert [p for p in flat.pairs() if "/" in p[1]] == []
    assert all(e.path == "/tmp/r/" + e.name for e in deep.list)
    hd.stop()
    hf.stop()


def test_watch_errors_limit_and_end(sb):
    sb.files.write("file.txt", "x")
    with pytest.raises(SbxError) as ei:
        sb.files.watch_dir("file.txt", print)
    assert ei.value.code == INVALID_PARAMS
    with pytest.raises(SbxError) as ei:
        sb.files.watch_dir("missing", print)
    assert ei.value.code == 1 and "ENOENT" in ei.value.message
    with pytest.raises(SbxError) as ei:
        sb.files.watch_dir("/usr", print)  # outside the writable tree
    assert ei.value.code in (1, INVALID_PARAMS)
    handles = [sb.files.watch_dir("/tmp", print) for _ in range(16)]
    with pytest.raises(SbxError) as ei:
        sb.files.watch_dir("/tmp", print)
    assert ei.value.code == LIMIT_EXCEEDED
    handles.pop().stop()
    handles.append(sb.files.watch_dir("/tmp", print))  # a stopped watch frees its place
    for h in handles:
        h.stop()
    with pytest.raises(SbxError) as ei:
        sb.client.request("files.unwatch", {"watchId": "w999999"})
    assert ei.value.code == INVALID_PARAMS

    # A watch ends with its sandbox: stopping it then is no error. An exception of the
    # callback is raised by stop(), and no event is delivered after it.
    child = sb.sandboxes.create()
    calls = []

    def failing(event):
        calls.append(event)
        raise ValueError("on_event failed")

    h = child.files.watch_dir("/tmp", failing)
    child.commands.run("touch /tmp/one /tmp/two")
    deadline = time.monotonic() + 10
    while not calls:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    child.commands.run("touch /tmp/three")
    child.destroy()
    with pytest.raises(ValueError, match="on_event failed"):
        h.stop()
    assert len(calls) == 1


def test_a_reader_that_falls_behind_gets_one_overflow(sb):
    # Long paths make each event a big line (about 3.9 kB): the connection's queue fills after
    # about a thousand while the SDK's reader is held up in the first callback.
    deep = "/tmp/w/" + "/".join(["d%02d" % i + "x" * 246 for i in range(15)])
    sb.commands.run(f"mkdir -p {deep}")
    ev = Events()
    release = threading.Event()

    def slow(event):
        ev(event)
        if len(ev.list) == 1:
            release.wait(20)

    h = sb.files.watch_dir("/tmp/w", slow, recursive=True)
    flood = 5000
    run = sb.commands.start(f"echo > /tmp/w/first; cd {deep} && for i in $(seq {flood}); do echo x > f$((i % 20)); done")
    time.sleep(3)  # the reader is stuck in the first callback: the flood meets a full pipe
    release.set()
    assert run.wait(60).exit_code == 0
    sb.commands.run("echo > /tmp/w/after")
    ev.wait_for((W, "after"), timeout=30)
    overflows = [e for e in ev.list if e.type == OVERFLOW]
    assert len(overflows) == 1, ev.pairs()[:20]
    assert (overflows[0].name, overflows[0].path, overflows[0].is_dir) == ("", None, False)
    writes = [e for e in ev.list if e.type == W and e.path and e.path.startswith(deep)]
    assert 0 < len(writes) < flood
    h.stop()


def test_async_watch_dir():
    async def main():
        sb = await AsyncSandbox.create(timeout=30, binary=SBX_BIN)
        SPAWNED.append(sb.client.pid)
        try:
            try:
                probe = await sb.client.request("files.watch", {"path": "/tmp"})
            except SbxError as e:
                if e.code != METHOD_NOT_FOUND:
                    raise
                return f"the daemon has no files.watch method yet ({e.message})"
            await sb.client.request("files.unwatch", {"watchId": probe["watchId"]})
            got = []
            seen = asyncio.Event()

            async def on_event(event):  # a coroutine callback that awaits an SDK call
                got.append((event.type, event.name, await sb.files.exists(event.path)))
                if event.name == "b.txt" and event.type == RM:
                    seen.set()

            await sb.files.make_dir("aw")
            h = await sb.files.watch_dir("aw", on_event)
            assert isinstance(h, AsyncWatchHandle)
            await sb.files.write("aw/a.txt", "x")
            await sb.commands.run("mv aw/a.txt aw/b.txt; rm aw/b.txt")
            await asyncio.wait_for(seen.wait(), 10)
            kinds = [(t, n) for t, n, _ in got]
            assert kinds.index((C, "a.txt")) < kinds.index((MV, "a.txt")) < kinds.index((RM, "b.txt")), got
            assert (C, "b.txt") in kinds
            await h.stop()
            n = len(got)
            await sb.commands.run("touch aw/late")
            await asyncio.sleep(0.3)
            assert len(got) == n
            async with await sb.files.watch_dir("/tmp", print, recursive=True):
                pass
            with pytest.raises(SbxError) as ei:
                await sb.files.watch_dir("missing", print)
            assert ei.value.code == 1
            return None
        finally:
            await sb.kill()

    reason = asyncio.run(asyncio.wait_for(main(), 60))
    if reason:
        pytest.skip(reason)
