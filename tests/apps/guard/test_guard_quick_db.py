"""The quick clause in decibels (``Rule.quick_db``, the /12 range; Session 39): the quick
clause's 3-window median of each high band, in decibels over the highest it reached on the
healthy recording, so that every band must rise the same decibels whatever its healthy
spread, with the low bands' short median as its veto (in decibels too) and no mid veto."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from rtgate.apps.guard.baseline import (
    DB,
    QUICK_BAR,
    QUICK_DB_BAR,
    QUICK_DB_LOW_VETO,
    QUICK_WARMUP,
    QUICK_WINDOWS,
    SLOW_HIGH,
    Baselines,
    Enrolment,
)
from rtgate.apps.guard.features import N_FEATURES
from rtgate.apps.guard.rules import Rule, Rules
from rtgate.apps.guard.steady import Steady
from rtgate.core.errors import ConfigError, InvalidRequest

from .test_guard_persist import _hits
from .test_guard_quick import HIGH, LOW, MID, _calm, _enrolment, _window

FULL = QUICK_WARMUP


def _spread(sd_high: float, scale: float = 1.0, station: str = "C") -> Enrolment:
    """A station as ``test_guard_quick._enrolment`` whose high bands' spread is ``sd_high``
    (natural log) and whose medians reached ``scale`` at most."""
    e = _enrolment(station, scale)
    sd = e.sd.copy()
    sd[HIGH] = sd_high
    return replace(e, sd=sd)


def _z_for_db(db: float, sd: float, scale: float = 1.0) -> float:
    """The ``z`` (the features here are ``z * sd``: their mean is 0) of a band standing
    ``db`` decibels over its own highest median."""
    return scale + db / (DB * sd)


def _rise(db: float, sd: float, n: int = 8, scale: float = 1.0, **other: float) -> list[np.ndarray]:
    return [_window(high=_z_for_db(db, sd, scale) * sd, **other)] * n


def test_a_rise_of_the_bar_in_decibels_is_a_hit_and_just_under_it_is_not() -> None:
    base = Baselines([_spread(0.5)], quick_db=[QUICK_DB_BAR])
    assert base.quick_db_clause and not base.quick_clause
    hits = _hits(base, _calm(FULL) + _rise(QUICK_DB_BAR + 0.5, 0.5))
    assert hits.index(True) == FULL + QUICK_WINDOWS // 2
    assert float(base.last_quick_db[0]) == pytest.approx(QUICK_DB_BAR + 0.5, abs=1e-3)
    base.reset()
    assert not any(_hits(base, _calm(FULL) + _rise(QUICK_DB_BAR - 0.5, 0.5, 40)))
    assert float(base.last_quick_db[0]) == pytest.approx(QUICK_DB_BAR - 0.5, abs=1e-3)


def test_the_same_decibels_are_asked_of_a_quiet_band_and_of_a_wandering_one() -> None:
    """The ratio clause asks a band with a wide healthy spread to rise many more decibels:
    14 dB is 11 times the own range of a band of spread 0.3 and 2.6 times that of one of
    spread 2; the decibels clause stops both, the ratio clause at 3 only the quiet one."""
    ens = [_spread(0.3, station="quiet"), _spread(2.0, station="wide")]
    for sd, i in ((0.3, 0), (2.0, 1)):
        db = Baselines(ens, quick_db=[QUICK_DB_BAR] * 2)
        ratio = Baselines(ens, quick=[QUICK_BAR] * 2)
        windows = [np.repeat(w, 2, axis=0) for w in _calm(FULL) + _rise(14.0, sd)]
        for base in (db, ratio):
            for f in windows:
                base.adjust(f, np.full(2, 0.01, np.float32))
        assert bool(db.last_novel[i])
        assert bool(ratio.last_novel[i]) is (sd == 0.3)


def test_a_rise_of_the_low_bands_vetoes_in_decibels_and_the_mid_bands_do_not() -> None:
    base = Baselines([_spread(0.5)], quick_db=[QUICK_DB_BAR])
    # the low bands' spread is 1 and their own highest median is the scale, 1
    vehicle = _rise(20.0, 0.5, 60, low=_z_for_db(QUICK_DB_LOW_VETO + 0.5, 1.0))
    assert not any(_hits(base, _calm(FULL) + vehicle))
    assert float(base.last_quick_db[0]) > QUICK_DB_BAR  # the statistic itself is over
    base.reset()
    quiet_low = _rise(20.0, 0.5, 30, low=_z_for_db(QUICK_DB_LOW_VETO - 1.0, 1.0))
    assert any(_hits(base, _calm(FULL) + quiet_low))
    base.reset()
    mid = _rise(20.0, 0.5, 30, mid=50.0)
    assert any(_hits(base, _calm(FULL) + mid))


def test_the_warm_up_and_a_knock_in_one_window_of_three_hold_as_for_the_ratio() -> None:
    base = Baselines([_spread(0.5)], quick_db=[QUICK_DB_BAR])
    assert not any(_hits(base, _rise(40.0, 0.5, FULL - 1)))
    base.reset()
    loud = _rise(40.0, 0.5, 1)[0]
    knocks = [loud if t % 3 == 0 else _window() for t in range(90)]
    assert not any(_hits(base, _calm(FULL) + knocks))


def test_the_statistic_is_the_second_highest_band_median_in_decibels_over_its_own() -> None:
    rng = np.random.default_rng(39)
    sd = rng.uniform(0.3, 2.0, N_FEATURES).astype(np.float32)
    scale = rng.uniform(0.5, 3.0, N_FEATURES).astype(np.float32)
    e = replace(_enrolment(), sd=sd, quick_scale=scale)
    base = Baselines([e], quick_db=[QUICK_DB_BAR])
    f = rng.normal(0, 2, (30, N_FEATURES)).astype(np.float32)
    for t in range(len(f)):
        base.adjust(f[t : t + 1], np.full(1, 0.01, np.float32))
        if t >= QUICK_WINDOWS - 1:
            z = f[t - QUICK_WINDOWS + 1 : t + 1, HIGH] / sd[HIGH]
            over = (np.median(z, axis=0) - scale[HIGH]) * sd[HIGH] * DB
            want = np.sort(over)[-2]
            assert float(base.last_quick_db[0]) == pytest.approx(want, rel=1e-4, abs=1e-3)


def test_a_subset_of_stations_gives_what_the_whole_batch_gives() -> None:
    rng = np.random.default_rng(7)
    ens = [_spread(0.5, station="A"), None, _spread(1.5, station="C")]
    whole = Baselines(ens, quick_db=[QUICK_DB_BAR] * 3)
    parts = Baselines(ens, quick_db=[QUICK_DB_BAR] * 3)
    for t in range(80):
        f = rng.normal(0, 0.3, (3, N_FEATURES)).astype(np.float32)
        f[:, HIGH] += 0.2 * max(0, t - FULL)
        p = rng.uniform(0, 1, 3).astype(np.float32)
        whole.adjust(f, p)
        parts.adjust(f[[0, 2]], p[[0, 2]], [0, 2])
        parts.adjust(f[[1]], p[[1]], [1])
        np.testing.assert_array_equal(whole.last_novel, parts.last_novel)
        np.testing.assert_allclose(whole.last_quick_db, parts.last_quick_db, rtol=1e-5, atol=1e-4)
    assert whole.last_novel[0] and whole.last_novel[2] and not whole.last_novel[1]


def test_off_without_the_rule_or_the_range() -> None:
    rise = _calm(FULL) + _rise(40.0, 0.5, 10)
    off = Baselines([_spread(0.5)], quick_db=[0.0])
    assert not off.quick_db_clause and not any(_hits(off, rise))
    old = Baselines([replace(_spread(0.5), quick_scale=None)], quick_db=[QUICK_DB_BAR])
    assert not old.quick_db_clause and not any(_hits(old, rise))
    with pytest.raises(InvalidRequest, match="quick_db bars"):
        Baselines([_spread(0.5)], quick_db=[QUICK_DB_BAR] * 2)


def test_the_rule_checks_its_decibels_and_names_the_clause() -> None:
    assert Rule().quick_db == QUICK_DB_BAR
    for bad in (0.5, 101.0, "12"):
        with pytest.raises(ConfigError, match="quick_db must be"):
            Rule(quick_db=bad)  # type: ignore[arg-type]
    text = Rule().describe(novel=True, quick=True, quick_db=True)
    assert f"60 ms median>=own max+{QUICK_DB_BAR:g} dB" in text
    assert " dB" not in Rule(quick_db=0).describe(novel=True, quick_db=True)
    parsed = Rules.parse({"quick_db": 10.0, "stations": {"C": {"quick_db": 0}}})
    assert parsed.default.quick_db == 10.0 and parsed.for_station("C").quick_db == 0
    with pytest.raises(ConfigError, match="quick_db must be"):
        Rules.parse({"quick_db": 200})


def test_the_steady_rise_refuses_biases_of_another_shape() -> None:
    one = np.ones((1, 5), np.float32)
    with pytest.raises(InvalidRequest, match="biases"):
        Steady(3, 2, 3.0, np.ones(1, np.float32), one, one, high_bias=np.ones((1, 4), np.float32))
    with pytest.raises(InvalidRequest, match="biases"):
        Steady(3, 2, 3.0, np.ones(1, np.float32), one, one, low_bias=np.ones((1, 5), np.float32))
    assert SLOW_HIGH.stop - SLOW_HIGH.start == 5 and len(MID) == 5 and len(LOW) == 30
    no_low = Steady(3, 2, 3.0, np.ones(1, np.float32), one, one)
    with pytest.raises(InvalidRequest, match="ring of the low bands"):
        no_low.read_also(np.ones(1, np.float32), one, one, low_inv=np.ones((1, 30), np.float32))
    with pytest.raises(InvalidRequest, match="a gain per high band"):
        no_low.read_also(np.ones(1, np.float32), np.ones((1, 4), np.float32), one)


def test_the_decibels_read_the_quick_clauses_ring_and_hold() -> None:
    """One ring, two readings: the decibels hit where the ratio is off, and both clauses on
    give the hits of either."""
    both = Baselines([_spread(2.0)], quick=[QUICK_BAR], quick_db=[QUICK_DB_BAR])
    assert both.quick_clause and both.quick_db_clause
    db_rise = _calm(FULL) + _rise(QUICK_DB_BAR + 2.0, 2.0, 10)  # z 1 + 10 / 8.7: under 3x
    hits = _hits(both, db_rise)
    assert any(hits) and float(both.last_quick[0]) < QUICK_BAR
    ratio_only = Baselines([_spread(2.0)], quick=[QUICK_BAR])
    assert not any(_hits(ratio_only, db_rise))
