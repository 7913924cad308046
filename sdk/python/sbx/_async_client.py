"""The asyncio JSON-RPC transport: one connection to an ``sbx serve`` daemon, driven by the
running event loop.

An :class:`AsyncClient` owns either an ``sbx serve --stdio`` child started with
``asyncio.create_subprocess_exec`` or a Unix socket opened with
``asyncio.open_unix_connection``. A reader task splits the server's output into lines and
hands each to the routing shared with the threaded client (:class:`sbx._protocol.RpcCore`);
a completed call resolves its future. Writes go straight to the transport (so a request can
be sent from a ``finally`` or an ``except CancelledError`` without awaiting); ``request``
then awaits the transport's flow control. Everything runs on the loop's thread: the client
must be used from the loop it was made in.
"""
from __future__ import annotations

import asyncio
import os
import subprocess
from typing import Any, Callable, Dict, Generator, List, Optional, Tuple

from ._protocol import INTERNAL_ERROR, CallBase, NotificationHandler, RpcCore, SbxError, connect_error, find_binary

__all__ = ["AsyncClient", "AsyncPendingCall"]

Op = Generator[Tuple[str, Optional[Dict[str, Any]]], Any, Any]

#: Bytes read from the server at a time.
_READ_SIZE = 1 << 20
#: Above this many bytes queued for the server, requests wait for the transport to drain.
_HIGH_WATER = 1 << 20


class AsyncPendingCall(CallBase):
    """One request in flight; :meth:`wait` awaits its answer."""

    __slots__ = ("future",)

    def __init__(self, loop: asyncio.AbstractEventLoop, request_id: int, method: str, size: int,
                 on_notification: Optional[NotificationHandler], unreadable: bool = False,
                 on_done: Optional[Callable[[Any], None]] = None) -> None:
        super().__init__(request_id, method, size, on_notification, unreadable, on_done)
        # Resolved with None once the call completed: the outcome is read from the call, so
        # an unawaited failure logs nothing.
        self.future: "asyncio.Future[None]" = loop.create_future()

    def done(self) -> bool:
        return self.future.done()

    def _wake(self) -> None:
        if not self.future.done():
            self.future.set_result(None)

    async def wait(self, timeout: Optional[float] = None) -> Any:
        """The result; raises the SbxError answered, or TimeoutError after ``timeout`` s.
        Cancelling the awaiting task leaves the call (and its request) as it is."""
        if not self.future.done():
            if timeout is None:
                await asyncio.shield(self.future)
            else:
                try:
                    await asyncio.wait_for(asyncio.shield(self.future), timeout)
                except asyncio.TimeoutError:
                    raise TimeoutError(f"no answer to {self.method} (request {self.request_id}) "
                                       f"within {timeout} s") from None
        return self.outcome()


