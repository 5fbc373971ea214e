"""The processes of ``rtgate bench delegation``: a gate replica and the workers' tiers.

A replica is a real :class:`~rtgate.gate.Gate` with a broker queue, driven over stdin and
stdout with JSON lines (the benchmark's stand-in for a load balancer and HTTP)::

    in   {"op": "ask", "n": 7}           answer "q7" within 150 ms; the cloud tier is too
                                         slow, so the gate answers from "template" and
                                         delegates "cloud" to the workers
    in   {"op": "follow", "n": 7, "job": "job-…"}   take over a job from a dead replica
    out  {"ev": "ready", "replica": "…"}
    out  {"ev": "submitted", "n": 7, "job": "job-…", "answer_ms": 0.4}   (once on the broker)
    out  {"ev": "refused", "n": 7, "error": "…"}
    out  {"ev": "delivered", "n": 7, "job": "job-…", "status": "done", "text": "…"}
    out  {"ev": "stats", …}              at exit (stdin closed)

The workers' tier is :func:`bench_tiers`: an echo tier (its answer names the question, so
a result can be checked against its job) wrapped in an **emulated** latency profile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from rtgate.core.budget import Budget
from rtgate.core.latency import Prior
from rtgate.core.request import Piece, Request
from rtgate.delegate.broker import REFUSED, BrokerQueue
from rtgate.delegate.factory import DelegationSettings, make_broker_queue
from rtgate.gate import DoneEvent, FollowupEvent, Gate, GateConfig, GateEvent
from rtgate.gate.jobs import JobStore
from rtgate.tiers.base import Tier
from rtgate.tiers.emulated import CLOUD_70B, EmulatedLatency, LatencyProfile, LogNormal
from rtgate.tiers.fake import FakeTier

__all__ = ["FAST_CLOUD", "PROFILES", "EchoTier", "bench_tiers", "expected_text", "serve"]

FAST_CLOUD = LatencyProfile("fast-cloud", LogNormal(20.0, 60.0), LogNormal(1.0, 3.0))
"""A quick emulated model, for measuring the gate side rather than waiting on the model."""
PROFILES = {CLOUD_70B.name: CLOUD_70B, FAST_CLOUD.name: FAST_CLOUD}
PROFILE_ENV = "RTGATE_BENCH_PROFILE"


def expected_text(question: str) -> str:
    return f"answer to {question}"


class EchoTier(Tier):
    """Answers ``answer to <input>`` in three pieces, at once (wrap it for latency)."""

    def __init__(self, name: str = "cloud", quality: int = 3, delegable: bool = True) -> None:
        self.name, self.quality, self.delegable = name, quality, delegable

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        for part in ("answer ", "to ", request.input):
            yield part


def bench_tiers() -> list[Tier]:
    """The workers' tiers: the echo tier as an emulated ``$RTGATE_BENCH_PROFILE`` model."""
    profile = PROFILES[os.environ.get(PROFILE_ENV, CLOUD_70B.name)]
    return [EmulatedLatency(EchoTier(), profile, seed=None)]


def _emit(**event: Any) -> None:
    sys.stdout.write(json.dumps(event, separators=(",", ":")) + "\n")
    sys.stdout.flush()


async def _ask(gate: Gate, queue: BrokerQueue, n: int) -> None:
    t0 = time.perf_counter()
    request = Request(input=f"q{n}", delegate=True)
    events = gate.stream(request, 150.0, scope="complete", follow=True)
    async with contextlib.aclosing(events):
        async for ev in events:
            await _on_event(gate, queue, n, t0, ev)


async def _on_event(gate: Gate, queue: BrokerQueue, n: int, t0: float, ev: GateEvent) -> None:
    if isinstance(ev, DoneEvent):
        job_id = ev.result.job_id
        answer_ms = (time.perf_counter() - t0) * 1000.0
        if job_id is None:
            _emit(ev="refused", n=n, error=ev.result.trace.degraded or "not delegated")
        elif not await queue.enqueued(job_id):
            _emit(ev="refused", n=n, job=job_id, error=gate.jobs.get(job_id).error)
        else:
            _emit(ev="submitted", n=n, job=job_id, answer_ms=round(answer_ms, 3))
    elif isinstance(ev, FollowupEvent):
        job = ev.job
        if not (job.error or "").startswith(REFUSED):
            _emit(ev="delivered", n=n, job=job.id, status=job.status, text=job.text)


async def _follow(queue: BrokerQueue, n: int, job_id: str) -> None:
    job = await queue.follow(job_id)
    _emit(ev="delivered", n=n, job=job.id, status=job.status, text=job.text, followed=True)


async def serve(settings: DelegationSettings) -> None:
    """Run one replica until stdin closes."""
    store = JobStore()
    queue = make_broker_queue(settings, store)
    tiers = [
        FakeTier("template", 1, ["ok"]),
        FakeTier("cloud", 3, hang=True, delegable=True),  # never runs here: the workers do
    ]
    gate = Gate(
        tiers,
        config=GateConfig(followup_budget_ms=30_000.0, probe_interval_ms=0),
        queue=queue,
        store=store,
        priors={"cloud": CLOUD_70B.prior(), "template": Prior(1.0, 1.0)},
    )
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    tasks: set[asyncio.Task[None]] = set()
    async with gate:
        _emit(ev="ready", replica=queue.replica)
        while line := await reader.readline():
            cmd = json.loads(line)
            if cmd["op"] == "ask":
                coro = _ask(gate, queue, int(cmd["n"]))
            else:
                coro = _follow(queue, int(cmd["n"]), str(cmd["job"]))
            task = asyncio.create_task(coro)
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)
        _emit(ev="stats", replica=queue.replica, **queue.stats)


def main(argv: list[str]) -> None:
    settings = DelegationSettings.of(json.loads(argv[0]))
    asyncio.run(serve(settings))


if __name__ == "__main__":
    main(sys.argv[1:])
