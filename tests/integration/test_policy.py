"""The exec policy (create's `policy`): enforced by the kernel (Landlock) for every process of
the sandbox. Each way of running a denied program must fail; allowed ones must still run; the
policy survives fork and restore, never leaks through the pool, and works rootless.

The denied program is tac: given "1\\n2\\n" it prints "2\\n1\\n", which no attempt may show."""
import base64
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import Peer, close_stdio, serve_stdio

REPO = Path(__file__).resolve().parents[2]
SBX = os.environ.get("SBX_BIN", str(REPO / "build" / "src" / "cli" / "sbx"))
LDSO = "/lib64/ld-linux-x86-64.so.2"


def _landlock_abi():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    # landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    return libc.syscall(444, None, 0, 1)


pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes need root here"),
    pytest.mark.skipif(not os.path.exists(SBX), reason=f"{SBX} not built"),
    pytest.mark.skipif(os.uname().machine != "x86_64", reason="syscall number and loader path are x86_64's"),
    pytest.mark.skipif(_landlock_abi() < 2, reason="this kernel has no Landlock (ABI 2+) to enforce a policy"),
    pytest.mark.skipif(not (os.path.exists("/usr/bin/tac") and os.path.exists("/usr/bin/perl")
                            and os.path.exists(LDSO)), reason="tac, perl or the x86_64 loader missing"),
]

TAC_OUT = "2\n1\n"


def spawn(*extra):
    return serve_stdio(*extra)


def close(peer):
    close_stdio(peer, check=False)


@pytest.fixture(scope="module")
def peer():
    p = spawn()
    yield p
    close(p)


def new_box(peer, policy):
    return peer.result("sandbox.create", {"policy": policy} if policy is not None else {})["sandboxId"]


def run(peer, sid, command):
    r = peer.result("run", {"sandboxId": sid, "command": command, "timeoutMs": 20000})
    return r["exitCode"], r["stdout"], r["stderr"]


# Every way to run tac on f (which holds "1\n2\n"); each must be refused.
DENY_ATTEMPTS = {
    "absolute path": "/usr/bin/tac f",
    "PATH": "tac f",
    "path with ..": "/usr/bin/../bin/tac f",
    "path with //": "//usr//bin///tac f",
    "/bin symlink": "/bin/tac f",
    "/proc/self/root": "/proc/self/root/usr/bin/tac f",
    "env": "env tac f",
    "xargs": "echo f | xargs tac",
    "find -exec": "find f -exec tac {} +",
    "python os.execv": "python3 -c 'import os; os.execv(\"/usr/bin/tac\", [\"tac\", \"f\"])'",
    "python subprocess": "python3 -c 'import subprocess; subprocess.run([\"tac\", \"f\"])'",
    "bash -c": "bash -c 'tac f'",
    "sh -c": "sh -c 'tac f'",
    "exec -a": "(exec -a innocent /usr/bin/tac f)",
    "symlink in /tmp": "ln -sf /usr/bin/tac /tmp/t && /tmp/t f",
    "symlink in home": "ln -sf /usr/bin/tac ./t && ./t f",
    "hard link": "ln /usr/bin/tac /tmp/h; ln /usr/bin/tac ./h; /tmp/h f; ./h f",
    "copy to /tmp": "cp /usr/bin/tac /tmp/c; chmod +x /tmp/c; /tmp/c f",
    "copy to home": "cat /usr/bin/tac > ./c && chmod +x ./c && ./c f",
    "dynamic loader": f"{LDSO} /usr/bin/tac f",
    "loader via its /usr/lib path": "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 /usr/bin/tac f",
    "fexecve on an O_PATH fd": "python3 -c 'import os; fd = os.open(\"/usr/bin/tac\", os.O_PATH); "
                               "os.execve(fd, [\"tac\", \"f\"], {})'",
    "execve of /proc/self/fd": "python3 -c 'import os; fd = os.open(\"/usr/bin/tac\", os.O_PATH); "
                               "os.execv(f\"/proc/self/fd/{fd}\", [\"tac\", \"f\"])'",
    "memfd copy": "python3 -c 'import os; m = os.memfd_create(\"x\"); "
                  "os.write(m, open(\"/usr/bin/tac\", \"rb\").read()); os.execv(f\"/proc/self/fd/{m}\", [\"tac\", \"f\"])'",
}


