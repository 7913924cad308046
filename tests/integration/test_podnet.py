"""The pod network (sbx serve --pod-cidr, network "pod"): a sandbox with an eth0 on a bridge and
an address of its own, reached by the host and by the network's other sandboxes. Each test runs
its daemon in a network namespace of its own (tests/kube/cluster.py's NetNs), so the bridge
never touches the host's network."""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import REPO, SBX_BIN, sbx_popen, stop_daemon, wait_until

sys.path.insert(0, str(REPO / "tests" / "kube"))
import cluster as kc  # noqa: E402

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces, bridges)")


class Daemon:
    def __init__(self, tmp_path, *flags):
        self.sock = tmp_path / "s.sock"
        self.p = subprocess.Popen([SBX_BIN, "serve", "--socket", str(self.sock), "--pool", "0", *flags],
                                  stderr=subprocess.PIPE)
        if not wait_until(lambda: self.sock.exists() or self.p.poll() is not None, timeout=10) or self.p.poll() is not None:
            raise AssertionError(self.p.stderr.read().decode())
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(str(self.sock))
        self.f = self.s.makefile("rw")
        self.n = 0

    def call(self, method, **params):
        self.n += 1
        self.f.write(json.dumps({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params}) + "\n")
        self.f.flush()
        while True:
            r = json.loads(self.f.readline())
            if r.get("id") == self.n:
                return r

    def stop(self):
        self.s.close()
        stop_daemon(self.p)


@pytest.fixture
def netns():
    ns = kc.NetNs()
    yield ns
    ns.leave()


def test_pod_sandboxes_reach_each_other_and_the_host_reaches_them(netns, tmp_path):
    d = Daemon(tmp_path, "--pod-cidr", "10.66.0.0/24", "--pod-bridge", "sbxtest0")
    try:
        a = d.call("sandbox.create", network="pod")["result"]
        b = d.call("sandbox.create", network="pod")["result"]
        assert a["ip"].startswith("10.66.0.") and b["ip"].startswith("10.66.0.") and a["ip"] != b["ip"]
        listed = {s["sandboxId"]: s.get("ip") for s in d.call("sandbox.list")["result"]["sandboxes"]}
        assert listed[a["sandboxId"]] == a["ip"]
        r = d.call("run", sandboxId=a["sandboxId"], command="cat /proc/net/route | awk 'NR==2{print $1, $3}'")
        assert r["result"]["stdout"] == "eth0 0100420A\n"  # default via 10.66.0.1, little-endian hex
        d.call("process.start", sandboxId=a["sandboxId"],
               command="exec /usr/bin/python3 -m http.server 8080 --bind 0.0.0.0")
        url = f"http://{a['ip']}:8080/"

        def up():
            try:
                return urllib.request.urlopen(url, timeout=2).status == 200
            except OSError:
                return False
        assert wait_until(up, timeout=20), "the host did not reach the pod sandbox"
        r = d.call("run", sandboxId=b["sandboxId"], command=f"curl -s -o /dev/null -w '%{{http_code}}' {url}")
        assert r["result"]["stdout"] == "200", r
        # A sandbox without the pod network does not reach it.
        c = d.call("sandbox.create")["result"]
        assert "ip" not in c
        r = d.call("run", sandboxId=c["sandboxId"], command=f"curl -s -m 2 {url}")
        assert r["result"]["exitCode"] != 0
        # A destroyed sandbox's veth goes with its namespace.
        d.call("sandbox.destroy", sandboxId=a["sandboxId"])
        assert wait_until(lambda: not up(), timeout=10)
    finally:
        d.stop()
    # The bridge stays (the next daemon takes it as it is); no veth is left on it.
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "sbxtest0" in links
    assert wait_until(lambda: "master sbxtest0" not in subprocess.run(["ip", "-o", "link"], capture_output=True,
                                                                      text=True).stdout, timeout=10)


