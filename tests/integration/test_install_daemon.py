"""sbx installed and run as a Linux daemon (README, "Install as a daemon"):

- `meson install` into a DESTDIR puts every file in place: the binary, the headers, libsbx,
  its pkg-config file, a man page per command that renders without a warning and names every
  option the command's --help lists, the bash completion (sourced by a bare bash, it offers
  every command and every option) and the systemd units (`systemd-analyze verify`);
- socket activation without systemd: a launcher does for `sbx serve` what systemd does for
  sbx.socket (a listening socket as fd 3, LISTEN_FDS=1, LISTEN_PID) and a client runs a
  command; the socket outlives the daemon, so a client that connects meanwhile is served by
  the next one; the peer uid check still applies; wrong descriptors are refused;
- SBX_CGROUP_PARENT=self, the unit's Delegate=: the sandboxes go below the daemon's cgroup;
- where systemd is pid 1, sbx.socket starts sbx.service, hardening included;
- the Debian package: `dpkg-buildpackage -b -us -uc` builds sbx, libsbx0 and libsbx-dev,
  their contents are checked, and sbx from the .deb (unpacked with dpkg -x, not installed)
  runs a command. SBX_TEST_DEB=0 skips that build (it takes about 15 s of compiling here).
"""
import json
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

import conftest
from conftest import CGROUP2, SBX_BIN, SPAWNED, Peer, read_line, wait_until

REPO = Path(__file__).resolve().parents[2]
FRESH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HEADERS = sorted((REPO / "include" / "sbx").glob("*.h"))
PLAIN = os.environ.get("SBX_SANITIZED") != "1"
plain_only = pytest.mark.skipif(not PLAIN, reason="checks the plain build's files, once, in the plain pass")


def project_version():
    return re.search(r"version\s*:\s*'([^']+)'", (REPO / "meson.build").read_text()).group(1)


def run(argv, timeout=60, **kw):
    kw.setdefault("env", {"PATH": FRESH_PATH, "LANG": "C.UTF-8"})
    cp = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        timeout=timeout, **kw)
    cp.stdout, cp.stderr = cp.stdout.decode("utf-8", "replace"), cp.stderr.decode("utf-8", "replace")
    return cp


def show(cp):
    return f"exit={cp.returncode}\n--- stdout ---\n{cp.stdout[-3000:]}\n--- stderr ---\n{cp.stderr[-3000:]}"


# ------------------------------------------------------------------ what sbx says it has


def commands():
    """Every command: those of src/cli/main.c's table and those `sbx --help` lists."""
    table = re.findall(r'\{\s*"([a-z]+)",\s*(?:cmd_\w+|NULL)\s*\}', (REPO / "src" / "cli" / "main.c").read_text())
    listed = re.findall(r"^  ([a-z]+)\b", run([SBX_BIN, "--help"]).stdout, re.M)
    assert "run" in table and "run" in listed, "main.c's table or `sbx --help` changed shape"
    return sorted(set(table) | set(listed))


def help_options(cmd):
    """The options a command's --help lists (short and long), from its Options: block."""
    cp = run([SBX_BIN, cmd, "--help"])
    assert cp.returncode == 0, show(cp)
    block = cp.stdout.split("\nOptions:\n", 1)[1].split("\n\n", 1)[0]
    opts = set()
    for line in block.splitlines():
        m = re.match(r"\s+(?:(-[A-Za-z]),\s+)?(--[a-z][a-z-]*)", line)
        if m:
            opts.update(o for o in m.groups() if o)
    assert "--help" in opts, block
    return sorted(opts)


def word_in(opt, text):
    return re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text) is not None


# ------------------------------------------------------------------ meson install --destdir


class Installed:
    def __init__(self, root, opts):
        self.root, self.opts = root, opts
        self.prefix = root / opts["prefix"].lstrip("/")

    def dir(self, name):
        v = self.opts[name]
        return (self.root / v.lstrip("/")) if v.startswith("/") else self.prefix / v


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    build = REPO / "build"
    if not (build / "build.ninja").is_file():
        pytest.skip("no build/ to install from (./build.sh makes it)")
    root = tmp_path_factory.mktemp("destdir")
    cp = run(["meson", "install", "-C", str(build), "--destdir", str(root), "--no-rebuild", "--quiet"],
             timeout=300)
    assert cp.returncode == 0, show(cp)
    intro = run(["meson", "introspect", str(build), "--buildoptions"])
    assert intro.returncode == 0, show(intro)
    return Installed(root, {o["name"]: o["value"] for o in json.loads(intro.stdout)})


def man_page(inst, cmd):
    return inst.dir("mandir") / "man1" / ("sbx.1" if cmd is None else f"sbx-{cmd}.1")


def completion_file(inst):
    found = sorted(inst.root.rglob("bash-completion/completions/sbx"))
    assert len(found) == 1, f"bash completion installed as {found}"
    return found[0]