@pytest.fixture(scope="module")
def denied(peer):
    sid = new_box(peer, {"deny": ["/usr/bin/tac", "/usr/bin/perl"]})
    assert run(peer, sid, "printf '1\\n2\\n' > f")[0] == 0
    return sid


def test_without_policy_every_attempt_would_run_tac(peer):
    """The attempts are real: in a sandbox without a policy each of them prints tac's output
    (but hard links, which /usr's read-only mount refuses whatever the policy)."""
    sid = new_box(peer, None)
    run(peer, sid, "printf '1\\n2\\n' > f")
    for name, cmd in DENY_ATTEMPTS.items():
        if name == "hard link":
            continue
        code, out, err = run(peer, sid, cmd)
        assert TAC_OUT in out, (name, code, out, err)
    peer.result("sandbox.destroy", {"sandboxId": sid})


@pytest.mark.parametrize("name", list(DENY_ATTEMPTS))
def test_deny_bypass_fails(peer, denied, name):
    code, out, err = run(peer, denied, DENY_ATTEMPTS[name])
    assert TAC_OUT not in out, (name, code, out, err)
    assert code != 0, (name, out, err)
    if name == "hard link":
        # /usr is another, read-only filesystem: no link can be made to tac at all.
        assert "Invalid cross-device link" in err or "Read-only" in err, err
    else:
        assert "Permission denied" in out + err, (name, code, out, err)


def test_deny_plain_exec_is_eacces_126(peer, denied):
    code, out, err = run(peer, denied, "tac f")
    assert code == 126 and err == "bash: line 1: /usr/bin/tac: Permission denied\n", (code, err)


def test_deny_shebang_interpreter_and_hard_linked_names(peer, denied):
    """A script whose interpreter is denied cannot run, nor the interpreter under another name
    of the same inode (Debian's perl5.36.0 is a hard link of perl)."""
    code, out, err = run(peer, denied, "printf '#!/usr/bin/perl\\nprint \"PERL-RAN\\\\n\";\\n' > s.pl; "
                                       "chmod +x s.pl; ./s.pl")
    assert code == 126 and "PERL-RAN" not in out and "Permission denied" in err, (code, out, err)
    perl_names = [p for p in os.listdir("/usr/bin") if os.path.samefile(f"/usr/bin/{p}", "/usr/bin/perl")]
    for name in perl_names:
        code, out, err = run(peer, denied, f"/usr/bin/{name} -e 'print \"PERL-RAN\\n\"'")
        assert code == 126 and "PERL-RAN" not in out, (name, code, out, err)


def test_deny_leaves_everything_else(peer, denied):
    code, out, err = run(peer, denied, "rev f; python3 -c 'print(6*7)'; cat /etc/hostname; "
                                       "printf 'int main(){return 0;}' > /dev/null; "
                                       "cp /usr/bin/rev /tmp/myrev && /tmp/myrev f; "
                                       "mkdir -p d/e && echo x > d/y && mv d/y d/e/ && ls d/e")
    assert code == 0, (out, err)
    assert out == "1\n2\n42\nsandbox\n1\n2\ny\n", out


@pytest.fixture(scope="module")
def allowed(peer):
    sid = new_box(peer, {"allow": ["/usr/bin/python3*", "/usr/bin/cat", "/usr/bin/chmod", "/usr/bin/ln",
                                   "/usr/bin/env", "/usr/bin/xargs", "/usr/bin/find", "/usr/bin/ls"]})
    assert run(peer, sid, "printf '1\\n2\\n' > f")[0] == 0
    # tac's bytes, put there by the daemon (as an agent could upload them), executable.
    with open("/usr/bin/tac", "rb") as fh:
        data = base64.b64encode(fh.read()).decode()
    peer.result("files.write", {"sandboxId": sid, "path": "up", "data": data, "mode": 0o755})
    return sid


