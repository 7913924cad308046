"""Running commands: results, handles, and named sessions."""
from __future__ import annotations

import base64
import codecs
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Literal, Mapping, Optional, Union, overload

from ._client import INTERNAL_ERROR, Client, PendingCall, SbxError, as_object

if TYPE_CHECKING:
    from .processes import ProcessHandle, ProcessInfo

__all__ = ["CommandResult", "CommandHandle", "Commands", "Session", "OutputCallback"]

#: Called with each piece of streamed output, decoded as UTF-8 (invalid bytes replaced).
OutputCallback = Callable[[str], None]

# Code the server answers for invalid params, among them "cancel" of a finished run.
_INVALID_PARAMS = -32602


def wire_bytes(obj: Mapping[str, Any], key: str, encoding_key: str) -> bytes:
    """The bytes of ``obj[key]``: the string's UTF-8, or its base64 decoding when
    ``obj[encoding_key]`` is ``"base64"``."""
    value = obj.get(key) or ""
    if obj.get(encoding_key) == "base64":
        return base64.b64decode(value)
    return str(value).encode("utf-8")


@dataclass(frozen=True)
class CommandResult:
    """The outcome of one command.

    A command that exits non-zero is *not* an error: unlike E2B, which raises
    ``CommandExitException``, the result is returned and ``exit_code`` tells. Timeouts and
    cancellation are results too (``error_class``).

    Attributes:
        stdout: standard output decoded as UTF-8 (invalid bytes replaced by U+FFFD).
        stderr: standard error, decoded the same way.
        exit_code: the command's exit status; 124 on timeout, 125 when cancelled.
        execution_time_ms: how long the command ran, in milliseconds.
        truncated: ``{"stdout": bool, "stderr": bool}`` when an output hit its cap
            (``limits.stdoutBytes`` / ``stderrBytes``), else None.
        error_class: ``"TIMEOUT"`` (exit 124), ``"CANCELLED"`` (125),
            ``"LIMIT_EXCEEDED"`` (1, nothing ran), ``"PIDS_LIMIT"`` (1, stopped at the
            process limit), ``"OOM"`` (failed, and the kernel killed a process of the sandbox
            at its memory limit), ``"FS_FULL"`` (failed, and the sandbox's filesystem is
            full), or None.
        stdout_bytes: standard output, exactly as the command wrote it.
        stderr_bytes: standard error, exactly as the command wrote it.
        dropped_bytes: ``{"stdout": n, "stderr": n}``, what went past the caps, when
            ``truncated``; else None.
        killed_processes: processes a timeout, cancel or process limit killed (0 otherwise).
    """

    stdout: str
    stderr: str
    exit_code: int
    execution_time_ms: int
    truncated: Optional[Dict[str, bool]]
    error_class: Optional[str]
    stdout_bytes: bytes
    stderr_bytes: bytes
    dropped_bytes: Optional[Dict[str, int]] = None
    killed_processes: int = 0

    @classmethod
    def from_wire(cls, result: Mapping[str, Any]) -> "CommandResult":
        """Builds a result from the ``run`` method's JSON result."""
        out = wire_bytes(result, "stdout", "stdoutEncoding")
        err = wire_bytes(result, "stderr", "stderrEncoding")
        truncated = as_object(result.get("truncated"))
        dropped = as_object(result.get("droppedBytes"))
        return cls(
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            exit_code=int(result.get("exitCode", -1)),
            execution_time_ms=int(result.get("executionTimeMs", 0)),
            truncated={str(k): bool(v) for k, v in truncated.items()} if truncated is not None else None,
            error_class=result.get("errorClass"),
            stdout_bytes=out,
            stderr_bytes=err,
            dropped_bytes={str(k): int(v) for k, v in dropped.items()} if dropped is not None else None,
            killed_processes=int(result.get("killedProcesses", 0)),
        )

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.exit_code == 0


