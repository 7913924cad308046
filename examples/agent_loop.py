#!/usr/bin/env python3
"""A complete tool-use agent loop on an sbx sandbox: a model gets a task and tools (run a
shell command, read and write files, start a background process and read its logs, fetch a
port of the sandbox from the host); every tool call runs in the sandbox and its result,
truncated, goes back to the model, until it gives a final answer or runs out of steps.

The model sits behind one function, ``call_model(messages, tools) -> assistant message``,
with three implementations:

* ``AnthropicModel``: the Anthropic Messages API (``tool_use`` / ``tool_result`` blocks),
  used when ANTHROPIC_API_KEY is set;
* ``OpenAIModel``: OpenAI Chat Completions (``tool_calls`` / ``role: tool``), used when
  OPENAI_API_KEY is set (and ANTHROPIC_API_KEY is not);
* ``ScriptedModel``: a deterministic stand-in that issues a fixed sequence of tool calls
  (reading each result) and then a final answer; used without a key, or with --scripted.

Both real backends are plain urllib (no SDKs). The transcript is kept in one neutral shape
(below) and turned into each API's request by ``anthropic_request`` / ``openai_request``;
the answers are read back by ``parse_anthropic_response`` / ``parse_openai_response``.

    examples/agent_loop.py --scripted                  # no key, no network
    ANTHROPIC_API_KEY=... examples/agent_loop.py "Write fizzbuzz in Rust and run it"
    OPENAI_API_KEY=... examples/agent_loop.py --transcript run.json

Neutral messages:
    {"role": "user", "content": str}
    {"role": "assistant", "content": str, "tool_calls": [{"id", "name", "arguments": dict}]}
    {"role": "tool", "tool_call_id": str, "name": str, "content": str, "is_error": bool}

Standard library only (Python >= 3.9); needs root and the sbx binary ($SBX_BIN, ``sbx`` on
PATH, or the checkout's build/src/cli/sbx).
"""
import argparse
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

try:
    import sbx  # noqa: F401  (installed, or on PYTHONPATH)
except ImportError:  # run from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sdk" / "python"))
from sbx import ProcessEndedError, ProcessHandle, Sandbox, SbxError, WaitTimeoutError  # noqa: E402

Message = Dict[str, Any]
ModelFn = Callable[[List[Message], List[Dict[str, Any]]], Message]

SYSTEM_PROMPT = (
    "You are a software engineer working in an isolated Linux sandbox (Debian userland, "
    "bash, python3; no network unless told otherwise). Your home and working directory is "
    "/home/user; /tmp is writable too. Use the tools to do the task: shell state (cwd, "
    "exported variables) persists between run_command calls. Start servers with "
    "start_process, not with '&'. When the task is done, answer with a short report and no "
    "tool call."
)

DEFAULT_TASK = (
    "Create a small Python project 'calc' in /home/user/calc: calc.py with mean() and "
    "median(), unittest tests in test_calc.py, and server.py, an HTTP server whose "
    "/stats?xs=1,2,3 answers JSON with the mean and median. Run the tests, start the "
    "server in the background on port 8000, fetch /stats?xs=1,2,3,4 through the forwarded "
    "port, then stop the server and report what you saw."
)

# ------------------------------------------------------------------ truncation

#: Each stream of a tool result (stdout, stderr, a file, logs) is cut to this many characters,
#: keeping its head and its tail: errors tend to be at the end, context at the start.
STREAM_LIMIT = 4000
#: A whole tool result (JSON text) is never longer than this.
RESULT_LIMIT = 12000


