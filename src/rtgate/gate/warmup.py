"""Warm-up: load every tier, then time a probe request on each, before traffic arrives.

Until a tier has answered once (or has a prior) the gate predicts +inf for it and skips
it; warm-up gives each tier its first real samples. Only the last of the rounds is
recorded, since a first inference is slower than the ones that follow. A tier that fails
is reported and stays cold; the others still warm.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from rtgate.core.budget import Budget
from rtgate.core.errors import Declined
from rtgate.core.latency import LatencyModel
from rtgate.core.request import Request
from rtgate.tiers.base import Tier

__all__ = ["warm_up"]


async def warm_up(
    tiers: Sequence[Tier],
    models: Mapping[str, LatencyModel],
    probe: Request,
    budget_ms: float,
    rounds: int,
    status: dict[str, str],
) -> None:
    """Load each tier, then answer ``probe`` ``rounds`` times on each, teaching
    ``models`` the last round. Fills ``status`` as it goes, per tier: ``"ok"`` or what
    went wrong (so it can be read while warm-up runs)."""
    for tier in tiers:
        try:
            await tier.warmup()
        except Exception as e:
            status[tier.name] = f"warmup failed: {type(e).__name__}: {e}"
    for tier in tiers:
        if tier.name not in status:  # its warmup() worked
            status[tier.name] = await _exercise(tier, models[tier.name], probe, budget_ms, rounds)


async def _exercise(
    tier: Tier, model: LatencyModel, probe: Request, budget_ms: float, rounds: int
) -> str:
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
            return f"{type(e).__name__}: {e}"
        end = budget.clock()
        if r == rounds - 1:
            model.observe(((first or end) - t0) * 1000.0, (end - t0) * 1000.0)
    return status
