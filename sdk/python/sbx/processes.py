"""Background processes and terminals: ``commands.run(..., background=True)``,
``commands.list/kill/connect`` and ``sandbox.pty``.

A background process is started with ``process.start``; its handle then asks for its output
with ``process.stream`` from a cursor (a byte offset into the process's log, in which stdout
and stderr are interleaved as they came). The server answers with ``process.output``
notifications, one ``process.exit`` once the process ended, and finally the stream's
response. The SDK remembers, per (sandbox, process), the cursor after the last chunk it
delivered to a callback, so that :meth:`~sbx.Commands.connect` on a new connection resumes
exactly there: no byte is delivered twice, none is skipped (unless the server's bounded log
dropped it, which the handle reports in :attr:`ProcessHandle.dropped_bytes`).

Errors: a daemon error is an :class:`~sbx.SbxError` with the daemon's code; an unknown
process, a kill of an ended one, a write to a closed stdin and a resize of a non-terminal are
code -32602. ``wait_for_log`` / ``wait_for_port`` raise :class:`~sbx.ProcessEndedError`
(-32010) when the process ends first and :class:`~sbx.WaitTimeoutError` (-32011) when the
timeout passes first; both are SbxError subclasses.
"""
from __future__ import annotations

import base64
import codecs
import collections
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, Iterator, List, Mapping, Optional, Tuple, Union

from ._client import INTERNAL_ERROR, Client, PendingCall, SbxError, as_object
from .commands import OutputCallback, seconds_to_ms, wire_bytes

__all__ = ["ProcessHandle", "ProcessResult", "ProcessInfo", "OutputChunk", "TerminalHandle", "Pty",
           "DataCallback", "start_process", "list_processes", "find_process"]

#: Called with raw terminal output, exactly as the program wrote it.
DataCallback = Callable[[bytes], None]

_INVALID_PARAMS = -32602

#: At most this many bytes of pieces past a handle's cursor are held (beyond: dropped, and
#: read again from the log): a stream's pieces after a loss, another stream's ahead of it.
_AHEAD_MAX = 4 << 20

#: A daemon's default TERM for terminals unless the caller's envs say otherwise.
_DEFAULT_TERM = "xterm-256color"


@dataclass(frozen=True)
class OutputChunk:
    """One piece of a background process's output, as iteration over a handle yields it.

    Attributes:
        stream: ``"stdout"`` or ``"stderr"`` (a terminal's output is ``"stdout"``).
        data: the bytes exactly as written.
        text: ``data`` decoded as UTF-8 with a per-stream incremental decoder: a character
            split between chunks appears whole in the later chunk's text; invalid bytes
            become U+FFFD.
        cursor: the log offset after this chunk.
    """

    stream: str
    data: bytes
    text: str
    cursor: int


@dataclass(frozen=True)
class ProcessResult:
    """The outcome of a background process, from :meth:`ProcessHandle.wait`.

    Like :class:`~sbx.CommandResult`, a non-zero exit status is a result, not an error.

    Attributes:
        exit_code: the exit status, or 128 + signal number when a signal ended it (137 for
            KILL, 143 for TERM); 137 when its ``timeout`` passed.
        status: ``"exited"``, ``"killed"`` or ``"timeout"``.
        signal: the name of the signal that ended it (``"KILL"``, ``"TERM"``, ...) or None.
        stdout / stderr: the output this handle received, decoded as UTF-8 (invalid bytes
            replaced). A handle from :meth:`~sbx.Commands.connect` has only what came after
            the cursor it resumed from.
        stdout_bytes / stderr_bytes: the same, exactly as written.
        dropped_bytes: bytes the daemon's bounded log (1 MiB per process) lost before this
            handle could receive them; the output then has a gap.
        cursor: the log offset after the last byte received.
    """

    exit_code: int
    status: str
    signal: Optional[str]
    stdout: str
    stderr: str
    stdout_bytes: bytes
    stderr_bytes: bytes
    dropped_bytes: int
    cursor: int

    @property
    def ok(self) -> bool:
        """True when the process exited 0."""
        return self.exit_code == 0