def truncate(text: str, limit: int = STREAM_LIMIT) -> str:
    """``text`` if it fits in ``limit`` characters, else its head and tail around a marker
    saying how much was left out."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 5
    tail = limit - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[... {omitted} characters omitted ...]\n{text[-tail:]}"


# ------------------------------------------------------------------ the tools


def _schema(properties: Dict[str, Any], required: List[str]) -> Dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required,
            "additionalProperties": False}


#: The tools, provider-neutral: name, description, JSON schema of the arguments.
TOOLS: List[Dict[str, Any]] = [
    {
        "name": "run_command",
        "description": (
            "Run a bash command in the sandbox's persistent shell session and wait for it. "
            "The working directory and exported variables carry over to the next call. "
            "Returns exit_code, stdout and stderr (long output is cut in the middle)."),
        "parameters": _schema({
            "command": {"type": "string", "description": "bash source, e.g. 'cd app && make test'"},
            "timeout_seconds": {"type": "number", "description": "kill it after this long (default 60, max 600)"},
        }, ["command"]),
    },
    {
        "name": "read_file",
        "description": "Read a text file of the sandbox (relative paths are under /home/user).",
        "parameters": _schema({
            "path": {"type": "string"},
        }, ["path"]),
    },
    {
        "name": "write_file",
        "description": ("Create or overwrite a file of the sandbox with the given text "
                        "(parent directories are created; relative paths are under /home/user)."),
        "parameters": _schema({
            "path": {"type": "string"},
            "content": {"type": "string"},
        }, ["path", "content"]),
    },
    {
        "name": "start_process",
        "description": (
            "Start a long-running command (a server, a watcher) in the background, from the "
            "session's current directory and variables. Optionally wait until it listens on "
            "a TCP port or prints a line matching a regex. Returns its pid, used by "
            "process_logs and stop_process."),
        "parameters": _schema({
            "command": {"type": "string"},
            "wait_for_port": {"type": "integer", "minimum": 1, "maximum": 65535},
            "wait_for_log": {"type": "string", "description": "POSIX extended regex matched against each output line"},
            "wait_seconds": {"type": "number", "description": "how long to wait (default 30)"},
        }, ["command"]),
    },
    {
        "name": "process_logs",
        "description": ("The status (running, or its exit code) and the latest output (stdout "
                        "and stderr interleaved) of a process started with start_process."),
        "parameters": _schema({
            "pid": {"type": "integer"},
            "tail_chars": {"type": "integer", "description": "at most this many of the last characters (default 4000)"},
            "wait_for": {"type": "string", "description": "first wait (up to 5 s) until the output holds this text"},
        }, ["pid"]),
    },
    {
        "name": "stop_process",
        "description": "Stop a process started with start_process, and everything it started.",
        "parameters": _schema({
            "pid": {"type": "integer"},
        }, ["pid"]),
    },
    {
        "name": "fetch_port",
        "description": (
            "HTTP GET a URL path on a TCP port inside the sandbox, from outside it (the port "
            "is forwarded to the host), the way a user's browser would. Returns the status, "
            "content type and body."),
        "parameters": _schema({
            "port": {"type": "integer", "minimum": 1, "maximum": 65535},
            "path": {"type": "string", "description": "default /"},
        }, ["port"]),
    },
]


class ToolError(Exception):
    """A tool call that could not be carried out; its message goes back to the model."""


class _Process:
    """A background process and the output it printed (a bounded tail)."""

    KEEP = 256 * 1024

    def __init__(self, command: str) -> None:
        self.command = command
        self.handle: Optional[ProcessHandle] = None
        self._lock = threading.Lock()
        self._text = ""

    def append(self, text: str) -> None:  # on the SDK's reader thread: short, no SDK calls
        with self._lock:
            self._text = (self._text + text)[-self.KEEP:]

    def output(self) -> str:
        with self._lock:
            return self._text


class SandboxTools:
    """Carries out the TOOLS' calls in one sandbox."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sb = sandbox
        self.processes: Dict[int, _Process] = {}

    def call(self, name: str, arguments: Mapping[str, Any]) -> Tuple[str, bool]:
        """Runs one tool call; returns (result text, is_error). Never raises for a bad
        call: the model gets the error text instead and may try again."""
        fn = getattr(self, "tool_" + name, None)
        if fn is None or not any(t["name"] == name for t in TOOLS):
            return f"error: unknown tool {name!r}", True
        try:
            result = fn(**dict(arguments))
        except TypeError as e:  # missing or unexpected arguments
            return f"error: bad arguments for {name}: {e}", True
        except (ToolError, SbxError, ValueError, OSError) as e:
            return f"error: {e}", True
        return truncate(json.dumps(result, ensure_ascii=False), RESULT_LIMIT), False

    # -- the tools; each returns a JSON-able dict

    def tool_run_command(self, command: str, timeout_seconds: float = 60) -> Dict[str, Any]:
        timeout = min(max(float(timeout_seconds), 1.0), 600.0)
        r = self.sb.commands.run(command, timeout=timeout)
        out: Dict[str, Any] = {"exit_code": r.exit_code, "stdout": truncate(r.stdout),
                               "stderr": truncate(r.stderr)}
        if r.error_class:
            out["error"] = r.error_class  # TIMEOUT, OOM, FS_FULL, ...
        return out

    def tool_read_file(self, path: str) -> Dict[str, Any]:
        text = self.sb.files.read(path)
        assert isinstance(text, str)
        return {"path": path, "size": len(text), "content": truncate(text)}

    def tool_write_file(self, path: str, content: str) -> Dict[str, Any]:
        self.sb.files.write(path, content)
        return {"path": path, "bytes_written": len(content.encode("utf-8"))}

    def tool_start_process(self, command: str, wait_for_port: Optional[int] = None,
                           wait_for_log: Optional[str] = None, wait_seconds: float = 30) -> Dict[str, Any]:
        proc = _Process(command)
        h = self.sb.commands.run(command, background=True, on_stdout=proc.append, on_stderr=proc.append)
        proc.handle = h
        self.processes[h.pid] = proc
        out: Dict[str, Any] = {"pid": h.pid}
        wait = min(max(float(wait_seconds), 0.1), 300.0)
        try:
            if wait_for_port is not None:
                h.wait_for_port(int(wait_for_port), timeout=wait)
                out["listening_on"] = int(wait_for_port)
            if wait_for_log is not None:
                out["matched_line"] = h.wait_for_log(wait_for_log, timeout=wait)
        except ProcessEndedError as e:  # it ended first: say so, with its exit code
            out["wait_error"] = e.message
            try:
                h.wait(timeout=5)
            except (TimeoutError, SbxError):
                pass
        except WaitTimeoutError as e:
            out["wait_error"] = e.message
        out.update(self._status(proc))
        return out

    def tool_process_logs(self, pid: int, tail_chars: int = STREAM_LIMIT, wait_for: Optional[str] = None) -> Dict[str, Any]:
        proc = self._proc(pid)
        # A line the process wrote just now may still be on its way (its output streams in).
        deadline = time.monotonic() + 5
        while wait_for and wait_for not in proc.output() and time.monotonic() < deadline:
            time.sleep(0.05)
        text = proc.output()
        tail = max(0, min(int(tail_chars), STREAM_LIMIT))
        shown = text[-tail:] if tail else ""
        return {"pid": pid, **self._status(proc), "output": shown,
                "omitted_chars": len(text) - len(shown)}

    def tool_stop_process(self, pid: int) -> Dict[str, Any]:
        proc = self._proc(pid)
        assert proc.handle is not None
        killed = proc.handle.kill()
        try:
            proc.handle.wait(timeout=5)
        except (TimeoutError, SbxError):
            pass
        return {"pid": pid, "was_running": killed, **self._status(proc)}

    def tool_fetch_port(self, port: int, path: str = "/") -> Dict[str, Any]:
        if not path.startswith("/"):
            path = "/" + path
        url = f"http://{self.sb.get_host(int(port))}{path}"
        try:
            with urllib.request.urlopen(url, timeout=15) as resp:
                status, ctype, body = resp.status, resp.headers.get("Content-Type", ""), resp.read()
        except urllib.error.HTTPError as e:
            status, ctype, body = e.code, e.headers.get("Content-Type", ""), e.read()
        except (urllib.error.URLError, OSError) as e:
            raise ToolError(f"fetching {url} failed: {getattr(e, 'reason', e)}") from e
        return {"url": url, "status": status, "content_type": ctype,
                "body": truncate(body.decode("utf-8", "replace"))}

    # -- helpers

    def _proc(self, pid: Any) -> _Process:
        proc = self.processes.get(int(pid))
        if proc is None:
            raise ToolError(f"no process with pid {pid} was started with start_process "
                            f"(known: {sorted(self.processes) or 'none'})")
        return proc

    @staticmethod
    def _status(proc: _Process) -> Dict[str, Any]:
        h = proc.handle
        assert h is not None
        if h.done():
            return {"status": "exited", "exit_code": h.exit_code}
        return {"status": "running"}

    def close(self) -> None:
        """Stops what the model left running."""
        for proc in self.processes.values():
            if proc.handle is not None and not proc.handle.done():
                try:
                    proc.handle.kill()
                except SbxError:
                    pass


