"""Cgroups made ahead (cgroup/cgroup.h, CgroupSpare): between requests a daemon's spawner makes
the next sandbox's v1 memory, pids and cpu cgroups under the name `spare`; a create renames them
to the sandbox's id and sets its limits there, and the daemon's stop leaves no base behind."""
import glob
import os

import pytest

from conftest import wait_until
from test_park import Daemon, run

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a root daemon's v1 cgroups")


def v1_bases(pid):
    """{controller: the daemon's base directory} of the v1 hierarchies it uses."""
    bases = {}
    for ctl in ("memory", "pids", "cpu"):
        found = glob.glob(f"/sys/fs/cgroup/{ctl}/**/sbx-{pid}", recursive=True)
        if found:
            bases[ctl] = found[0]
    return bases


def spares_made(bases):
    return all(os.path.isdir(f"{b}/spare") for b in bases.values())


def test_the_next_sandbox_takes_the_cgroups_made_ahead():
    d = Daemon()
    pid = d.proc.pid
    try:
        first = d.peer.result("sandbox.create", {})["sandboxId"]
        bases = v1_bases(pid)
        if "memory" not in bases:
            pytest.skip("no v1 memory hierarchy on this host")
        assert wait_until(lambda: spares_made(bases), timeout=10), os.listdir(bases["memory"])
        made = {ctl: os.stat(f"{b}/spare").st_ino for ctl, b in bases.items()}
        second = d.peer.result("sandbox.create", {"limits": {"memoryBytes": 300 << 20, "pids": 77}})["sandboxId"]
        # The very directories made ahead, under the sandbox's name, with its limits.
        for ctl, b in bases.items():
            assert os.stat(f"{b}/{second}").st_ino == made[ctl], ctl
        with open(f"{bases['memory']}/{second}/memory.limit_in_bytes") as f:
            assert int(f.read()) == 300 << 20
        if "pids" in bases:
            with open(f"{bases['pids']}/{second}/pids.max") as f:
                assert f.read().strip() == "77"
        r = run(d.peer, second, "echo ok; cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || true")
        assert r["exitCode"] == 0 and r["stdout"].startswith("ok\n"), r
        assert run(d.peer, first, "echo ok")["stdout"] == "ok\n"
        # Made again for the one after.
        assert wait_until(lambda: spares_made(bases), timeout=10)
        assert all(os.stat(f"{b}/spare").st_ino != made[ctl] for ctl, b in bases.items())
        for sid in (first, second):
            d.peer.result("sandbox.destroy", {"sandboxId": sid})
    finally:
        d.stop()
    assert not [b for b in bases.values() if os.path.exists(b)], bases
