#!/usr/bin/python3
"""sbx beside what a user would pick instead, measured in one run on this machine.

Peers, each from Debian: bubblewrap (`bwrap --unshare-all`), firejail (`--noprofile --net=none`),
gVisor (`runsc --network=none do`), podman (with runc: this machine's hybrid cgroups are refused
by crun) and docker (Debian's dockerd, started by this script with --iptables=false
--bridge=none when none runs). podman and docker run an image made offline from the host's own
bash and tools (tests/integration/ocitool.py), the same image sbx imports; bwrap, firejail and
runsc see the host's /usr as sbx's default sandboxes do. Every instance has no network.

Rows, whole processes from this script unless said:
  1. one fresh instance runs `echo hi` (median of --n): `bash -c` for scale; `sbx run`
     (one-shot, no daemon); sbx over its socket (`sandbox.create` + `run`, a plain JSON-RPC
     client, cold and from a pool); the peers' one-shot commands.
  2. into a running instance, `echo hi` (median of --n): `sbx exec`, sbx `run` over the socket,
     `docker exec`, `podman exec`.
  3. 100 MiB of output (`head -c 104857600 /dev/zero`) read to its end, one-shot (median of 3).
  4. memory per idle instance: --idle instances left running (`sleep`; sbx: sandboxes of a daemon
     with their session's shell started), what their memory cgroups are charged (kernel memory
     included) plus the PSS of what each keeps outside them (sbx: the daemon's growth; docker
     and podman: the containerd-shim or conmon beside each container; runsc: its processes that
     left the cgroup the script put it in), divided by their number.
  5. 100 instances at once, each running `echo hi`: wall time and failures.

Prints a Markdown table on stdout, progress on stderr. Needs root. Usage:
  bench/peers.py [--sbx PATH] [--n 9] [--idle 20] [--many 100] [--quick]
"""
import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import ocitool  # noqa: E402
from sbxrpc import Daemon, Rpc, ensure_docker, now  # noqa: E402

IMAGE = "sbx-peers/img:1"
OUT = "head -c 104857600 /dev/zero"
PODMAN = ["podman", "--runtime", "runc"]
PODMAN_RUN = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", "--network", "none"]
BWRAP = ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
         "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev",
         "--tmpfs", "/tmp"]


def log(*a):
    print("peers:", *a, file=sys.stderr, flush=True)



def med_ms(xs):
    return statistics.median(xs) * 1000 if xs else None


def timed(argv, stdin=None, n=9, check=b"hi\n"):
    """Median wall time of argv run n times (after one not counted), or the reason it cannot run."""
    xs = []
    for i in range(n + 1):
        t = now()
        cp = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=300)
        dt = now() - t
        if cp.returncode != 0 or (check is not None and cp.stdout != check):
            return f"failed: {cp.stderr.decode(errors='replace')[-160:].strip() or cp.returncode}"
        if i:
            xs.append(dt)
    return xs


def start_idle(pre, run_args, image):
    """A container of image left sleeping; its id."""
    return subprocess.run([*pre, "run", "-d", *run_args, image, "/bin/sleep", "3600"], capture_output=True,
                          timeout=120).stdout.decode().strip()


def output_time(argv, n=3):
    """Median time to read 100 MiB of argv's stdout to its end."""
    xs = []
    for _ in range(n):
        t = now()
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        got = 0
        while True:
            b = p.stdout.read(1 << 20)
            if not b:
                break
            got += len(b)
        p.wait()
        if got != 104857600:
            return f"got {got} bytes"
        xs.append(now() - t)
    return xs


