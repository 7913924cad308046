"""Code contexts: Python (IPython) and bash cells whose state survives a killed cell.

    with Sandbox() as sb:
        sb.run_code("import pandas as pd; df = pd.DataFrame({'a': [1, 2]})")
        ex = sb.run_code("df")              # the last expression's value
        print(ex.text)                      # its text/plain
        print(ex.results[0].html)           # the DataFrame as an HTML table
        ex = sb.run_code("while True: pass", timeout=0.5)
        print(ex.error.name)                # TimeoutError: df is still there
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Mapping, Optional

from ._client import Client, PendingCall
from ._code import CodeContext, Execution, ExecutionError, Logs, Result, context_id, context_params, run_params

# The answer's classes live in the shared module and are this module's too.

__all__ = ["Result", "Logs", "ExecutionError", "Execution", "CodeContext", "CodeHandle", "context_id",
           "context_params", "run_params"]

class _Callbacks:
    """Turns ``code.output`` notifications into the caller's callbacks (on the reader thread)."""

    def __init__(self, on_stdout: Optional[Callable[[str], None]], on_stderr: Optional[Callable[[str], None]],
                 on_result: Optional[Callable[[Result], None]],
                 on_error: Optional[Callable[[ExecutionError], None]]) -> None:
        self.on_stdout, self.on_stderr, self.on_result, self.on_error = on_stdout, on_stderr, on_result, on_error

    def any(self) -> bool:
        return any(f is not None for f in (self.on_stdout, self.on_stderr, self.on_result, self.on_error))

    def __call__(self, params: Dict[str, Any]) -> None:
        kind = params.get("type")
        if kind == "stdout" and self.on_stdout:
            self.on_stdout(str(params.get("text", "")))
        elif kind == "stderr" and self.on_stderr:
            self.on_stderr(str(params.get("text", "")))
        elif kind == "result" and self.on_result:
            self.on_result(Result.from_wire(params))
        elif kind == "error" and self.on_error:
            err = ExecutionError.from_wire(params)
            if err:
                self.on_error(err)


class CodeHandle:
    """A cell sent to the server: :meth:`wait` for its :class:`Execution`, or :meth:`cancel` it
    (from any thread); the context then stays as it was before the cell."""

    def __init__(self, client: Client, call: PendingCall) -> None:
        self._client = client
        self._call = call
        self._lock = threading.Lock()

    def wait(self, timeout: Optional[float] = None) -> Execution:
        return Execution.from_wire(self._call.wait(timeout))

    def cancel(self) -> None:
        self._client.request("cancel", {"requestId": self._call.request_id})


def start(client: Client, sandbox_id: str, code: str, *, context: Any = None, language: Optional[str] = None,
          timeout: Optional[float] = None, envs: Optional[Mapping[str, str]] = None,
          on_stdout: Optional[Callable[[str], None]] = None, on_stderr: Optional[Callable[[str], None]] = None,
          on_result: Optional[Callable[[Result], None]] = None,
          on_error: Optional[Callable[[ExecutionError], None]] = None) -> CodeHandle:
    callbacks = _Callbacks(on_stdout, on_stderr, on_result, on_error)
    params = run_params(sandbox_id, code, context=context, language=language, timeout=timeout, envs=envs,
                        stream=callbacks.any())
    call = client.send("code.run", params, on_notification=callbacks if callbacks.any() else None)
    return CodeHandle(client, call)