class _Streams:
    """Turns ``output`` notifications into on_stdout/on_stderr calls.

    Each stream has its own incremental UTF-8 decoder, so a character split between two
    chunks reaches the callback whole.
    """

    def __init__(self, on_stdout: Optional[OutputCallback], on_stderr: Optional[OutputCallback]) -> None:
        self._callbacks: Dict[str, Optional[OutputCallback]] = {"stdout": on_stdout, "stderr": on_stderr}
        self._decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in self._callbacks}
        self._lock = threading.Lock()
        self._flushed = False

    def __call__(self, params: Dict[str, Any]) -> None:
        name = params.get("stream")
        if name not in self._callbacks:
            return
        callback = self._callbacks[name]
        if callback is None:
            return
        data = wire_bytes(params, "data", "encoding")
        text = self._decoders[name].decode(data)
        if text:
            callback(text)

    def flush(self) -> None:
        """Delivers what the decoders still hold (an incomplete character at the end)."""
        with self._lock:
            if self._flushed:
                return
            self._flushed = True
        for name, callback in self._callbacks.items():
            text = self._decoders[name].decode(b"", final=True)
            if text and callback is not None:
                callback(text)


class CommandHandle:
    """A command that was sent to the server and may still be running.

    Get one from :meth:`Commands.start` or :meth:`Session.start`. Any thread may
    :meth:`cancel` it while another :meth:`wait` s for it.
    """

    def __init__(self, client: Client, call: PendingCall, streams: Optional[_Streams]) -> None:
        self._client = client
        self._call = call
        self._streams = streams
        self._result: Optional[CommandResult] = None

    @property
    def request_id(self) -> int:
        """The JSON-RPC id of the ``run`` request (what ``cancel`` names)."""
        return self._call.request_id

    def done(self) -> bool:
        """True once the server answered (the command finished or was refused)."""
        return self._call.done()

    def wait(self, timeout: Optional[float] = None) -> CommandResult:
        """Waits for the command to finish and returns its result.

        A non-zero exit status is returned, not raised. Streaming callbacks have all been
        called by the time this returns.

        Args:
            timeout: seconds to wait at most (None: as long as it takes). This does not
                stop the command; use the run's own ``timeout`` or :meth:`cancel` for that.

        Raises:
            SbxError: the server refused the run (e.g. invalid params, code -32602) or
                went away (-32603).
            TimeoutError: ``timeout`` passed first.
            Exception: whatever an output callback raised (the first one; the command's
                later output was then no longer passed to callbacks).
        """
        if self._result is not None:
            return self._result
        if self._client.on_reader_thread() and not self._call.done():
            raise RuntimeError("sbx: cannot wait for a command inside an output callback")
        raw = self._call.wait(timeout)
        if self._streams is not None:
            self._streams.flush()
        result = as_object(raw)
        if result is None:
            raise SbxError(INTERNAL_ERROR, f"malformed run result: {raw!r}")
        self._result = CommandResult.from_wire(result)
        return self._result

    def cancel(self) -> bool:
        """Asks the server to cancel the command (``cancel {requestId}``).

        The waiter then gets exit code 125 and error_class ``"CANCELLED"``. Safe to call
        from any thread, also from inside an output callback (then it does not wait for
        the server's answer).

        Returns:
            True when the cancel was accepted, False when the command had already finished.

        Raises:
            SbxError: the connection is gone while the command is still pending.
        """
        if self._call.done():
            return False
        params = {"requestId": self._call.request_id}
        if self._client.on_reader_thread():
            self._client.send("cancel", params)
            return True
        try:
            self._client.request("cancel", params)
        except SbxError as e:
            # The answer to the run precedes the refusal on the wire, so a finished run is
            # already marked done here; a dead connection fails the run too.
            if self._call.event.wait(1 if e.code == INTERNAL_ERROR else 0):
                return False
            raise
        return True

    def __repr__(self) -> str:
        state = "done" if self.done() else "pending"
        return f"<sbx.CommandHandle request {self.request_id} {state}>"