def test_pod_network_refusals(netns, tmp_path):
    d = Daemon(tmp_path)
    try:
        r = d.call("sandbox.create", network="pod")
        assert r["error"]["code"] == -32602 and "--pod-cidr" in r["error"]["message"], r
        r = d.call("sandbox.create", network="bridge")
        assert r["error"]["code"] == -32602 and '"pod"' in r["error"]["message"], r
        assert d.call("sandbox.create")["result"]["sandboxId"]  # the connection still serves
    finally:
        d.stop()
    for bad, words in (("10.66.0.1/24", "host bits"), ("10.66.0.0/31", "8 to 30"), ("nonsense", "A.B.C.D/N"),
                       ("10.0.0.0/8", "at most a /16")):
        cp = subprocess.run([SBX_BIN, "serve", "--socket", str(tmp_path / "x.sock"), "--pod-cidr", bad],
                            capture_output=True, text=True, timeout=20)
        assert cp.returncode != 0 and words in cp.stderr, (bad, cp.stderr)
    cp = subprocess.run([SBX_BIN, "serve", "--socket", str(tmp_path / "x.sock"), "--pod-bridge", "b0"],
                        capture_output=True, text=True, timeout=20)
    assert cp.returncode != 0 and "--pod-bridge needs --pod-cidr" in cp.stderr


def test_pod_network_full(netns, tmp_path):
    d = Daemon(tmp_path, "--pod-cidr", "10.67.0.0/29", "--pod-bridge", "sbxtest1")  # 5 addresses
    try:
        ids = [d.call("sandbox.create", network="pod")["result"]["sandboxId"] for _ in range(5)]
        r = d.call("sandbox.create", network="pod")
        assert "no free address" in r["error"]["message"], r
        d.call("sandbox.destroy", sandboxId=ids[0])
        assert d.call("sandbox.create", network="pod")["result"]["ip"].startswith("10.67.0.")
    finally:
        d.stop()


def test_kube_flags_refused_saying_why(netns, tmp_path):
    """sbx serve's Kubernetes flags: each wrong use refused with one line naming it, before
    anything is registered."""
    yaml = tmp_path / "config.yaml"
    yaml.write_text("apiVersion: v1\nkind: Config\n")
    notjson = tmp_path / "bad.json"
    notjson.write_text("{not json")
    nocontext = tmp_path / "empty.json"
    nocontext.write_text("{}")
    base = ["--pod-cidr", "10.68.0.0/24", "--pod-bridge", "sbxtest2"]
    node = base + ["--kube-node", "n1", "--kube-node-ip", "10.68.0.1"]
    cases = [
        (["--kube-node", "n1", "--kube-node-ip", "10.0.0.1", "--kubeconfig", str(nocontext)], "needs --pod-cidr"),
        (base + ["--kube-node", "n1", "--kubeconfig", str(nocontext)], "--kube-node-ip"),
        (base + ["--kube-node", "Not_A_Name", "--kube-node-ip", "1.2.3.4"], "a DNS name"),
        (node + ["--kubeconfig", str(yaml)], "YAML"),
        (node + ["--kubeconfig", str(notjson)], "line 1"),
        (node + ["--kubeconfig", str(nocontext)], "no current-context"),
        (node + ["--kubeconfig", str(tmp_path / "missing.json")], "No such file"),
        (node + ["--kube-lease-seconds", "2"], "--kube-lease-seconds"),
        (node + ["--kube-label", "novalue"], "--kube-label NAME=VALUE"),
        (["--kube-node-ip", "1.2.3.4"], "need --kube-node"),
        (["--kube-namespace", "x"], "--kube-namespace needs --kube-gateway"),
        (["--kube-gateway", "127.0.0.1:0", "--kubeconfig", str(yaml)], "YAML"),
    ]
    for flags, words in cases:
        cp = subprocess.run([SBX_BIN, "serve", "--socket", str(tmp_path / "k.sock"), "--pool", "0", *flags],
                            capture_output=True, text=True, timeout=20)
        assert cp.returncode != 0 and words in cp.stderr, (flags, cp.stderr)
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"current-context": "c", "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                                "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
                                "users": [{"name": "u", "user": {"token": "t"}}]}))
    plain = tmp_path / "plain.json"
    plain.write_text(good.read_text().replace("https://", "http://"))
    for flags, words in (
            (node + ["--kubeconfig", str(good), "--kube-kubelet-cert", str(yaml)], "--kube-kubelet-cert, -key, -client-ca"),
            (node + ["--kubeconfig", str(plain)], "is not https://")):
        cp = subprocess.run([SBX_BIN, "serve", "--socket", str(tmp_path / "k.sock"), "--pool", "0", *flags],
                            capture_output=True, text=True, timeout=20)
        assert cp.returncode != 0 and words in cp.stderr, (flags, cp.stderr)
