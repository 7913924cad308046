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

import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple, Union

from . import _ops as ops
from ._callbacks import OutputCallback
from ._client import INTERNAL_ERROR, Client, PendingCall, SbxError, as_object
from ._ops import seconds_to_ms
from ._results import LogCursor, OutputChunk, ProcessInfo, ProcessResult, remember_progress

__all__ = ["ProcessHandle", "ProcessResult", "ProcessInfo", "OutputChunk", "TerminalHandle", "Pty",
           "DataCallback", "start_process", "list_processes", "find_process"]

#: Called with raw terminal output, exactly as the program wrote it.
DataCallback = Callable[[bytes], None]


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
        self._log = LogCursor(sandbox_id, process_id, resume)
        self._finished = False
        self._finished_event = threading.Event()  # set once _finished and the callbacks are done
        self._result: Optional[ProcessResult] = None
        # The first exception an output callback raised; no output is delivered after it.
        self._callback_error: Optional[BaseException] = None
        self._cond = threading.Condition()
        params = ops.with_sandbox(sandbox_id, processId=process_id, cursor=self._log.cursor)
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
            return self._log.cursor

    @property
    def dropped_bytes(self) -> int:
        """Bytes the daemon's bounded log (1 MiB per process) lost before this handle got
        them."""
        with self._cond:
            return self._log.dropped

    @property
    def exit_code(self) -> Optional[int]:
        """The exit code once the process ended (as seen by this handle), else None."""
        with self._cond:
            return self._log.exit_code()

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
        """One ``process.output`` or ``process.exit`` (see :class:`~sbx._results.LogCursor`)."""
        with self._cond:
            if self._finished or self._callback_error is not None:
                return
            pieces = self._log.take(params)
            if "stream" not in params:
                return
            cursor = self._log.cursor
            self._cond.notify_all()
            states = self._log.decoder_states()
        for piece in pieces:
            if self._on_data is not None:
                self._on_data(piece.data)
            callback = self._text_callbacks[piece.stream]
            if callback is not None and piece.text:
                callback(piece.text)
        # Only what reached the callbacks counts as delivered (an exception above leaves it
        # for the next connection).
        remember_progress(self._sandbox_id, self._process_id, cursor, states)

    def _on_done(self, call: PendingCall) -> None:
        result = as_object(call.result) if call.error is None else None
        with self._cond:
            self._log.finished_params(result)
        self._finish(complete=result is not None and self._callback_error is None)

    def _finish(self, complete: bool) -> None:
        """The end of the handle's stream; ``complete``: the process ended and its output
        is all in (else the connection went away or a callback failed)."""
        self._client.unlisten_process(self._process_id, self._on_notification)
        with self._cond:
            tails = self._log.end(complete)
            self._finished = True
            cursor = self._log.cursor
            self._cond.notify_all()
        try:
            for name, text in tails.items():
                callback = self._text_callbacks[name]
                if callback is not None:
                    callback(text)
        except BaseException as e:  # noqa: BLE001 - handed to wait()
            with self._cond:
                if self._callback_error is None:
                    self._callback_error = e
        finally:
            self._finished_event.set()
        if complete:
            remember_progress(self._sandbox_id, self._process_id, cursor, {})

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
                while i >= len(self._log.chunks) and not self._finished:
                    self._cond.wait()
                if i >= len(self._log.chunks):
                    break
                chunk = self._log.chunks[i]
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
            self._result = self._log.result()
        return self._result

    def _params(self, **extra: Any) -> Dict[str, Any]:
        return ops.with_sandbox(self._sandbox_id, processId=self._process_id, **extra)

    def _wait(self, until: str, timeout: float, **extra: Any) -> Dict[str, Any]:
        params = self._params(until=until, timeoutMs=seconds_to_ms(timeout), **extra)
        result: Dict[str, Any] = self._client.run_op(ops.process_wait(params))
        return result

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
        return bool(self._client.run_op(ops.kill_process(self._sandbox_id, self._process_id, params)))

    def send_stdin(self, data: Union[str, bytes]) -> None:
        """Writes to the process's stdin (text as UTF-8). The process must have been started
        with ``stdin=True``.

        Raises:
            SbxError: stdin is closed or was never open, or the process ended (-32602).
        """
        self._client.run_op(ops.call("process.write", self._params(data=ops.b64(data))))

    def close_stdin(self) -> None:
        """Closes the process's stdin (it reads end of file)."""
        self._client.run_op(ops.call("process.closeStdin", self._params()))

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
        self._client.run_op(ops.call("process.resize", self._params(cols=int(cols), rows=int(rows))))


