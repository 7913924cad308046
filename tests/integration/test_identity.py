"""Identity: nothing inside a sandbox names the host's cgroup paths, the daemon or the sandbox's
id; pid 1 is no host root and keeps only what it needs after setup; as root, the sandbox's
ids 0..65535 (nobody included) are a host block of its own, and its trees keep their owners
across fork, snapshot and export.

Root-daemon tests use `sbx run` and raw JSON-RPC (test_image's server helpers); the rootless
ones drop to uid 65534 with test_rootless's helper."""
import os
import re
import subprocess

import pytest

from conftest import sbx, out, describe
from test_image import start_server, stop_server, new_box, read_archive
from test_rootless import delegated, run_rootless  # noqa: F401 (delegated: a fixture)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the root daemon's identity; rootless tests prepare it as root")

# What the sandbox's pid 1 keeps once its root is built: CAP_SETGID, CAP_SETUID, CAP_SETPCAP.
KEPT = "00000000000001c0"
STATUS = "grep -E '^(Uid|Gid|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/1/status | tr -s '\\t' ' '"
HOST_BLOCKS = range(1_600_000_000, 0x7FFE0000)


def cgroup_paths(text):
    """{hierarchy: path} of a /proc/<pid>/cgroup text."""
    paths = {}
    for line in text.splitlines():
        num, ctrl, path = line.split(":", 2)
        paths[ctrl or num] = path
    return paths


def test_cgroup_paths_inside_name_nothing_of_the_host():
    cp = sbx("cat /proc/1/cgroup; echo ---; cat /proc/self/cgroup; echo ---; cat /proc/self/mountinfo")
    assert cp.returncode == 0, describe(cp)
    init, cmd, mountinfo = out(cp).split("---\n")
    # pid 1 and the session shells sit at the root of every hierarchy they can read.
    assert set(cgroup_paths(init).values()) == {"/"}, init
    # A command sits in its own command cgroup, below the sandbox's root: named from there.
    for ctrl, path in cgroup_paths(cmd).items():
        assert path == "/" or re.fullmatch(r"(/\.\.)?/cmds(/c[0-9]+)?", path), (ctrl, path)
    # Neither the daemon's cgroup directory (sbx-<pid>) nor a sandbox id, anywhere.
    for text in (init, cmd, mountinfo):
        assert "sbx-" not in text.replace("sbx-root", "").replace("sbx-fs", ""), text
        assert not re.search(r"[0-9a-f]{32}", text), text


def test_pid1_keeps_only_what_it_needs():
    cp = sbx(STATUS + "; cat /proc/1/uid_map /proc/1/gid_map")
    assert cp.returncode == 0, describe(cp)
    lines = out(cp).splitlines()
    assert lines[:9] == ["Uid: 0 0 0 0", "Gid: 0 0 0 0", "CapInh: 0000000000000000", f"CapPrm: {KEPT}",
                         f"CapEff: {KEPT}", f"CapBnd: {KEPT}", "CapAmb: 0000000000000000",
                         "NoNewPrivs: 1", "Seccomp: 2"], lines
    # Root inside is the first of 65536 host ids of the sandbox's own, never host root.
    for m in lines[9:11]:
        inside, host, count = m.split()
        assert inside == "0" and count == "65536" and int(host) in HOST_BLOCKS, lines


def _status(pid):
    with open(f"/proc/{pid}/status") as f:
        return dict(l.split(":", 1) for l in f.read().splitlines() if ":" in l)


def _inits(daemon):
    """Host pids of the sandboxes' pid 1s: the daemon's children named sbx-init."""
    found = []
    for d in os.listdir("/proc"):
        try:
            st = _status(int(d)) if d.isdigit() else None
        except OSError:
            continue
        if st and st["Name"].strip() == "sbx-init" and int(st["PPid"]) == daemon:
            found.append(int(d))
    return found


