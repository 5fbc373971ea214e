"""Stages linked into a pipeline; frames flow down (caller → agent) and up (agent → caller).

Each :class:`Stage` implements one method, :meth:`Stage.process_frame`, and forwards what it
does not handle with :meth:`Stage.push`. A stage runs two tasks:

- the **control task** handles control frames the moment they arrive, even while the data
  task is busy. An :class:`~rtgate.apps.voice.frames.InterruptionFrame` reaching an
  *interruptible* stage (agent, TTS, output) first drops its queued data and cancels the
  frame in progress. An :class:`~rtgate.apps.voice.frames.EndFrame` waits until the data
  already queued is done, then is forwarded, and the stage stops.
- the **data task** handles data frames one at a time, in order.

Queue policies. Control: at most ``MAX_CONTROL`` waiting (a few per turn are normal); more
is a bug, so ``put`` raises :class:`~rtgate.core.errors.QueueFull` rather than drop one. Data: at
most ``max_data`` waiting; when full, ``"wait"`` makes the sender wait (back-pressure, for
text), ``"drop_oldest"`` discards the oldest frame and counts it (for audio: late audio is
worth less than live audio).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Literal

from rtgate.apps.voice.frames import ControlFrame, EndFrame, Frame, InterruptionFrame
from rtgate.core.errors import QueueFull

__all__ = ["MAX_CONTROL", "Observer", "Pipeline", "QueuePolicy", "Stage"]

MAX_CONTROL = 256
QueuePolicy = Literal["wait", "drop_oldest"]
_Item = tuple[Frame, bool]  # (frame, upstream)
Observer = Callable[["Stage", Frame, bool], None]
"""Called with (stage, frame, upstream) for every frame a stage pushes (keep it cheap)."""


class Stage:
    """One step of the pipeline. Subclasses override :meth:`process_frame`."""

    name = "stage"
    max_data = 64
    policy: QueuePolicy = "wait"
    interruptible = False

    def __init__(self) -> None:
        self.prev: Stage | None = None
        self.next: Stage | None = None
        self.dropped = 0
        self._control: deque[_Item] = deque()
        self._data: deque[_Item] = deque()
        self._control_ready = asyncio.Event()
        self._data_ready = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._current: asyncio.Future[None] | None = None
        self._sink: Callable[[Frame], None] | None = None
        self._observer: Observer | None = None
        self._ended = asyncio.Event()

    # -- what subclasses write -----------------------------------------------------------

    async def process_frame(self, frame: Frame, upstream: bool) -> None:
        """Handle one frame. The default forwards it in the direction it was going."""
        await self.push(frame, upstream)

    async def push(self, frame: Frame, upstream: bool = False) -> None:
        """Send ``frame`` to the next stage (or the previous one when ``upstream``)."""
        if self._observer is not None:
            self._observer(self, frame, upstream)
        target = self.prev if upstream else self.next
        if target is not None:
            await target.put(frame, upstream)
        elif not upstream and self._sink is not None:
            self._sink(frame)

    # -- queueing --------------------------------------------------------------------------

    async def put(self, frame: Frame, upstream: bool = False) -> None:
        """Queue ``frame`` for this stage according to its kind and the stage's policy."""
        if isinstance(frame, ControlFrame):
            if len(self._control) >= MAX_CONTROL:
                raise QueueFull(f"{self.name}: {MAX_CONTROL} control frames waiting")
            self._control.append((frame, upstream))
            self._control_ready.set()
            return
        while len(self._data) >= self.max_data:
            if self.policy == "drop_oldest":
                self._data.popleft()
                self.dropped += 1
                break
            self._space.clear()
            await self._space.wait()
        self._data.append((frame, upstream))
        self._idle.clear()
        self._data_ready.set()

    def _clear_data(self) -> None:
        self._data.clear()
        self._space.set()
        if self._current is not None:
            self._current.cancel()

    # -- tasks -----------------------------------------------------------------------------

    async def _run_control(self) -> None:
        while True:
            await self._control_ready.wait()
            frame, upstream = self._control.popleft()
            if not self._control:
                self._control_ready.clear()
            if isinstance(frame, EndFrame) and not upstream:
                await self._idle.wait()
                await self.process_frame(frame, upstream)
                self._ended.set()
                return
            if isinstance(frame, InterruptionFrame) and self.interruptible:
                self._clear_data()
            await self.process_frame(frame, upstream)

    async def _run_data(self) -> None:
        while True:
            if not self._data:
                self._idle.set()
                self._data_ready.clear()
                await self._data_ready.wait()
                continue
            frame, upstream = self._data.popleft()
            self._space.set()
            task = asyncio.ensure_future(self.process_frame(frame, upstream))
            self._current = task
            try:
                await asyncio.wait({task})
            finally:
                self._current = None
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]

    async def run(self) -> None:
        """Run both tasks until an :class:`EndFrame` has passed through."""
        async with asyncio.TaskGroup() as tg:
            data = tg.create_task(self._run_data(), name=f"{self.name}-data")
            await self._run_control()
            data.cancel()

    async def setup(self) -> None:
        """Called before frames flow (load models here)."""

    async def cleanup(self) -> None:
        """Called after the stage stopped (release resources)."""


class Pipeline:
    """Stages in order; frames leaving the last one go to ``sink``.

    Use as an async context manager: it runs every stage and, on exit, waits for the
    stages to finish after an ``EndFrame`` (or cancels them on error).
    """

    def __init__(
        self,
        stages: Sequence[Stage],
        sink: Callable[[Frame], None] | None = None,
        observer: Observer | None = None,
    ) -> None:
        if not stages:
            raise ValueError("a pipeline needs at least one stage")
        self.stages = list(stages)
        for a, b in zip(self.stages, self.stages[1:], strict=False):
            a.next, b.prev = b, a
        for s in self.stages:
            s._observer = observer
        self.stages[-1]._sink = sink
        self._tasks: list[asyncio.Task[None]] = []

    async def put(self, frame: Frame) -> None:
        """Feed a frame to the first stage."""
        await self.stages[0].put(frame)

    async def __aenter__(self) -> Pipeline:
        for s in self.stages:
            await s.setup()
        self._tasks = [asyncio.create_task(s.run(), name=s.name) for s in self.stages]
        return self

    async def wait(self) -> None:
        """Wait until an ``EndFrame`` has passed the last stage (re-raising stage errors)."""
        ended = asyncio.ensure_future(self.stages[-1]._ended.wait())
        pending: set[asyncio.Future[Any]] = {ended, *self._tasks}
        try:
            while not ended.done():
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    if t is not ended and not t.cancelled() and t.exception() is not None:
                        raise t.exception()  # type: ignore[misc]
        finally:
            ended.cancel()

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        for t in self._tasks:
            if not t.done():
                t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for s in self.stages:
            await s.cleanup()