def _run_params(sandbox_id: Optional[str], cmd: str, *, cwd: Optional[str], envs: Optional[Mapping[str, str]],
                timeout: Optional[float], stdin: Union[bytes, str, None], stream: bool,
                session: Optional[str], leftovers: Optional[str] = None) -> Dict[str, Any]:
    params: Dict[str, Any] = {"command": cmd}
    if sandbox_id is not None:
        params["sandboxId"] = sandbox_id
    if session is not None:
        params["session"] = session
    if cwd is not None:
        params["cwd"] = cwd
    if envs is not None:
        params["env"] = dict(envs)
    if timeout is not None:
        params["timeoutMs"] = seconds_to_ms(timeout)
    if stdin is not None:
        data = stdin.encode("utf-8") if isinstance(stdin, str) else bytes(stdin)
        params["stdin"] = base64.b64encode(data).decode("ascii")
    if stream:
        params["stream"] = True
    if leftovers is not None:
        params["leftovers"] = leftovers
    return params


def seconds_to_ms(seconds: float) -> int:
    """A timeout in seconds as the protocol's whole milliseconds."""
    if seconds < 0:
        raise ValueError(f"timeout must not be negative: {seconds!r}")
    return int(round(seconds * 1000))


def start_command(client: Client, sandbox_id: Optional[str], cmd: str, *, cwd: Optional[str] = None,
                  envs: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
                  stdin: Union[bytes, str, None] = None, on_stdout: Optional[OutputCallback] = None,
                  on_stderr: Optional[OutputCallback] = None, session: Optional[str] = None,
                  leftovers: Optional[str] = None) -> CommandHandle:
    """Sends a ``run`` request; the shared body of every ``start``."""
    stream = on_stdout is not None or on_stderr is not None
    params = _run_params(sandbox_id, cmd, cwd=cwd, envs=envs, timeout=timeout, stdin=stdin, stream=stream,
                         session=session, leftovers=leftovers)
    streams = _Streams(on_stdout, on_stderr) if stream else None
    call = client.send("run", params, on_notification=streams)
    return CommandHandle(client, call, streams)


