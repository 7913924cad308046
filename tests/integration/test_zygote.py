"""A root daemon's spawner is preloaded into the host's bash and stopped before bash's main
(sbx-spawner.so, src/cli/spawner_preload.c), and a session shell of a sandbox on the host's
root goes on into that bash's main instead of exec'ing one (InitZygote, src/sandbox/init.h).
That shell must be the one an exec would have made, down to its variables and command line;
its memory, a copy of pid 1's and the spawner's, must hold nothing of another sandbox; and a
sandbox whose bash is not the host's still execs its own."""
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile

import pytest

from conftest import SBX_BIN, close_stdio, serve_stdio, wait_until

SO = os.path.join(os.path.dirname(os.path.realpath(SBX_BIN)), "sbx-spawner.so")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="reads the sandboxes' processes from the host"),
    pytest.mark.skipif(not os.path.exists(SO), reason="no sbx-spawner.so in this build (a sanitizer build)"),
]

# What a session shell is, from inside: its variables and options, its process's ids, limits,
# signals and fds, its command line. Two runs: the first is the shell's first worker, the
# second one the worker forked from the state the first left.
STATE = ("set | grep -v -E '^(BASHPID|RANDOM|SRANDOM|SECONDS|EPOCH[A-Z]*|_|BASH_COMMAND|LINENO)='; shopt; shopt -o; "
         "trap -p; ulimit -a; umask; alias; declare -F; "
         "grep -E '^(Sig|Cap|NoNew|Seccomp|Umask|Groups|Uid|Gid)' /proc/$$/status; "
         "ls -l /proc/$BASHPID/fd | tail -n +2 | awk '{print $9,$10,$11}' | sed 's/pipe:.*/pipe/'; "
         "cat /proc/$$/comm /proc/$$/oom_score_adj; echo $$ $PPID; pwd; tr '\\0' ' ' < /proc/1/cmdline | sed 's/ *$//'; echo; "
         "ps -o pid=,ppid=,user=,args= -p $$")


def ppid_and_comm(pid):
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)
    comm = rest[0].split("(", 1)[1]
    return int(rest[1].split()[1]), comm


