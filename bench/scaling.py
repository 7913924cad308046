#!/usr/bin/python3
"""Cost as the work grows: one sbx daemon (`sbx serve --socket --pool 0`, started here), measured
while it holds more and more sandboxes, and while more and more clients run at once.

  1. Latency against live sandboxes: the daemon holds 1, 10, 100, 1,000, 5,000 (--sizes)
     sandboxes, each with a warm default session (created, then `run` `true` once; creates and
     runs pipelined in batches of 50 on --conns connections). At each size, once the daemon has
     been quiet for --settle seconds, on a fresh connection: --pings `ping`s (each timed), then
     --n cycles of `sandbox.create` + `run` `echo hi` + `sandbox.destroy`, timed from the create
     to the run's result (and the destroy on its own). When the daemon's cap (health's
     limits.maxSandboxes) is below a size, the set grows only to the cap less one (the cycles
     need a free slot) and is measured there; then sandboxes are made until the daemon refuses,
     and its refusal is recorded. A create refused before that stops the growth the same way.
  2. Run latency against concurrent runs: --live (64) sandboxes, each on a connection of its
     own; K (--ks: 1, 2, 4, 8, 16, 32, 64) threads, each on one of them, run `echo hi` --runs
     times in a loop, all started together. p50/p99 of every run, and runs per second (all runs
     over the wall time from the start to the last result). The threads are Python's: the
     client's own cost is in the figures, and shares the 2 CPUs with the daemon.
  3. Memory against live sandboxes, at each size of 1 (before its timed cycles): the daemon's
     RSS (/proc/PID/status VmRSS), the memory charged to the sandboxes' cgroups (the daemon's
     sbx-<pid> memory cgroup: v1 memory.usage_in_bytes and memory.kmem.usage_in_bytes, or v2
     memory.current and memory.stat's kernel), the drop of MemAvailable and the growth of
     Slab + PageTables + KernelStack (/proc/meminfo, host-wide: other work on the machine moves
     them), each against the daemon before its first sandbox, and each divided by the count.

Writes scaling-create.png, scaling-ping.png, scaling-runs.png and scaling-memory.png to --out
(default docs/img/), prints a Markdown table of every number on stdout, progress on stderr.
Every sandbox is destroyed, the daemon stopped and its directory removed at the end, on error
and on Ctrl-C or SIGTERM too. Needs root (cgroups). Usage:
  bench/scaling.py [--sbx PATH] [--out DIR] [--sizes 1,10,100,1000,5000] [--n 30] [--pings 200]
                   [--live 64] [--ks 1,2,4,8,16,32,64] [--runs 50] [--conns 4] [--settle 3]
                   [--max-sandboxes N] [--quick]
--quick: sizes 1,10,50, K up to 8, 10 cycles, 50 pings, 20 runs, 1 s settle (a smoke test).
--max-sandboxes N is passed to sbx serve (the cap's path on a small scale); part 2 then uses as
many sandboxes as the cap leaves. A part that stops on an error is reported as far as it got,
and the exit status is then 1.
"""
import argparse
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from sbxrpc import Daemon, Rpc, now  # noqa: E402

BATCH = 50
T0 = time.monotonic()


