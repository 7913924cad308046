#!/usr/bin/python3
"""Code cells through sbx's Python SDK against a Jupyter kernel, side by side in one run.

sbx: a Python code context (sbx's kernel, IPython inside a sandbox; each cell runs in a fork of
the context and becomes the context only when it ends). Jupyter: Debian's python3-ipykernel on
the host (no sandbox), driven through python3-jupyter-client as its users drive it: a
KernelManager with the `python3` kernelspec, a blocking client, `execute()`, then the
execute_reply on the shell channel and the `idle` status on iopub.

  1. `x = 1` round trip, p50/p90/p99 over N cells after a warm-up, sbx and Jupyter in
     alternate blocks. Goal: sbx <= 0.5x Jupyter's p50. Then N/3 cells 20 ms apart (a caller
     that does something between cells: sbx forks the context's next worker meanwhile).
  2. `x = 1` with 1 GiB held (`big = np.ones(1 << 27)` in the context / kernel), next to the
     Linux kernel's own fork cost of a host python3 holding 1 GiB (os.fork() + child _exit +
     waitpid, median of 20). numpy asks for transparent huge pages (madvise) for large arrays;
     the same is measured with NUMPY_MADVISE_HUGEPAGE=0 (1 GiB in 4 KiB pages, the cost of
     a context of many small objects). Goal: `x = 1` with 1 GiB held <= 15 ms.
  3. A killed cell to the next cell's first output: `while True: pass` started (start_code),
     cancelled (handle.cancel()), then `print('back')` with on_stdout, from the cancel call to
     the first callback (median of N). Jupyter: KernelManager.restart_kernel() and the setup
     cell (`import numpy as np; big = np.ones(1 << 24)`) run again, until its execute_reply
     (median of N). For reference also restart_kernel(now=True), and interrupt_kernel() then
     `print('back')` (which keeps the kernel but not the state as it was before the cell).
     Goal: <= 5 ms for sbx.

Then where sbx's time goes: an empty cell (no IPython run_cell), cells 20 ms apart (the next
worker already forked), a shell command through the same SDK, the page faults of a cell, the
fork of a host IPython process, IPython's own run_cell.

Prints a Markdown report on stdout; progress on stderr. Needs root (sandboxes), /usr/bin/python3
with python3-ipykernel, python3-jupyter-client and python3-numpy; about 2-3 minutes.

Usage: bench/code_cells.py [--sbx PATH] [--n 300] [--warmup 30] [--kill-n 20] [--restart-n 5] [--quick]
"""
import argparse
import os
import platform
import queue
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "sdk", "python"))

from sbx import Sandbox  # noqa: E402

SETUP = "import numpy as np; big = np.ones(1 << 24)"  # 128 MiB, the state a restart must rebuild
BIG = "import numpy as np; big = np.ones(1 << 27)"    # 1 GiB
LOOP = "print('go')\nwhile True: pass"


def log(*a):
    print("code_cells:", *a, file=sys.stderr, flush=True)


def now():
    return time.perf_counter()  # CLOCK_MONOTONIC on Linux


def pct(xs, q):
    """Linear interpolation between ranks, as the other benchmarks do."""
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def ms(x):
    return f"{x:.2f}" if x < 100 else f"{x:.0f}"


def busy_jiffies():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4], sum(v)  # busy (all but idle, iowait), all


# ------------------------------------------------------------------ host references

FORK_SNIPPET = r"""
import os, statistics, sys, time
import numpy as np
big = np.ones(1 << 27)
huge = 0
for line in open("/proc/self/smaps_rollup"):
    if line.startswith("AnonHugePages:"):
        huge = int(line.split()[1]) << 10
ts = []
for _ in range(int(sys.argv[1])):
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    ts.append((time.perf_counter() - t) * 1e3)
print(statistics.median(ts), huge)
"""

IPY_SNIPPET = r"""
import os, statistics, sys, time
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config
cfg = Config()
cfg.HistoryManager.enabled = False
sh = InteractiveShell.instance(config=cfg)
n = int(sys.argv[1])
for _ in range(30):
    sh.run_cell("x = 1", store_history=True)
ts = []
for _ in range(n):
    t = time.perf_counter()
    sh.run_cell("x = 1", store_history=True)
    ts.append((time.perf_counter() - t) * 1e3)
run = statistics.median(ts)
rss = 0
for line in open("/proc/self/status"):
    if line.startswith("VmRSS:"):
        rss = int(line.split()[1]) << 10
ts = []
for _ in range(20):
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    ts.append((time.perf_counter() - t) * 1e3)
print(run, statistics.median(ts), rss)
"""


