"""Reading intents from model lines, and the template table for common lines."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from rtgate.apps.npc.intent import IDLE, Intent, intent_from_data, parse_intent
from rtgate.apps.npc.tiers import LOCAL_SHOTS, WarmLLMTier, template_tier
from rtgate.backends.base import Generation
from rtgate.backends.fake import FakeBackend
from rtgate.core.budget import Budget
from rtgate.core.errors import Declined
from rtgate.core.request import Piece, Request


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "walk well | I'll see you at the well.",
            Intent("walk", "well", "I'll see you at the well."),
        ),
        (" walk the market | I'll see you there.", Intent("walk", "market", "I'll see you there.")),
        ("flee the village | Run!", Intent("flee", "gate", "Run!")),
        ("go home | I'll be back.", Intent("walk", "home", "I'll be back.")),
        ("tell player | The king is dead.", Intent("talk", "player", "The king is dead.")),
        ("sell apple | Two coppers each.", Intent("talk", "player", "Two coppers each.")),
        ("follow | Lead on.", Intent("follow", "player", "Lead on.")),
        ("work forge I'll heat it up", Intent("work", "forge", "I'll heat it up")),
        ("I think the tax is fair.", Intent("idle", "player", "I think the tax is fair.")),
        ("walk | ", Intent("walk", "well", "")),
    ],
)
def test_parse_intent_reads_lenient_lines(line: str, expected: Intent) -> None:
    assert parse_intent(line) == expected


def test_unreadable_line_falls_back_to_idle() -> None:
    assert parse_intent("") is IDLE
    assert parse_intent("   \n ") is IDLE
    fallback = Intent("work", "home", "...")
    assert parse_intent("", fallback) is fallback


def test_intent_validates_and_round_trips() -> None:
    with pytest.raises(ValueError):
        Intent("dance", "well", "")
    with pytest.raises(ValueError):
        Intent("walk", "moon", "")
    i = Intent("walk", "forge", "On my way.")
    assert parse_intent(i.line()) == i
    assert intent_from_data(i.to_dict(), "garbage") == i
    assert intent_from_data({"action": "dance"}, "walk gate | ok") == Intent("walk", "gate", "ok")


async def test_template_tier_answers_common_lines_and_declines_the_rest() -> None:
    tier = template_tier()
    pieces = [p async for p in tier.stream(Request("Follow me, quickly!"), Budget(100))]
    assert len(pieces) == 1 and isinstance(pieces[0], Piece)
    assert parse_intent(pieces[0].text) == Intent("follow", "player", "Lead the way.")
    with pytest.raises(Declined):
        async for _ in tier.stream(Request("What do you think of the tax?"), Budget(100)):
            pass


async def test_warm_llm_tier_runs_one_real_generation_at_warmup() -> None:
    backend = FakeBackend(["talk player | Good day."])
    tier = WarmLLMTier(backend, name="local", few_shot={"en": LOCAL_SHOTS}, style="completion")
    await tier.warmup()
    assert backend.warmed
    assert len(backend.calls) == 1  # the warm generation, on the real prompt format
    prompt = backend.calls[0].prompt
    assert prompt is not None and prompt.endswith("Player: Good day to you.\nNPC:")


class BudgetSpy(FakeBackend):
    def __init__(self) -> None:
        super().__init__(["walk well", " | On my way."])
        self.left_ms: list[float] = []

    async def generate(self, gen: Generation, budget: Budget | None = None) -> AsyncIterator[str]:
        assert budget is not None
        self.left_ms.append(budget.left_ms())
        async for tok in super().generate(gen, budget):
            yield tok


async def test_warm_llm_tier_lets_the_backend_finish_the_line_past_a_first_piece_budget() -> None:
    backend = BudgetSpy()
    tier = WarmLLMTier(backend, name="local", few_shot={"en": LOCAL_SHOTS}, style="completion")
    pieces = [p async for p in tier.stream(Request("Fetch water?"), Budget(80))]
    text = "".join(p if isinstance(p, str) else p.text for p in pieces)
    assert text == "walk well | On my way."
    assert backend.left_ms[0] > 80 and backend.left_ms[0] <= tier.line_ms
