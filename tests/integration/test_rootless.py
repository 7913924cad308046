"""Rootless mode: sbx run by an unprivileged user, in a user namespace, with a delegated
cgroup v2 subtree (SBX_CGROUP_PARENT) and rlimits where no cgroup controller is writable.

The test, as root, makes the delegated directory, moves the child into it (as systemd's user
delegation would) and drops to uid 65534 with setpriv before exec'ing sbx."""
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SBX = os.environ.get("SBX_BIN", str(REPO / "build" / "src" / "cli" / "sbx"))
V2 = Path("/sys/fs/cgroup/unified") if Path("/sys/fs/cgroup/unified/cgroup.procs").exists() else Path("/sys/fs/cgroup")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the test needs root to prepare the delegation"),
    pytest.mark.skipif(not shutil.which("setpriv"), reason="setpriv (util-linux) missing"),
    pytest.mark.skipif(not os.path.exists(SBX), reason=f"{SBX} not built"),
]


@pytest.fixture
def delegated():
    d = V2 / f"sbx-test-deleg-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    for p in [d] + list(d.iterdir()):
        os.chown(p, 65534, 65534)
    yield d
    for sub in sorted(d.glob("**/"), key=lambda p: len(p.parts), reverse=True):
        try:
            sub.rmdir()
        except OSError:
            pass


def run_rootless(delegated, *cmds, opts=(), timeout=60):
    procs = str(delegated / "cgroup.procs")

    def enter():
        with open(procs, "w") as f:
            f.write(str(os.getpid()))

    env = {"PATH": "/usr/bin:/bin", "SBX_CGROUP_PARENT": str(delegated)}
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", SBX, "run",
                           *opts, "--", *cmds], preexec_fn=enter, env=env, cwd="/",
                          capture_output=True, timeout=timeout)


def test_rootless_identity_and_state(delegated):
    cp = run_rootless(delegated, "id -u; hostname; grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status",
                      "x=5; cd /tmp; echo data > f", "echo $x $PWD $(cat f)")
    if cp.returncode != 0 and b"user namespaces" in cp.stderr:
        pytest.skip("unprivileged user namespaces are not allowed here")
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.splitlines() == [b"1000", b"sandbox", b"CapEff:\t0000000000000000",
                                      b"CapBnd:\t0000000000000000", b"NoNewPrivs:\t1", b"Seccomp:\t2",
                                      b"5 /tmp data"]


def test_rootless_kill_and_limits(delegated):
    cp = run_rootless(delegated, "ulimit -u; ulimit -v",
                      "setsid sleep 300 & (sleep 300 &); f(){ f|f & }; f 2>/dev/null; sleep 30",
                      "ps -eo comm | grep -c '^sleep$'; python3 -c 'bytearray(600 << 20)' 2>/dev/null || echo nomem",
                      opts=["-t", "2", "--pids", "64", "--memory", "256M"], timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.splitlines() == [b"64", str(256 * 1024).encode(), b"0", b"nomem"]


def test_rootless_leaves_nothing(delegated):
    cp = run_rootless(delegated, "sleep 300 &", "echo ok")
    assert cp.returncode == 0 and cp.stdout == b"ok\n", cp.stderr
    assert [p.name for p in delegated.iterdir() if p.is_dir()] == []
    assert (delegated / "cgroup.procs").read_text() == ""
