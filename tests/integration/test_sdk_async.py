"""The Python SDK's AsyncSandbox (asyncio) against the real `sbx serve`, and E2B's names on
both Sandbox and AsyncSandbox.

Each test is an async program run with asyncio.run under a deadline. Servers spawned through
the SDK are registered with conftest's SPAWNED list, so the autouse leftover check covers
them. All traffic is on loopback (the forwarded port is 127.0.0.1 on the host).
"""
import asyncio
import hashlib
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sdk" / "python"))

from sbx import (AsyncCommandHandle, AsyncProcessHandle, AsyncSandbox, AsyncSession, AsyncTerminalHandle,  # noqa: E402
                 CommandResult, EntryInfo, OutputChunk, ProcessEndedError, Sandbox, SbxError)
from test_sdk import SBX_BIN, _skip_reason, socket_server  # noqa: E402,F401 (socket_server: a fixture)

from conftest import SPAWNED, remove_cgroup_tree, sbx_cgroup_dirs, sbx_processes, wait_until  # noqa: E402

pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")

INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

#: No test may take longer than this (a hang fails instead of stalling the suite).
DEADLINE = 60


def arun(coro):
    return asyncio.run(asyncio.wait_for(coro, DEADLINE))


async def new_sandbox(**kw):
    kw.setdefault("binary", SBX_BIN)
    kw.setdefault("timeout", 20)
    sb = await AsyncSandbox.create(**kw)
    SPAWNED.append(sb.client.pid)
    return sb


# A foreground command still running in the sandbox shows up in /proc as exactly this argv.
RUNNING_SLEEPS = ("for f in /proc/[0-9]*/cmdline; do c=$(tr '\\0' ' ' < $f 2>/dev/null); "
                  "[ \"$c\" = \"sleep 987 \" ] && echo found; done; true")


# ------------------------------------------------------------------ commands


def test_run_with_callbacks_failure_and_timeout():
    async def main():
        async with await new_sandbox() as sb:
            assert isinstance(sb, AsyncSandbox) and len(sb.sandbox_id) == 32
            seen = []

            async def on_out(text):  # a coroutine callback that awaits
                await asyncio.sleep(0)
                seen.append(("out", text, time.monotonic()))

            t0 = time.monotonic()
            r = await sb.commands.run("echo first; sleep 0.8; echo second; printf 'caf\\xc3'; printf '\\xa9\\n'",
                                      on_stdout=on_out, on_stderr=lambda t: seen.append(("err", t, 0)))
            end = time.monotonic()
            assert isinstance(r, CommandResult)
            assert r.exit_code == 0 and r.stdout == "first\nsecond\ncaf\u00e9\n"
            assert "".join(t for k, t, _ in seen if k == "out") == r.stdout
            # Streamed: the first line came while the command still slept.
            assert seen[0][1] == "first\n" and seen[0][2] - t0 < 0.7 and end - seen[0][2] > 0.5, seen

            # A failing command is a result, with its stderr.
            r = await sb.commands.run("cd /tmp && export V=kept; echo oops >&2; exit 3")
            assert (r.exit_code, r.stderr, r.ok, r.error_class) == (3, "oops\n", False, None)
            r = await sb.commands.run("echo $PWD $V")
            assert r.stdout == "/tmp kept\n"  # the session's state carried over

            t0 = time.monotonic()
            r = await sb.commands.run("echo before; sleep 120", timeout=0.5)
            assert (r.exit_code, r.error_class, r.stdout) == (124, "TIMEOUT", "before\n")
            assert 0.4 <= time.monotonic() - t0 < 60

            with pytest.raises(SbxError) as ei:
                await sb.commands.run("true", envs={"NOT VALID": "x"})
            assert ei.value.code == INVALID_PARAMS

            # A callback's exception is raised by the run; the callbacks run outside the
            # reader, so one may await SDK calls.
            async def writes(text):
                await sb.files.write("from-callback.txt", text)

            assert (await sb.commands.run("echo relayed", on_stdout=writes)).ok
            assert await sb.files.read("from-callback.txt") == "relayed\n"

            def boom(text):
                raise ValueError("callback failed")

            with pytest.raises(ValueError, match="callback failed"):
                await sb.commands.run("echo x", on_stdout=boom)

            h = await sb.commands.start("sleep 0.2; echo started")
            assert isinstance(h, AsyncCommandHandle) and not h.done()
            with pytest.raises(TimeoutError):
                await h.wait(timeout=0.01)
            assert (await h.wait()).stdout == "started\n" and await h.cancel() is False

    arun(main())


