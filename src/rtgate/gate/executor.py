"""Running one tier for one request: its first piece by a cut-off, then the rest.

The cut-off is what keeps the budget: a tier that has not given its first piece by then
is abandoned (to the background owner, never awaited on the request's path) and the gate
falls back. A tier predicted to answer within ``inline_ms`` is awaited in place, which is
cheapest; a slower one in a child task, so a backend that is slow to cancel (closing a
connection, joining a thread) never delays the fallback. Past the first piece, the rest
is streamed (the budget bounds the first piece) or collected by the cut-off (it bounds
the whole answer). Each attempt lands in the trace, the metrics and the latency model.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator

from rtgate.core.background import Background
from rtgate.core.errors import Declined, NotYet
from rtgate.core.metrics import GateMetrics
from rtgate.core.request import Piece
from rtgate.core.trace import Attempt, error_detail
from rtgate.gate.choice import Choice
from rtgate.gate.hedging import first_hedged
from rtgate.gate.types import GateConfig, Run, TokenEvent, as_piece
from rtgate.tiers.base import Tier

__all__ = ["Executor"]

Stream = AsyncIterator[str | Piece]


class Executor:
    """Runs attempts for the gate; ``background`` owns whatever an attempt abandons."""

    def __init__(
        self, choice: Choice, config: GateConfig, metrics: GateMetrics, background: Background
    ) -> None:
        self.choice = choice
        self.config = config
        self.metrics = metrics
        self.background = background

    async def attempt(
        self, run: Run, tier: Tier, predicted: float, cutoff: float, hedge: Tier | None
    ) -> AsyncGenerator[TokenEvent, None]:
        """Try ``tier`` (racing ``hedge`` past its p90, when given) with ``cutoff`` as the
        loop time its first piece must come by. Yields the answer's pieces and sets
        ``run.answered``; yields nothing if the tier declined, failed or was too late."""
        if tier.instant and hedge is None:
            event = self.instant(run, tier, predicted)
            if event is not None:
                yield event
            return
        clock, t0 = run.budget.clock, run.budget.start
        started = clock()
        att = Attempt(tier.name, "declined", predicted, (started - t0) * 1000.0)
        run.trace.attempts.append(att)
        agen: Stream = tier.stream(run.request, run.tier_budget)
        first: Piece | None = None
        try:
            if hedge is not None and run.scope == "first_token":
                tier, agen, first, att = await first_hedged(
                    run, tier, agen, att, hedge, cutoff, self.choice, self.background
                )
            else:
                first = await self._first(agen, cutoff, predicted)
        except Declined as e:
            att.detail = str(e)
            run.not_yet = run.not_yet or isinstance(e, NotYet)
        except StopAsyncIteration:
            att.detail = "empty answer"
        except TimeoutError:
            att.outcome = "cut_off"
            self.choice.lineup.models[tier.name].observe_cutoff((clock() - started) * 1000.0)
            run.remember_delegable(tier)
        except Exception as e:  # a failing tier must not fail the request
            att.outcome = "error"
            att.detail = error_detail(e)
        now = clock()
        att.ended_ms = (now - t0) * 1000.0
        if first is None:
            self.background.close_later(agen)
            # a decline is not a latency sample: an instant "no" (a miss, an open circuit,
            # a full admission slot) says nothing about how long an answer takes
            self.metrics.attempt(tier.name, att.outcome)
            return
        att.first_ms = (now - t0) * 1000.0
        if run.scope == "first_token":
            run.answered = tier
            att.outcome = "answered"
            rest = self._stream_rest(run, tier, agen, first, started)
            async with contextlib.aclosing(rest) as events:
                async for ev in events:
                    yield ev
            att.ended_ms = (clock() - t0) * 1000.0
        else:
            ok = await self._collect_rest(run, tier, agen, first, started, cutoff, att)
            att.ended_ms = (clock() - t0) * 1000.0
            if ok:
                for p, t in zip(run.pieces, run.times, strict=True):
                    yield TokenEvent(p.text, p.data, t)
        self.metrics.attempt(tier.name, att.outcome)

    def instant(self, run: Run, tier: Tier, predicted: float) -> TokenEvent | None:
        """An instant tier's answer (:attr:`Tier.instant`): one call, no task, timer or
        generator; ``None`` when it declined or failed (the trace says which)."""
        clock, t0 = run.budget.clock, run.budget.start
        started = clock()
        att = Attempt(tier.name, "declined", predicted, (started - t0) * 1000.0)
        run.trace.attempts.append(att)
        try:
            piece = tier.answer_now(run.request)
        except Declined as e:
            att.detail = str(e)
            run.not_yet = run.not_yet or isinstance(e, NotYet)
            att.ended_ms = att.started_ms
            self.metrics.attempt(tier.name, "declined")
            return None
        except Exception as e:  # a failing tier must not fail the request
            att.outcome, att.detail = "error", error_detail(e)
            att.ended_ms = att.started_ms
            self.metrics.attempt(tier.name, "error")
            return None
        now = clock()
        t_ms = (now - t0) * 1000.0
        att.first_ms = att.ended_ms = t_ms
        att.outcome = "answered"
        run.answered = tier
        run.pieces.append(piece)
        run.times.append(t_ms)
        took = (now - started) * 1000.0
        self.choice.lineup.models[tier.name].observe(took, took)
        self.metrics.attempt(tier.name, "answered")
        return TokenEvent(piece.text, piece.data, t_ms)

    async def _first(self, agen: Stream, cutoff: float, predicted: float) -> Piece:
        """The first piece by ``cutoff`` or ``TimeoutError``: in place for a tier
        predicted within ``inline_ms``, else in a child task a cut-off abandons."""
        if predicted <= self.config.inline_ms:
            async with asyncio.timeout_at(cutoff):
                return as_piece(await anext(agen))
        task = asyncio.ensure_future(anext(agen))
        loop = asyncio.get_running_loop()
        try:
            done, _ = await asyncio.wait({task}, timeout=max(0.0, cutoff - loop.time()))
        except BaseException:  # the request itself was cancelled: so is the tier
            self.background.abandon(task, agen)
            raise
        if not done:
            self.background.abandon(task, agen)
            raise TimeoutError
        return as_piece(task.result())

    async def _stream_rest(
        self, run: Run, tier: Tier, agen: Stream, first: Piece, started: float
    ) -> AsyncGenerator[TokenEvent, None]:
        """Pass on the pieces after ``first`` as they come, while each follows the last
        within ``stream_idle_ms`` and all within the tiers' budget; a stall or a failure
        ends the answer where it is (the trace says it was degraded)."""
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
                        piece = as_piece(await anext(agen))
                except StopAsyncIteration:
                    piece = None
        except TimeoutError:
            late = clock() >= end_by
            run.trace.degraded = f"{tier.name} {'ran out of stream time' if late else 'stalled'}"
        except Exception as e:
            run.trace.degraded = f"{tier.name} failed mid-stream: {type(e).__name__}"
        finally:
            self.background.close_later(agen)
        self.choice.lineup.models[tier.name].observe(
            run.times[0] - (started - t0) * 1000.0, (clock() - started) * 1000.0
        )

    async def _collect_rest(
        self,
        run: Run,
        tier: Tier,
        agen: Stream,
        first: Piece,
        started: float,
        cutoff: float,
        att: Attempt,
    ) -> bool:
        """Collect the whole answer by ``cutoff`` into ``run``: True (answered) or False
        (too slow or failed: ``run`` is emptied for the next tier)."""
        clock, t0 = run.budget.clock, run.budget.start
        model = self.choice.lineup.models[tier.name]
        run.pieces.append(first)
        run.times.append((clock() - t0) * 1000.0)
        ok = False
        try:
            async with asyncio.timeout_at(cutoff):
                async for p in agen:
                    run.pieces.append(as_piece(p))
                    run.times.append((clock() - t0) * 1000.0)
            ok = True
        except TimeoutError:
            model.observe_cutoff((clock() - started) * 1000.0)
            self.background.close_later(agen)
        except Exception as e:
            run.trace.degraded = f"{tier.name} failed mid-answer: {type(e).__name__}"
        if ok:
            model.observe(run.times[0] - (started - t0) * 1000.0, (clock() - started) * 1000.0)
            run.answered = tier
            att.outcome = "answered"
        else:
            att.outcome = "too_slow"
            run.pieces.clear()
            run.times.clear()
            run.remember_delegable(tier)
        return ok
