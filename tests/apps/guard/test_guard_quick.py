"""The quick clause (``Rule.quick``, enrolment format /12; Session 38): the persist clause's
steady rise (``steady.py``) over the last ``QUICK_WINDOWS`` windows instead of 31, with its
own scale, so that a defect ringing the high bands in nearly every window stops in tens of
milliseconds rather than after the longer median fills, while a knock in one window does not."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from rtgate.apps.guard.baseline import (
    FORMAT_QUICK,
    FORMAT_STRONG,
    PERSIST_BAR,
    PERSIST_FLOOR,
    PERSIST_MID,
    PERSIST_MID_VETO,
    QUICK_BAR,
    QUICK_LOW_VETO,
    QUICK_WARMUP,
    QUICK_WINDOWS,
    SLOW_HIGH,
    SLOW_LOW,
    Baselines,
    Enrolment,
)
from rtgate.apps.guard.enrol import steady_range
from rtgate.apps.guard.features import CREST_BANDS, HOP, N_FEATURES, N_SUB, RATE
from rtgate.apps.guard.lines import HOLD, WINDOWS, LinesProfile
from rtgate.apps.guard.rules import Rule
from rtgate.apps.guard.steady import Steady
from rtgate.core.errors import ConfigError, InvalidRequest

from .test_guard_persist import _hits  # each window's own hit of station 0

HIGH = np.arange(N_FEATURES)[SLOW_HIGH]
MID = np.arange(N_FEATURES)[PERSIST_MID]
LOW = np.arange(N_FEATURES)[SLOW_LOW]
FULL = QUICK_WARMUP  # windows after a reset before the first possible hit


def _held_lines() -> LinesProfile:
    bins = np.fft.rfftfreq(WINDOWS * N_SUB, 1 / (RATE / (HOP // N_SUB)))
    zeros = np.zeros((len(CREST_BANDS), len(bins)), np.float32)
    return LinesProfile(zeros, 0.0, 8, zeros, 0.0, 8, HOLD)


def _enrolment(station: str = "C", scale: float = 1.0, quick: bool = True) -> Enrolment:
    """A station whose normal is 0 with a spread of 1 in every feature and whose medians
    reached ``scale`` at most while enrolled (``quick``: format /12, else /9)."""
    mean = np.zeros(N_FEATURES, np.float32)
    sd = np.ones(N_FEATURES, np.float32)
    cal = {"max": -2.0, "p999": -3.0, "p99": -4.0, "p50": -6.0, "windows": 1500.0}
    sc = np.full(N_FEATURES, scale, np.float32)
    e = Enrolment(station, mean, sd, 3.0, 1.5, {}, {}, "", {}, cal, None, sc, 0.05, sc.copy())
    e = replace(e, lines=_held_lines())
    return replace(e, quick_scale=sc.copy()) if quick else e


def _window(high: float = 0.0, low: float = 0.0, mid: float = 0.0) -> np.ndarray:
    f = np.zeros((1, N_FEATURES), np.float32)
    f[0, HIGH] = high
    f[0, LOW] = low
    f[0, MID] = mid
    return f


def _calm(n: int) -> list[np.ndarray]:
    return [_window() for _ in range(n)]


def test_a_rise_in_most_windows_is_a_hit_within_the_short_ring_after_the_warm_up() -> None:
    base = Baselines([_enrolment()], quick=[QUICK_BAR])
    assert base.quick_clause and not base.persist_clause and base.novelty_clause
    rise = [_window(high=2 * QUICK_BAR)] * 6
    hits = _hits(base, _calm(FULL) + rise)
    half = QUICK_WINDOWS // 2 + 1
    assert hits.index(True) == FULL + half - 1 and all(hits[FULL + half - 1 :])
    assert float(base.last_quick[0]) == pytest.approx(2 * QUICK_BAR)
    # the persist clause at its own bar needs 16 windows of the same rise
    slow = Baselines([_enrolment()], persist=[PERSIST_BAR])
    later = _hits(slow, _calm(FULL) + [_window(high=2 * PERSIST_BAR)] * 20)
    assert later.index(True) > hits.index(True) + 10


def test_no_hit_before_the_low_bands_veto_can_see_anything() -> None:
    """A run starts: the low bands' slow average is 0 and vetoes nothing for ~20 windows, so
    a rise from the first window is held back for the warm-up; a reset starts it again."""
    base = Baselines([_enrolment()], quick=[QUICK_BAR])
    hits = _hits(base, [_window(high=2 * QUICK_BAR)] * (FULL + 5))
    assert hits.index(True) == FULL - 1 and not any(hits[: FULL - 1])
    base.reset()
    assert not any(_hits(base, [_window(high=2 * QUICK_BAR)] * (FULL - 1)))


def test_a_knock_in_one_window_of_three_is_not_a_hit_two_in_three_are() -> None:
    base = Baselines([_enrolment()], quick=[QUICK_BAR])
    knocks = [_window(high=50 * QUICK_BAR) if t % 3 == 0 else _window() for t in range(90)]
    assert not any(_hits(base, _calm(FULL) + knocks))
    assert float(base.last_quick.max()) == 0.0
    base.reset()
    two = [_window(high=2 * QUICK_BAR) if t % 3 else _window() for t in range(30)]
    assert any(_hits(base, _calm(FULL) + two))


def test_a_rise_with_the_low_bands_or_across_the_mid_bands_is_vetoed() -> None:
    base = Baselines([_enrolment()], quick=[QUICK_BAR])
    vehicle = [_window(high=2 * QUICK_BAR, low=2 * QUICK_LOW_VETO)] * 80
    assert not any(_hits(base, _calm(FULL) + vehicle))  # from its first window on
    assert float(base.last_quick[0]) > QUICK_BAR  # the statistic itself is over the bar
    base.reset()
    hiss = [_window(high=2 * QUICK_BAR, mid=2 * PERSIST_MID_VETO)] * 30
    assert not any(_hits(base, _calm(FULL) + hiss))
    base.reset()
    bearing = [_window(high=2 * QUICK_BAR, mid=0.5 * PERSIST_MID_VETO)] * 30
    assert any(_hits(base, _calm(FULL) + bearing))


def test_the_clause_is_off_without_the_rule_or_a_format_12_file() -> None:
    rise = _calm(FULL) + [_window(high=10 * QUICK_BAR)] * 10
    off = Baselines([_enrolment()], quick=[0.0])
    assert not off.quick_clause and not any(_hits(off, rise))
    old = Baselines([_enrolment(quick=False)], quick=[QUICK_BAR])  # format /9
    assert not old.quick_clause and not any(_hits(old, rise))
    assert not Baselines([None], quick=[QUICK_BAR]).quick_clause
    with pytest.raises(InvalidRequest, match="quick bars"):
        Baselines([_enrolment()], quick=[QUICK_BAR, QUICK_BAR])


def test_a_subset_of_stations_gives_what_the_whole_batch_gives() -> None:
    rng = np.random.default_rng(38)
    ens = [_enrolment("A"), None, _enrolment("C", 2.0), _enrolment("D", quick=False)]
    bars = [QUICK_BAR] * 4
    whole = Baselines(ens, persist=[PERSIST_BAR] * 4, quick=bars)
    parts = Baselines(ens, persist=[PERSIST_BAR] * 4, quick=bars)
    for t in range(120):
        f = rng.normal(0, 1, (4, N_FEATURES)).astype(np.float32)
        f[:, HIGH] += 0.1 * t
        p = rng.uniform(0, 1, 4).astype(np.float32)
        a = whole.adjust(f, p)
        b0 = parts.adjust(f[[0, 2]], p[[0, 2]], [0, 2])
        b1 = parts.adjust(f[[1, 3]], p[[1, 3]], [1, 3])
        np.testing.assert_allclose(a[[0, 2]], b0, rtol=1e-5)
        np.testing.assert_allclose(a[[1, 3]], b1, rtol=1e-5)
        np.testing.assert_array_equal(whole.last_novel[[0, 2]], parts.last_novel[[0, 2]])
        np.testing.assert_allclose(whole.last_quick, parts.last_quick, rtol=1e-5)
    assert whole.last_novel[0] and whole.last_novel[2] and float(whole.last_quick[3]) == 0.0


def test_the_quick_range_is_the_recordings_highest_short_median() -> None:
    from rtgate.apps.guard.enrol import Recording

    rng = np.random.default_rng(5)
    f = rng.normal(0, 1, (400, N_FEATURES)).astype(np.float32)
    rec = Recording(f, np.zeros(400, np.float32), [(0, 250), (250, 400)], [], 0.1)
    mean, sd = np.zeros(N_FEATURES, np.float32), np.ones(N_FEATURES, np.float32)
    got = steady_range(rec, mean, sd, QUICK_WINDOWS)
    want = np.full(N_FEATURES, -np.inf)
    for a, b in rec.segments:  # every full ring inside one segment
        for t in range(a, b - QUICK_WINDOWS + 1):
            want = np.maximum(want, np.median(f[t : t + QUICK_WINDOWS], axis=0))
    assert got is not None
    np.testing.assert_allclose(got, np.maximum(want, PERSIST_FLOOR), rtol=1e-6)


def test_format_12_round_trips_and_older_files_load_without_the_clause() -> None:
    e = _enrolment(scale=1.5)
    doc = json.loads(e.to_json())
    assert doc["format"] == FORMAT_QUICK and doc["model"]["quick"]["windows"] == QUICK_WINDOWS
    back = Enrolment.from_json(e.to_json())
    assert back.quick_scale is not None and back.id == e.id
    np.testing.assert_array_equal(back.quick_scale, e.quick_scale)
    assert back.summary()["quick_range"] is True
    older = _enrolment(scale=1.5, quick=False)
    assert older.id != e.id and "quick_range" not in older.summary()
    assert Enrolment.from_json(older.to_json()).quick_scale is None
    other = dict(doc, model={**doc["model"], "quick": {"windows": 5, "scale": [1.0] * 46}})
    with pytest.raises(ConfigError, match="over 5 windows"):
        Enrolment.from_json(json.dumps(other))
    gone = dict(doc, model={k: v for k, v in doc["model"].items() if k != "quick"})
    with pytest.raises(ConfigError, match="needs a quick median range"):
        Enrolment.from_json(json.dumps(gone))
    with pytest.raises(ConfigError, match="quick range needs"):
        replace(e, quick_scale=np.zeros(N_FEATURES, np.float32))
    with pytest.raises(ConfigError, match="held envelope lines"):
        replace(e, lines=None, quick_scale=e.quick_scale)
    assert FORMAT_STRONG != FORMAT_QUICK


def test_the_rule_checks_its_quick_bar_and_names_the_clause() -> None:
    assert Rule().quick == QUICK_BAR
    with pytest.raises(ConfigError, match="quick must be"):
        Rule(quick=0.5)
    text = Rule().describe(novel=True, persist=True, quick=True)
    assert f"60 ms median>={QUICK_BAR:g}x own max" in text
    assert "60 ms" not in Rule(quick=0).describe(novel=True, quick=True)


def test_the_steady_rise_refuses_what_it_cannot_compute() -> None:
    one = np.ones((1, 5), np.float32)
    mid = np.ones((1, 5), np.float32)
    with pytest.raises(InvalidRequest, match="odd number"):
        Steady(4, 1, 3.0, np.ones(1, np.float32), one, mid)
    with pytest.raises(InvalidRequest, match="hold"):
        Steady(3, 0, 3.0, np.ones(1, np.float32), one, mid)
    with pytest.raises(InvalidRequest, match="scale per station"):
        Steady(3, 2, 3.0, np.ones(2, np.float32), one, mid)
