"""Delegated jobs and probes: the work the gate hands to the background.

- **Delegation**: when a better tier could not answer in budget (skipped on its
  prediction, cut off, too slow), a :class:`~rtgate.gate.jobs.Job` runs it on the queue
  with the follow-up budget; the caller gets the job id with its in-budget answer.
- **Jobs**: run by the queue's workers (:meth:`Delegation.run_job`), found and awaited by
  id here or, for a queue on a broker, wherever they were submitted; cancelled in process
  or on the broker.
- **Probes**: a skipped, non-delegable tier is measured again off the request path, so a
  tier that was slow once is not skipped forever.

Kept apart from choosing and executing because none of it is on a request's path: it
only decides what to start, and the queue or the background owner runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from rtgate.core.background import Background
from rtgate.core.errors import JobNotFound, QueueFull
from rtgate.core.metrics import GateMetrics
from rtgate.core.request import Request
from rtgate.gate.job_runner import run_tier_job
from rtgate.gate.jobs import Job, JobQueue, JobStore, find_job, new_job_id, wait_job
from rtgate.gate.types import GateConfig, Lineup, Run
from rtgate.tiers.base import Tier

__all__ = ["Delegation"]

log = logging.getLogger("rtgate.gate")


class Delegation:
    """The gate's jobs: submitted to ``queue``, kept in ``jobs``; probes and the cancel
    of a job on a broker run in ``background``."""

    def __init__(
        self,
        lineup: Lineup,
        config: GateConfig,
        metrics: GateMetrics,
        queue: JobQueue,
        jobs: JobStore,
        background: Background,
    ) -> None:
        self.lineup = lineup
        self.config = config
        self.metrics = metrics
        self.queue = queue
        self.jobs = jobs
        self.background = background
        self._job_tasks: dict[str, asyncio.Future[None]] = {}
        self._last_probe: dict[str, float] = {}
        self._probing: set[str] = set()

    # -- submitting ------------------------------------------------------------------------

    def delegate(self, run: Run) -> None:
        """Queue a job for ``run.delegate_to`` if the request wants one and that tier beats
        the answer, or for the best delegable tier when a judge did not trust the fast
        answer (a fast answer a judge trusts is final); the trace records the job, or why
        it was refused. Nothing answered and a tier declined the input as not whole yet
        (:class:`~rtgate.core.errors.NotYet`): no job either."""
        if run.verdict is not None and run.verdict.answerable:
            return  # a judge found the fast answer enough: the big model is not needed
        if run.not_yet and run.answered is None and not run.abstained:
            # the input is still being written: the big model waits for the whole of it
            why = "not delegated: the input is not whole yet"
            run.trace.degraded = f"{run.trace.degraded}; {why}" if run.trace.degraded else why
            return
        target = run.delegate_to
        distrusted = run.abstained
        if target is None and distrusted:
            target = next((t for t in self.lineup.tiers if t.delegable), None)
        want = run.request.delegate if run.request.delegate is not None else self.config.delegate
        if not want or target is None:
            return
        if run.answered is not None and run.answered.quality >= target.quality and not distrusted:
            return
        job = Job(new_job_id(), target.name, run.request, self.config.followup_budget_ms)
        self.jobs.add(job)
        try:
            self.queue.submit(job)
        except QueueFull as e:
            job.status, job.error = "failed", str(e)
            self.jobs.finish(job)
            run.trace.degraded = f"{run.trace.degraded or ''}; delegation refused: {e}".lstrip("; ")
            self.metrics.delegated(target.name, "refused")
            return
        self.metrics.queue_depth.set(self.queue.depth)
        self.metrics.delegated(target.name, "queued")
        run.trace.job_id = job.id
        run.trace.delegated_to = target.name

    async def run_job(self, job: Job, store: bool = True) -> None:
        """Run a delegated job to completion (the queue's runner). ``store=False`` runs a
        probe: neither tracked for cancelling nor kept in the store."""
        if job.status == "cancelled":  # cancelled while it waited in the queue
            return
        tier = self.lineup.by_name[job.tier]
        self.metrics.queue_depth.set(self.queue.depth)
        track = (lambda task: self._job_tasks.__setitem__(job.id, task)) if store else None
        try:
            await run_tier_job(tier, job, self.lineup.models[tier.name], track)
        finally:
            if store:
                self._job_tasks.pop(job.id, None)
                self.metrics.delegated(tier.name, job.status)
                self.jobs.finish(job)

    # -- finding, waiting, cancelling ------------------------------------------------------

    async def find(self, job_id: str) -> Job:
        """The job from this process's store, else as the queue's broker knows it (a job
        submitted by another replica). Raises ``JobNotFound``."""
        return await find_job(self.queue, self.jobs, job_id)

    async def wait(self, job_id: str) -> Job:
        """The finished job, wherever it was submitted. Raises ``JobNotFound``."""
        return await wait_job(self.queue, self.jobs, job_id)

    def cancel(self, job_id: str) -> bool:
        """Stop a job of this process (queued or running); False if it had already
        finished. Raises ``JobNotFound``."""
        job = self.jobs.get(job_id)
        if job.status in ("done", "failed", "cancelled"):
            return False
        task = self._job_tasks.get(job_id)
        if task is not None:
            task.cancel()
        else:  # still queued: the worker will skip it
            job.status, job.error = "cancelled", "cancelled by the caller"
            self.jobs.finish(job)
        return True

    def stop(self, job_id: str) -> None:
        """Stop a job nobody will collect, wherever it runs; never raises, never waits. On
        a remote queue the cancellation is recorded on the broker in the background."""
        if self.queue.remote:
            self.background.spawn(self._cancel_remote(job_id), f"rtgate-cancel-{job_id}")
            return
        with contextlib.suppress(JobNotFound):
            self.cancel(job_id)

    async def _cancel_remote(self, job_id: str) -> None:
        with contextlib.suppress(JobNotFound):
            if await self.queue.cancel(job_id):
                log.debug("job %s cancelled: its client left", job_id)

    # -- probes ----------------------------------------------------------------------------

    def maybe_probe(self, tier: Tier, request: Request) -> None:
        """Measure a skipped tier again off the request path, at most once per
        ``probe_interval_ms`` (at once if it was never measured: its prior may be too
        pessimistic), one probe at a time."""
        interval = self.config.probe_interval_ms / 1000.0
        if not interval or tier.name in self._probing:
            return
        now = asyncio.get_running_loop().time()
        last = self._last_probe.get(tier.name)
        never_measured = self.lineup.models[tier.name].ttft.count == 0
        if last is not None and now - last < interval and not never_measured:
            return
        self._last_probe[tier.name] = now
        self._probing.add(tier.name)
        if self.background.spawn(self._probe(tier, request)) is None:
            self._probing.discard(tier.name)

    async def _probe(self, tier: Tier, request: Request) -> None:
        job = Job(new_job_id(), tier.name, request, self.config.followup_budget_ms)
        try:
            await self.run_job(job, store=False)
        finally:
            self._probing.discard(tier.name)
