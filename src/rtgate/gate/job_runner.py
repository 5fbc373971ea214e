"""Running a delegated job on a worker: the tier the job names, within the job's budget.

:func:`run_tier_job` runs one job; the gate calls it for its own jobs, and a worker process
(``rtgate worker``), which has no gate, only tiers, calls it through :class:`TierRunner`,
which also learns each tier's latency for :class:`~rtgate.delegate.warm.SharedLatency`
to share with the gate replicas.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

from rtgate.core.budget import Budget, use_budget
from rtgate.core.errors import Declined
from rtgate.core.latency import LatencyModel
from rtgate.core.request import Piece, Request
from rtgate.core.trace import error_detail
from rtgate.gate.jobs import Job
from rtgate.tiers.base import Tier

__all__ = ["TierRunner", "run_tier_job"]


async def run_tier_job(
    tier: Tier,
    job: Job,
    model: LatencyModel,
    track: Callable[[asyncio.Future[None]], None] | None = None,
) -> None:
    """Run ``tier`` on ``job.request`` within ``job.budget_ms``; fill in the job's result
    and teach ``model`` what it took. A failing tier fails its job, never the caller.

    ``track`` receives the task that consumes the tier: cancelling that task (and not the
    caller) ends the job as ``cancelled`` by the caller.
    """
    budget = Budget(job.budget_ms)
    t0 = budget.clock()
    first: float | None = None
    parts: list[Piece] = []
    job.status = "running"

    async def consume() -> None:
        nonlocal first
        with use_budget(budget):
            async with asyncio.timeout_at(budget.deadline):
                async for p in tier.stream(job.request, budget):
                    if first is None:
                        first = budget.clock()
                    parts.append(p if isinstance(p, Piece) else Piece(p))

    inner = asyncio.ensure_future(consume())
    if track is not None:
        track(inner)
    try:
        await inner
        job.status = "done"
    except asyncio.CancelledError:
        me = asyncio.current_task()
        if inner.cancelled() and (me is None or not me.cancelling()):
            job.status, job.error = "cancelled", "cancelled by the caller"
        else:
            inner.cancel()
            job.status, job.error = "failed", "cancelled"
            raise
    except TimeoutError:
        job.status, job.error = "failed", f"no answer within {job.budget_ms:.0f} ms"
    except Declined as e:
        job.status, job.error = "failed", f"declined: {e}"
    except Exception as e:
        job.status, job.error = "failed", error_detail(e)
    finally:
        end = budget.clock()
        job.text = "".join(p.text for p in parts)
        job.data = [p.data for p in parts if p.data is not None]
        job.ttft_ms = None if first is None else (first - t0) * 1000.0
        job.elapsed_ms = (end - t0) * 1000.0
        job.finished = time.time()
        if job.status == "done" and job.ttft_ms is not None:
            model.observe(job.ttft_ms, job.elapsed_ms)
        elif job.error and job.error.startswith("no answer within"):
            model.observe_cutoff(job.elapsed_ms)


class TierRunner:
    """A :data:`~rtgate.gate.jobs.JobRunner` over named tiers."""

    def __init__(self, tiers: Iterable[Tier]) -> None:
        self.tiers = {t.name: t for t in tiers}
        self.models = {
            name: LatencyModel(getattr(t, "latency_prior", None)) for name, t in self.tiers.items()
        }

    async def __call__(self, job: Job) -> None:
        tier = self.tiers.get(job.tier)
        if tier is None:
            job.status, job.error = "failed", f"no tier {job.tier!r} on this worker"
            job.finished = time.time()
            return
        if not isinstance(job.request, Request):
            job.status, job.error = "failed", "job has no decoded request"
            job.finished = time.time()
            return
        await run_tier_job(tier, job, self.models[tier.name])

    async def warmup(self) -> None:
        for tier in self.tiers.values():
            await tier.warmup()

    async def aclose(self) -> None:
        for tier in self.tiers.values():
            await tier.aclose()
