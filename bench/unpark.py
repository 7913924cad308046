#!/usr/bin/python3
"""A parked sandbox's first run, against a warm one's, for one sbx or two alternately.

For each sbx (--sbx, and --base for before/after): a daemon with `--pool 0 --park-after 300`,
--n sandboxes each run once (`X=1`), then a wait until `health.parked` counts them all; then
`echo $X` once in each (the first run after a park: the sandbox takes its fds back and, since
parking retires idle workers, its holder forks the worker), then once more in each (warm).
Rounds alternate the two binaries. Prints p50 and min in ms per round (request written to
answer read, one client).

Usage: bench/unpark.py [--sbx PATH] [--base PATH] [--n 30] [--rounds 3]
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sbxrpc import Daemon, now  # noqa: E402


def measure(sbx, n):
    d = Daemon(sbx, "--pool", "0", "--park-after", "300")
    try:
        r = d.rpc
        ids = [r.call("sandbox.create", {})["sandboxId"] for _ in range(n)]
        for s in ids:
            r.call("run", {"sandboxId": s, "command": "X=1"})
        t = now()
        while r.call("health")["parked"] < n:
            if now() - t > 60:
                raise RuntimeError("not all parked within 60 s")
            time.sleep(0.2)
        out = {}
        for phase in ("after park", "warm"):
            xs = []
            for s in ids:
                a = now()
                got = r.call("run", {"sandboxId": s, "command": "echo $X"})
                xs.append((now() - a) * 1000)
                if got["stdout"] != "1\n":
                    raise RuntimeError(f"state lost: {got}")
            out[phase] = (statistics.median(xs), min(xs))
        return out
    finally:
        d.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sbx", default=os.path.join(HERE, "..", "build", "src", "cli", "sbx"))
    ap.add_argument("--base")
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    bins = [("sbx", os.path.abspath(a.sbx))] + ([("base", os.path.abspath(a.base))] if a.base else [])
    print("| round | sbx | first run after a park p50 (min) | warm p50 (min) |")
    print("|---|---|---|---|")
    for i in range(a.rounds):
        for name, path in bins:
            m = measure(path, a.n)
            print(f"| {i + 1} | {name} | {m['after park'][0]:.2f} ({m['after park'][1]:.2f}) "
                  f"| {m['warm'][0]:.2f} ({m['warm'][1]:.2f}) |", flush=True)


if __name__ == "__main__":
    main()
