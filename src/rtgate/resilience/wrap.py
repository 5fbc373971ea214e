"""Tier middleware: a tier that wraps a tier, with the same shape (like Starlette middleware).

A wrapper keeps the inner tier's ``name``, ``quality``, ``delegable`` and latency prior, so
the gate sees one tier; it adds a policy around :meth:`Tier.stream` and forwards
``warmup`` and ``aclose``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from rtgate.core.latency import Prior
from rtgate.tiers.base import Tier

__all__ = ["TierWrapper", "aclose_quietly"]


class TierWrapper(Tier):
    """Base class of tier middleware; subclasses implement ``stream``."""

    latency_prior: Prior | None = None

    def __init__(self, inner: Tier) -> None:
        self.inner = inner
        self.name = inner.name
        self.quality = inner.quality
        self.delegable = inner.delegable
        self.latency_prior = getattr(inner, "latency_prior", None)

    @property
    def innermost(self) -> Tier:
        """The tier at the bottom of a stack of wrappers."""
        tier: Tier = self.inner
        while isinstance(tier, TierWrapper):
            tier = tier.inner
        return tier

    async def warmup(self) -> None:
        await self.inner.warmup()

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.inner!r}>"


async def aclose_quietly(agen: AsyncIterator[Any]) -> None:
    """Close an async generator if it is one (a no-op for other iterators)."""
    closer = getattr(agen, "aclose", None)
    if closer is not None:
        await closer()
