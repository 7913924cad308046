"""What the server's answers and notifications mean, shared by the threaded and the asyncio
SDK: result types and their parsing, and the decoding of output bytes (UTF-8 across chunk
boundaries, a background process's log cursor). Nothing here does I/O, waits or locks
(except the process-wide record of delivered output, which both SDKs update).
"""
from __future__ import annotations

import base64
import codecs
import collections
import datetime
import enum
import posixpath
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ._protocol import as_object

__all__ = ["wire_bytes", "CommandResult", "EntryInfo", "ProcessInfo", "ProcessResult", "OutputChunk",
           "FilesystemEvent", "FilesystemEventType", "TextDecoders", "LogCursor", "remember_progress"]


def wire_bytes(obj: Mapping[str, Any], key: str, encoding_key: str) -> bytes:
    """The bytes of ``obj[key]``: the string's UTF-8, or its base64 decoding when
    ``obj[encoding_key]`` is ``"base64"``."""
    value = obj.get(key) or ""
    if obj.get(encoding_key) == "base64":
        return base64.b64decode(value)
    return str(value).encode("utf-8")


# ------------------------------------------------------------------ commands


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
            full), ``"UNAVAILABLE"`` (1, nothing ran: the daemon was out of file
            descriptors or memory; retry later), or None.
        stdout_bytes: standard output, exactly as the command wrote it.
        stderr_bytes: standard error, exactly as the command wrote it.
        dropped_bytes: ``{"stdout": n, "stderr": n}``, what went past the caps, when
            ``truncated``; else None.
        killed_processes: processes a timeout, cancel or process limit killed (0 otherwise).
        state_discarded: the command did not end on its own (a timeout, a cancel, a stop at
            the process limit, or its shell killed by a signal: ``kill -9 $$``, the OOM
            killer), so what it changed in the session (cwd, variables, functions) was not
            kept: the session is as it was before it.
        session_reset: the shell holding the session's state was killed (from inside the
            sandbox) during this command or since the last result: the session started over,
            with a new session's cwd and variables.
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
    state_discarded: bool = False
    session_reset: bool = False

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
            state_discarded=result.get("stateDiscarded") is True,
            session_reset=result.get("sessionReset") is True,
        )

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.exit_code == 0


class TextDecoders:
    """Turns a run's ``output`` notifications into text per stream: each stream has its own
    incremental UTF-8 decoder, so a character split between two chunks comes out whole."""

    STREAMS = ("stdout", "stderr")

    def __init__(self) -> None:
        self._decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in self.STREAMS}
        self._lock = threading.Lock()
        self._flushed = False

    def decode(self, params: Mapping[str, Any]) -> Optional[Tuple[str, str]]:
        """(stream, text) of one notification, or None (an unknown stream, or only part of a
        character so far)."""
        name = params.get("stream")
        if name not in self._decoders:
            return None
        text = self._decoders[name].decode(wire_bytes(params, "data", "encoding"))
        return (str(name), text) if text else None

    def flush(self) -> List[Tuple[str, str]]:
        """What the decoders still hold (an incomplete character at the end), once: later
        calls return nothing."""
        with self._lock:
            if self._flushed:
                return []
            self._flushed = True
        out = []
        for name, decoder in self._decoders.items():
            text = decoder.decode(b"", final=True)
            if text:
                out.append((name, text))
        return out


# ------------------------------------------------------------------ files


@dataclass(frozen=True)
class EntryInfo:
    """One file system entry."""

    name: str
    path: str
    type: str  #: "file", "dir", "symlink" or "other"
    size: int
    mode: int
    mtime: str  #: ISO 8601, UTC
    target: Optional[str] = None  #: where a symlink points

    @classmethod
    def _from(cls, d: Dict[str, Any]) -> "EntryInfo":
        return cls(name=str(d["name"]), path=str(d["path"]), type=str(d["type"]), size=int(d["size"]),
                   mode=int(d["mode"]), mtime=str(d["mtime"]), target=d.get("target"))


