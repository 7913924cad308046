"""The SDK's protocol operations, written once for the threaded and the asyncio SDK.

Each operation is a generator: it yields ``(method, params)`` for every request it needs,
gets back the result (or has the request's exception thrown in), and returns what the
SDK method returns. ``Client.run_op`` drives one with blocking requests,
``AsyncClient.run_op`` with awaited ones; the SDK classes of both are thin wrappers. The
params builders for the streaming methods (``run``, ``process.start``) are here too.
"""
from __future__ import annotations

import base64
import collections
import datetime
import os
from typing import Any, Deque, Dict, Generator, Mapping, Optional, Sequence, Tuple, Union

from ._protocol import INVALID_PARAMS, SbxError, as_object
from ._results import EntryInfo, ProcessInfo, SandboxMetric

Request = Tuple[str, Optional[Dict[str, Any]]]
#: An operation returning R: ``Op[R]``.
Op = Generator[Request, Any, Any]

#: Bytes moved per files request: the server reads at most 4 MiB per call, and a base64
#: request must stay under the 8 MiB line limit.
CHUNK = 4 * 1024 * 1024


# ------------------------------------------------------------------ params


def seconds_to_ms(seconds: float) -> int:
    """A timeout in seconds as the protocol's whole milliseconds."""
    if seconds < 0:
        raise ValueError(f"timeout must not be negative: {seconds!r}")
    return int(round(seconds * 1000))


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


#: A sandbox's network: False or "none" (loopback only), True or "host" (the host's), or a list
#: of host patterns ("pypi.org", "*.example.com", "api.test:8080"): "allowlist", an HTTP proxy
#: inside that reaches those names only.
Network = Union[bool, str, Sequence[str]]


def sandbox_options(timeout: Optional[float], fs_limit_bytes: Optional[int],
                    limits: Optional[Mapping[str, float]], envs: Optional[Mapping[str, str]],
                    network: Network, leftovers: Optional[str] = None,
                    policy: Optional[Mapping[str, Any]] = None,
                    secrets: Optional[Mapping[str, Any]] = None, image: Optional[str] = None) -> Dict[str, Any]:
    """The ``create`` / ``sandbox.create`` params for these options."""
    params: Dict[str, Any] = {}
    if timeout is not None:
        params["timeoutMs"] = seconds_to_ms(timeout)
    if fs_limit_bytes is not None:
        params["fsLimitBytes"] = int(fs_limit_bytes)
    if limits:
        # Both the protocol's names (stdoutBytes) and snake_case (stdout_bytes) are accepted.
        params["limits"] = {_camel(k): v for k, v in limits.items()}
    if envs:
        params["env"] = dict(envs)
    if isinstance(network, str):
        params["network"] = network
    elif isinstance(network, bool):
        if network:
            params["network"] = True
    elif network is not None:
        params["network"] = "allowlist"
        params["networkAllow"] = list(network)
    if leftovers is not None:
        params["leftovers"] = leftovers
    if policy is not None:
        params["policy"] = {k: list(v) for k, v in policy.items()}
    if secrets:
        params["secrets"] = dict(secrets)
    if image is not None:
        params["image"] = str(image)
    return params


def lifecycle_options(params: Dict[str, Any], metadata: Optional[Mapping[str, str]], lifetime: Optional[float],
                      idle_timeout: Optional[float]) -> Dict[str, Any]:
    """Adds what ``create`` / ``sandbox.create`` take about a sandbox's life to ``params``:
    ``metadata`` (``{key: value}``), ``lifetime`` and ``idle_timeout`` (seconds). Returns
    ``params``."""
    if metadata is not None:
        params["metadata"] = dict(metadata)
    if lifetime is not None:
        params["lifetimeMs"] = seconds_to_ms(lifetime)
    if idle_timeout is not None:
        params["idleTimeoutMs"] = seconds_to_ms(idle_timeout)
    return params


def worker_options(params: Dict[str, Any], lane: Optional[str], while_paused: Optional[str] = None) -> Dict[str, Any]:
    """Adds ``lane`` (``"interactive"`` or ``"system"``) and ``whilePaused`` (``"wait"`` or
    ``"refuse"``) to the params of a method that sets a worker going, when given."""
    if lane is not None:
        params["lane"] = lane
    if while_paused is not None:
        params["whilePaused"] = while_paused
    return params


