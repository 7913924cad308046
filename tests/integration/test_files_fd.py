"""files.write's `dataFd` and files.read's `toFd`: a file's bytes in a memfd sent with the request
(SCM_RIGHTS on the Unix socket) instead of base64 in the JSON line. What the E2B door uses for
/files, and any socket client may."""
import base64
import json
import os
import socket

import pytest

from conftest import close_stdio, connect_peer, serve_stdio, wait_until
from test_rpc import server  # noqa: F401 (a fixture: `sbx serve --socket` with no pool)

SBX = os.environ.get("SBX_BIN", os.path.join(os.path.dirname(__file__), "..", "..", "build", "src", "cli", "sbx"))

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes need root here"),
    pytest.mark.skipif(not os.path.exists(SBX), reason=f"{SBX} not built"),
]


def send_with_fds(peer, method, params, fds):
    """Sends one request line with fds attached to its first bytes; returns its id."""
    rid = peer.next_id
    peer.next_id += 1
    line = (json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}) + "\n").encode()
    n = socket.send_fds(peer.sock, [line], fds)
    peer.sock.sendall(line[n:])
    return rid


def memfd(data=b""):
    fd = os.memfd_create("test", os.MFD_CLOEXEC)
    os.write(fd, data)
    return fd


def memfd_bytes(fd):
    return os.pread(fd, os.fstat(fd).st_size, 0)


