"""Processes through the protocol: process.start and its handle (list, logs, stream, write,
closeStdin, resize, kill, wait), leftovers of runs as processes, terminals, and every bad
input answered with an error that leaves the connection usable."""
import base64
import json
import os
import re
import socket
import time
import urllib.request

import pytest

from conftest import wait_until
from test_rpc import connect, server, stdio  # noqa: F401 (fixtures)


def b64(s):
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


def start(peer, command, **kw):
    return peer.result("process.start", dict(command=command, **kw))


def info(peer, pid, sandbox=None):
    params = {"sandboxId": sandbox} if sandbox else None
    for p in peer.result("process.list", params)["processes"]:
        if p["processId"] == pid:
            return p
    raise AssertionError(f"{pid} not listed")


def wait_exit(peer, pid, timeout_ms=10000):
    return peer.result("process.wait", {"processId": pid, "until": "exit", "timeoutMs": timeout_ms},
                       timeout=timeout_ms / 1000 + 10)


def logs(peer, pid, cursor=0):
    return peer.result("process.logs", {"processId": pid, "cursor": cursor})


def output_notes(peer, pid):
    with peer.cond:
        return [n["params"] for n in peer.notes
                if n.get("method") == "process.output" and n["params"]["processId"] == pid]


# ---------------------------------------------------------------- start, list, logs

def test_start_list_logs_and_exit_code(stdio):
    stdio.result("create")
    p = start(stdio, "echo out; echo err >&2; sleep 0.3; echo late; exit 3", label="job")
    assert re.fullmatch(r"p\d+", p["processId"]) and p["pid"] > 1
    first = info(stdio, p["processId"])
    assert first["status"] == "running" and first["exitCode"] is None and first["label"] == "job"
    assert first["origin"] == "start" and first["pid"] == p["pid"]
    assert wait_exit(stdio, p["processId"]) == {"status": "exited", "exitCode": 3, "signal": None}
    ended = info(stdio, p["processId"])
    assert ended["status"] == "exited" and ended["exitCode"] == 3 and ended["endedAt"] >= ended["startedAt"]
    log = logs(stdio, p["processId"])
    assert log["stdout"] == "out\nlate\n" and log["stderr"] == "err\n"
    assert log["cursor"] == 13 and log["dropped"] == 0 and log["eof"] is True
    # From a cursor: only what follows it.
    assert logs(stdio, p["processId"], cursor=4)["stdout"] == "late\n"


def test_the_process_starts_from_the_session_state_and_never_changes_it(stdio):
    stdio.result("create")
    stdio.result("run", {"command": "cd /tmp && X=fromsession; greet() { echo hi-$1; }; alias ll='echo aliased'"})
    p = start(stdio, "shopt -s expand_aliases; greet $X; pwd; cd /; Y=changed; export Z=1")
    wait_exit(stdio, p["processId"])
    assert logs(stdio, p["processId"])["stdout"] == "hi-fromsession\n/tmp\n"
    r = stdio.result("run", {"command": 'pwd; echo "[$Y][$Z]"'})
    assert r["stdout"] == "/tmp\n[][]\n"
    # Its own cwd and env, for it alone.
    p = start(stdio, 'pwd; echo "$V"', cwd="/home/user", env={"V": "own"})
    wait_exit(stdio, p["processId"])
    assert logs(stdio, p["processId"])["stdout"] == "/home/user\nown\n"
    assert stdio.result("run", {"command": 'pwd; echo "[$V]"'})["stdout"] == "/tmp\n[]\n"


def test_exit_statuses_as_e2b_reports_them(stdio):
    stdio.result("create")
    term = start(stdio, "kill -TERM $$")
    kill9 = start(stdio, "kill -KILL $$")
    assert wait_exit(stdio, term["processId"]) == {"status": "exited", "exitCode": 143, "signal": "TERM"}
    assert wait_exit(stdio, kill9["processId"]) == {"status": "exited", "exitCode": 137, "signal": "KILL"}


def test_timeout_kills_the_whole_tree(stdio):
    stdio.result("create")
    p = start(stdio, "sleep 300 & setsid sleep 301 & sleep 302", timeoutMs=300)
    assert wait_exit(stdio, p["processId"]) == {"status": "timeout", "exitCode": 137, "signal": "KILL"}
    assert wait_until(lambda: "sleep" not in stdio.result("run", {"command": "ps -eo comm"})["stdout"])


# ---------------------------------------------------------------- stdin