def host_fork_1gib(n, thp):
    env = dict(os.environ)
    if not thp:
        env["NUMPY_MADVISE_HUGEPAGE"] = "0"
    out = subprocess.run(["/usr/bin/python3", "-c", FORK_SNIPPET, str(n)], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[0]), int(out[1])


def host_ipython(n):
    out = subprocess.run(["/usr/bin/python3", "-c", IPY_SNIPPET, str(n)], check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1]), int(out[2])


# ------------------------------------------------------------------ Jupyter

class Jupyter:
    """A kernel from the `python3` kernelspec and a blocking client, as jupyter_client's users
    have them."""

    def __init__(self):
        # Only silences debugpy's note on frozen modules (ipykernel's kernelspec lookup imports
        # it, here and in the kernel).
        os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
        from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
        from jupyter_client.manager import KernelManager
        self.kernel_cmd = None
        try:
            KernelSpecManager().get_kernel_spec("python3")
            self.km = KernelManager(kernel_name="python3")
        except NoSuchKernel:
            # No kernelspec installed: the launcher itself, as jupyter_client would run it.
            self.km = KernelManager(kernel_cmd=["/usr/bin/python3", "-m", "ipykernel_launcher",
                                                "-f", "{connection_file}"])
            self.kernel_cmd = "python3 -m ipykernel_launcher (no kernelspec)"
        self.stderr = open(os.devnull, "w")
        self.km.start_kernel(stdout=self.stderr, stderr=self.stderr)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def spec(self):
        if self.kernel_cmd:
            return self.kernel_cmd
        return "kernelspec python3: " + " ".join(self.km.kernel_spec.argv)

    def reply(self, msg_id, timeout=60):
        while True:
            m = self.kc.get_shell_msg(timeout=timeout)
            if m["parent_header"].get("msg_id") == msg_id:
                return m

    def idle(self, msg_id, timeout=60):
        while True:
            m = self.kc.get_iopub_msg(timeout=timeout)
            if (m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "status"
                    and m["content"]["execution_state"] == "idle"):
                return m

    def first_stream(self, msg_id, timeout=60):
        while True:
            m = self.kc.get_iopub_msg(timeout=timeout)
            if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "stream":
                return m

    def run(self, code, timeout=60):
        """execute(), then its execute_reply and the idle status that ends it."""
        msg_id = self.kc.execute(code)
        r = self.reply(msg_id, timeout)
        self.idle(msg_id, timeout)
        if r["content"]["status"] != "ok":
            raise RuntimeError(f"jupyter: {code!r}: {r['content'].get('ename')} {r['content'].get('evalue')}")
        return r

    def start_loop(self, stop_on_error=True):
        """`while True: pass` running in the kernel, once it printed 'go' (or after 5 s if iopub
        missed it right after a restart)."""
        msg_id = self.kc.execute(LOOP, stop_on_error=stop_on_error)
        try:
            self.first_stream(msg_id, timeout=5)
        except queue.Empty:
            log("jupyter: no 'go' on iopub within 5 s; going on")
        return msg_id

    def drain(self):
        for get in (self.kc.get_iopub_msg, self.kc.get_shell_msg):
            while True:
                try:
                    get(timeout=0.05)
                except queue.Empty:
                    break

    def close(self):
        try:
            self.kc.stop_channels()
            self.km.shutdown_kernel(now=True)
        finally:
            self.stderr.close()


# ------------------------------------------------------------------ sbx

def sbx_cells(sb, code, n, context=None, gap=0.0):
    ts = []
    for _ in range(n):
        if gap:
            time.sleep(gap)
        t = now()
        ex = sb.run_code(code, context=context, timeout=60)
        ts.append((now() - t) * 1e3)
        if ex.error is not None:
            raise RuntimeError(f"sbx: {code!r}: {ex.error.name}: {ex.error.value}")
    return ts


def jup_cells(j, code, n, gap=0.0):
    ts = []
    for _ in range(n):
        if gap:
            time.sleep(gap)
        t = now()
        j.run(code)
        ts.append((now() - t) * 1e3)
    return ts