def with_sandbox(sandbox_id: Optional[str], **extra: Any) -> Dict[str, Any]:
    """Params naming the sandbox (when known) and every ``extra`` that is not None."""
    params: Dict[str, Any] = {}
    if sandbox_id is not None:
        params["sandboxId"] = sandbox_id
    params.update({k: v for k, v in extra.items() if v is not None})
    return params


def _command_params(sandbox_id: Optional[str], cmd: str, cwd: Optional[str], envs: Optional[Mapping[str, str]],
                    timeout: Optional[float], session: Optional[str]) -> Dict[str, Any]:
    """What a ``run`` and a ``process.start`` share: the command and where and how it runs."""
    params: Dict[str, Any] = {"command": cmd}
    if sandbox_id is not None:
        params["sandboxId"] = sandbox_id
    if session is not None:
        params["session"] = session
    if cwd is not None:
        params["cwd"] = cwd
    if envs is not None:
        params["env"] = dict(envs)
    if timeout is not None:
        params["timeoutMs"] = seconds_to_ms(timeout)
    return params


def run_params(sandbox_id: Optional[str], cmd: str, *, cwd: Optional[str], envs: Optional[Mapping[str, str]],
               timeout: Optional[float], stdin: Union[bytes, str, None], stream: bool,
               session: Optional[str], leftovers: Optional[str] = None, lane: Optional[str] = None,
               while_paused: Optional[str] = None) -> Dict[str, Any]:
    """The params of a ``run``."""
    params = _command_params(sandbox_id, cmd, cwd, envs, timeout, session)
    if stdin is not None:
        data = stdin.encode("utf-8") if isinstance(stdin, str) else bytes(stdin)
        params["stdin"] = base64.b64encode(data).decode("ascii")
    if stream:
        params["stream"] = True
    if leftovers is not None:
        params["leftovers"] = leftovers
    return worker_options(params, lane, while_paused)


def check_run_mode(background: bool, stdin: Union[bool, bytes, str, None], leftovers: Optional[str],
                   label: Optional[str]) -> Union[bool, bytes, str, None]:
    """Refuses the arguments of the other mode of ``commands.run``; the stdin to use."""
    if background:
        if leftovers is not None:
            raise ValueError("leftovers applies to foreground runs only")
        return stdin
    if label is not None:
        raise ValueError("label applies to background processes only (background=True)")
    if isinstance(stdin, bool):
        if stdin:
            raise ValueError("stdin=True (an open stdin) needs background=True")
        return None
    return stdin


#: A daemon's default TERM for terminals unless the caller's envs say otherwise.
DEFAULT_TERM = "xterm-256color"


def process_start_params(sandbox_id: Optional[str], cmd: str, *, cwd: Optional[str],
                         envs: Optional[Mapping[str, str]], timeout: Optional[float],
                         stdin: Union[bool, bytes, str, None], session: Optional[str], label: Optional[str],
                         pty: Optional[Tuple[int, int]], lane: Optional[str] = None,
                         while_paused: Optional[str] = None) -> Dict[str, Any]:
    """The params of ``process.start``. ``stdin`` bytes or text (written and closed after the
    start) and True ask for an open stdin; False or None: /dev/null."""
    params = _command_params(sandbox_id, cmd, cwd, envs, timeout, session)
    if label is not None:
        params["label"] = label
    if stdin is not None and stdin is not False:
        params["stdin"] = True
    if pty is not None:
        params["pty"] = {"cols": int(pty[0]), "rows": int(pty[1])}
    return worker_options(params, lane, while_paused)


def initial_stdin(stdin: Union[bool, bytes, str, None]) -> Optional[bytes]:
    """The bytes to write (then close stdin) after ``process.start``; None: leave it."""
    if isinstance(stdin, (bytes, bytearray, memoryview)):
        return bytes(stdin)
    if isinstance(stdin, str):
        return stdin.encode("utf-8")
    return None


def terminal_env(envs: Optional[Mapping[str, str]]) -> Dict[str, str]:
    env = {"TERM": DEFAULT_TERM}
    env.update(envs or {})
    return env


