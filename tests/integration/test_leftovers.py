"""What a command leaves running: kept by default, killed when it ends with `leftovers: kill`
(per sandbox or per run), and all of it killed at once by process.killAll."""
import os
import time
from pathlib import Path

import pytest

from conftest import wait_until
from test_rpc import stdio  # noqa: F401 (a fixture)

REPO = Path(__file__).resolve().parents[2]
SBX = os.environ.get("SBX_BIN", str(REPO / "build" / "src" / "cli" / "sbx"))

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes need root here"),
    pytest.mark.skipif(not os.path.exists(SBX), reason=f"{SBX} not built"),
]

# Counts the sleeps still alive (zombies aside: test_killed_leftovers_leave_no_zombies looks at
# those), giving dying ones up to 2 s to go.
ALIVE = "ps -eo stat=,comm= | awk '$2 == \"sleep\" && $1 !~ /^Z/' | wc -l"
COUNT = ("for i in $(seq 40); do n=$(" + ALIVE + "); [ \"$n\" -le {want} ] && break; sleep 0.05; done; "
         + ALIVE)


def run(peer, command, **params):
    return peer.result("run", {"command": command, **params})


def count_sleeps(peer, want=0):
    return int(run(peer, COUNT.format(want=want))["stdout"])


def test_leftovers_are_kept_by_default(stdio):
    stdio.result("create")
    assert run(stdio, "sleep 300 & echo started")["stdout"] == "started\n"
    assert count_sleeps(stdio, want=1) == 1


def test_leftovers_kill_per_run_keeps_the_state(stdio):
    stdio.result("create")
    r = run(stdio, "x=42; sleep 301 & sleep 302 & echo started", leftovers="kill")
    assert (r["exitCode"], r["stdout"]) == (0, "started\n")
    assert count_sleeps(stdio) == 0
    assert run(stdio, "echo $x")["stdout"] == "42\n"
    run(stdio, "sleep 303 &", leftovers="keep")
    assert count_sleeps(stdio, want=1) == 1


def test_leftovers_kill_per_sandbox_and_keep_per_run(stdio):
    sid = stdio.result("sandbox.create", {"leftovers": "kill"})["sandboxId"]
    run(stdio, "sleep 304 &", sandboxId=sid)
    assert int(run(stdio, COUNT.format(want=0), sandboxId=sid)["stdout"]) == 0
    run(stdio, "sleep 305 &", sandboxId=sid, leftovers="keep")
    assert int(run(stdio, COUNT.format(want=1), sandboxId=sid)["stdout"]) == 1


def test_leftovers_bad_value_is_refused(stdio):
    stdio.result("create")
    err = stdio.error("run", {"command": "echo hi", "leftovers": "sometimes"})
    assert err["code"] == -32602 and "leftovers" in err["message"], err
    err = stdio.error("sandbox.create", {"leftovers": 1})
    assert err["code"] == -32602 and "leftovers" in err["message"], err
    assert run(stdio, "echo still here")["stdout"] == "still here\n"


def test_process_kill_all_frees_the_sandbox_in_one_call(stdio):
    stdio.result("create")
    run(stdio, "sleep 306 & sleep 307 &")
    run(stdio, "sleep 308 &")
    assert count_sleeps(stdio, want=3) == 3
    assert stdio.result("process.killAll")["killed"] == 2
    assert count_sleeps(stdio) == 0
    # Nothing left to kill (the killed ones' zombies go once pid 1 has reaped them).
    assert wait_until(lambda: stdio.result("process.killAll")["killed"] == 0)
    assert run(stdio, "echo ok")["stdout"] == "ok\n"


def test_killed_leftovers_leave_no_zombies(stdio):
    # What a command leaves running is a child of the shell that ran it, which holds the
    # session afterwards: it reaps them as they end, so they hold no pid of the limit.
    stdio.result("create")
    run(stdio, "for i in 1 2 3 4 5; do sleep 300 & done")
    run(stdio, "sleep 301 &")
    assert stdio.result("process.killAll")["killed"] == 2
    zombies = ("for i in $(seq 40); do n=$(ps -eo stat= | grep -c '^Z'); [ $n -eq 0 ] && break; sleep 0.05; done; "
               "echo $n")
    assert run(stdio, zombies)["stdout"] == "0\n"


def test_sdk_leftovers_and_kill_leftovers():
    import sys
    sys.path.insert(0, str(REPO / "sdk" / "python"))
    from sbx import Sandbox
    alive = "ps -eo stat=,comm= | awk '$2 == \"sleep\" && $1 !~ /^Z/' | wc -l"
    with Sandbox(leftovers="kill", binary=SBX) as sb:
        sb.commands.run("sleep 310 &")
        assert wait_until(lambda: sb.commands.run(alive).stdout == "0\n")
        sb.commands.run("sleep 311 &", leftovers="keep")
        sb.commands.run("sleep 312 &", leftovers="keep")
        # The result can come before the background child has exec'd sleep.
        assert wait_until(lambda: sb.commands.run(alive).stdout == "2\n")
        assert sb.commands.kill_leftovers() == 2
        assert wait_until(lambda: sb.commands.run(alive).stdout == "0\n")


def test_leftover_fork_bomb_does_not_wedge_the_session(stdio):
    stdio.result("create", {"limits": {"pids": 64}, "timeoutMs": 20000})
    assert run(stdio, "f(){ f|f & }; f; echo started")["stdout"] == "started\n"
    # The shells keep a reserve of the process limit: the next run starts at once.
    t0 = time.monotonic()
    assert run(stdio, "echo alive")["stdout"] == "alive\n"
    # One that keeps needing forks is stopped once the limit refuses them, and says why.
    r = run(stdio, "for i in $(seq 30); do sleep 1000 & done; wait")
    assert r["errorClass"] == "PIDS_LIMIT" and r["exitCode"] == 1, r
    assert "left running by earlier commands" in r["stderr"], r
    assert time.monotonic() - t0 < 15  # not the sandbox's 20 s timeout
    # One call frees the sandbox.
    assert stdio.result("process.killAll")["killed"] >= 1
    assert wait_until(lambda: run(stdio, "sleep 0.1; echo ok")["stdout"] == "ok\n", timeout=10)


def test_many_leftover_sleeps_are_counted_in_the_answer(stdio):
    stdio.result("create", {"limits": {"pids": 64}, "timeoutMs": 20000})
    assert run(stdio, "for i in $(seq 40); do sleep 1000 & done; echo ok")["stdout"] == "ok\n"
    t0 = time.monotonic()
    r = run(stdio, "for i in $(seq 30); do sleep 1000 & done; wait")
    assert r["errorClass"] == "PIDS_LIMIT", r
    assert "40 processes left running by earlier commands" in r["stderr"], r
    assert time.monotonic() - t0 < 15  # not the sandbox's 20 s timeout
    assert run(stdio, "echo alive")["stdout"] == "alive\n"


def test_emptied_command_cgroups_are_swept_while_commands_keep_coming(stdio):
    """A command that leaves something running has its cgroup swept once that has exited;
    commands ending less than a sweep apart must not keep postponing the sweep."""
    sid = stdio.result("create")["sandboxId"]
    cmds = Path(f"/sys/fs/cgroup/unified/sbx-{stdio.proc.pid}/{sid}/cmds")
    if not cmds.is_dir():
        pytest.skip(f"no {cmds}")
    n, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < 3.5:
        run(stdio, "sleep 0.05 &")
        n += 1
    left = len([d for d in cmds.iterdir() if d.is_dir()])
    # The sweep runs at least once a second: what is left is about the last second's worth.
    assert n > 30 and left < n * 0.6, (n, left)
