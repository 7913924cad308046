"""Every way a command ends other than a normal exit is said: on stderr by `sbx run`, one line
a person understands, and as an errorClass (plus counts) in the protocol. Every limit given
outside its rule is refused with the bound, the unit and the value."""
import os

import pytest

from conftest import sbx, describe, err
from test_rpc import stdio  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes need root here")


def _has_memory_cgroup():
    # cgroup v2 memory delegated, or the v1 memory hierarchy mounted (where the OOM killer's
    # count is read).
    with open("/proc/self/mountinfo") as f:
        text = f.read()
    return " - cgroup2 " in text or ",memory" in text or " memory " in text


# ---------------------------------------------------------------- the CLI

def test_timeout_is_said_and_the_next_command_still_runs():
    # The README's example: the exit status is the last command's; the timeout is named.
    cp = sbx("sleep 100 & while :; do :; done", "ps ax | grep -c '[s]leep 100' || true", opts=["-t", "1"])
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"0\n"
    assert err(cp).splitlines() == ["sbx: command 1 timed out after 1 s; killed 2 processes",
                                    "sbx: earlier commands failed: 1 (exit 124)"]


def test_fail_fast_stops_at_the_first_failure_with_its_status():
    cp = sbx("sleep 100 & while :; do :; done", "echo SHOULD-NOT-RUN", opts=["--fail-fast", "-t", "1"])
    assert cp.returncode == 124, describe(cp)
    assert cp.stdout == b""
    assert err(cp).splitlines() == ["sbx: command 1 timed out after 1 s; killed 2 processes",
                                    "sbx: --fail-fast: the 1 command after it did not run"]
    cp = sbx("true", "exit 3", "echo SHOULD-NOT-RUN", "echo NOR-THIS", opts=["--fail-fast"])
    assert (cp.returncode, cp.stdout) == (3, b""), describe(cp)
    assert err(cp).splitlines() == ["sbx: --fail-fast: the 2 commands after it did not run"]


def test_earlier_failures_are_named():
    cp = sbx("false", "exit 3", "true")
    assert cp.returncode == 0, describe(cp)
    assert err(cp).splitlines() == ["sbx: earlier commands failed: 1 (exit 1), 2 (exit 3)"]


def test_process_limit_is_said():
    cp = sbx("for i in $(seq 40); do sleep 100 & done 2>/dev/null; echo SHOULD-NOT-PRINT", "echo after",
             opts=["--pids", "16", "-t", "20"])
    assert cp.returncode == 0 and cp.stdout == b"after\n", describe(cp)
    lines = err(cp).splitlines()
    assert any(l.startswith("sbx: command 1 was stopped: the sandbox's process limit (16) was reached; killed ")
               and l.endswith(" (--pids raises it)") for l in lines), lines
    assert cp.elapsed < 10, describe(cp)


@pytest.mark.skipif(not _has_memory_cgroup(), reason="no memory cgroup: nothing counts OOM kills")
def test_out_of_memory_is_said():
    cp = sbx("python3 -c 'bytearray(200 << 20)'", opts=["--memory", "32M"])
    assert cp.returncode == 137, describe(cp)
    assert ("sbx: command 1 failed (exit 137): the sandbox ran out of memory (32M); the kernel killed a process "
            "(--memory raises it)") in err(cp).splitlines(), describe(cp)


def test_full_filesystem_is_said():
    cp = sbx("head -c 2M /dev/zero > /tmp/big", opts=["--fs-size", "1M"])
    assert cp.returncode == 1, describe(cp)
    assert ("sbx: command 1 failed (exit 1): the sandbox's filesystem is full (1M, 10000 files; --fs-size and "
            "--files raise them)") in err(cp).splitlines(), describe(cp)
    # Out of inodes is the same case.
    cp = sbx("for i in $(seq 100); do touch /tmp/f$i || exit 1; done", opts=["--files", "32"])
    assert cp.returncode == 1, describe(cp)
    assert any("the sandbox's filesystem is full (256M, 32 files" in l for l in err(cp).splitlines()), describe(cp)


def test_a_command_over_the_command_limit_is_named():
    cp = sbx("echo " + "x" * (70 * 1024), "echo after")
    assert cp.returncode == 0 and cp.stdout == b"after\n", describe(cp)
    lines = err(cp).splitlines()
    # Said once (the run's own stderr), and which command it was at the end.
    assert lines == ["sbx: the command was not run: it is 71685 bytes, over the limit of 65536",
                     "sbx: earlier commands failed: 1 (exit 1)"], lines