def b64(data: Union[str, bytes]) -> str:
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    return base64.b64encode(raw).decode("ascii")


# ------------------------------------------------------------------ sandboxes


def create(method: str, params: Dict[str, Any]) -> Op:
    """``create`` / ``sandbox.create``: the new sandbox's id."""
    result = yield method, params
    return str(result["sandboxId"])


def fork(sandbox_id: str, lane: Optional[str] = None) -> Op:
    result = yield "sandbox.fork", worker_options({"sandboxId": sandbox_id}, lane)
    return str(result["sandboxId"])


def call(method: str, params: Optional[Dict[str, Any]] = None) -> Op:
    """One request; returns None."""
    yield method, params


def history(sandbox_id: Optional[str], session: Optional[str]) -> Op:
    result = yield "shell.history.list", with_sandbox(sandbox_id, session=session)
    return list(result["entries"])


def health() -> Op:
    return dict((yield "health", None))


def ping() -> Op:
    answer = as_object((yield "ping", None))
    return answer is not None and answer.get("pong") is True


def get_host(sandbox_id: Optional[str], port: int) -> Op:
    """``"127.0.0.1:N"`` reaching ``port`` in the sandbox (``port.expose``; an exposed port's
    existing mapping)."""
    try:
        result = yield "port.expose", with_sandbox(sandbox_id, port=int(port))
    except SbxError as e:
        if e.code != INVALID_PARAMS:
            raise
        # Already exposed (E2B's get_host may be called any number of times): the existing
        # mapping. Anything else (a bad port) is re-raised.
        listed = yield "port.list", with_sandbox(sandbox_id)
        for entry in listed["ports"]:
            if int(entry["port"]) == int(port):
                return f"{entry['host']}:{entry['hostPort']}"
        raise
    return f"{result['host']}:{result['port']}"


def snapshot(sandbox_id: str, lane: Optional[str] = None) -> Op:
    return str((yield "snapshot.create", worker_options({"sandboxId": sandbox_id}, lane))["id"])


def restore(sandbox_id: str, snapshot_id: str, lane: Optional[str] = None) -> Op:
    yield "snapshot.restore", worker_options({"sandboxId": sandbox_id, "id": snapshot_id}, lane)


def list_snapshots(sandbox_id: str) -> Op:
    return list((yield "snapshot.list", {"sandboxId": sandbox_id})["snapshots"])


def export_state(sandbox_id: str, lane: Optional[str] = None) -> Op:
    result = yield "persistence.export", worker_options({"sandboxId": sandbox_id}, lane)
    return base64.b64decode(result["data"])


def import_state(sandbox_id: str, blob: bytes, lane: Optional[str] = None) -> Op:
    params = {"sandboxId": sandbox_id, "data": base64.b64encode(bytes(blob)).decode("ascii")}
    yield "persistence.import", worker_options(params, lane)


def list_sandboxes(metadata: Optional[Mapping[str, str]] = None) -> Op:
    params = None if metadata is None else {"metadata": dict(metadata)}
    return list((yield "sandbox.list", params)["sandboxes"])


def sandbox_info(sandbox_id: str, expired: Optional[str]) -> Op:
    """The ``sandbox.list`` entry of one sandbox; -32602 when it is gone (``expired``: the
    reason the server gave, if it said so)."""
    for entry in (yield from list_sandboxes()):
        if entry.get("sandboxId") == sandbox_id:
            return dict(entry)
    why = f" (it expired: {expired})" if expired else ""
    raise SbxError(INVALID_PARAMS, f"Unknown sandboxId: {sandbox_id}{why}")


def set_timeout(sandbox_id: str, timeout: float) -> Op:
    """``sandbox.setTimeout``: the sandbox expires ``timeout`` seconds from now (0: never)."""
    yield "sandbox.setTimeout", {"sandboxId": sandbox_id, "lifetimeMs": seconds_to_ms(timeout)}


def _ms(when: Union[None, float, "datetime.datetime"]) -> Optional[int]:
    """A time as the protocol's ms since the epoch: a datetime, or seconds since the epoch."""
    if when is None:
        return None
    if isinstance(when, datetime.datetime):
        if when.tzinfo is None:
            raise ValueError("give an aware datetime (its time zone), or seconds since the epoch")
        return int(when.timestamp() * 1000)
    return int(float(when) * 1000)


