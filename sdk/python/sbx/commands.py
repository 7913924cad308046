"""Running commands: results, handles, and named sessions."""
from __future__ import annotations

from typing import Any, Dict, List, Literal, Mapping, Optional, Union, overload

from . import _ops as ops
from ._callbacks import OutputCallback
from ._client import INTERNAL_ERROR, Client, PendingCall, SbxError, as_object
from ._ops import run_params as _run_params
from ._ops import seconds_to_ms  # noqa: F401 - re-exported (older imports)
from ._results import CommandResult, ProcessInfo, TextDecoders, wire_bytes  # noqa: F401 - wire_bytes: older imports
from .processes import ProcessHandle, TerminalHandle, start_process

__all__ = ["CommandResult", "CommandHandle", "Commands", "Session", "OutputCallback"]


class _Streams:
    """Turns ``output`` notifications into on_stdout/on_stderr calls (on the reader thread),
    decoded by :class:`~sbx._results.TextDecoders`."""

    def __init__(self, on_stdout: Optional[OutputCallback], on_stderr: Optional[OutputCallback]) -> None:
        self._callbacks: Dict[str, Optional[OutputCallback]] = {"stdout": on_stdout, "stderr": on_stderr}
        self._decoders = TextDecoders()

    def __call__(self, params: Dict[str, Any]) -> None:
        if self._callbacks.get(str(params.get("stream"))) is None:
            return
        piece = self._decoders.decode(params)
        if piece is not None:
            callback = self._callbacks[piece[0]]
            if callback is not None:
                callback(piece[1])

    def flush(self) -> None:
        """Delivers what the decoders still hold (an incomplete character at the end)."""
        for name, text in self._decoders.flush():
            callback = self._callbacks[name]
            if callback is not None:
                callback(text)


class CommandHandle:
    """A command that was sent to the server and may still be running.

    Get one from :meth:`Commands.start` or :meth:`Session.start`. Any thread may
    :meth:`cancel` it while another :meth:`wait` s for it.
    """

    def __init__(self, client: Client, call: PendingCall, streams: Optional[_Streams]) -> None:
        self._client = client
        self._call = call
        self._streams = streams
        self._result: Optional[CommandResult] = None

    @property
    def request_id(self) -> int:
        """The JSON-RPC id of the ``run`` request (what ``cancel`` names)."""
        return self._call.request_id

    def done(self) -> bool:
        """True once the server answered (the command finished or was refused)."""
        return self._call.done()

    def wait(self, timeout: Optional[float] = None) -> CommandResult:
        """Waits for the command to finish and returns its result.

        A non-zero exit status is returned, not raised. Streaming callbacks have all been
        called by the time this returns.

        Args:
            timeout: seconds to wait at most (None: as long as it takes). This does not
                stop the command; use the run's own ``timeout`` or :meth:`cancel` for that.

        Raises:
            SbxError: the server refused the run (e.g. invalid params, code -32602) or
                went away (-32603).
            TimeoutError: ``timeout`` passed first.
            Exception: whatever an output callback raised (the first one; the command's
                later output was then no longer passed to callbacks).
        """
        if self._result is not None:
            return self._result
        if self._client.on_reader_thread() and not self._call.done():
            raise RuntimeError("sbx: cannot wait for a command inside an output callback")
        raw = self._call.wait(timeout)
        if self._streams is not None:
            self._streams.flush()
        result = as_object(raw)
        if result is None:
            raise SbxError(INTERNAL_ERROR, f"malformed run result: {raw!r}")
        self._result = CommandResult.from_wire(result)
        return self._result

    def cancel(self) -> bool:
        """Asks the server to cancel the command (``cancel {requestId}``).

        The waiter then gets exit code 125 and error_class ``"CANCELLED"``. Safe to call
        from any thread, also from inside an output callback (then it does not wait for
        the server's answer).

        Returns:
            True when the cancel was accepted, False when the command had already finished.

        Raises:
            SbxError: the connection is gone while the command is still pending.
        """
        if self._call.done():
            return False
        params = {"requestId": self._call.request_id}
        if self._client.on_reader_thread():
            self._client.send("cancel", params)
            return True
        try:
            self._client.request("cancel", params)
        except SbxError as e:
            # The answer to the run precedes the refusal on the wire, so a finished run is
            # already marked done here; a dead connection fails the run too.
            if self._call.event.wait(1 if e.code == INTERNAL_ERROR else 0):
                return False
            raise
        return True

    def __repr__(self) -> str:
        state = "done" if self.done() else "pending"
        return f"<sbx.CommandHandle request {self.request_id} {state}>"


