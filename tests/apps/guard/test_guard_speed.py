"""The shaft speed read from a machine's sound (``speed.py``): the rotation's harmonics give
the speed within a percent, through hum, a passing engine's firing and hiss;
the range is the one asked for; bad ranges and short segments are refused."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from rtgate.apps.guard.speed import LOW_RATE, low_band, shaft_hz
from rtgate.core.errors import InvalidRequest

RATE = 16_000
F64 = npt.NDArray[np.float64]


def _machine(fr: float, seconds: float, seed: int, hum_hz: float = 50.0) -> F64:
    """A motor at ``fr`` Hz: its first six harmonics at random levels and phases, hum at
    ``hum_hz``, an engine firing at an unrelated rate, broadband hiss louder than any line."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    x = np.zeros_like(t)
    for k in range(1, 7):
        x += rng.uniform(0.1, 1.0) * 0.6**k * np.sin(2 * np.pi * k * fr * t + rng.uniform(0, 6.3))
    x += 0.3 * np.sin(2 * np.pi * hum_hz * t)
    fire = np.zeros_like(t)
    fire[:: int(RATE / 37.3)] = 1.0  # a diesel's firing, 37.3 Hz
    x += 0.5 * np.convolve(fire, np.exp(-np.arange(200) / 30.0))[: len(t)]
    x += 1.0 * rng.standard_normal(len(t))
    return x


@pytest.mark.parametrize(("fr", "lo", "hi"), [(11.3, 9.0, 14.0), (71.7, 64.0, 98.0)])
def test_the_speed_is_read_within_a_percent(fr: float, lo: float, hi: float) -> None:
    low = low_band(_machine(fr, 1.28, seed=3), RATE)
    assert len(low) == pytest.approx(1.28 * LOW_RATE, abs=2)
    assert shaft_hz(low, lo, hi) == pytest.approx(fr, rel=0.01)


def test_the_answer_stays_in_the_range_asked_for() -> None:
    """A range that misses the true speed answers inside it (the clause's range is the
    station's, given at enrolment), never the true speed outside it."""
    low = low_band(_machine(11.3, 1.28, seed=4), RATE)
    got = shaft_hz(low, 12.0, 15.0)
    assert 12.0 <= got <= 15.0


def test_a_faster_machine_is_read_faster() -> None:
    """4 % faster, on five machines: read faster on every one, by 4 % in the median (one
    1.28 s segment of a 10 Hz shaft is 13 turns: a single estimate may be 2 % off)."""
    ratios = []
    for seed in range(3, 8):
        a = shaft_hz(low_band(_machine(10.0, 1.28, seed=seed), RATE), 9.0, 14.0)
        b = shaft_hz(low_band(_machine(10.4, 1.28, seed=seed), RATE), 9.0, 14.0)
        ratios.append(b / a)
    assert min(ratios) > 1.0
    assert float(np.median(ratios)) == pytest.approx(1.04, rel=0.01)


@pytest.mark.parametrize(("lo", "hi"), [(0.0, 10.0), (12.0, 11.0), (50.0, 200.0)])
def test_a_bad_range_is_refused(lo: float, hi: float) -> None:
    low = low_band(_machine(11.3, 1.28, seed=6), RATE)
    with pytest.raises(InvalidRequest, match="shaft range"):
        shaft_hz(low, lo, hi)


def test_a_short_segment_or_a_low_rate_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="needs"):
        shaft_hz(np.zeros(200), 9.0, 14.0)
    with pytest.raises(InvalidRequest, match="mono"):
        low_band(np.zeros(1000), 1000)
