"""examples/agent_loop.py: the scripted run end to end against the real sbx (its output and
its transcript), the loop's and the tools' edge cases in a real sandbox, and the two real
backends' request builders, response parsers and HTTP path, against recorded answers and a
fake API server on loopback. No test calls a real model API.

The sbx binary is $SBX_BIN, else the checkout's build/src/cli/sbx; every sbx server started
here is added to conftest's SPAWNED, so the autouse leftover check covers it.
"""
import copy
import http.server
import importlib.util
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sdk" / "python"))

from sbx import Sandbox  # noqa: E402

try:  # the shared leftover check; the tests still work without it
    from conftest import SPAWNED
except ImportError:  # pragma: no cover
    SPAWNED = []

SBX_BIN = os.environ.get("SBX_BIN") or str(REPO / "build" / "src" / "cli" / "sbx")
EXAMPLE = REPO / "examples" / "agent_loop.py"

_spec = importlib.util.spec_from_file_location("agent_loop", EXAMPLE)
agent_loop = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(agent_loop)


def _skip_reason():
    if os.geteuid() != 0:
        return "the examples run sbx, which needs root"
    if not (os.path.isfile(SBX_BIN) and os.access(SBX_BIN, os.X_OK)):
        return f"sbx binary not found at {SBX_BIN} (build it, or set SBX_BIN)"
    return None


needs_sbx = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")

EXPECTED_CALLS = ["run_command", "write_file", "write_file", "run_command", "write_file",
                  "start_process", "fetch_port", "process_logs", "stop_process"]


