"""files.watch and files.unwatch: file change events from a sandbox, their bounds and their end."""
import base64
import os
import socket
import time
from pathlib import Path

import pytest

from conftest import memory_bound
from test_rpc import connect, server, stdio  # noqa: F401 (fixtures: `sbx serve --stdio`, `--socket`)

REPO = Path(__file__).resolve().parents[2]
SBX = os.environ.get("SBX_BIN", str(REPO / "build" / "src" / "cli" / "sbx"))

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes need root here"),
    pytest.mark.skipif(not os.path.exists(SBX), reason=f"{SBX} not built"),
]


def events(peer, wid=None):
    """The files.event notifications so far (of watch wid, if given), as dicts."""
    with peer.cond:
        notes = list(peer.notes)
    return [n["params"] for n in notes
            if n.get("method") == "files.event" and (wid is None or n["params"]["watchId"] == wid)]


def wait_event(peer, pred, timeout=10):
    """Waits until some event satisfies pred; returns the events so far."""
    deadline = time.monotonic() + timeout
    while True:
        evs = events(peer)
        if any(pred(e) for e in evs):
            return evs
        assert time.monotonic() < deadline, f"no such event within {timeout}s; got {evs[-20:]}"
        time.sleep(0.02)


def pairs(evs, wid):
    """(type, path) of wid's events, consecutive repeats folded (a write may come in two reads)."""
    out = []
    for e in evs:
        if e["watchId"] != wid:
            continue
        p = (e["type"], e["path"])
        if not out or out[-1] != p:
            out.append(p)
    return out


def inotify(pid):
    """The daemon's inotify instances and the kernel watches they hold."""
    instances = watches = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:inotify":
                continue
            info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        instances += 1
        watches += sum(1 for line in info.splitlines() if line.startswith("inotify wd:"))
    return instances, watches


def hwm_kb(pid):
    return int([l for l in open(f"/proc/{pid}/status") if l.startswith("VmHWM")][0].split()[1])


# ---------------------------------------------------------------- events


def test_events_in_order(stdio):
    stdio.result("create")
    stdio.result("files.mkdir", {"path": "/tmp/w"})
    wid = stdio.result("files.watch", {"path": "/tmp/w"})["watchId"]
    assert wid.startswith("w")
    stdio.result("run", {"command": "cd /tmp/w && echo a > f && chmod 600 f && mv f g && rm g && mkdir d && "
                                    "echo b > d/inner && echo c > last"})
    evs = wait_event(stdio, lambda e: e["path"] == "/tmp/w/last" and e["type"] == "write")
    assert pairs(evs, wid) == [
        ("create", "/tmp/w/f"), ("write", "/tmp/w/f"), ("chmod", "/tmp/w/f"),
        ("rename", "/tmp/w/f"), ("create", "/tmp/w/g"), ("remove", "/tmp/w/g"),
        ("create", "/tmp/w/d"),
        ("create", "/tmp/w/last"), ("write", "/tmp/w/last"),
    ]
    kinds = {e["path"]: e["isDir"] for e in evs}
    assert kinds["/tmp/w/d"] is True and kinds["/tmp/w/g"] is False


def test_relative_path_and_files_api_writes(stdio):
    stdio.result("create")
    stdio.result("files.mkdir", {"path": "proj"})
    wid = stdio.result("files.watch", {"path": "proj/"})["watchId"]
    stdio.result("files.write", {"path": "proj/a.txt", "data": base64.b64encode(b"hello").decode()})
    stdio.result("files.rename", {"from": "proj/a.txt", "to": "proj/b.txt"})
    stdio.result("files.rm", {"path": "proj/b.txt"})
    evs = wait_event(stdio, lambda e: e["type"] == "remove")
    # The files API's own temp file is never told: its write is a create and a write of the target.
    assert pairs(evs, wid) == [
        ("create", "/home/user/proj/a.txt"), ("write", "/home/user/proj/a.txt"),
        ("rename", "/home/user/proj/a.txt"), ("create", "/home/user/proj/b.txt"),
        ("remove", "/home/user/proj/b.txt"),
    ]