def test_a_normal_failure_says_no_more_than_the_command():
    cp = sbx("echo oops >&2; exit 2")
    assert (cp.returncode, cp.stderr) == (2, b"oops\n"), describe(cp)


# ---------------------------------------------------------------- the protocol

def test_protocol_error_classes_and_counts(stdio):
    stdio.result("create", {"limits": {"memoryBytes": 32 << 20, "stdoutBytes": 1024, "pids": 16},
                            "fsLimitBytes": 1 << 20})
    r = stdio.result("run", {"command": "head -c 5000 /dev/zero"})
    assert r["truncated"] == {"stdout": True, "stderr": False}
    assert r["droppedBytes"] == {"stdout": 5000 - 1024, "stderr": 0}
    assert "errorClass" not in r and "killedProcesses" not in r
    r = stdio.result("run", {"command": "head -c 2M /dev/zero > /tmp/big"})
    assert (r["exitCode"], r["errorClass"]) == (1, "FS_FULL"), r
    stdio.result("run", {"command": "rm /tmp/big"})
    r = stdio.result("run", {"command": "sleep 100 & sleep 100", "timeoutMs": 500})
    assert (r["exitCode"], r["errorClass"], r["killedProcesses"]) == (124, "TIMEOUT", 3), r  # its shell and both sleeps
    r = stdio.result("run", {"command": "false"})
    assert r["exitCode"] == 1 and "errorClass" not in r, r
    if _has_memory_cgroup():
        r = stdio.result("run", {"command": "python3 -c 'bytearray(200 << 20)'"})
        assert (r["exitCode"], r["errorClass"]) == (137, "OOM"), r
        # Counted once: the next failure is its own.
        r = stdio.result("run", {"command": "exit 4"})
        assert r["exitCode"] == 4 and "errorClass" not in r, r


@pytest.mark.parametrize("params,message", [
    ({"limits": {"memoryBytes": 0}}, "limits.memoryBytes must be at least 16M; got 0 bytes"),
    ({"limits": {"memoryBytes": 1024}}, "limits.memoryBytes must be at least 16M; got 1K"),
    ({"limits": {"fileCount": 0}}, "limits.fileCount must be at least 16; got 0"),
    ({"limits": {"pids": 1}}, "limits.pids must be at least 12; got 1"),
    ({"limits": {"pids": 1 << 30}}, "limits.pids must be at most 4194304; got 1073741824"),
    ({"limits": {"stdoutBytes": 0}}, "limits.stdoutBytes must be at least 1 byte; got 0 bytes"),
    ({"limits": {"commandBytes": 2 << 20}}, "limits.commandBytes must be at most 1M; got 2M"),
    ({"fsLimitBytes": 1}, "fsLimitBytes must be at least 64K; got 1 byte"),
    ({"limits": {"fsBytes": 0}}, "limits.fsBytes must be at least 64K; got 0 bytes"),
    ({"timeoutMs": 0}, "timeoutMs must be at least 0.001 s; got 0 s"),
    ({"timeoutMs": 86400001}, "timeoutMs must be at most 86400 s; got 86400.001 s"),
])
def test_protocol_limits_refused_with_the_reason(stdio, params, message):
    for method in ("create", "sandbox.create"):
        assert stdio.error(method, params) == {"code": -32602, "message": message}, method
    # Nothing was made, and the connection still works.
    assert stdio.result("sandbox.list") == {"sandboxes": []}


def test_protocol_run_timeout_zero_refused(stdio):
    stdio.result("create")
    assert stdio.error("run", {"command": "echo hi", "timeoutMs": 0}) == {
        "code": -32602, "message": "timeoutMs must be at least 0.001 s; got 0 s"}
    assert stdio.result("run", {"command": "echo hi"})["stdout"] == "hi\n"


def test_sdk_result_carries_the_counts():
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "sdk", "python"))
    from sbx import Sandbox
    from conftest import SBX_BIN
    with Sandbox(binary=SBX_BIN, limits={"stdoutBytes": 1000}) as sb:
        r = sb.commands.run("head -c 3000 /dev/zero")
        assert (r.truncated, r.dropped_bytes, r.killed_processes) == ({"stdout": True, "stderr": False},
                                                                     {"stdout": 2000, "stderr": 0}, 0), r
        r = sb.commands.run("sleep 100", timeout=0.3)
        assert (r.exit_code, r.error_class, r.killed_processes, r.dropped_bytes) == (124, "TIMEOUT", 2, None), r
        r = sb.commands.run("head -c 300M /dev/zero > /tmp/big")
        assert (r.exit_code, r.error_class) == (1, "FS_FULL"), r
