from __future__ import annotations

import numpy as np
import pytest

from rtgate.apps.guard.diagnose import diagnose
from rtgate.apps.guard.simulate import (
    BEARINGS,
    RATE,
    SPEEDS,
    Bearing,
    draw_motor,
    make_clip,
    make_set,
)
from rtgate.core.errors import InvalidRequest


def test_defect_frequencies_of_a_6205_match_the_handbook() -> None:
    b = Bearing("6205", 9, 7.94, 39.04)  # the Case Western drive-end bearing
    fr = 29.95  # 1797 rpm
    assert b.bpfo(fr) / fr == pytest.approx(3.585, abs=0.005)
    assert b.bpfi(fr) / fr == pytest.approx(5.415, abs=0.005)
    assert b.bsf(fr) / fr == pytest.approx(2.357, abs=0.005)
    assert b.ftf(fr) / fr == pytest.approx(0.398, abs=0.002)


def test_clips_are_reproducible_and_seeds_differ() -> None:
    a = make_set(3, "train", seed=5, seconds=1.0)
    b = make_set(3, "train", seed=5, seconds=1.0)
    c = make_set(3, "train", seed=6, seconds=1.0)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.audio, y.audio)
        assert x.motor == y.motor and x.onset_s == y.onset_s
    assert not np.array_equal(a[0].audio, c[0].audio)


def test_populations_share_no_bearing_and_no_speed() -> None:
    names = {p: {b.name for b in BEARINGS[p]} for p in ("train", "unseen")}
    assert not names["train"] & names["unseen"]
    rng = np.random.default_rng(0)
    for _ in range(50):
        m = draw_motor(rng, "unseen")
        assert any(lo <= m.shaft_hz <= hi for lo, hi in SPEEDS["unseen"])
        assert not any(lo <= m.shaft_hz <= hi for lo, hi in SPEEDS["train"])


def test_training_speeds_enclose_the_unseen_ones() -> None:
    lo = min(b[0] for b in SPEEDS["train"])
    hi = max(b[1] for b in SPEEDS["train"])
    assert all(lo <= a and b <= hi for a, b in SPEEDS["unseen"])


def test_a_clip_reports_its_air_hiss() -> None:
    clips = make_set(12, "train", seed=3, seconds=3.0, fault_share=0.0)
    with_hiss = [c for c in clips if c.hiss_s is not None]
    assert with_hiss and len(with_hiss) < len(clips)
    for c in with_hiss:
        assert c.hiss_s is not None
        start, end = c.hiss_s
        assert 0 <= start < end <= 3.0
    # the hiss is high-band noise: the 3-8 kHz energy is higher while it is on
    c = max(with_hiss, key=lambda c: c.hiss_s[1] - c.hiss_s[0] if c.hiss_s else 0.0)
    assert c.hiss_s is not None
    frames = c.audio[: len(c.audio) // 320 * 320].reshape(-1, 320)
    spec = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    high = spec[:, 60:].sum(1)
    mid = (np.arange(len(frames)) + 0.5) * 0.02
    on = (mid > c.hiss_s[0] + 0.05) & (mid < c.hiss_s[1] - 0.05)
    assert on.any() and (~on).any()
    assert np.median(high[on]) > 2 * np.median(high[~on])


def test_labels_follow_the_onset() -> None:
    m = draw_motor(np.random.default_rng(1))
    clip = make_clip(m, 1.0, fault="ball", onset_s=0.5)
    y = clip.labels()
    assert len(y) == 50 and y[:25].sum() == 0 and y[25:].all()
    assert -1.0 <= clip.audio.min() and clip.audio.max() <= 1.0
    assert make_clip(m, 1.0).labels().sum() == 0


def test_a_fault_knows_its_rms_over_everything_else() -> None:
    m = draw_motor(np.random.default_rng(2), "unseen")
    bad = make_clip(m, 2.0, fault="outer", onset_s=0.5, severity_db=10.0, impact_rate_hz=0.0)
    twin = make_clip(m, 2.0, onset_s=0.5, severity_db=10.0, impact_rate_hz=0.0)
    assert twin.fault_rms_db is None and bad.fault_rms_db is not None
    a = RATE // 2
    rest = twin.audio[a:].astype(np.float64)
    defect = bad.audio[a:].astype(np.float64) - rest
    measured = 10 * np.log10(np.mean(defect**2) / np.mean(rest**2))
    assert bad.fault_rms_db == pytest.approx(measured, abs=0.2)
    louder = make_clip(m, 2.0, fault="outer", onset_s=0.5, severity_db=16.0, impact_rate_hz=0.0)
    assert louder.fault_rms_db == pytest.approx(bad.fault_rms_db + 6.0, abs=0.05)


@pytest.mark.parametrize("fault", ["outer", "inner", "ball"])
def test_envelope_analysis_finds_the_simulated_defect(fault: str) -> None:
    m = draw_motor(np.random.default_rng(3), "unseen")
    clip = make_clip(m, 1.5, fault=fault, onset_s=0.0, severity_db=12.0, impact_rate_hz=0.0)  # type: ignore[arg-type]
    d = diagnose(clip.audio[RATE // 4 :], m.shaft_hz, m.bearing)
    assert d.kind == fault
    expected = {"outer": m.bearing.bpfo, "inner": m.bearing.bpfi}.get(fault)
    if expected is not None:
        assert d.impact_hz == pytest.approx(expected(m.shaft_hz), rel=0.04)
    assert d.prominence > 4


def test_envelope_without_geometry_still_gives_the_rate() -> None:
    m = draw_motor(np.random.default_rng(4), "unseen")
    clip = make_clip(m, 1.5, fault="outer", onset_s=0.0, severity_db=12.0, impact_rate_hz=0.0)
    d = diagnose(clip.audio, m.shaft_hz)
    assert d.impact_hz == pytest.approx(m.bearing.bpfo(m.shaft_hz), rel=0.04)
    assert d.order == pytest.approx(d.impact_hz / m.shaft_hz, rel=0.01)
    assert "Hz" in d.facts()


def test_bad_simulation_requests() -> None:
    m = draw_motor(np.random.default_rng(1))
    with pytest.raises(InvalidRequest):
        make_clip(m, 1.0, fault="cage")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        make_clip(m, 1.0, fault="outer", onset_s=2.0)
    with pytest.raises(InvalidRequest):
        draw_motor(np.random.default_rng(1), "mars")  # type: ignore[arg-type]