class Commands:
    """``sandbox.commands``: runs commands in a sandbox (by default in session "default")."""

    def __init__(self, client: Client, sandbox_id: Optional[str]) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    def kill_leftovers(self) -> int:
        """Kills everything earlier commands left running (background jobs, servers) and every
        background process (``run(background=True)``, terminals), in one call: what frees a
        sandbox whose process budget they hold. Running foreground commands and the session
        shells are untouched. Returns how many process trees were killed."""
        params: Dict[str, Any] = {}
        if self._sandbox_id is not None:
            params["sandboxId"] = self._sandbox_id
        result = self._client.request("process.killAll", params)
        # "groups" is the daemon's older name for the count.
        return int(result["killed"] if "killed" in result else result["groups"])

    def start(self, cmd: str, *, cwd: Optional[str] = None, envs: Optional[Mapping[str, str]] = None,
              timeout: Optional[float] = None, stdin: Union[bytes, str, None] = None,
              on_stdout: Optional[OutputCallback] = None, on_stderr: Optional[OutputCallback] = None,
              session: Optional[str] = None, leftovers: Optional[str] = None) -> CommandHandle:
        """Starts a command and returns at once; see :meth:`run` for the arguments.

        Returns:
            A :class:`CommandHandle`: ``.wait()`` for the result, ``.cancel()`` to stop it.
        """
        return start_command(self._client, self._sandbox_id, cmd, cwd=cwd, envs=envs, timeout=timeout,
                             stdin=stdin, on_stdout=on_stdout, on_stderr=on_stderr, session=session,
                             leftovers=leftovers)

    @overload
    def run(self, cmd: str, *, background: Literal[False] = False, cwd: Optional[str] = None,
            envs: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
            stdin: Union[bytes, str, None] = None, on_stdout: Optional[OutputCallback] = None,
            on_stderr: Optional[OutputCallback] = None, session: Optional[str] = None,
            leftovers: Optional[str] = None) -> CommandResult: ...

    @overload
    def run(self, cmd: str, *, background: Literal[True], cwd: Optional[str] = None,
            envs: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
            stdin: Union[bool, bytes, str, None] = None, on_stdout: Optional[OutputCallback] = None,
            on_stderr: Optional[OutputCallback] = None, session: Optional[str] = None,
            label: Optional[str] = None) -> "ProcessHandle": ...

    def run(self, cmd: str, *, background: bool = False, cwd: Optional[str] = None,
            envs: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
            stdin: Union[bool, bytes, str, None] = None, on_stdout: Optional[OutputCallback] = None,
            on_stderr: Optional[OutputCallback] = None, session: Optional[str] = None,
            leftovers: Optional[str] = None, label: Optional[str] = None) -> Union[CommandResult, "ProcessHandle"]:
        """Runs a bash command in the sandbox's persistent session and waits for it, or,
        with ``background=True``, starts it as a background process and returns at once.

        A foreground run's state changes (working directory, exported variables, functions,
        background jobs) persist from one run to the next in the same session. A background
        process starts from its session's state but never changes it.

        Args:
            cmd: bash source text.
            background: start a background process (``process.start``) and return its
                :class:`~sbx.ProcessHandle` (``wait``, ``kill``, ``send_stdin``,
                ``wait_for_port``, ...); it runs until it ends or is killed, also past
                later runs.
            cwd: working directory for this run only.
            envs: extra environment variables for this run only.
            timeout: seconds before the command is killed. Foreground: exit 124,
                error_class ``"TIMEOUT"``, default the sandbox's timeout. Background: the
                process and all it started are killed (status ``"timeout"``, exit 137),
                default none.
            stdin: bytes (or text, sent as UTF-8) on the command's standard input;
                default: /dev/null. Background only: True keeps stdin open for
                ``handle.send_stdin()`` / ``close_stdin()``.
            on_stdout: called with each piece of standard output as it arrives.
            on_stderr: called with each piece of standard error as it arrives.
                Callbacks run on the SDK's reader thread: keep them short and do not make
                blocking SDK calls from them (``handle.cancel()`` / ``handle.kill()`` are
                fine).
            session: session name (default ``"default"``; created on first use).
            leftovers: foreground only. ``"kill"``: what the command leaves running
                (``server &``) is killed when it ends; ``"keep"``: it keeps running;
                default: the sandbox's setting.
            label: background only: free text shown by :meth:`list`.

        Returns:
            Foreground: the :class:`CommandResult`. A non-zero exit status does **not**
            raise (E2B raises ``CommandExitException``; sbx returns the result): check
            ``result.exit_code``. Background: a :class:`~sbx.ProcessHandle`.

        Raises:
            SbxError: a protocol error, e.g. an invalid env name (code -32602), the
                sandbox's 64 live background processes (-32001), or the server went away
                (-32603).
            ValueError: an argument of the other mode (``label`` or ``stdin=True`` without
                ``background``, ``leftovers`` with it).
        """
        if background:
            if leftovers is not None:
                raise ValueError("leftovers applies to foreground runs only")
            from .processes import start_process
            return start_process(self._client, self._sandbox_id, cmd, cwd=cwd, envs=envs, timeout=timeout,
                                 stdin=stdin, session=session, label=label, on_stdout=on_stdout,
                                 on_stderr=on_stderr)
        if label is not None:
            raise ValueError("label applies to background processes only (background=True)")
        if isinstance(stdin, bool):
            if stdin:
                raise ValueError("stdin=True (an open stdin) needs background=True")
            stdin = None
        return self.start(cmd, cwd=cwd, envs=envs, timeout=timeout, stdin=stdin, on_stdout=on_stdout,
                          on_stderr=on_stderr, session=session, leftovers=leftovers).wait()

    def list(self) -> List["ProcessInfo"]:
        """The sandbox's background processes (``process.list``), oldest first: those of
        ``run(background=True)`` and terminals (origin ``"start"``), and what foreground
        runs left running (origin ``"leftover"``), running or ended."""
        from .processes import list_processes
        return list_processes(self._client, self._sandbox_id)

    def kill(self, pid: Union[int, str], signal: Union[str, int, None] = None) -> bool:
        """Kills a background process and everything it started, by its pid inside the
        sandbox (or by its process id, a str such as ``"p12"``): ``signal`` (default TERM),
        then KILL after 2 s. Returns once they are all dead.

        Returns:
            True when it was killed; False when no running process has that pid.
        """
        from .processes import _kill, find_process  # pyright: ignore[reportPrivateUsage]
        info = find_process(self._client, self._sandbox_id, pid)
        if info is None or not info.running:
            return False
        params: Dict[str, Any] = {"processId": info.process_id}
        if self._sandbox_id is not None:
            params["sandboxId"] = self._sandbox_id
        if signal is not None:
            params["signal"] = signal
        return _kill(self._client, self._sandbox_id, info.process_id, params)

    def connect(self, pid: Union[int, str], on_stdout: Optional[OutputCallback] = None,
                on_stderr: Optional[OutputCallback] = None) -> "ProcessHandle":
        """A handle on a background process that is running (or has ended), by its pid inside
        the sandbox (or its process id, a str).

        Its output is delivered from where this SDK (this Python process) last delivered
        output of that process, through any handle and any connection, else from the start:
        across reconnects every byte reaches the callbacks exactly once (bytes the daemon's
        1 MiB log dropped in between are counted in ``dropped_bytes``). Typical use: a
        persistent sandbox reached again with ``Sandbox.connect(socket)`` and
        ``sandboxes.get(sandbox_id)``.

        Raises:
            SbxError: no process of the sandbox has that pid (-32602).
        """
        from .processes import TerminalHandle, ProcessHandle, find_process
        info = find_process(self._client, self._sandbox_id, pid)
        if info is None:
            raise SbxError(_INVALID_PARAMS, f"no background process with pid {pid!r} in this sandbox")
        cls = TerminalHandle if info.pty else ProcessHandle
        return cls(self._client, self._sandbox_id, info.process_id, info.pid, on_stdout=on_stdout,
                   on_stderr=on_stderr, resume=True)


