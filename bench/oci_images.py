#!/usr/bin/python3
"""OCI images: import and create costs of sbx, with podman and docker beside it in one run.

The image: a root of the host's own bash and tools (tests/integration/ocitool.py), with the
host's /usr/lib/python3.11, /usr/share/perl and /usr/lib/x86_64-linux-gnu/perl copied in as
three more layers: about 100 MB unpacked, 4 layers, written once as an OCI layout (gzip layers),
an OCI archive of that layout, and a `docker save` tar (plain layers).

  1. Import of the 100 MB image into an empty store, each format (median of --import-n; the
     image is removed, and its layers with it, between two). Goal: <= 2 s.
  2. A second import of the same layers under another name (median of --n). Goal: <= 50 ms.
  3. create -> first result (`sandbox.create` then `run echo hi`, over the daemon's socket by a
     plain JSON-RPC client, from the create's send to the run's answer; the sandbox destroyed
     after): from the image and from the host's root, alternated, cold (no pool) and pooled
     (`--pool 2 --pool IMAGE=2`, 400 ms between two for the pools to refill). Goal: the image
     within +0.5 ms of the host's root, cold and pooled.
  4. Anchors a user would pick instead, the same image: `podman run --rm IMAGE /bin/echo hi` and
     `docker run --rm IMAGE /bin/echo hi` (whole processes, median of --peer-n; the flags this
     machine needs are in RUN_FLAGS), when installed and working (said when not); their `load`
     of the docker save tar once.

Prints a Markdown report on stdout, progress on stderr. Needs root. Usage:
  bench/oci_images.py [--sbx PATH] [--n 30] [--import-n 3] [--peer-n 9] [--quick]
"""
import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import ocitool  # noqa: E402
from sbxrpc import Daemon, ensure_docker, now  # noqa: E402