def start_command(client: Client, sandbox_id: Optional[str], cmd: str, *, cwd: Optional[str] = None,
                  envs: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
                  stdin: Union[bytes, str, None] = None, on_stdout: Optional[OutputCallback] = None,
                  on_stderr: Optional[OutputCallback] = None, session: Optional[str] = None,
                  leftovers: Optional[str] = None, lane: Optional[str] = None,
                  while_paused: Optional[str] = None) -> CommandHandle:
    """Sends a ``run`` request; the shared body of every ``start``."""
    stream = on_stdout is not None or on_stderr is not None
    params = _run_params(sandbox_id, cmd, cwd=cwd, envs=envs, timeout=timeout, stdin=stdin, stream=stream,
                         session=session, leftovers=leftovers, lane=lane, while_paused=while_paused)
    streams = _Streams(on_stdout, on_stderr) if stream else None
    call = client.send("run", params, on_notification=streams)
    return CommandHandle(client, call, streams)


class Commands:
    """``sandbox.commands``: runs commands in a sandbox (by default in session "default")."""

    def __init__(self, client: Client, sandbox_id: Optional[str]) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    def kill_leftovers(self) -> int:
        """Kills everything earlier commands left running (background jobs, servers) and every
        background process (``run(background=True)``, terminals), in one call: what frees a
        sandbox whose process budget they hold. Running foreground commands and the session
        shells are untouched. Returns how many process trees were killed."""
        return int(self._client.run_op(ops.kill_leftovers(self._sandbox_id)))

    def start(self, cmd: str, *, cwd: Optional[str] = None, envs: Optional[Mapping[str, str]] = None,
              timeout: Optional[float] = None, stdin: Union[bytes, str, None] = None,
              on_stdout: Optional[OutputCallback] = None, on_stderr: Optional[OutputCallback] = None,
              session: Optional[str] = None, leftovers: Optional[str] = None, lane: Optional[str] = None,
              while_paused: Optional[str] = None) -> CommandHandle:
        """Starts a command and returns at once; see :meth:`run` for the arguments.

        Returns:
            A :class:`CommandHandle`: ``.wait()`` for the result, ``.cancel()`` to stop it.
        """
        return start_command(self._client, self._sandbox_id, cmd, cwd=cwd, envs=envs, timeout=timeout,
                             stdin=stdin, on_stdout=on_stdout, on_stderr=on_stderr, session=session,
                             leftovers=leftovers, lane=lane, while_paused=while_paused)

    @overload
    def run(self, cmd: str, *, background: Literal[False] = False, cwd: Optional[str] = None,
            envs: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
            stdin: Union[bytes, str, None] = None, on_stdout: Optional[OutputCallback] = None,
            on_stderr: Optional[OutputCallback] = None, session: Optional[str] = None,
            leftovers: Optional[str] = None, lane: Optional[str] = None,
            while_paused: Optional[str] = None) -> CommandResult: ...

    @overload
    def run(self, cmd: str, *, background: Literal[True], cwd: Optional[str] = None,
            envs: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
            stdin: Union[bool, bytes, str, None] = None, on_stdout: Optional[OutputCallback] = None,
            on_stderr: Optional[OutputCallback] = None, session: Optional[str] = None,
            label: Optional[str] = None, lane: Optional[str] = None,
            while_paused: Optional[str] = None) -> ProcessHandle: ...

    def run(self, cmd: str, *, background: bool = False, cwd: Optional[str] = None,
            envs: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
            stdin: Union[bool, bytes, str, None] = None, on_stdout: Optional[OutputCallback] = None,
            on_stderr: Optional[OutputCallback] = None, session: Optional[str] = None,
            leftovers: Optional[str] = None, label: Optional[str] = None, lane: Optional[str] = None,
            while_paused: Optional[str] = None) -> Union[CommandResult, ProcessHandle]:
        """Runs a bash command in the sandbox's persistent session and waits for it, or,
        with ``background=True``, starts it as a background process and returns at once.

        A foreground run's state changes (working directory, exported variables, functions,
        background jobs) persist from one run to the next in the same session. A background
        process starts from its session's state but never changes it.

        Args:
            cmd: bash source text.
            background: start a background process (``process.start``) and return its
                :class:`~sbx.ProcessHandle` (``wait``, ``kill``, ``send_stdin``,
                ``wait_for_port``, ...); it runs until it ends or is killed, also past
                later runs.
            cwd: working directory for this run only.
            envs: extra environment variables for this run only.
            timeout: seconds before the command is killed. Foreground: exit 124,
                error_class ``"TIMEOUT"``, default the sandbox's timeout. Background: the
                process and all it started are killed (status ``"timeout"``, exit 137),
                default none.
            stdin: bytes (or text, sent as UTF-8) on the command's standard input;
                default: /dev/null. Background only: True keeps stdin open for
                ``handle.send_stdin()`` / ``close_stdin()``.
            on_stdout: called with each piece of standard output as it arrives.
            on_stderr: called with each piece of standard error as it arrives.
                Callbacks run on the SDK's reader thread: keep them short and do not make
                blocking SDK calls from them (``handle.cancel()`` / ``handle.kill()`` are
                fine).
            session: session name (default ``"default"``; created on first use).
            leftovers: foreground only. ``"kill"``: what the command leaves running
                (``server &``) is killed when it ends; ``"keep"``: it keeps running;
                default: the sandbox's setting.
            label: background only: free text shown by :meth:`list`.
            lane: the daemon's worker lane: ``"interactive"`` (default) or ``"system"``,
                whose slots interactive work never takes. When the lane's queue is full the
                run raises SbxError -32001 with ``retry_after_ms``.
            while_paused: on a paused sandbox (:meth:`Sandbox.pause`): ``"wait"`` (default)
                for the resume, or ``"refuse"``: raise SbxError (code 1) at once.

        Returns:
            Foreground: the :class:`CommandResult`. A non-zero exit status does **not**
            raise (E2B raises ``CommandExitException``; sbx returns the result): check
            ``result.exit_code``. Background: a :class:`~sbx.ProcessHandle`.

        Raises:
            SbxError: a protocol error, e.g. an invalid env name (code -32602), the
                sandbox's 64 live background processes (-32001), or the server went away
                (-32603).
            ValueError: an argument of the other mode (``label`` or ``stdin=True`` without
                ``background``, ``leftovers`` with it).
        """
        stdin = ops.check_run_mode(background, stdin, leftovers, label)
        if background:
            return start_process(self._client, self._sandbox_id, cmd, cwd=cwd, envs=envs, timeout=timeout,
                                 stdin=stdin, session=session, label=label, on_stdout=on_stdout,
                                 on_stderr=on_stderr, lane=lane, while_paused=while_paused)
        assert not isinstance(stdin, bool)
        return self.start(cmd, cwd=cwd, envs=envs, timeout=timeout, stdin=stdin, on_stdout=on_stdout,
                          on_stderr=on_stderr, session=session, leftovers=leftovers, lane=lane,
                          while_paused=while_paused).wait()

    def list(self) -> List[ProcessInfo]:
        """The sandbox's background processes (``process.list``), oldest first: those of
        ``run(background=True)`` and terminals (origin ``"start"``), and what foreground
        runs left running (origin ``"leftover"``), running or ended."""
        processes: List[ProcessInfo] = self._client.run_op(ops.list_processes(self._sandbox_id))
        return processes

    def kill(self, pid: Union[int, str], signal: Union[str, int, None] = None) -> bool:
        """Kills a background process and everything it started, by its pid inside the
        sandbox (or by its process id, a str such as ``"p12"``): ``signal`` (default TERM),
        then KILL after 2 s. Returns once they are all dead.

        Returns:
            True when it was killed; False when no running process has that pid.
        """
        return bool(self._client.run_op(ops.kill_by_pid(self._sandbox_id, pid, signal)))

    def connect(self, pid: Union[int, str], on_stdout: Optional[OutputCallback] = None,
                on_stderr: Optional[OutputCallback] = None) -> ProcessHandle:
        """A handle on a background process that is running (or has ended), by its pid inside
        the sandbox (or its process id, a str).

        Its output is delivered from where this SDK (this Python process) last delivered
        output of that process, through any handle and any connection, else from the start:
        across reconnects every byte reaches the callbacks exactly once (bytes the daemon's
        1 MiB log dropped in between are counted in ``dropped_bytes``). Typical use: a
        persistent sandbox reached again with ``Sandbox.connect(socket)`` and
        ``sandboxes.get(sandbox_id)``.

        Raises:
            SbxError: no process of the sandbox has that pid (-32602).
        """
        info: ProcessInfo = self._client.run_op(ops.connectable(self._sandbox_id, pid))
        cls = TerminalHandle if info.pty else ProcessHandle
        return cls(self._client, self._sandbox_id, info.process_id, info.pid, on_stdout=on_stdout,
                   on_stderr=on_stderr, resume=True)


