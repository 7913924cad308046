"""sbx daemons as Kubernetes nodes: a real control plane (1.20.2 from Debian's source package,
tests/kube/build-kubernetes.sh), three `sbx serve --kube-node` daemons, every address inside a
network namespace the cluster makes (tests/kube/cluster.py). One cluster for the module; the
tests run in order (the last ones kill a node)."""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import REPO, SBX_BIN, npm_packages, sbx_processes

sys.path.insert(0, str(REPO / "tests" / "kube"))
import cluster as kc  # noqa: E402

pytestmark = pytest.mark.skipif(kc.missing() is not None, reason=f"no Kubernetes here: {kc.missing()}")

TOLERATION = {"key": "sbx.dev/sandbox", "operator": "Exists", "effect": "NoSchedule"}
PY = "/usr/bin/python3"


@pytest.fixture(scope="module")
def kube():
    c = kc.Cluster(SBX_BIN, lease_s=8, grace_s=16)
    try:
        for i in (1, 2, 3):
            c.add_node(i)
        c.start_gateway()
        c.pids = [p.pid for n, p in c.procs.items() if n.startswith("sbx-")]
        yield c
    finally:
        pids = [p.pid for n, p in c.procs.items() if n.startswith("sbx-")]
        c.close()
    # Every sandbox went with its daemon.
    assert not sbx_processes(pids), "sandbox processes left after the nodes stopped"


def rpc(sock, method, params):
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(sock))
    f = s.makefile("rw")
    f.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}) + "\n")
    f.flush()
    while True:  # notifications (image.progress) come before the answer
        r = json.loads(f.readline())
        if r.get("id") == 1:
            break
    s.close()
    return r


def node_sandboxes(c, name):
    """The daemon's own word: its sandboxes made for pods, as {pod name: sandbox}."""
    r = rpc(c.nodes[name]["sock"], "sandbox.list", {})
    return {sb["metadata"].get("k8sPod"): sb for sb in r["result"]["sandboxes"] if sb["metadata"].get("k8sPod")}


def node_logs(c):
    """What the nodes said that is not routine: for a failure's message."""
    return {n: [l for l in c.log(n).splitlines() if "pod web" not in l][-15:] for n in c.nodes}


def deployment(name, replicas, command, port=None, extra_spec=None):
    cont = {"name": name, "image": "sbx.dev/host", "command": command}
    if port:
        cont["ports"] = [{"containerPort": port}]
    spec = {"tolerations": [TOLERATION], "containers": [cont], "terminationGracePeriodSeconds": 5}
    spec.update(extra_spec or {})
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


def running(c, app):
    return [p for p in c.pods(f"app%3D{app}") if p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")]


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


NODE_DIR = REPO / "tests" / "e2b"


def e2b_sdk():
    npm_packages(NODE_DIR, "e2b", needs="E2B's SDK (npm e2b)")


def sdk(kube, *args, timeout=300):
    env = dict(os.environ, E2B_API_URL=kube.GATEWAY, E2B_SANDBOX_URL=kube.GATEWAY, E2B_API_KEY=kube.API_KEY)
    cp = subprocess.run(["node", str(NODE_DIR / "cluster.mjs"), *args], capture_output=True, timeout=timeout,
                        env=env, cwd=NODE_DIR)
    assert cp.returncode == 0, cp.stderr.decode()[-3000:]
    return json.loads(cp.stdout)


def test_nodes_registered_with_capacity_and_taint(kube):
    for name in ("sbx-1", "sbx-2", "sbx-3"):
        n = kube.api("GET", f"/api/v1/nodes/{name}")
        assert {"key": "sbx.dev/sandbox", "value": "true", "effect": "NoSchedule"} in n["spec"]["taints"]
        assert int(n["status"]["capacity"]["pods"]) >= 100
        assert n["status"]["addresses"][0] == {"type": "InternalIP", "address": f"10.77.0.{10 + kube.nodes[name]['i']}"}
        assert n["spec"]["podCIDR"] == f"10.88.{kube.nodes[name]['i']}.0/24"
        assert n["metadata"]["labels"]["sbx.dev/node"] == "true"
    # The Lease is renewed: its renewTime moves.
    lease = lambda: kube.api("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/sbx-1")
    kube.wait(lambda: lease() is not None, 30, "the node's lease")
    first = lease()["spec"]
    assert first["holderIdentity"] == "sbx-1" and first["leaseDurationSeconds"] == 8
    kube.wait(lambda: lease()["spec"]["renewTime"] != first["renewTime"], 30, "the lease to be renewed")


def test_untolerated_pod_is_not_placed(kube):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "no-toleration"},
           "spec": {"containers": [{"name": "c", "image": "sbx.dev/host", "command": ["sleep", "100"]}]}}
    kube.api("POST", "/api/v1/namespaces/default/pods", pod)
    time.sleep(2)
    p = kube.api("GET", "/api/v1/namespaces/default/pods/no-toleration")
    assert not p["spec"].get("nodeName"), "a pod without the sbx toleration was bound to an sbx node"
    kube.api("DELETE", "/api/v1/namespaces/default/pods/no-toleration")


