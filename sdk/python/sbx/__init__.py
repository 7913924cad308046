"""Python SDK for sbx: run untrusted shell commands in Linux-namespace sandboxes with
persistent bash sessions.

    from sbx import Sandbox

    with Sandbox(timeout=10) as sb:
        sb.commands.run("cd /tmp && export GREETING=hi")
        r = sb.commands.run("echo $GREETING from $PWD")
        print(r.stdout, r.exit_code)

Standard library only. See docs/PROTOCOL.md in the sbx repository for the wire protocol.
"""
from ._client import Client, ProcessEndedError, SbxError, WaitTimeoutError, find_binary
from .commands import CommandHandle, CommandResult, Commands, OutputCallback, Session
from .processes import OutputChunk, ProcessHandle, ProcessInfo, ProcessResult, Pty, TerminalHandle
from .files import EntryInfo, Files
from .sandbox import Env, Sandbox, Sandboxes, Sessions

__version__ = "0.1.0"

__all__ = [
    "Sandbox",
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
    "Files",
    "EntryInfo",
    "Client",
    "OutputCallback",
    "find_binary",
    "__version__",
]
