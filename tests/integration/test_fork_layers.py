"""Forks in layers (docs/ARCHITECTURE.md, "Forks in layers"): a root daemon's fork gets an
overlay of read-only layers under an upper tmpfs of its own; each layer holds only what
changed since the one before. What commands see must stay what a copy gives them: content,
hard links, renames of directories, `stat`, the limits, across many layered forks,
snapshots and restores. The plain copy stays for rootless daemons, trees too deep for the
diff, and SBX_FORK_LAYERS=0; both paths are tested.

Whether a sandbox's trees are layered is what `stat -f -c %T /tmp` says: overlayfs or tmpfs.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_image import Box, new_box, start_server, stop_server  # noqa: E402
from test_rootless import delegated, rootless_serve, stdio_caller  # noqa: E402,F401

REPO = Path(__file__).resolve().parents[2]
SBX = os.environ.get("SBX_BIN") or str(REPO / "build" / "src" / "cli" / "sbx")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes need root here"),
    pytest.mark.skipif(not os.path.exists(SBX), reason=f"{SBX} not built"),
]

# What a command can tell apart in the three trees: names, types, sizes, modes, owners, link
# counts, symlink targets, and every file's bytes. Not a directory's st_size and st_nlink: an
# overlay's merged directory shows its upper's size and a link count of 1 (documented).
PRINT = ("(cd / && find tmp home/user dev/shm -mindepth 1 \\( -type d -printf '%p|d|%m|%U|%G\\n' \\) -o "
         "-printf '%p|%y|%s|%m|%U|%G|%n|%l\\n' | sort | sha256sum; "
         "find tmp home/user dev/shm -type f -print0 | sort -z | xargs -0r sha256sum | sha256sum)")


def fstype(b):
    return b.sh("stat -f -c %T /tmp /home/user /dev/shm | sort -u").strip()


@pytest.fixture
def srv():
    peer = start_server()
    try:
        yield peer
    finally:
        stop_server(peer)


def populate(b):
    b.sh("mkdir -p ~/w/src/pkg ~/w/big /tmp/t && cd ~/w && "
         "for i in $(seq 300); do echo \"line $i\" > src/pkg/f$i; done && "
         "head -c 3000000 /dev/urandom > big/blob && ln big/blob big/blob2 && ln -s src/pkg/f1 lnk && "
         "mkfifo fifo && chmod 0640 src/pkg/f2 && echo shm > /dev/shm/s && truncate -s 50M /tmp/t/sparse && "
         "mkdir -p ren/a/b && echo deep > ren/a/b/c && cd ~/w && X=41")


def test_many_layered_forks_keep_content_links_renames_and_stat(srv):
    """Six generations, each with changes in between (new, changed, removed and renamed
    entries): every fork shows exactly its parent's trees, forks after the first add only
    what changed, and in each fork a directory from the layers renames, a hard link stays one
    across a write, and every file has the overlay's one st_dev and an inode of its own."""
    b = new_box(srv)
    populate(b)
    gen = b
    for g in range(6):
        want = gen.sh(PRINT)
        child = gen.fork()
        assert fstype(child) == "overlayfs"
        assert child.sh(PRINT) == want, f"generation {g}"
        assert child.sh("echo $X $PWD") == "41 /home/user/w\n"
        # hard links: one inode, and a write through one name shows through the other
        assert child.sh("(cd ~/w/big && stat -c '%i %h' blob blob2 | uniq | wc -l; stat -c %h blob; "
                        "echo x >> blob2; cmp blob blob2 && echo same)") == "1\n2\nsame\n"
        # a directory inherited from the layers renames (redirect_dir)
        assert child.sh("mv ~/w/ren ~/w/ren2 && cat ~/w/ren2/a/b/c && test ! -e ~/w/ren && echo gone") == "deep\ngone\n"
        # stat: one device for the tree, distinct inode numbers
        assert child.sh("find ~/w /tmp -printf '%D\\n' | sort -u | wc -l") == "1\n"
        assert child.sh("n=$(find ~/w -printf '%i\\n' | wc -l); u=$(find ~/w -printf '%i\\n' | sort -u | wc -l); "
                        "[ $n -eq $((u + 1)) ] && echo ok") == "ok\n"  # blob and blob2 share one
        # the fork's changes stay in the fork
        assert gen.sh(PRINT) == want
        child.sh(f"echo gen{g} > ~/w/src/pkg/f3; rm ~/w/src/pkg/f4; mkdir ~/w/new{g}; echo n > ~/w/new{g}/n; "
                 f"mv ~/w/ren2 ~/w/ren")
        gen = child
    # the first sandbox kept its own trees through it all
    assert b.sh("cat ~/w/src/pkg/f3 ~/w/src/pkg/f4; ls ~/w | tr '\\n' ' '") == \
        "line 3\nline 4\nbig fifo lnk ren src "
    # fork of a fork of ... with its changes: the grandchild's layers stack
    assert gen.sh("cat ~/w/src/pkg/f3; ls ~/w/src/pkg/f4 2>&1 >/dev/null | wc -l; ls -d ~/w/new* | wc -l") == \
        "gen5\n1\n6\n"


