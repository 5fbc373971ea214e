"""Admission control: a concurrency cap per tier, and load shedding past it.

Policy when full: **shed the newcomer at once** — :class:`AdmissionTier` raises
``Declined("… at capacity")`` before doing any work, so the gate moves on to a cheaper
tier (a template, or the placeholder) within microseconds instead of queueing behind
requests that will miss their budgets anyway. There is no waiting line at all: memory
under overload is bounded by ``capacity`` streams per limiter.

Several tiers that share one backend (the local tier and the emulated cloud tier share one
llama.cpp model) share one :class:`ConcurrencyLimiter`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from rtgate.core.budget import Budget
from rtgate.core.errors import Declined
from rtgate.core.request import Piece, Request
from rtgate.resilience.wrap import TierWrapper, aclose_quietly
from rtgate.tiers.base import Tier

__all__ = ["AdmissionTier", "ConcurrencyLimiter"]


class ConcurrencyLimiter:
    """At most ``capacity`` holders at once; ``try_acquire`` never waits."""

    def __init__(self, capacity: int, name: str = "limiter") -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be an int >= 1, got {capacity!r}")
        self.capacity = capacity
        self.name = name
        self.in_flight = 0
        self.peak = 0
        self.admitted = 0
        self.shed = 0

    def try_acquire(self) -> bool:
        """Take a slot if one is free (counts admitted or shed)."""
        if self.in_flight >= self.capacity:
            self.shed += 1
            return False
        self.in_flight += 1
        self.admitted += 1
        self.peak = max(self.peak, self.in_flight)
        return True

    def release(self) -> None:
        if self.in_flight <= 0:
            raise RuntimeError(f"{self.name}: release without acquire")
        self.in_flight -= 1

    @property
    def shed_rate(self) -> float:
        total = self.admitted + self.shed
        return self.shed / total if total else 0.0

    def snapshot(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "in_flight": self.in_flight,
            "peak": self.peak,
            "admitted": self.admitted,
            "shed": self.shed,
            "shed_rate": round(self.shed_rate, 4),
        }


class AdmissionTier(TierWrapper):
    """``inner`` with at most ``limit`` streams in flight (an int, or a shared limiter).

    A slot is held from the first ``anext`` until the stream ends or is closed, which the
    gate does for an abandoned stream as soon as it moves on.
    """

    def __init__(self, inner: Tier, limit: int | ConcurrencyLimiter) -> None:
        super().__init__(inner)
        self.limiter = (
            limit
            if isinstance(limit, ConcurrencyLimiter)
            else ConcurrencyLimiter(limit, name=inner.name)
        )

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        lim = self.limiter
        if not lim.try_acquire():
            raise Declined(f"{self.name}: at capacity ({lim.capacity} in flight), shed")
        agen = self.inner.stream(request, budget)
        try:
            async for piece in agen:
                yield piece
        finally:
            try:
                await aclose_quietly(agen)  # the inner work stops before its slot is reused
            finally:
                lim.release()

    def snapshot(self) -> dict[str, Any]:
        return self.limiter.snapshot()
