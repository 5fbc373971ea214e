"""The strong comb at a station's known bearing orders (``orders.py``, format /11): one
evaluation's comb, not held over four, ``strong`` over the highest one evaluation of the
healthy recording reached, on two evaluations in a row, is a hit. A loud defect at an order
then stops evaluations sooner than the held comb lets it; the healthy station stays under
the bar; the tops round-trip through an enrolment of format /11, a file of format /10
loads with the clause off, and bad files and rules are refused with a clear error."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace

import numpy as np
import numpy.typing as npt
import pytest

from rtgate.apps.guard.baseline import (
    FORMAT_ORDERS,
    FORMAT_STRONG,
    LINES_HEARING,
    Baselines,
    Enrolment,
)
from rtgate.apps.guard.features import HOP, N_FEATURES, WindowFeatures
from rtgate.apps.guard.lines import Lines, LinesProfile, lines_profile
from rtgate.apps.guard.orders import ORDERS_MARGIN, STRONG_MARGIN, BearingOrders
from rtgate.apps.guard.rules import Rule
from rtgate.core.errors import ConfigError, InvalidRequest
from tests.apps.guard.guard_helpers import station_sound

F32 = npt.NDArray[np.float32]
SHAFT = 23.3  # Hz
BEARING = BearingOrders((3.07, 4.93, 4.12), 21.0, 32.0)


def _envelopes(audio: F32) -> F32:
    _, env = WindowFeatures().envelopes(audio)
    return env


@pytest.fixture(scope="module")
def profile() -> LinesProfile:
    audio = station_sound(40.0, 1, shaft_hz=SHAFT)
    env = _envelopes(audio)
    p = lines_profile(env, [(0, len(env))], audio, BEARING)
    assert p is not None and p.orders is not None
    return p


def _older(profile: LinesProfile) -> LinesProfile:
    """``profile`` as an enrolment of format /10 had it: no strong comb's tops."""
    assert profile.orders is not None
    return replace(profile, orders=replace(profile.orders, single_top=None))


def _first_hot(profile: LinesProfile, audio: F32, strong: float) -> int | None:
    """The first window the orders alone (the every-rate comb off) make one station hot
    on, with the strong comb at ``strong`` (0: off); None: never."""
    env = _envelopes(audio)
    clause = Lines([profile], [0.0], orders_margins=[ORDERS_MARGIN], strong_margins=[strong])
    w = audio[: len(env) * HOP].reshape(len(env), HOP)
    for t in range(len(env)):
        if clause.step(env[t : t + 1], None, w[t : t + 1])[0]:
            return t
    return None


def test_the_single_evaluation_tops_are_over_the_held_ones(profile: LinesProfile) -> None:
    """A comb held over four evaluations is at most its least: per band, the top of one
    evaluation is at least the held one."""
    assert profile.orders is not None and profile.orders.single_top is not None
    assert (profile.orders.single_top >= profile.orders.top).all()
    assert (profile.orders.single_top > profile.orders.top).any()


def test_a_loud_defect_at_an_order_stops_sooner_with_the_strong_comb(
    profile: LinesProfile,
) -> None:
    """A defect 8 dB under the noise is hot evaluations before the held comb alone makes
    it; the healthy station never is."""
    loud = station_sound(20.0, 3, BEARING.orders[0] * SHAFT, -8.0, shaft_hz=SHAFT)
    held = _first_hot(profile, loud, 0.0)
    strong = _first_hot(profile, loud, STRONG_MARGIN)
    assert held is not None and strong is not None
    assert strong < held
    healthy = station_sound(20.0, 2, shaft_hz=SHAFT)
    assert _first_hot(profile, healthy, STRONG_MARGIN) is None


def test_a_format_10_profile_leaves_the_strong_comb_off(profile: LinesProfile) -> None:
    clause = Lines([_older(profile), profile], [0.5, 0.5], strong_margins=[1.0, 1.0])
    bars = clause._orders.strong_bar
    assert np.isinf(bars[0]).all()
    assert profile.orders is not None and profile.orders.single_top is not None
    assert bars[1] == pytest.approx(profile.orders.single_top + 1.0)
    with pytest.raises(InvalidRequest, match="strong combs' margins"):
        Lines([profile], [0.5], strong_margins=[1.0, 1.0])