def test_unchanged_fork_adds_nothing_and_changes_are_exact(srv):
    """The parent forked again without a change, then after changing a few files, removing
    one and replacing a file by a directory and a directory by a file: each fork equals the
    parent at its fork, earlier forks stay as they were."""
    b = new_box(srv)
    populate(b)
    f1 = b.fork()
    first = f1.sh(PRINT)
    f2 = b.fork()
    assert f2.sh(PRINT) == first
    b.sh("cd ~/w && echo changed > src/pkg/f7 && rm src/pkg/f8 && rm lnk && mkdir lnk && echo in > lnk/x && "
         "rm -r ren && echo file > ren && touch -d 2001-01-01 src/pkg/f9 && chmod 600 src/pkg/f10")
    want = b.sh(PRINT)
    f3 = b.fork()
    assert f3.sh(PRINT) == want
    assert f3.sh("cat ~/w/src/pkg/f7 ~/w/lnk/x ~/w/ren; stat -c %a ~/w/src/pkg/f10") == "changed\nin\nfile\n600\n"
    assert f1.sh(PRINT) == first and f2.sh(PRINT) == first
    # same size, same mtime (set back), other bytes: the ctime tells
    b.sh("cd ~/w && m=$(stat -c %y src/pkg/f11) && echo 'line X1' > src/pkg/f11 && touch -d \"$m\" src/pkg/f11")
    f4 = b.fork()
    assert f4.sh("cat ~/w/src/pkg/f11") == "line X1\n"


def test_layered_fork_snapshots_restores_and_files_api(srv):
    """In a layered fork: the files API writes and renames, a snapshot and its restore (which
    takes the overlay off: the trees are the sandbox's own tmpfs again), a fork after that
    (layered again) and export keep what commands see."""
    b = new_box(srv)
    populate(b)
    c = b.fork()
    assert fstype(c) == "overlayfs"
    c.write("w/api.txt", b"from the api\n")
    assert c.peer.result("files.rename", c.p(**{"from": "w/src", "to": "w/src2"})) == {"ok": True}
    assert c.read("w/src2/pkg/f5") == b"line 5\n"
    snap = c.snapshot()
    want = c.sh(PRINT)
    c.sh("rm -rf ~/w/src2 ~/w/big; echo later > ~/w/later")
    c.restore(snap)
    assert fstype(c) == "tmpfs"
    assert c.sh(PRINT) == want
    assert c.sh("cat ~/w/api.txt; test -e ~/w/later || echo no-later") == "from the api\nno-later\n"
    c.write("w/after-restore", b"ok\n")
    d = c.fork()
    assert fstype(d) == "overlayfs"
    assert d.sh(PRINT) == c.sh(PRINT)
    assert d.sh("cat ~/w/after-restore") == "ok\n"
    # a snapshot of the parent restored after forks: its forks are untouched
    s2 = b.snapshot()
    b.sh("rm -rf ~/w")
    b.restore(s2)
    assert b.sh("ls ~/w | wc -l") == "5\n"
    assert "later" not in d.sh("ls ~/w")