def test_stdin_write_and_close(stdio):
    stdio.result("create")
    p = start(stdio, "cat; echo END", stdin=True)
    pid = p["processId"]
    assert info(stdio, pid)["stdin"] is True
    stdio.result("process.write", {"processId": pid, "data": b64("line one\n")})
    stdio.result("process.write", {"processId": pid, "data": b64(b"\x00\xffbin\n")})
    stdio.result("process.closeStdin", {"processId": pid})
    assert wait_exit(stdio, pid)["exitCode"] == 0
    log = logs(stdio, pid)
    assert base64.b64decode(log["stdout"]) if log.get("stdoutEncoding") == "base64" else None
    data = base64.b64decode(log["stdout"]) if log.get("stdoutEncoding") == "base64" else log["stdout"].encode()
    assert data == b"line one\n\x00\xffbin\nEND\n"
    # Closed now: a clear error, and the connection goes on.
    e = stdio.error("process.write", {"processId": pid, "data": b64("x")})
    assert e["code"] == -32602 and "closed" in e["message"]
    e = stdio.error("process.closeStdin", {"processId": pid})
    assert e["code"] == -32602


def test_write_to_a_process_without_stdin_is_refused(stdio):
    stdio.result("create")
    p = start(stdio, "sleep 5")
    e = stdio.error("process.write", {"processId": p["processId"], "data": b64("x")})
    assert e["code"] == -32602 and "stdin: true" in e["message"]
    e = stdio.error("process.write", {"processId": p["processId"], "data": "@@@"})
    assert e["code"] == -32602 and "base64" in e["message"]
    stdio.result("process.kill", {"processId": p["processId"], "signal": "KILL"})


# ---------------------------------------------------------------- stream

def test_stream_from_a_cursor_then_exit_then_answer(stdio):
    stdio.result("create")
    p = start(stdio, "for i in 1 2 3 4 5; do echo line$i; sleep 0.05; done; echo oops >&2; exit 2")
    pid = p["processId"]
    res = stdio.result("process.stream", {"processId": pid, "cursor": 6})
    assert res["status"] == "exited" and res["exitCode"] == 2 and res["cursor"] == 35
    notes = output_notes(stdio, pid)
    out = "".join(n["data"] for n in notes if n["stream"] == "stdout")
    assert out == "line2\nline3\nline4\nline5\n"
    assert [n["data"] for n in notes if n["stream"] == "stderr"] == ["oops\n"]
    # Cursors are the offsets after each piece, increasing, ending where the answer says.
    cursors = [n["cursor"] for n in notes]
    assert cursors == sorted(cursors) and cursors[-1] == 35
    with stdio.cond:
        exits = [n for n in stdio.notes if n.get("method") == "process.exit"]
    assert exits and exits[-1]["params"] == {"processId": pid, "status": "exited", "exitCode": 2, "signal": None}


def test_stream_resumes_after_reconnect_with_every_byte_exactly_once(server):
    a = connect(server.path)
    sid = a.result("sandbox.create", {"persist": True})["sandboxId"]
    p = a.result("process.start", {"sandboxId": sid, "command":
                                   "for i in $(seq 1 400); do echo n$i; sleep 0.002; done"})
    pid = p["processId"]
    sid_stream = a.send("process.stream", {"processId": pid})
    assert wait_until(lambda: len(output_notes(a, pid)) >= 3, timeout=10)
    a.sock.shutdown(socket.SHUT_RDWR)
    a.sock.close()
    got = output_notes(a, pid)
    last = got[-1]["cursor"]
    # A new connection: the process kept running, its log kept everything.
    b = connect(server.path)
    res = b.result("process.stream", {"processId": pid, "cursor": last}, timeout=30)
    assert res["status"] == "exited"
    text = "".join(n["data"] for n in got) + "".join(n["data"] for n in output_notes(b, pid))
    assert text == "".join(f"n{i}\n" for i in range(1, 401))
    assert sid_stream  # the first stream was cut by the disconnect, not answered
    b.result("sandbox.destroy", {"sandboxId": sid})


def test_a_persistent_sandbox_keeps_its_processes_for_the_next_connection(server):
    a = connect(server.path)
    sid = a.result("sandbox.create", {"persist": True})["sandboxId"]
    pid = a.result("process.start", {"sandboxId": sid, "command": "echo up; sleep 30"})["processId"]
    wait_until(lambda: logs(a, pid)["stdout"] == "up\n")
    a.sock.close()
    b = connect(server.path)
    assert info(b, pid, sid)["status"] == "running"
    assert logs(b, pid)["stdout"] == "up\n"
    assert b.result("process.kill", {"processId": pid, "graceMs": 0})["status"] == "killed"
    b.result("sandbox.destroy", {"sandboxId": sid})


