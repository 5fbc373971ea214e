"""The real VAD and ASR on the packaged caller clips."""

from __future__ import annotations

import numpy as np
import pytest

from rtgate.apps.voice.asr import WhisperASR
from rtgate.apps.voice.bench import Clip
from rtgate.apps.voice.frames import (
    RATE,
    AudioFrame,
    EndFrame,
    Frame,
    SpeechStartFrame,
    SpeechStopFrame,
)
from rtgate.apps.voice.pipeline import Pipeline
from rtgate.apps.voice.vad import CHUNK, SileroVAD, SpeechTracker, VADStage
from rtgate.core.errors import InvalidRequest
from tests.apps.voice.voice_helpers import through_vad


def _events(pcm: np.ndarray) -> tuple[list[float], list[SpeechStartFrame | SpeechStopFrame]]:
    vad, tracker = SileroVAD(), SpeechTracker()
    probs: list[float] = []
    events: list[SpeechStartFrame | SpeechStopFrame] = []
    for i in range(0, len(pcm) - CHUNK + 1, CHUNK):
        p = vad.prob(pcm[i : i + CHUNK])
        probs.append(p)
        ev = tracker.update(i / RATE, p)
        if ev is not None:
            events.append(ev)
    return probs, events


@pytest.mark.slow
def test_vad_finds_speech_in_a_clip_and_none_in_silence(clips: dict[str, Clip]) -> None:
    clip = clips["zh_balance"]
    pcm = np.concatenate([np.zeros(RATE // 2, np.float32), clip.pcm, np.zeros(RATE, np.float32)])
    probs, events = _events(pcm)
    assert isinstance(events[0], SpeechStartFrame)
    assert events[0].t == pytest.approx(0.5 + clip.onset, abs=0.1)
    assert isinstance(events[-1], SpeechStopFrame)
    assert events[-1].t == pytest.approx(0.5 + clip.end, abs=0.15)
    silent_probs, silent_events = _events(np.zeros(2 * RATE, np.float32))
    assert max(silent_probs) < 0.1 and not silent_events
    assert max(probs) > 0.9


def test_vad_rejects_a_wrong_chunk_size() -> None:
    with pytest.raises(InvalidRequest):
        SileroVAD().prob(np.zeros(100, np.float32))


@pytest.mark.slow
def test_asr_transcribes_a_chinese_fixture_in_simplified(
    asr: WhisperASR, clips: dict[str, Clip]
) -> None:
    tr = asr.transcribe(clips["zh_hours"].pcm, "zh")
    assert tr.lang == "zh"
    assert "几点" in tr.text and "關" not in tr.text  # Simplified, not Traditional
    en = asr.transcribe(clips["en_balance"].pcm, None)  # language detected
    assert en.lang == "en" and "balance" in en.text.lower()


@pytest.mark.slow
async def test_vad_stage_with_a_twin_scores_every_16_ms(clips: dict[str, Clip]) -> None:
    clip = clips["en_plan"]
    pcm = np.concatenate([np.zeros(RATE // 2, np.float32), clip.pcm, np.zeros(RATE, np.float32)])
    out = await through_vad(VADStage(SileroVAD(), twin=SileroVAD()), pcm)
    starts = [f for f in out if isinstance(f, SpeechStartFrame)]
    single = _events(pcm)[1][0]
    assert starts and starts[0].t <= single.t + 1e-6  # never later than one stream alone
    assert starts[0].t == pytest.approx(0.5 + clip.onset, abs=0.08)


@pytest.mark.slow
async def test_the_level_fades_before_the_probability_falls(clips: dict[str, Clip]) -> None:
    for name in ("en_bargein", "zh_hours"):
        clip = clips[name]
        pcm = np.concatenate(
            [np.zeros(RATE // 2, np.float32), clip.pcm, np.zeros(RATE, np.float32)]
        )
        out: list[Frame] = []
        async with Pipeline([VADStage(SileroVAD(), twin=SileroVAD())], sink=out.append) as p:
            await p.put(AudioFrame(pcm=pcm, t=0.0))
            await p.put(EndFrame())
            await p.wait()
        audio = [f for f in out if isinstance(f, AudioFrame)]
        end = 0.5 + clip.end
        during = [f for f in audio if 0.5 + clip.onset + 0.1 < f.end < end - 0.1]
        assert sum(f.faded for f in during) < 0.4 * len(during)  # speech is mostly loud
        fade = next(f.t for f in audio if f.t > end - 0.1 and f.faded and f.prob)
        quiet = next(f.t for f in audio if f.t > end - 0.1 and f.prob is not None and f.prob < 0.5)
        assert fade <= end + 0.05  # within a few frames of the true end
        assert quiet - fade >= 0.032, (name, fade, quiet)  # the probability comes later
