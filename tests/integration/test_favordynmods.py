"""favordynmods on the host's cgroup2 hierarchy (cgroup_favor_dynmods() in src/cgroup/cgroup.c).

Without it the first move of a process between cgroups after a quiet spell waits for an RCU
grace period (docs/BENCHMARKS.md); `sbx serve` and `sbx run` turn it on as root, keeping every
other option of the mount, and leave the mount alone when given --no-favordynmods. Each test
clears the option first (a reconfigure with exactly the other options, as the kernel wants it)
and puts the mount back as it found it."""
import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import SPAWNED, own_cgroup2_flags, cgroup2_superblock as cgroup2, cgroup2_reconfigure as reconfigure, stop_daemon, wait_until
from test_rpc import SBX

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the host's cgroup2 mount)"),
    pytest.mark.skipif(not os.path.exists(SBX), reason=f"{SBX} not built"),
]


@pytest.fixture
def cleared():
    """The cgroup2 mount without favordynmods for the test, as it was after it."""
    path, opts = cgroup2()
    if not path:
        pytest.skip("no cgroup2 mount")
    try:
        with open("/sys/kernel/cgroup/features") as f:
            if "favordynmods" not in f.read().split():
                pytest.skip("this kernel has no favordynmods (Linux < 6.0)")
    except OSError:
        pytest.skip("no /sys/kernel/cgroup/features")
    try:
        elsewhere = os.readlink("/proc/self/ns/cgroup") != os.readlink("/proc/1/ns/cgroup")
    except OSError:
        elsewhere = False  # pid 1's namespace hidden (a VM's init): taken to be ours
    if elsewhere:
        pytest.skip("not in the initial cgroup namespace: the kernel ignores the option there")
    others = [o for o in own_cgroup2_flags(opts) if o != "favordynmods"]
    try:
        reconfigure(path, others)
    except AssertionError as e:
        pytest.skip(f"this kernel takes no reconfigure of cgroup2 here: {e}")
    if "favordynmods" in cgroup2()[1]:
        pytest.skip("favordynmods cannot be turned off here (the kernel's CONFIG_CGROUP_FAVOR_DYNMODS "
                    "or cgroup_favordynmods=)")
    yield path, others
    reconfigure(path, own_cgroup2_flags(opts))


def serve(*args):
    d = tempfile.mkdtemp(prefix="sbx-fdm-")
    sock = os.path.join(d, "sbx.sock")
    p = subprocess.Popen([SBX, "serve", "--socket", sock, "--pool", "0", *args],
                         stderr=subprocess.PIPE, text=True)
    SPAWNED.append(p.pid)
    assert wait_until(lambda: os.path.exists(sock) or p.poll() is not None, timeout=10)
    assert p.poll() is None
    stop_daemon(p)
    shutil.rmtree(d, ignore_errors=True)
    return p.stderr.read()


def test_serve_turns_it_on_and_keeps_the_other_options(cleared):
    path, others = cleared
    said = serve()
    _, opts = cgroup2()
    assert "favordynmods" in opts
    assert sorted(o for o in own_cgroup2_flags(opts) if o != "favordynmods") == sorted(others)
    assert f"turned favordynmods on for the cgroup2 hierarchy at {path}" in said
    # Already on: nothing to say, nothing changed.
    again = serve()
    assert "favordynmods" not in again
    assert "favordynmods" in cgroup2()[1]


def test_serve_leaves_the_mount_alone_when_told(cleared):
    said = serve("--no-favordynmods")
    assert "favordynmods" not in cgroup2()[1]
    assert "favordynmods" not in said


def test_run_turns_it_on_unless_told(cleared):
    cp = subprocess.run([SBX, "run", "--no-favordynmods", "--", "echo hi"], capture_output=True, text=True,
                        timeout=60)
    assert cp.returncode == 0 and cp.stdout == "hi\n", cp.stderr
    assert "favordynmods" not in cgroup2()[1]
    cp = subprocess.run([SBX, "run", "--", "echo hi"], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0 and cp.stdout == "hi\n", cp.stderr
    assert "favordynmods" in cgroup2()[1]
    # A one-shot run says nothing of it: its stderr is the command's.
    assert cp.stderr == ""


def test_disabled_daemon_leaves_it_alone(cleared):
    serve("--mode", "disabled")
    assert "favordynmods" not in cgroup2()[1]