# ------------------------------------------------------------------ the loop


def run_agent(task: str, call_model: ModelFn, tools: SandboxTools, *, max_steps: int = 20,
              log: Callable[[str], None] = print) -> Dict[str, Any]:
    """Gives ``task`` to the model and carries out its tool calls until it answers without
    one, or ``max_steps`` model calls were made.

    Returns {"final": the answer or None, "stop_reason": "final_answer" | "max_steps",
    "steps": model calls made, "messages": the neutral transcript}.
    """
    messages: List[Message] = [{"role": "user", "content": task}]
    for step in range(1, max_steps + 1):
        reply = call_model(messages, TOOLS)
        messages.append(reply)
        calls = reply.get("tool_calls") or []
        if calls and reply.get("content"):
            log(f"[{step}] model: {reply['content'].strip()}")
        if not calls:
            log(f"[{step}] final answer ({len(reply.get('content') or '')} characters)")
            return {"final": reply.get("content", ""), "stop_reason": "final_answer",
                    "steps": step, "messages": messages}
        for call in calls:
            args = call.get("arguments")
            log(f"[{step}] -> {call['name']}({_short(json.dumps(args, ensure_ascii=False), 200)})")
            if not isinstance(args, dict):
                detail = call.get("arguments_error") or repr(args)
                text, is_error = f"error: the arguments are not a JSON object: {detail}", True
            else:
                text, is_error = tools.call(call["name"], args)
            log(f"[{step}] <- {'ERROR ' if is_error else ''}{_short(text, 300)}")
            messages.append({"role": "tool", "tool_call_id": call["id"], "name": call["name"],
                             "content": text, "is_error": is_error})
    log(f"stopped after {max_steps} steps without a final answer")
    return {"final": None, "stop_reason": "max_steps", "steps": max_steps, "messages": messages}


