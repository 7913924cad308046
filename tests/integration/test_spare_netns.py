"""Network namespaces made ahead (sandbox/spawner.c, NetSpare): once no create came for
SBX_SPARE_NET_QUIET_MS, a root daemon's spawner makes the next sandbox's network namespace with
loopback up and holds it by an fd; the next sandbox that wants one of its own is cloned into it.
The spawner itself stays in the host's namespace (a sandbox with the host's network is cloned
there), no namespace is given twice, and no fd of one reaches a sandbox."""
import glob
import os
import socket

import pytest

from conftest import wait_until
from test_park import Daemon, run

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a root daemon's spawner makes them")

HOST_NET = os.readlink("/proc/self/ns/net")


def spawner_of(pid):
    """The daemon's sbx-spawner: its child of that name."""
    for child in os.listdir("/proc"):
        if not child.isdigit():
            continue
        try:
            with open(f"/proc/{child}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name, rest = stat.split(" (", 1)[1].rsplit(") ", 1)
        if name == "sbx-spawner" and int(rest.split()[1]) == pid:
            return int(child)
    return None


def net_fds(pid):
    """The network namespaces pid holds an fd of (not the one it is in)."""
    held = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("net:["):
            held.add(target)
    return held


def sandbox_pids(d, sid):
    """Every process of the sandbox: pid 1, its session shells, their workers."""
    pids = set()
    for f in glob.glob(f"/sys/fs/cgroup/**/sbx-{d.proc.pid}/{sid}/**/cgroup.procs", recursive=True):
        try:
            with open(f) as fh:
                pids |= {int(x) for x in fh.read().split()}
        except OSError:
            pass
    return pids


def spare_of(spawner):
    """The spare the spawner holds, or None (its own namespace's fd aside)."""
    held = net_fds(spawner) - {HOST_NET}
    assert len(held) <= 1, held
    return held.pop() if held else None


def test_the_next_sandbox_is_cloned_into_the_namespace_made_ahead():
    d = Daemon()
    try:
        first = d.peer.result("sandbox.create", {})["sandboxId"]
        spawner = spawner_of(d.proc.pid)
        assert spawner, "no sbx-spawner child of the daemon"
        assert wait_until(lambda: spare_of(spawner), timeout=10), net_fds(spawner)
        spare = spare_of(spawner)
        # The spawner went back to its own namespace after making it.
        assert os.readlink(f"/proc/{spawner}/ns/net") == HOST_NET
        second = d.peer.result("sandbox.create", {})["sandboxId"]
        # Back in its own namespace after the clone: a sandbox with the host's network made at
        # once (no new spare within 15 ms) is the host's.
        assert os.readlink(f"/proc/{spawner}/ns/net") == HOST_NET
        host = d.peer.result("sandbox.create", {"network": "host"})["sandboxId"]
        assert run(d.peer, host, "readlink /proc/self/ns/net")["stdout"] == HOST_NET + "\n"
        probe = ("readlink /proc/self/ns/net; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; "
                 "python3 -c 'import socket\n"
                 "for fam, host in ((socket.AF_INET, \"127.0.0.1\"), (socket.AF_INET6, \"::1\")):\n"
                 "    s = socket.socket(fam); s.bind((host, 8080)); s.listen()\n"
                 "    c = socket.create_connection((host, 8080)); a, _ = s.accept()\n"
                 "    c.sendall(b\"x\"); print(host, a.recv(1).decode())'")
        r = run(d.peer, second, probe)
        assert r["exitCode"] == 0, r
        # Its own namespace is the spare; only loopback in it, up for both families; the
        # same port bound in the first sandbox's namespace too, while the second's server
        # (below) holds 8000 of its own.
        assert r["stdout"] == f"{spare}\nlo\n127.0.0.1 x\n::1 x\n", r
        # Its ports reach the host's loopback: the socket maker enters a namespace the daemon's
        # user owns.
        server = ("python3 -c 'import socket\n"
                  "s = socket.socket(); s.bind((\"127.0.0.1\", 8000)); s.listen()\n"
                  "while True:\n"
                  "    c, _ = s.accept(); c.sendall(b\"from the spare\"); c.close()' &\n"
                  "for i in $(seq 100); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8000))' "
                  "2>/dev/null && break; sleep 0.05; done")
        assert run(d.peer, second, server)["exitCode"] == 0
        hp = d.peer.result("port.expose", {"sandboxId": second, "port": 8000})["port"]
        with socket.create_connection(("127.0.0.1", hp), timeout=10) as c:
            got = b""
            while chunk := c.recv(64):
                got += chunk
        assert got == b"from the spare", got
        r1 = run(d.peer, first, probe)
        assert r1["exitCode"] == 0 and r1["stdout"].split("\n", 1)[1] == "lo\n127.0.0.1 x\n::1 x\n", r1
        assert r1["stdout"].split("\n")[0] not in (spare, HOST_NET), r1
        # Given once: the spawner holds it no longer, and makes another for the next.
        assert spare_of(spawner) != spare
        assert wait_until(lambda: spare_of(spawner), timeout=10)
        assert spare_of(spawner) != spare
        third = d.peer.result("sandbox.create", {})["sandboxId"]
        r3 = run(d.peer, third, "readlink /proc/self/ns/net")
        assert r3["stdout"].strip() not in (spare, HOST_NET, r1["stdout"].split("\n")[0]), r3
        # No process of a sandbox holds a namespace's fd but its own (pid 1 keeps one for the
        # daemon): not the host's, not the spare the spawner held when it was cloned.
        for sid in (first, second, third):
            pids = sandbox_pids(d, sid)
            assert len(pids) >= 2, (sid, pids)
            for pid in pids:
                assert net_fds(pid) <= {os.readlink(f"/proc/{pid}/ns/net")}, (sid, pid, net_fds(pid))
        for sid in (first, second, third, host):
            d.peer.result("sandbox.destroy", {"sandboxId": sid})
    finally:
        d.stop()


def test_a_sandbox_with_the_hosts_network_is_not_cloned_into_the_spare():
    d = Daemon()
    try:
        first = d.peer.result("sandbox.create", {})["sandboxId"]
        spawner = spawner_of(d.proc.pid)
        assert wait_until(lambda: spare_of(spawner), timeout=10)
        spare = spare_of(spawner)
        host = d.peer.result("sandbox.create", {"network": "host"})["sandboxId"]
        assert run(d.peer, host, "readlink /proc/self/ns/net")["stdout"] == HOST_NET + "\n"
        # Kept for the next sandbox that wants a namespace of its own.
        assert spare_of(spawner) == spare
        own = d.peer.result("sandbox.create", {})["sandboxId"]
        assert run(d.peer, own, "readlink /proc/self/ns/net")["stdout"] == spare + "\n"
        for sid in (first, host, own):
            d.peer.result("sandbox.destroy", {"sandboxId": sid})
    finally:
        d.stop()


def test_a_sandbox_made_in_a_burst_has_one_namespace_of_its_own_for_every_process():
    # Creates back to back get no spare: the default session's shell makes the namespace
    # while pid 1 builds the root, and pid 1 enters it before anything else starts.
    d = Daemon()
    try:
        sids = [d.peer.result("sandbox.create", {})["sandboxId"] for _ in range(3)]
        seen = set()
        for k, sid in enumerate(sids):
            got = set()
            for session in ("default", "other"):
                r = d.peer.result("run", {"sandboxId": sid, "session": session, "command":
                                          "readlink /proc/self/ns/net; stat -c %U /proc/sys/net/ipv4/ip_forward; "
                                          "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"})
                assert r["exitCode"] == 0, r
                net, owner, devs = r["stdout"].split("\n", 2)
                assert devs == "lo\n", r
                got.add((net, owner))
            # The first, made before any spare could be, has one its shell made in the sandbox's
            # own user namespace: its root owns the sysctls. (A slow machine may leave 15 ms
            # between the others, which then take a spare.)
            if k == 0:
                assert {o for _, o in got} == {"root"}, (sid, got)
            for pid in sandbox_pids(d, sid):
                try:
                    got.add((os.readlink(f"/proc/{pid}/ns/net"), None))
                except OSError:
                    pass  # a process that ended meanwhile
            nets = {n for n, _ in got}
            # One namespace for pid 1, both sessions' shells and their commands; not the
            # host's, not another sandbox's.
            assert len(nets) == 1 and HOST_NET not in nets and not nets & seen, (sid, got)
            seen |= nets
        for sid in sids:
            d.peer.result("sandbox.destroy", {"sandboxId": sid})
    finally:
        d.stop()
