"""Spare workers in bash sessions: a command that runs past 10 ms gets one (forked by the
holder from the state of before the command, contained while the command runs). When the
command is killed the spare takes the next command at once; when it ends the spare is killed.
Either way the session keeps exactly its state and nothing is left over."""
import os
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sdk" / "python"))

from sbx import Sandbox  # noqa: E402

SBX_BIN = os.environ.get("SBX_BIN") or str(REPO / "build" / "src" / "cli" / "sbx")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")

SHELL = "bash --norc --noprofile -c shopt -s expand_aliases; enable -f /proc/self/fd/4 sbx_session"


def shells(sb, session):
    """The session shells of the sandbox (holders, workers, spares), counted by a command of
    another session: its own worker is one of them."""
    out = sb.commands.run(f"ps -eo args | grep -c '^{SHELL}'", session=session).stdout
    return int(out)


def test_killed_and_ended_commands_leave_state_and_no_spare():
    with Sandbox(binary=SBX_BIN) as sb:
        sb.commands.run("n=0", session="s")
        for i in range(10):
            r = sb.commands.run("sleep 0.03; n=$((n+1))", session="s")
            assert r.exit_code == 0, r
            r = sb.commands.run("n=$((n+100)); while :; do :; done", session="s", timeout=0.3)
            assert r.error_class == "TIMEOUT", r
        assert sb.commands.run("echo $n", session="s").stdout == "10\n"
        # Idle: two sessions ("s", and the default one that counts), a holder and a worker each.
        for _ in range(50):
            if shells(sb, "default") == 4:
                break
            time.sleep(0.1)
        assert shells(sb, "default") == 4, sb.commands.run("ps -eo pid,ppid,stat,args").stdout


def test_a_cancelled_long_command_is_followed_at_once():
    """After a kill the next command runs in the spare, already in a cgroup of its own; it sees
    the state as it was before the killed command."""
    with Sandbox(binary=SBX_BIN) as sb:
        sb.commands.run("cd /tmp && x=kept")
        h = sb.commands.start("x=changed; cd /; while :; do :; done")
        time.sleep(0.2)
        h.cancel()
        assert h.wait(10).error_class == "CANCELLED"
        assert sb.commands.run("echo $x $PWD").stdout == "kept /tmp\n"


def test_a_long_command_has_a_spare_while_it_runs():
    with Sandbox(binary=SBX_BIN) as sb:
        sb.commands.run("true", session="s")
        assert shells(sb, "default") == 4  # idle: a holder and a worker each
        h = sb.commands.start("sleep 1", session="s")
        seen = 0
        for _ in range(40):
            time.sleep(0.02)
            seen = max(seen, shells(sb, "default"))
            if seen == 5:
                break
        assert seen == 5, seen  # s: holder, its worker in `sleep 1`, and the spare
        assert h.wait(10).exit_code == 0
        for _ in range(50):
            if shells(sb, "default") == 4:
                break
            time.sleep(0.1)
        assert shells(sb, "default") == 4  # the spare went with the old holder