def example_env(**extra):
    """The environment of an example run: no API key of ours leaks in, the checkout's SDK and
    the binary under test."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_URL", "OPENAI_URL")}
    env.update(SBX_BIN=SBX_BIN, PYTHONPATH=str(REPO / "sdk" / "python"), **extra)
    return env


def run_example(tmp_path, *args, env=None, timeout=180):
    transcript = tmp_path / "transcript.json"
    cp = subprocess.run([sys.executable, str(EXAMPLE), *args, "--transcript", str(transcript)],
                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        env=env or example_env(), timeout=timeout, text=True)
    record = json.loads(transcript.read_text()) if transcript.exists() else None
    if record and record.get("server_pid"):
        SPAWNED.append(record["server_pid"])
    return cp, record


def tool_pairs(messages):
    """[(call, result message)] in order; asserts every call got exactly its result, right
    after the assistant turn that made it."""
    pairs = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        calls = m.get("tool_calls") or []
        results = messages[i + 1:i + 1 + len(calls)]
        assert [r["role"] for r in results] == ["tool"] * len(calls), messages[i:i + 1 + len(calls)]
        for c, r in zip(calls, results):
            assert r["tool_call_id"] == c["id"] and r["name"] == c["name"], (c, r)
            pairs.append((c, r))
    return pairs


@pytest.fixture
def sb():
    s = Sandbox(timeout=30, binary=SBX_BIN)
    SPAWNED.append(s.client.pid)
    yield s
    s.kill()


# ------------------------------------------------------------------ the scripted run


@needs_sbx
def test_scripted_run_end_to_end(tmp_path):
    cp, record = run_example(tmp_path, "--scripted")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    out = cp.stdout
    assert out.startswith("model: scripted\n"), out
    final = out.split("\nFinal answer:\n", 1)[1]
    assert "Tests: Ran 3 tests in " in final and "-> OK." in final, final
    assert "listening on port 8000" in final, final
    assert "HTTP 200, mean=2.5 median=2.5." in final, final
    assert '"GET /stats?xs=1,2,3,4 HTTP/1.1" 200' in final, final
    assert "Stopped the server: exited (exit 143)." in final, final

    assert record["stop_reason"] == "final_answer" and record["final"] == final.rstrip("\n")
    assert record["steps"] == len(EXPECTED_CALLS) + 1
    assert [t["name"] for t in record["tools"]] == [t["name"] for t in agent_loop.TOOLS]
    msgs = record["messages"]
    assert msgs[0] == {"role": "user", "content": agent_loop.DEFAULT_TASK}
    pairs = tool_pairs(msgs)
    assert [c["name"] for c, _ in pairs] == EXPECTED_CALLS
    assert not any(r["is_error"] for _, r in pairs), [r for _, r in pairs if r["is_error"]]
    res = [json.loads(r["content"]) for _, r in pairs]

    assert res[0]["exit_code"] == 0 and res[0]["stdout"].startswith("Python 3."), res[0]
    assert res[1] == {"path": "calc/calc.py", "bytes_written": len(agent_loop.CALC_PY)}
    # The tests ran in calc/: the cd of the first command persisted in the session.
    assert res[3]["exit_code"] == 0, res[3]
    assert res[3]["stdout"].startswith("/home/user/calc\n"), res[3]
    assert res[3]["stdout"].count(" ... ok\n") == 3 and res[3]["stdout"].rstrip().endswith("OK"), res[3]
    pid = res[5]["pid"]
    assert res[5] == {"pid": pid, "listening_on": 8000, "status": "running"}
    assert res[6]["status"] == 200 and res[6]["content_type"] == "application/json", res[6]
    assert res[6]["url"].startswith("http://127.0.0.1:") and res[6]["url"].endswith("/stats?xs=1,2,3,4")
    assert json.loads(res[6]["body"]) == {"xs": [1.0, 2.0, 3.0, 4.0], "mean": 2.5, "median": 2.5}
    assert pairs[7][0]["arguments"] == {"pid": pid, "wait_for": "GET /stats"} and pairs[8][0]["arguments"] == {"pid": pid}
    assert res[7]["status"] == "running", res[7]
    assert res[7]["output"].startswith("calc server listening on port 8000\n"), res[7]
    assert '"GET /stats?xs=1,2,3,4 HTTP/1.1" 200' in res[7]["output"], res[7]
    assert res[8] == {"pid": pid, "was_running": True, "status": "exited", "exit_code": 143}
    # The log lines of the run name each call and its result.
    for name in EXPECTED_CALLS:
        assert f"-> {name}(" in out, name
    assert out.count("] <- {") == len(EXPECTED_CALLS), out


@needs_sbx
def test_without_a_key_the_scripted_model_runs(tmp_path):
    """No --scripted, no key: the stand-in is chosen (and says why), not an API."""
    cp, record = run_example(tmp_path, "--max-steps", "2")
    assert cp.stdout.startswith("model: scripted (no ANTHROPIC_API_KEY or OPENAI_API_KEY set)\n"), cp.stdout
    assert cp.returncode == 2, cp.stdout + cp.stderr   # two steps are not enough: no answer
    assert record["stop_reason"] == "max_steps" and record["final"] is None and record["steps"] == 2
    assert [c["name"] for c, _ in tool_pairs(record["messages"])] == EXPECTED_CALLS[:2]
    assert "Final answer" not in cp.stdout


class BrokenMean(agent_loop.SandboxTools):
    """Writes a calc.py whose mean() is wrong, so that the tests fail."""

    def tool_write_file(self, path, content):
        if path == "calc/calc.py":
            content = content.replace("return sum(xs) / len(xs)", "return sum(xs)")
        return super().tool_write_file(path, content)


@needs_sbx
def test_scripted_model_reads_results_and_stops_on_a_failing_test(sb):
    tools = BrokenMean(sb)
    result = agent_loop.run_agent(agent_loop.DEFAULT_TASK, agent_loop.ScriptedModel(), tools,
                                  log=lambda s: None)
    tools.close()
    assert result["stop_reason"] == "final_answer"
    assert result["final"].startswith("Stopped: the command failed (exit 1): /home/user/calc\n"), result["final"]
    assert "FAIL: test_mean" in result["final"] and "FAILED (failures=1)" in result["final"], result["final"]
    assert [c["name"] for c, _ in tool_pairs(result["messages"])] == EXPECTED_CALLS[:4]
    assert sb.commands.list() == []   # it never started the server


class NoForwarding(agent_loop.SandboxTools):
    def tool_fetch_port(self, port, path="/"):
        raise agent_loop.ToolError(f"port {port} is not forwarded today")


@needs_sbx
def test_scripted_model_stops_on_a_tool_error_and_close_stops_the_server(sb):
    tools = NoForwarding(sb)
    result = agent_loop.run_agent(agent_loop.DEFAULT_TASK, agent_loop.ScriptedModel(), tools,
                                  log=lambda s: None)
    assert result["final"] == "Stopped: fetch_port failed: error: port 8000 is not forwarded today"
    pairs = tool_pairs(result["messages"])
    assert [c["name"] for c, _ in pairs] == EXPECTED_CALLS[:7] and pairs[-1][1]["is_error"]
    [server] = sb.commands.list()
    assert server.running and server.pid == json.loads(pairs[5][1]["content"])["pid"]
    tools.close()   # what the model left running is stopped
    [server] = sb.commands.list()
    assert not server.running and server.exit_code == 143, server


# ------------------------------------------------------------------ the loop and the tools


class Recorder:
    def __init__(self, answer):
        self.answer = answer
        self.seen = []

    def __call__(self, messages, tools):
        self.seen.append((copy.deepcopy(messages), tools))
        return copy.deepcopy(self.answer)


@needs_sbx
def test_the_loop_stops_after_max_steps(sb):
    model = Recorder({"role": "assistant", "content": "",
                      "tool_calls": [{"id": "c", "name": "run_command", "arguments": {"command": "echo $((n+=1))"}}]})
    lines = []
    result = agent_loop.run_agent("count", model, agent_loop.SandboxTools(sb), max_steps=3, log=lines.append)
    assert (result["stop_reason"], result["final"], result["steps"]) == ("max_steps", None, 3)
    assert len(model.seen) == 3 and model.seen[0][1] is agent_loop.TOOLS
    # The session's variable persisted from call to call; each result went back to the model.
    outs = [json.loads(r["content"])["stdout"] for _, r in tool_pairs(result["messages"])]
    assert outs == ["1\n", "2\n", "3\n"]
    assert [m["role"] for m in model.seen[2][0]] == ["user", "assistant", "tool", "assistant", "tool"]
    assert lines[-1] == "stopped after 3 steps without a final answer"


@needs_sbx
def test_parallel_calls_and_bad_arguments_reach_the_model_as_errors(sb):
    """Several calls in one turn each get a result, in order; malformed ones get an error
    text instead of ending the loop."""
    turn = {"role": "assistant", "content": "trying things", "tool_calls": [
        {"id": "a", "name": "no_such_tool", "arguments": {}},
        {"id": "b", "name": "run_command", "arguments": {"cmd": "ls"}},
        {"id": "c", "name": "run_command", "arguments": None, "arguments_error": "Expecting value: {oops"},
        {"id": "d", "name": "read_file", "arguments": {"path": "missing.txt"}},
        {"id": "e", "name": "process_logs", "arguments": {"pid": 4242}},
        {"id": "f", "name": "run_command", "arguments": {"command": "echo fine"}},
    ]}
    answers = iter([turn, {"role": "assistant", "content": "done", "tool_calls": []}])
    result = agent_loop.run_agent("t", lambda m, t: next(answers), agent_loop.SandboxTools(sb), log=lambda s: None)
    assert result["final"] == "done" and result["steps"] == 2
    got = {c["id"]: (r["is_error"], r["content"]) for c, r in tool_pairs(result["messages"])}
    assert got["a"] == (True, "error: unknown tool 'no_such_tool'")
    assert got["b"][0] and got["b"][1].startswith("error: bad arguments for run_command:") and "'cmd'" in got["b"][1]
    assert got["c"] == (True, "error: the arguments are not a JSON object: Expecting value: {oops")
    assert got["d"][0] and "missing.txt" in got["d"][1], got["d"]
    assert got["e"] == (True, "error: no process with pid 4242 was started with start_process (known: none)")
    assert got["f"] == (False, json.dumps({"exit_code": 0, "stdout": "fine\n", "stderr": ""}))


@needs_sbx
def test_long_output_is_cut_in_the_middle(sb):
    tools = agent_loop.SandboxTools(sb)
    text, err = tools.call("run_command", {"command": "echo START; seq 1 30000; echo END; echo oops >&2"})
    assert not err
    r = json.loads(text)
    assert len(r["stdout"]) <= agent_loop.STREAM_LIMIT + 60 and len(text) <= agent_loop.RESULT_LIMIT
    assert r["stdout"].startswith("START\n1\n2\n") and r["stdout"].endswith("29999\n30000\nEND\n"), r["stdout"][-50:]
    full = sb.commands.run("echo START; seq 1 30000; echo END").stdout
    omitted = len(full) - agent_loop.STREAM_LIMIT
    assert f"\n[... {omitted} characters omitted ...]\n" in r["stdout"]
    assert r["stderr"] == "oops\n"
    text, err = tools.call("write_file", {"path": "big.txt", "content": "x" * 100000})
    assert not err and json.loads(text)["bytes_written"] == 100000
    text, err = tools.call("read_file", {"path": "big.txt"})
    r = json.loads(text)
    assert r["size"] == 100000 and len(r["content"]) < 4100 and "characters omitted" in r["content"]


def test_truncate_keeps_head_and_tail():
    assert agent_loop.truncate("abc", 3) == "abc"
    s = "".join(chr(ord("a") + i % 26) for i in range(1000))
    t = agent_loop.truncate(s, 100)
    assert t == s[:40] + "\n[... 900 characters omitted ...]\n" + s[-60:]


@needs_sbx
def test_background_process_tools(sb):
    tools = agent_loop.SandboxTools(sb)
    # A process that ends before its port opens: the wait says so, with its status.
    text, err = tools.call("start_process", {"command": "echo starting; exit 3", "wait_for_port": 9,
                                             "wait_seconds": 10})
    r = json.loads(text)
    assert not err and r["wait_error"] and r["status"] == "exited" and r["exit_code"] == 3, r
    text, _ = tools.call("process_logs", {"pid": r["pid"]})
    assert json.loads(text) == {"pid": r["pid"], "status": "exited", "exit_code": 3,
                                "output": "starting\n", "omitted_chars": 0}
    # wait_for_log, then the tail of a long log.
    text, err = tools.call("start_process", {"command": "echo ready; seq 1 5000; sleep 60",
                                             "wait_for_log": "^ready$"})
    r = json.loads(text)
    assert not err and r["matched_line"] == "ready" and r["status"] == "running", r
    sb.commands.run("sleep 0.5")
    text, _ = tools.call("process_logs", {"pid": r["pid"], "tail_chars": 10})
    logs = json.loads(text)
    assert logs["output"] == "4999\n5000\n" and logs["omitted_chars"] > 20000, logs
    text, _ = tools.call("stop_process", {"pid": r["pid"]})
    assert json.loads(text) == {"pid": r["pid"], "was_running": True, "status": "exited", "exit_code": 143}
    text, _ = tools.call("stop_process", {"pid": r["pid"]})
    assert json.loads(text)["was_running"] is False
    # Nothing listens on the port: fetch_port fails, as an error result.
    text, err = tools.call("fetch_port", {"port": 8123})
    assert err and text.startswith("error: fetching http://127.0.0.1:") and "/ failed" in text, text


# ------------------------------------------------------------------ the real backends, offline

# A transcript in the loop's neutral shape: a task, a turn with two parallel calls (one failed)
# and a final answer.
NEUTRAL = [
    {"role": "user", "content": "List the files, then read a.txt"},
    {"role": "assistant", "content": "Looking.", "tool_calls": [
        {"id": "t1", "name": "run_command", "arguments": {"command": "ls"}},
        {"id": "t2", "name": "read_file", "arguments": {"path": "a.txt"}},
    ]},
    {"role": "tool", "tool_call_id": "t1", "name": "run_command",
     "content": '{"exit_code": 0, "stdout": "a.txt\\n", "stderr": ""}', "is_error": False},
    {"role": "tool", "tool_call_id": "t2", "name": "read_file",
     "content": "error: no such file", "is_error": True},
    {"role": "assistant", "content": "There is a.txt, but it cannot be read.", "tool_calls": []},
    {"role": "user", "content": "Thanks"},
]
ONE_TOOL = [{"name": "read_file", "description": "Read a file.",
             "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]


def test_anthropic_request_payload():
    body = agent_loop.anthropic_request(NEUTRAL, ONE_TOOL, model="claude-x", system="be brief", max_tokens=100)
    assert body == {
        "model": "claude-x",
        "max_tokens": 100,
        "system": "be brief",
        "tools": [{"name": "read_file", "description": "Read a file.",
                   "input_schema": ONE_TOOL[0]["parameters"]}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "List the files, then read a.txt"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "t1", "name": "run_command", "input": {"command": "ls"}},
                {"type": "tool_use", "id": "t2", "name": "read_file", "input": {"path": "a.txt"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1",
                 "content": '{"exit_code": 0, "stdout": "a.txt\\n", "stderr": ""}'},
                {"type": "tool_result", "tool_use_id": "t2", "content": "error: no such file", "is_error": True},
            ]},
            {"role": "assistant", "content": [{"type": "text", "text": "There is a.txt, but it cannot be read."}]},
            {"role": "user", "content": [{"type": "text", "text": "Thanks"}]},
        ],
    }
    # Every tool of the example is offered with an object schema.
    full = agent_loop.anthropic_request(NEUTRAL[:1], agent_loop.TOOLS, model="m")
    assert [t["name"] for t in full["tools"]] == EXPECTED_NAMES
    assert all(t["input_schema"]["type"] == "object" and t["input_schema"]["required"] for t in full["tools"])
    assert full["system"] == agent_loop.SYSTEM_PROMPT and full["max_tokens"] == 4096


EXPECTED_NAMES = ["run_command", "read_file", "write_file", "start_process", "process_logs",
                  "stop_process", "fetch_port"]


def test_openai_request_payload():
    body = agent_loop.openai_request(NEUTRAL, ONE_TOOL, model="gpt-x", system="be brief")
    assert body == {
        "model": "gpt-x",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "List the files, then read a.txt"},
            {"role": "assistant", "content": "Looking.", "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "run_command", "arguments": '{"command": "ls"}'}},
                {"id": "t2", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'}},
            ]},
            {"role": "tool", "tool_call_id": "t1", "content": '{"exit_code": 0, "stdout": "a.txt\\n", "stderr": ""}'},
            {"role": "tool", "tool_call_id": "t2", "content": "error: no such file"},
            {"role": "assistant", "content": "There is a.txt, but it cannot be read."},
            {"role": "user", "content": "Thanks"},
        ],
        "tools": [{"type": "function", "function": {"name": "read_file", "description": "Read a file.",
                                                    "parameters": ONE_TOOL[0]["parameters"]}}],
    }
    full = agent_loop.openai_request(NEUTRAL[:1], agent_loop.TOOLS, model="m")
    assert [t["function"]["name"] for t in full["tools"]] == EXPECTED_NAMES
    assert full["messages"][0] == {"role": "system", "content": agent_loop.SYSTEM_PROMPT}


# Answers as the APIs send them (shapes from their documentation).
ANTHROPIC_TOOL_USE = {
    "id": "msg_01Aq9w938a90dw8q", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
    "content": [
        {"type": "text", "text": "I'll check the directory."},
        {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "run_command",
         "input": {"command": "ls -la", "timeout_seconds": 10}},
    ],
    "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 812, "output_tokens": 61},
}
ANTHROPIC_END = {
    "id": "msg_02", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "All done."}],
    "stop_reason": "end_turn", "stop_sequence": None, "usage": {"input_tokens": 900, "output_tokens": 4},
}
OPENAI_TOOL_CALLS = {
    "id": "chatcmpl-9x", "object": "chat.completion", "created": 1727000000, "model": "gpt-4.1",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "refusal": None,
        "tool_calls": [
            {"id": "call_abc", "type": "function",
             "function": {"name": "run_command", "arguments": "{\"command\":\"ls -la\",\"timeout_seconds\":10}"}},
            {"id": "call_def", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"a"}},
        ]}}],
    "usage": {"prompt_tokens": 800, "completion_tokens": 40, "total_tokens": 840},
}
OPENAI_END = {
    "id": "chatcmpl-9y", "object": "chat.completion", "model": "gpt-4.1",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "All done.", "refusal": None}}],
}


def test_parse_anthropic_response():
    m = agent_loop.parse_anthropic_response(ANTHROPIC_TOOL_USE)
    assert m == {"role": "assistant", "content": "I'll check the directory.", "stop_reason": "tool_use",
                 "tool_calls": [{"id": "toolu_01A09q90qw90lq917835lq9", "name": "run_command",
                                 "arguments": {"command": "ls -la", "timeout_seconds": 10}}]}
    # Fed back, it is the same assistant turn the API sent.
    again = agent_loop.anthropic_request([NEUTRAL[0], m], [], model="m")["messages"][1]
    assert again == {"role": "assistant", "content": ANTHROPIC_TOOL_USE["content"]}
    assert agent_loop.parse_anthropic_response(ANTHROPIC_END) == {
        "role": "assistant", "content": "All done.", "tool_calls": [], "stop_reason": "end_turn"}
    cut = dict(ANTHROPIC_END, stop_reason="max_tokens")
    assert agent_loop.parse_anthropic_response(cut)["content"].endswith("[the answer was cut at max_tokens]")
    with pytest.raises(agent_loop.ModelError, match="overloaded_error"):
        agent_loop.parse_anthropic_response({"type": "error", "error": {"type": "overloaded_error",
                                                                        "message": "Overloaded"}})


def test_parse_openai_response():
    m = agent_loop.parse_openai_response(OPENAI_TOOL_CALLS)
    assert m["content"] == "" and m["stop_reason"] == "tool_calls"
    ok, bad = m["tool_calls"]
    assert ok == {"id": "call_abc", "name": "run_command", "arguments": {"command": "ls -la", "timeout_seconds": 10},
                  "raw_arguments": "{\"command\":\"ls -la\",\"timeout_seconds\":10}"}
    assert bad["id"] == "call_def" and bad["arguments"] is None
    assert bad["arguments_error"].startswith("Unterminated string") and '{"path": "a' in bad["arguments_error"]
    # Fed back, the arguments go out exactly as the model wrote them.
    again = agent_loop.openai_request([NEUTRAL[0], m], [], model="m")["messages"][2]
    assert again == {"role": "assistant", "content": None,
                     "tool_calls": OPENAI_TOOL_CALLS["choices"][0]["message"]["tool_calls"]}
    assert agent_loop.parse_openai_response(OPENAI_END) == {
        "role": "assistant", "content": "All done.", "tool_calls": [], "stop_reason": "stop"}
    listy = copy.deepcopy(OPENAI_TOOL_CALLS)
    listy["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = "[1, 2]"
    assert agent_loop.parse_openai_response(listy)["tool_calls"][0]["arguments_error"] == "not an object: [1, 2]"
    with pytest.raises(agent_loop.ModelError, match="invalid_api_key"):
        agent_loop.parse_openai_response({"error": {"code": "invalid_api_key", "message": "Incorrect API key"}})
    with pytest.raises(agent_loop.ModelError, match="without choices"):
        agent_loop.parse_openai_response({"choices": []})


def test_select_model():
    name, m = agent_loop.select_model({})
    assert isinstance(m, agent_loop.ScriptedModel) and name.startswith("scripted")
    both = {"ANTHROPIC_API_KEY": "ak", "OPENAI_API_KEY": "ok"}
    name, m = agent_loop.select_model(both)
    assert isinstance(m, agent_loop.AnthropicModel) and m.api_key == "ak" and name == f"anthropic ({m.model})"
    assert m.url == agent_loop.ANTHROPIC_URL
    assert m.headers() == {"x-api-key": "ak", "anthropic-version": "2023-06-01", "content-type": "application/json"}
    name, m = agent_loop.select_model({"OPENAI_API_KEY": "ok", "OPENAI_MODEL": "gpt-y", "OPENAI_URL": "http://h/v1"})
    assert isinstance(m, agent_loop.OpenAIModel) and (m.model, m.url) == ("gpt-y", "http://h/v1")
    assert m.headers() == {"authorization": "Bearer ok", "content-type": "application/json"}
    assert isinstance(agent_loop.select_model(both, scripted=True)[1], agent_loop.ScriptedModel)
    assert isinstance(agent_loop.select_model({"ANTHROPIC_API_KEY": ""})[1], agent_loop.ScriptedModel)


class FakeAPI:
    """An HTTP server on loopback that records each POST and answers the next canned
    (status, headers, body) in turn."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests = []
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                data = self.rfile.read(int(self.headers["Content-Length"]))
                api.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                                     "body": json.loads(data)})
                status, headers, body = api.answers.pop(0) if api.answers else (500, {}, {"error": "no more"})
                raw = json.dumps(body).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_api():
    made = []

    def make(answers):
        api = FakeAPI(answers)
        made.append(api)
        return api
    yield make
    for api in made:
        api.close()


