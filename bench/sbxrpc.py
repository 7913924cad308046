"""What the Python benchmarks share: a plain JSON-RPC client of an sbx daemon's socket (no SDK,
so its own cost stays out of the figures) and a daemon on a socket of its own."""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time


def now():
    return time.clock_gettime(time.CLOCK_MONOTONIC)


class Rpc:
    """Newline-delimited JSON-RPC over the daemon's socket, one request at a time."""

    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(path)
        self.f = self.s.makefile("rb")
        self.id = 0

    def call(self, method, params=None):
        self.id += 1
        msg = {"jsonrpc": "2.0", "id": self.id, "method": method}
        if params is not None:
            msg["params"] = params
        self.s.sendall((json.dumps(msg) + "\n").encode())
        while True:
            ans = json.loads(self.f.readline())
            if ans.get("id") == self.id:
                if "error" in ans:
                    raise RuntimeError(f"{method}: {ans['error']}")
                return ans["result"]

    def close(self):
        # The file makefile() made holds the socket open too: both, or the daemon sees no
        # close (and keeps the connection's sandboxes) until they are collected.
        self.f.close()
        self.s.close()


class Daemon:
    """`sbx serve --socket` in a directory of its own, with args; rpc is a connection to it."""

    def __init__(self, sbx, *args):
        self.dir = tempfile.mkdtemp(prefix="sbx-bench-")
        self.sock = os.path.join(self.dir, "s")
        self.p = subprocess.Popen([sbx, "serve", "--socket", self.sock, *args], stderr=subprocess.DEVNULL)
        t = now()
        while not os.path.exists(self.sock):
            if now() - t > 10 or self.p.poll() is not None:
                raise RuntimeError("sbx serve did not start")
            time.sleep(0.01)
        self.rpc = Rpc(self.sock)

    def stop(self):
        self.rpc.close()
        self.p.terminate()
        self.p.wait(60)
        shutil.rmtree(self.dir, ignore_errors=True)


def ensure_docker():
    """Docker's daemon: the running one, else Debian's dockerd started here (stopped at the end)."""
    if not shutil.which("docker") or not shutil.which("dockerd"):
        return None, "not installed (apt-get install docker.io)"
    if subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0:
        return None, None
    p = subprocess.Popen(["dockerd", "--iptables=false", "--ip6tables=false", "--bridge=none"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t = now()
    while now() - t < 30:
        if subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0:
            return p, None
        time.sleep(0.5)
    p.terminate()
    return None, "dockerd did not start"