def unit_dir(inst):
    d = inst.opts["systemdsystemunitdir"]
    return (inst.root / d.lstrip("/")) if d else inst.prefix / "lib" / "systemd" / "system"


@plain_only
def test_install_puts_every_file_in_place(installed):
    bindir, libdir, incdir = installed.dir("bindir"), installed.dir("libdir"), installed.dir("includedir")
    binary = bindir / "sbx"
    assert binary.is_file() and os.access(binary, os.X_OK), f"no executable {binary}"
    cp = run([str(binary), "--version"])
    assert cp.stdout == f"sbx {project_version()}\n", show(cp)
    for h in HEADERS:
        assert (incdir / "sbx" / h.name).read_bytes() == h.read_bytes(), f"{h.name} not installed as it is"
    for lib in ("libsbx.so", "libsbx.so.0"):
        assert (libdir / lib).exists(), f"no {libdir / lib}"
    pc = (libdir / "pkgconfig" / "sbx.pc").read_text()
    assert f"prefix={installed.opts['prefix']}\n" in pc and f"Version: {project_version()}\n" in pc, pc
    missing = [str(p) for p in [man_page(installed, None)] + [man_page(installed, c) for c in commands()]
               if not p.is_file()]
    assert not missing, f"man pages not installed: {missing}"
    assert completion_file(installed).is_file()
    for unit in ("sbx.socket", "sbx.service"):
        assert (unit_dir(installed) / unit).is_file(), f"no {unit} in {unit_dir(installed)}"


def render(page):
    """The page as `man -l` shows it, on a line wide enough that no option is hyphenated."""
    cp = run(["man", "-l", str(page)], env={"PATH": FRESH_PATH, "LANG": "C.UTF-8", "MANWIDTH": "250",
                                              "MANPAGER": "cat"})
    assert cp.returncode == 0, show(cp)
    # groff writes '-' as U+2010 or U+2212 in some places, depending on its settings.
    return cp.stdout.replace("\u2010", "-").replace("\u2212", "-")


@plain_only
@pytest.mark.skipif(not shutil.which("man", path=FRESH_PATH) or not shutil.which("groff", path=FRESH_PATH),
                    reason="man-db and groff are missing (./build.sh installs man-db)")
def test_man_pages_render_and_name_every_option(installed):
    overview = render(man_page(installed, None))
    for cmd in [None] + commands():
        page = man_page(installed, cmd)
        lint = run(["groff", "-man", "-Tutf8", "-ww", "-z", str(page)])
        assert lint.returncode == 0 and not lint.stderr, f"{page.name}: {show(lint)}"
        text = render(page)
        name = "sbx" if cmd is None else f"sbx-{cmd}"
        assert re.search(rf"^NAME\n\s+{re.escape(name)} - \S", text, re.M), f"{page.name}: no NAME line\n{text[:500]}"
        assert f"sbx {project_version()}" in text, f"{page.name}: the version is not filled in"
        options = help_options(cmd) if cmd else ["-h", "--help", "-V", "--version"]
        missing = [o for o in options if not word_in(o, text)]
        assert not missing, f"{page.name} does not name {missing}, which `sbx {cmd or ''} --help` lists"
        if cmd:
            assert f"sbx-{cmd}(1)" in overview, f"sbx(1) does not point to sbx-{cmd}(1)"


@plain_only
def test_man_finds_the_installed_pages(installed):
    page = Path(installed.opts["prefix"]) / installed.opts["mandir"] / "man1" / "sbx-run.1"
    if not page.is_file() or not shutil.which("man", path=FRESH_PATH):
        pytest.skip(f"sbx is not installed ({page} missing: ./build.sh installs it as root) or man-db is missing")
    cp = run(["man", "sbx-run"], env={"PATH": FRESH_PATH, "LANG": "C.UTF-8", "MANPAGER": "cat",
                                      "MANWIDTH": "100", "HOME": "/nonexistent"})
    assert cp.returncode == 0, show(cp)
    assert "sbx-run - run commands in one session of a fresh sandbox" in cp.stdout.replace("\u2010", "-"), show(cp)


# ------------------------------------------------------------------ bash completion


def complete(compfile, words, path=FRESH_PATH, extra_env=None):
    """What `_sbx` offers for the command line `words` (the last one being completed), in a
    bash that sourced nothing but the completion file."""
    script = (f"source {shlex.quote(str(compfile))} || exit 9\n"
              f"COMP_WORDS=({' '.join(shlex.quote(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
              "_sbx; printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    cp = run(["bash", "--norc", "--noprofile", "-c", script],
             env={"PATH": path, "LANG": "C.UTF-8", "HOME": "/nonexistent", **(extra_env or {})})
    assert cp.returncode == 0, show(cp)
    return [w for w in cp.stdout.splitlines() if w]


