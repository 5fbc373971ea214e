"""Semantic end of turn: the local model's probability that the caller's line ends here."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pytest

from rtgate.apps.voice.eot import (
    DEFAULT_PROMPTS,
    EndPrompt,
    Labelled,
    LMEndOfTurn,
    auc,
    load_eval,
    operating_points,
)
from rtgate.apps.voice.session import VoiceModels
from rtgate.apps.voice.turns import cue
from rtgate.core.budget import Budget
from rtgate.core.errors import QueueFull


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
    assert isinstance(models.lm_eot, LMEndOfTurn) and set(DEFAULT_PROMPTS) == {"zh", "en"}
    eot = LMEndOfTurn(models.lm_eot.scorer, budget_ms=30_000)
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


def test_auc_and_operating_points_count_what_they_say() -> None:
    assert auc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert auc([0.1], [0.9]) == 0.0
    assert auc([0.5], [0.5]) == 0.5  # a tie counts half
    assert auc([], [0.3]) is None
    scored = [
        (Labelled("a", "en", True), 0.9),
        (Labelled("b", "en", True), 0.5),
        (Labelled("c", "en", False), 0.65),
        (Labelled("d", "zh", False), 0.1),
    ]
    rep = operating_points(scored, [0.6])
    assert rep["en"]["at"]["0.6"] == {"done_share": 0.5, "more_share": 1.0}
    assert rep["en"]["auc"] == 0.5 and rep["zh"]["auc"] is None
    assert rep["all"]["at"]["0.6"] == {"done_share": 0.5, "more_share": 0.5}


def test_the_packaged_evaluation_set_is_balanced_and_reaches_the_model() -> None:
    items = load_eval()
    for lang in ("zh", "en"):
        mine = [x for x in items if x.lang == lang]
        clauses = [x for x in mine if cue(x.text) == "clause"]
        assert len(clauses) >= 0.85 * len(mine)  # texts the rules decide alone are few
        assert sum(x.done for x in clauses) >= 25 and sum(not x.done for x in clauses) >= 25
    # the prompts' own lines are not in the set it is judged on
    lines = {line.split("：", 1)[-1].split(": ", 1)[-1] for p in DEFAULT_PROMPTS.values()
             for line in p.prefix.splitlines()}  # fmt: skip
    assert not {x.text.rstrip("。.") for x in items} & {t.rstrip("。.") for t in lines}


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="session")
async def test_a_primed_dialogue_is_restored_not_evaluated_again(models: VoiceModels) -> None:
    from rtgate.backends.base import Generation
    from rtgate.backends.llamacpp import LlamaCppBackend

    assert isinstance(models.lm_eot, LMEndOfTurn)
    backend = models.lm_eot.scorer
    assert isinstance(backend, LlamaCppBackend)
    eot = LMEndOfTurn(backend, budget_ms=30_000)
    assert await eot.prime() == 2
    before = await eot.p_end("我想改一下我的地址", "zh")
    # a generation in between leaves another prompt in the KV cache
    async for _ in backend.generate(Generation(prompt="Hello there, how", max_tokens=2)):
        pass
    restores = backend.engine_stats.prefix_restores
    after = await eot.p_end("我想改一下我的地址", "zh")
    assert backend.engine_stats.prefix_restores == restores + 1
    assert before is not None and after == pytest.approx(before, abs=1e-4)


async def test_priming_without_a_cache_is_a_no_op() -> None:
    assert await LMEndOfTurn(FakeScorer([0.0])).prime() == 0


def test_a_bad_evaluation_file_is_a_clear_error(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from rtgate.apps.voice.cli import app
    from rtgate.core.errors import InvalidRequest

    broken, empty = tmp_path / "broken.json", tmp_path / "empty.json"
    broken.write_text("{not json", encoding="utf-8")
    empty.write_text('{"zh": {"done": []}}', encoding="utf-8")
    with pytest.raises(InvalidRequest, match="not a labelled-clause file"):
        load_eval(str(broken))
    with pytest.raises(InvalidRequest, match="no labelled clauses"):
        load_eval(str(empty))
    res = CliRunner().invoke(app, ["eot-eval", "--data", str(broken)])
    assert res.exit_code == 2 and "not a labelled-clause file" in res.output
