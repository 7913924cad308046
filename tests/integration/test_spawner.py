"""The spawner (src/sandbox/spawner.c): one process per daemon that makes every sandbox's cgroups
and clones its pid 1 with CLONE_PARENT, so that the loop never clones and pid 1 is still the
daemon's child. What waits for it when it is stopped or killed is answered, nothing it made is
left behind, and the next create starts another."""
import json
import os
import signal
import subprocess
import tempfile

import pytest

from conftest import SPAWNED, connect_peer, stop_daemon, wait_until
from test_rpc import SBX

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces and cgroups of its own)"),
    pytest.mark.skipif(not os.path.exists(SBX), reason=f"{SBX} not built"),
]


def kill_stopped(pid):
    os.kill(pid, signal.SIGKILL)
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


class Daemon:
    def __init__(self, *args, program=SBX, stderr=subprocess.DEVNULL, pass_fds=()):
        self.dir = tempfile.mkdtemp(prefix="sbx-spawner-")
        self.path = os.path.join(self.dir, "sbx.sock")
        self.proc = subprocess.Popen([program, "serve", "--socket", self.path, "--pool", "0", *args],
                                     stderr=stderr, pass_fds=pass_fds)
        SPAWNED.append(self.proc.pid)
        assert wait_until(lambda: os.path.exists(self.path), timeout=10)
        self.peers = []

    def peer(self):
        p = connect_peer(self.path)
        self.peers.append(p)
        return p

    def children(self):
        """(pid, comm, state) of the daemon's children."""
        out = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            state, ppid = stat[stat.rindex(")") + 2:].split()[:2]
            if int(ppid) == self.proc.pid:
                out.append((int(d), comm, state))
        return out

    def spawner(self):
        found = [pid for pid, comm, _ in self.children() if comm == "sbx-spawner"]
        assert len(found) == 1, self.children()
        return found[0]

    def stop(self):
        for p in self.peers:
            try:
                p.sock.close()
            except OSError:
                pass
        return stop_daemon(self.proc)


def test_every_pid1_is_the_daemons_child_made_by_one_spawner():
    d = Daemon()
    try:
        p = d.peer()
        ids = [p.result("sandbox.create", {})["sandboxId"] for _ in range(3)]
        for sid in ids:
            assert p.result("run", {"sandboxId": sid, "command": "echo $((6 * 7))"})["stdout"] == "42\n"
        kids = d.children()
        inits = [pid for pid, comm, _ in kids if comm == "sbx-init"]
        assert len(inits) == 3, kids
        assert [comm for _, comm, _ in kids].count("sbx-spawner") == 1, kids
        # The spawner holds only what pid 1 needs: no client connection, no listening socket.
        fds = os.listdir(f"/proc/{d.spawner()}/fd")
        sockets = [f for f in fds if os.readlink(f"/proc/{d.spawner()}/fd/{f}").startswith("socket:")]
        assert len(sockets) == 1, sockets
    finally:
        d.stop()


def mapped_files(pid):
    with open(f"/proc/{pid}/maps") as f:
        return {line.split()[5] for line in f if len(line.split()) > 5}


def test_pid1_is_a_copy_of_the_small_spawner_program_not_of_the_daemon():
    """sbx-engine execs sbx-spawner (beside it) to clone every pid 1, or the host's bash with
    sbx-spawner.so preloaded where the build has it (test_zygote.py): the pid 1 a create makes
    maps none of the daemon's libraries (GnuTLS, libcurl, libarchive), only the spawner, bash's
    own libraries and what a sanitizer's build loads."""
    d = Daemon()
    try:
        p = d.peer()
        sid = p.result("sandbox.create", {})["sandboxId"]
        assert p.result("run", {"sandboxId": sid, "command": "echo $((6 * 7))"})["stdout"] == "42\n"
        engine = os.readlink(f"/proc/{d.proc.pid}/exe")
        assert os.path.basename(engine) == "sbx-engine", engine
        spawner = d.spawner()
        program = os.path.join(os.path.dirname(engine), "sbx-spawner")
        preloaded = os.path.exists(program + ".so")
        exe = os.readlink(f"/proc/{spawner}/exe")
        assert exe == (os.path.realpath("/bin/bash") if preloaded else program), exe
        inits = [pid for pid, comm, _ in d.children() if comm == "sbx-init"]
        assert len(inits) == 1, d.children()
        for pid in (spawner, inits[0]):
            files = mapped_files(pid)
            assert (program + ".so" if preloaded else program) in files, files
            assert engine not in files, files
            heavy = [f for f in files if any(k in f for k in ("libgnutls", "libcurl", "libarchive", "libmicrohttpd"))]
            assert not heavy, heavy
            # Its environment is none of the daemon's: nothing but the sanitizers' options.
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = [e for e in f.read().split(b"\0") if e]
            assert all(e.split(b"=")[0] in (b"ASAN_OPTIONS", b"UBSAN_OPTIONS", b"LSAN_OPTIONS") for e in env), env
    finally:
        d.stop()


