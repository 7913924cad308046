"""The threaded JSON-RPC transport: one connection to an ``sbx serve`` daemon.

A :class:`Client` owns either a spawned ``sbx serve --stdio`` process or a Unix socket
connection to ``sbx serve --socket PATH``. Requests are newline-delimited JSON-RPC 2.0
lines with integer ids from a counter; a background reader thread hands every line to the
routing shared with the asyncio client (:class:`sbx._protocol.RpcCore`): every answer to the
request waiting for it, every ``output`` notification to the run that asked for streaming
(by its ``requestId``), and every ``process.output`` / ``process.exit`` / ``files.event``
notification, which names no request, to the listeners of its ``processId`` / ``watchId``.
An error answer that names no waiting request (the server answers a line it cannot read,
e.g. one with a NUL character, with ``"id": null``) still fails one: see
:meth:`RpcCore._unmatched_call`. Writes are serialised by a lock, so a client may be used
from many threads.

The server's stderr (stdio mode) is drained by a second thread into a bounded buffer of
recent lines; when the server dies, every waiter gets
``SbxError(-32603, "server exited: <stderr tail>")``.
"""
from __future__ import annotations

import os
import socket
import subprocess
import threading
from typing import IO, Any, Callable, Dict, Generator, List, Optional, Tuple, TypeVar

from ._protocol import (DEFAULT_RPC_BYTES, connect_error, INTERNAL_ERROR, PARSE_ERROR, PROCESS_ENDED, WAIT_TIMEOUT, CallBase,
                        NotificationHandler, ProcessEndedError, RpcCore, SbxError, WaitTimeoutError, as_object,
                        find_binary)

__all__ = ["SbxError", "ProcessEndedError", "WaitTimeoutError", "Client", "PendingCall", "find_binary",
           "as_object", "INTERNAL_ERROR", "PROCESS_ENDED", "WAIT_TIMEOUT", "DEFAULT_RPC_BYTES", "PARSE_ERROR"]

T = TypeVar("T")
#: A protocol operation of :mod:`sbx._ops`: yields (method, params), gets each result back.
Op = Generator[Tuple[str, Optional[Dict[str, Any]]], Any, T]


class PendingCall(CallBase):
    """One request in flight: its answer, once it came, and its notification handler."""

    __slots__ = ("event",)

    def __init__(self, request_id: int, method: str, size: int,
                 on_notification: Optional[NotificationHandler], unreadable: bool = False,
                 on_done: Optional[Callable[["PendingCall"], None]] = None) -> None:
        super().__init__(request_id, method, size, on_notification, unreadable, on_done)
        self.event = threading.Event()

    def done(self) -> bool:
        return self.event.is_set()

    def _wake(self) -> None:
        self.event.set()

    def wait(self, timeout: Optional[float] = None) -> Any:
        """The result; raises the SbxError answered, or TimeoutError after ``timeout`` s."""
        if not self.event.wait(timeout):
            raise TimeoutError(f"no answer to {self.method} (request {self.request_id}) within {timeout} s")
        return self.outcome()


