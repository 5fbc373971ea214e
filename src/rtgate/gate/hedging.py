"""Hedging the first piece: when a tier passes its p90 time to first piece, start the next
tier down too and take whichever answers first.

A slow first piece is often a tail event of a tier that usually answers in time; racing
the next tier then costs one extra call on a few requests (the rate is capped by
``GateConfig.max_hedge_rate``, see :meth:`~rtgate.gate.choice.Choice.hedge_partner`) and
saves the cut-off. The loser is abandoned to the gate's background owner, never awaited.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from rtgate.core.background import Background
from rtgate.core.request import Piece
from rtgate.core.trace import Attempt
from rtgate.gate.choice import Choice
from rtgate.gate.types import Run, as_piece
from rtgate.tiers.base import Tier

__all__ = ["first_hedged"]

Stream = AsyncIterator[str | Piece]


@dataclass(slots=True)
class _Entrant:
    """A tier in the race: its stream, the task awaiting its first piece, its attempt."""

    tier: Tier
    stream: Stream
    task: asyncio.Future[Any]
    att: Attempt


async def first_hedged(
    run: Run,
    tier: Tier,
    agen: Stream,
    att: Attempt,
    partner: Tier,
    cutoff: float,
    choice: Choice,
    background: Background,
) -> tuple[Tier, Stream, Piece, Attempt]:
    """Wait for ``tier``'s first piece; past its p90, race ``partner`` against it. Returns
    the winner's tier, stream, first piece and attempt; raises ``TimeoutError`` at
    ``cutoff``, or the primary's error when both failed."""
    clock = run.budget.clock
    hedge_at = clock() + choice.lineup.models[tier.name].predict_ttft("p90") / 1000.0
    main = asyncio.ensure_future(anext(agen))
    try:
        done, _ = await asyncio.wait({main}, timeout=max(0.0, min(hedge_at, cutoff) - clock()))
    except BaseException:  # the request itself was cancelled: so is the tier
        background.abandon(main, agen)
        raise
    hedged = main not in done and hedge_at < cutoff
    choice.count_hedge(hedged)
    if not hedged:
        if main not in done:
            background.abandon(main, agen)
            raise TimeoutError
        return tier, agen, as_piece(main.result()), att
    run.trace.hedged = True
    started_ms = (clock() - run.budget.start) * 1000.0
    predicted = choice.predict(partner, run.scope)
    att2 = Attempt(partner.name, "declined", predicted, started_ms, detail="hedge")
    run.trace.attempts.append(att2)
    agen2 = partner.stream(run.request, run.tier_budget)
    twin = asyncio.ensure_future(anext(agen2))
    primary, second = _Entrant(tier, agen, main, att), _Entrant(partner, agen2, twin, att2)
    return await _race(run, primary, second, cutoff, background)


async def _race(
    run: Run, primary: _Entrant, second: _Entrant, cutoff: float, background: Background
) -> tuple[Tier, Stream, Piece, Attempt]:
    """The first of the two to give a piece by ``cutoff`` wins; the other is abandoned."""
    clock, t0 = run.budget.clock, run.budget.start
    entrants = {primary.task: primary, second.task: second}
    pending = set(entrants)
    try:
        while pending:
            done, pending = await asyncio.wait(
                pending, timeout=max(0.0, cutoff - clock()), return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                break
            for fut in done:
                if fut.exception() is None:
                    for loser_task in pending:
                        background.abandon(loser_task, entrants[loser_task].stream)
                    pending = set()
                    won = entrants[fut]
                    lost = second if won is primary else primary
                    lost.att.outcome, lost.att.ended_ms = "hedge_lost", (clock() - t0) * 1000.0
                    background.close_later(lost.stream)
                    return won.tier, won.stream, as_piece(fut.result()), won.att
    except BaseException:
        for fut in pending:
            background.abandon(fut, entrants[fut].stream)
        raise
    for fut in pending:
        background.abandon(fut, entrants[fut].stream)
    background.close_later(second.stream)
    if not pending and primary.task.done() and second.task.done():
        # both failed before the cut-off: report the primary's failure
        second.att.outcome, second.att.ended_ms = "error", (clock() - t0) * 1000.0
        exc = primary.task.exception()
        assert exc is not None
        raise exc
    second.att.outcome = "cut_off"
    raise TimeoutError
