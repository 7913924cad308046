"""Commands, background processes and terminals for asyncio (:class:`sbx.AsyncSandbox`).

The same protocol code as the threaded SDK (:mod:`sbx._ops`, :mod:`sbx._results`); what
differs is waiting, and callbacks: an ``on_stdout`` / ``on_stderr`` / ``on_data`` /
``on_event`` may be a plain function or a coroutine function, and runs in a task of its
handle's own, one call at a time in the order the output came, so it may await SDK calls.
The reader task never waits for a callback.
"""
from __future__ import annotations

import asyncio
import collections
import inspect
from typing import (Any, AsyncIterator, Awaitable, Callable, Deque, Dict, List, Literal, Mapping, Optional, Tuple,
                    Union, overload)

from . import _ops as ops
from ._async_client import AsyncClient, AsyncPendingCall
from ._protocol import INTERNAL_ERROR, SbxError, as_object
from ._results import CommandResult, LogCursor, OutputChunk, ProcessInfo, ProcessResult, TextDecoders, \
    remember_progress

__all__ = ["AsyncCommands", "AsyncCommandHandle", "AsyncSession", "AsyncProcessHandle", "AsyncTerminalHandle",
           "AsyncPty", "AsyncOutputCallback"]

#: Called with each piece of output text; may be a coroutine function.
AsyncOutputCallback = Callable[[str], Union[None, Awaitable[None]]]
#: Called with raw terminal output; may be a coroutine function.
AsyncDataCallback = Callable[[bytes], Union[None, Awaitable[None]]]

#: How long a cancelled run waits for the daemon to confirm that the command stopped.
_CANCEL_WAIT = 5.0


class Deliverer:
    """Calls a handle's callbacks in order, one at a time, in a task of its own, started at
    the first item. The first exception a callback raises stops the delivery and is kept in
    :attr:`error` (raised by the handle's ``wait``)."""

    def __init__(self) -> None:
        self._items: Deque[Tuple[Callable[[Any], Any], Any]] = collections.deque()
        self._wakeup: Optional["asyncio.Future[None]"] = None
        self._closed = False
        self._task: Optional["asyncio.Task[None]"] = None
        self.error: Optional[BaseException] = None

    def push(self, fn: Callable[[Any], Any], arg: Any) -> None:
        if self._closed or self.error is not None:
            return
        self._items.append((fn, arg))
        self._kick()

    def close(self) -> None:
        """Nothing more comes: the task ends once what is queued is delivered."""
        self._closed = True
        self._kick()

    def cancel(self) -> None:
        """Drops what is queued and stops the task."""
        self._closed = True
        self._items.clear()
        if self._task is not None:
            self._task.cancel()

    def _kick(self) -> None:
        if self._task is None:
            if self._items:
                self._task = asyncio.get_running_loop().create_task(self._run())
        elif self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    async def _run(self) -> None:
        while True:
            while self._items:
                fn, arg = self._items.popleft()
                try:
                    r = fn(arg)
                    if inspect.isawaitable(r):
                        await r
                except Exception as e:  # noqa: BLE001 - raised by the handle's wait()
                    self.error = e
                    self._items.clear()
                    return
            if self._closed:
                return
            self._wakeup = asyncio.get_running_loop().create_future()
            await self._wakeup
            self._wakeup = None

    def in_callback(self) -> bool:
        """True when called from one of this deliverer's callbacks."""
        return self._task is not None and self._task is asyncio.current_task()

    async def join(self) -> None:
        """Waits until everything was delivered (after :meth:`close`); raises what a
        callback raised. From inside a callback it does not wait (it would wait for itself)."""
        task = self._task
        if task is not None and not self.in_callback() and not task.done():
            await asyncio.shield(task)
        if self.error is not None:
            raise self.error


def _timeout_error(what: str, timeout: Optional[float]) -> TimeoutError:
    return TimeoutError(f"{what} did not end within {timeout} s")


