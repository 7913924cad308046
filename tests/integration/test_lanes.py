"""Lanes, bounded queues, fairness between clients, the orderly shutdown and --mode disabled
(docs/PROTOCOL.md, "Lanes" and "Shutdown")."""
import os
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from conftest import SPAWNED, Peer, wait_until
from test_rpc import SBX, spawn_stdio

WORKER_UNAVAILABLE = -32001
SANDBOX_DISABLED = -32002
SHUTTING_DOWN = -32003
INVALID_PARAMS = -32602


class Server:
    """`sbx serve --socket` with the given flags, and connections to it."""

    def __init__(self, *args, system_socket=False):
        self.dir = tempfile.mkdtemp(prefix="sbx-lanes-")
        self.path = os.path.join(self.dir, "sbx.sock")
        self.system_path = os.path.join(self.dir, "ops.sock") if system_socket else None
        argv = [SBX, "serve", "--socket", self.path, "--pool", "0", *args]
        if self.system_path:
            argv += ["--system-socket", self.system_path]
        self.proc = subprocess.Popen(argv, stderr=subprocess.PIPE)
        SPAWNED.append(self.proc.pid)
        assert wait_until(lambda: os.path.exists(self.path), timeout=10), "the server did not listen"
        self.socks = []

    def connect(self, path=None):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path or self.path)
        self.socks.append(s)
        return Peer(s.makefile("rb"), s.makefile("wb"))

    def stop(self):
        for s in self.socks:
            s.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def make_server():
    made = []

    def make(*args, **kw):
        s = Server(*args, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.stop()


# A command that waits until /tmp/go exists in its sandbox: what a test holds a slot with
# until it says, instead of a sleep whose length a loaded machine could outlast.
GATE = "while [ ! -e /tmp/go ]; do sleep 0.02; done"


def lanes(peer):
    return peer.result("health")["lanes"]


def test_queue_bound_and_retry_after(make_server):
    srv = make_server("--slots", "1", "--queue", "2")
    c = srv.connect()
    c.result("create")
    # Three sessions, so nothing waits for its session: only the lane's one slot counts.
    ids = [c.send("run", {"command": f"sleep 0.5; echo {i}", "session": f"s{i}"}) for i in range(3)]
    assert wait_until(lambda: lanes(c)["interactive"]["queued"] == 2, timeout=5)
    err = c.error("run", {"command": "echo refused", "session": "s9"})
    assert err["code"] == WORKER_UNAVAILABLE
    assert err["message"].startswith("WORKER_UNAVAILABLE: the interactive lane is full")
    assert 100 <= err["data"]["retryAfterMs"] <= 5000
    # The waiting ones run, in order, and the lane is usable again.
    assert [c.wait(i, timeout=30)["result"]["stdout"] for i in ids] == ["0\n", "1\n", "2\n"]
    assert c.result("run", {"command": "echo again"})["stdout"] == "again\n"
    h = lanes(c)["interactive"]
    assert h["refused"] == 1 and h["active"] == 0 and h["queued"] == 0
    assert h["completed"] == 4 and h["slots"] == 1 and h["queueMax"] == 2
    assert h["p99ExecMs"] >= 256  # the 0.5 s runs: a power-of-two bucket's upper edge


def test_system_lane_is_reserved(make_server):
    srv = make_server("--slots", "1", "--system-slots", "1", "--queue", "0")
    c = srv.connect()
    c.result("create")
    # busy holds the interactive slot until the system run has ended: a system run that waited
    # for that slot would never end.
    busy = c.send("run", {"command": f"{GATE}; echo busy"})
    assert wait_until(lambda: lanes(c)["interactive"]["active"] == 1, timeout=10)
    # Interactive work never takes the system slot, even free...
    assert c.error("run", {"command": "true", "session": "b"})["code"] == WORKER_UNAVAILABLE
    # ...which a system request gets at once.
    r = c.result("run", {"command": "echo ops; touch /tmp/go", "session": "ops", "lane": "system"}, timeout=60)
    assert r["stdout"] == "ops\n"
    assert lanes(c)["system"]["completed"] == 1
    assert c.wait(busy, timeout=60)["result"]["stdout"] == "busy\n"
    assert c.error("run", {"command": "true", "lane": "fast"})["code"] == INVALID_PARAMS


def test_system_socket_fixes_the_main_socket_to_interactive(make_server):
    srv = make_server("--slots", "1", "--queue", "0", system_socket=True)
    c = srv.connect()
    c.result("create")
    err = c.error("run", {"command": "true", "lane": "system"})
    assert err["code"] == INVALID_PARAMS and "fixed to interactive" in err["message"]


def test_forced_lanes(make_server):
    srv = make_server("--slots", "1", "--queue", "0", "--lane", "interactive", system_socket=True)
    agent = srv.connect()
    sid = agent.result("sandbox.create", {"persist": True})["sandboxId"]
    err = agent.error("run", {"sandboxId": sid, "command": "true", "lane": "system"})
    assert err["code"] == INVALID_PARAMS and "fixed to interactive" in err["message"]
    busy = agent.send("run", {"sandboxId": sid, "command": "sleep 1"})
    assert wait_until(lambda: lanes(agent)["interactive"]["active"] == 1, timeout=5)
    # The operator's socket is in the system lane without asking.
    ops = srv.connect(srv.system_path)
    assert ops.result("run", {"sandboxId": sid, "command": "echo ops", "session": "o"})["stdout"] == "ops\n"
    assert lanes(ops)["system"]["completed"] == 1
    assert ops.error("run", {"sandboxId": sid, "command": "true", "lane": "interactive"})["code"] == INVALID_PARAMS
    assert agent.wait(busy)["result"]["exitCode"] == 0


def test_round_robin_between_clients(make_server):
    srv = make_server("--slots", "1", "--queue", "200")
    a, b = srv.connect(), srv.connect()
    a.result("create")
    b.result("create")
    # A queues 30 runs, in 30 sessions so none waits for its session, only for the lane.
    ids = [a.send("run", {"command": "sleep 0.05", "session": f"s{i}"}) for i in range(30)]
    assert wait_until(lambda: lanes(b)["interactive"]["queued"] >= 29, timeout=10)
    t0 = time.monotonic()
    mine = b.call("run", {"command": "echo b"})
    waited = time.monotonic() - t0
    assert mine["result"]["stdout"] == "b\n"
    # B's run waited for at most the run holding the slot when it came, not for A's queue:
    # at that moment at least 25 of A's runs had not started.
    h = lanes(b)["interactive"]
    assert h["completed"] <= 4, (h, waited)
    for i in ids:
        assert a.wait(i, timeout=60)["result"]["exitCode"] == 0


def test_closed_connection_leaves_the_queue(make_server):
    srv = make_server("--slots", "1", "--queue", "5")
    a = srv.connect()
    a.result("sandbox.create", {"persist": True})
    sid = a.result("sandbox.list")["sandboxes"][0]["sandboxId"]
    a.send("run", {"sandboxId": sid, "command": "sleep 0.5"})
    for i in range(4):
        a.send("run", {"sandboxId": sid, "command": "sleep 5", "session": f"w{i}"})
    b = srv.connect()
    assert wait_until(lambda: lanes(b)["interactive"]["queued"] == 4, timeout=5)
    srv.socks[0].shutdown(socket.SHUT_RDWR)
    assert wait_until(lambda: lanes(b)["interactive"]["queued"] == 0, timeout=5)
    b.result("create")
    assert b.result("run", {"command": "echo next"}, timeout=10)["stdout"] == "next\n"


def test_shutdown_answers_and_exits_zero(make_server):
    srv = make_server("--slots", "1", "--queue", "5")
    c = srv.connect()
    c.result("create")
    running = c.send("run", {"command": "sleep 30"})
    queued_in_lane = c.send("run", {"command": "echo never", "session": "b"})
    assert wait_until(lambda: c.result("health")["running"] == 1 and lanes(c)["interactive"]["queued"] == 1,
                      timeout=10)
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    assert c.wait(queued_in_lane)["error"]["code"] == SHUTTING_DOWN
    ans = c.wait(running, timeout=15)["result"]
    assert ans["exitCode"] == 125
    assert srv.proc.wait(15) == 0
    assert time.monotonic() - t0 < 8
    assert not os.path.exists(srv.path)


def _stop_sandboxes(srv):
    """SIGSTOPs the server's children (the sandboxes' pid 1): a run sent then waits in its
    session for ever, so the orderly shutdown has work under way until its deadline."""
    kids = [int(k) for k in open(f"/proc/{srv.proc.pid}/task/{srv.proc.pid}/children").read().split()]
    assert kids
    for k in kids:
        os.kill(k, signal.SIGSTOP)
    return kids


def _cont(kids):
    for k in kids:
        try:
            os.kill(k, signal.SIGCONT)
        except ProcessLookupError:
            pass


def test_shutdown_deadline(make_server):
    srv = make_server("--shutdown-deadline-ms", "1500")
    c, other = srv.connect(), srv.connect()
    c.result("create")
    kids = _stop_sandboxes(srv)
    try:
        # A session of its own: its shell is one pid 1 must start, so the run stays queued.
        stuck = c.send("run", {"command": "sleep 30", "session": "stuck"})
        assert wait_until(lambda: c.result("health")["queued"] == 1, timeout=10)
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        # Draining: new work is refused, ping and health still answer.
        err = other.error("run", {"command": "true"})
        assert err["code"] == SHUTTING_DOWN and err["message"].startswith("POOL_SHUTTING_DOWN")
        assert other.result("health")["shuttingDown"] is True
        assert srv.proc.wait(15) == 0
        took = time.monotonic() - t0
        assert 1.4 < took < 10, took
        assert "deadline passed" in srv.proc.stderr.read().decode()
    finally:
        _cont(kids)
    # The stuck run was answered before the server went.
    assert c.wait(stuck, timeout=5)["error"]["code"] == SHUTTING_DOWN


def test_second_signal_is_immediate(make_server):
    srv = make_server("--shutdown-deadline-ms", "60000")
    c = srv.connect()
    c.result("create")
    kids = _stop_sandboxes(srv)
    try:
        c.send("run", {"command": "sleep 30", "session": "stuck"})
        assert wait_until(lambda: c.result("health")["queued"] == 1, timeout=10)
        srv.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert srv.proc.poll() is None, "the first signal waits for the cancelled run"
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(15) == 0
        assert time.monotonic() - t0 < 5
    finally:
        _cont(kids)


def test_mode_disabled():
    peer = spawn_stdio("--mode", "disabled")
    try:
        assert peer.result("ping") == {"pong": True}
        h = peer.result("health")
        assert h["mode"] == "disabled" and h["sandboxes"] == 0
        for method, params in [("create", {}), ("sandbox.create", {}), ("run", {"command": "true"}),
                               ("files.read", {"path": "/etc/hostname"})]:
            err = peer.error(method, params)
            assert err["code"] == SANDBOX_DISABLED, (method, err)
            assert err["message"].startswith("SANDBOX_DISABLED")
        assert peer.result("sandbox.list") == {"sandboxes": []}
        assert peer.result("ping") == {"pong": True}
    finally:
        peer.proc.stdin.close()
        assert peer.proc.wait(10) == 0


@pytest.mark.parametrize("args,msg", [
    (["--slots", "0"], "--slots takes 1 to"),
    (["--queue", "x"], "--queue takes 0 to"),
    (["--lane", "fast"], "--lane takes interactive or system"),
    (["--mode", "vm"], "--mode takes namespaces, process or disabled"),
    (["--shutdown-deadline-ms", "-1"], "--shutdown-deadline-ms takes 0 to"),
])
def test_bad_flags(args, msg):
    p = subprocess.run([SBX, "serve", "--stdio", *args], stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
    assert p.returncode == 2 and msg in p.stderr.decode()


def test_a_full_queue_still_lets_another_client_wait(make_server):
    # A fills the lane and its queue; B, with nothing waiting, still gets in line (the queue
    # takes a newcomer past its bound, up to twice it) and is served at the next free slot.
    # A's two running runs end when the test says (/tmp/go), its queued ones only after B's has
    # been answered (/tmp/go2): B behind A's whole queue would never be.
    srv = make_server("--slots", "2", "--queue", "3", "--system-slots", "1")
    a, b = srv.connect(), srv.connect()
    a.result("create")
    b.result("create")
    ids = [a.send("run", {"command": GATE if i < 2 else GATE.replace("/tmp/go", "/tmp/go2"), "session": f"s{i}"})
           for i in range(6)]
    assert wait_until(lambda: lanes(b)["interactive"]["queued"] == 3, timeout=10)
    bid = b.send("run", {"command": "echo b"})
    assert wait_until(lambda: lanes(b)["interactive"]["queued"] == 4, timeout=10)
    a.result("run", {"command": "touch /tmp/go", "session": "ops", "lane": "system"}, timeout=60)
    r = b.wait(bid, timeout=60)
    assert r["result"]["stdout"] == "b\n", r
    a.result("run", {"command": "touch /tmp/go2", "session": "ops", "lane": "system"}, timeout=60)
    answers = [a.wait(i, timeout=60) for i in ids]
    refused = [x for x in answers if "error" in x]
    assert len(refused) == 1 and refused[0]["error"]["code"] == WORKER_UNAVAILABLE  # A's own 6th
    # A second request of B's while the queue is past its bound is refused like A's.
    blockers = [a.send("run", {"command": "sleep 1", "session": f"t{i}"}) for i in range(5)]
    assert wait_until(lambda: lanes(b)["interactive"]["queued"] == 3, timeout=10)
    first = b.send("run", {"command": "echo 1", "session": "x"})
    assert wait_until(lambda: lanes(b)["interactive"]["queued"] == 4, timeout=10)
    assert b.error("run", {"command": "echo 2", "session": "y"})["code"] == WORKER_UNAVAILABLE
    assert b.wait(first, timeout=30)["result"]["stdout"] == "1\n"
    for i in blockers:
        a.wait(i, timeout=30)


def test_cancel_a_run_waiting_in_its_lane(make_server):
    srv = make_server("--slots", "1", "--queue", "5")
    c = srv.connect()
    c.result("create")
    busy = c.send("run", {"command": "sleep 1; echo busy"})
    waiting = c.send("run", {"command": "touch /tmp/ran; echo never", "session": "b"})
    assert wait_until(lambda: lanes(c)["interactive"]["queued"] == 1, timeout=10)
    assert c.result("cancel", {"requestId": waiting}) == {"ok": True}
    r = c.wait(waiting)["result"]
    assert r["exitCode"] == 125 and r.get("errorClass") == "CANCELLED" and r["stdout"] == ""
    assert lanes(c)["interactive"]["queued"] == 0
    assert c.wait(busy)["result"]["stdout"] == "busy\n"
    # It never ran: nothing it would have made exists.
    assert c.result("run", {"command": "test -e /tmp/ran && echo yes || echo no"})["stdout"] == "no\n"
    assert c.error("cancel", {"requestId": waiting})["code"] == INVALID_PARAMS


def test_runs_queued_in_one_session_hold_one_slot(make_server):
    # A queues 5 runs in its one session: only the one running needs a worker, so only it holds
    # a slot; the others wait in the session, and B's run, with the lane's second slot free,
    # starts at once instead of waiting for A's session to drain.
    srv = make_server("--slots", "2", "--queue", "10", "--system-slots", "1")
    a, b = srv.connect(), srv.connect()
    a.result("create")
    b.result("create")
    # A's runs wait for /tmp/go, made only once B's run has been answered: B behind A's running
    # run would never be.
    ids = [a.send("run", {"command": f"{GATE}; echo {i}"}) for i in range(5)]
    assert wait_until(lambda: a.result("health")["queued"] == 4, timeout=10), a.result("health")
    h = lanes(b)["interactive"]
    assert h["active"] == 1 and h["queued"] == 0, h
    assert b.result("run", {"command": "echo b"}, timeout=60)["stdout"] == "b\n"
    a.result("run", {"command": "touch /tmp/go", "session": "ops", "lane": "system"}, timeout=60)
    # A's runs go on in order, each handing the slot to the next: never more than one held.
    peak = 0
    for n, i in enumerate(ids):
        peak = max(peak, lanes(b)["interactive"]["active"])
        assert a.wait(i, timeout=30)["result"]["stdout"] == f"{n}\n"
    assert peak == 1
    h = lanes(b)["interactive"]
    assert h["active"] == 0 and h["completed"] == 6, h


@pytest.mark.parametrize("ahead", ["env.set", "system run"])
def test_a_run_behind_what_holds_no_slot_of_its_lane_keeps_its_own(make_server, ahead):
    # Only a run of the same lane hands a slot on. Behind an env.set (which holds none) or a
    # run of the system lane, a run keeps the slot it got, so the one interactive slot still
    # lets one run at a time through: three `sleep 1` in three sessions take three seconds.
    srv = make_server("--slots", "1", "--system-slots", "3", "--queue", "10")
    c = srv.connect()
    c.result("create")
    t0 = time.monotonic()
    ids = []
    for i in range(3):
        if ahead == "env.set":
            c.send("env.set", {"session": f"s{i}", "name": "X", "value": "1"})
        else:
            c.send("run", {"session": f"s{i}", "command": "true", "lane": "system"})
        ids.append(c.send("run", {"session": f"s{i}", "command": "sleep 1; echo $X"}))
    # The interactive runs running at once (health's `running` counts the system lane's `true`
    # too, which a loaded machine may still be running beside one).
    def sleeping():
        return sum(1 for x in c.result("session.list")["sessions"]
                   if (x["running"] or {}).get("command", "").startswith("sleep 1"))

    peak = 0
    while time.monotonic() - t0 < 1.5:
        peak = max(peak, sleeping())
        time.sleep(0.05)
    for i in ids:
        assert c.wait(i, timeout=30)["result"]["exitCode"] == 0
    assert time.monotonic() - t0 >= 2.9, "the three runs ran side by side"
    assert peak == 1, peak
    h = lanes(c)
    assert h["interactive"]["active"] == 0 and h["system"]["active"] == 0, h
