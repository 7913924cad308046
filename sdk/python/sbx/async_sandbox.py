""":class:`AsyncSandbox`: the asyncio twin of :class:`sbx.Sandbox`, with the same methods,
awaited. Both run the same protocol operations (:mod:`sbx._ops`); this module only awaits
them.

    import datetime
import asyncio
    from sbx import AsyncSandbox

    async def main():
        async with await AsyncSandbox.create(timeout=10) as sb:
            r = await sb.commands.run("echo hi")
            print(r.stdout)

    asyncio.run(main())
"""
from __future__ import annotations

import asyncio
import inspect
import os
from types import TracebackType
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Set, Type, Union

from . import _ops as ops
from . import _code
from . import async_code as _acode
from ._async_client import AsyncClient
from ._code import CodeContext, Execution, ExecutionError, Result
from .async_code import AsyncCodeHandle
from ._callbacks import Deliverer  # noqa: F401 - for importers that found it here
from ._protocol import SbxError
from ._results import SandboxMetric
from ._results import EntryInfo, FilesystemEvent  # noqa: F401 - for importers that found them here
from .async_commands import AsyncCommands, AsyncSession
from .async_files import AsyncFiles
from .async_files import AsyncEventCallback, AsyncWatchHandle  # noqa: F401 - for importers that found them here
from .async_processes import AsyncPty

__all__ = ["AsyncSandbox", "AsyncSessions", "AsyncEnv", "AsyncSandboxes", "AsyncImages", "AsyncFiles",
           "AsyncWatchHandle"]

#: Called with the reason a sandbox expired (``"lifetime"`` or ``"idle"``); may be a coroutine
#: function.
AsyncExpiredCallback = Callable[[str], Union[None, Awaitable[None]]]


