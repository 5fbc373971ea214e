"""One request's walk down the tiers, best first, and the result it ends in.

::

    for each tier:
        predicted p99 > what is left?     -> skipped   (a delegable tier is remembered)
        first piece by its cut-off?       -> answered  (stream the rest)
        declined / cut off / error        -> next tier (a cut-off delegable tier is remembered)
    nothing answered                      -> a last resort, then silent (or the placeholder)
    a remembered tier beats the answer    -> delegated: a job runs it in the background

The cut-off keeps time in reserve for the next tier down, so the request is answered
within its budget even when a backend hangs. This module is the policy of that walk; the
decisions are :mod:`~rtgate.gate.choice`'s, running a tier is
:mod:`~rtgate.gate.executor`'s and the jobs are :mod:`~rtgate.gate.delegation`'s.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator

from rtgate.core.metrics import GateMetrics
from rtgate.core.request import Piece
from rtgate.core.trace import Attempt
from rtgate.gate.choice import Choice
from rtgate.gate.delegation import Delegation
from rtgate.gate.executor import Executor
from rtgate.gate.types import GateConfig, GateResult, Run, TokenEvent
from rtgate.tiers.base import Tier

__all__ = ["Walk"]


class Walk:
    """Serves one :class:`~rtgate.gate.types.Run` at a time (it keeps no state of its own
    between requests, so any number run at once)."""

    def __init__(
        self,
        choice: Choice,
        executor: Executor,
        delegation: Delegation,
        metrics: GateMetrics,
        config: GateConfig,
    ) -> None:
        self.choice = choice
        self.executor = executor
        self.delegation = delegation
        self.metrics = metrics
        self.config = config

    async def serve(self, run: Run) -> AsyncGenerator[TokenEvent, None]:
        """Walk the tiers for ``run``, yielding the answer's pieces as they come."""
        budget, scope, safety = run.budget, run.scope, self.config.safety_ms
        choice, attempt = self.choice, self.executor.attempt
        reserved: Tier | None = None  # the tier a previous cut-off kept time for
        for index, tier in enumerate(choice.lineup.tiers):
            room = budget.left_ms() - safety
            predicted = choice.predict(tier, scope)
            if tier is reserved and predicted > room > 0:
                # The cut-off before it ran late (timer jitter, a slow cancellation):
                # still give the tier we kept time for what is left, up to the deadline.
                cutoff = budget.deadline - safety / 1000.0
                hedge = None
            elif predicted > room:
                self._skip(run, tier, predicted, room)
                continue
            else:
                # the next tier needs its p99, its own safety margin and slack for jitter
                reserve_ms, reserved = choice.reserve(index, room, scope)
                cutoff = budget.deadline - (reserve_ms + 2 * safety) / 1000.0
                hedge = choice.hedge_partner(index, room, scope)
            async with contextlib.aclosing(attempt(run, tier, predicted, cutoff, hedge)) as events:
                async for ev in events:
                    yield ev
            if run.answered is not None:
                return
        # Silence is the worst answer: before giving it, try the cheapest tier that was
        # skipped only on its prediction (a stale outlier, a stall) with what is left.
        last = choice.last_resort(run, budget.left_ms() - safety)
        if last is not None:
            cutoff = budget.deadline - safety / 1000.0
            predicted = choice.predict(last, scope)
            async with contextlib.aclosing(attempt(run, last, predicted, cutoff, None)) as events:
                async for ev in events:
                    yield ev
            if run.answered is not None:
                run.trace.attempts[-1].detail = "last resort"
                return
        run.trace.degraded = run.trace.degraded or "no tier answered in budget"

    def _skip(self, run: Run, tier: Tier, predicted: float, room: float) -> None:
        """``tier`` cannot fit: remember it for delegation, or have it probed."""
        run.trace.attempts.append(
            Attempt(tier.name, "skipped", predicted, detail=f"{room:.1f} ms left")
        )
        self.metrics.attempt(tier.name, "skipped")
        if tier.delegable:
            run.remember_delegable(tier)
        else:
            self.delegation.maybe_probe(tier, run.request)

    def finish(self, run: Run) -> GateResult:
        """The result of ``run``: the answer or the silent one; delegate if worth it,
        record the metrics."""
        trace, budget = run.trace, run.budget
        trace.elapsed_ms = budget.elapsed_ms()
        if run.answered is not None:
            trace.route = run.answered.name
            trace.ttft_ms = run.times[0] if run.times else None
            text = "".join(p.text for p in run.pieces)
        else:
            trace.route = "silent"
            text = str(run.request.meta.get("placeholder", self.config.placeholder))
            run.pieces = [Piece(text)] if text else []
        skipped = [a.tier for a in trace.attempts if a.outcome != "answered"]
        if run.answered is not None and skipped and trace.degraded is None:
            trace.degraded = "fell back past " + ", ".join(dict.fromkeys(skipped))
        self.delegation.delegate(run)
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
