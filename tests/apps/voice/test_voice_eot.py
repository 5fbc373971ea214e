"""Semantic end of turn: the local model's probability that the caller's line ends here."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from rtgate.apps.voice.eot import DEFAULT_PROMPTS, EndPrompt, LMEndOfTurn
from rtgate.apps.voice.session import VoiceModels
from rtgate.budget import Budget
from rtgate.errors import QueueFull


class FakeScorer:
    def __init__(self, logprobs: list[float] | Exception) -> None:
        self.logprobs = logprobs
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    async def score(
        self,
        prefix: str,
        candidates: Sequence[str],
        budget: Budget | None = None,
        *,
        urgent: bool = False,
    ) -> list[float]:
        assert urgent  # turn-taking cannot wait behind queued generations
        self.calls.append((prefix, tuple(candidates)))
        if isinstance(self.logprobs, Exception):
            raise self.logprobs
        return self.logprobs


async def test_the_probability_is_the_mass_of_the_line_enders() -> None:
    scorer = FakeScorer([math.log(0.5), math.log(0.2), math.log(0.05), math.log(0.05)])
    eot = LMEndOfTurn(scorer, {"zh": EndPrompt("顾客：", ("。", "？", "！", "\n"))})
    p = await eot.p_end("等一下，我换个问题。", "zh")
    assert p == pytest.approx(0.8)
    # the transcript's own full stop is not given to the model: it decides how the line ends
    assert scorer.calls == [("顾客：等一下，我换个问题", ("。", "？", "！", "\n"))]


async def test_no_opinion_when_busy_or_unknown() -> None:
    assert await LMEndOfTurn(FakeScorer(QueueFull("busy"))).p_end("I want to cancel", "en") is None
    assert await LMEndOfTurn(FakeScorer(TimeoutError())).p_end("I want to cancel", "en") is None
    assert await LMEndOfTurn(FakeScorer([0.0])).p_end("bonjour", "fr") is None
    assert await LMEndOfTurn(FakeScorer([0.0])).p_end(" … ", "en") is None


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="session")
async def test_gemma_tells_a_finished_line_from_a_fragment(models: VoiceModels) -> None:
    assert isinstance(models.eot, LMEndOfTurn) and set(DEFAULT_PROMPTS) == {"zh", "en"}
    eot = LMEndOfTurn(models.eot.scorer, budget_ms=30_000)
    pairs = [
        ("等一下，我换个问题", "如果我这个月退订套餐"),
        ("上个月的账单一共是多少钱", "我想问一下那个"),
        ("Wait, hold on a second", "So I was wondering if"),
        ("I want to cancel my plan", "If I cancel my contract this month"),
    ]
    for done, fragment in pairs:
        p_done = await eot.p_end(done, "en" if done.isascii() else "zh")
        p_frag = await eot.p_end(fragment, "en" if fragment.isascii() else "zh")
        assert p_done is not None and p_frag is not None
        assert p_done > 0.3 > 0.1 > p_frag, (done, p_done, fragment, p_frag)