def test_deployment_spreads_and_service_reaches_every_pod(kube):
    # Each pod answers with the address it was reached at, as its own socket sees it: the
    # Service's Endpoints are checked to reach the very pod they name, in its own namespace.
    server = ("import http.server,os\n"
              "class H(http.server.BaseHTTPRequestHandler):\n"
              "  def do_GET(s):\n"
              "    b=(s.connection.getsockname()[0]+' '+os.environ.get('GREETING','')).encode()\n"
              "    s.send_response(200); s.end_headers(); s.wfile.write(b)\n"
              "  def log_message(s,*a): pass\n"
              "http.server.ThreadingHTTPServer(('0.0.0.0',8080),H).serve_forever()\n")
    kube.api("POST", "/apis/apps/v1/namespaces/default/deployments",
             deployment("web", 30, [PY, "-c", server], port=8080,
                        extra_spec={"containers": [{"name": "web", "image": "sbx.dev/host",
                                                    "command": [PY, "-c", server],
                                                    "env": [{"name": "GREETING", "value": "hi"}],
                                                    "ports": [{"containerPort": 8080}]}]}))
    kube.api("POST", "/api/v1/namespaces/default/services",
             {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
              "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}})
    kube.wait(lambda: len(running(kube, "web")) == 30, 180, "30 running pods")
    pods = running(kube, "web")
    by_node = {}
    for p in pods:
        by_node.setdefault(p["spec"]["nodeName"], []).append(p)
    assert set(by_node) == {"sbx-1", "sbx-2", "sbx-3"}, {k: len(v) for k, v in by_node.items()}
    # Each pod's IP is of its node's pod network, and its node's daemon holds its sandbox.
    for name, ps in by_node.items():
        held = node_sandboxes(kube, name)
        for p in ps:
            assert p["status"]["podIP"].startswith(f"10.88.{kube.nodes[name]['i']}.")
            assert p["status"]["hostIP"] == f"10.77.0.{10 + kube.nodes[name]['i']}"
            assert held[p["metadata"]["name"]]["ip"] == p["status"]["podIP"]
    ips = {p["status"]["podIP"] for p in pods}
    assert len(ips) == 30

    def endpoint_ips():
        ep = kube.api("GET", "/api/v1/namespaces/default/endpoints/web")
        return {a["ip"] for s in ep.get("subsets", []) for a in s.get("addresses", [])}
    kube.wait(lambda: endpoint_ips() == ips, 60, "the Service's Endpoints to list the 30 pods")
    # Running is said once the process started (no readiness probe): its server may take a moment
    # to listen.
    answers = {}
    for ip in endpoint_ips():
        kube.wait(lambda: answers.setdefault(ip, http_get(f"http://{ip}:8080/")), 30, f"{ip}:8080 to answer")
        assert answers[ip] == (200, f"{ip} hi")  # the container's env, too
    # A pod reaches a pod of another node through the routed pod networks.
    a = by_node["sbx-1"][0]
    b = by_node["sbx-2"][0]
    sb = node_sandboxes(kube, "sbx-1")[a["metadata"]["name"]]
    r = rpc(kube.nodes["sbx-1"]["sock"], "run",
            {"sandboxId": sb["sandboxId"], "command": f"curl -s -m 5 http://{b['status']['podIP']}:8080/"})
    assert r["result"]["exitCode"] == 0, r
    assert r["result"]["stdout"] == f"{b['status']['podIP']} hi"


def test_restart_policies(kube):
    def pod(name, policy, cmd):
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"tolerations": [TOLERATION], "restartPolicy": policy,
                         "containers": [{"name": "c", "image": "sbx.dev/host", "command": ["bash", "-c", cmd]}]}}
    kube.api("POST", "/api/v1/namespaces/default/pods", pod("once-ok", "Never", "echo done"))
    kube.api("POST", "/api/v1/namespaces/default/pods", pod("once-bad", "Never", "exit 3"))
    kube.api("POST", "/api/v1/namespaces/default/pods", pod("retry", "OnFailure", "exit 4"))
    get = lambda n: kube.api("GET", f"/api/v1/namespaces/default/pods/{n}")
    kube.wait(lambda: get("once-ok")["status"].get("phase") == "Succeeded", 60, "once-ok to succeed")
    kube.wait(lambda: get("once-bad")["status"].get("phase") == "Failed", 60, "once-bad to fail")
    term = get("once-bad")["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 3 and term["reason"] == "Error", json.dumps(get("once-bad")["status"]["containerStatuses"])
    kube.api("POST", "/api/v1/namespaces/default/pods", pod("says-why", "Never", "echo first; echo it broke >&2; exit 2"))
    kube.wait(lambda: get("says-why")["status"].get("phase") == "Failed", 60, "says-why to fail")
    # A failed container's message is the end of what it wrote (FallbackToLogsOnError).
    assert get("says-why")["status"]["containerStatuses"][0]["state"]["terminated"]["message"] == "it broke"
    kube.api("DELETE", "/api/v1/namespaces/default/pods/says-why")
    kube.wait(lambda: get("retry")["status"]["containerStatuses"][0]["restartCount"] >= 2, 60,
              "retry to be restarted twice")
    st = get("retry")["status"]
    assert st["phase"] in ("Running", "Pending")
    assert st["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 4, \
        (json.dumps(st["containerStatuses"]), node_logs(kube))
    # kubectl logs, through the API server to the node's kubelet endpoint; --previous is the
    # restarted container's last run; -f is refused saying so.
    assert kube.kubectl("logs", "once-ok").stdout == "done\n"
    kube.api("POST", "/api/v1/namespaces/default/pods", pod("chatty", "Never", "for i in 1 2 3 4 5; do echo line$i; done"))
    kube.wait(lambda: get("chatty")["status"].get("phase") == "Succeeded", 60, "chatty to succeed")
    assert kube.kubectl("logs", "chatty", "--tail=2").stdout == "line4\nline5\n"
    assert kube.kubectl("logs", "chatty", "--limit-bytes=3").stdout == "lin"
    assert kube.kubectl("logs", "retry", "--previous", "-c", "c").returncode == 0
    # -f: the whole output so far, then what comes, ended with the process.
    kube.api("POST", "/api/v1/namespaces/default/pods",
             pod("ticker", "Never", "echo t1; sleep 1; echo t2; sleep 1; echo t3"))
    kube.wait(lambda: get("ticker")["status"].get("phase") in ("Running", "Succeeded"), 60, "ticker to run")
    r = kube.kubectl("logs", "ticker", "-f", timeout=60)
    assert r.stdout == "t1\nt2\nt3\n", r
    assert get("ticker")["status"]["phase"] in ("Running", "Succeeded")
    r = kube.kubectl("logs", "chatty", "-c", "nope", check=False)
    assert r.returncode != 0
    # kubectl exec is not served: refused with the node's word, not a hang.
    r = kube.kubectl("exec", "retry", "--", "true", check=False, timeout=60)
    assert r.returncode != 0 and "sbx nodes serve" in r.stderr, r.stderr
    # The endpoint answers no one but the API server (a client certificate of its CA).
    import ssl
    ctx = ssl.create_default_context(cafile=str(kube.dir / "ca.crt"))
    node = get("chatty")["status"]["hostIP"]
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"https://{node}:10250/containerLogs/default/chatty/c", context=ctx, timeout=10)
    assert e.value.code == 401
    ctx.load_cert_chain(str(kube.dir / "kubelet-client.crt"), str(kube.dir / "kubelet-client.key"))
    body = urllib.request.urlopen(f"https://{node}:10250/containerLogs/default/chatty/c", context=ctx, timeout=10).read()
    assert body == b"line1\nline2\nline3\nline4\nline5\n"
    for n in ("once-ok", "once-bad", "retry", "chatty", "ticker"):
        kube.api("DELETE", f"/api/v1/namespaces/default/pods/{n}")
    kube.wait(lambda: all(get(n) is None for n in ("once-ok", "once-bad", "retry", "chatty", "ticker")), 60,
              "the pods to be deleted")


def test_pod_from_an_image_of_the_nodes_store(kube, tmp_path):
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    import ocitool
    layer = ocitool.tar_of_dir(ocitool.host_root(str(tmp_path / "root")))
    cfg = ocitool.config_for([layer])
    cfg["config"]["Entrypoint"] = ["/bin/cat"]
    cfg["config"]["Cmd"] = ["/etc/image-marker"]
    ocitool.write_docker_archive(str(tmp_path / "img.tar"), [layer], tags=("kube/cat:1",), config=cfg)
    r = rpc(kube.nodes["sbx-1"]["sock"], "image.import", {"path": str(tmp_path / "img.tar")})
    assert "result" in r, r

    def pod(name, **cont):
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"tolerations": [TOLERATION], "restartPolicy": "Never", "nodeName": "sbx-1",
                         "containers": [{"name": "c", "image": "kube/cat:1", **cont}]}}
    kube.api("POST", "/api/v1/namespaces/default/pods", pod("img-cmd"))
    kube.api("POST", "/api/v1/namespaces/default/pods", pod("img-args", args=["/opt/app/hello.txt"]))
    kube.api("POST", "/api/v1/namespaces/default/pods", pod("img-command", command=["/bin/echo", "own"]))
    get = lambda n: kube.api("GET", f"/api/v1/namespaces/default/pods/{n}")["status"]
    names = ("img-cmd", "img-args", "img-command")
    try:
        kube.wait(lambda: all(get(n).get("phase") == "Succeeded" for n in names), 60, "the image's pods to succeed")
    except TimeoutError:
        raise AssertionError(({n: get(n) for n in names}, node_logs(kube)))
    # Entrypoint and Cmd as Kubernetes reads them: args replace Cmd, command replaces both.
    assert kube.kubectl("logs", "img-cmd").stdout == "sbx-test-image\n"
    assert kube.kubectl("logs", "img-args").stdout == "hello from the image\n"
    assert kube.kubectl("logs", "img-command").stdout == "own\n"
    for n in names:
        kube.api("DELETE", f"/api/v1/namespaces/default/pods/{n}")