def sbx_kill_to_output(sb, context, after=0.0):
    """From handle.cancel() of a running `while True: pass` (`after` seconds after it printed
    'go') to the first on_stdout of the next cell."""
    go = threading.Event()
    back = threading.Event()
    first = []

    def on_go(_text):
        go.set()

    def on_back(_text):
        if not first:
            first.append(now())
        back.set()

    h = sb.start_code(LOOP, context=context, timeout=120, on_stdout=on_go)
    if not go.wait(60):
        raise RuntimeError("sbx: the loop cell never printed 'go'")
    if after:
        time.sleep(after)
    t0 = now()
    h.cancel()
    t_cancel = now()
    h2 = sb.start_code("print('back')", context=context, timeout=60, on_stdout=on_back)
    if not back.wait(60):
        raise RuntimeError("sbx: 'back' never came")
    ex2 = h2.wait(60)
    ex1 = h.wait(60)
    if ex1.error is None or ex1.error.name != "CancelledError":
        raise RuntimeError(f"sbx: the loop cell ended with {ex1.error}")
    if "".join(ex2.logs.stdout) != "back\n":
        raise RuntimeError(f"sbx: print('back') gave {ex2.logs.stdout!r}")
    return (first[0] - t0) * 1e3, (t_cancel - t0) * 1e3


def jup_restart_reload(j, now_flag):
    j.start_loop()
    t0 = now()
    j.km.restart_kernel(now=now_flag)
    t_restart = now()
    msg_id = j.kc.execute(SETUP)
    r = j.reply(msg_id, timeout=120)
    t1 = now()
    if r["content"]["status"] != "ok":
        raise RuntimeError(f"jupyter: setup after restart: {r['content']}")
    return (t1 - t0) * 1e3, (t_restart - t0) * 1e3


def jup_interrupt_to_output(j):
    # The loop cell is sent with stop_on_error=False: with the default, ipykernel aborts the
    # requests that come in just after the interrupted cell's error, print('back') among them.
    # So print('back') can be sent at once and waits in the kernel's queue: Jupyter's best case.
    loop_id = j.start_loop(stop_on_error=False)
    t0 = now()
    j.km.interrupt_kernel()
    msg_id = j.kc.execute("print('back')")
    j.first_stream(msg_id, timeout=60)
    t1 = now()
    r = j.reply(loop_id, timeout=60)
    r2 = j.reply(msg_id, timeout=60)
    j.idle(msg_id)
    if r["content"].get("ename") != "KeyboardInterrupt" or r2["content"]["status"] != "ok":
        raise RuntimeError(f"jupyter: interrupted cell ended with {r['content']}, the next with {r2['content']}")
    return (t1 - t0) * 1e3


# ------------------------------------------------------------------ report

def machine():
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) / 1048576
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            thp = f.read().split("[")[1].split("]")[0]
    except (OSError, IndexError):
        thp = "?"
    return model, mem, thp


def versions():
    import IPython
    import ipykernel
    import jupyter_client
    import numpy
    import zmq
    return {"IPython": IPython.__version__, "ipykernel": ipykernel.__version__,
            "jupyter_client": jupyter_client.__version__, "pyzmq": zmq.__version__,
            "numpy": numpy.__version__, "Python": platform.python_version()}