def test_destroying_the_sandbox_answers_its_streams(server):
    a = connect(server.path)
    sid = a.result("sandbox.create", {"persist": True})["sandboxId"]
    pid = a.result("process.start", {"sandboxId": sid, "command": "sleep 30"})["processId"]
    i = a.send("process.stream", {"processId": pid})
    w = a.send("process.wait", {"processId": pid, "until": "exit", "timeoutMs": 20000})
    b = connect(server.path)
    b.result("sandbox.destroy", {"sandboxId": sid})
    for req in (i, w):
        ans = a.wait(req, timeout=10)
        assert "error" in ans and "ESRCH" in ans["error"]["message"], ans
    assert a.error("process.logs", {"processId": pid})["code"] == -32602


# ---------------------------------------------------------------- a flooder

def test_a_flooder_never_blocks_nor_grows_the_log(stdio):
    stdio.result("create")
    # 64 KiB lines, 48 MiB in all, as fast as it can: the daemon always reads.
    cmd = ("python3 -c \"import sys\nline=b'x'*65535+b'\\n'\nfor i in range(768): sys.stdout.buffer.write(line)\"; "
           "echo tail")
    p = start(stdio, cmd)
    pid = p["processId"]
    assert wait_exit(stdio, pid, 60000)["exitCode"] == 0
    meta = info(stdio, pid)
    assert meta["logEnd"] == 768 * 65536 + 5
    log = stdio.result("process.logs", {"processId": pid, "cursor": 0, "maxBytes": 100})
    # The log kept only its last MiB and says how much it lost before it.
    assert log["dropped"] >= 768 * 65536 + 5 - 1024 * 1024
    tail = logs(stdio, pid, cursor=meta["logEnd"] - 5)
    assert tail["stdout"] == "tail\n" and tail["eof"] is True
    # And a line-matching wait reads such lines without trouble.
    assert stdio.result("process.wait", {"processId": pid, "until": "log", "pattern": "^tail$",
                                         "timeoutMs": 5000})["line"] == "tail"


# ---------------------------------------------------------------- kill

def test_kill_of_a_setsid_double_forked_tree_that_ignores_term(stdio):
    stdio.result("create")
    p = start(stdio, "trap '' TERM; (trap '' TERM; setsid bash -c \"trap '' TERM; sleep 1000 & sleep 1001\" &); "
                     "sleep 1002 & echo ready; wait")
    pid = p["processId"]
    stdio.result("process.wait", {"processId": pid, "until": "log", "pattern": "ready", "timeoutMs": 5000})
    assert wait_until(lambda: "1001" in stdio.result("run", {"command": "ps -eo args"})["stdout"])
    t0 = time.monotonic()
    res = stdio.result("process.kill", {"processId": pid, "graceMs": 300})
    took = time.monotonic() - t0
    assert res == {"status": "killed", "exitCode": 137, "signal": "KILL"}
    assert 0.25 < took < 10
    # Answered only when everything of it is gone: the sandbox has only its shells left.
    ps = stdio.result("run", {"command": "ps -eo args"})["stdout"]
    assert "sleep" not in ps and ps.count("\n") == 5, ps
    e = stdio.error("process.kill", {"processId": pid})
    assert e["code"] == -32602 and "ended" in e["message"]


def test_kill_with_term_ends_with_143(stdio):
    stdio.result("create")
    p = start(stdio, "sleep 1000")
    res = stdio.result("process.kill", {"processId": p["processId"], "signal": "SIGTERM"})
    # bash waits for sleep; TERM reaches both (every process of it).
    assert res == {"status": "killed", "exitCode": 143, "signal": "TERM"}


def test_kill_all_kills_processes_and_leftovers(stdio):
    stdio.result("create")
    a = start(stdio, "sleep 1000")
    stdio.result("run", {"command": "sleep 1001 &"})
    assert stdio.result("process.killAll")["killed"] == 2
    assert wait_exit(stdio, a["processId"])["status"] == "killed"
    assert wait_until(lambda: "sleep" not in stdio.result("run", {"command": "ps -eo comm"})["stdout"])


# ---------------------------------------------------------------- leftovers