def test_unsupported_spec_fails_with_reason(kube):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "two-images"},
           "spec": {"tolerations": [TOLERATION], "restartPolicy": "Never",
                    "containers": [{"name": "a", "image": "sbx.dev/host", "command": ["sleep", "9"]},
                                   {"name": "b", "image": "busybox", "command": ["sleep", "9"]}]}}
    kube.api("POST", "/api/v1/namespaces/default/pods", pod)
    get = lambda: kube.api("GET", "/api/v1/namespaces/default/pods/two-images")
    kube.wait(lambda: get()["status"].get("phase") == "Failed", 60, "the pod to fail")
    assert get()["status"]["reason"] == "UnsupportedPodSpec"
    assert "one image" in get()["status"]["message"]
    kube.api("DELETE", "/api/v1/namespaces/default/pods/two-images")
    unknown = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "no-such-image"},
               "spec": {"tolerations": [TOLERATION], "restartPolicy": "Never",
                        "containers": [{"name": "a", "image": "no-such-image:1", "command": ["true"]}]}}
    kube.api("POST", "/api/v1/namespaces/default/pods", unknown)
    get = lambda: kube.api("GET", "/api/v1/namespaces/default/pods/no-such-image")
    kube.wait(lambda: get()["status"].get("phase") == "Failed", 60, "the pod to fail")
    assert get()["status"]["reason"] == "SandboxCreateFailed"
    assert "no-such-image" in get()["status"]["message"]
    kube.api("DELETE", "/api/v1/namespaces/default/pods/no-such-image")


