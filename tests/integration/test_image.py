"""Images of a sandbox: sandbox.fork, snapshots, and persistence export/import.

Raw JSON-RPC over `sbx serve --stdio` (the Peer class of test_rpc.py), plus the Python SDK's
fork/snapshot/export helpers at the end. Every server started here is registered with
conftest's SPAWNED list, so the autouse leftover check covers its sandboxes, and is shut down
(stdin closed, then SIGTERM, then SIGKILL) by the fixture that started it.
"""
import base64
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SBX = os.environ.get("SBX_BIN") or str(REPO / "build" / "src" / "cli" / "sbx")
sys.path.insert(0, str(REPO / "sdk" / "python"))

from conftest import SPAWNED, Peer  # noqa: E402

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes need root here"),
    pytest.mark.skipif(not os.path.exists(SBX), reason=f"{SBX} not built"),
]

INVALID_PARAMS = -32602
SANDBOX_ERROR = 1
MANIFEST = "sbx-manifest.json"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


# ---------------------------------------------------------------- raw JSON-RPC client

def start_server(*args):
    """`sbx serve --stdio` with args; its stderr is kept in peer.errf."""
    errf = tempfile.TemporaryFile()
    proc = subprocess.Popen([SBX, "serve", "--stdio", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=errf)
    SPAWNED.append(proc.pid)
    peer = Peer(proc.stdout, proc.stdin)
    peer.proc = proc
    peer.errf = errf
    return peer


def stop_server(peer):
    proc = peer.proc
    if proc.poll() is None:
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    peer.errf.close()


@pytest.fixture
def srv():
    peer = start_server()
    try:
        yield peer
    finally:
        stop_server(peer)


def _text(res, key):
    v = res.get(key, "")
    if res.get(key + "Encoding") == "base64":
        return base64.b64decode(v).decode("utf-8", "replace")
    return v


class Box:
    """A sandbox of a Peer, by id."""

    def __init__(self, peer, sid):
        self.peer, self.sid = peer, sid

    def p(self, **kw):
        d = {"sandboxId": self.sid}
        d.update({k: v for k, v in kw.items() if v is not None})
        return d

    def run(self, cmd, session=None, timeout=30):
        return self.peer.result("run", self.p(command=cmd, session=session), timeout)

    def sh(self, cmd, session=None, timeout=30):
        """stdout of a command that must succeed."""
        r = self.run(cmd, session, timeout)
        assert r["exitCode"] == 0, f"{cmd!r} in {self.sid}/{session}: {r}"
        return _text(r, "stdout")

    def fork(self):
        return Box(self.peer, self.peer.result("sandbox.fork", self.p())["sandboxId"])

    def fork_error(self):
        return self.peer.error("sandbox.fork", self.p())

    def destroy(self):
        assert self.peer.result("sandbox.destroy", {"sandboxId": self.sid}) == {"ok": True}

    def write(self, path, data: bytes, mode=None):
        assert self.peer.result("files.write", self.p(path=path, data=base64.b64encode(data).decode(),
                                                      mode=mode)) == {"ok": True}

    def read(self, path) -> bytes:
        return base64.b64decode(self.peer.result("files.read", self.p(path=path))["data"])

    def snapshot(self):
        sid = self.peer.result("snapshot.create", self.p())["id"]
        assert isinstance(sid, str) and sid
        return sid

    def restore(self, snap):
        assert self.peer.result("snapshot.restore", self.p(id=snap)) == {"ok": True}

    def export(self):
        r = self.peer.result("persistence.export", self.p())
        data = base64.b64decode(r["data"])
        assert r["size"] == len(data)
        return data

    def import_(self, data: bytes):
        return self.peer.call("persistence.import", self.p(data=base64.b64encode(data).decode()))


def root(peer, **opts):
    r = peer.result("create", opts)
    return Box(peer, r["sandboxId"])


def new_box(peer, **opts):
    return Box(peer, peer.result("sandbox.create", opts)["sandboxId"])


def exists(box, path, session=None):
    return box.sh(f"test -e {path} && echo yes || echo no", session) == "yes\n"


def count_sleeps(box):
    # comm of every process the sandbox can see; the pipeline's own are cat and grep.
    return int(box.sh("cat /proc/[0-9]*/comm 2>/dev/null | grep -cx sleep || true").strip())


def wait_sleeps(box, n, timeout=5):
    deadline = time.monotonic() + timeout
    while True:
        c = count_sleeps(box)
        if c == n or time.monotonic() > deadline:
            return c
        time.sleep(0.05)


def sha(b):
    return hashlib.sha256(b).hexdigest()


# Binary content with NUL bytes and every byte value.
BINARY = bytes(range(256)) * 40 + b"\0\0\0tail\0"

STATE_CMD = ("cd /tmp/work; X=1; declare -a A=(a 'b c'); declare -A M=([k]=v); "
             "f() { echo fn \"$1\"; }; alias ll='echo aliased'; set -o pipefail; shopt -s nullglob; "
             "umask 027; export E=exported; unset LANG; unset FROMCREATE")
FILES_CMD = ("mkdir -p /tmp/work/a/b/c && echo deep > /tmp/work/a/b/c/leaf && "
             "ln -s a/b/c/leaf /tmp/work/link && echo secret > /tmp/work/p600 && chmod 600 /tmp/work/p600 && "
             "printf '#!/bin/sh\\necho x\\n' > /tmp/work/x755 && chmod 755 /tmp/work/x755 && "
             "echo home > /home/user/h.txt && echo shm > /dev/shm/s.txt")


def make_source(peer, **opts):
    """A root sandbox with the files and session state of test 1."""
    src = root(peer, env={"FROMCREATE": "yes"}, **opts)
    # Both are set before the state is made: the fork must keep them unset, not re-inherit them.
    assert src.sh("echo ${LANG-unset} ${FROMCREATE-unset}") == "C.UTF-8 yes\n"
    src.sh("mkdir -p /tmp/work")
    src.write("/tmp/work/bin.dat", BINARY)
    src.sh(FILES_CMD)
    src.sh(STATE_CMD)
    src.sh("cd /home/user; Y=other", session="other")
    return src


def check_state(box):
    """Asserts the files and session state of make_source() in `box`."""
    assert box.sh("sha256sum /tmp/work/bin.dat") == f"{sha(BINARY)}  /tmp/work/bin.dat\n"
    assert box.read("/tmp/work/bin.dat") == BINARY
    assert box.sh("cat /tmp/work/a/b/c/leaf; readlink /tmp/work/link; cat /tmp/work/link") == "deep\na/b/c/leaf\ndeep\n"
    assert box.sh("stat -c %a /tmp/work/p600 /tmp/work/x755; /tmp/work/x755") == "600\n755\nx\n"
    assert box.sh("test -L /tmp/work/link && test -d /tmp/work/a/b/c && echo ok") == "ok\n"
    assert box.sh("cat /home/user/h.txt /dev/shm/s.txt") == "home\nshm\n"
    # default session
    assert box.sh("pwd") == "/tmp/work\n"
    assert box.sh('echo "$X"') == "1\n"
    assert box.sh("declare -p A M") == 'declare -a A=([0]="a" [1]="b c")\ndeclare -A M=([k]="v" )\n'
    assert box.sh('echo "${A[1]}|${M[k]}|${#A[@]}"') == "b c|v|2\n"
    assert box.sh("f 1") == "fn 1\n"
    assert box.sh("ll") == "aliased\n"
    assert box.sh("set -o | grep pipefail") == "pipefail       \ton\n"
    assert box.sh("shopt nullglob") == "nullglob       \ton\n"
    r = box.run("false | true")
    assert r["exitCode"] == 1, r  # pipefail in effect
    assert box.sh("echo start /nonexistent/* end") == "start end\n"  # nullglob in effect
    assert box.sh("umask") == "0027\n"
    assert box.sh("echo ${LANG-unset} ${FROMCREATE-unset}") == "unset unset\n"
    assert box.sh("env | grep ^E=") == "E=exported\n"
    assert box.sh("touch /tmp/work/new-umask; stat -c %a /tmp/work/new-umask; rm /tmp/work/new-umask") == "640\n"
    # session "other"
    assert box.sh("pwd", session="other") == "/home/user\n"
    assert box.sh('echo "$Y" ${X-unset}', session="other") == "other unset\n"
    assert box.sh("echo ${FROMCREATE-unset}", session="other") == "yes\n"


# ---------------------------------------------------------------- 1-7: fork

def test_fork_copies_files_and_every_session_state(srv):
    src = make_source(srv)
    fork = src.fork()
    assert fork.sid != src.sid and len(fork.sid) == 32
    listed = {s["sandboxId"] for s in srv.result("sandbox.list")["sandboxes"]}
    assert {src.sid, fork.sid} <= listed
    check_state(fork)
    check_state(src)  # the source is unchanged by being forked
    # A session new in the fork starts from the sandbox's options (create-time env), fresh.
    assert fork.sh('pwd; echo ${FROMCREATE-unset} ${X-unset}', session="brand-new") == "/home/user\nyes unset\n"


def test_fork_independent_both_ways(srv):
    src = root(srv)
    src.sh("echo 1 > /tmp/shared1; echo 2 > /tmp/shared2; V=orig")
    fork = src.fork()
    src.sh("echo p > /tmp/p_new; rm /tmp/shared1; echo changed > /tmp/shared2; V=parent")
    fork.sh("echo f > /tmp/f_new; rm /tmp/shared2; V=fork; W=fork-only")
    assert src.sh("ls /tmp; cat /tmp/shared2; echo $V ${W-unset}") == "p_new\nshared2\nchanged\nparent unset\n"
    assert fork.sh("ls /tmp; cat /tmp/shared1; echo $V $W") == "f_new\nshared1\n1\nfork fork-only\n"


def test_fork_state_survives_hostile_and_unusual_definitions(srv):
    """The dump runs no shell code and the replay cannot be subverted by what it restores:
    functions named like the builtins the replay would use, a DEBUG trap, errexit and
    noclobber; and unusual values and attributes come back exactly."""
    src = root(srv)
    src.sh(r"""readonly R=1; declare -i I=3; declare -n NR=I; V=$'a\nb "c" \'d\' $x `y`'
declare -a SPARSE=([3]=x [10]='y z'); declare -l LOW=ABC; g() { echo g "$@"; }; export -f g
alias say='echo said'
h() { say in-h; }
declare() { echo hijacked; }; alias() { echo hijacked; }; set() { echo hijacked; }; shopt() { echo hijacked; }
builtin() { echo hijacked; }; unset() { echo hijacked; }; cd() { echo hijacked; }; umask() { echo hijacked; }
trap 'echo trapped >&2' DEBUG; command set -o noclobber
function a=b { :; }; zz() { echo zz; }""")
    fork = src.fork()
    out = fork.sh(r"""command printf '%s|' "$R" "$I" "$NR" "$V" "${SPARSE[3]}" "${SPARSE[10]}" "${!SPARSE[*]}" "$LOW"; echo
g 1; h; bash -c 'g from-child'; declare; command shopt -qo noclobber && echo noclobber-on; zz
(R=2) 2>/dev/null || echo readonly-kept; I+=1; command echo "$I" """)
    assert out == ('1|3|3|a\nb "c" \'d\' $x `y`|x|y z|3 10|abc|\n'
                   "g 1\nsaid in-h\ng from-child\nhijacked\nnoclobber-on\nzz\nreadonly-kept\n4\n")


def test_fork_and_snapshot_keep_hard_links_and_survive_deep_trees(srv):
    """A 100 MB file with a second link fits a 160 MB sandbox only as one inode: the fork and
    the snapshot must keep the link. A tree deeper than the copier goes (a command can make
    one after a snapshot) must not stand in the way of restoring."""
    src = new_box(srv, fsLimitBytes=160 * 1024 * 1024)
    src.sh("head -c 100000000 /dev/zero > /tmp/a && ln /tmp/a /tmp/b && mkdir -p /tmp/d && ln /tmp/a /tmp/d/c")
    fork = src.fork()
    assert fork.sh("stat -c %i /tmp/a /tmp/b /tmp/d/c | uniq | wc -l; stat -c %h /tmp/a") == "1\n3\n"
    snap = src.snapshot()
    src.sh("rm /tmp/b; for i in $(seq 300); do mkdir d; cd d; done; echo deep > f")
    src.restore(snap)
    assert src.sh("stat -c %h /tmp/a; ls /tmp | tr '\\n' ' '; test -d /home/user/d && echo still-deep || echo cleared") == \
        "3\na b d cleared\n"


def test_snapshot_count_cap(srv):
    """At most 32 snapshots per sandbox, whatever the bytes: the 33rd is refused, nothing is
    kept for it, and deleting one makes room again."""
    box = new_box(srv)
    box.sh("echo x > /tmp/x")
    ids = [box.snapshot() for _ in range(32)]
    err = box.peer.error("snapshot.create", box.p())
    assert err["code"] == 1 and err["message"].startswith("ENOSPC") and "32 snapshots" in err["message"], err
    assert len(box.peer.result("snapshot.list", box.p())["snapshots"]) == 32
    assert box.peer.result("snapshot.delete", box.p(id=ids[0])) == {"ok": True}
    box.snapshot()


def test_state_too_large_to_move(srv):
    """A session state over 16 MiB cannot be forked: a clear error, and both the sandbox and
    the session keep working with their state."""
    box = new_box(srv)
    box.sh("big=$(head -c 17000000 /dev/zero | tr '\\0' a); small=1", timeout=60)
    err = box.peer.error("sandbox.fork", box.p(), timeout=60)
    assert err["code"] == 1 and "larger than" in err["message"], err
    assert box.sh("echo ${#big} $small") == "17000000 1\n"
    assert box.peer.result("health")["sandboxes"] == 1


def test_files_api_refuses_changes_while_a_tree_is_copied(srv):
    """While a snapshot's job copies the tree, files.write gets EBUSY (a change then would be
    half in the snapshot); before and after it works. Writes are sent every few ms while a
    100 MB snapshot is taken, so some land inside the copy."""
    box = new_box(srv)
    box.sh("mkdir -p /home/user/data && for i in $(seq 100); do head -c 1000000 /dev/urandom > /home/user/data/f$i; done",
           timeout=60)
    box.write("/tmp/before", b"x")
    busy = 0
    for _ in range(5):
        snap = box.peer.send("snapshot.create", box.p())
        writes = []
        while json.dumps(snap) not in box.peer.answers:
            writes.append(box.peer.send("files.write", box.p(path="/tmp/w", data="eA==")))
            time.sleep(0.002)
        assert "result" in box.peer.wait(snap)
        for w in writes:
            ans = box.peer.wait(w)
            if "error" in ans:
                assert ans["error"]["code"] == 1 and ans["error"]["message"].startswith("EBUSY"), ans
                busy += 1
            else:
                assert ans["result"] == {"ok": True}, ans
        if busy:
            break
    # Whether a write lands before the copy starts is timing (on a loaded machine all may
    # meet it): what must hold is that some met it and were refused, and that writes work
    # before and after.
    assert busy > 0, busy
    box.write("/tmp/after", b"y")


def test_fork_of_fork_and_of_created_sandbox(srv):
    src = root(srv)
    src.sh("cd /tmp; echo one > /tmp/l1; L1=one")
    f1 = src.fork()
    f1.sh("mkdir -p /home/user/d; cd /home/user/d; echo two > /home/user/d/l2; L2=two; g() { echo g$1; }")
    f2 = f1.fork()
    assert f2.sh('pwd; cat /tmp/l1 /home/user/d/l2; echo "$L1 $L2"; g 2') == "/home/user/d\none\ntwo\none two\ng2\n"
    # The grand-child is independent of both.
    f2.sh("echo three > /tmp/l3")
    assert not exists(f1, "/tmp/l3") and not exists(src, "/tmp/l3")
    assert not exists(src, "/home/user/d/l2")

    other = new_box(srv, label="made")
    other.sh("echo made > /dev/shm/m; MADE=yes; cd /dev/shm", session="s")
    fo = other.fork()
    assert fo.sid not in (other.sid, src.sid)
    assert fo.sh('pwd; cat /dev/shm/m; echo "$MADE"', session="s") == "/dev/shm\nmade\nyes\n"
    assert not exists(fo, "/tmp/l1")  # a copy of `other`, not of the connection's root


def test_fork_carries_limits(srv):
    src = root(srv, fsLimitBytes=2097152)
    src.sh("echo before > /tmp/before")
    fork = src.fork()
    assert fork.sh("cat /tmp/before") == "before\n"
    r = fork.run("head -c 3000000 /dev/zero > /tmp/big")
    assert r["exitCode"] != 0, r
    assert "No space left on device" in r["stderr"], r
    # Control: a sandbox with the default limits writes the same file.
    free = new_box(srv)
    assert free.sh("head -c 3000000 /dev/zero > /tmp/big && stat -c %s /tmp/big") == "3000000\n"


def test_fork_is_a_barrier(srv):
    src = root(srv)
    src.sh("true", session="s3")
    p = {"sandboxId": src.sid}
    late = srv.send("run", {**p, "command": "sleep 1; echo late > /tmp/late"})
    late2 = srv.send("run", {**p, "command": "sleep 0.5; echo s2 > /tmp/s2late; S2=set", "session": "s2"})
    fork_id = srv.send("sandbox.fork", p)
    after = srv.send("run", {**p, "command": "echo after > /tmp/after"})
    after3 = srv.send("run", {**p, "command": "echo after3 > /tmp/after3", "session": "s3"})
    # Everything is done well within 10 s (the sleeps take 1 s).
    for i in (late, late2, after, after3):
        ans = srv.wait(i, timeout=10)
        assert ans.get("result", {}).get("exitCode") == 0, ans
    ans = srv.wait(fork_id, timeout=10)
    assert "result" in ans, ans
    fork = Box(srv, ans["result"]["sandboxId"])
    assert fork.sh("cat /tmp/late /tmp/s2late") == "late\ns2\n"
    assert fork.sh("echo ${S2-unset}", session="s2") == "set\n"
    assert not exists(fork, "/tmp/after")
    assert not exists(fork, "/tmp/after3")
    assert src.sh("cat /tmp/late /tmp/s2late /tmp/after /tmp/after3") == "late\ns2\nafter\nafter3\n"


def test_fork_does_not_copy_background_processes(srv):
    src = root(srv)
    src.sh("sleep 300 >/dev/null 2>&1 &")
    assert wait_sleeps(src, 1) == 1
    fork = src.fork()
    assert count_sleeps(fork) == 0
    assert fork.sh("echo alive") == "alive\n"
    assert count_sleeps(src) == 1


def test_fork_cap_and_unknown_sandbox(srv):
    src = root(srv)
    src.sh("echo x > /tmp/x")
    forks = [src.fork() for _ in range(16)]
    assert len({f.sid for f in forks}) == 16
    e = src.fork_error()
    assert e["code"] == INVALID_PARAMS and "Maximum of 16 concurrent forks reached" in e["message"], e
    e = forks[3].fork_error()  # forks of forks count too
    assert e["code"] == INVALID_PARAMS and "Maximum of 16 concurrent forks reached" in e["message"], e
    forks[0].destroy()
    again = src.fork()
    assert again.sh("cat /tmp/x") == "x\n"
    assert forks[15].sh("cat /tmp/x") == "x\n"
    e = src.fork_error()
    assert e["code"] == INVALID_PARAMS and "Maximum of 16 concurrent forks reached" in e["message"], e
    assert srv.error("sandbox.fork", {"sandboxId": "nope"}) == {"code": INVALID_PARAMS,
                                                               "message": "Unknown sandboxId: nope"}
    gone = forks[0].sid
    assert srv.error("sandbox.fork", {"sandboxId": gone})["message"] == f"Unknown sandboxId: {gone}"


# ---------------------------------------------------------------- 8: snapshots

def test_snapshots_restore_files_and_state_repeatedly(srv):
    b = root(srv)
    b.sh("mkdir -p /tmp/s && echo one > /tmp/s/a && cd /tmp/s && V=1 && g() { echo g; }")
    snap = b.snapshot()

    def check_restored():
        assert b.sh("cat /tmp/s/a; ls /tmp/s; pwd; echo $V; g") == "one\na\n/tmp/s\n1\ng\n"
        assert b.sh("pwd; echo ${W-unset}", session="late") == "/home/user\nunset\n"

    b.sh("echo two > /tmp/s/a; echo new > /tmp/s/new; V=2; cd /; unset -f g")
    b.sh("W=late; cd /tmp", session="late")
    b.sh("sleep 300 >/dev/null 2>&1 &")
    assert wait_sleeps(b, 1) == 1
    b.restore(snap)
    check_restored()
    assert count_sleeps(b) == 0  # background processes are killed by a restore
    b.sh("echo three > /tmp/s/a; echo x > /tmp/s/new2; rm -f /tmp/s/a2; V=3; cd /dev/shm")
    b.sh("W=again", session="late")
    b.restore(snap)
    check_restored()

    snap2 = b.snapshot()
    assert snap2 != snap
    listed = srv.result("snapshot.list", {"sandboxId": b.sid})["snapshots"]
    assert [s["id"] for s in listed] == [snap, snap2]
    for s in listed:
        assert isinstance(s["createdAt"], str) and s["createdAt"]
        assert isinstance(s["bytes"], int) and s["bytes"] >= 4
    assert srv.result("snapshot.delete", {"sandboxId": b.sid, "id": snap2}) == {"ok": True}
    assert [s["id"] for s in srv.result("snapshot.list", {"sandboxId": b.sid})["snapshots"]] == [snap]
    assert srv.error("snapshot.restore", {"sandboxId": b.sid, "id": snap2}) == {
        "code": INVALID_PARAMS, "message": f"Unknown snapshot id: {snap2}"}
    assert srv.error("snapshot.delete", {"sandboxId": b.sid, "id": snap2})["code"] == INVALID_PARAMS
    assert srv.error("snapshot.restore", {"sandboxId": b.sid, "id": "nope"}) == {
        "code": INVALID_PARAMS, "message": "Unknown snapshot id: nope"}
    # The remaining one still works.
    b.sh("echo four > /tmp/s/a")
    b.restore(snap)
    check_restored()


def test_snapshot_budget(srv):
    root(srv)
    b = new_box(srv, fsLimitBytes=1048576)
    digest = b.sh("head -c 900000 /dev/urandom > /tmp/big && sha256sum < /tmp/big")
    ok, failure = [], None
    for _ in range(10):
        ans = srv.call("snapshot.create", b.p())
        if "error" in ans:
            failure = ans["error"]
            break
        ok.append(ans["result"]["id"])
    assert failure is not None, f"{len(ok)} snapshots of 900 KB fit a 4 MiB budget"
    assert failure["code"] == SANDBOX_ERROR and "ENOSPC" in failure["message"], failure
    assert 3 <= len(ok) <= 5, (len(ok), failure)
    assert [s["id"] for s in srv.result("snapshot.list", b.p())["snapshots"]] == ok  # nothing kept of it
    assert b.sh("echo alive; rm /tmp/big; echo other > /tmp/big") == "alive\n"
    b.restore(ok[0])
    assert b.sh("sha256sum < /tmp/big") == digest
    b.sh("rm /tmp/big")
    b.restore(ok[-1])
    assert b.sh("sha256sum < /tmp/big") == digest


# ---------------------------------------------------------------- 9-10: export and import

def unzstd(data: bytes) -> bytes:
    return subprocess.run(["zstd", "-q", "-d", "-c"], input=data, stdout=subprocess.PIPE, check=True).stdout


def zstd(data: bytes) -> bytes:
    return subprocess.run(["zstd", "-q", "-c"], input=data, stdout=subprocess.PIPE, check=True).stdout


def payload_digest(members):
    """sbx's payload digest (src/fs/archive.h) of (TarInfo, data) pairs."""
    h = hashlib.sha256()
    entries = nbytes = 0
    for ti, data in members:
        if ti.isfile():
            t = "f"
        elif ti.isdir():
            t = "d"
        elif ti.issym():
            t = "l"
        elif ti.isfifo():
            t = "p"
        elif ti.islnk():
            t = "h"
        else:
            t = "?"
        size = ti.size if t == "f" else 0
        target = ti.linkname if t in ("l", "h") else ""
        h.update(ti.name.rstrip("/").encode() + b"\0" + t.encode() + b"\0" + b"%o\0" % (ti.mode & 0o7777)
                 + b"%d\0" % size + target.encode() + b"\0")
        if t == "f":
            h.update(data)
            nbytes += len(data)
        entries += 1
    return h.hexdigest(), entries, nbytes


def read_archive(blob: bytes):
    """[(TarInfo, data)] of an exported archive, in order."""
    out = []
    with tarfile.open(fileobj=io.BytesIO(unzstd(blob)), mode="r:") as tf:
        for ti in tf:
            data = tf.extractfile(ti).read() if ti.isfile() else b""
            out.append((ti, data))
    return out


def build_archive(members, base_manifest, fix=None, digest=None):
    """A zstd tar of members [(TarInfo, data)] plus a manifest whose payload digest is right
    (unless `digest` is given); `fix(manifest)` edits the manifest before it is written."""
    d, n, nb = payload_digest(members)
    man = dict(base_manifest)
    man["createdAt"] = int(time.time() * 1000)
    man["payload"] = {"sha256": digest or d, "entries": n, "bytes": nb}
    if fix:
        fix(man)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for ti, data in members:
            tf.addfile(ti, io.BytesIO(data) if ti.isfile() else None)
        raw = json.dumps(man).encode()
        ti = tarfile.TarInfo(MANIFEST)
        ti.size = len(raw)
        ti.mode = 0o644
        tf.addfile(ti, io.BytesIO(raw))
    return zstd(buf.getvalue())


def entry(name, kind="f", data=b"", mode=None, linkname="", major=0, minor=0):
    ti = tarfile.TarInfo(name)
    ti.uid = ti.gid = 1000
    ti.uname = ti.gname = "user"
    ti.mtime = int(time.time())
    if kind == "f":
        ti.type, ti.size, ti.mode = tarfile.REGTYPE, len(data), 0o644 if mode is None else mode
    elif kind == "d":
        ti.type, ti.mode = tarfile.DIRTYPE, 0o755 if mode is None else mode
    elif kind == "l":
        ti.type, ti.mode, ti.linkname = tarfile.SYMTYPE, 0o777, linkname
    elif kind == "c":
        ti.type, ti.mode, ti.devmajor, ti.devminor = tarfile.CHRTYPE, 0o666, major, minor
    elif kind == "h":
        ti.type, ti.mode, ti.linkname = tarfile.LNKTYPE, 0o644, linkname
    return (ti, data)


def tar_list(blob, tmp_path):
    f = tmp_path / "export.tar.zst"
    f.write_bytes(blob)
    cp = subprocess.run(["tar", "--zstd", "-tf", str(f)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert cp.returncode == 0, cp.stderr
    return [l.rstrip("/") for l in cp.stdout.decode().splitlines()]


def manifest_of(blob):
    members = read_archive(blob)
    ti, data = members[-1]
    assert ti.name == MANIFEST
    return json.loads(data), members[:-1]


def test_export_and_import(srv, tmp_path):
    src = root(srv, fsLimitBytes=8 * 1024 * 1024)
    src.write("/home/user/data/bin.dat", BINARY)
    src.sh("cd /home/user/data && mkdir -p nested/deeper empty && echo n > nested/deeper/n.txt && "
           "echo s > p600 && chmod 600 p600 && echo 'echo run' > x755 && chmod 755 x755 && "
           "ln -s nested/deeper/n.txt link && echo t > /tmp/t.txt && echo m > /dev/shm/m.txt")
    src.sh("cd /home/user/data; V=exported-var; declare -a ARR=(x 'y z'); h() { echo h:$1; }; export EV=ev; umask 077")
    src.sh("cd /tmp; O=other-session", session="other")
    blob = src.export()
    assert blob[:4] == ZSTD_MAGIC

    names = tar_list(blob, tmp_path)
    assert names[-1] == MANIFEST and names.count(MANIFEST) == 1
    for want in ("tmp", "home/user", "dev/shm", "home/user/data/bin.dat", "home/user/data/nested/deeper/n.txt",
                 "home/user/data/empty", "home/user/data/link", "tmp/t.txt", "dev/shm/m.txt"):
        assert want in names, (want, names)
    assert all(n == MANIFEST or n.split("/")[0] in ("tmp", "home", "dev") for n in names), names
    man, members = manifest_of(blob)
    assert man["format"] == "sbx-export" and man["version"] == 1, man
    assert isinstance(man["createdAt"], int) and man["createdAt"] > 1_600_000_000_000
    assert man["limits"]["fsBytes"] == 8 * 1024 * 1024
    assert {s["name"] for s in man["sessions"]} == {"default", "other"}
    for s in man["sessions"]:
        base64.b64decode(s["state"], validate=True)
    # The documented digest is what the manifest holds.
    d, n, nb = payload_digest(members)
    assert man["payload"] == {"sha256": d, "entries": n, "bytes": nb}

    dst = new_box(srv)
    dst.sh("echo pre > /tmp/pre; echo pre > /home/user/pre2; echo pre > /dev/shm/pre3; T=target; cd /dev/shm")
    dst.sh("Q=q", session="onlytarget")
    assert dst.import_(blob).get("result") == {"ok": True}
    listing = "find /tmp /home/user /dev/shm | sort"
    assert dst.sh(listing) == src.sh(listing)
    assert dst.sh("ls /tmp /dev/shm") == "/dev/shm:\nm.txt\n\n/tmp:\nt.txt\n"
    assert not exists(dst, "/home/user/pre2")
    assert dst.sh("sha256sum < /home/user/data/bin.dat") == f"{sha(BINARY)}  -\n"
    assert dst.read("/home/user/data/bin.dat") == BINARY
    modes = "cd /home/user/data && stat -c '%n %a %U' p600 x755 empty nested nested/deeper/n.txt"
    assert dst.sh(modes) == src.sh(modes)
    assert dst.sh("cd /home/user/data && stat -c '%n %a %U' p600 x755 && readlink link && cat link && "
                  "find empty | wc -l") == "p600 600 user\nx755 755 user\nnested/deeper/n.txt\nn\n1\n"
    assert dst.sh("test -d /home/user/data/empty && test -L /home/user/data/link && echo ok") == "ok\n"
    # Session state
    assert dst.sh('pwd; echo "$V" ${T-unset}; echo "${ARR[1]}"; h 1; env | grep ^EV=; umask') == \
        "/home/user/data\nexported-var unset\ny z\nh:1\nEV=ev\n0077\n"
    assert dst.sh('pwd; echo "$O"', session="other") == "/tmp\nother-session\n"
    assert dst.sh("pwd; echo ${Q-unset}", session="onlytarget") == "/home/user\nunset\n"
    # The source is untouched by being exported.
    assert src.sh("cat /home/user/data/link; echo $V") == "n\nexported-var\n"


@pytest.fixture
def target(srv):
    """(root used for templates, target box with a marker, snapshot of target's listing)."""
    tmpl = root(srv)
    tmpl.sh("echo hello > /home/user/ok.txt; TV=template")
    tgt = new_box(srv, fsLimitBytes=1048576)
    tgt.sh("echo keep > /tmp/marker; mkdir -p /home/user/dir; cd /home/user/dir; KEEP=1")
    listing = tgt.sh("find /tmp /home/user /dev/shm | sort")
    return tmpl, tgt, listing


def assert_unchanged(tgt, listing):
    assert tgt.sh("find /tmp /home/user /dev/shm | sort") == listing
    assert tgt.sh("cat /tmp/marker; pwd; echo ${KEEP-unset}") == "keep\n/home/user/dir\n1\n"


def refused(tgt, blob, listing, *keywords):
    ans = tgt.import_(blob)
    assert "error" in ans, ans
    err = ans["error"]
    assert err["code"] == INVALID_PARAMS, err
    for k in keywords:
        assert k in err["message"], (k, err)
    assert_unchanged(tgt, listing)
    return err["message"]


def test_import_refuses_corrupt_archives(srv, target):
    tmpl, tgt, listing = target
    refused(tgt, os.urandom(4096), listing, "not an sbx archive")
    refused(tgt, zstd(b"plain text, not a tar" * 100), listing)
    # A valid export whose middle byte (inside incompressible file data) is flipped.
    src = new_box(srv)
    src.sh("head -c 300000 /dev/urandom > /home/user/rand")
    blob = bytearray(src.export())
    assert "result" in new_box(srv).import_(bytes(blob))  # control: the untouched one is accepted
    blob[len(blob) // 2] ^= 0x40
    refused(tgt, bytes(blob), listing)


def test_import_refuses_unsafe_archives(srv, target):
    tmpl, tgt, listing = target
    man, members = manifest_of(tmpl.export())
    base = {k: man[k] for k in ("format", "version", "limits", "sessions")}
    good = [entry("home/user/sub", "d"), entry("home/user/sub/ok.txt", data=b"hello\n")]

    # Control: the hand-built archive with no defect is accepted (so the builder is right).
    ctl = new_box(srv)
    ans = ctl.import_(build_archive(good, base))
    assert ans.get("result") == {"ok": True}, ans
    assert ctl.sh("cat /home/user/sub/ok.txt; echo $TV") == "hello\ntemplate\n"

    def bad(extra=(), **kw):
        return build_archive(good + list(extra), base, **kw)

    refused(tgt, bad(fix=lambda m: m.update(version=99)), listing, "version")
    refused(tgt, bad(fix=lambda m: m.update(format="other")), listing, "format")
    refused(tgt, bad([entry("../../etc/x", data=b"x")]), listing, "'..'")
    refused(tgt, bad([entry("home/user/../../etc/x", data=b"x")]), listing, "'..'")
    refused(tgt, bad([entry("/etc/x", data=b"x")]), listing, "absolute")
    refused(tgt, bad([entry("etc/x", data=b"x")]), listing, "outside")
    refused(tgt, bad([entry("home/user/l", "l", linkname="/etc/shadow")]), listing, "outside")
    refused(tgt, bad([entry("home/user/l2", "l", linkname="../../etc/shadow")]), listing, "outside")
    refused(tgt, bad([entry("home/user/null", "c", major=1, minor=3)]), listing, "device")
    refused(tgt, bad([entry("home/user/suid", data=b"#!/bin/sh\n", mode=0o4755)]), listing, "setuid")
    refused(tgt, bad(digest="0" * 64), listing, "checksum")
    refused(tgt, bad(fix=lambda m: m["payload"].update(bytes=m["payload"]["bytes"] + 1)), listing, "checksum")
    big = bytes(1536 * 1024)  # 1.5 MiB > the target's 1 MiB
    msg = refused(tgt, bad([entry("home/user/big", data=big)]), listing)
    assert "too large" in msg or "limit" in msg, msg
    # 300 one-byte files: 300 bytes, but 300 pages of tmpfs (1.2 MiB) in a 1 MiB sandbox.
    msg = refused(tgt, bad([entry(f"home/user/p{i}", data=b"x") for i in range(300)]), listing)
    assert "too large" in msg, msg
    # A hard link between tmp and home/user: link() cannot cross the sandbox's bind mounts.
    refused(tgt, bad([entry("tmp/a", data=b"x"), entry("home/user/h", "h", linkname="tmp/a")]), listing, "hard link")
    # A session state the shell could not apply.
    refused(tgt, bad(fix=lambda m: m.update(sessions=[{"name": "default",
                                                        "state": base64.b64encode(b"not a state").decode()}])),
            listing, "not a session state")
    # Only the manifest missing.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        ti, data = good[1]
        tf.addfile(ti, io.BytesIO(data))
    refused(tgt, zstd(buf.getvalue()), listing, MANIFEST)
    # And the target still imports a good archive afterwards.
    assert tgt.import_(build_archive(good, base)).get("result") == {"ok": True}
    assert tgt.sh("cat /home/user/sub/ok.txt; test -e /tmp/marker || echo gone") == "hello\ngone\n"


# ---------------------------------------------------------------- 11: the Python SDK

def new_sandbox(**kw):
    from sbx import Sandbox
    kw.setdefault("binary", SBX)
    sb = Sandbox(**kw)
    SPAWNED.append(sb.client.pid)
    return sb


def test_sdk_fork_snapshot_export():
    from sbx import Sandbox, SbxError
    sb = new_sandbox(timeout=20)
    sb2 = None
    try:
        r = sb.commands.run("mkdir -p /tmp/d && echo hi > /tmp/d/f && cd /tmp/d && V=sdk && "
                            "head -c 200000 /dev/urandom > /tmp/d/rand")
        assert r.exit_code == 0, r
        child = sb.fork()
        assert isinstance(child, Sandbox) and child.sandbox_id != sb.sandbox_id and not child.is_root
        assert child.commands.run("cat f; echo $V; pwd").stdout == "hi\nsdk\n/tmp/d\n"
        child.commands.run("echo c > /tmp/d/c; V=child")
        assert sb.commands.run("ls /tmp/d; echo $V").stdout == "f\nrand\nsdk\n"
        child.destroy()
        with pytest.raises(SbxError) as ei:
            child.commands.run("true")
        assert ei.value.code == INVALID_PARAMS

        snap = sb.snapshot()
        sb.commands.run("echo bye > /tmp/d/f; touch /tmp/d/later; V=changed; cd /")
        sb.restore(snap)
        assert sb.commands.run("ls; cat f; echo $V").stdout == "f\nrand\nhi\nsdk\n"
        assert [s["id"] for s in sb.list_snapshots()] == [snap]
        sb.delete_snapshot(snap)
        assert sb.list_snapshots() == []
        with pytest.raises(SbxError) as ei:
            sb.restore(snap)
        assert ei.value.code == INVALID_PARAMS and f"Unknown snapshot id: {snap}" in ei.value.message

        blob = sb.export_state()
        assert isinstance(blob, bytes) and blob[:4] == ZSTD_MAGIC
        rand_sum = sb.commands.run("sha256sum < /tmp/d/rand").stdout
        sb2 = new_sandbox(timeout=20)
        sb2.commands.run("echo mine > /tmp/mine; M=mine")
        tampered = bytearray(blob)
        tampered[len(tampered) // 2] ^= 0x01
        with pytest.raises(SbxError) as ei:
            sb2.import_state(bytes(tampered))
        assert ei.value.code == INVALID_PARAMS
        assert sb2.commands.run("ls /tmp; echo $M").stdout == "mine\nmine\n"
        sb2.import_state(blob)
        assert sb2.commands.run("ls /tmp; cat /tmp/d/f; echo $V ${M-unset}; pwd").stdout == \
            "d\nhi\nsdk unset\n/tmp/d\n"
        assert sb2.commands.run("sha256sum < /tmp/d/rand").stdout == rand_sum
    finally:
        sb.kill()
        if sb2 is not None:
            sb2.kill()
