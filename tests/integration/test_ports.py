"""Exposed ports (port.expose, port.list, port.unexpose): a server in the sandbox reached from
the host's loopback through the daemon, bad input refused without changing anything, the
limits, large transfers intact, and everything closed with the port or the sandbox; as root and
rootless. All traffic stays on the host's loopback."""
import base64
import hashlib
import os
import signal
import socket
import sys
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import SPAWNED, Peer, host_ipv4
from test_rootless import delegated, rootless_serve  # noqa: F401 (the fixture: a delegated cgroup for a rootless daemon)
from test_rpc import SBX, connect, server, stdio  # noqa: F401 (fixtures: `sbx serve --stdio` and a Peer on it;
# `sbx serve --socket`)

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes need root here"),
    pytest.mark.skipif(not os.path.exists(SBX), reason=f"{SBX} not built"),
]

INVALID_PARAMS = -32602

# Waits (in the sandbox) until something accepts connections on 127.0.0.1:$1.
WAIT_LISTEN = ("p=%d; for i in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && exit 0; "
               "sleep 0.05; done; echo nothing listens on $p >&2; exit 1")

# An echo server for many connections at once, in one thread (a thread per connection would
# count against the sandbox's process limit): it writes back what it reads, passes a half-close
# on (shuts its side once the client's EOF came and all was written) and closes after.
ECHO_SERVER = r"""
import selectors, socket, sys
sel = selectors.DefaultSelector()
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", int(sys.argv[1]))); srv.listen(1024); srv.setblocking(False)
sel.register(srv, selectors.EVENT_READ)
pending = {}
def update(c):
    sel.modify(c, selectors.EVENT_READ | (selectors.EVENT_WRITE if pending[c][0] else 0))
while True:
    for key, ev in sel.select():
        s = key.fileobj
        if s is srv:
            c, _ = srv.accept(); c.setblocking(False); pending[c] = [b"", False]
            sel.register(c, selectors.EVENT_READ)
            continue
        buf, eof = pending[s]
        if ev & selectors.EVENT_READ and not eof and len(buf) < (4 << 20):
            try:
                d = s.recv(1 << 20)
            except ConnectionError:
                d = b""
            if d:
                buf += d
            else:
                eof = True
        if ev & selectors.EVENT_WRITE and buf:
            try:
                n = s.send(buf[:1 << 20]); buf = buf[n:]
            except BlockingIOError:
                pass
            except ConnectionError:
                buf, eof = b"", True
        pending[s] = [buf, eof]
        if eof and not buf:
            sel.unregister(s); del pending[s]; s.close()
        else:
            update(s)
"""


def sh(peer, cmd, **params):
    r = peer.result("run", {"command": cmd, "timeoutMs": 30000, **params})
    assert r["exitCode"] == 0, r
    return r["stdout"]


def start_http(peer, port=8000, **params):
    """python3 -m http.server in the sandbox's /tmp, left running; returns once it listens."""
    sh(peer, f"cd /tmp && python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 &", **params)
    sh(peer, WAIT_LISTEN % port, **params)


def start_echo(peer, port, **params):
    peer.result("files.write", {"path": "/tmp/echo.py", "data": base64.b64encode(ECHO_SERVER.encode()).decode(),
                                **params})
    sh(peer, f"python3 /tmp/echo.py {port} >/tmp/echo.log 2>&1 &", **params)
    sh(peer, WAIT_LISTEN % port, **params)


def get(host_port, path, timeout=10):
    with urllib.request.urlopen(f"http://127.0.0.1:{host_port}{path}", timeout=timeout) as r:
        return r.read()


