"""Shared helpers for the sbx integration tests.

The tests drive the real `sbx run` binary. They need root and a cgroup v2 hierarchy; when
either (or the binary) is missing, every test here is skipped with the reason.

The binary is $SBX_BIN, else <repo>/build/src/cli/sbx.
"""
import contextlib
import ctypes
import json
import threading
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SBX_BIN = os.environ.get("SBX_BIN") or str(REPO / "build" / "src" / "cli" / "sbx")


#: Tests that bound the daemon's memory: ASan's shadow memory and quarantine inflate RSS, so
#: their bounds hold only for the plain build (test.sh sets SBX_SANITIZED for the other).
memory_bound = pytest.mark.skipif(os.environ.get("SBX_SANITIZED") == "1",
                                  reason="RSS bounds are measured in the plain build, not under ASan")


def _cgroup2_mounts():
    out = []
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[2] == "cgroup2":
                    out.append(parts[1])
    except OSError:
        pass
    return out


# x86_64 and aarch64 share these numbers (the new mount API came after the unified table).
SYS_FSCONFIG, SYS_FSPICK = 431, 433
FSCONFIG_SET_FLAG, FSCONFIG_CMD_RECONFIGURE = 0, 7
FSPICK_CLOEXEC, AT_FDCWD = 1, -100
NOT_CGROUP2_OWN = {"rw", "ro", "seclabel"}


def cgroup2_superblock():
    """(mount point, superblock options) of the first cgroup2 mount, as mountinfo says."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            head, _, tail = line.partition(" - ")
            fstype, _, opts = tail.split()[:3]
            if fstype == "cgroup2":
                return head.split()[4], opts.split(",")
    return None, []


def cgroup2_reconfigure(path, flags):
    """Sets exactly `flags` on the cgroup2 superblock at path."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    fd = libc.syscall(SYS_FSPICK, AT_FDCWD, path.encode(), FSPICK_CLOEXEC)
    assert fd >= 0, os.strerror(ctypes.get_errno())
    try:
        for flag in flags:
            r = libc.syscall(SYS_FSCONFIG, fd, FSCONFIG_SET_FLAG, flag.encode(), None, 0)
            assert r == 0, f"{flag}: {os.strerror(ctypes.get_errno())}"
        r = libc.syscall(SYS_FSCONFIG, fd, FSCONFIG_CMD_RECONFIGURE, None, None, 0)
        assert r == 0, os.strerror(ctypes.get_errno())
    finally:
        os.close(fd)


def own_flags(opts):
    return [o for o in opts if o not in NOT_CGROUP2_OWN]


def own_cgroup2_flags(opts):
    return [o for o in opts if o not in NOT_CGROUP2_OWN]


@pytest.fixture(scope="session", autouse=True)
def host_cgroup2_options_kept():
    """Every root `sbx serve` and `sbx run` turns favordynmods on for the host's cgroup2 mount:
    the suite puts the mount's options back as it found them."""
    path, before = cgroup2_superblock() if os.geteuid() == 0 else (None, [])
    yield
    if path and sorted(cgroup2_superblock()[1]) != sorted(before):
        try:
            cgroup2_reconfigure(path, own_cgroup2_flags(before))
        except AssertionError:
            pass


def _v1_mount(controller):
    """Mount point of the cgroup v1 hierarchy holding `controller`, or None."""
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 4 and parts[2] == "cgroup" and controller in parts[3].split(","):
                    return parts[1]
    except OSError:
        pass
    return None


def _v1_own_path(controller, pid="self"):
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                if controller in ctrls.split(","):
                    return path
    except OSError:
        pass
    return None


CGROUP2_MOUNTS = _cgroup2_mounts()
CGROUP2 = CGROUP2_MOUNTS[0] if CGROUP2_MOUNTS else None


def _skip_reason():
    if not os.path.isfile(SBX_BIN) or not os.access(SBX_BIN, os.X_OK):
        return f"sbx binary not found at {SBX_BIN} (build it, or set SBX_BIN)"
    if os.geteuid() != 0:
        return "the sbx integration tests need root"
    if not CGROUP2:
        return "no cgroup2 hierarchy mounted"
    return None


SKIP_REASON = _skip_reason()


def pytest_collection_modifyitems(config, items):
    if not SKIP_REASON:
        return
    here = Path(__file__).resolve().parent
    mark = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(mark)


# ------------------------------------------------------------------ running sbx

# Host pids of every sbx process these tests started. Other sbx instances may run on the same
# host at the same time: leftover checks only look at what belongs to these.
SPAWNED = []


def _communicate(p, argv, input, timeout):
    try:
        stdout, stderr = p.communicate(input=input, timeout=timeout)
    except BaseException:
        p.kill()
        p.communicate()
        raise
    return subprocess.CompletedProcess(argv, p.returncode, stdout, stderr)