def test_cancelling_the_task_cancels_the_run_in_the_sandbox():
    async def main():
        async with await new_sandbox() as sb:
            watcher = sb.sessions.get("watcher")
            task = asyncio.ensure_future(sb.commands.run("touch /tmp/started; sleep 987; touch /tmp/finished"))
            deadline = time.monotonic() + 10
            while not await sb.files.exists("/tmp/started"):
                assert time.monotonic() < deadline and not task.done()
                await asyncio.sleep(0.02)
            assert (await watcher.run(RUNNING_SLEEPS)).stdout == "found\n"  # the check can see it

            t0 = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert time.monotonic() - t0 < 30  # the sleep: 987 s
            # The command really stopped: nothing of it runs, the session is free at once,
            # and what came after the sleep never ran.
            assert (await watcher.run(RUNNING_SLEEPS)).stdout == ""
            r = await sb.commands.run("echo alive", timeout=5)
            assert (r.stdout, r.exit_code) == ("alive\n", 0)
            assert not await sb.files.exists("/tmp/finished")
            assert (await sb.health())["totals"]["cancelled"] == 1

            # asyncio.wait_for's timeout cancels the same way.
            t0 = time.monotonic()
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(sb.commands.run("sleep 987", session="other"), 0.5)
            assert time.monotonic() - t0 < 30
            assert (await watcher.run(RUNNING_SLEEPS)).stdout == ""
            assert (await sb.health())["totals"]["cancelled"] == 2

            # An explicit cancel through a handle.
            h = await sb.commands.start("sleep 987")
            await asyncio.sleep(0.2)
            assert await h.cancel() is True
            r = await h.wait(10)
            assert (r.exit_code, r.error_class) == (125, "CANCELLED")

    arun(main())


def test_concurrent_runs_in_sessions_overlap():
    async def main():
        async with await new_sandbox() as sb:
            n = 4

            async def one(i):
                return await sb.commands.run("date +%s.%N; sleep 1; date +%s.%N", session=f"s{i}")

            await asyncio.gather(*(sb.sessions.create(f"s{i}") for i in range(n)))
            results = await asyncio.gather(*(one(i) for i in range(n)))
            spans = [tuple(float(x) for x in r.stdout.split()) for r in results]
            assert all(r.exit_code == 0 and len(s) == 2 for r, s in zip(results, spans)), results
            # Every run started before any ended (by the sandbox's own clock), and together
            # they took about as long as one: they overlapped, not one after the other.
            assert max(s[0] for s in spans) < min(s[1] for s in spans), spans
            assert set(await sb.sessions.list()) >= {f"s{i}" for i in range(n)}

    arun(main())


# ------------------------------------------------------------------ files


def test_files_round_trip_with_binary():
    async def main():
        async with await new_sandbox() as sb:
            blob = bytes(range(256)) * 20000 + b"\x00\xff"  # ~5 MiB: a multi-part upload and read
            await sb.files.write("data/blob.bin", blob)
            assert await sb.files.read("data/blob.bin", format="bytes") == blob
            r = await sb.commands.run("sha256sum < data/blob.bin")
            assert r.stdout.split()[0] == hashlib.sha256(blob).hexdigest()
            await sb.files.write("data/t.txt", "h\u00e9llo\n", mode=0o600)
            assert await sb.files.read("data/t.txt") == "h\u00e9llo\n"
            assert (await sb.commands.run("stat -c %a data/t.txt")).stdout == "600\n"
            info = await sb.files.get_info("data/t.txt")
            assert isinstance(info, EntryInfo) and (info.type, info.size, info.path) == \
                ("file", 7, "/home/user/data/t.txt")
            assert sorted(e.name for e in await sb.files.list("data")) == ["blob.bin", "t.txt"]
            assert await sb.files.make_dir("data/sub") is True
            assert await sb.files.make_dir("data/sub") is False
            await sb.files.rename("data/t.txt", "data/sub/u.txt")
            assert not await sb.files.exists("data/t.txt") and await sb.files.exists("data/sub/u.txt")
            await sb.files.remove("data")
            assert not await sb.files.exists("data")
            with pytest.raises(SbxError) as ei:
                await sb.files.write("/usr/evil", "x")
            assert ei.value.code == 1 and "EROFS" in ei.value.message
            with pytest.raises(SbxError) as ei:
                await sb.files.read("missing")
            assert ei.value.code == 1 and "ENOENT" in ei.value.message

    arun(main())