def test_layered_fork_limits(srv):
    """The limits bound what a layered fork writes itself (its upper tmpfs): past
    fsLimitBytes it gets ENOSPC, past fileCount of its own entries (whiteouts of removed
    inherited ones included) too; it can remove what it inherited, and the parent keeps it."""
    b = new_box(srv, fsLimitBytes=8 * 1024 * 1024, limits={"fileCount": 400})
    b.sh("mkdir -p ~/d && for i in $(seq 200); do echo $i > ~/d/f$i; done && head -c 3000000 /dev/zero > ~/big")
    c = b.fork()
    assert fstype(c) == "overlayfs"
    r = c.run("head -c 9000000 /dev/zero > /tmp/over")
    assert r["exitCode"] != 0 and "No space left" in _err(r)
    c.sh("rm -f /tmp/over")
    assert c.sh("head -c 5000000 /dev/zero > /tmp/ok && stat -c %s /tmp/ok && rm /tmp/ok") == "5000000\n"
    c.sh("rm -rf ~/d ~/big && test ! -e ~/d && echo gone")
    assert c.sh("mkdir ~/m && for i in $(seq 380); do : > ~/m/g$i || exit 7; done; ls ~/m | wc -l") == "380\n"
    r = c.run("for i in $(seq 381 500); do : > ~/m/g$i || exit 7; done")
    assert r["exitCode"] == 7 and "No space left" in _err(r)
    assert b.sh("ls ~/d | wc -l; stat -c %s ~/big") == "200\n3000000\n"


def _err(r):
    import base64
    v = r.get("stderr", "")
    return base64.b64decode(v).decode() if r.get("stderrEncoding") == "base64" else v


def test_deep_tree_forks_by_copy(srv):
    """A tree deeper than the diff walks (SBX_LAYER_MAX_DEPTH, 128) forks by the plain copy,
    which is as correct: the plain path."""
    b = new_box(srv)
    b.sh("cd /tmp && for i in $(seq 140); do mkdir d; cd d; done; echo bottom > f; echo top > /tmp/top")
    c = b.fork()
    assert fstype(c) == "tmpfs"
    assert c.sh("cat /tmp/top; cat /tmp/$(printf 'd/%.0s' $(seq 140))f") == "top\nbottom\n"
    assert c.sh(PRINT) == b.sh(PRINT)