class Client(RpcCore):
    """One JSON-RPC connection to an sbx server. Thread-safe.

    Use :meth:`spawn` or :meth:`connect` to make one. Most users want :class:`sbx.Sandbox`,
    which wraps a client.
    """

    def __init__(self, reader: IO[bytes], write: Callable[[bytes], None], close: Callable[[], None], *,
                 process: Optional["subprocess.Popen[bytes]"] = None, description: str = "sbx") -> None:
        self._core_init(description)
        self._reader = reader
        self._write = write
        self._close_transport = close
        self._process = process
        self._write_lock = threading.Lock()  # one line at a time on the wire
        self._stderr_thread: Optional[threading.Thread] = None
        if process is not None and process.stderr is not None:
            self._stderr_thread = threading.Thread(target=self._drain_stderr, args=(process.stderr,),
                                                   name="sbx-stderr", daemon=True)
            self._stderr_thread.start()
        self._reader_thread = threading.Thread(target=self._read_loop, name="sbx-reader", daemon=True)
        self._reader_thread.start()

    def _new_call(self, request_id: int, method: str, size: int, on_notification: Optional[NotificationHandler],
                  unreadable: bool, on_done: Optional[Callable[[Any], None]]) -> CallBase:
        return PendingCall(request_id, method, size, on_notification, unreadable, on_done)

    # ------------------------------------------------------------ construction

    @classmethod
    def spawn(cls, binary: Optional[str] = None, args: Optional[List[str]] = None) -> "Client":
        """Starts ``sbx serve --stdio`` (see :func:`find_binary`) and connects to it."""
        path = find_binary(binary)
        argv = [path, "serve", "--stdio", *(args or [])]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                close_fds=True)
        assert proc.stdin is not None and proc.stdout is not None
        stdin = proc.stdin

        def write(data: bytes) -> None:
            stdin.write(data)
            stdin.flush()

        def close() -> None:
            try:
                stdin.close()
            except OSError:
                pass

        return cls(proc.stdout, write, close, process=proc, description=f"{path} serve --stdio (pid {proc.pid})")

    @classmethod
    def connect(cls, socket_path: str) -> "Client":
        """Connects to ``sbx serve --socket socket_path``."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(os.fspath(socket_path))
        except OSError as e:
            sock.close()
            raise connect_error(e, socket_path) from e
        except BaseException:
            sock.close()
            raise
        reader = sock.makefile("rb")

        def close() -> None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

        return cls(reader, sock.sendall, close, description=f"sbx socket {socket_path}")

    # ------------------------------------------------------------ properties

    @property
    def pid(self) -> Optional[int]:
        """The spawned server's pid, or None for a socket connection."""
        return self._process.pid if self._process is not None else None

    @property
    def process(self) -> Optional["subprocess.Popen[bytes]"]:
        """The spawned server process, or None for a socket connection."""
        return self._process

    def on_reader_thread(self) -> bool:
        """True when called from the reader thread (inside an output callback)."""
        return threading.current_thread() is self._reader_thread

    # ------------------------------------------------------------ requests

    def send(self, method: str, params: Optional[Dict[str, Any]] = None,
             on_notification: Optional[NotificationHandler] = None,
             on_done: Optional[Callable[[PendingCall], None]] = None) -> PendingCall:
        """Sends a request without waiting; ``.wait()`` on the returned call gets its result.

        ``on_notification`` is called on the reader thread with the params of every
        notification whose ``requestId`` is this request's id. ``on_done`` is called with
        the call once the answer is in (on the reader thread) or the connection is gone (on the thread
        that noticed), before ``.wait()`` returns.
        """
        call, line = self._register(method, params, on_notification, on_done)
        assert isinstance(call, PendingCall)
        try:
            with self._write_lock:
                self._write(line)
        except (OSError, ValueError):
            self._forget(call.request_id)
            # The reader is about to see the end too: its error quotes the server's stderr.
            if not self.on_reader_thread():
                self._reader_thread.join(3)
            err = self._dead.copy() if self._dead is not None else None
            if err is None:
                err = SbxError(INTERNAL_ERROR, "server exited: " + (self._exit_detail() or "broken pipe"))
            raise err from None
        return call

    def request(self, method: str, params: Optional[Dict[str, Any]] = None,
                timeout: Optional[float] = None) -> Any:
        """Sends a request and waits for its result.

        Raises:
            SbxError: the server answered an error, or the connection is gone.
            RuntimeError: called from an output callback (the reader thread would wait
                for itself).
        """
        if self.on_reader_thread():
            raise RuntimeError("sbx: blocking requests cannot be made from an output callback")
        result = self.send(method, params).wait(timeout)
        self._answered(method, params)
        return result

    def run_op(self, op: "Op[T]") -> T:
        """Runs a protocol operation of :mod:`sbx._ops` (the code the asyncio client runs
        too): each request it yields is made, its result (or error) handed back in."""
        try:
            req = next(op)
            while True:
                try:
                    result = self.request(*req)
                except BaseException as e:  # noqa: BLE001 - the operation decides
                    req = op.throw(e)
                else:
                    req = op.send(result)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    # ------------------------------------------------------------ shutdown

    def close(self, wait_process: float = 5.0) -> None:
        """Closes the connection; a spawned server gets stdin closed (it then exits), is
        waited for ``wait_process`` seconds, then terminated (and killed 5 s later).
        Idempotent."""
        with self._lock:
            self._closing = True
        self._close_transport()
        proc = self._process
        if proc is not None:
            try:
                proc.wait(wait_process)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if not self.on_reader_thread():
            self._reader_thread.join(5)
        if self._stderr_thread is not None and threading.current_thread() is not self._stderr_thread:
            self._stderr_thread.join(5)
        self._fail_all(SbxError(INTERNAL_ERROR, "connection closed"))
        for f in (self._reader, getattr(proc, "stdout", None), getattr(proc, "stderr", None)):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass

    # ------------------------------------------------------------ threads

    def _drain_stderr(self, stream: IO[bytes]) -> None:
        try:
            for raw in iter(stream.readline, b""):
                self._stderr.append(raw.decode("utf-8", "replace").rstrip("\n"))
        except (OSError, ValueError):
            pass

    def _read_loop(self) -> None:
        try:
            while True:
                line = self._reader.readline()
                if not line:
                    break
                self._dispatch(line)
        except (OSError, ValueError):
            pass
        self._on_eof()

    def _exit_detail(self) -> str:
        tail = self.stderr_tail().strip()
        if tail:
            return tail
        proc = self._process
        if proc is not None and proc.poll() is not None:
            return f"exit status {proc.returncode}, nothing on stderr"
        return ""

    def _on_eof(self) -> None:
        if self._closing:
            err = SbxError(INTERNAL_ERROR, "connection closed")
        elif self._process is not None:
            # Let the process finish and its last stderr words arrive before quoting them.
            try:
                self._process.wait(2)
            except subprocess.TimeoutExpired:
                pass
            if self._stderr_thread is not None:
                self._stderr_thread.join(2)
            err = SbxError(INTERNAL_ERROR, "server exited: " + (self._exit_detail() or "stdout closed"))
        else:
            err = SbxError(INTERNAL_ERROR, "server exited: connection closed by the server")
        self._fail_all(err)

    def __repr__(self) -> str:
        return f"<sbx.Client {self._description}{' closed' if self.closed else ''}>"