def anthropic_turn(blocks, stop):
    return {"id": "msg", "type": "message", "role": "assistant", "model": "claude-x", "content": blocks,
            "stop_reason": stop, "usage": {"input_tokens": 1, "output_tokens": 1}}


@needs_sbx
def test_anthropic_backend_drives_the_sandbox(sb, fake_api):
    api = fake_api([
        (529, {"retry-after": "0.01"}, {"type": "error", "error": {"type": "overloaded_error"}}),
        (200, {}, anthropic_turn([{"type": "tool_use", "id": "toolu_1", "name": "run_command",
                                   "input": {"command": "echo $((6 * 7)) > n.txt; cat n.txt"}}], "tool_use")),
        (200, {}, anthropic_turn([{"type": "text", "text": "It is 42."}], "end_turn")),
    ])
    model = agent_loop.AnthropicModel("sk-test", model="claude-x", url=api.url + "/v1/messages")
    result = agent_loop.run_agent("compute", model, agent_loop.SandboxTools(sb), log=lambda s: None)
    assert result["final"] == "It is 42." and result["steps"] == 2
    assert sb.files.read("n.txt") == "42\n"   # the call really ran in the sandbox
    assert len(api.requests) == 3             # the 529 was retried
    for r in api.requests:
        assert r["path"] == "/v1/messages"
        assert r["headers"]["x-api-key"] == "sk-test" and r["headers"]["anthropic-version"] == "2023-06-01"
        assert r["headers"]["content-type"] == "application/json"
        assert r["body"]["model"] == "claude-x" and len(r["body"]["tools"]) == len(agent_loop.TOOLS)
    assert api.requests[0]["body"] == api.requests[1]["body"]
    last = api.requests[2]["body"]["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "user"]
    assert last[1]["content"] == [{"type": "tool_use", "id": "toolu_1", "name": "run_command",
                                   "input": {"command": "echo $((6 * 7)) > n.txt; cat n.txt"}}]
    assert last[2]["content"] == [{"type": "tool_result", "tool_use_id": "toolu_1",
                                   "content": json.dumps({"exit_code": 0, "stdout": "42\n", "stderr": ""})}]


@needs_sbx
def test_openai_backend_through_main(tmp_path, fake_api):
    """The example's command line with OPENAI_API_KEY set, pointed at a fake server."""
    call = {"id": "call_1", "type": "function",
            "function": {"name": "write_file", "arguments": json.dumps({"path": "hi.txt", "content": "hello"})}}
    call2 = {"id": "call_2", "type": "function",
             "function": {"name": "run_command", "arguments": json.dumps({"command": "wc -c < hi.txt"})}}

    def turn(msg, finish):
        return {"id": "c", "object": "chat.completion", "model": "gpt-x",
                "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", **msg}}]}
    api = fake_api([
        (200, {}, turn({"content": None, "tool_calls": [call, call2]}, "tool_calls")),
        (200, {}, turn({"content": "hi.txt has 5 bytes."}, "stop")),
    ])
    env = example_env(OPENAI_API_KEY="sk-openai-test", OPENAI_URL=api.url + "/v1/chat/completions",
                      OPENAI_MODEL="gpt-x")
    cp, record = run_example(tmp_path, "count", "the", "bytes", env=env, timeout=60)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert cp.stdout.startswith("model: openai (gpt-x)\ntask: count the bytes\n"), cp.stdout
    assert cp.stdout.endswith("\nFinal answer:\nhi.txt has 5 bytes.\n"), cp.stdout
    assert len(api.requests) == 2
    for r in api.requests:
        assert r["path"] == "/v1/chat/completions"
        assert r["headers"]["authorization"] == "Bearer sk-openai-test"
        assert r["body"]["model"] == "gpt-x"
    sent = api.requests[1]["body"]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "tool"]
    assert sent[1] == {"role": "user", "content": "count the bytes"}
    assert sent[2] == {"role": "assistant", "content": None, "tool_calls": [call, call2]}
    assert sent[3] == {"role": "tool", "tool_call_id": "call_1",
                       "content": json.dumps({"path": "hi.txt", "bytes_written": 5})}
    assert sent[4]["tool_call_id"] == "call_2" and json.loads(sent[4]["content"])["stdout"] == "5\n"
    assert record["backend"] == "openai (gpt-x)" and record["final"] == "hi.txt has 5 bytes."


def test_http_errors_become_model_errors(fake_api):
    api = fake_api([(400, {}, {"type": "error", "error": {"type": "invalid_request_error",
                                                          "message": "tools.0.input_schema: bad"}})])
    model = agent_loop.AnthropicModel("k", model="m", url=api.url + "/v1/messages")
    with pytest.raises(agent_loop.ModelError, match=r"HTTP 400 .*tools\.0\.input_schema: bad"):
        model([{"role": "user", "content": "x"}], agent_loop.TOOLS)
    assert len(api.requests) == 1   # a 400 is not retried
    api = fake_api([(429, {"retry-after": "0.01"}, {"error": "slow down"})] * 3)
    model = agent_loop.OpenAIModel("k", model="m", url=api.url)
    with pytest.raises(agent_loop.ModelError, match="HTTP 500"):   # 3 x 429, then the fake's 500
        model([{"role": "user", "content": "x"}], agent_loop.TOOLS)
    assert len(api.requests) == 4
