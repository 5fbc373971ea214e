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