# ------------------------------------------------------------------ foreground runs


class AsyncCommandHandle:
    """A command sent to the server that may still be running: from
    :meth:`AsyncCommands.start`. ``await wait()`` for its result, ``await cancel()`` to stop
    it. Cancelling a task that awaits :meth:`wait` does not stop the command (cancelling one
    that awaits ``commands.run`` does)."""

    def __init__(self, client: AsyncClient, params: Dict[str, Any], on_stdout: Optional[AsyncOutputCallback],
                 on_stderr: Optional[AsyncOutputCallback]) -> None:
        self._client = client
        self._callbacks: Dict[str, Optional[AsyncOutputCallback]] = {"stdout": on_stdout, "stderr": on_stderr}
        self._decoders = TextDecoders()
        self._deliverer = Deliverer()
        self._result: Optional[CommandResult] = None
        stream = on_stdout is not None or on_stderr is not None
        self._call: AsyncPendingCall = client.send("run", params, on_notification=self._on_output if stream else None,
                                                   on_done=self._on_done)

    def _on_output(self, params: Dict[str, Any]) -> None:
        if self._callbacks.get(str(params.get("stream"))) is None:
            return
        piece = self._decoders.decode(params)
        if piece is not None:
            callback = self._callbacks[piece[0]]
            if callback is not None:
                self._deliverer.push(callback, piece[1])

    def _on_done(self, call: AsyncPendingCall) -> None:
        for name, text in self._decoders.flush():
            callback = self._callbacks[name]
            if callback is not None:
                self._deliverer.push(callback, text)
        self._deliverer.close()

    @property
    def request_id(self) -> int:
        """The JSON-RPC id of the ``run`` request (what ``cancel`` names)."""
        return self._call.request_id

    def done(self) -> bool:
        """True once the server answered (the command finished or was refused)."""
        return self._call.done()

    async def _wait(self) -> CommandResult:
        raw = await self._call.wait()
        await self._deliverer.join()
        result = as_object(raw)
        if result is None:
            raise SbxError(INTERNAL_ERROR, f"malformed run result: {raw!r}")
        self._result = CommandResult.from_wire(result)
        return self._result

    async def wait(self, timeout: Optional[float] = None) -> CommandResult:
        """Awaits the command's end; returns its result (a non-zero exit is a result, not an
        error), once every callback has run. As :meth:`sbx.CommandHandle.wait`.

        Raises:
            SbxError: the server refused the run or went away.
            TimeoutError: ``timeout`` seconds passed first (the command keeps running).
            Exception: what a callback raised first.
        """
        if self._result is not None:
            return self._result
        if timeout is None:
            return await self._wait()
        try:
            return await asyncio.wait_for(self._wait(), timeout)
        except asyncio.TimeoutError:
            raise _timeout_error(f"run (request {self.request_id})", timeout) from None

    async def cancel(self) -> bool:
        """Asks the server to cancel the command (``cancel {requestId}``): its result is then
        exit 125, ``"CANCELLED"``. True when the cancel was accepted, False when the command
        had already finished."""
        if self._call.done():
            return False
        try:
            await self._client.request("cancel", {"requestId": self._call.request_id})
        except SbxError as e:
            # The answer to the run precedes the refusal on the wire, so a finished run is
            # already done here; a dead connection fails the run too.
            if e.code == INTERNAL_ERROR and not self._call.done():
                await asyncio.wait([self._call.future], timeout=1)
            if self._call.done():
                return False
            raise
        return True

    async def _abandon(self) -> None:
        """The task awaiting the run was cancelled: cancels the run in the daemon and waits
        (a little) for its answer, so that the command has stopped when the task ends."""
        self._deliverer.cancel()
        if self._call.done():
            return
        try:
            self._client.send("cancel", {"requestId": self._call.request_id})
        except SbxError:
            return
        await asyncio.wait([self._call.future], timeout=_CANCEL_WAIT)

    def __repr__(self) -> str:
        return f"<sbx.AsyncCommandHandle request {self.request_id} {'done' if self.done() else 'pending'}>"