def refused(host_port):
    try:
        socket.create_connection(("127.0.0.1", host_port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def closed_by_peer(s, timeout=10):
    """True once the connection s ends (EOF or reset), reading and dropping what comes first."""
    s.settimeout(timeout)
    try:
        while s.recv(65536):
            pass
    except (ConnectionResetError, BrokenPipeError):
        pass
    except socket.timeout:
        return False
    return True


def echo_once(s, data=b"x"):
    s.sendall(data)
    got = b""
    while len(got) < len(data):
        d = s.recv(65536)
        if not d:
            break
        got += d
    return got


def test_http_server_exposed_listed_unexposed(stdio):
    stdio.result("create")
    page = os.urandom(12).hex()
    stdio.result("files.write", {"path": "/tmp/page.txt", "data": base64.b64encode(page.encode()).decode()})
    start_http(stdio)
    r = stdio.result("port.expose", {"port": 8000})
    assert r["host"] == "127.0.0.1" and isinstance(r["port"], int) and 1024 <= r["port"] <= 65535, r
    hp = r["port"]
    assert get(hp, "/page.txt") == page.encode()
    # Several clients at once, each with its own connection.
    results = []
    threads = [threading.Thread(target=lambda: results.append(get(hp, "/page.txt"))) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [page.encode()] * 16
    with pytest.raises(urllib.error.HTTPError) as e:
        get(hp, "/missing")
    assert e.value.code == 404
    assert stdio.result("port.list") == {"ports": [{"port": 8000, "host": "127.0.0.1", "hostPort": hp,
                                                    "ownerUid": os.geteuid(), "refused": 0}]}
    # The host's loopback only: another address of the host does not answer.
    other = host_ipv4()
    if other:
        with pytest.raises(OSError):
            socket.create_connection((other, hp), timeout=2).close()
    # A connection open at unexpose is closed; the port refuses new ones.
    held = socket.create_connection(("127.0.0.1", hp), timeout=5)
    assert stdio.result("port.unexpose", {"port": 8000}) == {}
    assert closed_by_peer(held)
    held.close()
    assert refused(hp)
    assert stdio.result("port.list") == {"ports": []}
    # The server itself still runs: exposed again, on a new host port, it answers.
    hp2 = stdio.result("port.expose", {"port": 8000})["port"]
    assert get(hp2, "/page.txt") == page.encode()


GET_AS = r"""
import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
    s.sendall(b"GET /page.txt HTTP/1.0\r\n\r\n")
    data = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        data += d
    print(data.split(b"\r\n")[0].decode() if data else "closed")
except (ConnectionResetError, BrokenPipeError):
    print("reset")
"""


def get_as(uid, host_port):
    """An HTTP GET through the exposed port from a process of another user."""
    p = subprocess.run([sys.executable, "-c", GET_AS, str(host_port)], capture_output=True, text=True, timeout=30,
                       preexec_fn=lambda: os.setuid(uid))
    return p.stdout.strip() or p.stderr


def test_only_the_exposing_clients_user_connects_unless_public(stdio):
    """A port is the exposing client's: another user of the host (here nobody, 65534) is reset
    at accept and counted, root and the client's own user get through; public: true opens it
    to every process of the host. Before, any local user (or a network "host" sandbox) could
    reach every exposed port."""
    stdio.result("create")
    stdio.result("files.write", {"path": "/tmp/page.txt", "data": base64.b64encode(b"hi").decode()})
    start_http(stdio)
    r = stdio.result("port.expose", {"port": 8000})
    assert r["public"] is False, r
    assert get(r["port"], "/page.txt") == b"hi"
    assert get_as(65534, r["port"]) in ("reset", "closed"), "another user got through"
    [listed] = stdio.result("port.list")["ports"]
    assert listed["ownerUid"] == os.geteuid() and listed["refused"] == 1, listed
    stdio.result("port.unexpose", {"port": 8000})
    r = stdio.result("port.expose", {"port": 8000, "public": True})
    assert r["public"] is True
    assert get_as(65534, r["port"]) == "HTTP/1.0 200 OK"
    assert stdio.result("port.list")["ports"][0]["ownerUid"] is None


def test_bad_input_changes_nothing(stdio):
    stdio.result("create")
    start_http(stdio)
    hp = stdio.result("port.expose", {"port": 8000})["port"]
    listed = stdio.result("port.list")
    cases = [
        ("port.expose", {"port": 0}, "port must be from 1 to 65535; got 0"),
        ("port.expose", {"port": 65536}, "port must be from 1 to 65535; got 65536"),
        ("port.expose", {"port": -1}, "port must be a non-negative integer"),
        ("port.expose", {"port": "8001"}, "port must be a non-negative integer"),
        ("port.expose", {}, "Missing required param: port"),
        ("port.expose", {"port": 8000}, f"port 8000 is already exposed, on 127.0.0.1:{hp}"),
        ("port.expose", {"port": 8001, "hostPort": 9999}, 'unknown parameter "hostPort"'),
        ("port.unexpose", {"port": 8001}, "port 8001 is not exposed"),
        ("port.unexpose", {"port": 70000}, "port must be from 1 to 65535; got 70000"),
        ("port.unexpose", {"ports": 8000}, 'unknown parameter "ports" (did you mean "port"?)'),
        ("port.list", {"port": 8000}, 'unknown parameter "port"'),
    ]
    for method, params, message in cases:
        assert stdio.error(method, params) == {"code": INVALID_PARAMS, "message": message}, (method, params)
        assert stdio.result("port.list") == listed
    assert get(hp, "/") .startswith(b"<!DOCTYPE")
    # Another sandbox's ports are its own.
    other = stdio.result("sandbox.create")["sandboxId"]
    assert stdio.result("port.list", {"sandboxId": other}) == {"ports": []}
    assert stdio.error("port.unexpose", {"sandboxId": other, "port": 8000})["message"] == "port 8000 is not exposed"
    assert stdio.error("port.expose", {"sandboxId": "f" * 32, "port": 1})["message"] == "Unknown sandboxId: " + "f" * 32


def test_nothing_listening_is_a_reset(stdio):
    stdio.result("create")
    hp = stdio.result("port.expose", {"port": 8000})["port"]
    # The reset may reach the client before its (non-blocking) connect is
    # seen complete, so it is raised by either call; no byte ever arrives.
    with pytest.raises(ConnectionResetError):
        s = socket.create_connection(("127.0.0.1", hp), timeout=5)
        try:
            s.settimeout(10)
            s.recv(1)
        finally:
            s.close()
    # Exposed before its server starts: connections work once it listens.
    start_http(stdio)
    assert get(hp, "/").startswith(b"<!DOCTYPE")


def test_destroyed_sandbox_closes_its_ports(stdio):
    stdio.result("create")
    sid = stdio.result("sandbox.create")["sandboxId"]
    start_http(stdio, sandboxId=sid)
    hp = stdio.result("port.expose", {"sandboxId": sid, "port": 8000})["port"]
    assert get(hp, "/").startswith(b"<!DOCTYPE")
    held = socket.create_connection(("127.0.0.1", hp), timeout=5)
    held.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # half a request: the server waits for the rest
    assert stdio.result("sandbox.destroy", {"sandboxId": sid})["ok"] is True
    assert closed_by_peer(held)
    held.close()
    assert refused(hp)


def test_daemon_exit_closes_ports(stdio):
    stdio.result("create")
    start_http(stdio)
    hp = stdio.result("port.expose", {"port": 8000})["port"]
    assert get(hp, "/").startswith(b"<!DOCTYPE")
    stdio.proc.stdin.close()
    stdio.proc.wait(10)
    assert refused(hp)


def test_large_transfer_both_ways_intact(stdio):
    """64 MiB sent through the port to an echo server and back, hashed on both ends; the client's
    half-close reaches the server, whose last bytes and EOF still come back."""
    stdio.result("create")
    start_echo(stdio, 7000)
    hp = stdio.result("port.expose", {"port": 7000})["port"]
    data = os.urandom(64 << 20)
    s = socket.create_connection(("127.0.0.1", hp), timeout=30)
    s.settimeout(60)

    def send():
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)

    t = threading.Thread(target=send)
    t0 = time.monotonic()
    t.start()
    h, n = hashlib.sha256(), 0
    while True:
        d = s.recv(1 << 20)
        if not d:
            break
        h.update(d)
        n += len(d)
    t.join(60)
    elapsed = time.monotonic() - t0
    s.close()
    assert n == len(data), (n, len(data))
    assert h.hexdigest() == hashlib.sha256(data).hexdigest()
    print(f"64 MiB each way in {elapsed:.2f}s")


def test_limits_ports_and_connections(stdio):
    stdio.result("create")
    start_echo(stdio, 7000)
    hp = stdio.result("port.expose", {"port": 7000})["port"]
    # 32 ports per sandbox: the 33rd is refused, and nothing changes.
    for p in range(10001, 10032):
        stdio.result("port.expose", {"port": p})
    before = stdio.result("port.list")["ports"]
    assert len(before) == 32 and [x["port"] for x in before] == [7000] + list(range(10001, 10032))
    err = stdio.error("port.expose", {"port": 10032})
    assert err == {"code": -32001, "message": "LIMIT_EXCEEDED: this sandbox already exposes 32 ports, the most it "
                                             "may (unexpose one first)"}
    assert stdio.result("port.list")["ports"] == before
    stdio.result("port.unexpose", {"port": 10031})
    stdio.result("port.expose", {"port": 10032})
    # 256 connections at once per port, each forwarded; the 257th is reset.
    conns = []
    try:
        for i in range(256):
            c = socket.create_connection(("127.0.0.1", hp), timeout=10)
            c.settimeout(10)
            conns.append(c)
        for i, c in enumerate(conns):
            assert echo_once(c, b"%d;" % i) == b"%d;" % i
        try:
            extra = socket.create_connection(("127.0.0.1", hp), timeout=10)
        except ConnectionResetError:
            pass  # reset before connect() returned
        else:
            assert closed_by_peer(extra)
            extra.close()
        # One fewer, and a new one is forwarded again.
        conns.pop().close()
        deadline = time.monotonic() + 10
        while True:
            # Until the daemon has seen the close, a new connection is still one too many: it
            # is reset, maybe before connect() returns.
            c = None
            try:
                c = socket.create_connection(("127.0.0.1", hp), timeout=10)
                c.settimeout(10)
                if echo_once(c, b"again") == b"again":
                    conns.append(c)
                    break
            except ConnectionError:
                pass
            if c:
                c.close()
            assert time.monotonic() < deadline, "no connection forwarded after one closed"
            time.sleep(0.05)
        # Every earlier connection still works.
        assert all(echo_once(c, b"y") == b"y" for c in conns)
    finally:
        for c in conns:
            c.close()


def test_shutdown_with_ports_and_connections_open(server):  # noqa: F811
    """SIGTERM while a persistent sandbox has ports exposed and connections open: they are
    closed, and the daemon exits cleanly (its status is non-zero under the sanitizers on a
    leak)."""
    peer = connect(server.path)
    sid = peer.result("sandbox.create", {"persist": True})["sandboxId"]
    start_echo(peer, 7000, sandboxId=sid)
    hp = peer.result("port.expose", {"sandboxId": sid, "port": 7000})["port"]
    peer.result("port.expose", {"sandboxId": sid, "port": 7001})
    held = [socket.create_connection(("127.0.0.1", hp), timeout=10) for _ in range(3)]
    for c in held:
        c.settimeout(10)
        assert echo_once(c, b"hi") == b"hi"
    peer.sock.close()
    assert echo_once(held[0], b"still") == b"still"  # persistent: its ports outlive the connection
    server.send_signal(signal.SIGTERM)
    server.wait(10)
    assert server.returncode == 0, server.stderr.read()
    for c in held:
        assert closed_by_peer(c)
        c.close()
    assert refused(hp)


def test_rootless_daemon_forwards(delegated):  # noqa: F811
    """A rootless daemon: the socket maker enters the sandbox's user namespace to reach its network
    namespace; the server is reached, and the port closes with the daemon."""
    p = rootless_serve(delegated)
    SPAWNED.append(p.pid)
    peer = Peer(p.stdout, p.stdin)
    try:
        created = peer.call("create")
        if "error" in created and "namespace" in created["error"]["message"]:
            pytest.skip("unprivileged user namespaces are not allowed here")
        assert "result" in created, created
        page = os.urandom(8).hex()
        peer.result("files.write", {"path": "/tmp/page.txt", "data": base64.b64encode(page.encode()).decode()})
        start_http(peer)
        hp = peer.result("port.expose", {"port": 8000})["port"]
        assert get(hp, "/page.txt") == page.encode()
        start_echo(peer, 7000)
        hp2 = peer.result("port.expose", {"port": 7000})["port"]
        data = os.urandom(8 << 20)
        with socket.create_connection(("127.0.0.1", hp2), timeout=10) as s:
            s.settimeout(30)
            t = threading.Thread(target=lambda: (s.sendall(data), s.shutdown(socket.SHUT_WR)))
            t.start()
            got = bytearray()
            while (d := s.recv(1 << 20)):
                got += d
            t.join(30)
        assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
        assert peer.result("port.unexpose", {"port": 8000}) == {}
        assert refused(hp)
    finally:
        p.stdin.close()
        p.wait(10)
    assert refused(hp2)
