"""The Sandbox handle and its per-sandbox namespaces (sessions, env, sandboxes)."""
from __future__ import annotations

import datetime
import os
from types import TracebackType
from typing import Any, Callable, Dict, List, Mapping, Optional, Type, Union

from . import _ops as ops
from . import code as _code
from .code import CodeContext, CodeHandle, Execution, ExecutionError, Result
from ._client import Client, SbxError
from ._results import SandboxMetric
from ._protocol import ExpiredCallback
from ._ops import sandbox_options as _sandbox_options
from .commands import Commands, Session
from .files import Files
from .processes import Pty

__all__ = ["Sandbox", "Sessions", "Env", "Sandboxes", "Images"]


class Sandbox:
    """One sbx sandbox: an isolated Linux environment with persistent bash sessions.

    ``Sandbox()`` starts a private ``sbx serve --stdio`` server and creates the sandbox;
    :meth:`connect` uses a shared ``sbx serve --socket`` server instead. Either way the
    object is a handle on (connection, sandbox id); :attr:`sandboxes` makes more sandboxes
    on the same connection.

    Use it as a context manager, or call :meth:`kill` when done::

        with Sandbox(timeout=10) as sb:
            print(sb.commands.run("echo hi").stdout)

    Args:
        timeout: default per-command timeout in seconds (server default: 30).
        fs_limit_bytes: size of /tmp + /home/user (server default: 256 MiB).
        limits: resource limits, by protocol name or snake_case: stdoutBytes,
            stderrBytes, commandBytes, fileCount, memoryBytes, pids, rpcBytes, and cpus
            (a number of CPUs, fractions allowed; server default: half the host's).
        envs: extra environment variables for every command.
        network: ``False`` or ``"none"`` (default): loopback only; ``True`` or ``"host"``:
            the host's network; a list of host patterns (``["pypi.org", "*.github.com",
            "api.test:8080"]``): only those names, through an HTTP proxy the sandbox's
            HTTP_PROXY and HTTPS_PROXY name (curl, pip, npm, git, urllib use it); anything
            else is refused with 403.
        leftovers: ``"kill"``: what a command leaves running is killed when it ends (for
            agents that never want background processes); ``"keep"`` (the default): it keeps
            running. A run may say otherwise (``commands.run(..., leftovers=...)``).
        policy: an exec policy the kernel enforces for every process of the sandbox:
            ``{"allow": [...], "deny": [...]}``, absolute paths or glob patterns in the
            sandbox (``"/usr/bin/**"``: a whole directory). With allow only those may be
            executed, with deny alone all but those; a denied exec fails with EACCES.
        binary: the sbx binary; default ``$SBX_BIN``, else ``sbx`` on ``$PATH``, else the
            repository's ``build/src/cli/sbx``.
        secrets: ``{NAME: value}`` (or ``{NAME: {"value": ..., "mode": "env"}}``): set in every
            command's environment as NAME, never shown back, and each value (8 bytes or more)
            replaced by ``[REDACTED:NAME]`` in all output and history. ``{NAME: {"value": ...,
            "hosts": ["api.example.com"]}}`` (mode ``"proxy"``, with ``network`` a list or
            ``"allowlist"``; the hosts are allowed with it): commands see only a placeholder
            ``SBX_SECRET_NAME_<random>`` in NAME, and the proxy puts the value in its place
            in the request line and headers of HTTPS requests to those hosts (it ends their
            TLS with a CA of the sandbox's own, which the sandbox trusts).
        metadata: ``{key: value}`` strings shown by ``sandboxes.list()`` and :meth:`get_info`,
            and filtered on by ``sandboxes.list(metadata=...)``: at most 32 keys of
            ``[A-Za-z0-9_.-]``, values up to 1024 bytes.
        lifetime: seconds after which the server destroys the sandbox (default: never; at
            most 31 days); :meth:`set_timeout` moves it. Not a command timeout (that is
            ``timeout``).
        idle_timeout: seconds without a request naming the sandbox after which the server
            destroys it (a command that is still running is no activity: only requests are).
        on_expired: called with ``"lifetime"`` or ``"idle"`` once the server destroyed the
            sandbox because it expired (see :meth:`on_expired`).
        image: an image of the server's store (:attr:`images`) as the sandbox's root, read-only:
            a name (``"app:1"``; ``"app"`` is ``"app:latest"``), its id ``"sha256:..."`` or 12+
            hex digits of it. Commands start with the image's Env; /tmp, /home/user and /dev/shm
            are the sandbox's own. The image cannot be removed while the sandbox lives.

    Raises:
        SbxError: the server refused the options or could not create the sandbox.
        FileNotFoundError: no sbx binary was found.
    """

    _client: Client
    _sandbox_id: str
    _root: bool
    _owns_server: bool
    _killed: bool

    def __init__(self, *, timeout: Optional[float] = None, fs_limit_bytes: Optional[int] = None,
                 limits: Optional[Mapping[str, float]] = None, envs: Optional[Mapping[str, str]] = None,
                 network: ops.Network = False, leftovers: Optional[str] = None, binary: Optional[str] = None,
                 policy: Optional[Mapping[str, Any]] = None,
                secrets: Optional[Mapping[str, Any]] = None, metadata: Optional[Mapping[str, str]] = None,
                 lifetime: Optional[float] = None, idle_timeout: Optional[float] = None,
                 on_expired: Optional[ExpiredCallback] = None, image: Optional[str] = None) -> None:
        params = _sandbox_options(timeout, fs_limit_bytes, limits, envs, network, leftovers, policy, secrets, image)
        ops.lifecycle_options(params, metadata, lifetime, idle_timeout)
        client = Client.spawn(binary)
        try:
            sandbox_id: str = client.run_op(ops.create("create", params))
        except BaseException:
            client.close(wait_process=1)
            raise
        self._setup(client, sandbox_id, root=True, owns_server=True)
        if on_expired is not None:
            self.on_expired(on_expired)

    @classmethod
    def create(cls, *, timeout: Optional[float] = None, fs_limit_bytes: Optional[int] = None,
               limits: Optional[Mapping[str, float]] = None, envs: Optional[Mapping[str, str]] = None,
               network: ops.Network = False, leftovers: Optional[str] = None, binary: Optional[str] = None,
               policy: Optional[Mapping[str, Any]] = None,
                secrets: Optional[Mapping[str, Any]] = None, metadata: Optional[Mapping[str, str]] = None,
               lifetime: Optional[float] = None, idle_timeout: Optional[float] = None,
               on_expired: Optional[ExpiredCallback] = None, image: Optional[str] = None) -> "Sandbox":
        """E2B's name for the constructor: ``Sandbox.create(...)`` is ``Sandbox(...)`` (a
        private ``sbx serve --stdio`` and its sandbox)."""
        return cls(timeout=timeout, fs_limit_bytes=fs_limit_bytes, limits=limits, envs=envs, network=network,
                   leftovers=leftovers, binary=binary, policy=policy, secrets=secrets, metadata=metadata,
                   lifetime=lifetime, idle_timeout=idle_timeout, on_expired=on_expired, image=image)

    @classmethod
    def connect(cls, socket_path: Union[str, "os.PathLike[str]"], *, timeout: Optional[float] = None,
                fs_limit_bytes: Optional[int] = None, limits: Optional[Mapping[str, float]] = None,
                envs: Optional[Mapping[str, str]] = None, network: ops.Network = False,
                leftovers: Optional[str] = None, policy: Optional[Mapping[str, Any]] = None,
                secrets: Optional[Mapping[str, Any]] = None, metadata: Optional[Mapping[str, str]] = None,
                lifetime: Optional[float] = None, idle_timeout: Optional[float] = None,
                on_expired: Optional[ExpiredCallback] = None, image: Optional[str] = None) -> "Sandbox":
        """Connects to ``sbx serve --socket socket_path`` and creates this connection's root
        sandbox there (options as for the constructor).

        :meth:`kill` on it closes the connection, which destroys the sandboxes it made
        (except persistent ones); the server keeps running.
        """
        params = _sandbox_options(timeout, fs_limit_bytes, limits, envs, network, leftovers, policy, secrets, image)
        ops.lifecycle_options(params, metadata, lifetime, idle_timeout)
        client = Client.connect(os.fspath(socket_path))
        try:
            sandbox_id: str = client.run_op(ops.create("create", params))
        except BaseException:
            client.close()
            raise
        return _watched(_attach(cls, client, sandbox_id, root=True), on_expired)

    def _setup(self, client: Client, sandbox_id: str, *, root: bool, owns_server: bool) -> None:
        self._client = client
        self._sandbox_id = sandbox_id
        self._root = root
        self._owns_server = owns_server
        self._killed = False
        self.commands: Commands = Commands(client, sandbox_id)
        """Runs commands: ``run``, ``start``."""
        self.sessions: Sessions = Sessions(client, sandbox_id)
        """Named sessions: ``create``, ``get``, ``list``, ``delete``."""
        self.env: Env = Env(client, sandbox_id)
        """Session environment variables: ``set``, ``get``."""
        self.files: Files = Files(client, sandbox_id)
        """The filesystem: ``read``, ``write``, ``list``, ``get_info``, ``exists``, ``make_dir``,
        ``remove``, ``rename``."""
        self.sandboxes: Sandboxes = Sandboxes(client)
        """More sandboxes on this connection: ``create``, ``list``, ``get``."""
        self.pty: Pty = Pty(client, sandbox_id)
        """Interactive terminals: ``create``."""
        self.images: Images = Images(client)
        """The server's image store: ``import_image``, ``list``, ``inspect``, ``remove``."""

    # ------------------------------------------------------------ code

    def run_code(self, code: str, *, language: Optional[str] = None, context: Union[CodeContext, str, None] = None,
                 timeout: Optional[float] = None, envs: Optional[Mapping[str, str]] = None,
                 on_stdout: Optional[Callable[[str], None]] = None, on_stderr: Optional[Callable[[str], None]] = None,
                 on_result: Optional[Callable[[Result], None]] = None,
                 on_error: Optional[Callable[[ExecutionError], None]] = None) -> Execution:
        """Runs a cell in a code context and returns its :class:`~sbx.code.Execution`.

        Without ``context``, the language's default context (``language``: ``"python"``, the
        default, or ``"bash"``), made on first use. Python cells have IPython's semantics: the
        last expression is the main result, ``display()`` adds results, a matplotlib figure
        comes as PNG (``result.png``, base64), a DataFrame as HTML (``result.html``).

        A cell killed by ``timeout`` (seconds; default: the sandbox's) or a cancel, or whose
        process dies, leaves the context exactly as it was before it: ``execution.error`` says
        why (``TimeoutError``, ``CancelledError``, ``CellDied``). The callbacks get what the cell
        prints and shows as it happens (on the connection's reader thread).
        """
        return self.start_code(code, language=language, context=context, timeout=timeout, envs=envs,
                               on_stdout=on_stdout, on_stderr=on_stderr, on_result=on_result,
                               on_error=on_error).wait()

    def start_code(self, code: str, *, language: Optional[str] = None, context: Union[CodeContext, str, None] = None,
                   timeout: Optional[float] = None, envs: Optional[Mapping[str, str]] = None,
                   on_stdout: Optional[Callable[[str], None]] = None, on_stderr: Optional[Callable[[str], None]] = None,
                   on_result: Optional[Callable[[Result], None]] = None,
                   on_error: Optional[Callable[[ExecutionError], None]] = None) -> CodeHandle:
        """As :meth:`run_code`, without waiting: ``.wait()`` or ``.cancel()`` the handle."""
        return _code.start(self._client, self._sandbox_id, code, context=context, language=language,
                           timeout=timeout, envs=envs, on_stdout=on_stdout, on_stderr=on_stderr,
                           on_result=on_result, on_error=on_error)

    def create_code_context(self, *, language: str = "python", cwd: Optional[str] = None,
                            envs: Optional[Mapping[str, str]] = None) -> CodeContext:
        """A new code context (``"python"`` or ``"bash"``), its interpreter started."""
        return CodeContext.from_wire(self._client.request(
            "context.create", _code.context_params(self._sandbox_id, language=language, cwd=cwd, envs=envs)))

    def list_code_contexts(self) -> List[CodeContext]:
        res = self._client.request("context.list", {"sandboxId": self._sandbox_id})
        return [CodeContext.from_wire(c) for c in res.get("contexts", [])]

    def restart_code_context(self, context: Union[CodeContext, str]) -> CodeContext:
        """A fresh interpreter for the context: every variable of it is gone."""
        return CodeContext.from_wire(self._client.request(
            "context.restart", {"sandboxId": self._sandbox_id, "contextId": _code.context_id(context)}))

    def remove_code_context(self, context: Union[CodeContext, str]) -> None:
        self._client.request("context.destroy", {"sandboxId": self._sandbox_id, "contextId": _code.context_id(context)})

    # ------------------------------------------------------------ identity

    @property
    def sandbox_id(self) -> str:
        """The sandbox's id (32 hex digits)."""
        return self._sandbox_id

    @property
    def is_root(self) -> bool:
        """True for the connection's root sandbox (made by ``Sandbox()`` or ``connect``)."""
        return self._root

    @property
    def client(self) -> Client:
        """The JSON-RPC connection this sandbox is reached through."""
        return self._client

    def _params(self, **extra: Any) -> Dict[str, Any]:
        return ops.with_sandbox(self._sandbox_id, **extra)

    # ------------------------------------------------------------ history, server

    def history(self, session: Optional[str] = None) -> List[Dict[str, Any]]:
        """Commands run in a session (default "default"), oldest first: a list of
        ``{index, command, timestamp}`` (the newest 1000)."""
        entries: List[Dict[str, Any]] = self._client.run_op(ops.history(self._sandbox_id, session))
        return entries

    def clear_history(self, session: Optional[str] = None) -> None:
        """Forgets a session's history (default "default")."""
        self._client.run_op(ops.call("shell.history.clear", self._params(session=session)))

    def health(self) -> Dict[str, Any]:
        """Server statistics: ``{uptimeMs, sandboxes, sessions, running, queued,
        totals: {completed, failed, timedOut, cancelled, avgExecMs}}``."""
        health: Dict[str, Any] = self._client.run_op(ops.health())
        return health

    def ping(self) -> bool:
        """True when the server answers; False when the connection is gone."""
        try:
            return bool(self._client.run_op(ops.ping()))
        except SbxError:
            if self._client.closed:
                return False
            raise

    # ------------------------------------------------------------ ports

    def get_host(self, port: int) -> str:
        """``"127.0.0.1:N"``: an address on the host that reaches TCP ``port`` inside the
        sandbox (``port.expose``; the daemon forwards each connection into the sandbox's
        network namespace). Asking again for the same port returns the same address. The
        mapping lives as long as the sandbox.

        Raises:
            SbxError: ``port`` is not in 1-65535 (-32602).
        """
        host: str = self._client.run_op(ops.get_host(self._sandbox_id, port))
        return host

    # ------------------------------------------------------------ fork, snapshots, export

    def fork(self, *, lane: Optional[str] = None) -> "Sandbox":
        """A new sandbox with a copy of this one's files, every session's state, its limits
        and options (``sandbox.fork``), on the same connection. Parent and fork are
        independent from then on; background processes are not copied. End it with
        :meth:`destroy`.

        ``lane``: ``"system"`` takes a slot the daemon keeps for that lane (default
        ``"interactive"``); so for :meth:`snapshot`, :meth:`restore`, :meth:`export_state`
        and :meth:`import_state`."""
        sandbox_id: str = self._client.run_op(ops.fork(self._sandbox_id, lane))
        return _attach(type(self), self._client, sandbox_id, root=False)

    def pause(self) -> None:
        """Freezes every process of the sandbox in place (``sandbox.pause``: the cgroup freezer;
        memory kept, no CPU), returning once frozen. Runs sent meanwhile wait for
        :meth:`resume` (or fail at once with ``while_paused="refuse"``); fork, snapshots,
        export and import are refused. A running command's timeout keeps counting.

        Raises:
            SbxError: it is paused already (-32602).
        """
        self._client.run_op(ops.call("sandbox.pause", self._params()))

    def resume(self) -> None:
        """Lets a paused sandbox go on exactly where it was (``sandbox.resume``)."""
        self._client.run_op(ops.call("sandbox.resume", self._params()))

    def set_timeout(self, timeout: float) -> None:
        """E2B's ``set_timeout``: the sandbox is destroyed ``timeout`` seconds from now (0:
        never) unless extended again (``sandbox.setTimeout``). Its ``idle_timeout`` stays.

        Raises:
            ValueError: ``timeout`` is negative.
        """
        self._client.run_op(ops.set_timeout(self._sandbox_id, timeout))

    def get_metrics(self, start: Union[None, float, datetime.datetime] = None,
                    end: Union[None, float, datetime.datetime] = None) -> List[SandboxMetric]:
        """E2B's ``get_metrics``: what the sandbox used over time, a :class:`SandboxMetric`
        every 5 s for the last hour (``sandbox.metrics``), oldest first; ``start`` and ``end``
        (aware datetimes, or seconds since the epoch) keep those in between.

        Raises:
            SbxError: ``start`` is after ``end`` (-32602).
        """
        return self._client.run_op(ops.metrics(self._sandbox_id, start, end))

    def on_expired(self, callback: ExpiredCallback) -> Callable[[], None]:
        """Calls ``callback(reason)`` once the server destroyed this sandbox because it
        expired: ``"lifetime"`` (``lifetime``, :meth:`set_timeout`) or ``"idle"``
        (``idle_timeout``). It runs on the SDK's reader thread (at once, here, if the
        sandbox expired already): keep it short and make no blocking SDK call from it. Only
        the connection that owns the sandbox is told. Returns a function that unsubscribes.
        """
        return self._client.on_expired(self._sandbox_id, callback)

    @property
    def expired(self) -> Optional[str]:
        """``"lifetime"`` or ``"idle"`` once this connection was told the sandbox expired,
        else None."""
        return self._client.expired_reason(self._sandbox_id)

    def get_info(self) -> Dict[str, Any]:
        """This sandbox as ``sandbox.list`` shows it: ``{sandboxId, label?, metadata, paused,
        createdAt, persist, root}``.

        Raises:
            SbxError: it is gone, destroyed or expired (-32602).
        """
        info: Dict[str, Any] = self._client.run_op(ops.sandbox_info(self._sandbox_id, self.expired))
        return info

    def snapshot(self, *, lane: Optional[str] = None) -> str:
        """Saves the files and session states; returns the snapshot id (``snapshot.create``)."""
        return str(self._client.run_op(ops.snapshot(self._sandbox_id, lane)))

    def restore(self, snapshot_id: str, *, lane: Optional[str] = None) -> None:
        """Brings back a snapshot's files and session states, as often as wanted
        (``snapshot.restore``). Background processes are killed."""
        self._client.run_op(ops.restore(self._sandbox_id, snapshot_id, lane))

    def list_snapshots(self) -> List[Dict[str, Any]]:
        """``[{id, createdAt, bytes}]``, oldest first."""
        snapshots: List[Dict[str, Any]] = self._client.run_op(ops.list_snapshots(self._sandbox_id))
        return snapshots

    def delete_snapshot(self, snapshot_id: str) -> None:
        """Deletes a snapshot (``snapshot.delete``)."""
        self._client.run_op(ops.call("snapshot.delete", self._params(id=snapshot_id)))

    def export_state(self, *, lane: Optional[str] = None) -> bytes:
        """The sandbox as a zstd-compressed tar (files, session states, limits, digest):
        ``persistence.export``. ``tar --zstd -xf`` opens it."""
        blob: bytes = self._client.run_op(ops.export_state(self._sandbox_id, lane))
        return blob

    def import_state(self, blob: bytes, *, lane: Optional[str] = None) -> None:
        """Replaces the files and session states with an exported archive's
        (``persistence.import``). A refused archive raises and changes nothing."""
        self._client.run_op(ops.import_state(self._sandbox_id, blob, lane))

    # ------------------------------------------------------------ ending

    def destroy(self) -> None:
        """Destroys this sandbox (``sandbox.destroy``): kills its processes and removes it.

        On a root sandbox this is :meth:`kill`.
        """
        if self._root:
            self.kill()
            return
        if self._killed:
            return
        self._client.run_op(ops.call("sandbox.destroy", {"sandboxId": self._sandbox_id}))
        self._killed = True

    def kill(self) -> None:
        """Ends the sandbox. Idempotent.

        * Spawned server (``Sandbox()``): sends ``kill``, which destroys every sandbox of
          that server, then waits for the process to exit (terminated after 5 s).
        * Socket connection (:meth:`connect`): closes the connection, which destroys the
          sandboxes this connection made (not persistent ones); the server keeps running.
        * A sandbox made with ``sandboxes.create``: :meth:`destroy`.
        """
        if self._killed:
            return
        if not self._root:
            try:
                self.destroy()
            except SbxError:
                if not self._client.closed:
                    raise
                self._killed = True
            return
        self._killed = True
        if self._owns_server:
            try:
                # Not waited for: the reader keeps routing answers (pending runs get theirs)
                # until the server closes its stdout; close() waits for the process.
                self._client.send("kill")
            except SbxError:
                pass  # already gone: close() below cleans up
        self._client.close(wait_process=5)

    def close(self) -> None:
        """Alias of :meth:`kill`."""
        self.kill()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.kill()

    def __repr__(self) -> str:
        kind = "root" if self._root else "child"
        state = " killed" if self._killed else ""
        return f"<sbx.Sandbox {self._sandbox_id} {kind}{state}>"


