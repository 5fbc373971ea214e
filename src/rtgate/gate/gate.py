"""The latency-budget gate: choose a tier that fits, cut it off if it is late, fall back,
and run the better tier in the background when it cannot fit.

How one request flows (tiers in order of ``quality``, best first)::

    for each tier:
        predicted p99 > what is left?     -> skipped   (a delegable tier is remembered)
        first piece by its cut-off?       -> answered  (stream the rest)
        declined / cut off / error        -> next tier (a cut-off delegable tier is remembered)
    nothing answered                      -> silent (or the placeholder text)
    a remembered tier beats the answer    -> delegated: a job runs it in the background

The cut-off keeps time in reserve for the next tier down, so the request is answered
within its budget even when a backend hangs. Latency predictions are learned online.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

from rtgate.core.budget import Budget, use_budget
from rtgate.core.errors import Declined, QueueFull
from rtgate.core.latency import LatencyModel, Prior
from rtgate.core.metrics import GateMetrics
from rtgate.core.request import Piece, Request
from rtgate.core.settings import setting
from rtgate.core.trace import Attempt, Trace
from rtgate.gate.inprocess_queue import InProcessQueue
from rtgate.gate.job_runner import run_tier_job
from rtgate.gate.jobs import Job, JobQueue, JobStore, new_job_id
from rtgate.tiers.base import Tier

__all__ = [
    "DoneEvent",
    "FollowupEvent",
    "Gate",
    "GateConfig",
    "GateEvent",
    "GateResult",
    "Scope",
    "TokenEvent",
]

Scope = Literal["first_token", "complete"]
"""What the budget bounds: the first visible piece (streaming) or the whole answer."""


@dataclass(slots=True)
class GateConfig:
    """Policy knobs. Times in milliseconds.

    safety_ms: kept in hand when predicting whether a tier fits.
    delegate: run a better tier in the background when it could not answer in budget
        (a request's own ``delegate`` field overrides this).
    followup_budget_ms: the budget a delegated job gets.
    stream_idle_ms: once streaming, the longest gap allowed between two pieces.
    stream_max_ms: once streaming, the longest the rest of the answer may take. When the
        budget bounds the first piece only, tiers are handed a budget this much longer, so
        a backend does not stop generating at the first-piece deadline.
    hedge: start the next tier too when the current one passes its p90 TTFT.
    max_hedge_rate: at most this share of requests may hedge (a running estimate).
    placeholder: the text of a silent answer.
    probe_interval_ms: re-measure a skipped, non-delegable tier in the background at most
        this often, and at once if it was never measured (0: never).
    inline_ms: tiers predicted faster than this are awaited in place; slower ones in a
        child task that a cut-off abandons without waiting for it to unwind.
    last_resort_factor: before answering silently, try the cheapest skipped tier whose
        p99 is within this factor of what is left (0: never).

    The bounds are declared here, once; the server's ``[gate]`` section is this class plus
    the server's own keys (:class:`rtgate.config.sections.GateSection`).
    """

    safety_ms: float = setting(2.0, ge=0)
    delegate: bool = True
    followup_budget_ms: float = setting(30_000.0, gt=0, le=3_600_000)
    stream_idle_ms: float = setting(5_000.0, gt=0)
    stream_max_ms: float = setting(60_000.0, gt=0)
    hedge: bool = False
    max_hedge_rate: float = setting(0.1, ge=0, le=1)
    placeholder: str = ""
    probe_interval_ms: float = setting(5_000.0, ge=0)
    inline_ms: float = setting(1.0, ge=0)
    last_resort_factor: float = setting(4.0, ge=0)


@dataclass(slots=True)
class GateResult:
    """An answer: its text and pieces, the route that produced it, and the trace."""

    text: str
    pieces: list[Piece]
    route: str
    trace: Trace
    job_id: str | None = None

    @property
    def placeholder(self) -> bool:
        return self.route == "silent"

    @property
    def data(self) -> list[Mapping[str, Any]]:
        return [p.data for p in self.pieces if p.data is not None]

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "route": self.route,
            "job_id": self.job_id,
            "data": [dict(d) for d in self.data],
            "trace": self.trace.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """A piece of the in-budget answer; ``t_ms`` from request start."""

    text: str
    data: Mapping[str, Any] | None
    t_ms: float


@dataclass(frozen=True, slots=True)
class DoneEvent:
    result: GateResult


@dataclass(frozen=True, slots=True)
class FollowupEvent:
    """The delegated deeper answer (``job.status`` says whether it succeeded)."""

    job: Job


GateEvent = TokenEvent | DoneEvent | FollowupEvent


@dataclass(slots=True)
class _Run:
    """State of one request while the gate serves it."""

    request: Request
    budget: Budget
    tier_budget: Budget  # what tiers see: longer than ``budget`` when it bounds the first piece
    scope: Scope
    trace: Trace
    times: list[float] = field(default_factory=list)
    pieces: list[Piece] = field(default_factory=list)
    answered: Tier | None = None
    delegate_to: Tier | None = None


def _as_piece(p: str | Piece) -> Piece:
    return p if isinstance(p, Piece) else Piece(p)


class Gate:
    """Answers each request within its budget from the best tier that fits.

    Use as an async context manager: it owns the background workers of delegated jobs and
    closes the tiers when it exits.
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
    ) -> None:
        self.tiers: list[Tier] = sorted(tiers, key=lambda t: -t.quality)
        names = [t.name for t in self.tiers]
        if len(set(names)) != len(names):
            raise ValueError(f"tier names must be unique: {names}")
        if "silent" in names:
            raise ValueError("'silent' is the gate's own route; name the tier otherwise")
        self.by_name = {t.name: t for t in self.tiers}
        self.config = config or GateConfig()
        self.metrics = metrics or GateMetrics()
        self.queue: JobQueue = queue or InProcessQueue()
        self.jobs = store if store is not None else JobStore()  # an empty store is falsy
        priors = dict(priors or {})
        self.models: dict[str, LatencyModel] = {
            t.name: LatencyModel(priors.get(t.name, getattr(t, "latency_prior", None)))
            for t in self.tiers
        }
        self.warm = False
        self.warmup_status: dict[str, str] = {}
        self._hedges = 0.0  # exponentially weighted share of requests that hedged
        self._background: set[asyncio.Future[Any]] = set()
        self._last_probe: dict[str, float] = {}
        self._job_tasks: dict[str, asyncio.Future[None]] = {}
        self._probing: set[str] = set()
        self._started = False

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
            await self.queue.start(self._run_job)
            self._started = True

    async def aclose(self) -> None:
        await self.queue.aclose()
        for t in list(self._background):
            t.cancel()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        for tier in self.tiers:
            await tier.aclose()
        self._started = False

    async def warmup(
        self, probe: Request | None = None, budget_ms: float = 60_000.0, rounds: int = 2
    ) -> None:
        """Load every tier, then answer ``probe`` ``rounds`` times on each; only the last
        round is recorded (a first inference is slower than the ones that follow). A tier
        that fails is reported in ``warmup_status`` and stays cold; the others still warm."""
        self.warmup_status = {}
        for tier in self.tiers:
            try:
                await tier.warmup()
            except Exception as e:
                self.warmup_status[tier.name] = f"warmup failed: {type(e).__name__}: {e}"
        probe = probe or Request(input="hello")
        for tier in self.tiers:
            if tier.name in self.warmup_status:  # its warmup() failed
                continue
            status = "ok"
            for r in range(rounds):
                budget = Budget(budget_ms)
                t0 = budget.clock()
                first: float | None = None
                try:
                    async with asyncio.timeout_at(budget.deadline):
                        async for _ in tier.stream(probe, budget):
                            if first is None:
                                first = budget.clock()
                except Declined:
                    pass  # a miss is a valid answer to a probe: the tier works
                except TimeoutError:
                    status = f"no answer within {budget_ms:.0f} ms"
                except Exception as e:  # one broken tier must not leave the others cold
                    status = f"{type(e).__name__}: {e}"
                    break
                end = budget.clock()
                if r == rounds - 1:
                    ttft = ((first or end) - t0) * 1000.0
                    self.models[tier.name].observe(ttft, (end - t0) * 1000.0)
            self.warmup_status[tier.name] = status
        # warm: no tier is left cold (each has answered once or has a prior)
        self.warm = not any(m.cold for m in self.models.values())

    # -- decisions -------------------------------------------------------------------------

    def predict(self, tier: Tier, scope: Scope, q: str = "p99") -> float:
        m = self.models[tier.name]
        return m.predict_ttft(q) if scope == "first_token" else m.predict_total(q)

    def choose(self, left_ms: float, scope: Scope = "complete") -> Tier | None:
        """The best tier whose predicted p99 fits in ``left_ms`` (what the gate starts)."""
        room = left_ms - self.config.safety_ms
        for tier in self.tiers:
            if self.predict(tier, scope) <= room:
                return tier
        return None

    def _reserve(self, index: int, room_ms: float, scope: Scope) -> tuple[float, Tier | None]:
        """Time to keep for falling back from ``self.tiers[index]``, and for which tier:
        the next tier down if it still fits after this one's p99, else the cheapest one
        that fits at all (none: the silent answer needs no time)."""
        mine = self.predict(self.tiers[index], scope)
        cheapest: tuple[float, Tier | None] = (0.0, None)
        first = True
        for lower in self.tiers[index + 1 :]:
            p = self.predict(lower, scope)
            if p > room_ms:
                continue
            if first and mine + p <= room_ms:
                return p, lower
            if first or p < cheapest[0]:
                cheapest = (p, lower)
            first = False
        return cheapest

    # -- serving ---------------------------------------------------------------------------

    async def answer(
        self, request: Request, budget_ms: float | Budget, scope: Scope = "complete"
    ) -> GateResult:
        """The whole answer within the budget (by default the budget bounds all of it)."""
        result: GateResult | None = None
        async for ev in self.stream(request, budget_ms, scope=scope):
            if isinstance(ev, DoneEvent):
                result = ev.result
        assert result is not None
        return result

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
        budget = budget_ms if isinstance(budget_ms, Budget) else Budget(budget_ms)
        tier_budget = budget
        if scope == "first_token":
            total = budget.budget_ms + self.config.stream_max_ms
            tier_budget = Budget(total, clock=budget.clock, start=budget.start)
        run = _Run(request, budget, tier_budget, scope, Trace(request.id, budget.budget_ms))
        with use_budget(budget):
            async with contextlib.aclosing(self._serve(run)) as events:
                async for ev in events:
                    yield ev
        result = self._finish(run)
        yield DoneEvent(result)
        if follow and result.job_id is not None:
            job = await self.jobs.wait(result.job_id)
            yield FollowupEvent(job)

    async def wait_job(self, job_id: str) -> Job:
        """The finished job (raises ``JobNotFound`` for an unknown id)."""
        return await self.jobs.wait(job_id)

    async def _serve(self, run: _Run) -> AsyncGenerator[TokenEvent, None]:
        budget, trace, scope = run.budget, run.trace, run.scope
        cfg = self.config
        reserved: Tier | None = None  # the tier a previous cut-off kept time for
        for index, tier in enumerate(self.tiers):
            room = budget.left_ms() - cfg.safety_ms
            predicted = self.predict(tier, scope)
            if tier is reserved and predicted > room > 0:
                # The cut-off before it ran late (timer jitter, a slow cancellation):
                # still give the tier we kept time for what is left, up to the deadline.
                cutoff = budget.deadline - cfg.safety_ms / 1000.0
                async with contextlib.aclosing(
                    self._attempt(run, tier, predicted, cutoff, None)
                ) as events:
                    async for ev in events:
                        yield ev
                if run.answered is not None:
                    return
                continue
            if predicted > room:
                trace.attempts.append(
                    Attempt(tier.name, "skipped", predicted, detail=f"{room:.1f} ms left")
                )
                self.metrics.attempt(tier.name, "skipped")
                if tier.delegable:
                    run.delegate_to = run.delegate_to or tier
                else:
                    self._maybe_probe(tier, run.request)
                continue
            # the next tier needs its p99, its own safety margin, and slack for timer jitter
            reserve_ms, reserved = self._reserve(index, room, scope)
            cutoff = budget.deadline - (reserve_ms + 2 * cfg.safety_ms) / 1000.0
            hedge = self._hedge_partner(index, room, scope)
            async with contextlib.aclosing(
                self._attempt(run, tier, predicted, cutoff, hedge)
            ) as events:
                async for ev in events:
                    yield ev
            if run.answered is not None:
                return
        # Silence is the worst answer: before giving it, try the cheapest tier that was
        # skipped only on its prediction (a stale outlier, a stall) with what is left.
        last = self._last_resort(run, budget.left_ms() - cfg.safety_ms)
        if last is not None:
            cutoff = budget.deadline - cfg.safety_ms / 1000.0
            async with contextlib.aclosing(
                self._attempt(run, last, self.predict(last, scope), cutoff, None)
            ) as events:
                async for ev in events:
                    yield ev
            if run.answered is not None:
                run.trace.attempts[-1].detail = "last resort"
                return
        trace.degraded = trace.degraded or "no tier answered in budget"

    def _last_resort(self, run: _Run, room: float) -> Tier | None:
        """The cheapest skipped tier worth a try with ``room`` ms: not delegable (that one
        runs in the background anyway), not cold, and predicted within
        ``last_resort_factor`` times the room (a stale outlier, not a slow tier)."""
        factor = self.config.last_resort_factor
        if factor <= 0 or room <= self.config.safety_ms:
            return None
        skipped = {a.tier for a in run.trace.attempts if a.outcome == "skipped"}
        tried = {a.tier for a in run.trace.attempts if a.outcome != "skipped"}
        best: Tier | None = None
        for tier in self.tiers:
            if tier.name in skipped and tier.name not in tried and not tier.delegable:
                p = self.predict(tier, run.scope)
                if p == math.inf or p > factor * room:
                    continue
                if best is None or p < self.predict(best, run.scope):
                    best = tier
        return best

    def _hedge_partner(self, index: int, room: float, scope: Scope) -> Tier | None:
        if not self.config.hedge or self._hedges >= self.config.max_hedge_rate:
            return None
        for lower in self.tiers[index + 1 :]:
            if self.predict(lower, scope) <= room:
                return lower
        return None

    async def _attempt(
        self, run: _Run, tier: Tier, predicted: float, cutoff: float, hedge: Tier | None
    ) -> AsyncGenerator[TokenEvent, None]:
        budget, clock = run.budget, run.budget.clock
        t0 = budget.start
        started = clock()
        att = Attempt(tier.name, "declined", predicted, (started - t0) * 1000.0)
        run.trace.attempts.append(att)
        agen = tier.stream(run.request, run.tier_budget)
        first: Piece | None = None
        try:
            if hedge is not None and run.scope == "first_token":
                tier, agen, first, att = await self._first_hedged(
                    run, tier, agen, att, hedge, cutoff
                )
            else:
                first = await self._first(agen, cutoff, predicted)
        except Declined as e:
            att.detail = str(e)
        except StopAsyncIteration:
            att.detail = "empty answer"
        except TimeoutError:
            att.outcome = "cut_off"
            self.models[tier.name].observe_cutoff((clock() - started) * 1000.0)
            if tier.delegable and run.delegate_to is None:
                run.delegate_to = tier
        except Exception as e:  # a failing tier must not fail the request
            att.outcome = "error"
            att.detail = f"{type(e).__name__}: {e}"
        now = clock()
        att.ended_ms = (now - t0) * 1000.0
        if first is None:
            self._discard(agen)
            # a decline is not a latency sample: an instant "no" (a miss, an open circuit,
            # a full admission slot) says nothing about how long an answer takes
            self.metrics.attempt(tier.name, att.outcome)
            return
        att.first_ms = (now - t0) * 1000.0
        if run.scope == "first_token":
            run.answered = tier
            att.outcome = "answered"
            async with contextlib.aclosing(
                self._stream_rest(run, tier, agen, first, started)
            ) as events:
                async for ev in events:
                    yield ev
            att.ended_ms = (clock() - t0) * 1000.0
        else:
            ok = await self._collect_rest(run, tier, agen, first, started, cutoff)
            att.ended_ms = (clock() - t0) * 1000.0
            if not ok:
                att.outcome = "too_slow"
                run.pieces.clear()
                run.times.clear()
                if tier.delegable and run.delegate_to is None:
                    run.delegate_to = tier
            else:
                run.answered = tier
                att.outcome = "answered"
                for p, t in zip(run.pieces, run.times, strict=True):
                    yield TokenEvent(p.text, p.data, t)
        self.metrics.attempt(tier.name, att.outcome)

    async def _first(
        self, agen: AsyncIterator[str | Piece], cutoff: float, predicted: float
    ) -> Piece:
        """The first piece by ``cutoff`` or ``TimeoutError``.

        A tier predicted to answer within ``inline_ms`` is awaited in place (cheapest). A
        slower one is awaited in a child task: at the cut-off the task is cancelled and
        left to unwind in the background, so a backend that is slow to cancel (closing a
        connection, joining a thread) never delays the fallback.
        """
        if predicted <= self.config.inline_ms:
            async with asyncio.timeout_at(cutoff):
                return _as_piece(await anext(agen))
        task = asyncio.ensure_future(anext(agen))
        loop = asyncio.get_running_loop()
        try:
            done, _ = await asyncio.wait({task}, timeout=max(0.0, cutoff - loop.time()))
        except BaseException:  # the request itself was cancelled: so is the tier
            self._abandon(task, agen)
            raise
        if not done:
            self._abandon(task, agen)
            raise TimeoutError
        return _as_piece(task.result())

    async def _first_hedged(
        self,
        run: _Run,
        tier: Tier,
        agen: AsyncIterator[str | Piece],
        att: Attempt,
        partner: Tier,
        cutoff: float,
    ) -> tuple[Tier, AsyncIterator[str | Piece], Piece, Attempt]:
        """Wait for ``tier``'s first piece; past its p90, race ``partner`` against it."""
        clock = run.budget.clock
        hedge_at = clock() + self.models[tier.name].predict_ttft("p90") / 1000.0
        main = asyncio.ensure_future(anext(agen))
        try:
            done, _ = await asyncio.wait({main}, timeout=max(0.0, min(hedge_at, cutoff) - clock()))
        except BaseException:
            self._abandon(main, agen)
            raise
        self._hedges *= 0.99
        if main in done or hedge_at >= cutoff:
            if main not in done:
                self._abandon(main, agen)
                raise TimeoutError
            return tier, agen, _as_piece(main.result()), att
        self._hedges += 0.01
        run.trace.hedged = True
        t0 = run.budget.start
        att2 = Attempt(
            partner.name,
            "declined",
            self.predict(partner, run.scope),
            (clock() - t0) * 1000.0,
            detail="hedge",
        )
        run.trace.attempts.append(att2)
        agen2 = partner.stream(run.request, run.tier_budget)
        twin = asyncio.ensure_future(anext(agen2))
        gens = {main: agen, twin: agen2}
        pending = {main, twin}
        try:
            while pending:
                done, pending = await asyncio.wait(
                    pending, timeout=max(0.0, cutoff - clock()), return_when=asyncio.FIRST_COMPLETED
                )
                if not done:
                    break
                for fut in done:
                    if fut.exception() is None:
                        for loser in pending:
                            self._abandon(loser, gens[loser])
                        pending = set()
                        if fut is main:
                            att2.outcome, att2.ended_ms = "hedge_lost", (clock() - t0) * 1000.0
                            self._discard(agen2)
                            return tier, agen, _as_piece(fut.result()), att
                        att.outcome, att.ended_ms = "hedge_lost", (clock() - t0) * 1000.0
                        self._discard(agen)
                        return partner, agen2, _as_piece(fut.result()), att2
        except BaseException:
            for fut in pending:
                self._abandon(fut, gens[fut])
            raise
        for fut in pending:
            self._abandon(fut, gens[fut])
        self._discard(agen2)
        if not pending and main.done() and twin.done():
            # both failed before the cut-off: report the primary's failure
            att2.outcome, att2.ended_ms = "error", (clock() - t0) * 1000.0
            exc = main.exception()
            assert exc is not None
            raise exc
        att2.outcome = "cut_off"
        raise TimeoutError

    async def _stream_rest(
        self, run: _Run, tier: Tier, agen: AsyncIterator[str | Piece], first: Piece, started: float
    ) -> AsyncGenerator[TokenEvent, None]:
        clock, t0 = run.budget.clock, run.budget.start
        idle = self.config.stream_idle_ms / 1000.0
        end_by = run.tier_budget.deadline
        piece: Piece | None = first
        try:
            while piece is not None:
                t_ms = (clock() - t0) * 1000.0
                run.pieces.append(piece)
                run.times.append(t_ms)
                yield TokenEvent(piece.text, piece.data, t_ms)
                try:
                    async with asyncio.timeout_at(min(clock() + idle, end_by)):
                        piece = _as_piece(await anext(agen))
                except StopAsyncIteration:
                    piece = None
        except TimeoutError:
            late = clock() >= end_by
            run.trace.degraded = f"{tier.name} {'ran out of stream time' if late else 'stalled'}"
        except Exception as e:
            run.trace.degraded = f"{tier.name} failed mid-stream: {type(e).__name__}"
        finally:
            self._discard(agen)
        self.models[tier.name].observe(
            run.times[0] - (started - t0) * 1000.0, (clock() - started) * 1000.0
        )

    async def _collect_rest(
        self,
        run: _Run,
        tier: Tier,
        agen: AsyncIterator[str | Piece],
        first: Piece,
        started: float,
        cutoff: float,
    ) -> bool:
        clock, t0 = run.budget.clock, run.budget.start
        run.pieces.append(first)
        run.times.append((clock() - t0) * 1000.0)
        try:
            async with asyncio.timeout_at(cutoff):
                async for p in agen:
                    run.pieces.append(_as_piece(p))
                    run.times.append((clock() - t0) * 1000.0)
        except TimeoutError:
            self.models[tier.name].observe_cutoff((clock() - started) * 1000.0)
            self._discard(agen)
            return False
        except Exception as e:
            run.trace.degraded = f"{tier.name} failed mid-answer: {type(e).__name__}"
            return False
        self.models[tier.name].observe(
            run.times[0] - (started - t0) * 1000.0, (clock() - started) * 1000.0
        )
        return True

    def _finish(self, run: _Run) -> GateResult:
        trace, budget, request = run.trace, run.budget, run.request
        trace.elapsed_ms = budget.elapsed_ms()
        if run.answered is not None:
            trace.route = run.answered.name
            trace.ttft_ms = run.times[0] if run.times else None
            text = "".join(p.text for p in run.pieces)
        else:
            trace.route = "silent"
            text = str(request.meta.get("placeholder", self.config.placeholder))
            run.pieces = [Piece(text)] if text else []
        skipped = [a.tier for a in trace.attempts if a.outcome != "answered"]
        if run.answered is not None and skipped and trace.degraded is None:
            trace.degraded = "fell back past " + ", ".join(dict.fromkeys(skipped))
        self._maybe_delegate(run)
        end_ms = trace.elapsed_ms
        slo_ms = trace.ttft_ms if run.scope == "first_token" and trace.ttft_ms else end_ms
        self.metrics.record(
            trace.route,
            ttft_ms=trace.ttft_ms,
            e2e_ms=end_ms,
            piece_times_ms=run.times,
            budget_ms=budget.budget_ms,
            slo_ms=slo_ms,
        )
        return GateResult(text, run.pieces, trace.route, trace, trace.job_id)

    # -- delegation ------------------------------------------------------------------------

    def _maybe_delegate(self, run: _Run) -> None:
        target = run.delegate_to
        want = run.request.delegate if run.request.delegate is not None else self.config.delegate
        if not want or target is None:
            return
        if run.answered is not None and run.answered.quality >= target.quality:
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

    async def _run_job(self, job: Job, store: bool = True) -> None:
        """Run a delegated job to completion in the background (the queue's runner)."""
        if job.status == "cancelled":  # cancelled while it waited in the queue
            return
        tier = self.by_name[job.tier]
        self.metrics.queue_depth.set(self.queue.depth)
        track = (lambda task: self._job_tasks.__setitem__(job.id, task)) if store else None
        try:
            await run_tier_job(tier, job, self.models[tier.name], track)
        finally:
            if store:
                self._job_tasks.pop(job.id, None)
                self.metrics.delegated(tier.name, job.status)
                self.jobs.finish(job)

    def cancel_job(self, job_id: str) -> bool:
        """Stop a delegated job (queued or running). False if it had already finished."""
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

    def _maybe_probe(self, tier: Tier, request: Request) -> None:
        """A skipped tier is measured again off the request path, at most once per
        ``probe_interval_ms`` (at once if it was never measured: its prior may be too
        pessimistic), one probe at a time, so a tier that was slow once is not skipped
        forever."""
        interval = self.config.probe_interval_ms / 1000.0
        if not interval or tier.name in self._probing:
            return
        now = asyncio.get_running_loop().time()
        last = self._last_probe.get(tier.name)
        never_measured = self.models[tier.name].ttft.count == 0
        if last is not None and now - last < interval and not never_measured:
            return
        self._last_probe[tier.name] = now
        self._probing.add(tier.name)
        task = asyncio.ensure_future(self._probe(tier, request))
        self._background.add(task)
        task.add_done_callback(self._reap)

    async def _probe(self, tier: Tier, request: Request) -> None:
        job = Job(new_job_id(), tier.name, request, self.config.followup_budget_ms)
        try:
            await self._run_job(job, store=False)
        finally:
            self._probing.discard(tier.name)

    # -- housekeeping ----------------------------------------------------------------------

    def _discard(self, agen: AsyncIterator[Any]) -> None:
        """Close an abandoned tier stream in the background: never on the request's path."""
        aclose = getattr(agen, "aclose", None)
        if aclose is None or getattr(agen, "ag_running", False):
            return  # a task still runs it: _abandon closes it when that task is done
        task = asyncio.ensure_future(aclose())
        self._background.add(task)
        task.add_done_callback(self._reap)

    def _cancel(self, fut: asyncio.Future[Any]) -> None:
        fut.cancel()
        self._background.add(fut)
        fut.add_done_callback(self._reap)

    def _abandon(self, task: asyncio.Future[Any], agen: AsyncIterator[Any]) -> None:
        """Cancel a task that is waiting on ``agen`` and close ``agen`` once it has
        unwound; neither is awaited here."""
        task.add_done_callback(lambda _: self._discard(agen))
        self._cancel(task)

    def _reap(self, fut: asyncio.Future[Any]) -> None:
        self._background.discard(fut)
        if not fut.cancelled():
            with contextlib.suppress(BaseException):
                fut.exception()

    def snapshot(self) -> dict[str, Any]:
        """Metrics, learned latencies and queue state as plain data."""
        return {
            "warm": self.warm,
            "warmup": dict(self.warmup_status),
            "tiers": {
                t.name: {
                    "quality": t.quality,
                    "delegable": t.delegable,
                    **self.models[t.name].snapshot(),
                }
                for t in self.tiers
            },
            "queue_depth": self.queue.depth,
            "metrics": self.metrics.snapshot(),
        }
