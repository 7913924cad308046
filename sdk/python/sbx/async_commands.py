"""Commands and named sessions for asyncio (:class:`sbx.AsyncSandbox`): as :mod:`sbx.commands`,
awaited.

The same protocol code as the threaded SDK (:mod:`sbx._ops`, :mod:`sbx._results`); what
differs is waiting, and callbacks: an ``on_stdout`` / ``on_stderr`` may be a plain function
or a coroutine function, and runs in a task of its handle's own
(:class:`sbx._callbacks.Deliverer`), one call at a time in the order the output came, so it
may await SDK calls. Background processes and terminals are in :mod:`sbx.async_processes`.
"""
from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Literal, Mapping, Optional, Union, overload

from . import _ops as ops
from ._async_client import AsyncClient, AsyncPendingCall
from ._callbacks import AsyncOutputCallback, Deliverer, wait_within
from ._protocol import INTERNAL_ERROR, SbxError, as_object
from ._results import CommandResult, ProcessInfo, TextDecoders
from ._results import OutputChunk, ProcessResult  # noqa: F401 - for importers that found them here
from .async_processes import AsyncProcessHandle, AsyncTerminalHandle, start_process
from .async_processes import AsyncDataCallback, AsyncPty  # noqa: F401 - for importers that found them here

# The process classes stay listed: ``from sbx.async_commands import *`` gave them.
__all__ = ["AsyncCommands", "AsyncCommandHandle", "AsyncSession", "AsyncProcessHandle", "AsyncTerminalHandle",
           "AsyncPty", "AsyncOutputCallback"]

#: How long a cancelled run waits for the daemon to confirm that the command stopped.
_CANCEL_WAIT = 5.0


# ------------------------------------------------------------------ handles

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
        return await wait_within(self._wait, timeout, f"run (request {self.request_id})")

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
