"""After a stop: a short root-cause hypothesis for the maintenance crew, in the background.

The stop path hands each stop to ``ExplainWorker.offer`` and goes on; the worker (its own
thread and event loop) runs the envelope diagnosis, asks an :class:`Explainer` for at most
``max_chars`` Chinese characters and writes a work order. The worker is given a feed, an
explainer and a store, never the MQTT publisher: it has no way to publish a stop.

- Feed policy (bounded): at most ``capacity`` stops wait. When full, the newcomer is not
  queued; the latest overflowing stop of each station is kept aside (bounded by the number
  of stations) and gets a work order from the rule-based explainer, so no stop goes without
  a ticket.
- Deadline: a work order is due ``budget_s`` after its stop. Each stop is handled in its own
  task; the model answers one stop at a time, and a stop gets it only if it can start early
  enough to finish by the deadline (a running estimate of an answer's duration). A timeout,
  an error, an unusable answer, a busy model or no model at all falls back to
  :class:`RuleExplainer`, which is deterministic and instant.

:class:`LLMExplainer` imports the language-model code lazily, inside its methods, so
importing this module loads none of it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from rtgate.apps.guard.diagnose import diagnose
from rtgate.apps.guard.events import StopEvent
from rtgate.apps.guard.explainers import (
    Explainer,
    LLMExplainer,
    Machine,
    RuleExplainer,
    StopContext,
    load_machines,
    truncate,
)
from rtgate.apps.guard.store import WorkOrder, WorkOrderStore

__all__ = [
    "ExplainWorker",
    "Explainer",
    "LLMExplainer",
    "Machine",
    "RuleExplainer",
    "StopContext",
    "load_machines",
    "truncate",
]

log = logging.getLogger("rtgate.guard")


class ExplainWorker:
    """Turns stops into work orders in the background (see the module doc).

    Args:
        store: where work orders go.
        explainer: the preferred explainer (``None``: rule-based only).
        capacity: stops that may wait (then the overflow policy applies).
        budget_s: a work order is due this long after its stop.
        machines: per-station machine facts for the diagnosis.
        on_order: called (on the worker thread) with each work order written.
    """

    def __init__(
        self,
        store: WorkOrderStore,
        explainer: Explainer | None = None,
        *,
        capacity: int = 64,
        budget_s: float = 1.0,
        margin_s: float = 0.05,
        machines: Mapping[str, Machine] | None = None,
        on_order: Callable[[WorkOrder], object] | None = None,
    ) -> None:
        self.store = store
        self.explainer = explainer
        self.fallback = RuleExplainer()
        self.capacity = capacity
        self.budget_s = budget_s
        self.margin_s = margin_s
        self.machines = dict(machines or {})
        self.on_order = on_order
        self.dropped = 0  # stops that overflowed the feed
        self.fallbacks = 0  # work orders written by the rule-based explainer
        self._lock = threading.Lock()
        self._waiting = 0
        self._overflow: dict[str, StopContext] = {}
        self._loop = asyncio.new_event_loop()
        self._queue: asyncio.Queue[StopContext | None] | None = None
        self._slot = asyncio.Semaphore(1)  # one model answer at a time
        self.answer_s = 0.5  # running estimate of how long the model takes to answer
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rtgate-guard-explain", daemon=True)

    def context(self, ev: StopEvent) -> StopContext:
        m = ev.message
        machine = self.machines.get(m.station, Machine())
        return StopContext(m.station, m.score, m.ts, m.window_end_ts, m.rule, ev.clip, machine)

    # -- the stop path's side: never blocks ---------------------------------------------
    def offer(self, ev: StopEvent) -> bool:
        """Queue a stop for explanation; False when the feed was full (see the policy)."""
        ctx = self.context(ev)
        m = ev.message
        with self._lock:
            if self._waiting >= self.capacity:
                self.dropped += 1
                self._overflow[m.station] = replace(ctx, note="解释队列已满")
                return False
            self._waiting += 1
        self._loop.call_soon_threadsafe(self._put, ctx)
        return True

    def _put(self, ctx: StopContext | None) -> None:
        assert self._queue is not None
        self._queue.put_nowait(ctx)

    # -- the worker thread ---------------------------------------------------------------
    def start(self) -> ExplainWorker:
        self._thread.start()
        self._ready.wait()
        return self

    def run_coroutine(self, coro: Any) -> Future[Any]:
        """Run ``coro`` on the worker's loop (used by the inline ablation and warm-up)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._queue = asyncio.Queue()
        self._ready.set()
        self._loop.run_until_complete(self._consume())
        self._loop.close()

    async def _consume(self) -> None:
        assert self._queue is not None
        tasks: set[asyncio.Task[WorkOrder]] = set()
        while True:
            ctx = await self._queue.get()
            if ctx is not None:  # each stop is its own task: one slow answer delays no other
                task = asyncio.create_task(self.handle(ctx))
                tasks.add(task)
                task.add_done_callback(self._done)
                task.add_done_callback(tasks.discard)
            with self._lock:
                overflow, self._overflow = list(self._overflow.values()), {}
            for late in overflow:
                await self.handle(late, use_llm=False)
            if ctx is None:
                await asyncio.gather(*tasks, return_exceptions=True)
                if self.explainer is not None and hasattr(self.explainer, "aclose"):
                    await self.explainer.aclose()
                return

    def _done(self, task: asyncio.Task[WorkOrder]) -> None:
        with self._lock:
            self._waiting -= 1  # the feed's capacity counts stops waiting and in progress
        if not task.cancelled() and task.exception() is not None:
            log.error("work order failed", exc_info=task.exception())

    async def handle(self, ctx: StopContext, use_llm: bool = True) -> WorkOrder:
        """Diagnose, explain within the deadline, store. Returns the work order."""
        m = self.machines.get(ctx.station, ctx.machine)
        diag = await asyncio.to_thread(diagnose, ctx.clip, m.shaft_hz, m.bearing)
        ctx = replace(ctx, machine=m, diagnosis=diag)
        text, who = await self._explain(ctx, use_llm)
        order = self.store.add(
            station=ctx.station,
            score=ctx.score,
            stop_ts=ctx.stop_ts,
            explanation=text,
            explainer=who,
            rule=ctx.rule,
            facts=diag.facts() + (f"；{ctx.note}" if ctx.note else ""),
        )
        if self.on_order is not None:
            self.on_order(order)
        return order

    async def _explain(self, ctx: StopContext, use_llm: bool) -> tuple[str, str]:
        """The model if it can answer by the deadline, else the rules (see the module doc).

        One answer at a time; a stop that cannot get the model early enough to finish in time
        (by the running estimate of an answer's duration) takes the rules at once.
        """
        deadline = ctx.stop_ts + self.budget_s - self.margin_s
        ex = self.explainer
        if use_llm and ex is not None and deadline - time.time() > self.answer_s:
            try:
                wait = deadline - time.time() - self.answer_s
                await asyncio.wait_for(self._slot.acquire(), timeout=max(0.0, wait))
            except TimeoutError:
                pass  # the model is busy past our deadline
            else:
                try:
                    t = time.perf_counter()
                    async with asyncio.timeout(max(0.0, deadline - time.time())):
                        text = truncate(await ex.explain(ctx))
                    self.answer_s = 0.7 * self.answer_s + 0.3 * (time.perf_counter() - t)
                    return text, ex.name
                except Exception as e:  # timeout, model error, unusable answer: fall back
                    log.info("explainer %s failed for %s: %r", ex.name, ctx.station, e)
                finally:
                    self._slot.release()
        self.fallbacks += 1
        return self.fallback.sentence(ctx), self.fallback.name

    def inline(self, ev: StopEvent) -> None:
        """The ablation: explain and store *before* the stop is published (blocks)."""
        self.run_coroutine(self.handle(self.context(ev))).result()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Finish the stops already queued, then end the thread."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._put, None)
            self._thread.join(timeout_s)
