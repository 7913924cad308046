"""Python SDK for sbx: run untrusted shell commands in Linux-namespace sandboxes with
persistent bash sessions.

    from sbx import Sandbox

    with Sandbox(timeout=10) as sb:
        sb.commands.run("cd /tmp && export GREETING=hi")
        r = sb.commands.run("echo $GREETING from $PWD")
        print(r.stdout, r.exit_code)

    async with await AsyncSandbox.create(timeout=10) as sb:   # the same API for asyncio
        r = await sb.commands.run("echo hi")

Standard library only. See docs/PROTOCOL.md in the sbx repository for the wire protocol.
"""
from ._client import Client, ProcessEndedError, SbxError, WaitTimeoutError, find_binary
from ._protocol import (INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, PARSE_ERROR, POOL_SHUTTING_DOWN,
                        PROCESS_ENDED, SANDBOX_DISABLED, SANDBOX_ERROR, WAIT_TIMEOUT, WORKER_UNAVAILABLE)
from ._async_client import AsyncClient
from .commands import CommandHandle, CommandResult, Commands, OutputCallback, Session
from .processes import OutputChunk, ProcessHandle, ProcessInfo, ProcessResult, Pty, TerminalHandle
from .files import EntryInfo, Files, FilesystemEvent, FilesystemEventType, WatchHandle
from .sandbox import Env, Images, Sandbox, Sandboxes, Sessions
from ._results import SandboxMetric
from .code import CodeContext, CodeHandle, Execution, ExecutionError, Logs, Result
from .async_code import AsyncCodeHandle
from .async_commands import AsyncCommandHandle, AsyncCommands, AsyncSession
from .async_processes import AsyncProcessHandle, AsyncPty, AsyncTerminalHandle
from .async_files import AsyncFiles, AsyncWatchHandle
from .async_sandbox import AsyncEnv, AsyncImages, AsyncSandbox, AsyncSandboxes, AsyncSessions

__version__ = "0.1.0"

__all__ = [
    "Sandbox",
    "Execution",
    "ExecutionError",
    "Result",
    "Logs",
    "CodeContext",
    "CodeHandle",
    "AsyncCodeHandle",
    "AsyncSandbox",
    "SbxError",
    "ProcessEndedError",
    "WaitTimeoutError",
    "ProcessHandle",
    "ProcessResult",
    "ProcessInfo",
    "OutputChunk",
    "TerminalHandle",
    "Pty",
    "CommandResult",
    "CommandHandle",
    "Commands",
    "Session",
    "Sessions",
    "Env",
    "Sandboxes",
    "Images",
    "Files",
    "EntryInfo",
    "SandboxMetric",
    "Client",
    "AsyncClient",
    "WatchHandle",
    "FilesystemEvent",
    "FilesystemEventType",
    "AsyncCommands",
    "AsyncCommandHandle",
    "AsyncProcessHandle",
    "AsyncTerminalHandle",
    "AsyncPty",
    "AsyncSession",
    "AsyncSessions",
    "AsyncEnv",
    "AsyncFiles",
    "AsyncSandboxes",
    "AsyncImages",
    "AsyncWatchHandle",
    "OutputCallback",
    "find_binary",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "WORKER_UNAVAILABLE",
    "SANDBOX_DISABLED",
    "POOL_SHUTTING_DOWN",
    "PROCESS_ENDED",
    "WAIT_TIMEOUT",
    "SANDBOX_ERROR",
    "__version__",
]