def test_recursive_follows_new_directories(stdio):
    stdio.result("create")
    stdio.result("run", {"command": "mkdir -p /tmp/w/old/deeper"})
    wid = stdio.result("files.watch", {"path": "/tmp/w", "recursive": True})["watchId"]
    # Directories that were there at the start.
    stdio.result("run", {"command": "echo 1 > /tmp/w/old/deeper/f"})
    wait_event(stdio, lambda e: e["path"] == "/tmp/w/old/deeper/f")
    # A directory made later, then written in by a later command.
    stdio.result("run", {"command": "mkdir /tmp/w/new"})
    wait_event(stdio, lambda e: e["path"] == "/tmp/w/new")
    stdio.result("run", {"command": "echo 2 > /tmp/w/new/g"})
    wait_event(stdio, lambda e: e["path"] == "/tmp/w/new/g" and e["type"] == "write")
    # A tree made and filled at once: what it held before it was watched is told as created.
    stdio.result("run", {"command": "mkdir -p /tmp/w/n1/n2/n3 && echo 3 > /tmp/w/n1/n2/n3/h"})
    wait_event(stdio, lambda e: e["path"] == "/tmp/w/n1/n2/n3/h" and e["type"] == "create")
    # A tree moved in is watched too, and one moved away no longer is.
    stdio.result("run", {"command": "mkdir -p /tmp/out/m && echo 4 > /tmp/out/m/i && mv /tmp/out/m /tmp/w/m"})
    wait_event(stdio, lambda e: e["path"] == "/tmp/w/m/i" and e["type"] == "create")
    stdio.result("run", {"command": "echo 4 >> /tmp/w/m/i"})
    wait_event(stdio, lambda e: e["path"] == "/tmp/w/m/i" and e["type"] == "write")
    stdio.result("run", {"command": "mv /tmp/w/m /tmp/gone && echo 5 > /tmp/gone/j && echo 6 > /tmp/w/marker"})
    evs = wait_event(stdio, lambda e: e["path"] == "/tmp/w/marker" and e["type"] == "write")
    assert ("rename", "/tmp/w/m") in pairs(evs, wid)
    assert not [e for e in evs if "/j" in e["path"] or "gone" in e["path"]], evs


def test_a_creation_in_a_new_directory_is_told_once(stdio):
    # A file made in a new directory between the start of its watch and the walk that tells
    # what it held was told twice (the walk's create, then the kernel's): seen in E2B's polled
    # watcher test. Many directories, each with files made at once, give the race its chances.
    stdio.result("create")
    stdio.result("files.mkdir", {"path": "/tmp/w"})
    wid = stdio.result("files.watch", {"path": "/tmp/w", "recursive": True})["watchId"]
    stdio.result("run", {"command": "cd /tmp/w && for i in $(seq 20); do mkdir d$i; for j in $(seq 300); do : > d$i/f$j; done; done; "
                                    "touch /tmp/w/marker"})
    evs = wait_event(stdio, lambda e: e["path"] == "/tmp/w/marker")
    creates = [e["path"] for e in evs if e["watchId"] == wid and e["type"] == "create"]
    twice = sorted({p for p in creates if creates.count(p) > 1})
    assert not twice, twice
    assert len(creates) == 20 * 301 + 1, len(creates)


def test_not_recursive_stays_at_its_level(stdio):
    stdio.result("create")
    stdio.result("run", {"command": "mkdir -p /tmp/w/sub"})
    wid = stdio.result("files.watch", {"path": "/tmp/w", "recursive": False})["watchId"]
    stdio.result("run", {"command": "echo x > /tmp/w/sub/deep; mkdir /tmp/w/new; echo y > /tmp/w/new/deeper; "
                                    "echo z > /tmp/w/top"})
    evs = wait_event(stdio, lambda e: e["path"] == "/tmp/w/top" and e["type"] == "write")
    paths = [p for _, p in pairs(evs, wid)]
    assert "/tmp/w/new" in paths
    assert not [p for p in paths if p.startswith(("/tmp/w/sub/", "/tmp/w/new/"))], paths


def test_symlinks_are_never_followed(stdio):
    stdio.result("create")
    stdio.result("run", {"command": "mkdir -p /tmp/w /tmp/other /tmp/other2 && ln -s /tmp/other /tmp/w/link"})
    wid = stdio.result("files.watch", {"path": "/tmp/w", "recursive": True})["watchId"]
    stdio.result("run", {"command": "ln -s /tmp/other2 /tmp/w/link2 && echo a > /tmp/other/f && "
                                    "echo b > /tmp/other2/g && echo c > /tmp/w/marker"})
    evs = wait_event(stdio, lambda e: e["path"] == "/tmp/w/marker" and e["type"] == "write")
    assert pairs(evs, wid) == [("create", "/tmp/w/link2"), ("create", "/tmp/w/marker"), ("write", "/tmp/w/marker")]


def test_watched_directory_removed(stdio):
    stdio.result("create")
    stdio.result("files.mkdir", {"path": "/tmp/w"})
    wid = stdio.result("files.watch", {"path": "/tmp/w", "recursive": True})["watchId"]
    stdio.result("run", {"command": "rm -r /tmp/w"})
    evs = wait_event(stdio, lambda e: e["path"] == "/tmp/w")
    assert [e for e in evs if e["path"] == "/tmp/w"][0] == {"watchId": wid, "type": "remove", "path": "/tmp/w",
                                                            "isDir": True}
    # Gone with its directory: the kernel's watch is too; unwatching it is still fine.
    assert stdio.result("files.unwatch", {"watchId": wid}) == {"ok": True}


