"""The JSON-RPC layer shared by the threaded client (:mod:`sbx._client`) and the asyncio one
(:mod:`sbx._async_client`): errors and their mapping, request encoding, and the routing of
every line the server sends (answers to their calls, ``output`` notifications to the run that
asked for them, ``process.*`` / ``files.event`` notifications to their listeners).

Nothing here does I/O or waits: a client subclass owns the transport, reads lines and hands
each to :meth:`RpcCore._dispatch`, and decides how a completed call wakes its waiter.
"""
from __future__ import annotations

import collections
import json
import math
import os
import re
import shutil
import threading
import traceback
from pathlib import Path
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple, cast

__all__ = ["SbxError", "ProcessEndedError", "WaitTimeoutError", "find_binary", "as_object", "error_of",
           "CallBase", "RpcCore", "INTERNAL_ERROR", "INVALID_PARAMS", "PARSE_ERROR", "PROCESS_ENDED",
           "WAIT_TIMEOUT", "METHOD_NOT_FOUND", "DEFAULT_RPC_BYTES", "WORKER_UNAVAILABLE", "SANDBOX_DISABLED",
           "POOL_SHUTTING_DOWN", "SANDBOX_ERROR", "ExpiredCallback"]

#: JSON-RPC "internal error": also used for a dead server or a closed connection.
INTERNAL_ERROR = -32603
#: JSON-RPC "invalid params" (an unknown process, a finished run's cancel, ...).
INVALID_PARAMS = -32602
#: JSON-RPC "method not found" (a daemon older than the SDK).
METHOD_NOT_FOUND = -32601
#: JSON-RPC parse error: the server's answer to a line it cannot parse or that is over
#: ``limits.rpcBytes``; sent with ``"id": null``.
PARSE_ERROR = -32700
#: A server cap was reached (a lane's queue, sandboxes, sessions, runs per session): try again
#: later, after :attr:`SbxError.retry_after_ms` when the server could tell.
WORKER_UNAVAILABLE = -32001
#: The server runs with ``--mode disabled``: it executes nothing.
SANDBOX_DISABLED = -32002
#: The server is shutting down: it takes no new work.
POOL_SHUTTING_DOWN = -32003
#: A sandbox or file error (``ENOENT: ...``; a paused sandbox refusing with
#: ``while_paused="refuse"``).
SANDBOX_ERROR = 1
#: ``process.wait``: the process ended before the awaited log line or port showed up.
PROCESS_ENDED = -32010
#: ``process.wait``: its ``timeoutMs`` passed before the condition held.
WAIT_TIMEOUT = -32011
#: The server's default limit on one request line (``limits.rpcBytes``), newline excluded.
DEFAULT_RPC_BYTES = 8 << 20
#: How many expired sandboxes a connection remembers (for ``Sandbox.expired``); past this the
#: oldest are forgotten.
EXPIRED_MAX = 1024
#: How many of the server's last stderr lines are kept for error messages.
STDERR_LINES = 50
#: At most this many characters of them go into one error message.
STDERR_CHARS = 4000

NotificationHandler = Callable[[Dict[str, Any]], None]
#: Called with the reason a sandbox expired: ``"lifetime"`` or ``"idle"``.
ExpiredCallback = Callable[[str], Any]

#: Notification params naming one of these (and no request) go to the listeners of that value.
_LISTEN_KEYS = ("processId", "watchId")


def connect_error(e: OSError, socket_path: Any) -> OSError:
    """The error of a failed connect to a daemon's socket, of the same class (FileNotFoundError,
    ConnectionRefusedError ...) so that callers catching it still do, but saying which socket and
    what to do: a bare "[Errno 2] No such file or directory" names neither."""
    path = os.fspath(socket_path)
    why = e.strerror or str(e)
    if isinstance(e, (FileNotFoundError, ConnectionRefusedError)):
        hint = f"no sbx daemon is listening at {path} ({why}); start one with `sbx serve --socket {path}`"
    else:
        hint = f"cannot connect to the sbx daemon at {path}: {why}"
    err = type(e)(e.errno, hint, path) if e.errno is not None else type(e)(hint)
    err.__cause__ = e
    return err