def _short(text: str, n: int) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= n else text[:n - 3] + "..."


# ------------------------------------------------------------------ Anthropic Messages API

ANTHROPIC_URL = "https://api.anthropic.com/v1/messages"
ANTHROPIC_VERSION = "2023-06-01"


def anthropic_request(messages: List[Message], tools: List[Dict[str, Any]], *, model: str,
                      system: str = SYSTEM_PROMPT, max_tokens: int = 4096) -> Dict[str, Any]:
    """The JSON body of a Messages API call for the neutral transcript ``messages``.

    Tool results become ``tool_result`` blocks of a user turn; consecutive results (of one
    assistant turn's parallel calls) share that turn, as the API requires.
    """
    out: List[Dict[str, Any]] = []

    def user_blocks() -> List[Dict[str, Any]]:
        if not out or out[-1]["role"] != "user":
            out.append({"role": "user", "content": []})
        return out[-1]["content"]

    for m in messages:
        if m["role"] == "user":
            user_blocks().append({"type": "text", "text": m["content"]})
        elif m["role"] == "tool":
            block: Dict[str, Any] = {"type": "tool_result", "tool_use_id": m["tool_call_id"],
                                     "content": m["content"]}
            if m.get("is_error"):
                block["is_error"] = True
            user_blocks().append(block)
        elif m["role"] == "assistant":
            blocks: List[Dict[str, Any]] = []
            if m.get("content"):
                blocks.append({"type": "text", "text": m["content"]})
            for c in m.get("tool_calls") or []:
                args = c.get("arguments")
                blocks.append({"type": "tool_use", "id": c["id"], "name": c["name"],
                               "input": args if isinstance(args, dict) else {}})
            out.append({"role": "assistant", "content": blocks or [{"type": "text", "text": "(no answer)"}]})
        else:
            raise ValueError(f"unknown role {m['role']!r}")
    return {
        "model": model,
        "max_tokens": max_tokens,
        "system": system,
        "tools": [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
                  for t in tools],
        "messages": out,
    }


