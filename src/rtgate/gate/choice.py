"""Choosing a tier: from learned latency alone, before anything runs.

Everything here is a pure decision over the :class:`~rtgate.gate.types.Lineup` (the tiers,
best first, and their latency models), made while one request walks down the tiers: what
a tier is predicted to take, how much time to keep in reserve for falling back, which
skipped tier is worth a last try before a silent answer, and which tier to race when
hedging. No I/O and no awaiting, so it is cheap and easy to test alone. (``Gate.choose``,
the same prediction asked from outside, is on the gate itself: it is the hot path.)
"""

from __future__ import annotations

import math

from rtgate.gate.types import GateConfig, Lineup, Run, Scope
from rtgate.tiers.base import Tier

__all__ = ["Choice"]


class Choice:
    """The gate's decisions over ``lineup`` under ``config``.

    ``hedge_share`` is a running estimate of the share of requests that hedged, which
    :meth:`hedge_partner` keeps under ``config.max_hedge_rate``.
    """

    def __init__(self, lineup: Lineup, config: GateConfig) -> None:
        self.lineup = lineup
        self.config = config
        self.hedge_share = 0.0

    def predict(self, tier: Tier, scope: Scope, q: str = "p99") -> float:
        m = self.lineup.models[tier.name]
        return m.predict_ttft(q) if scope == "first_token" else m.predict_total(q)

    def reserve(self, index: int, room_ms: float, scope: Scope) -> tuple[float, Tier | None]:
        """Time to keep for falling back from ``tiers[index]``, and for which tier: the
        next tier down if it still fits after this one's p99, else the cheapest one that
        fits at all (none: the silent answer needs no time)."""
        tiers = self.lineup.tiers
        mine = self.predict(tiers[index], scope)
        cheapest: tuple[float, Tier | None] = (0.0, None)
        first = True
        for lower in tiers[index + 1 :]:
            p = self.predict(lower, scope)
            if p > room_ms:
                continue
            if first and mine + p <= room_ms:
                return p, lower
            if first or p < cheapest[0]:
                cheapest = (p, lower)
            first = False
        return cheapest

    def last_resort(self, run: Run, room: float) -> Tier | None:
        """The cheapest skipped tier worth a try with ``room`` ms: not delegable (that one
        runs in the background anyway), not cold, and predicted within
        ``last_resort_factor`` times the room (a stale outlier, not a slow tier)."""
        factor = self.config.last_resort_factor
        if factor <= 0 or room <= self.config.safety_ms:
            return None
        skipped = {a.tier for a in run.trace.attempts if a.outcome == "skipped"}
        tried = {a.tier for a in run.trace.attempts if a.outcome != "skipped"}
        best: Tier | None = None
        for tier in self.lineup.tiers:
            if tier.name in skipped and tier.name not in tried and not tier.delegable:
                p = self.predict(tier, run.scope)
                if p == math.inf or p > factor * room:
                    continue
                if best is None or p < self.predict(best, run.scope):
                    best = tier
        return best

    def hedge_partner(self, index: int, room: float, scope: Scope) -> Tier | None:
        """The tier to race against ``tiers[index]`` if it runs past its p90: the next one
        down that fits, while hedging is on and under its rate."""
        if not self.config.hedge or self.hedge_share >= self.config.max_hedge_rate:
            return None
        for lower in self.lineup.tiers[index + 1 :]:
            if self.predict(lower, scope) <= room:
                return lower
        return None

    def count_hedge(self, hedged: bool) -> None:
        """One request reached the hedge point: fold whether it hedged into the rate."""
        self.hedge_share = self.hedge_share * 0.99 + (0.01 if hedged else 0.0)
