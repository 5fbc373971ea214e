"""The explainer in its own process, so nothing it does can reach the stop path.

In one process, a Python thread holding the GIL while the OS has paused it (a busy machine)
stalls every other thread, however high the stop path's priority; and a crash in native model
code would end the stop path too. So ``guard run`` and the benchmark run the
:class:`~rtgate.apps.guard.explain_worker.ExplainWorker` in a child process (``spawn``), fed by a
bounded pipe. The child is given a database path and an explainer, never a broker address.

Feed policy: at most ``queue_size`` stops in the pipe; when full, the newcomer is dropped on
the stop path's side and counted (``dropped``); the child applies the worker's own policy.

Lifetime: the parent ends the child (``stop``: finish what it has, then a kill after the
timeout). The child ignores SIGINT and SIGTERM, which a terminal or a service manager may
send to the whole process group, so that the parent decides; and it exits by itself when
the parent is gone (a SIGKILL), so it never outlives the guard.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_ready
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


def _exit_with_parent() -> None:
    """End this process as soon as the parent has died (its sentinel becomes ready)."""
    parent = mp.parent_process()
    if parent is None:
        return
    wait_ready([parent.sentinel])
    os._exit(0)


def _child(cfg: ExplainConfig, inbox: Any, replies: Any) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, name="parent-watch", daemon=True).start()
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
        main = threading.current_thread() is threading.main_thread()
        # a SIGINT ignored at exec stays ignored, so a Ctrl-C to the whole group while the
        # child imports does not end it with a traceback (one pressed in this instant is lost)
        saved = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            self._proc.start()
        finally:
            if main:  # None: a handler not set from Python, i.e. the default
                signal.signal(signal.SIGINT, signal.SIG_DFL if saved is None else saved)
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
        """Let the child finish what it has for up to ``timeout_s``, then kill it; the
        child has exited (and been reaped) when this returns."""
        end = time.monotonic() + timeout_s
        if self._proc.is_alive():
            try:
                self._inbox.put(None, timeout=timeout_s)
                while (reply := self._reply(end))[0] != "stats":
                    pass
                self.stats = reply[1]
            except (queue.Full, queue.Empty):
                pass
            self._proc.join(max(0.0, end - time.monotonic()))
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5.0)
            self._inbox.cancel_join_thread()  # what is left in the pipe has no reader

    def _reply(self, end: float) -> Any:
        """The child's next reply; ``queue.Empty`` once it has died or ``end`` passed."""
        while True:
            try:
                return self._replies.get(timeout=0.2)
            except queue.Empty:
                if not self._proc.is_alive() or time.monotonic() > end:
                    raise
