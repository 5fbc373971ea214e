"""Running a delegated job on a worker: the tier the job names, within the job's budget.

The gate runs its own jobs with ``Gate._run_job``; a worker process (``rtgate worker``)
has no gate, only tiers, and uses :class:`TierRunner`. It also learns each tier's latency,
which :class:`~rtgate.delegate.warm.SharedLatency` can share with the gate replicas.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

from rtgate.budget import Budget, use_budget
from rtgate.delegate.base import Job
from rtgate.errors import Declined
from rtgate.latency import LatencyModel
from rtgate.tiers.base import Piece, Request, Tier

__all__ = ["TierRunner"]


class TierRunner:
    """A :data:`~rtgate.delegate.base.JobRunner` over named tiers."""

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
        budget = Budget(job.budget_ms)
        t0 = budget.clock()
        first: float | None = None
        parts: list[Piece] = []
        job.status = "running"
        try:
            with use_budget(budget):
                async with asyncio.timeout_at(budget.deadline):
                    async for p in tier.stream(job.request, budget):
                        if first is None:
                            first = budget.clock()
                        parts.append(p if isinstance(p, Piece) else Piece(p))
            job.status = "done"
        except TimeoutError:
            job.status, job.error = "failed", f"no answer within {job.budget_ms:.0f} ms"
        except Declined as e:
            job.status, job.error = "failed", f"declined: {e}"
        except Exception as e:  # a failing tier fails its job, not the worker
            job.status, job.error = "failed", f"{type(e).__name__}: {e}"
        end = budget.clock()
        job.text = "".join(p.text for p in parts)
        job.data = [p.data for p in parts if p.data is not None]
        job.ttft_ms = None if first is None else (first - t0) * 1000.0
        job.elapsed_ms = (end - t0) * 1000.0
        job.finished = time.time()
        model = self.models[tier.name]
        if job.status == "done" and job.ttft_ms is not None:
            model.observe(job.ttft_ms, job.elapsed_ms)
        elif job.error and job.error.startswith("no answer within"):
            model.observe_cutoff(job.elapsed_ms)

    async def warmup(self) -> None:
        for tier in self.tiers.values():
            await tier.warmup()

    async def aclose(self) -> None:
        for tier in self.tiers.values():
            await tier.aclose()