def metrics(sandbox_id: str, start: Union[None, float, "datetime.datetime"],
            end: Union[None, float, "datetime.datetime"]) -> Op:
    """``sandbox.metrics``: the samples of [start, end], oldest first."""
    params: Dict[str, Any] = {"sandboxId": sandbox_id}
    for key, when in (("start", start), ("end", end)):
        ms = _ms(when)
        if ms is not None:
            params[key] = ms
    r = yield "sandbox.metrics", params
    return [SandboxMetric._from(s, r) for s in r["samples"]]


# ------------------------------------------------------------------ images


def image_import(path: Union[str, "os.PathLike[str]"], name: Optional[str]) -> Op:
    """``image.import``: the image record, once the daemon imported it. A relative ``path`` is
    made absolute here (the daemon reads it on this host)."""
    params: Dict[str, Any] = {"path": os.path.abspath(os.fspath(path))}
    if name is not None:
        params["name"] = name
    return dict((yield "image.import", params)["image"])


def image_list() -> Op:
    """``image.list``: the records of the store's images."""
    return [dict(i) for i in (yield "image.list", None)["images"]]


def image_inspect(ref: str) -> Op:
    return dict((yield "image.inspect", {"image": ref}))


def image_remove(ref: str) -> Op:
    yield "image.remove", {"image": ref}


def session_create(sandbox_id: Optional[str], name: str) -> Op:
    result = yield "session.create", with_sandbox(sandbox_id, name=name)
    return str(result.get("name", name))


def session_list(sandbox_id: Optional[str]) -> Op:
    result = yield "session.list", with_sandbox(sandbox_id)
    return [str(s["name"]) for s in result["sessions"]]


def env_get(sandbox_id: Optional[str], name: str, session: Optional[str]) -> Op:
    value = (yield "env.get", with_sandbox(sandbox_id, name=name, session=session)).get("value")
    return None if value is None else str(value)


def env_set(sandbox_id: Optional[str], name: str, value: str, session: Optional[str]) -> Op:
    params = with_sandbox(sandbox_id, name=name, session=session)
    params["value"] = value
    yield "env.set", params


# ------------------------------------------------------------------ files


def files_read(sandbox_id: str, path: str) -> Op:
    """The whole file, fetched in 4 MiB chunks."""
    out = bytearray()
    while True:
        r = yield "files.read", {"path": path, "offset": len(out), "length": CHUNK, "sandboxId": sandbox_id}
        out += base64.b64decode(r["data"])
        if len(out) >= int(r["size"]) or not r["length"]:
            return bytes(out)


