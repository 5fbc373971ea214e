"""The per-station baselines: bounded, batched like the detector, stored as readable JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from rtgate.apps.guard.baseline import (
    BOOST,
    SHIFT_MAX,
    Baselines,
    Enrolment,
    EnrolmentStore,
)
from rtgate.apps.guard.features import HOP, N_FEATURES
from rtgate.apps.guard.pipeline import Guard
from rtgate.apps.guard.rules import Rule, RuleEngine, Rules
from rtgate.core.errors import ConfigError, InvalidRequest


def _enrolment(station: str, rng: np.random.Generator, shift: float = SHIFT_MAX) -> Enrolment:
    mean = rng.normal(0, 2, N_FEATURES).astype(np.float32)
    sd = rng.uniform(0.05, 2, N_FEATURES).astype(np.float32)
    return Enrolment(station, mean, sd, float(rng.uniform(1, 4)), shift, created="now")


def _logit(p: np.ndarray) -> np.ndarray:
    q = p.astype(np.float64)
    out: np.ndarray = np.log(q) - np.log1p(-q)
    return out


def test_an_enrolment_moves_a_score_by_a_bounded_amount_and_never_a_saturated_one() -> None:
    rng = np.random.default_rng(0)
    n = 64
    base = Baselines([_enrolment(f"s{i}", rng) for i in range(n)])
    for t in range(200):
        feats = rng.normal(0, 3, (n, N_FEATURES)).astype(np.float32) * (t % 7)
        p = rng.uniform(1e-4, 1 - 1e-4, n).astype(np.float32)
        p[:4] = [0.0, 1.0, 0.9999, 0.92]
        q = base.adjust(feats, p)
        assert q[0] == 0.0 and q[1] == 1.0  # a saturated score is never moved
        delta = _logit(q[2:]) - _logit(p[2:])
        assert np.all(delta >= -SHIFT_MAX - 1e-3) and np.all(delta <= BOOST + 1e-3)
    # the bound, as a score: what the default rule's k-of-n clause still stops on
    edge = 1 / (1 + math.exp(-(math.log(0.92 / 0.08) + SHIFT_MAX)))
    assert 0.98 < edge < 0.982


def test_a_station_without_enrolment_keeps_its_score_bit_for_bit() -> None:
    rng = np.random.default_rng(1)
    base = Baselines([None, _enrolment("B", rng), None])
    p = rng.uniform(0, 1, 3).astype(np.float32)
    q = base.adjust(rng.normal(0, 1, (3, N_FEATURES)).astype(np.float32), p.copy())
    assert q[0] == p[0] and q[2] == p[2] and q[1] != p[1]
    none, two = Baselines([None, None]), p[:2]
    assert not none.any and none.adjust(np.zeros((2, N_FEATURES), np.float32), two) is two


def test_a_subset_of_stations_gives_what_the_whole_batch_gives() -> None:
    rng = np.random.default_rng(2)
    ens = [_enrolment("A", rng), None, _enrolment("C", rng), _enrolment("D", rng)]
    whole, parts = Baselines(ens), Baselines(ens)
    for _ in range(50):
        f = rng.normal(0, 2, (4, N_FEATURES)).astype(np.float32)
        p = rng.uniform(0, 1, 4).astype(np.float32)
        a = whole.adjust(f, p)
        b = np.concatenate(
            [parts.adjust(f[[0, 2]], p[[0, 2]], [0, 2]), parts.adjust(f[[1, 3]], p[[1, 3]], [1, 3])]
        )
        np.testing.assert_allclose(a[[0, 2, 1, 3]], b, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(whole.last_novelty, parts.last_novelty, rtol=1e-5)


def test_a_window_like_the_stations_normal_needs_a_surer_detector() -> None:
    rng = np.random.default_rng(3)
    e = _enrolment("A", rng)
    base = Baselines([e])
    normal = e.mean[None, :]
    q = base.adjust(normal, np.array([0.95], np.float32))  # no novelty: the full shift
    assert abs(_logit(q)[0] - (_logit(np.array([0.95]))[0] - SHIFT_MAX)) < 1e-3
    odd = normal + 50 * e.sd[None, :]  # far from anything it did while enrolling
    for _ in range(30):
        q = base.adjust(odd, np.array([0.9], np.float32))
    assert (
        base.last_novelty[0] > 5 and abs(_logit(q)[0] - (_logit(np.array([0.9]))[0] + BOOST)) < 1e-3
    )
    base.reset()
    q = base.adjust(normal, np.array([0.95], np.float32))
    assert base.last_novelty[0] == 0.0


def test_the_file_round_trips_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    e = _enrolment("line1/C", rng)
    store = EnrolmentStore(tmp_path)
    path = store.save(e)
    assert path.name == "line1%2FC.json" and path.parent == tmp_path
    back = store.load("line1/C")
    assert back is not None and back.id == e.id and np.array_equal(back.mean, e.mean)
    assert store.load("D") is None
    assert EnrolmentStore(tmp_path).path("..").name == "%2E..json"

    doc = json.loads(path.read_text())
    doc["model"]["shift"] = 9.0  # an edited file cannot silence the detector
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="shift"):
        store.load("line1/C")
    (tmp_path / "D.json").write_text(e.to_json())
    with pytest.raises(ConfigError, match="not 'D'"):
        store.load("D")
    (tmp_path / "E.json").write_text("{nope")
    with pytest.raises(ConfigError, match="not JSON"):
        store.load("E")
    with pytest.raises(InvalidRequest):
        store.path("")


def test_novelty_hits_count_toward_k_of_n_and_say_so() -> None:
    rules = Rules.parse({"novelty": 3.0})
    assert rules.default.novelty == 3.0
    with pytest.raises(ConfigError, match="novelty"):
        Rules.parse({"novelty": 0.5})
    eng = RuleEngine(rules, ["A", "B"])
    low = np.array([0.1, 0.95], np.float32)
    assert eng.feed(low, 0.02, novel=np.array([True, True])) == []
    (a, b) = eng.feed(low, 0.04, novel=np.array([True, True]))
    assert a.novel and not b.novel  # B had 2 of 3 by its score alone
    assert (
        a.rule.describe(a.instant, a.novel)
        == "default: score>=0.92 or novelty>=3 in 2 of 3 windows"
    )
    assert Rule().describe() == "default: score>=0.92 in 2 of 3 windows"


def test_the_guard_uses_the_enrolments_and_its_warm_up_leaves_no_novelty() -> None:
    rng = np.random.default_rng(5)
    e = _enrolment("B", rng)
    guard = Guard(["A", "B"], Rules(Rule(novelty=2.0)), enrolments=[None, e])
    assert guard.baselines.novelty_clause and np.all(guard.baselines._m == 0)
    w = np.zeros((2, HOP), np.float32)
    guard.process(w, 0.02)
    assert guard.last_scores[0] == guard.last_detector_scores[0]
    with pytest.raises(InvalidRequest):
        Guard(["A", "B"], enrolments=[e])