async def _run(handle: AsyncCommandHandle) -> CommandResult:
    try:
        return await handle.wait()
    except asyncio.CancelledError:
        await handle._abandon()  # pyright: ignore[reportPrivateUsage]
        raise


# ------------------------------------------------------------------ background processes


class AsyncProcessHandle:
    """A background process of a sandbox, from ``await commands.run(cmd, background=True)`` or
    ``await commands.connect(pid)``. As :class:`sbx.ProcessHandle`, with ``await``:
    ``wait()``, ``kill()``, ``wait_for_port()``, ``wait_for_log()``, ``send_stdin()``,
    ``close_stdin()``; ``async for chunk in handle`` yields :class:`~sbx.OutputChunk` s from
    the handle's first until the process ended."""

    def __init__(self, client: AsyncClient, sandbox_id: Optional[str], process_id: str, pid: int, *,
                 on_stdout: Optional[AsyncOutputCallback] = None, on_stderr: Optional[AsyncOutputCallback] = None,
                 on_data: Optional[AsyncDataCallback] = None, resume: bool = False) -> None:
        self._client = client
        self._sandbox_id = sandbox_id
        self._process_id = process_id
        self._pid = pid
        self._text_callbacks: Dict[str, Optional[AsyncOutputCallback]] = {"stdout": on_stdout,
                                                                           "stderr": on_stderr}
        self._on_data = on_data
        self._has_callbacks = on_stdout is not None or on_stderr is not None or on_data is not None
        self._log = LogCursor(sandbox_id, process_id, resume)
        self._finished = False
        self._changed: "asyncio.Future[None]" = asyncio.get_running_loop().create_future()
        self._deliverer = Deliverer()
        self._result: Optional[ProcessResult] = None
        params = ops.with_sandbox(sandbox_id, processId=process_id, cursor=self._log.cursor)
        client.listen_process(process_id, self._take)
        try:
            self._call = client.send("process.stream", params, on_notification=self._take, on_done=self._on_done)
        except BaseException:
            client.unlisten_process(process_id, self._take)
            raise

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
        return self._log.cursor

    @property
    def dropped_bytes(self) -> int:
        """Bytes the daemon's bounded log lost before this handle got them."""
        return self._log.dropped

    @property
    def exit_code(self) -> Optional[int]:
        """The exit code once the process ended (as seen by this handle), else None."""
        return self._log.exit_code()

    def done(self) -> bool:
        """True once the output stream ended (the process ended, or the connection is gone)."""
        return self._finished

    # ------------------------------------------------------------ the stream (reader task)

    def _notify(self) -> None:
        if not self._changed.done():
            self._changed.set_result(None)
        self._changed = asyncio.get_running_loop().create_future()

    def _remember(self, state: Tuple[int, Dict[str, Tuple[bytes, int]]]) -> None:
        remember_progress(self._sandbox_id, self._process_id, state[0], state[1])

    def _take(self, params: Dict[str, Any]) -> None:
        if self._finished or self._deliverer.error is not None:
            return
        pieces = self._log.take(params)
        if "stream" not in params:
            return
        state = (self._log.cursor, self._log.decoder_states())
        if pieces:
            self._notify()
        if not self._has_callbacks:
            self._remember(state)
            return
        for piece in pieces:
            if self._on_data is not None:
                self._deliverer.push(self._on_data, piece.data)
            callback = self._text_callbacks[piece.stream]
            if callback is not None and piece.text:
                self._deliverer.push(callback, piece.text)
        # Only what reached the callbacks counts as delivered.
        self._deliverer.push(self._remember, state)

    def _on_done(self, call: AsyncPendingCall) -> None:
        result = as_object(call.result) if call.error is None else None
        self._log.finished_params(result)
        complete = result is not None and self._deliverer.error is None
        self._client.unlisten_process(self._process_id, self._take)
        tails = self._log.end(complete)
        self._finished = True
        self._notify()
        for name, text in tails.items():
            callback = self._text_callbacks[name]
            if callback is not None:
                self._deliverer.push(callback, text)
        if complete:
            state: Tuple[int, Dict[str, Tuple[bytes, int]]] = (self._log.cursor, {})
            if self._has_callbacks:
                self._deliverer.push(self._remember, state)
            else:
                self._remember(state)
        self._deliverer.close()

    async def _chunks(self) -> AsyncIterator[OutputChunk]:
        i = 0
        while True:
            while i >= len(self._log.chunks) and not self._finished:
                await asyncio.shield(self._changed)
            if i >= len(self._log.chunks):
                break
            chunk = self._log.chunks[i]
            i += 1
            yield chunk
        if self._call.error is not None:
            raise self._call.error.copy()

    def __aiter__(self) -> AsyncIterator[OutputChunk]:
        """Yields the output chunks, from this handle's first until the process ended (any
        number of iterations, each from the first chunk).

        Raises:
            SbxError: the connection went away before the process ended (-32603).
        """
        return self._chunks()

    # ------------------------------------------------------------ waiting

    async def _wait(self) -> ProcessResult:
        raw = await self._call.wait()
        if as_object(raw) is None:
            raise SbxError(INTERNAL_ERROR, f"malformed process.stream result: {raw!r}")
        await self._deliverer.join()
        self._result = self._log.result()
        return self._result

    async def wait(self, timeout: Optional[float] = None) -> ProcessResult:
        """Awaits the process's end and all its output (every callback has run); returns the
        result. A non-zero exit is returned, not raised.

        Raises:
            TimeoutError: ``timeout`` seconds passed first; the process keeps running.
            SbxError: the connection went away (-32603).
            Exception: what a callback raised first.
        """
        if self._result is not None:
            return self._result
        if timeout is None:
            return await self._wait()
        try:
            return await asyncio.wait_for(self._wait(), timeout)
        except asyncio.TimeoutError:
            raise _timeout_error(f"process {self._process_id}", timeout) from None

    def _params(self, **extra: Any) -> Dict[str, Any]:
        return ops.with_sandbox(self._sandbox_id, processId=self._process_id, **extra)

    async def _wait_until(self, until: str, timeout: float, **extra: Any) -> Dict[str, Any]:
        params = self._params(until=until, timeoutMs=ops.seconds_to_ms(timeout), **extra)
        result: Dict[str, Any] = await self._client.run_op(ops.process_wait(params))
        return result

    async def wait_for_log(self, pattern: str, timeout: float = 60.0) -> str:
        """Awaits a line of stdout or stderr matching ``pattern`` (POSIX ERE); returns it.

        Raises:
            ProcessEndedError: the process ended first (-32010).
            WaitTimeoutError: ``timeout`` seconds passed first (-32011).
        """
        return str((await self._wait_until("log", timeout, pattern=pattern)).get("line", ""))

    async def wait_for_port(self, port: int, timeout: float = 60.0) -> None:
        """Awaits something listening on TCP ``port`` inside the sandbox.

        Raises:
            ProcessEndedError: the process ended first (-32010).
            WaitTimeoutError: ``timeout`` seconds passed first (-32011).
        """
        await self._wait_until("port", timeout, port=int(port))

    # ------------------------------------------------------------ control

    async def kill(self, signal: Union[str, int, None] = None, grace: Optional[float] = None) -> bool:
        """Kills the process and everything it started (TERM, then KILL after ``grace``
        seconds, default 2); returns once all of it is dead: True, or False when it had
        already ended."""
        params = self._params(signal=signal, graceMs=None if grace is None else ops.seconds_to_ms(grace))
        return bool(await self._client.run_op(ops.kill_process(self._sandbox_id, self._process_id, params)))

    async def send_stdin(self, data: Union[str, bytes]) -> None:
        """Writes to the process's stdin (text as UTF-8); it must have been started with
        ``stdin=True``."""
        await self._client.run_op(ops.call("process.write", self._params(data=ops.b64(data))))

    async def close_stdin(self) -> None:
        """Closes the process's stdin (it reads end of file)."""
        await self._client.run_op(ops.call("process.closeStdin", self._params()))

    def __repr__(self) -> str:
        state = "done" if self.done() else "running"
        return f"<sbx.{type(self).__name__} {self._process_id} pid {self._pid} {state}>"