def test_a_cancelled_upload_is_aborted():
    async def main():
        async with await new_sandbox() as sb:
            sent = []
            real = sb.client.request

            async def spy(method, params=None, timeout=None):
                sent.append((method, (params or {}).get("upload")))
                result = await real(method, params, timeout)
                if sent.count(("files.write", "append")) == 1 and method == "files.write":
                    task.cancel()  # between the second and the third part
                return result

            sb.client.request = spy
            task = asyncio.ensure_future(sb.files.write("up/big.bin", os.urandom(20 << 20)))
            with pytest.raises(asyncio.CancelledError):
                await task
            del sb.client.request
            assert sent[-1] == ("files.write", "abort") and ("files.write", "commit") not in sent, sent
            assert not await sb.files.exists("up/big.bin")
            # No part of it is left in the sandbox: not a temp file, not its space.
            assert (await sb.commands.run("ls -A up")).stdout == ""
            used = await sb.commands.run("df -k --output=used /home/user | tail -1")
            assert int(used.stdout) < 1024, used  # KiB; the 20 MiB were not kept

    arun(main())


# ------------------------------------------------------------------ background, ports, pty


def test_background_server_waited_for_by_port_and_fetched_from_the_host():
    async def main():
        async with await new_sandbox() as sb:
            await sb.files.write("www/index.html", "hello from the sandbox\n")
            logged = []

            async def on_err(text):
                logged.append(text)

            web = await sb.commands.run("exec python3 -m http.server 8000 --bind 127.0.0.1", background=True,
                                        cwd="/home/user/www", on_stderr=on_err, label="web")
            assert isinstance(web, AsyncProcessHandle) and web.pid > 0
            await web.wait_for_port(8000, timeout=20)
            host = await sb.get_host(8000)
            assert re.fullmatch(r"127\.0\.0\.1:\d+", host) and await sb.get_host(8000) == host
            addr, port = host.split(":")
            reader, writer = await asyncio.open_connection(addr, int(port))
            writer.write(b"GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n")
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            await writer.wait_closed()
            assert answer.startswith(b"HTTP/1.0 200") and answer.endswith(b"\r\n\r\nhello from the sandbox\n"), answer
            [info] = [p for p in await sb.commands.list() if p.process_id == web.process_id]
            assert (info.status, info.label) == ("running", "web")
            assert await web.kill() is True
            r = await web.wait(timeout=10)
            assert (r.status, r.exit_code) == ("killed", 143)
            assert "GET /index.html" in r.stderr and "GET /index.html" in "".join(logged)
            assert await web.kill() is False

            # Output by async iteration (twice: each from the first chunk), and stdin.
            h = await sb.commands.run("for i in 1 2 3; do echo $i; sleep 0.05; done; echo e >&2; exit 4",
                                      background=True)
            chunks = [c async for c in h]
            assert all(isinstance(c, OutputChunk) for c in chunks)
            assert "".join(c.text for c in chunks if c.stream == "stdout") == "1\n2\n3\n"
            assert [c.text for c in chunks if c.stream == "stderr"] == ["e\n"]
            assert [c.cursor for c in chunks] == [c.cursor for c in [c async for c in h]]
            assert (await h.wait()).exit_code == 4
            cat = await sb.commands.run("cat", background=True, stdin=True)
            await cat.send_stdin("to stdin\n")
            await cat.close_stdin()
            assert (await cat.wait(timeout=10)).stdout == "to stdin\n"
            short = await sb.commands.run("exit 0", background=True)
            with pytest.raises(ProcessEndedError):
                await short.wait_for_port(9, timeout=10)
            # connect() resumes a process by its pid.
            later = await sb.commands.run("sleep 0.3; echo late", background=True)
            again = await sb.commands.connect(later.pid)
            assert (await again.wait(10)).stdout == "late\n"

    arun(main())