def _attach(cls: Type[Sandbox], client: Client, sandbox_id: str, *, root: bool) -> Sandbox:
    """A Sandbox handle on an existing sandbox of ``client`` (no server call)."""
    obj = cls.__new__(cls)
    obj._setup(client, sandbox_id, root=root, owns_server=False)  # pyright: ignore[reportPrivateUsage]
    return obj


def _watched(sb: Sandbox, on_expired: Optional[ExpiredCallback]) -> Sandbox:
    """``sb``, with ``on_expired`` registered when given."""
    if on_expired is not None:
        sb.on_expired(on_expired)
    return sb


class Sessions:
    """``sandbox.sessions``: named sessions, each with its own shell state and history."""

    def __init__(self, client: Client, sandbox_id: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    def create(self, name: str) -> Session:
        """Creates a session (name: 1-64 of ``[A-Za-z0-9_.-]``).

        Raises:
            SbxError: it exists already, or the name is invalid (-32602).
        """
        created: str = self._client.run_op(ops.session_create(self._sandbox_id, name))
        return Session(self._client, self._sandbox_id, created)

    def get(self, name: str) -> Session:
        """A handle on a session by name, without asking the server (runs create it on
        first use)."""
        return Session(self._client, self._sandbox_id, name)

    def list(self) -> List[str]:
        """The names of the sandbox's sessions."""
        names: List[str] = self._client.run_op(ops.session_list(self._sandbox_id))
        return names

    def delete(self, name: str) -> None:
        """Ends a session; its running command is cancelled.

        Raises:
            SbxError: no such session (-32602).
        """
        self._client.run_op(ops.call("session.delete", {"sandboxId": self._sandbox_id, "name": name}))


class Env:
    """``sandbox.env``: variables exported in a session's shell (they persist)."""

    def __init__(self, client: Client, sandbox_id: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    def set(self, name: str, value: str, session: Optional[str] = None) -> None:
        """Exports ``name=value`` in a session (default "default").

        Raises:
            SbxError: the name does not match ``^[A-Za-z_][A-Za-z0-9_]*$`` (-32602).
        """
        self._client.run_op(ops.env_set(self._sandbox_id, name, value, session))

    def get(self, name: str, session: Optional[str] = None) -> Optional[str]:
        """The value of an exported variable of a session, or None when it is unset."""
        value: Optional[str] = self._client.run_op(ops.env_get(self._sandbox_id, name, session))
        return value


class Sandboxes:
    """``sandbox.sandboxes``: more sandboxes on the same connection."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def create(self, label: Optional[str] = None, persist: bool = False, *, timeout: Optional[float] = None,
               fs_limit_bytes: Optional[int] = None, limits: Optional[Mapping[str, float]] = None,
               envs: Optional[Mapping[str, str]] = None, network: ops.Network = False,
               leftovers: Optional[str] = None, policy: Optional[Mapping[str, Any]] = None,
                secrets: Optional[Mapping[str, Any]] = None, metadata: Optional[Mapping[str, str]] = None,
               lifetime: Optional[float] = None, idle_timeout: Optional[float] = None,
               on_expired: Optional[ExpiredCallback] = None, image: Optional[str] = None) -> Sandbox:
        """Creates another sandbox (``sandbox.create``) and returns its handle.

        It lives until :meth:`Sandbox.destroy`, or until this connection closes, unless
        ``persist`` (socket servers only) keeps it past the connection's end.

        Args:
            label: free text shown by :meth:`list`.
            persist: outlive this connection (socket server only).
            timeout, fs_limit_bytes, limits, envs, network, leftovers, policy, secrets,
                metadata, lifetime, idle_timeout, on_expired, image: as for :class:`Sandbox`.
        """
        params = _sandbox_options(timeout, fs_limit_bytes, limits, envs, network, leftovers, policy, secrets, image)
        ops.lifecycle_options(params, metadata, lifetime, idle_timeout)
        if label is not None:
            params["label"] = label
        if persist:
            params["persist"] = True
        sandbox_id: str = self._client.run_op(ops.create("sandbox.create", params))
        return _watched(_attach(Sandbox, self._client, sandbox_id, root=False), on_expired)

    def get(self, sandbox_id: str) -> Sandbox:
        """A handle on an existing sandbox this connection may use (one of its own, or a
        persistent one), without asking the server."""
        return _attach(Sandbox, self._client, sandbox_id, root=False)

    def list(self, metadata: Optional[Mapping[str, str]] = None) -> List[Dict[str, Any]]:
        """Sandboxes this connection may use: ``[{sandboxId, label?, metadata, paused,
        createdAt, persist, root}]``; with ``metadata``, only those whose metadata has every
        one of its ``{key: value}`` pairs."""
        sandboxes: List[Dict[str, Any]] = self._client.run_op(ops.list_sandboxes(metadata))
        return sandboxes


class Images:
    """``sandbox.images``: the server's image store (``sbx serve --image-store DIR``), shared
    by every connection. An image record is a dict: ``{id, names, layers, bytes, bash, config:
    {env, workingDir, user, entrypoint, cmd, architecture, os, created}, source, manifest,
    importedAt, newLayers, sandboxes}``."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def import_image(self, path: Union[str, "os.PathLike[str]"], name: Optional[str] = None) -> Dict[str, Any]:
        """Imports an OCI layout directory, an OCI archive or a ``docker save`` / ``podman
        save`` tar (compressed or not) at ``path`` on this host (``image.import``); returns the
        image's record once it is in the store (this may take seconds). ``name`` (``"x:tag"``;
        ``"x"`` is ``"x:latest"``) names it, else the names the input carries.

        Raises:
            SbxError: the server has no image store, or refused the input (one line says why).
        """
        image: Dict[str, Any] = self._client.run_op(ops.image_import(path, name))
        return image

    def list(self) -> List[Dict[str, Any]]:
        """The records of the store's images (``image.list``)."""
        images: List[Dict[str, Any]] = self._client.run_op(ops.image_list())
        return images

    def inspect(self, ref: str) -> Dict[str, Any]:
        """One image's record, by name, id or 12+ hex digits of its id (``image.inspect``).

        Raises:
            SbxError: no such image (-32602).
        """
        image: Dict[str, Any] = self._client.run_op(ops.image_inspect(ref))
        return image

    def remove(self, ref: str) -> None:
        """Takes a name off its image; given the id or the image's last name, removes the image
        and the layers no other image has (``image.remove``).

        Raises:
            SbxError: no such image, or a sandbox made from it still lives.
        """
        self._client.run_op(ops.image_remove(ref))
