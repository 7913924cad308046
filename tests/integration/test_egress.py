"""Egress by domain: network "allowlist" with networkAllow, and its proxy.

Every byte stays on loopback: the test's HTTP and HTTPS servers listen on the host's
127.0.0.1, the daemon maps the test names (allowed.test, other.test, ...) to 127.0.0.1 with
--egress-hosts, so the proxy never asks DNS, and names it refuses are refused before any
lookup. Connects the sandbox tries itself go nowhere: its namespace has only loopback.
"""
import base64
import hashlib
import http.server
import io
import json
import os
import select
import shutil
import socketserver
import subprocess
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import pytest

from conftest import Delegation

REPO = Path(__file__).resolve().parents[2]
SBX = os.environ.get("SBX_BIN") or str(REPO / "build" / "src" / "cli" / "sbx")
BIG = hashlib.sha256(b"seed").digest() * (5 * 1024 * 1024 // 32)  # 5 MiB, not all one byte


# ------------------------------------------------------------------ the host's test servers

def _wheel():
    """A minimal valid wheel of a package `demo` 1.0, for pip download through the proxy."""
    buf = io.BytesIO()
    files = {
        "demo/__init__.py": b"X = 1\n",
        "demo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
        "demo-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ""
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record += f"{name},sha256={digest},{len(data)}\n"
        record += "demo-1.0.dist-info/RECORD,,\n"
        z.writestr("demo-1.0.dist-info/RECORD", record)
    return buf.getvalue()


WHEEL = _wheel()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _send(self, body, ctype="text/plain"):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/big":
            return self._send(BIG, "application/octet-stream")
        if self.path == "/simple/demo/":
            href = "/files/demo-1.0-py3-none-any.whl#sha256=" + hashlib.sha256(WHEEL).hexdigest()
            return self._send(f'<html><body><a href="{href}">demo-1.0-py3-none-any.whl</a></body></html>'.encode(),
                              "text/html")
        if self.path == "/files/demo-1.0-py3-none-any.whl":
            return self._send(WHEEL, "application/octet-stream")
        # What the origin server saw: the request line's target, Host and the proxy's headers.
        seen = {"path": self.path, "host": self.headers.get("Host"),
                "proxyConnection": self.headers.get("Proxy-Connection"),
                "connection": self.headers.get("Connection")}
        self._send(("hello from origin " + json.dumps(seen)).encode())

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        self._send(f"posted {len(body)} {hashlib.sha256(body).hexdigest()}".encode())


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def _serve(tls_ctx=None):
    srv = Server(("127.0.0.1", 0), Handler)
    if tls_ctx:
        srv.socket = tls_ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.fixture(scope="module")
def origin():
    srv = _serve()
    yield srv.server_address[1]
    srv.shutdown()


@pytest.fixture(scope="module")
def tls_origin(tmp_path_factory):
    """An HTTPS server for allowed.test with a self-signed certificate; (port, cert PEM)."""
    import ssl
    if not shutil.which("openssl"):
        pytest.skip("openssl is not installed: no certificate for the HTTPS server")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=allowed.test", "-addext", "subjectAltName=DNS:allowed.test",
                    "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")],
                   check=True, capture_output=True, timeout=60)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(d / "cert.pem"), str(d / "key.pem"))
    srv = _serve(ctx)
    yield srv.server_address[1], (d / "cert.pem").read_bytes()
    srv.shutdown()


@pytest.fixture(scope="module")
def hosts_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("egress") / "hosts"
    p.write_text("# the test's names: all on the host's loopback\n"
                 "127.0.0.1 allowed.test other.test api.allowed.test\n"
                 "127.0.0.1\tdeep.sub.allowed.test   # a comment\n")
    return p


# ------------------------------------------------------------------ a daemon on stdio

