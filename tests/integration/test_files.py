"""The files API over RPC: every method, its errors, and the jail against hostile paths."""
import base64
import hashlib
import os
import subprocess
import time
import uuid

import pytest

from test_rpc import SBX, Peer

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes need root here"),
    pytest.mark.skipif(not os.path.exists(SBX), reason=f"{SBX} not built"),
]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture
def sb():
    proc = subprocess.Popen([SBX, "serve", "--stdio"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    peer = Peer(proc.stdout, proc.stdin)
    peer.result("create", {"fsLimitBytes": 64 * 1024 * 1024, "limits": {"fileCount": 500}})
    peer.sh = lambda cmd: peer.result("run", {"command": cmd})
    yield peer
    proc.stdin.close()
    proc.wait(10)


def read(sb, path, **kw):
    r = sb.result("files.read", {"path": path, **kw})
    return base64.b64decode(r["data"]), r


def err(sb, method, params):
    e = sb.error(method, params)
    return e["code"], e["message"]


def test_write_read_roundtrip(sb):
    data = bytes(range(256)) * 10
    assert sb.result("files.write", {"path": "dir/sub/blob.bin", "data": b64(data), "mode": 0o600}) == {"ok": True}
    got, r = read(sb, "/home/user/dir/sub/blob.bin")
    assert got == data and r["size"] == len(data) and r["offset"] == 0 and r["length"] == len(data)
    part, r = read(sb, "dir/sub/blob.bin", offset=100, length=50)
    assert part == data[100:150] and r["length"] == 50
    out = sb.sh("stat -c '%U %a %s' dir/sub/blob.bin; sha256sum < dir/sub/blob.bin")["stdout"].split("\n")
    assert out[0] == f"user 600 {len(data)}"
    assert out[1].split()[0] == hashlib.sha256(data).hexdigest()
    sb.result("files.write", {"path": "log.txt", "data": b64(b"one\n")})
    sb.result("files.write", {"path": "log.txt", "data": b64(b"two\n"), "append": True})
    assert read(sb, "log.txt")[0] == b"one\ntwo\n"
    # Commands see API files at once, and the API sees commands' files.
    sb.sh("printf 'from a command' > made.txt")
    assert read(sb, "made.txt")[0] == b"from a command"


def test_stat_list_exists_mkdir_rm_rename(sb):
    sb.sh("mkdir -p t/a/b; echo x > t/a/f; ln -s a/f t/link")
    st = sb.result("files.stat", {"path": "t/a/f"})
    assert st["type"] == "file" and st["size"] == 2 and st["name"] == "f" and st["path"] == "/home/user/t/a/f"
    assert st["mtime"].endswith("Z")
    link = sb.result("files.stat", {"path": "t/link"})
    assert link["type"] == "symlink" and link["target"] == "a/f"
    names = {e["path"] for e in sb.result("files.list", {"path": "t"})["entries"]}
    assert names == {"/home/user/t/a", "/home/user/t/link"}
    deep = {e["path"] for e in sb.result("files.list", {"path": "t", "recursive": True})["entries"]}
    assert deep == {"/home/user/t/a", "/home/user/t/link", "/home/user/t/a/b", "/home/user/t/a/f"}
    assert sb.result("files.exists", {"path": "t/a/f"}) == {"exists": True}
    assert sb.result("files.exists", {"path": "t/nope"}) == {"exists": False}
    assert err(sb, "files.mkdir", {"path": "t/a"})[1].startswith("EEXIST")
    assert err(sb, "files.mkdir", {"path": "x/y/z"})[1].startswith("ENOENT")
    assert sb.result("files.mkdir", {"path": "x/y/z", "parents": True}) == {"ok": True}
    assert err(sb, "files.rm", {"path": "t/a"})[1].startswith("ENOTEMPTY")
    assert sb.result("files.rename", {"from": "t/a/f", "to": "moved"}) == {"ok": True}
    assert read(sb, "moved")[0] == b"x\n"
    assert sb.result("files.rm", {"path": "t", "recursive": True}) == {"ok": True}
    assert sb.result("files.exists", {"path": "t"}) == {"exists": False}
    assert err(sb, "files.read", {"path": "x"})[1].startswith("EISDIR")


def test_bad_params(sb):
    assert err(sb, "files.read", {}) == (-32602, "Missing required param: path")
    assert err(sb, "files.read", {"path": 5}) == (-32602, "path must be a string")
    # A NUL inside a JSON string is refused by the parser itself (answered with id null).
    sb.send_raw(b'{"jsonrpc":"2.0","id":99,"method":"files.read","params":{"path":"a\\u0000b"}}\n')
    assert sb.wait(None)["error"]["code"] == -32700
    assert err(sb, "files.write", {"path": "f", "data": "%%%"}) == (-32602, "data must be base64")
    assert err(sb, "files.write", {"path": "f", "data": "", "mode": 99999})[0] == -32602
    assert err(sb, "files.read", {"path": "nope"}) == (1, "ENOENT: No such file or directory: nope")
    assert err(sb, "files.read", {"path": "f", "sandboxId": "zz"}) == (-32602, "Unknown sandboxId: zz")
    assert err(sb, "files.rm", {"path": "/"})[0] == 1


def test_read_only_and_private_paths(sb):
    assert err(sb, "files.write", {"path": "/usr/bin/evil", "data": ""})[1].startswith("EROFS")
    assert err(sb, "files.write", {"path": "/etc/passwd", "data": ""})[1].startswith("EROFS")
    assert err(sb, "files.mkdir", {"path": "/newdir"})[1].startswith("EROFS")
    assert err(sb, "files.list", {"path": "/root"})[1].startswith("EACCES")
    # The daemon's own environment, through the sandbox's pid 1: the user may not read it.
    assert err(sb, "files.read", {"path": "/proc/1/environ"})[1].startswith("EACCES")


def test_jail_hostile_paths(sb):
    host_marker = f"/tmp/sbx-host-{uuid.uuid4().hex}"
    with open(host_marker, "w") as f:
        f.write("HOST SECRET")
    try:
        sb.sh(f"ln -s {host_marker} abs_link; ln -s ../../../../..{host_marker} rel_link; "
              "ln -s / rootlink; ln -s /proc/1/root p1root; mkfifo fifo; "
              f"ln -s /proc/self/root selfroot; ln -s {os.path.dirname(host_marker)} tmplink")
        cases = ["abs_link", "rel_link", host_marker, f"../../../..{host_marker}", f"rootlink{host_marker}",
                 f"tmplink/{os.path.basename(host_marker)}", f"/proc/1/root{host_marker}",
                 f"p1root{host_marker}", f"selfroot{host_marker}", f"/proc/self/root{host_marker}",
                 f"/proc/1/cwd/../../..{host_marker}", f"/home/user/../../..{host_marker}"]
        for path in cases:
            ans = sb.call("files.read", {"path": path})
            assert "error" in ans, f"{path} was read: {ans}"
            assert b"HOST SECRET" not in str(ans).encode()
        # ".." and absolute links land in the sandbox's root, not the host's.
        assert read(sb, "../../etc/hostname")[0] == b"sandbox\n"
        assert read(sb, "rootlink/etc/hostname")[0] == b"sandbox\n"
        assert b"user:x:1000" in read(sb, "rootlink/etc/passwd")[0]
        # Writing through a link lands inside too, never on the host.
        sb.result("files.write", {"path": f"rootlink{host_marker}-w", "data": b64(b"in sandbox")})
        assert not os.path.exists(host_marker + "-w")
        assert sb.sh(f"cat {host_marker}-w")["stdout"] == "in sandbox"
        # A fifo is refused at once instead of blocking the daemon.
        t0 = time.time()
        assert err(sb, "files.read", {"path": "fifo"})[1].startswith("EINVAL")
        assert time.time() - t0 < 2
        assert sb.result("ping") == {"pong": True}
    finally:
        os.unlink(host_marker)


def test_symlink_swapped_during_writes(sb):
    host_dir = f"/tmp/sbx-swap-{uuid.uuid4().hex}"
    os.mkdir(host_dir)
    try:
        # In the sandbox, `d` flips between a directory and a symlink to a path that exists
        # on the host (and, harmlessly, in the sandbox's own /tmp).
        sb.sh(f"mkdir -p {host_dir}; (while :; do rm -rf d; ln -s {host_dir} d; rm -f d; mkdir d; done) "
              ">/dev/null 2>&1 &")
        ok = 0
        for i in range(200):
            ans = sb.call("files.write", {"path": f"d/f{i}", "data": b64(b"x")})
            ok += "result" in ans
        assert ok > 0
        assert os.listdir(host_dir) == [], "a write escaped to the host"
    finally:
        for name in os.listdir(host_dir):
            os.unlink(os.path.join(host_dir, name))
        os.rmdir(host_dir)


def test_limits_apply(sb):
    # fsLimitBytes 64 MiB: a bigger write fails with ENOSPC and leaves nothing behind (atomic).
    big = os.urandom(1024 * 1024)
    for i in range(60):
        sb.result("files.write", {"path": f"fill/{i}", "data": b64(big)})
    code, msg = err(sb, "files.write", {"path": "fill/over", "data": b64(os.urandom(5 * 1024 * 1024))})
    assert code == 1 and msg.startswith("ENOSPC")
    assert sb.result("files.exists", {"path": "fill/over"}) == {"exists": False}
    assert not [e for e in sb.result("files.list", {"path": "fill"})["entries"] if e["name"].startswith(".sbx-")]
    sb.result("files.rm", {"path": "fill", "recursive": True})
    # fileCount 500: inodes run out.
    codes = [sb.call("files.write", {"path": f"many/{i}", "data": ""}) for i in range(600)]
    failed = [c for c in codes if "error" in c]
    assert failed and failed[0]["error"]["message"].startswith("ENOSPC")
    assert sb.sh("echo still fine")["stdout"] == "still fine\n"


def test_large_file_in_chunks(sb):
    data = os.urandom(20 * 1024 * 1024 + 123)
    chunk = 4 * 1024 * 1024
    for off in range(0, len(data), chunk):
        sb.result("files.write", {"path": "big.bin", "data": b64(data[off:off + chunk]), "append": off > 0})
    assert sb.sh("sha256sum < big.bin")["stdout"].split()[0] == hashlib.sha256(data).hexdigest()
    code, msg = err(sb, "files.read", {"path": "big.bin"})
    assert code == 1 and msg.startswith("EFBIG")
    got = b""
    while len(got) < len(data):
        part, r = read(sb, "big.bin", offset=len(got), length=chunk)
        assert r["size"] == len(data)
        got += part
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest()


def test_kernel_files_never_touched(sb):
    # setfsuid() leaves the daemon's euid 0 and capabilities; /proc/sys checks those. Nothing
    # the API writes may reach a kernel file, whatever link a command planted.
    before = open("/proc/sys/fs/lease-break-time").read()
    sb.sh("ln -s /proc/sys/fs/lease-break-time upload.bin; ln -s /proc/sys/fs sysdir; "
          "ln -s /proc/self/oom_score_adj adj; ln -s /dev/null devnull")
    new = b64(b"46\n")
    assert err(sb, "files.write", {"path": "upload.bin", "data": new, "append": True})[1].startswith("ELOOP")
    assert err(sb, "files.write", {"path": "sysdir/lease-break-time", "data": new, "append": True})[1].startswith("EROFS")
    assert err(sb, "files.write", {"path": "sysdir/lease-break-time", "data": new})[1].startswith("EROFS")
    assert err(sb, "files.write", {"path": "/proc/sys/fs/lease-break-time", "data": new})[1].startswith("EROFS")
    assert err(sb, "files.mkdir", {"path": "/proc/sys/x"})[1].startswith("EROFS")
    assert err(sb, "files.rm", {"path": "/proc/sys/fs/lease-break-time"})[1].startswith("EROFS")
    assert err(sb, "files.read", {"path": "upload.bin"})[1].startswith("EACCES")
    assert err(sb, "files.read", {"path": "/proc/1/status"})[1].startswith("EACCES")
    assert err(sb, "files.write", {"path": "devnull", "data": new, "append": True})[0] == 1
    assert open("/proc/sys/fs/lease-break-time").read() == before
    # The replacing write turns the planted link into a plain file, inside the sandbox.
    assert sb.result("files.write", {"path": "upload.bin", "data": new}) == {"ok": True}
    assert sb.sh("test -L upload.bin || cat upload.bin")["stdout"] == "46\n"
    assert open("/proc/sys/fs/lease-break-time").read() == before