def test_what_a_run_leaves_running_is_a_process_with_its_own_log(stdio):
    stdio.result("create")
    r = stdio.result("run", {"command": "(sleep 0.3; echo from-leftover; echo warn >&2; sleep 30) & echo started"})
    assert r["stdout"] == "started\n"
    procs = stdio.result("process.list")["processes"]
    left = [p for p in procs if p["origin"] == "leftover"]
    assert len(left) == 1 and left[0]["status"] == "running" and "echo started" in left[0]["command"]
    pid = left[0]["processId"]
    assert left[0]["pid"] > 1
    assert wait_until(lambda: logs(stdio, pid)["stdout"] == "from-leftover\n")
    assert logs(stdio, pid)["stderr"] == "warn\n"
    # A run that leaves nothing adds nothing.
    stdio.result("run", {"command": "true"})
    assert len(stdio.result("process.list")["processes"]) == 1
    res = stdio.result("process.kill", {"processId": pid, "graceMs": 0})
    assert res["status"] == "killed"
    assert info(stdio, pid)["alive"] is False


# ---------------------------------------------------------------- wait

def test_wait_for_a_log_line_already_written_and_one_to_come(stdio):
    stdio.result("create")
    p = start(stdio, "echo 'server: booting'; sleep 0.3; echo 'listening on 8080' >&2; sleep 30")
    pid = p["processId"]
    assert stdio.result("process.wait", {"processId": pid, "until": "log", "pattern": "boot",
                                         "timeoutMs": 5000}) == {"stream": "stdout", "line": "server: booting"}
    assert stdio.result("process.wait", {"processId": pid, "until": "log", "pattern": "listening on [0-9]+",
                                         "timeoutMs": 5000}) == {"stream": "stderr", "line": "listening on 8080"}
    e = stdio.error("process.wait", {"processId": pid, "until": "log", "pattern": "never", "timeoutMs": 200})
    assert e["code"] == -32011 and "WAIT_TIMEOUT" in e["message"]
    stdio.result("process.kill", {"processId": pid, "graceMs": 0})


def test_wait_fails_distinctly_when_the_process_ends_first(stdio):
    stdio.result("create")
    p = start(stdio, "echo nothing; exit 4")
    e = stdio.error("process.wait", {"processId": p["processId"], "until": "log", "pattern": "ready",
                                     "timeoutMs": 5000})
    assert e["code"] == -32010 and "exit code 4" in e["message"]
    e = stdio.error("process.wait", {"processId": p["processId"], "until": "port", "port": 9,
                                     "timeoutMs": 5000})
    assert e["code"] == -32010


def test_a_dev_server_waited_for_by_port(stdio):
    stdio.result("create")
    stdio.result("files.write", {"path": "/tmp/www/index.html", "data": b64("<h1>hi</h1>")})
    p = start(stdio, "cd /tmp/www && exec python3 -m http.server 8000", label="dev")
    res = stdio.result("process.wait", {"processId": p["processId"], "until": "port", "port": 8000,
                                        "timeoutMs": 20000}, timeout=30)
    assert res == {"port": 8000}
    # Fetched from the host, through the forwarded port on the host's loopback.
    fwd = stdio.result("port.expose", {"port": 8000})
    assert fwd["host"] == "127.0.0.1"
    body = urllib.request.urlopen(f"http://127.0.0.1:{fwd['port']}/", timeout=10).read()
    assert body == b"<h1>hi</h1>"
    assert stdio.result("process.wait", {"processId": p["processId"], "until": "log", "pattern": "GET / ",
                                         "timeoutMs": 5000})["stream"] == "stderr"
    assert stdio.result("process.kill", {"processId": p["processId"]})["exitCode"] == 143


# ---------------------------------------------------------------- terminals