@dataclass(frozen=True)
class SandboxMetric:
    """One sample of what a sandbox used (``sandbox.metrics``; E2B's ``SandboxMetric`` names
    where E2B has the figure). The server takes one every 5 s and keeps the last hour.

    Attributes:
        timestamp: when it was taken (UTC).
        cpu_used_pct: its share of the sandbox's CPUs since the sample before (0 to 100).
        cpu_count: the CPUs the sandbox may use (fractions allowed).
        mem_used: its memory cgroup, in bytes (processes, page cache, its tmpfs's pages).
        mem_total: its memory limit.
        disk_used: bytes used of its writable filesystem (/tmp, /home/user, /dev/shm).
        disk_total: that filesystem's size.
        disk_files: inodes used there.
        pids: its tasks, session shells included.
        net_bytes: bytes its egress proxy and exposed ports relayed, both ways, so far.
        runs: runs and processes started in it so far.
        cpu_usec: CPU time its processes used so far, in microseconds.
    """

    timestamp: datetime.datetime
    cpu_used_pct: float
    cpu_count: float
    mem_used: int
    mem_total: int
    disk_used: int
    disk_total: int
    disk_files: int
    pids: int
    net_bytes: int
    runs: int
    cpu_usec: int

    @classmethod
    def _from(cls, d: Dict[str, Any], limits: Dict[str, Any]) -> "SandboxMetric":
        ts = datetime.datetime.fromtimestamp(int(d["timestamp"]) / 1000, tz=datetime.timezone.utc)
        return cls(timestamp=ts, cpu_used_pct=float(d["cpuUsedPct"]), cpu_count=float(limits["cpuCount"]),
                   mem_used=int(d["memoryBytes"]), mem_total=int(limits["memoryLimitBytes"]),
                   disk_used=int(d["fsBytes"]), disk_total=int(limits["fsLimitBytes"]), disk_files=int(d["fsFiles"]),
                   pids=int(d["pids"]), net_bytes=int(d["netBytes"]), runs=int(d["runs"]), cpu_usec=int(d["cpuUsec"]))


class FilesystemEventType(str, enum.Enum):
    """What happened to a watched path (E2B's names; the values are the protocol's, so
    ``event.type == "create"`` holds too)."""

    CREATE = "create"
    WRITE = "write"
    REMOVE = "remove"
    RENAME = "rename"
    CHMOD = "chmod"
    #: Events were dropped (the client read too slowly, or the kernel's queue overflowed):
    #: re-read what matters. ``path`` is None.
    OVERFLOW = "overflow"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class FilesystemEvent:
    """One change in a watched directory (``files.watch_dir``).

    Attributes:
        name: the path relative to the watched directory (E2B's ``name``); ``""`` for an
            overflow.
        type: a :class:`FilesystemEventType` (a str).
        path: the absolute path as the sandbox sees it; None for an overflow.
        is_dir: the entry is a directory.
    """

    name: str
    type: FilesystemEventType
    path: Optional[str]
    is_dir: bool

    @classmethod
    def _from(cls, params: Mapping[str, Any], base: str) -> Optional["FilesystemEvent"]:
        """The event of a ``files.event`` notification (None for an unknown type); ``base`` is
        the watched directory's absolute path."""
        try:
            kind = FilesystemEventType(str(params.get("type")))
        except ValueError:
            return None
        path = params.get("path")
        if not isinstance(path, str):
            return cls("", kind, None, bool(params.get("isDir", False)))
        rel = posixpath.relpath(path, base) if path.startswith("/") else path
        return cls(rel, kind, path, bool(params.get("isDir", False)))


def sandbox_path(path: str) -> str:
    """An absolute, normalised path as the sandbox sees it (relative ones start at
    /home/user)."""
    return posixpath.normpath(posixpath.join("/home/user", path))


# ------------------------------------------------------------------ background processes


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


# What this SDK delivered, per (sandbox, process), in this Python process (both SDKs).

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


def progress_of(sandbox_id: Optional[str], process_id: str) -> Tuple[int, Dict[str, Tuple[bytes, int]]]:
    with _progress_lock:
        p = _progress.get((sandbox_id or "", process_id))
        return (p.cursor, dict(p.decoders)) if p is not None else (0, {})