class Daemon:
    def __init__(self, *opts, argv_prefix=(), env=None, preexec_fn=None):
        self.stderr = tempfile.TemporaryFile()
        self.p = subprocess.Popen([*argv_prefix, SBX, "serve", "--stdio", *opts], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.stderr, env=env, preexec_fn=preexec_fn,
                                  cwd="/")
        self.n = 0
        self.buf = b""

    def _line(self, deadline):
        fd = self.p.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer from sbx serve")
            r, _, _ = select.select([fd], [], [], left)
            if r:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise EOFError("sbx serve closed stdout: " + self.log())
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def call(self, method, params=None, timeout=60):
        self.n += 1
        self.p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": self.n, "method": method,
                                        "params": params or {}}) + "\n").encode())
        self.p.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            msg = self._line(deadline)
            if msg.get("id") == self.n:
                return msg

    def ok(self, method, params=None, timeout=60):
        msg = self.call(method, params, timeout)
        assert "result" in msg, msg
        return msg["result"]

    def run(self, sid, command, stdin=None, timeout=60):
        params = {"sandboxId": sid, "command": command, "timeoutMs": timeout * 1000}
        if stdin is not None:
            params["stdin"] = base64.b64encode(stdin).decode()
        return self.ok("run", params, timeout=timeout + 10)

    def create(self, **params):
        return self.ok("sandbox.create", params)["sandboxId"]

    def log(self):
        self.stderr.seek(0)
        return self.stderr.read().decode("utf-8", "replace")

    def close(self):
        """Ends the daemon (its stdin closes) and checks it exited cleanly: under ASan a leak
        or an error would show here."""
        try:
            self.p.stdin.close()
            self.p.wait(timeout=30)
        except Exception:
            self.p.kill()
            self.p.wait()
        assert self.p.returncode == 0 and "Sanitizer" not in self.log(), self.log()[-3000:]


@pytest.fixture(scope="module")
def daemon(hosts_file):
    d = Daemon("--egress-hosts", str(hosts_file), "--egress-allow-private", "127.0.0.1/32")
    yield d
    d.close()


@pytest.fixture(scope="module")
def allowed(daemon):
    """An allowlist sandbox: allowed.test on any port, *.allowed.test on 80 and 443."""
    return daemon.create(network="allowlist", networkAllow=["allowed.test:*", "*.allowed.test"])


# A raw proxy request from inside the sandbox, printing the whole answer (python3: the host's).
RAW = r"""python3 - <<'EOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(sys.argv[1].encode() if len(sys.argv) > 1 else {req!r})
out = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    out += b
print(out.decode("latin-1"))
EOF"""


def raw(daemon, sid, request):
    r = daemon.run(sid, RAW.format(req=request.encode() if isinstance(request, str) else request))
    assert r["exitCode"] == 0, r
    return r["stdout"]


# ------------------------------------------------------------------ what goes through

def test_allowlist_sets_the_proxy_environment(daemon, allowed):
    r = daemon.run(allowed, "env | grep -i _proxy= | sort")
    env = dict(line.split("=", 1) for line in r["stdout"].split())
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        assert env[k] == "http://127.0.0.1:3128"
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,127.0.0.1,::1"


def test_curl_plain_http_by_name(daemon, allowed, origin):
    r = daemon.run(allowed, f"curl -sS -m 20 http://allowed.test:{origin}/where?x=1")
    assert r["exitCode"] == 0, r
    assert r["stdout"].startswith("hello from origin "), r
    seen = json.loads(r["stdout"][len("hello from origin "):])
    # Sent on in origin-form, Host from the URL, the proxy's own headers dropped.
    assert seen == {"path": "/where?x=1", "host": f"allowed.test:{origin}", "proxyConnection": None,
                    "connection": "close"}


def test_post_body_goes_through(daemon, allowed, origin):
    r = daemon.run(allowed, f"head -c 300000 /dev/urandom > /tmp/b && sha256sum /tmp/b | cut -c1-64 && "
                            f"curl -sS -m 20 --data-binary @/tmp/b http://allowed.test:{origin}/post")
    assert r["exitCode"] == 0, r
    digest, answer = r["stdout"].split("\n", 1)
    assert answer == f"posted 300000 {digest}"


def test_python_urllib_by_name(daemon, allowed, origin):
    r = daemon.run(allowed, "python3 -c \"import urllib.request; "
                            f"print(urllib.request.urlopen('http://allowed.test:{origin}/u', timeout=20).read().decode())\"")
    assert r["exitCode"] == 0, r
    assert r["stdout"].startswith("hello from origin "), r


def test_curl_https_through_connect(daemon, allowed, tls_origin):
    port, cert = tls_origin
    r = daemon.run(allowed, f"cat > /tmp/ca.pem && curl -sS -m 20 --cacert /tmp/ca.pem https://allowed.test:{port}/big "
                            "| sha256sum | cut -c1-64", stdin=cert)
    assert r["exitCode"] == 0, r
    assert r["stdout"].strip() == hashlib.sha256(BIG).hexdigest()