class SbxError(Exception):
    """A JSON-RPC error answered by the server, or a lost connection.

    Attributes:
        code: the JSON-RPC error code (``-32602`` invalid params, ``-32600`` invalid
            request, ``-32601`` unknown method, ``-32603`` internal error, ``-32001``
            a server cap was reached (see ``retry_after_ms``), ``-32002`` the server runs
            with ``--mode disabled``, ``-32003`` the server is shutting down, ``1`` a sandbox
            or file error). A server that died, or a connection that was closed, gives
            ``-32603``.
        message: the server's message.
        data: the error's optional ``data`` member.
    """

    @property
    def retry_after_ms(self) -> Optional[int]:
        """For ``-32001``: how long the server suggests waiting before trying again, when it
        can tell (a lane's queue was full); else None."""
        if isinstance(self.data, dict) and isinstance(self.data.get("retryAfterMs"), int):
            return self.data["retryAfterMs"]
        return None

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
        error may be raised in many threads or tasks; each gets its own traceback)."""
        return type(self)(self.code, self.message, self.data)


class ProcessEndedError(SbxError):
    """``process.wait`` (``wait_for_log``, ``wait_for_port``): the process ended before the
    condition held (code -32010, message ``PROCESS_ENDED: ...``)."""


class WaitTimeoutError(SbxError):
    """``process.wait`` (``wait_for_log``, ``wait_for_port``): the wait's timeout passed
    first (code -32011, message ``WAIT_TIMEOUT: ...``). The process keeps running."""


_ERROR_CLASSES = {PROCESS_ENDED: ProcessEndedError, WAIT_TIMEOUT: WaitTimeoutError}


def _repo_binary() -> Path:
    # <repo>/sdk/python/sbx/_protocol.py -> <repo>/build/src/cli/sbx
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


def unreadable(value: Any) -> bool:
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
        return any(unreadable(k) or unreadable(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(unreadable(v) for v in value)
    return False


def as_object(value: Any) -> Optional[Dict[str, Any]]:
    """``value`` if it is a JSON object (a dict), else None."""
    return cast(Dict[str, Any], value) if isinstance(value, dict) else None


def error_of(msg: Dict[str, Any]) -> Optional[SbxError]:
    """The SbxError an answer carries (its class chosen by its code), or None for a result."""
    if "error" not in msg:
        return None
    err = as_object(msg["error"])
    if err is None:
        return SbxError(INTERNAL_ERROR, f"malformed error from the server: {msg['error']!r}")
    code = err.get("code")
    if not isinstance(code, int) or isinstance(code, bool):
        code = INTERNAL_ERROR
    return _ERROR_CLASSES.get(code, SbxError)(code, str(err.get("message", "")), err.get("data"))


def rpc_bytes_param(params: Optional[Dict[str, Any]]) -> Optional[int]:
    """limits.rpcBytes of create / sandbox.create params, when the server would apply it."""
    limits = as_object((params or {}).get("limits"))
    if limits is None:
        return None
    value = limits.get("rpcBytes")
    if isinstance(value, int) and not isinstance(value, bool) and 1024 <= value <= 1 << 30:
        return value
    return None


def encode_head(method: str, params: Optional[Dict[str, Any]]) -> bytes:
    """A request line without its id and closing brace. Encoding first means that a value
    that cannot be sent (say a lone surrogate) fails before anything is registered or
    written."""
    head = b'{"jsonrpc":"2.0","method":' + json.dumps(method).encode("utf-8")
    if params:
        head += b',"params":' + json.dumps(params, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return head


def _call_expired(handler: ExpiredCallback, reason: str) -> None:
    try:
        handler(reason)
    except Exception:  # noqa: BLE001 - the reader must go on; the user's bug is shown
        traceback.print_exc()


class CallBase:
    """One request in flight: its answer, once it came, and its notification handler. A
    client's subclass adds how waiters wait (a threading.Event, an asyncio.Future)."""

    __slots__ = ("request_id", "method", "size", "unreadable", "on_notification", "on_done", "result",
                 "error", "callback_error")

    def __init__(self, request_id: int, method: str, size: int,
                 on_notification: Optional[NotificationHandler], unreadable: bool = False,
                 on_done: Optional[Callable[[Any], None]] = None) -> None:
        self.request_id = request_id
        self.method = method
        self.size = size  # bytes of the request line, newline excluded
        # The server's parser rejects the request (see unreadable()): it answers without an id.
        self.unreadable = unreadable
        self.on_notification = on_notification
        # Called with this call once the answer (or the connection's end) is in, before
        # waiters wake.
        self.on_done = on_done
        self.result: Any = None
        self.error: Optional[SbxError] = None
        # The first exception raised by on_notification or on_done; re-raised by wait().
        self.callback_error: Optional[BaseException] = None

    def done(self) -> bool:
        raise NotImplementedError

    def _wake(self) -> None:
        raise NotImplementedError

    def complete(self) -> None:
        """Runs on_done (an exception it raises goes to the waiter), then wakes waiters."""
        if self.on_done is not None and not self.done():
            try:
                self.on_done(self)
            except BaseException as e:  # noqa: BLE001 - handed to the waiter
                if self.callback_error is None:
                    self.callback_error = e
        self._wake()

    def outcome(self) -> Any:
        """The result of a completed call; raises the SbxError answered, or what a callback
        raised."""
        if self.error is not None:
            raise self.error.copy()
        if self.callback_error is not None:
            raise self.callback_error
        return self.result


