"""The outside set: disjoint from training, fixed, and what its truth says it is."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from rtgate.apps.guard import outside
from rtgate.apps.guard.cli import app
from rtgate.apps.guard.outside import FAMILIES, PARTITION, make_station, make_stations
from rtgate.apps.guard.simulate import (
    BEARINGS,
    HELD_OUT,
    RATE,
    WIDE_FAMILIES,
    draw_motor,
    draw_wide,
    make_clip,
    make_set,
)

runner = CliRunner()


def _inside(x: float, bands: tuple[tuple[float, float], ...]) -> bool:
    return any(lo <= x <= hi for lo, hi in bands)


def test_no_training_range_meets_an_outside_range() -> None:
    for name, (train, out) in PARTITION.items():
        for lo_t, hi_t in train:
            for lo_o, hi_o in out:
                assert hi_o <= lo_t or lo_o >= hi_t, (name, (lo_t, hi_t), (lo_o, hi_o))
                if lo_o == hi_o or lo_t == hi_t:  # single values: never the same one
                    assert lo_o != lo_t, name


def test_the_training_simulator_draws_inside_its_side_of_the_partition() -> None:
    rng = np.random.default_rng(0)
    train = {k: v[0] for k, v in PARTITION.items()}
    motors = [draw_motor(rng, "train") for _ in range(150)] + [draw_wide(rng) for _ in range(150)]
    for m in motors:
        top = m.shaft_hz * (1 + max(m.ramp, 0.0))
        assert _inside(m.shaft_hz, train["shaft_hz"]) and _inside(top, train["shaft_hz"])
        assert _inside(m.line_hz, train["line_hz"])
        assert all(_inside(f, train["bearing_res_hz"]) for f in m.bearing_res_hz)
        assert _inside(m.damping, train["damping"])
        assert _inside(m.fan_blades, train["fan_blades"])
        assert _inside(m.rotor_slots, train["rotor_slots"])
        assert _inside(m.level_dbfs, train["level_dbfs"])
    assert {m.family for m in motors if m.family} == {
        f.name for f in WIDE_FAMILIES if f.name not in HELD_OUT
    }


def test_outside_machines_lie_outside_every_training_range() -> None:
    out = {k: v[1] for k, v in PARTITION.items()}
    trained = {b.name for bs in BEARINGS.values() for b in bs}
    trained |= {b.name for f in WIDE_FAMILIES for b in f.bearings}
    rng = np.random.default_rng(1)
    for fam in FAMILIES:
        for _ in range(30):
            m = outside.draw_machine(rng, fam)
            assert _inside(m.shaft_hz, out["shaft_hz"])
            assert _inside(m.shaft_hz * (1 + max(m.ramp, 0.0)), ((9.0, 17.6), (66.5, 98.8)))
            assert m.line_hz in (25.0, 400.0)
            assert all(_inside(f, out["bearing_res_hz"]) for f in m.res_hz)
            assert _inside(m.damping, out["damping"])
            assert _inside(m.fan_blades, out["fan_blades"])
            assert _inside(m.rotor_slots, out["rotor_slots"])
            assert _inside(m.level_dbfs, out["level_dbfs"])
            assert _inside(m.impacts_per_s, out["impacts_per_s"])
            assert m.bearing.name not in trained


def test_the_set_is_fixed_and_faults_start_part_way_at_their_level() -> None:
    a = make_stations(10, enrol_s=30.0, score_s=8.0)
    b = make_stations(10, enrol_s=30.0, score_s=8.0)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.audio, y.audio)
    faulty = [s for s in a if s.fault is not None]
    assert len(faulty) == 5 and {s.machine.family for s in a} == {f.name for f in FAMILIES}
    for s in faulty:
        assert s.onset_s is not None and 32.0 <= s.onset_s <= 35.0
        assert -22.0 <= s.fault_rms_db <= -6.0


def test_a_fault_is_as_loud_as_its_level_says() -> None:
    m = replace(outside.draw_machine(np.random.default_rng(3), FAMILIES[2]), level_dbfs=-45.0)
    healthy = make_station(m, 6.0, None, 2.0, -12.0).audio.astype(np.float64)
    faulty = make_station(m, 6.0, "outer", 2.0, -12.0).audio.astype(np.float64)
    np.testing.assert_array_equal(healthy[: int(1.9 * RATE)], faulty[: int(1.9 * RATE)])
    d = (faulty - healthy)[2 * RATE :]
    level = 20 * np.log10(np.std(d) / np.std(healthy))
    assert level == pytest.approx(-12.0, abs=0.5)


def test_wide_backgrounds_draw_from_their_own_generator() -> None:
    m = draw_wide(np.random.default_rng(5))
    loud = replace(m, backgrounds=("talk", "reciprocating compressor"), background_db=0.0)
    quiet = replace(m, backgrounds=())
    a, b = make_clip(loud, 2.0, impact_rate_hz=2.0), make_clip(quiet, 2.0, impact_rate_hz=2.0)
    assert a.impacts_s == b.impacts_s and a.hiss_s == b.hiss_s
    assert not np.allclose(a.audio, b.audio)


def test_held_out_families_are_drawn_only_when_asked() -> None:
    default = {c.motor.family for c in make_set(30, "wide", seconds=1.0)}
    held = {c.motor.family for c in make_set(10, "wide", seconds=1.0, families=HELD_OUT)}
    assert default.isdisjoint(HELD_OUT) and held == set(HELD_OUT)


@pytest.mark.slow
def test_evaluate_outside_reports_every_family_with_and_without_enrolment() -> None:
    from rtgate.apps.guard.evaluate_outside import evaluate_outside

    r = evaluate_outside(n_stations=10, enrol_s=30.0, score_s=6.0)
    for way in ("general", "enrolled", "enrolled_accepting_stops"):
        assert r[way]["stations"] == 10 and r[way]["faulty"] == 5
        fams = [r[way][f"family: {f.name}"] for f in FAMILIES]
        assert sum(f["stations"] for f in fams) == 10
        assert sum(f["misses"] for f in fams) == r[way]["misses"]
        assert sum(f["false_stops"] for f in fams) == r[way]["false_stops"]
    assert 0 <= r["refused_by_enroll"] <= 10
    on_healthy = r["general_detector_on_healthy"]
    assert set(on_healthy) >= {"all", *(f"family: {f.name}" for f in FAMILIES)}
    share = on_healthy["all"]["enrolment_share_over_threshold"]
    assert 0.0 <= share["p10"] <= share["p50"] <= share["p90"] <= 1.0
    assert 0 <= on_healthy["all"]["healthy_over_median_fault"] <= 5
    # station by station: the default's decision, and where each way decides otherwise
    detail = r["stations_detail"]
    default = r["enrolled_accepting_stops"]
    assert [d["station"] for d in detail] == list(range(10))
    faulty = [d for d in detail if d["fault"] is not None]
    assert len(faulty) == 5 and all(d["onset_s"] > 0 and d["fault_rms_db"] < 0 for d in faulty)
    missed = [d for d in faulty if d["onset_to_stop_ms"] is None]
    assert len(missed) == default["misses"]
    assert all(d["onset_to_stop_ms"] >= 0 for d in faulty if d not in missed)
    stopped = sum(1 for d in detail if d["stops_before_onset"] > 0)
    assert stopped == default["stations_with_false_stops"]
    assert sum(d["stops_before_onset"] for d in detail) == default["false_stops"]
    assert "vs_default" not in default
    for way in ("general", "enrolled_accepting_stops_no_persist"):
        v = r[way]["vs_default"]
        more, fewer = v["stopped_healthy_more"], v["stopped_healthy_fewer"]
        assert r[way]["stations_with_false_stops"] == stopped + len(more) - len(fewer)
        caught, lost = v["faults_caught_more"], v["faults_missed_more"]
        assert r[way]["misses"] == default["misses"] - len(caught) + len(lost)
        assert all(detail[i]["onset_to_stop_ms"] is None for i in caught)
        assert all(detail[i]["onset_to_stop_ms"] is not None for i in lost)


def test_the_rule_statistic_is_the_kth_highest_of_n_windows_in_logit() -> None:
    from rtgate.apps.guard.evaluate_outside import rule_logit

    p = np.array([[0.5, 0.9, 0.1, 0.99, 0.2]])
    got = rule_logit(p, k=2, n=3)
    want = np.log(np.array([0.5, 0.9, 0.2]) / (1 - np.array([0.5, 0.9, 0.2])))
    np.testing.assert_allclose(got[0], want, rtol=1e-9)
    assert rule_logit(p, k=1, n=1).shape == (1, 5)


def test_evaluate_refuses_unknown_sets_and_a_baseline_on_the_unseen_set() -> None:
    res = runner.invoke(app, ["evaluate", "--set", "nope"])
    assert res.exit_code == 2 and "unseen or outside" in res.output
    res = runner.invoke(app, ["evaluate", "--set", "unseen", "--baseline", "dcase2020"])
    assert res.exit_code == 2 and "--set outside" in res.output


def test_a_drive_running_up_brings_the_defect_impacts_closer() -> None:
    from rtgate.apps.guard.simulate import _fault

    m = replace(
        draw_wide(np.random.default_rng(2)),
        shaft_hz=10.0,
        ramp=1.0,
        bearing_res_hz=(4000.0,),
        damping=0.1,
    )
    t = np.arange(10 * RATE) / RATE
    x = np.abs(_fault(m, "outer", np.random.default_rng(0), t, 0.0))
    hits = np.flatnonzero((x[1:] > 0.3) & (x[:-1] <= 0.3)) / RATE
    hits = hits[np.diff(hits, prepend=-1.0) > 0.005]  # one per impact
    first, last = np.sum(hits < 2.0), np.sum(hits >= 8.0)
    rate = m.bearing.bpfo(10.0)
    assert first == pytest.approx(2 * rate, rel=0.1)
    assert last == pytest.approx(2 * 2 * rate, rel=0.1)


def _octaves(x: np.ndarray) -> np.ndarray:
    """The level of ``x`` in the octave bands from 62.5 Hz to 8 kHz (dB)."""
    spec = np.abs(np.fft.rfft(x.astype(np.float64))) ** 2
    f = np.fft.rfftfreq(len(x), 1 / RATE)
    edges = 62.5 * 2.0 ** np.arange(7)
    return np.array([10 * np.log10(spec[(f >= lo) & (f < 2 * lo)].sum() + 1e-20) for lo in edges])


def test_another_day_is_the_same_machine_with_new_noise() -> None:
    rng = np.random.default_rng(11)
    m = outside.draw_machine(rng, FAMILIES[1])
    stranger = outside.draw_machine(rng, FAMILIES[1])  # another machine of the family
    today = make_station(m, 4.0, None, 0.0, 0.0)
    again = make_station(m, 4.0, None, 0.0, 0.0)
    other_day = make_station(m, 4.0, None, 0.0, 0.0, day=1)
    np.testing.assert_array_equal(today.audio, again.audio)
    assert abs(np.corrcoef(today.audio, other_day.audio)[0, 1]) < 0.5  # new waveforms
    assert other_day.machine.shaft_hz == pytest.approx(m.shaft_hz, rel=outside.DAY_SPEED)
    assert abs(other_day.machine.level_dbfs - m.level_dbfs) <= outside.DAY_LEVEL_DB
    assert other_day.machine.backgrounds == m.backgrounds
    # its sound is the machine's: nearer to the same machine's day 0 than another machine's
    ref = _octaves(today.audio)
    near = np.abs(_octaves(other_day.audio) - ref).mean()
    far = np.abs(_octaves(make_station(stranger, 4.0, None, 0.0, 0.0).audio) - ref).mean()
    assert near < far / 2


def test_enrolment_on_another_day_keeps_the_scored_part() -> None:
    from rtgate.apps.guard.evaluate_outside import enrolled_on_day

    station = make_stations(2, enrol_s=30.0, score_s=6.0)[1]
    cut = 30 * RATE
    moved = enrolled_on_day(station, 1, cut)
    assert len(moved.audio) == len(station.audio) and moved.fault == station.fault
    np.testing.assert_array_equal(moved.audio[cut:], station.audio[cut:])
    assert not np.allclose(moved.audio[:cut], station.audio[:cut])


def test_an_installation_keeps_its_tones_on_another_day_its_noise_new() -> None:
    n = 2 * RATE

    def peak(x: np.ndarray) -> float:  # the strongest tone under 1 kHz (the lobe pass)
        spec = np.abs(np.fft.rfft(x))
        f = np.fft.rfftfreq(n, 1 / RATE)
        low = (f > 20) & (f < 1000)
        return float(f[low][np.argmax(spec[low])])

    today = outside._compressor(np.random.default_rng(5), n)
    other = outside._compressor(np.random.default_rng(5), n, np.random.default_rng(9))
    assert peak(today) == peak(other) and not np.allclose(today, other)
    belt = outside._conveyor(np.random.default_rng(5), n)
    assert not np.allclose(
        belt, outside._conveyor(np.random.default_rng(5), n, np.random.default_rng(9))
    )
