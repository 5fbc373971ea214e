"""The owner of background work: tasks that nothing on a request's path waits for.

Closing a tier stream the gate abandoned, letting a cut-off child task unwind, probing a
skipped tier, putting an answer in a cache: this work must not delay the answer, yet a task
nobody holds can be garbage-collected mid-flight, its failure surfaces as "exception never
retrieved" at some random later moment, and nothing stops it at shutdown. So each piece of
it is handed to one :class:`Background`, which

- keeps a strong reference to every task until it ends;
- logs a task's failure and swallows it: failing background work never fails a request;
- on :meth:`~Background.aclose`, cancels every task and awaits them all; work offered
  after that is refused (closed unrun, and logged), until :meth:`~Background.open`.

Why not an ``asyncio.TaskGroup``: a task group belongs to the task that entered it (a
failing child cancels that task, and only it may exit the group), while a gate is started
in one task and closed in another (pytest fixtures, application lifespans) or used without
being started at all; and a task group cannot adopt a task that is already running, which
is what a cut-off does with the child task that was waiting for a tier's first piece.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

__all__ = ["Background"]

log = logging.getLogger("rtgate.background")


class Background:
    """Holds background tasks until they end; see the module docstring.

    ``spawn`` and the other ways in never raise. ``len()`` is the number of tasks held.
    """

    __slots__ = ("_closed", "_tasks", "name")

    def __init__(self, name: str = "background") -> None:
        self.name = name
        self._tasks: dict[asyncio.Future[Any], int] = {}  # task -> log level of its failure
        self._closed = False

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def closed(self) -> bool:
        return self._closed

    def open(self) -> None:
        """Take work again after :meth:`aclose` (an owner starts open)."""
        self._closed = False

    def spawn(
        self, work: Coroutine[Any, Any, Any], name: str | None = None
    ) -> asyncio.Task[Any] | None:
        """Run ``work`` in a task held here. Returns the task, or ``None`` when the owner
        is closed or no event loop runs: then ``work`` is closed without running."""
        if self._closed:
            self._refuse(work, "closed")
            return None
        try:
            task = asyncio.get_running_loop().create_task(work, name=name)
        except RuntimeError:
            self._refuse(work, "no running event loop")
            return None
        self._hold(task, logging.WARNING)
        return task

    def adopt(self, task: asyncio.Future[Any]) -> None:
        """Hold a task that is already running. Its failure is logged at debug level only:
        an adopted task is one its caller stopped caring about (a tier cut off)."""
        self._hold(task, logging.DEBUG)

    def close_later(self, stream: AsyncIterator[Any]) -> None:
        """Close an abandoned async generator here, never on the caller's path. Nothing to
        do while a task still iterates it: :meth:`abandon` closes it once that task ends."""
        aclose = getattr(stream, "aclose", None)
        if aclose is None or getattr(stream, "ag_running", False):
            return
        if hasattr(stream, "ag_frame") and stream.ag_frame is None:
            return  # it has ended already (answered, declined, failed): nothing to close
        self.spawn(_call(aclose))

    def abandon(self, task: asyncio.Future[Any], stream: AsyncIterator[Any]) -> None:
        """Cancel ``task``, which is waiting on ``stream``, and close ``stream`` once the
        task has unwound. Neither is awaited here."""
        task.add_done_callback(lambda _: self.close_later(stream))
        task.cancel()
        self.adopt(task)

    async def join(self) -> None:
        """Wait until every task held has ended, without cancelling any."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def aclose(self) -> None:
        """Refuse new work, then cancel every task held and await them all."""
        self._closed = True
        while self._tasks:
            tasks = list(self._tasks)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _hold(self, task: asyncio.Future[Any], level: int) -> None:
        self._tasks[task] = level
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Future[Any]) -> None:
        level = self._tasks.pop(task, logging.DEBUG)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None and log.isEnabledFor(level):
            log.log(level, "%s: background task failed: %r", self.name, exc, exc_info=exc)

    def _refuse(self, work: Coroutine[Any, Any, Any], why: str) -> None:
        work.close()
        log.debug("%s: background work refused (%s): %s", self.name, why, work)


async def _call(fn: Callable[[], Awaitable[Any]]) -> None:
    await fn()
