"""Shared test helpers of the autocomplete (imported by name, like guard_helpers)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from rtgate.apps.autocomplete.engine import AutocompleteEngine, EngineConfig
from rtgate.apps.autocomplete.tiers import Reader
from rtgate.core.budget import Budget
from rtgate.core.latency import Prior
from rtgate.core.request import Piece, Request
from rtgate.tiers.base import Tier

CLOUD_CANDIDATES = [
    {"text": "临时提额和账单分期能一起办吗", "intent": "complex", "source": "cloud"},
    {"text": "临时提额怎么申请", "intent": "limit_increase", "source": "cloud"},
]


class GatedCloud(Tier):
    """A cloud that answers only when the test opens ``release`` (events, not sleeps)."""

    latency_prior = Prior(1_800.0, 1_800.0)

    def __init__(self) -> None:
        self.name, self.quality, self.delegable = "cloud", 10, True
        self.release = asyncio.Event()
        self.started: list[str] = []
        self.cancelled: list[str] = []

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        self.started.append(request.input)
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.append(request.input)
            raise
        yield Piece("ok", {"candidates": CLOUD_CANDIDATES})


def engine_with(reader: Reader, **kw: Any) -> AutocompleteEngine:
    cfg = kw.pop("config", None) or EngineConfig()
    return AutocompleteEngine.build(cfg, reader=reader, **kw)
