"""Rootless mode: sbx run by an unprivileged user, in a user namespace, with a delegated
cgroup v2 subtree (SBX_CGROUP_PARENT) and rlimits where no cgroup controller is writable.

The test, as root, makes the delegated directory, moves the child into it (as systemd's user
delegation would) and drops to uid 65534 with setpriv before exec'ing sbx."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import Delegation, wait_until

REPO = Path(__file__).resolve().parents[2]
SBX = os.environ.get("SBX_BIN", str(REPO / "build" / "src" / "cli" / "sbx"))

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the test needs root to prepare the delegation"),
    pytest.mark.skipif(not shutil.which("setpriv"), reason="setpriv (util-linux) missing"),
    pytest.mark.skipif(not os.path.exists(SBX), reason=f"{SBX} not built"),
]


@pytest.fixture
def delegated():
    d = Delegation()
    yield d
    d.remove()


def run_rootless(delegated, *cmds, opts=(), timeout=60):
    return subprocess.run([*Delegation.argv, SBX, "run", *opts, "--", *cmds], preexec_fn=delegated.enter,
                          env=delegated.env(), cwd="/", capture_output=True, timeout=timeout)


def rootless_serve(delegated, *args):
    """`sbx serve --stdio` as uid 65534 in the delegated cgroup; the caller ends it by closing
    its stdin."""
    return subprocess.Popen([*Delegation.argv, SBX, "serve", "--stdio", *args], preexec_fn=delegated.enter,
                            env=delegated.env(), cwd="/", stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def stdio_caller(p):
    """A blocking call(method, params) -> the whole answer, on a daemon's stdio."""
    import json
    n = [0]

    def call(method, params=None):
        n[0] += 1
        p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": n[0], "method": method, "params": params or {}}) + "\n").encode())
        p.stdin.flush()
        while True:
            msg = json.loads(p.stdout.readline())
            if msg.get("id") == n[0]:
                return msg
    return call


def rootless_created(delegated):
    """A rootless daemon on stdio and its caller, its root sandbox created (or the test
    skipped where unprivileged user namespaces are not allowed)."""
    p = rootless_serve(delegated)
    call = stdio_caller(p)
    created = call("create")
    if "error" in created and "namespace" in created["error"]["message"]:
        p.stdin.close()
        p.wait(10)
        pytest.skip("unprivileged user namespaces are not allowed here")
    assert "result" in created, created
    return p, call


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
    # Commands get the limit less the shells' reserve (8 of 64).
    assert cp.stdout.splitlines() == [b"56", str(256 * 1024).encode(), b"0", b"nomem"]