def parse_anthropic_response(body: Mapping[str, Any]) -> Message:
    """The neutral assistant message of a Messages API response."""
    if body.get("type") == "error":
        raise ModelError(f"Anthropic error: {body.get('error')}")
    texts: List[str] = []
    calls: List[Dict[str, Any]] = []
    for block in body.get("content") or []:
        if block.get("type") == "text":
            texts.append(block.get("text", ""))
        elif block.get("type") == "tool_use":
            calls.append({"id": block["id"], "name": block["name"], "arguments": block.get("input") or {}})
    msg: Message = {"role": "assistant", "content": "\n".join(texts), "tool_calls": calls,
                    "stop_reason": body.get("stop_reason")}
    if not calls and body.get("stop_reason") == "max_tokens":
        msg["content"] += "\n[the answer was cut at max_tokens]"
    return msg


class AnthropicModel:
    """``call_model`` for the Anthropic Messages API."""

    def __init__(self, api_key: str, model: Optional[str] = None, url: Optional[str] = None) -> None:
        self.api_key = api_key
        self.model = model or os.environ.get("ANTHROPIC_MODEL") or "claude-sonnet-4-5"
        self.url = url or os.environ.get("ANTHROPIC_URL") or ANTHROPIC_URL

    def headers(self) -> Dict[str, str]:
        return {"x-api-key": self.api_key, "anthropic-version": ANTHROPIC_VERSION,
                "content-type": "application/json"}

    def __call__(self, messages: List[Message], tools: List[Dict[str, Any]]) -> Message:
        body = anthropic_request(messages, tools, model=self.model)
        return parse_anthropic_response(post_json(self.url, self.headers(), body))


# ------------------------------------------------------------------ OpenAI Chat Completions

OPENAI_URL = "https://api.openai.com/v1/chat/completions"


def openai_request(messages: List[Message], tools: List[Dict[str, Any]], *, model: str,
                   system: str = SYSTEM_PROMPT) -> Dict[str, Any]:
    """The JSON body of a Chat Completions call for the neutral transcript ``messages``
    (function tools; arguments travel as JSON text)."""
    out: List[Dict[str, Any]] = [{"role": "system", "content": system}]
    for m in messages:
        if m["role"] == "user":
            out.append({"role": "user", "content": m["content"]})
        elif m["role"] == "tool":
            out.append({"role": "tool", "tool_call_id": m["tool_call_id"], "content": m["content"]})
        elif m["role"] == "assistant":
            msg: Dict[str, Any] = {"role": "assistant", "content": m.get("content") or None}
            calls = m.get("tool_calls") or []
            if calls:
                msg["tool_calls"] = [{
                    "id": c["id"], "type": "function",
                    "function": {"name": c["name"],
                                 "arguments": c.get("raw_arguments") or json.dumps(c.get("arguments") or {})},
                } for c in calls]
            out.append(msg)
        else:
            raise ValueError(f"unknown role {m['role']!r}")
    return {
        "model": model,
        "messages": out,
        "tools": [{"type": "function",
                   "function": {"name": t["name"], "description": t["description"], "parameters": t["parameters"]}}
                  for t in tools],
    }