def test_plain_forks_when_asked(tmp_path):
    """SBX_FORK_LAYERS=0 in the daemon's environment: every fork is the plain copy."""
    env = dict(os.environ, SBX_FORK_LAYERS="0")
    proc = subprocess.Popen([SBX, "serve", "--stdio"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env)
    from conftest import SPAWNED, Peer
    SPAWNED.append(proc.pid)
    try:
        call = stdio_caller(proc)
        sid = call("sandbox.create")["result"]["sandboxId"]
        call("run", {"sandboxId": sid, "command": "echo a > /tmp/a; ln /tmp/a /tmp/b"})
        fork = call("sandbox.fork", {"sandboxId": sid})["result"]["sandboxId"]
        out = call("run", {"sandboxId": fork, "command": "stat -f -c %T /tmp; stat -c %h /tmp/a; cat /tmp/b"})
        assert out["result"]["stdout"] == "tmpfs\n2\na\n"
    finally:
        proc.stdin.close()
        proc.wait(30)


def test_rootless_forks_by_copy(delegated):  # noqa: F811
    """Rootless the kernel's overlay has neither redirect_dir nor index: forks are copies,
    and correct ones, fork of a fork included."""
    p = rootless_serve(delegated)
    try:
        call = stdio_caller(p)
        sid = call("sandbox.create")["result"]["sandboxId"]
        call("run", {"sandboxId": sid, "command": "mkdir -p /tmp/r/a && echo v > /tmp/r/a/f && ln /tmp/r/a/f /tmp/r/g"})
        f1 = call("sandbox.fork", {"sandboxId": sid})["result"]["sandboxId"]
        f2 = call("sandbox.fork", {"sandboxId": f1})["result"]["sandboxId"]
        out = call("run", {"sandboxId": f2, "command": "stat -f -c %T /tmp; mv /tmp/r/a /tmp/r/b && cat /tmp/r/b/f; "
                                                         "stat -c %h /tmp/r/g"})
        assert out["result"]["stdout"] == "tmpfs\nv\n2\n"
    finally:
        p.stdin.close()
        p.wait(30)


def test_forks_past_the_layer_cap_squash_and_stay_exact(srv):
    """Twelve forks of one parent, each after a change: past SBX_MAX_FORK_LAYERS (8) layers
    the tree goes whole into a fresh layer; every fork equals its parent at its fork, and a
    fork of the last fork too."""
    b = new_box(srv)
    populate(b)
    forks = []
    for i in range(12):
        b.sh(f"echo {i} > ~/w/src/pkg/f{i + 20}; rm -f ~/w/src/pkg/f{i + 100}; mkdir -p ~/w/g{i}")
        want = b.sh(PRINT)
        f = b.fork()
        assert f.sh(PRINT) == want, f"fork {i}"
        forks.append((f, want))
    for f, want in forks:
        assert f.sh(PRINT) == want
    g = forks[-1][0].fork()
    assert g.sh(PRINT) == forks[-1][1]


# ---------------------------------------------------------------- forks of an unchanged tree

@pytest.fixture
def logged():
    """A server whose debug log says of each fork in layers whether the tree was walked."""
    peer = start_server("--verbose")
    try:
        yield peer
    finally:
        stop_server(peer)


def fork_walks(peer, box, whole_ok=True):
    """Forks box: the fork, and whether its tree was walked (else found unchanged). A fork
    past the layer cap copies the whole tree into one layer (squash): walked, and allowed
    unless whole_ok is False."""
    errf = peer.errf
    errf.seek(0, os.SEEK_END)
    at = errf.tell()
    child = box.fork()
    errf.seek(at)
    lines = [ln for ln in errf.read().decode(errors="replace").splitlines() if "forked in layers" in ln]
    assert len(lines) == 1, lines
    assert whole_ok or not lines[0].endswith(" whole)"), lines
    return child, not lines[0].endswith(" unchanged)")


def same(parent, child):
    assert child.sh(PRINT) == parent.sh(PRINT)
    child.destroy()


def test_unchanged_tree_forks_without_walking_and_every_change_is_seen(logged):
    """A fork of a tree that did not change since the last fork is not walked; every kind of
    change made in between makes the next fork walk, and the fork has it."""
    b = new_box(logged)
    populate(b)
    child, walked = fork_walks(logged, b)
    assert walked  # the first: no baseline yet
    same(b, child)
    child, walked = fork_walks(logged, b)
    assert not walked, "nothing changed: the fork should not walk"
    assert child.sh("cat ~/w/src/pkg/f7") == "line 7\n"
    same(b, child)
    changes = {
        "append": "echo more >> ~/w/src/pkg/f3",
        "truncate": "truncate -s 1 ~/w/src/pkg/f4",
        "chmod": "chmod 0600 ~/w/src/pkg/f5",
        "utimes": "touch -d '2001-01-01' ~/w/src/pkg/f6",
        "rename a directory": "mv ~/w/ren ~/w/ren3",
        "hard link": "ln ~/w/src/pkg/f8 ~/w/f8link",
        "remove": "rm ~/w/src/pkg/f9",
        "new file in /dev/shm": "echo n > /dev/shm/new",
        "mkdir in /tmp": "mkdir /tmp/newdir",
        "write through a shared mapping, kept mapped": (
            "python3 -c 'import mmap,os; f=open(\"/home/user/w/src/pkg/f10\",\"r+b\"); m=mmap.mmap(f.fileno(),0); "
            "m[0:4]=b\"MMAP\"; m.flush()'"),
    }
    for what, cmd in changes.items():
        b.sh(cmd)
        child, walked = fork_walks(logged, b)
        assert walked, f"{what}: the fork did not walk the changed tree"
        same(b, child)
        child, walked = fork_walks(logged, b, whole_ok=False)
        assert not walked, f"after {what}, nothing changed: the next fork should not walk"
        same(b, child)
    # The files API writes too.
    b.write("/home/user/w/api.txt", b"from the api")
    child, walked = fork_walks(logged, b)
    assert walked and child.sh("cat ~/w/api.txt") == "from the api"


def test_writes_through_a_mapping_kept_open_are_seen(logged):
    """fanotify does not report a write through a shared mapping: a process that holds one (or
    a file open for writing) makes every fork walk while it does, and the one after."""
    b = new_box(logged)
    b.sh("mkdir -p ~/m && printf 'aaaa' > ~/m/f && printf 'bbbb' > ~/m/g")
    fork_walks(logged, b)
    assert fork_walks(logged, b)[1] is False
    # A process maps ~/m/f shared and writable and writes to it whenever ~/m/go appears.
    prog = ("import mmap,os,time\n"
            "f=open('/home/user/m/f','r+b'); m=mmap.mmap(f.fileno(),0); f.close()\n"
            "n=0\n"
            "while True:\n"
            "    if os.path.exists('/tmp/go%d' % n):\n"
            "        m[0:1]=bytes([65+n]); n+=1\n"
            "    time.sleep(0.01)\n")
    b.write("/tmp/mapper.py", prog.encode())
    logged.result("process.start", b.p(command="exec python3 /tmp/mapper.py"))
    b.sh("for i in $(seq 200); do grep -q mapper /proc/[0-9]*/cmdline 2>/dev/null && break; sleep 0.02; done")
    child, walked = fork_walks(logged, b)
    assert walked  # the mapping is there
    for n in range(2):
        b.sh(f"touch /tmp/go{n}; for i in $(seq 200); do [ \"$(head -c1 ~/m/f)\" = {chr(65 + n)} ] && break; "
             "sleep 0.02; done; rm /tmp/go%d" % n)
        child, walked = fork_walks(logged, b)
        assert walked, "a process maps a file shared and writable: the fork must walk"
        assert child.sh("head -c1 ~/m/f") == chr(65 + n)
    # A file open for writing, no mapping: written with pwrite-free mmap tricks elsewhere
    # cannot be told apart, so it walks as long as the file stays open.
    logged.result("process.killAll", b.p())
    b.sh("for i in $(seq 200); do grep -q mapper /proc/[0-9]*/cmdline 2>/dev/null || break; sleep 0.02; done")
    assert fork_walks(logged, b)[1] is True  # the mapping was there at the last fork
    assert fork_walks(logged, b)[1] is False
    logged.result("process.start", b.p(command="exec 3>>/home/user/m/g; exec sleep 1000"))
    b.sh("sleep 0.3")
    assert fork_walks(logged, b)[1] is True
    assert fork_walks(logged, b)[1] is True


def test_change_watch_narrows_at_the_first_change(logged):
    """The fanotify group keeps no queue growing with the sandbox's writes: at the first change
    after a fork its mark narrows to the closes of files open for writing (seen in the
    daemon's fdinfo: mask 8, FAN_CLOSE_WRITE), and the next fork marks every change again."""
    def masks():
        pid = logged.proc.pid
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if "fanotify" in os.readlink(f"/proc/{pid}/fd/{fd}"):
                    with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                        return [ln.split("mask:")[1].split()[0] for ln in f if ln.startswith("fanotify sdev:")]
            except OSError:
                pass
        return None

    b = new_box(logged)
    assert masks() is None  # no fork yet: no group
    fork_walks(logged, b)
    full = masks()
    assert len(full) == 1 and int(full[0], 16) & 0x2  # one filesystem, FAN_MODIFY among the rest
    b.sh("for i in $(seq 500); do echo $i > /tmp/x$i; done")
    import time
    for _ in range(100):
        if masks() == ["8"]:
            break
        time.sleep(0.02)
    assert masks() == ["8"]
    child, walked = fork_walks(logged, b)
    assert walked and masks() == full
    assert child.sh("cat /tmp/x500") == "500\n"


# ---------------------------------------------------------------- writes fanotify cannot see
# (adversarial cases from a review: each one left a stale fork with an earlier design)

def trigger(b, name):
    """Asks the sandbox's process listening on the abstract socket @name to act; its answer."""
    return b.sh("python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect(\"\\0%s\"); "
                "s.send(b\"x\"); print(s.recv(10).decode())'" % name)


def start_actor(peer, b, name, program):
    b.write(f"/tmp/{name}.py", program.encode())
    peer.result("process.start", b.p(command=f"exec python3 /tmp/{name}.py"))
    b.sh("for i in $(seq 300); do grep -q '@%s' /proc/net/unix && break; sleep 0.02; done; "
         "grep -q '@%s' /proc/net/unix" % (name, name))


LISTEN = "srv = socket.socket(socket.AF_UNIX); srv.bind('\\0{name}'); srv.listen(1)\n"

ACTORS = {
    # A read-only shared mapping of a file opened for writing, made writable later.
    "mprot": ("import ctypes, os, socket\n"
              "libc = ctypes.CDLL(None, use_errno=True)\n"
              "libc.mmap.restype = ctypes.c_void_p\n"
              "libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]\n"
              "libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]\n"
              "fd = os.open('/home/user/m/f', os.O_RDWR)\n"
              "addr = libc.mmap(None, 4096, 1, 1, fd, 0)\n"
              "os.close(fd)\n"
              "libc.mprotect(addr, 4096, 3); ctypes.memmove(addr, b'YYYY', 4); libc.mprotect(addr, 4096, 1)\n"
              + LISTEN.format(name="mprot") +
              "n = 0\n"
              "while True:\n"
              "    c, _ = srv.accept(); c.recv(1)\n"
              "    libc.mprotect(addr, 4096, 3); ctypes.memmove(addr, bytes([66 + n]) * 4, 4); libc.mprotect(addr, 4096, 1)\n"
              "    n += 1; c.send(b'done'); c.close()\n"),
    # The only file open for writing is an fd in flight in a socket.
    "scm": ("import mmap, os, socket\n"
            "a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
            "fd = os.open('/home/user/m/f', os.O_RDWR)\n"
            "socket.send_fds(a, [b'f'], [fd]); os.close(fd)\n"
            + LISTEN.format(name="scm") +
            "n = 0\n"
            "while True:\n"
            "    c, _ = srv.accept(); c.recv(1)\n"
            "    _, fds, _, _ = socket.recv_fds(b, 10, 1)\n"
            "    m = mmap.mmap(fds[0], 0); m[0:4] = bytes([66 + n]) * 4; m.close()\n"
            "    socket.send_fds(a, [b'f'], fds); os.close(fds[0])\n"
            "    n += 1; c.send(b'done'); c.close()\n"),
    # The thread-group leader has exited: /proc/PID/maps and fd are empty; a thread writes.
    "zomb": ("import ctypes, mmap, os, socket, threading\n"
             "f = open('/home/user/m/f', 'r+b'); m = mmap.mmap(f.fileno(), 0); f.close()\n"
             "m[0:4] = b'YYYY'\n"
             + LISTEN.format(name="zomb") +
             "def worker():\n"
             "    n = 0\n"
             "    while True:\n"
             "        c, _ = srv.accept(); c.recv(1)\n"
             "        m[0:4] = bytes([66 + n]) * 4; n += 1\n"
             "        c.send(b'done'); c.close()\n"
             "threading.Thread(target=worker).start()\n"
             "ctypes.CDLL(None).syscall(60, 0)\n"),
    # A mapping whose first touch is a read: tmpfs maps the page writable then, and no write
    # ever faults (no time of the file changes).
    "readfirst": ("import mmap, socket\n"
                  "f = open('/home/user/m/f', 'r+b'); m = mmap.mmap(f.fileno(), 0); f.close()\n"
                  "x = m[0]\n"
                  + LISTEN.format(name="readfirst") +
                  "n = 0\n"
                  "while True:\n"
                  "    c, _ = srv.accept(); c.recv(1)\n"
                  "    m[0:4] = bytes([66 + n]) * 4; n += 1\n"
                  "    c.send(b'done'); c.close()\n"),
    # A mapping kept: every write after the first goes through a dirty page, with no fault.
    "mapr": ("import mmap, socket\n"
             "f = open('/home/user/m/f', 'r+b'); m = mmap.mmap(f.fileno(), 0); f.close()\n"
             "m[0:4] = b'YYYY'\n"
             + LISTEN.format(name="mapr") +
             "n = 0\n"
             "while True:\n"
             "    c, _ = srv.accept(); c.recv(1)\n"
             "    m[0:4] = bytes([66 + n]) * 4; n += 1\n"
             "    c.send(b'done'); c.close()\n"),
}


@pytest.mark.parametrize("actor", sorted(ACTORS))
@pytest.mark.parametrize("layered", [False, True], ids=["plain", "fork-of-a-fork"])
def test_writes_no_event_reports_reach_every_fork(logged, actor, layered):
    """Writes that make no fanotify event and leave no trace in the file's stat (a mapping
    made writable with mprotect, an fd in flight, a thread of an exited leader, a kept
    dirty mapping): every fork after them has the bytes, on a plain tree and on a fork's
    overlay, with other changes between or none."""
    b = new_box(logged)
    b.sh("mkdir -p ~/m && printf 'aaaa' > ~/m/f")
    if layered:
        b, _ = fork_walks(logged, b)
    start_actor(logged, b, actor, ACTORS[actor])
    want = b.sh("cat ~/m/f")
    child, _ = fork_walks(logged, b)
    assert child.sh("cat ~/m/f") == want
    child.destroy()
    for n in range(3):
        assert trigger(b, actor) == "done\n"
        want = chr(66 + n) * 4
        assert b.sh("cat ~/m/f") == want
        if n == 1:
            b.sh("echo other > /tmp/other")  # a change elsewhere: the fork walks anyway
        child, walked = fork_walks(logged, b)
        got = child.sh("cat ~/m/f")
        assert got == want, f"{actor}, write {n}: the fork is stale (walked={walked}): {got!r}"
        child.destroy()


def test_a_failed_fork_in_layers_forgets_nothing(logged):
    """A fork in layers that fails (a tree too deep: the fork is then a copy) between a write
    through a kept mapping and the next fork: that fork still has the bytes."""
    b = new_box(logged)
    b.sh("mkdir -p ~/m && printf 'aaaa' > ~/m/f")
    start_actor(logged, b, "mapr", ACTORS["mapr"])
    child, _ = fork_walks(logged, b)
    assert child.sh("cat ~/m/f") == "YYYY"
    assert trigger(b, "mapr") == "done\n"
    b.sh("cd /tmp && for i in $(seq 140); do mkdir d; cd d; done")
    copy = b.fork()
    assert copy.sh("stat -f -c %T /tmp") == "tmpfs\n" and copy.sh("cat ~/m/f") == "BBBB"
    b.sh("rm -rf /tmp/d")
    assert trigger(b, "mapr") == "done\n"
    child, _ = fork_walks(logged, b)
    assert child.sh("cat ~/m/f") == "CCCC"


def test_other_writes_on_a_fork_of_a_fork(logged):
    """An xattr set, fallocate, truncate, copy_file_range and splice in a sandbox that is
    itself a fork: each makes the next fork walk, and reaches it."""
    b, _ = fork_walks(logged, new_box(logged))
    b.sh("mkdir -p ~/w/d/e && echo x > ~/w/d/e/f && echo y > ~/w/g && echo z > /tmp/h && : > /tmp/cfr")
    see = ("cd / && find tmp home/user \\( -type f -printf '%p %s %m\\n' \\) -o -printf '%p %m\\n' | sort; "
           "cat /tmp/h /tmp/cfr | md5sum")  # not xattrs: a fork, copy or layers, has none (documented)
    py = "python3 -c 'import os; {}'"
    for cmd in ["echo more >> ~/w/g", "mv ~/w/d ~/w/d2", "chmod 600 /tmp/h", "rm ~/w/d2/e/f",
                py.format('os.setxattr("/tmp/h", "user.a", b"1")'),
                py.format('fd=os.open("/tmp/h", os.O_RDWR); os.posix_fallocate(fd, 0, 100000)'),
                py.format('os.truncate("/tmp/h", 3)'),
                py.format('a=os.open("/tmp/h", os.O_RDONLY); b=os.open("/tmp/cfr", os.O_WRONLY); '
                          'os.copy_file_range(a, b, 3)'),
                py.format('b=os.open("/tmp/cfr", os.O_WRONLY); r,w=os.pipe(); os.write(w,b"QQ"); '
                          'os.splice(r, b, 2)')]:
        b.sh(cmd)
        want = b.sh(see)
        child, walked = fork_walks(logged, b)
        assert walked and child.sh(see) == want, cmd
        child.destroy()


def test_a_mapping_read_first_then_written_and_closed(logged):
    """Mapped, read first (the page is mapped writable without a fault), written, closed, all
    between two forks: no time of the file changes, and the next fork still has the bytes."""
    b = new_box(logged)
    b.sh("mkdir -p ~/m && printf 'aaaa' > ~/m/f")
    fork_walks(logged, b)
    assert fork_walks(logged, b)[1] is False
    stat = "stat -c '%i %s %Y %Z' ~/m/f"
    before = b.sh(stat)
    b.sh("python3 -c 'import mmap; f=open(\"/home/user/m/f\",\"r+b\"); m=mmap.mmap(f.fileno(),0); x=m[0]; "
         "m[0:4]=b\"ZZZZ\"; m.close(); f.close()'")
    assert b.sh("cat ~/m/f") == "ZZZZ"
    child, walked = fork_walks(logged, b)
    assert walked  # the close of a file open for writing is a change
    assert child.sh("cat ~/m/f") == "ZZZZ", f"stale fork (stat before {before!r}, after {b.sh(stat)!r})"


def test_a_fork_after_a_few_changes_copies_only_them(logged):
    """What the watch names keeps a fork in proportion to what changed: after 10 files were
    rewritten (each closed after writing) the fork copies those and their directories, not
    the tree."""
    b = new_box(logged)
    b.sh("mkdir -p ~/s && for i in $(seq 300); do echo $i > ~/s/f$i; done")
    fork_walks(logged, b)
    b.sh("for i in $(seq 10); do echo x >> ~/s/f$i; done")
    errf = logged.errf
    errf.seek(0, os.SEEK_END)
    at = errf.tell()
    child = b.fork()
    errf.seek(at)
    line = [ln for ln in errf.read().decode().splitlines() if "forked in layers" in ln][0]
    used, _, entries, copied = (int(v) for v in line.split("(")[1].split()[:4])
    assert used == 1 and entries >= 300 and 10 <= copied <= 20, line
    assert child.sh("cat ~/s/f1 ~/s/f300") == "1\nx\n300\n"