# ---------------------------------------------------------------- bad input


def test_bad_input_is_refused_clearly(stdio):
    stdio.result("create")
    stdio.result("run", {"command": "mkdir -p /tmp/w && echo > /tmp/file && ln -s /etc /tmp/to-etc && "
                                    "ln -s ../../../../.. /tmp/up && ln -s /proc/1/root /tmp/magic && "
                                    "ln -s /tmp/w /tmp/ok-link"})
    e = stdio.error("files.unwatch", {"watchId": "w999"})
    assert e["code"] == -32602 and "Unknown watchId: w999" in e["message"]
    e = stdio.error("files.watch", {"path": "/tmp/file"})
    assert e["code"] == -32602 and "not a directory" in e["message"]
    e = stdio.error("files.watch", {"path": "/tmp/missing"})
    assert e["code"] == 1 and e["message"].startswith("ENOENT: ")
    for path in ["/etc", "/proc", "/proc/1", "/dev", "/", "/usr/bin", "/tmp/to-etc", "/tmp/up", "../../etc"]:
        e = stdio.error("files.watch", {"path": path})
        assert e["code"] == 1 and e["message"].startswith("EROFS: cannot watch ") and "writable tree" in e["message"], \
            (path, e)
    e = stdio.error("files.watch", {"path": "/tmp/magic"})
    assert e["code"] == 1 and e["message"].startswith("ELOOP"), e
    for params in [{}, {"path": ""}, {"path": "/tmp/w", "recursive": "yes"}, {"path": 3}]:
        assert stdio.error("files.watch", params)["code"] == -32602, params
    assert stdio.error("files.unwatch", {})["code"] == -32602
    # The connection stays usable, and a symlink within the writable tree is fine.
    assert stdio.result("ping") == {"pong": True}
    wid = stdio.result("files.watch", {"path": "/tmp/ok-link"})["watchId"]
    stdio.result("run", {"command": "echo > /tmp/w/x"})
    assert wait_event(stdio, lambda e: e["watchId"] == wid and e["path"] == "/tmp/ok-link/x")


def test_watches_per_sandbox_limit(stdio):
    stdio.result("create")
    other = stdio.result("sandbox.create")["sandboxId"]
    stdio.result("run", {"command": "mkdir -p /tmp/w"})
    ids = [stdio.result("files.watch", {"path": "/tmp/w"})["watchId"] for _ in range(16)]
    assert len(set(ids)) == 16
    e = stdio.error("files.watch", {"path": "/tmp/w"})
    assert e["code"] == -32001 and e["message"].startswith("LIMIT_EXCEEDED: ") and "16 watches" in e["message"]
    # Another sandbox has its own.
    stdio.result("files.watch", {"path": "/tmp", "sandboxId": other})
    assert stdio.result("files.unwatch", {"watchId": ids[3]}) == {"ok": True}
    assert stdio.error("files.unwatch", {"watchId": ids[3]})["code"] == -32602
    stdio.result("files.watch", {"path": "/tmp/w"})
    assert stdio.error("files.watch", {"path": "/tmp/w"})["code"] == -32001


def test_recursive_over_the_directory_bound(stdio):
    stdio.result("create", {"limits": {"fileCount": 20000}})
    stdio.result("run", {"command": "mkdir -p /tmp/big/d{1..4200}/"})
    e = stdio.error("files.watch", {"path": "/tmp/big", "recursive": True}, timeout=60)
    assert e["code"] == -32001 and "4096 directories" in e["message"], e
    assert inotify(stdio.proc.pid) == (0, 0)  # nothing of it kept
    # Not recursive, it is one directory.
    stdio.result("files.watch", {"path": "/tmp/big"})
    assert inotify(stdio.proc.pid) == (1, 1)


# ---------------------------------------------------------------- the end of a watch


