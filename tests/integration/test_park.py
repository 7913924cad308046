"""Parking (sbx serve --park-after): a sandbox nothing used for that long gives its fds back
but its control socket and, per session, the session's socket and the holder's pidfd, and takes
them again at its next use. Its bash sessions' idle workers exit first (a parked sandbox keeps
one shell a session, the holder), and its next run forks one again. Whatever happens to a parked sandbox meanwhile (its idle worker,
its holder or its pid 1 killed from outside) is heard and answered as it is unparked; what
keeps a sandbox in use (a running process, a file watch, a run) keeps it from being parked;
when fds run short, idle sandboxes are parked at once so that creates and runs go on."""
import base64
import glob
import os
import resource
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import SPAWNED, connect_peer, stop_daemon, wait_until
from test_rpc import SBX

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="parking needs root (pidfd_getfd of pid 1)"),
    pytest.mark.skipif(not os.path.exists(SBX), reason=f"{SBX} not built"),
]


class Daemon:
    def __init__(self, *args, nofile=None):
        self.dir = tempfile.mkdtemp(prefix="sbx-park-")
        self.path = os.path.join(self.dir, "sbx.sock")
        limit = (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))) if nofile else None
        self.proc = subprocess.Popen([SBX, "serve", "--socket", self.path, "--pool", "0", *args],
                                     stderr=subprocess.PIPE, preexec_fn=limit)
        SPAWNED.append(self.proc.pid)
        assert wait_until(lambda: os.path.exists(self.path), timeout=10)
        self.peer = connect_peer(self.path)

    def fds(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def parked(self):
        return self.peer.result("health")["parked"]

    def procs(self, sid, sub):
        """Host pids in the sandbox's v2 cgroup `sub` (init, or cmds/c* for idle workers)."""
        pids = []
        for f in glob.glob(f"/sys/fs/cgroup/**/sbx-{self.proc.pid}/{sid}/{sub}/cgroup.procs", recursive=True):
            try:
                with open(f) as fh:
                    pids += [int(x) for x in fh.read().split()]
            except OSError:
                pass
        return pids

    def stop(self):
        stop_daemon(self.proc)


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def run(peer, sid, cmd, timeout_ms=30000):
    return peer.result("run", {"sandboxId": sid, "command": cmd, "timeoutMs": timeout_ms}, timeout=timeout_ms / 1000 + 30)


def warm(d, n):
    """n sandboxes, each with its default session holding a cwd, a variable and a file."""
    ids = []
    for i in range(n):
        sid = d.peer.result("sandbox.create", {})["sandboxId"]
        r = run(d.peer, sid, f"cd /tmp && X=kept{i} && echo file{i} > f")
        assert r["exitCode"] == 0, r
        ids.append(sid)
    return ids


def test_parked_sandboxes_hold_three_fds_and_keep_their_state():
    d = Daemon("--park-after", "200")
    try:
        d.peer.result("ping")
        before = d.fds()
        ids = warm(d, 20)
        assert wait_until(lambda: d.parked() == 20, timeout=30), d.parked()
        # 3 each (control socket, session socket, holder pidfd): with the daemon's own fds that
        # come with its first sandbox (timers, the mover, the spawner's socket and pidfd) at
        # most 3.6 a sandbox over 20.
        assert (d.fds() - before) / 20 <= 3.6, (d.fds() - before) / 20
        for i, sid in enumerate(ids[:10]):
            r = run(d.peer, sid, "echo $X; pwd; cat f")
            assert r["exitCode"] == 0 and r["stdout"] == f"kept{i}\n/tmp\nfile{i}\n", r
            assert not r.get("sessionReset") and not r.get("stateDiscarded"), r
        # The files API of a parked one (its root taken back from pid 1).
        assert wait_until(lambda: d.parked() == 20, timeout=30), d.parked()
        got = d.peer.result("files.read", {"sandboxId": ids[15], "path": "/tmp/f"})
        assert base64.b64decode(got["data"]) == b"file15\n"
        d.peer.result("files.write", {"sandboxId": ids[16], "path": "/tmp/new",
                                      "data": base64.b64encode(b"w").decode()})
        assert run(d.peer, ids[16], "cat /tmp/new")["stdout"] == "w"
        # Parked again once quiet; a timeout in a parked one kills the command, not the state.
        assert wait_until(lambda: d.parked() == 20, timeout=30), d.parked()
        r = run(d.peer, ids[17], "X=changed; sleep 30", timeout_ms=300)
        assert r["exitCode"] == 124 and r.get("stateDiscarded"), r
        assert run(d.peer, ids[17], "echo $X")["stdout"] == "kept17\n"
        for sid in ids:
            d.peer.result("sandbox.destroy", {"sandboxId": sid})
        assert d.peer.result("health")["sandboxes"] == 0
    finally:
        d.stop()


def shells(d, sid):
    """(holders, idle workers) of sid's default session, as host pids."""
    return ([p for p in d.procs(sid, "init") if comm(p) == "bash"],
            [p for p in d.procs(sid, "cmds/c*") if comm(p) == "bash"])


def status_field(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return None


def idle_worker(d, sid):
    """The idle worker of sid's default session: a command says which shell runs it (its
    pid in the sandbox); that worker is the holder once the command ended, and the idle
    worker is the one shell in a command cgroup whose parent it is. (A command that left
    nothing hands its cgroup to the next worker, which may be born there while the holder
    is still in it: by cgroups alone the two look alike.)"""
    ran = int(run(d.peer, sid, "echo $BASHPID")["stdout"])

    def find():
        for p in shells(d, sid)[1]:
            if status_field(status_field(p, "PPid"), "NSpid") == ran:
                return p
        return None
    assert wait_until(lambda: find() is not None, timeout=10), shells(d, sid)
    return find()


def test_a_parked_sandbox_keeps_one_shell_and_its_next_run_forks_a_worker():
    d = Daemon("--park-after", "1000")  # its workers looked at between parks, on a loaded machine too
    try:
        ids = warm(d, 3)
        for sid in ids:
            # The last command's worker is the holder once it is out of that command's cgroup.
            assert wait_until(lambda: len(shells(d, sid)[0]) == 1 and len(shells(d, sid)[1]) <= 1,
                              timeout=10), shells(d, sid)
        assert wait_until(lambda: d.parked() == 3, timeout=30), d.parked()
        for sid in ids:
            holders, workers = shells(d, sid)
            # The worker exited and its command cgroup went with it; the holder stays.
            assert len(holders) == 1 and workers == [], (holders, workers)
            assert wait_until(lambda: not glob.glob(f"/sys/fs/cgroup/unified/sbx-{d.proc.pid}/{sid}/cmds/c[0-9]*"),
                              timeout=10), sid
        for i, sid in enumerate(ids):
            r = run(d.peer, sid, "echo $X; pwd; cat f")
            assert r["exitCode"] == 0 and r["stdout"] == f"kept{i}\n/tmp\nfile{i}\n", r
            assert not r.get("sessionReset") and not r.get("stateDiscarded"), r
            assert wait_until(lambda: len(shells(d, sid)[1]) == 1, timeout=10), shells(d, sid)
        # Parked and retired again, and woken again, with what the runs in between changed.
        assert wait_until(lambda: d.parked() == 3 and all(not shells(d, s)[1] for s in ids), timeout=30)
        r = run(d.peer, ids[0], "X=again; cd /; sleep 30", timeout_ms=300)
        assert r["exitCode"] == 124, r
        assert run(d.peer, ids[0], "echo $X; pwd")["stdout"] == "kept0\n/tmp\n"
    finally:
        d.stop()


def test_a_command_cannot_say_its_worker_retired():
    # The worker tells its holder it retired on a pipe it closes before it takes a command:
    # the command's shell (a redirection is the shell's own, not an exec'd program's, whose
    # close-on-exec fds are gone anyway) finds it closed, before and after a park.
    probe = "{ : >&1003; } 2>/dev/null && echo open || echo closed"
    d = Daemon("--park-after", "200")
    try:
        sid = warm(d, 1)[0]
        assert run(d.peer, sid, probe)["stdout"] == "closed\n"
        assert wait_until(lambda: d.parked() == 1 and not shells(d, sid)[1], timeout=30)
        r = run(d.peer, sid, probe + "; echo $X")
        assert r["exitCode"] == 0 and r["stdout"] == "closed\nkept0\n", r
        # The session socket's copy in the command's shell is there: the probe tells an
        # open fd from a closed one.
        assert run(d.peer, sid, "{ : >&1001; } 2>/dev/null && echo open")["stdout"] == "open\n"
        # The pipe takes the first free fd from 1003 on: a session's own fd 1003 stays its own.
        assert run(d.peer, sid, "exec 1003>/tmp/g; echo one >&1003")["exitCode"] == 0
        assert wait_until(lambda: d.parked() == 1 and not shells(d, sid)[1], timeout=30)
        r = run(d.peer, sid, "echo two >&1003; cat /tmp/g")
        assert r["exitCode"] == 0 and r["stdout"] == "one\ntwo\n", r
    finally:
        d.stop()


def test_a_worker_that_never_reads_its_retirement_is_killed():
    # A stopped idle worker (a command can stop it: same user) never reads RETIRE: the next
    # sweep kills it, its holder forks another, which retires, and the sandbox is parked; its
    # runs go on with the state it had.
    d = Daemon("--park-after", "1000")  # the worker looked at before it retires
    try:
        sid = warm(d, 1)[0]
        stopped = idle_worker(d, sid)
        os.kill(stopped, signal.SIGSTOP)
        assert wait_until(lambda: d.parked() == 1 and not shells(d, sid)[1], timeout=30), (d.parked(), shells(d, sid))
        assert wait_until(lambda: comm(stopped) != "bash", timeout=10), "the stopped worker lives on"
        r = run(d.peer, sid, "echo $X; pwd", timeout_ms=20000)
        assert r["exitCode"] == 0 and r["stdout"] == "kept0\n/tmp\n" and not r.get("sessionReset"), r
    finally:
        d.stop()


def test_a_retired_session_forks_snapshots_and_restores():
    # A fork and a snapshot take the session's state through internal runs, which the holder of
    # a parked sandbox (no worker) answers once it forked one again.
    d = Daemon("--park-after", "200")
    try:
        forked, snapped = warm(d, 2)
        assert wait_until(lambda: d.parked() == 2 and not shells(d, forked)[1] and not shells(d, snapped)[1],
                          timeout=30)
        child = d.peer.result("sandbox.fork", {"sandboxId": forked})["sandboxId"]
        r = run(d.peer, child, "echo $X; pwd; cat f")
        assert r["exitCode"] == 0 and r["stdout"] == "kept0\n/tmp\nfile0\n", r
        snap = d.peer.result("snapshot.create", {"sandboxId": snapped})["id"]
        assert run(d.peer, snapped, "X=changed; rm f")["exitCode"] == 0
        d.peer.result("snapshot.restore", {"sandboxId": snapped, "id": snap})
        r = run(d.peer, snapped, "echo $X; cat f")
        assert r["exitCode"] == 0 and r["stdout"] == "kept1\nfile1\n", r
    finally:
        d.stop()


def test_what_happens_to_a_parked_sandbox_is_heard():
    d = Daemon("--park-after", "1000")
    try:
        holder_sb, init_sb, worker_sb = warm(d, 3)
        # Its idle worker killed from outside before it was parked (the last one used, so not
        # retired yet): the holder forks the next one; nothing is lost.
        os.kill(idle_worker(d, worker_sb), signal.SIGKILL)
        assert wait_until(lambda: d.parked() == 3, timeout=30), d.parked()
        # Its holder killed: the session starts over and the next result says so.
        holders = [p for p in d.procs(holder_sb, "init") if comm(p) == "bash"]
        assert len(holders) == 1, holders
        os.kill(holders[0], signal.SIGKILL)
        # Its pid 1 killed: the sandbox is gone, and a run says so at once.
        inits = [p for p in d.procs(init_sb, "init") if comm(p) == "sbx-init"]
        assert len(inits) == 1, inits
        os.kill(inits[0], signal.SIGKILL)
        time.sleep(1)  # heard, or not yet: the runs below must be answered right either way
        r = run(d.peer, worker_sb, "echo $X; pwd")
        assert r["exitCode"] == 0 and r["stdout"] == "kept2\n/tmp\n" and not r.get("sessionReset"), r
        r = run(d.peer, holder_sb, "echo $X; pwd")
        assert r["exitCode"] == 0 and r["stdout"] == "\n/home/user\n" and r.get("sessionReset"), r
        start = time.monotonic()
        r = run(d.peer, init_sb, "echo hi", timeout_ms=20000)
        assert r["exitCode"] == 1 and "pid 1 exited" in r["stderr"], r
        assert time.monotonic() - start < 15, "answered at its timeout, not at once"
    finally:
        d.stop()


def test_a_sandbox_in_use_is_not_parked():
    d = Daemon("--park-after", "200")
    try:
        idle, busy, watched = warm(d, 3)
        p = d.peer.result("process.start", {"sandboxId": busy, "command": "sleep 600"})
        w = d.peer.result("files.watch", {"sandboxId": watched, "path": "/tmp"})
        assert wait_until(lambda: d.parked() == 1, timeout=30), d.parked()
        time.sleep(1)  # several sweeps
        assert d.parked() == 1
        # A file made in the watched one is told, from a parked daemon's loop.
        run(d.peer, watched, "touch /tmp/seen")
        assert wait_until(lambda: any("seen" in str(n) for n in d.peer.notes), timeout=10)
        d.peer.result("process.kill", {"processId": p["processId"], "signal": "KILL"})
        d.peer.result("files.unwatch", {"watchId": w["watchId"]})
        assert wait_until(lambda: d.parked() == 3, timeout=30), d.parked()
        assert run(d.peer, busy, "echo $X")["stdout"] == "kept1\n"
    finally:
        d.stop()


def test_short_of_fds_idle_sandboxes_are_parked_at_once():
    """RLIMIT_NOFILE 4,000 and 15 fds an unparked sandbox: about 190 would fit. With parking
    the cap counts 3 each, and 260 sandboxes are made and used with no sweep ever due (parking
    after an hour): each create and each run makes room by parking idle ones."""
    d = Daemon("--park-after", "3600000", nofile=4000)
    try:
        limits = d.peer.result("health")["limits"]
        assert limits["maxSandboxes"] > 260, limits
        ids = warm(d, 260)
        assert d.parked() > 0
        for i, sid in enumerate(ids):
            r = run(d.peer, sid, "echo $X")
            assert r["exitCode"] == 0 and r["stdout"] == f"kept{i}\n", (i, r)
        assert d.fds() < 4000 - 500
    finally:
        d.stop()


def test_parking_off():
    d = Daemon("--park-after", "0")
    try:
        warm(d, 2)
        time.sleep(1)
        assert d.parked() == 0
    finally:
        d.stop()


def test_a_sandbox_with_an_expiry_is_parked_and_still_expires():
    # Its expiry timer is the daemon's fd, held parked or not (E2B's SDK gives every sandbox a
    # timeout): it is parked as any other, and destroyed when due, parked.
    d = Daemon("--park-after", "200")
    try:
        long_lived = d.peer.result("sandbox.create", {"lifetimeMs": 600000, "idleTimeoutMs": 600000})["sandboxId"]
        short = d.peer.result("sandbox.create", {"lifetimeMs": 10000})["sandboxId"]
        for sid in (long_lived, short):
            assert run(d.peer, sid, "X=1")["exitCode"] == 0
        assert wait_until(lambda: d.parked() == 2, timeout=8), d.parked()  # before the short one's end
        assert wait_until(lambda: d.peer.result("health")["sandboxes"] == 1, timeout=30)
        assert d.parked() == 1
        assert run(d.peer, long_lived, "echo $X")["stdout"] == "1\n"
    finally:
        d.stop()


def test_a_sandbox_never_used_is_parked_too():
    d = Daemon("--park-after", "200")
    try:
        ids = [d.peer.result("sandbox.create", {})["sandboxId"] for _ in range(3)]
        assert wait_until(lambda: d.parked() == 3, timeout=30), d.parked()
        for sid in ids:
            r = run(d.peer, sid, "pwd")
            assert r["exitCode"] == 0 and r["stdout"] == "/home/user\n" and not r.get("sessionReset"), r
    finally:
        d.stop()


@pytest.mark.parametrize("value", ["-1", "abc", "86400001", "5s", ""])
def test_a_bad_park_after_is_refused_with_its_range(value):
    # Refused before anything starts: exit 2 and the range it takes, no socket made.
    with tempfile.TemporaryDirectory(prefix="sbx-park-") as d:
        path = os.path.join(d, "sbx.sock")
        p = subprocess.run([SBX, "serve", "--socket", path, "--park-after", value],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 2, (p.returncode, p.stderr)
        assert "--park-after takes 0 (never) to 86400000 ms" in p.stderr, p.stderr
        assert not os.path.exists(path)
