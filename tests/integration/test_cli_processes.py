"""The CLI against a socket daemon's persistent sandbox: sbx ls, exec, ps, logs, kill and shell.

Each test starts `sbx serve --socket` in a private directory, makes a persistent sandbox over
the socket (as another client would) and drives the CLI as a subprocess. `sbx shell` runs in
a detached tmux session on a private tmux server, typed at with send-keys and read with
capture-pane, as a person at a terminal would.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from conftest import SBX_BIN, SPAWNED, Peer, read_line, wait_until

TMUX = shutil.which("tmux")

# Exit statuses of the CLI when the status is not a command's own (src/cli/client.h).
FAILURE, USAGE, UNREACHABLE, NO_SANDBOX, NO_PROCESS = 1, 2, 3, 4, 5


class Daemon:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="sbx-cliproc-")
        self.path = os.path.join(self.dir, "sbx.sock")
        self.proc = subprocess.Popen([SBX_BIN, "serve", "--socket", self.path, "--pool", "0"],
                                     stderr=subprocess.PIPE)
        SPAWNED.append(self.proc.pid)  # for the leftover checks
        assert wait_until(lambda: os.path.exists(self.path), timeout=5), "the daemon made no socket"
        self.peer = self.connect()

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(self.path)
        peer = Peer(s.makefile("rb"), s.makefile("wb"))
        peer.sock = s
        return peer

    def new_sandbox(self, label="cli-test"):
        return self.peer.result("sandbox.create", {"persist": True, "label": label})["sandboxId"]

    def start(self, sid, command, **params):
        return self.peer.result("process.start", {"sandboxId": sid, "command": command, **params})

    def wait_exit(self, pid, timeout=10):
        return self.peer.result("process.wait", {"processId": pid, "until": "exit",
                                                 "timeoutMs": int(timeout * 1000)}, timeout=timeout + 5)

    def wait_log(self, pid, want, timeout=10):
        """Waits until the process's log holds `want` (text)."""
        def has():
            return want in self.peer.result("process.logs", {"processId": pid})["stdout"]
        assert wait_until(has, timeout=timeout), f"{pid} never wrote {want!r}"

    def sh(self, sid, command):
        r = self.peer.result("run", {"sandboxId": sid, "command": command})
        assert r["exitCode"] == 0, r
        return r["stdout"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            # SIGTERM is a clean shutdown (non-zero under the sanitizers when the daemon leaked).
            assert self.proc.returncode == 0, self.proc.stderr.read()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def daemon():
    d = Daemon()
    yield d
    d.stop()


@pytest.fixture
def sid(daemon):
    return daemon.new_sandbox()


def cli(daemon, *args, timeout=30, env=None, socket_opt=True):
    """Runs `sbx ARGS... --socket PATH` (stdin /dev/null); returns the CompletedProcess with
    text stdout and stderr."""
    argv = [SBX_BIN, *args[:1], *(["--socket", daemon.path] if socket_opt else []), *args[1:]]
    return subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=timeout, env=env)


def text(b):
    return b.decode("utf-8", "replace")


def show(cp):
    return f"exit={cp.returncode}\n--- stdout ---\n{text(cp.stdout)}\n--- stderr ---\n{text(cp.stderr)}"


def table(cp):
    """A table's rows (header first) as lists of cells split on runs of spaces."""
    return [line.split() for line in text(cp.stdout).splitlines()]


# ------------------------------------------------------------------ usage and reachability


