"""Writes are all or nothing, whatever their size, and files.* errors name the path the
client gave and the real cause.

A file too large for one request is an upload (files.write with upload "begin", "append",
"commit" or "abort"): its parts go to a hidden temp file that the commit renames into place,
and every way an upload can end without a commit (abort, a failed part, the connection
closing, the sandbox going) removes it, giving the sandbox its space back.
"""
import base64
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SPAWNED, Peer, wait_until

REPO = Path(__file__).resolve().parents[2]
SBX = os.environ.get("SBX_BIN", str(REPO / "build" / "src" / "cli" / "sbx"))
sys.path.insert(0, str(REPO / "sdk" / "python"))

from sbx import Sandbox, SbxError  # noqa: E402
from test_rpc import connect as rpc_connect, server  # noqa: E402,F401 (server: a fixture)

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes need root here"),
    pytest.mark.skipif(not os.path.exists(SBX), reason=f"{SBX} not built"),
]

MiB = 1024 * 1024
ABORTED = " (the upload is aborted: nothing of it was written)"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def start(create=None):
    proc = subprocess.Popen([SBX, "serve", "--stdio"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    SPAWNED.append(proc.pid)
    peer = Peer(proc.stdout, proc.stdin)
    peer.proc = proc
    peer.result("create", create or {})
    peer.sh = lambda cmd, **kw: peer.result("run", {"command": cmd, **kw})["stdout"]
    return peer


def stop(peer):
    peer.proc.stdin.close()
    # Non-zero under the sanitizers when the daemon leaked (an upload's memory, say).
    assert peer.proc.wait(15) == 0


def test_an_open_upload_is_in_no_fork_snapshot_or_export():
    """An upload's parts are the upload's: a fork, a snapshot and an export taken meanwhile hold
    no trace of them (before: its named temp file was copied into each, and a restore left it
    behind), and the upload still commits after each of them."""
    peer = start()
    try:
        data = os.urandom(MiB)
        uid = begin(peer, "up.bin", data)
        before = peer.sh("ls -A /home/user")
        assert ".sbx-" not in before
        fork = peer.result("sandbox.fork", {})["sandboxId"]
        assert peer.result("run", {"sandboxId": fork, "command": "ls -A /home/user"})["stdout"] == before
        exported = base64.b64decode(peer.result("persistence.export", {})["data"])
        assert b".sbx-" not in exported and data[:4096] not in exported
        snap = peer.result("snapshot.create", {})["id"]
        assert "result" in step(peer, "up.bin", uid, "append", b"tail")
        assert peer.result("snapshot.restore", {"id": snap}) == {"ok": True}
        assert peer.sh("ls -A /home/user") == before
        assert "result" in step(peer, "up.bin", uid, "commit")
        assert peer.sh("sha256sum /home/user/up.bin | cut -c1-64").strip() == hashlib.sha256(data + b"tail").hexdigest()
        assert peer.sh("ls -A /home/user") == before + "up.bin\n"
    finally:
        stop(peer)


@pytest.fixture
def sb():
    peer = start({"fsLimitBytes": 8 * MiB, "limits": {"fileCount": 500}})
    yield peer
    stop(peer)


def connect(path):
    peer = rpc_connect(path)
    peer.sh = lambda cmd, **kw: peer.result("run", {"command": cmd, **kw})["stdout"]
    return peer


def err(peer, method, params):
    e = peer.error(method, params)
    return e["code"], e["message"]


def space(peer, where="/home/user", **kw):
    """Free blocks and free inodes of the sandbox's writable filesystem."""
    return peer.sh(f"stat -f -c '%f %d' {where}", **kw)


def temps(peer, where="/home/user", **kw):
    """The files API's temp names in a directory (ls -a shows dot names): an upload's file has
    none until its commit, which renames it at once, so this is always empty."""
    return [n for n in peer.sh(f"ls -a {where}", **kw).split() if n.startswith(".sbx-")]


def begin(peer, path, data=b"", **kw):
    return peer.result("files.write", {"path": path, "data": b64(data), "upload": "begin", **kw})["uploadId"]


def step(peer, path, uid, kind, data=b"", **kw):
    return peer.call("files.write", {"path": path, "data": b64(data), "upload": kind, "uploadId": uid, **kw})


# ---------------------------------------------------------------- the SDK


def test_sdk_write_too_big_for_the_filesystem_leaves_nothing():
    sb = Sandbox(binary=SBX, fs_limit_bytes=8 * MiB)
    SPAWNED.append(sb.client.pid)
    try:
        sb.files.write("big.bin", b"old content")
        before = sb.commands.run("stat -f -c '%f %d' /home/user").stdout
        with pytest.raises(SbxError) as ei:
            sb.files.write("big.bin", os.urandom(12 * MiB))  # 3 parts of 4 MiB: an upload
        e = ei.value
        assert e.code == 1
        assert e.message.startswith("ENOSPC: the sandbox's filesystem is full (its limit, fsLimitBytes, is 8M): "
                                    "big.bin"), e.message
        # The old file is untouched, no temp file is left, and the space is back.
        assert sb.files.read("big.bin") == "old content"
        assert not [n for n in sb.commands.run("ls -a /home/user").stdout.split() if n.startswith(".sbx-")]
        assert sb.commands.run("stat -f -c '%f %d' /home/user").stdout == before
        # A new file: nothing at all is left.
        with pytest.raises(SbxError, match=r"^ENOSPC: .*full.*new\.bin"):
            sb.files.write("new.bin", os.urandom(12 * MiB))
        assert not sb.files.exists("new.bin")
        assert sb.commands.run("stat -f -c '%f %d' /home/user").stdout == before
        # And the space is there for the next write.
        sb.files.write("small.txt", "x" * 1024)
        assert sb.files.read("small.txt") == "x" * 1024
        sb.files.write("fits.bin", os.urandom(6 * MiB))
    finally:
        sb.kill()


def test_sdk_big_write_lands_whole():
    sb = Sandbox(binary=SBX)
    SPAWNED.append(sb.client.pid)
    try:
        data = os.urandom(9 * MiB + 5)
        sb.files.write("dir/big.bin", data, mode=0o600)
        out = sb.commands.run("stat -c '%a %s' dir/big.bin; sha256sum < dir/big.bin; ls -a dir").stdout.split("\n")
        assert out[0] == f"600 {len(data)}"
        assert out[1].split()[0] == hashlib.sha256(data).hexdigest()
        assert not [n for n in out[2:] if n.startswith(".sbx-")]
        assert sb.files.read_bytes("dir/big.bin") == data
    finally:
        sb.kill()


# ---------------------------------------------------------------- the protocol


def test_upload_is_invisible_until_commit(sb):
    sb.result("files.write", {"path": "f.bin", "data": b64(b"old")})
    before = space(sb)
    parts = [os.urandom(MiB) for _ in range(3)]
    uid = begin(sb, "f.bin", parts[0], mode=0o640)
    assert len(uid) == 32 and int(uid, 16) >= 0
    assert step(sb, "f.bin", uid, "append", parts[1]) == {"jsonrpc": "2.0", "id": sb.next_id - 1,
                                                          "result": {"ok": True}}
    # Meanwhile readers see the old file; the temp file takes space but has no name.
    assert sb.sh("cat f.bin") == "old"
    assert temps(sb) == [] and int(space(sb).split()[0]) <= int(before.split()[0]) - 2 * MiB // 4096
    assert sb.result("files.list", {"path": "."})["entries"]  # listing still works
    assert "result" in step(sb, "f.bin", uid, "commit", parts[2])
    data = b"".join(parts)
    out = sb.sh("stat -c '%a %s %U' f.bin; sha256sum < f.bin").split("\n")
    assert out[0] == f"640 {len(data)} user"
    assert out[1].split()[0] == hashlib.sha256(data).hexdigest()
    assert temps(sb) == []
    # Over: the id is not known any more.
    code, msg = err(sb, "files.write", {"path": "f.bin", "data": "", "upload": "append", "uploadId": uid})
    assert code == -32602 and msg.startswith(f"Unknown uploadId: {uid}")


def test_abort_gives_the_space_back(sb):
    before = space(sb)
    uid = begin(sb, "sub/dir/a.bin", os.urandom(3 * MiB))
    assert space(sb) != before
    assert temps(sb, "sub/dir") == []
    assert sb.result("files.write", {"path": "sub/dir/a.bin", "upload": "abort", "uploadId": uid}) == {"ok": True}
    assert temps(sb, "sub/dir") == []
    assert sb.result("files.exists", {"path": "sub/dir/a.bin"}) == {"exists": False}
    sb.result("files.rm", {"path": "sub", "recursive": True})
    assert space(sb) == before


def test_failed_part_ends_the_upload(sb):
    before = space(sb)
    uid = begin(sb, "a.bin", os.urandom(4 * MiB))
    ans = step(sb, "a.bin", uid, "append", os.urandom(5 * MiB))
    assert ans["error"]["code"] == 1
    assert ans["error"]["message"] == ("ENOSPC: the sandbox's filesystem is full (its limit, fsLimitBytes, is 8M): "
                                       "a.bin" + ABORTED)
    assert temps(sb) == [] and space(sb) == before
    assert sb.result("files.exists", {"path": "a.bin"}) == {"exists": False}
    assert step(sb, "a.bin", uid, "commit")["error"]["message"].startswith("Unknown uploadId")
    # A single write too big for what is left: the same words, and nothing left behind.
    sb.result("files.write", {"path": "filler", "data": b64(os.urandom(4 * MiB))})
    before = space(sb)
    code, msg = err(sb, "files.write", {"path": "one.bin", "data": b64(os.urandom(5 * MiB))})
    assert (code, msg) == (1, "ENOSPC: the sandbox's filesystem is full (its limit, fsLimitBytes, is 8M): one.bin")
    assert temps(sb) == [] and space(sb) == before
    sb.result("files.write", {"path": "small", "data": b64(b"fits")})


def test_a_part_refused_while_the_tree_is_copied_can_be_sent_again():
    """A part that arrives while a snapshot copies the tree is refused with EBUSY and changes
    nothing: the upload goes on, the same part sent again lands, and the file is whole (before,
    the refusal had ended the upload and the retry got "Unknown uploadId")."""
    peer = start()
    try:
        # A tree whose copy takes a while, so that parts arrive while it is busy.
        peer.sh("for i in $(seq 200); do head -c 512K /dev/urandom > /home/user/f$i; done")
        landed = [os.urandom(64 * 1024)]
        uid = begin(peer, "up.bin", landed[0])
        busy = 0
        for _ in range(5):
            if busy:
                break
            snap = peer.send("snapshot.create", {})
            key = json.dumps(snap)
            while True:
                part = os.urandom(64 * 1024)
                ans = step(peer, "up.bin", uid, "append", part)
                if "error" in ans:
                    assert ans["error"]["message"].startswith("EBUSY") and "send it again" in ans["error"]["message"], ans
                    busy += 1
                    assert "result" in peer.wait(snap, timeout=120)
                    ans = step(peer, "up.bin", uid, "append", part)
                assert "result" in ans, ans
                landed.append(part)
                with peer.cond:
                    done = key in peer.answers
                if done or busy:
                    peer.wait(snap, timeout=120) if not busy else None
                    break
        assert busy > 0, "no part arrived while the tree was copied: the test proved nothing"
        assert "result" in step(peer, "up.bin", uid, "commit")
        got = peer.sh("sha256sum /home/user/up.bin | cut -c1-64").strip()
        assert got == hashlib.sha256(b"".join(landed)).hexdigest()
    finally:
        stop(peer)


def test_failed_append_leaves_the_file_as_it_was(sb):
    sb.result("files.write", {"path": "log", "data": b64(b"first\n")})
    sb.result("files.write", {"path": "filler", "data": b64(os.urandom(4 * MiB))})
    before = space(sb)
    code, msg = err(sb, "files.write", {"path": "log", "data": b64(os.urandom(5 * MiB)), "append": True})
    assert (code, msg) == (1, "ENOSPC: the sandbox's filesystem is full (its limit, fsLimitBytes, is 8M): log")
    assert sb.sh("cat log") == "first\n" and space(sb) == before
    # An append that made the file removes it again.
    code, msg = err(sb, "files.write", {"path": "new.log", "data": b64(os.urandom(5 * MiB)), "append": True})
    assert code == 1 and msg.startswith("ENOSPC: the sandbox's filesystem is full")
    assert sb.result("files.exists", {"path": "new.log"}) == {"exists": False} and space(sb) == before


def test_out_of_inodes_says_so(sb):
    sb.sh("mkdir -p many && cd many && i=0; while touch f$i 2>/dev/null; do i=$((i+1)); done")
    code, msg = err(sb, "files.write", {"path": "many/one-more", "data": ""})
    assert (code, msg) == (1, "ENOSPC: the sandbox's filesystem is full: it holds its limit of 500 files and "
                              "directories (fileCount): many/one-more")
    code, msg = err(sb, "files.mkdir", {"path": "many/dir"})
    assert code == 1 and msg.endswith("(fileCount): many/dir")
    assert sb.sh("ls -a many | grep -c '^.sbx-' || true") == "0\n"


def test_directory_removed_or_target_changed_before_commit(sb):
    sb.result("files.write", {"path": "sub/t.bin", "data": b64(b"old")})
    uid = begin(sb, "sub/t.bin", b"new")
    sb.sh("rm -rf sub")
    ans = step(sb, "sub/t.bin", uid, "commit", b"!")
    assert ans["error"] == {"code": 1, "message": "ENOENT: cannot write sub/t.bin: its directory was removed "
                                                  "meanwhile (by a command, a restore or an import)" + ABORTED}
    assert sb.result("files.exists", {"path": "sub"}) == {"exists": False}
    # The target became a directory meanwhile.
    uid = begin(sb, "d", b"data")
    sb.sh("mkdir d")
    ans = step(sb, "d", uid, "commit")
    assert ans["error"] == {"code": 1, "message": "EISDIR: cannot write d: it is a directory" + ABORTED}
    assert temps(sb) == []


def test_upload_param_errors(sb):
    def bad(params):
        return err(sb, "files.write", {"path": "p.bin", **params})

    assert bad({"data": "", "upload": "start"}) == (
        -32602, 'upload must be "begin", "append", "commit" or "abort"')
    assert bad({"data": "", "upload": "begin", "uploadId": "x"}) == (
        -32602, 'upload "begin" takes no uploadId: its answer gives one')
    assert bad({"data": "", "upload": "append"}) == (
        -32602, 'upload "append" needs the uploadId that "begin" answered')
    assert bad({"data": "", "upload": "commit", "uploadId": "zz"}) == (
        -32602, "Unknown uploadId: zz (an upload ends with its commit, its abort, its first failed request or "
                "its connection)")
    assert bad({"data": "", "uploadId": "zz"}) == (
        -32602, 'uploadId goes with upload "append", "commit" or "abort"')
    assert bad({"data": "", "upload": "begin", "append": True}) == (
        -32602, "append and upload do not go together (an upload's parts are appended in order)")
    assert bad({}) == (-32602, "Missing required param: data")
    assert bad({"upload": "begin"}) == (-32602, "Missing required param: data")
    assert bad({"data": "%%", "upload": "begin"}) == (-32602, "data must be base64")
    assert temps(sb) == []
    # Errors of a request naming an open upload end it.
    uid = begin(sb, "p.bin", b"x")
    assert bad({"data": "", "upload": "append", "uploadId": uid, "path": "q.bin"}) == (
        -32602, f"uploadId {uid} is the upload of p.bin, not of q.bin" + ABORTED)
    assert temps(sb) == []
    uid = begin(sb, "p.bin", b"x")
    assert bad({"data": "", "upload": "commit", "uploadId": uid, "mode": 0o600}) == (
        -32602, 'mode goes with upload "begin" only' + ABORTED)
    uid = begin(sb, "p.bin", b"x")
    assert bad({"data": "%%", "upload": "append", "uploadId": uid}) == (-32602, "data must be base64" + ABORTED)
    uid = begin(sb, "p.bin", b"x")
    assert bad({"upload": "commit", "uploadId": uid}) == (-32602, "Missing required param: data" + ABORTED)
    assert temps(sb) == []
    assert sb.result("files.exists", {"path": "p.bin"}) == {"exists": False}


def test_null_params_count_as_absent(sb):
    # As the dispatcher has it: null is "not given" (mode null is the default mode, not 0).
    assert sb.result("files.write", {"path": "n.txt", "data": b64(b"n"), "mode": None, "uploadId": None,
                                     "upload": None}) == {"ok": True}
    uid = begin(sb, "m.txt", b"m", mode=None)
    assert "result" in step(sb, "m.txt", uid, "commit", mode=None)
    assert sb.sh("stat -c %a n.txt m.txt") == "644\n644\n"


def test_upload_refused_at_begin(sb):
    sb.sh("mkdir d")
    assert err(sb, "files.write", {"path": "d", "data": "", "upload": "begin"}) == (
        1, "EISDIR: cannot write d: it is a directory")
    assert err(sb, "files.write", {"path": "/tmp", "data": "", "upload": "begin"}) == (
        1, "EISDIR: cannot write /tmp: it is a directory")
    assert err(sb, "files.write", {"path": "/usr/x", "data": "", "upload": "begin"}) == (
        1, "EROFS: /usr/x is in a read-only place (only /tmp, /home/user and /dev/shm can be changed)")
    assert temps(sb) == [] and temps(sb, "d") == []


def test_uploads_per_sandbox_are_bounded(sb):
    ids = [begin(sb, f"f{i}") for i in range(16)]
    assert err(sb, "files.write", {"path": "f16", "data": "", "upload": "begin"}) == (
        1, "EMFILE: cannot begin an upload of f16: this sandbox has 16 uploads open, the most it may (commit or "
           "abort one first)")
    for i, uid in enumerate(ids):
        sb.result("files.write", {"path": f"f{i}", "upload": "abort", "uploadId": uid})
    assert temps(sb) == []
    begin(sb, "f16")


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def fd_links(pid):
    """The daemon's fds, each with what it points to."""
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.add((fd, os.readlink(f"/proc/{pid}/fd/{fd}")))
        except OSError:
            pass
    return out


def test_connection_closing_mid_upload_removes_the_temp_file(server):
    a = connect(server.path)
    sid = a.result("sandbox.create", {"persist": True, "fsLimitBytes": 8 * MiB})["sandboxId"]
    before = space(a, sandboxId=sid)
    fds = fd_links(server.pid)
    uid = begin(a, "/tmp/up.bin", os.urandom(3 * MiB), sandboxId=sid)
    # The upload's own: its directory and its temp file (runs' pidfds and cgroups come and go).
    held = {(fd, link) for fd, link in fd_links(server.pid) - fds if link.startswith("/tmp")}
    links = sorted(link for _, link in held)
    assert len(links) == 2 and links[0] == "/tmp" and links[1].startswith("/tmp/#"), held  # no name: O_TMPFILE
    # Only the connection that began an upload may use it.
    b = connect(server.path)
    assert err(b, "files.write", {"path": "/tmp/up.bin", "data": "", "upload": "commit", "uploadId": uid,
                                  "sandboxId": sid})[1].startswith(f"Unknown uploadId: {uid}")
    assert space(b, sandboxId=sid) != before
    a.sock.shutdown(socket.SHUT_RDWR)
    a.sock.close()
    assert wait_until(lambda: space(b, sandboxId=sid) == before, timeout=5)
    assert b.result("files.exists", {"path": "/tmp/up.bin", "sandboxId": sid}) == {"exists": False}
    assert not held & fd_links(server.pid)
    b.result("sandbox.destroy", {"sandboxId": sid})


def test_sandbox_destroyed_mid_upload_leaks_nothing(sb):
    pid = sb.proc.pid
    fds = fd_count(pid)
    sid = sb.result("sandbox.create")["sandboxId"]
    for i in range(3):
        begin(sb, f"/tmp/u{i}", os.urandom(MiB), sandboxId=sid)
    assert fd_count(pid) >= fds + 6
    assert sb.result("sandbox.destroy", {"sandboxId": sid}) == {"ok": True}
    assert wait_until(lambda: fd_count(pid) == fds, timeout=5), (fd_count(pid), fds)


def test_busy_tree_says_why(sb):
    # A snapshot copies the tree in a job; meanwhile changes are refused with the reason.
    sb.sh("head -c 6M /dev/zero > big; mkdir -p t && cd t && for i in $(seq 300); do echo $i > f$i; done")
    snap = sb.send("snapshot.create")
    seen = None
    deadline = time.monotonic() + 20
    while seen is None and time.monotonic() < deadline:
        ans = sb.call("files.write", {"path": "x", "data": ""})
        if "error" in ans:
            seen = ans["error"]
        with sb.cond:
            if sb.answers.get(str(snap)):
                break
    assert sb.wait(snap)["result"]["id"]
    if seen is None:
        pytest.skip("the snapshot was done before a write could meet it")
    assert seen == {"code": 1, "message": "EBUSY: cannot change x now: the sandbox's files are being copied or "
                                          "replaced (a fork, snapshot, restore or import): try again when it is done"}


# ---------------------------------------------------------------- other files.* errors


def test_rename_names_the_path_at_fault(sb):
    sb.sh("echo x > f; mkdir d e e/sub; echo y > e/sub/g")
    cases = [
        ({"from": "f", "to": "/tmp"}, "EBUSY: cannot replace /tmp: it is a mount point (a directory in use); "
                                      "to move f into it, give the new path: /tmp/f"),
        ({"from": "f", "to": "/home/user"}, "EBUSY: cannot replace /home/user: it is a mount point (a directory in "
                                            "use); to move f into it, give the new path: /home/user/f"),
        ({"from": "/tmp", "to": "t2"}, "EBUSY: cannot move /tmp: it is a mount point (a directory in use)"),
        ({"from": "f", "to": "/usr/f"}, "EROFS: /usr/f is in a read-only place (only /tmp, /home/user and "
                                        "/dev/shm can be changed)"),
        ({"from": "/etc/passwd", "to": "p"}, "EROFS: /etc/passwd is in a read-only place (only /tmp, /home/user "
                                             "and /dev/shm can be changed)"),
        ({"from": "f", "to": "d"}, "EISDIR: cannot replace d: it is a directory; to move f into it, give the "
                                   "new path: /home/user/d/f"),
        ({"from": "d", "to": "f"}, "ENOTDIR: cannot replace f with the directory d: it is not a directory"),
        ({"from": "d", "to": "e"}, "ENOTEMPTY: cannot replace e: it is a directory that is not empty"),
        ({"from": "f", "to": "/tmp/f"}, "EXDEV: cannot move f to /tmp/f: /tmp, /home/user and /dev/shm are "
                                        "separate mounts and a rename stays within one (copy it instead)"),
        ({"from": "e", "to": "e/sub/inner"}, "EINVAL: cannot move e into itself (e/sub/inner)"),
        ({"from": "nope", "to": "x"}, "ENOENT: No such file or directory: nope"),
        ({"from": "f", "to": "nodir/x"}, "ENOENT: No such file or directory: nodir/x"),
        ({"from": "f", "to": "/"}, "EINVAL: / does not name an entry that can be changed (/, . and .. do not)"),
        ({"from": "f", "to": "d/" + "n" * 300}, "ENAMETOOLONG: File name too long: d/" + "n" * 300),
    ]
    for params, want in cases:
        code, msg = err(sb, "files.rename", params)
        assert code == 1 and msg == want[:511], (params, msg)
    # Nothing moved; a good rename still works, and replaces a file or an empty directory.
    assert sb.sh("cat f; cat e/sub/g; ls /tmp") == "x\ny\n"
    assert sb.result("files.rename", {"from": "f", "to": "d/f"}) == {"ok": True}
    sb.sh("mkdir empty")
    assert sb.result("files.rename", {"from": "d", "to": "empty"}) == {"ok": True}
    assert sb.sh("cat empty/f") == "x\n"


def test_other_errors_name_the_cause(sb):
    sb.sh("mkfifo fifo; ln -s /etc/hostname link; mkdir -p $(printf 'deep/%.0s' $(seq 300))")
    cases = [
        ("files.rm", {"path": "/tmp", "recursive": True}, "EBUSY: cannot remove /tmp: it is a mount point (a "
                                                          "directory in use)"),
        ("files.rm", {"path": "/dev/shm"}, "EBUSY: cannot remove /dev/shm: it is a mount point (a directory in use)"),
        ("files.rm", {"path": "/"}, "EINVAL: / does not name an entry that can be changed (/, . and .. do not)"),
        ("files.rm", {"path": "/usr/bin/ls"}, "EROFS: /usr/bin/ls is in a read-only place (only /tmp, /home/user "
                                              "and /dev/shm can be changed)"),
        ("files.mkdir", {"path": "/tmp"}, "EEXIST: File exists: /tmp"),
        ("files.mkdir", {"path": "/newdir"}, "EROFS: /newdir is in a read-only place (only /tmp, /home/user and "
                                             "/dev/shm can be changed)"),
        ("files.mkdir", {"path": "/usr/a/b", "parents": True}, "EROFS: /usr/a/b is in a read-only place (only "
                                                               "/tmp, /home/user and /dev/shm can be changed)"),
        ("files.write", {"path": "/tmp", "data": ""}, "EISDIR: cannot write /tmp: it is a directory"),
        ("files.write", {"path": "/usr/bin/evil", "data": ""}, "EROFS: /usr/bin/evil is in a read-only place "
                                                               "(only /tmp, /home/user and /dev/shm can be changed)"),
        ("files.write", {"path": "link", "data": "", "append": True}, "ELOOP: cannot append to link: it is a "
         "symbolic link, which appending does not follow (a write without append replaces it)"),
        ("files.write", {"path": "fifo", "data": "", "append": True}, "EINVAL: cannot append to fifo: it is not "
                                                                      "a regular file"),
        ("files.read", {"path": "fifo"}, "EINVAL: cannot read fifo: it is not a regular file (but a fifo, socket "
                                         "or device)"),
    ]
    for method, params, want in cases:
        assert err(sb, method, params) == (1, want), (method, params)
    assert sb.sh("ls -d /tmp deep link fifo") == "/tmp\ndeep\nfifo\nlink\n"



def test_too_many_entries_to_list():
    peer = start({"limits": {"fileCount": 30000}, "fsLimitBytes": 64 * MiB})
    try:
        peer.sh("mkdir many && cd many && seq 20001 | xargs touch", timeoutMs=60000)
        code, msg = err(peer, "files.list", {"path": "many"})
        assert (code, msg) == (1, "E2BIG: many holds more than 20000 entries at that depth: list fewer levels "
                                  "(depth) or its subdirectories one by one")
    finally:
        stop(peer)
