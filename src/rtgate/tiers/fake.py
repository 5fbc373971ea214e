"""A scripted tier for tests (yours and ours): fixed pieces, delays, hangs, declines, errors.

Delays use ``asyncio.sleep``, so on virtual loop time (``looptime``) they cost nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from rtgate.core.budget import Budget
from rtgate.core.errors import Declined
from rtgate.core.request import Piece, Request
from rtgate.tiers.base import Tier

__all__ = ["FakeTier"]


class FakeTier(Tier):
    """Answers every request with ``pieces`` after ``ttft_ms``, one piece per ``tpot_ms``.

    ``hang=True`` never answers; ``decline=True`` raises ``Declined`` after ``ttft_ms``;
    ``fail_at=k`` raises ``RuntimeError`` before piece ``k``. ``calls`` counts requests and
    ``cancelled`` counts streams that were cancelled or closed before their end.
    """

    def __init__(
        self,
        name: str,
        quality: int,
        pieces: Sequence[str | Piece] = ("ok",),
        *,
        ttft_ms: float = 0.0,
        tpot_ms: float = 0.0,
        hang: bool = False,
        decline: bool = False,
        fail_at: int | None = None,
        delegable: bool = False,
    ) -> None:
        self.name = name
        self.quality = quality
        self.pieces = list(pieces)
        self.ttft_ms = ttft_ms
        self.tpot_ms = tpot_ms
        self.hang = hang
        self.decline = decline
        self.fail_at = fail_at
        self.delegable = delegable
        self.calls = 0
        self.cancelled = 0
        self.completed = 0

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        self.calls += 1
        done = False
        try:
            if self.hang:
                await asyncio.Event().wait()
            if self.ttft_ms:
                await asyncio.sleep(self.ttft_ms / 1000.0)
            if self.decline:
                raise Declined(f"{self.name} has no answer")
            for i, piece in enumerate(self.pieces):
                if self.fail_at is not None and i == self.fail_at:
                    raise RuntimeError(f"{self.name} failed at piece {i}")
                if i and self.tpot_ms:
                    await asyncio.sleep(self.tpot_ms / 1000.0)
                yield piece
            done = True
            self.completed += 1
        finally:
            if not done and not self.decline and self.fail_at is None:
                self.cancelled += 1