def test_pty_sessions_env_history():
    async def main():
        async with await new_sandbox() as sb:
            got = bytearray()
            term = await sb.pty.create(cols=100, rows=30, on_data=got.extend)
            assert isinstance(term, AsyncTerminalHandle)
            await term.send_input("stty size; tty\n")
            deadline = time.monotonic() + 10
            while b"30 100" not in got:
                assert time.monotonic() < deadline, bytes(got)
                await asyncio.sleep(0.05)
            await term.resize(120, 40)
            await term.send_input("stty size; exit 7\n")
            r = await term.wait(timeout=10)
            assert r.exit_code == 7 and b"40 120" in got and b"/dev/pts/" in got

            s = await sb.sessions.create("build")
            assert isinstance(s, AsyncSession) and s.name == "build"
            await s.run("cd /tmp")
            await sb.env.set("TOKEN", "x y", session="build")
            assert await sb.env.get("TOKEN", session="build") == "x y" and await sb.env.get("TOKEN") is None
            assert (await s.run("echo $PWD $TOKEN")).stdout == "/tmp x y\n"
            assert [e["command"] for e in await s.history()] == ["cd /tmp", "echo $PWD $TOKEN"]
            assert "build" in await sb.sessions.list()
            await s.delete()
            assert "build" not in await sb.sessions.list()
            assert await sb.ping() is True and (await sb.health())["sandboxes"] == 1

    arun(main())


# ------------------------------------------------------------------ sandboxes


def test_fork_snapshot_restore_export_import():
    async def main():
        async with await new_sandbox() as sb:
            await sb.commands.run("echo v1 > f.txt; export STATE=one")
            snap = await sb.snapshot()
            child = await sb.fork()
            assert child.sandbox_id != sb.sandbox_id and not child.is_root
            assert (await child.commands.run("cat f.txt; echo $STATE")).stdout == "v1\none\n"
            await child.commands.run("echo forked > f.txt")
            assert await sb.files.read("f.txt") == "v1\n"  # independent
            await child.kill()
            with pytest.raises(SbxError):
                await child.commands.run("true")

            await sb.commands.run("echo v2 > f.txt; export STATE=two")
            blob = await sb.export_state()
            assert blob[:4] == b"\x28\xb5\x2f\xfd"  # zstd
            await sb.restore(snap)
            assert (await sb.commands.run("cat f.txt; echo $STATE")).stdout == "v1\none\n"
            assert [s["id"] for s in await sb.list_snapshots()] == [snap]
            await sb.import_state(blob)
            assert (await sb.commands.run("cat f.txt; echo $STATE")).stdout == "v2\ntwo\n"
            await sb.delete_snapshot(snap)
            assert await sb.list_snapshots() == []

            other = await sb.sandboxes.create(label="second")
            assert {e.get("label") for e in await sb.sandboxes.list()} >= {"second"}
            assert (await other.commands.run("cat f.txt")).exit_code != 0
            await other.destroy()
        assert sb.client.closed and await sb.ping() is False

    arun(main())


def test_connect_to_a_socket_daemon(socket_server):
    async def main():
        a = await AsyncSandbox.connect(socket_server, envs={"CONN": "a"})
        b = await AsyncSandbox.connect(socket_server, timeout=0.5)
        try:
            assert a.client.pid is None and a.sandbox_id != b.sandbox_id
            await a.commands.run("export X=from-a")
            ra, rb = await asyncio.gather(a.commands.run("echo $X $CONN"), b.commands.run("echo \"[$X]\""))
            assert (ra.stdout, rb.stdout) == ("from-a a\n", "[]\n")
            assert (await b.commands.run("sleep 5")).error_class == "TIMEOUT"
            kept = await a.sandboxes.create(label="kept", persist=True)
            await kept.commands.run("export P=persisted")
            assert (await b.health())["sandboxes"] == 3
            await a.kill()  # closes a's connection: its root goes, the persistent one stays
            assert a.client.closed and not await a.ping()
            with pytest.raises(SbxError) as ei:
                await a.commands.run("true")
            assert ei.value.code == INTERNAL_ERROR
            again = b.sandboxes.get(kept.sandbox_id)
            assert (await again.commands.run("echo $P")).stdout == "persisted\n"
            await again.destroy()
            deadline = time.monotonic() + 5
            while (await b.health())["sandboxes"] != 1:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
        finally:
            await a.kill()
            await b.kill()

    arun(main())