def parse_openai_response(body: Mapping[str, Any]) -> Message:
    """The neutral assistant message of a Chat Completions response. Arguments that are not
    a JSON object are kept as ``arguments: None`` plus ``arguments_error`` (the loop tells
    the model, instead of failing)."""
    if body.get("error"):
        raise ModelError(f"OpenAI error: {body['error']}")
    choices = body.get("choices") or []
    if not choices:
        raise ModelError(f"OpenAI response without choices: {_short(json.dumps(body), 500)}")
    choice = choices[0]
    m = choice.get("message") or {}
    calls: List[Dict[str, Any]] = []
    for c in m.get("tool_calls") or []:
        fn = c.get("function") or {}
        raw = fn.get("arguments") or "{}"
        call: Dict[str, Any] = {"id": c["id"], "name": fn.get("name", ""), "raw_arguments": raw}
        try:
            args = json.loads(raw)
        except ValueError as e:
            args, call["arguments_error"] = None, f"{e}: {_short(raw, 200)}"
        if args is not None and not isinstance(args, dict):
            args, call["arguments_error"] = None, f"not an object: {_short(raw, 200)}"
        call["arguments"] = args
        calls.append(call)
    msg: Message = {"role": "assistant", "content": m.get("content") or "", "tool_calls": calls,
                    "stop_reason": choice.get("finish_reason")}
    if not calls and choice.get("finish_reason") == "length":
        msg["content"] += "\n[the answer was cut at the length limit]"
    return msg


class OpenAIModel:
    """``call_model`` for OpenAI Chat Completions (or a compatible server: OPENAI_URL)."""

    def __init__(self, api_key: str, model: Optional[str] = None, url: Optional[str] = None) -> None:
        self.api_key = api_key
        self.model = model or os.environ.get("OPENAI_MODEL") or "gpt-4.1"
        self.url = url or os.environ.get("OPENAI_URL") or OPENAI_URL

    def headers(self) -> Dict[str, str]:
        return {"authorization": f"Bearer {self.api_key}", "content-type": "application/json"}

    def __call__(self, messages: List[Message], tools: List[Dict[str, Any]]) -> Message:
        body = openai_request(messages, tools, model=self.model)
        return parse_openai_response(post_json(self.url, self.headers(), body))


# ------------------------------------------------------------------ HTTP


class ModelError(Exception):
    """The model's API refused the call or answered something unusable."""