class AsyncTerminalHandle(AsyncProcessHandle):
    """An interactive shell on a pseudo-terminal, from ``await sandbox.pty.create()``."""

    async def send_input(self, data: Union[str, bytes]) -> None:
        """Types ``data`` into the terminal (``"\\x03"`` is Ctrl-C)."""
        await self.send_stdin(data)

    async def resize(self, cols: int, rows: int) -> None:
        """Changes the terminal's size (the program gets SIGWINCH)."""
        await self._client.run_op(ops.call("process.resize", self._params(cols=int(cols), rows=int(rows))))


async def start_process(client: AsyncClient, sandbox_id: Optional[str], cmd: str, *, cwd: Optional[str] = None,
                        envs: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
                        stdin: Union[bool, bytes, str, None] = None, session: Optional[str] = None,
                        label: Optional[str] = None, pty: Optional[Tuple[int, int]] = None,
                        on_stdout: Optional[AsyncOutputCallback] = None,
                        on_stderr: Optional[AsyncOutputCallback] = None,
                        on_data: Optional[AsyncDataCallback] = None, lane: Optional[str] = None,
                        while_paused: Optional[str] = None) -> AsyncProcessHandle:
    """``process.start``, then a handle streaming its output (as the threaded
    :func:`sbx.processes.start_process`)."""
    params = ops.process_start_params(sandbox_id, cmd, cwd=cwd, envs=envs, timeout=timeout, stdin=stdin,
                                      session=session, label=label, pty=pty, lane=lane, while_paused=while_paused)
    result = await client.request("process.start", params)
    cls = AsyncTerminalHandle if pty is not None else AsyncProcessHandle
    handle = cls(client, sandbox_id, str(result["processId"]), int(result["pid"]), on_stdout=on_stdout,
                 on_stderr=on_stderr, on_data=on_data)
    data = ops.initial_stdin(stdin)
    if data is not None:
        if data:
            await handle.send_stdin(data)
        await handle.close_stdin()
    return handle


