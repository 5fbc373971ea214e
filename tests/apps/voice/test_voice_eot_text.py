"""The trained text end-of-turn model: its data, its file, what it reads, how turns use it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rtgate.apps.voice.eot import auc
from rtgate.apps.voice.eot_text import (
    ByCue,
    TextEndOfTurn,
    TurnExample,
    as_heard,
    data_digest,
    features,
    model_path,
    train,
    training_examples,
    training_files,
)
from rtgate.apps.voice.frames import (
    EndFrame,
    Frame,
    SpeechStartFrame,
    SpeechStopFrame,
    TranscriptFrame,
    TurnEndFrame,
)
from rtgate.apps.voice.pipeline import Pipeline
from rtgate.apps.voice.turns import TEXT_QUESTION_MORE_P, TurnRules, TurnStage
from rtgate.core.errors import ConfigError, InvalidRequest
from tests.apps.voice.test_voice_turns import silence


@pytest.fixture(scope="module")
def shipped() -> TextEndOfTurn:
    return TextEndOfTurn.load()


def test_the_shipped_model_was_fitted_on_the_data_as_it_is(shipped: TextEndOfTurn) -> None:
    # refit with `python -m rtgate.apps.voice.eot_text` when the training data changes
    assert shipped.meta.get("data_sha256") == data_digest()
    assert shipped.meta.get("n_examples") == len(training_examples())


def test_no_evaluation_or_validation_file_is_trained_on() -> None:
    names = [p.name for p in training_files()]
    assert names == ["turns_train.json", "calls-tune.jsonl", "calls-tune2.jsonl"]
    assert not any(n.startswith(("eval", "val", "calls-eval", "calls-val")) for n in names)


def test_prefixes_at_part_boundaries_go_on_and_whole_turns_are_finished(tmp_path: Path) -> None:
    turns = tmp_path / "turns.json"
    turns.write_text(
        json.dumps(
            {
                "zh": {"turns": [{"parts": ["我想查话费，", "顺便问下流量。"]}]},
                "en": {"turns": [{"parts": ["Hi,", "my bill", "is wrong."]}]},
            }
        ),
        encoding="utf-8",
    )
    calls = tmp_path / "calls.jsonl"
    calls.write_text('# a comment\n{"text": "帮我查一下", "lang": "zh"}\n', encoding="utf-8")
    assert training_examples([turns, calls]) == [
        TurnExample("我想查话费，", "zh", False),
        TurnExample("我想查话费，顺便问下流量。", "zh", True),
        TurnExample("Hi,", "en", False),
        TurnExample("Hi, my bill", "en", False),
        TurnExample("Hi, my bill is wrong.", "en", True),
        TurnExample("帮我查一下", "zh", True),
    ]


def test_a_file_that_is_not_turns_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "turns.json"
    bad.write_text('{"zh": {"turns": [{"text": "no parts"}]}}', encoding="utf-8")
    with pytest.raises(InvalidRequest, match="not a turn or call file"):
        training_examples([bad])
    with pytest.raises(InvalidRequest):
        training_examples([tmp_path / "missing.jsonl"])


def test_the_model_reads_what_whisper_gives_without_its_punctuation() -> None:
    assert as_heard("Can you check my bill?", "en") == "can you check my bill"
    assert as_heard("I'm  sorry, I  don't.", "en") == "i'm sorry i don't"
    assert as_heard("我想查一下话费，顺便问下流量。", "zh") == "我想查一下话费顺便问下流量"
    assert as_heard("我的 5G 套餐", "zh") == "我的5g套餐"
    grams = features("can you check my bill")
    assert "$ill" in grams and "w$bill" in grams and "w$my bill" in grams and "w^can" in grams
    assert features("") == []


def test_the_final_mark_changes_nothing(shipped: TextEndOfTurn) -> None:
    for text in ("Can you check my last bill", "我家的网这几天特别慢"):
        lang = "zh" if text[0] == "我" else "en"
        scores = {shipped.score(text + mark, lang) for mark in ("", ".", "?", "。", "，")}
        assert len(scores) == 1
    assert shipped.score("。", "zh") is None


async def test_on_its_training_data_finished_turns_rank_above_those_that_go_on(
    shipped: TextEndOfTurn,
) -> None:
    examples = training_examples()
    for lang in ("zh", "en"):
        pos = [
            await shipped.p_end(x.text, lang) or 0.0 for x in examples if x.lang == lang and x.done
        ]
        neg = [await shipped.p_end(x.text, lang) or 0.0 for x in examples
               if x.lang == lang and not x.done]  # fmt: skip
        a = auc(pos, neg)
        assert a is not None and a > 0.9


def test_fitting_is_deterministic_and_the_file_round_trips(tmp_path: Path) -> None:
    pytest.importorskip("sklearn")
    data = [
        TurnExample("我想查一下话费，", "zh", False),
        TurnExample("我想查一下话费，顺便看看流量。", "zh", True),
        TurnExample("My bill is wrong and", "en", False),
        TurnExample("My bill is wrong.", "en", True),
    ]
    a, b = train(data), train(data)
    assert np.array_equal(a.coef, b.coef) and a.intercept == b.intercept
    assert "data_sha256" not in a.meta  # not the shipped data: no digest claimed
    a.save(tmp_path / "m.npz")
    back = TextEndOfTurn.load(tmp_path / "m.npz")
    assert back.score("My bill is wrong", "en") == pytest.approx(a.score("My bill is wrong", "en"))


def test_a_file_that_is_not_the_model_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "m.npz"
    bad.write_bytes(b"not a model")
    with pytest.raises(ConfigError):
        TextEndOfTurn.load(bad)
    assert model_path().name == "eot-text.npz"


def test_a_question_read_as_going_on_outwaits_a_pause_and_nothing_else_changes() -> None:
    rules = TurnRules.for_model("lm+text")
    assert rules.question_more_p == TEXT_QUESTION_MORE_P
    assert rules.wait_rule("question", 0.1) == (rules.question_more_ms, "question_more")
    assert rules.question_more_ms >= 1000.0  # callers pause 0.5-1.0 s after a question
    assert rules.wait_rule("question", 0.9) == (rules.question_ms, "question")
    assert rules.wait_rule("question", None) == (rules.question_ms, "question")  # no score
    assert rules.wait_rule(None, 0.99) == (rules.timeout_ms, "timeout")
    assert rules.wait_rule("clause", 0.3) == (rules.clause_ms, "clause")
    assert rules.wait_rule("clause", 0.9) == (rules.sure_ms, "complete")
    assert rules.scores("question") and rules.scores("clause") and not rules.scores(None)
    lm = TurnRules.for_model("lm")
    assert lm == TurnRules()  # the local model's points, as before
    assert not lm.scores("question") and lm.wait_rule("question", 0.1)[1] == "question"


class Fixed:
    def __init__(self, p: float) -> None:
        self.p = p
        self.asked: list[str] = []

    async def p_end(self, text: str, lang: str) -> float | None:
        self.asked.append(text)
        return self.p


async def test_questions_go_to_the_text_model_and_clauses_to_the_local_one() -> None:
    lm, text = Fixed(0.2), Fixed(0.9)
    both = ByCue(clause=lm, question=text)
    assert await both.p_end("Can you check my last bill?", "en") == 0.9
    assert await both.p_end("我家的网这几天特别慢", "zh") == 0.2
    assert text.asked == ["Can you check my last bill?"] and lm.asked == ["我家的网这几天特别慢"]


async def run_question(text: str, model: TextEndOfTurn) -> list[TurnEndFrame]:
    """A question's partial that comes 0.3 s into the silence (as on a busy machine, after
    the 160 ms a question waits), then 0.4 s more of silence."""
    stage = TurnStage(TurnRules.for_model("lm+text"), eot=ByCue(clause=Fixed(0.0), question=model))
    out: list[Frame] = []
    async with Pipeline([stage], sink=out.append) as pipe:
        await pipe.put(SpeechStartFrame(t=0.0))
        await pipe.put(SpeechStopFrame(t=2.0))
        for f in silence(2.0, 0.3):
            await pipe.put(f)
        await pipe.put(TranscriptFrame(turn=1, text=text, lang="en", until=2.0))
        for f in silence(2.3, 0.4):
            await pipe.put(f)
        await pipe.put(EndFrame())
        await pipe.wait()
    return [f for f in out if isinstance(f, TurnEndFrame)]


async def test_a_question_the_text_model_reads_as_going_on_is_not_ended_in_a_pause() -> None:
    # "Can you check my last bill? | and when does my broadband contract end?": a 0.69 s
    # pause after a complete first question (validation); the model reads it as going on
    model = TextEndOfTurn.load()
    first = "Can you check my last bill?"
    p = model.score(first, "en")
    assert p is not None and p < TEXT_QUESTION_MORE_P
    ends = await run_question(first, model)
    assert [e.rule for e in ends] == ["end"]  # not decided within the 0.7 s pause


async def test_a_question_read_as_finished_ends_as_soon_as_its_late_partial_is_scored() -> None:
    model = TextEndOfTurn.load()
    whole = "Can you check my last bill and when does my broadband contract end?"
    p = model.score(whole, "en")
    assert p is not None and p >= TEXT_QUESTION_MORE_P
    ends = await run_question(whole, model)
    assert [e.rule for e in ends] == ["question"] and ends[0].p_end == pytest.approx(p)
    assert ends[0].decided_t - 2.3 < 0.1  # on the first frame after the partial