def children(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if ppid_and_comm(d)[0] == pid:
                    out.append(int(d))
            except (OSError, IndexError):
                pass
    return out


def spawner_of(daemon_pid):
    return [p for p in children(daemon_pid) if ppid_and_comm(p)[1] == "sbx-spawner"]


def nspid(pid):
    """pid's number in its innermost pid namespace."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    return None


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        kids = children(todo.pop())
        out += kids
        todo += kids
    return out


def shell_of(daemon_pid, sid, said_pid):
    """The host pid of a session's shell in sandbox sid, from $$ as a run of it said it ($$ is
    the worker that ran the command, which holds the session's state from then on): among the
    processes below the daemon's pid 1s (CLONE_PARENT makes them its children) in the sandbox's
    cgroups, which are named after it."""
    found = []

    def look():
        for p in children(daemon_pid):
            try:
                if ppid_and_comm(p)[1] != "sbx-init":
                    continue
                for d in descendants(p):
                    with open(f"/proc/{d}/cgroup") as f:
                        mine = sid in f.read()
                    if mine and ppid_and_comm(d)[1] == "bash" and nspid(d) == said_pid:
                        found.append(d)
                        return True
            except (OSError, IndexError, ValueError):
                continue
        return False
    assert wait_until(look, timeout=5), said_pid
    return found[0]


def shell(peer, sid, session=None):
    """The host pid of a sandbox's session shell."""
    p = {"sandboxId": sid, "command": "echo $$"}
    if session:
        p["session"] = session
    r = peer.result("run", p)
    assert r["exitCode"] == 0, r
    return shell_of(peer.proc.pid, sid, int(r["stdout"]))


def maps_text(pid):
    with open(f"/proc/{pid}/maps") as f:
        return f.read()


def memory_has(pid, needle: bytes):
    """Whether needle is anywhere in pid's readable memory (read from the host, as root)."""
    found = False
    with open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps_text(pid).splitlines():
            m = re.match(r"([0-9a-f]+)-([0-9a-f]+) (r)", line)
            if not m or "[vvar" in line or "[vsyscall" in line:
                continue
            lo, hi = int(m.group(1), 16), int(m.group(2), 16)
            try:
                mem.seek(lo)
                data = mem.read(hi - lo)
            except OSError:
                continue
            if needle in data:
                found = True
    return found


def box(peer, **opts):
    return peer.result("sandbox.create", opts)["sandboxId"]


def run(peer, sid, command):
    r = peer.result("run", {"sandboxId": sid, "command": command})
    assert r["exitCode"] == 0, r
    return r["stdout"]


def test_a_shell_goes_on_as_the_spawners_bash_and_is_the_shell_an_exec_made():
    dumps = {}
    for preload in ("1", "0"):
        peer = serve_stdio("--pool", "0", env={**os.environ, "SBX_SPAWNER_PRELOAD": preload})
        try:
            sid = box(peer)
            dumps[preload] = [run(peer, sid, STATE), run(peer, sid, "cd /tmp; X=1"), run(peer, sid, STATE)]
            sh = shell(peer, sid)
            on_it = "sbx-spawner.so" in maps_text(sh)
            assert on_it == (preload == "1"), maps_text(sh)
            spawner = spawner_of(peer.proc.pid)
            assert len(spawner) == 1
            with open(f"/proc/{spawner[0]}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{spawner[0]}/environ", "rb") as f:
                environ = f.read()
            if preload == "1":
                # ps on the host says what it is; its environment (the library's path) is gone.
                assert cmdline.rstrip(b"\0") == b"sbx-spawner", cmdline
                assert environ.strip(b"\0") == b"", environ
                with open(f"/proc/{spawner[0]}/exe".replace("exe", "comm")) as f:
                    assert f.read() == "sbx-spawner\n"
        finally:
            close_stdio(peer)
    assert dumps["1"] == dumps["0"], (dumps["1"], dumps["0"])
    first = dumps["1"][0]
    # Not the spawner's: the sandbox's user, its host name, the builtin's command line.
    assert "\nHOSTNAME=sandbox\n" in first and "\nUID=1000\n" in first and "\nPPID=1\n" in first, first
    assert "LD_PRELOAD" not in first and "SBX_SPAWNER" not in first, first
    assert re.search(r"\d+ +\d+ user +bash --norc --noprofile -c shopt -s expand_aliases; enable -f /proc/self/fd/4 "
                     r"sbx_session && exec 4<&- && sbx_session 3 5 /home/user", first), first
    # The second state is the first's shell after cd and X=1, whatever made it.
    assert "\nX=1\n" in dumps["1"][2] and "\n/tmp\n" in dumps["1"][2]


def test_a_shell_holds_nothing_of_another_sandbox():
    peer = serve_stdio("--pool", "0")
    try:
        # A's environment goes to the spawner in A's request; its end is past all of B's.
        token = "zygote-" + secrets.token_hex(16)
        env = {f"PAD_{i}": "x" * 200 for i in range(40)}
        env["ZZ_TOKEN"] = token
        a = box(peer, env=env)
        assert run(peer, a, "echo $ZZ_TOKEN") == token + "\n"
        a_shell = shell(peer, a)
        b = box(peer)
        assert run(peer, b, "echo ${ZZ_TOKEN:-none}") == "none\n"
        b_shell = shell(peer, b)
        # The probe reads what it should: A's own shell has its token.
        assert memory_has(a_shell, token.encode())
        # B's shell has neither, though its memory was the spawner's, which took A's request.
        assert "sbx-spawner.so" in maps_text(b_shell)
        assert not memory_has(b_shell, token.encode())
        assert not memory_has(b_shell, a.encode())
        # Nor anything of its own setup: its request (its id, the host's cgroup base named
        # after the daemon's pid) and the frames of the spawner and pid 1 are wiped.
        assert not memory_has(b_shell, b.encode())
        assert not memory_has(b_shell, f"sbx-{peer.proc.pid}".encode())
        # Nor does its pid 1, the spawner's copy it was forked from.
        b_init = b_shell
        while ppid_and_comm(b_init)[1] != "sbx-init":
            b_init = ppid_and_comm(b_init)[0]
        assert not memory_has(b_init, token.encode())
        assert not memory_has(b_init, a.encode())
    finally:
        close_stdio(peer)


def test_a_killed_shell_and_a_second_session_start_again_as_the_spawners_bash():
    peer = serve_stdio("--pool", "0")
    try:
        sid = box(peer)
        assert run(peer, sid, "echo $0 $BASH_VERSION") .startswith("bash 5")
        # A session started after setup (pid 1 confined: no capability but the ids', its
        # seccomp filter) goes on as the spawner's bash too.
        r = peer.result("run", {"sandboxId": sid, "command": "echo $$ $PPID; pwd", "session": "two"})
        assert r["exitCode"] == 0 and r["stdout"].split("\n")[1] == "/home/user", r
        shells = [shell(peer, sid), shell(peer, sid, "two")]
        assert len(set(shells)) == 2 and all("sbx-spawner.so" in maps_text(s) for s in shells), shells
        # The default session's shell killed: the session comes back, on the same bash.
        os.kill(shells[0], signal.SIGKILL)
        r = peer.result("run", {"sandboxId": sid, "command": "echo back"})
        if r.get("exitCode") != 0:
            r = peer.result("run", {"sandboxId": sid, "command": "echo back"})
        assert r["exitCode"] == 0 and r["stdout"] == "back\n", r
    finally:
        close_stdio(peer)


def test_the_builtin_every_shell_loads_is_the_spawners():
    """The spawner loads the sbx_session builtin, which each shell would load on its way to its
    first answer, once: a shell's is the spawner's mapping, inherited, not loaded again. Not the
    locale: what glibc reads of it once (the archive, the alias file) would be the host's as the
    spawner saw it, not the sandbox's."""
    peer = serve_stdio("--pool", "0")
    try:
        sid = box(peer)
        assert run(peer, sid, "type -t sbx_session") == "builtin\n"
        spawner = spawner_of(peer.proc.pid)
        assert len(spawner) == 1
        theirs = maps_text(spawner[0])

        def mapped(text, key):
            return sorted(" ".join(line.split()[:1] + line.split()[3:5]) for line in text.splitlines() if key in line)

        assert mapped(theirs, "sbx-session.so"), theirs
        assert not mapped(theirs, "/usr/lib/locale") and not mapped(theirs, "locale-archive"), theirs
        sh = shell(peer, sid)
        mine = maps_text(sh)
        assert mapped(mine, "sbx-session.so") == mapped(theirs, "sbx-session.so"), mine
        # The shell's locale is its own, from its LANG, as an exec'd shell's.
        assert run(peer, sid, "x=\u00e9; echo ${#x}; echo $LANG") == "1\nC.UTF-8\n"
        other = box(peer, env={"LANG": "C"})
        assert run(peer, other, "x=\u00e9; echo ${#x}; echo $LANG") == "2\nC\n"
    finally:
        close_stdio(peer)


def test_a_sandbox_with_an_exec_policy_execs_its_shell():
    # Landlock decides what may be executed: bash is, but only an exec asks it.
    peer = serve_stdio("--pool", "0")
    try:
        r = peer.call("sandbox.create", {"policy": {"deny": ["/usr/bin/tac"]}})
        if "error" in r:
            pytest.skip(f"no exec policy here: {r['error']}")
        sid = r["result"]["sandboxId"]
        assert peer.result("run", {"sandboxId": sid, "command": "tac </dev/null"})["exitCode"] == 126
        assert "sbx-spawner.so" not in maps_text(shell(peer, sid))
    finally:
        close_stdio(peer)


@pytest.mark.skipif(not shutil.which("nsenter") or not shutil.which("unshare"), reason="needs nsenter(1), unshare(1)")
def test_a_bash_replaced_since_the_spawner_started_is_execed():
    # An upgrade replaces /usr/bin/bash: the spawner's bash is then not the host's, and shells
    # exec the new one. Replaced here by a bind mount in the daemon's own mount namespace.
    d = tempfile.mkdtemp(prefix="sbx-test-bash-")
    os.chmod(d, 0o755)
    copy = os.path.join(d, "bash")
    shutil.copy2("/usr/bin/bash", copy)
    peer = serve_stdio(argv=["unshare", "-m", "--propagation", "private", SBX_BIN, "serve", "--stdio", "--pool", "0"])
    try:
        a = box(peer)
        assert run(peer, a, "echo $0") == "bash\n"
        assert "sbx-spawner.so" in maps_text(shell(peer, a))
        subprocess.run(["nsenter", "-t", str(peer.proc.pid), "-m", "mount", "--bind", copy, "/usr/bin/bash"],
                       check=True)
        b = box(peer)
        assert run(peer, b, "echo $0") == "bash\n"
        second = shell(peer, b)
        assert "sbx-spawner.so" not in maps_text(second)
        assert os.path.samefile(f"/proc/{second}/exe", copy)
    finally:
        close_stdio(peer)
        shutil.rmtree(d, ignore_errors=True)


def test_what_the_loader_reads_at_a_start_makes_the_shell_exec():
    # An exec'd bash honours LD_PRELOAD (and GLIBC_TUNABLES, MALLOC_*) in the sandbox's
    # environment; a bash already started cannot: those sandboxes' shells exec.
    peer = serve_stdio("--pool", "0")
    try:
        sid = box(peer, env={"LD_PRELOAD": "libz.so.1"})
        assert run(peer, sid, "echo $LD_PRELOAD") == "libz.so.1\n"
        maps = maps_text(shell(peer, sid))
        assert "sbx-spawner.so" not in maps and "libz.so" in maps, maps
    finally:
        close_stdio(peer)


def test_big_strings_freed_go_back_as_in_an_exec_made_shell():
    # malloc's thresholds are bash's own: the spawner's request buffer is no block of malloc's
    # (its free would have raised them, and a shell would keep what big strings it freed).
    cmd = ("a=$(head -c 2000000 /dev/zero | tr '\\0' x); b=$(head -c 2000000 /dev/zero | tr '\\0' y); "
           "unset a b; awk '/^RssAnon/ {print $2}' /proc/$BASHPID/status")
    kib = {}
    for preload in ("1", "0"):
        peer = serve_stdio("--pool", "0", env={**os.environ, "SBX_SPAWNER_PRELOAD": preload})
        try:
            sid = box(peer)
            kib[preload] = int(run(peer, sid, cmd))
        finally:
            close_stdio(peer)
    assert kib["1"] < kib["0"] + 2048, kib
