"""The VAD stage's fade: relative to the caller's peak, or to the line's noise floor."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rtgate.apps.voice.frames import RATE, AudioFrame, Frame, Pcm
from rtgate.apps.voice.vad import VADStage, level_db
from rtgate.core.errors import InvalidRequest
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
    stage = VADStage(LevelVAD(), twin=LevelVAD(), floor_db=floor_db, lift_max_db=0.0)  # type: ignore[arg-type]
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
    stage = VADStage(a, twin=b, lift_max_db=0.0)  # type: ignore[arg-type]
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


async def test_a_quiet_line_is_lifted_for_silero_alone() -> None:
    # natural10's c15_t0 (validation since session 33): a Piper voice pitched down 170 cents
    # on a phone band, its speech at -33 dBFS; Silero as the line comes heard 0.3 s of its
    # 6.6 s turn, and the agent only its last words. Lifted, all of it, from its onset. The
    # frames passed on are the line's own.
    from rtgate.apps.voice.evalset import line_noise
    from rtgate.apps.voice.frames import SpeechStartFrame, SpeechStopFrame
    from rtgate.apps.voice.labels import true_bounds
    from rtgate.apps.voice.transport import read_wav
    from rtgate.apps.voice.vad import SileroVAD

    def heard(out: list[Frame]) -> float:
        """Seconds of speech the stage found."""
        starts = [f.t for f in out if isinstance(f, SpeechStartFrame)]
        stops = [f.t for f in out if isinstance(f, SpeechStopFrame)]
        return sum(b - a for a, b in zip(starts, stops, strict=False))

    clip = read_wav(Path(__file__).with_name("quiet_piper.wav"))
    onset, end = true_bounds(clip)
    pcm = line_noise(RATE + len(clip) + RATE, -56.0, False, 2)
    pcm[RATE : RATE + len(clip)] += clip
    flat = await through_vad(VADStage(SileroVAD(), twin=SileroVAD(), lift_max_db=0.0), pcm)
    assert heard(flat) < 0.1 * (end - onset)
    lifted = await through_vad(VADStage(SileroVAD(), twin=SileroVAD()), pcm)
    assert heard(lifted) >= 0.8 * (end - onset)
    start = next(f.t for f in lifted if isinstance(f, SpeechStartFrame))
    assert abs(start - 1.0 - onset) <= 0.15
    passed = np.concatenate([f.pcm for f in lifted if isinstance(f, AudioFrame)])
    assert np.array_equal(passed, pcm[: len(passed)])  # the line's own audio goes on


async def test_line_noise_lifted_is_not_speech() -> None:
    from rtgate.apps.voice.evalset import line_noise
    from rtgate.apps.voice.frames import SpeechStartFrame
    from rtgate.apps.voice.vad import SileroVAD

    for db, hum in ((-62.0, False), (-50.0, True), (-40.0, False)):
        stage = VADStage(SileroVAD(), twin=SileroVAD())
        out = await through_vad(stage, line_noise(10 * RATE, db, hum, 5))
        assert not any(isinstance(f, SpeechStartFrame) for f in out), (db, hum)
        assert stage.lift() > 1.0  # the model did hear it lifted


def test_the_lift_is_bounded_and_never_turns_a_line_down() -> None:
    import pytest

    from rtgate.apps.voice.vad import SileroVAD

    stage = VADStage(SileroVAD(), lift_to_db=-10.0, lift_max_db=18.0)
    assert stage.lift() == 1.0  # nothing heard yet
    stage._recent.extend([-60.0, -40.0])
    assert stage.lift() == pytest.approx(10 ** (18 / 20))  # 30 dB short: at most 18
    stage._recent.append(-16.0)
    assert stage.lift() == pytest.approx(10 ** (6 / 20))
    stage._recent.append(-3.0)
    assert stage.lift() == 1.0  # loud: as it comes
    with pytest.raises(InvalidRequest):
        VADStage(SileroVAD(), lift_max_db=-1.0)