@dataclass(frozen=True)
class ProcessInfo:
    """One process of a sandbox, as ``commands.list()`` reports it (``process.list``).

    Attributes:
        process_id: the daemon's id (``"p12"``), unique in the daemon.
        pid: the pid inside the sandbox.
        command: the command text.
        label: the label given at start, or None.
        status: ``"running"``, ``"exited"``, ``"killed"`` or ``"timeout"``.
        exit_code: as :attr:`ProcessResult.exit_code`; None while running.
        signal: the signal that ended it, or None.
        started_at / ended_at: milliseconds since the epoch; ended_at None while running.
        origin: ``"start"`` (``run(background=True)``, ``pty.create``) or ``"leftover"``
            (what a foreground run left running, e.g. ``server &``).
        pty: it runs on a terminal.
        stdin: its stdin is a pipe the SDK may write to.
    """

    process_id: str
    pid: int
    command: str
    label: Optional[str]
    status: str
    exit_code: Optional[int]
    signal: Optional[str]
    started_at: int
    ended_at: Optional[int]
    origin: str
    pty: bool
    stdin: bool

    @property
    def running(self) -> bool:
        return self.status == "running"

    @classmethod
    def _from(cls, d: Mapping[str, Any]) -> "ProcessInfo":
        def opt_int(key: str) -> Optional[int]:
            v = d.get(key)
            return None if v is None else int(v)

        label = d.get("label")
        sig = d.get("signal")
        return cls(process_id=str(d["processId"]), pid=int(d["pid"]), command=str(d.get("command", "")),
                   label=None if label is None else str(label), status=str(d["status"]),
                   exit_code=opt_int("exitCode"), signal=None if sig is None else str(sig),
                   started_at=int(d.get("startedAt") or 0), ended_at=opt_int("endedAt"),
                   origin=str(d.get("origin", "start")), pty=bool(d.get("pty", False)),
                   stdin=bool(d.get("stdin", False)))


# ------------------------------------------------------------------ what this SDK delivered

class _Progress:
    """How far the SDK delivered one process's output: the cursor after the last chunk
    handed to a callback, and the UTF-8 decoders' states at that point (a character split
    across that cursor is completed by the next connection's first chunk)."""

    __slots__ = ("cursor", "decoders")

    def __init__(self) -> None:
        self.cursor = 0
        self.decoders: Dict[str, Tuple[bytes, int]] = {}


#: Processes remembered; the oldest are forgotten past this (a forgotten process is read
#: from the start of what the daemon still holds).
_PROGRESS_MAX = 4096
_progress: "collections.OrderedDict[Tuple[str, str], _Progress]" = collections.OrderedDict()
_progress_lock = threading.Lock()


def _progress_of(sandbox_id: Optional[str], process_id: str) -> Tuple[int, Dict[str, Tuple[bytes, int]]]:
    with _progress_lock:
        p = _progress.get((sandbox_id or "", process_id))
        return (p.cursor, dict(p.decoders)) if p is not None else (0, {})


def _remember(sandbox_id: Optional[str], process_id: str, cursor: int,
              decoders: Dict[str, Tuple[bytes, int]]) -> None:
    key = (sandbox_id or "", process_id)
    with _progress_lock:
        p = _progress.get(key)
        if p is None:
            p = _progress[key] = _Progress()
            while len(_progress) > _PROGRESS_MAX:
                _progress.popitem(last=False)
        else:
            _progress.move_to_end(key)
        # Two live handles on one process may report out of order; the cursor never goes back.
        if cursor >= p.cursor:
            p.cursor = cursor
            p.decoders = decoders


# ------------------------------------------------------------------ handles