def sbx(*cmds, opts=(), timeout=60, env=None, input=None):
    """Runs `sbx run OPTS -- CMD...` and returns the CompletedProcess (bytes stdout/stderr).

    The result has an extra attribute `elapsed` (seconds, wall clock). stdin is /dev/null
    unless `input` is given. `env` is the environment of sbx itself (default: ours).
    """
    argv = [SBX_BIN, "run", *opts, "--", *cmds]
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    SPAWNED.append(p.pid)
    cp = _communicate(p, argv, input, timeout)
    cp.elapsed = time.monotonic() - t0
    return cp


def sbx_raw(*args, timeout=30, env=None):
    """Runs `sbx ARGS...` verbatim (for CLI parsing tests)."""
    argv = [SBX_BIN, *args]
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    SPAWNED.append(p.pid)
    cp = _communicate(p, argv, None, timeout)
    cp.elapsed = time.monotonic() - t0
    return cp


def sbx_popen(*cmds, opts=(), stdout=subprocess.PIPE):
    """Starts `sbx run` in the background; stdout (by default) and stderr are pipes."""
    p = subprocess.Popen([SBX_BIN, "run", *opts, "--", *cmds], stdin=subprocess.DEVNULL,
                         stdout=stdout, stderr=subprocess.PIPE)
    SPAWNED.append(p.pid)
    return p


def read_line(p, timeout=10):
    """Reads one line of a Popen's stdout with a deadline (raw fd, no buffering games)."""
    import select
    fd = p.stdout.fileno()
    buf = b""
    deadline = time.monotonic() + timeout
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no line from sbx within {timeout}s (got {buf!r})")
        r, _, _ = select.select([fd], [], [], left)
        if not r:
            continue
        chunk = os.read(fd, 1)
        if not chunk:
            raise EOFError(f"sbx closed stdout (got {buf!r})")
        buf += chunk
    return buf


@contextlib.contextmanager
def killing(p):
    """Runs the body with a Popen'ed sbx; if it is still alive afterwards (a failed check),
    kills it, so no test leaves one behind."""
    try:
        yield p
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def finish(p, timeout=10):
    """Waits for a Popen'ed sbx (killing it if it overstays) and returns (rc, stdout, stderr)."""
    try:
        o, e = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        o, e = p.communicate()
        raise
    return p.returncode, o, e


def stop_daemon(p, timeout=15):
    """SIGTERM to a Popen'ed `sbx serve` (its clean shutdown), SIGKILL if it overstays; returns
    its exit status."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return p.returncode


@pytest.fixture(name="sbx")
def sbx_fixture():
    return sbx


def out(cp):
    return cp.stdout.decode("utf-8", "replace")


def err(cp):
    return cp.stderr.decode("utf-8", "replace")


def describe(cp):
    return (f"exit={cp.returncode} elapsed={getattr(cp, 'elapsed', 0):.2f}s\n"
            f"--- stdout ---\n{cp.stdout[-3000:]!r}\n--- stderr ---\n{cp.stderr[-3000:]!r}")


# ------------------------------------------------------------------ host-side leftovers


def cgroup_bases():
    """Directories under which sbx creates its sbx-<pid> cgroups: the cgroup2 mount(s) and,
    for v1 memory, pids and cpu, this process's own cgroup in those hierarchies."""
    bases = list(CGROUP2_MOUNTS)
    for ctrl in ("memory", "pids", "cpu"):
        mnt = _v1_mount(ctrl)
        own = _v1_own_path(ctrl)
        if mnt and own is not None:
            bases.append(os.path.normpath(mnt + own))
    return bases


def sbx_cgroup_dirs(pids=None):
    """sbx-<pid> cgroup directories of the given sbx pids (default: all these tests started)."""
    pids = SPAWNED if pids is None else pids
    found = []
    for base in cgroup_bases():
        for pid in set(pids):
            d = os.path.join(base, f"sbx-{pid}")
            if os.path.isdir(d):
                found.append(d)
    return sorted(found)


def _v2_cgroup(pid):
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return None


def sbx_processes(pids=None):
    """Host processes that belong to a sandbox of the given sbx pids (default: all these tests
    started): anything in their cgroup trees, or one of those sbx processes still alive."""
    pids = set(SPAWNED if pids is None else pids)
    prefixes = tuple(f"/sbx-{p}/" for p in pids) + tuple(f"/sbx-{p}" for p in pids)
    me = os.getpid()
    procs = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        cg = _v2_cgroup(d)
        alive_sbx = int(d) in pids
        if alive_sbx:
            try:
                with open(f"/proc/{d}/stat") as f:
                    alive_sbx = f.read().rsplit(")", 1)[1].split()[0] != "Z"
            except OSError:
                alive_sbx = False
        if alive_sbx or (cg and (cg + "/").startswith(prefixes)):
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").strip()[:200]
            except OSError:
                continue
            procs.append((int(d), cmd))
    return procs