def test_an_fd_the_daemon_inherited_reaches_neither_the_spawner_nor_pid1():
    """What the daemon's caller left open without O_CLOEXEC (here a pipe's write end) is not
    carried into sbx-spawner, nor into the pid 1s cloned from it (the daemon keeps its own: that
    is its caller's business)."""
    r, w = os.pipe()
    d = Daemon(pass_fds=(w,))
    os.close(w)
    try:
        p = d.peer()
        sid = p.result("sandbox.create", {})["sandboxId"]
        assert p.result("run", {"sandboxId": sid, "command": "ls /proc/1/fd | wc -l"})["stdout"].strip().isdigit()
        pipe = os.readlink(f"/proc/self/fd/{r}")
        inits = [pid for pid, comm, _ in d.children() if comm == "sbx-init"]
        for pid in [d.spawner(), *inits]:
            held = [os.readlink(f"/proc/{pid}/fd/{f}") for f in os.listdir(f"/proc/{pid}/fd")]
            assert pipe not in held, (pid, held)
        # The daemon itself still holds it (it is the daemon's caller's business).
        held = [os.readlink(f"/proc/{d.proc.pid}/fd/{f}") for f in os.listdir(f"/proc/{d.proc.pid}/fd")]
        assert pipe in held, held
    finally:
        d.stop()
        os.close(r)


@pytest.mark.parametrize("beside", [None, "exit 2", "exec sleep 3600"])
def test_without_a_working_sbx_spawner_beside_it_the_daemon_forks_its_spawner(tmp_path, beside):
    """A sbx-engine with no sbx-spawner beside it (a copy alone in a directory), or with one
    that exits at once (another build's refuses its setup) or never takes its setup, still makes
    sandboxes: its spawner is a fork of itself, as a program of the C API's is, and says why."""
    engine = os.path.join(os.path.dirname(os.path.realpath(SBX)), "sbx-engine")
    if not os.path.exists(engine):
        pytest.skip(f"sbx-engine is not beside {SBX} (an installed sbx keeps it in libexec)")
    alone = tmp_path / "sbx-engine"
    with open(engine, "rb") as f:
        alone.write_bytes(f.read())
    alone.chmod(0o755)
    if beside:
        fake = tmp_path / "sbx-spawner"
        fake.write_text(f"#!/bin/sh\n{beside}\n")
        fake.chmod(0o755)
    d = Daemon(program=str(alone), stderr=subprocess.PIPE)
    try:
        p = d.peer()
        sid = p.result("sandbox.create", {})["sandboxId"]
        assert p.result("run", {"sandboxId": sid, "command": "echo $((6 * 7))"})["stdout"] == "42\n"
        spawner = d.spawner()
        assert os.readlink(f"/proc/{spawner}/exe") == str(alone)
        assert str(alone) in mapped_files(spawner)
        # No fake left behind: it was killed and reaped.
        assert not [pid for pid, comm, _ in d.children() if comm in ("sh", "sleep")], d.children()
    finally:
        d.stop()
    said = d.proc.stderr.read().decode()
    if beside:
        why = "it exited without taking its setup: not of this build?" if beside == "exit 2" else \
            "it did not take its setup in time"
        assert f"cannot start {fake} ({why}): the sandboxes' pid 1 are cloned from a fork" in said, said


def test_sbx_spawner_run_by_hand_refuses_and_says_what_it_is():
    here = os.path.dirname(os.path.realpath(SBX))
    for prog in (os.path.join(here, "sbx-spawner"), os.path.join(here, "..", "libexec", "sbx", "sbx-spawner")):
        if os.path.exists(prog):
            break
    else:
        pytest.skip(f"no sbx-spawner beside {SBX}")
    for args in ([], ["sbx-spawner-abi:0.0:1:2:3:4:5"]):
        cp = subprocess.run([prog, *args], capture_output=True, timeout=10, stdin=subprocess.DEVNULL)
        assert cp.returncode == 2, cp
        assert b"started only by the sbx-engine of its own build" in cp.stderr, cp.stderr


