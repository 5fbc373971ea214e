"""The VAD stage's fade: relative to the caller's peak, or to the line's noise floor."""

from __future__ import annotations

import numpy as np

from rtgate.apps.voice.frames import RATE, AudioFrame, Pcm
from rtgate.apps.voice.vad import VADStage, level_db
from tests.apps.voice.voice_helpers import through_vad


class LevelVAD:
    """Speech wherever the window is louder than -45 dBFS (no model)."""

    def reset(self) -> None:
        pass

    def prob(self, chunk: Pcm) -> float:
        return 0.95 if level_db(chunk) > -45.0 else 0.02


def tone(seconds: float, db: float, seed: int) -> Pcm:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(int(seconds * RATE))
    out: Pcm = (x / np.sqrt(np.mean(x**2)) * 10 ** (db / 20)).astype(np.float32)
    return out


async def faded_after_speech(noise_db: float, floor_db: float | None) -> list[bool]:
    """``faded`` of the steps in the 0.5 s of line noise after 1 s of speech at -30 dBFS."""
    pcm = np.concatenate([tone(1.0, noise_db, 1), tone(1.0, -30.0, 2), tone(0.5, noise_db, 3)])
    stage = VADStage(LevelVAD(), twin=LevelVAD(), floor_db=floor_db)  # type: ignore[arg-type]
    out = await through_vad(stage, pcm)
    return [f.faded for f in out if isinstance(f, AudioFrame) and f.t >= 2.05]


async def test_a_quiet_caller_on_a_noisy_line_fades_at_the_noise_floor() -> None:
    # 25 dB over the noise: never 30 dB under the peak, but back at the floor
    assert all(await faded_after_speech(-55.0, floor_db=8.0))
    assert not any(await faded_after_speech(-55.0, floor_db=None))  # the peak alone


async def test_a_clean_line_fades_by_the_peak_and_a_loud_noise_never() -> None:
    assert all(await faded_after_speech(-80.0, floor_db=8.0))  # 50 dB under: the peak rule
    # noise 16 dB under the speech: too close to trust the floor, nothing fades
    assert not any(await faded_after_speech(-46.0, floor_db=8.0))


class CountingVAD(LevelVAD):
    """``LevelVAD`` that counts its fresh starts."""

    def __init__(self) -> None:
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1


async def test_silero_starts_afresh_after_two_seconds_without_speech_only() -> None:
    a, b = CountingVAD(), CountingVAD()
    stage = VADStage(a, twin=b)  # type: ignore[arg-type]
    # 5 s of line noise, speech with a 1 s pause inside it, 1.5 s of noise
    pcm = np.concatenate([tone(5.0, -60.0, 1), tone(1.0, -30.0, 2), tone(1.0, -60.0, 3),
                          tone(1.0, -30.0, 4), tone(1.5, -60.0, 5)])  # fmt: skip
    await through_vad(stage, pcm)
    assert stage.resets == 2  # at 2 and 4 s of the noise; not in the pause, not after
    assert a.resets == b.resets == 1 + 2  # the new call's reset, then both streams each time


async def test_a_quiet_caller_is_heard_after_a_long_quiet_line() -> None:
    # Silero's state drifts over a long stretch without speech: after 11 s of line noise
    # it heard these clips (20 dB down) 0.11-0.13 s after their onset; afresh, at once
    from rtgate.apps.voice.bench import load_clips
    from rtgate.apps.voice.evalset import line_noise
    from rtgate.apps.voice.frames import SpeechStartFrame
    from rtgate.apps.voice.vad import SileroVAD

    clips = load_clips()
    late = []
    for name in ("zh_plan", "zh_signal", "zh_head", "zh_bargein"):
        clip = clips[name]
        lead = 11 * RATE
        pcm = line_noise(lead + len(clip.pcm), -50.0, False, 1)
        pcm[lead:] += clip.pcm * 0.1
        out = await through_vad(VADStage(SileroVAD(), twin=SileroVAD()), pcm)
        start = next(f.t for f in out if isinstance(f, SpeechStartFrame))
        late.append(start - 11.0 - clip.onset)
    assert max(late) <= 0.05, late