def test_unwatch_stops_events_and_kernel_watches(stdio):
    stdio.result("create")
    stdio.result("run", {"command": "mkdir -p /tmp/a/x/y /tmp/b"})
    a = stdio.result("files.watch", {"path": "/tmp/a", "recursive": True})["watchId"]
    b = stdio.result("files.watch", {"path": "/tmp/b"})["watchId"]
    # Another watch of /tmp/a shares the kernel's watch of it.
    a2 = stdio.result("files.watch", {"path": "/tmp/a"})["watchId"]
    assert inotify(stdio.proc.pid) == (1, 4)
    stdio.result("run", {"command": "echo > /tmp/a/x/y/1"})
    wait_event(stdio, lambda e: e["watchId"] == a and e["path"] == "/tmp/a/x/y/1")
    assert stdio.result("files.unwatch", {"watchId": a}) == {"ok": True}
    assert inotify(stdio.proc.pid) == (1, 2)
    stdio.result("run", {"command": "echo > /tmp/a/2; echo > /tmp/a/x/y/3; echo > /tmp/b/marker"})
    evs = wait_event(stdio, lambda e: e["watchId"] == b and e["path"] == "/tmp/b/marker")
    wait_event(stdio, lambda e: e["watchId"] == a2 and e["path"] == "/tmp/a/2")
    assert not [e for e in evs if e["watchId"] == a and e["path"] in ("/tmp/a/2", "/tmp/a/x/y/3")]
    stdio.result("files.unwatch", {"watchId": a2})
    stdio.result("files.unwatch", {"watchId": b})
    # The last watch gives the daemon user's inotify instance back.
    assert inotify(stdio.proc.pid) == (0, 0)


def test_watch_ends_with_its_sandbox(stdio):
    stdio.result("create")
    sid = stdio.result("sandbox.create")["sandboxId"]
    wid = stdio.result("files.watch", {"path": "/tmp", "recursive": True, "sandboxId": sid})["watchId"]
    assert inotify(stdio.proc.pid)[0] == 1
    assert stdio.result("sandbox.destroy", {"sandboxId": sid}) == {"ok": True}
    assert inotify(stdio.proc.pid) == (0, 0)
    assert stdio.error("files.unwatch", {"watchId": wid})["code"] == -32602
    assert stdio.result("ping") == {"pong": True}


def test_watch_ends_with_its_connection(server):
    a = connect(server.path)
    sid = a.result("sandbox.create", {"persist": True})["sandboxId"]
    wid = a.result("files.watch", {"path": "/tmp", "sandboxId": sid})["watchId"]
    assert inotify(server.pid) == (1, 1)
    b = connect(server.path)
    # A watch is its connection's: another one cannot end it.
    assert b.error("files.unwatch", {"watchId": wid})["code"] == -32602
    a.sock.shutdown(socket.SHUT_RDWR)
    a.sock.close()
    deadline = time.monotonic() + 5
    while inotify(server.pid) != (0, 0) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert inotify(server.pid) == (0, 0)
    # The persistent sandbox outlives both.
    assert b.result("run", {"command": "echo ok > /tmp/x; cat /tmp/x", "sandboxId": sid})["stdout"] == "ok\n"
    b.result("sandbox.destroy", {"sandboxId": sid})


# ---------------------------------------------------------------- overflow


@memory_bound
def test_client_that_stops_reading_gets_one_overflow(server):
    owner = connect(server.path)
    sid = owner.result("sandbox.create", {"persist": True})["sandboxId"]
    # Long paths make each event a big line: the client's queue fills after about a thousand.
    deep = "/tmp/w/" + "/".join(["d%02d" % i + "x" * 246 for i in range(15)])
    owner.result("run", {"command": f"mkdir -p {deep}", "sandboxId": sid})
    a = connect(server.path)
    wid = a.result("files.watch", {"path": "/tmp/w", "recursive": True, "sandboxId": sid})["watchId"]
    before = hwm_kb(server.pid)
    flood = 30000
    with a.cond:  # a's reader cannot take lines: the client stops reading
        r = owner.result("run", {"command": f"cd {deep} && for i in $(seq {flood}); do echo x > f$((i % 20)); done",
                                 "sandboxId": sid, "timeoutMs": 120000}, timeout=150)
        assert r["exitCode"] == 0, r
        grown = hwm_kb(server.pid) - before
    # Unbounded, the events would take over 100 MB (3.9 kB each).
    assert grown < 24 * 1024, f"the daemon grew {grown} kB while its client did not read"
    wait_event(a, lambda e: e["type"] == "overflow", timeout=60)
    owner.result("run", {"command": "echo > /tmp/w/after", "sandboxId": sid})
    evs = wait_event(a, lambda e: e["path"] == "/tmp/w/after" and e["type"] == "write")
    writes = [e for e in evs if e["type"] == "write" and e["path"].startswith(deep)]
    overflows = [i for i, e in enumerate(evs) if e["type"] == "overflow"]
    assert len(overflows) == 1, f"{len(overflows)} overflows"
    assert evs[overflows[0]] == {"watchId": wid, "type": "overflow", "path": None, "isDir": False}
    assert 0 < len(writes) < flood
    # The gap is where events were lost: before what came after the client read again.
    assert overflows[0] > max(i for i, e in enumerate(evs) if (e["path"] or "").startswith(deep))
    assert a.result("ping") == {"pong": True}
    owner.result("sandbox.destroy", {"sandboxId": sid})
