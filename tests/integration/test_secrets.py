"""Secrets, envPassthrough and redaction through the protocol: a secret is in the commands'
environment and its value is redacted everywhere output leaves the daemon (run results,
streamed output split across reads, process logs and streams, history), key shapes are
redacted and their near misses are not, truncation counts raw bytes, secrets are never shown,
the daemon's environment stays out unless passed through, and bad secrets are clear errors
that leave the connection usable."""
import base64
import json
import os
import subprocess

import pytest

from conftest import SBX_BIN, close_stdio, serve_stdio
from test_rpc import SPAWNED

SECRET = "abcdefXYZ-s3cr3t-value-42"
SECRETS = {"API_TOKEN": SECRET, "DB_PASS": {"value": "hunter2-but-longer", "mode": "env"}}


serve = serve_stdio
close = close_stdio


@pytest.fixture
def stdio():
    peer = serve()
    yield peer
    close(peer)


@pytest.fixture
def daemon():
    env = dict(os.environ, SBX_TEST_HOST_ONLY="host-value-1", SBX_TEST_PASSED="passed-value-2")
    peer = serve("--env-passthrough", "SBX_TEST_PASSED,SBX_TEST_NOT_SET", "--redact", "xoxb-[0-9]+-[a-z]+", env=env)
    yield peer
    close(peer)


def run(peer, command, **kw):
    return peer.result("run", dict(command=command, **kw), timeout=60)


def test_secret_in_env_and_redacted_in_results(stdio):
    stdio.result("create", {"secrets": SECRETS})
    r = run(stdio, 'echo "token=$API_TOKEN pass=$DB_PASS"; echo "$API_TOKEN" >&2')
    assert r["stdout"] == "token=[REDACTED:API_TOKEN] pass=[REDACTED:DB_PASS]\n"
    assert r["stderr"] == "[REDACTED:API_TOKEN]\n"
    # The command really has it: a derived value shows it reached the shell intact.
    r = run(stdio, 'printf %s "$API_TOKEN" | wc -c; [ "$API_TOKEN" = ' + repr(SECRET).replace("'", "'") + ' ] && echo same')
    assert r["stdout"] == f"{len(SECRET)}\nsame\n"
    # env.get goes through a run: redacted too; declare -p shows it quoted: redacted too.
    assert stdio.result("env.get", {"name": "API_TOKEN"})["value"] == "[REDACTED:API_TOKEN]"
    assert SECRET not in run(stdio, "declare -p API_TOKEN; set | grep API_TOKEN")["stdout"]


def test_secret_split_across_reads_in_stream(stdio):
    stdio.result("create", {"secrets": {"K": "abcdefghijkl"}})
    rid = stdio.send("run", {"command": "printf 'x abc'; sleep 0.2; printf 'def'; sleep 0.2; printf 'ghijkl y\\n'",
                             "stream": True})
    res = stdio.wait(rid, 30)["result"]
    assert res["stdout"] == "x [REDACTED:K] y\n"
    chunks = [n["params"]["data"] for n in stdio.notes
              if n.get("method") == "output" and n["params"]["requestId"] == rid]
    assert "".join(chunks) == "x [REDACTED:K] y\n"
    assert len(chunks) >= 2, chunks  # it did come in pieces
    assert not any("abc" in c or "ghi" in c for c in chunks)


def test_key_shapes_redacted_and_near_misses_kept(stdio):
    stdio.result("create")
    shapes = {
        "AKIAIOSFODNN7EXAMPLE": "[REDACTED]",
        "ghp_" + "aB3" * 12: "[REDACTED]",
        "github_pat_11AAAAAAA0abcdefghijklmnop": "[REDACTED]",
        "sk-proj-" + "x1" * 15: "[REDACTED]",
        "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig": "Authorization: Bearer [REDACTED]",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nAAAA\n-----END RSA PRIVATE KEY-----": "[REDACTED]",
    }
    for raw, want in shapes.items():
        r = run(stdio, "printf '%s\\n' '" + raw + "'")
        assert r["stdout"] == want + "\n", (raw, r)
    for near in ["AKIA123", "xAKIAIOSFODNN7EXAMPLE", "ghp_short", "task-management-system-v2-final",
                 "sk-learn", "Bearer abc", "-----BEGIN CERTIFICATE-----", "-----------------------"]:
        assert run(stdio, "printf '%s\\n' '" + near + "'")["stdout"] == near + "\n"


