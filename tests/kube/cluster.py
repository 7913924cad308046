"""A real Kubernetes control plane (1.20.2, built from Debian's source package by
build-kubernetes.sh) and sbx daemons as its nodes, all inside a network namespace of its own.

Cluster() enters a new network namespace in the calling thread (setns is per thread: every
process started from this thread after is in it too, and leave() puts the thread back), puts the
addresses on an interface there (a bridge with no port), and starts etcd, kube-apiserver, kube-scheduler and
kube-controller-manager on them. add_node() starts `sbx serve --kube-node` with its own pod
network (a bridge of that namespace). Nothing is reachable from or routed to the host's own
network; everything goes at close().

For the suite (tests/integration/test_kube.py) and the benchmark (bench/kube_cluster.py).
"""
import ctypes
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("SBX_KUBE_CACHE", "/var/cache/sbx/kubernetes-1.20.2"))
BIN = CACHE / "bin"
CLONE_NEWNET = 0x40000000
NET = "10.77.0"          # the control plane at .1, node N at .(10 + N)
API = f"https://{NET}.1:6443"

_libc = ctypes.CDLL(None, use_errno=True)


def missing():
    """Why a cluster cannot be had here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, bridges)"
    for b in ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl"):
        if not (BIN / b).exists():
            return f"{BIN / b} is missing: tests/kube/build-kubernetes.sh builds it (test.sh runs it)"
    for tool in ("etcd", "openssl", "ip"):
        if not shutil.which(tool):
            return f"{tool} is missing (etcd-server, openssl, iproute2)"
    return None


def _check(rc):
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


class NetNs:
    """A new network namespace for this thread (and what it starts) until leave(): loopback up,
    nothing else."""

    def __init__(self):
        self._home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        _check(_libc.unshare(CLONE_NEWNET))
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)

    def leave(self):
        _check(_libc.setns(self._home, CLONE_NEWNET))
        os.close(self._home)


def _run(*argv, **kw):
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw)


class Cluster:
    def __init__(self, sbx_bin, lease_s=8, grace_s=16):
        self.sbx_bin = sbx_bin
        self.dir = Path(tempfile.mkdtemp(prefix="sbx-kube-"))
        self.dir.chmod(0o755)  # the image stores in it must be in the sandboxes' reach
        self.procs = {}
        self.nodes = {}
        self._home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self.lease_s = lease_s
        self.grace_s = grace_s
        try:
            _check(_libc.unshare(CLONE_NEWNET))
            self._network()
            self._certs()
            self._control_plane()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ setup

    def _network(self):
        _run("ip", "link", "set", "lo", "up")
        _run("ip", "link", "add", "kube0", "type", "bridge")  # no dummy module on every kernel
        _run("ip", "link", "set", "kube0", "up")
        for last in (1, 11, 12, 13, 14, 15):
            _run("ip", "addr", "add", f"{NET}.{last}/24", "dev", "kube0")
        # The nodes' bridges are routed to each other through this namespace.
        Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")

    def _certs(self):
        d = self.dir
        sh = lambda *a: _run("openssl", *a, cwd=d)
        sh("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
           "-subj", "/CN=sbx-test-ca")
        (d / "san.cnf").write_text(
            "[req]\ndistinguished_name=dn\n[dn]\n[ext]\nsubjectAltName=IP:%s.1,IP:10.96.0.1,DNS:kubernetes,"
            "DNS:kubernetes.default,DNS:kubernetes.default.svc\n" % NET)
        sh("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "api.key", "-out", "api.csr", "-subj",
           "/CN=kube-apiserver")
        sh("x509", "-req", "-in", "api.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out",
           "api.crt", "-days", "2", "-extfile", "san.cnf", "-extensions", "ext")
        # The API server's client certificate for kubelets, and each node's serving one (its IP).
        sh("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "kubelet-client.key", "-out", "kc.csr", "-subj",
           "/CN=kube-apiserver-kubelet-client/O=system:masters")
        sh("x509", "-req", "-in", "kc.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out",
           "kubelet-client.crt", "-days", "2")
        for i in range(1, 6):
            (d / f"node{i}.cnf").write_text("[req]\ndistinguished_name=dn\n[dn]\n[ext]\nsubjectAltName=IP:%s.%d\n"
                                            % (NET, 10 + i))
            sh("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"node{i}.key", "-out", f"node{i}.csr", "-subj",
               f"/CN=sbx-{i}")
            sh("x509", "-req", "-in", f"node{i}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out",
               f"node{i}.crt", "-days", "2", "-extfile", f"node{i}.cnf", "-extensions", "ext")
        sh("genrsa", "-out", "sa.key", "2048")
        sh("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
        self.tokens = {"admin": os.urandom(16).hex(), "gateway": os.urandom(16).hex()}
        lines = [f'{self.tokens["admin"]},admin,admin,"system:masters"',
                 # The gateway's own identity: only what deploy/kubernetes/gateway.yaml's role gives.
                 f'{self.tokens["gateway"]},sbx-gateway,sbx-gateway']
        for i in range(1, 6):
            t = os.urandom(16).hex()
            self.tokens[f"sbx-{i}"] = t
            # A node's identity (system:node:NAME in system:nodes) is what the Node authorizer
            # and NodeRestriction know; sbx nodes are also given the cluster role below.
            lines.append(f'{t},system:node:sbx-{i},node-{i},"system:nodes"')
        (d / "tokens.csv").write_text("\n".join(lines) + "\n")
        for who, token in self.tokens.items():
            self._kubeconfig(d / f"{who}.kubeconfig", token)

    def _kubeconfig(self, path, token):
        ca = (self.dir / "ca.crt").read_text()
        import base64
        cfg = {
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {
                "server": API, "certificate-authority-data": base64.b64encode(ca.encode()).decode()}}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        }
        path.write_text(json.dumps(cfg))

    def _start(self, name, argv):
        log = open(self.dir / f"{name}.log", "w")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
        log.close()

    def _control_plane(self):
        d = self.dir
        self._start("etcd", ["etcd", "--data-dir", str(d / "etcd"), "--listen-client-urls", f"http://{NET}.1:2379",
                             "--advertise-client-urls", f"http://{NET}.1:2379", "--listen-peer-urls",
                             f"http://{NET}.1:2380", "--initial-advertise-peer-urls", f"http://{NET}.1:2380",
                             "--initial-cluster", f"default=http://{NET}.1:2380"])
        self._start("apiserver", [
            str(BIN / "kube-apiserver"), f"--etcd-servers=http://{NET}.1:2379", f"--bind-address={NET}.1",
            f"--advertise-address={NET}.1", "--secure-port=6443", "--insecure-port=0",
            f"--tls-cert-file={d}/api.crt", f"--tls-private-key-file={d}/api.key", f"--client-ca-file={d}/ca.crt",
            f"--token-auth-file={d}/tokens.csv", "--authorization-mode=Node,RBAC",
            f"--service-account-key-file={d}/sa.pub", f"--service-account-signing-key-file={d}/sa.key",
            "--service-account-issuer=https://kubernetes.default.svc", "--service-cluster-ip-range=10.96.0.0/16",
            "--enable-admission-plugins=NodeRestriction", "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-certificate-authority={d}/ca.crt", f"--kubelet-client-certificate={d}/kubelet-client.crt",
            f"--kubelet-client-key={d}/kubelet-client.key", "--allow-privileged=true",
            f"--cert-dir={d}/apiserver-certs", "--v=1"])
        self.wait(lambda: self.api("GET", "/readyz", raw=True) == "ok", 120, "the API server to be ready")
        admin = str(d / "admin.kubeconfig")
        self._start("scheduler", [str(BIN / "kube-scheduler"), f"--kubeconfig={admin}", "--leader-elect=false",
                                  "--port=0", f"--bind-address={NET}.1", "--secure-port=10259"])
        self._start("controller-manager", [
            str(BIN / "kube-controller-manager"), f"--kubeconfig={admin}", "--leader-elect=false", "--port=0",
            f"--bind-address={NET}.1", "--secure-port=10257",
            f"--service-account-private-key-file={d}/sa.key", f"--root-ca-file={d}/ca.crt",
            "--use-service-account-credentials=false", f"--node-monitor-grace-period={self.grace_s}s",
            "--node-monitor-period=2s", "--controllers=*,-nodeipam,-csrsigning,-csrapproving,-csrcleaner"])
        # The sbx nodes' rights besides what the Node authorizer gives system:nodes, and the
        # gateway's, as the manifests define them.
        self.kubectl("apply", "-f", str(REPO / "deploy/kubernetes/rbac.yaml"))
        self.kubectl("create", "clusterrolebinding", "sbx-test-nodes", "--clusterrole=sbx-node", "--group=system:nodes")
        self.kubectl("create", "clusterrolebinding", "sbx-test-gateway", "--clusterrole=sbx-gateway",
                     "--user=sbx-gateway")
        self.wait(lambda: self.api("GET", "/api/v1/namespaces/default/serviceaccounts/default") is not None, 60,
                  "the default service account")

    # ------------------------------------------------------------------ use

    def api(self, method, path, body=None, raw=False, content_type="application/json"):
        """One call with the admin's token: the parsed answer, or None on 404."""
        ctx = ssl.create_default_context(cafile=str(self.dir / "ca.crt"))
        req = urllib.request.Request(API + path, method=method, data=json.dumps(body).encode() if body else None,
                                     headers={"Authorization": "Bearer " + self.tokens["admin"],
                                              "Content-Type": content_type})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
                data = r.read().decode()
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise RuntimeError(f"{method} {path}: {e.code} {e.read().decode()[:300]}") from None
        except OSError:
            return None
        return data if raw else json.loads(data)

    def kubectl(self, *args, check=True, timeout=60):
        r = subprocess.run([str(BIN / "kubectl"), f"--kubeconfig={self.dir}/admin.kubeconfig", *args],
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {r.stderr.strip()}")
        return r

    def wait(self, cond, timeout, what):
        end = time.monotonic() + timeout
        last = None
        while time.monotonic() < end:
            try:
                if cond():
                    return
            except (OSError, RuntimeError, ValueError) as e:
                last = e
            time.sleep(0.2)
        raise TimeoutError(f"waited {timeout} s for {what} (last error: {last}); logs in {self.dir}")

    API_KEY = "sbx-test-key"
    GATEWAY = f"http://{NET}.1:3000"

    def add_node(self, i, extra=()):
        name = f"sbx-{i}"
        sock = self.dir / f"{name}.sock"
        store = self.dir / f"{name}-images"
        argv = [self.sbx_bin, "serve", "--socket", str(sock), "--pool", "0", "--image-store", str(store),
                "--pod-cidr", f"10.88.{i}.0/24", "--pod-bridge", f"sbxk{i}", "--kube-node", name,
                "--kubeconfig", str(self.dir / f"{name}.kubeconfig"), "--kube-node-ip", f"{NET}.{10 + i}",
                "--kube-lease-seconds", str(self.lease_s), "--http", f"{NET}.{10 + i}:49983",
                "--api-key", self.API_KEY, "--kube-kubelet-cert", str(self.dir / f"node{i}.crt"),
                "--kube-kubelet-key", str(self.dir / f"node{i}.key"), "--kube-kubelet-client-ca",
                str(self.dir / "ca.crt"), *extra]
        self._start(name, argv)
        self.nodes[name] = {"sock": sock, "i": i}
        def ready():
            if self.procs[name].poll() is not None:
                raise AssertionError(f"{name} exited: {self.log(name)}")
            return self.node_ready(name)
        self.wait(ready, 60, f"node {name} to be Ready")
        return name

    def start_gateway(self, extra=()):
        argv = [self.sbx_bin, "serve", "--socket", str(self.dir / "gateway.sock"), "--pool", "0",
                "--kube-gateway", f"{NET}.1:3000", "--kubeconfig", str(self.dir / "gateway.kubeconfig"),
                "--api-key", self.API_KEY, *extra]
        self._start("gateway", argv)

        def up():
            if self.procs["gateway"].poll() is not None:
                raise AssertionError(f"the gateway exited: {self.log('gateway')}")
            try:
                urllib.request.urlopen(self.GATEWAY + "/sandboxes", timeout=2)
            except urllib.error.HTTPError:
                return True  # 401 without a key: it answers
            return True
        self.wait(up, 30, "the gateway to listen")

    def node_ready(self, name):
        n = self.api("GET", f"/api/v1/nodes/{name}")
        for c in (n or {}).get("status", {}).get("conditions", []):
            if c["type"] == "Ready":
                return c["status"] == "True"
        return False

    def kill_node(self, name):
        p = self.procs.pop(name)
        p.kill()
        p.wait()

    def pods(self, selector=None, ns="default"):
        q = f"?labelSelector={selector}" if selector else ""
        return self.api("GET", f"/api/v1/namespaces/{ns}/pods{q}")["items"]

    def log(self, name):
        try:
            return (self.dir / f"{name}.log").read_text()[-4000:]
        except OSError:
            return ""

    def close(self):
        # The nodes first (their sandboxes go with them), then the control plane.
        nodes = [n for n in self.procs if n.startswith("sbx-") or n == "gateway"]
        for group in (nodes, [n for n in self.procs if n not in nodes]):
            for name in group:
                self.procs[name].send_signal(signal.SIGTERM)
            for name in group:
                p = self.procs[name]
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs.clear()
        _check(_libc.setns(self._home, CLONE_NEWNET))
        os.close(self._home)
        if os.environ.get("SBX_KUBE_KEEP"):
            print(f"cluster files kept in {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