class Session:
    """A named shell session of a sandbox, with its own working directory, variables and
    history. Get one from ``sandbox.sessions.create(name)`` or ``.get(name)``."""

    def __init__(self, client: Client, sandbox_id: Optional[str], name: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id
        self.name: str = name
        """The session's name."""

    def _params(self, **extra: Any) -> Dict[str, Any]:
        params: Dict[str, Any] = {"session": self.name}
        if self._sandbox_id is not None:
            params["sandboxId"] = self._sandbox_id
        params.update(extra)
        return params

    def start(self, cmd: str, *, cwd: Optional[str] = None, envs: Optional[Mapping[str, str]] = None,
              timeout: Optional[float] = None, stdin: Union[bytes, str, None] = None,
              on_stdout: Optional[OutputCallback] = None, on_stderr: Optional[OutputCallback] = None,
              leftovers: Optional[str] = None, lane: Optional[str] = None,
              while_paused: Optional[str] = None) -> CommandHandle:
        """Starts a command in this session; see :meth:`Commands.run` for the arguments."""
        return start_command(self._client, self._sandbox_id, cmd, cwd=cwd, envs=envs, timeout=timeout,
                             stdin=stdin, on_stdout=on_stdout, on_stderr=on_stderr, session=self.name,
                             leftovers=leftovers, lane=lane, while_paused=while_paused)

    def run(self, cmd: str, *, cwd: Optional[str] = None, envs: Optional[Mapping[str, str]] = None,
            timeout: Optional[float] = None, stdin: Union[bytes, str, None] = None,
            on_stdout: Optional[OutputCallback] = None, on_stderr: Optional[OutputCallback] = None,
            session: Optional[str] = None, leftovers: Optional[str] = None, lane: Optional[str] = None,
            while_paused: Optional[str] = None) -> CommandResult:
        """Runs a command in this session and waits for it; see :meth:`Commands.run`.

        ``session``, if given, must be this session's name (it is accepted only so that
        the signature matches ``commands.run``).
        """
        if session is not None and session != self.name:
            raise ValueError(f"this is session {self.name!r}, not {session!r}")
        return self.start(cmd, cwd=cwd, envs=envs, timeout=timeout, stdin=stdin, on_stdout=on_stdout,
                          on_stderr=on_stderr, leftovers=leftovers, lane=lane, while_paused=while_paused).wait()

    def delete(self) -> None:
        """Ends the session; its running command is cancelled."""
        params = self._params(name=self.name)
        del params["session"]
        self._client.run_op(ops.call("session.delete", params))

    def history(self) -> List[Dict[str, Any]]:
        """Commands run in this session: ``[{index, command, timestamp}]``, oldest first."""
        entries: List[Dict[str, Any]] = self._client.run_op(ops.history(self._sandbox_id, self.name))
        return entries

    def clear_history(self) -> None:
        """Forgets this session's history."""
        self._client.run_op(ops.call("shell.history.clear", self._params()))

    def __repr__(self) -> str:
        return f"<sbx.Session {self.name!r}>"