class Session:
    """A named shell session of a sandbox, with its own working directory, variables and
    history. Get one from ``sandbox.sessions.create(name)`` or ``.get(name)``."""

    def __init__(self, client: Client, sandbox_id: Optional[str], name: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id
        self.name: str = name
        """The session's name."""

    def _params(self, **extra: Any) -> Dict[str, Any]:
        params: Dict[str, Any] = {"session": self.name}
        if self._sandbox_id is not None:
            params["sandboxId"] = self._sandbox_id
        params.update(extra)
        return params

    def start(self, cmd: str, *, cwd: Optional[str] = None, envs: Optional[Mapping[str, str]] = None,
              timeout: Optional[float] = None, stdin: Union[bytes, str, None] = None,
              on_stdout: Optional[OutputCallback] = None, on_stderr: Optional[OutputCallback] = None,
              leftovers: Optional[str] = None) -> CommandHandle:
        """Starts a command in this session; see :meth:`Commands.run` for the arguments."""
        return start_command(self._client, self._sandbox_id, cmd, cwd=cwd, envs=envs, timeout=timeout,
                             stdin=stdin, on_stdout=on_stdout, on_stderr=on_stderr, session=self.name,
                             leftovers=leftovers)

    def run(self, cmd: str, *, cwd: Optional[str] = None, envs: Optional[Mapping[str, str]] = None,
            timeout: Optional[float] = None, stdin: Union[bytes, str, None] = None,
            on_stdout: Optional[OutputCallback] = None, on_stderr: Optional[OutputCallback] = None,
            session: Optional[str] = None, leftovers: Optional[str] = None) -> CommandResult:
        """Runs a command in this session and waits for it; see :meth:`Commands.run`.

        ``session``, if given, must be this session's name (it is accepted only so that
        the signature matches ``commands.run``).
        """
        if session is not None and session != self.name:
            raise ValueError(f"this is session {self.name!r}, not {session!r}")
        return self.start(cmd, cwd=cwd, envs=envs, timeout=timeout, stdin=stdin, on_stdout=on_stdout,
                          on_stderr=on_stderr, leftovers=leftovers).wait()

    def delete(self) -> None:
        """Ends the session; its running command is cancelled."""
        params = self._params(name=self.name)
        del params["session"]
        self._client.request("session.delete", params)

    def history(self) -> List[Dict[str, Any]]:
        """Commands run in this session: ``[{index, command, timestamp}]``, oldest first."""
        return list(self._client.request("shell.history.list", self._params())["entries"])

    def clear_history(self) -> None:
        """Forgets this session's history."""
        self._client.request("shell.history.clear", self._params())

    def __repr__(self) -> str:
        return f"<sbx.Session {self.name!r}>"
