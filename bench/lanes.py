#!/usr/bin/python3
"""Lane queueing delay: client A sends a burst of runs, then client B sends one run; how long
B's run takes, against the same run on an idle server, and where it finished among A's.

The server (`sbx serve --socket`, started here) gets `--slots S --queue 200`, so A's burst fills
the interactive lane and waits in its queue: B's run can only be fair if the lane serves it at
the next freed slot rather than behind A's queue. A's runs go to one session each of a few
sandboxes, so none waits for its session, only for a slot. Prints a Markdown table.

Usage: bench/lanes.py [--sbx PATH] [--burst N] [--slots S] [--rounds R] [--cmd CMD]
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


class Client:
    """A connection whose answers are read by a thread of its own as they come, each stamped
    with the time it arrived."""

    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(path)
        self.f = self.s.makefile("rb")
        self.next = 1
        self.got = {}
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.f:
            m = json.loads(line)
            if "id" in m:
                with self.cond:
                    self.got[m["id"]] = (time.monotonic(), m)
                    self.cond.notify_all()

    def send(self, method, params=None):
        i = self.next
        self.next += 1
        self.s.sendall(json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params or {}}).encode() + b"\n")
        return i

    def wait(self, i):
        with self.cond:
            if not self.cond.wait_for(lambda: i in self.got, timeout=120):
                raise RuntimeError(f"no answer to {i}")
            return self.got.pop(i)

    def call(self, method, params=None):
        t, m = self.wait(self.send(method, params))
        if "error" in m:
            raise RuntimeError(f"{method}: {m['error']}")
        return m["result"]


def pct(xs, p):
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sbx", default=os.path.join(HERE, "..", "build", "src", "cli", "sbx"))
    ap.add_argument("--burst", type=int, default=100)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--cmd", default="sleep 0.02")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="sbx-bench-lanes-")
    path = os.path.join(d, "sock")
    srv = subprocess.Popen([a.sbx, "serve", "--socket", path, "--slots", str(a.slots), "--queue", "1000"],
                           stderr=subprocess.DEVNULL)
    try:
        for _ in range(500):
            if os.path.exists(path):
                break
            time.sleep(0.01)
        A, B = Client(path), Client(path)
        sessions_per_box = 50
        boxes = [A.call("sandbox.create")["sandboxId"] for _ in range((a.burst + sessions_per_box - 1) // sessions_per_box)]
        B.call("create")
        # Warm every session A will use, and B's.
        for i in range(a.burst):
            A.call("run", {"sandboxId": boxes[i // sessions_per_box], "session": f"s{i % sessions_per_box}", "command": "true"})
        B.call("run", {"command": "true"})
        idle = []
        for _ in range(a.rounds * 3):
            t0 = time.monotonic()
            B.call("run", {"command": a.cmd})
            idle.append((time.monotonic() - t0) * 1000)
        loaded, ahead, bursts = [], [], []
        for _ in range(a.rounds):
            t0 = time.monotonic()
            ids = [A.send("run", {"sandboxId": boxes[i // sessions_per_box], "session": f"s{i % sessions_per_box}",
                                  "command": a.cmd}) for i in range(a.burst)]
            # A's burst is read by the server before B's run: wait until the lane holds it.
            while True:
                lane = B.call("health")["lanes"]["interactive"]
                if lane["queued"] + lane["active"] >= min(a.burst, a.slots + 1):
                    break
            tb = time.monotonic()
            bid = B.send("run", {"command": a.cmd})
            tdone, m = B.wait(bid)
            assert m["result"]["exitCode"] == 0, m
            loaded.append((tdone - tb) * 1000)
            ends = [A.wait(i)[0] for i in ids]
            bursts.append((max(ends) - t0) * 1000)
            ahead.append(sum(1 for e in ends if e < tdone))
        print(f"Lane queueing (`sbx serve --slots {a.slots} --queue 1000`): client A sends {a.burst} runs of "
              f"`{a.cmd}` at once (one session each), then client B one; {a.rounds} rounds.\n")
        print("| | p50 | p90 | max |\n|---|---|---|---|")
        print(f"| B's run on an idle server (ms) | {pct(idle, 50):.1f} | {pct(idle, 90):.1f} | {max(idle):.1f} |")
        print(f"| B's run behind A's burst (ms) | {pct(loaded, 50):.1f} | {pct(loaded, 90):.1f} | {max(loaded):.1f} |")
        print(f"| A's runs that finished before B's | {pct(ahead, 50):.0f} | {pct(ahead, 90):.0f} | {max(ahead)} |")
        print(f"| A's whole burst (ms) | {pct(bursts, 50):.0f} | {pct(bursts, 90):.0f} | {max(bursts):.0f} |")
        fifo = a.burst * statistics.median(idle) / a.slots
        print(f"\nStrict FIFO would put B's run behind all {a.burst} of A's: about {fifo:.0f} ms with {a.slots} slots.")
    finally:
        srv.terminate()
        srv.wait(30)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