# ------------------------------------------------------------------ namespaces


class AsyncCommands:
    """``sandbox.commands`` of an :class:`~sbx.AsyncSandbox`: as :class:`sbx.Commands`, awaited."""

    def __init__(self, client: AsyncClient, sandbox_id: Optional[str]) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    async def start(self, cmd: str, *, cwd: Optional[str] = None, envs: Optional[Mapping[str, str]] = None,
                    timeout: Optional[float] = None, stdin: Union[bytes, str, None] = None,
                    on_stdout: Optional[AsyncOutputCallback] = None, on_stderr: Optional[AsyncOutputCallback] = None,
                    session: Optional[str] = None, leftovers: Optional[str] = None, lane: Optional[str] = None,
                    while_paused: Optional[str] = None) -> AsyncCommandHandle:
        """Sends a ``run`` and returns its :class:`AsyncCommandHandle` at once."""
        params = ops.run_params(self._sandbox_id, cmd, cwd=cwd, envs=envs, timeout=timeout, stdin=stdin,
                                stream=on_stdout is not None or on_stderr is not None, session=session,
                                leftovers=leftovers, lane=lane, while_paused=while_paused)
        handle = AsyncCommandHandle(self._client, params, on_stdout, on_stderr)
        await self._client.drain()
        return handle

    @overload
    async def run(self, cmd: str, *, background: Literal[False] = False, cwd: Optional[str] = None,
                  envs: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
                  stdin: Union[bytes, str, None] = None, on_stdout: Optional[AsyncOutputCallback] = None,
                  on_stderr: Optional[AsyncOutputCallback] = None, session: Optional[str] = None,
                  leftovers: Optional[str] = None, lane: Optional[str] = None,
                  while_paused: Optional[str] = None) -> CommandResult: ...

    @overload
    async def run(self, cmd: str, *, background: Literal[True], cwd: Optional[str] = None,
                  envs: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
                  stdin: Union[bool, bytes, str, None] = None, on_stdout: Optional[AsyncOutputCallback] = None,
                  on_stderr: Optional[AsyncOutputCallback] = None, session: Optional[str] = None,
                  label: Optional[str] = None, lane: Optional[str] = None,
                  while_paused: Optional[str] = None) -> AsyncProcessHandle: ...

    async def run(self, cmd: str, *, background: bool = False, cwd: Optional[str] = None,
                  envs: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
                  stdin: Union[bool, bytes, str, None] = None, on_stdout: Optional[AsyncOutputCallback] = None,
                  on_stderr: Optional[AsyncOutputCallback] = None, session: Optional[str] = None,
                  leftovers: Optional[str] = None, label: Optional[str] = None, lane: Optional[str] = None,
                  while_paused: Optional[str] = None) -> Union[CommandResult, AsyncProcessHandle]:
        """Runs a command and awaits its result, or with ``background=True`` starts a
        background process and returns its :class:`AsyncProcessHandle`; arguments as
        :meth:`sbx.Commands.run`. Callbacks may be coroutine functions.

        Cancelling the task awaiting a foreground run (``task.cancel()``,
        ``asyncio.wait_for``, ``asyncio.timeout``) cancels the run in the daemon (``cancel``)
        and waits for it to stop before the CancelledError goes on.
        """
        stdin = ops.check_run_mode(background, stdin, leftovers, label)
        if background:
            return await start_process(self._client, self._sandbox_id, cmd, cwd=cwd, envs=envs, timeout=timeout,
                                       stdin=stdin, session=session, label=label, on_stdout=on_stdout,
                                       on_stderr=on_stderr, lane=lane, while_paused=while_paused)
        assert not isinstance(stdin, bool)
        handle = await self.start(cmd, cwd=cwd, envs=envs, timeout=timeout, stdin=stdin, on_stdout=on_stdout,
                                  on_stderr=on_stderr, session=session, leftovers=leftovers, lane=lane,
                                  while_paused=while_paused)
        return await _run(handle)

    async def list(self) -> List[ProcessInfo]:
        """The sandbox's background processes (``process.list``), oldest first."""
        processes: List[ProcessInfo] = await self._client.run_op(ops.list_processes(self._sandbox_id))
        return processes

    async def kill(self, pid: Union[int, str], signal: Union[str, int, None] = None) -> bool:
        """Kills a background process (and its tree) by its pid in the sandbox (or process
        id); False when no running process has that pid."""
        return bool(await self._client.run_op(ops.kill_by_pid(self._sandbox_id, pid, signal)))

    async def kill_leftovers(self) -> int:
        """As :meth:`sbx.Commands.kill_leftovers`."""
        return int(await self._client.run_op(ops.kill_leftovers(self._sandbox_id)))

    async def connect(self, pid: Union[int, str], on_stdout: Optional[AsyncOutputCallback] = None,
                      on_stderr: Optional[AsyncOutputCallback] = None) -> AsyncProcessHandle:
        """A handle on a background process by its pid, resuming its output where this
        Python process last delivered it (as :meth:`sbx.Commands.connect`)."""
        info: ProcessInfo = await self._client.run_op(ops.connectable(self._sandbox_id, pid))
        cls = AsyncTerminalHandle if info.pty else AsyncProcessHandle
        return cls(self._client, self._sandbox_id, info.process_id, info.pid, on_stdout=on_stdout,
                   on_stderr=on_stderr, resume=True)