def test_pods_that_ask_for_sbx_egress_controls(kube):
    target = running(kube, "web")[0]["status"]["podIP"]

    def pod(name, cmd, **ann):
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": ann},
                "spec": {"tolerations": [TOLERATION], "restartPolicy": "Never",
                         "containers": [{"name": "c", "image": "sbx.dev/host", "command": ["bash", "-c", cmd]}]}}
    reach = f"curl -s -m 3 -o /dev/null http://{target}:8080/"
    kube.api("POST", "/api/v1/namespaces/default/pods", pod("open", reach))
    kube.api("POST", "/api/v1/namespaces/default/pods", pod("closed", reach, **{"sbx.dev/network": "none"}))
    kube.api("POST", "/api/v1/namespaces/default/pods",
             pod("listed", "echo $HTTPS_PROXY", **{"sbx.dev/network": "allowlist",
                                                   "sbx.dev/network-allow": "example.com, *.example.org"}))
    kube.api("POST", "/api/v1/namespaces/default/pods", pod("wrong", "true", **{"sbx.dev/network": "wide"}))
    get = lambda n: kube.api("GET", f"/api/v1/namespaces/default/pods/{n}")["status"]
    done = lambda n: get(n).get("phase") in ("Succeeded", "Failed")
    kube.wait(lambda: all(done(n) for n in ("open", "closed", "listed", "wrong")), 60, "the pods to end")
    assert get("open")["phase"] == "Succeeded" and get("open")["podIP"].startswith("10.88.")
    assert get("closed")["phase"] == "Failed" and not get("closed").get("podIP")
    assert get("listed")["phase"] == "Succeeded"
    assert kube.kubectl("logs", "listed").stdout == "http://127.0.0.1:3128\n"
    assert get("wrong")["reason"] == "UnsupportedPodSpec" and "sbx.dev/network" in get("wrong")["message"]
    for n in ("open", "closed", "listed", "wrong"):
        kube.api("DELETE", f"/api/v1/namespaces/default/pods/{n}")