def test_server_death_fails_waiters_and_construction_errors():
    async def main():
        with pytest.raises(TypeError):
            AsyncSandbox()
        with pytest.raises(SbxError) as ei:
            await new_sandbox(envs={"1BAD": "x"})
        assert ei.value.code == INVALID_PARAMS
        sb = await new_sandbox()
        pid = sb.client.pid
        SPAWNED.remove(pid)  # killed with SIGKILL: cleaned up here, not by the shared check
        try:
            task = asyncio.ensure_future(sb.commands.run("sleep 30"))
            await asyncio.sleep(0.3)
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(SbxError) as ei:
                await task
            assert ei.value.code == INTERNAL_ERROR and ei.value.message.startswith("server exited: ")
            assert sb.client.closed
            with pytest.raises(SbxError) as ei:
                await sb.files.exists("x")
            assert ei.value.code == INTERNAL_ERROR
        finally:
            await sb.kill()
            wait_until(lambda: not sbx_processes([pid]), timeout=5)
            for d in sbx_cgroup_dirs([pid]):
                remove_cgroup_tree(d)

    arun(main())


# ------------------------------------------------------------------ E2B's names


def test_e2b_names_on_sandbox():
    sb = Sandbox.create(timeout=20, binary=SBX_BIN)
    SPAWNED.append(sb.client.pid)
    try:
        assert isinstance(sb, Sandbox)
        assert sb.commands.run("echo e2b").stdout == "e2b\n"
        f = sb.files
        assert f.make_dir("d") is True and f.make_dir("d") is False
        f.write("d/a.txt", "one")
        assert f.read("d/a.txt") == "one" and f.read("d/a.txt", format="bytes") == b"one"
        assert f.exists("d/a.txt") and f.get_info("d/a.txt").size == 3
        assert f.get_info("d/a.txt") == f.stat("d/a.txt")  # the older name
        f.rename("d/a.txt", "d/b.txt")
        assert [e.name for e in f.list("d")] == ["b.txt"]
        f.remove("d")
        assert not f.exists("d")
    finally:
        sb.kill()
    assert sb.client.closed and sb.client.process.poll() is not None
    sb.kill()  # idempotent
    old = Sandbox(binary=SBX_BIN)  # the older spelling
    SPAWNED.append(old.client.pid)
    old.close()
    assert old.client.closed


def test_e2b_names_on_async_sandbox():
    async def main():
        sb = await AsyncSandbox.create(timeout=20, binary=SBX_BIN)
        SPAWNED.append(sb.client.pid)
        try:
            assert (await sb.commands.run("echo e2b")).stdout == "e2b\n"
            f = sb.files
            assert await f.make_dir("d") is True and await f.make_dir("d") is False
            await f.write("d/a.txt", "one")
            assert await f.read("d/a.txt") == "one"
            assert await f.exists("d/a.txt") and (await f.get_info("d/a.txt")).size == 3
            assert await f.get_info("d/a.txt") == await f.stat("d/a.txt")
            await f.rename("d/a.txt", "d/b.txt")
            assert [e.name for e in await f.list("d")] == ["b.txt"]
            await f.remove("d")
            assert not await f.exists("d")
        finally:
            await sb.kill()
        assert sb.client.closed and sb.client.process.returncode is not None
        await sb.kill()
        await sb.close()

    arun(main())


def test_async_pause_resume_and_set_timeout():
    async def main():
        async with await new_sandbox() as sb:
            await sb.commands.run("sleep 0.1")
            await sb.pause()
            run = asyncio.ensure_future(sb.commands.run("echo after"))
            await asyncio.sleep(0.3)
            assert not run.done()  # runs wait while the sandbox is paused
            await sb.resume()
            assert (await run).stdout == "after\n"
            await sb.set_timeout(3600)
            assert sb.sandbox_id in [s["sandboxId"] for s in await sb.sandboxes.list()]
    arun(main())
