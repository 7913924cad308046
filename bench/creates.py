#!/usr/bin/python3
"""Creates without a pool, interleaved across builds: `sandbox.create` alone (until the sandbox
is ready) and create → first result (`echo hi`), for one sbx or several at once.

One daemon per sbx (`--pool 0`), one client each; each round creates one sandbox in every daemon
in turn (--gap ms apart), so the builds share the machine's state minute by minute. The first
--warmup rounds are not counted. Prints p25, p50, p75 and the mean in ms per build.

Usage: bench/creates.py [--sbx PATH] [--base PATH ...] [--n 150] [--gap 20] [--first-result]
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sbxrpc import Daemon, now  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sbx", default=os.path.join(HERE, "..", "build", "src", "cli", "sbx"))
    ap.add_argument("--base", action="append", default=[])
    ap.add_argument("--n", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--gap", type=float, default=20.0, help="ms between two creates")
    ap.add_argument("--first-result", action="store_true",
                    help="time create and the first run's result together")
    a = ap.parse_args()
    bins = [os.path.abspath(a.sbx)] + [os.path.abspath(b) for b in a.base]
    daemons = [Daemon(b, "--pool", "0") for b in bins]
    times = [[] for _ in bins]
    try:
        for k in range(a.warmup + a.n):
            for i, d in enumerate(daemons):
                t = now()
                sid = d.rpc.call("sandbox.create", {})["sandboxId"]
                if not a.first_result:
                    dt = now() - t
                got = d.rpc.call("run", {"sandboxId": sid, "command": "echo hi"})
                if a.first_result:
                    dt = now() - t
                if got["stdout"] != "hi\n":
                    raise RuntimeError(f"{bins[i]}: {got}")
                d.rpc.call("sandbox.destroy", {"sandboxId": sid})
                if k >= a.warmup:
                    times[i].append(dt * 1000)
                time.sleep(a.gap / 1000)
    finally:
        for d in daemons:
            d.stop()
    what = "create → first result" if a.first_result else "create (ready)"
    print(f"| sbx | {what}: p25 | p50 | p75 | mean (ms, n={a.n}) |")
    print("|---|---|---|---|---|")
    for b, t in zip(bins, times):
        t.sort()
        print(f"| {b} | {t[len(t) // 4]:.3f} | {statistics.median(t):.3f} | {t[3 * len(t) // 4]:.3f} "
              f"| {statistics.mean(t):.3f} |")


if __name__ == "__main__":
    main()