class RpcCore:
    """The transport-independent half of a client: ids, pending calls, listeners, the
    connection's death, and the routing of the server's lines. Its lock is a
    threading.Lock: the threaded client takes it from many threads, the asyncio client only
    from its loop's (where it is never contended)."""

    _description: str

    def _core_init(self, description: str) -> None:
        self._description = description
        self._lock = threading.Lock()  # guards _calls, _next_id, _dead, _closing, _listeners
        self._calls: Dict[int, CallBase] = {}
        self._listeners: Dict[Tuple[str, str], List[NotificationHandler]] = {}
        self._next_id = 1
        self._dead: Optional[SbxError] = None
        self._closing = False
        # What the server takes as one line on this connection (create and sandbox.create
        # may change it with limits.rpcBytes). Longer requests are refused here: the server
        # would answer them with id null (see _unmatched_call).
        self._rpc_limit = DEFAULT_RPC_BYTES
        self._stderr: Deque[str] = collections.deque(maxlen=STDERR_LINES)
        # sandbox.expired: the reasons told so far (oldest first), and who waits to be told.
        self._expired: "collections.OrderedDict[str, str]" = collections.OrderedDict()
        self._expiry: Dict[str, List[ExpiredCallback]] = {}

    def _new_call(self, request_id: int, method: str, size: int, on_notification: Optional[NotificationHandler],
                  unreadable: bool, on_done: Optional[Callable[[Any], None]]) -> CallBase:
        raise NotImplementedError

    # ------------------------------------------------------------ properties

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
        return text[-STDERR_CHARS:]

    # ------------------------------------------------------------ requests

    def _register(self, method: str, params: Optional[Dict[str, Any]],
                  on_notification: Optional[NotificationHandler],
                  on_done: Optional[Callable[[Any], None]]) -> Tuple[CallBase, bytes]:
        """A new pending call and its request line (newline included), registered before
        it is written: the answer may come before the write returns."""
        head = encode_head(method, params)
        bad = unreadable(params)
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
            call = self._new_call(rid, method, size, on_notification, bad, on_done)
            self._calls[rid] = call
        return call, line

    def _forget(self, request_id: int) -> None:
        with self._lock:
            self._calls.pop(request_id, None)

    def _answered(self, method: str, params: Optional[Dict[str, Any]]) -> None:
        """After a successful answer: the server adopts limits.rpcBytes only once the
        sandbox exists."""
        if method in ("create", "sandbox.create") and params:
            limit = rpc_bytes_param(params)
            if limit is not None:
                with self._lock:
                    self._rpc_limit = limit

    def listen(self, key: str, value: str, handler: NotificationHandler) -> None:
        """Calls ``handler`` (on the reader) with the params of every notification that names
        no request and whose ``key`` (``"processId"``, ``"watchId"``) is ``value``. An
        exception it raises is dropped: the handler must keep its own."""
        with self._lock:
            self._listeners.setdefault((key, value), []).append(handler)

    def unlisten(self, key: str, value: str, handler: NotificationHandler) -> None:
        """Undoes :meth:`listen` (nothing if it is not listening)."""
        with self._lock:
            handlers = self._listeners.get((key, value), [])
            if handler in handlers:
                handlers.remove(handler)
            if not handlers:
                self._listeners.pop((key, value), None)

    def listen_process(self, process_id: str, handler: NotificationHandler) -> None:
        """Calls ``handler`` with the params of every notification naming ``processId``
        ``process_id`` (``process.output``, ``process.exit``) and no request. They come from
        every ``process.stream`` of that process on this connection: a handler sorts them by
        their cursors. An exception it raises is dropped: the handler must keep its own."""
        self.listen("processId", process_id, handler)

    def unlisten_process(self, process_id: str, handler: NotificationHandler) -> None:
        """Undoes :meth:`listen_process` (nothing if it is not listening)."""
        self.unlisten("processId", process_id, handler)

    # ------------------------------------------------------------ expiry

    def on_expired(self, sandbox_id: str, handler: ExpiredCallback) -> Callable[[], None]:
        """Calls ``handler(reason)`` when the server says ``sandbox_id`` expired
        (``sandbox.expired``; reason ``"lifetime"`` or ``"idle"``): from the reader, or at once
        from here if it did already. Returns a function that unsubscribes. An exception the
        handler raises is printed to stderr and otherwise ignored."""
        with self._lock:
            reason = self._expired.get(sandbox_id)
            if reason is None:
                self._expiry.setdefault(sandbox_id, []).append(handler)
        if reason is not None:
            _call_expired(handler, reason)

        def off() -> None:
            with self._lock:
                handlers = self._expiry.get(sandbox_id, [])
                if handler in handlers:
                    handlers.remove(handler)
                if not handlers:
                    self._expiry.pop(sandbox_id, None)
        return off

    def expired_reason(self, sandbox_id: str) -> Optional[str]:
        """``"lifetime"`` or ``"idle"`` once this connection was told that ``sandbox_id``
        expired, else None."""
        with self._lock:
            return self._expired.get(sandbox_id)

    def _sandbox_expired(self, params: Dict[str, Any]) -> None:
        sandbox_id = params.get("sandboxId")
        if not isinstance(sandbox_id, str):
            return
        reason = params.get("reason")
        reason = reason if isinstance(reason, str) else "lifetime"
        with self._lock:
            self._expired[sandbox_id] = reason
            while len(self._expired) > EXPIRED_MAX:
                self._expired.popitem(last=False)
            handlers = self._expiry.pop(sandbox_id, [])
        for handler in handlers:
            _call_expired(handler, reason)

    # ------------------------------------------------------------ routing

    def _dispatch(self, line: bytes) -> None:
        """Routes one line from the server."""
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
            self._notification(msg)
            return
        rid = msg.get("id")
        error = error_of(msg)
        with self._lock:
            call = self._calls.pop(rid, None) if isinstance(rid, int) and not isinstance(rid, bool) else None
            if call is not None and error is not None:
                self._learn_limit(error)  # the server answers an oversized line to its id when it can
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

    def _notification(self, msg: Dict[str, Any]) -> None:
        params = as_object(msg.get("params"))
        if params is None:
            return
        if msg.get("method") == "sandbox.expired":
            self._sandbox_expired(params)
            return
        rid = params.get("requestId")
        if not isinstance(rid, int):
            for key in _LISTEN_KEYS:
                value = params.get(key)
                if isinstance(value, str):
                    with self._lock:
                        handlers = list(self._listeners.get((key, value), ()))
                    for handler in handlers:
                        try:
                            handler(params)
                        except Exception:  # noqa: BLE001 - the handler's own business
                            pass
                    return
            return
        with self._lock:
            call = self._calls.get(rid)
        if call is not None and call.on_notification is not None and call.callback_error is None:
            try:
                call.on_notification(params)
            except BaseException as e:  # noqa: BLE001 - handed to the waiter
                call.callback_error = e

    def _learn_limit(self, error: SbxError) -> Optional[int]:
        """The server's line limit, when error says it (``Request too large (limit N bytes)``),
        adopted for the next requests' own check (lock held)."""
        m = _TOO_LARGE.match(error.message) if error.code == PARSE_ERROR else None
        if not m:
            return None
        self._rpc_limit = int(m.group(1))
        return self._rpc_limit

    def _unmatched_call(self, error: SbxError) -> Optional[CallBase]:
        """The pending call an error that names no pending request goes to (lock held), or
        None when nothing is pending.

        The server answers a line it cannot read with ``"id": null``: a line over its limit
        (``Request too large (limit N bytes)``, normally prevented by _register's own check),
        or one its JSON parser rejects (``Parse error: ...``, e.g. a NUL character in a
        command, a path or an env value). Such an answer, or one with an id nobody waits
        for, must still fail a caller rather than leave it waiting forever. It goes to the
        oldest pending call the server could not have read: one longer than the limit the
        message names, else one _register found unreadable (see unreadable()). Failing those,
        it goes to the oldest pending call. Older calls still running (a started command)
        are not the likely culprit: the server answers unreadable lines at once.
        """
        if not self._calls:
            return None
        limit = self._learn_limit(error)
        if limit is not None:
            def culprit(c: CallBase) -> bool:
                return c.size > limit
        else:
            def culprit(c: CallBase) -> bool:
                return c.unreadable
        ids = sorted(self._calls)
        rid = next((i for i in ids if culprit(self._calls[i])), ids[0])
        return self._calls.pop(rid)

    def _fail_all(self, err: SbxError) -> None:
        """The connection is gone: every pending call (and every later request) gets ``err``."""
        with self._lock:
            if self._dead is None:
                self._dead = err
            calls = list(self._calls.values())
            self._calls.clear()
        for call in calls:
            call.error = err
            call.complete()
