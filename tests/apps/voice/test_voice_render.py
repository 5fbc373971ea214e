"""A turn voiced as one utterance: the join is found where the first part ends, widened to
the drawn pause, and the end of the turn is the same speech."""

from __future__ import annotations

import random

import numpy as np
import pytest

from rtgate.apps.voice.frames import RATE, Pcm
from rtgate.apps.voice.labels import true_bounds
from rtgate.apps.voice.render import (
    LEAD_S,
    find_join,
    join_text,
    render_parts,
    render_utterance,
    widen,
)


def _tone(seconds: float, freq: float = 220.0) -> Pcm:
    t = np.arange(int(seconds * RATE)) / RATE
    out: Pcm = (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)
    return out


def _hush(seconds: float) -> Pcm:
    # a voice's pause is not digital silence: a breath 50 dB down
    n = int(seconds * RATE)
    out: Pcm = (0.5 * 10 ** (-50 / 20) * np.sin(np.arange(n) * 0.7)).astype(np.float32)
    return out


class FakeVoice:
    """0.1 s of voice per character; spoken whole, a 120 ms pause after each comma, and a
    little quicker than the parts spoken alone (as a real voice is)."""

    def __init__(self) -> None:
        self.said: list[str] = []

    def __call__(self, text: str) -> Pcm:
        self.said.append(text)
        chunks = [c for c in text.replace("，", ",").split(",") if c.strip()]
        if len(chunks) == 1:
            return _tone(0.1 * len(chunks[0].strip()))
        out: list[Pcm] = []
        for i, chunk in enumerate(chunks):
            out.append(_tone(0.09 * len(chunk.strip()), 220.0 + 40 * i))
            if i < len(chunks) - 1:
                out.append(_hush(0.12))
        return np.concatenate(out)


def test_the_join_is_the_quiet_stretch_near_the_prediction() -> None:
    pcm = np.concatenate([_tone(1.0), _hush(0.15), _tone(0.8)])
    start, end = find_join(pcm, predicted_s=1.2)  # predicted 50 ms past the pause's end
    assert abs(start - RATE) <= 0.01 * RATE
    assert abs(end - int(1.15 * RATE)) <= 0.01 * RATE
    # a prediction 0.3 s early (the whole spoken quicker than its parts) still finds it
    assert find_join(pcm, predicted_s=0.75)[0] == start


def test_widen_puts_exactly_the_drawn_silence_in_place_of_the_pause() -> None:
    pcm = np.concatenate([_tone(1.0), _hush(0.15), _tone(0.8, 330.0)])
    start, end = int(1.0 * RATE), int(1.15 * RATE)
    out = widen(pcm, start, end, 0.7)
    assert len(out) == len(pcm) - (end - start) + int(0.7 * RATE)
    assert not np.any(out[start : start + int(0.7 * RATE)])
    tail = pcm[end + 80 :]  # past the 5 ms fade-in
    assert np.array_equal(out[len(out) - len(tail) :], tail)


def test_a_turn_is_spoken_once_and_its_pause_widened_to_the_drawn_length() -> None:
    voice = FakeVoice()
    parts = ["My bill is higher,", "can you tell me why?"]
    audio, gaps, at = render_utterance(
        voice, parts, "en", -10.0, random.Random(1), True, (0.5, 1.0)
    )
    assert voice.said[0] == "My bill is higher, can you tell me why?"  # one call, whole
    assert len(gaps) == 1 and 0.5 <= gaps[0] <= 1.0
    ((start, end),) = at
    assert end - start == pytest.approx(gaps[0], abs=1e-3)
    s, e = round(start * RATE), round(end * RATE)
    assert not np.any(audio[s:e])  # digital silence of the drawn length ...
    assert np.any(audio[s - 200 : s]) and np.any(audio[e : e + 200])  # ... between speech
    # the first part ends where the voice paused: 0.09 s a character, from the lead
    assert start == pytest.approx(LEAD_S + 0.09 * len("My bill is higher"), abs=0.02)
    # the true end is the same speech: only the pause grew
    whole = voice(join_text(parts, "en"))
    _, end_before = true_bounds(np.concatenate([np.zeros(int(LEAD_S * RATE)), whole]))
    _, end_after = true_bounds(audio)
    assert end_after - end_before == pytest.approx(gaps[0] - 0.12, abs=0.02)
    assert len(audio) / RATE - end_after == pytest.approx(LEAD_S, abs=0.02)


def test_without_pauses_the_joins_stay_as_spoken_and_chinese_is_joined_without_space() -> None:
    voice = FakeVoice()
    audio, gaps, at = render_utterance(
        voice, ["我想问一下，", "流量还剩多少？"], "zh", -10.0, random.Random(1), False, (0.5, 1.0)
    )
    assert voice.said == ["我想问一下，流量还剩多少？"]
    assert gaps == [] and at == []
    assert len(audio) == len(voice(voice.said[0])) + 2 * int(LEAD_S * RATE)


def test_parts_are_spoken_alone_with_silence_spliced_between() -> None:
    voice = FakeVoice()
    audio, gaps, at = render_parts(
        voice, ["abc,", "defg"], -10.0, random.Random(2), True, (0.3, 1.0)
    )
    assert voice.said == ["abc,", "defg"]
    ((start, end),) = at
    assert start == pytest.approx(LEAD_S + 0.3, abs=1e-3)
    assert end - start == pytest.approx(gaps[0], abs=1e-3)
    assert len(audio) == pytest.approx((2 * LEAD_S + 0.7 + gaps[0]) * RATE, abs=2)