ALLOW_ATTEMPTS = {
    "PATH": "tac f",
    "absolute path": "/usr/bin/tac f",
    "env": "env tac f",
    "xargs": "echo f | xargs tac",
    "find -exec": "find f -exec tac {} +",
    "python os.execv": "python3 -c 'import os; os.execv(\"/usr/bin/tac\", [\"tac\", \"f\"])'",
    "exec -a": "(exec -a cat /usr/bin/tac f)",
    "dynamic loader": f"{LDSO} /usr/bin/tac f",
    "read its bytes": "cat /usr/bin/tac > /tmp/c; chmod +x /tmp/c; /tmp/c f",
    "uploaded copy": "./up f",
    "uploaded copy, hard linked": "ln up /home/user/up2 && ./up2 f",
    "uploaded copy, symlinked": "ln -s /home/user/up /tmp/l && /tmp/l f",
    "uploaded copy in /tmp": "cat up > /tmp/u; chmod +x /tmp/u; /tmp/u f",
    "uploaded copy through the loader": f"{LDSO} ./up f",
    "uploaded copy in a memfd": "python3 -c 'import os; m = os.memfd_create(\"x\"); "
                                "os.write(m, open(\"up\", \"rb\").read()); os.execv(f\"/proc/self/fd/{m}\", [\"tac\", \"f\"])'",
    "uploaded copy in a sealed memfd": "python3 -c 'import os; m = os.memfd_create(\"x\", 8); "
                                       "os.write(m, open(\"up\", \"rb\").read()); "
                                       "os.execv(f\"/proc/self/fd/{m}\", [\"tac\", \"f\"])'",
    "uploaded copy as /dev/shm": "cat up > /dev/shm/u; chmod +x /dev/shm/u; /dev/shm/u f",
    "script of an interpreter not allowed": "printf '#!/usr/bin/perl\\nprint \"2\\\\n1\\\\n\";\\n' > s; chmod +x s; ./s",
}


@pytest.mark.parametrize("name", list(ALLOW_ATTEMPTS))
def test_allow_bypass_fails(peer, allowed, name):
    code, out, err = run(peer, allowed, ALLOW_ATTEMPTS[name])
    assert TAC_OUT not in out, (name, code, out, err)
    assert code != 0, (name, out, err)
    assert "Permission denied" in out + err or "failed to map segment" in err, (name, code, out, err)


def test_allow_runs_what_it_names(peer, allowed):
    code, out, err = run(peer, allowed, "cat f; python3 -c 'import json, os; print(json.dumps(6*7))'; "
                                        "env python3 -c 'print(1)'; ls f; cat /usr/lib/os-release > /dev/null && echo read")
    assert code == 0 and out == "1\n2\n42\n1\nf\nread\n", (code, out, err)
    # An allowed interpreter reading a script is no exec: the policy does not stop it.
    code, out, err = run(peer, allowed, "echo 'echo from-script' > s.sh; bash s.sh")
    assert code == 0 and out == "from-script\n", (code, out, err)


def test_allow_mounts_writable_dirs_noexec(peer, allowed):
    code, out, err = run(peer, allowed, "cat /proc/self/mountinfo")
    lines = [l.split() for l in out.splitlines()]
    opts = {l[4]: l[5].split(",") for l in lines if l[4] in ("/tmp", "/home/user", "/dev/shm")}
    assert set(opts) == {"/tmp", "/home/user", "/dev/shm"}, out
    assert all("noexec" in o for o in opts.values()), opts


def test_policy_kept_by_fork_and_restore(peer):
    sid = new_box(peer, {"deny": ["/usr/bin/tac"]})
    run(peer, sid, "printf '1\\n2\\n' > f")
    snap = peer.result("snapshot.create", {"sandboxId": sid})["id"]
    child = peer.result("sandbox.fork", {"sandboxId": sid})["sandboxId"]
    code, out, err = run(peer, child, "tac f; rev f")
    assert code == 0 and out == "1\n2\n" and "Permission denied" in err, (code, out, err)
    peer.result("snapshot.restore", {"sandboxId": sid, "id": snap})
    code, out, err = run(peer, sid, "tac f")
    assert code == 126 and TAC_OUT not in out, (code, out, err)
    for s in (child, sid):
        peer.result("sandbox.destroy", {"sandboxId": s})


def test_pool_never_hands_out_a_sandbox_without_the_policy():
    p = spawn("--pool", "2")
    try:
        plain = p.result("sandbox.create", {})["sandboxId"]
        withp = new_box(p, {"deny": ["/usr/bin/tac"]})
        plain2 = p.result("sandbox.create", {})["sandboxId"]
        for sid, want in ((plain, 0), (withp, 126), (plain2, 0)):
            code, out, err = run(p, sid, "printf '1\\n2\\n' | tac")
            assert code == want, (sid, code, out, err)
        # A fork of a plain sandbox may come from the pool; it stays without a policy.
        child = p.result("sandbox.fork", {"sandboxId": plain})["sandboxId"]
        assert run(p, child, "printf '1\\n2\\n' | tac")[1] == TAC_OUT
    finally:
        close(p)