@plain_only
def test_completion_offers_commands_options_and_files(installed, tmp_path):
    compfile = completion_file(installed)
    cp = run(["bash", "--norc", "--noprofile", "-c", f"source {shlex.quote(str(compfile))}; complete -p sbx"])
    assert cp.stdout == "complete -F _sbx sbx\n", show(cp)
    top = complete(compfile, ["sbx", ""])
    assert set(commands()) | {"--help", "--version"} <= set(top), top
    assert complete(compfile, ["sbx", "se"]) == ["serve"]
    for cmd in commands():
        offered = complete(compfile, ["sbx", cmd, "-"])
        missing = [o for o in help_options(cmd) if o not in offered]
        assert not missing, f"`sbx {cmd} -<TAB>` does not offer {missing}: {offered}"
    (tmp_path / "work.tar.zst").write_bytes(b"")
    assert complete(compfile, ["sbx", "run", "--import", str(tmp_path / "work.")]) == [str(tmp_path / "work.tar.zst")]
    assert "/usr" in complete(compfile, ["sbx", "run", "--rootfs", "/us"])
    assert complete(compfile, ["sbx", "run", "--memory", ""]) == []
    # Past `--` the words are the sandbox's bash commands.
    assert complete(compfile, ["sbx", "run", "--", "--t"]) == []
    assert complete(compfile, ["sbx", "kill", "-s", "KI"]) == ["KILL"]


