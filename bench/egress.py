#!/usr/bin/python3
"""Egress by domain: what the allowlist proxy costs.

1. CONNECT overhead: the same Python client makes N HTTPS requests (a new TCP connection, a
   TLS handshake and a GET each) to an HTTPS server on the host's 127.0.0.1, once on the host
   directly and once inside an allowlist sandbox through its proxy (CONNECT allowed.test:PORT);
   the two runs alternate in rounds. Reports p50 and p90 of each and the difference.
   A third side is a sandbox whose secret TOKEN lists allowed.test (a proxy secret): the
   proxy ends the client's TLS with the sandbox's CA, makes its own TLS to the server and
   puts the value in place of $TOKEN in the request's Authorization header. Every side sends
   that header (the others with a dummy of the placeholder's length).
2. Tunnel throughput: curl inside the sandbox downloads SIZE bytes from a plain TCP server on
   the host through a CONNECT tunnel (curl -p), and on the host directly; MB/s (10^6 bytes).

Everything stays on loopback: `sbx serve --stdio --egress-hosts` maps allowed.test to
127.0.0.1 and --egress-allow-private 127.0.0.1/32 lets the proxy reach it. Needs root (the
daemon), openssl and curl. Prints a Markdown table.

Usage: bench/egress.py [--sbx PATH] [--n N] [--rounds R] [--size MiB]
"""
import argparse
import base64
import json
import os
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))

CLIENT = r"""
import json, os, socket, ssl, sys, time
port, n, proxy, cafile = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
auth = os.environ.get("TOKEN", "x" * 41).encode()
ctx = ssl.create_default_context(cafile=cafile)
times = []
for i in range(n):
    t0 = time.perf_counter()
    if proxy:
        s = socket.create_connection(("127.0.0.1", 3128))
        s.sendall(b"CONNECT allowed.test:%d HTTP/1.1\r\nHost: allowed.test:%d\r\n\r\n" % (port, port))
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(4096)
        assert head.startswith(b"HTTP/1.1 200"), head
    else:
        s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t = ctx.wrap_socket(s, server_hostname="allowed.test")
    t.sendall(b"GET / HTTP/1.1\r\nHost: allowed.test\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n" % auth)
    got = b""
    while True:
        b = t.recv(65536)
        if not b:
            break
        got += b
    t.close()
    assert got.endswith(b"ok\n"), got
    times.append(time.perf_counter() - t0)
print(json.dumps(times))
"""