def test_a_terminal_runs_python_interactively(stdio):
    stdio.result("create")
    p = start(stdio, "exec python3 -q -i", pty={"cols": 100, "rows": 30})
    pid = p["processId"]
    assert info(stdio, pid)["pty"] is True

    def out():
        return logs(stdio, pid)["stdout"]

    def write(s):
        stdio.result("process.write", {"processId": pid, "data": b64(s)})

    assert wait_until(lambda: ">>>" in out(), timeout=10)
    write("import os, sys; print('tty', sys.stdin.isatty(), os.get_terminal_size())\n")
    assert wait_until(lambda: "tty True os.terminal_size(columns=100, lines=30)" in out(), timeout=5), out()
    stdio.result("process.resize", {"processId": pid, "cols": 120, "rows": 40})
    write("print('now', os.get_terminal_size())\n")
    assert wait_until(lambda: "now os.terminal_size(columns=120, lines=40)" in out(), timeout=5), out()
    # Ctrl-C interrupts the foreground program: Python's KeyboardInterrupt, and it goes on.
    write("import time; time.sleep(100)\n")
    time.sleep(0.3)
    write("\x03")
    assert wait_until(lambda: "KeyboardInterrupt" in out(), timeout=5), out()
    write("print(6 * 7)\n")
    assert wait_until(lambda: "42" in out(), timeout=5), out()
    write("raise SystemExit(5)\n")
    assert wait_exit(stdio, pid)["exitCode"] == 5
    e = stdio.error("process.closeStdin", {"processId": pid})
    assert e["code"] == -32602 and "terminal" in e["message"]


# ---------------------------------------------------------------- limits and bad input

def test_the_65th_running_process_is_refused_and_ended_ones_are_forgotten(stdio):
    stdio.result("create", {"limits": {"pids": 1024}})
    first = start(stdio, "exit 0")["processId"]
    wait_exit(stdio, first)
    ids = [start(stdio, "sleep 1000")["processId"] for _ in range(63)]
    # 64 tracked: the ended one is forgotten to make room, then nothing more fits.
    ids.append(start(stdio, "sleep 1000")["processId"])
    assert stdio.error("process.logs", {"processId": first})["code"] == -32602
    e = stdio.error("process.start", {"command": "true"})
    assert e["code"] == -32001 and "LIMIT_EXCEEDED" in e["message"]
    assert len(stdio.result("process.list")["processes"]) == 64
    stdio.result("process.killAll")
    assert stdio.result("process.wait", {"processId": ids[-1], "until": "exit", "timeoutMs": 10000})


@pytest.mark.parametrize("method,params,words", [
    ("process.logs", {"processId": "p999999"}, "Unknown processId"),
    ("process.logs", {"processId": "nope"}, "Unknown processId"),
    ("process.logs", {}, "processId"),
    ("process.kill", {"processId": "p999999"}, "Unknown processId"),
    ("process.start", {"command": "true", "pty": {"cols": 0, "rows": 10}}, "pty"),
    ("process.start", {"command": "true", "timeoutMs": -1}, "timeoutMs"),
    ("process.start", {"command": "true", "stdin": "yes"}, "stdin"),
    ("process.start", {"command": "true", "bogus": 1}, "bogus"),
])
def test_bad_input_is_a_clear_error(stdio, method, params, words):
    stdio.result("create")
    e = stdio.error(method, params)
    assert e["code"] == -32602 and words in e["message"], e
    assert stdio.result("run", {"command": "echo still"})["stdout"] == "still\n"


def test_bad_input_on_a_live_process(stdio):
    stdio.result("create")
    pid = start(stdio, "sleep 1000")["processId"]
    cases = [
        ("process.resize", {"processId": pid, "cols": 80, "rows": 24}, "no terminal"),
        ("process.kill", {"processId": pid, "signal": "NOPE"}, "signal"),
        ("process.kill", {"processId": pid, "signal": 99}, "signal"),
        ("process.wait", {"processId": pid, "until": "soon", "timeoutMs": 10}, "until"),
        ("process.wait", {"processId": pid, "until": "log", "timeoutMs": 10}, "pattern"),
        ("process.wait", {"processId": pid, "until": "log", "pattern": "(", "timeoutMs": 10}, "pattern"),
        ("process.wait", {"processId": pid, "until": "port", "port": 0, "timeoutMs": 10}, "port"),
        ("process.wait", {"processId": pid, "until": "port", "port": 70000, "timeoutMs": 10}, "port"),
        ("process.wait", {"processId": pid, "until": "exit"}, "timeoutMs"),
    ]
    for method, params, words in cases:
        e = stdio.error(method, params)
        assert e["code"] == -32602 and words in e["message"], (method, params, e)
    # Nothing changed: it still runs, and answers.
    assert info(stdio, pid)["status"] == "running"
    assert stdio.result("process.kill", {"processId": pid, "signal": 9})["exitCode"] == 137


