"""Output callbacks: the types both SDKs take, and how the asyncio SDK calls its callbacks.

The threaded SDK calls a callback on its reader thread, directly. An asyncio callback
(``on_stdout`` / ``on_stderr`` / ``on_data`` / ``on_event``) may be a plain function or a
coroutine function; a :class:`Deliverer` runs it in a task of its handle's own, one call at a
time in the order the output came, so it may await SDK calls, and the reader task never waits
for a callback.
"""
from __future__ import annotations

import asyncio
import collections
import inspect
from typing import Any, Awaitable, Callable, Deque, Optional, Tuple, Union

__all__ = ["OutputCallback", "AsyncOutputCallback", "Deliverer", "wait_within"]


async def wait_within(wait: Callable[[], Awaitable[Any]], timeout: Optional[float], what: str) -> Any:
    """Awaits ``wait()``; with a timeout, raises TimeoutError naming ``what`` when it passes
    first (what was waited for keeps going: only the waiting stops)."""
    if timeout is None:
        return await wait()
    try:
        return await asyncio.wait_for(wait(), timeout)
    except asyncio.TimeoutError:
        raise TimeoutError(f"{what} did not end within {timeout} s") from None

#: Called with each piece of streamed output, decoded as UTF-8 (invalid bytes replaced).
OutputCallback = Callable[[str], None]
#: Called with each piece of output text; may be a coroutine function.
AsyncOutputCallback = Callable[[str], Union[None, Awaitable[None]]]


class Deliverer:
    """Calls a handle's callbacks in order, one at a time, in a task of its own, started at
    the first item. The first exception a callback raises stops the delivery and is kept in
    :attr:`error` (raised by the handle's ``wait``)."""

    def __init__(self) -> None:
        self._items: Deque[Tuple[Callable[[Any], Any], Any]] = collections.deque()
        self._wakeup: Optional["asyncio.Future[None]"] = None
        self._closed = False
        self._task: Optional["asyncio.Task[None]"] = None
        self.error: Optional[BaseException] = None

    def push(self, fn: Callable[[Any], Any], arg: Any) -> None:
        if self._closed or self.error is not None:
            return
        self._items.append((fn, arg))
        self._kick()

    def close(self) -> None:
        """Nothing more comes: the task ends once what is queued is delivered."""
        self._closed = True
        self._kick()

    def cancel(self) -> None:
        """Drops what is queued and stops the task."""
        self._closed = True
        self._items.clear()
        if self._task is not None:
            self._task.cancel()

    def _kick(self) -> None:
        if self._task is None:
            if self._items:
                self._task = asyncio.get_running_loop().create_task(self._run())
        elif self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    async def _run(self) -> None:
        while True:
            while self._items:
                fn, arg = self._items.popleft()
                try:
                    r = fn(arg)
                    if inspect.isawaitable(r):
                        await r
                except Exception as e:  # noqa: BLE001 - raised by the handle's wait()
                    self.error = e
                    self._items.clear()
                    return
            if self._closed:
                return
            self._wakeup = asyncio.get_running_loop().create_future()
            await self._wakeup
            self._wakeup = None

    def in_callback(self) -> bool:
        """True when called from one of this deliverer's callbacks."""
        return self._task is not None and self._task is asyncio.current_task()

    async def join(self) -> None:
        """Waits until everything was delivered (after :meth:`close`); raises what a
        callback raised. From inside a callback it does not wait (it would wait for itself)."""
        task = self._task
        if task is not None and not self.in_callback() and not task.done():
            await asyncio.shield(task)
        if self.error is not None:
            raise self.error
