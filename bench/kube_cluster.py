#!/usr/bin/python3
"""sbx on Kubernetes: the cluster path against the single daemon, and one node holding a thousand
pods. Everything in one network namespace (tests/kube/cluster.py: etcd, kube-apiserver,
kube-scheduler and kube-controller-manager 1.20.2 built from Debian's source package, sbx
daemons as virtual nodes, the gateway).

  1. create -> first result through the cluster (E2B's API on the gateway: POST /sandboxes,
     then envd's process.Process/Start of `echo hi` forwarded to the pod's node, read to its
     end), --n sandboxes one after another over three nodes; then the same two calls against
     one daemon's own door (sbx serve --http), for the single-daemon path. p50 and p99.
  2. Where the cluster's time goes: --n pods made directly (POST, the admin's token), their
     events read off a watch: POST answered, bound by kube-scheduler (spec.nodeName set), Running
     as the node wrote it; the rest of (1) is the gateway's own.
  3. --pods pods (a Deployment of `sleep`) on one virtual node: time until all run, the daemon's
     RSS, every pod's IP distinct.

Prints Markdown on stdout, progress on stderr. Needs root and the control plane's binaries
(tests/kube/build-kubernetes.sh). Usage: bench/kube_cluster.py [--sbx PATH] [--n 100] [--pods 1000]
"""
import argparse
import json
import os
import platform
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "kube"))
import cluster as kc  # noqa: E402

TOL = {"key": "sbx.dev/sandbox", "operator": "Exists", "effect": "NoSchedule"}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def envelope(msg):
    b = json.dumps(msg).encode()
    return struct.pack(">BI", 0, len(b)) + b


def first_result(base, sb):
    """envd's Start of `echo hi`, read to the stream's end: the stdout it gave."""
    req = urllib.request.Request(base + "/process.Process/Start", method="POST",
                                 data=envelope({"process": {"cmd": "/bin/bash", "args": ["-c", "echo hi"]}}),
                                 headers={"E2b-Sandbox-Id": sb["sandboxID"], "X-Access-Token": sb["envdAccessToken"],
                                          "Connect-Protocol-Version": "1",
                                          "Content-Type": "application/connect+json"})
    data = urllib.request.urlopen(req, timeout=60).read()
    out = b""
    while data:
        flags, n = struct.unpack(">BI", data[:5])
        m = json.loads(data[5:5 + n])
        ev = m.get("event", {})
        if "data" in ev and "stdout" in ev["data"]:
            import base64
            out += base64.b64decode(ev["data"]["stdout"])
        data = data[5 + n:]
    return out


def e2b_call(base, key, method, path, body=None):
    req = urllib.request.Request(base + path, method=method, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"X-API-KEY": key, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=90) as r:
        raw = r.read()
    return json.loads(raw) if raw else None


def create_to_result(base, key, n, label):
    creates, totals = [], []
    for i in range(n):
        t0 = time.perf_counter()
        sb = e2b_call(base, key, "POST", "/sandboxes", {"templateID": "base", "timeout": 600})
        t1 = time.perf_counter()
        out = first_result(base, sb)
        t2 = time.perf_counter()
        assert out == b"hi\n", out
        creates.append((t1 - t0) * 1000)
        totals.append((t2 - t0) * 1000)
        e2b_call(base, key, "DELETE", f"/sandboxes/{sb['sandboxID']}")
        if (i + 1) % 20 == 0:
            log(f"{label}: {i + 1}/{n}")
    return creates, totals


class PodWatch:
    """A watch on the default namespace's pods: when each was first seen bound and running."""

    def __init__(self, c):
        self.c = c
        self.bound, self.running = {}, {}
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        import ssl
        ctx = ssl.create_default_context(cafile=str(self.c.dir / "ca.crt"))
        req = urllib.request.Request(kc.API + "/api/v1/namespaces/default/pods?watch=1",
                                     headers={"Authorization": "Bearer " + self.c.tokens["admin"]})
        with urllib.request.urlopen(req, context=ctx, timeout=3600) as r:
            for line in r:
                now = time.perf_counter()
                o = json.loads(line)["object"]
                name = o["metadata"]["name"]
                if o["spec"].get("nodeName"):
                    self.bound.setdefault(name, now)
                if o.get("status", {}).get("phase") == "Running":
                    self.running.setdefault(name, now)
                if self.stop:
                    return