class ProcessHandle:
    """A background process of a sandbox: get one from ``commands.run(cmd, background=True)``
    or ``commands.connect(pid)``.

    The handle receives the process's output from the moment it is made until the process
    ends; the callbacks run on the SDK's reader thread (keep them short; blocking SDK calls
    from them raise RuntimeError, :meth:`kill` is fine). Iterating over the handle yields
    :class:`OutputChunk` s, everything from the handle's start and then live, until the
    process ended (any number of iterations, each from the first chunk)::

        h = sb.commands.run("make", background=True)
        for chunk in h:
            print(chunk.stream, chunk.text, end="")
        print(h.wait().exit_code)

    The handle keeps all output it received in memory (for :meth:`wait` and iteration).
    """

    def __init__(self, client: Client, sandbox_id: Optional[str], process_id: str, pid: int, *,
                 on_stdout: Optional[OutputCallback] = None, on_stderr: Optional[OutputCallback] = None,
                 on_data: Optional[DataCallback] = None, resume: bool = False) -> None:
        self._client = client
        self._sandbox_id = sandbox_id
        self._process_id = process_id
        self._pid = pid
        self._text_callbacks: Dict[str, Optional[OutputCallback]] = {"stdout": on_stdout, "stderr": on_stderr}
        self._on_data = on_data
        self._decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in ("stdout", "stderr")}
        cursor = 0
        if resume:
            cursor, states = _progress_of(sandbox_id, process_id)
            for name, state in states.items():
                self._decoders[name].setstate(state)
        self._cursor = cursor
        self._dropped = 0
        self._chunks: List[OutputChunk] = []
        # Pieces past the cursor, by start offset (see _apply).
        self._ahead: Dict[int, Tuple[str, bytes, int]] = {}
        self._ahead_bytes = 0
        self._exit: Optional[Dict[str, Any]] = None
        self._finished = False
        self._finished_event = threading.Event()  # set once _finished and the callbacks are done
        self._result: Optional[ProcessResult] = None
        # The first exception an output callback raised; no output is delivered after it.
        self._callback_error: Optional[BaseException] = None
        self._cond = threading.Condition()
        params: Dict[str, Any] = {"processId": process_id, "cursor": cursor}
        if sandbox_id is not None:
            params["sandboxId"] = sandbox_id
        # Listening before asking, and touching only what is set above: the first
        # notifications may come before send() returns. (A daemon that named the request in
        # its notifications would reach on_notification instead; both lead to _take.)
        client.listen_process(process_id, self._on_notification)
        try:
            self._call = client.send("process.stream", params, on_notification=self._on_notification,
                                     on_done=self._on_done)
        except BaseException:
            client.unlisten_process(process_id, self._on_notification)
            raise

    # ------------------------------------------------------------ identity and state

    @property
    def pid(self) -> int:
        """The process's pid inside the sandbox."""
        return self._pid

    @property
    def process_id(self) -> str:
        """The daemon's id of the process (``"p12"``)."""
        return self._process_id

    @property
    def cursor(self) -> int:
        """The log offset after the last byte this handle received."""
        with self._cond:
            return self._cursor

    @property
    def dropped_bytes(self) -> int:
        """Bytes the daemon's bounded log (1 MiB per process) lost before this handle got
        them."""
        with self._cond:
            return self._dropped

    @property
    def exit_code(self) -> Optional[int]:
        """The exit code once the process ended (as seen by this handle), else None."""
        with self._cond:
            if self._exit is None or self._exit.get("exitCode") is None:
                return None
            return int(self._exit["exitCode"])

    def done(self) -> bool:
        """True once the output stream ended: the process ended and all its output is in,
        or the connection is gone."""
        with self._cond:
            return self._finished

    # ------------------------------------------------------------ the stream

    def _on_notification(self, params: Dict[str, Any]) -> None:
        try:
            self._take(params)
        except BaseException as e:  # noqa: BLE001 - handed to wait()
            with self._cond:
                if self._callback_error is None:
                    self._callback_error = e

    def _take(self, params: Dict[str, Any]) -> None:
        """One ``process.output`` or ``process.exit``.

        The daemon's notifications name the process, not the stream request, so those of
        every stream of this process on this connection come here (another handle's, or a
        reconnect's). Each stream sends the log contiguously from its own cursor, so a piece
        is taken only where it continues this handle's cursor: a piece already had is
        skipped (or its new tail taken), one further on belongs to a stream ahead of this
        one, whose bytes this handle's own stream sends in turn.
        """
        if "stream" not in params:
            if "status" in params:  # process.exit
                with self._cond:
                    self._exit = dict(params)
            return
        end = params.get("cursor")
        dropped = params.get("dropped")
        self._take_bytes(str(params.get("stream")),
                         wire_bytes(params, "data", "dataEncoding" if "dataEncoding" in params else "encoding"),
                         end if isinstance(end, int) and not isinstance(end, bool) else None,
                         dropped if isinstance(dropped, int) and not isinstance(dropped, bool) else 0)

    def _take_bytes(self, name: str, data: bytes, end: Optional[int], dropped: int) -> None:
        if name not in self._decoders:
            return
        pieces: List[OutputChunk] = []
        with self._cond:
            if self._finished or self._callback_error is not None:
                return
            self._apply(name, data, end, dropped, pieces)
            # A piece held as "ahead" may continue the cursor now.
            while self._ahead:
                start = min(self._ahead)
                held_name, held_data, held_end = self._ahead[start]
                if start > self._cursor:
                    break
                del self._ahead[start]
                self._ahead_bytes -= len(held_data)
                self._apply(held_name, held_data, held_end, 0, pieces)
            cursor = self._cursor
            self._chunks.extend(pieces)
            self._cond.notify_all()
            states = {n: d.getstate() for n, d in self._decoders.items()}
        for piece in pieces:
            if self._on_data is not None:
                self._on_data(piece.data)
            callback = self._text_callbacks[piece.stream]
            if callback is not None and piece.text:
                callback(piece.text)
        # Only what reached the callbacks counts as delivered (an exception above leaves it
        # for the next connection).
        _remember(self._sandbox_id, self._process_id, cursor, states)

    def _apply(self, name: str, data: bytes, end: Optional[int], dropped: int, pieces: List[OutputChunk]) -> None:
        """Moves the cursor over one piece (lock held); what it adds goes to ``pieces``."""
        if dropped > 0:
            # The log no longer holds [end - dropped, end): what is left starts at end.
            lost_from, lost_to = (end - dropped, end) if end is not None else (self._cursor, self._cursor + dropped)
            if not lost_from <= self._cursor < lost_to:
                return
            self._dropped += lost_to - self._cursor
            self._cursor = lost_to
            return
        if end is not None:
            start = end - len(data)
            if end <= self._cursor:
                return
            if start > self._cursor:
                # Either another stream's, ahead of this one (this handle's own stream sends
                # those bytes in turn), or this stream's first piece after a loss, which the
                # daemon sends before its dropped notice: held until the cursor gets there.
                if start not in self._ahead and self._ahead_bytes + len(data) <= _AHEAD_MAX:
                    self._ahead[start] = (name, data, end)
                    self._ahead_bytes += len(data)
                return
            data = data[self._cursor - start:]
            self._cursor = end
        else:
            self._cursor += len(data)
        if data:
            pieces.append(OutputChunk(name, data, self._decoders[name].decode(data), self._cursor))

    def _on_done(self, call: PendingCall) -> None:
        result = as_object(call.result) if call.error is None else None
        if result is not None:
            with self._cond:
                if self._exit is None:
                    self._exit = dict(result)
        self._finish(complete=result is not None and self._callback_error is None)

    def _finish(self, complete: bool) -> None:
        """The end of the handle's stream; ``complete``: the process ended and its output
        is all in (else the connection went away or a callback failed)."""
        self._client.unlisten_process(self._process_id, self._on_notification)
        tails: Dict[str, str] = {}
        with self._cond:
            if complete:
                # The process is over: an incomplete character at the end will never be
                # completed; the callbacks get it as U+FFFD.
                tails = {n: d.decode(b"", final=True) for n, d in self._decoders.items()}
            self._finished = True
            self._ahead.clear()
            cursor = self._cursor
            self._cond.notify_all()
        try:
            for name, text in tails.items():
                callback = self._text_callbacks[name]
                if text and callback is not None:
                    callback(text)
        except BaseException as e:  # noqa: BLE001 - handed to wait()
            with self._cond:
                if self._callback_error is None:
                    self._callback_error = e
        finally:
            self._finished_event.set()
        if complete:
            _remember(self._sandbox_id, self._process_id, cursor, {})

    def __iter__(self) -> Iterator[OutputChunk]:
        """Yields the output chunks, from this handle's first until the process ended.

        Raises:
            SbxError: the connection went away before the process ended (-32603).
            RuntimeError: called from an output callback.
        """
        if self._client.on_reader_thread():
            raise RuntimeError("sbx: cannot iterate over a process's output inside an output callback")
        i = 0
        while True:
            with self._cond:
                while i >= len(self._chunks) and not self._finished:
                    self._cond.wait()
                if i >= len(self._chunks):
                    break
                chunk = self._chunks[i]
                i += 1
            yield chunk
        if self._call.error is not None:
            raise self._call.error.copy()

    # ------------------------------------------------------------ waiting

    def wait(self, timeout: Optional[float] = None) -> ProcessResult:
        """Waits for the process to end and for all its output; returns the result.

        A non-zero exit is returned, not raised. The callbacks have all been called by the
        time this returns.

        Args:
            timeout: seconds to wait at most (None: as long as it takes); the process is
                not stopped when it passes.

        Raises:
            TimeoutError: ``timeout`` passed first.
            SbxError: the connection went away (-32603); a persistent sandbox's process
                may then be reattached with ``commands.connect(pid)``.
            Exception: whatever an output callback raised first.
        """
        if self._result is not None:
            return self._result
        if self._client.on_reader_thread() and not self._call.done():
            raise RuntimeError("sbx: cannot wait for a process inside an output callback")
        deadline = None if timeout is None else time.monotonic() + timeout
        raw = self._call.wait(timeout)
        if as_object(raw) is None:
            raise SbxError(INTERNAL_ERROR, f"malformed process.stream result: {raw!r}")
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not self._finished_event.wait(left):
            raise TimeoutError(f"process {self._process_id} did not end within {timeout} s")
        if self._callback_error is not None:
            raise self._callback_error
        with self._cond:
            ex = self._exit or {}
            out = b"".join(c.data for c in self._chunks if c.stream == "stdout")
            err = b"".join(c.data for c in self._chunks if c.stream == "stderr")
            code = ex.get("exitCode")
            sig = ex.get("signal")
            self._result = ProcessResult(
                exit_code=-1 if code is None else int(code), status=str(ex.get("status", "exited")),
                signal=None if sig is None else str(sig), stdout=out.decode("utf-8", "replace"),
                stderr=err.decode("utf-8", "replace"), stdout_bytes=out, stderr_bytes=err,
                dropped_bytes=self._dropped, cursor=self._cursor)
        return self._result

    def _params(self, **extra: Any) -> Dict[str, Any]:
        params: Dict[str, Any] = {"processId": self._process_id}
        if self._sandbox_id is not None:
            params["sandboxId"] = self._sandbox_id
        params.update({k: v for k, v in extra.items() if v is not None})
        return params

    def _wait(self, until: str, timeout: float, **extra: Any) -> Dict[str, Any]:
        params = self._params(until=until, timeoutMs=seconds_to_ms(timeout), **extra)
        return dict(self._client.request("process.wait", params))

    def wait_for_log(self, pattern: str, timeout: float = 60.0) -> str:
        """Waits until a line of stdout or stderr matches ``pattern`` (a POSIX extended
        regular expression, searched in each line) and returns that line.

        Raises:
            ProcessEndedError: the process ended first (-32010).
            WaitTimeoutError: ``timeout`` seconds passed first (-32011).
            SbxError: an invalid pattern (-32602).
        """
        return str(self._wait("log", timeout, pattern=pattern).get("line", ""))

    def wait_for_port(self, port: int, timeout: float = 60.0) -> None:
        """Waits until something listens on TCP ``port`` inside the sandbox.

        Raises:
            ProcessEndedError: the process ended first (-32010).
            WaitTimeoutError: ``timeout`` seconds passed first (-32011).
        """
        self._wait("port", timeout, port=int(port))

    # ------------------------------------------------------------ control

    def kill(self, signal: Union[str, int, None] = None, grace: Optional[float] = None) -> bool:
        """Kills the process and everything it started (``process.kill``): sends ``signal``
        (default TERM), then KILL after ``grace`` seconds (default 2); returns once all of
        them are dead.

        Returns:
            True when it was killed, False when it had already ended. From an output
            callback the request is sent without waiting, and True is returned.
        """
        params = self._params(signal=signal, graceMs=None if grace is None else seconds_to_ms(grace))
        if self._client.on_reader_thread():
            self._client.send("process.kill", params)
            return True
        return _kill(self._client, self._sandbox_id, self._process_id, params)

    def send_stdin(self, data: Union[str, bytes]) -> None:
        """Writes to the process's stdin (text as UTF-8). The process must have been started
        with ``stdin=True``.

        Raises:
            SbxError: stdin is closed or was never open, or the process ended (-32602).
        """
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        self._client.request("process.write", self._params(data=base64.b64encode(raw).decode("ascii")))

    def close_stdin(self) -> None:
        """Closes the process's stdin (it reads end of file)."""
        self._client.request("process.closeStdin", self._params())

    def __repr__(self) -> str:
        state = "done" if self.done() else "running"
        return f"<sbx.{type(self).__name__} {self._process_id} pid {self._pid} {state}>"


