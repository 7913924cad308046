"""What code cells answer, and the params their requests take: shared by :mod:`sbx.code` and
:mod:`sbx.async_code` (no I/O here)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

__all__ = ["Result", "Logs", "ExecutionError", "Execution", "CodeContext"]

_FORMATS = {
    "text": "text/plain", "html": "text/html", "markdown": "text/markdown", "svg": "image/svg+xml",
    "png": "image/png", "jpeg": "image/jpeg", "pdf": "application/pdf", "latex": "text/latex",
    "json": "application/json", "javascript": "application/javascript",
}


@dataclass
class Result:
    """One result of a cell: its value (``is_main_result``) or something it displayed, as a
    mime bundle. ``png``, ``jpeg`` and ``pdf`` are base64 text, as in Jupyter and E2B."""

    data: Dict[str, Any]
    is_main_result: bool = False
    metadata: Dict[str, Any] = field(default_factory=dict)

    def _get(self, mime: str) -> Any:
        return self.data.get(mime)

    @property
    def text(self) -> Optional[str]:
        return self._get("text/plain")

    @property
    def html(self) -> Optional[str]:
        return self._get("text/html")

    @property
    def markdown(self) -> Optional[str]:
        return self._get("text/markdown")

    @property
    def svg(self) -> Optional[str]:
        return self._get("image/svg+xml")

    @property
    def png(self) -> Optional[str]:
        return self._get("image/png")

    @property
    def jpeg(self) -> Optional[str]:
        return self._get("image/jpeg")

    @property
    def pdf(self) -> Optional[str]:
        return self._get("application/pdf")

    @property
    def latex(self) -> Optional[str]:
        return self._get("text/latex")

    @property
    def json(self) -> Any:
        return self._get("application/json")

    @property
    def javascript(self) -> Optional[str]:
        return self._get("application/javascript")

    def formats(self) -> List[str]:
        """The short names of the formats it has (``text``, ``html``, ``png``, ...)."""
        return [name for name, mime in _FORMATS.items() if mime in self.data]

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "Result":
        return cls(data=dict(obj.get("data") or {}), is_main_result=bool(obj.get("isMainResult")),
                   metadata=dict(obj.get("metadata") or {}))


@dataclass
class Logs:
    """What the cell printed (and what its processes wrote), in pieces as they came."""

    stdout: List[str] = field(default_factory=list)
    stderr: List[str] = field(default_factory=list)


@dataclass
class ExecutionError:
    """The cell's exception, or why it did not end: ``TimeoutError``, ``CancelledError``,
    ``CellDied`` (the context is then as it was before the cell) or ``ContextReset``."""

    name: str
    value: str
    traceback: str = ""

    @classmethod
    def from_wire(cls, obj: Optional[Mapping[str, Any]]) -> Optional["ExecutionError"]:
        if not obj:
            return None
        return cls(name=str(obj.get("name", "")), value=str(obj.get("value", "")),
                   traceback=str(obj.get("traceback", "")))


@dataclass
class Execution:
    """The answer of :meth:`Sandbox.run_code`."""

    results: List[Result] = field(default_factory=list)
    logs: Logs = field(default_factory=Logs)
    error: Optional[ExecutionError] = None
    execution_count: Optional[int] = None
    context_id: str = ""
    language: str = ""
    exit_code: int = 0
    error_class: Optional[str] = None
    warnings: List[str] = field(default_factory=list)
    context_reset: bool = False
    execution_time_ms: int = 0
    dropped_bytes: int = 0

    @property
    def text(self) -> Optional[str]:
        """The text/plain of the main result (the cell's value), if any."""
        for r in self.results:
            if r.is_main_result:
                return r.text
        return None

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "Execution":
        logs = obj.get("logs") or {}
        return cls(results=[Result.from_wire(r) for r in obj.get("results") or []],
                   logs=Logs(stdout=list(logs.get("stdout") or []), stderr=list(logs.get("stderr") or [])),
                   error=ExecutionError.from_wire(obj.get("error")), execution_count=obj.get("executionCount"),
                   context_id=str(obj.get("contextId", "")), language=str(obj.get("language", "")),
                   exit_code=int(obj.get("exitCode", 0)), error_class=obj.get("errorClass"),
                   warnings=list(obj.get("warnings") or []), context_reset=bool(obj.get("contextReset")),
                   execution_time_ms=int(obj.get("executionTimeMs", 0)),
                   dropped_bytes=int(obj.get("droppedBytes", 0)))


@dataclass
class CodeContext:
    """A code context: ``id``, ``language`` (``python`` or ``bash``) and ``cwd``."""

    id: str
    language: str
    cwd: str

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "CodeContext":
        return cls(id=str(obj["id"]), language=str(obj.get("language", "")), cwd=str(obj.get("cwd", "")))


def run_params(sandbox_id: str, code: str, *, context: Any = None, language: Optional[str] = None,
               timeout: Optional[float] = None, envs: Optional[Mapping[str, str]] = None,
               stream: bool = False) -> Dict[str, Any]:
    params: Dict[str, Any] = {"sandboxId": sandbox_id, "code": code}
    if context is not None:
        params["contextId"] = context.id if isinstance(context, CodeContext) else str(context)
    if language is not None:
        params["language"] = language
    if timeout is not None:
        params["timeoutMs"] = max(1, int(timeout * 1000))
    if envs:
        params["env"] = dict(envs)
    if stream:
        params["stream"] = True
    return params


def context_params(sandbox_id: str, *, language: str = "python", cwd: Optional[str] = None,
                   envs: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    params: Dict[str, Any] = {"sandboxId": sandbox_id, "language": language}
    if cwd is not None:
        params["cwd"] = cwd
    if envs:
        params["env"] = dict(envs)
    return params


def context_id(context: Any) -> str:
    return context.id if isinstance(context, CodeContext) else str(context)
