"""The slow clause (``Rule.slow``, enrolment format /5; Session 13): a faint fault that persists
moves the high bands' slow average past anything the healthy recording did, while one loud
window does not, and a rise of the low bands too (something else going on) vetoes it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from rtgate.apps.guard.baseline import (
    FORMAT,
    FORMAT_SLOW,
    SLOW_ALPHA,
    SLOW_BAR,
    SLOW_FLOOR,
    SLOW_HIGH,
    SLOW_LOW,
    SLOW_VETO,
    Baselines,
    Enrolment,
    EnrolmentStore,
)
from rtgate.apps.guard.enrol import slow_range
from rtgate.apps.guard.features import N_FEATURES
from rtgate.apps.guard.rules import Rule, RuleEngine, Rules
from rtgate.core.errors import ConfigError

HIGH = np.arange(N_FEATURES)[SLOW_HIGH]
LOW = np.arange(N_FEATURES)[SLOW_LOW]


def _enrolment(station: str = "C", scale: float = 1.0, slow: bool = True) -> Enrolment:
    """A station whose normal is 0 with a spread of 1 in every feature, and whose slow
    average reached ``scale`` at most while it was enrolled."""
    mean = np.zeros(N_FEATURES, np.float32)
    sd = np.ones(N_FEATURES, np.float32)
    cal = {"max": -2.0, "p999": -3.0, "p99": -4.0, "p50": -6.0, "windows": 1500.0}
    sc = np.full(N_FEATURES, scale, np.float32) if slow else None
    return Enrolment(station, mean, sd, 3.0, 1.5, {}, {}, "", {}, cal, None, sc)


def _window(high: float = 0.0, low: float = 0.0) -> np.ndarray:
    f = np.zeros((1, N_FEATURES), np.float32)
    f[0, HIGH] = high
    f[0, LOW] = low
    return f


def _hits(base: Baselines, windows: list[np.ndarray]) -> list[bool]:
    out = []
    for f in windows:
        base.adjust(f, np.full(len(f), 0.01, np.float32))
        out.append(bool(base.last_novel[0]))
    return out


def test_a_persistent_rise_of_the_high_bands_is_a_hit_after_the_average_reaches_the_bar() -> None:
    base = Baselines([_enrolment()], slow=[SLOW_BAR])
    assert base.slow_clause and base.novelty_clause
    hits = _hits(base, [_window(high=2 * SLOW_BAR)] * 40)
    # the average of a step of 2 x the bar reaches the bar when 1 - (1 - a)^k >= 1/2
    first = int(np.ceil(np.log(0.5) / np.log(1 - SLOW_ALPHA)))
    assert hits.index(True) == first - 1 and all(hits[first - 1 :])
    assert abs(float(base.last_slow[0]) - 2 * SLOW_BAR * (1 - (1 - SLOW_ALPHA) ** 40)) < 1e-3


def test_one_loud_window_and_a_rise_everywhere_are_not_hits() -> None:
    base = Baselines([_enrolment()], slow=[SLOW_BAR])
    spike = [_window(high=10 * SLOW_BAR)] + [_window()] * 10
    assert not any(_hits(base, spike))  # the average of one window is a twentieth of it
    base.reset()
    # the same persistent rise of the high bands with the low bands up too: vetoed
    both = [_window(high=2 * SLOW_BAR, low=4 * SLOW_VETO)] * 60
    assert not any(_hits(base, both))
    assert float(base.last_slow[0]) > SLOW_BAR  # the statistic itself is over the bar
    base.reset()
    # the low bands a little over their own range (under the veto) do not veto it
    assert any(_hits(base, [_window(high=2 * SLOW_BAR, low=0.5 * SLOW_VETO)] * 60))


def test_the_clause_is_off_without_the_rule_or_without_a_slow_range() -> None:
    rise = [_window(high=10 * SLOW_BAR)] * 60
    off = Baselines([_enrolment()])  # the rule's default: slow = 0
    assert not off.slow_clause and not any(_hits(off, rise))
    old = Baselines([_enrolment(slow=False)], slow=[SLOW_BAR])  # a file of format /3
    assert not old.slow_clause and not any(_hits(old, rise))
    none = Baselines([None], slow=[SLOW_BAR])
    assert not none.slow_clause
    assert float(np.isinf(Baselines([_enrolment(), None], slow=[0, 4]).slow_threshold).sum()) == 2


def test_a_subset_of_stations_gives_what_the_whole_batch_gives() -> None:
    rng = np.random.default_rng(13)
    ens = [_enrolment("A"), None, _enrolment("C", 2.0), _enrolment("D", slow=False)]
    whole, parts = Baselines(ens, slow=[SLOW_BAR] * 4), Baselines(ens, slow=[SLOW_BAR] * 4)
    for t in range(120):
        f = rng.normal(0, 1, (4, N_FEATURES)).astype(np.float32)
        f[:, HIGH] += 0.2 * t
        p = rng.uniform(0, 1, 4).astype(np.float32)
        whole.adjust(f, p)
        parts.adjust(f[[0, 2]], p[[0, 2]], [0, 2])
        parts.adjust(f[[1, 3]], p[[1, 3]], [1, 3])
        np.testing.assert_allclose(whole.last_slow, parts.last_slow, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(whole.last_novel, parts.last_novel)
    assert whole.last_novel[0] and whole.last_novel[2] and not whole.last_novel[3]


def test_a_format_5_file_round_trips_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    e = _enrolment(scale=1.7)
    store = EnrolmentStore(tmp_path)
    path = store.save(e)
    doc = json.loads(path.read_text())
    assert doc["format"] == FORMAT_SLOW and doc["model"]["slow"]["alpha"] == SLOW_ALPHA
    back = store.load("C")
    assert back is not None and back.id == e.id
    assert back.slow_scale is not None and e.slow_scale is not None
    assert np.array_equal(back.slow_scale, e.slow_scale) and back.summary()["slow_range"]
    plain = replace(e, slow_scale=None)  # without the range: format /3, its own id
    assert json.loads(plain.to_json())["format"] == FORMAT and plain.id != e.id
    assert "slow_range" not in plain.summary()

    def refused(edit: dict[str, Any], match: str) -> None:
        bad = json.loads(e.to_json())
        bad["model"].update(edit)
        (tmp_path / "C.json").write_text(json.dumps(bad))
        with pytest.raises(ConfigError, match=match):
            store.load("C")

    refused({"slow": {"alpha": SLOW_ALPHA, "scale": [0.1] * N_FEATURES}}, "slow range")
    refused({"slow": {"alpha": SLOW_ALPHA, "scale": [1.0] * 3}}, "scale")
    refused({"slow": {"alpha": 2.0, "scale": [1.0] * N_FEATURES}}, "alpha")
    refused({"slow": None}, "needs a slow range")


def test_the_clause_is_off_by_default_and_a_stop_by_it_says_so() -> None:
    assert Rule().slow == 0.0
    with pytest.raises(ConfigError, match="slow"):
        Rule(slow=0.5)
    rules = Rules.parse({"slow": SLOW_BAR})
    assert rules.default.slow == SLOW_BAR
    eng = RuleEngine(rules, ["C"])
    low = np.array([0.1], np.float32)
    assert eng.feed(low, 0.02, novel=np.array([True])) == []
    (d,) = eng.feed(low, 0.04, novel=np.array([True]))
    assert d.novel
    assert (
        d.rule.describe(d.instant, d.novel, slow=True)
        == f"default: score>=0.92 or slow>={SLOW_BAR:g}x own max in 2 of 3 windows"
    )
    assert "slow" not in d.rule.describe(d.instant, d.novel)


def test_the_slow_range_is_the_recordings_highest_average_past_its_start() -> None:
    rng = np.random.default_rng(3)
    feats = rng.normal(0, 1, (400, N_FEATURES)).astype(np.float32)
    feats[200:260, 5] += 3.0  # a second of a louder band in the middle
    mean, sd = np.zeros(N_FEATURES, np.float32), np.ones(N_FEATURES, np.float32)
    rec = SimpleNamespace(features=feats, segments=[(0, 150), (150, 400)])
    got = slow_range(rec, mean, sd)  # type: ignore[arg-type]
    settle = round(3 / SLOW_ALPHA)
    want = np.full(N_FEATURES, -np.inf)
    for a, b in rec.segments:
        m = np.zeros(N_FEATURES)
        for t in range(b - a):
            m += SLOW_ALPHA * (feats[a + t] - m)
            if t >= settle:
                want = np.maximum(want, m)
    assert got is not None
    np.testing.assert_allclose(got, np.maximum(want, SLOW_FLOOR), rtol=1e-4, atol=1e-5)
    assert got[5] > 2.0  # the louder second is in the station's range
    short = SimpleNamespace(features=feats[:50], segments=[(0, 50)])
    assert slow_range(short, mean, sd) is None  # type: ignore[arg-type]
    # replayed on its own recording, the station never reaches a bar over 1
    e = replace(_enrolment(), slow_scale=got)
    base = Baselines([e], slow=[1.0])
    for a, b in rec.segments:
        base.reset()
        for t in range(a, b):
            base.adjust(feats[t : t + 1], np.zeros(1, np.float32))
            assert t - a < settle or base.last_slow[0] <= 1.0 + 1e-5


def _outside_station(seed: int, index: int) -> Any:
    """Station ``index`` of ``outside.make_stations(.., seed, 30, 15)``, made alone (the
    draws of the stations before it are repeated, their audio is not made)."""
    from rtgate.apps.guard.outside import FAMILIES, draw_machine, make_station
    from rtgate.apps.guard.simulate import FAULTS

    rng = np.random.default_rng([seed, 2018])
    for i in range(index + 1):
        m = draw_machine(rng, FAMILIES[i % len(FAMILIES)])
        faulty = (i // len(FAMILIES)) % 2 == 1
        fault = FAULTS[int(rng.integers(3))] if faulty else None
        onset = 30.0 + float(rng.uniform(2.0, 12.0))
        level = float(rng.uniform(-22.0, -6.0))
    return make_station(m, 45.0, fault, onset, level)


def test_a_faint_fault_the_detector_does_not_hear_is_stopped_by_the_slow_clause() -> None:
    """Validation seed 1, station 6 (Session 13): a screw compressor at 66-76 Hz with a ball
    fault at -21.5 dB RMS from 40.56 s; enrolled on its first 30 s (stops accepted: the
    general detector stops this healthy machine), then the next 15 s run as a new run."""
    from rtgate.apps.guard.detector import Detector
    from rtgate.apps.guard.enrol import Source, fit, listen
    from rtgate.apps.guard.features import HOP, RATE
    from rtgate.apps.guard.pipeline import Guard

    st = _outside_station(1, 6)
    assert st.machine.family == "screw compressor" and st.fault == "ball"
    cut = 30 * RATE
    rec = listen([(Source("c", "file", RATE), iter([st.audio[:cut]]))], Detector(), 60.0)
    assert fit("C", rec, accept_stops=True, persist=False).enrolment.slow_scale is None  # /3
    fitted = fit("C", rec, accept_stops=True, slow=True, persist=False)
    e = fitted.enrolment
    assert e.slow_scale is not None and e.general["stops"] > 0  # what enroll would refuse
    assert json.loads(e.to_json())["format"] == FORMAT_SLOW
    scored = st.audio[cut : cut + 15 * RATE]
    onset = st.onset_s - 30.0

    def first_stop(rules: Rules) -> tuple[float, str] | None:
        guard = Guard(["C"], rules, enrolments=[e], clock=lambda: 0.0)  # a fake clock
        for t in range(len(scored) // HOP):
            stops = guard.process(scored[None, t * HOP : (t + 1) * HOP], (t + 1) * HOP / RATE)
            if stops:
                return stops[0].message.window_end_ts, stops[0].message.rule
        return None

    assert first_stop(Rules(Rule(persist=0))) is None  # the calibrated detector alone: missed
    got = first_stop(Rules(Rule(slow=SLOW_BAR)))
    assert got is not None
    at, rule = got
    assert onset <= at <= onset + 1.0 and "slow>=" in rule
