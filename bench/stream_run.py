#!/usr/bin/python3
"""`run` with `stream: true` of N bytes past the output cap, over the socket: MB/s of payload
received as `output` notifications, checked byte-exact (sha256 of the streamed bytes against the
generator's own), and the daemon's CPU time. The sandbox keeps the default 1 MiB cap, so the
result holds 1 MiB and says truncated while the stream carries every byte.

The reader does not parse each line as JSON (a JSON parser in Python would be the bottleneck):
the server writes compact JSON and the payload is all 'x' (valid UTF-8, no escapes), so the
data string is cut out of the line between `"data":"` and the next quote; every other line
(the answer) is parsed.

Usage: bench/stream_run.py [--sbx PATH] [--mib N] [--rounds R]
"""
import argparse
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sbx", default=os.path.join(HERE, "..", "build", "src", "cli", "sbx"))
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    n = a.mib << 20
    d = tempfile.mkdtemp(prefix="sbx-bench-stream-")
    path = os.path.join(d, "sock")
    srv = subprocess.Popen([a.sbx, "serve", "--socket", path, "--pool", "0"], stderr=subprocess.DEVNULL)
    try:
        for _ in range(500):
            if os.path.exists(path):
                break
            time.sleep(0.01)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        f = s.makefile("rb", buffering=1 << 20)

        def call(i, method, params):
            s.sendall(json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}).encode() + b"\n")

        call(1, "create", {})
        assert b'"result"' in f.readline()
        want = hashlib.sha256(b"x" * n).hexdigest()
        rates, cpus, ok = [], [], 0
        for rnd in range(a.rounds):
            rid = 100 + rnd
            t0, c0 = time.monotonic(), cpu_s(srv.pid)
            call(rid, "run", {"command": f"head -c {n} /dev/zero | tr '\\0' x", "stream": True, "timeoutMs": 600000})
            h, got, result = hashlib.sha256(), 0, None
            marker = b'"data":"'
            while result is None:
                line = f.readline()
                if not line:
                    raise RuntimeError("server closed")
                if line.startswith(b'{"jsonrpc":"2.0","method":"output"'):
                    i = line.index(marker) + len(marker)
                    j = line.index(b'"', i)
                    h.update(line[i:j])
                    got += j - i
                else:
                    m = json.loads(line)
                    if m.get("id") == rid:
                        result = m
            dt = time.monotonic() - t0
            rates.append(got / dt / 1e6)
            cpus.append(cpu_s(srv.pid) - c0)
            r = result["result"]
            exact = got == n and h.hexdigest() == want and len(r["stdout"]) == 1 << 20 and r["truncated"]["stdout"]
            ok += exact
        rates.sort()
        print(f"`run` stream of {a.mib} MiB of 'x' over the socket, default 1 MiB cap, {a.rounds} rounds: "
              f"median {rates[len(rates) // 2]:.0f} MB/s (min {rates[0]:.0f}, max {rates[-1]:.0f}); "
              f"byte-exact {ok}/{a.rounds}; daemon CPU {sum(cpus) / len(cpus):.2f} s per round")
        return 0 if ok == a.rounds else 1
    finally:
        srv.terminate()
        srv.wait(30)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
