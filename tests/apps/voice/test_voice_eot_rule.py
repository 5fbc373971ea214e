"""The fitted end-of-turn decision (eot_rule.py) and turn-taking behind it (session 15)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rtgate.apps.voice.eot_rule import (
    CHECK_MS,
    FEATURES,
    EotRule,
    Place,
    features,
)
from rtgate.apps.voice.eot_rule_fit import fit, simulate
from rtgate.apps.voice.frames import (
    AudioFrame,
    EndFrame,
    Frame,
    SpeechStartFrame,
    SpeechStopFrame,
    TranscriptFrame,
    TurnEndFrame,
)
from rtgate.apps.voice.pipeline import Pipeline
from rtgate.apps.voice.turns import TurnRules, TurnStage
from rtgate.core.errors import ConfigError


def _rule(bar: float = 0.5, **w: float) -> EotRule:
    """A hand-set rule: weights by feature name, the rest 0."""
    coef = tuple(float(w.get(name, 0.0)) for name in FEATURES)
    return EotRule(coef, float(w.get("intercept", 0.0)), bar)


# P(end) = sigmoid(-3 + 3*p_text + 1.2*log2(silence/64) - 2*open): a question the text
# model reads as finished (0.9) speaks at 150 ms, a clause it reads at 0.5 at 300 ms, an
# "open" ending only at the timeout
RULE = _rule(intercept=-3.0, p_text=3.0, log_silence=1.2, open=-4.0)


def test_it_speaks_at_the_first_check_whose_score_reaches_the_bar() -> None:
    assert RULE.wait_ms("ask", 0.9, "en") == 150.0
    assert RULE.wait_ms("clause", 0.5, "zh") == 300.0
    assert RULE.wait_ms("open", 0.5, "zh") == RULE.timeout_ms
    # between the checks the decision is the last check's: no sooner than 150 ms
    assert not RULE.speaks(Place("ask", 0.9, "en", 140.0))
    assert RULE.speaks(Place("ask", 0.9, "en", 150.0))
    assert not RULE.speaks(Place("clause", 0.5, "zh", 299.0))
    assert RULE.speaks(Place("open", 0.5, "zh", 1200.0))  # the timeout, whatever the score


def test_features_follow_their_names() -> None:
    row = dict(zip(FEATURES, features(Place("question", 0.25, "en", 256.0)), strict=True))
    assert row["question"] == 1.0 and row["ask"] == row["clause"] == row["open"] == 0.0
    assert row["p_text"] == 0.25 and row["en"] == 1.0 and row["log_silence"] == 2.0
    assert row["en_log_silence"] == 2.0 and row["question_p_text"] == 0.25
    assert features(Place("open", None, "zh", 64.0))[FEATURES.index("p_text")] == 0.5


def test_the_file_round_trips_and_a_wrong_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "rule.json"
    RULE.save(path)
    back = EotRule.load(path)
    assert back.coef == RULE.coef and back.bar == RULE.bar and back.checks == CHECK_MS
    d = json.loads(path.read_text())
    d["features"] = d["features"][:-1]
    path.write_text(json.dumps(d))
    with pytest.raises(ConfigError):
        EotRule.load(path)


def test_the_shipped_rule_loads() -> None:
    rule = EotRule.load()
    assert 0.0 < rule.bar < 1.0 and len(rule.coef) == len(FEATURES)


def _rows() -> list[dict[str, Any]]:
    """Study rows: questions that go on after a 0.7 s pause read lower by the text model
    than questions that end, though over the word rules' 0.5; clauses end the turn three
    times in four."""
    rng = np.random.default_rng(0)
    rows: list[dict[str, Any]] = []
    for i in range(40):
        lang = "en" if i % 2 else "zh"
        q = "Can I change my plan?" if lang == "en" else "能换套餐吗？"
        c = "I want to change my plan." if lang == "en" else "我想换个套餐。"
        rows.append({"lang": lang, "where": "pause", "room_ms": 700, "heard": q,
                     "p_text": float(rng.uniform(0.5, 0.65))})  # fmt: skip
        rows.append({"lang": lang, "where": "end", "room_ms": None, "heard": q,
                     "p_text": float(rng.uniform(0.7, 0.95))})  # fmt: skip
        rows.append({"lang": lang, "where": "pause" if i % 4 == 0 else "end",
                     "room_ms": 800 if i % 4 == 0 else None, "heard": c,
                     "p_text": float(rng.uniform(0.3, 0.9))})  # fmt: skip
    return rows


def test_the_fitted_bar_cuts_no_more_pauses_than_the_word_rules_and_waits_less() -> None:
    rows = _rows()
    today = simulate(None, rows)
    assert today["cut"] == 40  # the 160 ms question rule speaks in every 0.7 s pause
    rule = fit(rows, max_cut=today["cut"])
    after = simulate(rule, rows)
    assert after["cut"] <= today["cut"]
    assert after["wait_p50"] <= today["wait_p50"]
    assert after["wait_mean"] < today["wait_mean"]  # the clauses no longer wait 1.2 s each
    strict = simulate(fit(rows, max_cut=5), rows)
    assert strict["cut"] <= 5  # a stricter bar holds more pauses


# --- turn-taking behind the fitted rule -------------------------------------------------


class FakeText:
    """The text model: a fixed P(end) per text."""

    def __init__(self, table: dict[str, float]) -> None:
        self.table = table

    def score(self, text: str, lang: str) -> float | None:
        return self.table.get(text)


def quiet(t: float, seconds: float) -> list[AudioFrame]:
    n = int(seconds / 0.032)
    return [AudioFrame(pcm=np.zeros(512, np.float32), t=t + i * 0.032, prob=0.01) for i in range(n)]


async def play(frames: list[Frame], text: FakeText) -> list[TurnEndFrame]:
    stage = TurnStage(TurnRules(learned=RULE), text_eot=text)
    out: list[Frame] = []
    async with Pipeline([stage], sink=out.append) as p:
        for f in frames:
            await p.put(f)
        await p.put(EndFrame())
        await p.wait()
    return [f for f in out if isinstance(f, TurnEndFrame)]


def said(text: str, until: float, lang: str = "en") -> TranscriptFrame:
    return TranscriptFrame(turn=1, text=text, lang=lang, until=until)


async def test_a_clause_the_text_model_reads_as_finished_ends_before_the_clause_wait() -> None:
    words = "My internet has been down since Monday."
    frames: list[Frame] = [SpeechStartFrame(t=0.0), SpeechStopFrame(t=2.0), said(words, 2.0)]
    ends = await play([*frames, *quiet(2.0, 1.5)], FakeText({words: 0.5}))
    assert [e.rule for e in ends] == ["learned/clause"]
    assert 0.3 <= ends[0].decided_t - 2.0 < 0.35  # the word rules wait 1.2 s here
    assert ends[0].p_end == 0.5


async def test_a_question_read_as_going_on_holds_through_a_pause() -> None:
    first = "Can I put ten pounds on my son's phone?"
    whole = first[:-1] + " from my own card?"
    frames: list[Frame] = [SpeechStartFrame(t=0.0), SpeechStopFrame(t=2.0), said(first, 2.0)]
    frames += quiet(2.0, 0.4)  # P(end) 0.05 of the first question: no end at 64-300 ms
    frames += [SpeechStartFrame(t=2.4), SpeechStopFrame(t=4.0), said(whole, 4.0)]
    frames += quiet(4.0, 0.5)
    ends = await play(frames, FakeText({first: 0.05, whole: 0.9}))
    assert [e.rule for e in ends] == ["learned/ask"]  # the word rules cut in at 0.16 s
    assert ends[0].t == 4.0 and "card" in ends[0].text


async def test_no_covering_words_wait_for_the_timeout() -> None:
    frames: list[Frame] = [SpeechStartFrame(t=0.0), SpeechStopFrame(t=2.0)]
    frames += [said("Can I", 1.0), *quiet(2.0, 1.4)]  # a partial from before the silence
    ends = await play(frames, FakeText({"Can I": 0.99}))
    assert [e.rule for e in ends] == ["learned/open"]
    assert ends[0].decided_t - 2.0 >= 1.2