def https_server(cert, key):
    """A minimal HTTPS server: one short answer per connection, a thread per connection."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(128)

    def serve(c):
        try:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            t = ctx.wrap_socket(c, server_side=True)
            req = b""
            while b"\r\n\r\n" not in req:
                b = t.recv(4096)
                if not b:
                    return
                req += b
            t.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
            t.close()
        except OSError:
            pass

    def loop():
        while True:
            c, _ = ls.accept()
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    return ls.getsockname()[1]


def blast_server(size):
    """A plain HTTP server that answers every request with `size` bytes, as fast as it can."""
    chunk = b"x" * (4 << 20)
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)

    def serve(c):
        try:
            req = b""
            while b"\r\n\r\n" not in req:
                b = c.recv(4096)
                if not b:
                    return
                req += b
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % size)
            left = size
            while left > 0:
                n = min(left, len(chunk))
                c.sendall(memoryview(chunk)[:n])
                left -= n
            c.close()
        except OSError:
            pass

    def loop():
        while True:
            c, _ = ls.accept()
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    return ls.getsockname()[1]


class Daemon:
    def __init__(self, sbx, *opts):
        self.p = subprocess.Popen([sbx, "serve", "--stdio", *opts], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.n = 0

    def call(self, method, params):
        self.n += 1
        self.p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params}) + "\n").encode())
        self.p.stdin.flush()
        while True:
            msg = json.loads(self.p.stdout.readline())
            if msg.get("id") == self.n:
                if "error" in msg:
                    raise RuntimeError(msg)
                return msg["result"]

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sbx", default=os.environ.get("SBX_BIN") or os.path.join(HERE, "..", "build", "src", "cli", "sbx"))
    ap.add_argument("--n", type=int, default=200, help="HTTPS requests per round and side")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--size", type=int, default=1024, help="MiB per download")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="sbx-bench-egress-")
    cert, key, hosts = (os.path.join(d, f) for f in ("cert.pem", "key.pem", "hosts"))
    # An EC key: the handshake is the client's and server's CPU, the same on both sides.
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-days", "1", "-subj", "/CN=allowed.test", "-addext", "subjectAltName=DNS:allowed.test",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    with open(hosts, "w") as f:
        f.write("127.0.0.1 allowed.test\n")
    hport = https_server(cert, key)
    size = a.size << 20
    bport = blast_server(size)
    dm = Daemon(a.sbx, "--egress-hosts", hosts, "--egress-allow-private", "127.0.0.1/32", "--egress-ca", cert)
    try:
        sid = dm.call("sandbox.create", {"network": "allowlist", "networkAllow": ["allowed.test:*"]})["sandboxId"]
        client = os.path.join(d, "client.py")
        with open(client, "w") as f:
            f.write(CLIENT)
        with open(cert) as f:
            pem = f.read()
        sec = dm.call("sandbox.create", {"network": "allowlist", "networkAllow": ["allowed.test:*"], "secrets": {
            "TOKEN": {"value": "sk-bench-" + "0123456789abcdef" * 2, "hosts": ["allowed.test:*"]}}})["sandboxId"]
        for box in (sid, sec):
            for path, text in (("/tmp/client.py", CLIENT), ("/tmp/ca.pem", pem)):
                dm.call("files.write", {"sandboxId": box, "path": path, "data": base64.b64encode(text.encode()).decode()})
        direct, proxied, injected = [], [], []
        for r in range(a.rounds):
            cp = subprocess.run([sys.executable, client, str(hport), str(a.n), "0", cert], capture_output=True, check=True)
            direct += json.loads(cp.stdout)[10:]
            res = dm.call("run", {"sandboxId": sid, "command": f"python3 /tmp/client.py {hport} {a.n} 1 /tmp/ca.pem",
                                  "timeoutMs": 300000})
            assert res["exitCode"] == 0, res
            proxied += json.loads(res["stdout"])[10:]
            res = dm.call("run", {"sandboxId": sec, "command": f"python3 /tmp/client.py {hport} {a.n} 1 "
                                  "/etc/sbx/ca-certificates.crt", "timeoutMs": 300000})
            assert res["exitCode"] == 0, res
            injected += json.loads(res["stdout"])[10:]
        ms = lambda v, q: pct(v, q) * 1000
        rows = [("HTTPS request (new connection, TLS, GET), direct on the host", direct),
                ("the same inside an allowlist sandbox, through CONNECT", proxied),
                ("the same with a proxy secret: TLS ended at the proxy, value injected", injected)]
        print(f"| What | p50 ms | p90 ms | p99 ms | N |\n|---|---|---|---|---|")
        for name, v in rows:
            print(f"| {name} | {ms(v, .5):.3f} | {ms(v, .9):.3f} | {ms(v, .99):.3f} | {len(v)} |")
        print(f"| **added by the proxy** | **{ms(proxied, .5) - ms(direct, .5):.3f}** | "
              f"{ms(proxied, .9) - ms(direct, .9):.3f} | {ms(proxied, .99) - ms(direct, .99):.3f} | |")
        print(f"| **added by secret injection, over the plain tunnel** | **{ms(injected, .5) - ms(proxied, .5):.3f}** | "
              f"{ms(injected, .9) - ms(proxied, .9):.3f} | {ms(injected, .99) - ms(proxied, .99):.3f} | |")
        print()
        print("| Download of %d MiB | MB/s (runs) | median |\n|---|---|---|" % a.size)
        for name, inside in (("direct on the host (curl)", False), ("through the CONNECT tunnel (curl -p)", True)):
            speeds = []
            for _ in range(3):
                cmd = (f"curl -sS -p -o /dev/null -w '%{{speed_download}} %{{size_download}}' "
                       f"http://allowed.test:{bport}/big")
                if inside:
                    res = dm.call("run", {"sandboxId": sid, "command": cmd, "timeoutMs": 300000})
                    out = res["stdout"]
                else:
                    out = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{speed_download} %{size_download}",
                                          f"http://127.0.0.1:{bport}/big"], capture_output=True, text=True).stdout
                speed, got = out.split()
                assert int(float(got)) == size, out
                speeds.append(float(speed) / 1e6)
            print(f"| {name} | {', '.join(f'{s:.0f}' for s in speeds)} | **{statistics.median(speeds):.0f}** |")
    finally:
        dm.close()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
