"""Code contexts for asyncio (:class:`sbx.AsyncSandbox`): as :mod:`sbx.code`, awaited.

Callbacks may be plain or coroutine functions; they run in a task of the handle's own, one at
a time in the order things happened. Cancelling the task that awaits ``run_code`` cancels the
cell in the daemon: the context is then as it was before it (a JavaScript one is reset).
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Dict, Optional

from ._async_client import AsyncClient, AsyncPendingCall
from ._callbacks import Deliverer, wait_within
from ._protocol import INTERNAL_ERROR, SbxError, as_object
from ._code import Execution, ExecutionError, Result

__all__ = ["AsyncCodeHandle"]

_CANCEL_WAIT = 5.0


class AsyncCodeHandle:
    """A cell sent to the server: ``await wait()`` for its :class:`~sbx.code.Execution`,
    ``await cancel()`` to stop it."""

    def __init__(self, client: AsyncClient, params: Dict[str, Any], on_stdout: Optional[Callable[..., Any]],
                 on_stderr: Optional[Callable[..., Any]], on_result: Optional[Callable[..., Any]],
                 on_error: Optional[Callable[..., Any]]) -> None:
        self._client = client
        self._callbacks = {"stdout": on_stdout, "stderr": on_stderr, "result": on_result, "error": on_error}
        self._deliverer = Deliverer()
        self._result: Optional[Execution] = None
        stream = any(f is not None for f in self._callbacks.values())
        if stream:
            params = dict(params, stream=True)
        self._call: AsyncPendingCall = client.send("code.run", params,
                                                   on_notification=self._on_event if stream else None,
                                                   on_done=lambda call: self._deliverer.close())

    def _on_event(self, params: Dict[str, Any]) -> None:
        kind = str(params.get("type"))
        callback = self._callbacks.get(kind)
        if callback is None:
            return
        if kind in ("stdout", "stderr"):
            self._deliverer.push(callback, str(params.get("text", "")))
        elif kind == "result":
            self._deliverer.push(callback, Result.from_wire(params))
        else:
            err = ExecutionError.from_wire(params)
            if err is not None:
                self._deliverer.push(callback, err)

    @property
    def request_id(self) -> int:
        return self._call.request_id

    def done(self) -> bool:
        return self._call.done()

    async def _wait(self) -> Execution:
        raw = await self._call.wait()
        await self._deliverer.join()
        result = as_object(raw)
        if result is None:
            raise SbxError(INTERNAL_ERROR, f"malformed code.run result: {raw!r}")
        self._result = Execution.from_wire(result)
        return self._result

    async def wait(self, timeout: Optional[float] = None) -> Execution:
        """Awaits the cell's end and every callback. Raises SbxError when the server refused
        it, TimeoutError when ``timeout`` seconds passed first (the cell keeps running)."""
        if self._result is not None:
            return self._result
        return await wait_within(self._wait, timeout, f"code.run (request {self.request_id})")

    async def cancel(self) -> bool:
        """Cancels the cell: True when the cancel was accepted, False when it had ended."""
        if self._call.done():
            return False
        try:
            await self._client.request("cancel", {"requestId": self._call.request_id})
        except SbxError:
            if self._call.done():
                return False
            raise
        return True

    async def _abandon(self) -> None:
        try:
            await self.cancel()
            await asyncio.wait([self._call.future], timeout=_CANCEL_WAIT)
        except (SbxError, OSError):
            pass


async def run(handle: AsyncCodeHandle) -> Execution:
    try:
        return await handle.wait()
    except asyncio.CancelledError:
        await handle._abandon()  # pyright: ignore[reportPrivateUsage]
        raise