def mount_set():
    """The host's mounts as (mount point, fs type, source) triples."""
    s = set()
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            rfields = right.split()
            s.add((fields[4], rfields[0] if rfields else "", rfields[1] if len(rfields) > 1 else ""))
    return s


def sbx_related_mounts(mounts):
    """Mounts that could only come from sbx: its staging dir, its tmpfs names, or the kinds of
    mounts it makes for a sandbox root."""
    hits = []
    for mp, fstype, src in mounts:
        if ("sbx" in mp or "sbx" in src or mp.startswith("/run/sbx")
                or fstype in ("proc", "devpts") or (fstype == "tmpfs" and src.startswith("sbx"))):
            hits.append((mp, fstype, src))
    return sorted(hits)


def remove_cgroup_tree(path):
    """rmdir a cgroup directory tree, deepest first (best effort)."""
    p = Path(path)
    if not p.exists():
        return
    dirs = sorted((d for d in p.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True)
    for d in dirs + [p]:
        try:
            os.rmdir(d)
        except OSError:
            pass


class Delegation:
    """A cgroup v2 subtree handed to uid 65534, as a service manager's Delegate= does, for a
    rootless daemon: start it with `argv + [...]`, `env()` and `preexec_fn=enter`; `remove()`
    when done (the daemon gone)."""

    UID = 65534
    argv = ["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups"]

    def __init__(self, prefix="sbx-test-deleg"):
        import uuid
        v2 = Path("/sys/fs/cgroup/unified") if Path("/sys/fs/cgroup/unified/cgroup.procs").exists() \
            else Path("/sys/fs/cgroup")
        self.dir = v2 / f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.dir.mkdir()
        for p in [self.dir] + list(self.dir.iterdir()):
            os.chown(p, self.UID, self.UID)

    def env(self, **extra):
        return {"PATH": "/usr/bin:/bin", "SBX_CGROUP_PARENT": str(self.dir), **extra}

    def enter(self):
        """preexec_fn: the child joins the subtree before it execs."""
        with open(self.dir / "cgroup.procs", "w") as f:
            f.write(str(os.getpid()))

    def remove(self):
        # What `sbx run` left to its detached child (run.c, free_after_exit()) runs in this
        # subtree until it is done: its end is waited for, then the tree goes.
        def empty():
            try:
                return "populated 0" in (self.dir / "cgroup.events").read_text()
            except OSError:
                return True
        wait_until(empty, timeout=10)
        remove_cgroup_tree(self.dir)


def wait_until(pred, timeout=3.0, step=0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(step)


@pytest.fixture(autouse=True)
def no_leftovers(request):
    """After every test: no process, cgroup directory or mount of the sandboxes this test
    created may be left on the host."""
    if SKIP_REASON:
        yield
        return
    mounts_before = mount_set()
    first = len(SPAWNED)
    yield
    mine = SPAWNED[first:]
    if not mine:
        return
    # `sbx run` removes its sandbox after it answered, in a detached child (run.c).
    wait_until(lambda: not sbx_processes(mine) and not sbx_cgroup_dirs(mine), timeout=10)
    leftover_procs = sbx_processes(mine)
    leftover_cg = sbx_cgroup_dirs(mine)
    new_mounts = sbx_related_mounts(mount_set() - mounts_before)
    # Do not let one test's leak cascade into the next ones.
    for pid, _ in leftover_procs:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if leftover_procs:
        wait_until(lambda: not sbx_processes(mine), timeout=3)
    for d in leftover_cg:
        remove_cgroup_tree(d)
    assert not leftover_procs, f"sandbox processes left on the host: {leftover_procs}"
    assert not leftover_cg, f"cgroup directories left on the host: {leftover_cg}"
    assert not new_mounts, f"new mounts left on the host: {new_mounts}"


def host_ipv4():
    """A non-loopback IPv4 address of this host, or None."""
    try:
        cp = subprocess.run(["hostname", "-I"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for tok in cp.stdout.decode().split():
        if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", tok) and not tok.startswith("127."):
            return tok
    return None


class Peer:
    """A raw JSON-RPC client over a pair of byte streams; collects notifications."""

    def __init__(self, rfile, wfile):
        self.rfile, self.wfile = rfile, wfile
        self.next_id = 1
        self.answers = {}
        self.notes = []
        self.cond = threading.Condition()
        self.closed = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.rfile:
            msg = json.loads(line)
            with self.cond:
                if "id" in msg and ("result" in msg or "error" in msg):
                    self.answers[json.dumps(msg["id"])] = msg
                else:
                    self.notes.append(msg)
                self.cond.notify_all()
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def send_raw(self, data: bytes):
        self.wfile.write(data)
        self.wfile.flush()

    def send(self, method, params=None, id=None):
        if id is None:
            id = self.next_id
            self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send_raw((json.dumps(msg) + "\n").encode())
        return id

    def wait(self, id, timeout=30):
        key = json.dumps(id)
        with self.cond:
            ok = self.cond.wait_for(lambda: key in self.answers or self.closed, timeout)
            assert ok and key in self.answers, f"no answer to {id}"
            return self.answers.pop(key)

    def call(self, method, params=None, timeout=30):
        return self.wait(self.send(method, params), timeout)

    def result(self, method, params=None, timeout=30):
        ans = self.call(method, params, timeout)
        assert "result" in ans, ans
        return ans["result"]

    def error(self, method, params=None, timeout=30):
        ans = self.call(method, params, timeout)
        assert "error" in ans, ans
        return ans["error"]


def serve_stdio(*args, env=None, argv=None):
    """A `sbx serve --stdio` with extra flags and environment (or argv as given, e.g. under
    unshare), as a Peer with its process as .proc; close_stdio() ends it."""
    proc = subprocess.Popen(argv or [SBX_BIN, "serve", "--stdio", *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    SPAWNED.append(proc.pid)
    peer = Peer(proc.stdout, proc.stdin)
    peer.proc = proc
    return peer


def close_stdio(peer, check=True):
    """Ends a serve_stdio() daemon by closing its stdin: a clean shutdown, whose exit status is
    non-zero under the sanitizers when the daemon leaked (checked unless check is false)."""
    peer.proc.stdin.close()
    try:
        peer.proc.wait(15)
    except subprocess.TimeoutExpired:
        peer.proc.kill()
        peer.proc.wait()
    if check:
        assert peer.proc.returncode == 0, peer.proc.stderr.read()


def free_port():
    """A TCP port of 127.0.0.1 free now (another process may take it before it is used)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def npm_packages(directory, *packages, needs="these tests"):
    """Skips the test (saying what needs them) without node and npm; else fills directory's
    node_modules from its package-lock.json (`npm ci`) unless every one of packages is there."""
    if not shutil.which("node") or not shutil.which("npm"):
        pytest.skip(f"node and npm are needed for {needs}")
    directory = Path(directory)
    if all((directory / "node_modules" / pkg / "package.json").exists() for pkg in packages):
        return
    cp = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=directory,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    assert cp.returncode == 0, f"npm ci in {directory} failed: {cp.stderr.decode()[-2000:]}"


def connect_peer(path):
    """A Peer on a new connection to the daemon's socket at path (its socket as peer.sock)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    peer = Peer(s.makefile("rb"), s.makefile("wb"))
    peer.sock = s
    return peer


class HttpDaemon:
    """`sbx serve --socket DIR/sbx.sock --pool 0 --http 127.0.0.1:PORT FLAGS` in a directory of
    its own (dir), on a free port (tried again when another process took it first), up once
    both its socket and its listener accept; its stderr collected as it comes (err())."""

    def __init__(self, binary, *flags, prefix="sbx-http-"):
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.sock = os.path.join(self.dir, "sbx.sock")
        self.peers = []
        for _ in range(5):
            self.port = free_port()
            self.lines = []
            self.proc = subprocess.Popen([binary, "serve", "--socket", self.sock, "--pool", "0", "--http",
                                          f"127.0.0.1:{self.port}", *flags], stderr=subprocess.PIPE)
            SPAWNED.append(self.proc.pid)
            self.reader = threading.Thread(target=self._collect, daemon=True)
            self.reader.start()
            if wait_until(lambda: self.proc.poll() is not None or self.up(), 10) and self.proc.poll() is None:
                break
            self.reader.join(5)
            assert "Address already in use" in self.err(), self.err()
        self.url = f"http://127.0.0.1:{self.port}"

    def _collect(self):
        for line in self.proc.stderr:
            self.lines.append(line.decode(errors="replace"))

    def err(self):
        return "".join(self.lines)

    def up(self):
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return os.path.exists(self.sock)
        except OSError:
            return False

    def peer(self):
        """A connection to its socket, closed by stop()."""
        p = connect_peer(self.sock)
        self.peers.append(p)
        return p

    def stop(self):
        """SIGTERM, then (its exit status, its stderr)."""
        stop_daemon(self.proc, 20)
        self.reader.join(5)
        for p in self.peers:
            p.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return self.proc.returncode, self.err()