def test_pip_download_from_a_local_index(daemon, allowed, origin):
    if daemon.run(allowed, "python3 -m pip --version")["exitCode"] != 0:
        pytest.skip("pip is not installed on the host (the sandbox sees the host's /usr)")
    r = daemon.run(allowed, f"cd /tmp && python3 -m pip download --no-deps --no-cache-dir --disable-pip-version-check "
                            f"--index-url http://allowed.test:{origin}/simple --trusted-host allowed.test -d dl demo && ls dl", timeout=120)
    assert r["exitCode"] == 0, r
    assert "demo-1.0-py3-none-any.whl" in r["stdout"]


def test_wildcard_matches_below_not_the_apex_port(daemon, hosts_file, origin):
    d = daemon
    sid = d.create(network="allowlist", networkAllow=["*.allowed.test:*"])
    ok = d.run(sid, f"curl -sS -m 20 http://deep.sub.allowed.test:{origin}/")
    assert ok["stdout"].startswith("hello from origin "), ok
    out = raw(d, sid, f"GET http://allowed.test:{origin}/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
    assert out.startswith("HTTP/1.1 403 Forbidden"), out
    assert "sbx: allowed.test is not in this sandbox's allowlist" in out
    d.ok("sandbox.destroy", {"sandboxId": sid})


# ------------------------------------------------------------------ refusals

def test_name_not_listed_is_403(daemon, allowed, origin):
    r = daemon.run(allowed, f"curl -sS -m 20 -o /tmp/body -w '%{{http_code}}' http://other.test:{origin}/; echo; cat /tmp/body")
    assert r["stdout"] == "403\nsbx: other.test is not in this sandbox's allowlist\n", r
    out = raw(daemon, allowed, "CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n")
    assert out.startswith("HTTP/1.1 403 Forbidden\r\n"), out
    assert out.endswith("\r\n\r\nsbx: other.test is not in this sandbox's allowlist\n\n"), out
    r = daemon.run(allowed, f"curl -sS -m 20 https://other.test:{origin}/")
    assert r["exitCode"] != 0 and "403" in r["stderr"], r


def test_port_not_listed_is_403(daemon, origin):
    sid = daemon.create(network="allowlist", networkAllow=["allowed.test"])  # 80 and 443 only
    out = raw(daemon, sid, f"CONNECT allowed.test:{origin} HTTP/1.1\r\n\r\n")
    assert out.startswith("HTTP/1.1 403"), out
    assert f"sbx: port {origin} of allowed.test is not in this sandbox's allowlist" in out
    daemon.ok("sandbox.destroy", {"sandboxId": sid})


def test_bad_requests_are_answered_and_the_proxy_goes_on(daemon, allowed, origin):
    out = raw(daemon, allowed, "GET /relative HTTP/1.1\r\nHost: x\r\n\r\n")
    assert out.startswith("HTTP/1.1 400 Bad Request") and "sbx: this is a proxy" in out, out
    out = raw(daemon, allowed, "NONSENSE\r\n\r\n")
    assert out.startswith("HTTP/1.1 400"), out
    out = raw(daemon, allowed, "GET https://allowed.test/ HTTP/1.1\r\n\r\n")
    assert out.startswith("HTTP/1.1 400") and "CONNECT" in out, out
    out = raw(daemon, allowed, "GET http://user@allowed.test/ HTTP/1.1\r\n\r\n")
    assert out.startswith("HTTP/1.1 400"), out
    out = raw(daemon, allowed, "GET http://allowed.test/ HTTP/1.1\r\nX: " + "a" * 20000 + "\r\n\r\n")
    assert out.startswith("HTTP/1.1 431"), out
    out = raw(daemon, allowed, "CONNECT allowed.test HTTP/1.1\r\n\r\n")
    assert out.startswith("HTTP/1.1 400") and "host:port" in out, out
    r = daemon.run(allowed, f"curl -sS -m 20 http://allowed.test:{origin}/after")
    assert r["stdout"].startswith("hello from origin "), r


def test_private_address_needs_the_operator(hosts_file, origin):
    # No --egress-allow-private; -v: the refusals are logged at info.
    d = Daemon("--egress-hosts", str(hosts_file), "-v")
    try:
        sid = d.create(network="allowlist", networkAllow=["allowed.test:*", "169.254.169.254", "10.1.2.3",
                                                          "100.64.0.1"])
        out = raw(d, sid, f"GET http://allowed.test:{origin}/ HTTP/1.1\r\n\r\n")
        assert out.startswith("HTTP/1.1 403"), out
        assert "sbx: allowed.test resolves to 127.0.0.1, a loopback address, which this sandbox may not reach" in out
        assert "sbx serve --egress-allow-private" in out, out  # who may change it, and how
        out = raw(d, sid, "GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\n\r\n")
        assert "169.254.169.254 is a cloud metadata address" in out, out
        out = raw(d, sid, "CONNECT 10.1.2.3:443 HTTP/1.1\r\n\r\n")
        assert "10.1.2.3 is a private (RFC 1918) address" in out, out
        out = raw(d, sid, "CONNECT 100.64.0.1:443 HTTP/1.1\r\n\r\n")
        assert "carrier-grade NAT" in out, out
        # Each refusal is told (the server logs them until the audit log takes them).
        assert d.log().count("egress 403") >= 4, d.log()
    finally:
        d.close()


def test_direct_connects_fail(daemon, allowed, origin):
    # The host's loopback server, by address: the sandbox's loopback is its own.
    r = daemon.run(allowed, f"curl -sS -m 5 --noproxy '*' http://127.0.0.1:{origin}/; echo rc=$?")
    assert "rc=7" in r["stdout"], r
    # Anywhere else: no route at all (nothing is sent: the namespace has only loopback).
    r = daemon.run(allowed, "python3 -c \"import socket; socket.create_connection(('192.0.2.1', 80), timeout=3)\" "
                            "2>&1 | tail -1")
    assert "unreachable" in r["stdout"], r
    r = daemon.run(allowed, "cat /etc/resolv.conf | wc -c")
    assert r["stdout"].strip() == "0"


def test_none_has_no_proxy(daemon):
    sid = daemon.create()
    r = daemon.run(sid, "env | grep -ci _proxy; curl -sS -m 5 http://127.0.0.1:3128/ 2>&1; echo rc=$?")
    assert r["stdout"].startswith("0\n") and "rc=7" in r["stdout"], r
    sid2 = daemon.create(network="none")
    r = daemon.run(sid2, "curl -sS -m 5 http://127.0.0.1:3128/ 2>&1; echo rc=$?")
    assert "rc=7" in r["stdout"], r
    for s in (sid, sid2):
        daemon.ok("sandbox.destroy", {"sandboxId": s})


@pytest.mark.parametrize("network", [True, "host"])
def test_host_mode_is_the_old_network_true(daemon, origin, network):
    sid = daemon.create(network=network)
    r = daemon.run(sid, f"env | grep -ci _proxy; curl -sS -m 20 http://127.0.0.1:{origin}/h")
    assert r["stdout"].startswith("0\nhello from origin "), r
    daemon.ok("sandbox.destroy", {"sandboxId": sid})


def test_fork_keeps_the_allowlist_with_its_own_proxy(daemon, origin):
    sid = daemon.create(network="allowlist", networkAllow=["allowed.test:*"])
    child = daemon.ok("sandbox.fork", {"sandboxId": sid})["sandboxId"]
    daemon.ok("sandbox.destroy", {"sandboxId": sid})
    r = daemon.run(child, f"curl -sS -m 20 http://allowed.test:{origin}/; echo; "
                          f"curl -sS -m 20 http://other.test:{origin}/")
    assert r["stdout"].startswith("hello from origin "), r
    assert r["stdout"].endswith("sbx: other.test is not in this sandbox's allowlist\n"), r
    daemon.ok("sandbox.destroy", {"sandboxId": child})


def test_empty_allowlist_refuses_everything(daemon, origin):
    sid = daemon.create(network="allowlist", networkAllow=[])
    out = raw(daemon, sid, f"GET http://allowed.test:{origin}/ HTTP/1.1\r\n\r\n")
    assert "403" in out.split("\r\n", 1)[0], out
    daemon.ok("sandbox.destroy", {"sandboxId": sid})


BAD = [
    ({"network": "bogus"}, "network must be"),
    ({"network": 2}, "network must be"),
    ({"network": "allowlist"}, "needs networkAllow"),
    ({"networkAllow": ["a.test"]}, "only for network \"allowlist\""),
    ({"network": "host", "networkAllow": []}, "only for network \"allowlist\""),
    ({"network": "allowlist", "networkAllow": "a.test"}, "must be an array"),
    ({"network": "allowlist", "networkAllow": [1]}, "networkAllow[0] must be"),
    ({"network": "allowlist", "networkAllow": ["*.com"]}, "two labels"),
    ({"network": "allowlist", "networkAllow": ["exa mple.com"]}, "is not a host name"),
    ({"network": "allowlist", "networkAllow": ["a.test:0"]}, "port must be"),
    ({"network": "allowlist", "networkAllow": ["a.test:65536"]}, "port must be"),
    ({"network": "allowlist", "networkAllow": ["[::1]:443"]}, "port must be"),
    ({"network": "allowlist", "networkAllow": [""]}, "must be 1-"),
    ({"network": "allowlist", "networkAllow": ["a." * 130 + "test"]}, "must be 1-"),
    ({"network": "allowlist", "networkAllow": ["a..test"]}, "is not a host name"),
    ({"network": "allowlist", "networkAllow": ["*"]}, "is not a host name"),
    ({"network": "allowlist", "networkAllow": ["h%d.test" % i for i in range(257)]}, "more than 256"),
]


@pytest.mark.parametrize("params,words", BAD)
def test_bad_values_are_refused(daemon, params, words):
    msg = daemon.call("sandbox.create", params)
    assert msg.get("error", {}).get("code") == -32602, msg
    assert words in msg["error"]["message"], msg


def test_daemon_usable_after_bad_values(daemon, allowed, origin):
    for params, _ in BAD[:3]:
        daemon.call("sandbox.create", params)
    r = daemon.run(allowed, f"curl -sS -m 20 http://allowed.test:{origin}/")
    assert r["stdout"].startswith("hello from origin "), r


@pytest.mark.parametrize("opts,words", [
    (["--egress-allow-private", "nonsense"], "'nonsense' is not an address or CIDR"),
    (["--egress-allow-private", "10.0.0.0/33"], "is not an address or CIDR"),
    (["--egress-hosts", "/nonexistent/hosts"], "No such file"),
])
def test_serve_refuses_bad_options(opts, words):
    cp = subprocess.run([SBX, "serve", "--stdio", *opts], stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    assert cp.returncode == 2, cp
    assert words in cp.stderr.decode(), cp


def test_serve_refuses_a_bad_hosts_file(tmp_path):
    p = tmp_path / "hosts"
    p.write_text("127.0.0.1 fine.test\nnot-an-address some.test\n")
    cp = subprocess.run([SBX, "serve", "--stdio", "--egress-hosts", str(p)], stdin=subprocess.DEVNULL,
                        capture_output=True, timeout=30)
    assert cp.returncode == 2 and "line 2: 'not-an-address' is not an IP address" in cp.stderr.decode(), cp


# ------------------------------------------------------------------ rootless

@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root to prepare a delegated cgroup, and setpriv")
def test_rootless_allowlist(hosts_file, origin):
    """A daemon of uid 65534 (see test_rootless.py): the proxy needs no privilege."""
    d = Delegation("sbx-test-egress")
    # Where uid 65534 can read it (pytest's own directories are root's alone).
    hd = Path(tempfile.mkdtemp(prefix="sbx-egress-"))
    hd.chmod(0o755)
    shutil.copy(hosts_file, hd / "hosts")
    (hd / "hosts").chmod(0o644)
    dm = Daemon("--egress-hosts", str(hd / "hosts"), "--egress-allow-private", "127.0.0.1/32",
                argv_prefix=Delegation.argv, env=d.env(), preexec_fn=d.enter)
    try:
        sid = dm.create(network="allowlist", networkAllow=["allowed.test:*"])
        r = dm.run(sid, f"id -u; curl -sS -m 20 http://allowed.test:{origin}/r; echo; "
                        f"curl -sS -m 20 http://other.test:{origin}/; curl -sS -m 5 --noproxy '*' "
                        f"http://127.0.0.1:{origin}/ 2>/dev/null; echo rc=$?")
        lines = r["stdout"].split("\n")
        assert lines[0] == "1000", r
        assert lines[1].startswith("hello from origin "), r
        assert lines[2] == "sbx: other.test is not in this sandbox's allowlist", r
        assert lines[3] == "rc=7", r
    finally:
        dm.close()
        shutil.rmtree(hd, ignore_errors=True)
        d.remove()


def test_python_sdk_network_list_is_an_allowlist():
    """The SDK's network=[patterns]: an allowlist sandbox (its own `sbx serve --stdio`, no
    operator options: only refusals are tried, which need no lookup)."""
    import sys
    sys.path.insert(0, str(REPO / "sdk" / "python"))
    from sbx import Sandbox
    with Sandbox(network=["allowed.test", "169.254.169.254"], binary=SBX) as sb:
        r = sb.commands.run("echo $HTTPS_PROXY; curl -sS -m 10 http://other.test/; "
                            "curl -sS -m 10 http://169.254.169.254/latest/")
        assert r.stdout.split("\n")[:3] == [
            "http://127.0.0.1:3128", "sbx: other.test is not in this sandbox's allowlist",
            "sbx: 169.254.169.254 is a cloud metadata address, which this sandbox may not reach (the daemon's "
            "operator may allow a range: sbx serve --egress-allow-private)"], r.stdout


# A DNS server for the test's own network namespace: A queries for *.test names it knows get
# 127.0.0.1, everything else NXDOMAIN (AAAA for a known name: no answer).
FAKE_DNS = r"""
import socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 53))
open(sys.argv[1], "w").close()  # bound: the daemon may ask
while True:
    q, peer = s.recvfrom(512)
    tid, flags, qd = struct.unpack(">HHH", q[:6])
    i, labels = 12, []
    while q[i]:
        labels.append(q[i + 1:i + 1 + q[i]].decode().lower())
        i += 1 + q[i]
    qtype = struct.unpack(">H", q[i + 1:i + 3])[0]
    question = q[12:i + 5]
    name = ".".join(labels)
    known = name in ("dns.test", "www.dns.test")
    rcode = 0 if known else 3
    answers = b""
    if known and qtype == 1:
        answers = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 60, 4) + bytes([127, 0, 0, 1])
    s.sendto(struct.pack(">HHHHHH", tid, 0x8180 | rcode, 1, 1 if answers else 0, 0, 0) + question + answers, peer)
"""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"),
                    reason="needs root, unshare and ip for a network namespace of the test's own")
def test_names_resolved_by_c_ares(tmp_path):
    """Names not in a hosts file go to DNS through c-ares, in the loop. The daemon, its DNS
    server and the origin server run in a network namespace of the test's own (only lo), whose
    /etc/resolv.conf names 127.0.0.1: not one packet can leave it. (sh -c's arguments after the
    script, Daemon's `sbx serve --stdio`, are only its $0 and $1.)"""
    (tmp_path / "resolv.conf").write_text("nameserver 127.0.0.1\n")
    (tmp_path / "dns.py").write_text(FAKE_DNS)
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "index.html").write_text("hello from dns.test\n")
    script = (f"ip link set lo up && mount --bind {tmp_path}/resolv.conf /etc/resolv.conf && "
              f"(python3 {tmp_path}/dns.py {tmp_path}/dns.ready >/dev/null 2>&1 &) && "
              f"(cd {tmp_path}/www && python3 -m http.server 8099 --bind 127.0.0.1 >/dev/null 2>&1 &) && "
              # Both servers answer before the daemon starts (a python3 can take longer to start
              # than any fixed sleep on a loaded machine; the proxy answers a refused connection
              # itself, so a client's retries would not see it).
              f"for i in $(seq 400); do [ -e {tmp_path}/dns.ready ] && break; sleep 0.05; done && "
              f"for i in $(seq 400); do curl -s -o /dev/null http://127.0.0.1:8099/ && break; sleep 0.05; done && "
              f"exec {SBX} serve --stdio --egress-allow-private 127.0.0.1/32")
    # A pid namespace too, whose end (the daemon's exit) takes the two servers with it.
    d = Daemon(argv_prefix=["unshare", "--net", "--mount", "--pid", "--fork", "--mount-proc", "--kill-child",
                            "sh", "-c", script])
    try:
        sid = d.create(network="allowlist", networkAllow=["dns.test:*", "*.dns.test:*", "nx.test:*"])
        r = d.run(sid, "curl -sS -m 20 --retry 5 --retry-connrefused http://dns.test:8099/; "
                       "curl -sS -m 20 http://www.dns.test:8099/; curl -sS -m 20 http://nx.test:8099/")
        assert r["stdout"].split("\n")[:3] == ["hello from dns.test", "hello from dns.test",
                                              "sbx: cannot resolve nx.test: Domain name not found"], r
    finally:
        d.close()
