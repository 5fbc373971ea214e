"""The explainer in its own process, so nothing it does can reach the stop path.

In one process, a Python thread holding the GIL while the OS has paused it (a busy machine)
stalls every other thread, however high the stop path's priority; and a crash in native model
code would end the stop path too. So ``guard run`` and the benchmark run the
:class:`~rtgate.apps.guard.explain_worker.ExplainWorker` in a child process (``spawn``), fed by a
bounded pipe. The child is given a database path and an explainer, never a broker address.

Feed policy: at most ``queue_size`` stops in the pipe; when full, the newcomer is dropped on
the stop path's side and counted (``dropped``); the child applies the worker's own policy.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rtgate.apps.guard.events import StopEvent
from rtgate.apps.guard.explain_worker import ExplainWorker, LLMExplainer, Machine
from rtgate.apps.guard.store import WorkOrderStore

__all__ = ["ExplainConfig", "ExplainProcess"]


@dataclass(frozen=True)
class ExplainConfig:
    """How the child sets up its worker."""

    db: str
    llm: bool = True
    model: str = "gemma3-270m"
    budget_s: float = 1.0
    capacity: int = 64
    machines: Mapping[str, Machine] = field(default_factory=dict)


def _child(cfg: ExplainConfig, inbox: Any, replies: Any) -> None:
    explainer = LLMExplainer(cfg.model) if cfg.llm and LLMExplainer.available(cfg.model) else None
    worker = ExplainWorker(
        WorkOrderStore(cfg.db),
        explainer,
        capacity=cfg.capacity,
        budget_s=cfg.budget_s,
        machines=cfg.machines,
    ).start()
    if explainer is not None:
        worker.run_coroutine(explainer.warmup()).result()
    replies.put(("ready", explainer.name if explainer is not None else "rules"))
    while (item := inbox.get()) is not None:
        kind, ev = item
        if kind == "offer":
            worker.offer(ev)
        else:
            worker.inline(ev)
            replies.put(("done", ev.message.station))
    worker.stop(timeout_s=60.0)
    replies.put(("stats", {"dropped": worker.dropped, "fallbacks": worker.fallbacks}))


class ExplainProcess:
    """``offer`` / ``inline`` / ``stop`` like :class:`ExplainWorker`, across a process."""

    def __init__(self, config: ExplainConfig, queue_size: int = 256) -> None:
        ctx = mp.get_context("spawn")
        self.config = config
        self._inbox: Any = ctx.Queue(queue_size)
        self._replies: Any = ctx.Queue()
        self._proc = ctx.Process(
            target=_child, args=(config, self._inbox, self._replies), daemon=True
        )
        self.dropped = 0
        self.explainer = ""
        self.stats: dict[str, int] = {}

    def start(self, wait: bool = True, wait_s: float = 120.0) -> ExplainProcess:
        """Start the child; with ``wait``, until its explainer is loaded (stops offered
        meanwhile wait in the pipe)."""
        self._proc.start()
        end = time.monotonic() + wait_s
        while wait and not self.explainer:
            try:
                kind, name = self._replies.get(timeout=0.2)
            except queue.Empty:
                if not self._proc.is_alive() or time.monotonic() > end:
                    raise RuntimeError("the explainer process did not start") from None
                continue
            if kind == "ready":
                self.explainer = name
        return self

    def offer(self, ev: StopEvent) -> bool:
        """Hand a stop over (never blocks); False when the pipe was full."""
        try:
            self._inbox.put_nowait(("offer", ev))
        except queue.Full:
            self.dropped += 1
            return False
        return True

    def inline(self, ev: StopEvent) -> None:
        """The ablation: wait until the child has written the work order."""
        self._inbox.put(("inline", ev))
        while self._replies.get()[0] != "done":
            pass

    def stop(self, timeout_s: float = 60.0) -> None:
        """Let the child finish what it has, then end it."""
        if not self._proc.is_alive():
            return
        self._inbox.put(None)
        try:
            while (reply := self._replies.get(timeout=timeout_s))[0] != "stats":
                pass
            self.stats = reply[1]
        except queue.Empty:
            pass
        self._proc.join(timeout_s)
        if self._proc.is_alive():
            self._proc.kill()
