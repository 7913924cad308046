"""Background processes and terminals for asyncio: ``await commands.run(..., background=True)``,
``commands.connect`` and ``sandbox.pty`` of an :class:`~sbx.AsyncSandbox`.

As :mod:`sbx.processes`, awaited; the same protocol code (:mod:`sbx._ops`,
:class:`sbx._results.LogCursor`). Callbacks may be coroutine functions and run in a task of
their handle's own (:class:`sbx._callbacks.Deliverer`).
"""
from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, Mapping, Optional, Tuple, Union

from . import _ops as ops
from ._async_client import AsyncClient, AsyncPendingCall
from ._callbacks import AsyncOutputCallback, Deliverer, wait_within
from ._protocol import INTERNAL_ERROR, SbxError, as_object
from ._results import LogCursor, OutputChunk, ProcessResult, remember_progress

__all__ = ["AsyncProcessHandle", "AsyncTerminalHandle", "AsyncPty", "AsyncDataCallback", "start_process"]

#: Called with raw terminal output; may be a coroutine function.
AsyncDataCallback = Callable[[bytes], Union[None, Awaitable[None]]]


# ------------------------------------------------------------------ handles

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
        return await wait_within(self._wait, timeout, f"process {self._process_id}")

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


# ------------------------------------------------------------------ starting

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