class TerminalHandle(ProcessHandle):
    """An interactive shell on a pseudo-terminal, from ``sandbox.pty.create()``.

    Its output (stdout and stderr both go to the terminal) reaches ``on_data`` as raw
    bytes, and iteration yields :class:`OutputChunk` s as for any process.
    """

    def send_input(self, data: Union[str, bytes]) -> None:
        """Types ``data`` into the terminal (text as UTF-8); ``"\\x03"`` is Ctrl-C, which
        interrupts the foreground program, ``"\\x04"`` on an empty line ends the shell."""
        self.send_stdin(data)

    def resize(self, cols: int, rows: int) -> None:
        """Changes the terminal's size (the program gets SIGWINCH)."""
        self._client.request("process.resize", self._params(cols=int(cols), rows=int(rows)))


def _kill(client: Client, sandbox_id: Optional[str], process_id: str, params: Dict[str, Any]) -> bool:
    try:
        client.request("process.kill", params)
    except SbxError as e:
        if e.code != _INVALID_PARAMS:
            raise
        # The same code names an unknown process: only an ended one is "not killed".
        info = find_process(client, sandbox_id, process_id)
        if info is None or info.running:
            raise
        return False
    return True


# ------------------------------------------------------------------ starting, finding

def start_process(client: Client, sandbox_id: Optional[str], cmd: str, *, cwd: Optional[str] = None,
                  envs: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
                  stdin: Union[bool, bytes, str, None] = None, session: Optional[str] = None,
                  label: Optional[str] = None, pty: Optional[Tuple[int, int]] = None,
                  on_stdout: Optional[OutputCallback] = None, on_stderr: Optional[OutputCallback] = None,
                  on_data: Optional[DataCallback] = None) -> ProcessHandle:
    """``process.start``, then a handle streaming its output. ``stdin`` bytes or text are
    written and stdin closed; True leaves it open; False or None: /dev/null."""
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
    if label is not None:
        params["label"] = label
    if stdin is not None and stdin is not False:
        params["stdin"] = True
    if pty is not None:
        params["pty"] = {"cols": int(pty[0]), "rows": int(pty[1])}
    result = client.request("process.start", params)
    cls = TerminalHandle if pty is not None else ProcessHandle
    handle = cls(client, sandbox_id, str(result["processId"]), int(result["pid"]), on_stdout=on_stdout,
                 on_stderr=on_stderr, on_data=on_data)
    if isinstance(stdin, (bytes, bytearray, memoryview, str)):
        if len(stdin):
            handle.send_stdin(bytes(stdin) if not isinstance(stdin, str) else stdin)
        handle.close_stdin()
    return handle


