"""`sbx serve --config FILE` and `--check-config`: the daemon's configuration file ([serve]
options, [sandbox] defaults, [sandbox.enforced] params, [secrets]); every bad key or value is
an error naming the file's line."""
import json
import os
import subprocess

import pytest

from test_rpc import SBX, spawn_stdio

INVALID_PARAMS = -32602


def write(tmp_path, text, name="sbx.conf"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def check(path, *flags):
    return subprocess.run([SBX, "serve", "--config", path, "--check-config", *flags], capture_output=True, text=True,
                          timeout=20, stdin=subprocess.DEVNULL)


GOOD = """# a comment
[serve]
slots = 3
queue = 7
redact = tok-[0-9]+
audit-fail-closed = false

[sandbox]
timeoutMs = 2000
limits = {"pids": 128}

[sandbox.enforced]
network = false

[secrets]
API_TOKEN = abcdefgh12345678
"""


def test_check_config_good(tmp_path):
    path = write(tmp_path, GOOD)
    cp = check(path, "--stdio")
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.strip() == f"{path}: ok"
    # Without a way in (GOOD has no socket), the daemon would not start: the check says so.
    cp = check(path)
    assert cp.returncode == 2 and "give exactly one of socket = PATH or stdio = true" in cp.stderr, cp


@pytest.mark.parametrize("text,line,words", [
    ("[serve]\nslots = 3\nfrobnicate = 1\n", 3, "[serve] has no key 'frobnicate'"),
    ("[serve]\nstdio = maybe\n", 2, "stdio takes true or false, not 'maybe'"),
    ("[serve]\nhelp = true\n", 2, "[serve] has no key 'help'"),
    ("[serve]\nconfig = /etc/x\n", 2, "[serve] has no key 'config'"),
    ("slots = 3\n", 1, "outside any section"),
    ("[serve]\n\n[daemon]\nx = 1\n", 4, "unknown section [daemon]"),
    ("[sandbox]\ntimeoutMs = 1\ntimeoutMs = 2\n", 3, "[sandbox] timeoutMs is given twice"),
    ("[sandbox]\npersist = true\n", 2, "[sandbox] persist is not a sandbox option"),
    ("[secrets]\n1BAD = x\n", 2, "'1BAD' is not a variable name"),
    ("[serve]\nthis is not ini\n", 2, "not a [section], key = value or comment"),
])
def test_bad_lines_are_named(tmp_path, text, line, words):
    path = write(tmp_path, text)
    cp = check(path)
    assert cp.returncode == 2, cp
    assert f"{path}, line {line}: " in cp.stderr and words in cp.stderr, cp.stderr


@pytest.mark.parametrize("text,line,words", [
    ("[serve]\nqueue = 3\nslots = 0\n", 3, "--slots takes 1 to"),
    ("[serve]\nmode = vm\n", 2, "--mode takes"),
    ("[serve]\nlane = fast\n", 2, "--lane takes interactive or system"),
])
def test_bad_values_are_named(tmp_path, text, line, words):
    path = write(tmp_path, text)
    cp = check(path)
    assert cp.returncode == 2, cp
    assert words in cp.stderr and f"{path}, line {line}" in cp.stderr, cp.stderr


@pytest.mark.parametrize("text,words", [
    ("[sandbox]\nfrobnicate = 1\n", 'unknown parameter "frobnicate"'),
    ("[sandbox]\ntimeoutMs = soon\n", "timeoutMs must be a non-negative integer"),
    ("[sandbox.enforced]\nlimits = 12\n", "limits must be an object"),
])
def test_bad_sandbox_params(tmp_path, text, words):
    path = write(tmp_path, text)
    cp = check(path)
    assert cp.returncode == 2 and words in cp.stderr, cp
    # The daemon itself refuses to start on it, the same way.
    cp = subprocess.run([SBX, "serve", "--stdio", "--config", path], capture_output=True, text=True, timeout=20,
                        stdin=subprocess.DEVNULL)
    assert cp.returncode == 2 and words in cp.stderr, cp


def test_missing_file_and_check_without_config(tmp_path):
    cp = check(str(tmp_path / "nope.conf"))
    # 2, as the help says of a file that is not good (it was 1: issue 28 item 7)
    assert cp.returncode == 2 and "No such file or directory" in cp.stderr
    # Without --config it checks the flags (its help says "and the flags"; it refused them).
    cp = subprocess.run([SBX, "serve", "--check-config"], capture_output=True, text=True, timeout=20)
    assert cp.returncode == 2 and "give exactly one of --stdio or --socket PATH" in cp.stderr, cp
    sock = str(tmp_path / "s.sock")
    cp = subprocess.run([SBX, "serve", "--socket", sock, "--http", "bad", "--check-config"], capture_output=True,
                        text=True, timeout=20)
    assert cp.returncode == 2 and "--http bad: not PORT" in cp.stderr, cp
    cp = subprocess.run([SBX, "serve", "--socket", sock, "--http", "127.0.0.1:1234", "--check-config"],
                        capture_output=True, text=True, timeout=20)
    assert cp.returncode == 0 and cp.stdout == "the flags: ok\n" and not os.path.exists(sock), cp


def test_serve_options_from_the_file_and_flags_win(tmp_path):
    path = write(tmp_path, GOOD)
    peer = spawn_stdio("--config", path, "--queue", "9")
    try:
        lane = peer.result("health")["lanes"]["interactive"]
        assert lane["slots"] == 3 and lane["queueMax"] == 9
    finally:
        peer.proc.stdin.close()
        assert peer.proc.wait(10) == 0


def test_sandbox_defaults_enforced_and_secrets(tmp_path):
    path = write(tmp_path, GOOD)
    peer = spawn_stdio("--config", path)
    try:
        peer.result("create")
        # [sandbox] timeoutMs = 2000: the default timeout of this sandbox's runs.
        r = peer.result("run", {"command": "sleep 5"}, timeout=20)
        assert r["exitCode"] == 124
        # A request's own value wins over a default.
        sid = peer.result("sandbox.create", {"timeoutMs": 30000, "limits": {"memoryBytes": 256 << 20}})["sandboxId"]
        assert peer.result("run", {"sandboxId": sid, "command": "sleep 2.5; echo slept"}, timeout=20)["stdout"] == "slept\n"
        # [sandbox.enforced] network = false: the same is fine, another value is refused.
        peer.result("sandbox.create", {"network": False})
        err = peer.error("sandbox.create", {"network": True})
        assert err["code"] == INVALID_PARAMS and "network is set by the server's configuration" in err["message"]
        # [secrets]: in every sandbox's environment, redacted from the output.
        out = peer.result("run", {"sandboxId": sid, "command": 'echo "$API_TOKEN"; echo tok-123'})["stdout"]
        assert out == "[REDACTED:API_TOKEN]\n[REDACTED]\n"
        err = peer.error("sandbox.create", {"secrets": {"API_TOKEN": "mine-12345678"}})
        assert err["code"] == INVALID_PARAMS and "secret API_TOKEN is set by the server's configuration" in err["message"]
        sid2 = peer.result("sandbox.create", {"secrets": {"OTHER": "other-value-123"}})["sandboxId"]
        out = peer.result("run", {"sandboxId": sid2, "command": 'echo "${#API_TOKEN} $OTHER"'})["stdout"]
        assert out == "16 [REDACTED:OTHER]\n"
        # The connection stays usable after each refusal.
        assert peer.result("ping") == {"pong": True}
    finally:
        peer.proc.stdin.close()
        assert peer.proc.wait(10) == 0


def test_enforced_object_keys(tmp_path):
    path = write(tmp_path, '[sandbox.enforced]\nlimits = {"pids": 64}\n')
    peer = spawn_stdio("--config", path)
    try:
        peer.result("sandbox.create", {"limits": {"memoryBytes": 256 << 20}})
        peer.result("sandbox.create", {"limits": {"pids": 64}})
        err = peer.error("sandbox.create", {"limits": {"pids": 1000}})
        assert err["code"] == INVALID_PARAMS and "limits.pids is set by the server's configuration" in err["message"]
    finally:
        peer.proc.stdin.close()
        assert peer.proc.wait(10) == 0


def test_audit_from_the_file(tmp_path):
    log = tmp_path / "audit.log"
    path = write(tmp_path, f"[serve]\naudit = {log}\n")
    peer = spawn_stdio("--config", path)
    try:
        peer.result("create")
        peer.result("run", {"command": "true"})
    finally:
        peer.proc.stdin.close()
        assert peer.proc.wait(10) == 0
    types = [json.loads(line)["type"] for line in log.read_text().splitlines()]
    assert "sandbox.create" in types and "run.end" in types


def test_enforced_fs_limit_under_either_name(tmp_path):
    path = write(tmp_path, "[sandbox.enforced]\nfsLimitBytes = 16777216\n")
    peer = spawn_stdio("--config", path)
    try:
        err = peer.error("sandbox.create", {"limits": {"fsBytes": 1 << 30}})
        assert err["code"] == INVALID_PARAMS and "set by the server's configuration" in err["message"]
        sid = peer.result("sandbox.create", {"limits": {"fsBytes": 16777216}})["sandboxId"]
        out = peer.result("run", {"sandboxId": sid, "command": "df -k /tmp | tail -1"})["stdout"].split()
        assert int(out[1]) <= 16384, out
    finally:
        peer.proc.stdin.close()
        assert peer.proc.wait(10) == 0


def test_unknown_limit_keys_are_refused(tmp_path):
    peer = spawn_stdio()
    try:
        err = peer.error("sandbox.create", {"limits": {"memoryBytes": 100000000, "memory": 1}})
        assert err["code"] == INVALID_PARAMS and 'limits has no key "memory"' in err["message"]
        assert peer.result("ping") == {"pong": True}
    finally:
        peer.proc.stdin.close()
        peer.proc.wait(10)
    cp = check(write(tmp_path, '[sandbox.enforced]\nlimits = {"memoryByts": 1}\n'))
    assert cp.returncode == 2 and 'limits has no key "memoryByts"' in cp.stderr, cp


def test_config_bounds_are_named(tmp_path):
    # More entries than the file may hold: the first one past the bound is named.
    many = "[secrets]\n" + "".join(f"K{i} = 1\n" for i in range(1025))
    cp = check(write(tmp_path, many, "many.conf"))
    assert cp.returncode == 2 and "line 1026: too many entries (at most 1024)" in cp.stderr, cp.stderr
    # Lines of a few KiB are read whole and counted as one line each.
    wide = '[sandbox]\nlabel = "' + "x" * 3000 + '"\nfrobnicate = 1\n'
    cp = check(write(tmp_path, wide, "wide.conf"))
    assert cp.returncode == 2 and 'wide.conf, line 3: [sandbox] unknown parameter "frobnicate"' in cp.stderr, cp.stderr
    cp = check(write(tmp_path, '[sandbox]\nlabel = "' + "x" * 3000 + '"\n[serve]\nnope = 1\n', "wide2.conf"))
    assert cp.returncode == 2 and "wide2.conf, line 4: [serve] has no key 'nope'" in cp.stderr, cp.stderr
    # A line past 64 KiB is refused with its number, not cut and half read.
    long_line = '[sandbox]\ntimeoutMs = 1000\nlabel = "' + "x" * (70 * 1024) + '"\n'
    cp = check(write(tmp_path, long_line, "long.conf"))
    assert cp.returncode == 2 and "long.conf, line 3: longer than 65536 bytes" in cp.stderr, cp.stderr
