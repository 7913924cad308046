"""Requests answered later outlive their client cleanly: when a connection closes with runs
running and queued in a sandbox that stays (persistent), every one of them is cancelled, none
is answered to the next client, and the sandbox serves the next client at once."""
import socket
import time

from test_rpc import connect, server  # noqa: F401 (the socket server fixture and a client on it)


def wait_health(peer, pred, timeout=10):
    deadline = time.monotonic() + timeout
    h = peer.result("health")
    while not pred(h) and time.monotonic() < deadline:
        time.sleep(0.05)
        h = peer.result("health")
    return h


def test_closing_client_cancels_its_running_and_queued_runs(server):
    a = connect(server.path)
    sid = a.result("sandbox.create", {"persist": True})["sandboxId"]
    a.send("run", {"sandboxId": sid, "command": "sleep 30", "stream": True})
    for i in range(6):  # queued behind it, in the same session
        a.send("run", {"sandboxId": sid, "command": f"echo queued-{i} >> /tmp/ran"})
    a.send("run", {"sandboxId": sid, "session": "other", "command": "sleep 30"})
    b = connect(server.path)
    h = wait_health(b, lambda h: h["running"] == 2)
    assert (h["running"], h["queued"]) == (2, 6), h

    a.sock.shutdown(socket.SHUT_RDWR)
    a.sock.close()
    # Its pendings leave the count at once; the runs end (as cancelled) when killed.
    h = wait_health(b, lambda h: h["totals"]["cancelled"] == 8)
    assert (h["running"], h["queued"], h["sandboxes"]) == (0, 0, 1), h
    assert h["totals"]["cancelled"] == 8 and h["totals"]["completed"] == 8, h

    # The queued commands never ran, and the session is free for the next client.
    res = b.result("run", {"sandboxId": sid, "command": "cat /tmp/ran 2>/dev/null || echo none"}, timeout=10)
    assert res["stdout"] == "none\n"
    assert b.result("run", {"sandboxId": sid, "session": "other", "command": "echo free"})["stdout"] == "free\n"
    assert set(b.answers) == set()
    assert b.result("sandbox.destroy", {"sandboxId": sid}) == {"ok": True}