@pytest.mark.parametrize("policy, words", [
    ({"allow": ["usr/bin/ls"]}, "not an absolute path"),
    ({"deny": ["/usr/../bin/tac"]}, "'..'"),
    ({"deny": ["/usr/**/tac"]}, "'**' may only be the last component"),
    ({"deny": ["/tmp/x"]}, "in /tmp"),
    ({"allow": ["/home/user/bin/*"]}, "in /home/user"),
    ({"deny": ["/usr/bin/tac"] * 257}, "more than 256 patterns"),
    ({"deny": "/usr/bin/tac"}, "must be an array"),
    ({"deny": [7]}, "must be a path or glob pattern"),
    ({"forbid": ["/usr/bin/tac"]}, "no key 'forbid'"),
])
def test_bad_policy_is_refused_and_the_connection_stays(peer, policy, words):
    e = peer.error("sandbox.create", {"policy": policy})
    assert e["code"] == -32602 and words in e["message"], e
    assert peer.result("ping") is not None


@pytest.mark.parametrize("policy, words", [
    ({"deny": ["/usr/bin/no-such-program"]}, "matches no file in the sandbox"),
    ({"allow": ["/usr/bin/no-such-*"]}, "matches no file in the sandbox"),
    ({"deny": ["/bin/bash"]}, "which runs every session"),
    ({"deny": ["/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"]}, "which runs every session"),
    ({"deny": ["/home/**"]}, "where commands write"),
])
def test_policy_pid1_refuses_says_why(peer, policy, words):
    e = peer.error("sandbox.create", {"policy": policy})
    assert words in e["message"], e
    sid = new_box(peer, {"deny": ["/usr/bin/tac"]})
    assert run(peer, sid, "echo ok")[1] == "ok\n"
    peer.result("sandbox.destroy", {"sandboxId": sid})


def test_sdk_passes_policy():
    import sys
    sys.path.insert(0, str(REPO / "sdk" / "python"))
    from sbx import Sandbox
    with Sandbox(binary=SBX, policy={"allow": ["/usr/bin/cat"]}) as sb:
        r = sb.commands.run("echo hi | cat; ls", timeout=10)
        assert r.exit_code == 126 and r.stdout == "hi\n" and "Permission denied" in r.stderr, r


# ---- rootless: Landlock needs no privilege

@pytest.fixture
def rootless():
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) missing")
    from conftest import Delegation
    from test_rootless import rootless_serve
    d = Delegation()
    proc = rootless_serve(d)
    peer = Peer(proc.stdout, proc.stdin)
    peer.proc = proc
    yield peer
    close(peer)
    d.remove()


def test_rootless_policy(rootless):
    ans = rootless.call("sandbox.create", {"policy": {"deny": ["/usr/bin/tac"]}})
    if "error" in ans and "user namespaces" in ans["error"]["message"]:
        pytest.skip("unprivileged user namespaces are not allowed here")
    sid = ans["result"]["sandboxId"]
    run(rootless, sid, "printf '1\\n2\\n' > f")
    for name in ("PATH", "dynamic loader", "python os.execv", "copy to /tmp", "memfd copy", "symlink in /tmp"):
        code, out, err = run(rootless, sid, DENY_ATTEMPTS[name])
        assert TAC_OUT not in out and "Permission denied" in out + err, (name, code, out, err)
    assert run(rootless, sid, "rev f")[1] == "1\n2\n"
    sid2 = rootless.result("sandbox.create", {"policy": {"allow": ["/usr/bin/python3*"]}})["sandboxId"]
    code, out, err = run(rootless, sid2, "ls; python3 -c 'import os; os.memfd_create(\"x\")'; "
                                         "grep -c noexec /proc/self/mountinfo")
    assert code != 0 and out == "" and err.count("Permission denied") >= 3, (code, out, err)
    code, out, err = run(rootless, sid2, "python3 -c 'print(6*7)'")
    assert (code, out) == (0, "42\n"), err