class AsyncSandbox:
    """One sbx sandbox, for asyncio. Make one with ``await AsyncSandbox.create(...)`` (a
    private ``sbx serve --stdio``, started as an asyncio subprocess) or
    ``await AsyncSandbox.connect(socket_path)`` (a shared ``sbx serve --socket``); options
    as for :class:`sbx.Sandbox`. End it with ``await sb.kill()`` or ``async with``::

        async with await AsyncSandbox.create(timeout=10) as sb:
            print((await sb.commands.run("echo hi")).stdout)

    The methods are :class:`sbx.Sandbox`'s, awaited; so are those of ``commands``,
    ``files``, ``sessions``, ``env``, ``sandboxes``, ``images`` and ``pty``. Use it from the event loop
    it was made in.
    """

    _client: AsyncClient
    _sandbox_id: str
    _root: bool
    _owns_server: bool
    _killed: bool

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("an AsyncSandbox is made with `await AsyncSandbox.create(...)` or "
                        "`await AsyncSandbox.connect(socket_path)`")

    @classmethod
    async def create(cls, *, timeout: Optional[float] = None, fs_limit_bytes: Optional[int] = None,
                     limits: Optional[Mapping[str, float]] = None, envs: Optional[Mapping[str, str]] = None,
                     network: ops.Network = False, leftovers: Optional[str] = None,
                     binary: Optional[str] = None, policy: Optional[Mapping[str, Any]] = None,
                secrets: Optional[Mapping[str, Any]] = None, metadata: Optional[Mapping[str, str]] = None,
                     lifetime: Optional[float] = None, idle_timeout: Optional[float] = None,
                     on_expired: Optional[AsyncExpiredCallback] = None,
                     image: Optional[str] = None) -> "AsyncSandbox":
        """Starts ``sbx serve --stdio`` and creates the sandbox (as :class:`sbx.Sandbox`;
        ``on_expired`` may be a coroutine function).

        Raises:
            SbxError: the server refused the options or could not create the sandbox.
            FileNotFoundError: no sbx binary was found.
        """
        params = ops.sandbox_options(timeout, fs_limit_bytes, limits, envs, network, leftovers, policy, secrets,
                                     image)
        ops.lifecycle_options(params, metadata, lifetime, idle_timeout)
        client = await AsyncClient.spawn(binary)
        try:
            sandbox_id: str = await client.run_op(ops.create("create", params))
        except BaseException:
            await client.close(wait_process=1)
            raise
        return _watched(_attach(cls, client, sandbox_id, root=True, owns_server=True), on_expired)

    @classmethod
    async def connect(cls, socket_path: Union[str, "os.PathLike[str]"], *, timeout: Optional[float] = None,
                      fs_limit_bytes: Optional[int] = None, limits: Optional[Mapping[str, float]] = None,
                      envs: Optional[Mapping[str, str]] = None, network: ops.Network = False,
                      leftovers: Optional[str] = None, policy: Optional[Mapping[str, Any]] = None,
                      secrets: Optional[Mapping[str, Any]] = None, metadata: Optional[Mapping[str, str]] = None,
                      lifetime: Optional[float] = None, idle_timeout: Optional[float] = None,
                      on_expired: Optional[AsyncExpiredCallback] = None,
                      image: Optional[str] = None) -> "AsyncSandbox":
        """Connects to ``sbx serve --socket socket_path`` and creates this connection's root
        sandbox there; :meth:`kill` closes the connection (as :meth:`sbx.Sandbox.connect`)."""
        params = ops.sandbox_options(timeout, fs_limit_bytes, limits, envs, network, leftovers, policy, secrets,
                                     image)
        ops.lifecycle_options(params, metadata, lifetime, idle_timeout)
        client = await AsyncClient.connect(os.fspath(socket_path))
        try:
            sandbox_id: str = await client.run_op(ops.create("create", params))
        except BaseException:
            await client.close()
            raise
        return _watched(_attach(cls, client, sandbox_id, root=True), on_expired)

    def _setup(self, client: AsyncClient, sandbox_id: str, *, root: bool, owns_server: bool) -> None:
        self._client = client
        self._sandbox_id = sandbox_id
        self._root = root
        self._owns_server = owns_server
        self._killed = False
        self.commands: AsyncCommands = AsyncCommands(client, sandbox_id)
        """Runs commands: ``run``, ``start``, ``list``, ``kill``, ``connect``."""
        self.sessions: AsyncSessions = AsyncSessions(client, sandbox_id)
        """Named sessions: ``create``, ``get``, ``list``, ``delete``."""
        self.env: AsyncEnv = AsyncEnv(client, sandbox_id)
        """Session environment variables: ``set``, ``get``."""
        self.files: AsyncFiles = AsyncFiles(client, sandbox_id)
        """The filesystem: ``read``, ``write``, ``list``, ``get_info``, ``exists``, ``make_dir``,
        ``remove``, ``rename``, ``watch_dir``."""
        self.sandboxes: AsyncSandboxes = AsyncSandboxes(client)
        """More sandboxes on this connection: ``create``, ``list``, ``get``."""
        self.pty: AsyncPty = AsyncPty(client, sandbox_id)
        """Interactive terminals: ``create``."""
        self.images: AsyncImages = AsyncImages(client)
        """The server's image store: ``import_image``, ``list``, ``inspect``, ``remove``."""

    # ------------------------------------------------------------ code

    async def run_code(self, code: str, *, language: Optional[str] = None,
                       context: Union[CodeContext, str, None] = None, timeout: Optional[float] = None,
                       envs: Optional[Mapping[str, str]] = None,
                       on_stdout: Optional[Callable[[str], Any]] = None, on_stderr: Optional[Callable[[str], Any]] = None,
                       on_result: Optional[Callable[[Result], Any]] = None,
                       on_error: Optional[Callable[[ExecutionError], Any]] = None) -> Execution:
        """As :meth:`sbx.Sandbox.run_code`, awaited; cancelling the awaiting task cancels the cell."""
        handle = await self.start_code(code, language=language, context=context, timeout=timeout, envs=envs,
                                       on_stdout=on_stdout, on_stderr=on_stderr, on_result=on_result,
                                       on_error=on_error)
        return await _acode.run(handle)

    async def start_code(self, code: str, *, language: Optional[str] = None,
                         context: Union[CodeContext, str, None] = None, timeout: Optional[float] = None,
                         envs: Optional[Mapping[str, str]] = None,
                         on_stdout: Optional[Callable[[str], Any]] = None,
                         on_stderr: Optional[Callable[[str], Any]] = None,
                         on_result: Optional[Callable[[Result], Any]] = None,
                         on_error: Optional[Callable[[ExecutionError], Any]] = None) -> AsyncCodeHandle:
        """Sends a cell; returns its :class:`~sbx.async_code.AsyncCodeHandle` at once."""
        params = _code.run_params(self._sandbox_id, code, context=context, language=language, timeout=timeout,
                                  envs=envs)
        handle = AsyncCodeHandle(self._client, params, on_stdout, on_stderr, on_result, on_error)
        await self._client.drain()
        return handle

    async def create_code_context(self, *, language: str = "python", cwd: Optional[str] = None,
                                  envs: Optional[Mapping[str, str]] = None) -> CodeContext:
        return CodeContext.from_wire(await self._client.request(
            "context.create", _code.context_params(self._sandbox_id, language=language, cwd=cwd, envs=envs)))

    async def list_code_contexts(self) -> List[CodeContext]:
        res = await self._client.request("context.list", {"sandboxId": self._sandbox_id})
        return [CodeContext.from_wire(c) for c in res.get("contexts", [])]

    async def restart_code_context(self, context: Union[CodeContext, str]) -> CodeContext:
        return CodeContext.from_wire(await self._client.request(
            "context.restart", {"sandboxId": self._sandbox_id, "contextId": _code.context_id(context)}))

    async def remove_code_context(self, context: Union[CodeContext, str]) -> None:
        await self._client.request("context.destroy",
                                   {"sandboxId": self._sandbox_id, "contextId": _code.context_id(context)})

    @property
    def sandbox_id(self) -> str:
        """The sandbox's id (32 hex digits)."""
        return self._sandbox_id

    @property
    def is_root(self) -> bool:
        """True for the connection's root sandbox."""
        return self._root

    @property
    def client(self) -> AsyncClient:
        """The JSON-RPC connection this sandbox is reached through."""
        return self._client

    def _params(self, **extra: Any) -> Dict[str, Any]:
        return ops.with_sandbox(self._sandbox_id, **extra)

    async def history(self, session: Optional[str] = None) -> List[Dict[str, Any]]:
        """Commands run in a session (default "default"), oldest first."""
        entries: List[Dict[str, Any]] = await self._client.run_op(ops.history(self._sandbox_id, session))
        return entries

    async def clear_history(self, session: Optional[str] = None) -> None:
        """Forgets a session's history."""
        await self._client.run_op(ops.call("shell.history.clear", self._params(session=session)))

    async def health(self) -> Dict[str, Any]:
        """Server statistics (as :meth:`sbx.Sandbox.health`)."""
        health: Dict[str, Any] = await self._client.run_op(ops.health())
        return health

    async def ping(self) -> bool:
        """True when the server answers; False when the connection is gone."""
        try:
            return bool(await self._client.run_op(ops.ping()))
        except SbxError:
            if self._client.closed:
                return False
            raise

    async def get_host(self, port: int) -> str:
        """``"127.0.0.1:N"``: an address on the host reaching TCP ``port`` in the sandbox (as
        :meth:`sbx.Sandbox.get_host`)."""
        host: str = await self._client.run_op(ops.get_host(self._sandbox_id, port))
        return host

    async def fork(self, *, lane: Optional[str] = None) -> "AsyncSandbox":
        """A new sandbox copying this one's files and session states, on the same connection
        (as :meth:`sbx.Sandbox.fork`)."""
        sandbox_id: str = await self._client.run_op(ops.fork(self._sandbox_id, lane))
        return _attach(type(self), self._client, sandbox_id, root=False)

    async def pause(self) -> None:
        """Freezes every process of the sandbox in place (as :meth:`sbx.Sandbox.pause`)."""
        await self._client.run_op(ops.call("sandbox.pause", self._params()))

    async def resume(self) -> None:
        """Lets a paused sandbox go on where it was (as :meth:`sbx.Sandbox.resume`)."""
        await self._client.run_op(ops.call("sandbox.resume", self._params()))

    async def set_timeout(self, timeout: float) -> None:
        """The sandbox is destroyed ``timeout`` seconds from now, 0: never (as
        :meth:`sbx.Sandbox.set_timeout`)."""
        await self._client.run_op(ops.set_timeout(self._sandbox_id, timeout))

    async def get_metrics(self, start: Union[None, float, datetime.datetime] = None,
                          end: Union[None, float, datetime.datetime] = None) -> List[SandboxMetric]:
        """What the sandbox used over time (as :meth:`sbx.Sandbox.get_metrics`)."""
        return await self._client.run_op(ops.metrics(self._sandbox_id, start, end))

    def on_expired(self, callback: AsyncExpiredCallback) -> Callable[[], None]:
        """Calls ``callback(reason)`` once the server destroyed this sandbox because it expired
        (as :meth:`sbx.Sandbox.on_expired`), in the event loop; a coroutine function's
        coroutine is run as a task. Returns a function that unsubscribes."""
        return self._client.on_expired(self._sandbox_id, _loop_hook(callback))

    @property
    def expired(self) -> Optional[str]:
        """``"lifetime"`` or ``"idle"`` once this connection was told the sandbox expired,
        else None."""
        return self._client.expired_reason(self._sandbox_id)

    async def get_info(self) -> Dict[str, Any]:
        """This sandbox as ``sandbox.list`` shows it (as :meth:`sbx.Sandbox.get_info`)."""
        info: Dict[str, Any] = await self._client.run_op(ops.sandbox_info(self._sandbox_id, self.expired))
        return info

    async def snapshot(self, *, lane: Optional[str] = None) -> str:
        """Saves the files and session states; returns the snapshot id."""
        return str(await self._client.run_op(ops.snapshot(self._sandbox_id, lane)))

    async def restore(self, snapshot_id: str, *, lane: Optional[str] = None) -> None:
        """Brings back a snapshot's files and session states."""
        await self._client.run_op(ops.restore(self._sandbox_id, snapshot_id, lane))

    async def list_snapshots(self) -> List[Dict[str, Any]]:
        """``[{id, createdAt, bytes}]``, oldest first."""
        snapshots: List[Dict[str, Any]] = await self._client.run_op(ops.list_snapshots(self._sandbox_id))
        return snapshots

    async def delete_snapshot(self, snapshot_id: str) -> None:
        """Deletes a snapshot."""
        await self._client.run_op(ops.call("snapshot.delete", self._params(id=snapshot_id)))

    async def export_state(self, *, lane: Optional[str] = None) -> bytes:
        """The sandbox as a zstd-compressed tar (``persistence.export``)."""
        blob: bytes = await self._client.run_op(ops.export_state(self._sandbox_id, lane))
        return blob

    async def import_state(self, blob: bytes, *, lane: Optional[str] = None) -> None:
        """Replaces the files and session states with an exported archive's."""
        await self._client.run_op(ops.import_state(self._sandbox_id, blob, lane))

    async def destroy(self) -> None:
        """Destroys this sandbox (``sandbox.destroy``); on a root sandbox this is :meth:`kill`."""
        if self._root:
            await self.kill()
            return
        if self._killed:
            return
        await self._client.run_op(ops.call("sandbox.destroy", {"sandboxId": self._sandbox_id}))
        self._killed = True

    async def kill(self) -> None:
        """Ends the sandbox, idempotently: a spawned server is shut down (``kill``, then its
        exit awaited), a socket connection closed, a child sandbox destroyed (as
        :meth:`sbx.Sandbox.kill`)."""
        if self._killed:
            return
        if not self._root:
            try:
                await self.destroy()
            except SbxError:
                if not self._client.closed:
                    raise
                self._killed = True
            return
        self._killed = True
        if self._owns_server:
            try:
                # Not awaited: the reader keeps routing answers until the server closes its
                # stdout; close() awaits the process.
                self._client.send("kill")
            except SbxError:
                pass
        await self._client.close(wait_process=5)

    async def close(self) -> None:
        """Alias of :meth:`kill`."""
        await self.kill()

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await self.kill()

    def __repr__(self) -> str:
        kind = "root" if self._root else "child"
        return f"<sbx.AsyncSandbox {self._sandbox_id} {kind}{' killed' if self._killed else ''}>"


