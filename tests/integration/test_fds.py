"""A daemon out of file descriptors says so: a run it cannot start is answered with errorClass
UNAVAILABLE and a line on stderr, never a bare exit 1, and everything works again once the
fds come back. The daemon runs with a small RLIMIT_NOFILE (soft and hard, so it cannot raise
it), and one client's held connections to an exposed port take the rest."""
import base64
import os
import resource
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from conftest import SPAWNED, wait_until
from test_ports import ECHO_SERVER, WAIT_LISTEN
from test_rpc import SBX, connect

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes need root here"),
    pytest.mark.skipif(not os.path.exists(SBX), reason=f"{SBX} not built"),
]

# Enough for the sessions' shells (the session socket sits at fd 1000 and up), small enough
# for one client's held connections (6 fds each with their pipes) to use the rest.
NOFILE = 1400


def sh(peer, sid, cmd):
    r = peer.result("run", {"sandboxId": sid, "command": cmd, "timeoutMs": 30000}, timeout=60)
    assert r["exitCode"] == 0, r
    return r["stdout"]


def test_a_run_the_daemon_cannot_start_says_why():
    d = tempfile.mkdtemp(prefix="sbx-fds-")
    path = os.path.join(d, "sbx.sock")
    proc = subprocess.Popen([SBX, "serve", "--socket", path, "--pool", "0"], stderr=subprocess.PIPE,
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE)))
    SPAWNED.append(proc.pid)
    held = []
    try:
        assert wait_until(lambda: os.path.exists(path), timeout=10)
        a, b = connect(path), connect(path)
        victim = b.result("sandbox.create", {})["sandboxId"]
        assert sh(b, victim, "echo ok") == "ok\n"
        sid = a.result("sandbox.create", {})["sandboxId"]
        a.result("files.write", {"sandboxId": sid, "path": "/tmp/echo.py",
                                 "data": base64.b64encode(ECHO_SERVER.encode()).decode()})
        hps = []
        for port in (7000, 7001):
            sh(a, sid, f"python3 /tmp/echo.py {port} >/dev/null 2>&1 &")
            sh(a, sid, WAIT_LISTEN % port)
            hps.append(a.result("port.expose", {"sandboxId": sid, "port": port})["port"])
        # Connections held open (at most 256 a port) until the daemon has no fd left to forward
        # one (it then resets them or leaves them unanswered).
        full = False
        for i in range(2 * 256):
            s = socket.create_connection(("127.0.0.1", hps[i // 256]), timeout=5)
            s.settimeout(2)
            held.append(s)
            try:
                s.sendall(b"x")
                if s.recv(1) != b"x":
                    full = True
            except OSError:
                full = True
            if full:
                break
        r = b.result("run", {"sandboxId": victim, "command": "echo ok"}, timeout=60)
        # Either it could still run, or it says it could not: never a failure with no word.
        if r["exitCode"] != 0:
            assert r.get("errorClass") == "UNAVAILABLE", r
            assert "could not be started" in r["stderr"] and "file descriptors" in r["stderr"], r
        unavailable = r.get("errorClass") == "UNAVAILABLE"
        for s in held:
            s.close()
        held.clear()
        # The fds come back as the forwards end: runs work again.
        assert wait_until(lambda: b.result("run", {"sandboxId": victim, "command": "echo ok"})["exitCode"] == 0,
                          timeout=30)
        assert unavailable, "the daemon never ran out of fds: the test proved nothing"
    finally:
        for s in held:
            s.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
