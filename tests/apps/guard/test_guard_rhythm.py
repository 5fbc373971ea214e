"""The envelope's rhythm: a train of impacts has it, noise, one knock and a sine-modulated
band have less; streamed per station it equals the whole-ring formula; an enrolment keeps
its healthy range and the rules count a window past it as a hit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from rtgate.apps.guard.baseline import (
    FORMAT,
    RHYTHM_FLOOR,
    RHYTHM_MARGIN,
    Baselines,
    Enrolment,
    EnrolmentStore,
)
from rtgate.apps.guard.enrol import Recording, Source, rhythm_range
from rtgate.apps.guard.events import StopEvent
from rtgate.apps.guard.features import CREST_BANDS, HOP, N_FEATURES, N_SUB, RATE, WindowFeatures
from rtgate.apps.guard.pipeline import Guard
from rtgate.apps.guard.rhythm import WINDOWS, Rhythm, comb_statistic
from rtgate.apps.guard.rules import Rule, Rules
from rtgate.core.errors import ConfigError, InvalidRequest
from tests.apps.guard.guard_helpers import PinnedScore, RecordingSink

F64 = npt.NDArray[np.float64]
N = WINDOWS * HOP


def _band_noise(rng: np.random.Generator, lo: float, hi: float, n: int = N) -> F64:
    spec = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1 / RATE)
    spec[(f < lo) | (f > hi)] = 0
    x = np.fft.irfft(spec, n)
    out: F64 = x / x.std()
    return out


def _impacts(rate_hz: float, n: int = N, f_res: float = 4200.0) -> F64:
    """Impacts at ``rate_hz`` ringing a resonance of ``f_res`` (damping 0.05)."""
    x = np.zeros(n)
    x[(np.arange(0, n / RATE, 1 / rate_hz) * RATE).astype(np.int64)] = 1.0
    t = np.arange(160) / RATE
    h = np.exp(-2 * np.pi * 0.05 * f_res * t) * np.sin(2 * np.pi * f_res * t)
    y = np.convolve(x, h)[:n]
    out: F64 = y / y.std()
    return out


def _stat(x: F64) -> float:
    _, env = WindowFeatures().envelopes((0.05 * x).astype(np.float32))
    return float(comb_statistic(env.transpose(1, 0, 2).reshape(len(CREST_BANDS), -1)))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_train_of_impacts_has_a_rhythm_that_noise_a_knock_and_a_sine_lack(seed: int) -> None:
    rng = np.random.default_rng(seed)
    noise = _band_noise(rng, 200, 7900)
    t = np.arange(N) / RATE
    am = _band_noise(rng, 3000, 5000) * (1 + 0.8 * np.sin(2 * np.pi * 120 * t)) + 0.3 * noise
    trains = [_stat(noise + _impacts(rate)) for rate in (70.0, 120.0, 330.0)]
    assert min(trains) > 3.5
    assert _stat(noise) < 3.0
    assert _stat(noise + 3 * _impacts(5.0)) < 3.0  # one knock in 200 ms
    assert _stat(am) < trains[1] - 1.0  # the same rate as a sine: one line, no harmonics


def test_the_stream_gives_the_formula_on_the_last_windows_and_zero_until_full() -> None:
    rng = np.random.default_rng(5)
    n_st, steps = 3, WINDOWS + 6
    env = rng.exponential(1.0, (steps, n_st, len(CREST_BANDS), N_SUB)).astype(np.float32)
    rh = Rhythm(n_st)
    for t in range(steps):
        got = rh.step(env[t])
        if t < WINDOWS - 1:
            assert not got.any()
            continue
        last = env[t - WINDOWS + 1 : t + 1].transpose(1, 2, 0, 3).reshape(n_st, 3, -1)
        np.testing.assert_allclose(got, comb_statistic(last), rtol=1e-5)
    rh.reset(1)
    assert rh.step(env[0])[1] == 0.0 and rh.step(env[0])[0] != 0.0


def test_a_subset_of_stations_gives_what_the_whole_batch_gives() -> None:
    rng = np.random.default_rng(6)
    env = rng.exponential(1.0, (WINDOWS + 2, 4, len(CREST_BANDS), N_SUB)).astype(np.float32)
    whole, part = Rhythm(4), Rhythm(4)
    for t in range(len(env)):
        a = whole.step(env[t])
        b = part.step(env[t][[2, 0]], rows=[2, 0])
        part.step(env[t][[1, 3]], rows=[1, 3])
        np.testing.assert_array_equal(b, a[[2, 0]])
    np.testing.assert_array_equal(part.last, whole.last)
    with pytest.raises(InvalidRequest):
        whole.step(env[0][:2])


def _enrolment(station: str, rhythm: dict[str, float] | None = None) -> Enrolment:
    mean = np.zeros(N_FEATURES, np.float32)
    sd = np.ones(N_FEATURES, np.float32)
    return Enrolment(station, mean, sd, 2.0, 1.0, created="now", rhythm=rhythm or {})


def test_the_threshold_is_the_station_s_own_highest_plus_the_margin_never_under_the_floor() -> None:
    stations = [
        _enrolment("A", {"max": 4.2}),  # 4.2 + 0.5
        _enrolment("B", {"max": 1.0}),  # the floor
        _enrolment("C"),  # no rhythm measured: the clause is off
        None,
        _enrolment("E", {"max": 4.0}),  # its rule turns the clause off
    ]
    base = Baselines(stations, rhythm=[0.5, 0.5, 0.5, 0.5, 0.0])
    np.testing.assert_allclose(
        base.rhythm_threshold, [4.7, RHYTHM_FLOOR, np.inf, np.inf, np.inf], rtol=1e-6
    )
    assert base.rhythm_clause
    stat = np.array([4.8, 3.6, 99.0, 99.0, 99.0], np.float32)
    assert base.rhythmic(stat).tolist() == [True, True, False, False, False]
    assert base.rhythmic(stat[[1, 0]], rows=[1, 0]).tolist() == [True, True]
    assert not Baselines([_enrolment("A", {"max": 4.2})]).rhythm_clause  # no margins given
    assert Rules.parse({"rhythm": 1.5}).default.rhythm == 1.5
    with pytest.raises(ConfigError, match="rhythm"):
        Rules.parse({"rhythm": -1})
    assert Rule().rhythm == 0.0  # off unless a rules file asks
    rule = Rule(rhythm=RHYTHM_MARGIN)
    assert rule.describe(novel=True, rhythm=True) == (
        "default: score>=0.92 or rhythm>=own max+0.5 in 2 of 3 windows"
    )
    assert rule.describe(novel=True) == "default: score>=0.92 in 2 of 3 windows"


def test_the_range_skips_each_source_s_first_windows() -> None:
    n = 2 * WINDOWS + 1
    r = np.zeros(n, np.float32)
    r[: WINDOWS - 1] = 50.0  # what a stream never reports (its ring is filling): ignored
    r[WINDOWS - 1 : WINDOWS + 3] = np.array([2.0, 3.0, 2.5, 2.2])
    rec = Recording(
        np.zeros((n, N_FEATURES), np.float32),
        np.zeros(n, np.float32),
        [(0, WINDOWS + 3), (WINDOWS + 3, n)],  # the second is too short for a full ring
        [Source("a", "file", RATE), Source("b", "file", RATE)],
        0.1,
        r,
    )
    got = rhythm_range(rec)
    assert got["max"] == 3.0 and got["windows"] == 4.0 and got["p50"] == pytest.approx(2.35)
    assert rhythm_range(Recording(rec.features, rec.scores, [(0, n)], [], 0.1)) == {}


def test_files_keep_the_range_and_old_ones_load_without_it(tmp_path: Path) -> None:
    store = EnrolmentStore(tmp_path)
    e = _enrolment("C", {"max": 3.9, "p999": 3.5, "p50": 2.0, "windows": 1500.0})
    store.save(e)
    back = store.load("C")
    assert back is not None and back.rhythm_max == 3.9 and back.id == e.id
    assert json.loads((tmp_path / "C.json").read_text())["format"] == FORMAT
    assert back.summary()["rhythm_max"] == 3.9

    old = json.loads(_enrolment("D").to_json())
    old["format"] = "rtgate-guard-enrolment/1"
    del old["model"]["rhythm"]
    (tmp_path / "D.json").write_text(json.dumps(old))
    d = store.load("D")
    assert d is not None and d.rhythm_max is None and d.id == _enrolment("D").id
    assert not Baselines([d], rhythm=[0.5]).rhythm_clause

    old["format"] = "rtgate-guard-enrolment/99"  # a later version's file
    (tmp_path / "D.json").write_text(json.dumps(old))
    with pytest.raises(ConfigError, match="enrol the station again"):
        store.load("D")
    bad = json.loads(e.to_json())
    bad["model"]["rhythm"] = {"p50": 1.0}
    (tmp_path / "C.json").write_text(json.dumps(bad))
    with pytest.raises(ConfigError, match="rhythm"):
        store.load("C")


def test_the_guard_stops_an_enrolled_station_on_a_rhythm_it_never_had() -> None:
    rng = np.random.default_rng(11)
    seconds = 1.0
    n = int(seconds * RATE)
    noise = (0.02 * _band_noise(rng, 200, 7900, n)).astype(np.float32)
    train = (noise + 0.02 * _impacts(120.0, n)).astype(np.float32)
    enrolled = _enrolment("A", {"max": 3.0})
    sink = RecordingSink()
    stations = ["A", "B", "C"]  # B: no enrolment; C: its rule turns the clause off
    rules = Rules(Rule(rhythm=RHYTHM_MARGIN), {"C": Rule(name="C")})
    guard = Guard(
        stations,
        rules,
        sink,
        detector=PinnedScore(3, 0.0),
        enrolments=[enrolled, None, _enrolment("C", {"max": 3.0})],
    )
    assert guard.rhythm is not None
    for t in range(n // HOP):  # healthy, then the same noise with a train of impacts
        w = noise[t * HOP : (t + 1) * HOP]
        assert guard.process(np.stack([w, w, w]), (t + 1) * HOP / RATE) == []
    stops: list[StopEvent] = []
    for t in range(n // HOP):
        w = train[t * HOP : (t + 1) * HOP]
        stops += guard.process(np.stack([w, w, w]), seconds + (t + 1) * HOP / RATE)
    assert [s.message.station for s in stops] == ["A"]
    assert "rhythm>=own max+0.5" in stops[0].message.rule
    assert stops[0].message.window_end_ts - seconds <= 0.3  # the ring fills in 0.2 s
    assert guard.rhythm_s > 0.0

    plain = Guard(["A"], Rules(), detector=PinnedScore(1, 0.0), enrolments=[enrolled])
    assert plain.rhythm is None  # the clause is off by default: nothing computed
    old = Guard(["A"], rules, detector=PinnedScore(1, 0.0), enrolments=[_enrolment("A")])
    assert old.rhythm is None  # no station measured its rhythm: nothing computed


def test_the_envelope_comes_out_without_changing_a_feature() -> None:
    rng = np.random.default_rng(3)
    x = (0.05 * rng.standard_normal((5, HOP))).astype(np.float32)
    wf = WindowFeatures()
    env = np.zeros((5, len(CREST_BANDS), N_SUB), np.float32)
    np.testing.assert_array_equal(wf(x, env), wf(x))
    crest = wf(x)[:, -2 * len(CREST_BANDS) : -len(CREST_BANDS)]
    np.testing.assert_allclose(np.log(env.max(-1) / env.mean(-1)), crest, rtol=1e-4, atol=1e-4)
    with pytest.raises(InvalidRequest):
        wf(x, env[:2])
    feats, whole = wf.envelopes(x.reshape(-1))
    np.testing.assert_array_equal(whole, env)
    assert feats.shape == (5, N_FEATURES)