# ------------------------------------------------------------------ starting, finding

def start_process(client: Client, sandbox_id: Optional[str], cmd: str, *, cwd: Optional[str] = None,
                  envs: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
                  stdin: Union[bool, bytes, str, None] = None, session: Optional[str] = None,
                  label: Optional[str] = None, pty: Optional[Tuple[int, int]] = None,
                  on_stdout: Optional[OutputCallback] = None, on_stderr: Optional[OutputCallback] = None,
                  on_data: Optional[DataCallback] = None, lane: Optional[str] = None,
                  while_paused: Optional[str] = None) -> ProcessHandle:
    """``process.start``, then a handle streaming its output. ``stdin`` bytes or text are
    written and stdin closed; True leaves it open; False or None: /dev/null."""
    params = ops.process_start_params(sandbox_id, cmd, cwd=cwd, envs=envs, timeout=timeout, stdin=stdin,
                                      session=session, label=label, pty=pty, lane=lane, while_paused=while_paused)
    result = client.request("process.start", params)
    cls = TerminalHandle if pty is not None else ProcessHandle
    handle = cls(client, sandbox_id, str(result["processId"]), int(result["pid"]), on_stdout=on_stdout,
                 on_stderr=on_stderr, on_data=on_data)
    data = ops.initial_stdin(stdin)
    if data is not None:
        if data:
            handle.send_stdin(data)
        handle.close_stdin()
    return handle


def list_processes(client: Client, sandbox_id: Optional[str]) -> List[ProcessInfo]:
    """``process.list``: every process of the sandbox, oldest first."""
    processes: List[ProcessInfo] = client.run_op(ops.list_processes(sandbox_id))
    return processes


def find_process(client: Client, sandbox_id: Optional[str], which: Union[int, str]) -> Optional[ProcessInfo]:
    """The process with this in-sandbox pid (an int) or process id (a str): a running one if
    any (pids are reused once a process ended), else the newest."""
    info: Optional[ProcessInfo] = client.run_op(ops.find_process(sandbox_id, which))
    return info


class Pty:
    """``sandbox.pty``: interactive shells on pseudo-terminals."""

    def __init__(self, client: Client, sandbox_id: Optional[str]) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    def create(self, cols: int = 80, rows: int = 24, on_data: Optional[DataCallback] = None, *,
               cwd: Optional[str] = None, envs: Optional[Mapping[str, str]] = None,
               timeout: Optional[float] = None, command: str = "exec bash -i", lane: Optional[str] = None,
               while_paused: Optional[str] = None) -> TerminalHandle:
        """Starts an interactive bash on a ``cols`` x ``rows`` terminal.

        Args:
            on_data: called with the terminal's output bytes as they come (reader thread).
            cwd: working directory.
            envs: extra environment variables; TERM defaults to ``xterm-256color``.
            timeout: seconds before the shell and everything in it is killed (default none).
            command: what runs on the terminal (default an interactive bash).
            lane, while_paused: as for :meth:`Commands.run`.

        Returns:
            A :class:`TerminalHandle`: ``send_input``, ``resize``, ``kill``, ``wait``.
        """
        handle = start_process(self._client, self._sandbox_id, command, cwd=cwd, envs=ops.terminal_env(envs),
                               timeout=timeout, stdin=True, pty=(cols, rows), on_data=on_data, lane=lane,
                               while_paused=while_paused)
        assert isinstance(handle, TerminalHandle)
        return handle