@pytest.mark.parametrize("setup", [b"", b"x" * 40, b"\0" * 4096])
def test_sbx_spawner_with_its_argument_but_a_bad_setup_refuses(setup):
    """The right argument (read from a daemon's spawner) but no setup, a short one or one that
    is not the daemon's on fd 3: it says so and exits 2, making nothing."""
    import socket
    d = Daemon()
    try:
        p = d.peer()
        p.result("sandbox.create", {})
        spawner = d.spawner()
        prog = os.readlink(f"/proc/{spawner}/exe")
        with open(f"/proc/{spawner}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        if os.path.basename(prog) != "sbx-spawner":
            pytest.skip(f"the daemon's spawner is {prog}")
    finally:
        d.stop()
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with a, b:
        if setup:
            a.send(setup)
        else:
            a.shutdown(socket.SHUT_WR)
        cp = subprocess.run([prog, argv[1].decode()], capture_output=True, timeout=30, stdin=subprocess.DEVNULL,
                            pass_fds=(b.fileno(),), preexec_fn=lambda: os.dup2(b.fileno(), 3))
    assert cp.returncode == 2, cp
    assert cp.stderr == b"sbx-spawner: no setup from sbx-engine\n", cp.stderr


def test_a_full_spawner_queue_refuses_with_a_retry_and_nothing_is_left():
    d = Daemon()
    try:
        p = d.peer()
        warm = p.result("sandbox.create", {})["sandboxId"]
        spawner = d.spawner()
        os.kill(spawner, signal.SIGSTOP)
        # Each request carries the shells' environment: 440 KB each fills the queue in tens.
        env = {f"V{i}": "x" * 110000 for i in range(4)}
        waiting, refused = [], None
        for _ in range(200):
            q = d.peer()
            waiting.append((q, q.send("sandbox.create", {"env": env})))
            if len(waiting) % 10 == 0:
                def answered():
                    for i, (peer, rid) in enumerate(waiting):
                        with peer.cond:
                            if json.dumps(rid) in peer.answers:
                                return i
                    return None
                if wait_until(lambda: answered() is not None, timeout=1):
                    at = answered()
                    refused = waiting.pop(at)
                    break
        assert refused, "the queue never filled"
        err = refused[0].wait(refused[1])["error"]
        assert err["code"] == -32001 and "WORKER_UNAVAILABLE" in err["message"], err
        assert err.get("data", {}).get("retryAfterMs", 0) > 0, err
        # The loop goes on meanwhile, and the sandbox made before answers.
        assert p.result("ping") is not None
        assert p.result("run", {"sandboxId": warm, "command": "echo up"})["stdout"] == "up\n"
        # The spawner killed: every create that waited fails, saying why (those sent after the
        # first refusal was seen were refused too).
        kill_stopped(spawner)
        made = 0
        for i, (peer, rid) in enumerate(waiting):
            ans = peer.wait(rid, timeout=60)
            if i >= at and "result" in ans:
                made += 1  # sent after the refusal, read by the daemon only once a new spawner ran
                continue
            assert "error" in ans and ("spawner" in ans["error"]["message"] or ans["error"]["code"] == -32001), ans
        # Another spawner for the next create, whose sandbox works.
        sid = p.result("sandbox.create", {})["sandboxId"]
        assert p.result("run", {"sandboxId": sid, "command": "echo again"})["stdout"] == "again\n"
        assert d.spawner() != spawner
        # Nothing of the failed ones: no zombie, no pid 1 but the two sandboxes'.
        assert wait_until(lambda: len([c for c in d.children() if c[1] == "sbx-init"]) == 2 + made, timeout=10), \
            d.children()
        assert not [c for c in d.children() if c[2] == "Z"], d.children()
    finally:
        assert d.stop() == 0


@pytest.mark.parametrize("mode", ["namespaces", "process"])
def test_a_killed_spawner_fails_what_waits_and_another_takes_over(mode):
    d = Daemon(*(["--mode", "process"] if mode == "process" else []))
    try:
        p = d.peer()
        warm = p.result("sandbox.create", {})["sandboxId"]
        spawner = d.spawner()
        os.kill(spawner, signal.SIGSTOP)
        waiting = []
        for _ in range(5):
            q = d.peer()
            waiting.append((q, q.send("sandbox.create", {"persist": True})))
        # All five asked of the stopped spawner (listed while they wait for it) before it dies:
        # a create the daemon read only after would go to the next spawner.
        assert wait_until(lambda: len(p.result("sandbox.list", {})["sandboxes"]) >= 6, timeout=60), \
            p.result("sandbox.list", {})
        kill_stopped(spawner)
        for peer, rid in waiting:
            ans = peer.wait(rid, timeout=60)
            assert "error" in ans and "spawner" in ans["error"]["message"], ans
        assert p.result("run", {"sandboxId": warm, "command": "echo still"})["stdout"] == "still\n"
        sid = p.result("sandbox.create", {})["sandboxId"]
        assert p.result("run", {"sandboxId": sid, "command": "echo new"})["stdout"] == "new\n"
        assert wait_until(lambda: len([c for c in d.children() if c[1] == "sbx-init"]) == 2, timeout=10), \
            d.children()
        assert not [c for c in d.children() if c[2] == "Z"], d.children()
    finally:
        assert d.stop() == 0
