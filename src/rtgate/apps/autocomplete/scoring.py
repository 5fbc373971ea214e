"""Scorers: how well does each candidate query fit what the user has typed so far?

The local model does not write suggestions (a 270M model writes poor Chinese); it *ranks*
corpus candidates by their log-likelihood after a short prompt holding the typed prefix
(:class:`LlamaScorer`, through the backend's scoring helper). :class:`EmulatedScorer` is
the named emulation used by ``--mode emulated``: a character-bigram overlap score,
returned no earlier than a delay drawn from a latency profile (default ``LOCAL_8B``).
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from rtgate.core.budget import Budget
from rtgate.tiers.emulated import LOCAL_8B, LatencyProfile
from rtgate.tiers.textnorm import lang_of, normalize

if TYPE_CHECKING:
    from rtgate.backends.llamacpp import LlamaCppBackend

__all__ = ["EmulatedScorer", "LlamaScorer", "Scorer", "overlap"]

_PROMPTS = {
    "zh": "信用卡客服。顾客正在输入：“{typed}”。顾客想问的完整问题是：",
    "en": 'Credit card support. The customer is typing: "{typed}". Their full question is: ',
}


class Scorer(Protocol):
    """Scores candidates for a typed prefix (higher is better)."""

    label: str

    async def score(self, typed: str, candidates: Sequence[str], budget: Budget) -> list[float]:
        """One score per candidate; may raise ``TimeoutError`` when the budget runs out."""
        ...

    async def aclose(self) -> None: ...


class LlamaScorer:
    """Per-token log-likelihood of each candidate under a local GGUF model."""

    def __init__(self, backend: LlamaCppBackend) -> None:
        self.backend = backend
        self.label = f"{backend.name} (real, log-likelihood ranking)"

    async def score(self, typed: str, candidates: Sequence[str], budget: Budget) -> list[float]:
        prompt = _PROMPTS[lang_of(typed)].format(typed=" ".join(typed.split()))
        return await self.backend.score(prompt, list(candidates), budget, normalize=True)

    async def warmup(self) -> None:
        await self.backend.warmup()
        probes = (("zh", "我想把", "我想把积分兑换成话费"), ("en", "how", "how do I"))
        for lang, typed, cand in probes:
            await self.backend.score(_PROMPTS[lang].format(typed=typed), [cand], normalize=True)

    async def aclose(self) -> None:
        await self.backend.aclose()


def overlap(a: str, b: str) -> float:
    """Cosine of the character-bigram sets of two normalised texts (0..1)."""
    ga, gb = _grams(normalize(a)), _grams(normalize(b))
    if not ga or not gb:
        return 0.0
    return len(ga & gb) / math.sqrt(len(ga) * len(gb))


def _grams(s: str) -> set[str]:
    return {s[i : i + 2] for i in range(len(s) - 1)} or ({s} if s else set())


class EmulatedScorer:
    """Bigram-overlap scores released after a delay drawn from ``profile``'s TTFT."""

    def __init__(self, profile: LatencyProfile = LOCAL_8B, *, seed: int = 0) -> None:
        self.profile = profile
        self.rng = random.Random(seed)
        self.label = f"emulated {profile.name} (bigram overlap)"

    async def score(self, typed: str, candidates: Sequence[str], budget: Budget) -> list[float]:
        delay = self.profile.ttft.sample(self.rng) / 1000.0
        if delay > budget.left_s():
            await asyncio.sleep(budget.left_s())
            raise TimeoutError("emulated scoring ran past the budget")
        await asyncio.sleep(delay)
        # log-domain like a model: an unrelated candidate is ~3 nats below a matching one
        return [math.log(0.05 + overlap(typed, c)) for c in candidates]

    async def warmup(self) -> None:
        return None

    async def aclose(self) -> None:
        return None