def test_rootless_leftovers_never_wedge_the_session(delegated):
    """With RLIMIT_NPROC alone, what commands leave running can take the commands' share of the
    process limit but not the shells' reserve: the run that needs to fork then stops at once
    with the reason and the count of leftovers, and the next runs still start."""
    cp = run_rootless(delegated, "for i in $(seq 40); do sleep 1000 & done; echo started",
                      "for i in $(seq 30); do sleep 1000 & done 2>/dev/null; wait; echo never",
                      "echo still; kill $(pgrep -x sleep); sleep 0.2; ps -eo comm | grep -c '^sleep$' || true",
                      opts=["-t", "20", "--pids", "64"], timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.splitlines() == [b"started", b"still", b"0"], (cp.stdout, cp.stderr)
    assert b"process limit (64) was reached" in cp.stderr and b"40 processes left running" in cp.stderr, cp.stderr


def test_rootless_leaves_nothing(delegated):
    cp = run_rootless(delegated, "sleep 300 &", "echo ok")
    assert cp.returncode == 0 and cp.stdout == b"ok\n", cp.stderr
    # Removed after the answer, by a detached child of sbx run (run.c, free_after_exit()).
    wait_until(lambda: not [p for p in delegated.dir.iterdir() if p.is_dir()], timeout=10)
    assert [p.name for p in delegated.dir.iterdir() if p.is_dir()] == []
    assert (delegated.dir / "cgroup.procs").read_text() == ""


def test_rootless_export_import(delegated):
    """sbx run --export / --import as an unprivileged user: the archive job and the tree
    operations work without root (no fs-id switch, no capabilities)."""
    import tempfile
    d = Path(tempfile.mkdtemp(prefix="sbx-rootless-"))
    os.chmod(d, 0o777)
    out = d / "w.tar.zst"
    cp = run_rootless(delegated, "cd /tmp && mkdir -p d && printf 'a\\0b' > d/f && chmod 640 d/f && X=7",
                      opts=["--export", str(out)])
    if cp.returncode != 0 and b"user namespaces" in cp.stderr:
        pytest.skip("unprivileged user namespaces are not allowed here")
    assert cp.returncode == 0, cp.stderr
    cp = run_rootless(delegated, "pwd; echo $X; stat -c %a d/f; od -An -c d/f", opts=["--import", str(out)])
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.split(b"\n")[:3] == [b"/tmp", b"7", b"640"]
    assert b"a  \\0   b" in cp.stdout
    shutil.rmtree(d)


def test_rootless_fork_and_snapshot(delegated):
    """The daemon as an unprivileged user: fork and snapshot restore (the snapshot store is
    a tmpfs the sandbox's pid 1 mounts in its user namespace)."""
    p, call = rootless_created(delegated)
    try:
        assert call("run", {"command": "cd /tmp; echo one > f; V=1"})["result"]["exitCode"] == 0
        fork = call("sandbox.fork")["result"]["sandboxId"]
        assert call("run", {"sandboxId": fork, "command": "echo $V $PWD; cat f; stat -c %u f"})["result"]["stdout"] == "1 /tmp\none\n1000\n"
        snap = call("snapshot.create")["result"]["id"]
        assert call("run", {"command": "echo two > f; V=2"})["result"]["exitCode"] == 0
        assert call("snapshot.restore", {"id": snap})["result"] == {"ok": True}
        assert call("run", {"command": "echo $V; cat f"})["result"]["stdout"] == "1\none\n"
    finally:
        p.stdin.close()
        p.wait(10)


def test_rootless_upload(delegated):
    """An upload as an unprivileged daemon: its nameless temp file (O_TMPFILE) is made and
    linked into place as the sandbox's user, in the sandbox's user namespace."""
    import base64
    p, call = rootless_created(delegated)
    try:
        part = base64.b64encode(b"abc" * 1000).decode()
        begun = call("files.write", {"path": "/tmp/up.bin", "data": part, "upload": "begin", "mode": 0o640})
        assert "result" in begun, begun
        uid = begun["result"]["uploadId"]
        assert "result" in call("files.write", {"path": "/tmp/up.bin", "data": part, "upload": "commit",
                                                "uploadId": uid})
        out = call("run", {"command": "stat -c '%a %s %u' /tmp/up.bin; ls -A /tmp"})["result"]["stdout"]
        assert out == "640 6000 1000\nup.bin\n", out
    finally:
        p.stdin.close()
        p.wait(10)


def test_rootless_processes(delegated):
    """Processes as an unprivileged daemon: pid 1 reports their status, their cgroups kill
    their trees, and a terminal comes from the sandbox's own devpts."""
    import base64
    p, call = rootless_created(delegated)
    try:
        a = call("process.start", {"command": "echo hi; exit 6"})["result"]["processId"]
        assert call("process.wait", {"processId": a, "until": "exit", "timeoutMs": 10000})["result"] == {
            "status": "exited", "exitCode": 6, "signal": None}
        assert call("process.logs", {"processId": a})["result"]["stdout"] == "hi\n"
        b = call("process.start", {"command": "trap '' TERM; setsid sleep 1000 & sleep 1001"})["result"]["processId"]
        assert call("process.kill", {"processId": b, "graceMs": 100})["result"]["status"] == "killed"
        assert "sleep" not in call("run", {"command": "ps -eo comm"})["result"]["stdout"]
        t = call("process.start", {"command": "exec bash --norc -i", "pty": {"cols": 90, "rows": 20}})["result"]["processId"]
        call("process.write", {"processId": t, "data": base64.b64encode(b"tty; stty size; exit 3\n").decode()})
        assert call("process.wait", {"processId": t, "until": "exit", "timeoutMs": 10000})["result"]["exitCode"] == 3
        out = call("process.logs", {"processId": t})["result"]["stdout"]
        assert "/dev/pts/0" in out and "20 90" in out, out
    finally:
        p.stdin.close()
        p.wait(10)


def test_rootless_image(delegated, tmp_path):
    """A rootless daemon imports an image into a store of its user's and makes a sandbox of it:
    whiteouts (0:0 character devices, which an unprivileged user may make) and opaque
    directories (user.overlay.opaque) work in its user namespace too."""
    import sys
    import tempfile
    sys.path.insert(0, str(Path(__file__).parent))
    import ocitool
    base = Path(tempfile.mkdtemp(prefix="sbx-rootless-img-", dir="/var/tmp"))
    try:
        os.chmod(base, 0o755)
        root = ocitool.host_root(str(base / "root"))
        top = ocitool.tar_of_entries([ocitool.entry("etc/.wh.image-marker"), ocitool.entry("opt/app/.wh..wh..opq"),
                                      ocitool.entry("opt/app/only.txt", data=b"only this\n")])
        ocitool.write_oci_layout(str(base / "layout"), [ocitool.tar_of_dir(str(root)), top], name="rl:1")
        for dirpath, dirnames, filenames in os.walk(base / "layout"):
            os.chmod(dirpath, 0o755)
            for f in filenames:
                os.chmod(os.path.join(dirpath, f), 0o644)
        (base / "store").mkdir()
        os.chown(base / "store", 65534, 65534)
        p = rootless_serve(delegated, "--image-store", str(base / "store" / "s"))
        call = stdio_caller(p)
        try:
            imp = call("image.import", {"path": str(base / "layout")})
            assert "result" in imp, imp
            created = call("create", {"image": "rl:1"})
            if "error" in created and "namespace" in created["error"]["message"]:
                pytest.skip("unprivileged user namespaces are not allowed here")
            assert "result" in created, created
            r = call("run", {"command": "ls /opt/app; test -e /etc/image-marker || echo gone; cat /opt/app/only.txt; id -u"})
            assert r["result"]["stdout"] == "only.txt\ngone\nonly this\n1000\n", r
        finally:
            p.stdin.close()
            p.wait(15)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_rootless_shell_goes_on_as_the_spawners_bash_unless_rlimit_nproc_stands_in(delegated):
    # A rootless daemon's spawner is the host's bash with sbx-spawner.so too (test_zygote.py);
    # its shells take the sandbox's ids inside a user namespace the daemon's user owns. Where no
    # pids cgroup is delegated, RLIMIT_NPROC stands in, which the kernel checks after a change
    # of ids only at the next exec: those shells exec.
    from test_zygote import SO, maps_text, shell_of
    if not os.path.exists(SO):
        pytest.skip("no sbx-spawner.so in this build")
    p, call = rootless_created(delegated)
    try:
        r = call("run", {"command": "echo $0 $UID $HOSTNAME; id -un; ulimit -u; echo $$"})
        out = r["result"]["stdout"].split("\n")
        assert out[:2] == ["bash 1000 sandbox", "user"], r
        shell = shell_of(p.pid, "", int(out[3]))  # its one sandbox
        assert ("sbx-spawner.so" in maps_text(shell)) == (out[2] == "unlimited"), (out, maps_text(shell))
    finally:
        p.stdin.close()
        p.wait(15)