class AsyncSession:
    """A named shell session of an :class:`~sbx.AsyncSandbox` (as :class:`sbx.Session`)."""

    def __init__(self, client: AsyncClient, sandbox_id: Optional[str], name: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id
        self.name: str = name

    async def start(self, cmd: str, *, cwd: Optional[str] = None, envs: Optional[Mapping[str, str]] = None,
                    timeout: Optional[float] = None, stdin: Union[bytes, str, None] = None,
                    on_stdout: Optional[AsyncOutputCallback] = None, on_stderr: Optional[AsyncOutputCallback] = None,
                    leftovers: Optional[str] = None, lane: Optional[str] = None,
                    while_paused: Optional[str] = None) -> AsyncCommandHandle:
        """Starts a command in this session."""
        return await AsyncCommands(self._client, self._sandbox_id).start(
            cmd, cwd=cwd, envs=envs, timeout=timeout, stdin=stdin, on_stdout=on_stdout, on_stderr=on_stderr,
            session=self.name, leftovers=leftovers, lane=lane, while_paused=while_paused)

    async def run(self, cmd: str, *, cwd: Optional[str] = None, envs: Optional[Mapping[str, str]] = None,
                  timeout: Optional[float] = None, stdin: Union[bytes, str, None] = None,
                  on_stdout: Optional[AsyncOutputCallback] = None, on_stderr: Optional[AsyncOutputCallback] = None,
                  leftovers: Optional[str] = None, lane: Optional[str] = None,
                  while_paused: Optional[str] = None) -> CommandResult:
        """Runs a command in this session and awaits it (cancelling the task cancels it)."""
        handle = await self.start(cmd, cwd=cwd, envs=envs, timeout=timeout, stdin=stdin, on_stdout=on_stdout,
                                  on_stderr=on_stderr, leftovers=leftovers, lane=lane, while_paused=while_paused)
        return await _run(handle)

    async def delete(self) -> None:
        """Ends the session; its running command is cancelled."""
        await self._client.run_op(ops.call("session.delete", ops.with_sandbox(self._sandbox_id, name=self.name)))

    async def history(self) -> List[Dict[str, Any]]:
        """Commands run in this session, oldest first."""
        entries: List[Dict[str, Any]] = await self._client.run_op(ops.history(self._sandbox_id, self.name))
        return entries

    async def clear_history(self) -> None:
        """Forgets this session's history."""
        await self._client.run_op(ops.call("shell.history.clear",
                                           ops.with_sandbox(self._sandbox_id, session=self.name)))

    def __repr__(self) -> str:
        return f"<sbx.AsyncSession {self.name!r}>"


class AsyncPty:
    """``sandbox.pty`` of an :class:`~sbx.AsyncSandbox`: interactive shells on terminals."""

    def __init__(self, client: AsyncClient, sandbox_id: Optional[str]) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    async def create(self, cols: int = 80, rows: int = 24, on_data: Optional[AsyncDataCallback] = None, *,
                     cwd: Optional[str] = None, envs: Optional[Mapping[str, str]] = None,
                     timeout: Optional[float] = None, command: str = "exec bash -i", lane: Optional[str] = None,
                     while_paused: Optional[str] = None) -> AsyncTerminalHandle:
        """Starts an interactive bash on a ``cols`` x ``rows`` terminal (as
        :meth:`sbx.Pty.create`)."""
        handle = await start_process(self._client, self._sandbox_id, command, cwd=cwd,
                                     envs=ops.terminal_env(envs), timeout=timeout, stdin=True, pty=(cols, rows),
                                     on_data=on_data, lane=lane, while_paused=while_paused)
        assert isinstance(handle, AsyncTerminalHandle)
        return handle