class AsyncClient(RpcCore):
    """One JSON-RPC connection to an sbx server, for asyncio. Make one with
    ``await AsyncClient.spawn()`` or ``await AsyncClient.connect(path)``; most users want
    :class:`sbx.AsyncSandbox`, which wraps one."""

    def __init__(self, reader: asyncio.StreamReader, writer: Any, *,
                 process: Optional["asyncio.subprocess.Process"] = None, description: str = "sbx") -> None:
        self._core_init(description)
        self._loop = asyncio.get_running_loop()
        self._reader = reader
        self._writer = writer
        self._process = process
        self._drain_lock = asyncio.Lock()
        self._stderr_task: Optional["asyncio.Task[None]"] = None
        if process is not None and process.stderr is not None:
            self._stderr_task = self._loop.create_task(self._drain_stderr(process.stderr))
        self._reader_task = self._loop.create_task(self._read_loop())

    def _new_call(self, request_id: int, method: str, size: int, on_notification: Optional[NotificationHandler],
                  unreadable: bool, on_done: Optional[Callable[[Any], None]]) -> CallBase:
        return AsyncPendingCall(self._loop, request_id, method, size, on_notification, unreadable, on_done)

    # ------------------------------------------------------------ construction

    @classmethod
    async def spawn(cls, binary: Optional[str] = None, args: Optional[List[str]] = None) -> "AsyncClient":
        """Starts ``sbx serve --stdio`` (see :func:`sbx.find_binary`) as an asyncio
        subprocess and connects to it."""
        path = find_binary(binary)
        proc = await asyncio.create_subprocess_exec(path, "serve", "--stdio", *(args or []),
                                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                    stderr=subprocess.PIPE, close_fds=True)
        assert proc.stdout is not None and proc.stdin is not None
        return cls(proc.stdout, proc.stdin, process=proc, description=f"{path} serve --stdio (pid {proc.pid})")

    @classmethod
    async def connect(cls, socket_path: str) -> "AsyncClient":
        """Connects to ``sbx serve --socket socket_path``."""
        try:
            reader, writer = await asyncio.open_unix_connection(os.fspath(socket_path))
        except OSError as e:
            raise connect_error(e, socket_path) from e
        return cls(reader, writer, description=f"sbx socket {socket_path}")

    # ------------------------------------------------------------ properties

    @property
    def pid(self) -> Optional[int]:
        """The spawned server's pid, or None for a socket connection."""
        return self._process.pid if self._process is not None else None

    @property
    def process(self) -> Optional["asyncio.subprocess.Process"]:
        """The spawned server process, or None for a socket connection."""
        return self._process

    # ------------------------------------------------------------ requests

    def send(self, method: str, params: Optional[Dict[str, Any]] = None,
             on_notification: Optional[NotificationHandler] = None,
             on_done: Optional[Callable[[AsyncPendingCall], None]] = None) -> AsyncPendingCall:
        """Writes a request without waiting (not even for flow control); ``await .wait()``
        on the returned call gets its result. ``on_notification`` is called in the reader
        task with the params of every notification naming this request; ``on_done`` with
        the call once it completed, before its waiters wake."""
        call, line = self._register(method, params, on_notification, on_done)
        assert isinstance(call, AsyncPendingCall)
        try:
            if self._writer.is_closing():
                raise ConnectionResetError("the connection is closing")
            self._writer.write(line)
        except (OSError, RuntimeError, ValueError):
            self._forget(call.request_id)
            err = self._dead.copy() if self._dead is not None else None
            raise (err or SbxError(INTERNAL_ERROR, "server exited: " + (self._exit_detail() or "broken pipe"))) \
                from None
        return call

    async def drain(self) -> None:
        """Waits while much is queued for the server (its flow control)."""
        transport = getattr(self._writer, "transport", None)
        if transport is None or transport.get_write_buffer_size() <= _HIGH_WATER:
            return
        async with self._drain_lock:  # one drain() at a time (Python 3.9 allows no more)
            try:
                await self._writer.drain()
            except (OSError, RuntimeError):
                pass  # the reader fails the calls with the server's last words

    async def request(self, method: str, params: Optional[Dict[str, Any]] = None,
                      timeout: Optional[float] = None) -> Any:
        """Sends a request and awaits its result.

        Raises:
            SbxError: the server answered an error, or the connection is gone.
            TimeoutError: ``timeout`` seconds passed first.
        """
        call = self.send(method, params)
        await self.drain()
        result = await call.wait(timeout)
        self._answered(method, params)
        return result

    async def run_op(self, op: Op) -> Any:
        """Runs a protocol operation of :mod:`sbx._ops` (the same code the threaded client
        runs): each request it yields is awaited, its result (or error, or the task's
        cancellation) handed back in."""
        try:
            req = next(op)
            while True:
                try:
                    result = await self.request(*req)
                except BaseException as e:  # noqa: BLE001 - the operation decides
                    req = op.throw(e)
                else:
                    req = op.send(result)
        except StopIteration as stop:
            return stop.value

    # ------------------------------------------------------------ shutdown

    async def close(self, wait_process: float = 5.0) -> None:
        """Closes the connection; a spawned server gets stdin closed (it then exits), is
        awaited ``wait_process`` seconds, then terminated (and killed 5 s later).
        Idempotent."""
        with self._lock:
            self._closing = True
        try:
            self._writer.close()
        except (OSError, RuntimeError):
            pass
        proc = self._process
        if proc is not None:
            try:
                await asyncio.wait_for(proc.wait(), wait_process)
            except asyncio.TimeoutError:
                proc.terminate()
                try:
                    await asyncio.wait_for(proc.wait(), 5)
                except asyncio.TimeoutError:
                    proc.kill()
                    await proc.wait()
        else:
            try:
                await asyncio.wait_for(self._writer.wait_closed(), 5)
            except (OSError, RuntimeError, asyncio.TimeoutError):
                pass
        tasks = [t for t in (self._reader_task, self._stderr_task)
                 if t is not None and t is not asyncio.current_task()]
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        self._fail_all(SbxError(INTERNAL_ERROR, "connection closed"))

    # ------------------------------------------------------------ tasks

    async def _drain_stderr(self, stream: asyncio.StreamReader) -> None:
        while True:
            try:
                raw = await stream.readline()
            except ValueError:  # a line over the reader's limit: its bytes are dropped
                continue
            except OSError:
                return
            if not raw:
                return
            self._stderr.append(raw.decode("utf-8", "replace").rstrip("\n"))

    async def _read_loop(self) -> None:
        buf = bytearray()
        searched = 0  # bytes of buf known to hold no newline
        try:
            while True:
                chunk = await self._reader.read(_READ_SIZE)
                if not chunk:
                    break
                buf += chunk
                start = 0
                while True:
                    nl = buf.find(b"\n", max(start, searched))
                    if nl < 0:
                        break
                    self._dispatch(bytes(buf[start:nl]))
                    start = nl + 1
                if start:
                    del buf[:start]
                searched = len(buf)
        except (OSError, ValueError):
            pass
        await self._on_eof()

    def _exit_detail(self) -> str:
        tail = self.stderr_tail().strip()
        if tail:
            return tail
        proc = self._process
        if proc is not None and proc.returncode is not None:
            return f"exit status {proc.returncode}, nothing on stderr"
        return ""

    async def _on_eof(self) -> None:
        if self._closing:
            err = SbxError(INTERNAL_ERROR, "connection closed")
        elif self._process is not None:
            # Let the process finish and its last stderr words arrive before quoting them.
            try:
                await asyncio.wait_for(self._process.wait(), 2)
            except asyncio.TimeoutError:
                pass
            if self._stderr_task is not None:
                await asyncio.wait([self._stderr_task], timeout=2)
            err = SbxError(INTERNAL_ERROR, "server exited: " + (self._exit_detail() or "stdout closed"))
        else:
            err = SbxError(INTERNAL_ERROR, "server exited: connection closed by the server")
        self._fail_all(err)

    def __repr__(self) -> str:
        return f"<sbx.AsyncClient {self._description}{' closed' if self.closed else ''}>"
