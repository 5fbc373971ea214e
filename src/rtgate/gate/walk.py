"""One request's walk down the tiers, best first, and the result it ends in.

::

    for each tier:
        predicted p99 > what is left?     -> skipped   (a delegable tier is remembered)
        first piece by its cut-off?       -> answered  (stream the rest)
        declined / cut off / error        -> next tier (a cut-off delegable tier is remembered)
    nothing answered                      -> a last resort, then silent (or the placeholder)
    a remembered tier beats the answer    -> delegated: a job runs it in the background
    a judge does not trust a fast answer  -> delegated too (the answer marked partial, or
                                             the placeholder instead, by policy)

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
from rtgate.tiers.answerability import Judge, Verdict
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
        judge: Judge | None = None,
    ) -> None:
        self.choice = choice
        self.executor = executor
        self.delegation = delegation
        self.metrics = metrics
        self.config = config
        self.judge = judge

    async def serve(self, run: Run) -> AsyncGenerator[TokenEvent, None]:
        """Walk the tiers for ``run``, yielding the answer's pieces as they come."""
        budget, scope, safety = run.budget, run.scope, self.config.safety_ms
        choice, attempt = self.choice, self.executor.attempt
        reserved: Tier | None = None  # the tier a previous cut-off kept time for
        judging = self.judge is not None  # until the first answer has been judged
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
            elif tier.instant:  # a lookup: called in place, nothing to cut off or hedge
                event = self.executor.instant(run, tier, predicted)
                if event is None:
                    continue
                if judging:
                    judging = False
                    if self._distrusted(run):
                        return  # the placeholder policy: nothing of this answer is shown
                yield event
                return
            else:
                # the next tier needs its p99, its own safety margin and slack for jitter
                reserve_ms, reserved = choice.reserve(index, room, scope)
                cutoff = budget.deadline - (reserve_ms + 2 * safety) / 1000.0
                hedge = choice.hedge_partner(index, room, scope)
            async with contextlib.aclosing(attempt(run, tier, predicted, cutoff, hedge)) as events:
                async for ev in events:
                    if judging and run.answered is not None:
                        judging = False
                        if self._distrusted(run):
                            break  # the placeholder policy: nothing of this answer is shown
                    yield ev
            if run.answered is not None or run.abstained:
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

    def _distrusted(self, run: Run) -> bool:
        """Judge the fast answer that just gave its first piece (once per request). True
        when it is not trusted and the policy replaces it with the placeholder: the run
        then holds no answer, and the walk ends."""
        tier, judge = run.answered, self.judge
        if judge is None or tier is None or tier.delegable or not run.pieces:
            return False
        if run.request.delegate is False:
            return False  # the caller wants no big model: there is nothing to decide
        first = run.pieces[0]
        if first.data is not None and first.data.get("deep"):
            return False  # the big model's own answer, kept by a cache: nothing to judge
        verdict = judge.judge(run.request, first)
        if self.config.abstain_below > 0:
            verdict = Verdict(
                verdict.p_right, self.config.abstain_below, verdict.reasons, verdict.vetoed
            )
        run.verdict = verdict
        trace = run.trace
        trace.confidence = verdict.p_right
        if verdict.answerable:
            return False
        trace.abstained = f"{tier.name} not trusted alone ({verdict.why()})"
        self.metrics.attempt(tier.name, "abstained")
        if self.config.on_abstain != "placeholder":
            trace.partial = True
            return False
        trace.attempts[-1].detail = "not trusted alone"
        run.answered = None
        run.pieces.clear()
        run.times.clear()
        return True

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
        if run.abstained and trace.degraded is None:
            trace.degraded = trace.abstained
        elif run.answered is not None and skipped and trace.degraded is None:
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
