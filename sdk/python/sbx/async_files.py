"""``sandbox.files`` of an :class:`~sbx.AsyncSandbox`: as :mod:`sbx.files`, awaited; a watch's
``on_event`` may be a coroutine function (run by a :class:`sbx._callbacks.Deliverer`)."""
from __future__ import annotations

from typing import Any, Awaitable, Callable, Dict, List, Optional, Union

from . import _ops as ops
from ._async_client import AsyncClient, AsyncPendingCall
from ._callbacks import Deliverer
from ._protocol import SbxError, as_object
from ._results import EntryInfo, FilesystemEvent, sandbox_path

__all__ = ["AsyncFiles", "AsyncWatchHandle"]

#: Called with each change in a watched directory; may be a coroutine function.
AsyncEventCallback = Callable[[FilesystemEvent], Union[None, Awaitable[None]]]


class AsyncWatchHandle:
    """A watch on a directory, from ``await files.watch_dir(...)``; ``await stop()`` ends it.
    Its ``on_event`` (a function or a coroutine function) runs in a task of the handle's own,
    one event at a time, in order."""

    def __init__(self, client: AsyncClient, path: str, on_event: AsyncEventCallback) -> None:
        self._client = client
        self._base = sandbox_path(path)
        self._on_event = on_event
        self._deliverer = Deliverer()
        self._watch_id: Optional[str] = None
        self._stopped = False

    @property
    def watch_id(self) -> Optional[str]:
        """The daemon's id of the watch (``"w3"``)."""
        return self._watch_id

    def _attach(self, call: AsyncPendingCall) -> None:
        # In the reader task, before the line after the answer: no event is missed.
        result = as_object(call.result) if call.error is None else None
        if result is not None and isinstance(result.get("watchId"), str):
            self._watch_id = str(result["watchId"])
            self._client.listen("watchId", self._watch_id, self._take)

    def _take(self, params: Dict[str, Any]) -> None:
        event = FilesystemEvent._from(params, self._base)  # pyright: ignore[reportPrivateUsage]
        if event is not None and not self._stopped:
            self._deliverer.push(self._on_event, event)

    async def stop(self) -> None:
        """Ends the watch (``files.unwatch``) and awaits the delivery of the events that came
        before. Idempotent; a watch that ended with its sandbox or connection is no error.

        Raises:
            Exception: what ``on_event`` raised first (no event was delivered after it).
        """
        if not self._stopped:
            self._stopped = True
            if self._watch_id is not None:
                self._client.unlisten("watchId", self._watch_id, self._take)
                if not self._client.closed:
                    try:
                        await self._client.run_op(ops.unwatch(self._watch_id))
                    except SbxError:
                        if not self._client.closed:
                            raise
            self._deliverer.close()
        await self._deliverer.join()

    async def __aenter__(self) -> "AsyncWatchHandle":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    def __repr__(self) -> str:
        return f"<sbx.AsyncWatchHandle {self._watch_id} {self._base}{' stopped' if self._stopped else ''}>"


class AsyncFiles:
    """``sandbox.files`` of an :class:`AsyncSandbox` (as :class:`sbx.Files`, awaited)."""

    def __init__(self, client: AsyncClient, sandbox_id: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    async def read_bytes(self, path: str) -> bytes:
        """The whole file, fetched in 4 MiB chunks."""
        data: bytes = await self._client.run_op(ops.files_read(self._sandbox_id, path))
        return data

    async def read(self, path: str, *, format: str = "text") -> Union[str, bytes]:
        """The file's content: ``format="text"`` (UTF-8, errors replaced) or ``"bytes"``."""
        data = await self.read_bytes(path)
        return data if format == "bytes" else data.decode("utf-8", errors="replace")

    async def write(self, path: str, data: Union[str, bytes], *, mode: Optional[int] = None) -> None:
        """Writes a file atomically, creating missing parents (as :meth:`sbx.Files.write`);
        a cancelled task aborts a multi-part upload."""
        await self._client.run_op(ops.files_write(self._sandbox_id, path, data, mode))

    async def list(self, path: str, *, depth: int = 1) -> List[EntryInfo]:
        """Entries below a directory, ``depth`` levels deep."""
        entries: List[EntryInfo] = await self._client.run_op(ops.files_list(self._sandbox_id, path, depth))
        return entries

    async def get_info(self, path: str) -> EntryInfo:
        """Describes a path (a symlink itself, not what it points to)."""
        info: EntryInfo = await self._client.run_op(ops.files_stat(self._sandbox_id, path))
        return info

    stat = get_info

    async def exists(self, path: str) -> bool:
        """Whether something exists at path."""
        return bool(await self._client.run_op(ops.files_exists(self._sandbox_id, path)))

    async def make_dir(self, path: str, *, parents: bool = True) -> bool:
        """Creates a directory; True when created, False when one was there already."""
        return bool(await self._client.run_op(ops.files_make_dir(self._sandbox_id, path, parents)))

    async def remove(self, path: str, *, recursive: bool = True) -> None:
        """Removes a file or a directory tree."""
        await self._client.run_op(ops.files_remove(self._sandbox_id, path, recursive))

    async def rename(self, old_path: str, new_path: str) -> None:
        """Renames or moves a path; an existing target is replaced."""
        await self._client.run_op(ops.files_rename(self._sandbox_id, old_path, new_path))

    async def watch_dir(self, path: str, on_event: AsyncEventCallback, recursive: bool = False) -> AsyncWatchHandle:
        """Watches a directory (``files.watch``) until ``await handle.stop()``; as
        :meth:`sbx.Files.watch_dir`, with ``on_event`` a function or a coroutine function."""
        handle = AsyncWatchHandle(self._client, path, on_event)
        call = self._client.send("files.watch", ops.watch_params(self._sandbox_id, path, recursive),
                                 on_done=handle._attach)  # pyright: ignore[reportPrivateUsage]
        await self._client.drain()
        await call.wait()
        return handle
