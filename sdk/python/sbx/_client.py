"""The JSON-RPC transport: one connection to an ``sbx serve`` daemon.

A :class:`Client` owns either a spawned ``sbx serve --stdio`` process or a Unix socket
connection to ``sbx serve --socket PATH``. Requests are newline-delimited JSON-RPC 2.0
lines with integer ids from a counter; a background reader thread routes every answer to
the request waiting for it, every ``output`` notification to the run that asked for
streaming (by its ``requestId``), and every ``process.output`` / ``process.exit``
notification, which names no request, to the listeners of its ``processId``. An error answer that names no waiting request (the server answers a line it
cannot read, e.g. one with a NUL character, with ``"id": null``) still fails one: see
:meth:`Client._unmatched_call`. Writes are serialised by a lock, so a client may be used
from many threads.

The server's stderr (stdio mode) is drained by a second thread into a bounded buffer of
recent lines; when the server dies, every waiter gets
``SbxError(-32603, "server exited: <stderr tail>")``.
"""
from __future__ import annotations

import collections
import json
import math
import os
import re
import shutil
import socket
import subprocess
import threading
from pathlib import Path
from typing import IO, Any, Callable, Deque, Dict, List, Optional, cast

__all__ = ["SbxError", "ProcessEndedError", "WaitTimeoutError", "Client", "PendingCall", "find_binary",
           "as_object", "INTERNAL_ERROR", "PROCESS_ENDED", "WAIT_TIMEOUT"]

#: JSON-RPC "internal error": also used for a dead server or a closed connection.
INTERNAL_ERROR = -32603

#: How many of the server's last stderr lines are kept for error messages.
_STDERR_LINES = 50
#: At most this many characters of them go into one error message.
_STDERR_CHARS = 4000
#: ``process.wait``: the process ended before the awaited log line or port showed up.
PROCESS_ENDED = -32010
#: ``process.wait``: its ``timeoutMs`` passed before the condition held.
WAIT_TIMEOUT = -32011
#: The server's default limit on one request line (``limits.rpcBytes``), newline excluded.
DEFAULT_RPC_BYTES = 8 << 20
#: JSON-RPC parse error: the server's answer to a line it cannot parse or that is over
#: ``limits.rpcBytes``; sent with ``"id": null``.
PARSE_ERROR = -32700

NotificationHandler = Callable[[Dict[str, Any]], None]


class SbxError(Exception):
    """A JSON-RPC error answered by the server, or a lost connection.

    Attributes:
        code: the JSON-RPC error code (``-32602`` invalid params, ``-32600`` invalid
            request, ``-32601`` unknown method, ``-32603`` internal error, ``-32001``
            a server cap was reached, ``1`` a sandbox or file error). A server that died,
            or a connection that was closed, gives ``-32603``.
        message: the server's message.
        data: the error's optional ``data`` member.
    """

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(code, message)
        self.code: int = code
        self.message: str = message
        self.data: Any = data

    def __str__(self) -> str:
        return f"{self.message} (code {self.code})"

    def __repr__(self) -> str:
        return f"SbxError({self.code!r}, {self.message!r})"

    def copy(self) -> "SbxError":
        """A fresh instance of the same class with the same code, message and data (one
        error may be raised in many threads; each gets its own traceback)."""
        return type(self)(self.code, self.message, self.data)


class ProcessEndedError(SbxError):
    """``process.wait`` (``wait_for_log``, ``wait_for_port``): the process ended before the
    condition held (code -32010, message ``PROCESS_ENDED: ...``)."""


class WaitTimeoutError(SbxError):
    """``process.wait`` (``wait_for_log``, ``wait_for_port``): the wait's timeout passed
    first (code -32011, message ``WAIT_TIMEOUT: ...``). The process keeps running."""


_ERROR_CLASSES = {PROCESS_ENDED: ProcessEndedError, WAIT_TIMEOUT: WaitTimeoutError}


def _repo_binary() -> Path:
    # <repo>/sdk/python/sbx/_client.py -> <repo>/build/src/cli/sbx
    return Path(__file__).resolve().parents[3] / "build" / "src" / "cli" / "sbx"