def test_pid1_is_no_host_root_as_the_host_sees_it():
    peer = start_server()
    try:
        a, b = new_box(peer), new_box(peer)
        a.sh("sleep 300 & echo started")
        inits = _inits(peer.proc.pid)
        uids = set()
        for pid in inits:
            st = _status(pid)
            ids = {int(x) for x in st["Uid"].split() + st["Gid"].split()}
            assert len(ids) == 1 and ids.pop() in HOST_BLOCKS, st["Uid"]
            assert st["CapEff"].strip() == KEPT and st["Seccomp"].strip() == "2", st
            uids.add(int(st["Uid"].split()[0]))
        # Each sandbox its own block.
        assert len(uids) == len(inits) >= 2, uids
        # What a command leaves running belongs to its sandbox's user, root's host id + 1000.
        sleeps = subprocess.run(["pgrep", "-x", "sleep", "-u", ",".join(str(u + 1000) for u in uids)],
                                capture_output=True, text=True).stdout.split()
        assert len(sleeps) == 1, sleeps
        a.destroy()
        b.destroy()
    finally:
        stop_server(peer)


def test_nobody_is_mapped_so_setuid_fails_as_on_a_normal_system():
    # Unmapped, setuid(65534) would fail with EINVAL (CPython's test_subprocess trips on it).
    cp = sbx("python3 -c 'import os\n"
             "for f in (os.setuid, os.setgid):\n"
             "    try:\n        f(65534)\n    except OSError as e:\n        print(f.__name__, e.errno)'; "
             "stat -c '%U:%G %u' /tmp /home/user; id nobody")
    assert cp.returncode == 0, describe(cp)
    assert out(cp).splitlines() == ["setuid 1", "setgid 1", "root:root 0", "user:user 1000",
                                    "uid=65534(nobody) gid=65534(nogroup) groups=65534(nogroup)"], out(cp)


def test_owners_survive_fork_snapshot_and_export():
    peer = start_server()
    owners = "stat -c '%n %u:%g' /tmp /home/user /tmp/f /home/user/g"
    want = "/tmp 0:0\n/home/user 1000:1000\n/tmp/f 1000:1000\n/home/user/g 1000:1000\n"
    try:
        a = new_box(peer)
        a.sh("touch /tmp/f /home/user/g")
        assert a.sh(owners) == want
        # Another sandbox's block: the fork's root owns its /tmp, not the source's.
        f = a.fork()
        assert f.sh(owners) == want
        assert f.sh("touch /tmp/f2 && rm /tmp/f && echo ok") == "ok\n"
        snap = a.snapshot()
        a.sh("rm /tmp/f")
        a.restore(snap)
        assert a.sh(owners) == want
        # An archive names owners as the sandbox sees them.
        members = {ti.name.rstrip("/"): ti for ti, _ in read_archive(a.export())}
        assert (members["tmp"].uid, members["tmp"].gid) == (0, 0)
        assert (members["tmp/f"].uid, members["tmp/f"].uname) == (1000, "user")
        assert (members["home/user"].uid, members["home/user/g"].gid) == (1000, 1000)
    finally:
        stop_server(peer)


# ---------------------------------------------------------------- rootless

def test_rootless_pid1_and_cgroups(delegated):
    cp = run_rootless(delegated, STATUS + "; echo ---; cat /proc/1/cgroup /proc/self/cgroup")
    if cp.returncode != 0 and b"user namespaces" in cp.stderr:
        pytest.skip("unprivileged user namespaces are not allowed here")
    assert cp.returncode == 0, cp.stderr
    status, cgroups = cp.stdout.decode().split("---\n")
    # Rootless, pid 1 is the caller (uid 1000 inside; only it is mapped).
    assert status.splitlines() == ["Uid: 1000 1000 1000 1000", "Gid: 1000 1000 1000 1000",
                                   "CapInh: 0000000000000000", f"CapPrm: {KEPT}", f"CapEff: {KEPT}",
                                   f"CapBnd: {KEPT}", "CapAmb: 0000000000000000", "NoNewPrivs: 1",
                                   "Seccomp: 2"], status
    assert "sbx-test-deleg" not in cgroups and not re.search(r"[0-9a-f]{32}", cgroups), cgroups