def post_json(url: str, headers: Mapping[str, str], body: Mapping[str, Any], *, timeout: float = 300,
              retries: int = 3) -> Dict[str, Any]:
    """POSTs ``body`` as JSON and returns the decoded answer. Retries 429, 5xx (and 529,
    Anthropic's overloaded) up to ``retries`` times, honouring Retry-After (at most 60 s)."""
    data = json.dumps(body).encode("utf-8")
    for attempt in range(retries + 1):
        req = urllib.request.Request(url, data=data, headers=dict(headers), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            text = e.read().decode("utf-8", "replace")
            if (e.code == 429 or e.code >= 500) and attempt < retries:
                try:
                    delay = float(e.headers.get("retry-after") or 0)
                except ValueError:
                    delay = 0.0
                time.sleep(min(60.0, delay or 2.0 ** attempt))
                continue
            raise ModelError(f"HTTP {e.code} from {url}: {_short(text, 1000)}") from e
        except urllib.error.URLError as e:
            if attempt < retries:
                time.sleep(2.0 ** attempt)
                continue
            raise ModelError(f"cannot reach {url}: {e.reason}") from e
    raise AssertionError("unreachable")


# ------------------------------------------------------------------ the scripted stand-in

CALC_PY = '''\
"""Small statistics helpers."""


def mean(xs):
    if not xs:
        raise ValueError("mean of an empty list")
    return sum(xs) / len(xs)


def median(xs):
    if not xs:
        raise ValueError("median of an empty list")
    s = sorted(xs)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2
'''

TEST_CALC_PY = '''\
import unittest

from calc import mean, median


class CalcTest(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(mean([1, 2, 3, 4]), 2.5)

    def test_median_odd_and_even(self):
        self.assertEqual(median([3, 1, 2]), 2)
        self.assertEqual(median([4, 1, 3, 2]), 2.5)

    def test_empty(self):
        with self.assertRaises(ValueError):
            mean([])


if __name__ == "__main__":
    unittest.main()
'''

SERVER_PY = '''\
"""GET /stats?xs=1,2,3 -> {"xs": [...], "mean": ..., "median": ...}"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from calc import mean, median


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        url = urlparse(self.path)
        if url.path != "/stats":
            self.send_error(404, "try /stats?xs=1,2,3")
            return
        try:
            xs = [float(x) for x in parse_qs(url.query).get("xs", [""])[0].split(",") if x]
            body = {"xs": xs, "mean": mean(xs), "median": median(xs)}
            code = 200
        except ValueError as e:
            body, code = {"error": str(e)}, 400
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


port = int(sys.argv[1])
print(f"calc server listening on port {port}", flush=True)
ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''


class ScriptedModel:
    """A deterministic stand-in for a model: builds, tests, serves and fetches a small
    project (the DEFAULT_TASK), one tool call per turn, reading each result as a model
    would, and reports what it saw. It stops early, with an answer saying why, when a step
    fails."""

    PORT = 8000

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, messages: List[Message], tools: List[Dict[str, Any]]) -> Message:
        names = {t["name"] for t in tools}
        results = [m for m in messages if m["role"] == "tool"]
        last = results[-1] if results else None
        if last is not None and last["is_error"]:
            return self._answer(f"Stopped: {last['name']} failed: {last['content']}")
        step = len(results)
        plan = self._plan(results)
        if step >= len(plan):
            return self._answer(self._report(results))
        text, name, args = plan[step]
        if name not in names:
            return self._answer(f"Stopped: the tool {name} is not offered.")
        problem = self._check(last)
        if problem:
            return self._answer(f"Stopped: {problem}")
        self.calls += 1
        return {"role": "assistant", "content": text,
                "tool_calls": [{"id": f"call_{self.calls}", "name": name, "arguments": args}]}

    def _plan(self, results: List[Message]) -> List[Tuple[str, str, Dict[str, Any]]]:
        pid = None
        if len(results) >= 6:
            pid = json.loads(results[5]["content"]).get("pid")
        return [
            ("Making the project directory and checking the Python version.",
             "run_command", {"command": "mkdir -p calc && cd calc && python3 --version"}),
            ("Writing the module.", "write_file", {"path": "calc/calc.py", "content": CALC_PY}),
            ("Writing its tests.", "write_file", {"path": "calc/test_calc.py", "content": TEST_CALC_PY}),
            ("Running the tests (the shell is still in calc/).",
             "run_command", {"command": "pwd && python3 -m unittest -v 2>&1"}),
            ("Writing the HTTP server.", "write_file", {"path": "calc/server.py", "content": SERVER_PY}),
            ("Starting it in the background and waiting for its port.",
             "start_process", {"command": f"python3 server.py {self.PORT}", "wait_for_port": self.PORT,
                               "wait_seconds": 20}),
            ("Fetching the stats endpoint through the forwarded port.",
             "fetch_port", {"port": self.PORT, "path": "/stats?xs=1,2,3,4"}),
            ("Reading the server's log.", "process_logs", {"pid": pid, "wait_for": "GET /stats"}),
            ("Stopping the server.", "stop_process", {"pid": pid}),
        ]

    @staticmethod
    def _check(last: Optional[Message]) -> Optional[str]:
        """What went wrong in the last result, if anything a model would stop on."""
        if last is None:
            return None
        r = json.loads(last["content"])
        if last["name"] == "run_command" and r.get("exit_code") != 0:
            return f"the command failed (exit {r.get('exit_code')}): {r.get('stdout', '')}{r.get('stderr', '')}"
        if last["name"] == "start_process" and (r.get("wait_error") or r.get("status") != "running"):
            return f"the server did not come up: {r}"
        if last["name"] == "fetch_port" and r.get("status") != 200:
            return f"the server answered HTTP {r.get('status')}: {r.get('body')}"
        return None

    @staticmethod
    def _report(results: List[Message]) -> str:
        r = [json.loads(m["content"]) for m in results]
        version = r[0]["stdout"].strip()
        test_out = r[3]["stdout"]
        ran = next((line for line in test_out.splitlines() if line.startswith("Ran ")), "?")
        verdict = test_out.strip().splitlines()[-1] if test_out.strip() else "?"
        fetched = r[6]
        stats = json.loads(fetched["body"])
        request_lines = [line for line in r[7]["output"].splitlines() if "GET /stats" in line]
        stopped = r[8]
        return "\n".join([
            f"Built calc/ (calc.py, test_calc.py, server.py) with {version}.",
            f"Tests: {ran} -> {verdict}.",
            f"Server: started as pid {r[5]['pid']}, listening on port {r[5]['listening_on']}.",
            f"GET /stats?xs=1,2,3,4 via {fetched['url']}: HTTP {fetched['status']}, "
            f"mean={stats['mean']} median={stats['median']}.",
            f"Server log: {request_lines[-1].strip() if request_lines else '(no request line)'}",
            f"Stopped the server: {stopped['status']} (exit {stopped.get('exit_code')}).",
        ])

    @staticmethod
    def _answer(text: str) -> Message:
        return {"role": "assistant", "content": text, "tool_calls": []}


# ------------------------------------------------------------------ choosing a model


def select_model(env: Mapping[str, str], scripted: bool = False) -> Tuple[str, ModelFn]:
    """(backend name, call_model) from the environment: --scripted, else ANTHROPIC_API_KEY,
    else OPENAI_API_KEY, else the scripted stand-in."""
    if scripted:
        return "scripted", ScriptedModel()
    if env.get("ANTHROPIC_API_KEY"):
        m = AnthropicModel(env["ANTHROPIC_API_KEY"], env.get("ANTHROPIC_MODEL"), env.get("ANTHROPIC_URL"))
        return f"anthropic ({m.model})", m
    if env.get("OPENAI_API_KEY"):
        o = OpenAIModel(env["OPENAI_API_KEY"], env.get("OPENAI_MODEL"), env.get("OPENAI_URL"))
        return f"openai ({o.model})", o
    return "scripted (no ANTHROPIC_API_KEY or OPENAI_API_KEY set)", ScriptedModel()


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("task", nargs="*", help="the task (default: build, test and serve a small project)")
    ap.add_argument("--scripted", action="store_true", help="use the scripted stand-in even if a key is set")
    ap.add_argument("--max-steps", type=int, default=20, help="model calls at most (default 20)")
    ap.add_argument("--transcript", metavar="FILE", help="write the whole run as JSON to FILE")
    ap.add_argument("--network", action="store_true", help="give the sandbox the host's network")
    args = ap.parse_args(argv)
    task = " ".join(args.task) or DEFAULT_TASK
    backend, call_model = select_model(os.environ, args.scripted)
    if isinstance(call_model, ScriptedModel) and args.task:
        print("note: the scripted model ignores the task text and does its fixed script", file=sys.stderr)

    print(f"model: {backend}")
    print(f"task: {task}")
    with Sandbox(timeout=60, network=args.network) as sb:
        tools = SandboxTools(sb)
        try:
            result = run_agent(task, call_model, tools, max_steps=args.max_steps)
        except ModelError as e:
            print(f"model error: {e}", file=sys.stderr)
            return 1
        finally:
            tools.close()
        if args.transcript:
            record = {"backend": backend, "task": task, "sandbox_id": sb.sandbox_id,
                      "server_pid": sb.client.pid, "tools": TOOLS, **result}
            Path(args.transcript).write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    if result["final"] is None:
        return 2
    print("\nFinal answer:\n" + result["final"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