def log(*a):
    print(f"scaling: [{time.monotonic() - T0:6.1f} s]", *a, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ the daemon and its clients

class LoggedDaemon(Daemon):
    """sbxrpc's Daemon, with its stderr kept in a file of its directory (to report its errors) and
    a stop that does not give up: SIGTERM, then SIGKILL after a deadline, the directory removed."""

    def __init__(self, sbx, *args):  # noqa: super().__init__ would send stderr to /dev/null
        self.dir = tempfile.mkdtemp(prefix="sbx-bench-scaling-")
        self.sock = os.path.join(self.dir, "s")
        self.log_path = os.path.join(self.dir, "stderr")
        self.rpc = None
        self.killed = False
        with open(self.log_path, "wb") as err:
            self.p = subprocess.Popen([sbx, "serve", "--socket", self.sock, *args], stdin=subprocess.DEVNULL,
                                      stderr=err)
        t = now()
        while not os.path.exists(self.sock):
            if now() - t > 10 or self.p.poll() is not None:
                self.stop()
                raise RuntimeError("sbx serve did not start")
            time.sleep(0.01)
        self.rpc = Rpc(self.sock)

    def stderr_lines(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return [line.rstrip("\n") for line in f if line.strip()]
        except OSError:
            return []

    def stop(self, deadline=120):
        try:
            if self.rpc:
                hang_up(self.rpc)
            if self.p.poll() is None:
                self.p.terminate()
                try:
                    self.p.wait(deadline)
                except subprocess.TimeoutExpired:
                    self.killed = True
                    self.p.kill()
                    self.p.wait(30)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class Pipe(Rpc):
    """An Rpc that can also send many requests at once and then read all their answers."""

    def batch(self, method, params_list):
        """Answers (result or {"error": ...}) to method called with each params, in order."""
        first = self.id + 1
        out = []
        for p in params_list:
            self.id += 1
            msg = {"jsonrpc": "2.0", "id": self.id, "method": method}
            if p is not None:
                msg["params"] = p
            out.append((json.dumps(msg) + "\n").encode())
        self.s.sendall(b"".join(out))
        got = {}
        while len(got) < len(params_list):
            line = self.f.readline()
            if not line:
                raise RuntimeError(f"{method}: the daemon closed the connection")
            ans = json.loads(line)
            i = ans.get("id")
            if isinstance(i, int) and first <= i <= self.id:
                got[i] = {"error": ans["error"]} if "error" in ans else ans["result"]
        return [got[i] for i in range(first, self.id + 1)]


def hang_up(c):
    """Closes an Rpc's connection for real (Rpc.close leaves it open while its makefile lives), so
    the daemon destroys the sandboxes it owns."""
    for x in (c.f, c.s):
        try:
            x.close()
        except OSError:
            pass


def err_text(e):
    """A JSON-RPC error (or an exception) as one line."""
    if isinstance(e, dict):
        data = e.get("data")
        return f"{e.get('code')} {e.get('message')}" + (f" (data: {data})" if data else "")
    return str(e)


# ------------------------------------------------------------------ the machine

def meminfo():
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            out[k] = int(v.split()[0])  # KiB
    return out


def vm_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def read_num(path, key=None):
    try:
        with open(path) as f:
            for line in f:
                if key is None:
                    return int(line.split()[0])
                if line.startswith(key + " "):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def cgroup_kib(pid):
    """KiB charged to the daemon's sbx-<pid> memory cgroup (every sandbox's is below it) and its
    kernel part, as bench_density.c reads them; (None, None) when there is none (yet)."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None, None
    for line in lines:
        hid, ctrl, path = line.split(":", 2)
        own = "" if path == "/" else path
        if ctrl == "memory":
            base = f"/sys/fs/cgroup/memory{own}/sbx-{pid}"
            use, kmem = read_num(f"{base}/memory.usage_in_bytes"), read_num(f"{base}/memory.kmem.usage_in_bytes")
        elif hid == "0" and ctrl == "":
            unified = "" if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else "/unified"
            base = f"/sys/fs/cgroup{unified}{own}/sbx-{pid}"
            use, kmem = read_num(f"{base}/memory.current"), read_num(f"{base}/memory.stat", "kernel")
        else:
            continue
        if use is not None:
            return use / 1024, (kmem / 1024 if kmem is not None else None)
    return None, None


def mem_now(pid):
    m = meminfo()
    cg, cg_kmem = cgroup_kib(pid)
    return {"avail": m["MemAvailable"], "kernel": m.get("Slab", 0) + m.get("PageTables", 0) + m.get("KernelStack", 0),
            "parts": {k: m.get(k, 0) for k in ("SReclaimable", "SUnreclaim", "PageTables", "KernelStack", "Shmem")},
            "rss": vm_rss_kib(pid), "cg": cg, "cg_kmem": cg_kmem, "fds": fd_count(pid)}


def leftover_cgroups(pid):
    found = []
    for top, dirs, _ in os.walk("/sys/fs/cgroup"):
        for d in list(dirs):
            if d == f"sbx-{pid}":
                found.append(os.path.join(top, d))
                dirs.remove(d)
        if top.count("/") > 7:
            dirs[:] = []
    return found


def machine():
    m = meminfo()
    return {"nproc": os.cpu_count(), "mem_gib": m["MemTotal"] / 1048576, "kernel": platform.release(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "host": platform.node(),
            "busy": busy_share(1.0)}


def busy_share(seconds):
    """The share of all CPUs busy (anything, /proc/stat) over the next seconds."""
    c0 = cpu_times(os.getpid())
    time.sleep(seconds)
    c1 = cpu_times(os.getpid())
    return (c1[1] - c0[1]) / max(1e-9, c1[2] - c0[2])


def cpu_times(pid):
    """(the daemon's utime + stime, the machine's busy time, its total time), in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    total = sum(v[:8])  # guest time is already in user
    return (int(fields[11]) + int(fields[12])) / tick, (total - v[3] - v[4]) / tick, total / tick


def git_rev():
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "diff", "--quiet", "HEAD"]).returncode != 0
        return rev + (" (modified)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"


# ------------------------------------------------------------------ statistics

def pct(xs, p):
    """Nearest-rank percentile of xs (so p99 of fewer than 100 samples is their maximum); None if empty."""
    if not xs:
        return None
    s = sorted(xs)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def p50(xs):
    return statistics.median(xs) if xs else None


def ms(v, fmt="{:.2f}"):
    return "—" if v is None else fmt.format(v * 1000)


def num(v, fmt="{:.0f}"):
    return "—" if v is None else fmt.format(v)


# ------------------------------------------------------------------ part 1: growing the live set

class LiveSet:
    """Sandboxes with warm default sessions, spread over a few pipelining connections that own
    them (closing a connection destroys its sandboxes)."""

    def __init__(self, sock, conns):
        self.conns = [Pipe(sock) for _ in range(conns)]
        self.ids = [[] for _ in range(conns)]
        self.lock = threading.Lock()

    def count(self):
        return sum(len(x) for x in self.ids)

    def grow_to(self, target):
        """Makes sandboxes (each running `true` once) until there are target; returns the first
        error's text (a refused create, a failed run) or None. On an error, growing stops."""
        todo = [max(0, target - self.count())]
        errors = []

        def worker(i):
            c = self.conns[i]
            while True:
                with self.lock:
                    if errors or todo[0] <= 0:
                        return
                    k = min(BATCH, todo[0])
                    todo[0] -= k
                try:
                    made = c.batch("sandbox.create", [None] * k)
                    sids = [a["sandboxId"] for a in made if "sandboxId" in a]
                    self.ids[i].extend(sids)
                    bad = [a for a in made if "sandboxId" not in a]
                    runs = c.batch("run", [{"sandboxId": s, "command": "true"} for s in sids])
                    bad_runs = [r for r in runs if r.get("exitCode") != 0]
                except (OSError, RuntimeError, ValueError) as e:
                    with self.lock:
                        errors.append(f"connection {i}: {e}")
                    return
                with self.lock:
                    if bad:
                        errors.append(f"sandbox.create: {err_text(bad[0].get('error'))}")
                    if bad_runs:
                        r = bad_runs[0]
                        errors.append(f"warm run `true`: {err_text(r['error']) if 'error' in r else r}")

        ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(len(self.conns))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return errors[0] if errors else None

    def destroy_one(self):
        for i in range(len(self.conns)):
            if self.ids[i]:
                self.conns[i].call("sandbox.destroy", {"sandboxId": self.ids[i].pop()})
                return

    def close(self):
        for c in self.conns:
            hang_up(c)
        self.conns = []
        self.ids = []


def wait_sandboxes(rpc, n, timeout):
    """Seconds until health says n sandboxes (None if it does not within timeout)."""
    t = now()
    while now() - t < timeout:
        if rpc.call("health")["sandboxes"] == n:
            return now() - t
        time.sleep(0.01)
    return None


def measure_latency(sock, n, pings):
    """On a fresh connection: pings timed `ping`s, then n create + run `echo hi` + destroy cycles."""
    out = {"ping": [], "first": [], "destroy": [], "errors": []}
    c = Rpc(sock)
    try:
        for _ in range(pings):
            t = now()
            c.call("ping")
            out["ping"].append(now() - t)
        fails_in_row = 0
        for _ in range(n):
            t = now()
            try:
                sid = c.call("sandbox.create")["sandboxId"]
            except RuntimeError as e:
                out["errors"].append(str(e))
                fails_in_row += 1
                if fails_in_row >= 3:
                    break
                continue
            try:
                r = c.call("run", {"sandboxId": sid, "command": "echo hi"})
                t1 = now()
                if r.get("stdout") == "hi\n" and r.get("exitCode") == 0:
                    out["first"].append(t1 - t)
                    fails_in_row = 0
                else:
                    out["errors"].append(f"run: {r}")
                    fails_in_row += 1
            except RuntimeError as e:
                out["errors"].append(str(e))
                fails_in_row += 1
            t2 = now()
            c.call("sandbox.destroy", {"sandboxId": sid})
            out["destroy"].append(now() - t2)
            if fails_in_row >= 3:
                break
    finally:
        hang_up(c)
    return out


def probe_refusal(sock, tries):
    """Makes sandboxes on a connection of its own until one is refused: (made, refusal text or None).
    Closing the connection then destroys them."""
    c = Pipe(sock)
    made = 0
    try:
        for _ in range(tries):
            a = c.batch("sandbox.create", [None])[0]
            if "sandboxId" not in a:
                return made, f"sandbox.create: {err_text(a.get('error'))}"
            made += 1
        return made, None
    finally:
        hang_up(c)


def probe(d, info, notes, n):
    """At the cap less one (n live): makes sandboxes until the daemon refuses, notes its refusal,
    then destroys them again."""
    info["capped_at"] = n
    if wait_sandboxes(d.rpc, n, 60) is None:
        notes.append(f"after the cycles at {n}, health did not come back to {n} sandboxes within 60 s")
    made, why = probe_refusal(d.sock, info["cap"] - n + 2)
    info["max_live"] = max(info["max_live"], n + made)
    if why:
        if info["refusal"] and why != info["refusal"]:
            notes.append(f"then at {n + made} sandboxes the daemon refused: {why}")
        info["refusal"] = info["refusal"] or why
        info["refused_at"] = n + made
        log(f"refused at {n + made}: {why}")
    else:
        notes.append(f"{made} more creates past {n} were not refused (cap {info['cap']})")
    wait_sandboxes(d.rpc, n, 60)


def part_live(d, a, rows, notes, info):
    """Part 1 and 3: fills rows (one per size) and info (the cap, the refusal, the baseline)."""
    pid = d.p.pid
    h = d.rpc.call("health")
    cap, cap_from = h["limits"]["maxSandboxes"], h["limits"]["maxSandboxesFrom"]
    info.update({"cap": cap, "cap_from": cap_from, "refusal": None, "max_live": 0, "capped_at": None})
    time.sleep(a.settle)
    base = mem_now(pid)
    info["base"] = base
    live = LiveSet(d.sock, a.conns)
    try:
        for size in a.sizes:
            target, capped = size, False
            if size > cap - 1:
                target, capped = cap - 1, True
                notes.append(f"size {size} is beyond the daemon's cap of {cap} sandboxes (bound by {cap_from}): "
                             f"grown to {target}, the cap less the slot the timed cycles need")
            if target <= live.count() and rows:
                if capped:
                    probe(d, info, notes, live.count())
                break
            t = now()
            log(f"growing to {target} sandboxes")
            err = live.grow_to(target)
            grow_s = now() - t
            if err:
                capped = True
                info["refusal"] = err
                notes.append(f"growing to {target}: stopped at {live.count()} sandboxes: {err}")
                log(f"stopped at {live.count()}: {err}")
            info["max_live"] = max(info["max_live"], live.count())
            while live.count() >= cap:
                live.destroy_one()
            n = live.count()
            if n == 0:
                break
            time.sleep(a.settle)
            m = mem_now(pid)
            in_health = d.rpc.call("health")["sandboxes"]
            log(f"{n} sandboxes: measuring {a.pings} pings and {a.n} cycles")
            lat = measure_latency(d.sock, a.n, a.pings)
            for e in dict.fromkeys(lat["errors"]):
                notes.append(f"at {n} sandboxes, a timed cycle failed: {e}")
            rows.append({"size": size, "n": n, "health": in_health, "grow_s": grow_s, "mem": m, **lat})
            log(f"  create→first result p50 {ms(p50(lat['first']))} ms, ping p50 {ms(p50(lat['ping']), '{:.3f}')} ms, "
                f"MemAvailable {(m['avail'] - base['avail']) / 1024:+.0f} MiB")
            if capped:
                probe(d, info, notes, n)
                break
    finally:
        n_all = live.count()
        live.close()
    gone = wait_sandboxes(d.rpc, 0, 300)
    info["teardown"] = (n_all, gone)
    time.sleep(a.settle)
    info["after"] = mem_now(pid)


# ------------------------------------------------------------------ part 2: concurrent runs

def part_runs(d, a, notes, results):
    """Part 2: fills results (one per K)."""
    n_live = max(a.live, max(a.ks))
    log(f"making {n_live} sandboxes, one per connection")
    conns, sids = [], []
    try:
        for _ in range(n_live):
            c = Rpc(d.sock)
            conns.append(c)
            try:
                sid = c.call("sandbox.create")["sandboxId"]
                c.call("run", {"sandboxId": sid, "command": "true"})
            except RuntimeError as e:
                notes.append(f"concurrent runs: only {len(sids)} of {n_live} sandboxes made ({e}): K above "
                             f"{len(sids)} not measured")
                log(notes[-1])
                break
            sids.append(sid)
        time.sleep(a.settle)
        for k in a.ks:
            if k > len(sids):
                continue
            lat = [[] for _ in range(k)]
            errs = []
            go = threading.Barrier(k + 1)

            def worker(i):
                c, sid = conns[i], sids[i]
                go.wait()
                for _ in range(a.runs):
                    t = now()
                    try:
                        r = c.call("run", {"sandboxId": sid, "command": "echo hi"})
                        if r.get("stdout") == "hi\n" and r.get("exitCode") == 0:
                            lat[i].append(now() - t)
                        else:
                            errs.append(f"run: {r}")
                    except (RuntimeError, OSError, ValueError) as e:
                        errs.append(str(e))
                        if isinstance(e, (OSError, ValueError)):
                            return

            ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(k)]
            for t in ts:
                t.start()
            go.wait()
            t0, c0 = now(), cpu_times(d.p.pid)
            for t in ts:
                t.join()
            wall, c1 = now() - t0, cpu_times(d.p.pid)
            xs = [x for li in lat for x in li]
            results.append({"k": k, "lat": xs, "wall": wall, "ok": len(xs), "errors": errs, "live": len(sids),
                            "daemon_cpu": (c1[0] - c0[0]) / wall, "busy": (c1[1] - c0[1]) / max(1e-9, c1[2] - c0[2])})
            log(f"K={k}: p50 {ms(p50(xs))} ms, p99 {ms(pct(xs, 99))} ms, {len(xs) / wall:.0f} runs/s, "
                f"{len(errs)} failed")
            time.sleep(1)
    finally:
        for c in conns:
            hang_up(c)
        if wait_sandboxes(d.rpc, 0, 120) is None:
            notes.append(f"the {len(conns)} sandboxes of the concurrent runs were not all gone 120 s after their "
                         "connections closed")


