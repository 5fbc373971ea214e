"""The latency-budget gate: choose a tier that fits, cut it off if it is late, fall back,
and run the better tier in the background when it cannot fit.

:class:`Gate` is a facade; each idea has its own module:

- :mod:`~rtgate.gate.types`: the knobs, answers, events and one request's state;
- :mod:`~rtgate.gate.choice`: which tier fits, what to keep in reserve, last resort, hedge;
- :mod:`~rtgate.gate.walk`: one request's walk down the tiers and its result;
- :mod:`~rtgate.gate.executor` (and :mod:`~rtgate.gate.hedging`): one tier's attempt,
  its first piece by a cut-off, then the rest;
- :mod:`~rtgate.gate.delegation`: jobs, their cancelling and finding, and probes;
- :mod:`~rtgate.gate.warmup`: the first samples of every tier;
- :class:`~rtgate.core.background.Background`: the one owner of the gate's background
  work (abandoned streams closing, cut-off tasks unwinding, probes), closed with the gate.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

from rtgate.core.background import Background
from rtgate.core.budget import Budget, use_budget
from rtgate.core.latency import LatencyModel, Prior
from rtgate.core.metrics import GateMetrics
from rtgate.core.request import Request
from rtgate.core.trace import Trace
from rtgate.gate.choice import Choice
from rtgate.gate.delegation import Delegation
from rtgate.gate.executor import Executor
from rtgate.gate.inprocess_queue import InProcessQueue
from rtgate.gate.jobs import Job, JobQueue, JobStore
from rtgate.gate.types import (
    DoneEvent,
    FollowupEvent,
    GateConfig,
    GateEvent,
    GateResult,
    Lineup,
    Run,
    Scope,
)
from rtgate.gate.walk import Walk
from rtgate.gate.warmup import warm_up
from rtgate.tiers.answerability import Judge
from rtgate.tiers.base import Tier

__all__ = ["Gate"]


class Gate:
    """Answers each request within its budget from the best tier that fits.

    Use as an async context manager (or ``start()`` / ``aclose()``): it runs the workers
    of delegated jobs and owns the background work; closing it cancels both and closes
    the tiers. Without ``start()`` it still answers, but no delegated job runs.
    """

    def __init__(
        self,
        tiers: Iterable[Tier],
        *,
        config: GateConfig | None = None,
        metrics: GateMetrics | None = None,
        queue: JobQueue | None = None,
        store: JobStore | None = None,
        priors: Mapping[str, Prior] | None = None,
        judge: Judge | None = None,
    ) -> None:
        ordered = _checked(sorted(tiers, key=lambda t: -t.quality))
        priors = dict(priors or {})
        models = {
            t.name: LatencyModel(priors.get(t.name, getattr(t, "latency_prior", None)))
            for t in ordered
        }
        self._lineup = Lineup(ordered, {t.name: t for t in ordered}, models)
        self._config = config or GateConfig()
        self._metrics = metrics or GateMetrics()
        self._queue: JobQueue = queue or InProcessQueue()
        self._jobs = store if store is not None else JobStore()  # an empty store is falsy
        self._background = Background("rtgate-gate")
        self._choice = Choice(self._lineup, self._config)
        self._delegation = Delegation(
            self._lineup, self._config, self._metrics, self._queue, self._jobs, self._background
        )
        executor = Executor(self._choice, self._config, self._metrics, self._background)
        self._walk = Walk(
            self._choice, executor, self._delegation, self._metrics, self._config, judge
        )
        self.warm = False
        self.warmup_status: dict[str, str] = {}
        self._started = False

    # -- what it is made of ----------------------------------------------------------------

    @property
    def tiers(self) -> Sequence[Tier]:
        """The tiers, best first."""
        return self._lineup.tiers

    @property
    def by_name(self) -> Mapping[str, Tier]:
        return self._lineup.by_name

    @property
    def models(self) -> dict[str, LatencyModel]:
        """The learned latency model of each tier, by name (live: the gate decides on
        these)."""
        return self._lineup.models

    def latency_models(self) -> Mapping[str, LatencyModel]:
        """What the gate has learned of each tier's latency, to share with other replicas
        (:class:`~rtgate.delegate.warm.SharedLatency` loads into and saves these)."""
        return self._lineup.models

    @property
    def judge(self) -> Judge | None:
        """What decides whether a fast answer can stand alone (``None``: every answer
        that fits the budget does)."""
        return self._walk.judge

    @property
    def config(self) -> GateConfig:
        return self._config

    @property
    def metrics(self) -> GateMetrics:
        return self._metrics

    @property
    def queue(self) -> JobQueue:
        return self._queue

    @property
    def jobs(self) -> JobStore:
        return self._jobs

    @property
    def replica(self) -> str:
        """This gate's name among the replicas sharing its job queue ("" in process)."""
        return self._queue.replica

    # -- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> Gate:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def start(self) -> None:
        if not self._started:
            self._background.open()
            await self._queue.start(self._delegation.run_job)
            self._started = True

    async def aclose(self) -> None:
        """Stop the job queue, cancel and await the background work, close the tiers."""
        await self._queue.aclose()
        await self._background.aclose()
        for tier in self._lineup.tiers:
            await tier.aclose()
        self._started = False

    async def warmup(
        self, probe: Request | None = None, budget_ms: float = 60_000.0, rounds: int = 2
    ) -> None:
        """Load every tier, then answer ``probe`` ``rounds`` times on each; only the last
        round is recorded (a first inference is slower than the ones that follow). A tier
        that fails is reported in ``warmup_status`` and stays cold; the others still warm."""
        self.warmup_status = {}
        probe = probe or Request(input="hello")
        lineup = self._lineup
        await warm_up(lineup.tiers, lineup.models, probe, budget_ms, rounds, self.warmup_status)
        # warm: no tier is left cold (each has answered once or has a prior)
        self.warm = not any(m.cold for m in lineup.models.values())

    # -- decisions -------------------------------------------------------------------------

    def predict(self, tier: Tier, scope: Scope, q: str = "p99") -> float:
        """``tier``'s predicted time (to the first piece, or the whole answer) at ``q``."""
        return self._choice.predict(tier, scope, q)

    def choose(self, left_ms: float, scope: Scope = "complete") -> Tier | None:
        """The best tier whose predicted p99 fits in ``left_ms`` (what the gate starts)."""
        # Not a call to a Choice method: this is the gate's hottest query (``rtgate bench
        # gate``), and the hop through a second object costs it ~5%.
        room = left_ms - self._config.safety_ms
        models = self._lineup.models
        first_piece = scope == "first_token"
        for tier in self._lineup.tiers:
            m = models[tier.name]
            if (m.predict_ttft("p99") if first_piece else m.predict_total("p99")) <= room:
                return tier
        return None

    # -- serving ---------------------------------------------------------------------------

    async def answer(
        self, request: Request, budget_ms: float | Budget, scope: Scope = "complete"
    ) -> GateResult:
        """The whole answer within the budget (by default the budget bounds all of it)."""
        # The walk is drained here rather than through ``stream``: one async-generator
        # layer less on every request, and no events built only to be dropped.
        run = self._run(request, budget_ms, scope)
        with use_budget(run.budget):
            async with contextlib.aclosing(self._walk.serve(run)) as events:
                async for _ in events:
                    pass
        return self._walk.finish(run)

    async def stream(
        self,
        request: Request,
        budget_ms: float | Budget,
        *,
        scope: Scope = "first_token",
        follow: bool = False,
    ) -> AsyncGenerator[GateEvent, None]:
        """Pieces as they come, then ``DoneEvent``; with ``follow``, the delegated answer
        as a ``FollowupEvent`` on the same stream when it arrives."""
        run = self._run(request, budget_ms, scope)
        with use_budget(run.budget):
            async with contextlib.aclosing(self._walk.serve(run)) as events:
                async for ev in events:
                    yield ev
        result = self._walk.finish(run)
        yield DoneEvent(result)
        if follow and result.job_id is not None:
            job = await self._jobs.wait(result.job_id)
            yield FollowupEvent(job)

    def _run(self, request: Request, budget_ms: float | Budget, scope: Scope) -> Run:
        """One request's state: its budget, and the tiers' (longer when only the first
        piece is bounded, so a backend does not stop at the first-piece deadline)."""
        budget = budget_ms if isinstance(budget_ms, Budget) else Budget(budget_ms)
        tier_budget = budget
        if scope == "first_token":
            total = budget.budget_ms + self._config.stream_max_ms
            tier_budget = Budget(total, clock=budget.clock, start=budget.start)
        return Run(request, budget, tier_budget, scope, Trace(request.id, budget.budget_ms))

    # -- delegated jobs --------------------------------------------------------------------

    @property
    def job_count(self) -> int:
        """Jobs this gate keeps (queued, running, or finished and not yet forgotten)."""
        return len(self._jobs)

    def job_ids(self) -> list[str]:
        """The ids of the jobs this gate keeps, oldest first."""
        return self._jobs.ids()

    def job(self, job_id: str) -> Job | None:
        """A job this gate submitted, or ``None`` (see :meth:`find_job` for any replica's)."""
        return self._jobs.find(job_id)

    async def find_job(self, job_id: str) -> Job:
        """The job from this gate, else from its queue's broker (submitted by another
        replica). Raises ``JobNotFound``."""
        return await self._delegation.find(job_id)

    async def wait_job(self, job_id: str) -> Job:
        """The finished job, wherever it was submitted. Raises ``JobNotFound``."""
        return await self._delegation.wait(job_id)

    async def job_queued(self, job_id: str) -> bool:
        """Wait until a delegated job is safely queued (on the broker, for a broker queue;
        at once in process): True, or False if it was refused."""
        return await self._queue.enqueued(job_id)

    def cancel_job(self, job_id: str) -> bool:
        """Stop a delegated job of this gate (queued or running). False if it had already
        finished; raises ``JobNotFound``."""
        return self._delegation.cancel(job_id)

    def stop_job(self, job_id: str) -> None:
        """Stop a job nobody will collect, wherever it runs (in process at once; on a
        broker, recorded there in the background so no worker starts it). Never raises."""
        self._delegation.stop(job_id)

    def snapshot(self) -> dict[str, Any]:
        """Metrics, learned latencies and queue state as plain data."""
        models = self._lineup.models
        return {
            "warm": self.warm,
            "warmup": dict(self.warmup_status),
            "tiers": {
                t.name: {
                    "quality": t.quality,
                    "delegable": t.delegable,
                    **models[t.name].snapshot(),
                }
                for t in self._lineup.tiers
            },
            "queue_depth": self._queue.depth,
            "metrics": self._metrics.snapshot(),
        }


def _checked(tiers: list[Tier]) -> list[Tier]:
    names = [t.name for t in tiers]
    if len(set(names)) != len(names):
        raise ValueError(f"tier names must be unique: {names}")
    if "silent" in names:
        raise ValueError("'silent' is the gate's own route; name the tier otherwise")
    return tiers
