"""The envelope's new lines (``lines.py``): a healthy station's own combs stay under its bar,
a faint defect it never had crosses it; the stations take turns; one evaluation over the bar
is not a hit; a comb must hold its rate (new voices nearby are not a defect); the mean over
5.12 s hears a defect too faint for one segment; the profile round-trips through an
enrolment of format /9 (/7 and /8, whose tops are for one evaluation, still load and decide
on one); a deaf station's detector makes no hit."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import pytest

from rtgate.apps.guard import lines as lines_module
from rtgate.apps.guard.baseline import (
    DEAF_GAP,
    FORMAT_HELD,
    FORMAT_LINES,
    FORMAT_MEAN,
    FORMAT_STEADY,
    LINES_HEARING,
    Baselines,
    Enrolment,
)
from rtgate.apps.guard.features import CREST_BANDS, HOP, N_FEATURES, N_SUB, RATE, WindowFeatures
from rtgate.apps.guard.lines import (
    AVERAGE,
    CONSECUTIVE,
    HEARD,
    HOLD,
    LINES_MARGIN,
    STEP,
    WINDOWS,
    Lines,
    LinesProfile,
    averaged,
    held,
    lines_profile,
    log_spectra,
    statistic,
)
from rtgate.core.errors import ConfigError, InvalidRequest
from tests.apps.guard.guard_helpers import station_sound as _machine

F32 = npt.NDArray[np.float32]


def _envelopes(audio: F32) -> F32:
    _, env = WindowFeatures().envelopes(audio)
    return env


@pytest.fixture(scope="module")
def healthy_profile() -> LinesProfile:
    env = _envelopes(_machine(30.0, seed=1))
    profile = lines_profile(env, [(0, len(env))])
    assert profile is not None
    return profile


def _hot_windows(profile: LinesProfile, audio: F32) -> list[int]:
    env = _envelopes(audio)
    lines = Lines([profile], [LINES_MARGIN])
    return [t for t in range(len(env)) if lines.step(env[t : t + 1])[0]]


def test_the_station_running_as_enrolled_never_reaches_its_bar(
    healthy_profile: LinesProfile,
) -> None:
    assert _hot_windows(healthy_profile, _machine(20.0, seed=2)) == []


def test_a_faint_defect_the_station_never_had_becomes_a_hit(healthy_profile: LinesProfile) -> None:
    # 8 dB under broadband noise as loud in every band (a fault in a resonance, on a
    # machine whose energy lies elsewhere, stands out more: the outside set, docs/guard.md)
    hot = _hot_windows(healthy_profile, _machine(20.0, seed=3, defect_hz=37.0, db=-8.0))
    assert hot, "a 37 Hz impact train at -8 dB must cross the bar"
    assert _hot_windows(healthy_profile, _machine(20.0, seed=3, defect_hz=37.0, db=-20.0)) == []
    # the first evaluations need WINDOWS windows of audio, then HOLD evaluations for the
    # comb to hold its rate, then CONSECUTIVE of those
    assert hot[0] >= WINDOWS - 1 + (HOLD - 1 + CONSECUTIVE - 1) * STEP


def test_a_comb_the_station_always_had_stays_under_its_bar(healthy_profile: LinesProfile) -> None:
    # the 53 Hz modulation is in the reference; the same machine louder changes nothing
    assert _hot_windows(healthy_profile, 2.0 * _machine(12.0, seed=4)) == []


def test_a_comb_counts_only_while_it_holds_its_rate() -> None:
    rates = len(lines_module._GRID.harmonics[0])
    steady = np.zeros((HOLD, len(CREST_BANDS), rates), np.float32)
    for j in range(HOLD):  # a drive's ramp: one rate further at each evaluation
        steady[j, 1, 50 + j] = 2.0
    jumping = np.zeros_like(steady)
    for j, r in enumerate([50, 80, 50, 120][:HOLD]):  # a voice: another pitch each time
        jumping[j, 1, r] = 2.0
    for acc, want in ((steady, 2.0), (jumping, 0.0)):
        newest, earlier = acc[-1], [acc[-1 - j] for j in range(1, HOLD)]
        assert float(held(newest[None], [e[None] for e in earlier])[0]) == pytest.approx(want)
        assert float(held(newest[None], [])[0]) == pytest.approx(2.0)  # one evaluation: both


def _talk(seconds: float, seed: int, voices: int) -> F32:
    """:func:`_machine` with people talking beside it, twice as loud (the outside set's
    babble: glottal pulses at moving pitches, in syllables)."""
    from rtgate.apps.guard.outside import _babble, _unit

    x = _machine(seconds, seed).astype(np.float64)
    talk = _unit(_babble(np.random.default_rng(voices), len(x)))
    out: F32 = (x + 2.0 * talk * x.std()).astype(np.float32)
    return out


def test_new_voices_are_not_new_lines_and_a_defect_among_them_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = _envelopes(_talk(30.0, seed=1, voices=100))
    profile = lines_profile(env, [(0, len(env))])
    monkeypatch.setattr(lines_module, "HOLD", 1)  # session 25's clause: one evaluation
    single = lines_profile(env, [(0, len(env))])
    monkeypatch.undo()
    assert profile is not None and single is not None and (profile.hold, single.hold) == (HOLD, 1)
    others = _talk(20.0, seed=2, voices=101)  # the next day, other people talking
    assert _hot_windows(single, others), "one evaluation takes their pitch for a defect"
    assert _hot_windows(profile, others) == []
    defect = _machine(20.0, seed=3, defect_hz=61.0, db=-12.0) - _machine(20.0, seed=3)
    assert _hot_windows(profile, _talk(20.0, seed=3, voices=105) + defect)


def _segment_only(p: LinesProfile) -> LinesProfile:
    return LinesProfile(p.reference, p.top, p.segments, hold=p.hold)


def _mean_only(p: LinesProfile) -> LinesProfile:
    assert p.mean_reference is not None
    never = np.full_like(p.reference, 1e6)  # no line is ever new to the segment's statistic
    return LinesProfile(
        never, 0.0, p.segments, p.mean_reference, p.mean_top, p.mean_segments, p.hold
    )


def test_the_mean_over_5_s_hears_a_defect_too_faint_for_one_segment(
    healthy_profile: LinesProfile,
) -> None:
    assert healthy_profile.mean_reference is not None
    assert healthy_profile.mean_segments == healthy_profile.segments - (HEARD - WINDOWS) // STEP
    faint = _machine(20.0, seed=3, defect_hz=61.0, db=-15.0)
    assert _hot_windows(_segment_only(healthy_profile), faint) == []
    by_mean = _hot_windows(_mean_only(healthy_profile), faint)
    assert by_mean, "a 61 Hz impact train at -15 dB must cross the mean's bar"
    assert by_mean[0] >= HEARD - 1 + (HOLD - 1 + CONSECUTIVE - 1) * STEP  # it needs 5.12 s
    assert _hot_windows(healthy_profile, faint)[0] == by_mean[0]  # either one makes the hit
    assert _hot_windows(_mean_only(healthy_profile), _machine(20.0, seed=2)) == []


def test_the_mean_is_of_segments_that_do_not_overlap() -> None:
    sp = np.random.default_rng(2).random((20, len(CREST_BANDS), 5)).astype(np.float32)
    got = averaged(sp)
    apart = WINDOWS // STEP
    assert len(got) == 20 - (AVERAGE - 1) * apart
    want = np.mean([sp[k * apart : k * apart + len(got)] for k in range(AVERAGE)], axis=0)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def _zero_profile() -> LinesProfile:
    bins = np.fft.rfftfreq(WINDOWS * N_SUB, 1 / (RATE / (HOP // N_SUB)))
    zeros = np.zeros((len(CREST_BANDS), len(bins)), np.float32)
    return LinesProfile(zeros, 0.0, 8, zeros, 0.0, 8)


def test_the_stations_take_turns() -> None:
    n = 3
    lines = Lines([_zero_profile()] * n, [0.01] * n)
    rng = np.random.default_rng(0)
    for heard in range(1, WINDOWS + 2 * STEP + 1):
        before = lines.last.copy()
        lines.step(rng.random((n, len(CREST_BANDS), N_SUB)).astype(np.float32) + 0.1)
        changed = set(np.flatnonzero(lines.last != before).tolist())
        due = {i for i in range(n) if heard >= WINDOWS and heard % STEP == i % STEP}
        assert changed == due, heard


def test_one_evaluation_over_the_bar_is_not_yet_a_hit() -> None:
    # noise over a reference of zeros has lines over any small bar
    lines = Lines([_zero_profile()], [0.01])
    env = np.random.default_rng(1).random((WINDOWS + STEP, len(CREST_BANDS), N_SUB)) + 0.1
    hot = [bool(lines.step(e[None].astype(np.float32))[0]) for e in env]
    assert CONSECUTIVE == 2
    assert not any(hot[: WINDOWS + STEP - 1])  # the first evaluation (window 64) alone
    assert hot[WINDOWS + STEP - 1]  # the second in a row (window 80)
    assert lines.last[0] > 0


def test_a_profile_needs_enough_audio_and_a_bad_record_is_refused(
    healthy_profile: LinesProfile,
) -> None:
    env = _envelopes(_machine(2.0, seed=5))
    assert lines_profile(env, [(0, len(env))]) is None  # < MIN_SEGMENTS segments
    with pytest.raises(InvalidRequest):
        lines_profile(env[:, :2], [(0, len(env))])
    rec = healthy_profile.record()
    back = LinesProfile.from_record(rec, "t")
    np.testing.assert_allclose(back.reference, healthy_profile.reference, atol=1e-3)
    assert back.top == pytest.approx(healthy_profile.top, abs=1e-4)
    with pytest.raises(ConfigError, match="enrol the station again"):
        LinesProfile.from_record({**rec, "windows": 32}, "t")
    with pytest.raises(ConfigError):
        LinesProfile.from_record({**rec, "reference": [[1.0]]}, "t")


def _enrolment(profile: LinesProfile | None, p99: float = -5.0, p999: float = -3.0) -> Enrolment:
    ones = np.ones(N_FEATURES, np.float32)
    return Enrolment(
        "s",
        np.zeros(N_FEATURES, np.float32),
        ones,
        1.0,
        1.5,
        detector_logit={"max": p999 + 0.5, "p999": p999, "p99": p99, "p50": p99 - 3},
        slow_scale=ones,
        persist_scale=ones,
        lines=profile,
    )


def test_an_enrolment_with_lines_is_format_9_and_round_trips(
    healthy_profile: LinesProfile,
) -> None:
    e = _enrolment(healthy_profile)
    doc = json.loads(e.to_json())
    assert doc["format"] == FORMAT_HELD and doc["model"]["lines"]["hold"] == HOLD
    back = Enrolment.from_json(e.to_json())
    assert back.lines is not None and back.lines.hold == HOLD
    assert back.summary()["envelope_lines"] is True
    assert back.id == Enrolment.from_json(back.to_json()).id
    older = _enrolment(None)
    assert json.loads(older.to_json())["format"] == FORMAT_STEADY
    assert Enrolment.from_json(older.to_json()).lines is None
    broken = {**doc, "model": {k: v for k, v in doc["model"].items() if k != "lines"}}
    with pytest.raises(ConfigError, match="needs envelope lines"):
        Enrolment.from_json(json.dumps(broken))
    with pytest.raises(ConfigError, match="with tops for a held comb in a file of format"):
        Enrolment.from_json(json.dumps({**doc, "format": FORMAT_MEAN}))

    # session 25's files (format /8) and session 24's (/7, no mean) load; their tops are
    # for one evaluation, and they decide on one
    def one(p: LinesProfile) -> LinesProfile:
        return LinesProfile(p.reference, p.top, p.segments, p.mean_reference, p.mean_top,
                            p.mean_segments)  # fmt: skip

    s25 = json.loads(_enrolment(one(healthy_profile)).to_json())
    assert s25["format"] == FORMAT_MEAN and "hold" not in s25["model"]["lines"]
    back8 = Enrolment.from_json(json.dumps(s25)).lines
    assert back8 is not None and back8.hold == 1 and back8.mean_reference is not None
    with pytest.raises(ConfigError, match="without tops for a held comb in a file of format"):
        Enrolment.from_json(json.dumps({**s25, "format": FORMAT_HELD}))
    old = json.loads(_enrolment(LinesProfile(*_head(healthy_profile))).to_json())
    assert old["format"] == FORMAT_LINES and "mean" not in old["model"]["lines"]
    back7 = Enrolment.from_json(json.dumps(old)).lines
    assert back7 is not None and back7.mean_reference is None and back7.hold == 1
    with pytest.raises(ConfigError, match="without a mean in a file of format"):
        Enrolment.from_json(json.dumps({**old, "format": FORMAT_MEAN}))
    other = {**doc["model"]["lines"], "mean": {**doc["model"]["lines"]["mean"], "average": 2}}
    with pytest.raises(ConfigError, match="enrol the station again"):
        LinesProfile.from_record(other, "t")
    with pytest.raises(ConfigError, match="enrol the station again"):
        LinesProfile.from_record({**doc["model"]["lines"], "hold": HOLD + 1}, "t")


def _head(p: LinesProfile) -> tuple[F32, float, int]:
    return p.reference, p.top, p.segments


def test_a_deaf_station_s_detector_makes_no_hit_a_hearing_one_s_does() -> None:
    t = float(np.log(0.92 / 0.08))
    deaf = _enrolment(_zero_profile(), p99=t + 2.0, p999=t + 3.0)
    hearing = _enrolment(_zero_profile(), p99=t - 4.0, p999=t - 2.0)
    base = Baselines([deaf, hearing], persist=[6.0, 6.0], lines=[LINES_MARGIN] * 2)
    assert base.deaf.tolist() == [True, False]
    # the mean over 5.12 s only where the detector is deaf (it also hears a lasting
    # difference between two healthy recordings, which the detector does not stop on)
    assert base.lines is not None
    assert np.isfinite(base.lines.mean_bar).tolist() == [True, False]
    # where the detector hears, the lines need LINES_HEARING times the margin
    assert base.lines_margin.tolist() == pytest.approx([LINES_MARGIN, LINES_MARGIN * LINES_HEARING])
    feats = np.zeros((2, N_FEATURES), np.float32)
    sure = np.array([0.9999, 0.9999], np.float32)
    for _ in range(5):
        seen = base.adjust(feats, sure, None, np.array([12.0, 12.0], np.float32))
    assert seen[0] < 0.92 and seen[1] >= 0.92
    # the deaf station's score is its own evidence: under its bars it ranks low, over them
    # it stays just under the threshold (the hits are the clauses' own)
    assert base.lines is not None
    base.lines.last[0] = -LINES_MARGIN  # one margin under the bar
    low = base.adjust(feats, sure, None, np.array([12.0, 12.0], np.float32))[0]
    base.lines.last[0] = 2 * LINES_MARGIN
    high = base.adjust(feats, sure, None, np.array([12.0, 12.0], np.float32))[0]
    assert low == pytest.approx(1 / (1 + np.exp(-(t - 4.0))), rel=1e-3)
    assert high == pytest.approx(1 / (1 + np.exp(-(t - DEAF_GAP))), rel=1e-4)
    assert high < 0.92


def _changes_at_two_ages(
    profile: LinesProfile, seed: int, windows: int
) -> Iterator[tuple[Lines, int, list[F32]]]:
    """17 stations of ``profile`` fed random envelopes for ``windows`` windows after station
    16 heard ``STEP`` windows alone: stations 0 and 16 share a turn, but their rings start at
    different places. Yields the tracker, the station and what it heard, oldest first, each
    time station 0's or 16's ``last`` changes."""
    n = 17
    lines = Lines([profile] * n, [0.01] * n)
    rng = np.random.default_rng(seed)
    fed: list[list[F32]] = [[] for _ in range(n)]
    for _ in range(STEP):
        e = rng.random((1, len(CREST_BANDS), N_SUB)).astype(np.float32) + 0.1
        lines.step(e, [16])
        fed[16].append(e[0])
    for _ in range(windows):
        e = rng.random((n, len(CREST_BANDS), N_SUB)).astype(np.float32) + 0.1
        before = lines.last.copy()
        lines.step(e)
        for i in range(n):
            fed[i].append(e[i])
        for i in (0, 16):
            if lines.last[i] != before[i]:
                yield lines, i, fed[i]


def _spectrum(heard: list[F32], end: int) -> F32:
    """``L`` of the segment of ``heard`` ending at ``end``."""
    seg = np.stack(heard[end - WINDOWS : end]).transpose(1, 0, 2)  # (bands, WINDOWS, N_SUB)
    out: F32 = log_spectra(seg.reshape(len(CREST_BANDS), -1)[None])[0]
    return out


def test_rings_of_different_ages_read_their_own_last_windows_in_order() -> None:
    # each statistic must be the one of the station's own last WINDOWS windows
    checked = 0
    for lines, i, heard in _changes_at_two_ages(_zero_profile(), 3, WINDOWS + STEP):
        spectrum = _spectrum(heard, len(heard))
        want = statistic(spectrum[None], np.zeros_like(spectrum))[0] - lines.bar[i]
        assert lines.last[i] == pytest.approx(want, rel=1e-5, abs=1e-6)
        checked += 1
    assert checked >= 3


def test_the_mean_reads_its_own_station_s_last_segments_that_do_not_overlap() -> None:
    # only the mean can reach the bar (the segment's reference is out of reach), so from
    # HEARD windows on ``last`` is the mean's over the station's own last AVERAGE segments
    bins = np.fft.rfftfreq(WINDOWS * N_SUB, 1 / (RATE / (HOP // N_SUB)))
    zeros = np.zeros((len(CREST_BANDS), len(bins)), np.float32)
    profile = LinesProfile(np.full_like(zeros, 1e6), 0.0, 8, zeros, 0.0, 8)
    checked = 0
    for lines, i, heard in _changes_at_two_ages(profile, 4, HEARD + 2 * STEP):
        if len(heard) < HEARD:  # no mean yet: the segment's statistic, under its bar
            assert lines.last[i] < 0
            continue
        spectra = [_spectrum(heard, len(heard) - k * WINDOWS) for k in range(AVERAGE)]
        want = statistic(np.mean(spectra, axis=0)[None], zeros)[0] - lines.mean_bar[i]
        assert lines.last[i] == pytest.approx(want, rel=1e-4, abs=1e-5)
        checked += 1
    assert checked >= 4