def _enrolment(profile: LinesProfile, logit: Mapping[str, float] | None = None) -> Enrolment:
    return Enrolment(
        "C",
        np.zeros(N_FEATURES, np.float32),
        np.ones(N_FEATURES, np.float32),
        1.0,
        1.5,
        slow_scale=np.ones(N_FEATURES, np.float32),
        persist_scale=np.ones(N_FEATURES, np.float32),
        lines=profile,
        detector_logit=dict(logit or {}),
    )


def test_the_strong_tops_round_trip_through_format_11(profile: LinesProfile) -> None:
    e = _enrolment(profile)
    doc = json.loads(e.to_json())
    assert doc["format"] == FORMAT_STRONG
    back = Enrolment.from_json(e.to_json())
    assert back.lines is not None and back.lines.orders is not None
    single = back.lines.orders.single_top
    assert single is not None and profile.orders is not None
    assert np.array_equal(single, profile.orders.single_top)  # type: ignore[arg-type]
    assert back.id == e.id and back.summary()["strong_comb"] is True
    # a file of session 35 (/10) loads and keeps its id; the strong comb is off for it
    s35 = _enrolment(_older(profile))
    doc10 = json.loads(s35.to_json())
    assert doc10["format"] == FORMAT_ORDERS and s35.id != e.id
    old = Enrolment.from_json(json.dumps(doc10)).lines
    assert old is not None and old.orders is not None and old.orders.single_top is None
    assert s35.summary()["strong_comb"] is False
    with pytest.raises(ConfigError, match="without the strong comb's tops"):
        Enrolment.from_json(json.dumps({**doc10, "format": FORMAT_STRONG}))
    with pytest.raises(ConfigError, match="with the strong comb's tops"):
        Enrolment.from_json(json.dumps({**doc, "format": FORMAT_ORDERS}))
    lines = {k: v for k, v in doc["model"]["lines"].items() if k != "orders"}
    no_orders = {**doc, "model": {**doc["model"], "lines": lines}}
    with pytest.raises(ConfigError, match="without a bearing's orders"):
        Enrolment.from_json(json.dumps(no_orders))
    bad = json.loads(e.to_json())
    bad["model"]["lines"]["orders"]["single_top"] = [1.0]
    with pytest.raises(ConfigError, match="single evaluation's top"):
        Enrolment.from_json(json.dumps(bad))


def test_the_strong_margin_follows_the_orders(profile: LinesProfile) -> None:
    """Twice the margin where the detector hears, as the orders'; 0 where the orders are
    off or the file has no strong tops."""
    t = float(np.log(0.92 / 0.08))
    deaf = _enrolment(profile, {"max": t + 3.5, "p999": t + 3.0, "p99": t + 2.0, "p50": t})
    hearing = _enrolment(profile, {"max": t - 1.5, "p999": t - 2.0, "p99": t - 4.0, "p50": t - 7})
    ens = [deaf, hearing, _enrolment(_older(profile), deaf.detector_logit)]
    m = 0.75
    base = Baselines(ens, persist=[6.0] * 3, lines=[0.5] * 3, orders=[ORDERS_MARGIN] * 3,
                     strong=[m] * 3)  # fmt: skip
    assert base.deaf.tolist() == [True, False, True]
    assert base.strong_margin.tolist() == pytest.approx([m, m * LINES_HEARING, 0.0])
    off = Baselines(ens, persist=[6.0] * 3, lines=[0.5] * 3, orders=[0.0] * 3, strong=[m] * 3)
    assert off.strong_margin.tolist() == [0.0, 0.0, 0.0]
    assert base.lines is not None and np.isfinite(base.lines._orders.strong_bar[:2]).all()
    with pytest.raises(InvalidRequest, match="strong combs' margins"):
        Baselines(ens, strong=[m])


def test_the_rule_names_the_strong_comb_in_a_stop() -> None:
    text = Rule().describe(novel=True, orders=0.7, strong=2.0)
    assert "bearing's orders>=own max+0.7 or one evaluation's comb there>=own max+2 twice" in text
    assert "one evaluation" not in Rule(strong=0).describe(novel=True, orders=0.7, strong=2.0)
    assert "one evaluation" not in Rule().describe(novel=True, orders=0.7)
    assert "one evaluation" not in Rule().describe(novel=True, strong=2.0)  # no orders
    with pytest.raises(ConfigError, match="strong must be"):
        Rule(strong=-1)
    with pytest.raises(ConfigError, match="strong must be"):
        Rule(strong=21)
