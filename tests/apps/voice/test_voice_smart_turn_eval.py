"""Smart Turn's evaluation on a call set: pauses inside turns against the turns' ends."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile as sf

from rtgate.apps.voice.frames import RATE
from rtgate.apps.voice.smart_turn_eval import evaluate, quiet_spans


def _turn() -> np.ndarray:
    t = np.arange(RATE) / RATE
    voice = (0.3 * np.sin(2 * np.pi * 200 * t)).astype(np.float32)
    silence = np.zeros(RATE // 2, np.float32)  # 0.5 s inside the turn
    lead = np.zeros(int(0.3 * RATE), np.float32)
    return np.concatenate([lead, voice, silence, voice, lead])


class ByLength:
    """A fake audio model: the longer the audio, the more finished it sounds."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def p_end(self, audio: np.ndarray) -> float:
        self.seen.append(len(audio))
        return min(1.0, len(audio) / (4.0 * RATE))


def _set(folder: Path, with_spans: bool) -> None:
    sf.write(str(folder / "c00_t0.wav"), _turn(), RATE, subtype="PCM_16")
    turn = {"wav": "c00_t0.wav", "text": "a, b", "pauses_s": [0.5], "onset_s": 0.3,
            "end_s": 2.8}  # fmt: skip
    if with_spans:
        turn["pauses_at_s"] = [[1.3, 1.8]]
    manifest = {"calls": [{"lang": "en", "turns": [turn]}]}
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_pauses_and_ends_are_scored_after_each_silence(tmp_path: Path) -> None:
    _set(tmp_path, with_spans=True)
    model = ByLength()
    report = evaluate(tmp_path, model, silences=(0.2, 0.6))
    assert report["render"] == "parts"  # a manifest without "render" is an old set
    # the pause is 0.5 s: scored after 0.2 s only; the end after both
    assert [(r["where"], r["silence_s"]) for r in report["scores"]] == [
        ("pause", 0.2),
        ("end", 0.2),
        ("end", 0.6),
    ]
    # from 0.5 s before the onset (clamped at 0) to the place plus the silence; past the
    # WAV's end the line's floor is repeated
    assert model.seen == [int(1.5 * RATE), int(3.0 * RATE), int(3.4 * RATE)]
    by = report["by_silence"]["0.2"]["en"]
    assert (by["ends"], by["pauses"], by["auc"]) == (1, 1, 1.0)
    assert report["by_silence"]["0.6"]["all"]["auc"] is None  # no pause that long


def test_an_old_set_gets_its_pauses_from_the_level(tmp_path: Path) -> None:
    _set(tmp_path, with_spans=False)
    spans = quiet_spans(_turn(), 0.3, 2.8)
    assert spans == [[1.3, 1.8]]
    report = evaluate(tmp_path, ByLength(), silences=(0.2,))
    assert [r["where"] for r in report["scores"]] == ["pause", "end"]
