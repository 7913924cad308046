"""The daemon's loop never waits for a sandbox, a job or a child: a ping stays quick while
sandboxes are being created and forked (issue 8's contract, seen from a client)."""
import os
import statistics
import threading
import time
from pathlib import Path

import pytest

from test_rpc import connect, server, stdio  # noqa: F401 (fixtures)

REPO = Path(__file__).resolve().parents[2]
SBX = os.environ.get("SBX_BIN", str(REPO / "build" / "src" / "cli" / "sbx"))

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes need root here"),
    pytest.mark.skipif(not os.path.exists(SBX), reason=f"{SBX} not built"),
]

N = 20
FORKS = 16  # the server's cap on forks alive at once


def test_ping_while_sandboxes_are_created_and_forked(server):
    worker, pinger = connect(server.path), connect(server.path)
    assert pinger.result("ping") == {"pong": True}
    latencies, stop = [], threading.Event()

    def ping_loop():
        while not stop.is_set():
            t0 = time.perf_counter()
            assert pinger.result("ping", timeout=30) == {"pong": True}
            latencies.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.002)

    t = threading.Thread(target=ping_loop, daemon=True)
    t.start()
    try:
        # All creates at once; each fork as soon as its sandbox is answered (ready).
        creates = [worker.send("sandbox.create", {"limits": {"pids": 64}}) for _ in range(N)]
        forks = []
        for i, cid in enumerate(creates):
            ans = worker.wait(cid, timeout=120)
            assert "result" in ans, ans
            if i < FORKS:
                forks.append(worker.send("sandbox.fork", {"sandboxId": ans["result"]["sandboxId"]}))
        for fid in forks:
            ans = worker.wait(fid, timeout=120)
            assert "result" in ans, ans
    finally:
        stop.set()
        t.join(30)
    assert len(latencies) >= 3
    p50 = statistics.median(latencies)
    worst = max(latencies)
    print(f"ping during {N} creates and {FORKS} forks: n={len(latencies)} p50={p50:.2f} ms max={worst:.2f} ms")
    # What is left in the loop per create or fork is a clone of the daemon (a few ms each, on
    # a shared 2-core machine). A wait for a sandbox's root or a copy job in the loop would hold
    # the pings behind every one of them: the median is what says so. The worst single ping is
    # the machine's as much as the loop's (35-62 ms here, the code before this test's bound
    # changed included, when another process took a core at the wrong moment): only a stall of
    # a different order (a tree copied in the loop) fails it. Latency targets are measured in
    # bench/ (sbx-bench-rpc l), not here. Under ASan and UBSan everything takes about three
    # times as long, a blocking wait too.
    slow = 3 if os.environ.get("SBX_SANITIZED") == "1" else 1
    assert p50 < 10 * slow, latencies
    assert worst < 500 * slow, latencies


def test_pipelined_requests_after_create_find_the_sandbox_ready(stdio):
    """create is answered once the root is built; the requests written right behind it in the
    same write wait for that, so files.* never meets a root still being built."""
    import base64
    import json
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "create", "params": {"limits": {"pids": 64}}},
        {"jsonrpc": "2.0", "id": 2, "method": "files.write",
         "params": {"path": "a.txt", "data": base64.b64encode(b"hello").decode()}},
        {"jsonrpc": "2.0", "id": 3, "method": "files.read", "params": {"path": "a.txt"}},
        {"jsonrpc": "2.0", "id": 4, "method": "run", "params": {"command": "cat a.txt"}},
    ]
    stdio.send_raw("".join(json.dumps(m) + "\n" for m in lines).encode())
    assert stdio.wait(1)["result"]["ok"] is True
    assert stdio.wait(2) == {"jsonrpc": "2.0", "id": 2, "result": {"ok": True}}
    assert base64.b64decode(stdio.wait(3)["result"]["data"]) == b"hello"
    assert stdio.wait(4)["result"]["stdout"] == "hello"
