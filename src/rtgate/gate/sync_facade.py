"""A synchronous facade over the gate, for code that is not async: game loops, PLC-style
cycles, GUI threads.

The gate runs on an event loop in its own thread, owned by :class:`SyncGate` (start it,
stop it, or use it as a context manager). The caller's side never waits on that loop:

- ``submit(request, budget_ms)`` checks its arguments, reserves a slot and hands the request
  to the loop with ``call_soon_threadsafe``; it returns a :class:`Handle` at once.
- ``Handle.ready`` / ``Handle.result()`` / ``Handle.followup()`` / ``Handle.partial`` read
  what the loop thread has written; ``Handle.cancel()`` schedules the cancellation and
  returns. ``result()`` returns ``None`` while pending: polling never raises for "not yet".
- ``drain(max_items)`` (``mode="queue"``) pops what arrived since the last frame.

Warm start: ``start()`` loads and exercises every tier once (``Gate.warmup``) and ``warm``
says when that is done; until a tier has answered once it predicts +inf and is skipped.

One ``threading.Lock`` guards the small shared state (handle states, the result queue, the
slot count); it is held for a few bytecodes, never across an ``await`` or any I/O.

Bounds and policies:

- At most ``max_pending`` primary answers may be outstanding (in flight, or waiting in the
  queue to be drained). Past that, ``submit`` refuses the newcomer with ``QueueFull``.
- Primary answers are never dropped: their slot was reserved at ``submit``.
- Follow-ups (the delegated, deeper answers) wait in a queue of ``followup_size``; when it
  is full the *oldest* waiting follow-up is dropped (a newer line supersedes a stale one)
  and counted in ``stats()["dropped_followups"]``. The handle keeps its follow-up anyway.
- After ``cancel()``, nothing more is delivered for that handle. A delegated job that
  already started keeps running in the gate (the core has no job cancellation); only its
  delivery stops.

The budget starts when ``submit`` is called, so the hop to the loop thread counts against it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import Any, Literal, TypeVar

from rtgate.core.background import Background
from rtgate.core.budget import Budget
from rtgate.core.errors import InvalidRequest, QueueFull, RtgateError
from rtgate.core.request import Request
from rtgate.gate.gate import Gate
from rtgate.gate.jobs import Job
from rtgate.gate.sync_handle import Delivery, Handle
from rtgate.gate.types import DoneEvent, FollowupEvent, GateResult, Scope, TokenEvent
from rtgate.tiers.base import Tier

__all__ = ["Delivery", "Handle", "SyncGate"]

T = TypeVar("T")
Mode = Literal["poll", "queue"]


class SyncGate:
    """Owns a :class:`Gate` on a private event-loop thread and serves it to sync code.

    Args:
        gate: a gate, or the tiers to build one from.
        mode: ``"poll"`` (read each handle) or ``"queue"`` (also deliver to :meth:`drain`).
        max_pending: outstanding primary answers allowed (then ``submit`` raises QueueFull).
        followup_size: follow-ups waiting in the queue (then the oldest is dropped).
        scope: what the budget bounds; ``"complete"`` (the whole answer) by default.
    """

    def __init__(
        self,
        gate: Gate | Iterable[Tier],
        *,
        mode: Mode = "poll",
        max_pending: int = 64,
        followup_size: int = 32,
        scope: Scope = "complete",
        name: str = "rtgate-sync",
    ) -> None:
        if max_pending < 1 or followup_size < 1:
            raise InvalidRequest("max_pending and followup_size must be >= 1")
        self.gate = gate if isinstance(gate, Gate) else Gate(gate)
        self.mode: Mode = mode
        self.max_pending = max_pending
        self.followup_size = followup_size
        self.scope: Scope = scope
        self.name = name
        self._lock = threading.Lock()
        self._primaries: deque[Delivery] = deque()
        self._followups: deque[Delivery] = deque()
        self._pending = 0
        self._counts = {"submitted": 0, "refused": 0, "delivered": 0, "dropped_followups": 0}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._warm = threading.Event()
        self._start_error: BaseException | None = None
        self._tasks = Background(name)  # one task per request being served, on the loop
        self._closed = False

    # -- lifecycle (these may block: call them at start-up and shutdown, not in a frame) ----

    def start(
        self,
        *,
        warmup: bool = True,
        probe: Request | None = None,
        wait_warm: bool = True,
        timeout: float | None = 300.0,
    ) -> SyncGate:
        """Start the loop thread and the gate; with ``warmup``, load and exercise every tier
        once (``Gate.warmup``). Waits for warm-up unless ``wait_warm=False`` (then poll
        :attr:`warm`; until a tier has answered it predicts +inf and is skipped)."""
        if self._thread is not None or self._closed:
            raise RuntimeError("a SyncGate starts once")
        self._thread = threading.Thread(
            target=self._thread_main, args=(warmup, probe), name=self.name, daemon=True
        )
        self._thread.start()
        if not self._started.wait(timeout):
            raise TimeoutError("the gate did not start in time")
        if self._start_error is not None:
            self._thread.join()
            raise self._start_error
        if warmup and wait_warm and not self._warm.wait(timeout):
            raise TimeoutError("warm-up did not finish in time")
        if self._start_error is not None:
            self._closed = True
            self._thread.join(timeout)
            raise self._start_error
        return self

    def close(self, timeout: float | None = 30.0) -> None:
        """Cancel what is in flight, close the gate and its tiers, join the thread."""
        if self._closed:
            return
        self._closed = True
        loop, stop, thread = self._loop, self._stop, self._thread
        if loop is not None and stop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop already stopped on its own
                pass
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                raise TimeoutError("the gate thread did not stop in time")

    def __enter__(self) -> SyncGate:
        if self._thread is None:
            self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def warm(self) -> bool:
        """Every tier has been loaded and has answered once."""
        return self._warm.is_set() and self.gate.warm

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._closed

    # -- the caller's side: none of these wait on the loop ---------------------------------

    def submit(
        self,
        request: Request,
        budget_ms: float,
        *,
        follow: bool = True,
        tag: Any = None,
    ) -> Handle:
        """Hand ``request`` to the gate and return its handle at once.

        ``follow``: also deliver the delegated answer when there is one. ``tag`` is yours
        (an NPC id, a widget). Raises ``InvalidBudget`` for a bad budget, ``QueueFull``
        when ``max_pending`` answers are outstanding, ``RuntimeError`` when not running.
        """
        loop = self._loop
        if loop is None or self._closed or not self._started.is_set():
            raise RuntimeError("the SyncGate is not running")
        budget = Budget(budget_ms, clock=loop.time)  # starts now, on the loop's clock
        handle = Handle(self._cancel, request, budget, follow, tag)
        with self._lock:
            if self._pending >= self.max_pending:
                self._counts["refused"] += 1
                raise QueueFull(f"{self._pending} answers outstanding (max_pending)")
            self._pending += 1
            self._counts["submitted"] += 1
        try:
            loop.call_soon_threadsafe(self._launch, handle)
        except RuntimeError:
            with self._lock:
                self._release(handle)
            raise RuntimeError("the SyncGate is not running") from None
        return handle

    def drain(self, max_items: int | None = None) -> list[Delivery]:
        """What arrived since the last call, primary answers first, each in arrival order
        (``mode="queue"``; in ``"poll"`` mode it is always empty)."""
        out: list[Delivery] = []
        limit = max_items if max_items is not None else self.max_pending + self.followup_size
        with self._lock:
            for q in (self._primaries, self._followups):
                while q and len(out) < limit:
                    d = q.popleft()
                    if d.kind != "followup":
                        self._release(d.handle)
                    out.append(d)
            self._counts["delivered"] += len(out)
        return out

    def stats(self) -> dict[str, int]:
        """Counters: submitted, refused, delivered, dropped_followups, pending, queued."""
        with self._lock:
            return {
                **self._counts,
                "pending": self._pending,
                "queued": len(self._primaries) + len(self._followups),
            }

    def call(self, fn: Callable[[], Awaitable[T]], timeout: float | None = None) -> T:
        """Run ``fn()`` on the gate's loop and **block** for its value: for start-up, tools
        and measurements (the inline ablation), never on a frame's path."""
        loop = self._loop
        if loop is None or self._closed:
            raise RuntimeError("the SyncGate is not running")

        async def run() -> T:
            return await fn()

        return asyncio.run_coroutine_threadsafe(run(), loop).result(timeout)

    # -- shared state transitions (short critical sections) --------------------------------

    def _release(self, handle: Handle) -> None:
        """Free the handle's primary slot (lock held)."""
        if handle._slot:
            handle._slot = False
            self._pending -= 1

    def _cancel(self, handle: Handle) -> bool:
        with self._lock:
            follow_left = handle.followup_pending
            if handle._state != "pending" and not follow_left:
                return False
            if handle._state == "pending":
                handle._state = "cancelled"
            handle.follow = False
            for q in (self._primaries, self._followups):
                for d in [d for d in q if d.handle is handle]:
                    q.remove(d)
            self._release(handle)
        handle._done.set()
        handle._follow_done.set()
        loop = self._loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(self._cancel_task, handle)
            except RuntimeError:  # loop closed: nothing is running for it any more
                pass
        return True

    def _deliver(self, handle: Handle, item: GateResult | Job | BaseException) -> None:
        """Record an answer, a follow-up or a failure (on the loop thread)."""
        with self._lock:
            if isinstance(item, Job):
                if handle._state != "ready" or not handle.follow or handle._followup is not None:
                    return
                handle._followup = item
                if self.mode == "queue":
                    if len(self._followups) >= self.followup_size:
                        self._followups.popleft()
                        self._counts["dropped_followups"] += 1
                    self._followups.append(Delivery(handle, "followup", job=item))
            else:
                if handle._state != "pending":
                    return
                if isinstance(item, GateResult):
                    handle._result, handle._state = item, "ready"
                    delivery = Delivery(handle, "result", result=item)
                else:
                    handle._error, handle._state = item, "failed"
                    delivery = Delivery(handle, "error", error=item)
                handle.done_at = handle.budget.clock()
                if self.mode == "queue":
                    self._primaries.append(delivery)
                else:
                    self._release(handle)
        if isinstance(item, Job):
            handle._follow_done.set()
        else:
            handle._done.set()
            if not handle.followup_pending:
                handle._follow_done.set()

    # -- the loop thread --------------------------------------------------------------------

    def _thread_main(self, warmup: bool, probe: Request | None) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._main(warmup, probe))
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                loop.close()
                self._started.set()  # wake start() if the loop died before starting
                self._warm.set()

    async def _main(self, warmup: bool, probe: Request | None) -> None:
        self._stop = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        try:
            await self.gate.start()
        except BaseException as e:
            self._start_error = e
            self._started.set()
            return
        self._started.set()
        try:
            if warmup:
                try:
                    await self.gate.warmup(probe)
                    failed = {
                        name: status
                        for name, status in self.gate.warmup_status.items()
                        if status.startswith("warmup failed")
                    }
                    if failed and len(failed) == len(self.gate.warmup_status):
                        raise RuntimeError("; ".join(f"{n}: {st}" for n, st in failed.items()))
                except Exception as e:
                    self._start_error = e
                    return
                finally:
                    self._warm.set()
            await self._stop.wait()
        finally:
            await self._shutdown()

    async def _shutdown(self) -> None:
        await self._tasks.aclose()
        await self.gate.aclose()

    def _launch(self, handle: Handle) -> None:
        if handle._state != "pending":
            return
        handle._task = self._tasks.spawn(self._serve(handle), name=handle.id)
        if handle._task is None:  # shutting down: it will never be served
            self._cancelled_by_loop(handle)

    def _cancel_task(self, handle: Handle) -> None:
        if handle._task is not None:
            handle._task.cancel()

    async def _serve(self, handle: Handle) -> None:
        events = self.gate.stream(
            handle.request, handle.budget, scope=self.scope, follow=handle.follow
        )
        try:
            async with contextlib.aclosing(events):
                async for ev in events:
                    if isinstance(ev, TokenEvent):
                        if handle._state == "pending":
                            handle._partial += ev.text
                    elif isinstance(ev, DoneEvent):
                        self._deliver(handle, ev.result)
                    elif isinstance(ev, FollowupEvent):
                        self._deliver(handle, ev.job)
        except asyncio.CancelledError:
            self._cancelled_by_loop(handle)
            raise
        except Exception as e:  # a failing request must not kill the loop thread
            self._deliver(handle, e if isinstance(e, RtgateError) else _wrap(e))

    def _cancelled_by_loop(self, handle: Handle) -> None:
        """Shutdown cancelled the task: the handle will never get an answer."""
        with self._lock:
            if handle._state == "pending":
                handle._state = "cancelled"
                self._release(handle)
        handle._done.set()
        handle._follow_done.set()


def _wrap(e: Exception) -> RtgateError:
    err = RtgateError(f"serving failed: {type(e).__name__}: {e}")
    err.__cause__ = e
    return err
