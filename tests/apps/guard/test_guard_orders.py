"""A station's known bearing orders (``orders.py``): the comb at order x the speed read from
the sound catches a faint defect at an order, follows the shaft when it runs faster, stays
quiet on the healthy station and on a defect at rates its bearing cannot strike at (deaf,
not noisy); the orders round-trip through an enrolment of format /10; bad orders, ranges and
calls are refused with a clear error.

The strong comb (format /11): one evaluation's comb at the orders, not held over four,
``strong`` over the highest one evaluation of the healthy recording reached, on two
evaluations in a row, is a hit. A loud defect at an order then stops evaluations sooner than
the held comb lets it; the healthy station stays under the bar; the tops round-trip through
format /11, a file of format /10 loads with the clause off, and bad files and rules are
refused with a clear error."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import numpy.typing as npt
import pytest

from rtgate.apps.guard.baseline import (
    FORMAT_HELD,
    FORMAT_ORDERS,
    FORMAT_STRONG,
    LINES_HEARING,
    Baselines,
    Enrolment,
)
from rtgate.apps.guard.features import CREST_BANDS, HOP, N_FEATURES, N_SUB, WindowFeatures
from rtgate.apps.guard.lines import WINDOWS, Lines, LinesProfile, lines_profile
from rtgate.apps.guard.orders import (
    BACKSTOP,
    HARMONICS,
    ORDERS_MARGIN,
    SEGMENT,
    STRONG_MARGIN,
    BearingOrders,
    OrdersProfile,
    known_combs,
)
from rtgate.apps.guard.rules import Rule
from rtgate.core.errors import ConfigError, InvalidRequest
from tests.apps.guard.guard_helpers import station_sound

F32 = npt.NDArray[np.float32]
SHAFT = 23.3  # Hz
BEARING = BearingOrders((3.07, 4.93, 4.12), 21.0, 32.0)


def _machine(
    seconds: float, seed: int, fr: float = SHAFT, defect_hz: float | None = None, db: float = -8.0
) -> F32:
    """A station (``station_sound``) whose shaft turns at ``fr`` Hz."""
    return station_sound(seconds, seed, defect_hz, db, shaft_hz=fr)


def _envelopes(audio: F32) -> F32:
    _, env = WindowFeatures().envelopes(audio)
    return env


@pytest.fixture(scope="module")
def profile() -> LinesProfile:
    audio = _machine(40.0, seed=1)
    env = _envelopes(audio)
    p = lines_profile(env, [(0, len(env))], audio, BEARING)
    assert p is not None and p.orders is not None
    return p


def _hot(profile: LinesProfile, audio: F32, lines: float, orders: float) -> tuple[list[int], Lines]:
    env = _envelopes(audio)
    clause = Lines([profile], [lines], orders_margins=[orders])
    w = audio[: len(env) * HOP].reshape(len(env), HOP)
    hot = [t for t in range(len(env)) if clause.step(env[t : t + 1], None, w[t : t + 1])[0]]
    return hot, clause


def test_the_healthy_station_stays_under_both_bars(profile: LinesProfile) -> None:
    hot, clause = _hot(profile, _machine(20.0, seed=2), 0.5, ORDERS_MARGIN)
    assert hot == []
    assert clause.speed[0] == pytest.approx(SHAFT, rel=0.01)  # the speed it read


def test_a_faint_defect_at_an_order_is_a_hit(profile: LinesProfile) -> None:
    """14 dB under the noise, the comb at the known order alone (the every-rate clause off)
    crosses its bar; 20 dB under, nothing does."""
    rate = BEARING.orders[0] * SHAFT
    known, clause = _hot(
        profile, _machine(20.0, seed=3, defect_hz=rate, db=-14.0), 0.0, ORDERS_MARGIN
    )
    assert known and clause.last[0] > 0
    assert known[0] >= WINDOWS - 1  # not before a whole segment was heard
    faint, _ = _hot(profile, _machine(20.0, seed=3, defect_hz=rate, db=-20.0), 0.0, ORDERS_MARGIN)
    assert faint == []


def test_the_comb_follows_the_shaft_read_from_the_sound(profile: LinesProfile) -> None:
    fast = SHAFT * 1.08  # inside the range given, 8 % over the enrolled speed
    audio = _machine(20.0, seed=4, fr=fast, defect_hz=BEARING.orders[1] * fast, db=-14.0)
    hot, clause = _hot(profile, audio, 0.0, ORDERS_MARGIN)
    assert clause.speed[0] == pytest.approx(fast, rel=0.01)
    assert hot
    healthy, _ = _hot(profile, _machine(20.0, seed=4, fr=fast), 0.0, ORDERS_MARGIN)
    assert healthy == []


def test_a_defect_the_bearing_cannot_strike_at_leaves_the_orders_deaf(
    profile: LinesProfile,
) -> None:
    """A wrong bearing given: the orders hear nothing, the every-rate clause still does."""
    # 51.3 Hz: none of its harmonics within 4 % of an order's first three
    audio = _machine(20.0, seed=5, defect_hz=51.3, db=-8.0)
    known, _ = _hot(profile, audio, 0.0, ORDERS_MARGIN)
    every, _ = _hot(profile, audio, 0.5, 0.0)
    assert known == []
    assert every


def test_known_combs_reads_the_harmonics_that_fit() -> None:
    bins = 1025
    new = np.zeros((2, len(CREST_BANDS), bins), np.float32)
    df = 1600.0 / 2048
    k = round(3.0 * 25.0 / df)
    for h in range(1, HARMONICS + 1):
        new[0, 1, k * h] = 1.5
    high = 700.0  # only the first harmonic is under the spectrum's end
    kh = round(high / df)
    new[1, 2, kh] = 2.0
    got = known_combs(new, [25.0, high / 5.0], [(3.0,), (5.0,)])
    assert got[0, 1] == pytest.approx(1.5)
    assert got[0, 0] == 0.0
    # a harmonic past the spectrum's end counts as no line: one line alone is a weak comb
    assert got[1, 2] == pytest.approx(2.0 / HARMONICS)


def _enrolment(profile: LinesProfile, logit: dict[str, float] | None = None) -> Enrolment:
    return Enrolment(
        "C",
        np.zeros(N_FEATURES, np.float32),
        np.ones(N_FEATURES, np.float32),
        1.0,
        1.5,
        slow_scale=np.ones(N_FEATURES, np.float32),
        persist_scale=np.ones(N_FEATURES, np.float32),
        lines=profile,
        detector_logit=logit or {},
    )


def test_the_orders_round_trip_through_an_enrolment(profile: LinesProfile) -> None:
    # session 35's file: no strong comb's tops (format /11 adds them, below)
    profile = _older(profile)
    e = _enrolment(profile)
    text = e.to_json()
    doc = json.loads(text)
    assert doc["format"] == FORMAT_ORDERS
    back = Enrolment.from_json(text)
    assert back.lines is not None and back.lines.orders is not None
    assert back.lines.orders.bearing == BEARING
    assert np.array_equal(back.lines.orders.top, profile.orders.top)  # type: ignore[union-attr]
    assert back.id == e.id
    assert back.summary()["bearing_orders"]["orders"] == list(BEARING.orders)
    plain = replace(e, lines=replace(profile, orders=None))
    assert plain.id != e.id and json.loads(plain.to_json())["format"] == FORMAT_HELD
    doc["format"] = FORMAT_HELD  # orders in a /9 file
    with pytest.raises(ConfigError, match="orders"):
        Enrolment.from_json(json.dumps(doc))
    doc["format"] = FORMAT_ORDERS
    doc["model"]["lines"]["orders"]["tol"] = 0.05
    with pytest.raises(ConfigError, match="enrol the station again"):
        Enrolment.from_json(json.dumps(doc))


def test_where_the_orders_watch_every_rate_is_a_backstop(profile: LinesProfile) -> None:
    t = float(np.log(0.92 / 0.08))
    deaf = _enrolment(profile, {"max": t + 3.5, "p999": t + 3.0, "p99": t + 2.0, "p50": t})
    hearing = _enrolment(profile, {"max": t - 1.5, "p999": t - 2.0, "p99": t - 4.0, "p50": t - 7})
    ens = [deaf, hearing]
    watched = Baselines(ens, persist=[6.0] * 2, lines=[0.5] * 2, orders=[ORDERS_MARGIN] * 2)
    off = Baselines(ens, persist=[6.0] * 2, lines=[0.5] * 2, orders=[0.0] * 2)
    assert watched.deaf.tolist() == [True, False]
    # as the every-rate lines': twice the margin where the detector hears
    assert watched.orders_margin.tolist() == pytest.approx([ORDERS_MARGIN, 2 * ORDERS_MARGIN])
    assert off.orders_margin.tolist() == [0.0, 0.0] and (off.lines_margin > 0).all()
    assert watched.lines_margin == pytest.approx(BACKSTOP * off.lines_margin)
    assert watched.lines is not None and off.lines is not None
    assert watched.lines.known.all() and not off.lines.known.any()
    # the orders' mean, as the every-rate one, only where the detector is deaf
    assert watched.lines._orders.meaned.tolist() == [True, False]


def test_a_station_with_orders_needs_its_audio(profile: LinesProfile) -> None:
    clause = Lines([profile], [0.5])
    env = np.zeros((1, len(CREST_BANDS), N_SUB), np.float32)
    with pytest.raises(InvalidRequest, match="audio"):
        clause.step(env)
    with pytest.raises(InvalidRequest, match="audio must be"):
        clause.step(env, None, np.zeros((1, 10), np.float32))
    off = Lines([profile], [0.5], orders_margins=[0.0])  # the orders off: no audio needed
    assert not off.step(env)[0]
    base = Baselines([None, None], lines=[0.5, 0.5], orders=[ORDERS_MARGIN] * 2)
    assert not base.lines_clause and (base.orders_margin == 0).all()
    assert WINDOWS * HOP == 20480  # the ring holds the segment the speed is read from


@pytest.mark.parametrize(
    ("orders", "shaft", "match"),
    [
        ("3.1,x", "20-30", "must be a number"),
        ("3.1", "30", "LOW-HIGH"),
        ("3.1", "30-20", "shaft range"),
        ("0,3.1", "20-30", "orders > 0"),
        ("30", "40-80", "strikes at"),  # 1,200 Hz and up: past the envelope's spectrum
        ("0.05", "20-30", "strikes at"),  # a rate of 1 Hz: no comb over 1.28 s
        (",".join(["3"] * 9), "20-30", "1 to 8"),
    ],
)
def test_bad_orders_are_refused(orders: str, shaft: str, match: str) -> None:
    with pytest.raises(InvalidRequest, match=match):
        BearingOrders.parse(orders, shaft)


def test_a_drive_s_range_and_a_catalogue_s_orders() -> None:
    from rtgate.apps.guard.simulate import FAULTS, Bearing

    b = Bearing("6205", 9, 7.94, 39.04)
    assert b.orders() == tuple(b.defect_hz(f, 1.0) for f in FAULTS)
    got = BearingOrders.around(b.orders(), 30.0)
    assert (got.shaft_lo, got.shaft_hi) == pytest.approx((27.0, 42.0))
    fast = BearingOrders.around((2.0,), 100.0)  # 140 Hz is past what the speed is read to
    assert fast.shaft_hi == pytest.approx(700.0 / 6)
    assert SEGMENT == WINDOWS * N_SUB  # the comb's bins are the lines' segment's


def test_parse_reads_a_catalogue_line() -> None:
    b = BearingOrders.parse("BPFO=3.58, BPFI=5.42, 2BSF=4.70", " 24 - 34 ")
    assert b == BearingOrders((3.58, 5.42, 4.70), 24.0, 34.0)
    top = np.zeros(len(CREST_BANDS), np.float32)
    p = OrdersProfile(b, top)
    back = OrdersProfile.from_record(p.record(), len(CREST_BANDS), "f")
    assert back.bearing == b and np.array_equal(back.top, top) and back.mean_top is None
    with pytest.raises(ConfigError, match="top"):
        OrdersProfile.from_record({**p.record(), "top": [1.0]}, len(CREST_BANDS), "f")


def test_the_rule_names_the_orders_in_a_stop() -> None:
    assert "bearing's orders>=own max+0.35" in Rule().describe(novel=True, orders=True)
    assert "bearing's orders" not in Rule(orders=0).describe(novel=True, orders=True)
    # the margins a station applies, when given: twice the rule's where its detector hears,
    # the lines a backstop where the orders watch
    text = Rule().describe(novel=True, lines=3.0, orders=0.7)
    assert "envelope lines>=own max+3 or" in text and "orders>=own max+0.7 in" in text
    assert "envelope lines" not in Rule().describe(novel=True, lines=0.0, orders=0.7)
    with pytest.raises(ConfigError, match="orders must be"):
        Rule(orders=-1)


def _older(profile: LinesProfile) -> LinesProfile:
    """``profile`` as an enrolment of format /10 had it: no strong comb's tops."""
    assert profile.orders is not None
    return replace(profile, orders=replace(profile.orders, single_top=None))


def _first_strong(profile: LinesProfile, audio: F32, strong: float) -> int | None:
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
    loud = _machine(20.0, seed=3, defect_hz=BEARING.orders[0] * SHAFT, db=-8.0)
    held = _first_strong(profile, loud, 0.0)
    strong = _first_strong(profile, loud, STRONG_MARGIN)
    assert held is not None and strong is not None
    assert strong < held
    healthy = _machine(20.0, seed=2)
    assert _first_strong(profile, healthy, STRONG_MARGIN) is None


def test_a_format_10_profile_leaves_the_strong_comb_off(profile: LinesProfile) -> None:
    clause = Lines([_older(profile), profile], [0.5, 0.5], strong_margins=[1.0, 1.0])
    bars = clause._orders.strong_bar
    assert np.isinf(bars[0]).all()
    assert profile.orders is not None and profile.orders.single_top is not None
    assert bars[1] == pytest.approx(profile.orders.single_top + 1.0)
    with pytest.raises(InvalidRequest, match="strong combs' margins"):
        Lines([profile], [0.5], strong_margins=[1.0, 1.0])


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
    ens = [deaf, hearing, _enrolment(_older(profile), dict(deaf.detector_logit))]
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