def breakdown(c, n):
    w = PodWatch(c)
    time.sleep(0.5)
    posts, binds, runs = [], [], []
    for i in range(n):
        name = f"bd-{i}"
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
               "spec": {"tolerations": [TOL], "nodeSelector": {"sbx.dev/node": "true"}, "restartPolicy": "Never",
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "c", "image": "sbx.dev/host", "command": ["sleep", "600"]}]}}
        t0 = time.perf_counter()
        c.api("POST", "/api/v1/namespaces/default/pods", pod)
        t1 = time.perf_counter()
        c.wait(lambda: name in w.running, 60, f"{name} to run")
        posts.append((t1 - t0) * 1000)
        binds.append((w.bound[name] - t1) * 1000)
        runs.append((w.running[name] - w.bound[name]) * 1000)
        c.api("DELETE", f"/api/v1/namespaces/default/pods/{name}", {"gracePeriodSeconds": 0})
    w.stop = True
    return posts, binds, runs


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def thousand(c, pods):
    c.kubectl("cordon", "sbx-1")
    c.kubectl("cordon", "sbx-2")
    c.kubectl("cordon", "sbx-3")
    name = c.add_node(4, extra=("--pod-cidr", "10.89.0.0/21", "--pod-bridge", "sbxk4big"))
    rss0 = rss_kib(c.procs[name].pid)
    # What the node offers (its fds: a pod is a sandbox and a process), asked no more of.
    capacity = int(c.api("GET", f"/api/v1/nodes/{name}")["status"]["capacity"]["pods"])
    asked = pods
    pods = min(pods, capacity)
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "many"},
           "spec": {"replicas": pods, "selector": {"matchLabels": {"app": "many"}},
                    "template": {"metadata": {"labels": {"app": "many"}},
                                 "spec": {"tolerations": [TOL], "terminationGracePeriodSeconds": 0,
                                          "automountServiceAccountToken": False, "enableServiceLinks": False,
                                          "containers": [{"name": "c", "image": "sbx.dev/host",
                                                          "command": ["sleep", "3600"]}]}}}}
    t0 = time.perf_counter()
    c.api("POST", "/apis/apps/v1/namespaces/default/deployments", dep)
    last = [0]

    def all_running():
        items = c.api("GET", "/api/v1/namespaces/default/pods?labelSelector=app%3Dmany")["items"]
        r = [p for p in items if p.get("status", {}).get("phase") == "Running"]
        if len(r) // 100 != last[0] // 100:
            log(f"{len(r)} of {pods} pods running ({time.perf_counter() - t0:.0f} s)")
        last[0] = len(r)
        return len(r) == pods and r
    c.wait(all_running, 1800, f"{pods} pods to run")
    took = time.perf_counter() - t0
    items = c.api("GET", "/api/v1/namespaces/default/pods?labelSelector=app%3Dmany")["items"]
    ips = {p["status"]["podIP"] for p in items}
    nodes = {p["spec"]["nodeName"] for p in items}
    rss1 = rss_kib(c.procs[name].pid)
    fds = len(os.listdir(f"/proc/{c.procs[name].pid}/fd"))
    return took, len(ips), nodes, rss0, rss1, pods, capacity, asked, fds


def fds_limit():
    import resource
    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sbx", default=os.path.join(ROOT, "build", "src", "cli", "sbx"))
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--pods", type=int, default=1000)
    a = ap.parse_args()
    why = kc.missing()
    if why:
        sys.exit(f"kube_cluster: {why}")
    c = kc.Cluster(a.sbx, lease_s=20, grace_s=40)
    try:
        for i in (1, 2, 3):
            c.add_node(i)
        c.start_gateway()
        # The same daemon build as a single door, in the same namespace.
        single = subprocess.Popen([a.sbx, "serve", "--socket", str(c.dir / "single.sock"), "--pool", "0",
                                   "--http", f"{kc.NET}.1:3001", "--api-key", c.API_KEY],
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        c.wait(lambda: socket.create_connection((f"{kc.NET}.1", 3001), timeout=1).close() or True, 30, "the door")
        create_to_result(c.GATEWAY, c.API_KEY, 5, "warm-up")
        cc, ct = create_to_result(c.GATEWAY, c.API_KEY, a.n, "cluster")
        sc, st = create_to_result(f"http://{kc.NET}.1:3001", c.API_KEY, a.n, "single")
        single.terminate()
        single.wait()
        posts, binds, runs = breakdown(c, min(a.n, 50))
        took, n_ips, nodes, rss0, rss1, pods, capacity, asked, fds = thousand(c, a.pods)
    finally:
        c.close()
    print(f"## sbx on Kubernetes ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, "
          f"{os.cpu_count()} CPUs, kernel {platform.release()})\n")
    print(f"`bench/kube_cluster.py --n {a.n} --pods {a.pods}`: Kubernetes 1.20.2 (Debian's source package), "
          "etcd 3.4, three sbx virtual nodes and the gateway, one machine, one network namespace.\n")
    print("| path | create p50 | create p99 | create → first result p50 | p99 |")
    print("|---|---|---|---|---|")
    for label, cr, tot in (("cluster: gateway → API server → scheduler → node", cc, ct),
                           ("single daemon's door", sc, st)):
        print(f"| {label} | {pct(cr, 50):.1f} ms | {pct(cr, 99):.1f} ms | {pct(tot, 50):.1f} ms | {pct(tot, 99):.1f} ms |")
    print()
    print(f"Where the cluster's time goes ({len(posts)} pods of one `sleep` container made directly by the "
          "benchmark, a Python client with a new TLS connection per call, their events read off a watch), "
          "p50 / p99:\n")
    print(f"- the API server takes the pod (POST answered): {pct(posts, 50):.1f} / {pct(posts, 99):.1f} ms")
    print(f"- kube-scheduler binds it: {pct(binds, 50):.1f} / {pct(binds, 99):.1f} ms")
    print(f"- the node sees it, makes its sandbox on the pod network, starts the container and writes "
          f"Running: {pct(runs, 50):.1f} / {pct(runs, 99):.1f} ms")
    print(f"- the first call's forward through the gateway to the node's door, against the door alone: "
          f"{pct(ct, 50) - pct(cc, 50):.1f} ms against {pct(st, 50) - pct(sc, 50):.1f} ms at p50\n")
    print(f"One virtual node offering {capacity} pods (its fds: RLIMIT_NOFILE {fds_limit()} at 24 per one-process "
          f"pod), {asked} asked: {pods} pods (a Deployment of `sleep`) all Running after {took:.1f} s, "
          f"{n_ips} distinct pod IPs, node(s) {sorted(nodes)}; the node's daemon RSS {rss0 / 1024:.1f} → "
          f"{rss1 / 1024:.1f} MiB ({(rss1 - rss0) / max(1, pods):.1f} KiB per pod), {fds} fds open.")


if __name__ == "__main__":
    main()