# What each needs to run here at all: this machine's cgroups are hybrid (v1 memory and pids
# beside v2), which crun refuses, and its hard RLIMIT_NOFILE (20000) and RLIMIT_NPROC are below
# podman's defaults for a container.
RUN_FLAGS = {
    "podman": ["--runtime", "runc", "run", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"],
    "docker": ["run"],
}

EXTRA_TREES = ["/usr/lib/python3.11", "/usr/share/perl", "/usr/lib/x86_64-linux-gnu/perl"]


def log(*a):
    print("oci_images:", *a, file=sys.stderr, flush=True)



def med(xs):
    return statistics.median(xs) * 1000


def pct(xs, q):
    s = sorted(xs)
    k = (len(s) - 1) * q
    f = int(k)
    c = min(f + 1, len(s) - 1)
    return (s[f] + (s[c] - s[f]) * (k - f)) * 1000


def build_image(work):
    root = ocitool.host_root(os.path.join(work, "root"))
    layers = [ocitool.tar_of_dir(root)]
    for tree in EXTRA_TREES:
        d = os.path.join(work, "t" + str(len(layers)))
        dst = os.path.join(d, tree.lstrip("/"))
        shutil.copytree(tree, dst, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        layers.append(ocitool.tar_of_dir(d))
    unpacked = sum(len(x) for x in layers)
    ocitool.write_oci_layout(os.path.join(work, "layout"), layers, name="bench/img:1")
    ocitool.tar_dir(os.path.join(work, "layout"), os.path.join(work, "img.oci.tar"))
    ocitool.write_docker_archive(os.path.join(work, "img.docker.tar"), layers, tags=("bench/img:1",))
    return unpacked, len(layers)


def bench_import(sbx, work, store_parent, n, import_n):
    out = {}
    store = os.path.join(store_parent, "import")
    d = Daemon(sbx, "--image-store", store, "--pool", "0")
    try:
        for fmt, path in [("OCI layout (gzip layers)", "layout"), ("OCI archive", "img.oci.tar"),
                          ("docker save (plain layers)", "img.docker.tar")]:
            full = os.path.join(work, path)
            firsts, seconds = [], []
            for _ in range(import_n):
                t = now()
                img = d.rpc.call("image.import", {"path": full})["image"]
                firsts.append(now() - t)
                assert img["newLayers"] == len(img["layers"]), img
                for k in range(max(1, n // 3)):
                    t = now()
                    again = d.rpc.call("image.import", {"path": full, "name": f"again{k}:1"})["image"]
                    seconds.append(now() - t)
                    assert again["newLayers"] == 0
                d.rpc.call("image.remove", {"image": img["id"]})
            out[fmt] = (firsts, seconds, img["bytes"])
            log(fmt, "first", f"{med(firsts):.0f} ms", "second", f"{med(seconds):.1f} ms")
    finally:
        d.stop()
    return out


def create_first_result(rpc, image):
    p = {"image": image} if image else {}
    t = now()
    sid = rpc.call("sandbox.create", p)["sandboxId"]
    r = rpc.call("run", {"sandboxId": sid, "command": "echo hi"})
    dt = now() - t
    assert r["stdout"] == "hi\n", r
    rpc.call("sandbox.destroy", {"sandboxId": sid})
    return dt


def bench_create(sbx, work, store_parent, n, pooled):
    store = os.path.join(store_parent, "create-pooled" if pooled else "create-cold")
    args = ["--pool", "2", "--pool", "bench/img:1=2"] if pooled else ["--pool", "0"]
    d = Daemon(sbx, "--image-store", store, *args)
    try:
        d.rpc.call("image.import", {"path": os.path.join(work, "layout")})
        host, image = [], []
        for i in range(n + 3):
            for which, xs in ((None, host), ("bench/img:1", image)) if i % 2 == 0 else (("bench/img:1", image), (None, host)):
                if pooled:
                    time.sleep(0.4)
                dt = create_first_result(d.rpc, which)
                if i >= 3:
                    xs.append(dt)
        log("create", "pooled" if pooled else "cold", f"host {med(host):.2f} ms", f"image {med(image):.2f} ms")
        return host, image
    finally:
        d.stop()


def peer_works(tool):
    if not shutil.which(tool):
        return f"not installed (`apt-get install {'docker.io' if tool == 'docker' else tool}`)"
    cp = subprocess.run([tool, "info"], capture_output=True, timeout=60)
    return None if cp.returncode == 0 else f"installed, but `{tool} info` fails: " + cp.stderr.decode()[-200:].strip()


def bench_peer(tool, work, peer_n):
    why = peer_works(tool)
    if why:
        log(tool, why)
        return why
    t = now()
    cp = subprocess.run([tool, "load", "-i", os.path.join(work, "img.docker.tar")], capture_output=True, timeout=600)
    load = now() - t
    if cp.returncode != 0:
        return f"`{tool} load` failed: " + cp.stderr.decode()[-200:].strip()
    name = "bench/img:1" if tool == "docker" else "localhost/bench/img:1"
    xs = []
    for i in range(peer_n + 1):
        t = now()
        cp = subprocess.run([tool, *RUN_FLAGS[tool], "--rm", "--network", "none", name, "/bin/echo", "hi"],
                            capture_output=True, timeout=120)
        if cp.returncode != 0 or cp.stdout != b"hi\n":
            return f"`{tool} run` failed: " + cp.stderr.decode()[-300:].strip()
        if i:
            xs.append(now() - t)
    subprocess.run([tool, "rmi", "-f", name], capture_output=True, timeout=120)
    log(tool, f"load {load:.2f} s", f"run {med(xs):.0f} ms")
    return load, xs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sbx", default=os.path.join(ROOT, "build", "src", "cli", "sbx"))
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--import-n", type=int, default=3)
    ap.add_argument("--peer-n", type=int, default=9)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.n, a.import_n, a.peer_n = 6, 1, 2
    work = tempfile.mkdtemp(prefix="sbx-bench-oci-img-", dir="/var/tmp")
    store_parent = tempfile.mkdtemp(prefix="sbx-bench-oci-store-", dir="/var/tmp")
    os.chmod(store_parent, 0o755)
    try:
        log("building the image")
        unpacked, n_layers = build_image(work)
        imports = bench_import(a.sbx, work, store_parent, a.n, a.import_n)
        cold = bench_create(a.sbx, work, store_parent, a.n, False)
        pooled = bench_create(a.sbx, work, store_parent, a.n, True)
        dockerd, _ = ensure_docker()
        try:
            peers = {tool: bench_peer(tool, work, a.peer_n) for tool in ("podman", "docker")}
        finally:
            if dockerd:
                dockerd.terminate()
                dockerd.wait(60)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(store_parent, ignore_errors=True)

    print(f"### OCI images ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})\n")
    print(f"Machine: {os.cpu_count()} CPUs, kernel {platform.release()}. The image: {n_layers} layers, "
          f"{unpacked / 1e6:.0f} MB of tar unpacked (the host's bash and tools, python3.11's library, perl).\n")
    print("| import | first into an empty store (ms) | again, same layers (ms, p50 / p90) | goal |")
    print("|---|---|---|---|")
    for fmt, (firsts, seconds, _) in imports.items():
        ok = "met" if med(firsts) <= 2000 and med(seconds) <= 50 else "**not met**"
        print(f"| {fmt} | {med(firsts):.0f} | {med(seconds):.1f} / {pct(seconds, 0.9):.1f} | <= 2000 / <= 50: {ok} |")
    print("\n| create -> first result (ms) | host's root p50 / p90 | image p50 / p90 | image - host | goal +0.5 |")
    print("|---|---|---|---|---|")
    for label, (host, image) in (("cold (no pool)", cold), ("pooled", pooled)):
        diff = med(image) - med(host)
        print(f"| {label} | {med(host):.2f} / {pct(host, 0.9):.2f} | {med(image):.2f} / {pct(image, 0.9):.2f} | "
              f"{diff:+.2f} | {'met' if diff <= 0.5 else '**not met**'} |")
    print("\n| the same image elsewhere | load | `run --rm IMAGE /bin/echo hi` p50 (ms) |")
    print("|---|---|---|")
    for tool, res in peers.items():
        if isinstance(res, str):
            print(f"| {tool} | {res} | |")
        else:
            print(f"| {tool} | {res[0]:.2f} s | {med(res[1]):.0f} |")


if __name__ == "__main__":
    main()