def test_truncated_counts_raw_bytes(stdio):
    stdio.result("create", {"secrets": {"K": "0123456789abcdef"}, "limits": {"stdoutBytes": 1000}})
    # 900 bytes, then the secret (16), then 200 more: 1116 raw, over the cap of 1000.
    r = run(stdio, "head -c 900 /dev/zero | tr '\\0' a; printf 0123456789abcdef; head -c 200 /dev/zero | tr '\\0' b")
    assert r["truncated"]["stdout"] is True and r["stdout"] == "a" * 900 + "[REDACTED:K]" + "b" * 84
    # Under the cap: not truncated although the marker makes the text longer than raw.
    r = run(stdio, "head -c 990 /dev/zero | tr '\\0' a; printf 0123456789abcdef" + "| head -c 10")
    assert "truncated" not in r and r["stdout"] == "a" * 990 + "0123456789"
    # Cut by the cap in the middle of the secret: the part before the cap is not shown.
    r = run(stdio, "head -c 992 /dev/zero | tr '\\0' a; printf 0123456789abcdef")
    assert r["truncated"]["stdout"] is True and r["stdout"] == "a" * 992 + "[REDACTED]"


def test_process_logs_and_stream_redacted(stdio):
    stdio.result("create", {"secrets": SECRETS})
    p = stdio.result("process.start", {"command": "printf 'a %s' \"${API_TOKEN:0:5}\"; sleep 0.2; "
                                                  "printf '%s b\\n' \"${API_TOKEN:5}\"; echo \"$DB_PASS\" >&2"})
    stdio.result("process.wait", {"processId": p["processId"], "until": "exit", "timeoutMs": 10000}, timeout=20)
    log = stdio.result("process.logs", {"processId": p["processId"]})
    assert log["stdout"] == "a [REDACTED:API_TOKEN] b\n" and log["stderr"] == "[REDACTED:DB_PASS]\n"
    res = stdio.result("process.stream", {"processId": p["processId"], "cursor": 0}, timeout=20)
    text = "".join(n["params"]["data"] for n in stdio.notes if n.get("method") == "process.output"
                   and n["params"]["processId"] == p["processId"])
    assert SECRET not in text + str(res)
    # The command shown by process.list is redacted too.
    q = stdio.result("process.start", {"command": f"echo {SECRET} >/dev/null"})
    shown = [x for x in stdio.result("process.list")["processes"] if x["processId"] == q["processId"]][0]
    assert SECRET not in shown["command"] and "[REDACTED:API_TOKEN]" in shown["command"]


def test_labels_and_error_messages_redacted(stdio):
    """A secret the client put into a process label, or into a path a files call refuses,
    comes back redacted: process.list shows labels, and errors quote paths."""
    stdio.result("create", {"secrets": SECRETS})
    q = stdio.result("process.start", {"command": "true", "label": f"deploy with {SECRET}"})
    shown = [x for x in stdio.result("process.list")["processes"] if x["processId"] == q["processId"]][0]
    assert shown["label"] == "deploy with [REDACTED:API_TOKEN]", shown
    for method, params in (("files.read", {"path": f"/tmp/{SECRET}/missing"}),
                           ("files.list", {"path": f"/home/user/{SECRET}"}),
                           ("files.rm", {"path": f"/etc/{SECRET}"})):
        err = stdio.error(method, params)
        assert SECRET not in err["message"] and "[REDACTED:API_TOKEN]" in err["message"], (method, err)


def test_history_redacted(stdio):
    stdio.result("create", {"secrets": SECRETS})
    run(stdio, f"X={SECRET}; true")
    hist = stdio.result("shell.history.list")["entries"]
    assert hist[-1]["command"] == "X=[REDACTED:API_TOKEN]; true"


def test_secrets_never_shown(stdio):
    stdio.result("create", {"secrets": SECRETS})
    sid = stdio.result("sandbox.create", {"secrets": SECRETS, "label": "s"})["sandboxId"]
    listing = str(stdio.result("sandbox.list"))
    assert SECRET not in listing and "hunter2" not in listing
    assert SECRET not in str(stdio.result("health"))
    stdio.result("sandbox.destroy", {"sandboxId": sid})


def test_export_has_no_secret_value(stdio):
    stdio.result("create", {"secrets": SECRETS})
    run(stdio, 'COPY="$API_TOKEN"; export ALSO="pre-$DB_PASS"')
    blob = stdio.result("persistence.export", timeout=60)
    data = base64.b64decode(blob["data"]) if isinstance(blob, dict) and "data" in blob else None
    assert data is not None, blob
    plain = subprocess.run(["zstd", "-dc"], input=data, capture_output=True).stdout
    assert plain and SECRET.encode() not in plain and b"hunter2-but-longer" not in plain
    # A fork keeps them (it stays in the daemon).
    child = stdio.result("sandbox.fork", timeout=60)["sandboxId"]
    r = stdio.result("run", {"sandboxId": child, "command": 'printf %s "$API_TOKEN" | wc -c'})
    assert r["stdout"].strip() == str(len(SECRET))