def list_processes(client: Client, sandbox_id: Optional[str]) -> List[ProcessInfo]:
    """``process.list``: every process of the sandbox, oldest first."""
    params: Dict[str, Any] = {}
    if sandbox_id is not None:
        params["sandboxId"] = sandbox_id
    result = client.request("process.list", params)
    return [ProcessInfo._from(p) for p in result["processes"]]  # pyright: ignore[reportPrivateUsage]


def find_process(client: Client, sandbox_id: Optional[str], which: Union[int, str]) -> Optional[ProcessInfo]:
    """The process with this in-sandbox pid (an int) or process id (a str): a running one if
    any (pids are reused once a process ended), else the newest."""
    found: Deque[ProcessInfo] = collections.deque()
    for p in list_processes(client, sandbox_id):
        if (p.pid == which) if isinstance(which, int) else (p.process_id == which):
            found.append(p)
    running = [p for p in found if p.running]
    if running:
        return running[-1]
    return found[-1] if found else None


class Pty:
    """``sandbox.pty``: interactive shells on pseudo-terminals."""

    def __init__(self, client: Client, sandbox_id: Optional[str]) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    def create(self, cols: int = 80, rows: int = 24, on_data: Optional[DataCallback] = None, *,
               cwd: Optional[str] = None, envs: Optional[Mapping[str, str]] = None,
               timeout: Optional[float] = None, command: str = "exec bash -i") -> TerminalHandle:
        """Starts an interactive bash on a ``cols`` x ``rows`` terminal.

        Args:
            on_data: called with the terminal's output bytes as they come (reader thread).
            cwd: working directory.
            envs: extra environment variables; TERM defaults to ``xterm-256color``.
            timeout: seconds before the shell and everything in it is killed (default none).
            command: what runs on the terminal (default an interactive bash).

        Returns:
            A :class:`TerminalHandle`: ``send_input``, ``resize``, ``kill``, ``wait``.
        """
        env = {"TERM": _DEFAULT_TERM}
        env.update(envs or {})
        handle = start_process(self._client, self._sandbox_id, command, cwd=cwd, envs=env, timeout=timeout,
                               stdin=True, pty=(cols, rows), on_data=on_data)
        assert isinstance(handle, TerminalHandle)
        return handle