def memfds_held(pid):
    """How many of the tests' memfds (all named "test") the daemon holds."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:test ")
        except OSError:
            pass
    return n


@pytest.fixture
def sb(server):
    peer = connect_peer(server.path)
    sid = peer.result("sandbox.create")["sandboxId"]
    yield peer, sid
    peer.sock.close()


def test_write_and_read_through_memfds(sb):
    peer, sid = sb
    data = os.urandom(3 * 1024 * 1024 + 17)
    fd = memfd(data)
    ans = peer.wait(send_with_fds(peer, "files.write", {"sandboxId": sid, "path": "/tmp/big", "dataFd": True}, [fd]))
    os.close(fd)
    assert ans.get("result") == {"ok": True}, ans
    # The same bytes, as base64 and into a memfd of the reader's, whatever it held before.
    got = peer.result("files.read", {"sandboxId": sid, "path": "/tmp/big"})
    assert base64.b64decode(got["data"]) == data
    out = memfd(b"x" * (5 * 1024 * 1024))
    ans = peer.wait(send_with_fds(peer, "files.read", {"sandboxId": sid, "path": "/tmp/big", "toFd": True}, [out]))
    assert ans.get("result") == {"size": len(data), "offset": 0, "length": len(data)}, ans
    assert memfd_bytes(out) == data
    # A piece of it, from an offset.
    ans = peer.wait(send_with_fds(peer, "files.read", {"sandboxId": sid, "path": "/tmp/big", "toFd": True,
                                                       "offset": 1000, "length": 4096}, [out]))
    assert ans["result"]["length"] == 4096 and memfd_bytes(out) == data[1000:5096]
    os.close(out)
    # An empty file both ways.
    e = memfd()
    assert peer.wait(send_with_fds(peer, "files.write", {"sandboxId": sid, "path": "/tmp/empty", "dataFd": True},
                                   [e]))["result"] == {"ok": True}
    assert peer.result("run", {"sandboxId": sid, "command": "stat -c %s /tmp/empty"})["stdout"] == "0\n"
    ans = peer.wait(send_with_fds(peer, "files.read", {"sandboxId": sid, "path": "/tmp/empty", "toFd": True}, [e]))
    assert ans["result"]["length"] == 0 and memfd_bytes(e) == b""
    os.close(e)


def test_upload_in_memfd_parts(sb):
    peer, sid = sb
    parts = [os.urandom(1024 * 1024) for _ in range(3)]
    fd = memfd()

    def part(params, data):
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        ans = peer.wait(send_with_fds(peer, "files.write", {"sandboxId": sid, "path": "up.bin", "dataFd": True,
                                                            **params}, [fd]))
        assert "result" in ans, ans
        return ans["result"]

    uid = part({"upload": "begin"}, parts[0])["uploadId"]
    part({"upload": "append", "uploadId": uid}, parts[1])
    part({"upload": "commit", "uploadId": uid}, parts[2])
    os.close(fd)
    out = memfd()
    ans = peer.wait(send_with_fds(peer, "files.read", {"sandboxId": sid, "path": "up.bin", "toFd": True}, [out]))
    assert ans["result"]["size"] == 3 * 1024 * 1024 and memfd_bytes(out) == b"".join(parts)
    os.close(out)


def test_bad_fds_are_refused_and_nothing_is_lost(server, sb):
    peer, sid = sb
    w = {"sandboxId": sid, "path": "/tmp/f", "dataFd": True}
    # No fd with it.
    err = peer.error("files.write", w)
    assert err["code"] == -32602 and "no fd came with this request" in err["message"], err
    err = peer.error("files.read", {"sandboxId": sid, "path": "/etc/hostname", "toFd": True})
    assert "no fd came with this request" in err["message"], err
    # Not a memfd: a pipe (which could make the daemon wait) is refused.
    r, wr = os.pipe()
    os.write(wr, b"from a pipe")
    ans = peer.wait(send_with_fds(peer, "files.write", w, [r]))
    assert "not a memfd" in ans["error"]["message"], ans
    os.close(r)
    os.close(wr)
    # Both data and dataFd.
    fd = memfd(b"abc")
    ans = peer.wait(send_with_fds(peer, "files.write", {**w, "data": "eHl6"}, [fd]))
    assert "data and dataFd do not go together" in ans["error"]["message"], ans
    # Past the limit of one request.
    os.ftruncate(fd, 8 * 1024 * 1024 + 1)
    ans = peer.wait(send_with_fds(peer, "files.write", w, [fd]))
    assert "more than the 8388608 one request may carry" in ans["error"]["message"], ans
    # A memfd sealed against growth cannot take a read's bytes: said, and the file is intact.
    sealed = os.memfd_create("sealed", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    import fcntl
    fcntl.fcntl(sealed, fcntl.F_ADD_SEALS, fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
    ans = peer.wait(send_with_fds(peer, "files.read", {"sandboxId": sid, "path": "/etc/hostname", "toFd": True},
                                  [sealed]))
    assert "toFd: cannot" in ans["error"]["message"], ans
    os.close(sealed)
    # None of it wrote /tmp/f, and the connection and sandbox go on.
    assert peer.result("run", {"sandboxId": sid, "command": "test -e /tmp/f || echo none"})["stdout"] == "none\n"
    os.ftruncate(fd, 3)
    assert peer.wait(send_with_fds(peer, "files.write", w, [fd]))["result"] == {"ok": True}
    assert peer.result("run", {"sandboxId": sid, "command": "cat /tmp/f"})["stdout"] == "abc"
    os.close(fd)


def test_an_fd_goes_with_its_own_request_only(server, sb):
    peer, sid = sb
    # fds sent with requests that take none are closed once those are answered; a later
    # request without one does not get them.
    fds = [memfd(b"stray") for _ in range(20)]
    for fd in fds:
        assert peer.wait(send_with_fds(peer, "ping", {}, [fd]))["result"] == {"pong": True}
    # (closed once the request's handling returns, just after its answer went)
    assert wait_until(lambda: memfds_held(server.pid) == 0)
    two = [memfd(b"one"), memfd(b"two")]
    ans = peer.wait(send_with_fds(peer, "files.write", {"sandboxId": sid, "path": "/tmp/g", "dataFd": True}, two))
    assert ans["result"] == {"ok": True}
    assert peer.result("run", {"sandboxId": sid, "command": "cat /tmp/g"})["stdout"] == "one"
    err = peer.error("files.write", {"sandboxId": sid, "path": "/tmp/h", "dataFd": True})
    assert "no fd came with this request" in err["message"], err
    for fd in fds + two:
        os.close(fd)
    assert wait_until(lambda: memfds_held(server.pid) == 0)
    # More than a connection holds at once, in one message: the extras are closed.
    many = [memfd(b"m") for _ in range(40)]
    assert peer.wait(send_with_fds(peer, "ping", {}, many))["result"] == {"pong": True}
    for fd in many:
        os.close(fd)
    assert wait_until(lambda: memfds_held(server.pid) == 0)
    # A closed connection's fds go with it.
    other = connect_peer(server.path)
    half = memfd(b"half a line")
    socket.send_fds(other.sock, [b'{"jsonrpc":"2.0","id":1,"method":"pi'], [half])
    os.close(half)
    assert wait_until(lambda: memfds_held(server.pid) == 1), "the fd of a line not yet whole is held"
    other.sock.shutdown(socket.SHUT_RDWR)
    other.sock.close()
    assert wait_until(lambda: memfds_held(server.pid) == 0)


def test_stdio_has_no_fds():
    peer = serve_stdio()
    try:
        sid = peer.result("sandbox.create")["sandboxId"]
        err = peer.error("files.write", {"sandboxId": sid, "path": "/tmp/f", "dataFd": True})
        assert "no fd came with this request" in err["message"], err
        assert peer.result("files.write", {"sandboxId": sid, "path": "/tmp/f", "data": "aGk="}) == {"ok": True}
    finally:
        close_stdio(peer)


def test_a_socket_sent_along_is_not_kept(server, sb):
    # A client that sends its own end of the connection and goes away: kept, that fd would hold
    # the connection open for ever (and the sandboxes it made). Only memfds are kept.
    peer, sid = sb
    before = peer.result("health")["sandboxes"]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(server.path)
    s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"sandbox.create"}\n')
    got = b""
    while b"\n" not in got:
        got += s.recv(4096)
    assert b'"sandboxId"' in got, got
    assert wait_until(lambda: peer.result("health")["sandboxes"] == before + 1)
    socket.send_fds(s, [b"{"], [s.fileno()])
    s.close()
    assert wait_until(lambda: peer.result("health")["sandboxes"] == before, timeout=20), \
        "the connection outlived its client"
    # Not a memfd, with a whole request: refused as such.
    r, w = os.pipe()
    ans = peer.wait(send_with_fds(peer, "files.read", {"sandboxId": sid, "path": "/etc/hostname", "toFd": True}, [r]))
    assert "not a memfd" in ans["error"]["message"], ans
    os.close(r)
    os.close(w)
