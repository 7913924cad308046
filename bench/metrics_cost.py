#!/usr/bin/python3
"""What sampling every sandbox's metrics costs the daemon (issue 26: ≤ 1 % of a core with 1,000
idle sandboxes): the daemon's CPU time (utime + stime of /proc/PID/stat) over a minute while it
holds N idle sandboxes with warm sessions and nothing else happens, against the same daemon
holding none; and the sampler's own time, from a daemon built as it is with the sampler's
interval (every 5 s, so a minute is 12 samples of each sandbox).

Usage: bench/metrics_cost.py [--sbx build/src/cli/sbx] [--sandboxes 1000] [--seconds 60]
Prints one JSON object."""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sbxrpc import Daemon, Rpc, now  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def rss_bytes(pid):
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def idle_cpu(pid, seconds):
    c0, t0 = cpu_seconds(pid), now()
    time.sleep(seconds)
    return (cpu_seconds(pid) - c0) / (now() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sbx", default="build/src/cli/sbx")
    ap.add_argument("--sandboxes", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=60)
    a = ap.parse_args()
    d = Daemon(a.sbx, "--pool", "0", "--max-sandboxes", str(a.sandboxes + 10))
    out = {"sandboxes": a.sandboxes, "seconds": a.seconds}
    try:
        time.sleep(2)
        out["cpu_share_empty"] = idle_cpu(d.p.pid, a.seconds)
        rss0 = rss_bytes(d.p.pid)
        t0 = now()
        ids = []
        for _ in range(a.sandboxes):
            sid = d.rpc.call("sandbox.create", {"persist": True})["sandboxId"]
            d.rpc.call("run", {"sandboxId": sid, "command": "true"})  # a warm session, as agents leave them
            ids.append(sid)
        out["create_s"] = now() - t0
        time.sleep(6)  # every sandbox sampled once with its run counted: from now on they are idle
        out["cpu_share_idle"] = idle_cpu(d.p.pid, a.seconds)
        out["daemon_rss_growth_per_sandbox_bytes"] = (rss_bytes(d.p.pid) - rss0) / a.sandboxes
        m = d.rpc.call("sandbox.metrics", {"sandboxId": ids[0]})
        out["samples_of_one"] = len(m["samples"])
        out["cpu_share_sampler"] = out["cpu_share_idle"] - out["cpu_share_empty"]
    finally:
        d.stop()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
