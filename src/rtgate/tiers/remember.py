"""A tier that remembers another tier's answers in a cache tier, so the same question
asked again is answered from the cache at once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from rtgate.core.background import Background
from rtgate.core.budget import Budget
from rtgate.core.request import Piece, Request
from rtgate.tiers.base import Tier

if TYPE_CHECKING:
    from rtgate.tiers.cache import CacheTier

__all__ = ["RememberAnswers"]


class RememberAnswers(Tier):
    """``inner`` (same name, rank and prior) that puts each complete answer to a
    single-turn request into ``cache``. The put runs in the background, so the answer is
    not delayed; at most ``max_pending`` puts wait at once (beyond that one is skipped)."""

    def __init__(self, inner: Tier, cache: CacheTier, max_pending: int = 64) -> None:
        self.inner = inner
        self.cache = cache
        self.name = inner.name
        self.quality = inner.quality
        self.delegable = inner.delegable
        self.latency_prior = getattr(inner, "latency_prior", None)
        self.max_pending = max_pending
        self._pending = Background(f"remember-{inner.name}")  # the puts under way

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        parts: list[str] = []
        agen = self.inner.stream(request, budget)
        try:
            async for piece in agen:
                parts.append(piece.text if isinstance(piece, Piece) else piece)
                yield piece
        finally:
            closer = getattr(agen, "aclose", None)
            if closer is not None:
                await closer()
        single_turn = not any(m.role == "assistant" for m in request.messages)
        if single_turn and parts and len(self._pending) < self.max_pending:
            # a big model's answer is marked ``deep``: a judge has nothing to doubt in it
            data = {"source": self.name, "deep": True} if self.delegable else {"source": self.name}
            put = self.cache.put(request.input, "".join(parts), data)
            self._pending.spawn(put)

    async def drain(self) -> None:
        """Wait until every pending put has landed."""
        await self._pending.join()

    async def warmup(self) -> None:
        await self.inner.warmup()

    async def aclose(self) -> None:
        await self._pending.aclose()
        await self.inner.aclose()
