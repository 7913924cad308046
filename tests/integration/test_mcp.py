"""`sbx mcp`: the Model Context Protocol server, driven by the official TypeScript client
(tests/mcp/client.mjs, @modelcontextprotocol/sdk pinned in tests/mcp/package.json and installed
into tests/mcp/node_modules on first use) and by raw JSON lines, so the protocol is tested
without node too."""
import base64
import json
import re
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from conftest import SBX_BIN, SPAWNED, Peer, npm_packages, remove_cgroup_tree, sbx_cgroup_dirs, sbx_processes, wait_until

REPO = Path(__file__).resolve().parents[2]
NODE_DIR = REPO / "tests" / "mcp"
TOOLS = {"run", "run_code", "process_start", "process_list", "process_logs", "process_kill", "read_file", "write_file",
         "edit_file", "list_directory", "fork", "snapshot", "restore"}
VERSIONS = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", "2024-10-07"]


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def start_mcp(*args):
    """`sbx mcp ARGS` with a raw JSON-RPC peer on its stdio; it and the daemon it starts are
    registered for the leftover checks."""
    p = subprocess.Popen([SBX_BIN, "mcp", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    SPAWNED.append(p.pid)
    if "--socket" not in args:
        kids = wait_until(lambda: children(p.pid), timeout=5)
        SPAWNED.extend(kids or [])
    peer = Peer(p.stdout, p.stdin)
    peer.proc = p
    return peer


def stop(peer, timeout=20):
    if peer.proc.poll() is None:
        try:
            peer.proc.stdin.close()
        except OSError:
            pass
        try:
            peer.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            peer.proc.kill()
            peer.proc.wait()
            raise
    return peer.proc.returncode


@pytest.fixture
def mcp():
    peer = start_mcp()
    yield peer
    assert stop(peer) == 0, peer.proc.stderr.read()


def initialize(peer, version="2025-11-25"):
    res = peer.result("initialize", {"protocolVersion": version, "capabilities": {},
                                     "clientInfo": {"name": "pytest", "version": "1"}})
    peer.send_raw(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    return res


def tool(peer, name, args=None, meta=None, timeout=60):
    params = {"name": name, "arguments": args or {}}
    if meta:
        params["_meta"] = meta
    res = peer.result("tools/call", params, timeout=timeout)
    assert [c["type"] for c in res["content"]] == ["text"], res
    return res["content"][0]["text"], res["isError"]


# ------------------------------------------------------------------ raw JSON lines

def test_help_shows_client_config():
    cp = subprocess.run([SBX_BIN, "mcp", "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10)
    assert cp.returncode == 0
    text = cp.stdout.decode()
    for want in ("claude mcp add sbx -- sbx mcp", ".cursor/mcp.json", "claude_desktop_config.json",
                 '"mcpServers"', '"args": ["mcp"]'):
        assert want in text, want
    cp = subprocess.run([SBX_BIN, "mcp", "--sandbox", "x"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        timeout=10)
    assert cp.returncode == 2 and b"--sandbox needs --socket" in cp.stderr


def test_readme_setup_is_what_help_prints():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("### MCP: ", 1)[1].split("\n#", 1)[0]
    snippets = [b.split("\n", 1)[1] for b in section.split("```")[1::2]]
    assert len(snippets) == 2
    help_text = subprocess.run([SBX_BIN, "mcp", "--help"], stdout=subprocess.PIPE, timeout=10).stdout.decode()
    assert snippets[0].split("#")[0].strip() in help_text
    assert json.loads(snippets[1]) == {"mcpServers": {"sbx": {"command": "sbx", "args": ["mcp"]}}}
    assert snippets[1].strip() in help_text


def test_raw_lifecycle_and_errors(mcp):
    # Before initialize: ping works, tools are refused.
    assert mcp.result("ping") == {}
    assert mcp.error("tools/list")["code"] == -32002
    res = initialize(mcp, "2024-11-05")
    assert res["protocolVersion"] == "2024-11-05"
    assert res["capabilities"] == {"tools": {"listChanged": False}}
    assert res["serverInfo"]["name"] == "sbx"
    tools = mcp.result("tools/list")["tools"]
    assert {t["name"] for t in tools} == TOOLS
    for t in tools:
        assert len(t["description"]) > 60, t["name"]
        assert t["inputSchema"]["type"] == "object" and t["inputSchema"]["additionalProperties"] is False
        for name, prop in t["inputSchema"]["properties"].items():
            assert prop["type"] in ("string", "integer", "number", "boolean") and prop["description"], name
        # Fields 2024-11-05 does not know are left out.
        assert "annotations" not in t and "title" not in t
    text, is_error = tool(mcp, "run", {"command": "echo hi"})
    assert (text, is_error) == ("hi\nexit code: 0\n", False)
    assert mcp.result("ping") == {}
    assert mcp.error("resources/list") == {"code": -32601, "message": "Method not found: resources/list"}
    assert mcp.error("tools/call", {"name": "nope"})["code"] == -32602
    assert mcp.error("tools/call", {"name": "run", "arguments": [1]})["code"] == -32602
    # Broken lines: parse error and batches, answered with id null; the server goes on.
    mcp.send_raw(b'{"jsonrpc": "2.0", "id": 900, "method": \n')
    assert mcp.wait(None)["error"]["code"] == -32700
    mcp.send_raw(b'[{"jsonrpc": "2.0", "id": 901, "method": "ping"}]\n')
    e = mcp.wait(None)["error"]
    assert e["code"] == -32600 and "batches" in e["message"]
    mcp.send_raw(b'{"jsonrpc": "2.0", "method": "notifications/whatever"}\n')
    mcp.send_raw(b'{"jsonrpc": "2.0", "id": "x", "result": {}}\n')
    text, is_error = tool(mcp, "run", {"command": "exit 7"})
    assert is_error and text.endswith("exit code: 7\n")
    text, is_error = tool(mcp, "run", {"command": "cd /tmp; kill -9 $$"})
    assert is_error and text.endswith("exit code: 137\nWhat the command changed in the session (cwd, variables, "
                                      "functions) was not kept: the session is as it was before it.\n"), text
    assert not [n for n in mcp.notes if "id" in n], mcp.notes


def test_results_naming_an_object_carry_it_structured(mcp):
    """A result that names a process, a sandbox or a snapshot has it in structuredContent, so a
    client's program need not parse it out of prose (issue 28 item 11); before 2025-06-18,
    which has no structuredContent, it is left out."""
    initialize(mcp, "2025-11-25")

    def call(name, args):
        return mcp.result("tools/call", {"name": name, "arguments": args}, timeout=60)

    r = call("process_start", {"command": "sleep 30"})
    pid = r["structuredContent"]["process_id"]
    assert re.fullmatch(r"p\d+", pid) and isinstance(r["structuredContent"]["pid"], int), r
    assert pid in r["content"][0]["text"]
    r = call("fork", {})
    assert re.fullmatch(r"[0-9a-f]{32}", r["structuredContent"]["sandbox"]), r
    r = call("snapshot", {})
    sid = r["structuredContent"]["snapshot_id"]
    assert sid and sid in r["content"][0]["text"], r
    r = call("run", {"command": "echo hi"})
    assert "structuredContent" not in r  # a run names nothing
    call("process_kill", {"process_id": pid})


def test_a_file_too_large_for_write_file_gets_advice_that_works(mcp):
    """The advice for a file over write_file's 4 MiB was `cat >> file` through run, whose command
    is capped at 64 KiB (issue 28 item 11): it is now parts through write_file, joined by run,
    and following it works."""
    initialize(mcp)
    big = "x" * (4 * 1024 * 1024 + 10)
    text, is_error = tool(mcp, "write_file", {"path": "big.txt", "content": big})
    assert is_error and "write_file FILE.part1" in text and "cat FILE.part1 FILE.part2 > FILE" in text, text[:300]
    half = len(big) // 2
    assert tool(mcp, "write_file", {"path": "big.txt.part1", "content": big[:half]})[1] is False
    assert tool(mcp, "write_file", {"path": "big.txt.part2", "content": big[half:]})[1] is False
    text, is_error = tool(mcp, "run", {"command": "cat big.txt.part1 big.txt.part2 > big.txt && rm big.txt.part* "
                                                  "&& wc -c < big.txt"})
    assert not is_error and text.startswith(f"{len(big)}\n"), text


def test_a_message_over_the_line_limit_is_answered_to_its_id(mcp):
    """A write_file of 16 MiB or more was never answered (the parse error went out with id
    null; issue 28 item 4): it is answered to its own id, found at either end of the line."""
    initialize(mcp)
    content = "x" * (17 * 1024 * 1024)
    # JavaScript clients put the id last.
    line = json.dumps({"method": "tools/call", "params": {"name": "write_file", "arguments":
                       {"path": "huge.txt", "content": content}}, "jsonrpc": "2.0", "id": 4242})
    mcp.send_raw(line.encode() + b"\n")
    e = mcp.wait(4242, timeout=60)["error"]
    assert e["code"] == -32700 and "Request too large" in e["message"] and "in parts" in e["message"], e
    text, is_error = tool(mcp, "run", {"command": "echo still here"})
    assert (text, is_error) == ("still here\nexit code: 0\n", False)


def test_no_structured_content_for_older_clients(mcp):
    initialize(mcp, "2025-03-26")
    r = mcp.result("tools/call", {"name": "process_start", "arguments": {"command": "true"}}, timeout=60)
    assert "structuredContent" not in r and r["isError"] is False, r


def test_raw_version_negotiation():
    for v in VERSIONS + ["1999-01-01", None]:
        peer = start_mcp()
        try:
            params = {"capabilities": {}, "clientInfo": {"name": "pytest", "version": "1"}}
            if v:
                params["protocolVersion"] = v
            res = peer.result("initialize", params)
            assert res["protocolVersion"] == (v if v in VERSIONS else VERSIONS[0]), v
            tools = peer.result("tools/list")["tools"]
            new = v in (None, "1999-01-01") or v >= "2025-03-26"
            assert all(("annotations" in t) == new for t in tools), v
            assert all(("title" in t) == (v in (None, "1999-01-01") or v >= "2025-06-18") for t in tools), v
            assert ("instructions" in res) == new
        finally:
            assert stop(peer) == 0


def test_raw_annotations(mcp):
    initialize(mcp)
    tools = {t["name"]: t for t in mcp.result("tools/list")["tools"]}
    for name in ("process_list", "process_logs", "read_file", "list_directory"):
        a = tools[name]["annotations"]
        assert a["readOnlyHint"] and a["idempotentHint"] and not a["destructiveHint"], name
    for name in ("run", "write_file", "edit_file", "process_kill", "restore"):
        assert tools[name]["annotations"]["destructiveHint"] and not tools[name]["annotations"]["readOnlyHint"]
    assert tools["write_file"]["annotations"]["idempotentHint"]
    assert all(t["annotations"]["openWorldHint"] is False for t in tools.values())
    assert tools["run"]["inputSchema"]["required"] == ["command"]
    assert tools["edit_file"]["inputSchema"]["required"] == ["path", "old_string", "new_string"]


def test_raw_progress_and_cancel(mcp):
    initialize(mcp)
    text, _ = tool(mcp, "run", {"command": "for i in 1 2 3; do echo step $i; sleep 0.3; done; sleep 1.2"},
                   meta={"progressToken": "tok"})
    assert "step 3" in text
    notes = [n["params"] for n in mcp.notes if n.get("method") == "notifications/progress"]
    assert len(notes) >= 4, notes  # three lines, then a heartbeat while it is silent
    assert all(n["progressToken"] == "tok" for n in notes)
    values = [n["progress"] for n in notes]
    assert values == sorted(set(values)), values
    assert any("step 3" in n["message"] for n in notes), notes
    # No progress without a token.
    mcp.notes.clear()
    tool(mcp, "run", {"command": "echo a; sleep 0.3; echo b"})
    assert not [n for n in mcp.notes if n.get("method") == "notifications/progress"]
    # A cancelled run is killed in the sandbox and answered to nobody.
    t0 = time.monotonic()
    mcp.send("tools/call", {"name": "run", "arguments": {"command": "sleep 60; touch /tmp/marker"}}, id=77)
    time.sleep(0.3)
    mcp.send_raw(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":77,"reason":"t"}}\n')
    text, _ = tool(mcp, "run", {"command": "test -e /tmp/marker && echo present || echo absent"}, timeout=90)
    assert text.startswith("absent"), text
    assert time.monotonic() - t0 < 45  # behind the cancelled run: 60 s
    time.sleep(0.2)
    with mcp.cond:
        assert "77" not in mcp.answers


@pytest.mark.skipif(not os.path.exists("/usr/lib/python3/dist-packages/matplotlib"),
                    reason="python3-matplotlib is not installed (build.sh installs it)")
def test_run_code_keeps_state_and_returns_images(mcp):
    """run_code: a Python context that keeps its variables, survives a timed-out cell, shows
    errors with their traceback and returns a chart as MCP image content."""
    initialize(mcp)

    def call(args, timeout=60):
        return mcp.result("tools/call", {"name": "run_code", "arguments": args}, timeout=timeout)

    r = call({"code": "data = [3, 1, 2]\nprint('loaded')\nsorted(data)"})
    assert not r["isError"], r
    assert r["content"][0]["text"] == "loaded\nOut: [1, 2, 3]\n"
    assert r["structuredContent"]["context_id"] == "default-python"
    assert r["structuredContent"]["execution_count"] == 1
    r = call({"code": "data.append(4)\nwhile True: pass", "timeout": 0.5})
    assert r["isError"] and "TimeoutError" in r["content"][0]["text"], r
    r = call({"code": "data"})
    assert "Out: [3, 1, 2]" in r["content"][0]["text"], r
    r = call({"code": "{}['nope']"})
    assert r["isError"] and "KeyError: 'nope'" in r["content"][0]["text"] and "Traceback" in r["content"][0]["text"]
    r = call({"code": "import matplotlib.pyplot as plt\nplt.plot(data)\nplt.show()"})
    assert not r["isError"], r
    images = [c for c in r["content"] if c["type"] == "image"]
    assert len(images) == 1 and images[0]["mimeType"] == "image/png"
    assert base64.b64decode(images[0]["data"])[:8] == b"\x89PNG\r\n\x1a\n"
    r = call({"code": "echo $((6 * 7))", "language": "bash"})
    assert r["content"][0]["text"] == "42\n", r
    r = call({"code": "1", "context": "nope"})
    assert r["isError"] and "no context nope" in r["content"][0]["text"], r


def test_raw_eof_answers_what_was_asked():
    peer = start_mcp()
    initialize(peer)
    peer.send("tools/call", {"name": "run", "arguments": {"command": "sleep 0.5; echo done"}}, id=5)
    peer.proc.stdin.close()
    ans = peer.wait(5)
    assert ans["result"]["content"][0]["text"].startswith("done")
    assert peer.proc.wait(20) == 0


def test_sigterm_stops_at_once():
    peer = start_mcp()
    initialize(peer)
    tool(peer, "run", {"command": "true"})
    peer.send("tools/call", {"name": "run", "arguments": {"command": "sleep 60"}}, id=9)
    time.sleep(0.3)
    t0 = time.monotonic()
    peer.proc.send_signal(signal.SIGTERM)
    assert peer.proc.wait(20) == 0
    assert time.monotonic() - t0 < 10


def test_output_cut_and_large_files(mcp):
    initialize(mcp)
    text, is_error = tool(mcp, "run", {"command": "seq 1 100000"})
    assert not is_error
    assert text.startswith("1\n2\n3\n") and text.endswith("99999\n100000\nexit code: 0\n")
    assert "bytes not shown ...]" in text and len(text) < 32000
    # A file of 2.3 MB is read piece by piece; lines far in come numbered.
    tool(mcp, "run", {"command": "seq 1 400000 > big.txt; printf 'a\\0b' > bin; printf 'x%.0s' $(seq 3000) > long"})
    text, is_error = tool(mcp, "read_file", {"path": "big.txt", "offset": 350000, "limit": 2})
    assert not is_error
    assert text == ("350000\t350000\n350001\t350001\n(lines 350000-350001 shown; the file goes on: read_file "
                    "with offset=350002 for more)\n"), text
    text, _ = tool(mcp, "read_file", {"path": "big.txt", "offset": 399999})
    assert text == "399999\t399999\n400000\t400000\n"
    text, _ = tool(mcp, "read_file", {"path": "big.txt", "offset": 500000})
    assert "has 400000 lines" in text
    text, _ = tool(mcp, "read_file", {"path": "big.txt"})
    assert text.startswith("     1\t1\n") and "the file goes on" in text
    text, is_error = tool(mcp, "read_file", {"path": "bin"})
    assert is_error and "not a text file" in text
    text, _ = tool(mcp, "read_file", {"path": "long"})
    assert text.startswith("     1\t" + "x" * 2000 + " [... 1000 more bytes in this line]")
    text, is_error = tool(mcp, "read_file", {"path": "/tmp"})
    assert is_error
    text, is_error = tool(mcp, "run", {"command": "echo x", "sandbox": "nope"})
    # In the tools' words (the argument is `sandbox`), not the protocol's (issue 28 item 11).
    assert is_error and "Unknown sandbox: nope" in text and "sandboxId" not in text, text
    text, is_error = tool(mcp, "process_logs", {"process_id": "p999"})
    assert is_error and text == "Unknown process_id: p999 (process_list names them)", text
    # A cursor past the output's end is refused: it would skip what is still to come.
    text, _ = tool(mcp, "process_start", {"command": "echo one; sleep 30"})
    pid = re.search(r"\b(p\d+)\b", text).group(1)
    text, is_error = tool(mcp, "process_logs", {"process_id": pid, "cursor": 1000})
    assert is_error and "past the end of the output" in text, text
    tool(mcp, "process_kill", {"process_id": pid})
    text, is_error = tool(mcp, "edit_file", {"path": "big.txt", "old_string": "x", "new_string": "x"})
    assert is_error and "the same" in text


def test_socket_daemon_and_persistent_sandbox():
    d = tempfile.mkdtemp(prefix="sbx-mcp-")
    path = os.path.join(d, "sbx.sock")
    daemon = subprocess.Popen([SBX_BIN, "serve", "--socket", path, "--pool", "0"], stderr=subprocess.PIPE)
    SPAWNED.append(daemon.pid)
    try:
        assert wait_until(lambda: os.path.exists(path), timeout=5)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        admin = Peer(s.makefile("rb"), s.makefile("wb"))
        sid = admin.result("sandbox.create", {"persist": True})["sandboxId"]
        a = start_mcp("--socket", path, "--sandbox", sid)
        initialize(a)
        assert tool(a, "write_file", {"path": "kept.txt", "content": "from mcp\n"})[1] is False
        assert stop(a) == 0
        b = start_mcp("--socket", path, "--sandbox", sid)
        initialize(b)
        assert tool(b, "read_file", {"path": "kept.txt"}) == ("     1\tfrom mcp\n", False)
        assert stop(b) == 0
        # Without --sandbox: a sandbox of its own, gone with its connection.
        c = start_mcp("--socket", path)
        initialize(c)
        assert tool(c, "run", {"command": "test -e kept.txt && echo yes || echo no"})[0].startswith("no")
        assert stop(c) == 0
        assert wait_until(lambda: len(admin.result("sandbox.list")["sandboxes"]) == 1, timeout=5)
        admin.result("sandbox.destroy", {"sandboxId": sid})
        s.close()
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(15)
        shutil.rmtree(d, ignore_errors=True)


class SocketDaemon:
    """`sbx serve --socket PATH ARGS` and a raw admin connection to it (no sandbox of its own)."""

    def __init__(self, *args):
        self.dir = tempfile.mkdtemp(prefix="sbx-mcp-")
        self.path = os.path.join(self.dir, "sbx.sock")
        self.proc = subprocess.Popen([SBX_BIN, "serve", "--socket", self.path, "--pool", "0", *args],
                                     stderr=subprocess.PIPE)
        SPAWNED.append(self.proc.pid)
        assert wait_until(lambda: os.path.exists(self.path), timeout=5)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)
        self.admin = Peer(self.sock.makefile("rb"), self.sock.makefile("wb"))

    def stop(self):
        self.sock.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(20)
        shutil.rmtree(self.dir, ignore_errors=True)


class FakeDaemon:
    """A Unix socket speaking just enough of the daemon's protocol for `sbx mcp --socket`: it makes
    the sandbox and answers each `run` at once with the params it was sent as its stdout."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="sbx-fake-")
        self.path = os.path.join(self.dir, "sbx.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(4)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        # A connection at a time: `sbx mcp --socket` looks at the daemon first, then stays.
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.answer(conn)

    def answer(self, conn):
        with conn, conn.makefile("rb") as rf, conn.makefile("wb") as wf:
            for line in rf:
                msg = json.loads(line)
                if "id" not in msg:
                    continue
                if msg["method"] == "create":
                    res = {"sandboxId": "sb-fake"}
                elif msg["method"] == "run":
                    res = {"exitCode": 0, "stdout": json.dumps(msg["params"], sort_keys=True) + "\n", "stderr": ""}
                else:
                    res = {}
                wf.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": res}).encode() + b"\n")
                wf.flush()

    def stop(self):
        self.listener.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def test_run_timeout_default_ends_before_the_client_stops_waiting():
    # MCP clients stop waiting after 60 s unless they asked for progress: a call without a
    # progressToken gets 50 s, one with a token 120 s and progress, a given timeout its own.
    d = FakeDaemon()
    try:
        m = start_mcp("--socket", d.path)
        initialize(m)
        for args, meta, want_ms, stream in [({}, None, 50000, False), ({}, {"progressToken": 7}, 120000, True),
                                             ({"timeout": 7}, None, 7000, False),
                                             ({"timeout": 300}, {"progressToken": "p"}, 300000, True)]:
            text, is_error = tool(m, "run", {"command": "true", **args}, meta=meta)
            assert not is_error, text
            sent = json.loads(text.splitlines()[0])
            assert sent["timeoutMs"] == want_ms, (args, meta, sent)
            assert sent.get("stream", False) is stream, sent
        listed = m.result("tools/list", {})["tools"]
        desc = {t["name"]: t for t in listed}["run"]["inputSchema"]["properties"]["timeout"]["description"]
        assert "default 50" in desc and "120 when the call carries a progressToken" in desc, desc
        assert stop(m) == 0
    finally:
        d.stop()


def test_no_daemon_at_the_socket_is_exit_3_as_for_every_client(tmp_path):
    # It was exit 1 with strerror alone (found by a new-user pass); sbx-mcp(1) says 3.
    plain = tmp_path / "plain"
    plain.write_text("")
    for path, words in [(tmp_path / "none.sock", "no daemon is listening at"), (plain, "is not a socket")]:
        p = subprocess.run([SBX_BIN, "mcp", "--socket", str(path)], stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=30)
        assert p.returncode == 3 and words in p.stderr.decode() and p.stdout == b"", p
    d = SocketDaemon()
    try:
        m = start_mcp("--socket", d.path)
        initialize(m)
        assert tool(m, "run", {"command": "echo up"}) == ("up\nexit code: 0\n", False)
        assert stop(m) == 0
    finally:
        d.stop()


def test_disabled_daemon_is_a_readable_tool_error():
    d = SocketDaemon("--mode", "disabled")
    try:
        m = start_mcp("--socket", d.path)
        initialize(m)
        for name, args in [("run", {"command": "echo hi"}), ("read_file", {"path": "x"})]:
            text, is_error = tool(m, name, args)
            assert is_error, text
            assert text.startswith("SANDBOX_DISABLED: this server runs with --mode disabled"), text
            assert "none of these tools can work" in text
        assert stop(m) == 0
    finally:
        d.stop()


def test_full_lane_is_a_tool_error_with_retry_after():
    d = SocketDaemon("--slots", "1", "--queue", "0")
    try:
        m = start_mcp("--socket", d.path)
        initialize(m)
        m.send("tools/call", {"name": "run", "arguments": {"command": "sleep 1; echo slow"}}, id=70)
        assert wait_until(lambda: d.admin.result("health")["lanes"]["interactive"]["active"] == 1, timeout=10)
        text, is_error = tool(m, "run", {"command": "echo refused", "session": "b"})
        assert is_error, text
        assert text.startswith("WORKER_UNAVAILABLE: the interactive lane is full"), text
        retry = int(text.rsplit("call again in ", 1)[1].split(" ms", 1)[0])
        assert retry > 0, text
        # The call that held the slot ends as usual, and the next one gets through.
        ans = m.wait(70, timeout=20)["result"]
        assert not ans["isError"] and ans["content"][0]["text"].startswith("slow\n")
        assert tool(m, "run", {"command": "echo again", "session": "b"}) == ("again\nexit code: 0\n", False)
        assert stop(m) == 0
    finally:
        d.stop()


def test_shutting_down_daemon_is_a_tool_error():
    d = SocketDaemon("--shutdown-deadline-ms", "2000")
    kids = []
    try:
        m = start_mcp("--socket", d.path)
        initialize(m)
        assert tool(m, "process_list")[1] is False  # the sandbox exists, with no session yet
        # The sandbox's pid 1 stopped: the session a run needs cannot start, so the run waits and
        # the shutdown has work under way.
        kids = children(d.proc.pid)
        for k in kids:
            os.kill(k, signal.SIGSTOP)
        # A session of its own: the default one's shell may be up already (it starts with the
        # sandbox), this one's must be started by the stopped pid 1.
        m.send("tools/call", {"name": "run", "arguments": {"command": "sleep 30", "session": "stuck"}}, id=80)
        assert wait_until(lambda: d.admin.result("health")["queued"] == 1, timeout=10)
        d.proc.send_signal(signal.SIGTERM)
        text, is_error = tool(m, "run", {"command": "true", "session": "other"})
        assert is_error, text
        assert text.startswith("POOL_SHUTTING_DOWN: the server is shutting down"), text
        assert "takes no new work" in text
        for k in kids:
            os.kill(k, signal.SIGCONT)
        assert m.wait(80, timeout=20)["result"]["isError"]
        assert d.proc.wait(20) == 0
        stop(m)
    finally:
        for k in kids:
            try:
                os.kill(k, signal.SIGCONT)
            except ProcessLookupError:
                pass
        d.stop()


def test_daemon_gone_answers_calls():
    mcp = start_mcp()
    initialize(mcp)
    mcp.send("tools/call", {"name": "run", "arguments": {"command": "sleep 30"}}, id=3)
    time.sleep(0.3)
    kid = children(mcp.proc.pid)[0]
    os.kill(kid, signal.SIGKILL)
    ans = mcp.wait(3, timeout=10)
    assert ans["result"]["isError"] and "daemon" in ans["result"]["content"][0]["text"]
    assert mcp.proc.wait(10) == 1
    # A daemon killed so leaves its cgroup directories (its sandbox's processes die with its
    # pid 1): not what this test is about.
    assert wait_until(lambda: not sbx_processes([kid]), timeout=5)
    SPAWNED.remove(kid)
    for d in sbx_cgroup_dirs([kid]):
        remove_cgroup_tree(d)


# ------------------------------------------------------------------ the official client

def _node_skip_reason():
    if not shutil.which("node") or not shutil.which("npm"):
        return "node and npm are needed for the official MCP client (@modelcontextprotocol/sdk)"
    return None


@pytest.fixture(scope="module")
def sdk_run():
    """One session of the official TypeScript client against `sbx mcp` (tests/mcp/client.mjs)."""
    reason = _node_skip_reason()
    if reason:
        pytest.skip(reason)
    npm_packages(NODE_DIR, "@modelcontextprotocol/sdk", needs="the official MCP client")
    cp = subprocess.run(["node", str(NODE_DIR / "client.mjs"), SBX_BIN], stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, timeout=180)
    assert cp.returncode == 0, cp.stderr.decode()
    out = json.loads(cp.stdout)
    assert not out.get("fatal"), out["fatal"]
    out["stderr"] = cp.stderr.decode("utf-8", "replace")  # sbx mcp's and its daemon's
    return out


def steps(run):
    return run["steps"]


def test_sdk_handshake_and_tools(sdk_run):
    assert sdk_run["latest"] in VERSIONS
    assert sdk_run["server"]["name"] == "sbx"
    assert sdk_run["capabilities"]["tools"] == {"listChanged": False}
    assert "sandbox" in sdk_run["instructions"]
    assert {t["name"] for t in sdk_run["tools"]} == TOOLS
    for t in sdk_run["tools"]:
        assert t["description"] and t["inputSchema"]["type"] == "object", t["name"]
        assert set(t["annotations"]) >= {"readOnlyHint", "destructiveHint", "idempotentHint"}, t["name"]
    assert steps(sdk_run)["ping"]["text"] == "pong"


def test_sdk_run(sdk_run):
    s = steps(sdk_run)
    assert s["run_echo"] == {**s["run_echo"], "text": "hi\nexit code: 0\n", "isError": False}
    assert s["run_state_2"]["text"].startswith("42 in /tmp\n")
    assert s["run_fail"]["isError"] is True
    assert s["run_fail"]["text"] == "--- stderr ---\noops\nexit code: 3\n"


def test_sdk_timeout(sdk_run):
    r = steps(sdk_run)["run_timeout"]
    assert r["isError"] and "exit code: 124 (timed out after 1 s" in r["text"], r
    assert r["ms"] < 5000


def test_sdk_progress(sdk_run):
    p = sdk_run["progress"]
    assert len(p) >= 4, p
    assert [x["progress"] for x in p] == sorted({x["progress"] for x in p})
    assert "tick 5" in p[-1]["message"] or "tick 4" in p[-1]["message"], p
    assert steps(sdk_run)["run_progress"]["text"].count("tick") == 5


def test_sdk_cancel(sdk_run):
    s = steps(sdk_run)
    assert "threw" in s["run_cancelled"] and s["run_cancelled"]["ms"] < 1500, s["run_cancelled"]
    # The marker the command would have written 2 s in never appears, and the session was free
    # again at once (the check's own 2.5 s, not the cancelled command's 2 s more).
    assert s["after_cancel"]["text"].startswith("absent"), s["after_cancel"]
    assert s["after_cancel"]["ms"] < 4000


def test_sdk_bad_arguments(sdk_run):
    s = steps(sdk_run)
    assert s["bad_unknown_arg"]["isError"] and 'unknown argument "cmd"' in s["bad_unknown_arg"]["text"]
    assert s["bad_type"]["isError"] and '"command" must be a string' in s["bad_type"]["text"]
    assert s["bad_missing"]["isError"] and '"path" is required' in s["bad_missing"]["text"]
    assert s["bad_range"]["isError"] and '"offset" must be at least 1' in s["bad_range"]["text"]
    assert s["unknown_tool"]["code"] == -32602 and "Unknown tool" in s["unknown_tool"]["threw"]
    assert s["after_bad"]["text"].startswith("still here")


def test_sdk_files(sdk_run):
    s = steps(sdk_run)
    assert s["write"]["text"] == "created proj/a.txt: 22 bytes, 3 lines" and not s["write"]["isError"]
    assert s["read"]["text"] == "     1\talpha\n     2\tbeta\n     3\tgamma beta\n"
    assert s["read_range"]["text"].startswith("     2\tbeta\n(lines 2-2 shown")
    assert s["read_missing"]["isError"] and "ENOENT" in s["read_missing"]["text"]
    assert s["edit_not_unique"]["isError"] and "occurs 2 times" in s["edit_not_unique"]["text"]
    assert s["edit_missing"]["isError"] and "not found" in s["edit_missing"]["text"]
    assert not s["edit_unique"]["isError"] and "replaced 1 occurrence" in s["edit_unique"]["text"]
    assert "replaced 3 occurrences" in s["edit_all"]["text"]
    # The edits landed, and the file kept the mode chmod gave it.
    assert s["after_edit"]["text"] == "4lph4\nbet4\nGAMMA\n755\nexit code: 0\n"
    assert s["list"]["text"] == "a.txt  (17 bytes)\n"
    assert s["list_home"]["text"].startswith("proj/\nproj/a.txt  (17 bytes)\n")


def test_sdk_processes(sdk_run):
    s = steps(sdk_run)
    pid = sdk_run["process_id"]
    assert pid.startswith("p") and not s["process_start"]["isError"]
    assert s["process_list"]["text"].startswith(f"{pid}  running") and "label: srv" in s["process_list"]["text"]
    assert s["process_logs"]["text"].startswith("out 1\nout 2\nout 3\n")
    assert "next cursor: 18" in s["process_logs"]["text"]
    assert "killed (exit code 143, signal TERM)" in s["process_kill"]["text"]
    assert s["process_list_after"]["text"].startswith(f"{pid}  killed")
    assert s["process_logs_unknown"]["isError"]


def test_sdk_snapshot_fork(sdk_run):
    s = steps(sdk_run)
    assert sdk_run["snapshot_id"] != "?"
    assert s["change"]["text"].startswith("gone")
    assert not s["restore"]["isError"]
    assert s["after_restore"]["text"].startswith("4lph4\n")
    assert len(sdk_run["fork_id"]) == 32
    assert s["in_fork"]["text"].startswith("4lph4\n") and not s["in_fork"]["isError"]
    assert s["not_in_original"]["text"].startswith("absent")


def test_sdk_leaves_nothing(sdk_run):
    assert sdk_run["exit"] == {"code": 0, "signal": None}, sdk_run["stderr"]
    assert "Sanitizer" not in sdk_run["stderr"] and "runtime error" not in sdk_run["stderr"], sdk_run["stderr"]
    pids = [sdk_run["pid"], *sdk_run["children"]]
    assert len(pids) == 2, pids  # sbx mcp and its daemon
    assert wait_until(lambda: not sbx_processes(pids), timeout=5), sbx_processes(pids)
    assert not sbx_cgroup_dirs(pids)