@pytest.mark.parametrize("cmd", ["ls", "exec", "ps", "logs", "kill", "shell"])
def test_help_of_each_command(cmd):
    cp = subprocess.run([SBX_BIN, cmd, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert cp.returncode == 0, show(cp)
    assert text(cp.stdout).startswith(f"Usage: sbx {cmd} "), show(cp)
    assert "--socket PATH" in text(cp.stdout) and "Exit status" in text(cp.stdout)
    top = subprocess.run([SBX_BIN, "--help"], stdout=subprocess.PIPE)
    assert re.search(rf"^  {cmd}\b", text(top.stdout), re.M), f"sbx --help does not list {cmd}"


@pytest.mark.parametrize("args", [["ls"], ["ps", "x"], ["logs", "x", "p1"], ["kill", "x", "p1"],
                                  ["exec", "x", "--", "true"]])
def test_no_socket_named_is_a_usage_error(args):
    env = {k: v for k, v in os.environ.items() if k != "SBX_SOCKET"}
    cp = subprocess.run([SBX_BIN, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, env=env)
    assert cp.returncode == USAGE, show(cp)
    assert "give --socket PATH or set SBX_SOCKET" in text(cp.stderr)


@pytest.mark.parametrize("args", [["ls"], ["ps", "x"], ["logs", "x", "p1"], ["kill", "x", "p1"],
                                  ["exec", "x", "--", "true"]])
def test_unreachable_daemon_exits_3(tmp_path, args):
    path = str(tmp_path / "nobody.sock")
    cp = subprocess.run([SBX_BIN, args[0], "--socket", path, *args[1:]], stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10)
    assert cp.returncode == UNREACHABLE, show(cp)
    assert f"no daemon is listening at {path}" in text(cp.stderr), show(cp)


@pytest.mark.parametrize("args", [["ps"], ["ps", "a", "b"], ["logs", "a"], ["kill", "a"],
                                  ["exec", "a"], ["exec"], ["ls", "extra"], ["kill", "-s"],
                                  ["kill", "--grace", "x", "a", "p1"]])
def test_bad_arguments_exit_2(daemon, args):
    cp = cli(daemon, *args)
    assert cp.returncode == USAGE, show(cp)
    assert "Usage: sbx" in text(cp.stderr) or "--grace takes seconds" in text(cp.stderr), show(cp)


# ------------------------------------------------------------------ sbx ls


def test_ls_lists_persistent_sandboxes(daemon):
    a, b = daemon.new_sandbox("first one"), daemon.new_sandbox("second")
    cp = cli(daemon, "ls")
    assert cp.returncode == 0, show(cp)
    rows = text(cp.stdout).splitlines()
    assert rows[0].split() == ["SANDBOX", "CREATED", "LABEL"]
    body = {r.split()[0]: r for r in rows[1:]}
    assert set(body) == {a, b}, show(cp)
    assert body[a].endswith("first one") and body[b].endswith("second")
    # $SBX_SOCKET names the daemon when --socket does not; -q gives the ids alone.
    q = cli(daemon, "ls", "-q", socket_opt=False, env={**os.environ, "SBX_SOCKET": daemon.path})
    assert q.returncode == 0, show(q)
    assert sorted(text(q.stdout).split()) == sorted([a, b])
    daemon.peer.result("sandbox.destroy", {"sandboxId": a})
    assert text(cli(daemon, "ls", "-q").stdout).split() == [b]


# ------------------------------------------------------------------ sbx exec


def test_exec_output_status_and_session_state(daemon, sid):
    cp = cli(daemon, "exec", sid, "--", "echo out; echo err >&2", "cd /tmp; x=5",
             "echo $x in $PWD; exit 3")
    assert cp.returncode == 3, show(cp)
    assert cp.stdout == b"out\n5 in /tmp\n"
    assert cp.stderr == b"err\n"
    # The commands ran in the sandbox's default session, which keeps their state.
    assert daemon.sh(sid, "echo $x $PWD") == "5 /tmp\n"
    assert cli(daemon, "exec", sid, "--", "true").returncode == 0
    assert cli(daemon, "exec", sid, "--", "exit 200").returncode == 200


def test_exec_streams_output_as_it_arrives(daemon, sid):
    # The command ends only after the test has read its first line: output held to the end
    # would never come.
    p = subprocess.Popen([SBX_BIN, "exec", "--socket", daemon.path, sid, "--",
                          "echo first; while [ ! -e /tmp/go ]; do sleep 0.02; done; echo second"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert read_line(p, timeout=30) == b"first\n"
        assert cli(daemon, "exec", "--session", "other", sid, "--", "touch /tmp/go").returncode == 0
        assert p.stdout.read() == b"second\n"
        assert p.wait(10) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_exec_passes_bytes_through(daemon, sid):
    cp = cli(daemon, "exec", sid, "--", r"printf 'a\377\000b'; printf '\376' >&2")
    assert cp.returncode == 0, show(cp)
    assert cp.stdout == b"a\xff\x00b" and cp.stderr == b"\xfe"


def test_exec_timeout_and_interrupt(daemon, sid):
    cp = cli(daemon, "exec", "-t", "0.5", sid, "--", "sleep 20")
    assert cp.returncode == 124, show(cp)
    assert "timed out" in text(cp.stderr)
    p = subprocess.Popen([SBX_BIN, "exec", "--socket", daemon.path, sid, "--", "echo go; sleep 30",
                          "echo never"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        assert read_line(p, timeout=10) == b"go\n"
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        assert p.wait(25) == 125  # the sleep's end would be 30 s
        assert p.stdout.read() == b"", "a command after the interrupted one ran"
        # Said in a line, as sbx run says it (it was 125 with nothing said: issue 28 item 12).
        err = p.stderr.read().decode()
        assert "command 1 was interrupted" in err and "the commands after it did not run" in err, err
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert daemon.sh(sid, "echo alive") == "alive\n"


def test_exec_says_an_oversized_command_in_words(daemon, sid):
    """`command 1: LIMIT_EXCEEDED` became words that say which limit (issue 28 item 12)."""
    cp = cli(daemon, "exec", sid, "--", "echo " + "x" * (70 * 1024))
    assert cp.returncode != 0 and "longer than the sandbox's command limit" in text(cp.stderr), show(cp)
    assert "LIMIT_EXCEEDED" not in text(cp.stderr), show(cp)


def test_an_unknown_option_is_one_line_not_the_whole_help(daemon, sid):
    cp = cli(daemon, "exec", "--frobnicate", sid, "--", "true")
    assert cp.returncode == USAGE, show(cp)
    lines = text(cp.stderr).splitlines()
    assert len(lines) <= 3 and "Try 'sbx exec --help'." in lines, show(cp)


def test_exec_unknown_sandbox(daemon):
    cp = cli(daemon, "exec", "0" * 32, "--", "true")
    assert cp.returncode == NO_SANDBOX, show(cp)
    assert "Unknown sandboxId" in text(cp.stderr)


# ------------------------------------------------------------------ sbx ps


def test_ps_lists_processes(daemon, sid):
    done = daemon.start(sid, "echo done; exit 4")
    daemon.wait_exit(done["processId"])
    run = daemon.start(sid, "sleep 100", label="sleeper")
    cp = cli(daemon, "ps", sid)
    assert cp.returncode == 0, show(cp)
    rows = table(cp)
    assert rows[0] == ["PROCESS", "PID", "STATUS", "EXIT", "ORIGIN", "STARTED", "COMMAND"]
    by_id = {r[0]: r for r in rows[1:]}
    assert set(by_id) == {done["processId"], run["processId"]}, show(cp)
    d, r = by_id[done["processId"]], by_id[run["processId"]]
    assert d[1:5] == [str(done["pid"]), "exited", "4", "start"], show(cp)
    assert d[6:] == ["echo", "done;", "exit", "4"]
    assert r[1:5] == [str(run["pid"]), "running", "-", "start"], show(cp)
    assert re.fullmatch(r"\d\d:\d\d:\d\d", r[5]), show(cp)
    assert r[6:] == ["sleep", "100"]
    assert [row[0] for row in rows[1:]] == [done["processId"], run["processId"]], "not oldest first"
    daemon.peer.result("process.kill", {"processId": run["processId"], "signal": "KILL"})


def test_what_exec_leaves_running_is_a_leftover_process(daemon, sid):
    cp = cli(daemon, "exec", sid, "--", "echo started; (sleep 0.3; echo later; exec sleep 100) &")
    assert cp.returncode == 0 and cp.stdout == b"started\n", show(cp)
    rows = table(cli(daemon, "ps", sid))[1:]
    assert len(rows) == 1 and rows[0][2:5] == ["running", "-", "leftover"], rows
    proc = rows[0][0]
    # Its log is the command's output after the command ended.
    assert wait_until(lambda: cli(daemon, "logs", sid, proc).stdout == b"later\n", timeout=5)
    cp = cli(daemon, "kill", "-s", "KILL", sid, proc)
    assert cp.returncode == 0, show(cp)
    assert text(cp.stdout) == f"{proc} (pid {rows[0][1]}): killed (a leftover: its exit status is not known)\n"
    assert table(cli(daemon, "ps", sid))[1][2] == "killed"


def test_ps_unknown_sandbox(daemon):
    cp = cli(daemon, "ps", "f" * 32)
    assert cp.returncode == NO_SANDBOX, show(cp)
    assert "Unknown sandboxId" in text(cp.stderr)


# ------------------------------------------------------------------ sbx logs


def test_logs_by_process_id_and_pid(daemon, sid):
    p = daemon.start(sid, "echo one; echo two >&2; printf 'three\\377\\n'")
    daemon.wait_exit(p["processId"])
    for proc in (p["processId"], str(p["pid"])):
        cp = cli(daemon, "logs", sid, proc)
        assert cp.returncode == 0, show(cp)
        assert cp.stdout == b"one\nthree\xff\n", show(cp)
        assert cp.stderr == b"two\n", show(cp)


def test_logs_of_a_running_process_returns_what_is_there(daemon, sid):
    p = daemon.start(sid, "echo early; sleep 100")
    daemon.wait_log(p["processId"], "early\n")
    cp = cli(daemon, "logs", sid, p["processId"], timeout=10)
    assert cp.returncode == 0, show(cp)
    assert cp.stdout == b"early\n"
    daemon.peer.result("process.kill", {"processId": p["processId"], "signal": "KILL"})


def test_logs_past_the_bound_say_what_was_dropped(daemon, sid):
    # 1.5 MiB through a 1 MiB log: the oldest half MiB is gone, the end is all there.
    p = daemon.start(sid, "head -c 1572864 /dev/zero | tr '\\0' x; echo; echo END")
    daemon.wait_exit(p["processId"], timeout=20)
    cp = cli(daemon, "logs", sid, p["processId"])
    assert cp.returncode == 0, show(cp)
    assert cp.stdout.endswith(b"x\nEND\n") and set(cp.stdout[:-5]) == {ord("x")}
    assert len(cp.stdout) <= 1024 * 1024
    assert "bytes of output are gone" in text(cp.stderr), show(cp)


def test_logs_follow_until_exit(daemon, sid):
    # The process ends only after the test has read its first line: a follow that waited for
    # the end would never show it.
    p = daemon.start(sid, "echo a; echo b >&2; while [ ! -e /tmp/go ]; do sleep 0.02; done; echo c; exit 5")
    f = subprocess.Popen([SBX_BIN, "logs", "--socket", daemon.path, "-f", sid, p["processId"]],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert read_line(f, timeout=30) == b"a\n"
        assert cli(daemon, "exec", sid, "--", "touch /tmp/go").returncode == 0
        out, err = f.communicate(timeout=30)
        assert f.returncode == 5, (out, err)
        assert out == b"c\n" and err == b"b\n"
    finally:
        if f.poll() is None:
            f.kill()
            f.wait()
    # Of a process that has ended: everything, then its status, at once.
    cp = cli(daemon, "logs", "-f", sid, p["processId"], timeout=10)
    assert cp.returncode == 5 and cp.stdout == b"a\nc\n", show(cp)


def test_logs_follow_of_a_killed_process(daemon, sid):
    p = daemon.start(sid, "echo up; exec sleep 100")
    f = subprocess.Popen([SBX_BIN, "logs", "--socket", daemon.path, sid, str(p["pid"]), "-f"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert read_line(f, timeout=10) == b"up\n"
        daemon.peer.result("process.kill", {"processId": p["processId"], "signal": "KILL"})
        assert f.wait(10) == 137
    finally:
        if f.poll() is None:
            f.kill()
            f.wait()


def test_logs_bad_ids(daemon, sid):
    cp = cli(daemon, "logs", "a" * 32, "p1")
    assert cp.returncode == NO_SANDBOX and "Unknown sandboxId" in text(cp.stderr), show(cp)
    for proc in ("p999999", "999999"):
        cp = cli(daemon, "logs", sid, proc)
        assert cp.returncode == NO_PROCESS, show(cp)
        assert f"Unknown processId: {proc}" in text(cp.stderr), show(cp)
    # A process of another sandbox is not this one's.
    other = daemon.new_sandbox()
    p = daemon.start(other, "true")
    cp = cli(daemon, "logs", sid, p["processId"])
    assert cp.returncode == NO_PROCESS, show(cp)


# ------------------------------------------------------------------ sbx kill


def test_kill_default_signal_and_again(daemon, sid):
    p = daemon.start(sid, "exec sleep 100")
    cp = cli(daemon, "kill", sid, p["processId"])
    assert cp.returncode == 0, show(cp)
    assert re.fullmatch(rf"{p['processId']} \(pid {p['pid']}\): killed by TERM, exit 143\n",
                        text(cp.stdout)), show(cp)
    rows = {r[0]: r for r in table(cli(daemon, "ps", sid))[1:]}
    assert rows[p["processId"]][2:4] == ["killed", "143"], rows
    # An ended process cannot be killed: the daemon says so.
    cp = cli(daemon, "kill", sid, p["processId"])
    assert cp.returncode == FAILURE, show(cp)
    assert cp.stderr.strip(), show(cp)


@pytest.mark.parametrize("sig,status", [("KILL", 137), ("SIGINT", 130), ("9", 137)])
def test_kill_signal_by_pid(daemon, sid, sig, status):
    p = daemon.start(sid, "exec sleep 100")
    cp = cli(daemon, "kill", "-s", sig, sid, str(p["pid"]))
    assert cp.returncode == 0, show(cp)
    assert text(cp.stdout).endswith(f"exit {status}\n"), show(cp)
    assert daemon.wait_exit(p["processId"])["exitCode"] == status


def test_kill_grace_then_kill(daemon, sid):
    # A process that ignores TERM is KILLed once the grace time is over.
    p = daemon.start(sid, "trap '' TERM; echo ready; while :; do sleep 0.1; done")
    daemon.wait_log(p["processId"], "ready\n")
    t0 = time.monotonic()
    # Longer than the default grace (2 s): a lower bound, which a loaded machine cannot break.
    cp = cli(daemon, "kill", "--grace", "4", sid, p["processId"])
    assert cp.returncode == 0, show(cp)
    assert 3.9 < time.monotonic() - t0 < 60
    assert "exit 137" in text(cp.stdout), show(cp)


def test_kill_bad_ids_and_signal(daemon, sid):
    cp = cli(daemon, "kill", "b" * 32, "p1")
    assert cp.returncode == NO_SANDBOX, show(cp)
    cp = cli(daemon, "kill", sid, "p424242")
    assert cp.returncode == NO_PROCESS and "Unknown processId" in text(cp.stderr), show(cp)
    p = daemon.start(sid, "exec sleep 100")
    cp = cli(daemon, "kill", "-s", "NOSUCHSIG", sid, p["processId"])
    assert cp.returncode == FAILURE and "sbx kill: signal must be" in text(cp.stderr), show(cp)
    assert daemon.peer.result("process.list", {"sandboxId": sid})["processes"][0]["status"] == "running"
    daemon.peer.result("process.kill", {"processId": p["processId"], "signal": "KILL"})


# ------------------------------------------------------------------ sbx shell (under tmux)


class Tmux:
    """A private tmux server with one detached session running `command` in a 100x30 pane."""

    def __init__(self, command):
        self.name = f"sbx-test-{os.getpid()}-{time.monotonic_ns()}"
        self.tmux(["-f", "/dev/null", "new-session", "-d", "-x", "100", "-y", "30", command])

    def tmux(self, args, check=True):
        return subprocess.run([TMUX, "-L", self.name, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=10, check=check)

    def keys(self, *keys):
        self.tmux(["send-keys", "-t", "0", *keys])

    def type(self, line):
        self.tmux(["send-keys", "-t", "0", "-l", line])
        self.keys("Enter")

    def screen(self):
        cp = self.tmux(["capture-pane", "-p", "-t", "0"], check=False)
        return text(cp.stdout)

    def wait_for(self, pattern, timeout=10):
        found = wait_until(lambda: re.search(pattern, self.screen(), re.M), timeout=timeout, step=0.05)
        assert found, f"{pattern!r} never showed; the screen:\n{self.screen()}"
        return found

    def kill(self):
        self.tmux(["kill-server"], check=False)


@pytest.fixture
def tmux_session():
    if not TMUX:
        pytest.skip("tmux is not installed (build.sh installs it)")
    sessions = []

    def start(command):
        t = Tmux(command)
        sessions.append(t)
        return t
    yield start
    for t in sessions:
        t.kill()


def shell_command(daemon, tmp_path, *args):
    """The pane's command: sbx shell, then its exit status and the terminal's modes to files."""
    return (f"{SBX_BIN} shell --socket {daemon.path} {' '.join(args)}; code=$?; "
            f"stty -a > {tmp_path}/stty; echo EXIT=$code > {tmp_path}/exit; sleep 30")


def exit_file(tmp_path, timeout=10):
    path = tmp_path / "exit"
    assert wait_until(lambda: path.exists() and path.read_text().endswith("\n"), timeout=timeout), \
        "sbx shell did not end"
    return path.read_text().strip()


def shell_pids(daemon):
    """The sbx shell processes talking to this daemon (not the tmux and sh running them)."""
    found = []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv[:4] == [SBX_BIN.encode(), b"shell", b"--socket", daemon.path.encode()]:
            found.append(int(d))
    return found


def assert_terminal_restored(tmp_path):
    modes = (tmp_path / "stty").read_text().split()
    for mode in ("icanon", "echo", "isig", "opost", "icrnl"):
        assert mode in modes and f"-{mode}" not in modes, f"{mode} not restored: {modes}"


def test_shell_tty_resize_interrupt_exit(daemon, sid, tmp_path, tmux_session):
    t = tmux_session(shell_command(daemon, tmp_path, sid))
    t.type("tty; echo hi")
    t.wait_for(r"^/dev/pts/\d+\s*$")
    t.wait_for(r"^hi\s*$")
    t.type("stty size")
    t.wait_for(r"^30 100\s*$")
    t.tmux(["resize-window", "-t", "0", "-x", "120", "-y", "40"])
    t.type("stty size")
    t.wait_for(r"^40 120\s*$")
    # The shell is a process of the sandbox, on a pty, as sbx ps shows.
    ps = {r[0]: r for r in table(cli(daemon, "ps", sid))[1:]}
    assert any(r[2] == "running" and r[6:8] == ["exec", "bash"] and r[-1] == "-i" for r in ps.values()), ps
    # Ctrl-C interrupts the foreground job, not the shell.
    t.type("sleep 100")
    time.sleep(0.5)
    t0 = time.monotonic()
    t.keys("C-c")
    t.type("echo back-$((6*7))")
    t.wait_for(r"^back-42\s*$")
    assert time.monotonic() - t0 < 60  # the sleep's end would be 100 s
    t.type("exit 7")
    assert exit_file(tmp_path) == "EXIT=7"
    assert_terminal_restored(tmp_path)
    ps = table(cli(daemon, "ps", sid))[1:]
    assert ps and all(r[2] != "running" for r in ps), ps


def test_shell_starts_from_the_whole_session_state(daemon, sid, tmp_path, tmux_session):
    """`sbx shell` starts from the session's variables, functions, aliases and options, as its
    help says (before: only the cwd and exported variables came through)."""
    r = daemon.peer.result("run", {"sandboxId": sid, "session": "dev", "command":
                                   "cd /tmp; V=plain; export E=exported; f() { echo fn-$1; }; "
                                   "alias ll='echo aliased'; set -o noclobber"})
    assert r["exitCode"] == 0, r
    t = tmux_session(shell_command(daemon, tmp_path, "--session", "dev", sid))
    t.type("echo V=$V E=$E; f x; ll; shopt -po noclobber; pwd; echo $((1+1))done")
    t.wait_for(r"^2done\s*$")
    screen = t.screen()
    for line in ["V=plain E=exported", "fn-x", "aliased", "set -o noclobber", "/tmp"]:
        assert re.search(rf"^{re.escape(line)}\s*$", screen, re.M), (line, screen)
    assert "readonly" not in screen and "command not found" not in screen, screen
    t.type("exit")
    assert exit_file(tmp_path) == "EXIT=0"


def test_shell_without_id_makes_and_destroys_a_sandbox(daemon, tmp_path, tmux_session):
    before = daemon.peer.result("health")["sandboxes"]
    t = tmux_session(shell_command(daemon, tmp_path))
    t.type("echo in-$((40+2)) $HOME")
    t.wait_for(r"^in-42 /home/user\s*$")
    assert daemon.peer.result("health")["sandboxes"] == before + 1
    t.type("exit")
    assert exit_file(tmp_path) == "EXIT=0"
    assert wait_until(lambda: daemon.peer.result("health")["sandboxes"] == before, timeout=5), \
        "the shell's sandbox was not destroyed"
    assert_terminal_restored(tmp_path)


def test_shell_sigterm_restores_terminal_and_ends_the_shell(daemon, sid, tmp_path, tmux_session):
    t = tmux_session(shell_command(daemon, tmp_path, sid))
    t.type("echo ready")
    t.wait_for(r"^ready\s*$")
    pids = shell_pids(daemon)
    assert len(pids) == 1, pids
    os.kill(pids[0], signal.SIGTERM)
    assert exit_file(tmp_path) == "EXIT=143"
    assert_terminal_restored(tmp_path)
    assert wait_until(lambda: all(p["status"] != "running" for p in
                                  daemon.peer.result("process.list", {"sandboxId": sid})["processes"]),
                      timeout=5), "the shell outlived sbx shell"


def test_shell_unknown_sandbox(daemon, tmp_path, tmux_session):
    tmux_session(shell_command(daemon, tmp_path, "c" * 32))
    assert exit_file(tmp_path) == f"EXIT={NO_SANDBOX}"
    assert_terminal_restored(tmp_path)


def test_shell_needs_a_terminal(daemon, sid):
    cp = cli(daemon, "shell", sid)
    assert cp.returncode == USAGE and "stdin is not a terminal" in text(cp.stderr), show(cp)


# ------------------------------------------------------------------ a sandbox's bytes and your terminal

def _on_a_terminal(argv, timeout=20):
    """Runs argv with stdout and stderr on a pseudo-terminal; returns its exit status and all it
    wrote there, as bytes."""
    import pty
    master, slave = pty.openpty()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every slave end closed
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return p.wait(timeout=10), out


# OSC 52 (set the clipboard), CSI 6n (report the cursor, which the terminal types back in),
# and a C1 CSI (U+009B, two bytes in UTF-8), with text and a tab and newline between them.
HOSTILE = r"printf 'a\033]52;c;aGk=\007b\t\033[6nc\302\233?1049hd\n'"


def test_exec_and_logs_show_a_sandboxs_escape_sequences_to_a_terminal(daemon):
    sid = daemon.new_sandbox()
    rc, out = _on_a_terminal([SBX_BIN, "exec", "--socket", daemon.path, sid, "--", HOSTILE])
    assert rc == 0, out
    assert b"\x1b" not in out and b"\xc2\x9b" not in out, out
    assert b"a\\x1b]52;c;aGk=\\x07b\t\\x1b[6nc\\u009b?1049hd" in out, out
    pid = daemon.start(sid, HOSTILE)["processId"]
    daemon.wait_exit(pid)
    rc, out = _on_a_terminal([SBX_BIN, "logs", "--socket", daemon.path, sid, pid])
    assert rc == 0 and b"\x1b" not in out and b"a\\x1b]52;c;aGk=\\x07b" in out, out


def test_raw_and_a_pipe_get_the_bytes_as_they_are(daemon):
    sid = daemon.new_sandbox()
    rc, out = _on_a_terminal([SBX_BIN, "exec", "--raw", "--socket", daemon.path, sid, "--", HOSTILE])
    assert rc == 0 and b"a\x1b]52;c;aGk=\x07b" in out and b"\xc2\x9b" in out, out
    p = subprocess.run([SBX_BIN, "exec", "--socket", daemon.path, sid, "--", HOSTILE],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    assert p.returncode == 0 and p.stdout == b"a\x1b]52;c;aGk=\x07b\t\x1b[6nc\xc2\x9b?1049hd\n", p


def test_run_shows_escape_sequences_to_a_terminal_as_exec_does():
    # sbx run wrote a sandbox's bytes raw to the terminal, where sbx exec shows them as text
    # (found by a new-user pass); --raw and a pipe get the bytes.
    rc, out = _on_a_terminal([SBX_BIN, "run", "--", HOSTILE, HOSTILE + " >&2"])
    assert rc == 0, out
    assert b"\x1b" not in out and b"\xc2\x9b" not in out, out
    assert out.count(b"a\\x1b]52;c;aGk=\\x07b\t\\x1b[6nc\\u009b?1049hd") == 2, out
    rc, out = _on_a_terminal([SBX_BIN, "run", "--raw", "--", HOSTILE])
    assert rc == 0 and b"a\x1b]52;c;aGk=\x07b" in out and b"\xc2\x9b" in out, out
    p = subprocess.run([SBX_BIN, "run", "--", HOSTILE], stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    assert p.returncode == 0 and p.stdout == b"a\x1b]52;c;aGk=\x07b\t\x1b[6nc\xc2\x9b?1049hd\n", p


def test_run_refuses_several_commands_without_the_separator():
    # `sbx run echo hi` ran `echo`, then `hi` (command not found), with no word of why.
    p = subprocess.run([SBX_BIN, "run", "echo", "hi"], stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    assert p.returncode == 2 and p.stdout == b"", p
    assert p.stderr.decode() == ("sbx run: each CMD is a whole bash command line, run in turn: give them after "
                                 "`--`, quoted (sbx run -- 'echo hi')\n"), p
    p = subprocess.run([SBX_BIN, "run", "echo one"], stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    assert p.returncode == 0 and p.stdout == b"one\n", p


def test_exec_says_when_the_daemon_cancelled_its_command(daemon):
    # The sandbox destroyed under it: it said "interrupted", the word for the user's Ctrl-C.
    sid = daemon.new_sandbox()
    p = subprocess.Popen([SBX_BIN, "exec", "--socket", daemon.path, sid, "--", "echo go; sleep 30", "echo never"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert read_line(p, timeout=30) == b"go\n"
        assert cli(daemon, "rm", sid).returncode == 0
        assert p.wait(30) == 125
        assert p.stdout.read() == b""
        err = p.stderr.read().decode()
        assert err.startswith("sbx exec: command 1 was cancelled by the daemon (its sandbox was destroyed, or the "
                              "daemon is stopping); killed "), err
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_logs_follow_of_a_killed_leftover_says_killed(daemon):
    # A leftover has no exit status of its own; killed, `logs -f` exited 1 ("the daemon
    # refused") with no word. It is 137 now, as sbx-logs(1) says.
    sid = daemon.new_sandbox()
    assert cli(daemon, "exec", sid, "--", "(sleep 0.5; echo left; exec sleep 300) &").returncode == 0
    [row] = [r for r in table(cli(daemon, "ps", sid))[1:] if r[4] == "leftover"]
    f = subprocess.Popen([SBX_BIN, "logs", "--socket", daemon.path, "-f", sid, row[0]],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert read_line(f, timeout=30) == b"left\n"
        assert cli(daemon, "kill", "--grace", "0.2", sid, row[0]).returncode == 0
        assert f.wait(30) == 137, f.stderr.read()
    finally:
        if f.poll() is None:
            f.kill()
            f.wait()