def files_write(sandbox_id: str, path: str, data: Union[str, bytes], mode: Optional[int]) -> Op:
    """An atomic write; over 4 MiB in 4 MiB parts as an upload, renamed into place with the
    last part. Interrupted between parts (KeyboardInterrupt, a cancelled task), the upload
    is aborted."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    first: Dict[str, Any] = {"path": path, "data": base64.b64encode(raw[:CHUNK]).decode(), "sandboxId": sandbox_id}
    if mode is not None:
        first["mode"] = mode
    if len(raw) <= CHUNK:
        yield "files.write", first
        return
    upload_id = (yield "files.write", dict(first, upload="begin"))["uploadId"]
    try:
        for off in range(CHUNK, len(raw), CHUNK):
            step = "commit" if off + CHUNK >= len(raw) else "append"
            yield "files.write", {"path": path, "data": base64.b64encode(raw[off:off + CHUNK]).decode(),
                                  "upload": step, "uploadId": upload_id, "sandboxId": sandbox_id}
    except (SbxError, GeneratorExit):
        raise  # the server ended the upload with the request that failed
    except BaseException:
        # Interrupted between parts: the server still holds it.
        try:
            yield "files.write", {"path": path, "upload": "abort", "uploadId": upload_id, "sandboxId": sandbox_id}
        except SbxError:
            pass
        raise


def files_list(sandbox_id: str, path: str, depth: int) -> Op:
    result = yield "files.list", {"path": path, "depth": depth, "sandboxId": sandbox_id}
    return [EntryInfo._from(e) for e in result["entries"]]  # pyright: ignore[reportPrivateUsage]


def files_stat(sandbox_id: str, path: str) -> Op:
    return EntryInfo._from((yield "files.stat", {"path": path, "sandboxId": sandbox_id}))  # pyright: ignore


def files_exists(sandbox_id: str, path: str) -> Op:
    return bool((yield "files.exists", {"path": path, "sandboxId": sandbox_id})["exists"])


def files_make_dir(sandbox_id: str, path: str, parents: bool) -> Op:
    """Creates a directory; True when it was created, False when a directory was there
    already (E2B's make_dir)."""
    if (yield from files_exists(sandbox_id, path)):
        info = yield from files_stat(sandbox_id, path)
        if info.type == "dir":
            return False
    yield "files.mkdir", {"path": path, "parents": parents, "sandboxId": sandbox_id}
    return True


def files_remove(sandbox_id: str, path: str, recursive: bool) -> Op:
    yield "files.rm", {"path": path, "recursive": recursive, "sandboxId": sandbox_id}


def files_rename(sandbox_id: str, old_path: str, new_path: str) -> Op:
    yield "files.rename", {"from": old_path, "to": new_path, "sandboxId": sandbox_id}


def watch_params(sandbox_id: str, path: str, recursive: bool) -> Dict[str, Any]:
    params: Dict[str, Any] = {"sandboxId": sandbox_id, "path": path}
    if recursive:
        params["recursive"] = True
    return params


def unwatch(watch_id: str) -> Op:
    """``files.unwatch``; a watch already gone (its sandbox ended) is not an error."""
    try:
        yield "files.unwatch", {"watchId": watch_id}
    except SbxError as e:
        if e.code != INVALID_PARAMS:
            raise


# ------------------------------------------------------------------ processes


def list_processes(sandbox_id: Optional[str]) -> Op:
    """``process.list``: every process of the sandbox, oldest first."""
    result = yield "process.list", with_sandbox(sandbox_id)
    return [ProcessInfo._from(p) for p in result["processes"]]  # pyright: ignore[reportPrivateUsage]


def find_process(sandbox_id: Optional[str], which: Union[int, str]) -> Op:
    """The process with this in-sandbox pid (an int) or process id (a str): a running one if
    any (pids are reused once a process ended), else the newest; None when there is none."""
    found: Deque[ProcessInfo] = collections.deque()
    for p in (yield from list_processes(sandbox_id)):
        if (p.pid == which) if isinstance(which, int) else (p.process_id == which):
            found.append(p)
    running = [p for p in found if p.running]
    if running:
        return running[-1]
    return found[-1] if found else None


def kill_process(sandbox_id: Optional[str], process_id: str, params: Dict[str, Any]) -> Op:
    """``process.kill``: True when it was killed, False when it had already ended."""
    try:
        yield "process.kill", params
    except SbxError as e:
        if e.code != INVALID_PARAMS:
            raise
        # The same code names an unknown process: only an ended one is "not killed".
        info = yield from find_process(sandbox_id, process_id)
        if info is None or info.running:
            raise
        return False
    return True


def kill_by_pid(sandbox_id: Optional[str], pid: Union[int, str], signal: Union[str, int, None]) -> Op:
    """``commands.kill(pid)``: False when no running process has that pid."""
    info = yield from find_process(sandbox_id, pid)
    if info is None or not info.running:
        return False
    params = with_sandbox(sandbox_id, processId=info.process_id, signal=signal)
    return (yield from kill_process(sandbox_id, info.process_id, params))


def connectable(sandbox_id: Optional[str], pid: Union[int, str]) -> Op:
    """The process ``commands.connect(pid)`` attaches to."""
    info = yield from find_process(sandbox_id, pid)
    if info is None:
        raise SbxError(INVALID_PARAMS, f"no background process with pid {pid!r} in this sandbox")
    return info


def kill_leftovers(sandbox_id: Optional[str]) -> Op:
    result = yield "process.killAll", with_sandbox(sandbox_id)
    # "groups" is the daemon's older name for the count.
    return int(result["killed"] if "killed" in result else result["groups"])


def process_wait(params: Dict[str, Any]) -> Op:
    return dict((yield "process.wait", params))