def test_scale_down_deletes_pods_and_their_sandboxes(kube):
    kube.api("PATCH", "/apis/apps/v1/namespaces/default/deployments/web", {"spec": {"replicas": 24}},
             content_type="application/merge-patch+json")
    kube.wait(lambda: len(kube.pods("app%3Dweb")) == 24, 90, "6 pods to be deleted")
    names = {p["metadata"]["name"] for p in kube.pods("app%3Dweb")}
    held = set()
    for n in ("sbx-1", "sbx-2", "sbx-3"):
        held |= set(node_sandboxes(kube, n))
    kube.wait(lambda: {k for n in ("sbx-1", "sbx-2", "sbx-3") for k in node_sandboxes(kube, n)
                       if k.startswith("web-")} == names, 30, "the deleted pods' sandboxes to go")


def test_cordoned_node_gets_no_new_pods(kube):
    kube.kubectl("cordon", "sbx-3")
    before = {p["metadata"]["name"] for p in kube.pods("app%3Dweb") if p["spec"]["nodeName"] == "sbx-3"}
    kube.api("PATCH", "/apis/apps/v1/namespaces/default/deployments/web", {"spec": {"replicas": 30}},
             content_type="application/merge-patch+json")
    kube.wait(lambda: len(running(kube, "web")) == 30, 120, "30 running pods again")
    after = {p["metadata"]["name"] for p in kube.pods("app%3Dweb") if p["spec"]["nodeName"] == "sbx-3"}
    assert after <= before, f"new pods on the cordoned node: {after - before}"
    kube.kubectl("uncordon", "sbx-3")


