"""Emulated latency profiles: make a real tier *look* like another model, for what-if runs.

:class:`EmulatedLatency` wraps a real tier (the real code path still runs) and holds its
first piece until a TTFT drawn from a log-normal distribution fitted to a (p50, p99) pair
has passed, then spaces the remaining pieces by a drawn TPOT. It is an emulation and says
so: its name carries an ``emulated`` marker in reports. Presets follow the article's numbers.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

from rtgate.core.budget import Budget
from rtgate.core.latency import Prior
from rtgate.core.request import Piece, Request
from rtgate.tiers.base import Tier

__all__ = [
    "CLASSIFIER",
    "CLOUD_70B",
    "LOCAL_8B",
    "PRESETS",
    "TEMPLATE",
    "EmulatedLatency",
    "LatencyProfile",
    "LogNormal",
]

_Z99 = 2.3263478740408408  # standard normal quantile at 0.99


@dataclass(frozen=True, slots=True)
class LogNormal:
    """A log-normal distribution of milliseconds, given by its median and its p99."""

    p50: float
    p99: float

    def __post_init__(self) -> None:
        if not 0 < self.p50 <= self.p99:
            raise ValueError(f"need 0 < p50 <= p99, got {self.p50}, {self.p99}")

    @property
    def mu(self) -> float:
        return math.log(self.p50)

    @property
    def sigma(self) -> float:
        return math.log(self.p99 / self.p50) / _Z99

    def sample(self, rng: random.Random) -> float:
        return rng.lognormvariate(self.mu, self.sigma)


@dataclass(frozen=True, slots=True)
class LatencyProfile:
    """TTFT and per-piece time of an emulated model."""

    name: str
    ttft: LogNormal
    tpot: LogNormal | None = None

    def prior(self, pieces: int = 16) -> Prior:
        """What the gate may assume before it has observed this profile."""
        tpot = self.tpot.p99 if self.tpot else 0.0
        return Prior(self.ttft.p99, self.ttft.p99 + tpot * max(0, pieces - 1))


CLOUD_70B = LatencyProfile("cloud-70b", LogNormal(620.0, 1800.0), LogNormal(13.0, 20.0))
"""A hosted 70B model: TTFT p50 620 ms, p99 1.8 s; 9-20 ms per token."""
LOCAL_8B = LatencyProfile("local-8b", LogNormal(70.0, 110.0), LogNormal(9.0, 14.0))
"""A local 8B model: ~120 ms to a short (5-token) completion."""
TEMPLATE = LatencyProfile("template", LogNormal(1.0, 4.0))
"""A template table behind a network hop: under 5 ms."""
CLASSIFIER = LatencyProfile("classifier", LogNormal(18.0, 25.0))
"""A ~1B intent classifier: ~20 ms."""

PRESETS = {p.name: p for p in (CLOUD_70B, LOCAL_8B, TEMPLATE, CLASSIFIER)}


class EmulatedLatency(Tier):
    """``inner`` with the latency of ``profile`` (never faster than ``inner`` really is).

    Time is measured from the start of the call: the first piece (or a decline) is released
    no earlier than a drawn TTFT, each later piece no earlier than a drawn TPOT after the
    previous one. Sleeps use the event loop, so tests on virtual time cost nothing.
    """

    def __init__(
        self,
        inner: Tier,
        profile: LatencyProfile,
        *,
        name: str | None = None,
        quality: int | None = None,
        delegable: bool | None = None,
        seed: int | None = 0,
    ) -> None:
        self.inner = inner
        self.profile = profile
        self.name = name or inner.name
        self.quality = inner.quality if quality is None else quality
        self.delegable = inner.delegable if delegable is None else delegable
        self.latency_prior = profile.prior()
        self.rng = random.Random(seed)

    @property
    def label(self) -> str:
        return f"{self.name} (emulated {self.profile.name})"

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        loop = asyncio.get_running_loop()
        release = loop.time() + self.profile.ttft.sample(self.rng) / 1000.0
        agen = self.inner.stream(request, budget)
        try:
            async for piece in agen:
                delay = release - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                yield piece
                gap = self.profile.tpot.sample(self.rng) if self.profile.tpot else 0.0
                release = loop.time() + gap / 1000.0
        except Exception:
            # a decline or a failure is also reported no earlier than the emulated time
            delay = release - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            raise
        finally:
            if isinstance(agen, AsyncGenerator):
                await agen.aclose()

    async def warmup(self) -> None:
        await self.inner.warmup()

    async def aclose(self) -> None:
        await self.inner.aclose()
