"""``sandbox.files``: the sandbox's filesystem from outside (E2B's method names).

Paths are as the sandbox sees them; relative ones start at /home/user. The server jails every
path in the sandbox's root and acts with the sandbox user's permissions, so read-only system
directories raise ``SbxError(1, "EROFS: ...")`` and the sandbox's size limits apply.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional, Union

from . import _ops as ops
from ._client import Client, PendingCall, SbxError
from ._protocol import as_object
from ._results import EntryInfo, FilesystemEvent, FilesystemEventType, sandbox_path

__all__ = ["Files", "EntryInfo", "WatchHandle", "FilesystemEvent", "FilesystemEventType"]

#: Bytes moved per request (see :data:`sbx._ops.CHUNK`).
CHUNK = ops.CHUNK

#: Called with each change in a watched directory.
EventCallback = Callable[[FilesystemEvent], None]


class WatchHandle:
    """A watch on a directory of a sandbox, from :meth:`Files.watch_dir`; :meth:`stop` ends
    it. Its ``on_event`` runs on the SDK's reader thread (keep it short; no blocking SDK
    calls from it)."""

    def __init__(self, client: Client, path: str, on_event: EventCallback) -> None:
        self._client = client
        self._base = sandbox_path(path)
        self._on_event = on_event
        self._lock = threading.Lock()
        self._watch_id: Optional[str] = None
        self._stopped = False
        self._error: Optional[BaseException] = None

    @property
    def watch_id(self) -> Optional[str]:
        """The daemon's id of the watch (``"w3"``)."""
        return self._watch_id

    def _attach(self, call: PendingCall) -> None:
        # The files.watch answer, on the reader thread before the line after it: listening
        # from here misses no event.
        result = as_object(call.result) if call.error is None else None
        if result is not None and isinstance(result.get("watchId"), str):
            self._watch_id = str(result["watchId"])
            self._client.listen("watchId", self._watch_id, self._take)

    def _take(self, params: Dict[str, Any]) -> None:
        event = FilesystemEvent._from(params, self._base)  # pyright: ignore[reportPrivateUsage]
        with self._lock:
            if event is None or self._stopped or self._error is not None:
                return
        try:
            self._on_event(event)
        except BaseException as e:  # noqa: BLE001 - raised by stop()
            with self._lock:
                if self._error is None:
                    self._error = e

    def stop(self) -> None:
        """Ends the watch (``files.unwatch``); no event is delivered after it returns.
        Idempotent; a watch that ended with its sandbox or connection is no error.

        Raises:
            Exception: what ``on_event`` raised first (no event was delivered after it).
        """
        with self._lock:
            stopped, self._stopped = self._stopped, True
        if not stopped and self._watch_id is not None:
            self._client.unlisten("watchId", self._watch_id, self._take)
            if not self._client.closed:
                try:
                    self._client.run_op(ops.unwatch(self._watch_id))
                except SbxError:
                    if not self._client.closed:
                        raise
        if self._error is not None:
            raise self._error

    def __enter__(self) -> "WatchHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<sbx.WatchHandle {self._watch_id} {self._base}{' stopped' if self._stopped else ''}>"


class Files:
    """``sandbox.files``: read, write, list, get_info, make_dir, remove, rename, exists,
    watch_dir."""

    def __init__(self, client: Client, sandbox_id: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    def read_bytes(self, path: str) -> bytes:
        """The whole file, fetched in 4 MiB chunks."""
        data: bytes = self._client.run_op(ops.files_read(self._sandbox_id, path))
        return data

    def read(self, path: str, *, format: str = "text") -> Union[str, bytes]:
        """The file's content: ``format="text"`` (UTF-8, errors replaced) or ``"bytes"``."""
        data = self.read_bytes(path)
        return data if format == "bytes" else data.decode("utf-8", errors="replace")

    def write(self, path: str, data: Union[str, bytes], *, mode: Optional[int] = None) -> None:
        """Writes a file, creating missing parent directories, all or nothing: no reader ever
        sees half of it, and a write that fails leaves no file and no temp file behind, and
        the sandbox's space as it was. A full filesystem raises ``SbxError(1, "ENOSPC: the
        sandbox's filesystem is full (its limit, fsLimitBytes, is ...): PATH ...")``. Data
        over 4 MiB is sent in 4 MiB parts as an upload, which the server renames into place
        with the last part."""
        self._client.run_op(ops.files_write(self._sandbox_id, path, data, mode))

    def list(self, path: str, *, depth: int = 1) -> List[EntryInfo]:
        """Entries below a directory, ``depth`` levels deep."""
        entries: List[EntryInfo] = self._client.run_op(ops.files_list(self._sandbox_id, path, depth))
        return entries

    def get_info(self, path: str) -> EntryInfo:
        """Describes a path (a symlink itself, not what it points to)."""
        info: EntryInfo = self._client.run_op(ops.files_stat(self._sandbox_id, path))
        return info

    stat = get_info

    def exists(self, path: str) -> bool:
        """Whether something exists at path."""
        return bool(self._client.run_op(ops.files_exists(self._sandbox_id, path)))

    def make_dir(self, path: str, *, parents: bool = True) -> bool:
        """Creates a directory (and its missing parents, by default). Returns True when it
        was created, False when a directory was there already (as E2B's)."""
        return bool(self._client.run_op(ops.files_make_dir(self._sandbox_id, path, parents)))

    def remove(self, path: str, *, recursive: bool = True) -> None:
        """Removes a file or a directory tree."""
        self._client.run_op(ops.files_remove(self._sandbox_id, path, recursive))

    def rename(self, old_path: str, new_path: str) -> None:
        """Renames or moves a path; an existing target is replaced."""
        self._client.run_op(ops.files_rename(self._sandbox_id, old_path, new_path))

    def watch_dir(self, path: str, on_event: EventCallback, recursive: bool = False) -> WatchHandle:
        """Watches a directory (``files.watch``): ``on_event`` gets a
        :class:`FilesystemEvent` for each change in it (with ``recursive``, also below it,
        directories created later included) until :meth:`WatchHandle.stop`. The directory
        must be on the sandbox's writable tree (/tmp, /home/user, /dev/shm). Events the
        client was too slow for are dropped and one ``FilesystemEventType.OVERFLOW`` event
        says so. The watch ends with the sandbox and with the connection.

        ``on_event`` runs on the SDK's reader thread: keep it short, and make no blocking SDK
        calls from it.

        Raises:
            SbxError: not a directory (-32602), ``ENOENT: ...`` (1), 16 watches on this
                sandbox already (-32001), or a daemon without ``files.watch`` (-32601).
        """
        if self._client.on_reader_thread():
            raise RuntimeError("sbx: blocking requests cannot be made from an output callback")
        handle = WatchHandle(self._client, path, on_event)
        self._client.send("files.watch", ops.watch_params(self._sandbox_id, path, recursive),
                          on_done=handle._attach).wait()  # pyright: ignore[reportPrivateUsage]
        return handle