def remember_progress(sandbox_id: Optional[str], process_id: str, cursor: int,
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


#: At most this many bytes of pieces past a handle's cursor are held (beyond: dropped, and
#: read again from the log): a stream's pieces after a loss, another stream's ahead of it.
_AHEAD_MAX = 4 << 20


class LogCursor:
    """A handle's view of one background process's log: its cursor, what it received
    (``chunks``), what the daemon's bounded log lost before it got there (``dropped``), the
    ``process.exit`` params once seen (``exit``). Not thread-safe: the handle locks.

    The daemon's notifications name the process, not the stream request, so those of every
    stream of this process on this connection reach every handle on it (another handle's, or
    a reconnect's). Each stream sends the log contiguously from its own cursor, so a piece
    is taken only where it continues this cursor: a piece already had is skipped (or its new
    tail taken), one further on belongs to a stream ahead of this one, whose bytes this
    handle's own stream sends in turn.
    """

    def __init__(self, sandbox_id: Optional[str], process_id: str, resume: bool) -> None:
        self._decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in ("stdout", "stderr")}
        cursor = 0
        if resume:
            cursor, states = progress_of(sandbox_id, process_id)
            for name, state in states.items():
                self._decoders[name].setstate(state)
        self.cursor = cursor
        self.dropped = 0
        self.chunks: List[OutputChunk] = []
        self.exit: Optional[Dict[str, Any]] = None
        # Pieces past the cursor, by start offset (see _apply).
        self._ahead: Dict[int, Tuple[str, bytes, int]] = {}
        self._ahead_bytes = 0

    def take(self, params: Mapping[str, Any]) -> List[OutputChunk]:
        """One ``process.output`` or ``process.exit``: the new chunks it adds (also appended
        to ``chunks``)."""
        if "stream" not in params:
            if "status" in params:  # process.exit
                self.exit = dict(params)
            return []
        name = str(params.get("stream"))
        if name not in self._decoders:
            return []
        end = params.get("cursor")
        dropped = params.get("dropped")
        data = wire_bytes(params, "data", "dataEncoding" if "dataEncoding" in params else "encoding")
        pieces: List[OutputChunk] = []
        self._apply(name, data, end if isinstance(end, int) and not isinstance(end, bool) else None,
                    dropped if isinstance(dropped, int) and not isinstance(dropped, bool) else 0, pieces)
        # A piece held as "ahead" may continue the cursor now.
        while self._ahead:
            start = min(self._ahead)
            held_name, held_data, held_end = self._ahead[start]
            if start > self.cursor:
                break
            del self._ahead[start]
            self._ahead_bytes -= len(held_data)
            self._apply(held_name, held_data, held_end, 0, pieces)
        self.chunks.extend(pieces)
        return pieces

    def _apply(self, name: str, data: bytes, end: Optional[int], dropped: int, pieces: List[OutputChunk]) -> None:
        """Moves the cursor over one piece; what it adds goes to ``pieces``."""
        if dropped > 0:
            # The log no longer holds [end - dropped, end): what is left starts at end.
            lost_from, lost_to = (end - dropped, end) if end is not None else (self.cursor, self.cursor + dropped)
            if not lost_from <= self.cursor < lost_to:
                return
            self.dropped += lost_to - self.cursor
            self.cursor = lost_to
            return
        if end is not None:
            start = end - len(data)
            if end <= self.cursor:
                return
            if start > self.cursor:
                # Either another stream's, ahead of this one (this handle's own stream sends
                # those bytes in turn), or this stream's first piece after a loss, which the
                # daemon sends before its dropped notice: held until the cursor gets there.
                if start not in self._ahead and self._ahead_bytes + len(data) <= _AHEAD_MAX:
                    self._ahead[start] = (name, data, end)
                    self._ahead_bytes += len(data)
                return
            data = data[self.cursor - start:]
            self.cursor = end
        else:
            self.cursor += len(data)
        if data:
            pieces.append(OutputChunk(name, data, self._decoders[name].decode(data), self.cursor))

    def decoder_states(self) -> Dict[str, Tuple[bytes, int]]:
        return {n: d.getstate() for n, d in self._decoders.items()}

    def end(self, complete: bool) -> Dict[str, str]:
        """The stream ended. ``complete``: the process is over and its output all in; an
        incomplete character at the end will never be completed, and the callbacks get it
        as U+FFFD: returned per stream."""
        self._ahead.clear()
        if not complete:
            return {}
        return {n: t for n, t in ((n, d.decode(b"", final=True)) for n, d in self._decoders.items()) if t}

    def finished_params(self, result: Optional[Mapping[str, Any]]) -> None:
        """The ``process.stream`` answer: it stands for ``process.exit`` when none came."""
        if result is not None and self.exit is None:
            self.exit = dict(result)

    def result(self) -> ProcessResult:
        ex = self.exit or {}
        out = b"".join(c.data for c in self.chunks if c.stream == "stdout")
        err = b"".join(c.data for c in self.chunks if c.stream == "stderr")
        code = ex.get("exitCode")
        sig = ex.get("signal")
        return ProcessResult(
            exit_code=-1 if code is None else int(code), status=str(ex.get("status", "exited")),
            signal=None if sig is None else str(sig), stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"), stdout_bytes=out, stderr_bytes=err,
            dropped_bytes=self.dropped, cursor=self.cursor)

    def exit_code(self) -> Optional[int]:
        if self.exit is None or self.exit.get("exitCode") is None:
            return None
        return int(self.exit["exitCode"])