def find_binary(binary: Optional[str] = None) -> str:
    """Returns the path of the ``sbx`` binary to run.

    In order: ``binary`` if given, else ``$SBX_BIN``, else ``sbx`` on ``$PATH``, else the
    repository's build output ``<repo>/build/src/cli/sbx`` (found relative to this file, so
    only when the SDK is used from a checkout).

    Raises:
        FileNotFoundError: none of these exists.
    """
    if binary:
        return str(binary)
    env = os.environ.get("SBX_BIN")
    if env:
        return env
    on_path = shutil.which("sbx")
    if on_path:
        return on_path
    repo = _repo_binary()
    if repo.is_file() and os.access(repo, os.X_OK):
        return str(repo)
    raise FileNotFoundError(
        "cannot find the sbx binary: pass binary=..., set $SBX_BIN, put sbx on $PATH "
        f"or build the repository ({repo} does not exist)")


_TOO_LARGE = re.compile(r"Request too large \(limit (\d+) bytes\)")

#: The integers the server's JSON parser reads (a C int64).
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 63) - 1


def _unreadable(value: Any) -> bool:
    """Whether the server's JSON parser would reject ``value``, so that the server could not
    read the id of a request carrying it: a NUL character in a string or a key, a float that
    is not finite (sent as NaN or Infinity), or an integer outside int64."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, int):
        return not _INT_MIN <= value <= _INT_MAX
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_unreadable(k) or _unreadable(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_unreadable(v) for v in value)
    return False


def _error_of(msg: Dict[str, Any]) -> Optional[SbxError]:
    """The SbxError an answer carries, or None for a result."""
    if "error" not in msg:
        return None
    err = as_object(msg["error"])
    if err is None:
        return SbxError(INTERNAL_ERROR, f"malformed error from the server: {msg['error']!r}")
    code = err.get("code")
    if not isinstance(code, int) or isinstance(code, bool):
        code = INTERNAL_ERROR
    return _ERROR_CLASSES.get(code, SbxError)(code, str(err.get("message", "")), err.get("data"))


def as_object(value: Any) -> Optional[Dict[str, Any]]:
    """``value`` if it is a JSON object (a dict), else None."""
    return cast(Dict[str, Any], value) if isinstance(value, dict) else None


def _rpc_bytes_param(params: Dict[str, Any]) -> Optional[int]:
    """limits.rpcBytes of create / sandbox.create params, when the server would apply it."""
    limits = as_object(params.get("limits"))
    if limits is None:
        return None
    value = limits.get("rpcBytes")
    if isinstance(value, int) and not isinstance(value, bool) and 1024 <= value <= 1 << 30:
        return value
    return None


class PendingCall:
    """One request in flight: its answer, once it came, and its notification handler."""

    __slots__ = ("request_id", "method", "size", "unreadable", "on_notification", "on_done", "event", "result",
                 "error", "callback_error")

    def __init__(self, request_id: int, method: str, size: int,
                 on_notification: Optional[NotificationHandler], unreadable: bool = False,
                 on_done: Optional[Callable[["PendingCall"], None]] = None) -> None:
        self.request_id = request_id
        self.method = method
        self.size = size  # bytes of the request line, newline excluded
        # The server's parser rejects the request (see _unreadable): it answers without an id.
        self.unreadable = unreadable
        self.on_notification = on_notification
        # Called with this call once the answer (or the connection's end) is in, before
        # waiters wake.
        self.on_done = on_done
        self.event = threading.Event()
        self.result: Any = None
        self.error: Optional[SbxError] = None
        # The first exception raised by on_notification; re-raised by wait().
        self.callback_error: Optional[BaseException] = None

    def done(self) -> bool:
        return self.event.is_set()

    def complete(self) -> None:
        """Runs on_done (an exception it raises goes to the waiter), then wakes waiters."""
        if self.on_done is not None and not self.event.is_set():
            try:
                self.on_done(self)
            except BaseException as e:  # noqa: BLE001 - handed to the waiter
                if self.callback_error is None:
                    self.callback_error = e
        self.event.set()

    def wait(self, timeout: Optional[float] = None) -> Any:
        """The result; raises the SbxError answered, or TimeoutError after ``timeout`` s."""
        if not self.event.wait(timeout):
            raise TimeoutError(f"no answer to {self.method} (request {self.request_id}) within {timeout} s")
        if self.error is not None:
            raise self.error.copy()
        if self.callback_error is not None:
            raise self.callback_error
        return self.result


class Client:
    """One JSON-RPC connection to an sbx server. Thread-safe.

    Use :meth:`spawn` or :meth:`connect` to make one. Most users want :class:`sbx.Sandbox`,
    which wraps a client.
    """

    def __init__(self, reader: IO[bytes], write: Callable[[bytes], None], close: Callable[[], None], *,
                 process: Optional["subprocess.Popen[bytes]"] = None, description: str = "sbx") -> None:
        self._reader = reader
        self._write = write
        self._close_transport = close
        self._process = process
        self._description = description
        self._lock = threading.Lock()  # guards _calls, _next_id, _dead, _closing
        self._write_lock = threading.Lock()  # one line at a time on the wire
        self._calls: Dict[int, PendingCall] = {}
        self._process_listeners: Dict[str, List[NotificationHandler]] = {}
        self._next_id = 1
        self._dead: Optional[SbxError] = None
        self._closing = False
        # What the server takes as one line on this connection (create and sandbox.create
        # may change it with limits.rpcBytes). Longer requests are refused here: the server
        # would answer them with id null (see _unmatched_call).
        self._rpc_limit = DEFAULT_RPC_BYTES
        self._stderr: Deque[str] = collections.deque(maxlen=_STDERR_LINES)
        self._stderr_thread: Optional[threading.Thread] = None
        if process is not None and process.stderr is not None:
            self._stderr_thread = threading.Thread(target=self._drain_stderr, args=(process.stderr,),
                                                   name="sbx-stderr", daemon=True)
            self._stderr_thread.start()
        self._reader_thread = threading.Thread(target=self._read_loop, name="sbx-reader", daemon=True)
        self._reader_thread.start()

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

    @property
    def closed(self) -> bool:
        """True once the connection is gone (closed by us, or the server went away)."""
        return self._dead is not None

    @property
    def rpc_limit(self) -> int:
        """The longest request line the server accepts on this connection, in bytes
        (``limits.rpcBytes``, default 8 MiB). Longer requests raise ``SbxError(-32700)``
        without being sent."""
        return self._rpc_limit

    def stderr_tail(self) -> str:
        """The server's most recent stderr lines (stdio mode; empty for a socket)."""
        text = "\n".join(self._stderr)
        return text[-_STDERR_CHARS:]

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
        # Encoded first: a value that cannot be sent (say a lone surrogate) fails here,
        # before anything is registered or written.
        head = b'{"jsonrpc":"2.0","method":' + json.dumps(method).encode("utf-8")
        if params:
            head += b',"params":' + json.dumps(params, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        unreadable = _unreadable(params)
        with self._lock:
            if self._dead is not None:
                raise self._dead.copy()
            rid = self._next_id
            line = head + b',"id":%d}\n' % rid
            size = len(line) - 1
            if size > self._rpc_limit:
                raise SbxError(PARSE_ERROR, f"Request too large (limit {self._rpc_limit} bytes): this {method} "
                                            f"request is {size} bytes; raise limits.rpcBytes")
            self._next_id += 1
            call = PendingCall(rid, method, size, on_notification, unreadable, on_done)
            # Registered before writing: the answer may come before the write returns.
            self._calls[rid] = call
        try:
            with self._write_lock:
                self._write(line)
        except (OSError, ValueError):
            with self._lock:
                self._calls.pop(rid, None)
            # The reader is about to see the end too: its error quotes the server's stderr.
            if not self.on_reader_thread():
                self._reader_thread.join(3)
            err = self._dead.copy() if self._dead is not None else None
            if err is None:
                err = SbxError(INTERNAL_ERROR, "server exited: " + (self._exit_detail() or "broken pipe"))
            raise err from None
        return call

    def listen_process(self, process_id: str, handler: NotificationHandler) -> None:
        """Calls ``handler`` on the reader thread with the params of every notification
        naming ``processId`` ``process_id`` (``process.output``, ``process.exit``) and no
        request. They come from every ``process.stream`` of that process on this
        connection: a handler sorts them by their cursors. An exception it raises is
        dropped: the handler must keep its own."""
        with self._lock:
            self._process_listeners.setdefault(process_id, []).append(handler)

    def unlisten_process(self, process_id: str, handler: NotificationHandler) -> None:
        """Undoes :meth:`listen_process` (nothing if it is not listening)."""
        with self._lock:
            handlers = self._process_listeners.get(process_id, [])
            if handler in handlers:
                handlers.remove(handler)
            if not handlers:
                self._process_listeners.pop(process_id, None)

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
        if method in ("create", "sandbox.create") and params:
            # The server adopts limits.rpcBytes only once the sandbox exists.
            limit = _rpc_bytes_param(params)
            if limit is not None:
                with self._lock:
                    self._rpc_limit = limit
        return result

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

    def _dispatch(self, line: bytes) -> None:
        line = line.strip()
        if not line:
            return
        try:
            msg = as_object(json.loads(line))
        except ValueError:
            self._stderr.append("sbx sdk: unparsable line from the server: " + line[:200].decode("utf-8", "replace"))
            return
        if msg is None:
            return
        if "method" in msg and "id" not in msg:
            params = as_object(msg.get("params"))
            if params is None:
                return
            rid = params.get("requestId")
            if not isinstance(rid, int):
                process_id = params.get("processId")
                if isinstance(process_id, str):
                    with self._lock:
                        handlers = list(self._process_listeners.get(process_id, ()))
                    for handler in handlers:
                        try:
                            handler(params)
                        except Exception:  # noqa: BLE001 - the handler's own business
                            pass
                return
            with self._lock:
                call = self._calls.get(rid)
            if call is not None and call.on_notification is not None and call.callback_error is None:
                try:
                    call.on_notification(params)
                except BaseException as e:  # noqa: BLE001 - handed to the waiter
                    call.callback_error = e
            return
        rid = msg.get("id")
        error = _error_of(msg)
        with self._lock:
            call = self._calls.pop(rid, None) if isinstance(rid, int) and not isinstance(rid, bool) else None
            if call is None and error is not None:
                call = self._unmatched_call(error)
        if call is None:
            # A result with an id nobody waits for, or an error while nothing is pending.
            self._stderr.append("sbx sdk: dropped an answer to no pending request: "
                                + line[:200].decode("utf-8", "replace"))
            return
        if error is not None:
            call.error = error
        else:
            call.result = msg.get("result")
        call.complete()

    def _unmatched_call(self, error: SbxError) -> Optional[PendingCall]:
        """The pending call an error that names no pending request goes to (lock held), or
        None when nothing is pending.

        The server answers a line it cannot read with ``"id": null``: a line over its limit
        (``Request too large (limit N bytes)``, normally prevented by send()'s own check),
        or one its JSON parser rejects (``Parse error: ...``, e.g. a NUL character in a
        command, a path or an env value). Such an answer, or one with an id nobody waits
        for, must still fail a caller rather than leave it waiting forever. It goes to the
        oldest pending call the server could not have read: one longer than the limit the
        message names, else one send() found unreadable (see _unreadable). Failing those,
        it goes to the oldest pending call. Older calls still running (a started command)
        are not the likely culprit: the server answers unreadable lines at once.
        """
        if not self._calls:
            return None
        m = _TOO_LARGE.match(error.message) if error.code == PARSE_ERROR else None
        if m:
            limit = int(m.group(1))
            self._rpc_limit = limit

            def culprit(c: PendingCall) -> bool:
                return c.size > limit
        else:
            def culprit(c: PendingCall) -> bool:
                return c.unreadable
        ids = sorted(self._calls)
        rid = next((i for i in ids if culprit(self._calls[i])), ids[0])
        return self._calls.pop(rid)

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

    def _fail_all(self, err: SbxError) -> None:
        with self._lock:
            if self._dead is None:
                self._dead = err
            calls = list(self._calls.values())
            self._calls.clear()
        for call in calls:
            call.error = err
            call.complete()

    def __repr__(self) -> str:
        return f"<sbx.Client {self._description}{' closed' if self.closed else ''}>"