def git_rev():
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "diff", "--quiet"]).returncode != 0
        return rev + (" (modified)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_sbx = os.environ.get("SBX_BIN") or next(
        (p for p in (os.path.join(ROOT, "build-dev", "src", "cli", "sbx"), os.path.join(ROOT, "build", "src", "cli", "sbx"))
         if os.path.exists(p)), os.path.join(ROOT, "build", "src", "cli", "sbx"))
    ap.add_argument("--sbx", default=default_sbx, help="the sbx binary (default: build-dev's, else build's)")
    ap.add_argument("--n", type=int, default=300, help="timed `x = 1` cells of each (default 300)")
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--big-n", type=int, default=100, help="timed `x = 1` cells with 1 GiB held (default 100)")
    ap.add_argument("--kill-n", type=int, default=20, help="killed cells in sbx, and interrupts in Jupyter (default 20)")
    ap.add_argument("--restart-n", type=int, default=5, help="Jupyter restarts of each kind (default 5)")
    ap.add_argument("--quick", action="store_true", help="small N everywhere (a smoke test)")
    a = ap.parse_args()
    if a.quick:
        a.n, a.warmup, a.big_n, a.kill_n, a.restart_n = 40, 5, 10, 3, 1
    if os.geteuid() != 0:
        sys.exit("code_cells: needs root (sandboxes, cgroups)")
    if not os.path.exists(a.sbx):
        sys.exit(f"code_cells: no sbx binary at {a.sbx} (--sbx)")

    date = subprocess.run(["date", "-u"], capture_output=True, text=True).stdout.strip()
    load_before = open("/proc/loadavg").read().split()[:3]
    b0, all0 = busy_jiffies()
    t_start = now()
    model, mem, thp = machine()
    ver = versions()
    block = 50

    # --- host references (before the sandbox and the kernel exist)
    log("host: fork of a python3 holding 1 GiB, IPython's run_cell")
    fork_thp, huge_host = host_fork_1gib(20, True)
    fork_small, _ = host_fork_1gib(20, False)
    ipy_run, ipy_fork, ipy_rss = host_ipython(300)

    log(f"starting sbx ({a.sbx}) and the Jupyter kernel")
    t = now()
    sb = Sandbox(binary=a.sbx, limits={"memoryBytes": 4 << 30})
    t_sb = (now() - t) * 1e3
    j = None
    try:
        t = now()
        ex = sb.run_code("x = 1", timeout=120)
        t_ctx = (now() - t) * 1e3
        assert ex.error is None, ex.error
        t = now()
        j = Jupyter()
        j.run("x = 1")
        t_jup = (now() - t) * 1e3
        spec = j.spec()

        # --- 1. `x = 1`, alternate blocks
        log(f"1. `x = 1`: {a.warmup} warm-up, {a.n} timed of each, in blocks of {block}")
        sbx_cells(sb, "x = 1", a.warmup)
        jup_cells(j, "x = 1", a.warmup)
        s1, j1 = [], []
        while len(s1) < a.n:
            k = min(block, a.n - len(s1))
            s1 += sbx_cells(sb, "x = 1", k)
            j1 += jup_cells(j, "x = 1", k)

        # --- 1b. the same, 20 ms apart (a caller that does something between cells)
        n_gap = a.n // 3 or 1
        log(f"1b. `x = 1` 20 ms apart: {n_gap} of each, in blocks of {block}")
        x_gap, j_gap = [], []
        while len(x_gap) < n_gap:
            k = min(block, n_gap - len(x_gap))
            x_gap += sbx_cells(sb, "x = 1", k, gap=0.02)
            j_gap += jup_cells(j, "x = 1", k, gap=0.02)

        # --- where sbx's time goes (same default context)
        log("where sbx's time goes")
        empty = sbx_cells(sb, "", n_gap)
        empty_gap = sbx_cells(sb, "", n_gap, gap=0.02)
        cmd = []
        for _ in range(a.n // 3 or 1):
            t = now()
            sb.commands.run(":")
            cmd.append((now() - t) * 1e3)
        # A cell's faults: what its process took since the last cell's code ran, when the
        # worker stayed (the same pid: its keeper's fork and the way to this cell), else all
        # that its process took since it was forked.
        seen = [eval(sb.run_code("__import__('os').getpid(), __import__('resource').getrusage(0).ru_minflt").text)
                for _ in range(11)]
        faults = [f - pf if pid == ppid else f for (ppid, pf), (pid, f) in zip(seen, seen[1:])]

        # --- 2. 1 GiB held
        log("2. `x = 1` with 1 GiB held (numpy's huge pages, then 4 KiB pages)")
        big = {}
        for label, envs in (("thp", None), ("small", {"NUMPY_MADVISE_HUGEPAGE": "0"})):
            ctx = sb.create_code_context(envs=envs)
            ex = sb.run_code(BIG + "\nbig.nbytes", context=ctx, timeout=300)
            assert ex.error is None and ex.text == str(1 << 30), (ex.error, ex.text)
            huge = sb.run_code("[int(l.split()[1]) << 10 for l in open('/proc/self/smaps_rollup') "
                               "if l.startswith('AnonHugePages:')][0]", context=ctx).text
            sbx_cells(sb, "x = 1", 5, context=ctx)
            ts = sbx_cells(sb, "x = 1", a.big_n, context=ctx)
            fork_in = sb.run_code(
                "import os as _os, time as _t, statistics as _st\n_ts = []\nfor _i in range(20):\n"
                "    _t0 = _t.perf_counter(); _p = _os.fork()\n    if _p == 0: _os._exit(0)\n"
                "    _os.waitpid(_p, 0); _ts.append((_t.perf_counter() - _t0) * 1e3)\n_st.median(_ts)",
                context=ctx).text
            big[label] = (ts, int(huge), float(fork_in))
            sb.remove_code_context(ctx)
        j.run(BIG, timeout=300)
        jup_cells(j, "x = 1", 5)
        j_big = jup_cells(j, "x = 1", a.big_n)
        j.run("del big")

        # --- 3. a killed cell to the next cell's first output
        log(f"3. killed cell -> next output: sbx x{a.kill_n}; Jupyter restart x{a.restart_n} (twice), interrupt x{a.kill_n}")
        ex = sb.run_code(SETUP, timeout=120)
        assert ex.error is None, ex.error
        kills = [sbx_kill_to_output(sb, None) for _ in range(a.kill_n)]
        # A cell killed by its timeout has run a while: its spare worker is ready by then.
        kills_late = [sbx_kill_to_output(sb, None, 0.1) for _ in range(a.kill_n)]
        kept = sb.run_code("big.nbytes").text
        assert kept == str(1 << 27), kept
        j.run(SETUP, timeout=120)
        j.drain()
        restarts = [jup_restart_reload(j, False) for _ in range(a.restart_n)]
        restarts_now = [jup_restart_reload(j, True) for _ in range(a.restart_n)]
        j.drain()
        interrupts = [jup_interrupt_to_output(j) for _ in range(a.kill_n)]
    finally:
        if j is not None:
            j.close()
        sb.kill()
    wall = now() - t_start
    b1, all1 = busy_jiffies()
    load_after = open("/proc/loadavg").read().split()[:3]

    # ------------------------------------------------------------------ print
    s50, j50 = pct(s1, .5), pct(j1, .5)
    bt, bs = big["thp"], big["small"]
    kill50 = statistics.median(k[0] for k in kills)
    late50 = statistics.median(k[0] for k in kills_late)
    cancel50 = statistics.median(k[1] for k in kills)
    rr50 = statistics.median(r[0] for r in restarts)
    rn50 = statistics.median(r[0] for r in restarts_now)
    int50 = statistics.median(interrupts)

    def met(ok):
        return "**met**" if ok else "**not met**"

    p = print
    p("# Code cells: sbx against a Jupyter kernel")
    p()
    p(f"- date: {date}")
    p(f"- machine: {subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} CPUs (`nproc`), "
      f"`model name: {model}`, {mem:.1f} GiB, kernel {platform.release()}, transparent huge pages `{thp}`")
    p(f"- versions: IPython {ver['IPython']}, ipykernel {ver['ipykernel']}, jupyter_client {ver['jupyter_client']}, "
      f"pyzmq {ver['pyzmq']}, numpy {ver['numpy']}, Python {ver['Python']}")
    p(f"- sbx: {git_rev()}, `{os.path.relpath(a.sbx, ROOT)}`; Jupyter: {spec}, on the host (no sandbox)")
    p(f"- load average before {' '.join(load_before)}, after {' '.join(load_after)}; the machine's CPUs were "
      f"{100 * (b1 - b0) / max(1, all1 - all0):.0f} % busy over the run's {wall:.0f} s (the benchmark itself included)")
    p(f"- command: bench/code_cells.py {' '.join(sys.argv[1:])}")
    p()
    p("Times in ms, CLOCK_MONOTONIC, from the caller's side (sbx: `Sandbox.run_code` through `sbx serve --stdio`; "
      "Jupyter: `BlockingKernelClient.execute` to its execute_reply and idle status).")
    p()
    p("| | sbx | Jupyter | sbx / Jupyter | goal | |")
    p("|---|---|---|---|---|---|")
    p(f"| 1. `x = 1` round trip, p50 (p90, p99), N {a.n} | **{ms(s50)}** ({ms(pct(s1, .9))}, {ms(pct(s1, .99))}) "
      f"| {ms(j50)} ({ms(pct(j1, .9))}, {ms(pct(j1, .99))}) | **{s50 / j50:.2f}×** | ≤ 0.5× | {met(s50 <= 0.5 * j50)} |")
    g50, jg50 = pct(x_gap, .5), pct(j_gap, .5)
    p(f"| 1b. the same, 20 ms between cells, N {n_gap} | **{ms(g50)}** ({ms(pct(x_gap, .9))}, {ms(pct(x_gap, .99))}) "
      f"| {ms(jg50)} ({ms(pct(j_gap, .9))}, {ms(pct(j_gap, .99))}) | **{g50 / jg50:.2f}×** | ≤ 0.5× | {met(g50 <= 0.5 * jg50)} |")
    p(f"| 2. `x = 1` with 1 GiB held (numpy, huge pages), p50 (p90, p99), N {a.big_n} "
      f"| **{ms(pct(bt[0], .5))}** ({ms(pct(bt[0], .9))}, {ms(pct(bt[0], .99))}) "
      f"| {ms(pct(j_big, .5))} ({ms(pct(j_big, .9))}, {ms(pct(j_big, .99))}) | {pct(bt[0], .5) / pct(j_big, .5):.2f}× "
      f"| ≤ 15 ms | {met(pct(bt[0], .5) <= 15)} |")
    p(f"| 2b. the same, 1 GiB in 4 KiB pages (`NUMPY_MADVISE_HUGEPAGE=0`) "
      f"| **{ms(pct(bs[0], .5))}** ({ms(pct(bs[0], .9))}, {ms(pct(bs[0], .99))}) | — | | ≤ 15 ms | {met(pct(bs[0], .5) <= 15)} |")
    p(f"| 3. killed cell → next cell's first output, median of {a.kill_n} (Jupyter: `restart_kernel()` + setup cell "
      f"to its reply, median of {a.restart_n}) | **{ms(kill50)}** | {ms(rr50)} | {kill50 / rr50:.3f}× | ≤ 5 ms | {met(kill50 <= 5)} |")
    p(f"| 3a. the same, the loop cancelled 100 ms into it (as a timeout kills: the cell's spare worker, forked from the "
      f"context after 10 ms and contained meanwhile, takes the next cell), median of {a.kill_n} "
      f"| **{ms(late50)}** | {ms(rr50)} | {late50 / rr50:.3f}× | ≤ 5 ms | {met(late50 <= 5)} |")
    p(f"| 3b. Jupyter `restart_kernel(now=True)` + setup cell, median of {a.restart_n} | | {ms(rn50)} | {kill50 / rn50:.3f}× | | |")
    p(f"| 3c. Jupyter `interrupt_kernel()` → the queued `print('back')`'s first output, median of {a.kill_n} "
      f"(keeps the kernel, not the state as it was) | | {ms(int50)} | {kill50 / int50:.2f}× | | |")
    p()
    p("References measured in the same run:")
    p()
    p(f"- a host python3 holding 1 GiB (`np.ones(1 << 27)`), `os.fork()` + child `_exit` + `waitpid`, median of 20: "
      f"**{ms(fork_thp)}** with numpy's huge pages ({huge_host >> 20} MiB AnonHugePages), **{ms(fork_small)}** in 4 KiB pages; "
      f"the same from inside a cell of the sbx context: {ms(bt[2])} ({bt[1] >> 20} MiB AnonHugePages) and {ms(bs[2])} "
      f"({bs[1] >> 20} MiB)")
    p(f"- start: sbx `Sandbox()` {ms(t_sb)}, then its first cell (the context's interpreter started) {ms(t_ctx)}; "
      f"Jupyter `start_kernel()` + `wait_for_ready()` + first cell {ms(t_jup)} (one each)")
    p(f"- sbx `handle.cancel()` itself (its answer), median: {ms(cancel50)}; the context kept its 128 MiB `big` "
      f"after the {a.kill_n} kills")
    p()
    p("Where sbx's `x = 1` goes (p50; the default context, IPython's process of about "
      f"{ipy_rss >> 20} MiB):")
    p()
    p("| | ms |")
    p("|---|---|")
    p(f"| `x = 1`, back to back (row 1) | {ms(s50)} |")
    p(f"| `x = 1`, 20 ms apart (row 1b: the next worker forked and moved before the cell comes) | {ms(g50)} |")
    p(f"| empty cell (no IPython `run_cell`), back to back | {ms(pct(empty, .5))} |")
    p(f"| empty cell, 20 ms apart | {ms(pct(empty_gap, .5))} |")
    p(f"| `sb.commands.run(':')` (bash session, same SDK and daemon) | {ms(pct(cmd, .5))} |")
    p(f"| IPython's `run_cell('x = 1')` in a host process | {ipy_run:.3f} |")
    p(f"| fork + `_exit` + `waitpid` of that host IPython process, median of 20 | {ms(ipy_fork)} |")
    p(f"| minor page faults of a cell's process from the last cell's code to its own, back to back (median of 10) "
      f"| {statistics.median(faults):.0f} faults |")


if __name__ == "__main__":
    main()