def test_bad_secrets_are_clear_errors(stdio):
    bad = [
        ({"1BAD": "abcdefghij"}, "name"),
        ({"A-B": "abcdefghij"}, "name"),
        ({"X": 5}, "string"),
        ({"X": {"value": 5}}, "string"),
        ({"X": "y" * (16 * 1024 + 1)}, "16384"),
        ({"X": {"value": "abcdefghij", "hosts": ["api.example.com"]}}, 'need network "allowlist"'),
        ({"X": {"value": "abcdefghij", "mode": "proxy"}}, "needs hosts"),
        ({"X": {"value": "abcdefghij", "mode": "other"}}, "mode"),
        ({"X": {"value": "abcdefghij", "extra": 1}}, "unknown key"),
        ({"K%d" % i: "abcdefghij" for i in range(65)}, "at most 64"),
        ("notanobject", "secrets"),
    ]
    for secrets, words in bad:
        e = stdio.error("sandbox.create", {"secrets": secrets})
        assert e["code"] == -32602 and words in e["message"], (secrets if len(str(secrets)) < 100 else "...", e)
        assert "abcdefghij" not in e["message"]
    # A secret also in env: refused, naming it, not showing the value.
    e = stdio.error("create", {"secrets": {"X": "abcdefghij"}, "env": {"X": "1"}})
    assert e["code"] == -32602 and "X" in e["message"] and "abcdefghij" not in e["message"]
    # The connection is still usable.
    stdio.result("create", {"secrets": {"OK": "fine-secret-value"}})
    assert run(stdio, "echo $OK")["stdout"] == "[REDACTED:OK]\n"


def test_daemon_env_stays_out_unless_passed_through(daemon):
    daemon.result("create")
    r = run(daemon, 'echo "[$SBX_TEST_HOST_ONLY][$SBX_TEST_PASSED][${SBX_TEST_NOT_SET-unset}]"; env | sort')
    first, rest = r["stdout"].split("\n", 1)
    assert first == "[][passed-value-2][unset]"
    assert "host-value-1" not in rest and "SBX_TEST_HOST_ONLY" not in rest
    # pid 1 is a fork of the daemon: its environment is not readable from inside.
    r = run(daemon, "cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n' | grep -c SBX_TEST_HOST_ONLY; true")
    assert r["stdout"].strip() in ("", "0")
    # A sandbox's own env overrides a passed-through variable.
    sid = daemon.result("sandbox.create", {"env": {"SBX_TEST_PASSED": "own"}})["sandboxId"]
    assert daemon.result("run", {"sandboxId": sid, "command": "echo $SBX_TEST_PASSED"})["stdout"] == "own\n"


def test_extra_pattern_and_no_defaults():
    peer = serve("--redact", "xoxb-[0-9]+-[a-z]+", "--no-default-redactions")
    try:
        peer.result("create", {"secrets": {"S": "still-redacted-1"}})
        r = run(peer, "echo xoxb-123-abc AKIAIOSFODNN7EXAMPLE still-redacted-1")
        assert r["stdout"] == "[REDACTED] AKIAIOSFODNN7EXAMPLE [REDACTED:S]\n"
    finally:
        close(peer)


@pytest.mark.parametrize("args, words", [
    (["--redact", "[a-z]+x"], "literal"),
    (["--redact", "ab|cd"], "alternation"),
    (["--env-passthrough", "1BAD"], "not a variable name"),
])
def test_bad_serve_flags(args, words):
    p = subprocess.run([SBX_BIN, "serve", "--stdio", *args], input=b"", capture_output=True, timeout=30)
    assert p.returncode == 2 and words in p.stderr.decode()


def test_python_sdk_secrets():
    import sys
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "sdk" / "python"))
    from sbx import Sandbox
    with Sandbox(secrets={"TOKEN": SECRET}, binary=SBX_BIN) as sb:
        r = sb.commands.run('echo "t=$TOKEN"; printf %s "$TOKEN" | wc -c')
        assert r.stdout == f"t=[REDACTED:TOKEN]\n{len(SECRET)}\n"


def test_secret_that_ends_the_stream_is_redacted(stdio):
    # Each of these ends the output where another rule could still have read on (its own
    # quoted form, a longer secret, a key shape's prefix): a whole match there must stand.
    secrets = {"A": "pa55word'", "B": "sk-test12345", "C": "correcthorse", "D": "correcthorsebattery"}
    stdio.result("create", {"secrets": secrets})
    for name, value in secrets.items():
        r = stdio.result("run", {"command": f'printf %s "${name}"; printf %s "${name}" >&2'})
        assert r["stdout"] == f"[REDACTED:{name}]" and r["stderr"] == f"[REDACTED:{name}]", (name, r)
        pid = stdio.result("process.start", {"command": f'printf %s "${name}"'})["processId"]
        stdio.result("process.wait", {"processId": pid, "until": "exit", "timeoutMs": 10000})
        logs = stdio.result("process.logs", {"processId": pid})
        assert value not in json.dumps(logs) and f"[REDACTED:{name}]" in logs["stdout"], (name, logs)
    stdio.result("run", {"command": "echo correcthorse >/dev/null"})
    hist = json.dumps(stdio.result("shell.history.list"))
    assert "correcthorse" not in hist and "[REDACTED:C]" in hist