def test_a_connection_reaches_only_processes_of_sandboxes_it_may_use(server):
    a, b = connect(server.path), connect(server.path)
    a.result("create")
    pid = a.result("process.start", {"command": "sleep 1000"})["processId"]
    b.result("create")
    assert b.error("process.logs", {"processId": pid})["code"] == -32602
    assert b.error("process.kill", {"processId": pid})["code"] == -32602
    assert a.result("process.kill", {"processId": pid, "graceMs": 0})["status"] == "killed"


def test_an_idle_daemon_with_live_processes_uses_no_cpu(stdio):
    """Watching a process's cgroup must not keep the loop awake (kernfs reports a change to an
    open cgroup.events until that file is read again)."""
    stdio.result("create")
    start(stdio, "sleep 100")
    stdio.result("run", {"command": "sleep 101 &"})
    time.sleep(0.3)

    def cpu_s():
        fields = open(f"/proc/{stdio.proc.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    before = cpu_s()
    time.sleep(1.5)
    assert cpu_s() - before < 0.15
    stdio.result("process.killAll")


def test_the_log_keeps_a_mib_of_output_that_switches_streams_every_line(stdio):
    stdio.result("create")
    # 20,000 lines of ~7 bytes: even if every line is read as a piece of its own (how the reads
    # fall depends on timing), each piece costs its bytes and a ~32-byte header, ~780 KB in
    # all: the whole log fits the MiB. A piece that kept a chunk's 4 KiB room would hold a few.
    p = start(stdio, "for i in $(seq 1 10000); do echo o$i; echo e$i >&2; done")
    pid = p["processId"]
    wait_exit(stdio, pid, 60000)
    end = info(stdio, pid)["logEnd"]
    log = stdio.result("process.logs", {"processId": pid, "cursor": 0})
    kept = end - log["dropped"]
    assert end > 100_000 and kept == end, (end, log["dropped"])
    assert log["stdout"].startswith("o1\n") and log["stderr"].endswith("e10000\n")


def test_a_stream_behind_the_log_says_what_was_dropped_first(stdio):
    stdio.result("create")
    p = start(stdio, "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo end")
    pid = p["processId"]
    wait_exit(stdio, pid, 30000)
    res = stdio.result("process.stream", {"processId": pid, "cursor": 0})
    notes = output_notes(stdio, pid)
    assert notes[0]["data"] == "" and notes[0]["dropped"] > 1_900_000, notes[0]
    assert notes[0]["cursor"] == notes[0]["dropped"]
    got = sum(len(n["data"]) for n in notes)
    assert notes[0]["dropped"] + got == res["cursor"] == 3000005


def test_kill_all_answers_once_everything_is_dead(stdio):
    stdio.result("create")
    ids = [start(stdio, "trap '' TERM; sleep 1000")["processId"] for _ in range(5)]
    stdio.result("run", {"command": "sleep 1001 & setsid sleep 1002 &"})
    assert stdio.result("process.killAll")["killed"] == 6
    for pid in ids:
        assert info(stdio, pid)["status"] == "killed"
    assert all(not p["alive"] for p in stdio.result("process.list")["processes"])


def test_a_timeout_counts_from_when_the_process_runs(stdio):
    stdio.result("create")
    busy = stdio.send("run", {"command": "sleep 1"})
    # Queued behind the session's run for about a second: its 600 ms start after it.
    p = start(stdio, "sleep 0.2; echo made-it", timeoutMs=600)
    assert stdio.wait(busy)["result"]["exitCode"] == 0
    assert wait_exit(stdio, p["processId"]) == {"status": "exited", "exitCode": 0, "signal": None}
    assert logs(stdio, p["processId"])["stdout"] == "made-it\n"


def _cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("pty", [True, False], ids=["pty", "pipe"])
def test_an_ended_process_with_stdin_open_costs_the_daemon_nothing(stdio, pty):
    # The process is gone and its stdin was never closed: the daemon's watch of it asked for
    # nothing, yet heard the pty's (or pipe's) hang-up again and again, a core at 100 % for as
    # long as the process stayed listed (seen with `sbx shell`s whose client went).
    stdio.result("create")
    kw = {"pty": {"cols": 80, "rows": 24}} if pty else {"stdin": True}
    p = start(stdio, "echo bye", **kw)
    assert wait_exit(stdio, p["processId"])["exitCode"] == 0
    time.sleep(0.2)
    before = _cpu_seconds(stdio.proc.pid)
    time.sleep(2)
    used = _cpu_seconds(stdio.proc.pid) - before
    assert used < 0.5, f"the idle daemon used {used:.2f} s of CPU in 2 s"