def test_e2b_sdk_sandboxes_through_the_gateway_land_on_every_node(kube):
    e2b_sdk()
    out = sdk(kube, "create", "30")
    made = out["sandboxes"]
    assert all("threw" not in m for m in made), [m for m in made if "threw" in m][:3]
    for i, m in enumerate(made):
        assert m["command"] == {"exitCode": 0, "stdout": f"r{i} sandbox\nuser\n"}, m
        assert m["file"] == f"note of {m['id']}", m
        assert m["process"]["listed"] is True, m
    assert out["listed"] == 30
    pods = {p["metadata"]["name"]: p for p in kube.pods("sbx.dev%2Fe2b%3Dtrue")}
    nodes = {pods[m["id"]]["spec"]["nodeName"] for m in made}
    assert nodes == {"sbx-1", "sbx-2", "sbx-3"}
    # Each is a sandbox of its node's daemon, adopted by that node's door.
    for name in nodes:
        held = node_sandboxes(kube, name)
        for m in made:
            if pods[m["id"]]["spec"]["nodeName"] == name:
                assert m["id"] in held
    kube.e2b = {m["id"]: pods[m["id"]]["spec"]["nodeName"] for m in made}


def test_gateway_refuses_bad_input_and_stays_up(kube):
    bad = urllib.request.Request(kube.GATEWAY + "/sandboxes", data=b"{not json", method="POST",
                                 headers={"X-API-KEY": kube.API_KEY})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(bad, timeout=10)
    assert e.value.code == 400
    nokey = urllib.request.Request(kube.GATEWAY + "/sandboxes", method="GET")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(nokey, timeout=10)
    assert e.value.code == 401
    unknown = urllib.request.Request(kube.GATEWAY + "/health", headers={"E2b-Sandbox-Id": "ffffffffffffffffffffffffffffffff"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(unknown, timeout=10)
    assert e.value.code == 502
    # An unknown template: the pod fails on its node, the create says why.
    req = urllib.request.Request(kube.GATEWAY + "/sandboxes", data=json.dumps({"templateID": "no-such-image"}).encode(),
                                 method="POST", headers={"X-API-KEY": kube.API_KEY, "Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=90)
    assert e.value.code == 500 and b"no-such-image" in e.value.read()
    ok = urllib.request.Request(kube.GATEWAY + "/sandboxes", headers={"X-API-KEY": kube.API_KEY})
    assert len(json.loads(urllib.request.urlopen(ok, timeout=10).read())) == 30


def test_metrics_through_the_gateway(kube):
    """E2B's getMetrics for a sandbox of the cluster: the gateway asks its node's door."""
    sid = next(iter(kube.e2b))

    def metrics():
        req = urllib.request.Request(kube.GATEWAY + f"/sandboxes/{sid}/metrics", headers={"X-API-KEY": kube.API_KEY})
        return json.loads(urllib.request.urlopen(req, timeout=10).read())
    got = []
    kube.wait(lambda: got.extend(metrics()) or got, 30, "a metrics sample of a cluster sandbox")
    last = got[-1]
    assert last["memTotal"] > 0 and last["diskTotal"] == 256 << 20 and last["memUsed"] > 0, last
    assert isinstance(last["timestampUnix"], int) and last["timestamp"].endswith("Z")
    req = urllib.request.Request(kube.GATEWAY + f"/sandboxes/{sid}/metrics?start=1&end=2", headers={"X-API-KEY": kube.API_KEY})
    assert json.loads(urllib.request.urlopen(req, timeout=10).read()) == []  # the range goes along
    req = urllib.request.Request(kube.GATEWAY + "/sandboxes/ffffffffffffffffffffffffffffffff/metrics",
                                 headers={"X-API-KEY": kube.API_KEY})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 404


def test_lost_node_pods_fail_with_reason_others_keep_working(kube):
    on = lambda node: [p for p in kube.pods("app%3Dweb") if p["spec"]["nodeName"] == node]
    lost = [p["metadata"]["name"] for p in on("sbx-2") if p["status"].get("phase") == "Running"]
    lost += [sid for sid, node in kube.e2b.items() if node == "sbx-2"]
    assert lost
    others = [p for p in running(kube, "web") if p["spec"]["nodeName"] != "sbx-2"]
    kube.kill_node("sbx-2")
    # NotReady after the node-monitor grace period (16 s here), then its pods failed.
    kube.wait(lambda: not kube.node_ready("sbx-2"), 90, "sbx-2 to be NotReady")

    def all_failed():
        st = [kube.api("GET", f"/api/v1/namespaces/default/pods/{n}") for n in lost]
        return all(s is None or (s["status"].get("phase") == "Failed" and s["status"].get("reason") == "NodeLost")
                   for s in st)
    kube.wait(all_failed, 60, "the lost node's pods to be marked Failed (NodeLost)")
    msg = kube.api("GET", f"/api/v1/namespaces/default/pods/{lost[0]}")["status"]["message"]
    assert "sbx-2" in msg
    # Each answers (a slow machine, or the sanitizers, may keep one from it for a while: a
    # node that went with sbx-2 never would).
    def answers(p):
        try:
            return http_get(f"http://{p['status']['podIP']}:8080/", timeout=15)[0] == 200
        except OSError:
            return False

    for p in others:
        kube.wait(lambda: answers(p), 90, f"pod {p['metadata']['name']} to answer")
    # Through the gateway: the lost node's sandboxes are answered at once (502: gone), the
    # other 20 keep working.
    ids = list(kube.e2b)
    res = {r["id"]: r for r in sdk(kube, "check", *ids)["results"]}
    for sid, node in kube.e2b.items():
        if node == "sbx-2":
            assert "threw" in res[sid], res[sid]
        else:
            assert res[sid].get("stdout") == f"note of {sid}", res[sid]
    gone = next(sid for sid, node in kube.e2b.items() if node == "sbx-2")
    req = urllib.request.Request(kube.GATEWAY + "/health", headers={"E2b-Sandbox-Id": gone})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 502 and b"sbx-2" in e.value.read()
    # The Deployment replaces its pods on the live nodes.
    kube.wait(lambda: len(running(kube, "web")) == 30, 120, "30 running pods on the live nodes")
    assert all(p["spec"]["nodeName"] != "sbx-2" for p in running(kube, "web"))
    # Sandbox.kill through the gateway deletes the pods, and their sandboxes go.
    live = [sid for sid, node in kube.e2b.items() if node != "sbx-2"]
    out = sdk(kube, "kill", *live)
    assert all(k is True for k in out["killed"]), out
    kube.wait(lambda: not any(sid in node_sandboxes(kube, n) for n in ("sbx-1", "sbx-3") for sid in live), 60,
              "the killed sandboxes to go")


def test_manifests_pass_server_dry_run(kube):
    for f in sorted((REPO / "deploy" / "kubernetes").glob("*.yaml")):
        r = kube.kubectl("apply", "--dry-run=server", "-f", str(f), check=False)
        assert r.returncode == 0, f"{f.name}: {r.stderr}"