@plain_only
def test_completion_offers_the_daemons_sandbox_ids(installed, tmp_path):
    compfile = completion_file(installed)
    sock = tmp_path / "sbx.sock"
    daemon = subprocess.Popen([SBX_BIN, "serve", "--socket", str(sock), "--pool", "0"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    SPAWNED.append(daemon.pid)
    try:
        assert wait_until(sock.exists, timeout=10), "the daemon did not listen"
        conn, peer = connect(sock)
        with conn:
            sid = peer.result("sandbox.create", {"label": "completion", "persist": True})["sandboxId"]
            # The completion runs `sbx ls -q`: the sbx on PATH, this build's.
            path = f"{Path(SBX_BIN).parent}:{FRESH_PATH}"
            assert complete(compfile, ["sbx", "exec", "--socket", str(sock), ""], path) == [sid]
            assert complete(compfile, ["sbx", "ps", sid[:3]], path, {"SBX_SOCKET": str(sock)}) == [sid]
            assert complete(compfile, ["sbx", "export", "-s", str(sock), "-S", ""], path) == [sid]
            # No daemon there: nothing offered, nothing said.
            assert complete(compfile, ["sbx", "ps", "--socket", str(tmp_path / "none"), ""], path) == []
            peer.result("sandbox.destroy", {"sandboxId": sid})
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.communicate(timeout=30)
    assert daemon.returncode == 0, daemon.stderr


# ------------------------------------------------------------------ systemd units


def unit_settings(path):
    out = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith(("#", "[")):
            k, v = line.split("=", 1)
            out.setdefault(k.strip(), []).append(v.strip())
    return out


@plain_only
def test_units_say_what_the_daemon_needs(installed):
    sock = unit_settings(unit_dir(installed) / "sbx.socket")
    svc = unit_settings(unit_dir(installed) / "sbx.service")
    listen = sock["ListenStream"]
    assert len(listen) == 1 and sock["SocketMode"] == ["0600"], sock
    exec_start = shlex.split(svc["ExecStart"][0])
    bindir = Path(installed.opts["prefix"]) / installed.opts["bindir"]
    assert exec_start == [str(bindir / "sbx"), "serve", "--socket", listen[0]], exec_start
    assert svc["Delegate"] == ["yes"] and svc["Environment"] == ["SBX_CGROUP_PARENT=self"], svc
    # Sandboxes are built on /run/sbx: with ProtectSystem=strict only RuntimeDirectory= is writable.
    assert svc["RuntimeDirectory"] == ["sbx"], svc
    # The default image store, /var/lib/sbx/images, writable too, and reachable by sandboxes.
    assert svc["StateDirectory"] == ["sbx"] and svc["StateDirectoryMode"] == ["0755"], svc
    assert int(svc["LimitNOFILE"][0]) >= 65536, svc
    # What would break sandboxes must not creep in (see the unit's comments).
    for key in ("RestrictNamespaces", "ProtectControlGroups", "ProtectHostname", "RestrictSUIDSGID",
                "MemoryDenyWriteExecute", "PrivateNetwork", "ProtectKernelTunables", "ProcSubset"):
        assert key not in svc, f"sbx.service sets {key}, which sbx does not survive"


@plain_only
@pytest.mark.skipif(not shutil.which("systemd-analyze", path=FRESH_PATH), reason="systemd-analyze is missing")
def test_units_pass_systemd_analyze_verify(installed, tmp_path):
    # The units as installed, but for ExecStart= naming the DESTDIR's binary: verify checks
    # that it is there. MANPATH lets it check the Documentation= man pages too.
    binary = installed.dir("bindir") / "sbx"
    real = str(Path(installed.opts["prefix"]) / installed.opts["bindir"] / "sbx")
    for unit in ("sbx.socket", "sbx.service"):
        text = (unit_dir(installed) / unit).read_text()
        (tmp_path / unit).write_text(text.replace(f"ExecStart={real} ", f"ExecStart={binary} "))
    cp = run(["systemd-analyze", "verify", "sbx.socket", "sbx.service"], cwd=tmp_path,
             env={"PATH": FRESH_PATH, "LANG": "C.UTF-8", "MANPATH": str(installed.dir("mandir"))})
    assert cp.returncode == 0 and not cp.stderr.strip(), show(cp)


# ------------------------------------------------------------------ socket activation

# What systemd does for a socket unit, and no more: it makes the listening socket (mode and
# all), then for each run forks, puts the child in the cgroup given (the service's, when
# Delegate= hands it over), moves the socket to fd 3, sets LISTEN_FDS=1 and LISTEN_PID to the
# child's pid and execs the daemon. It keeps the socket between runs, so clients that come
# while no daemon runs wait for the next one. It starts each run when told to on stdin.
LAUNCHER = r"""
import os, socket, sys
path, mode, runs, cgroup, extra_fds = sys.argv[1], int(sys.argv[2], 8), int(sys.argv[3]), sys.argv[4], sys.argv[5]
argv = sys.argv[6:]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
old = os.umask(0o177)
s.bind(path)
os.umask(old)
os.chmod(path, mode)
s.listen(128)
print("listening", flush=True)
for _ in range(runs):
    if sys.stdin.readline() != "go\n":
        break
    pid = os.fork()
    if pid == 0:
        if cgroup:
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        if s.fileno() != 3:
            os.dup2(s.fileno(), 3)
        os.set_inheritable(3, True)
        null = os.open("/dev/null", os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.environ.update(LISTEN_FDS=extra_fds or "1", LISTEN_PID=str(os.getpid()), LISTEN_FDNAMES="sbx.sock")
        os.execv(argv[0], argv)
    print("daemon", pid, flush=True)
    _, status = os.waitpid(pid, 0)
    print("exit", os.waitstatus_to_exitcode(status), os.path.exists(path), flush=True)
"""


class Launcher:
    def __init__(self, sock, args, runs=1, mode="600", cgroup="", listen_fds="", env=None):
        self.sock = sock
        self.p = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(sock), mode, str(runs), cgroup, listen_fds,
                                   SBX_BIN, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=env)
        self.pid = None
        try:
            assert self.line(10) == "listening\n"
        except BaseException:
            self.p.kill()
            self.close()
            raise

    def line(self, timeout):
        return read_line(self.p, timeout).decode()

    def start(self):
        """Starts the next daemon; returns its pid."""
        self.p.stdin.write(b"go\n")
        self.p.stdin.flush()
        line = self.line(10).split()
        assert line[0] == "daemon", line
        self.pid = int(line[1])
        SPAWNED.append(self.pid)  # for the leftover checks
        return self.pid

    def wait_exit(self, timeout=30):
        """The daemon's exit code and whether the socket file was still there after it."""
        line = self.line(timeout).split()
        assert line[0] == "exit", line
        return int(line[1]), line[2] == "True"

    def stop(self):
        """SIGTERM, as `systemctl stop` sends."""
        os.kill(self.pid, signal.SIGTERM)
        return self.wait_exit()

    def close(self):
        """Ends the launcher, and its daemon if a failed test left it running (it holds the
        launcher's stderr open)."""
        if self.p.poll() is None and self.pid:
            try:
                if Path(f"/proc/{self.pid}/exe").resolve() == Path(SBX_BIN).resolve():
                    os.kill(self.pid, signal.SIGTERM)
                    try:
                        self.wait_exit(10)
                    except (TimeoutError, AssertionError):
                        os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            _, err = self.p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            _, err = self.p.communicate(timeout=30)
        self.stderr = err.decode("utf-8", "replace")


def connect(sock):
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    conn.connect(str(sock))
    return conn, Peer(conn.makefile("rb"), conn.makefile("wb"))


def run_hi(sock):
    conn, peer = connect(sock)
    with conn:
        peer.result("create", timeout=60)
        return peer.result("run", {"command": "x=hi; echo $x from $(hostname)"}, timeout=60)


@pytest.mark.parametrize("args", [["serve"], ["serve", "--socket", "@SOCK@"]], ids=["bare", "with-socket"])
def test_activation_serves_the_passed_socket_and_leaves_it(tmp_path, args):
    sock = tmp_path / "sbx.sock"
    args = [a.replace("@SOCK@", str(sock)) for a in args]
    launcher = Launcher(sock, args, runs=2)
    try:
        launcher.start()
        r = run_hi(sock)
        assert (r["exitCode"], r["stdout"]) == (0, "hi from sandbox\n"), r
        # The daemon made no socket of its own: the file is still systemd's, mode and all.
        assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
        # SIGTERM is an orderly stop that leaves the socket file where it was.
        assert launcher.stop() == (0, True)
        # A client that connects while no daemon runs waits in the socket's backlog, and the
        # next daemon answers it.
        conn, peer = connect(sock)
        with conn:
            ping = peer.send("ping")
            first = launcher.pid
            launcher.start()
            assert launcher.pid != first
            assert peer.wait(ping, timeout=60)["result"] == {"pong": True}
            peer.result("create", timeout=60)
            assert peer.result("run", {"command": "echo again"}, timeout=60)["stdout"] == "again\n"
        assert launcher.stop() == (0, True)
    finally:
        if launcher.pid and launcher.p.poll() is None:
            try:
                os.kill(launcher.pid, signal.SIGKILL)
            except OSError:
                pass
        launcher.close()


@pytest.fixture
def open_dir():
    """A directory every user may enter (pytest's tmp_path is not: its parent is 0700)."""
    d = Path(tempfile.mkdtemp(prefix="sbx-test-peer-"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_activation_keeps_the_peer_uid_check(open_dir):
    # Even when the socket's mode lets anyone connect, a uid that is neither the daemon's nor
    # root's is refused: the same SO_PEERCRED check as on a socket the daemon made.
    sock = open_dir / "sbx.sock"
    launcher = Launcher(sock, ["serve"], mode="666")
    try:
        launcher.start()
        client = ("import socket, sys\n"
                  "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect(sys.argv[1])\n"
                  "s.settimeout(20)\n"
                  "try:\n"
                  "    s.sendall(b'{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\\n')\n"
                  "    print('answer', repr(s.recv(100)))\n"
                  "except (ConnectionResetError, BrokenPipeError):\n    print('closed')\n")
        nobody = subprocess.run([sys.executable, "-c", client, str(sock)], user=65534, group=65534,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        # Closed with no answer (reset when what the client sent was never read, or before it
        # could send).
        assert nobody.stdout.decode() in ("answer b''\n", "closed\n"), nobody
        conn, peer = connect(sock)
        with conn:
            assert peer.result("ping") == {"pong": True}
        assert launcher.stop() == (0, True)
    finally:
        launcher.close()
    assert "refused a connection from uid 65534" in launcher.stderr, launcher.stderr


@pytest.mark.parametrize("case", ["two-fds", "not-a-socket", "other-path", "stdio"])
def test_activation_refuses_what_it_cannot_serve(tmp_path, case):
    sock = tmp_path / "sbx.sock"
    if case == "not-a-socket":
        # fd 3 is a file: what a unit without ListenStream= but with a stray fd would pass.
        with open(tmp_path / "file", "w") as f:
            env = {"LISTEN_FDS": "1", "PATH": FRESH_PATH}
            cp = subprocess.run(["/bin/bash", "-c", f'export LISTEN_PID=$$; exec "$0" serve 3<&{f.fileno()}', SBX_BIN],
                                env=env, pass_fds=[f.fileno()], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        assert cp.returncode == 1, cp
        assert b"not a listening Unix stream socket" in cp.stderr, cp.stderr
        return
    args, want, code = {
        "two-fds": (["serve"], "LISTEN_FDS=2: sbx serves one socket", 1),
        "other-path": (["serve", "--socket", str(tmp_path / "other.sock")], "not bound to the --socket path", 1),
        "stdio": (["serve", "--stdio"], "--stdio, but a listening socket was passed", 2),
    }[case]
    launcher = Launcher(sock, args, listen_fds="2" if case == "two-fds" else "")
    try:
        launcher.start()
        assert launcher.wait_exit() == (code, True)
    finally:
        launcher.close()
    assert want in launcher.stderr, launcher.stderr


def test_activation_variables_for_another_process_are_ignored(tmp_path):
    # LISTEN_PID names another process (the variables leaked from a parent): fd 3 is not ours
    # to take, and the daemon makes its own socket as without activation.
    sock = tmp_path / "own.sock"
    env = dict(os.environ, LISTEN_PID="1", LISTEN_FDS="1")
    daemon = subprocess.Popen([SBX_BIN, "serve", "--socket", str(sock), "--pool", "0"], env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    SPAWNED.append(daemon.pid)
    try:
        assert wait_until(sock.exists, timeout=10), "the daemon did not make its socket"
        assert run_hi(sock)["stdout"] == "hi from sandbox\n"
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.communicate(timeout=30)
    assert daemon.returncode == 0
    assert not sock.exists(), "a socket the daemon made is removed when it stops"


# ------------------------------------------------------------------ Delegate=


@pytest.fixture
def delegated_cgroup():
    if not CGROUP2:
        pytest.skip("no cgroup2 hierarchy")
    d = Path(CGROUP2) / f"sbx-test-delegate-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    yield d
    conftest.remove_cgroup_tree(str(d))
    assert not d.exists(), f"{d} could not be removed"


def test_delegated_cgroup_holds_the_sandboxes(tmp_path, delegated_cgroup):
    # As systemd starts sbx.service with Delegate=yes: the daemon alone in a cgroup of its own,
    # with SBX_CGROUP_PARENT=self from the unit.
    sock = tmp_path / "sbx.sock"
    launcher = Launcher(sock, ["serve"], cgroup=str(delegated_cgroup),
                        env=dict(os.environ, SBX_CGROUP_PARENT="self"))
    try:
        pid = launcher.start()
        conn, peer = connect(sock)
        with conn:
            peer.result("create", timeout=60)
            r = peer.result("run", {"command": "sleep 300 & echo started"}, timeout=60)
            assert r["stdout"] == "started\n", r
            # The daemon moved itself to the leaf supervisor/; only its cgroup mover and its
            # sandbox spawner, children of its own, are there with it.
            own = Path(f"/proc/{pid}/cgroup").read_text()
            assert re.search(rf"^0::/.*{delegated_cgroup.name}/supervisor$", own, re.M), own
            assert (delegated_cgroup / "cgroup.procs").read_text() == ""
            there = (delegated_cgroup / "supervisor" / "cgroup.procs").read_text().split()
            assert str(pid) in there, there
            for other in set(there) - {str(pid)}:
                stat = Path(f"/proc/{other}/stat").read_text()
                assert stat.split(" (")[1].split(")")[0] in ("sbx-mover", "sbx-spawner"), stat
                assert stat.rsplit(")", 1)[1].split()[1] == str(pid), stat
            base = delegated_cgroup / f"sbx-{pid}"
            procs = [p for p in base.rglob("cgroup.procs") if p.read_text().strip()]
            assert procs, f"no sandbox process below {base}"
            # Where the hierarchy has them, the controllers are handed down for the limits.
            offered = (delegated_cgroup / "cgroup.controllers").read_text().split()
            enabled = (delegated_cgroup / "cgroup.subtree_control").read_text().split()
            assert {"memory", "pids"} & set(offered) <= set(enabled), (offered, enabled)
        assert launcher.stop() == (0, True)
        # Stopping the daemon took its sandboxes and their cgroups with it.
        assert not (delegated_cgroup / f"sbx-{pid}").exists()
    finally:
        launcher.close()


# ------------------------------------------------------------------ under systemd itself


def _systemd_reason():
    try:
        comm = Path("/proc/1/comm").read_text().strip()
    except OSError:
        comm = "unknown"
    if comm != "systemd" or not Path("/run/systemd/system").is_dir():
        return (f"pid 1 is {comm!r}, not systemd: sbx.socket starting sbx.service is not checked on this "
                "machine (the LISTEN_FDS launcher, the Delegate= test and systemd-analyze verify cover the "
                "units' parts)")
    if os.geteuid() != 0:
        return "starting system units needs root"
    return None


@plain_only
@pytest.mark.skipif(_systemd_reason() is not None, reason=str(_systemd_reason()))
def test_systemd_starts_the_service_from_the_socket(installed):
    # The installed units under names of their own (nothing of a real sbx.socket is touched),
    # with a socket path and binary of their own; the hardening as installed.
    name = f"sbx-test-{uuid.uuid4().hex[:8]}"
    run_dir = Path("/run") / name
    run_dir.mkdir(mode=0o755)
    shutil.copy2(SBX_BIN, run_dir / "sbx")  # /run: ProtectHome= and PrivateTmp= hide a checkout there
    sock = Path("/run") / f"{name}.sock"
    real = str(Path(installed.opts["prefix"]) / installed.opts["bindir"] / "sbx")
    units = Path("/run/systemd/system")
    socket_unit = (unit_dir(installed) / "sbx.socket").read_text().replace("/run/sbx.sock", str(sock))
    service = ((unit_dir(installed) / "sbx.service").read_text()
               .replace(f"ExecStart={real} ", f"ExecStart={run_dir / 'sbx'} ")
               .replace("/run/sbx.sock", str(sock)).replace("sbx.socket", f"{name}.socket")
               # /run/sbx may be a real sbx.service's too: this one's stop must leave it.
               .replace("RuntimeDirectoryMode=0700", "RuntimeDirectoryMode=0700\nRuntimeDirectoryPreserve=yes"))
    (units / f"{name}.socket").write_text(socket_unit)
    (units / f"{name}.service").write_text(service)
    try:
        run(["systemctl", "daemon-reload"], timeout=60)
        cp = run(["systemctl", "start", f"{name}.socket"], timeout=60)
        assert cp.returncode == 0, show(cp)
        r = run_hi(sock)
        assert (r["exitCode"], r["stdout"]) == (0, "hi from sandbox\n"), r
        main_pid = run(["systemctl", "show", "-P", "MainPID", f"{name}.service"]).stdout.strip()
        own = Path(f"/proc/{main_pid}/cgroup").read_text()
        assert re.search(rf"^0::/.*{name}\.service/supervisor$", own, re.M), own
    finally:
        run(["systemctl", "stop", f"{name}.service", f"{name}.socket"], timeout=90)
        for f in (units / f"{name}.socket", units / f"{name}.service"):
            f.unlink(missing_ok=True)
        run(["systemctl", "daemon-reload"], timeout=60)
        shutil.rmtree(run_dir, ignore_errors=True)
    assert not sock.exists()


# ------------------------------------------------------------------ the Debian package


def _deb_reason():
    if os.environ.get("SBX_TEST_DEB") == "0":
        return "SBX_TEST_DEB=0: the Debian package is not built"
    if not PLAIN:
        return "the package is built once, in the plain pass"
    if not shutil.which("dpkg-deb", path=FRESH_PATH):
        return "not a Debian system (no dpkg-deb)"
    if os.geteuid() != 0 and not shutil.which("dh", path=FRESH_PATH):
        return "debhelper is missing and only root may install it"
    return None


def ensure_build_tools():
    """debhelper (and build-essential, which dpkg-checkbuilddeps asks for), from Debian's
    archive when missing; the rest of the Build-Depends are build.sh's packages."""
    missing = [p for p in ("debhelper", "build-essential")
               if "install ok installed" not in run(["dpkg-query", "-W", "-f=${Status}", p]).stdout]
    if not missing:
        return
    env = {"PATH": FRESH_PATH, "LANG": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive"}
    cp = run(["apt-get", "install", "-y", "-qq", *missing], env=env, timeout=600)
    if cp.returncode != 0:
        run(["apt-get", "update", "-qq"], env=env, timeout=600)
        cp = run(["apt-get", "install", "-y", "-qq", *missing], env=env, timeout=600)
    assert cp.returncode == 0, f"could not install {missing}: {show(cp)}"


def copy_tree(dst):
    """The checkout's files (tracked and untracked, not ignored: no build directories)."""
    ls = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "-co", "--exclude-standard"],
                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=60)
    if ls.returncode == 0:
        for name in ls.stdout.decode().split("\0"):
            src = REPO / name
            if name and (src.is_file() or src.is_symlink()):
                (dst / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst / name, follow_symlinks=False)
    else:
        shutil.copytree(REPO, dst, symlinks=True, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
            ".git", "build", "build-*", "obj-*", "node_modules", "__pycache__"))


@pytest.fixture(scope="module")
def debs(tmp_path_factory):
    reason = _deb_reason()
    if reason:
        pytest.skip(reason)
    ensure_build_tools()
    top = tmp_path_factory.mktemp("deb")
    src = top / "sbx"
    src.mkdir()
    copy_tree(src)
    # The tests would make sandboxes in the package build too: this suite runs them already.
    env = {"PATH": FRESH_PATH, "LANG": "C.UTF-8", "HOME": str(top), "DEB_BUILD_OPTIONS": "nocheck parallel=2"}
    cp = run(["dpkg-buildpackage", "-b", "-us", "-uc"], cwd=src, env=env, timeout=900)
    assert cp.returncode == 0, show(cp)
    version = project_version()
    found = {p: top / f"{p}_{version}_{run(['dpkg', '--print-architecture']).stdout.strip()}.deb"
             for p in ("sbx", "libsbx0", "libsbx-dev")}
    for p, f in found.items():
        assert f.is_file(), f"no {f.name}: {sorted(x.name for x in top.iterdir())}"
    return found


def deb_field(deb, field):
    return run(["dpkg-deb", "--field", str(deb), field]).stdout.strip()


def deb_files(deb):
    cp = run(["dpkg-deb", "--contents", str(deb)])
    assert cp.returncode == 0, show(cp)
    return {line.split()[5].lstrip(".") for line in cp.stdout.splitlines()}


def test_deb_packages_hold_what_they_should(debs):
    info = run(["dpkg-deb", "--info", str(debs["sbx"])])
    assert info.returncode == 0, show(info)
    assert deb_field(debs["sbx"], "Version") == project_version()
    depends = deb_field(debs["sbx"], "Depends")
    for lib in ("libjansson4", "libseccomp2", "libarchive13", "libnettle8"):
        assert lib in depends, depends
    files = deb_files(debs["sbx"])
    want = {"/usr/bin/sbx", "/usr/libexec/sbx/sbx-engine", "/usr/libexec/sbx/sbx-spawner",
            "/usr/libexec/sbx/sbx-spawner.so",
            "/usr/share/bash-completion/completions/sbx",
            "/lib/systemd/system/sbx.service", "/lib/systemd/system/sbx.socket",
            "/usr/share/man/man1/sbx.1.gz", "/usr/share/sbx/console/index.html",
            "/usr/share/sbx/console/console.js", "/usr/share/sbx/console/console.css"} | {
            f"/usr/share/man/man1/sbx-{c}.1.gz" for c in commands()}
    assert want <= files, f"missing from sbx: {sorted(want - files)}"
    lib = deb_files(debs["libsbx0"])
    assert any(re.fullmatch(r"/usr/lib/[^/]+/libsbx\.so\.0", f) for f in lib), lib
    dev = deb_files(debs["libsbx-dev"])
    assert {f"/usr/include/sbx/{h.name}" for h in HEADERS} <= dev, dev
    assert any(f.endswith("/pkgconfig/sbx.pc") for f in dev) and any(f.endswith("/libsbx.so") for f in dev), dev
    assert f"libsbx0 (= {project_version()})" in deb_field(debs["libsbx-dev"], "Depends")


def test_deb_sbx_runs_a_command(debs, tmp_path):
    root = tmp_path / "root"
    cp = run(["dpkg-deb", "-x", str(debs["sbx"]), str(root)])
    assert cp.returncode == 0, show(cp)
    sbx = root / "usr" / "bin" / "sbx"
    cp = run([str(sbx), "run", "--", "echo hi", "echo $((6 * 7)) from $(hostname)"], timeout=120)
    assert (cp.returncode, cp.stdout) == (0, "hi\n42 from sandbox\n"), show(cp)
    unit = (root / "lib" / "systemd" / "system" / "sbx.service").read_text()
    assert "\nExecStart=/usr/bin/sbx serve --socket /run/sbx.sock\n" in unit, unit
    page = root / "usr" / "share" / "man" / "man1" / "sbx-serve.1.gz"
    assert "socket activation" in render(page).lower()
    # The daemon of the package finds the console's page the package installed beside it.
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    sock = tmp_path / "pkg.sock"
    p = subprocess.Popen([str(sbx), "serve", "--socket", str(sock), "--pool", "0", "--http", f"127.0.0.1:{port}",
                          "--console-token", "package-token-0123456789"], stderr=subprocess.PIPE, text=True)
    try:
        body = None
        for _ in range(200):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/console/", timeout=5) as r:
                    body = r.read()
                break
            except OSError:
                if p.poll() is not None:
                    break
                time.sleep(0.05)
        assert body and b"console.js" in body, p.stderr.read() if p.poll() is not None else body
    finally:
        p.terminate()
        p.wait(30)
    control = tmp_path / "control"
    assert run(["dpkg-deb", "-e", str(debs["sbx"]), str(control)]).returncode == 0
    # Installing enables and starts the socket; the service starts with its first client.
    postinst = (control / "postinst").read_text()
    assert "deb-systemd-helper enable 'sbx.socket'" in postinst, postinst
    assert "deb-systemd-invoke $_dh_action 'sbx.socket'" in postinst, postinst
    assert not re.search(r"deb-systemd-invoke .*'sbx\.service'", postinst), postinst


# ------------------------------------------------------------------ the README


def readme_block_lines(heading):
    from test_readme import blocks, command_lines
    return [c for b in blocks(heading, "sh") for c in command_lines(b)]


def test_readme_install_section_names_the_units_and_the_package_build():
    lines = readme_block_lines("### Install as a daemon")
    text = "\n".join(lines)
    assert "systemctl enable --now sbx.socket" in text, text
    sock = unit_settings(REPO / "systemd" / "sbx.socket")["ListenStream"][0]
    assert f"SBX_SOCKET={sock}" in text, text
    assert "dpkg-buildpackage -b -us -uc" in text, text


@plain_only
@pytest.mark.skipif(not shutil.which("npm", path=FRESH_PATH), reason="npm is missing (the TypeScript SDK needs Node.js >= 18)")
def test_readme_npm_install_line(tmp_path):
    # The README's line, verbatim from the checkout's root, offline: the SDK has no dependencies.
    lines = [l for l in readme_block_lines("### The daemon and the Python SDK") if "npm install" in l]
    assert len(lines) == 1, lines
    line = lines[0].split("#")[0].strip()
    m = re.fullmatch(r"npm install --install-links --prefix ~/([\w.-]+) \./sdk/typescript", line)
    assert m, f"the README's npm line changed: {line!r}"
    env = {"PATH": FRESH_PATH, "HOME": str(tmp_path), "LANG": "C.UTF-8", "npm_config_offline": "true",
           "npm_config_audit": "false", "npm_config_fund": "false", "npm_config_update_notifier": "false"}
    before = conftest_git_state()
    cp = run(["/bin/bash", "-c", line], cwd=REPO, env=env, timeout=180)
    assert cp.returncode == 0, show(cp)
    assert conftest_git_state() == before, "npm install changed the checkout"
    app = tmp_path / m.group(1)
    pkg = app / "node_modules" / "sbx"
    assert pkg.is_dir() and not pkg.is_symlink(), "the SDK is not copied into node_modules"
    cp = run(["node", "--input-type=module", "-e",
              "import { Sandbox } from 'sbx'; console.log(typeof Sandbox.create)"], cwd=app, env=env)
    assert cp.stdout == "function\n", show(cp)


def conftest_git_state():
    cp = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--ignored", "--untracked-files=all"],
                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=60)
    return cp.stdout if cp.returncode == 0 else None
