#!/usr/bin/python3
"""One-shot `sbx run -- 'echo hi'` as a whole process, beside bubblewrap, interleaved.

Each round runs every command once, in the same order, from this script (`subprocess.run`,
stdout to /dev/null): `sbx run`, the same of a second sbx (--base, for before/after), bwrap
(`--ro-bind / / --dev /dev --proc /proc --unshare-all --die-with-parent bash -c 'echo hi'`, as
bench/peers.py runs it), `sbx --version` of each, and `bash -c true` for scale. Then, for each
sbx, where its time goes from the caller's side: from the start to the first byte of output
("hi" read from a pipe), and from there to the process's exit (what is left of the run once it
answered), median of --n.

Prints a Markdown table: p50 and p90 in ms (CLOCK_MONOTONIC; linear interpolation between
ranks). Needs root and bwrap (Debian's bubblewrap).

Usage: bench/oneshot.py [--sbx PATH] [--base PATH] [--rounds 41] [--n 31]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BWRAP = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--die-with-parent",
         "bash", "-c", "echo hi"]


def pct(xs, q):
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def timed(argv):
    t = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - t) * 1e3


def split(sbx, n):
    """(to the output, output to exit) medians in ms."""
    first, rest = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        p = subprocess.Popen([sbx, "run", "--", "echo hi"], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        if p.stdout.read(3) != b"hi\n":
            raise RuntimeError(f"{sbx} run: no 'hi'")
        t1 = time.perf_counter()
        p.wait()
        t2 = time.perf_counter()
        p.stdout.close()
        first.append((t1 - t0) * 1e3)
        rest.append((t2 - t1) * 1e3)
    return statistics.median(first), statistics.median(rest)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sbx", default=os.path.join(ROOT, "build", "src", "cli", "sbx"))
    ap.add_argument("--base", help="a second sbx, measured in the same rounds (before/after)")
    ap.add_argument("--rounds", type=int, default=41)
    ap.add_argument("--n", type=int, default=31, help="runs for the output/exit split (default 31)")
    a = ap.parse_args()
    bwrap = shutil.which("bwrap")
    if not bwrap:
        sys.exit("oneshot: bwrap is missing (apt-get install bubblewrap)")
    rows = [("sbx run", [a.sbx, "run", "--", "echo hi"])]
    if a.base:
        rows.append(("sbx run (--base)", [a.base, "run", "--", "echo hi"]))
    rows.append(("bwrap", [bwrap, *BWRAP]))
    rows.append(("sbx --version", [a.sbx, "--version"]))
    if a.base:
        rows.append(("sbx --version (--base)", [a.base, "--version"]))
    rows.append(("bash -c true", ["bash", "-c", "true"]))
    for _, argv in rows:  # warm the page cache
        timed(argv)
    ts = {name: [] for name, _ in rows}
    for _ in range(a.rounds):
        for name, argv in rows:
            ts[name].append(timed(argv))
    print(f"- date: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; kernel {os.uname().release}; "
          f"{os.cpu_count()} CPUs; load average {open('/proc/loadavg').read().split()[0]}")
    print(f"- sbx: {a.sbx}" + (f"; base: {a.base}" if a.base else ""))
    print()
    print(f"| whole process, {a.rounds} rounds interleaved | p50 (ms) | p90 (ms) | p50 / bwrap's |")
    print("|---|---|---|---|")
    bw = pct(ts["bwrap"], .5)
    for name, _ in rows:
        p50 = pct(ts[name], .5)
        print(f"| {name} | {p50:.2f} | {pct(ts[name], .9):.2f} | {p50 / bw:.2f}× |")
    print()
    print(f"| `sbx run`, median of {a.n} | to the output (ms) | output to exit (ms) |")
    print("|---|---|---|")
    for name, sbx in [("sbx", a.sbx)] + ([("base", a.base)] if a.base else []):
        f, r = split(sbx, a.n)
        print(f"| {name} | {f:.2f} | {r:.2f} |")


if __name__ == "__main__":
    main()
