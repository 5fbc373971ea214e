from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rtgate.apps.guard.rules import Rule, RuleEngine, Rules
from rtgate.core.errors import ConfigError, InvalidRequest

TOML = """
threshold = 0.9
k = 2
n = 3
cooldown_s = 1.0
topic = "plant/{station}/stop"

[stations.C]
threshold = 0.5
k = 1
n = 1
topic = "line1/C/stop"
"""


def _feed(engine: RuleEngine, scores: list[float], t0: float = 0.0) -> list[float]:
    """Feed one station 20 ms windows; return the window-end times of the stops."""
    stops = []
    for i, s in enumerate(scores):
        ts = t0 + (i + 1) * 0.02
        stops += [d.window_end_ts for d in engine.feed([s], ts)]
    return stops


def test_k_of_n_needs_k_hits_within_n_windows() -> None:
    eng = RuleEngine(Rules(Rule(k=2, n=3, cooldown_s=10)), ["A"])
    # hit, miss, miss, hit: never 2 within 3 windows
    assert _feed(eng, [0.95, 0.1, 0.1, 0.95, 0.1, 0.1]) == []
    # hit, miss, hit: 2 of 3 -> stop on the third window
    assert _feed(eng, [0.95, 0.1, 0.95], t0=1.0) == [pytest.approx(1.06)]


def test_threshold_is_inclusive_and_defaults_to_092() -> None:
    eng = RuleEngine(Rules(), ["A"])
    assert Rules().default.threshold == 0.92
    assert _feed(eng, [0.92, 0.92]) == [pytest.approx(0.04)]
    eng2 = RuleEngine(Rules(), ["A"])
    assert _feed(eng2, [0.9199, 0.9199, 0.9199]) == []


def test_one_very_high_window_stops_at_once() -> None:
    eng = RuleEngine(Rules(), ["A"])
    assert Rules().default.instant == 0.995
    assert RuleEngine(Rules(), ["A"]).feed([0.994], 0.02) == []  # just under: k of n needed
    out = eng.feed([0.995], 0.02)
    assert [(d.instant, d.rule.describe(d.instant)) for d in out] == [
        (True, "default: score>=0.995 in 1 window")
    ]
    strict = RuleEngine(Rules(Rule(threshold=0.999, k=2, n=3)), ["A"])  # never below threshold
    assert _feed(strict, [0.998, 0.1]) == [] and Rule(threshold=0.999).instant_at == 0.999
    off = RuleEngine(Rules(Rule(instant=0)), ["A"])
    assert _feed(off, [0.999, 0.1, 0.1]) == []
    # k of n reached on the same window: reported as k of n
    eng2 = RuleEngine(Rules(), ["A"])
    assert [d.instant for d in eng2.feed([0.95], 0.02) + eng2.feed([0.999], 0.04)] == [False]


def test_cool_down_on_a_fake_clock() -> None:
    eng = RuleEngine(Rules(Rule(k=1, n=1, cooldown_s=0.5)), ["A"])
    times = [0.0, 0.1, 0.49, 0.5, 0.6, 1.2]
    fired = [bool(eng.feed([0.99], t)) for t in times]
    # fires at 0.0, blocked until 0.5, fires at 0.5, blocked at 0.6, fires at 1.2
    assert fired == [True, False, False, True, False, True]


def test_hits_are_forgotten_after_a_stop() -> None:
    eng = RuleEngine(Rules(Rule(k=2, n=3, cooldown_s=0.0)), ["A"])
    stops = _feed(eng, [0.99, 0.99, 0.99, 0.99])
    assert stops == [pytest.approx(0.04), pytest.approx(0.08)]


def test_stations_are_independent_and_vectorised() -> None:
    eng = RuleEngine(Rules(Rule(k=2, n=2)), ["A", "B", "C"])
    assert eng.feed(np.array([0.99, 0.1, 0.99]), 0.02) == []
    out = eng.feed(np.array([0.99, 0.99]), 0.04, rows=[0, 1])  # C has no window this tick
    assert [d.station for d in out] == ["A"]
    out = eng.feed(np.array([0.99]), 0.06, rows=[2])
    assert [(d.station, d.index) for d in out] == [("C", 2)]
    with pytest.raises(InvalidRequest):
        eng.feed([0.1, 0.2], 0.08)


def test_rules_file_with_per_station_overrides(tmp_path: Path) -> None:
    p = tmp_path / "rules.toml"
    p.write_text(TOML)
    rules = Rules.load(p)
    assert rules.default.threshold == 0.9 and rules.default.k == 2
    c = rules.for_station("C")
    assert (c.threshold, c.k, c.n, c.cooldown_s, c.name) == (0.5, 1, 1, 1.0, "C")
    assert c.topic_for("C") == "line1/C/stop"
    assert rules.for_station("D").topic_for("D") == "plant/D/stop"
    eng = RuleEngine(rules, ["C", "D"])
    out = eng.feed([0.6, 0.6], 0.02)
    assert [(d.station, d.topic, d.rule.describe()) for d in out] == [
        ("C", "line1/C/stop", "C: score>=0.5 in 1 of 1 windows")
    ]


@pytest.mark.parametrize(
    "text",
    [
        "threshold = 1.5",
        "instant = -0.1",
        "instant = 1.2",
        "k = 4\nn = 3",
        "n = 0",
        "cooldown_s = -1",
        'topic = "a/#"',
        "colour = 3",
        "[stations.C]\nspeed = 2",
        "stations = 3",
        "threshold = ",
    ],
)
def test_bad_rules_are_config_errors(tmp_path: Path, text: str) -> None:
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(ConfigError):
        Rules.load(p)


def test_missing_rules_file() -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        Rules.load("/nonexistent/rules.toml")


def test_an_enrolled_station_has_no_one_window_clause_unless_its_rule_says() -> None:
    # A has no enrolment, B has one: one window at 0.999 stops A at once, not B
    eng = RuleEngine(Rules(), ["A", "B"], [False, True])
    out = eng.feed(np.array([0.999, 0.999], np.float32), 0.02)
    assert [(d.station, d.instant) for d in out] == [("A", True)]
    # B still stops on k of n (2 of 3 over the threshold)
    assert [d.station for d in eng.feed(np.array([0.1, 0.95], np.float32), 0.04)] == ["B"]
    # a bar for enrolled stations: its decisions carry it and say so
    eng = RuleEngine(Rules(Rule(enrolled_instant=0.998)), ["A", "B"], [False, True])
    out = eng.feed(np.array([0.1, 0.999], np.float32), 0.02)
    assert [(d.station, d.instant, d.rule.describe(d.instant)) for d in out] == [
        ("B", True, "default: score>=0.998 in 1 window")
    ]
    # without the flags every station keeps `instant`, as before
    assert [d.station for d in RuleEngine(Rules(), ["A", "B"]).feed([0.1, 0.999], 0.02)] == ["B"]
    with pytest.raises(InvalidRequest):
        RuleEngine(Rules(), ["A", "B"], [True])
    assert Rules.parse({"enrolled_instant": 0.99}).default.enrolled_instant == 0.99
    with pytest.raises(ConfigError):
        Rules.parse({"enrolled_instant": 1.5})