def pss_of(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def children_map():
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return kids


def memcg_of(pid):
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                if "memory" in ctrls.split(",") or (ctrls == "" and not MEMCG_V1):
                    return path
    except OSError:
        pass
    return None


def pss_tree(pid, own_only=False, outside=None):
    """PSS of pid and its descendants (own_only: pid alone); with outside, only the processes
    not in that memory cgroup (a path under the hierarchy's mount)."""
    if own_only:
        return pss_of(pid)
    kids = children_map()
    todo, total = [pid], 0
    rel = outside[len(MEMCG_ROOT):] if outside else None
    while todo:
        p = todo.pop()
        todo.extend(kids.get(p, []))
        if rel is None or memcg_of(p) != rel:
            total += pss_of(p)
    return total


def pss_matching(word):
    """PSS of the processes whose command line holds word (an engine's helper of a container)."""
    total = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if word.encode() in cmd and b"sleep" not in cmd:
                total += pss_of(int(d))
    return total


MEMCG_V1 = os.path.isdir("/sys/fs/cgroup/memory")
MEMCG_ROOT = "/sys/fs/cgroup/memory" if MEMCG_V1 else "/sys/fs/cgroup"
MEMCG_FILE = "memory.usage_in_bytes" if MEMCG_V1 else "memory.current"


def cg_usage(word):
    """Memory charged to the topmost cgroups whose name holds word (a sandbox's id, a
    container's), summed."""
    total, found = 0, False
    for dirpath, dirnames, _ in os.walk(MEMCG_ROOT):
        if word in os.path.basename(dirpath):
            try:
                total += int(open(os.path.join(dirpath, MEMCG_FILE)).read())
                found = True
            except OSError:
                pass
            dirnames[:] = []
    return total if found else None


def new_memcg(name):
    path = os.path.join(MEMCG_ROOT, name)
    os.makedirs(path, exist_ok=True)
    return path


def enter_memcg(path):
    with open(os.path.join(path, "cgroup.procs"), "w") as f:
        f.write("0")


def memcg_usage(path):
    return int(open(os.path.join(path, MEMCG_FILE)).read())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sbx", default=os.path.join(ROOT, "build", "src", "cli", "sbx"))
    ap.add_argument("--n", type=int, default=9)
    ap.add_argument("--idle", type=int, default=20)
    ap.add_argument("--many", type=int, default=100)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.n, a.idle, a.many = 3, 4, 10
    sbx = a.sbx
    work = tempfile.mkdtemp(prefix="sbx-peers-img-", dir="/var/tmp")
    os.chmod(work, 0o755)
    rows = {}
    dockerd, docker_why = ensure_docker()
    have = {
        "bwrap": None if shutil.which("bwrap") else "not installed (apt-get install bubblewrap)",
        "firejail": None if shutil.which("firejail") else "not installed (apt-get install firejail)",
        "runsc": None if shutil.which("runsc") else "not installed (apt-get install runsc)",
        "podman": None if shutil.which("podman") else "not installed (apt-get install podman runc)",
        "docker": docker_why,
    }
    try:
        log("the image")
        root = ocitool.host_root(os.path.join(work, "root"))
        ocitool.write_docker_archive(os.path.join(work, "img.tar"), [ocitool.tar_of_dir(root)], tags=(IMAGE,))
        for tool, pre in (("podman", PODMAN), ("docker", ["docker"])):
            if not have[tool]:
                cp = subprocess.run([*pre, "load", "-i", os.path.join(work, "img.tar")], capture_output=True, timeout=300)
                if cp.returncode != 0:
                    have[tool] = "load failed: " + cp.stderr.decode()[-160:]
        pname = "localhost/" + IMAGE
        # The container engines: name, command, the image as each names it, what `run` needs here.
        engines = (("podman", PODMAN, pname, PODMAN_RUN), ("docker", ["docker"], IMAGE, ["--network", "none"]))
        one = {
            "bash -c (no sandbox)": ["bash", "-c", "echo hi"],
            "sbx run (one-shot)": [sbx, "run", "--", "echo hi"],
            "bwrap": [*BWRAP, "bash", "-c", "echo hi"],
            "firejail": ["firejail", "--quiet", "--noprofile", "--net=none", "bash", "-c", "echo hi"],
            "gVisor runsc do": ["runsc", "--network=none", "do", "bash", "-c", "echo hi"],
            "podman run --rm": [*PODMAN, "run", "--rm", *PODMAN_RUN, pname, "/bin/echo", "hi"],
            "docker run --rm": ["docker", "run", "--rm", "--network", "none", IMAGE, "/bin/echo", "hi"],
        }
        tool_of = {"bwrap": "bwrap", "firejail": "firejail", "gVisor runsc do": "runsc", "podman run --rm": "podman",
                   "docker run --rm": "docker"}

        log("1. one fresh instance")
        r1 = {}
        for name, argv in one.items():
            why = have.get(tool_of.get(name, ""), None)
            r1[name] = why or timed(argv, n=a.n)
            log(" ", name, r1[name] if isinstance(r1[name], str) else f"{med_ms(r1[name]):.1f} ms")
        # sbx's own API: create + first result over the socket, cold and pooled.
        for label, args in (("sbx over its socket, cold", ["--pool", "0"]), ("sbx over its socket, pooled", ["--pool", "2"])):
            d = Daemon(sbx, *args)
            try:
                rpc = d.rpc
                xs = []
                for i in range(a.n * 3 + 1):
                    if "pooled" in label:
                        time.sleep(0.3)
                    t = now()
                    sid = rpc.call("sandbox.create")["sandboxId"]
                    out = rpc.call("run", {"sandboxId": sid, "command": "echo hi"})["stdout"]
                    if i:
                        xs.append(now() - t)
                    assert out == "hi\n"
                    rpc.call("sandbox.destroy", {"sandboxId": sid})
                r1[label] = xs
            finally:
                d.stop()
        rows["1"] = r1

        log("2. into a running instance")
        r2 = {}
        d = Daemon(sbx, "--pool", "0")
        try:
            rpc = d.rpc
            sid = rpc.call("sandbox.create", {"persist": True})["sandboxId"]
            r2["sbx exec (CLI)"] = timed([sbx, "exec", "--socket", d.sock, sid, "--", "echo hi"], n=a.n * 3)
            xs = []
            for i in range(a.n * 10 + 5):
                t = now()
                rpc.call("run", {"sandboxId": sid, "command": "echo hi"})
                if i >= 5:
                    xs.append(now() - t)
            r2["sbx run over the socket"] = xs
        finally:
            d.stop()
        for tool, pre, name, run_args in engines:
            if have[tool]:
                r2[f"{tool} exec"] = have[tool]
                continue
            cid = start_idle(pre, run_args, name)
            r2[f"{tool} exec"] = timed([*pre, "exec", cid, "/bin/echo", "hi"], n=a.n)
            subprocess.run([*pre, "rm", "-f", cid], capture_output=True, timeout=120)
        rows["2"] = r2

        log("3. 100 MiB of output")
        r3 = {}
        outs = {
            "bash -c (no sandbox)": ["bash", "-c", OUT],
            "sbx run (one-shot)": [sbx, "run", "--stdout-limit", "128M", "--", OUT],
            "bwrap": [*BWRAP, "bash", "-c", OUT],
            "firejail": ["firejail", "--quiet", "--noprofile", "--net=none", "bash", "-c", OUT],
            "gVisor runsc do": ["runsc", "--network=none", "do", "bash", "-c", OUT],
            "podman run --rm": [*PODMAN, "run", "--rm", *PODMAN_RUN, pname, "/bin/bash", "-c", OUT],
            "docker run --rm": ["docker", "run", "--rm", "--network", "none", IMAGE, "/bin/bash", "-c", OUT],
        }
        for name, argv in outs.items():
            why = have.get(tool_of.get(name, ""), None)
            r3[name] = why or output_time(argv)
        rows["3"] = r3

        log("4. memory per idle instance")
        r4 = {}
        d = Daemon(sbx, "--pool", "0")
        try:
            rpc = d.rpc
            sids = []
            pss0 = pss_tree(d.p.pid)
            for _ in range(a.idle):
                sids.append(rpc.call("sandbox.create", {"persist": True})["sandboxId"])
                rpc.call("run", {"sandboxId": sids[-1], "command": "true"})
            time.sleep(2)
            charged = sum(cg_usage(s) or 0 for s in sids)
            # Pid 1 and the session shells are in the sandboxes' cgroups; the daemon's own
            # growth (its state of each sandbox) is counted as its PSS.
            r4["sbx (a daemon's sandboxes, session started)"] = (charged + pss_tree(d.p.pid, own_only=True) -
                                                                  pss0) / a.idle
        finally:
            d.stop()
        idle_cmds = {
            "bwrap": [*BWRAP, "sleep", "3600"],
            "firejail": ["firejail", "--quiet", "--noprofile", "--net=none", "sleep", "3600"],
            "gVisor runsc do": ["runsc", "--network=none", "do", "sleep", "3600"],
        }
        for name, argv in idle_cmds.items():
            if have[tool_of[name]]:
                r4[name] = have[tool_of[name]]
                continue
            cg = new_memcg("sbx-peers-" + tool_of[name])
            ps = [subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   preexec_fn=lambda: enter_memcg(cg)) for _ in range(a.idle)]
            time.sleep(3)
            # What left the cgroup (runsc makes its own) is counted by its processes' PSS.
            out = sum(pss_tree(p.pid, outside=cg) for p in ps)
            r4[name] = (memcg_usage(cg) + out) / a.idle
            for p in ps:
                p.kill()
            for p in ps:
                p.wait()
            subprocess.run(["pkill", "-KILL", "-f", "runsc.*sleep 3600"], capture_output=True)
            time.sleep(1)
            try:
                os.rmdir(cg)
            except OSError:
                pass
        for tool, pre, name, run_args in engines:
            if have[tool]:
                r4[tool] = have[tool]
                continue
            ids = [start_idle(pre, run_args, name) for _ in range(a.idle)]
            time.sleep(3)
            # The containers' cgroups, and the per-container helper each engine keeps beside it
            # (docker's containerd-shim, podman's conmon), by PSS.
            total = sum(cg_usage(i) or 0 for i in ids) + sum(pss_matching(i) for i in ids)
            r4[tool] = total / a.idle
            subprocess.run([*pre, "rm", "-f", *ids], capture_output=True, timeout=300)
        rows["4"] = r4

        log("5. many at once")
        r5 = {}
        many = {
            "sbx run (one-shot)": one["sbx run (one-shot)"], "bwrap": one["bwrap"], "firejail": one["firejail"],
            "gVisor runsc do": one["gVisor runsc do"], "podman run --rm": one["podman run --rm"],
            "docker run --rm": one["docker run --rm"],
        }
        for name, argv in many.items():
            why = have.get(tool_of.get(name, ""), None)
            if why:
                r5[name] = why
                continue
            t = now()
            ps = [subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                  for _ in range(a.many)]
            bad = sum(1 for p in ps if p.communicate(timeout=600)[0] != b"hi\n" or p.returncode != 0)
            r5[name] = (now() - t, bad)
            log(" ", name, f"{r5[name][0]:.2f} s, {bad} failed")
        # sbx's daemon: a.many clients at once, each create + run.
        d = Daemon(sbx, "--pool", "0")
        try:
            bad = [0]

            def client():
                try:
                    rpc = Rpc(d.sock)  # one connection per client
                    sid = rpc.call("sandbox.create")["sandboxId"]
                    if rpc.call("run", {"sandboxId": sid, "command": "echo hi"})["stdout"] != "hi\n":
                        bad[0] += 1
                except Exception:
                    bad[0] += 1
            t = now()
            ts = [threading.Thread(target=client) for _ in range(a.many)]
            for th in ts:
                th.start()
            for th in ts:
                th.join()
            r5["sbx over its socket (one client each)"] = (now() - t, bad[0])
        finally:
            d.stop()
        rows["5"] = r5
    finally:
        if dockerd:
            dockerd.terminate()
            dockerd.wait(60)
        for tool, pre in (("podman", PODMAN), ("docker", ["docker"])):
            if shutil.which(tool):
                subprocess.run([*pre, "rmi", "-f", IMAGE if tool == "docker" else pname], capture_output=True, timeout=120)
        shutil.rmtree(work, ignore_errors=True)

    def cell(v, fmt):
        if v is None:
            return ""
        if isinstance(v, str):
            return v
        return fmt(v)

    print(f"### sbx and its peers ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})\n")
    print(f"Machine: {os.cpu_count()} CPUs, kernel {platform.release()}; N = {a.n}, {a.idle} idle instances, "
          f"{a.many} at once.\n")
    print("| | one fresh instance, `echo hi` (ms, p50) | 100 MiB of output (ms) | memory per idle instance (MiB) | "
          f"{a.many} at once (s, failed) |")
    print("|---|---|---|---|---|")
    names = list(rows["1"].keys())
    mem_key = {"sbx run (one-shot)": "sbx (a daemon's sandboxes, session started)", "podman run --rm": "podman",
               "docker run --rm": "docker"}
    for name in names:
        m = rows["4"].get(mem_key.get(name, name))
        print(f"| {name} | {cell(rows['1'].get(name), lambda v: f'{med_ms(v):.1f}')} | "
              f"{cell(rows['3'].get(name), lambda v: f'{med_ms(v):.0f}')} | "
              f"{cell(m, lambda v: f'{v / 1048576:.2f}')} | "
              f"{cell(rows['5'].get(name), lambda v: f'{v[0]:.2f} ({v[1]})')} |")
    name = "sbx over its socket (one client each)"
    print(f"| {name} | | | | {cell(rows['5'].get(name), lambda v: f'{v[0]:.2f} ({v[1]})')} |")
    print("\n| into a running instance, `echo hi` | p50 (ms) |")
    print("|---|---|")
    for name, v in rows["2"].items():
        print(f"| {name} | {cell(v, lambda x: f'{med_ms(x):.2f}')} |")


if __name__ == "__main__":
    main()