def _attach(cls: Type[AsyncSandbox], client: AsyncClient, sandbox_id: str, *, root: bool,
            owns_server: bool = False) -> AsyncSandbox:
    obj = cls.__new__(cls)
    obj._setup(client, sandbox_id, root=root, owns_server=owns_server)  # pyright: ignore[reportPrivateUsage]
    return obj


def _watched(sb: AsyncSandbox, on_expired: Optional[AsyncExpiredCallback]) -> AsyncSandbox:
    """``sb``, with ``on_expired`` registered when given."""
    if on_expired is not None:
        sb.on_expired(on_expired)
    return sb


#: Tasks of coroutine expiry hooks, kept until they end (the loop holds only weak references).
_hook_tasks: Set["asyncio.Future[Any]"] = set()


def _loop_hook(callback: AsyncExpiredCallback) -> Callable[[str], None]:
    """A plain expiry handler calling ``callback``, whose awaitable, if it returns one, runs as
    a task of the running loop."""
    def hook(reason: str) -> None:
        result = callback(reason)
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            _hook_tasks.add(task)
            task.add_done_callback(_hook_tasks.discard)
    return hook


class AsyncSessions:
    """``sandbox.sessions`` of an :class:`AsyncSandbox`."""

    def __init__(self, client: AsyncClient, sandbox_id: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    async def create(self, name: str) -> AsyncSession:
        """Creates a session (name: 1-64 of ``[A-Za-z0-9_.-]``)."""
        created: str = await self._client.run_op(ops.session_create(self._sandbox_id, name))
        return AsyncSession(self._client, self._sandbox_id, created)

    def get(self, name: str) -> AsyncSession:
        """A handle on a session by name, without asking the server."""
        return AsyncSession(self._client, self._sandbox_id, name)

    async def list(self) -> List[str]:
        """The names of the sandbox's sessions."""
        names: List[str] = await self._client.run_op(ops.session_list(self._sandbox_id))
        return names

    async def delete(self, name: str) -> None:
        """Ends a session; its running command is cancelled."""
        await self._client.run_op(ops.call("session.delete", {"sandboxId": self._sandbox_id, "name": name}))


class AsyncEnv:
    """``sandbox.env`` of an :class:`AsyncSandbox`."""

    def __init__(self, client: AsyncClient, sandbox_id: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    async def set(self, name: str, value: str, session: Optional[str] = None) -> None:
        """Exports ``name=value`` in a session (default "default")."""
        await self._client.run_op(ops.env_set(self._sandbox_id, name, value, session))

    async def get(self, name: str, session: Optional[str] = None) -> Optional[str]:
        """The value of an exported variable, or None when it is unset."""
        value: Optional[str] = await self._client.run_op(ops.env_get(self._sandbox_id, name, session))
        return value


class AsyncSandboxes:
    """``sandbox.sandboxes`` of an :class:`AsyncSandbox`: more sandboxes on its connection."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def create(self, label: Optional[str] = None, persist: bool = False, *, timeout: Optional[float] = None,
                     fs_limit_bytes: Optional[int] = None, limits: Optional[Mapping[str, float]] = None,
                     envs: Optional[Mapping[str, str]] = None, network: ops.Network = False,
                     leftovers: Optional[str] = None, policy: Optional[Mapping[str, Any]] = None,
                     secrets: Optional[Mapping[str, Any]] = None, metadata: Optional[Mapping[str, str]] = None,
                     lifetime: Optional[float] = None, idle_timeout: Optional[float] = None,
                     on_expired: Optional[AsyncExpiredCallback] = None,
                     image: Optional[str] = None) -> AsyncSandbox:
        """Creates another sandbox (as :meth:`sbx.Sandboxes.create`)."""
        params = ops.sandbox_options(timeout, fs_limit_bytes, limits, envs, network, leftovers, policy, secrets,
                                     image)
        ops.lifecycle_options(params, metadata, lifetime, idle_timeout)
        if label is not None:
            params["label"] = label
        if persist:
            params["persist"] = True
        sandbox_id: str = await self._client.run_op(ops.create("sandbox.create", params))
        return _watched(_attach(AsyncSandbox, self._client, sandbox_id, root=False), on_expired)

    def get(self, sandbox_id: str) -> AsyncSandbox:
        """A handle on an existing sandbox this connection may use, without asking the server."""
        return _attach(AsyncSandbox, self._client, sandbox_id, root=False)

    async def list(self, metadata: Optional[Mapping[str, str]] = None) -> List[Dict[str, Any]]:
        """Sandboxes this connection may use; with ``metadata``, those whose metadata has every
        one of its pairs (as :meth:`sbx.Sandboxes.list`)."""
        sandboxes: List[Dict[str, Any]] = await self._client.run_op(ops.list_sandboxes(metadata))
        return sandboxes


class AsyncImages:
    """``sandbox.images`` of an :class:`AsyncSandbox`: the server's image store (as
    :class:`sbx.Images`)."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def import_image(self, path: Union[str, "os.PathLike[str]"], name: Optional[str] = None) -> Dict[str, Any]:
        """Imports an OCI layout, OCI archive or docker save tar at ``path``; the image's record
        once it is in the store (as :meth:`sbx.Images.import_image`)."""
        image: Dict[str, Any] = await self._client.run_op(ops.image_import(path, name))
        return image

    async def list(self) -> List[Dict[str, Any]]:
        """The records of the store's images."""
        images: List[Dict[str, Any]] = await self._client.run_op(ops.image_list())
        return images

    async def inspect(self, ref: str) -> Dict[str, Any]:
        """One image's record, by name, id or 12+ hex digits of its id."""
        image: Dict[str, Any] = await self._client.run_op(ops.image_inspect(ref))
        return image

    async def remove(self, ref: str) -> None:
        """Takes a name off its image, or removes the image (refused while a sandbox uses it)."""
        await self._client.run_op(ops.image_remove(ref))