# ------------------------------------------------------------------ plots

def plots(out, mach, rev, rows, runs, info):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    os.makedirs(out, exist_ok=True)
    sub = f"{mach['date']} · {mach['nproc']} CPUs, {mach['mem_gib']:.1f} GiB, Linux {mach['kernel']} · sbx {rev}"
    files = []
    xs = [r["n"] for r in rows]
    count_fmt = FuncFormatter(lambda v, _: f"{v:,.0f}")

    def count_axis(ax):
        log_x = len(xs) > 1 and max(xs) / max(1, min(xs)) >= 10
        if log_x:
            ax.set_xscale("log")
        ax.set_xticks(xs)
        labels, shifted = [], False
        for i, x in enumerate(xs):  # a label too close to the one before it goes on a second line
            close = i > 0 and not shifted and (x / xs[i - 1] < 1.8 if log_x else x - xs[i - 1] < 0.06 * max(xs))
            labels.append(("\n" if close else "") + f"{x:,}")
            shifted = close
        ax.set_xticklabels(labels)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("live sandboxes, each with a warm default session")
        if info.get("capped_at"):
            ax.axvline(info["cap"], color="grey", ls=":", lw=1,
                       label=f"the daemon's cap: {info['cap']:,} (bound by {info['cap_from']})")
        ax.grid(True, which="major", alpha=0.3)

    def ms_axis(ax, ys):
        """A log axis when the values span more than a decade, else linear from 0."""
        ys = [y for y in ys if y is not None and not math.isnan(y) and y > 0]
        if ys and max(ys) / min(ys) > 10:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(FuncFormatter(
                lambda v, _: f"{v:g}" if str(f"{v:g}")[0] in "25" else ""))
            ax.grid(True, which="minor", alpha=0.12)
        else:
            ax.set_ylim(bottom=0)

    def save(fig, name):
        fig.tight_layout()
        path = os.path.join(out, name)
        fig.savefig(path, dpi=120)
        plt.close(fig)
        files.append(path)

    def lat_plot(name, key, title, label, extra=None):
        fig, ax = plt.subplots(figsize=(7.5, 4.6))
        every = []
        for q, style in ((50, "o-"), (99, "s--")):
            ys = [(pct(r[key], q) or math.nan) * 1000 for r in rows]
            every += ys
            ax.plot(xs, ys, style, label=f"{label} p{q}")
        if extra:
            extra(ax)  # drawn, but the axis is fitted to the main series
        count_axis(ax)
        ms_axis(ax, every)
        ax.set_ylabel("ms")
        ax.set_title(f"{title}\n{sub}", fontsize=10)
        ax.legend(fontsize=8)
        save(fig, name)

    if rows:
        n_cycles = max(len(r["first"]) for r in rows)
        lat_plot("scaling-create.png", "first",
                 f"sbx: sandbox.create → first `run` result, against live sandboxes ({n_cycles} cycles each)",
                 "create + run `echo hi`",
                 lambda ax: ax.plot(xs, [(p50(r["destroy"]) or math.nan) * 1000 for r in rows], "^:", color="grey",
                                    label="sandbox.destroy p50"))
        n_pings = max(len(r["ping"]) for r in rows)
        lat_plot("scaling-ping.png", "ping", f"sbx: `ping` round trip against live sandboxes ({n_pings} each)", "ping")

        fig, ax = plt.subplots(figsize=(7.5, 4.6))
        series = (
            ("charged to the sandboxes' cgroups", lambda r, b: None if r["mem"]["cg"] is None else r["mem"]["cg"] - (b["cg"] or 0)),
            ("MemAvailable drop (host-wide)", lambda r, b: b["avail"] - r["mem"]["avail"]),
            ("Slab + PageTables + KernelStack growth", lambda r, b: r["mem"]["kernel"] - b["kernel"]),
            ("daemon RSS growth", lambda r, b: r["mem"]["rss"] - b["rss"]),
        )
        per = []
        for label, f in series:
            ys = [f(r, info["base"]) for r in rows]
            per.append([math.nan if y is None else y / r["n"] for y, r in zip(ys, rows)])
        # Host-wide figures over one or a few sandboxes are mostly noise: the axis is fitted to the
        # sizes from 10 on, and a point beyond it is drawn at its edge with its value written.
        fit = [y for ys in per for x, y in zip(xs, ys) if not math.isnan(y) and (x >= 10 or max(xs) < 10)]
        lo, hi = min([0] + fit), max([1] + fit)
        lo, hi = lo - 0.08 * (hi - lo), hi + 0.12 * (hi - lo)
        for (label, _), ys, style in zip(series, per, ("o-", "s--", "^-.", "d:")):
            line = ax.plot(xs, [min(max(y, lo), hi) for y in ys], style, label=label)[0]
            for x, y in zip(xs, ys):
                if not math.isnan(y) and not lo <= y <= hi:
                    ax.annotate(f"{y:,.0f}", (x, min(max(y, lo), hi)), textcoords="offset points",
                                xytext=(6, -10 if y < lo else 4), fontsize=7, color=line.get_color())
        ax.set_ylim(lo, hi)
        count_axis(ax)
        ax.axhline(0, color="black", lw=0.5)
        ax.set_ylabel("KiB per live sandbox")
        ax.set_title(f"sbx: memory per idle sandbox with a warm session, against their number\n{sub}", fontsize=10)
        ax.legend(fontsize=8)
        save(fig, "scaling-memory.png")

    if runs:
        ks = [r["k"] for r in runs]
        fig, ax = plt.subplots(figsize=(7.5, 4.6))
        l1 = ax.plot(ks, [(p50(r["lat"]) or math.nan) * 1000 for r in runs], "o-", label="run latency p50")
        l2 = ax.plot(ks, [(pct(r["lat"], 99) or math.nan) * 1000 for r in runs], "s--", label="run latency p99")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks)
        ax.xaxis.set_major_formatter(count_fmt)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(f"client threads running at once (each its own connection and sandbox; {runs[0]['live']} live)")
        ax.set_ylabel("ms per `run` `echo hi`")
        ax.grid(True, alpha=0.3)
        ms_axis(ax, list(l1[0].get_ydata()) + list(l2[0].get_ydata()))
        ax2 = ax.twinx()
        l3 = ax2.plot(ks, [r["ok"] / r["wall"] for r in runs], "^:", color="tab:green", label="runs/s, all threads")
        ax2.set_ylabel("runs per second")
        ax2.set_ylim(0, max(r["ok"] / r["wall"] for r in runs) * 1.25)
        ax.legend(l1 + l2 + l3, [x.get_label() for x in l1 + l2 + l3], fontsize=8, loc="center left")
        n_runs = max(len(r["lat"]) // r["k"] for r in runs)
        ax.set_title(f"sbx: `run` latency and throughput against concurrent runs ({n_runs} runs per thread)\n{sub}",
                     fontsize=10)
        save(fig, "scaling-runs.png")
    return files


# ------------------------------------------------------------------ the report

def report(a, mach, rev, rows, runs, info, notes, files, elapsed, stderr_lines):
    base = info.get("base")
    sizes_reached = ", ".join(f"{r['n']:,}" for r in rows) or "none"
    capped = ""
    if info.get("capped_at"):
        capped = f" (stopped at the daemon's cap: largest live set {info['max_live']:,})"
    print("# sbx scaling: cost as the work grows (bench/scaling.py)\n")
    print(f"Machine: {mach['nproc']} CPUs, MemTotal {mach['mem_gib']:.1f} GiB, kernel {mach['kernel']}; "
          f"date {mach['date']}; commit {rev}; sizes asked {', '.join(f'{s:,}' for s in a.sizes)}, "
          f"reached {sizes_reached}{capped}; daemon cap {format(info['cap'], ',') if 'cap' in info else '?'} sandboxes "
          f"(bound by {info.get('cap_from', '?')}); CPUs {mach['busy'] * 100:.0f} % busy in the second before the start; {elapsed:.0f} s in all.\n")
    if info.get("refusal"):
        print(f"The daemon's refusal past its cap: `{info['refusal']}`\n")

    print("## Latency against live sandboxes\n")
    print(f"A fresh connection at each size, the daemon otherwise idle: {a.pings} `ping`s, then {a.n} cycles of "
          "`sandbox.create` + `run` `echo hi` (timed to the run's result) + `sandbox.destroy` (timed alone). "
          "p99 is nearest-rank: of fewer than 100 samples, their maximum.\n")
    print("| live sandboxes | health says | made in (s) | create → first result p50 (ms) | p99 (ms) | "
          "destroy p50 (ms) | cycles ok | ping p50 (ms) | ping p99 (ms) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['n']:,} | {r['health']:,} | {r['grow_s']:.1f} | {ms(p50(r['first']))} | {ms(pct(r['first'], 99))} | "
              f"{ms(p50(r['destroy']))} | {len(r['first'])}/{a.n} | {ms(p50(r['ping']), '{:.3f}')} | "
              f"{ms(pct(r['ping'], 99), '{:.3f}')} |")
    print()

    print("## Run latency against concurrent runs\n")
    if runs:
        print(f"{runs[0]['live']} live sandboxes, each on a connection of its own; K Python threads, each on one, run "
              f"`echo hi` {a.runs} times in a loop, all started together. runs/s: every run over the wall time. "
              "Daemon CPU: its own utime + stime over that time (the sandboxes' processes not included); machine "
              "busy: all CPUs, anything running on them (/proc/stat).\n")
        print("| client threads K | runs ok | p50 (ms) | p99 (ms) | max (ms) | runs/s | failed | "
              "daemon CPU (% of one) | machine busy (% of all) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in runs:
            print(f"| {r['k']} | {r['ok']} | {ms(p50(r['lat']))} | {ms(pct(r['lat'], 99))} | "
                  f"{ms(max(r['lat']) if r['lat'] else None)} | {r['ok'] / r['wall']:.0f} | {len(r['errors'])} | "
                  f"{r['daemon_cpu'] * 100:.0f} | {r['busy'] * 100:.0f} |")
        print()
    else:
        print("Not measured.\n")

    print("## Memory against live sandboxes\n")
    if base:
        print(f"Against the daemon before its first sandbox (MemAvailable {base['avail'] / 1024:,.0f} MiB, daemon "
              f"RSS {base['rss'] / 1024:.1f} MiB, {base['fds']} fds), read after {a.settle:g} s of quiet at each size. "
              "*Charged*: the daemon's sbx-<pid> memory cgroup, under which every sandbox's is (their processes, "
              "tmpfs, the kernel objects it accounts; *of which kernel*: its kmem part). MemAvailable and "
              "Slab + PageTables + KernelStack are the whole host's: other work on it moves them.\n")
        print("| live sandboxes | daemon RSS (MiB) | daemon RSS growth / sandbox (KiB) | charged (MiB) | "
              "charged / sandbox (KiB) | of which kernel / sandbox (KiB) | MemAvailable drop (MiB) | "
              "MemAvailable drop / sandbox (KiB) | Slab+PageTables+KernelStack growth (MiB) | "
              "kernel growth / sandbox (KiB) | daemon fds |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            m, n = r["mem"], r["n"]
            cg = None if m["cg"] is None else m["cg"] - (base["cg"] or 0)
            km = None if m["cg_kmem"] is None else m["cg_kmem"] - (base["cg_kmem"] or 0)
            drop, kern = base["avail"] - m["avail"], m["kernel"] - base["kernel"]
            print(f"| {n:,} | {m['rss'] / 1024:.1f} | {(m['rss'] - base['rss']) / n:.1f} | "
                  f"{num(None if cg is None else cg / 1024, '{:.1f}')} | {num(None if cg is None else cg / n)} | "
                  f"{num(None if km is None else km / n)} | {drop / 1024:.1f} | {drop / n:.0f} | "
                  f"{kern / 1024:.1f} | {kern / n:.0f} | {m['fds']:,} |")
        print()

    if base and rows:
        r = rows[-1]
        parts = ", ".join(f"{k} {(r['mem']['parts'][k] - base['parts'][k]) / r['n']:+.0f}" for k in base["parts"])
        print(f"Host-wide growth at {r['n']:,} sandboxes by /proc/meminfo field, KiB per sandbox: {parts}.\n")

    print("## Notes\n")
    n_all, gone = info.get("teardown", (0, None))
    if n_all:
        print(f"- teardown of {n_all:,} sandboxes by closing the connections that made them: `health` said 0 after "
              + (f"{gone:.1f} s" if gone is not None else "more than 300 s (it did not)"))
    if base and info.get("after"):
        print(f"- MemAvailable after that teardown against the baseline: "
              f"{(info['after']['avail'] - base['avail']) / 1024:+.0f} MiB (the noise of the MemAvailable columns)")
    for n in notes:
        print(f"- {n}")
    for r in runs:
        for e in list(dict.fromkeys(r["errors"]))[:3]:
            print(f"- K={r['k']}: a run failed: {e}")
    if stderr_lines:
        print(f"- the daemon's stderr ({len(stderr_lines)} lines; the distinct ones, up to 10):")
        for line in list(dict.fromkeys(stderr_lines))[:10]:
            print(f"  - `{line[:300]}`")
    else:
        print("- the daemon wrote nothing on stderr")
    for f in files:
        print(f"- plot: {f}")


# ------------------------------------------------------------------ main

def ints(s):
    return [int(x) for x in s.split(",") if x.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    default_sbx = os.environ.get("SBX_BIN") or next(
        (p for p in (os.path.join(ROOT, "build-dev", "src", "cli", "sbx"), os.path.join(ROOT, "build", "src", "cli", "sbx"))
         if os.path.exists(p)), os.path.join(ROOT, "build", "src", "cli", "sbx"))
    ap.add_argument("--sbx", default=default_sbx, help="the sbx binary (default: $SBX_BIN, else build-dev's, else build's)")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "img"), help="where the PNGs go (default docs/img/)")
    ap.add_argument("--sizes", type=ints, default=None, help="live sandboxes, in order (default 1,10,100,1000,5000)")
    ap.add_argument("--n", type=int, default=None, help="timed create + run + destroy cycles per size (default 30)")
    ap.add_argument("--pings", type=int, default=None, help="timed pings per size (default 200)")
    ap.add_argument("--live", type=int, default=64, help="live sandboxes while runs go concurrently (default 64)")
    ap.add_argument("--ks", type=ints, default=None, help="client threads running at once (default 1,2,4,...,64)")
    ap.add_argument("--runs", type=int, default=None, help="runs per thread at each K (default 50)")
    ap.add_argument("--conns", type=int, default=4, help="connections that make the live sandboxes (default 4)")
    ap.add_argument("--settle", type=float, default=None, help="seconds of quiet before measuring (default 3)")
    ap.add_argument("--max-sandboxes", type=int, default=None,
                    help="passed to sbx serve (default: none, the daemon's derived cap)")
    ap.add_argument("--quick", action="store_true", help="sizes 1,10,50, K up to 8, fewer samples")
    a = ap.parse_args()
    q = a.quick
    a.sizes = a.sizes or ([1, 10, 50] if q else [1, 10, 100, 1000, 5000])
    a.ks = a.ks or ([1, 2, 4, 8] if q else [1, 2, 4, 8, 16, 32, 64])
    a.n = a.n if a.n is not None else (10 if q else 30)
    a.pings = a.pings if a.pings is not None else (50 if q else 200)
    a.runs = a.runs if a.runs is not None else (20 if q else 50)
    a.settle = a.settle if a.settle is not None else (1 if q else 3)
    if os.geteuid() != 0:
        sys.exit("scaling: needs root (sandboxes, cgroups)")
    if not os.access(a.sbx, os.X_OK):
        sys.exit(f"scaling: no sbx binary at {a.sbx} (--sbx)")

    def on_term(sig, _frame):
        raise KeyboardInterrupt(f"signal {sig}")
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)

    mach, rev = machine(), git_rev()
    t_start = now()
    rows, runs, notes, info = [], [], [], {}
    d = LoggedDaemon(a.sbx, "--pool", "0", *(["--max-sandboxes", str(a.max_sandboxes)] if a.max_sandboxes else []))
    pid = d.p.pid
    stderr_lines = []
    failed = False
    try:
        for part, run in (("latency and memory against live sandboxes", lambda: part_live(d, a, rows, notes, info)),
                          ("concurrent runs", lambda: part_runs(d, a, notes, runs))):
            try:
                run()
            except (OSError, RuntimeError, ValueError, KeyError, TypeError) as e:  # report what was measured
                failed = True
                notes.append(f"**{part} stopped on an error**: {type(e).__name__}: {e}")
                log(notes[-1])
                if d.p.poll() is not None:
                    notes.append(f"the daemon exited ({d.p.returncode})")
                    break
    except KeyboardInterrupt:
        log("interrupted: cleaning up")
        raise
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # a second Ctrl-C must not stop the cleanup
            signal.signal(sig, signal.SIG_IGN)
        stderr_lines = d.stderr_lines()
        log("stopping the daemon")
        d.stop()
        left = leftover_cgroups(pid)
        if d.killed:
            notes.append("the daemon did not stop within 120 s of SIGTERM and was killed")
            for path in left:  # a killed daemon leaves its (empty) cgroups: remove them, deepest first
                for top, _, _ in sorted(os.walk(path), key=lambda w: -w[0].count("/")):
                    try:
                        os.rmdir(top)
                    except OSError:
                        pass
            left = leftover_cgroups(pid)
        if left:
            notes.append(f"cgroups of the daemon left after it stopped: {', '.join(left)}")
            log(notes[-1])
        signal.signal(signal.SIGINT, signal.default_int_handler)
    files = plots(a.out, mach, rev, rows, runs, info)
    report(a, mach, rev, rows, runs, info, notes, files, now() - t_start, stderr_lines)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as e:
        sys.exit(f"scaling: interrupted ({str(e) or 'Ctrl-C'}); the daemon was stopped")
