"""The shared skeleton (sandbox/mount.h, mount_skeleton_make()): a root daemon's sandboxes build
their roots on one read-only tmpfs made by its spawner instead of a tmpfs each, and a change of
the host's /etc or system directories still reaches the next sandbox: its pid 1 finds the
skeleton stale and builds one of its own, and the spawner makes the shared one anew."""
import os
import time

import pytest

from test_image import start_server, stop_server, new_box

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a root daemon's spawner makes the shared skeleton")

# The skeleton's files belong to the host's root, which no sandbox maps.
SHAPE = "stat -c '%d %U %a %n' / /etc /etc/passwd /dev /root /run /home; readlink /var/tmp /dev/ptmx"
# An entry of the host's /etc that a root binds when it is there (mount.c, etc_binds).
PROBE = "/etc/mailcap"


def device(box, path="/"):
    return box.sh(f"stat -c %d {path}")


def test_sandboxes_share_one_read_only_skeleton():
    peer = start_server()
    try:
        a, b = new_box(peer), new_box(peer)
        shape = a.sh(SHAPE)
        # One superblock for both roots.
        assert shape == b.sh(SHAPE), (shape, b.sh(SHAPE))
        lines = shape.splitlines()
        assert [ln.split(" ", 1)[1] for ln in lines[:7]] == [
            "nobody 755 /", "nobody 755 /etc", "nobody 644 /etc/passwd", "nobody 755 /dev",
            "nobody 700 /root", "nobody 755 /run", "nobody 755 /home"], shape
        assert lines[7:] == ["../tmp", "pts/ptmx"], shape
        # What is mounted on it is each sandbox's own.
        assert device(a, "/tmp") != device(b, "/tmp")
        assert device(a, "/dev/pts") != device(b, "/dev/pts")
        assert a.sh("cat /etc/hostname; getent passwd user | cut -d: -f3-4; echo x > /dev/shm/f && cat /dev/shm/f") == \
            "sandbox\n1000:1000\nx\n"
        # Nothing of it is writable, through no path.
        r = a.run("for p in /skel-probe /etc/skel-probe /run/skel-probe /var/skel-probe; do "
                  "touch $p 2>&1; done; chmod 777 /etc/passwd 2>&1; true")
        assert r["stdout"].count("Read-only file system") == 5, r
        # A sandbox destroyed leaves the skeleton to the others.
        a.destroy()
        c = new_box(peer)
        assert device(c) == device(b)
        assert c.sh("cat /etc/hostname") == "sandbox\n"
    finally:
        stop_server(peer)


@pytest.mark.skipif(os.path.lexists(PROBE), reason=f"needs an entry the host's /etc lacks ({PROBE})")
def test_a_change_of_the_hosts_etc_reaches_the_next_sandbox():
    peer = start_server()
    has = f"cat {PROBE} 2>/dev/null || echo none"
    try:
        a = new_box(peer)
        assert a.sh(has) == "none\n"
        first = device(a)
        try:
            with open(PROBE, "w") as f:
                f.write("text/x-sbx; cat %s\n")
            # Within the spawner's check interval (or just past it), the new sandbox has it:
            # its pid 1 found the skeleton stale (or the spawner made it anew).
            b = new_box(peer)
            assert b.sh(has) == "text/x-sbx; cat %s\n"
            assert a.sh(has) == "none\n"
            # Past the interval the spawner has made a new shared skeleton.
            time.sleep(1.2)
            c = new_box(peer)
            assert c.sh(has) == "text/x-sbx; cat %s\n"
            assert c.sh("stat -c %U /") == "nobody\n"
            second = device(c)
            assert second != first
            assert device(new_box(peer)) == second
        finally:
            os.unlink(PROBE)
        d = new_box(peer)
        assert d.sh(has) == "none\n"
        time.sleep(1.2)
        e = new_box(peer)
        assert e.sh(has) == "none\n"
        assert e.sh("stat -c %U /") == "nobody\n"
        assert device(e) not in (first, second)
    finally:
        stop_server(peer)


def test_the_snapshot_store_is_made_by_the_first_snapshot():
    # A root daemon makes a sandbox's snapshot store when its first snapshot needs it: a
    # sandbox that never takes one has no tmpfs for it (pid 1 holds its root and its writable
    # tmpfs's own detached mount, nothing else of a filesystem's root).
    from test_park import Daemon, comm, warm, run
    d = Daemon("--park-after", "60000")
    try:
        sid = warm(d, 1)[0]
        pid1 = [p for p in d.procs(sid, "init") if comm(p) == "sbx-init"]
        assert len(pid1) == 1, pid1
        fds = [f"/proc/{pid1[0]}/fd/{n}" for n in os.listdir(f"/proc/{pid1[0]}/fd")]
        roots = sorted(os.stat(f).st_dev for f in fds if os.readlink(f) == "/")
        want = sorted([os.stat(f"/proc/{pid1[0]}/root").st_dev, os.stat(f"/proc/{pid1[0]}/root/tmp").st_dev])
        assert roots == want, (roots, want, [os.readlink(f) for f in fds])
        first = d.peer.result("snapshot.create", {"sandboxId": sid})["id"]
        assert run(d.peer, sid, "echo two > /tmp/f")["exitCode"] == 0
        second = d.peer.result("snapshot.create", {"sandboxId": sid})["id"]
        d.peer.result("snapshot.restore", {"sandboxId": sid, "id": first})
        assert run(d.peer, sid, "cat /tmp/f; stat -c %U /tmp/f")["stdout"] == "file0\nuser\n"
        d.peer.result("snapshot.restore", {"sandboxId": sid, "id": second})
        assert run(d.peer, sid, "cat /tmp/f")["stdout"] == "two\n"
    finally:
        d.stop()
